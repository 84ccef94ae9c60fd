//! A secret string (the provider token) that never prints.

use std::fmt;

/// A secret value. `Debug` and `Display` print `[redacted]`, so a secret inside a struct that
/// gets logged or formatted into an error cannot leak.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Where a fresh provider token comes from when the provider refuses the one in use (401/403):
/// the secret store after a rotation. The client asks rarely (at most once per instance per
/// interval), so an implementation may simply read the store.
pub trait TokenSource: Send + Sync + fmt::Debug {
    /// Reads the current token.
    fn fetch(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Secret, crate::ports::BoxError>> + Send + '_>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints() {
        let s = Secret::new("tok_live_123");
        assert_eq!(format!("{s} {s:?} {:?}", Some(&s)), "[redacted] [redacted] Some([redacted])");
        assert_eq!(s.expose(), "tok_live_123");
    }
}
