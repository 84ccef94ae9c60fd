//! `punctual-ops`: the operator commands as a library — `import`, `status`, `explain`,
//! `pause`, `resume`, `redrive`, `reconcile` (in process through the redrive function's own composition
//! root and handler, or through the Lambda Invoke API). No harness, no fakes: what an operator
//! runs against a deployed stack is exactly this.
//!
//! Every command finds its [`target::Target`] the same way: flags, then the environment (the
//! names the functions read), then the state a running `punctual local up` left behind.

pub mod commands;
pub mod dlq;
pub mod import;
pub mod reconcile;
pub mod target;

pub use commands::{explain, pause, redrive, redrive_function, render_summary, resume, status, status_with};
pub use target::{LocalState, Resources, Target};

/// An operator command failed.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// Where to act is unknown.
    #[error(
        "no target: set SEND_QUEUE_URL, DLQ_URL, LEDGER_TABLE and RENEWALS_TABLE (and AWS_ENDPOINT_URL or --endpoint for an emulator), or run `punctual local up` first"
    )]
    NoTarget,
    /// The request is invalid.
    #[error("refused, nothing was moved:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
    /// Delivery is paused: redrive refuses to start.
    #[error("refused, nothing was moved: {0}")]
    Paused(String),
    /// Not found.
    #[error("{0}")]
    NotFound(String),
    /// A step failed.
    #[error("{what}")]
    Step {
        /// What.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Wraps a failure of `what`.
pub(crate) fn step<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    what: &'static str,
) -> impl FnOnce(E) -> OpsError {
    move |e| OpsError::Step { what, source: e.into() }
}
