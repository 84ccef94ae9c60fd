//! The shared rate limiter port ([`Limiter`], what the sender asks) and the store of its slot
//! schedule ([`SlotStore`], what the limiter service writes; docs/design.md#the-shared-limiter).

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{BoxError, Certainty};
use crate::contract::ReminderMessage;
use crate::decision::LimiterAnswer;
use crate::ids::TenantId;

/// Capacity class of a call (docs/design.md#the-shared-limiter).
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

impl LimiterError {
    /// A booking whose answer was lost may have taken its block (stranded slots, never a
    /// double booking): indeterminate.
    pub fn certainty(&self) -> Certainty {
        Certainty::Indeterminate
    }
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
    /// Tells the limiter what an accepting answer said of the provider's window: `remaining`
    /// requests until `reset`. When that is less than the admitted rate would spend by then,
    /// the limiter slows to it (none left: no slot before the reset), so the 429 never comes.
    fn budget(&self, remaining: u64, reset: Duration) -> impl Future<Output = Result<(), LimiterError>> + Send;
}

// ---- the slot schedule -----------------------------------------------------------------

/// What the store holds for one limiter key (milliseconds since the epoch throughout).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SlotView {
    /// First slot nobody has booked (0: never booked).
    pub next_ms: i64,
    /// Deadline-near work booked recently: normal work yields until this instant.
    pub near_until_ms: i64,
    /// The admitted rate set by the last cut, calls/s (`None`: never cut).
    pub cut_rate: Option<f64>,
    /// When the last cut happened.
    pub cut_at_ms: i64,
    /// When the last cut's rate is back at the quota (0: not recorded). Every cut recovers at
    /// the same slope, so of two cuts the one that recovers later is the lower at every
    /// instant: stores compare cuts by it (see [`SlotStore::cut`]).
    pub cut_recovered_ms: i64,
    /// No slot before this instant (`Retry-After`).
    pub paused_until_ms: i64,
}

/// Which lane a booking is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Deadline-near: marks the schedule near-active until `hold_until_ms`.
    Near {
        /// End of the near-active mark this booking sets.
        hold_until_ms: i64,
    },
    /// Normal: while near-active, only slots starting within `fill_ms` of now.
    Normal {
        /// How close the first free slot must be while near-active.
        fill_ms: i64,
    },
    /// A cap schedule (redrive share, tenant share): no lanes.
    Cap,
}

/// One booking request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Book {
    /// The caller's now.
    pub now_ms: i64,
    /// Length of the block: `block` slots at the current rate.
    pub block_ms: i64,
    /// Refuse when the first free slot is later than `now + ahead`.
    pub ahead_ms: i64,
    /// Slots stay usable this long after their instant: the schedule only counts as idle
    /// (and restarts at `now`) when `next < now - grace`, so a restart never overlaps slots
    /// another instance may still use.
    pub grace_ms: i64,
    /// The lane.
    pub lane: Lane,
}

impl Book {
    /// Whether a busy schedule in state `view` refuses this booking: its first free slot is
    /// past the horizon, or a normal booking must yield to deadline-near work. The one rule
    /// every store applies (the in-memory one, and DynamoDB's condition expression).
    pub fn refuses(&self, view: &SlotView) -> bool {
        let yields = match self.lane {
            Lane::Normal { fill_ms } => view.near_until_ms >= self.now_ms && view.next_ms > self.now_ms + fill_ms,
            Lane::Near { .. } | Lane::Cap => false,
        };
        view.next_ms > self.now_ms + self.ahead_ms || yields
    }
}

/// A booking's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Booked {
    /// The caller owns `[start_ms, start_ms + block_ms)`.
    Got {
        /// First slot of the block.
        start_ms: i64,
        /// The stored view after the booking.
        view: SlotView,
    },
    /// Refused (too far ahead, or normal work during near activity); nothing changed.
    Full {
        /// The stored view.
        view: SlotView,
    },
}

/// Where the shared schedule lives. Every operation is atomic; implementations must pass
/// `testing::limiter_contract`.
///
/// `book` semantics: when the schedule is idle (`next < now - grace`, or never booked) the
/// block starts at `now` (an idle schedule cannot be used retroactively); otherwise it starts
/// at `next` if `next ≤ now + ahead` and, for a normal booking, the schedule is not
/// near-active (`near_until < now`) or `next ≤ now + fill`. A near booking sets `near_until`.
pub trait SlotStore: Send + Sync {
    /// Books one block.
    fn book(&self, key: &str, req: &Book) -> impl Future<Output = Result<Booked, LimiterError>> + Send;
    /// Records a cut to `rate` at `now`, back at the quota at `recovered_ms`, unless another
    /// cut happened within `min_gap_ms`, or the stored cut recovers no earlier (it is at most
    /// as high now and at every later instant): a cut only ever lowers the rate. An instance
    /// whose view predates the other instances' cuts computes its cut from a higher rate;
    /// written as it stands, it would raise the rate they had cut.
    fn cut(
        &self,
        key: &str,
        now_ms: i64,
        rate: f64,
        recovered_ms: i64,
        min_gap_ms: i64,
    ) -> impl Future<Output = Result<(), LimiterError>> + Send;
    /// No slot before `until_ms`: raises `paused_until` and pushes `next` past it.
    fn pause(&self, key: &str, until_ms: i64) -> impl Future<Output = Result<(), LimiterError>> + Send;
    /// Reads the view (status, tests); `None` when never written.
    fn view(&self, key: &str) -> impl Future<Output = Result<Option<SlotView>, LimiterError>> + Send;
    /// Write requests sent so far (conditional writes that failed included).
    fn writes(&self) -> u64;
}
