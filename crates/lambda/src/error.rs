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
