//! The idempotency ledger port: one record per reminder, claimed and settled by conditional
//! writes (docs/design.md#the-idempotency-ledger).
//!
//! # Bounded history (the fault checker's I5)
//! A record keeps its **first** history entry and the **most recent** ones: at most
//! [`HISTORY_MAX`] entries (97); when a write finds it full, the history is compacted to the
//! first entry plus the last [`HISTORY_RECENT`] (64, the new one included) and the entries
//! dropped are counted in [`LedgerRecord::history_dropped`]. So a record never grows past a
//! few tens of KB however often a reminder is deferred (an unbounded history reached
//! DynamoDB's 400 KB item limit after ~2,100 claim+settle cycles, and every later claim
//! failed).

/// History entries kept by a compaction besides the first: the most recent ones.
pub const HISTORY_RECENT: usize = 64;

/// Most history entries a record holds: the first, and up to 96 recent ones. A write that
/// finds this many compacts first, so a compaction happens at most once per 32 writes.
pub const HISTORY_MAX: usize = 1 + HISTORY_RECENT + 32;

/// Compacts `history` if it holds [`HISTORY_MAX`] entries or more, so one more entry fits:
/// keeps the first and the last `HISTORY_RECENT - 1`, returns how many were dropped.
pub fn compact_history<T>(history: &mut Vec<T>) -> u64 {
    if history.len() < HISTORY_MAX {
        return 0;
    }
    let drop_to = history.len() - (HISTORY_RECENT - 1);
    history.drain(1..drop_to).count() as u64
}

use std::future::Future;

use chrono::{DateTime, Utc};

use super::{BoxError, Certainty};
use crate::contract::ReminderMessage;
use crate::decision::ClaimView;
use crate::ids::ReminderId;
use crate::reason::{ReasonCode, ReminderState};

/// Whether a settlement with `reason` leaves the mark of an unknown provider call in place: the
/// quarantine that is about that call, a rescheduled copy's release and a cancellation at send
/// (neither made a call; the earlier one stays unknown for the copy that carries the reminder
/// on — a cancelled renewal can be active again, and its re-armed copy must not call a
/// provider without keys a second time), and a copy held or dead-lettered by its channel
/// (paused, or not declared: no call was made). Every other settlement records the outcome of a
/// call, or ends the reminder for good.
pub fn keeps_call_mark(reason: Option<ReasonCode>) -> bool {
    matches!(
        reason,
        Some(
            ReasonCode::ProviderIndeterminate
                | ReasonCode::Rescheduled
                | ReasonCode::Cancelled
                | ReasonCode::OperatorPause
                | ReasonCode::UnknownChannel
        )
    )
}

/// Whether an unknown call's mark was decided about by an operator's redrive, which the copy
/// `msg` carries: `msg` is stamped `resend_unknown` by a redrive whose id sorts after the mark's
/// release (redrive ids sort by time; "" is the scheduler's). A mark made by a copy of the same
/// redrive, or a later one, is a new unknown call nobody decided about.
pub fn covered_by_operator(msg: &ReminderMessage, mark_release: Option<&str>) -> bool {
    msg.redrive.as_ref().is_some_and(|r| r.resend_unknown && mark_release.unwrap_or("") < r.id.as_str())
}

/// Whether the copy `msg` carries on a dead-lettered reminder whose latest redrive release is
/// `release_id`: only a redrive's copy whose redrive has not run on it yet (redrive ids sort by
/// time). Every other copy of a dead-lettered reminder is a duplicate — its letter is in the
/// DLQ already. The claim revives the reminder for such a copy, and an expiry (an ownerless
/// settle) may record over the quarantine for it; the DynamoDB adapter's conditions say the
/// same.
pub fn revives_dead_letter(msg: &ReminderMessage, release_id: Option<&str>) -> bool {
    msg.redrive.as_ref().is_some_and(|r| release_id.is_none_or(|latest| latest < r.id.as_str()))
}

/// Whether the copy `msg` claims a reminder `rec` records `cancelled`: only a copy released
/// after the cancellation (`first_enqueued` later than the record's last transition, which
/// is the cancellation: nothing writes a cancelled record but a claim this rule allows). A
/// cancellation at send says the renewal was not due *then* (cancelled, paid, or moved to
/// another version); the scheduler releases the reminder again only from a row re-armed since
/// (the renewal active again before its deadline, or moved back to this due date), and that
/// copy carries it on. Every copy released before — an SQS duplicate, a requeued or
/// redriven copy of the old release — is stale and revives nothing. The DynamoDB adapter's
/// condition says the same with `updated_ms`, the time of that same last write.
pub fn revives_cancelled(msg: &ReminderMessage, rec: &LedgerRecord) -> bool {
    rec.state == ReminderState::Cancelled && rec.history.last().is_some_and(|h| msg.first_enqueued > h.at)
}

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
    /// When it became due (absent on records written before it was stored).
    pub deliver_after: Option<DateTime<Utc>>,
    /// The business deadline.
    pub deliver_by: DateTime<Utc>,
    /// The first transition and the most recent ones, oldest first (see [`HISTORY_MAX`]).
    pub history: Vec<HistoryEntry>,
    /// Transitions dropped from the middle of `history` to keep the record bounded.
    pub history_dropped: u64,
    /// The latest redrive whose copy claimed the reminder: copies released before it (a stale
    /// pre-redrive copy, or one of an earlier redrive) are superseded and claim nothing.
    pub release_id: Option<String>,
    /// The owner that marked a provider call ([`Ledger::mark_call`]) not yet settled: while its
    /// lease lives, a call may be in flight; after, that call's outcome is unknown.
    pub call_owner: Option<String>,
    /// The release of the copy that made the mark (its redrive id, "" for the scheduler's).
    pub call_release: Option<String>,
}

impl LedgerRecord {
    /// A record of `reminder_id` in `state` and nothing else yet: no attempt, lease, reason or
    /// history, `deliver_after` unknown.
    pub fn new(reminder_id: ReminderId, state: ReminderState, deliver_by: DateTime<Utc>) -> Self {
        Self {
            reminder_id,
            state,
            attempts: 0,
            owner: None,
            lease_until: None,
            receipt: None,
            last_reason: None,
            next_at: None,
            deliver_after: None,
            deliver_by,
            history: Vec::new(),
            history_dropped: 0,
            release_id: None,
            call_owner: None,
            call_release: None,
        }
    }
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
    /// An ownerless settle (an expiry) found the reminder already ended — cancelled,
    /// dead-lettered or expired; nothing was overwritten.
    AlreadyEnded(ReminderState),
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

impl LedgerError {
    /// A throttled request or an unreadable record changed nothing; anything else may have.
    pub fn certainty(&self) -> Certainty {
        match self {
            Self::Throttled(_) | Self::Corrupt { .. } => Certainty::Determinate,
            Self::Unknown(_) => Certainty::Indeterminate,
        }
    }
}

/// The idempotency ledger: one record per reminder, keyed by `reminder:{reminder_id}`.
///
/// Contract (one suite runs it against every implementation):
/// - `claim` succeeds with ONE conditional write when the record is absent, or not delivered
///   and its lease has ended (`lease_until <= now`), or the lease is held by the same owner
///   token; it answers `AlreadyDelivered` or `HeldElsewhere` (with the holder's lease end) from
///   the same write when it loses; an ended reminder (`Ended`) is claimed only by a redrive's
///   copy ([`revives_dead_letter`]) or, cancelled, by a copy released after the cancellation
///   ([`revives_cancelled`]);
/// - `settle` with an owner token only writes while that owner still holds the lease; without
///   one (expiry before any claim) only while no live lease exists and the reminder has not
///   ended (`cancelled`, `dead_lettered`, `expired`: answered `AlreadyEnded`) — except that a
///   `dead_lettered` one is recorded over for a copy [`revives_dead_letter`] (a redrive's copy
///   that reached a sender after `deliver_by`: the reminder expires, with its new reason and a
///   history entry, not the old quarantine's), and a `cancelled` one for a copy
///   [`revives_cancelled`] (released again after the cancellation, reaching a sender after
///   `deliver_by`: owed again, and missed); neither ever
///   overwrites `delivered`, except that `delivered` itself is recorded whoever holds the
///   lease — the provider accepted it;
/// - `mark_call` records `call_owner = owner` and `call_release` = the copy's release (its
///   redrive id, "" for the scheduler's) only while `owner` holds a live lease (else it
///   answers false and writes nothing); a claim that takes the record over reports a mark
///   left by another owner as `unsettled_call` (and keeps it) — unless the claiming copy is
///   stamped `resend_unknown` by a redrive later than the mark's release (the operator decided
///   about that call, and only that one); every settle clears it except
///   one whose reason is `provider_indeterminate` (the call's outcome stays unknown until an
///   operator's redrive that names that reason resends it, or a delivery ends it);
/// - every claim and settle appends one history entry in the same write, compacting the
///   history to the first and the last [`HISTORY_RECENT`] entries when it holds
///   [`HISTORY_MAX`], so a record stays bounded.
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

    /// Marks, under `owner`'s lease, that a provider call is about to start (used only with a
    /// provider that does not honour idempotency keys). False: the lease is no longer
    /// `owner`'s; nothing was written. One conditional write, no history entry.
    fn mark_call(
        &self,
        msg: &ReminderMessage,
        owner: &OwnerToken,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;

    /// Reads a reminder's record and history.
    fn get(&self, id: &ReminderId) -> impl Future<Output = Result<Option<LedgerRecord>, LedgerError>> + Send;

    /// Appends `event` to the reminder's outbox (docs/design.md#outcome-events) without
    /// changing its state: a redrive's `redriven`. (A settle that ends a reminder appends its
    /// own event in the same write.)
    fn append_outcome(
        &self,
        msg: &ReminderMessage,
        event: &crate::outcome::OutcomeEvent,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;
}
