//! The shared rate limiter (DESIGN §5): every sender instance and redriven work draw from one
//! schedule kept in a [`SlotStore`] (DynamoDB in production, memory in tests and the
//! simulator), so the provider sees at most its quota however many senders run.
//!
//! # Mechanism
//! The store holds, per limiter key, `next`: the instant of the first call slot nobody has
//! booked. A booking is ONE atomic conditional update that moves `next` forward by a block of
//! `block` slots (`block / rate` seconds) and hands the caller the slots it skipped over: the
//! caller then calls at those instants, so calls of all senders together are spaced `1/rate`
//! apart without any further coordination. One write buys `block` calls: at the default block
//! of 10 that is 0.1 writes per admitted call (measured: README, "Shared limiter"). A slot may
//! be used up to `validity` after its instant; slots nobody used by then are *stranded*
//! (counted). Larger blocks → fewer writes and more stranded slots: the frontier is measured by
//! `punctual bench-limiter`, and the default chosen from it.
//!
//! # Classes and deadline order
//! - **Deadline-near** work (slack below the sender's `deadline_near`) may book as far ahead as
//!   its wait budget allows and marks the schedule *near-active* for `near_hold`.
//! - **Normal** work books at most `normal_ahead` ahead, and while the schedule is near-active
//!   it may only book slots that start within `normal_fill` (slots that would otherwise go
//!   idle). Denied normal work is *not* kept waiting: the sender defers it (no attempt spent),
//!   which frees the worker to receive the next message, and so the deadline-near messages
//!   hiding in an unordered SQS backlog are found and served first. That is how the service
//!   approaches earliest-deadline-first: the reserve is the booking horizon beyond
//!   `normal_fill`, which only deadline-near work may use while it exists.
//! - **Redrive** work books from its own schedule at `redrive_share × quota` first, then from
//!   the main schedule as normal work: it can never take more than its share.
//! - An optional **per-tenant** cap works the same way (`tenant_share × quota` per tenant).
//!
//! # Adaptive
//! A 429 lowers the admitted rate to `decrease ×` the current rate (at most once per
//! `cut_gap`, so one overload burst seen by ten senders is one cut, not ten) and `Retry-After`
//! pushes the whole schedule past the pause, capped at `max_shared_pause` ([`MAX_SHARED_PAUSE`],
//! 60 s); the rate climbs back by `recover_per_sec ×
//! quota` per second. The rate is a pure function of the stored cut (rate and instant) and
//! the clock, so recovery costs no writes. Chosen in `punctual simulate --scenario throttle`
//! (quota halved for 5 minutes, 12,000 reminders): +2 %/s oscillated against the halved quota
//! (254 429s, amplification 1.021); +1 %/s gives 158 429s (1.013) for a drain of 184 s
//! against a floor of 180 s.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::backoff::SplitMix64;
use crate::clock::Clock;
use crate::decision::LimiterAnswer;
use crate::ids::TenantId;
pub use crate::ports::{Book, Booked, Lane, SlotStore, SlotView};
use crate::ports::{Limiter, LimiterClass, LimiterError, LimiterRequest};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Tunables of the shared limiter.
#[derive(Debug, Clone, PartialEq)]
pub struct LimiterSettings {
    /// Key prefix of this limiter's schedules (one per provider account).
    pub name: String,
    /// The provider's quota, calls/s.
    pub quota: f64,
    /// Slots per booking of normal (and capped) work.
    pub block: u32,
    /// Slots per booking of deadline-near work: 1, because the spare slots of a larger block
    /// would go to whatever normal work the same sender holds next, handing the reserve back
    /// to normal work. Near work is a minority except under pressure, so this costs little.
    pub near_block: u32,
    /// Normal work books at most this far ahead.
    pub normal_ahead: Duration,
    /// A deadline-near booking makes normal work yield for this long.
    pub near_hold: Duration,
    /// While near-active, normal work may still take slots starting within this.
    pub normal_fill: Duration,
    /// Yielded normal work is deferred past the near-active mark plus up to this much.
    pub yield_spread: Duration,
    /// A slot may be used this long after its instant. Late slots bunch calls together, so
    /// this stays within the provider's burst allowance (10 calls at 100/s = 100 ms): a
    /// 1 s validity let a slow debug run send bursts the provider double answered with 429.
    pub validity: Duration,
    /// Multiplicative decrease on a 429.
    pub decrease: f64,
    /// Recovery per second of calm, as a fraction of the quota.
    pub recover_per_sec: f64,
    /// At most one cut per this interval.
    pub cut_gap: Duration,
    /// Redriven work's share of the quota.
    pub redrive_share: f64,
    /// Optional per-tenant share of the quota.
    pub tenant_share: Option<f64>,
    /// Longest a provider's `Retry-After` pauses the shared schedule (default
    /// [`MAX_SHARED_PAUSE`]): one absurd answer must not stall every class and tenant. The
    /// reminder that got it waits at most `provider::MAX_RETRY_AFTER` too, and the rate cut
    /// still slows everyone.
    pub max_shared_pause: Duration,
}

/// Default cap on a shared pause from `Retry-After` (DESIGN §5): long enough to ride out a
/// provider's real throttling window, short enough that a `Retry-After: 86400` costs every
/// tenant a minute, not a day. It is `provider::MAX_RETRY_AFTER`: one cap for the message and
/// the schedule. The pause ends by itself; nothing needs clearing.
pub const MAX_SHARED_PAUSE: Duration = crate::provider::MAX_RETRY_AFTER;

impl LimiterSettings {
    /// Defaults for a `quota` (see the module docs and the README for why these values).
    pub fn new(quota: f64) -> Self {
        Self {
            name: "provider".into(),
            quota,
            block: 10,
            near_block: 1,
            normal_ahead: Duration::from_secs(10),
            near_hold: Duration::from_secs(2),
            normal_fill: Duration::from_millis(50),
            yield_spread: Duration::from_secs(8),
            validity: Duration::from_millis(100),
            decrease: 0.75,
            recover_per_sec: 0.01,
            cut_gap: Duration::from_secs(1),
            redrive_share: 0.2,
            tenant_share: None,
            max_shared_pause: MAX_SHARED_PAUSE,
        }
    }

    /// The admitted rate at `now_ms` given the stored view: the last cut, recovered linearly.
    pub fn rate(&self, view: &SlotView, now_ms: i64) -> f64 {
        let floor = self.quota / 100.0;
        match view.cut_rate {
            None => self.quota,
            Some(cut) => {
                let calm = (now_ms - view.cut_at_ms).max(0) as f64 / 1000.0;
                (cut + self.recover_per_sec * self.quota * calm).clamp(floor, self.quota)
            }
        }
    }
}

/// Counters of one limiter instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimiterStats {
    /// Tokens granted.
    pub granted: u64,
    /// Requests denied.
    pub denied: u64,
    /// Slots booked but never used.
    pub stranded: u64,
    /// Bookings that succeeded.
    pub bookings: u64,
}

#[derive(Debug, Default)]
struct Pool {
    slots: VecDeque<i64>,
    view: SlotView,
}

impl Pool {
    /// Drops the slots whose use window (`validity` after their instant) has passed; returns
    /// how many were stranded.
    fn expire(&mut self, now: i64, validity: i64) -> u64 {
        let mut stranded = 0;
        while self.slots.front().is_some_and(|t| *t + validity < now) {
            self.slots.pop_front();
            stranded += 1;
        }
        stranded
    }
}

/// One sender instance's handle on the shared schedule: a [`Limiter`] over a [`SlotStore`].
#[derive(Debug)]
pub struct SharedLimiter<S, C> {
    store: S,
    clock: C,
    settings: LimiterSettings,
    pools: Mutex<HashMap<String, Pool>>,
    stats: Mutex<LimiterStats>,
    rng: Mutex<SplitMix64>,
    booking: futures_util::lock::Mutex<()>,
}

enum Take {
    Slot(i64),
    Wait(Duration),
}

impl<S: SlotStore, C: Clock> SharedLimiter<S, C> {
    /// A limiter instance; `seed` randomises its retry offsets so instances do not retry in
    /// phase.
    pub fn new(store: S, clock: C, settings: LimiterSettings, seed: u64) -> Self {
        Self {
            store,
            clock,
            settings,
            pools: Mutex::default(),
            stats: Mutex::default(),
            rng: Mutex::new(SplitMix64::new(seed ^ 0x5eed_1117)),
            booking: futures_util::lock::Mutex::new(()),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &LimiterSettings {
        &self.settings
    }

    /// The store (write counts, views).
    pub fn store(&self) -> &S {
        &self.store
    }

    /// This instance's counters (stranded counts slots already expired in its pools).
    pub fn stats(&self) -> LimiterStats {
        let now = self.clock.now().timestamp_millis();
        let validity = self.settings.validity.as_millis() as i64;
        let mut pools = lock(&self.pools);
        let stranded: u64 = pools.values_mut().map(|p| p.expire(now, validity)).sum();
        let mut st = lock(&self.stats);
        st.stranded += stranded;
        *st
    }

    /// The admitted rate this instance last saw for the main schedule.
    pub fn rate(&self) -> f64 {
        let now = self.clock.now().timestamp_millis();
        let pools = lock(&self.pools);
        let view = pools.get(&self.main_key()).map(|p| p.view).unwrap_or_default();
        self.settings.rate(&view, now)
    }

    /// The earliest pooled slot usable before `deadline_ms`, if any (expired ones dropped).
    fn pooled(&self, key: &str, deadline_ms: i64) -> Option<i64> {
        let now = self.clock.now().timestamp_millis();
        let validity = self.settings.validity.as_millis() as i64;
        let mut pools = lock(&self.pools);
        let pool = pools.get_mut(key)?;
        lock(&self.stats).stranded += pool.expire(now, validity);
        let t = pool.slots.front().copied().filter(|t| *t <= deadline_ms)?;
        pool.slots.pop_front();
        Some(t)
    }

    fn main_key(&self) -> String {
        format!("{}#main", self.settings.name)
    }

    /// How long yielded normal work stays away: past the near-active mark plus up to
    /// `yield_spread` more, spread so the deferred copies do not all return at once and the
    /// ready messages the workers receive meanwhile are mostly the deadline-near ones.
    fn yield_for(&self, left_ms: i64) -> Duration {
        let spread = self.settings.yield_spread.as_millis() as i64;
        Duration::from_millis((left_ms.max(0) + 1 + self.jitter(spread)) as u64)
    }

    fn jitter(&self, upto_ms: i64) -> i64 {
        (lock(&self.rng).next_u64() % upto_ms.max(1) as u64) as i64
    }

    /// Takes one slot of `key`'s schedule within `max_wait`.
    async fn take(
        &self,
        key: &str,
        cap_rate: Option<f64>,
        class: LimiterClass,
        deadline_ms: i64,
    ) -> Result<Take, LimiterError> {
        let s = &self.settings;
        let validity = s.validity.as_millis() as i64;
        for _ in 0..4 {
            if let Some(t) = self.pooled(key, deadline_ms) {
                return Ok(Take::Slot(t));
            }
            // One booking in flight per instance: the callers behind it usually find the
            // pool refilled, instead of each booking a block and stranding most of them.
            let guard = self.booking.lock().await;
            let now = self.clock.now().timestamp_millis();
            let budget = (deadline_ms - now).max(0);
            let (slots, block_ms, interval) = {
                let mut pools = lock(&self.pools);
                let pool = pools.entry(key.to_owned()).or_default();
                // Another caller may have refilled the pool while this one waited for the guard.
                lock(&self.stats).stranded += pool.expire(now, validity);
                if let Some(t) = pool.slots.front().copied()
                    && t <= now + budget
                {
                    pool.slots.pop_front();
                    return Ok(Take::Slot(t));
                }
                if pool.view.paused_until_ms > now + budget {
                    return Ok(Take::Wait(Duration::from_millis((pool.view.paused_until_ms - now) as u64)));
                }
                // Normal work yields without a write while the last view shows deadline-near
                // work active and the schedule busy (a refused conditional write costs as much
                // as a granted one). The view is at most one booking old.
                let v = pool.view;
                if cap_rate.is_none()
                    && class == LimiterClass::Normal
                    && v.near_until_ms >= now
                    && v.next_ms > now + s.normal_fill.as_millis() as i64
                {
                    return Ok(Take::Wait(self.yield_for(v.near_until_ms - now)));
                }
                let rate = cap_rate.unwrap_or_else(|| s.rate(&pool.view, now));
                let interval = 1000.0 / rate;
                let n = if cap_rate.is_none() && class == LimiterClass::DeadlineNear { s.near_block } else { s.block };
                (n, (interval * f64::from(n)).ceil() as i64, interval)
            };
            let (lane, ahead) = match (cap_rate, class) {
                (Some(_), _) => (Lane::Cap, budget),
                (None, LimiterClass::DeadlineNear) => {
                    (Lane::Near { hold_until_ms: now + s.near_hold.as_millis() as i64 }, budget)
                }
                (None, _) => (
                    Lane::Normal { fill_ms: s.normal_fill.as_millis() as i64 },
                    budget.min(s.normal_ahead.as_millis() as i64),
                ),
            };
            let grace_ms = validity;
            let booked = self.store.book(key, &Book { now_ms: now, block_ms, ahead_ms: ahead, grace_ms, lane }).await?;
            match booked {
                Booked::Got { start_ms, view } => {
                    lock(&self.stats).bookings += 1;
                    let mut pools = lock(&self.pools);
                    let pool = pools.entry(key.to_owned()).or_default();
                    pool.view = view;
                    let mut fresh: Vec<i64> = (0..slots)
                        .map(|i| start_ms + (f64::from(i) * interval) as i64)
                        .filter(|t| *t >= view.paused_until_ms)
                        .collect();
                    pool.slots.extend(fresh.drain(..));
                    pool.slots.make_contiguous().sort_unstable();
                    // Loop: the next pass takes the earliest slot (ours or an older one).
                }
                Booked::Full { view } => {
                    lock(&self.pools).entry(key.to_owned()).or_default().view = view;
                    let near_active = view.near_until_ms >= now;
                    if matches!(lane, Lane::Normal { .. }) && near_active {
                        // Normal work yields to deadline-near work: give the worker back.
                        return Ok(Take::Wait(self.yield_for(view.near_until_ms - now)));
                    }
                    let wait = (view.next_ms - ahead - now).max(1) + self.jitter(block_ms);
                    if wait > budget {
                        return Ok(Take::Wait(Duration::from_millis(wait as u64)));
                    }
                    drop(guard);
                    self.clock.sleep(Duration::from_millis(wait as u64)).await;
                }
            }
        }
        Ok(Take::Wait(Duration::from_millis(s.normal_ahead.as_millis() as u64)))
    }

    async fn take_and_wait(
        &self,
        key: &str,
        cap_rate: Option<f64>,
        class: LimiterClass,
        deadline_ms: i64,
    ) -> Result<Option<Duration>, LimiterError> {
        match self.take(key, cap_rate, class, deadline_ms).await? {
            Take::Slot(t) => {
                let now = self.clock.now().timestamp_millis();
                if t > now {
                    self.clock.sleep(Duration::from_millis((t - now) as u64)).await;
                }
                Ok(None)
            }
            Take::Wait(d) => Ok(Some(d)),
        }
    }

    fn denied(&self, retry_in: Duration) -> LimiterAnswer {
        lock(&self.stats).denied += 1;
        LimiterAnswer::Denied { retry_in }
    }
}

impl<S: SlotStore, C: Clock> Limiter for SharedLimiter<S, C> {
    async fn acquire(&self, req: LimiterRequest<'_>, max_wait: Duration) -> Result<LimiterAnswer, LimiterError> {
        let deadline = self.clock.now().timestamp_millis() + max_wait.as_millis() as i64;
        let s = &self.settings;
        let mut caps: Vec<(String, f64)> = Vec::new();
        if req.class == LimiterClass::Redrive {
            caps.push((format!("{}#redrive", s.name), s.quota * s.redrive_share));
        }
        if let Some(share) = s.tenant_share {
            caps.push((tenant_key(&s.name, req.tenant), s.quota * share));
        }
        for (key, rate) in &caps {
            if let Some(retry_in) = self.take_and_wait(key, Some(*rate), req.class, deadline).await? {
                return Ok(self.denied(retry_in));
            }
        }
        if let Some(retry_in) = self.take_and_wait(&self.main_key(), None, req.class, deadline).await? {
            return Ok(self.denied(retry_in));
        }
        lock(&self.stats).granted += 1;
        Ok(LimiterAnswer::Granted)
    }

    async fn throttled(&self, retry_after: Option<Duration>) -> Result<(), LimiterError> {
        let now = self.clock.now().timestamp_millis();
        let key = self.main_key();
        let s = &self.settings;
        let rate = {
            let pools = lock(&self.pools);
            s.rate(&pools.get(&key).map(|p| p.view).unwrap_or_default(), now)
        };
        let cut = (rate * s.decrease).max(s.quota / 100.0);
        self.store.cut(&key, now, cut, s.cut_gap.as_millis() as i64).await?;
        // Capped: the shared schedule serves every class and tenant (see `max_shared_pause`).
        let until = retry_after.map(|ra| now + ra.min(s.max_shared_pause).as_millis() as i64);
        if let Some(until) = until {
            self.store.pause(&key, until).await?;
        }
        let mut pools = lock(&self.pools);
        let pool = pools.entry(key).or_default();
        if pool.view.cut_at_ms + (s.cut_gap.as_millis() as i64) < now || pool.view.cut_rate.is_none() {
            pool.view.cut_rate = Some(cut);
            pool.view.cut_at_ms = now;
        }
        if let Some(until) = until {
            pool.view.paused_until_ms = pool.view.paused_until_ms.max(until);
            let before = pool.slots.len();
            pool.slots.retain(|t| *t >= until);
            lock(&self.stats).stranded += (before - pool.slots.len()) as u64;
        }
        Ok(())
    }
}

fn tenant_key(name: &str, tenant: &TenantId) -> String {
    format!("{name}#tenant#{tenant}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::testing::MemorySlotStore;
    use chrono::{DateTime, Utc};

    fn clock() -> ManualClock {
        ManualClock::new(DateTime::parse_from_rfc3339("2026-12-01T09:00:00Z").unwrap().with_timezone(&Utc))
    }

    fn tenant() -> TenantId {
        TenantId::parse("t1").unwrap()
    }

    fn req(class: LimiterClass, tenant: &TenantId) -> LimiterRequest<'_> {
        LimiterRequest { class, tenant }
    }

    #[tokio::test]
    async fn instances_sharing_a_store_pace_at_the_quota_together() {
        let c = clock();
        let store = MemorySlotStore::default();
        let limiters: Vec<_> =
            (0..3).map(|i| SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(10.0), i)).collect();
        let t = tenant();
        let t0 = c.now();
        let mut granted_at = Vec::new();
        for round in 0..3 {
            for l in &limiters {
                for _ in 0..10 {
                    let answer = l.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(5)).await.unwrap();
                    assert_eq!(answer, LimiterAnswer::Granted, "round {round}");
                    granted_at.push(c.now());
                }
            }
        }
        // 90 calls at 10/s from three instances: 9 s of slots, each block after the last.
        let took = crate::clock::until(t0, c.now()).as_secs_f64();
        assert!((8.8..9.2).contains(&took), "took {took}");
        assert!(
            granted_at.windows(2).all(|w| w[1] - w[0] >= chrono::TimeDelta::milliseconds(99)),
            "calls 1/rate apart"
        );
        assert_eq!(store.writes(), 9, "ten calls per write");
    }

    #[tokio::test]
    async fn normal_work_yields_while_deadline_near_work_books() {
        let c = clock();
        let store = MemorySlotStore::default();
        let near = SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(10.0), 1);
        let normal = SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(10.0), 2);
        let t = tenant();
        // Near work books three blocks ahead (3 s of slots).
        for _ in 0..3 {
            let _ = near
                .store()
                .book(
                    "provider#main",
                    &Book {
                        now_ms: c.now().timestamp_millis(),
                        block_ms: 1000,
                        ahead_ms: 10_000,
                        grace_ms: 0,
                        lane: Lane::Near { hold_until_ms: c.now().timestamp_millis() + 2000 },
                    },
                )
                .await
                .unwrap();
        }
        let LimiterAnswer::Denied { retry_in } =
            normal.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(10)).await.unwrap()
        else {
            panic!("normal work must yield");
        };
        let s = normal.settings();
        assert!(retry_in > Duration::ZERO && retry_in <= s.near_hold + s.yield_spread, "{retry_in:?}");
        // Deadline-near work is still admitted (after the booked slots).
        assert_eq!(
            near.acquire(req(LimiterClass::DeadlineNear, &t), Duration::from_secs(10)).await.unwrap(),
            LimiterAnswer::Granted
        );
    }

    #[tokio::test]
    async fn a_429_cuts_the_rate_once_and_retry_after_pauses_everyone() {
        let c = clock();
        let store = MemorySlotStore::default();
        let a = SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(100.0), 1);
        let b = SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(100.0), 2);
        let t = tenant();
        a.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(1)).await.unwrap();
        a.throttled(Some(Duration::from_secs(7))).await.unwrap();
        b.throttled(Some(Duration::from_secs(7))).await.unwrap();
        let view = store.view("provider#main").await.unwrap().unwrap();
        assert_eq!(view.cut_rate, Some(75.0), "two 429s within the gap are one cut");
        let LimiterAnswer::Denied { retry_in } =
            b.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(1)).await.unwrap()
        else {
            panic!("paused");
        };
        assert!(retry_in >= Duration::from_millis(6900), "{retry_in:?}");
        let t0 = c.now();
        assert_eq!(
            b.acquire(req(LimiterClass::DeadlineNear, &t), Duration::from_secs(8)).await.unwrap(),
            LimiterAnswer::Granted
        );
        assert!(crate::clock::until(t0, c.now()) >= Duration::from_secs(7), "no slot before Retry-After");
        // Recovers by 1 % of the quota per second: back at the quota 25 s after the cut.
        c.advance(Duration::from_secs(17));
        assert!(b.rate() < 100.0, "still recovering: {}", b.rate());
        c.advance(Duration::from_secs(2));
        assert!((b.rate() - 100.0).abs() < 1e-9, "rate {}", b.rate());
    }

    /// One provider answer of `Retry-After: 86400` must not stall every class and tenant for a
    /// day: the shared pause is capped (the one reminder still waits the provider's time, in
    /// the sender's deferral).
    #[tokio::test]
    async fn an_absurd_retry_after_pauses_the_shared_schedule_at_most_the_cap() {
        let c = clock();
        let store = MemorySlotStore::default();
        let l = SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(100.0), 1);
        let t = tenant();
        let t0 = c.now();
        l.throttled(Some(Duration::from_secs(86_400))).await.unwrap();
        let view = store.view("provider#main").await.unwrap().unwrap();
        let paused_for = Duration::from_millis((view.paused_until_ms - t0.timestamp_millis()).max(0) as u64);
        assert!(paused_for <= Duration::from_secs(60), "the shared schedule is paused for {paused_for:?}");
        // Work is admitted again once the capped pause has passed.
        let answer = l.acquire(req(LimiterClass::DeadlineNear, &t), Duration::from_secs(61)).await.unwrap();
        assert_eq!(answer, LimiterAnswer::Granted);
        assert!(crate::clock::until(t0, c.now()) <= Duration::from_secs(61), "admitted after {:?}", c.now() - t0);
    }

    #[tokio::test]
    async fn redriven_work_is_held_to_its_share() {
        let c = clock();
        let store = MemorySlotStore::default();
        let l = SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(100.0), 1);
        let t = tenant();
        let t0 = c.now();
        for _ in 0..40 {
            assert_eq!(
                l.acquire(req(LimiterClass::Redrive, &t), Duration::from_secs(5)).await.unwrap(),
                LimiterAnswer::Granted
            );
        }
        // 40 at 20 % of 100/s = 20/s: ~2 s, not the 0.4 s the main quota would allow.
        let took = crate::clock::until(t0, c.now()).as_secs_f64();
        assert!((1.8..2.2).contains(&took), "took {took}");
    }

    #[tokio::test]
    async fn a_tenant_cap_leaves_room_for_other_tenants() {
        let c = clock();
        let store = MemorySlotStore::default();
        let mut settings = LimiterSettings::new(100.0);
        settings.tenant_share = Some(0.5);
        let l = SharedLimiter::new(store.clone(), c.clone(), settings, 1);
        let big = TenantId::parse("campaign").unwrap();
        let small = TenantId::parse("other").unwrap();
        let t0 = c.now();
        for _ in 0..50 {
            l.acquire(req(LimiterClass::Normal, &big), Duration::from_secs(5)).await.unwrap();
        }
        let took = crate::clock::until(t0, c.now()).as_secs_f64();
        assert!((0.9..1.1).contains(&took), "one tenant at 50/s: {took}");
        let t1 = c.now();
        assert_eq!(
            l.acquire(req(LimiterClass::Normal, &small), Duration::from_secs(5)).await.unwrap(),
            LimiterAnswer::Granted
        );
        assert!(crate::clock::until(t1, c.now()) < Duration::from_millis(100), "the other tenant is not queued behind");
    }
}
