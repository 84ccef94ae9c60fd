//! The Lambda boundary: failing a whole invocation is reserved for infrastructure and event
//! shape problems, each with a stable `error_type` alarms and runbooks can match.

use lambda_runtime::Diagnostic;

/// Why a whole invocation failed.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The function is misconfigured (caught at cold start; reported if reached at invoke).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The event is not the shape this function takes.
    #[error("event is not a valid {expected} event: {detail}")]
    BadEvent {
        /// The expected event type.
        expected: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A dependency failed for the whole invocation.
    #[error("infrastructure failure: {what}")]
    Infrastructure {
        /// Which dependency.
        what: &'static str,
        /// Why.
        #[source]
        source: punctual_core::ports::BoxError,
    },
}

impl HandlerError {
    /// The stable `error_type`.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Config(_) => "punctual.Config",
            Self::BadEvent { .. } => "punctual.BadEvent",
            Self::Infrastructure { .. } => "punctual.Infrastructure",
        }
    }
}

impl From<HandlerError> for Diagnostic {
    fn from(e: HandlerError) -> Self {
        Diagnostic { error_type: e.error_type().to_owned(), error_message: e.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_whole_invocation_failure_has_a_stable_error_type() {
        let bad = HandlerError::BadEvent { expected: "SQS", detail: "missing Records".into() };
        let d: Diagnostic = bad.into();
        assert_eq!(d.error_type, "punctual.BadEvent");
        assert_eq!(d.error_message, "event is not a valid SQS event: missing Records");
        let cfg: Diagnostic = HandlerError::from(crate::config::ConfigError::Missing("DLQ_URL")).into();
        assert_eq!(
            (cfg.error_type.as_str(), cfg.error_message.as_str()),
            ("punctual.Config", "environment variable DLQ_URL is required")
        );
    }
}
