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
