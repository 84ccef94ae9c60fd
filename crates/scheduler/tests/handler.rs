//! Scheduler handler tests: the sample EventBridge events through the handler over the
//! in-memory index and queue.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::path::Path;
use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use chrono::{DateTime, TimeDelta, Utc};
use lambda_runtime::{Context, LambdaEvent};
use punctual_core::clock::{Clock, ManualClock};
use punctual_core::ports::Pending;
use punctual_core::scheduler::{Scheduler, SchedulerSettings};
use punctual_core::testing::{MemoryDueStore, MemoryRelease, SlowDueStore};
use punctual_core::{ReminderKind, RenewalId, TenantId};
use punctual_scheduler::handler::{handle, metrics};

fn load(name: &str) -> EventBridgeEvent {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/scheduler").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn pending(n: u32, after: DateTime<Utc>, window: TimeDelta) -> Pending {
    let (tenant, renewal) = (TenantId::parse("acme").unwrap(), RenewalId::parse(format!("ren-{n}")).unwrap());
    Pending::new(tenant, renewal, ReminderKind::renewal_due(), after, after + window)
}

fn context(clock: &ManualClock) -> Context {
    let mut ctx = Context::default();
    ctx.deadline = u64::try_from((clock.now() + TimeDelta::seconds(60)).timestamp_millis()).unwrap();
    ctx
}

#[tokio::test]
async fn a_scheduled_tick_releases_what_is_due_and_reports_metrics() {
    let event = load("tick.json");
    let clock = ManualClock::new(event.time.unwrap());
    let (store, queue) = (MemoryDueStore::new(4), MemoryRelease::default());
    for n in 0..12 {
        store.insert(pending(n, clock.now() + TimeDelta::minutes(5), TimeDelta::hours(8)));
    }
    let scheduler = Scheduler::new(store, queue.clone(), clock.clone(), SchedulerSettings::default());
    let report = handle(&scheduler, LambdaEvent::new(event, context(&clock))).await.unwrap();
    assert_eq!((report.released, report.finished), (12, true));
    assert!(queue.sent().iter().all(|(_, d)| d.as_secs() == 300));
    let lines = metrics(&report).lines("punctual", "scheduler", 0).join("\n");
    assert!(lines.contains("\"Released\":12.0") && lines.contains("\"ProjectedDeadlineBreach\":0.0"), "{lines}");
}

#[tokio::test]
async fn a_catch_up_tick_releases_the_deliverable_and_expires_the_rest() {
    let event = load("catch-up.json");
    let clock = ManualClock::new(event.time.unwrap());
    let (store, queue) = (MemoryDueStore::new(4), MemoryRelease::default());
    let missed_at = clock.now() - TimeDelta::hours(2);
    for n in 0..5 {
        store.insert(pending(n, missed_at, TimeDelta::hours(1)));
    }
    for n in 5..9 {
        store.insert(pending(n, missed_at, TimeDelta::hours(8)));
    }
    let scheduler = Scheduler::new(store, queue.clone(), clock.clone(), SchedulerSettings::default());
    let report = handle(&scheduler, LambdaEvent::new(event, context(&clock))).await.unwrap();
    assert_eq!((report.released, report.expired_missed), (4, 5));
    let lines = metrics(&report).lines("punctual", "scheduler", 0).join("\n");
    assert!(
        lines.contains("\"ExpiredMissedWindow\":5.0") && lines.contains("\"OldestDueUndeliveredSeconds\":7200.0"),
        "{lines}"
    );
}

#[tokio::test]
async fn a_paused_tick_releases_nothing_and_the_next_tick_after_resume_catches_up() {
    use punctual_core::pause::PauseGate;
    use punctual_core::ports::{Control, Pause};
    use punctual_core::testing::MemoryControl;
    let event = load("tick.json");
    let clock = ManualClock::new(event.time.unwrap());
    let (store, queue) = (MemoryDueStore::new(4), MemoryRelease::default());
    for n in 0..6 {
        store.insert(pending(n, clock.now() + TimeDelta::minutes(5), TimeDelta::hours(8)));
    }
    let control = MemoryControl::default();
    let pause = Pause { reason: "drain runbook".into(), owner: "ops".into(), since: clock.now() };
    control.set_pause(Some(&pause), "ops").await.unwrap();
    let gate = PauseGate::new(control.clone(), clock.clone(), std::time::Duration::ZERO);
    let scheduler = Scheduler::new(store, queue.clone(), clock.clone(), SchedulerSettings::default()).with_pause(gate);
    let report = handle(&scheduler, LambdaEvent::new(event.clone(), context(&clock))).await.unwrap();
    assert!(report.paused);
    assert_eq!((report.released, queue.sent().len()), (0, 0), "nothing released while paused");
    control.set_pause(None, "ops").await.unwrap();
    let report = handle(&scheduler, LambdaEvent::new(event, context(&clock))).await.unwrap();
    assert_eq!((report.paused, report.released), (false, 6));
}

/// A pause must never read as health: a paused tick still measures the oldest due renewal and
/// says who paused, so the alarms see a pause that holds due work (an operator's) and a fleet
/// pause the sender set itself.
#[tokio::test]
async fn a_paused_tick_still_measures_what_waits_and_says_who_paused() {
    use punctual_core::pause::{PauseGate, SENDER_OWNER};
    use punctual_core::ports::{Control, Pause};
    use punctual_core::testing::MemoryControl;
    let event = load("tick.json");
    let clock = ManualClock::new(event.time.unwrap());
    let (store, queue) = (MemoryDueStore::new(4), MemoryRelease::default());
    for n in 0..6 {
        store.insert(pending(n, clock.now() - TimeDelta::minutes(12 + i64::from(n)), TimeDelta::hours(8)));
    }
    let control = MemoryControl::default();
    let gate = PauseGate::new(control.clone(), clock.clone(), std::time::Duration::ZERO);
    let scheduler = Scheduler::new(store, queue.clone(), clock.clone(), SchedulerSettings::default()).with_pause(gate);
    for (owner, fleet) in [("ops@example.com", 0.0), (SENDER_OWNER, 1.0)] {
        let pause = Pause { reason: "why".into(), owner: owner.into(), since: clock.now() };
        control.set_pause(Some(&pause), owner).await.unwrap();
        let report = handle(&scheduler, LambdaEvent::new(event.clone(), context(&clock))).await.unwrap();
        assert_eq!((report.paused, report.released), (true, 0));
        assert_eq!(report.oldest_due_age, std::time::Duration::from_secs(17 * 60), "the oldest due renewal, not 0");
        let doc: serde_json::Value =
            serde_json::from_str(&metrics(&report).lines("punctual", "scheduler", 0)[0]).unwrap();
        assert_eq!(doc["Paused"], 1.0, "{doc}");
        assert_eq!(doc["FleetPaused"], fleet, "{owner}: {doc}");
        assert_eq!(doc["OldestDueUndeliveredSeconds"], 1020.0, "{doc}");
    }
    control.set_pause(None, "ops").await.unwrap();
    let report = handle(&scheduler, LambdaEvent::new(event, context(&clock))).await.unwrap();
    let doc: serde_json::Value = serde_json::from_str(&metrics(&report).lines("punctual", "scheduler", 0)[0]).unwrap();
    assert_eq!((doc["Paused"].as_f64(), doc["FleetPaused"].as_f64()), (Some(0.0), Some(0.0)), "every tick writes both");
}

/// The SLO documents' `SloDue` per tenant.
fn slo_due(m: &punctual_aws::emf::Metrics) -> f64 {
    m.slo_total(punctual_aws::emf::name::SLO_DUE)
}

#[tokio::test]
async fn found_by_review_a_tick_that_fails_part_way_still_counts_the_due_it_released() {
    let event = load("tick.json");
    let clock = ManualClock::new(event.time.unwrap());
    let store = MemoryDueStore::new(1);
    for n in 0..30 {
        store.insert(pending(n, clock.now() + TimeDelta::minutes(1), TimeDelta::hours(8)));
    }
    // The 15th mark fails (a throttled write after its message was sent).
    let failing = SlowDueStore::new(store.clone(), clock.clone(), Duration::ZERO, Duration::ZERO);
    failing.fail_mark(15);
    let scheduler = Scheduler::new(failing, MemoryRelease::default(), clock.clone(), SchedulerSettings::default());
    let (partial, result) =
        punctual_scheduler::handler::handle_reporting(&scheduler, LambdaEvent::new(event.clone(), context(&clock)))
            .await;
    assert!(result.is_err());
    let first = slo_due(&punctual_scheduler::handler::failure_metrics(&partial));
    assert!(first >= 14.0, "the marks written before and beside the failed one are counted: {first}");
    // The next tick releases the rest; together every renewal is due exactly once.
    let scheduler =
        Scheduler::new(store.clone(), MemoryRelease::default(), clock.clone(), SchedulerSettings::default());
    let next = handle(&scheduler, LambdaEvent::new(event, context(&clock))).await.unwrap();
    assert_eq!(first + slo_due(&metrics(&next)), 30.0);
    assert_eq!(store.pending(), 0);
}
