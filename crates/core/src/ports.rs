//! The ports the sender service is generic over: the idempotency ledger, the renewals table
//! (system of record), the shared rate limiter, the provider and the queues.
//!
//! Ports are native async traits; services are generic over them (no `dyn`). Each port has
//! one error enum with named cases and a catch-all that keeps its source. Normal results —
//! a lost claim race, an already-delivered reminder, a 429 — are values, never errors.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::contract::ReminderMessage;
use crate::decision::{ClaimView, LimiterAnswer, RenewalView};
use crate::ids::{ReminderId, RenewalId, TenantId};
use crate::provider::ProviderOutcome;
use crate::reason::{ReasonCode, ReminderState};

/// A boxed error source kept by the catch-all cases.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

// ---- ledger --------------------------------------------------------------------------------

/// Identifies one processing of one message, so a retried write (after a timeout whose
/// outcome is unknown) recognises its own claim instead of losing to itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// Wraps a token; callers make it unique per processing (message id + random nonce).
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }
    /// The token as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One entry of a reminder's history.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HistoryEntry {
    /// When.
    pub at: DateTime<Utc>,
    /// The state entered.
    pub state: ReminderState,
    /// Why, when there is a reason.
    pub reason: Option<ReasonCode>,
    /// Provider attempts made by then (for a claim: the message's attempt hint, since the
    /// claim's single write cannot read the stored count into the entry it appends).
    pub attempts: u32,
    /// The chain's correlation id.
    pub correlation_id: String,
    /// The redrive that re-released the message, if any.
    pub redrive_id: Option<String>,
    /// Last provider status, if any.
    pub provider_status: Option<u16>,
    /// Next eligible time, for deferrals.
    pub next_at: Option<DateTime<Utc>>,
}

/// A reminder's ledger record, as `explain` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRecord {
    /// The reminder.
    pub reminder_id: ReminderId,
    /// Current state.
    pub state: ReminderState,
    /// Provider attempts made.
    pub attempts: u32,
    /// Lease holder, while leased.
    pub owner: Option<String>,
    /// Lease end, while leased.
    pub lease_until: Option<DateTime<Utc>>,
    /// The provider's receipt, once delivered.
    pub receipt: Option<String>,
    /// The last reason recorded.
    pub last_reason: Option<ReasonCode>,
    /// Next eligible time, while deferred.
    pub next_at: Option<DateTime<Utc>>,
    /// The business deadline.
    pub deliver_by: DateTime<Utc>,
    /// Every transition, oldest first.
    pub history: Vec<HistoryEntry>,
}

/// A transition to record when settling a reminder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The state entered: `delivered`, `deferred`, `dead_lettered`, `expired` or `cancelled`.
    pub state: ReminderState,
    /// Why (absent for `delivered`).
    pub reason: Option<ReasonCode>,
    /// Provider attempts made.
    pub attempts: u32,
    /// Provider receipt (`delivered`).
    pub receipt: Option<String>,
    /// Last provider status.
    pub provider_status: Option<u16>,
    /// Next eligible time (`deferred`).
    pub next_at: Option<DateTime<Utc>>,
}

/// What a settle came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    /// Recorded.
    Recorded,
    /// The reminder was already delivered; nothing was overwritten.
    AlreadyDelivered,
    /// Another worker holds the lease now (ours expired); nothing was overwritten.
    LeaseLost,
}

/// The idempotency ledger failed as machinery.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The store throttled the request; retry later.
    #[error("ledger store throttled the request")]
    Throttled(#[source] BoxError),
    /// A stored record could not be read back (corrupt or from an incompatible version).
    #[error("ledger record for {reminder_id} is unreadable: {what}")]
    Corrupt {
        /// The reminder.
        reminder_id: String,
        /// What is wrong.
        what: String,
    },
    /// Anything else.
    #[error("ledger store request failed")]
    Unknown(#[source] BoxError),
}

/// The idempotency ledger: one record per reminder, keyed by `reminder:{reminder_id}`.
///
/// Contract (one suite runs it against every implementation):
/// - `claim` succeeds with ONE conditional write when the record is absent, or not delivered
///   and its lease has ended (`lease_until <= now`), or the lease is held by the same owner
///   token; it answers `AlreadyDelivered` or `HeldElsewhere` (with the holder's lease end) from
///   the same write when it loses;
/// - `settle` with an owner token only writes while that owner still holds the lease; without
///   one (expiry before any claim) only while no live lease exists; neither ever overwrites
///   `delivered`, except that `delivered` itself is recorded whoever holds the lease — the
///   provider accepted it;
/// - every claim and settle appends one history entry in the same write.
pub trait Ledger: Send + Sync {
    /// Claims `msg` for `owner` with a lease ending at `lease_until`.
    fn claim(
        &self,
        msg: &ReminderMessage,
        owner: &OwnerToken,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> impl Future<Output = Result<ClaimView, LedgerError>> + Send;

    /// Records a transition and ends `owner`'s lease.
    fn settle(
        &self,
        msg: &ReminderMessage,
        owner: Option<&OwnerToken>,
        now: DateTime<Utc>,
        settlement: &Settlement,
    ) -> impl Future<Output = Result<SettleOutcome, LedgerError>> + Send;

    /// Reads a reminder's record and history.
    fn get(&self, id: &ReminderId) -> impl Future<Output = Result<Option<LedgerRecord>, LedgerError>> + Send;
}

// ---- renewals -------------------------------------------------------------------------------

/// What the sender needs from the system of record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalLookup {
    /// Still due, cancelled, paid or gone.
    pub view: RenewalView,
    /// An opaque reference the provider resolves to an address (never the address itself).
    pub recipient_ref: Option<String>,
    /// `email`, `sms`, ...
    pub channel: Option<String>,
}

/// The renewals table failed as machinery.
#[derive(Debug, thiserror::Error)]
pub enum RenewalsError {
    /// The stored renewal could not be read.
    #[error("renewal {tenant_id}/{renewal_id} is unreadable: {what}")]
    Corrupt {
        /// Tenant.
        tenant_id: String,
        /// Renewal.
        renewal_id: String,
        /// What is wrong.
        what: String,
    },
    /// Anything else.
    #[error("renewals store request failed")]
    Unknown(#[source] BoxError),
}

/// The renewals table, read by the sender.
pub trait Renewals: Send + Sync {
    /// Looks up one renewal.
    fn lookup(
        &self,
        tenant: &TenantId,
        renewal: &RenewalId,
    ) -> impl Future<Output = Result<RenewalLookup, RenewalsError>> + Send;
}

// ---- limiter --------------------------------------------------------------------------------

/// Capacity class of a call (DESIGN §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimiterClass {
    /// Little slack left: may use the whole quota.
    DeadlineNear,
    /// Ordinary work: stops short of the reserve.
    Normal,
    /// Redriven work: capped at its own share.
    Redrive,
}

impl LimiterClass {
    /// The class of a message at `now`: redriven work is `Redrive`; work with less than
    /// `near` of slack left is `DeadlineNear`.
    pub fn of(msg: &ReminderMessage, now: DateTime<Utc>, near: Duration) -> Self {
        if msg.redrive.is_some() {
            Self::Redrive
        } else if crate::clock::until(now, msg.deliver_by) < near {
            Self::DeadlineNear
        } else {
            Self::Normal
        }
    }
}

/// The limiter failed as machinery.
#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    /// Anything else.
    #[error("rate limiter request failed")]
    Unknown(#[source] BoxError),
}

/// Who asks the limiter for a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimiterRequest<'a> {
    /// The capacity class (from the message's slack).
    pub class: LimiterClass,
    /// The tenant (for the optional per-tenant cap).
    pub tenant: &'a TenantId,
}

/// The shared rate limiter.
pub trait Limiter: Send + Sync {
    /// Takes one token for `req`, waiting at most `max_wait`.
    fn acquire(
        &self,
        req: LimiterRequest<'_>,
        max_wait: Duration,
    ) -> impl Future<Output = Result<LimiterAnswer, LimiterError>> + Send;
    /// Tells the limiter the provider throttled (it slows down; `retry_after` pauses it).
    fn throttled(&self, retry_after: Option<Duration>) -> impl Future<Output = Result<(), LimiterError>> + Send;
}

// ---- provider -------------------------------------------------------------------------------

/// One provider call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRequest<'a> {
    /// The reminder (its idempotency key goes in the `Idempotency-Key` header).
    pub message: &'a ReminderMessage,
    /// From the renewal.
    pub recipient_ref: Option<&'a str>,
    /// From the renewal.
    pub channel: Option<&'a str>,
    /// The whole call, connect to last byte, must finish within this.
    pub timeout: Duration,
}

/// The provider client failed before it could make a call (bad configuration); a call that
/// was made always ends in a [`ProviderOutcome`].
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// Anything else.
    #[error("provider client failed before calling")]
    Unknown(#[source] BoxError),
}

/// The downstream provider.
pub trait Provider: Send + Sync {
    /// Sends one reminder.
    fn send(&self, req: &ProviderRequest<'_>) -> impl Future<Output = Result<ProviderOutcome, ProviderError>> + Send;
}

// ---- queues ---------------------------------------------------------------------------------

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

/// What the sender does to queues besides acknowledging.
pub trait SendQueue: Send + Sync {
    /// Puts a copy of `msg` back on the send queue, visible after `delay` (capped at SQS's
    /// 15 minutes; a longer wait hops). A fresh message keeps `ApproximateReceiveCount` a crash
    /// counter only, as DESIGN §4 wants.
    fn requeue(&self, msg: &ReminderMessage, delay: Duration) -> impl Future<Output = Result<(), QueueError>> + Send;
    /// Sends a message to the DLQ with its failure metadata.
    fn dead_letter(&self, q: &Quarantine<'_>) -> impl Future<Output = Result<(), QueueError>> + Send;
}
