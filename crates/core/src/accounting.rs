//! The one accounting of a run (docs/design.md#the-one-accounting): how `punctual run`, `local drain`, `simulate`
//! (and the fault checker) count what happened to every reminder. Each report flattens
//! [`DeliveryCounts`] into its JSON, so a key means the same thing in every report, and a chart
//! drawn from [`oldest_age_series`] agrees with the report's `max_oldest_age_seconds`.
//!
//! Every reminder lands in exactly one bucket: `delivered`, `expired`, `cancelled`,
//! `dead_lettered{reason}`, still `waiting` on a queue (not a failure: a report taken
//! mid-run), or `lost` (no terminal state and on no queue). `late` cuts across them: a
//! delivery at or after `deliver_by` (0 by construction), plus every reminder that ended
//! expired or dead-lettered for a deadline reason — the figure compared with EDF.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::clock::until;
use crate::ports::LedgerRecord;
use crate::reason::{ReasonCode, ReminderState};

/// Reasons that mean "missed its window" (counted in `late`).
pub const DEADLINE_REASONS: [ReasonCode; 3] =
    [ReasonCode::BusinessDeadlineExpired, ReasonCode::NoSafeRetryWindow, ReasonCode::MissedScheduleWindow];

/// True for a DLQ reason that means the reminder missed its window.
pub fn is_deadline_reason(reason: &str) -> bool {
    DEADLINE_REASONS.iter().any(|r| r.as_str() == reason)
}

/// The figures every report shares. JSON keys are a contract.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeliveryCounts {
    /// Reminders the provider accepted.
    pub delivered: u64,
    /// Alias of `repeated_key_requests`, kept for scripts written against earlier reports.
    pub duplicates: u64,
    /// Provider requests repeating an idempotency key the provider had already accepted:
    /// harmless with a provider that honours keys (it answers without a second effect).
    pub repeated_key_requests: u64,
    /// A second accepted effect for one reminder (a second delivery to the recipient). Must
    /// be 0.
    pub double_effects: u64,
    /// Missed the window: delivered at or after `deliver_by`, or ended expired or
    /// dead-lettered for a deadline reason ([`DEADLINE_REASONS`]). Compared with EDF.
    pub late: u64,
    /// Expired: `deliver_by` passed before delivery (at the sender or at release).
    pub expired: u64,
    /// Cancelled (renewal cancelled, paid or gone) before sending.
    pub cancelled: u64,
    /// What the DLQ holds, by reason: dead-lettered reminders, malformed messages, and the
    /// DLQ copy of each reminder the sender expired (`business_deadline_expired`; that
    /// reminder is counted once, in `expired`).
    pub dead_lettered: BTreeMap<String, u64>,
    /// In no terminal state and on no queue.
    pub lost: u64,
    /// The oldest due, undelivered reminder's age at its worst, measured from
    /// `deliver_after`: the largest (end − `deliver_after`) over reminders, where end is when
    /// it reached a terminal state, or the end of the run for one that never did.
    pub max_oldest_age_seconds: f64,
}

/// What the provider saw and how close the run came to its quota (`run` and `simulate`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Throughput {
    /// Provider requests.
    pub provider_calls: u64,
    /// Provider 429 answers.
    pub provider_429: u64,
    /// First to last provider acceptance (plus one quota interval where measured that way).
    pub drain_seconds: f64,
    /// The fastest possible drain at the quota: deliverable reminders ÷ quota.
    pub floor_seconds: f64,
    /// floor ÷ drain, at most 1 (a burst at the start can make one run's drain shorter than
    /// the floor; the fraction of the quota used is never above 1).
    pub utilisation: f64,
    /// Provider requests ÷ deliveries.
    pub retry_amplification: f64,
}

impl Throughput {
    /// The figures from the counts the run measured.
    pub fn measure(
        provider_calls: u64,
        provider_429: u64,
        delivered: u64,
        drain_seconds: f64,
        floor_seconds: f64,
    ) -> Self {
        Self {
            provider_calls,
            provider_429,
            drain_seconds,
            floor_seconds,
            utilisation: if drain_seconds > 0.0 { (floor_seconds / drain_seconds).min(1.0) } else { 0.0 },
            retry_amplification: if delivered > 0 { provider_calls as f64 / delivered as f64 } else { 0.0 },
        }
    }
}

/// How one reminder ended, as far as the run knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The provider accepted it at `at`.
    Delivered {
        /// When it was recorded delivered.
        at: DateTime<Utc>,
    },
    /// Expired (at the sender, or at release: `missed_schedule_window`).
    Expired,
    /// Cancelled.
    Cancelled,
    /// In the DLQ for `reason` (a reason code, or `receive_count_backstop`).
    DeadLettered {
        /// The DLQ reason.
        reason: String,
    },
    /// Not terminal, and a copy is on a queue (visible, in flight or delayed).
    Waiting,
    /// Not terminal and on no queue.
    Lost,
}

/// One reminder's ending: its window, its outcome and when it got there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// When it became due (`None` when unknown: the age figure skips it).
    pub deliver_after: Option<DateTime<Utc>>,
    /// Its business deadline.
    pub deliver_by: DateTime<Utc>,
    /// What happened.
    pub outcome: Outcome,
    /// When it reached its terminal state (`None`: not terminal, or unknown).
    pub ended_at: Option<DateTime<Utc>>,
}

impl Ending {
    /// A reminder's ending from its ledger record; `on_queue` says whether a copy of it is
    /// still on a queue (it decides between `Waiting` and `Lost` for a non-terminal record).
    pub fn from_record(rec: &LedgerRecord, on_queue: bool) -> Self {
        let entered = |s: ReminderState| rec.history.iter().rev().find(|h| h.state == s).map(|h| h.at);
        let outcome = match rec.state {
            ReminderState::Delivered => {
                Outcome::Delivered { at: entered(ReminderState::Delivered).unwrap_or(DateTime::<Utc>::MAX_UTC) }
            }
            ReminderState::Expired => Outcome::Expired,
            ReminderState::Cancelled => Outcome::Cancelled,
            ReminderState::DeadLettered => {
                Outcome::DeadLettered { reason: rec.last_reason.map_or("unknown", |r| r.as_str()).to_owned() }
            }
            _ if on_queue => Outcome::Waiting,
            _ => Outcome::Lost,
        };
        let ended_at = if rec.state.is_terminal() { entered(rec.state) } else { None };
        Self { deliver_after: rec.deliver_after, deliver_by: rec.deliver_by, outcome, ended_at }
    }

    /// True when it missed its window (see [`DeliveryCounts::late`]).
    pub fn is_late(&self) -> bool {
        match &self.outcome {
            Outcome::Delivered { at } => *at >= self.deliver_by,
            Outcome::Expired => true,
            Outcome::DeadLettered { reason } => is_deadline_reason(reason),
            Outcome::Cancelled | Outcome::Waiting | Outcome::Lost => false,
        }
    }

    /// The span this reminder was due and undelivered: from `deliver_after` to its end (or
    /// `as_of` when it has none).
    pub fn due_span(&self, as_of: DateTime<Utc>) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let after = self.deliver_after?;
        let end = match (&self.outcome, self.ended_at) {
            (Outcome::Delivered { at }, _) => *at,
            (_, Some(t)) => t,
            (_, None) => as_of,
        };
        Some((after, end.max(after)))
    }
}

/// Counts endings into [`DeliveryCounts`].
#[derive(Debug, Clone)]
pub struct Tally {
    counts: DeliveryCounts,
    as_of: DateTime<Utc>,
    waiting: u64,
    copies: u64,
}

impl Tally {
    /// A tally of a run observed at `as_of` (the end of the run).
    pub fn new(as_of: DateTime<Utc>) -> Self {
        Self { counts: DeliveryCounts::default(), as_of, waiting: 0, copies: 0 }
    }

    /// Counts one reminder.
    pub fn reminder(&mut self, e: &Ending) {
        let c = &mut self.counts;
        match &e.outcome {
            Outcome::Delivered { .. } => c.delivered += 1,
            Outcome::Expired => c.expired += 1,
            Outcome::Cancelled => c.cancelled += 1,
            Outcome::DeadLettered { reason } => *c.dead_lettered.entry(reason.clone()).or_default() += 1,
            Outcome::Waiting => self.waiting += 1,
            Outcome::Lost => c.lost += 1,
        }
        if e.is_late() {
            self.counts.late += 1;
        }
        if let Some((after, end)) = e.due_span(self.as_of) {
            let age = until(after, end).as_secs_f64();
            self.counts.max_oldest_age_seconds = self.counts.max_oldest_age_seconds.max(age);
        }
    }

    /// Counts a DLQ message of no known reminder (malformed, or moved by the receive-count
    /// backstop before any ledger write), or a reminder dead-lettered for `reason`.
    pub fn dead_letter(&mut self, reason: &str) {
        *self.counts.dead_lettered.entry(reason.to_owned()).or_default() += 1;
        if is_deadline_reason(reason) {
            self.counts.late += 1;
        }
    }

    /// Lists the DLQ copy of a reminder already counted in another bucket (the sender's
    /// expiry leaves one under `business_deadline_expired`): in `dead_lettered`, not again in
    /// the conservation sum or in `late`.
    pub fn dlq_copy(&mut self, reason: &str) {
        *self.counts.dead_lettered.entry(reason.to_owned()).or_default() += 1;
        self.copies += 1;
    }

    /// Counts `n` reminders the scheduler expired at release (`missed_schedule_window`):
    /// they never reached a sender or the ledger.
    pub fn expired_at_release(&mut self, n: u64) {
        self.counts.expired += n;
        self.counts.late += n;
    }

    /// What the provider saw.
    pub fn provider(&mut self, repeated_key_requests: u64, double_effects: u64) {
        self.counts.repeated_key_requests = repeated_key_requests;
        self.counts.duplicates = repeated_key_requests;
        self.counts.double_effects = double_effects;
    }

    /// Reminders still waiting on a queue.
    pub fn waiting(&self) -> u64 {
        self.waiting
    }

    /// The counts. With `expected`, reminders the run released but the tally never saw in any
    /// bucket (no ledger record, no DLQ message, nothing on a queue) count as lost too.
    pub fn finish(mut self, expected: Option<u64>, unseen_on_queues: u64) -> DeliveryCounts {
        if let Some(n) = expected {
            let c = &self.counts;
            let seen = c.delivered
                + c.expired
                + c.cancelled
                + c.dead_lettered.values().sum::<u64>().saturating_sub(self.copies)
                + c.lost
                + self.waiting
                + unseen_on_queues;
            self.counts.lost += n.saturating_sub(seen);
        }
        self.counts
    }
}

/// The oldest due, undelivered reminder's age at each of `times` (seconds after `t0`), plus a
/// point just at the end of every span, so the series' maximum is exactly the report's
/// `max_oldest_age_seconds` for the same spans. `spans` are `(deliver_after, end)`.
pub fn oldest_age_series(
    spans: &[(DateTime<Utc>, DateTime<Utc>)],
    t0: DateTime<Utc>,
    times: &[DateTime<Utc>],
) -> Vec<(f64, f64)> {
    let at = |t: DateTime<Utc>| -> f64 {
        spans
            .iter()
            .filter(|(after, end)| *after <= t && t <= *end)
            .map(|(after, _)| until(*after, t).as_secs_f64())
            .fold(0.0, f64::max)
    };
    let mut points: Vec<DateTime<Utc>> = times.to_vec();
    points.extend(spans.iter().map(|(_, end)| *end));
    points.sort();
    points.dedup();
    points.into_iter().filter(|t| *t >= t0).map(|t| (until(t0, t).as_secs_f64(), at(t))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(1_000_000 + s)
    }

    fn ending(after: i64, by: i64, outcome: Outcome, ended: Option<i64>) -> Ending {
        Ending { deliver_after: Some(t(after)), deliver_by: t(by), outcome, ended_at: ended.map(t) }
    }

    #[test]
    fn each_reminder_lands_in_one_bucket_and_late_counts_every_missed_window() {
        let mut tally = Tally::new(t(100));
        tally.reminder(&ending(0, 60, Outcome::Delivered { at: t(10) }, None));
        tally.reminder(&ending(0, 60, Outcome::Delivered { at: t(60) }, None)); // at deliver_by: late
        tally.reminder(&ending(0, 60, Outcome::Expired, Some(60)));
        tally.reminder(&ending(0, 60, Outcome::DeadLettered { reason: "no_safe_retry_window".into() }, Some(30)));
        tally.reminder(&ending(0, 60, Outcome::DeadLettered { reason: "attempt_limit".into() }, Some(20)));
        tally.reminder(&ending(0, 60, Outcome::Cancelled, Some(5)));
        tally.reminder(&ending(0, 600, Outcome::Waiting, None));
        tally.reminder(&ending(0, 600, Outcome::Lost, None));
        tally.dead_letter("malformed");
        tally.dlq_copy("business_deadline_expired");
        tally.expired_at_release(2);
        tally.provider(3, 0);
        let c = tally.finish(Some(12), 0);
        assert_eq!((c.delivered, c.expired, c.cancelled, c.lost), (2, 3, 1, 1 + 1), "{c:#?}");
        assert_eq!(c.late, 1 + 1 + 1 + 2, "a late delivery, an expiry, a deadline DLQ reason, two at release");
        assert_eq!(c.dead_lettered.values().sum::<u64>(), 4, "the expired reminder's DLQ copy is listed");
        assert_eq!(c.dead_lettered["business_deadline_expired"], 1);
        assert_eq!((c.duplicates, c.repeated_key_requests, c.double_effects), (3, 3, 0));
        assert_eq!(c.max_oldest_age_seconds, 100.0, "the waiting and the lost reminder aged to the end of the run");
    }

    #[test]
    fn the_age_series_peaks_at_the_reports_figure() {
        let endings = [
            ending(0, 600, Outcome::Delivered { at: t(33) }, None),
            ending(5, 600, Outcome::Delivered { at: t(12) }, None),
            ending(50, 600, Outcome::DeadLettered { reason: "attempt_limit".into() }, Some(70)),
        ];
        let mut tally = Tally::new(t(80));
        endings.iter().for_each(|e| tally.reminder(e));
        let c = tally.finish(None, 0);
        let spans: Vec<_> = endings.iter().filter_map(|e| e.due_span(t(80))).collect();
        let series = oldest_age_series(&spans, t(0), &[t(0), t(10), t(20), t(30), t(40)]);
        let peak = series.iter().map(|(_, a)| *a).fold(0.0, f64::max);
        assert_eq!(peak, c.max_oldest_age_seconds);
        assert_eq!(peak, 33.0);
    }
}
