//! The queue ports: what the sender does to the send queue and the DLQ besides acknowledging
//! ([`SendQueue`]), what the scheduler releases ([`ReleaseQueue`]), and the DLQ as the redrive
//! sees it ([`DeadLetters`]).

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{BoxError, Certainty};
use crate::contract::ReminderMessage;
use crate::ids::ReminderId;
use crate::lanes::{LaneDepths, QueueLane};
use crate::reason::ReasonCode;

/// Failure metadata sent with a quarantined message as DLQ message attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantine<'a> {
    /// The original body, unchanged (so a redrive re-sends exactly what was received).
    pub body: &'a str,
    /// Why.
    pub reason: ReasonCode,
    /// Human-readable detail (never message content or secrets).
    pub detail: &'a str,
    /// Provider attempts made.
    pub attempts: u32,
    /// Last provider status.
    pub provider_status: Option<u16>,
    /// The reminder, when the body decoded.
    pub reminder_id: Option<&'a ReminderId>,
    /// `first_enqueued`, when the body decoded.
    pub first_enqueued: Option<DateTime<Utc>>,
    /// The send queue's message id.
    pub original_message_id: &'a str,
    /// When it was quarantined.
    pub at: DateTime<Utc>,
}

/// A queue operation failed as machinery.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Anything else.
    #[error("queue request failed")]
    Unknown(#[source] BoxError),
}

impl QueueError {
    /// A send whose answer was lost may have been enqueued.
    pub fn certainty(&self) -> Certainty {
        Certainty::Indeterminate
    }
}

/// What the sender does to queues besides acknowledging.
pub trait SendQueue: Send + Sync {
    /// Puts a copy of `msg` back on `lane`, visible after `delay` (capped at SQS's 15 minutes;
    /// a longer wait hops). A fresh message keeps `ApproximateReceiveCount` a crash counter
    /// only (docs/design.md#what-it-does-with-each-message).
    fn requeue(
        &self,
        msg: &ReminderMessage,
        delay: Duration,
        lane: QueueLane,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
    /// Sends a message to the DLQ with its failure metadata.
    fn dead_letter(&self, q: &Quarantine<'_>) -> impl Future<Output = Result<(), QueueError>> + Send;
}

/// One message the scheduler releases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The message.
    pub message: ReminderMessage,
    /// Its `DelaySeconds` (≤ 15 min).
    pub delay: Duration,
    /// Its lane.
    pub lane: QueueLane,
}

/// Where released messages go.
pub trait ReleaseQueue: Send + Sync {
    /// Sends each message to its lane with its delay; returns per message whether it was
    /// accepted. A refused entry stays pending and is retried next tick.
    fn release(&self, batch: &[Release]) -> impl Future<Output = Result<Vec<bool>, QueueError>> + Send;
    /// Messages already on each lane (visible + in flight + delayed), for the backlog.
    fn depth(&self) -> impl Future<Output = Result<LaneDepths, QueueError>> + Send;
}

/// The DLQ failed as machinery.
#[derive(Debug, thiserror::Error)]
pub enum DeadLettersError {
    /// The queue service answered with an error: nothing changed.
    #[error("DLQ request refused")]
    Refused(#[source] BoxError),
    /// Anything else (timeout, connection lost): it may have taken effect.
    #[error("DLQ request failed")]
    Unknown(#[source] BoxError),
}

impl DeadLettersError {
    /// A refused request changed nothing; an unknown one may have.
    pub fn certainty(&self) -> Certainty {
        match self {
            Self::Refused(_) => Certainty::Determinate,
            Self::Unknown(_) => Certainty::Indeterminate,
        }
    }
}

/// One message received from the DLQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Receipt handle (delete / release).
    pub handle: String,
    /// The DLQ's message id.
    pub message_id: String,
    /// The body as quarantined.
    pub body: String,
    /// The `reason` attribute.
    pub reason: Option<String>,
    /// The `first_enqueued` attribute.
    pub first_enqueued: Option<DateTime<Utc>>,
}

/// The DLQ as the redrive sees it.
pub trait DeadLetters: Send + Sync {
    /// Receives up to 10; each stays invisible for `hold` (the run's remaining time and a
    /// little more) unless deleted or released first: a run killed mid-way leaves nothing
    /// invisible much past its own deadline.
    fn receive(&self, hold: Duration) -> impl Future<Output = Result<Vec<DeadLetter>, DeadLettersError>> + Send;
    /// Sends `body` to `lane`.
    fn send_back(&self, body: &str, lane: QueueLane) -> impl Future<Output = Result<(), DeadLettersError>> + Send;
    /// Deletes a moved message from the DLQ.
    fn delete(&self, handle: &str) -> impl Future<Output = Result<(), DeadLettersError>> + Send;
    /// Makes a message visible again (left in the DLQ).
    fn release(&self, handles: &[String]) -> impl Future<Output = Result<(), DeadLettersError>> + Send;
}
