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
