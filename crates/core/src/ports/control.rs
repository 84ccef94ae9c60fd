//! The control port: the operator pause switch and the redrive audit records.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{BoxError, Certainty};
use crate::redrive::AuditRecord;

/// The pause switch (`punctual pause` / `resume`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    /// Why.
    pub reason: String,
    /// Who.
    pub owner: String,
    /// Since when.
    pub since: DateTime<Utc>,
}

/// The control store failed as machinery.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The store answered with an error: nothing changed.
    #[error("control store request refused")]
    Refused(#[source] BoxError),
    /// Anything else (timeout, connection lost): a write may have taken effect.
    #[error("control store request failed")]
    Unknown(#[source] BoxError),
}

impl ControlError {
    /// A refused request changed nothing; an unknown one may have.
    pub fn certainty(&self) -> Certainty {
        match self {
            Self::Refused(_) => Certainty::Determinate,
            Self::Unknown(_) => Certainty::Indeterminate,
        }
    }
}

/// Where the pause switch and the audit records live.
pub trait Control: Send + Sync {
    /// The pause in force, if any.
    fn pause(&self) -> impl Future<Output = Result<Option<Pause>, ControlError>> + Send;
    /// Sets (Some) or lifts (None) the pause, and records who did it.
    fn set_pause(&self, pause: Option<&Pause>, by: &str) -> impl Future<Output = Result<(), ControlError>> + Send;
    /// Sets `pause` only if no pause is in force (one conditional write), and records it; when
    /// one is, changes nothing and returns it. Neither the sender's own pause nor an operator's
    /// ever replaces the other: a replaced owner would change what the pause means (and which
    /// alarm it pages), and lifting it is an operator's decision.
    fn pause_unless_paused(
        &self,
        pause: &Pause,
        by: &str,
    ) -> impl Future<Output = Result<Option<Pause>, ControlError>> + Send;
    /// Writes (or overwrites) an audit record.
    fn put_audit(&self, record: &AuditRecord) -> impl Future<Output = Result<(), ControlError>> + Send;
}
