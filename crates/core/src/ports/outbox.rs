//! The outbox port (docs/design.md#outcome-events): the ledger's records that hold outcome
//! events not yet published, as the publisher sweeps them, and the sink it publishes to.

use std::future::Future;

use super::BoxError;
use crate::outcome::OutcomeEvent;

/// One record's unpublished events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// The record (its reminder id).
    pub reminder_id: String,
    /// When the last event was added (epoch ms): the clear is conditioned on it, so an event
    /// added after the sweep read the record is not cleared unpublished.
    pub added_ms: i64,
    /// The events, oldest first (an event appended twice by a retried write is listed twice).
    pub events: Vec<OutcomeEvent>,
    /// Stored events that could not be read (kept in the record, reported, never dropped).
    pub unreadable: usize,
}

/// The outbox failed as machinery.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// Anything else.
    #[error("outbox request failed")]
    Unknown(#[source] BoxError),
}

/// Where the ledger's unpublished events are found and cleared.
pub trait Outbox: Send + Sync {
    /// Up to `limit` records holding events, oldest first within a shard.
    fn pending(&self, limit: usize) -> impl Future<Output = Result<Vec<OutboxEntry>, OutboxError>> + Send;

    /// Clears the events of `entry` if no event was added since it was read; `false` when one
    /// was (the entry is then swept again, its published events with it: at least once).
    fn clear(&self, entry: &OutboxEntry) -> impl Future<Output = Result<bool, OutboxError>> + Send;
}

/// The event sink failed as machinery (nothing is known of what it accepted).
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Anything else.
    #[error("publishing outcome events failed")]
    Unknown(#[source] BoxError),
}

/// Where outcome events go (EventBridge; the local outcomes queue; memory).
pub trait OutcomeSink: Send + Sync {
    /// Largest batch one call takes.
    fn batch_limit(&self) -> usize {
        10
    }

    /// Publishes `events` (at most [`OutcomeSink::batch_limit`]); one `true` per event the
    /// sink accepted, in order.
    fn publish(&self, events: &[OutcomeEvent]) -> impl Future<Output = Result<Vec<bool>, SinkError>> + Send;
}
