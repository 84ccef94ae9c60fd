//! The pause switch as the sender trips it: never over a pause in force.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use chrono::Utc;
use punctual_core::clock::ManualClock;
use punctual_core::pause::{PauseGate, SENDER_OWNER};
use punctual_core::ports::{Control, Pause};
use punctual_core::testing::MemoryControl;

/// An instance that last read "not paused" and then meets a 401 trips the fleet pause; an
/// operator paused in between: the operator's pause stays (its owner and reason), the sender's
/// does not replace it, and the instance now sees the pause in force.
#[tokio::test]
async fn a_sender_trip_never_replaces_an_operators_pause_set_meanwhile() {
    let clock = ManualClock::new(Utc::now());
    let control = MemoryControl::default();
    let gate = PauseGate::new(control.clone(), clock.clone(), Duration::from_secs(5));
    assert!(!gate.paused().await, "cached: not paused");
    let ops = Pause { reason: "provider maintenance".into(), owner: "ops@example.com".into(), since: Utc::now() };
    control.set_pause(Some(&ops), "ops@example.com").await.unwrap();
    gate.trip("provider refused the credentials").await.unwrap();
    let in_force = control.pause().await.unwrap().unwrap();
    assert_eq!((in_force.owner.as_str(), in_force.reason.as_str()), ("ops@example.com", "provider maintenance"));
    assert_eq!(gate.pause().await.map(|p| p.owner), Some("ops@example.com".to_owned()));
    // With nothing in force, the trip sets the sender's own.
    control.set_pause(None, "ops@example.com").await.unwrap();
    let gate = PauseGate::new(control.clone(), clock.clone(), Duration::from_secs(5));
    gate.trip("provider refused the credentials").await.unwrap();
    assert_eq!(control.pause().await.unwrap().map(|p| p.owner), Some(SENDER_OWNER.to_owned()));
}

/// A control that counts its reads and yields inside each, as a network read does.
#[derive(Clone, Default)]
struct CountingControl {
    inner: MemoryControl,
    reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Control for CountingControl {
    async fn pause(&self) -> Result<Option<Pause>, punctual_core::ports::ControlError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::task::yield_now().await;
        self.inner.pause().await
    }
    async fn set_pause(&self, pause: Option<&Pause>, by: &str) -> Result<(), punctual_core::ports::ControlError> {
        self.inner.set_pause(pause, by).await
    }
    async fn pause_unless_paused(
        &self,
        pause: &Pause,
        by: &str,
    ) -> Result<Option<Pause>, punctual_core::ports::ControlError> {
        self.inner.pause_unless_paused(pause, by).await
    }
    async fn put_audit(
        &self,
        record: &punctual_core::redrive::AuditRecord,
    ) -> Result<(), punctual_core::ports::ControlError> {
        self.inner.put_audit(record).await
    }
}

/// The ten records of a batch ask together when the cached answer has aged out: one read of
/// the switch serves them all (measured before: every record read it, 0.46 reads per reminder
/// in `punctual run` where one per instance per `PAUSE_CHECK` is 0.09).
#[tokio::test]
async fn concurrent_askers_share_one_read_of_the_switch() {
    let clock = ManualClock::new(Utc::now());
    let control = CountingControl::default();
    let gate = PauseGate::new(control.clone(), clock.clone(), Duration::from_secs(5));
    let reads = || control.reads.load(std::sync::atomic::Ordering::Relaxed);
    futures_util::future::join_all((0..10).map(|_| gate.paused())).await;
    assert_eq!(reads(), 1, "ten askers on an empty cache");
    clock.advance(Duration::from_secs(6));
    futures_util::future::join_all((0..10).map(|_| gate.paused())).await;
    assert_eq!(reads(), 2, "ten askers on an aged-out cache");
    futures_util::future::join_all((0..10).map(|_| gate.paused())).await;
    assert_eq!(reads(), 2, "within the ttl nobody reads");
}
