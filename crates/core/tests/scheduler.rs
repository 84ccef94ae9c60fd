//! The scheduler service over the in-memory index and queue, with a manual clock.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use punctual_core::clock::{Clock, ManualClock};
use punctual_core::ports::Pending;
use punctual_core::scheduler::{Scheduler, SchedulerSettings};
use punctual_core::testing::{MemoryDueStore, MemoryRelease, SlowDueStore};
use punctual_core::{ReminderKind, RenewalId, TenantId};

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T13:55:00Z").unwrap().with_timezone(&Utc)
}

fn pending(n: u32, after: DateTime<Utc>, window_min: i64) -> Pending {
    let (tenant, renewal) = (TenantId::parse("acme").unwrap(), RenewalId::parse(format!("ren-{n}")).unwrap());
    Pending::new(tenant, renewal, ReminderKind::renewal_due(), after, after + TimeDelta::minutes(window_min))
}

fn scheduler(
    store: &MemoryDueStore,
    queue: &MemoryRelease,
    clock: &ManualClock,
    page: usize,
) -> Scheduler<MemoryDueStore, MemoryRelease, ManualClock> {
    let settings = SchedulerSettings { page_size: page, ..SchedulerSettings::default() };
    Scheduler::new(store.clone(), queue.clone(), clock.clone(), settings)
}

fn far() -> DateTime<Utc> {
    t0() + TimeDelta::hours(1)
}

#[tokio::test]
async fn releases_everything_due_by_the_horizon_with_delays_to_deliver_after() {
    let (store, queue, clock) = (MemoryDueStore::new(4), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..50 {
        store.insert(pending(n, t0() + TimeDelta::seconds(i64::from(n) * 10), 480)); // 13:55:00 .. 14:03:10
    }
    store.insert(pending(99, t0() + TimeDelta::minutes(30), 480)); // beyond the 10-minute lookahead
    let r = scheduler(&store, &queue, &clock, 7).tick(far()).await.unwrap();
    assert!(r.finished);
    assert_eq!(r.released, 50);
    let sent = queue.sent();
    for (m, delay) in &sent {
        assert_eq!(*delay, (m.deliver_after - t0()).to_std().unwrap_or_default().min(Duration::from_secs(900)));
        assert_eq!(m.first_enqueued, t0());
    }
    assert_eq!(r.watermark, Some(t0() + TimeDelta::minutes(10)));
    assert_eq!(store.state(&TenantId::parse("acme").unwrap(), &RenewalId::parse("ren-99").unwrap()), Some("scheduled"));
}

#[tokio::test]
async fn releases_within_a_page_in_deliver_by_order() {
    let (store, queue, clock) = (MemoryDueStore::new(1), MemoryRelease::default(), ManualClock::new(t0()));
    store.insert(pending(1, t0(), 600));
    store.insert(pending(2, t0(), 30));
    store.insert(pending(3, t0(), 120));
    scheduler(&store, &queue, &clock, 10).tick(far()).await.unwrap();
    let order: Vec<_> = queue.sent().iter().map(|(m, _)| m.renewal_id.to_string()).collect();
    assert_eq!(order, ["ren-2", "ren-3", "ren-1"]);
}

#[tokio::test]
async fn a_rerun_of_a_finished_window_sends_nothing_new() {
    let (store, queue, clock) = (MemoryDueStore::new(4), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..30 {
        store.insert(pending(n, t0(), 480));
    }
    let s = scheduler(&store, &queue, &clock, 5);
    assert_eq!(s.tick(far()).await.unwrap().released, 30);
    let again = s.tick(far()).await.unwrap();
    assert_eq!((again.released, again.finished), (0, true));
    assert_eq!(queue.sent().len(), 30);
}

#[tokio::test]
async fn a_tick_stops_before_its_deadline_and_the_next_one_resumes() {
    let (store, queue, clock) = (MemoryDueStore::new(2), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..40 {
        store.insert(pending(n, t0(), 480));
    }
    let s = scheduler(&store, &queue, &clock, 5);
    // Already inside the safety margin: nothing is attempted, nothing is lost.
    let stopped = s.tick(clock.now() + TimeDelta::seconds(5)).await.unwrap();
    assert_eq!((stopped.released, stopped.finished, stopped.watermark), (0, false, None));
    let resumed = s.tick(far()).await.unwrap();
    assert_eq!((resumed.released, resumed.finished), (40, true));
}

#[tokio::test]
async fn a_two_hour_pause_is_caught_up_and_what_is_past_its_deadline_expires() {
    let (store, queue, clock) = (MemoryDueStore::new(3), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..10 {
        store.insert(pending(n, t0(), 60)); // deadline 14:55: missed by the pause
    }
    for n in 10..25 {
        store.insert(pending(n, t0(), 240)); // deadline 17:55: still deliverable
    }
    clock.advance(Duration::from_secs(2 * 3600));
    let r = scheduler(&store, &queue, &clock, 4).tick(clock.now() + TimeDelta::minutes(5)).await.unwrap();
    assert_eq!((r.released, r.expired_missed, r.finished), (15, 10, true));
    assert!(queue.sent().iter().all(|(m, d)| m.deliver_by > clock.now() && d.is_zero()));
    assert_eq!(store.state(&TenantId::parse("acme").unwrap(), &RenewalId::parse("ren-3").unwrap()), Some("expired"));
    assert_eq!(r.oldest_due_age, Duration::from_secs(2 * 3600));
}

#[tokio::test]
async fn the_projected_breach_fires_when_drain_exceeds_the_smallest_slack() {
    let (store, queue, clock) = (MemoryDueStore::new(1), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..500 {
        store.insert(pending(n, t0(), 2)); // 2-minute windows
    }
    let settings = SchedulerSettings { sustainable_rate: 2.0, page_size: 100, ..SchedulerSettings::default() };
    let r = Scheduler::new(store.clone(), queue.clone(), clock.clone(), settings).tick(far()).await.unwrap();
    assert_eq!(r.backlog, 500);
    assert_eq!(r.projected_drain, Duration::from_secs(250));
    assert_eq!(r.min_slack, Some(Duration::from_secs(120)));
    assert!(r.projected_breach);
    let (store, queue) = (MemoryDueStore::new(1), MemoryRelease::default());
    store.insert(pending(1, t0(), 60));
    let calm = Scheduler::new(store, queue, clock.clone(), settings).tick(far()).await.unwrap();
    assert!(!calm.projected_breach);
}

/// Tight reminders go to the urgent lane, paced in deadline order at the sustainable rate (the
/// k-th visible about `k / rate − lead` after release); roomy ones to the normal lane at their
/// `deliver_after`.
#[tokio::test]
async fn tight_reminders_are_released_to_the_urgent_lane_paced_in_deadline_order() {
    use punctual_core::lanes::QueueLane;
    let (store, queue, clock) = (MemoryDueStore::new(2), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..300 {
        // 300 due now within 2–5 minutes, 300 with 8 hours to spare.
        store.insert(pending(n, t0(), 2 + i64::from(n % 4)));
        store.insert(pending(1000 + n, t0(), 480));
    }
    let settings = SchedulerSettings { page_size: 1000, sustainable_rate: 10.0, ..SchedulerSettings::default() };
    let r = Scheduler::new(store.clone(), queue.clone(), clock.clone(), settings).tick(far()).await.unwrap();
    assert_eq!((r.released, r.released_urgent), (600, 300));
    assert_eq!((r.lanes.normal, r.lanes.urgent), (300, 300));
    let releases = queue.releases();
    let urgent: Vec<_> = releases.iter().filter(|x| x.lane == QueueLane::Urgent).collect();
    assert!(urgent.iter().all(|x| x.message.deliver_by - t0() <= TimeDelta::minutes(5)));
    assert!(releases.iter().filter(|x| x.lane == QueueLane::Normal).all(|x| x.delay.is_zero()));
    // Paced: visible in deadline order, the last about 300 / 10 − 5 = 25 s after release, and
    // never later than 5 s before its deadline.
    assert!(urgent.windows(2).all(|w| w[0].delay <= w[1].delay && w[0].message.deliver_by <= w[1].message.deliver_by));
    let last = urgent.last().unwrap().delay;
    assert!((Duration::from_secs(24)..=Duration::from_secs(25)).contains(&last), "{last:?}");
    assert!(urgent.iter().all(|x| t0() + x.delay + TimeDelta::seconds(5) <= x.message.deliver_by));
}

/// Pages come in `deliver_after` order, not deadline order: the urgent lane's pace must follow
/// deadlines across the whole tick, not page by page (here the tightest rows sort last).
#[tokio::test]
async fn the_urgent_pace_follows_deadlines_across_pages() {
    use punctual_core::lanes::QueueLane;
    let (store, queue, clock) = (MemoryDueStore::new(1), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..600u32 {
        // The same deliver_after; ids ascending, deadlines descending (10 min … 1 min).
        let tenant = TenantId::parse("acme").unwrap();
        let renewal = RenewalId::parse(format!("ren-{n:04}")).unwrap();
        let by = t0() + TimeDelta::seconds(600 - i64::from(n) * 9 / 10);
        store.insert(Pending::new(tenant, renewal, ReminderKind::renewal_due(), t0(), by));
    }
    let settings = SchedulerSettings { page_size: 50, sustainable_rate: 10.0, ..SchedulerSettings::default() };
    let r = Scheduler::new(store.clone(), queue.clone(), clock.clone(), settings).tick(far()).await.unwrap();
    assert_eq!((r.released, r.released_urgent), (600, 600), "{r:?}");
    let mut urgent: Vec<_> = queue.releases().into_iter().filter(|x| x.lane == QueueLane::Urgent).collect();
    urgent.sort_by_key(|x| x.message.deliver_by);
    assert!(
        urgent.windows(2).all(|w| w[0].delay <= w[1].delay),
        "a later deadline became visible before an earlier one"
    );
}

/// The lanes' depths only place the pace: when they cannot be read the tick still releases.
#[tokio::test]
async fn a_tick_releases_when_the_lane_depths_cannot_be_read() {
    use punctual_core::lanes::LaneDepths;
    use punctual_core::ports::{QueueError, Release, ReleaseQueue};
    #[derive(Clone, Default)]
    struct NoDepth(MemoryRelease);
    impl ReleaseQueue for NoDepth {
        async fn release(&self, batch: &[Release]) -> Result<Vec<bool>, QueueError> {
            self.0.release(batch).await
        }
        async fn depth(&self) -> Result<LaneDepths, QueueError> {
            Err(QueueError::Unknown("GetQueueAttributes throttled".into()))
        }
    }
    let (store, clock) = (MemoryDueStore::new(1), ManualClock::new(t0()));
    store.insert(pending(1, t0(), 5));
    store.insert(pending(2, t0(), 480));
    let queue = NoDepth::default();
    let settings = SchedulerSettings { page_size: 10, ..SchedulerSettings::default() };
    let r = Scheduler::new(store.clone(), queue.clone(), clock.clone(), settings).tick(far()).await;
    assert_eq!(r.map(|r| r.released).ok(), Some(2));
    assert_eq!(queue.0.sent().len(), 2);
}

/// A wave released ten minutes ahead cannot start draining before its `deliver_after`: the
/// projection must count from there. 1,800 reminders due in ten minutes with one-minute windows
/// at 10/s need three minutes: most will be late, although three minutes is less than the
/// eleven minutes of slack they have at release.
#[tokio::test]
async fn a_wave_released_ahead_projects_a_breach_from_its_deliver_after() {
    let (store, queue, clock) = (MemoryDueStore::new(2), MemoryRelease::default(), ManualClock::new(t0()));
    let due = t0() + TimeDelta::minutes(10);
    for n in 0..1_800 {
        store.insert(pending(n, due, 1));
    }
    let settings = SchedulerSettings { page_size: 500, sustainable_rate: 10.0, ..SchedulerSettings::default() };
    let r = Scheduler::new(store.clone(), queue.clone(), clock.clone(), settings).tick(far()).await.unwrap();
    assert_eq!(r.released, 1_800);
    assert!(r.projected_breach, "3 minutes of work in a 1-minute window: {r:?}");
    // And a wave that fits is no breach.
    let (store, queue) = (MemoryDueStore::new(2), MemoryRelease::default());
    for n in 0..500 {
        store.insert(pending(n, due, 1));
    }
    let r = Scheduler::new(store.clone(), queue.clone(), clock.clone(), settings).tick(far()).await.unwrap();
    assert!(!r.projected_breach, "50 s of work in a 1-minute window");
}

/// Work released ahead of its `deliver_after` (delayed on the normal lane) is not work ahead of
/// a reminder due now: a short-notice renewal behind 12,000 delayed messages projects no breach.
#[tokio::test]
async fn delayed_work_is_not_ahead_of_a_reminder_due_now() {
    let (store, queue, clock) = (MemoryDueStore::new(2), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..12_000 {
        store.insert(pending(n, t0() + TimeDelta::seconds(300 + i64::from(n % 300)), 240));
    }
    let settings = SchedulerSettings { page_size: 5_000, ..SchedulerSettings::default() };
    let first = Scheduler::new(store.clone(), queue.clone(), clock.clone(), settings).tick(far()).await.unwrap();
    assert_eq!(first.released, 12_000);
    store.prune();
    let tight = Pending::new(
        TenantId::parse("acme").unwrap(),
        RenewalId::parse("ren-short-notice").unwrap(),
        ReminderKind::renewal_due(),
        t0(),
        t0() + TimeDelta::seconds(100),
    );
    store.insert(tight);
    let r = Scheduler::new(store.clone(), queue.clone(), clock.clone(), settings).tick(far()).await.unwrap();
    assert_eq!(r.released, 1);
    assert!(!r.projected_breach, "12,000 messages delayed 5-10 minutes are not ahead of a reminder due now: {r:?}");
}

/// Virtual time on tokio's paused clock: requests that sleep overlap as they would on the wire.
#[derive(Clone)]
struct TokioClock {
    t0: DateTime<Utc>,
    start: tokio::time::Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        punctual_core::clock::add(self.t0, self.start.elapsed())
    }
    fn sleep(&self, d: Duration) -> impl std::future::Future<Output = ()> + Send {
        tokio::time::sleep(d)
    }
}

/// Releases with the instant each was sent.
type Released = std::sync::Arc<std::sync::Mutex<Vec<(DateTime<Utc>, punctual_core::ports::Release)>>>;

/// The send queues with SQS's latency (a `SendMessageBatch` 20 ms), recording when each
/// message was released.
#[derive(Clone)]
struct SlowRelease {
    clock: TokioClock,
    sent: Released,
}

impl punctual_core::ports::ReleaseQueue for SlowRelease {
    async fn release(
        &self,
        batch: &[punctual_core::ports::Release],
    ) -> Result<Vec<bool>, punctual_core::ports::QueueError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let at = self.clock.now();
        self.sent.lock().unwrap().extend(batch.iter().map(|r| (at, r.clone())));
        Ok(vec![true; batch.len()])
    }
    async fn depth(&self) -> Result<punctual_core::lanes::LaneDepths, punctual_core::ports::QueueError> {
        Ok(punctual_core::lanes::LaneDepths::default())
    }
}

/// One tick after an outage of `outage_secs` with one renewal due a second (one-hour windows,
/// the lookahead's ten minutes beyond), over 16 shards at DynamoDB's and SQS's latencies. Without
/// `missed_too` only the renewals still deliverable are in the index (the same live renewals,
/// no missed backlog). Returns the tick's report, when the last live
/// reminder due at the start was released, and how many were released after their `deliver_by`.
async fn tick_after_outage(
    outage_secs: i64,
    missed_too: bool,
) -> (punctual_core::scheduler::TickReport, Duration, usize) {
    let resume = t0();
    let clock = TokioClock { t0: resume, start: tokio::time::Instant::now() };
    let store = MemoryDueStore::new(16);
    for s in 0..outage_secs + 600 {
        let after = resume - TimeDelta::seconds(outage_secs) + TimeDelta::seconds(s);
        if missed_too || after + TimeDelta::hours(1) > resume {
            store.insert(pending(s as u32, after, 60));
        }
    }
    let queue = SlowRelease { clock: clock.clone(), sent: Default::default() };
    let settings = SchedulerSettings { page_size: 100, ..SchedulerSettings::default() };
    let due = SlowDueStore::new(store.clone(), clock.clone(), Duration::from_millis(15), Duration::from_millis(10));
    let scheduler = Scheduler::new(due, queue.clone(), clock.clone(), settings);
    // The scheduler function's timeout: 120 s.
    let r = scheduler.tick(resume + TimeDelta::seconds(120)).await.unwrap();
    let sent = queue.sent.lock().unwrap().clone();
    let last = sent.iter().filter(|(_, x)| x.message.deliver_after <= resume).map(|(at, _)| *at).max().unwrap();
    let crossed = sent.iter().filter(|(at, x)| *at >= x.message.deliver_by).count();
    (r, (last - resume).to_std().unwrap(), crossed)
}

/// After a three-hour outage the first tick finds 7,200 renewals past their deadline and 4,200
/// still deliverable, the tightest with seconds left. Expiring the missed ones must not hold
/// back the live ones: the last live reminder due now is on its lane no later than without the
/// backlog, but for the time it takes to read past it (72 pages of 15 ms), and none is released
/// after its `deliver_by` or expires while it waits. (One `mark_expired` at a time, they waited
/// 77 s behind 7,200 × 10 ms: 66 expired in the tick and 9 went out past their deadline.)
#[tokio::test(start_paused = true)]
async fn expiring_a_missed_backlog_does_not_hold_back_live_reminders() {
    let (r, waited, crossed) = tick_after_outage(3 * 3600, true).await;
    let (alone, baseline, _) = tick_after_outage(3 * 3600, false).await;
    eprintln!(
        "after the backlog: last live reminder due now released {:.1} s after the tick started (without the \
         backlog {:.1} s); {crossed} released after their deliver_by; {} expired (7,200 missed before the tick)",
        waited.as_secs_f64(),
        baseline.as_secs_f64(),
        r.expired_missed,
    );
    assert_eq!(alone.expired_missed, 0);
    assert!(
        waited <= baseline + Duration::from_millis(1_500),
        "live reminders waited {waited:?} behind the expiries (alone {baseline:?})"
    );
    assert_eq!(crossed, 0, "live reminders released after their deliver_by");
    // Those whose deadline passed while the index was read (the first ~2 s) aside, every renewal
    // deliverable when the tick started is released.
    assert!(r.expired_missed <= 7_202 && r.released + r.expired_missed == 11_400, "{r:?}");
    assert!(r.finished);
}

/// The SLO's verdicts (met + breached) in what the scheduler's ticks and the sender's records
/// publish.
fn verdicts(m: &punctual_core::metrics::Metrics) -> f64 {
    m.slo_total(punctual_core::metrics::name::SLO_MET) + m.slo_total(punctual_core::metrics::name::SLO_BREACHED)
}

/// A tick that sends a reminder and fails to mark it (the renewals table throttled the write),
/// with a sender over `ledger`; returns the scheduler, its queue and the failed tick's metrics.
async fn release_whose_mark_fails(
    clock: &ManualClock,
    ledger: &punctual_core::testing::MemoryLedger,
) -> (Scheduler<SlowDueStore<ManualClock>, MemoryRelease, ManualClock>, MemoryRelease, punctual_core::metrics::Metrics)
{
    let store = MemoryDueStore::new(1);
    store.insert(pending(1, t0(), 2)); // due now, a two-minute window
    let due = SlowDueStore::new(store, clock.clone(), Duration::ZERO, Duration::ZERO);
    due.fail_mark(1);
    let queue = MemoryRelease::default();
    let scheduler =
        Scheduler::new(due, queue.clone(), clock.clone(), SchedulerSettings::default()).with_ledger(ledger.clone());
    let mut partial = punctual_core::scheduler::TickReport::default();
    assert!(scheduler.tick_into(far(), &mut partial).await.is_err(), "the mark failed");
    assert_eq!(queue.sent().len(), 1, "sent before the mark");
    (scheduler, queue, punctual_core::metrics::scheduler::failure_metrics(&partial))
}

/// Processes the one released copy with a sender over `ledger` whose provider accepts it, and
/// returns the record's metrics.
async fn sender_processes(
    clock: &ManualClock,
    ledger: &punctual_core::testing::MemoryLedger,
    queue: &MemoryRelease,
) -> punctual_core::metrics::Metrics {
    use punctual_core::provider::ProviderOutcome;
    let accepted = ProviderOutcome::Accepted { status: 202, receipt: None, budget: None };
    let (sender, _, _) =
        punctual_core::testing::scripted_sender(ledger.clone(), clock, Duration::from_millis(50), vec![accepted], 7);
    let body = queue.sent()[0].0.encode();
    let received = punctual_core::sender::Received { message_id: "m-1", body: &body };
    let p = sender.process(received, far()).await.unwrap();
    let mut m = punctual_core::metrics::Metrics::new();
    punctual_core::metrics::sender::record(&mut m, &p, &punctual_core::slo::SloPolicy::default());
    m
}

/// A tick that fails after reading the pause says whether one holds (here none: 0), where a
/// tick that failed before reading it says nothing of it (no series: a guess of 0 would clear
/// a pause page the failing scheduler cannot see).
#[tokio::test]
async fn a_failed_tick_reports_the_pause_only_once_it_has_read_it() {
    let clock = ManualClock::new(t0());
    let ledger = punctual_core::testing::MemoryLedger::new();
    let (_, _, m) = release_whose_mark_fails(&clock, &ledger).await;
    assert_eq!((m.total("Paused"), m.total("FleetPaused")), (0.0, 0.0));
    let written = |m: &punctual_core::metrics::Metrics, name: &str| {
        m.lines("punctual", "scheduler", 0).iter().any(|l| l.contains(&format!("\"{name}\"")))
    };
    assert!(written(&m, "FleetPaused") && written(&m, "Paused"), "written as 0 once read");
    let settings = SchedulerSettings { lookahead: Duration::from_secs(7 * 24 * 3600), ..SchedulerSettings::default() };
    let s = Scheduler::new(MemoryDueStore::new(1), MemoryRelease::default(), clock.clone(), settings);
    let mut partial = punctual_core::scheduler::TickReport::default();
    assert!(s.tick_into(far(), &mut partial).await.is_err(), "a lookahead beyond the cap is refused");
    let m = punctual_core::metrics::scheduler::failure_metrics(&partial);
    assert!(written(&m, "SchedulerTickFailed"), "the failure itself is written");
    assert!(!written(&m, "FleetPaused") && !written(&m, "Paused"), "not read, not written");
}

/// A mark that fails after its message was sent leaves the row pending. The sender delivers
/// the copy and judges it (met); a later tick finds the row past its deadline and must not
/// expire it with a second verdict (breached) for the same reminder.
#[tokio::test]
async fn a_delivered_release_whose_mark_failed_gets_no_second_verdict_at_expiry() {
    let clock = ManualClock::new(t0());
    let ledger = punctual_core::testing::MemoryLedger::new();
    let (scheduler, queue, mut m) = release_whose_mark_fails(&clock, &ledger).await;
    m.merge(&sender_processes(&clock, &ledger, &queue).await);
    assert_eq!(verdicts(&m), 1.0, "the sender's");
    clock.advance(Duration::from_secs(180));
    let r = scheduler.tick(far()).await.unwrap();
    m.merge(&punctual_core::metrics::scheduler::metrics(&r));
    assert_eq!(verdicts(&m), 1.0, "one reminder, one verdict: {r:?}");
}

/// The same, with the copy still on its lane when the later tick expires the row (the senders
/// were slow, paused or down): the scheduler judges it at release, and the sender, meeting the
/// copy past its deadline, must not judge it again.
#[tokio::test]
async fn a_queued_release_whose_mark_failed_is_judged_once_when_it_expires() {
    let clock = ManualClock::new(t0());
    let ledger = punctual_core::testing::MemoryLedger::new();
    let (scheduler, queue, mut m) = release_whose_mark_fails(&clock, &ledger).await;
    clock.advance(Duration::from_secs(180));
    let r = scheduler.tick(far()).await.unwrap();
    m.merge(&punctual_core::metrics::scheduler::metrics(&r));
    m.merge(&sender_processes(&clock, &ledger, &queue).await);
    assert_eq!(verdicts(&m), 1.0, "one reminder, one verdict: {r:?}");
}

/// A renewal cancelled at send and then active again: the import re-armed its row, and the
/// next tick finds it past its deadline (the scheduler was paused, or the re-arm came late).
/// The reminder was owed again and missed: the tick expires it (`missed_schedule_window`, one
/// verdict), rather than reading the old cancellation as a judgement of this release.
#[tokio::test]
async fn a_re_armed_row_found_past_its_deadline_is_expired() {
    use punctual_core::ports::{Ledger, OwnerToken};
    let clock = ManualClock::new(t0());
    let ledger = punctual_core::testing::MemoryLedger::new();
    let row = pending(1, t0() - TimeDelta::minutes(10), 5); // owed until 5 minutes ago
    let copy = punctual_core::scheduler::message_for(&row, t0() - TimeDelta::minutes(10));
    let owner = OwnerToken::new("sender");
    let at = t0() - TimeDelta::minutes(9);
    ledger.claim(&copy, &owner, at, at + TimeDelta::seconds(30)).await.unwrap();
    let cancel = punctual_core::testing::ending(
        punctual_core::ReminderState::Cancelled,
        punctual_core::ReasonCode::Cancelled,
        0,
        None,
    );
    ledger.settle(&copy, Some(&owner), at, &cancel).await.unwrap();
    let store = MemoryDueStore::new(1);
    store.insert(row);
    let scheduler = Scheduler::new(store, MemoryRelease::default(), clock.clone(), SchedulerSettings::default())
        .with_ledger(ledger.clone());
    let r = scheduler.tick(far()).await.unwrap();
    assert_eq!((r.expired_missed, r.judged_before), (1, 0), "{r:?}");
    let rec = ledger.get(&copy.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.state, punctual_core::ReminderState::Expired);
}

/// The renewal's channel rides in the released message (what a channel's own queue is chosen
/// by); a row without one releases a message without one.
#[tokio::test]
async fn a_released_message_carries_its_renewals_channel() {
    let (store, queue, clock) = (MemoryDueStore::new(2), MemoryRelease::default(), ManualClock::new(t0()));
    store.insert(Pending { channel: Some("sms".into()), ..pending(1, t0(), 480) });
    store.insert(Pending { channel: Some("email".into()), ..pending(2, t0(), 480) });
    store.insert(pending(3, t0(), 480));
    let r = scheduler(&store, &queue, &clock, 10).tick(far()).await.unwrap();
    assert_eq!(r.released, 3);
    let mut got: Vec<(String, Option<String>)> =
        queue.sent().iter().map(|(m, _)| (m.renewal_id.as_str().to_owned(), m.channel.clone())).collect();
    got.sort();
    assert_eq!(
        got,
        [("ren-1".into(), Some("sms".into())), ("ren-2".into(), Some("email".into())), ("ren-3".into(), None)]
    );
}

/// A channel whose credentials the provider refused is reported every tick, whatever else the
/// tick does: a tick under the fleet's own pause still reports it, an operator's pause of a
/// channel is not a trip (it pages only once it holds due work), and a trip does not hold the
/// release (the sender holds that channel's messages, the other channels' go out).
#[tokio::test]
async fn every_tick_reports_the_channels_the_sender_tripped_and_still_releases() {
    use punctual_core::pause::{PauseGate, SENDER_OWNER};
    use punctual_core::ports::{Control, Pause};
    use punctual_core::testing::MemoryControl;
    let (store, queue, clock) = (MemoryDueStore::new(1), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..5 {
        store.insert(pending(n, t0(), 240));
    }
    let (fleet, email, sms, push) =
        (MemoryControl::default(), MemoryControl::default(), MemoryControl::default(), MemoryControl::default());
    let pause = |owner: &str| Pause { reason: "r".into(), owner: owner.into(), since: t0() };
    sms.set_pause(Some(&pause(SENDER_OWNER)), SENDER_OWNER).await.unwrap();
    push.set_pause(Some(&pause("oncall@example.com")), "oncall@example.com").await.unwrap();
    let gate = |c: &MemoryControl| PauseGate::new(c.clone(), clock.clone(), Duration::ZERO);
    let s = scheduler(&store, &queue, &clock, 10).with_pause(gate(&fleet)).with_channel_switches(vec![
        ("email".into(), gate(&email)),
        ("sms".into(), gate(&sms)),
        ("push".into(), gate(&push)),
    ]);
    let r = s.tick(far()).await.unwrap();
    assert_eq!(r.channels_tripped, vec!["sms".to_owned()]);
    assert_eq!(r.released, 5, "a channel's trip holds no release");
    let m = punctual_core::metrics::scheduler::metrics(&r);
    assert_eq!(m.total("ChannelsTripped"), 1.0);
    let failed = punctual_core::metrics::scheduler::failure_metrics(&r);
    assert_eq!(failed.total("ChannelsTripped"), 1.0, "a failing tick does not clear the page");
    fleet.set_pause(Some(&pause("oncall@example.com")), "oncall@example.com").await.unwrap();
    let r = s.tick(far()).await.unwrap();
    assert!(r.paused);
    assert_eq!(r.channels_tripped, vec!["sms".to_owned()], "the fleet's pause hides no channel's trip");
    let failed = punctual_core::metrics::scheduler::failure_metrics(&r);
    assert_eq!(failed.total("Paused"), 1.0, "a failing tick does not read as the pause's end");
    assert_eq!(failed.total("FleetPaused"), 0.0, "an operator's pause is not the sender's");
    fleet.set_pause(Some(&pause(SENDER_OWNER)), SENDER_OWNER).await.unwrap();
    let r = s.tick(far()).await.unwrap();
    let failed = punctual_core::metrics::scheduler::failure_metrics(&r);
    assert_eq!(failed.total("FleetPaused"), 1.0, "a failing tick does not clear the sender's pause page");
    sms.set_pause(None, "oncall@example.com").await.unwrap();
    fleet.set_pause(None, "oncall@example.com").await.unwrap();
    let r = s.tick(far()).await.unwrap();
    assert!(r.channels_tripped.is_empty());
    assert_eq!(
        punctual_core::metrics::scheduler::metrics(&r).total("ChannelsTripped"),
        0.0,
        "written as 0, not left out"
    );
}

fn on(channel: &str, mut p: Pending) -> Pending {
    p.channel = Some(channel.to_owned());
    p
}

/// A channel's morning is projected at its own provider's rate: 600 SMS reminders with
/// 2-minute windows at 2/s cannot all go out (240 can), which the fleet's 97/s hides. Email's
/// equal share beside them is no breach at its rate.
#[tokio::test]
async fn a_channels_renewals_are_projected_at_its_own_rate() {
    let load = |store: &MemoryDueStore, channel: &str, from: u32| {
        for n in from..from + 600 {
            store.insert(on(channel, pending(n, t0(), 2)));
        }
    };
    let settings = SchedulerSettings { page_size: 1000, ..SchedulerSettings::default() };
    let clock = ManualClock::new(t0());
    let tick = async |channel: &str, rates: Vec<(String, f64)>| {
        let (store, queue) = (MemoryDueStore::new(1), MemoryRelease::default());
        load(&store, channel, 0);
        Scheduler::new(store, queue, clock.clone(), settings).with_channel_rates(rates).tick(far()).await.unwrap()
    };
    let rates = || vec![("email".to_owned(), 97.0), ("sms".to_owned(), 2.0)];
    assert!(!tick("sms", Vec::new()).await.projected_breach, "at the fleet's rate it fits");
    let sms = tick("sms", rates()).await;
    assert!(sms.projected_breach, "at SMS's own rate it does not");
    assert_eq!(sms.breach_channels, ["sms"], "the tick names the channel");
    assert!(!tick("email", rates()).await.projected_breach, "email at its rate fits");
}

/// A channel's urgent reminders are paced at its own rate: SMS's 1 in 0.5 s, email's at the
/// fleet's 100/s beside them, each in deadline order from now.
#[tokio::test]
async fn a_channels_urgent_reminders_are_paced_at_its_own_rate() {
    let (store, queue, clock) = (MemoryDueStore::new(1), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..20 {
        store.insert(on(if n % 2 == 0 { "sms" } else { "email" }, pending(n, t0(), 5)));
    }
    let settings = SchedulerSettings {
        page_size: 100,
        sustainable_rate: 100.0,
        urgent_lead: Duration::ZERO,
        ..SchedulerSettings::default()
    };
    let r = Scheduler::new(store, queue.clone(), clock.clone(), settings)
        .with_channel_rates(vec![("sms".to_owned(), 2.0)])
        .tick(far())
        .await
        .unwrap();
    assert_eq!(r.released_urgent, 20);
    let delays = |channel: &str| {
        let mut d: Vec<Duration> =
            queue.sent().iter().filter(|(m, _)| m.channel.as_deref() == Some(channel)).map(|(_, d)| *d).collect();
        d.sort();
        d
    };
    let sms = delays("sms");
    assert_eq!(sms.len(), 10);
    assert_eq!(sms.last().copied(), Some(Duration::from_millis(4500)), "the tenth SMS turn at 9 × 0.5 s: {sms:?}");
    let email = delays("email");
    assert!(email.last().unwrap() <= &Duration::from_millis(100), "email at the fleet's pace: {email:?}");
}

/// The fleet's own rate still binds channel traffic: a fleet whose senders sustain 10/s cannot
/// carry 3,000 email with 2-minute windows though email's quota could (found by review).
#[tokio::test]
async fn the_fleets_rate_still_binds_a_channels_projection() {
    let (store, queue, clock) = (MemoryDueStore::new(1), MemoryRelease::default(), ManualClock::new(t0()));
    for n in 0..3000 {
        store.insert(on("email", pending(n, t0(), 2)));
    }
    let settings = SchedulerSettings { page_size: 1000, sustainable_rate: 10.0, ..SchedulerSettings::default() };
    let r = Scheduler::new(store, queue, clock.clone(), settings)
        .with_channel_rates(vec![("email".to_owned(), 97.0), ("sms".to_owned(), 24.0)])
        .tick(far())
        .await
        .unwrap();
    assert!(r.projected_breach);
}

/// A channel's urgent pace starts behind the urgent work already ready on the lane, as the
/// fleet's does (found by review: it started from now), and is never faster than the fleet's.
#[tokio::test]
async fn a_channels_urgent_pace_starts_behind_the_ready_urgent_work() {
    use punctual_core::ports::{Release, ReleaseQueue};
    let (store, queue, clock) = (MemoryDueStore::new(1), MemoryRelease::default(), ManualClock::new(t0()));
    let ready: Vec<Release> = (0..500)
        .map(|n| Release {
            message: punctual_core::testing::message(&format!("old-{n}"), t0(), t0() + TimeDelta::minutes(30)),
            delay: Duration::ZERO,
            lane: punctual_core::lanes::QueueLane::Urgent,
        })
        .collect();
    queue.release(&ready).await.unwrap();
    for n in 0..10 {
        store.insert(on("email", pending(n, t0(), 5)));
    }
    let settings = SchedulerSettings {
        page_size: 100,
        sustainable_rate: 100.0,
        urgent_lead: Duration::ZERO,
        ..SchedulerSettings::default()
    };
    Scheduler::new(store, queue.clone(), clock.clone(), settings)
        .with_channel_rates(vec![("email".to_owned(), 970.0)])
        .tick(far())
        .await
        .unwrap();
    let mut new: Vec<Duration> =
        queue.sent().iter().filter(|(m, _)| m.channel.as_deref() == Some("email")).map(|(_, d)| *d).collect();
    new.sort();
    assert_eq!(new.len(), 10);
    assert!(new[0] >= Duration::from_secs(4), "behind 500 ready at 100/s: {new:?}");
    assert!(new[9] - new[0] >= Duration::from_millis(89), "at the fleet's 100/s, not email's 970/s: {new:?}");
}
