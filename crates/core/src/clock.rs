//! The `Clock` port: the only way time enters the core. It reads the time and it sleeps, so
//! one [`ManualClock`] controls a whole test or simulation.

use std::time::Duration;

use chrono::{DateTime, Utc};

pub use crate::ports::Clock;

/// Adds a `std` duration to an instant, saturating at chrono's maximum instead of panicking.
pub fn add(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::TimeDelta::from_std(d).ok().and_then(|d| t.checked_add_signed(d)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Subtracts a `std` duration from an instant, saturating at chrono's minimum.
pub fn sub(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::TimeDelta::from_std(d).ok().and_then(|d| t.checked_sub_signed(d)).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// `later - earlier` as a `std` duration, zero when `later` is not later.
pub fn until(earlier: DateTime<Utc>, later: DateTime<Utc>) -> Duration {
    (later - earlier).to_std().unwrap_or(Duration::ZERO)
}

#[cfg(any(test, feature = "testing"))]
pub use manual::ManualClock;

#[cfg(any(test, feature = "testing"))]
mod manual {
    use super::*;
    use std::sync::{Arc, Mutex, PoisonError};

    /// A clock that moves only when told. `sleep` advances it by the requested duration and
    /// returns at once: a single-task test or the simulator never blocks on real time, and
    /// "waited 7 s" is observable as "the clock moved 7 s". Clones share one time.
    #[derive(Debug, Clone)]
    pub struct ManualClock {
        now: Arc<Mutex<DateTime<Utc>>>,
    }

    impl ManualClock {
        /// A clock reading `start`.
        pub fn new(start: DateTime<Utc>) -> Self {
            Self { now: Arc::new(Mutex::new(start)) }
        }

        /// Moves the clock forward by `d`.
        pub fn advance(&self, d: Duration) {
            let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
            *now = add(*now, d);
        }

        /// Sets the clock to `t` (may move backwards, to test skew).
        pub fn set(&self, t: DateTime<Utc>) {
            *self.now.lock().unwrap_or_else(PoisonError::into_inner) = t;
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> DateTime<Utc> {
            *self.now.lock().unwrap_or_else(PoisonError::into_inner)
        }

        fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
            self.advance(d);
            std::future::ready(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_sleep_advances_shared_time() {
        let t0 = DateTime::parse_from_rfc3339("2026-12-01T09:00:00Z").unwrap().with_timezone(&Utc);
        let clock = ManualClock::new(t0);
        let other = clock.clone();
        clock.sleep(Duration::from_secs(7)).await;
        assert_eq!(other.now(), add(t0, Duration::from_secs(7)));
        other.advance(Duration::from_millis(500));
        assert_eq!(until(t0, clock.now()), Duration::from_millis(7_500));
    }

    #[test]
    fn until_is_zero_when_not_later_and_add_saturates() {
        let t0 = Utc::now();
        assert_eq!(until(t0, t0 - chrono::TimeDelta::seconds(5)), Duration::ZERO);
        assert_eq!(add(DateTime::<Utc>::MAX_UTC, Duration::from_secs(1)), DateTime::<Utc>::MAX_UTC);
    }
}
