//! The two send queues ("lanes", docs/design.md#lanes-and-pacing): deadline-near work travels
//! on the **urgent** lane, everything else on the **normal** lane. Both share the DLQ; both
//! trigger the sender, each mapping with its own concurrency, so a normal backlog can never
//! occupy the pollers urgent work needs.
//!
//! # Why lanes, and why paced
//! An SQS standard queue hands out ready messages in no useful order. With one queue, finding
//! the few tight reminders in a morning's backlog meant receiving (and deferring) normal work
//! until they turned up: paid per message, and bounded by how fast workers receive. A second
//! queue separates the tight ones at the source, but inside the urgent lane the order is still
//! random, and with deadlines 30–90 s apart that alone leaves ~12 % late (a uniformly random
//! service order over 60 s of work). So the scheduler also **paces** the urgent lane with
//! `DelaySeconds`: it sorts a tick's urgent reminders by deadline and gives each a turn on a
//! single server at the sustainable rate (a turn starts when the reminder is visible and the
//! lane is free), making it visible `lead` before its turn. At any moment only about
//! `lead × rate` urgent messages are visible, so the random order costs at most about `lead`
//! against earliest-deadline-first, with no requeue at all. A pace never makes a reminder
//! visible before its `deliver_after`, nor later than `reserve` before its `deliver_by`. If
//! the fleet drains faster than `rate`, urgent work waits a little longer than it had to (it
//! is on time either way); if slower, the pace is moot: the lane holds a backlog and the age
//! alarm on it fires first.
//!
//! The sender and the redrive route every copy they send by the slack it will have when it
//! becomes visible ([`lane_at`]); a requeued copy is not paced (it is one message, not a batch).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::clock::{add, sub, until};
use crate::contract::ReminderMessage;

/// SQS's longest `DelaySeconds`.
pub const MAX_DELAY: Duration = Duration::from_secs(900);

/// Default slack under which work is urgent (the sender's `DEADLINE_NEAR_SECS`).
pub const URGENT_BELOW: Duration = Duration::from_secs(15 * 60);

/// Default lead of a paced urgent release: how long before its projected turn a message
/// becomes visible. Long enough that the workers always find a full batch (releases are in
/// whole seconds), short enough that random order within it costs little.
pub const URGENT_LEAD: Duration = Duration::from_secs(5);

/// Which send queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueLane {
    /// Everything with slack to spare.
    Normal,
    /// Deadline-near work.
    Urgent,
}

impl QueueLane {
    /// Both lanes, normal first.
    pub const ALL: [QueueLane; 2] = [Self::Normal, Self::Urgent];

    /// The lane's name in reports and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Urgent => "urgent",
        }
    }
}

impl std::fmt::Display for QueueLane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The lane of a copy of a reminder due by `deliver_by` that becomes visible at `visible_at`:
/// urgent when its slack then is below `urgent_below`.
pub fn lane_at(deliver_by: DateTime<Utc>, visible_at: DateTime<Utc>, urgent_below: Duration) -> QueueLane {
    if until(visible_at, deliver_by) < urgent_below { QueueLane::Urgent } else { QueueLane::Normal }
}

/// Messages on each lane (visible + in flight + delayed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LaneDepths {
    /// The normal lane.
    pub normal: u64,
    /// The urgent lane.
    pub urgent: u64,
    /// Of the urgent lane's, those still delayed (not yet visible): paced releases waiting for
    /// their turn, which must not count as work ahead of a reminder due now.
    pub urgent_delayed: u64,
    /// Of the normal lane's, those still delayed (released ahead of their `deliver_after`):
    /// not work ahead of anything due before them either.
    pub normal_delayed: u64,
}

impl LaneDepths {
    /// Both lanes together.
    pub fn total(self) -> u64 {
        self.normal + self.urgent
    }

    /// What both lanes hold that a sender can take now (visible or in flight): the work ahead
    /// of anything released now.
    pub fn ready(self) -> u64 {
        self.total().saturating_sub(self.urgent_delayed + self.normal_delayed)
    }

    /// Counts `n` more on `lane`.
    pub fn add(&mut self, lane: QueueLane, n: u64) {
        match lane {
            QueueLane::Normal => self.normal += n,
            QueueLane::Urgent => self.urgent += n,
        }
    }
}

/// How releases are routed and paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LanePolicy {
    /// Slack when visible under which a reminder is urgent.
    pub urgent_below: Duration,
    /// See [`URGENT_LEAD`].
    pub lead: Duration,
    /// A paced reminder becomes visible at least this long before its `deliver_by` (see
    /// [`URGENT_RESERVE`]).
    pub reserve: Duration,
    /// The fleet's sustainable delivery rate, calls/s (the pace of the urgent lane).
    pub rate: f64,
}

/// Default of [`LanePolicy::reserve`]: a paced message visible later than this before its
/// deadline would meet the sender's own cutoff (queue delay 5 s, the shortest provider call
/// and the invocation margin) at the first denial; a pace that would go later than this has
/// lost anyway, and visible earlier it may still be served if the fleet runs ahead of `rate`.
pub const URGENT_RESERVE: Duration = Duration::from_secs(30);

impl LanePolicy {
    /// Defaults for a sustainable `rate`.
    pub fn new(rate: f64) -> Self {
        Self { urgent_below: URGENT_BELOW, lead: URGENT_LEAD, reserve: URGENT_RESERVE, rate }
    }

    /// The lane of a reminder released at `now` (it becomes visible at its `deliver_after`):
    /// the same rule as every other copy's ([`lane_at`]), so the lane a reminder travels on and
    /// the limiter class the sender gives it agree.
    pub fn lane(&self, deliver_after: DateTime<Utc>, deliver_by: DateTime<Utc>, now: DateTime<Utc>) -> QueueLane {
        lane_at(deliver_by, now.max(deliver_after), self.urgent_below)
    }
}

/// Paces one tick's urgent releases: call [`ReleasePlanner::pace`] for each urgent reminder in
/// `deliver_by` order (the scheduler sorts the whole tick's urgent reminders first).
///
/// The urgent lane is modelled as one server working at `rate` in deadline order: a reminder's
/// turn starts when it is visible and the lane is free (`cursor`), and it is made visible
/// `lead` before its turn. The cursor starts behind the urgent messages already visible or in
/// flight; delayed ones are paced releases of earlier ticks, each with a turn of its own.
#[derive(Debug, Clone)]
pub struct ReleasePlanner {
    policy: LanePolicy,
    cursor: DateTime<Utc>,
}

impl ReleasePlanner {
    /// A planner at `now` behind what the lanes hold.
    pub fn new(policy: LanePolicy, now: DateTime<Utc>, ahead: LaneDepths) -> Self {
        let ready = ahead.urgent.saturating_sub(ahead.urgent_delayed);
        let cursor = add(now, Duration::from_secs_f64((ready as f64 / policy.rate.max(1e-3)).min(86_400.0)));
        Self { policy, cursor }
    }

    /// A planner whose lane is free from `at` (a channel's pacer behind the urgent work the
    /// fleet's pacer found ahead: see [`Self::free_at`]).
    pub fn starting_at(policy: LanePolicy, at: DateTime<Utc>) -> Self {
        Self { policy, cursor: at }
    }

    /// When the lane is next free.
    pub fn free_at(&self) -> DateTime<Utc> {
        self.cursor
    }

    /// When each of `msgs` (a tick's urgent reminders, any order) becomes visible.
    ///
    /// The lane is served as one server at `rate`, earliest-deadline-first over *visible* time:
    /// whenever the lane is free it takes, of the reminders already visible (past their
    /// `deliver_after`), the one with the earliest `deliver_by`; when none is visible it waits
    /// for the next one. So it never idles while something is visible (a reminder due now is
    /// never held behind one that is not due for ten minutes), and among what is visible the
    /// tightest deadline goes first. Each reminder becomes visible `lead` before its turn,
    /// never before its `deliver_after`, never later than `reserve` before its `deliver_by`
    /// (unless that is before its `deliver_after`), at most 15 minutes from `now`.
    pub fn plan(&mut self, msgs: &[&ReminderMessage], now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let step = Duration::from_secs_f64((1.0 / self.policy.rate.max(1e-3)).min(86_400.0));
        let visible_at = |m: &ReminderMessage| now.max(m.deliver_after);
        let mut order: Vec<usize> = (0..msgs.len()).collect();
        order.sort_by_key(|&i| (visible_at(msgs[i]), msgs[i].deliver_by, msgs[i].reminder_id.clone()));
        let mut turns: Vec<DateTime<Utc>> = vec![now; msgs.len()];
        let mut ready: BinaryHeap<Reverse<(DateTime<Utc>, String, usize)>> = BinaryHeap::new();
        let mut next = 0;
        let mut t = self.cursor;
        while next < order.len() || !ready.is_empty() {
            if ready.is_empty() {
                // Nothing visible: the lane waits for the next reminder (and is free then).
                t = t.max(visible_at(msgs[order[next]]));
            }
            while next < order.len() && visible_at(msgs[order[next]]) <= t {
                let m = msgs[order[next]];
                ready.push(Reverse((m.deliver_by, m.reminder_id.to_string(), order[next])));
                next += 1;
            }
            let Some(Reverse((_, _, i))) = ready.pop() else { continue };
            turns[i] = t;
            t = add(t, step);
        }
        self.cursor = t;
        msgs.iter()
            .zip(turns)
            .map(|(m, start)| {
                let visible = visible_at(m);
                let paced = sub(start, self.policy.lead).max(visible);
                let latest = sub(m.deliver_by, self.policy.reserve).max(visible);
                paced.min(latest).min(add(now, MAX_DELAY))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::message;
    use chrono::TimeDelta;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T09:00:00Z").unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_copy_is_urgent_by_the_slack_it_has_when_visible() {
        let by = t0() + TimeDelta::minutes(20);
        assert_eq!(lane_at(by, t0(), URGENT_BELOW), QueueLane::Normal);
        assert_eq!(lane_at(by, t0() + TimeDelta::minutes(6), URGENT_BELOW), QueueLane::Urgent);
        // Past its deadline is the tightest there is.
        assert_eq!(lane_at(by, by + TimeDelta::minutes(1), URGENT_BELOW), QueueLane::Urgent);
    }

    fn paced(
        p: &mut ReleasePlanner,
        now: DateTime<Utc>,
        after: DateTime<Utc>,
        n: u64,
    ) -> Vec<(DateTime<Utc>, Duration)> {
        let msgs: Vec<ReminderMessage> = (0..n)
            .map(|k| {
                let by = after + TimeDelta::milliseconds(30_000 + (k as i64) * 10);
                message(&format!("r{k}"), after, by)
            })
            .collect();
        let refs: Vec<&ReminderMessage> = msgs.iter().collect();
        let visible = p.plan(&refs, now);
        msgs.iter().zip(visible).map(|(m, v)| (m.deliver_by, until(now, v))).collect()
    }

    #[test]
    fn tight_reminders_are_paced_in_deadline_order_and_never_past_their_reserve() {
        let mut p = ReleasePlanner::new(LanePolicy::new(100.0), t0(), LaneDepths::default());
        let mut last = Duration::ZERO;
        // 6,000 due now within 30–90 s, in deadline order: the k-th becomes visible near k/100 s.
        for (k, (by, delay)) in paced(&mut p, t0(), t0(), 6000).into_iter().enumerate() {
            assert!(delay >= last, "paced in order");
            let turn = Duration::from_secs_f64(k as f64 / 100.0);
            assert!(delay <= turn.saturating_sub(URGENT_LEAD) + Duration::from_millis(1), "k {k}: {delay:?}");
            assert!(add(t0(), delay) <= by - TimeDelta::seconds(30), "k {k}: visible {delay:?} inside the reserve");
            last = delay;
        }
    }

    /// Released ten minutes ahead (the scheduler's lookahead), the pace starts at the
    /// reminders' `deliver_after`, not at the tick.
    #[test]
    fn a_burst_released_ahead_is_paced_from_its_deliver_after() {
        let mut p = ReleasePlanner::new(LanePolicy::new(100.0), t0(), LaneDepths::default());
        let due = t0() + TimeDelta::minutes(10);
        for (k, (_, delay)) in paced(&mut p, t0(), due, 6000).into_iter().enumerate() {
            let turn = Duration::from_secs(600) + Duration::from_secs_f64(k as f64 / 100.0);
            assert!(
                delay + Duration::from_millis(1) >= turn.saturating_sub(URGENT_LEAD).max(Duration::from_secs(600)),
                "k {k}: {delay:?}"
            );
            assert!(delay <= turn, "k {k}: {delay:?}");
        }
    }

    /// Paced releases of an earlier tick are still delayed: they are not work ahead of a
    /// reminder due now.
    #[test]
    fn delayed_urgent_messages_do_not_hold_back_one_due_now() {
        let ahead = LaneDepths { normal: 0, urgent: 6000, urgent_delayed: 6000, normal_delayed: 0 };
        let mut p = ReleasePlanner::new(LanePolicy::new(100.0), t0(), ahead);
        let m = message("now", t0(), t0() + TimeDelta::seconds(60));
        assert_eq!(p.plan(&[&m], t0()), vec![t0()]);
        // 6,000 visible or in flight are: 60 s of work ahead, so it is made visible as late as
        // its reserve allows.
        let ahead = LaneDepths { normal: 0, urgent: 6000, urgent_delayed: 0, normal_delayed: 0 };
        let mut p = ReleasePlanner::new(LanePolicy::new(100.0), t0(), ahead);
        assert_eq!(p.plan(&[&m], t0()), vec![t0() + TimeDelta::seconds(30)]);
    }

    #[test]
    fn a_future_reminder_keeps_its_deliver_after_and_lanes_follow_slack_when_visible() {
        let policy = LanePolicy::new(100.0);
        let mut p = ReleasePlanner::new(policy, t0(), LaneDepths::default());
        let m = message("later", t0() + TimeDelta::minutes(10), t0() + TimeDelta::minutes(12));
        assert_eq!(policy.lane(m.deliver_after, m.deliver_by, t0()), QueueLane::Urgent);
        assert_eq!(p.plan(&[&m], t0()), vec![t0() + TimeDelta::seconds(600)], "never before deliver_after");
        let roomy = message("roomy", t0() + TimeDelta::minutes(10), t0() + TimeDelta::minutes(40));
        assert_eq!(
            policy.lane(roomy.deliver_after, roomy.deliver_by, t0()),
            QueueLane::Normal,
            "30 minutes of slack when visible"
        );
    }

    /// I9, the urgent lane is work-conserving: over random ticks (reminders visible now or up
    /// to 12 minutes out, windows of 1 to 14 minutes, work already ahead), every reminder
    /// becomes visible no later than its start under earliest-deadline-first with release
    /// times (a reference schedule computed here the slow way), within one second; never
    /// before its `deliver_after`, never more than 15 minutes out. With the monotone cursor of
    /// the first pacing put back, the first case with a tight reminder due later than a
    /// roomy one due now fails.
    #[test]
    fn i9_paced_reminders_are_visible_by_their_edf_start() {
        use proptest::prelude::*;
        let case = (0u64..200, proptest::collection::vec((0i64..720, 60i64..840), 1..60), 1u32..200);
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 1000,
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        });
        runner
            .run(&case, |(ahead, rows, rate)| {
                let rate = f64::from(rate);
                let msgs: Vec<ReminderMessage> = rows
                    .iter()
                    .enumerate()
                    .map(|(k, (after, window))| {
                        let after = t0() + TimeDelta::seconds(*after);
                        message(&format!("r{k:03}"), after, after + TimeDelta::seconds(*window))
                    })
                    .collect();
                let refs: Vec<&ReminderMessage> = msgs.iter().collect();
                let depths = LaneDepths { urgent: ahead, ..LaneDepths::default() };
                let got = ReleasePlanner::new(LanePolicy::new(rate), t0(), depths).plan(&refs, t0());
                // The reference: one server at `rate`, free after the work ahead; whenever free
                // it takes the visible reminder with the earliest deadline, else waits.
                let step = 1.0 / rate;
                let mut free = ahead as f64 / rate;
                let mut start = vec![f64::NAN; msgs.len()];
                let mut left: Vec<usize> = (0..msgs.len()).collect();
                let vis = |m: &ReminderMessage| (m.deliver_after - t0()).num_milliseconds().max(0) as f64 / 1000.0;
                while !left.is_empty() {
                    let earliest = left.iter().map(|&i| vis(&msgs[i])).fold(f64::INFINITY, f64::min);
                    free = free.max(earliest);
                    let pick = *left
                        .iter()
                        .filter(|&&i| vis(&msgs[i]) <= free)
                        .min_by_key(|&&i| (msgs[i].deliver_by, msgs[i].reminder_id.clone()))
                        .expect("one is visible");
                    start[pick] = free;
                    free += step;
                    left.retain(|&i| i != pick);
                }
                for (i, m) in msgs.iter().enumerate() {
                    let at = (got[i] - t0()).num_milliseconds() as f64 / 1000.0;
                    prop_assert!(got[i] >= m.deliver_after.max(t0()), "{}: visible before deliver_after", i);
                    prop_assert!(at <= 900.0 + 1e-9, "{}: more than 15 minutes out", i);
                    prop_assert!(
                        at <= start[i] + 1.0,
                        "reminder {} (visible {:.1} s, due by {:.1} s) becomes visible at {:.1} s, its EDF start is {:.1} s",
                        i,
                        vis(m),
                        (m.deliver_by - t0()).num_milliseconds() as f64 / 1000.0,
                        at,
                        start[i]
                    );
                }
                Ok(())
            })
            .unwrap();
    }

    /// Reminder A is visible in 10 minutes with a 1-minute window, B is due now with 12 minutes.
    /// By deadline A comes first, but B is the only work there is now: earliest-deadline-first
    /// over visible time serves B at once, never idling the lane for ten minutes.
    #[test]
    fn the_urgent_lane_never_idles_while_something_is_visible() {
        let mut p = ReleasePlanner::new(LanePolicy::new(100.0), t0(), LaneDepths::default());
        let a = message("a", t0() + TimeDelta::minutes(10), t0() + TimeDelta::minutes(11));
        let b = message("b", t0(), t0() + TimeDelta::minutes(12));
        let visible = p.plan(&[&a, &b], t0());
        assert!(
            until(t0(), visible[1]) <= Duration::from_secs(1),
            "B waited {:?} with the lane idle",
            until(t0(), visible[1])
        );
        assert_eq!(visible[0], a.deliver_after, "A still becomes visible at its deliver_after");
    }
}
