//! An in-process token bucket behind the [`Limiter`] port: the limiter of one sender instance.
//!
//! It paces one process only; the shared DynamoDB limiter (its own issue) replaces it so that
//! all senders together stay under the provider's quota. A 429 cuts the admitted rate to 3/4
//! and `Retry-After` pauses admission; the rate climbs back by 2 % of the quota per second of
//! calm. Chosen in `punctual simulate --scenario throttle` (quota halved for 5 min): halving
//! and +10 %/s oscillated around the reduced quota (drain 230 s, 56 429s); ×0.75 and +2 %/s
//! drain in 201 s with 22 429s, and change nothing where there is no 429.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::clock::{Clock, add, until};
use crate::decision::LimiterAnswer;
use crate::ports::{Limiter, LimiterClass, LimiterError};

#[derive(Debug)]
struct State {
    /// Tokens available; negative when callers have reserved future tokens.
    tokens: f64,
    /// Admitted rate now (≤ quota).
    rate: f64,
    at: DateTime<Utc>,
    paused_until: Option<DateTime<Utc>>,
}

/// A token bucket of `quota` calls/s with `burst` tokens, over a clock.
#[derive(Debug)]
pub struct TokenBucket<C> {
    quota: f64,
    burst: f64,
    clock: C,
    state: Mutex<State>,
}

impl<C: Clock> TokenBucket<C> {
    /// A bucket admitting `quota` calls/s with bursts of `burst`. Starts full.
    pub fn new(quota: f64, burst: f64, clock: C) -> Self {
        let at = clock.now();
        Self { quota, burst, clock, state: Mutex::new(State { tokens: burst, rate: quota, at, paused_until: None }) }
    }

    /// The admitted rate now (calls/s).
    pub fn rate(&self) -> f64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).rate
    }

    fn refill(&self, s: &mut State, now: DateTime<Utc>) {
        let dt = until(s.at, now).as_secs_f64();
        s.rate = (s.rate + self.quota * 0.02 * dt).min(self.quota);
        s.tokens = (s.tokens + s.rate * dt).min(self.burst);
        s.at = now.max(s.at);
    }

    /// Reserves one token; returns how long the caller must wait for it, or `Err(wait)` when
    /// that is longer than `max_wait` (nothing is reserved then).
    fn reserve(&self, max_wait: Duration) -> Result<Duration, Duration> {
        let now = self.clock.now();
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.refill(&mut s, now);
        let pause = s.paused_until.map_or(Duration::ZERO, |p| until(now, p));
        let deficit = (1.0 - s.tokens).max(0.0);
        let wait = pause.max(Duration::from_secs_f64(deficit / s.rate.max(1e-9)));
        if wait > max_wait {
            return Err(wait);
        }
        s.tokens -= 1.0;
        Ok(wait)
    }
}

impl<C: Clock> Limiter for TokenBucket<C> {
    async fn acquire(&self, _class: LimiterClass, max_wait: Duration) -> Result<LimiterAnswer, LimiterError> {
        match self.reserve(max_wait) {
            Ok(wait) => {
                if !wait.is_zero() {
                    self.clock.sleep(wait).await;
                }
                Ok(LimiterAnswer::Granted)
            }
            Err(retry_in) => Ok(LimiterAnswer::Denied { retry_in }),
        }
    }

    async fn throttled(&self, retry_after: Option<Duration>) -> Result<(), LimiterError> {
        let now = self.clock.now();
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.refill(&mut s, now);
        s.rate = (s.rate * 0.75).max(self.quota / 100.0);
        s.tokens = s.tokens.min(0.0);
        if let Some(ra) = retry_after {
            let until_t = add(now, ra);
            s.paused_until = Some(s.paused_until.map_or(until_t, |p| p.max(until_t)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn clock() -> ManualClock {
        ManualClock::new(DateTime::parse_from_rfc3339("2026-12-01T09:00:00Z").unwrap().with_timezone(&Utc))
    }

    #[tokio::test]
    async fn bucket_admits_its_burst_then_paces_at_the_quota() {
        let c = clock();
        let b = TokenBucket::new(10.0, 2.0, c.clone());
        let t0 = c.now();
        for _ in 0..12 {
            assert_eq!(b.acquire(LimiterClass::Normal, Duration::from_secs(5)).await.unwrap(), LimiterAnswer::Granted);
        }
        // 2 from the burst, 10 more at 10/s: the manual clock slept ~1 s in total.
        let waited = until(t0, c.now()).as_secs_f64();
        assert!((0.95..1.05).contains(&waited), "waited {waited}");
    }

    #[tokio::test]
    async fn bucket_denies_when_the_wait_exceeds_the_budget() {
        let c = clock();
        let b = TokenBucket::new(1.0, 1.0, c.clone());
        assert_eq!(b.acquire(LimiterClass::Normal, Duration::ZERO).await.unwrap(), LimiterAnswer::Granted);
        let LimiterAnswer::Denied { retry_in } =
            b.acquire(LimiterClass::Normal, Duration::from_millis(100)).await.unwrap()
        else {
            panic!("must be denied");
        };
        assert!((900..=1000).contains(&retry_in.as_millis()), "{retry_in:?}");
    }

    #[tokio::test]
    async fn a_429_cuts_the_rate_and_retry_after_pauses_admission() {
        let c = clock();
        let b = TokenBucket::new(100.0, 10.0, c.clone());
        b.throttled(Some(Duration::from_secs(7))).await.unwrap();
        assert!((b.rate() - 75.0).abs() < 1e-9);
        let LimiterAnswer::Denied { retry_in } = b.acquire(LimiterClass::Normal, Duration::from_secs(1)).await.unwrap()
        else {
            panic!("paused");
        };
        assert!(retry_in >= Duration::from_secs(7));
        c.advance(Duration::from_secs(7));
        assert_eq!(b.acquire(LimiterClass::Normal, Duration::from_secs(1)).await.unwrap(), LimiterAnswer::Granted);
        // Recovered to the quota after enough calm (+2 per second from 75).
        c.advance(Duration::from_secs(13));
        b.acquire(LimiterClass::Normal, Duration::from_secs(1)).await.unwrap();
        assert!((b.rate() - 100.0).abs() < 1e-9);
    }
}
