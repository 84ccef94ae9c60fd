//! Reading configuration from the environment, with errors that name the variable.

use std::str::FromStr;
use std::time::Duration;

/// A configuration problem, naming the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is unset or empty.
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    /// A variable does not parse.
    #[error("environment variable {name}={value:?} is invalid: expected {expected}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
}

/// Reads variables from a source (the process environment, or a map in tests).
pub struct Env<F: Fn(&str) -> Option<String>> {
    get: F,
}

/// The process environment.
pub fn process_env() -> Env<impl Fn(&str) -> Option<String>> {
    Env { get: |k: &str| std::env::var(k).ok() }
}

impl<F: Fn(&str) -> Option<String>> Env<F> {
    /// An environment backed by `get`.
    pub fn new(get: F) -> Self {
        Self { get }
    }

    fn raw(&self, name: &str) -> Option<String> {
        (self.get)(name).filter(|v| !v.trim().is_empty())
    }

    /// A required string.
    pub fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.raw(name).ok_or(ConfigError::Missing(name))
    }

    /// An optional string.
    pub fn optional(&self, name: &'static str) -> Option<String> {
        self.raw(name)
    }

    /// A parsed value with a default; `check` rejects values out of range.
    pub fn parse<T: FromStr>(
        &self,
        name: &'static str,
        default: T,
        expected: &'static str,
        check: impl Fn(&T) -> bool,
    ) -> Result<T, ConfigError> {
        let Some(value) = self.raw(name) else { return Ok(default) };
        match value.trim().parse::<T>() {
            Ok(v) if check(&v) => Ok(v),
            _ => Err(ConfigError::Invalid { name, value, expected }),
        }
    }

    /// A duration in milliseconds with a default, within `[min, max]`.
    pub fn millis(
        &self,
        name: &'static str,
        default: Duration,
        min: Duration,
        max: Duration,
        expected: &'static str,
    ) -> Result<Duration, ConfigError> {
        let ms = self.parse::<u64>(name, u64::try_from(default.as_millis()).unwrap_or(u64::MAX), expected, |v| {
            (min..=max).contains(&Duration::from_millis(*v))
        })?;
        Ok(Duration::from_millis(ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Env<impl Fn(&str) -> Option<String>> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Env::new(move |k: &str| map.get(k).cloned())
    }

    #[test]
    fn errors_name_the_variable_and_what_was_expected() {
        let e = env(&[("RATE", "fast"), ("EMPTY", " ")]);
        assert_eq!(e.required("QUEUE_URL"), Err(ConfigError::Missing("QUEUE_URL")));
        assert_eq!(e.required("EMPTY"), Err(ConfigError::Missing("EMPTY")));
        let err = e.parse::<f64>("RATE", 1.0, "a number of calls per second > 0", |v| *v > 0.0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable RATE=\"fast\" is invalid: expected a number of calls per second > 0"
        );
        assert_eq!(e.parse::<u32>("UNSET", 7, "x", |_| true), Ok(7));
        let ms = env(&[("T", "50")]).millis(
            "T",
            Duration::from_secs(1),
            Duration::from_millis(100),
            Duration::from_secs(5),
            "100..5000",
        );
        assert!(matches!(ms, Err(ConfigError::Invalid { name: "T", .. })));
    }
}
