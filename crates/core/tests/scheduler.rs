//! The scheduler service over the in-memory index and queue, with a manual clock.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use punctual_core::clock::{Clock, ManualClock};
use punctual_core::ports::Pending;
use punctual_core::scheduler::{Scheduler, SchedulerSettings};
use punctual_core::testing::{MemoryDueStore, MemoryRelease};
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
