//! Every port of the core, in one place: the traits the services are generic over, and for
//! each its own error enum.
//!
//! | port | what it is | adapters |
//! |---|---|---|
//! | [`Clock`] | reads the time and sleeps | `SystemClock` (lambda), `ManualClock` (testing) |
//! | [`Ledger`] | the idempotency ledger | DynamoDB, memory |
//! | [`Renewals`] | the system of record as the sender reads it | DynamoDB, memory |
//! | [`DueStore`] | the pending-renewals index and watermark the scheduler pages | DynamoDB, memory |
//! | [`Limiter`] | the shared rate limiter as the sender asks it | `SharedLimiter` |
//! | [`SlotStore`] | where the limiter's slot schedule lives | DynamoDB, memory |
//! | [`Provider`] | who delivers | HTTP, SES, scripted |
//! | [`Recipients`] | `recipient_ref` → address, for a provider that needs one | DynamoDB, memory |
//! | [`SendQueue`] | requeue and quarantine | SQS, memory |
//! | [`ReleaseQueue`] | the scheduler's release | SQS, memory |
//! | [`DeadLetters`] | the DLQ as the redrive sees it | SQS, memory |
//! | [`Control`] | the pause switch and audit records | DynamoDB, memory |
//! | [`Outbox`] | the ledger's unpublished outcome events | DynamoDB, memory |
//! | [`OutcomeSink`] | where outcome events are published | EventBridge, SQS (local), memory |
//!
//! Ports are native async traits; services are generic over them (no `dyn`). Normal results —
//! a lost claim race, an already-delivered reminder, a 429 — are values, never errors. An
//! error means the machinery failed, and every error says whether the failed request may
//! still have taken effect ([`Certainty`]): a caller retries a determinate failure freely and
//! treats an indeterminate one as possibly applied.

mod clock;
mod control;
mod due;
mod ledger;
mod limiter;
mod outbox;
mod provider;
mod queue;
mod recipients;
mod renewals;

pub use clock::Clock;
pub use control::{Control, ControlError, Pause};
pub use due::{DueStore, DueStoreError, Marked, Page, Pending};
pub use ledger::{
    HISTORY_MAX, HISTORY_RECENT, HistoryEntry, Ledger, LedgerError, LedgerRecord, OwnerToken, SettleOutcome,
    Settlement, compact_history, covered_by_operator, keeps_call_mark, revives_cancelled, revives_dead_letter,
};
pub use limiter::{Book, Booked, Lane, Limiter, LimiterClass, LimiterError, LimiterRequest, SlotStore, SlotView};
pub use outbox::{Outbox, OutboxEntry, OutboxError, OutcomeSink, SinkError};
pub use provider::{Provider, ProviderError, ProviderRequest};
pub use queue::{DeadLetter, DeadLetters, DeadLettersError, Quarantine, QueueError, Release, ReleaseQueue, SendQueue};
pub use recipients::{EmailAddress, InvalidAddress, Recipients, RecipientsError};
pub use renewals::{RenewalLookup, RenewalVersion, Renewals, RenewalsError};

/// A boxed error source kept by the catch-all cases.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Whether a failed request may still have taken effect (Materialize's split).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Certainty {
    /// It certainly did not: the service refused it, or it never left this process.
    Determinate,
    /// It may have: a timeout, a dropped connection, an answer lost after the write.
    Indeterminate,
}
