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

/// A switch that counts its reads, yields inside each (as a network read does), takes
/// `latency` per read and, with `hang_first`, never answers its first read (a stalled
/// connection).
#[derive(Clone, Default)]
struct TestControl {
    inner: MemoryControl,
    reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
    latency: Duration,
    hang_first: bool,
}

impl Control for TestControl {
    async fn pause(&self) -> Result<Option<Pause>, punctual_core::ports::ControlError> {
        if self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 && self.hang_first {
            std::future::pending::<()>().await;
        }
        tokio::task::yield_now().await;
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
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
/// in `punctual run` where one per instance per `PAUSE_CHECK` is 0.09). A cold instance, with
/// no answer yet, reads once per asker: nobody waits behind another's read.
#[tokio::test]
async fn concurrent_askers_share_one_read_of_the_switch() {
    let clock = ManualClock::new(Utc::now());
    let control = TestControl::default();
    let gate = PauseGate::new(control.clone(), clock.clone(), Duration::from_secs(5));
    let reads = || control.reads.load(std::sync::atomic::Ordering::Relaxed);
    futures_util::future::join_all((0..10).map(|_| gate.paused())).await;
    assert_eq!(reads(), 10, "ten askers on a cold instance each read");
    clock.advance(Duration::from_secs(6));
    futures_util::future::join_all((0..10).map(|_| gate.paused())).await;
    assert_eq!(reads(), 11, "ten askers on an aged-out answer: one read");
    futures_util::future::join_all((0..10).map(|_| gate.paused())).await;
    assert_eq!(reads(), 11, "within the ttl nobody reads");
    // A pause set meanwhile is seen after the next read.
    let ops = Pause { reason: "maintenance".into(), owner: "ops@example.com".into(), since: Utc::now() };
    control.inner.set_pause(Some(&ops), "ops@example.com").await.unwrap();
    clock.advance(Duration::from_secs(6));
    let seen = futures_util::future::join_all((0..10).map(|_| gate.paused())).await;
    assert!(seen.iter().any(|p| *p), "the asker that read sees the pause");
    assert!(gate.paused().await, "and every asker after it");
}

// ---- the shared read under a slow or hung switch -------------------------------------------

/// Wall-clock time, as `SystemClock` reads it in the Lambda (the core's tests have no such
/// clock: a minimal one here).
#[derive(Clone, Copy)]
struct WallClock;

impl punctual_core::clock::Clock for WallClock {
    fn now(&self) -> chrono::DateTime<Utc> {
        Utc::now()
    }
    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(d)
    }
}

/// A batch's ten records ask together when the answer has aged out and one read of the switch
/// takes longer than the ttl (the sender's PAUSE_CHECK is 5 s; a GetItem under throttling
/// retries takes that): one record reads, the other nine keep the last answer and go on at
/// once, and the read counts from when it arrived (a read stamped with its start would be
/// stale on arrival and read again and again). Scaled down: a 300 ms read, a 200 ms ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_slower_than_the_ttl_serves_the_records_waiting_on_it() {
    let control = TestControl { latency: Duration::from_millis(300), ..TestControl::default() };
    let gate = PauseGate::new(control.clone(), WallClock, Duration::from_millis(200));
    assert!(!gate.paused().await);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let started = std::time::Instant::now();
    let waits = futures_util::future::join_all((0..10).map(|_| async {
        let t = std::time::Instant::now();
        gate.paused().await;
        t.elapsed()
    }))
    .await;
    let quick = waits.iter().filter(|w| **w < Duration::from_millis(100)).count();
    let reads = control.reads.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(reads, 2, "one read at start, one for the aged-out answer");
    assert_eq!(quick, 9, "nine records went on with the last answer: {waits:?}");
    assert!(started.elapsed() < Duration::from_millis(900));
    assert!(!gate.paused().await, "fresh on arrival: no third read");
    assert_eq!(control.reads.load(std::sync::atomic::Ordering::Relaxed), 2);
}

/// `ttl = ZERO` ("every call reads it"): each call still reads, but now one at a time behind
/// the refresh mutex, so the tenth record waits for nine other reads first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_zero_reads_are_not_serialised() {
    let control = TestControl { latency: Duration::from_millis(100), ..TestControl::default() };
    let gate = PauseGate::new(control.clone(), WallClock, Duration::ZERO);
    let started = std::time::Instant::now();
    futures_util::future::join_all((0..10).map(|_| gate.paused())).await;
    let waited = started.elapsed();
    assert_eq!(control.reads.load(std::sync::atomic::Ordering::Relaxed), 10, "ZERO: every call reads it");
    assert!(waited < Duration::from_millis(500), "ten concurrent reads of 100 ms took {waited:?}: serialised");
}

/// One record's read of the switch hangs: the async mutex is held across it with no timeout,
/// so every other record of the instance (and of every later batch it polls) waits behind it
/// for as long as it hangs — in Lambda, until the invocation times out and the whole batch
/// returns to the queue after its visibility timeout (tight reminders have 1–2 minutes).
/// The others wait at most `WAIT_FOR_READ`, then read themselves and go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hung_read_of_the_switch_does_not_stall_the_other_records() {
    let control = TestControl { hang_first: true, ..TestControl::default() };
    let gate = std::sync::Arc::new(PauseGate::new(control.clone(), WallClock, Duration::from_secs(5)));
    let first = {
        let gate = std::sync::Arc::clone(&gate);
        tokio::spawn(async move { gate.paused().await })
    };
    while control.reads.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = tokio::time::timeout(Duration::from_secs(2), gate.paused()).await;
    first.abort();
    assert!(second.is_ok(), "a second record waited 2 s behind the first record's hung read of the switch");
}
