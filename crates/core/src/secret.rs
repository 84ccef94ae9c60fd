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
