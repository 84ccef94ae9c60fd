//! The shared rate limiter (docs/design.md#the-shared-limiter): every sender instance and redriven work draw from one
//! schedule kept in a [`SlotStore`] (DynamoDB in production, memory in tests and the
//! simulator), so the provider sees at most its quota however many senders run.
//!
//! # Mechanism
//! The store holds, per limiter key, `next`: the instant of the first call slot nobody has
//! booked. A booking is ONE atomic conditional update that moves `next` forward by a block of
//! `block` slots (`block / rate` seconds) and hands the caller the slots it skipped over: the
//! caller then calls at those instants, so calls of all senders together are spaced `1/rate`
//! apart without any further coordination. One write buys `block` calls: at the default block
//! of 10 that is 0.1 writes per admitted call (measured: docs/measurements.md#the-shared-limiter). A slot may
//! be used up to `validity` after its instant, judged when it is taken and again after the
//! wait for it; slots nobody used by then, and slots whose caller woke too late for them, are
//! *stranded* (counted). Larger blocks → fewer writes and more stranded slots: the frontier is measured by
//! `punctual bench-limiter`, and the default chosen from it.
//!
//! # Classes and deadline order
//! Deadline-near work arrives on its own queue (the urgent lane, [`crate::lanes`]), served by
//! its own pollers; the limiter gives it the slots first:
//! - **Deadline-near** work (slack below the sender's `deadline_near`) may book as far ahead as
//!   its wait budget allows, in blocks like everyone (its instance keeps them in a pool near
//!   work draws from first; normal work of the instance takes only near slots already due,
//!   which would otherwise expire unused), and marks the schedule *near-active* for
//!   `near_hold`.
//! - **Normal** work books at most `normal_ahead` ahead, and while the schedule is near-active
//!   it may only book slots that start within `normal_fill` (slots that would otherwise go
//!   idle). Otherwise it **waits in-process**, holding its message, until the mark lapses, and
//!   books behind the near demand: no round trip through SQS, no ledger write. Only when its
//!   invocation budget runs out is it denied (and the sender defers it).
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
//! the clock, so recovery costs no writes. A cut only ever lowers the rate: it carries the
//! instant it is back at the quota, and the store keeps the cut that recovers later (the lower
//! one at every instant), so an instance with a stale view cannot raise it. A provider window
//! longer than the shared pause (an hourly quota) is paced over its real length
//! ([`Limiter::budget`]). Chosen in `punctual simulate --scenario throttle`
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
    /// Slots per booking of deadline-near work: a block like normal work's (near work comes in
    /// batches from its own lane), kept in a pool of its own that near work draws from first;
    /// normal work of the same instance takes the near slots that would otherwise expire
    /// unused (a stranded slot is quota nobody used). At 1 (the one-queue design) overload
    /// cost 0.55 writes per call.
    pub near_block: u32,
    /// Normal work books at most this far ahead.
    pub normal_ahead: Duration,
    /// A deadline-near booking makes normal work yield for this long. It must outlast the gap
    /// between the urgent lane's release groups (whole seconds of `DelaySeconds`): at 500 ms
    /// normal work booked its 10 s horizon in those gaps and `simulate --scenario mixed
    /// --tight-seconds 30-90` left 2,138 late (2 s: 1).
    pub near_hold: Duration,
    /// While near-active, normal work may still take slots starting within this.
    pub normal_fill: Duration,
    /// Normal work waiting behind deadline-near work books again once the near-active mark
    /// lapses, plus a random offset up to this (so instances do not all retry at once).
    pub yield_spread: Duration,
    /// A slot may be used this long after its instant (judged again after the sleep until
    /// it). A late call bunches with the calls of the slots behind it, and the provider's
    /// burst is all that absorbs that: at 100/s with a burst of 10, calls that reach it more
    /// than about 90 ms late answer 429. The lateness that matters is the use's plus the
    /// request's flight, so this is half the burst's span, leaving the other half for the
    /// flight: 50 ms (`LIMITER_SLOT_VALIDITY_MS`; keep it at most half of `burst ÷ quota`).
    /// At 100 ms, release runs of 3,000 brought the double's bucket down to 0.97–4.6 tokens with tight work, and one
    /// run in about seven got a 429, which cut the rate to 0.75 of the quota for 25 s
    /// (docs/measurements.md#a-429-with-the-limiter-in-place). A 1 s validity let a slow debug
    /// run send bursts the double answered with 429 constantly.
    pub validity: Duration,
    /// How long a slot of a *cap* schedule (redrive share, tenant share) stays usable. A cap
    /// slot only counts work against a share; the call itself still takes a main slot, which
    /// spaces it. Sparse capped work (a redrive paced at 10/s over ten instances: one call per
    /// instance per second) stranded 9 of every 10 cap slots at 100 ms and paid a booking per
    /// call; at 10 s a block lasts. The share then holds over any 10 s, not any 100 ms.
    pub cap_validity: Duration,
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

/// Default cap on a shared pause from `Retry-After`: long enough to ride out a
/// provider's real throttling window, short enough that a `Retry-After: 86400` costs every
/// tenant a minute, not a day. It is `provider::MAX_RETRY_AFTER`: one cap for the message and
/// the schedule. The pause ends by itself; nothing needs clearing.
pub const MAX_SHARED_PAUSE: Duration = crate::provider::MAX_RETRY_AFTER;

impl LimiterSettings {
    /// Defaults for one channel's `quota` beside others (docs/design.md#channels): a booking
    /// holds a tenth of a second of the quota (at 10/s, one slot), not ten slots. A channel
    /// whose messages are a few in each batch of a fleet of instances would otherwise have each
    /// instance book ten slots for the one message it holds: nine stranded (a slot is usable
    /// for `validity` only) and the one message waiting behind the fleet's bookings, holding
    /// the whole batch — every other channel's messages in it — until its slot comes.
    pub fn for_channel(quota: f64) -> Self {
        let settings = Self::new(quota);
        let tenth = (quota / 10.0).floor().clamp(1.0, f64::from(settings.block)) as u32;
        Self { block: tenth, near_block: tenth, ..settings }
    }

    /// Defaults for a `quota` (see the module docs and docs/design.md#the-shared-limiter for why these values).
    pub fn new(quota: f64) -> Self {
        Self {
            name: "provider".into(),
            quota,
            block: 10,
            near_block: 10,
            normal_ahead: Duration::from_secs(10),
            near_hold: Duration::from_secs(2),
            normal_fill: Duration::from_millis(50),
            yield_spread: Duration::from_millis(250),
            validity: Duration::from_millis(50),
            cap_validity: Duration::from_secs(10),
            decrease: 0.75,
            recover_per_sec: 0.01,
            cut_gap: Duration::from_secs(1),
            redrive_share: 0.2,
            tenant_share: None,
            max_shared_pause: MAX_SHARED_PAUSE,
        }
    }

    /// When a cut to `rate` at `now_ms` is back at the quota (stores compare cuts by it: the one
    /// that recovers later is the lower at every instant). Without recovery a cut never ends;
    /// the lower one then still recovers "later".
    pub fn recovered_ms(&self, now_ms: i64, rate: f64) -> i64 {
        let per_ms = self.recover_per_sec * self.quota / 1000.0;
        if per_ms > 0.0 {
            now_ms.saturating_add(((self.quota - rate).max(0.0) / per_ms).ceil() as i64)
        } else {
            i64::MAX / 2 - (rate * 1000.0) as i64
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
    /// Pauses taken because the provider said its window had nothing left (before a 429).
    pub budget_pauses: u64,
    /// Rate cuts taken because the provider's remaining budget would not last its window.
    pub budget_cuts: u64,
    /// Reads of the schedule before a normal booking, taken when this instance last saw
    /// deadline-near work active (see [`SharedLimiter`]'s `take`).
    pub peeks: u64,
    /// Bookings the store refused, by lane: normal work (its horizon, or behind near work),
    /// deadline-near work, and capped (redrive, tenant) schedules.
    pub refused_normal: u64,
    /// See `refused_normal`.
    pub refused_near: u64,
    /// See `refused_normal`.
    pub refused_cap: u64,
    /// Main-schedule slots by how late they were handed to their call (after the sleep until
    /// their instant, the clock's own overshoot included): under 10 ms, 10–25, 25–50, 50 and
    /// over. A late call bunches with the calls behind it: a provider with a burst of `b`
    /// calls at `quota`/s answers 429 once calls arrive more than about `b / quota` late.
    pub late: [u64; 4],
    /// The latest of those, ms.
    pub late_max_ms: u64,
}

/// The least grace a booking gives an idle schedule before restarting it at `now` (see
/// `take`): the longest slot validity any release has used.
pub const RESTART_GRACE_FLOOR: Duration = Duration::from_millis(100);

/// At most this many slots in a row are stranded after their wait (the instance woke past
/// each one's window) before the caller is denied: a starved instance would otherwise strand
/// one fleet slot per pass, and book a block (a write) each time its pool ran dry.
const MAX_LATE_WAKES: u32 = 3;

/// [`LimiterStats::late`]'s upper bounds, ms (the last bucket is open).
pub const LATE_BOUNDS_MS: [u64; 3] = [10, 25, 50];

#[derive(Debug, Default)]
struct Pool {
    slots: VecDeque<i64>,
    view: SlotView,
    /// How long this pool's slots stay usable, ms (set when first filled).
    validity_ms: i64,
}

impl Pool {
    /// Drops the slots whose use window (`validity_ms` after their instant) has passed;
    /// returns how many were stranded.
    fn expire(&mut self, now: i64) -> u64 {
        let validity = self.validity_ms;
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
    /// The pace of a provider window longer than the shared pause: at most this rate, calls/s,
    /// until this instant, ms (see [`Limiter::budget`]).
    window_pace: Mutex<Option<(f64, i64)>>,
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
            window_pace: Mutex::default(),
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
        let mut pools = lock(&self.pools);
        let stranded: u64 = pools.values_mut().map(|p| p.expire(now)).sum();
        let mut st = lock(&self.stats);
        st.stranded += stranded;
        *st
    }

    /// The admitted rate this instance last saw for the main schedule.
    pub fn rate(&self) -> f64 {
        let now = self.clock.now().timestamp_millis();
        let view = lock(&self.pools).get(&self.main_key()).map(|p| p.view).unwrap_or_default();
        self.main_rate(&view, now)
    }

    /// The main schedule's rate at `now`: the stored cut's, within a long provider window's
    /// pace while that window lasts.
    fn main_rate(&self, view: &SlotView, now: i64) -> f64 {
        let rate = self.settings.rate(view, now);
        match *lock(&self.window_pace) {
            Some((pace, until)) if until > now => rate.min(pace),
            _ => rate,
        }
    }

    /// The earliest pooled slot usable before `deadline_ms`, if any (expired ones dropped).
    fn pooled(&self, key: &str, deadline_ms: i64) -> Option<i64> {
        let now = self.clock.now().timestamp_millis();
        let mut pools = lock(&self.pools);
        let pool = pools.get_mut(key)?;
        lock(&self.stats).stranded += pool.expire(now);
        let t = pool.slots.front().copied().filter(|t| *t <= deadline_ms)?;
        pool.slots.pop_front();
        Some(t)
    }

    /// Whether normal work should read the schedule before booking `key`: its last view shows
    /// a deadline-near mark that lapsed within one `near_hold` (likely extended since), the
    /// view itself does not already make it wait, and its pool holds no slot in time.
    fn near_seen_lapsing(&self, key: &str, pool_key: &str, deadline_ms: i64) -> bool {
        let now = self.clock.now().timestamp_millis();
        let pools = lock(&self.pools);
        let seen = pools.get(key).map(|p| p.view).unwrap_or_default();
        let pooled = pools.get(pool_key).and_then(|p| p.slots.front()).is_some_and(|t| *t <= deadline_ms);
        let fill_ms = self.settings.normal_fill.as_millis() as i64;
        !pooled
            && seen.near_until_ms > 0
            && seen.near_until_ms + self.settings.near_hold.as_millis() as i64 >= now
            && !near_busy(&seen, now, fill_ms)
    }

    fn main_key(&self) -> String {
        format!("{}#main", self.settings.name)
    }

    /// How long normal work waits behind deadline-near work: until the near-active mark lapses,
    /// plus up to `yield_spread`, so the instances waiting do not all book at the same instant.
    fn yield_for(&self, left_ms: i64) -> Duration {
        let spread = self.settings.yield_spread.as_millis() as i64;
        Duration::from_millis((left_ms.max(0) + 1 + self.jitter(spread)) as u64)
    }

    fn jitter(&self, upto_ms: i64) -> i64 {
        (lock(&self.rng).next_u64() % upto_ms.max(1) as u64) as i64
    }

    /// Takes one slot of `key`'s schedule before `deadline_ms`, waiting in-process for it.
    /// Deadline-near work of the main schedule keeps its booked slots in a pool of its own
    /// (`{key}|near`), which it draws from first; normal work takes from it only slots already
    /// due, which would otherwise expire unused.
    async fn take(
        &self,
        key: &str,
        cap_rate: Option<f64>,
        class: LimiterClass,
        deadline_ms: i64,
    ) -> Result<Take, LimiterError> {
        let s = &self.settings;
        let validity = s.validity.as_millis() as i64;
        let pool_validity = if cap_rate.is_some() { s.cap_validity } else { s.validity }.as_millis() as i64;
        let near = cap_rate.is_none() && class == LimiterClass::DeadlineNear;
        let normal = cap_rate.is_none() && !near;
        let near_pool = format!("{key}|near");
        let pool_key = if near { near_pool.as_str() } else { key };
        // Every pass books, takes a slot or sleeps at least 1 ms towards `deadline_ms`; the
        // bound is a backstop against a store that answers nonsense.
        for _ in 0..10_000 {
            if let Some(t) = self.pooled(pool_key, deadline_ms) {
                return Ok(Take::Slot(t));
            }
            // A near slot due now or already past (still valid): near callers of this instance
            // passed it by, so it would expire unused; it is booked already.
            if normal && let Some(t) = self.pooled(&near_pool, self.clock.now().timestamp_millis().min(deadline_ms)) {
                return Ok(Take::Slot(t));
            }
            // One booking in flight per instance: the callers behind it usually find the
            // pool refilled, instead of each booking a block and stranding most of them.
            let guard = self.booking.lock().await;
            // Normal work that last saw deadline-near work active reads the schedule before it
            // books. Near bookings keep extending the mark `near_hold` at a time, so an
            // instance that slept until the mark it saw lapse usually finds it extended: its
            // booking would be refused (a conditional write that buys nothing, plus the read
            // of the item that dynalite needs to say why) by every waiting instance each hold.
            // A read costs a fifth of a write and spares the hot item the contention; when
            // the near demand has ended, the read is the one extra request before the booking.
            // The read comes first, so the pass below decides from it (the mark, a pause, a
            // cut) and from the clock after it.
            if normal && self.near_seen_lapsing(key, pool_key, deadline_ms) {
                lock(&self.stats).peeks += 1;
                if let Some(fresh) = self.store.view(key).await? {
                    lock(&self.pools).entry(key.to_owned()).or_default().view = fresh;
                }
            }
            let now = self.clock.now().timestamp_millis();
            let budget = (deadline_ms - now).max(0);
            let mut sleep = None;
            let (slots, block_ms, interval) = {
                let mut pools = lock(&self.pools);
                let view = pools.get(key).map(|p| p.view).unwrap_or_default();
                let pool = pools.entry(pool_key.to_owned()).or_default();
                // Another caller may have refilled the pool while this one waited for the guard.
                pool.validity_ms = pool_validity;
                lock(&self.stats).stranded += pool.expire(now);
                if let Some(t) = pool.slots.front().copied()
                    && t <= deadline_ms
                {
                    pool.slots.pop_front();
                    return Ok(Take::Slot(t));
                }
                if view.paused_until_ms > now + budget {
                    return Ok(Take::Wait(Duration::from_millis((view.paused_until_ms - now) as u64)));
                }
                // Normal work yields to deadline-near work without a write while the last view
                // (at most one booking or read old) shows it active and the schedule busy: it
                // waits here, holding its message, and books again when the mark lapses.
                if normal && near_busy(&view, now, s.normal_fill.as_millis() as i64) {
                    sleep = Some(self.yield_for(view.near_until_ms - now));
                }
                let rate = cap_rate.unwrap_or_else(|| self.main_rate(&view, now));
                let interval = 1000.0 / rate;
                let n = if near { s.near_block } else { s.block };
                (n, (interval * f64::from(n)).ceil() as i64, interval)
            };
            if let Some(wait) = sleep {
                drop(guard);
                if self.wait_within(wait, deadline_ms).await {
                    continue;
                }
                return Ok(Take::Wait(wait));
            }
            let (lane, ahead) = match (cap_rate, near) {
                (Some(_), _) => (Lane::Cap, budget),
                (None, true) => (Lane::Near { hold_until_ms: now + s.near_hold.as_millis() as i64 }, budget),
                (None, false) => (
                    Lane::Normal { fill_ms: s.normal_fill.as_millis() as i64 },
                    budget.min(s.normal_ahead.as_millis() as i64),
                ),
            };
            // A schedule idle for less than the grace continues from `next`: an instance may
            // still be using its last slots. The grace covers every validity a fleet in the
            // middle of a deploy may hold, the validity before 2026-12-04 (100 ms) included: an
            // instance still at 100 ms uses a slot that late, and a restart behind it at 50 ms
            // would put calls on top of it.
            let grace_ms = validity.max(RESTART_GRACE_FLOOR.as_millis() as i64);
            let booked = self.store.book(key, &Book { now_ms: now, block_ms, ahead_ms: ahead, grace_ms, lane }).await?;
            match booked {
                Booked::Got { start_ms, view } => {
                    lock(&self.stats).bookings += 1;
                    let mut pools = lock(&self.pools);
                    pools.entry(key.to_owned()).or_default().view = view;
                    let pool = pools.entry(pool_key.to_owned()).or_default();
                    // A cap block's slots all open at its start: they count work against a share,
                    // the main schedule spaces the calls. Spaced at the cap rate they made the
                    // records of one batch reach the main schedule one by one, too far apart to
                    // share a main block (measured: 0.26 main bookings per redriven call).
                    let spacing = if cap_rate.is_some() { 0.0 } else { interval };
                    let mut fresh: Vec<i64> = (0..slots)
                        .map(|i| start_ms + (f64::from(i) * spacing) as i64)
                        .filter(|t| *t >= view.paused_until_ms)
                        .collect();
                    pool.slots.extend(fresh.drain(..));
                    pool.slots.make_contiguous().sort_unstable();
                    // Loop: the next pass takes the earliest slot (ours or an older one).
                }
                Booked::Full { view } => {
                    {
                        let mut st = lock(&self.stats);
                        match lane {
                            Lane::Normal { .. } => st.refused_normal += 1,
                            Lane::Near { .. } => st.refused_near += 1,
                            Lane::Cap => st.refused_cap += 1,
                        }
                    }
                    lock(&self.pools).entry(key.to_owned()).or_default().view = view;
                    drop(guard);
                    let wait = if matches!(lane, Lane::Normal { .. }) && view.near_until_ms >= now {
                        // Behind deadline-near demand: wait for its mark to lapse.
                        self.yield_for(view.near_until_ms - now)
                    } else {
                        Duration::from_millis(((view.next_ms - ahead - now).max(1) + self.jitter(block_ms)) as u64)
                    };
                    if !self.wait_within(wait, deadline_ms).await {
                        return Ok(Take::Wait(wait));
                    }
                }
            }
        }
        Ok(Take::Wait(Duration::from_millis(s.normal_ahead.as_millis() as u64)))
    }

    /// Sleeps `wait` when that ends before `deadline_ms`; false (no sleep) otherwise.
    async fn wait_within(&self, wait: Duration, deadline_ms: i64) -> bool {
        let now = self.clock.now().timestamp_millis();
        if now + wait.as_millis() as i64 > deadline_ms {
            return false;
        }
        self.clock.sleep(wait).await;
        true
    }

    async fn take_and_wait(
        &self,
        key: &str,
        cap_rate: Option<f64>,
        class: LimiterClass,
        deadline_ms: i64,
    ) -> Result<Option<Duration>, LimiterError> {
        let validity = self.settings.validity.as_millis() as u64;
        let mut late_wakes = 0;
        loop {
            let t = match self.take(key, cap_rate, class, deadline_ms).await? {
                Take::Slot(t) => t,
                Take::Wait(d) => return Ok(Some(d)),
            };
            let now = self.clock.now().timestamp_millis();
            if t > now {
                self.clock.sleep(Duration::from_millis((t - now) as u64)).await;
            }
            if cap_rate.is_some() {
                return Ok(None);
            }
            // A main slot is judged again after the sleep: an instance starved of CPU can wake
            // past its slot's use window, and its call would then bunch with the calls of the
            // slots behind it (the provider's burst is what absorbs lateness). Such a slot is
            // stranded like one nobody took, and the call takes another.
            let late = (self.clock.now().timestamp_millis() - t).max(0) as u64;
            let mut st = lock(&self.stats);
            if late > validity {
                st.stranded += 1;
                late_wakes += 1;
                drop(st);
                let now = self.clock.now().timestamp_millis();
                // Past its budget, or starved again and again: the caller is denied (the sender
                // defers the message) rather than granted a slot after its deadline.
                if now >= deadline_ms || late_wakes >= MAX_LATE_WAKES {
                    return Ok(Some(Duration::from_millis(validity)));
                }
                continue;
            }
            st.late[LATE_BOUNDS_MS.iter().take_while(|b| late >= **b).count()] += 1;
            st.late_max_ms = st.late_max_ms.max(late);
            return Ok(None);
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
        let gap = s.cut_gap.as_millis() as i64;
        let view = lock(&self.pools).get(&key).map(|p| p.view).unwrap_or_default();
        let rate = self.main_rate(&view, now);
        let cut = (rate * s.decrease).max(s.quota / 100.0);
        // What this instance already knows was done needs no write: a cut within the gap (the
        // store would refuse it anyway, and a refused conditional write costs as much as one
        // that applies), a pause at least as long, give or take the second that is
        // `Retry-After`'s resolution.
        if view.cut_rate.is_none() || view.cut_at_ms + gap < now {
            self.store.cut(&key, now, cut, s.recovered_ms(now, cut), gap).await?;
        }
        {
            let mut pools = lock(&self.pools);
            let pool = pools.entry(key.clone()).or_default();
            if pool.view.cut_at_ms + (s.cut_gap.as_millis() as i64) < now || pool.view.cut_rate.is_none() {
                pool.view.cut_rate = Some(cut);
                pool.view.cut_at_ms = now;
                pool.view.cut_recovered_ms = s.recovered_ms(now, cut);
            }
        }
        match retry_after {
            Some(ra) => self.pause_for(&key, &view, now, ra).await,
            None => Ok(()),
        }
    }

    async fn budget(&self, remaining: u64, reset: Duration) -> Result<(), LimiterError> {
        let now = self.clock.now().timestamp_millis();
        let key = self.main_key();
        let s = &self.settings;
        let view = lock(&self.pools).get(&key).map(|p| p.view).unwrap_or_default();
        // Only a long window is worth acting on. A reset is told in whole seconds, so "1" may
        // mean 5 ms: pausing the whole schedule for it each time a 1 s window runs dry would
        // cost up to half the quota; such a window's 429, if it comes, says how long itself.
        if reset < BUDGET_WINDOW_MIN {
            return Ok(());
        }
        if remaining == 0 {
            // The next call would be refused: no slot before the window resets.
            lock(&self.stats).budget_pauses += 1;
            return self.pause_for(&key, &view, now, reset).await;
        }
        if reset > s.max_shared_pause {
            // A window longer than the shared pause (an hourly quota) cannot be ridden out by
            // pausing when it runs dry: the pause is capped, and after it every call is a 429
            // until the reset. Spread over 60 s (as it was), 7,515 of 9,000 an hour went in the
            // first 90 s (quota 100/s; the test below). So it is paced over its real length:
            // this instance books at most `remaining / reset` until the reset. Every accepted
            // answer restates it, so the pace follows the provider's own count (no write);
            // every instance hears its own answers, and all of them book one schedule, so the
            // fleet calls at that pace. Not below the cut floor: a block at a pace of a few
            // calls an hour would book the schedule for hours.
            let pace = (remaining as f64 / reset.as_secs_f64()).max(s.quota / 100.0);
            *lock(&self.window_pace) = Some((pace, now + reset.as_millis() as i64));
            return Ok(());
        }
        // Near the end of any window `remaining` is small; a cut recovers slowly
        // (`recover_per_sec`), so only a budget that would run dry at half the rate cuts.
        let reset_s = reset.as_secs_f64();
        let rate = self.main_rate(&view, now);
        let fits = remaining as f64 / reset_s.max(f64::MIN_POSITIVE);
        if fits >= rate * 0.5 {
            return Ok(());
        }
        let gap = s.cut_gap.as_millis() as i64;
        if view.cut_rate.is_some() && view.cut_at_ms + gap >= now {
            return Ok(());
        }
        let cut = fits.max(s.quota / 100.0);
        self.store.cut(&key, now, cut, s.recovered_ms(now, cut), gap).await?;
        lock(&self.stats).budget_cuts += 1;
        let mut pools = lock(&self.pools);
        let pool = pools.entry(key).or_default();
        pool.view.cut_rate = Some(cut);
        pool.view.cut_at_ms = now;
        pool.view.cut_recovered_ms = s.recovered_ms(now, cut);
        Ok(())
    }
}

/// The shortest provider window (time to its reset) whose remaining budget the limiter acts on
/// (see [`Limiter::budget`]).
pub const BUDGET_WINDOW_MIN: Duration = Duration::from_secs(2);

impl<S: SlotStore, C: Clock> SharedLimiter<S, C> {
    /// No slot before `now + wait` (capped: the shared schedule serves every class and tenant,
    /// see `max_shared_pause`), written unless this instance knows a pause at least as long
    /// (give or take the second that is `Retry-After`'s resolution) was made.
    async fn pause_for(&self, key: &str, view: &SlotView, now: i64, wait: Duration) -> Result<(), LimiterError> {
        let until = now + wait.min(self.settings.max_shared_pause).as_millis() as i64;
        if until > view.paused_until_ms + 1000 {
            self.store.pause(key, until).await?;
        }
        let mut pools = lock(&self.pools);
        let pool = pools.entry(key.to_owned()).or_default();
        pool.view.paused_until_ms = pool.view.paused_until_ms.max(until);
        // Every pool drawn from this schedule (normal and deadline-near) loses its slots
        // before the pause.
        let main = self.main_key();
        for p in pools.iter_mut().filter(|(k, _)| k.starts_with(&main)).map(|(_, p)| p) {
            let before = p.slots.len();
            p.slots.retain(|t| *t >= until);
            lock(&self.stats).stranded += (before - p.slots.len()) as u64;
        }
        Ok(())
    }
}

/// Deadline-near work is active and the schedule is booked beyond what normal work may fill.
fn near_busy(view: &SlotView, now: i64, fill_ms: i64) -> bool {
    view.near_until_ms >= now && view.next_ms > now + fill_ms
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

    /// A clock whose sleeps end `late_ms` after they were due: an instance starved of CPU.
    #[derive(Clone)]
    struct Oversleeping {
        clock: ManualClock,
        late_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    }

    impl Clock for Oversleeping {
        fn now(&self) -> DateTime<Utc> {
            self.clock.now()
        }

        fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
            let late = self.late_ms.load(std::sync::atomic::Ordering::Relaxed);
            self.clock.sleep(d + Duration::from_millis(late))
        }
    }

    impl Oversleeping {
        /// `l`'s first call goes on time (its slot is now, no sleep); every wake after it is
        /// `late_ms` late.
        async fn first_on_time_then_late(&self, l: &SharedLimiter<MemorySlotStore, Self>, late_ms: u64) {
            self.late_ms.store(0, std::sync::atomic::Ordering::Relaxed);
            let first = l.acquire(req(LimiterClass::Normal, &tenant()), Duration::from_secs(5)).await.unwrap();
            assert_eq!(first, LimiterAnswer::Granted);
            self.late_ms.store(late_ms, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// A slot whose wait ended past its use window is not used: the call would bunch with the
    /// calls of the slots behind it and spend the provider's burst (measured: a 429 about one
    /// run in seven at 100 ms). It is stranded and the call takes a slot still in its window.
    #[tokio::test]
    async fn a_slot_woken_past_its_window_is_stranded_not_called() {
        let c = Oversleeping { clock: clock(), late_ms: std::sync::Arc::default() };
        let settings = LimiterSettings::new(100.0);
        let validity = settings.validity.as_millis() as u64;
        let l = SharedLimiter::new(MemorySlotStore::default(), c.clone(), settings, 1);
        let t = tenant();
        let t0 = c.now();
        // The next slot is 10 ms away; the sleep for it ends 10 ms past its window.
        c.first_on_time_then_late(&l, validity + 10).await;
        assert_eq!(
            l.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(5)).await.unwrap(),
            LimiterAnswer::Granted
        );
        let st = l.stats();
        assert!(crate::clock::until(t0, c.now()) >= Duration::from_millis(validity + 20), "it slept past the slot");
        assert!(st.stranded >= 1, "the slot woken past its window was stranded: {st:?}");
        assert!(st.late_max_ms <= validity, "no call went more than the window late: {st:?}");
        assert_eq!(st.granted, 2);
        assert_eq!(st.late.iter().sum::<u64>(), 2, "each call counted once by its lateness: {st:?}");

        // Woken past its window *and* past the caller's budget: denied, not granted a slot
        // after the deadline (the sender defers the message).
        let l = SharedLimiter::new(MemorySlotStore::default(), c.clone(), LimiterSettings::new(100.0), 2);
        c.first_on_time_then_late(&l, validity + 10).await;
        let answer = l.acquire(req(LimiterClass::Normal, &t), Duration::from_millis(20)).await.unwrap();
        assert!(matches!(answer, LimiterAnswer::Denied { .. }), "{answer:?}");
        assert_eq!((l.stats().granted, l.stats().stranded), (1, 1));
        // A starved instance (every wake 60 ms late, slots 100 ms apart: each one's wait
        // overshoots its window) strands at most MAX_LATE_WAKES slots in a row, then is denied
        // however long its budget.
        let l = SharedLimiter::new(MemorySlotStore::default(), c.clone(), LimiterSettings::new(10.0), 3);
        c.first_on_time_then_late(&l, validity + 10).await;
        let answer = l.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(30)).await.unwrap();
        assert!(matches!(answer, LimiterAnswer::Denied { .. }), "{answer:?}");
        let st = l.stats();
        assert_eq!(st.granted, 1);
        assert_eq!(st.stranded, u64::from(MAX_LATE_WAKES), "{st:?}");
        assert_eq!(st.bookings, 1, "the block's slots served every wake: {st:?}");
    }

    /// Normal work behind deadline-near work waits in-process for a slot after it (no
    /// deferral through SQS), and is denied only when that is past its wait budget.
    #[tokio::test]
    async fn normal_work_waits_behind_deadline_near_work_instead_of_leaving() {
        let c = clock();
        let store = MemorySlotStore::default();
        let near = SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(10.0), 1);
        let normal = SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(10.0), 2);
        let t = tenant();
        let t0 = c.now();
        // Near work books three blocks ahead (3 s of slots) and marks the schedule for 2 s.
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
        // A budget shorter than the near demand: denied, nothing booked.
        let writes = store.writes();
        let LimiterAnswer::Denied { .. } =
            normal.acquire(req(LimiterClass::Normal, &t), Duration::from_millis(500)).await.unwrap()
        else {
            panic!("normal work cannot have a slot within 500 ms");
        };
        assert!(store.writes() <= writes + 1, "at most one refused booking");
        // Enough budget: it waits here and is granted a slot after the near slots.
        assert_eq!(
            normal.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(10)).await.unwrap(),
            LimiterAnswer::Granted
        );
        let waited = crate::clock::until(t0, c.now());
        assert!(waited >= Duration::from_secs(2), "normal work went ahead of near slots after {waited:?}");
        assert!(store.writes() <= writes + 4, "waiting costs no writes: {} more", store.writes() - writes);
        // Deadline-near work books in blocks: ten near calls cost one booking.
        let before = store.writes();
        for _ in 0..10 {
            assert_eq!(
                near.acquire(req(LimiterClass::DeadlineNear, &t), Duration::from_secs(10)).await.unwrap(),
                LimiterAnswer::Granted
            );
        }
        assert_eq!(store.writes() - before, 1, "one block of ten");
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

    /// A provider window longer than the shared pause (an hourly quota of 9,000 at a
    /// per-second quota of 100) is paced over its real length. Spread over 60 s, 7,515 calls went
    /// in the first 90 s and the rest by 284 s, and the hour then cycled through 55 429s (the
    /// pause at exhaustion is capped at 60 s, so it cannot ride the window out).
    #[tokio::test]
    async fn an_hourly_budget_is_paced_over_the_hour() {
        let c = clock();
        let store = MemorySlotStore::default();
        let l = SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(100.0), 1);
        let t = tenant();
        let t0 = c.now().timestamp_millis();
        let window_end = t0 + 3_600_000;
        const HOURLY: u64 = 9_000;
        let (mut used, mut first_90s, mut throttled, mut dry_at) = (0u64, 0u64, 0u64, None);
        // A backlog that never runs dry: call whenever the limiter grants a slot.
        while c.now().timestamp_millis() < window_end {
            match l.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(20)).await.unwrap() {
                LimiterAnswer::Denied { retry_in } => c.advance(retry_in.max(Duration::from_millis(1))),
                LimiterAnswer::Granted => {
                    let now = c.now().timestamp_millis();
                    if now >= window_end {
                        break;
                    }
                    // The provider reports the reset in whole seconds, rounded up.
                    let reset = Duration::from_secs(((window_end - now) as u64).div_ceil(1000));
                    if used < HOURLY {
                        used += 1;
                        if now < t0 + 90_000 {
                            first_90s += 1;
                        }
                        if used == HOURLY {
                            dry_at = Some((now - t0) / 1000);
                        }
                        l.budget(HOURLY - used, reset).await.unwrap();
                    } else {
                        // 429, "remaining 0, resets in …": Retry-After is the reset.
                        throttled += 1;
                        l.throttled(Some(reset)).await.unwrap();
                    }
                }
            }
        }
        let fair_90s = HOURLY as f64 * 90.0 / 3600.0;
        assert!(
            (first_90s as f64) < fair_90s * 1.5,
            "{first_90s} calls accepted in the first 90 s (the hour's pace is {fair_90s}); \
             {used} over the hour, spent after {dry_at:?} s, {throttled} 429s"
        );
        assert_eq!(throttled, 0, "the budget ran dry before the reset: {throttled} 429s");
        assert!(used as f64 >= HOURLY as f64 * 0.9, "the hour's budget goes unused: {used} of {HOURLY}");
    }

    /// A cut only ever lowers the shared rate. An instance whose view predates the cuts
    /// other instances made (it has not booked since) computes its cut from the full quota;
    /// written after the gap, it would raise the rate the others had cut lower.
    #[tokio::test]
    async fn a_stale_instance_never_raises_the_shared_rate() {
        let c = clock();
        let store = MemorySlotStore::default();
        let settings = LimiterSettings::new(100.0);
        let a = SharedLimiter::new(store.clone(), c.clone(), settings.clone(), 1);
        let stale = SharedLimiter::new(store.clone(), c.clone(), settings.clone(), 2);
        let t = tenant();
        // The stale instance books once, before any cut: its view shows the full quota.
        stale.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(1)).await.unwrap();
        a.throttled(None).await.unwrap();
        c.advance(Duration::from_millis(1500));
        a.throttled(None).await.unwrap();
        c.advance(Duration::from_millis(1500));
        let key = "provider#main";
        let now = c.now().timestamp_millis();
        let before = settings.rate(&store.view(key).await.unwrap().unwrap(), now);
        assert!(before < 60.0, "two cuts: {before}");
        stale.throttled(None).await.unwrap();
        let after = settings.rate(&store.view(key).await.unwrap().unwrap(), now);
        assert!(after <= before, "a stale instance raised the shared rate from {before} to {after}");
        // A cut from a view that knows the current rate still lowers it.
        c.advance(Duration::from_millis(1500));
        a.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(5)).await.unwrap();
        let now = c.now().timestamp_millis();
        let before = settings.rate(&store.view(key).await.unwrap().unwrap(), now);
        a.throttled(None).await.unwrap();
        let after = settings.rate(&store.view(key).await.unwrap().unwrap(), c.now().timestamp_millis());
        assert!(after < before * 0.8, "an informed cut lowers the rate: {before} -> {after}");
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

    /// A store where deadline-near work keeps arriving: before each request normal work makes,
    /// near work (another instance) has booked a second of slots and held the schedule 2 s more,
    /// until `near_until_ms`. Counts what normal work spends.
    #[derive(Clone)]
    struct NearKeepsComing {
        inner: MemorySlotStore,
        clock: ManualClock,
        near_until_ms: i64,
        normal_writes: std::sync::Arc<std::sync::atomic::AtomicU64>,
        normal_reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
    }

    impl NearKeepsComing {
        async fn near_books(&self, key: &str) {
            let now = self.clock.now().timestamp_millis();
            if now < self.near_until_ms {
                let lane = Lane::Near { hold_until_ms: now + 2000 };
                let book = Book { now_ms: now, block_ms: 1000, ahead_ms: 60_000, grace_ms: 0, lane };
                let _ = self.inner.book(key, &book).await.unwrap();
            }
        }
    }

    impl SlotStore for NearKeepsComing {
        async fn book(&self, key: &str, req: &Book) -> Result<Booked, LimiterError> {
            self.near_books(key).await;
            let before = self.inner.writes();
            let booked = self.inner.book(key, req).await;
            self.normal_writes.fetch_add(self.inner.writes() - before, std::sync::atomic::Ordering::Relaxed);
            booked
        }
        async fn cut(&self, key: &str, now_ms: i64, rate: f64, rec: i64, gap: i64) -> Result<(), LimiterError> {
            self.inner.cut(key, now_ms, rate, rec, gap).await
        }
        async fn pause(&self, key: &str, until_ms: i64) -> Result<(), LimiterError> {
            self.inner.pause(key, until_ms).await
        }
        async fn view(&self, key: &str) -> Result<Option<SlotView>, LimiterError> {
            self.near_books(key).await;
            self.normal_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.view(key).await
        }
        fn writes(&self) -> u64 {
            self.inner.writes()
        }
    }

    /// Normal work waiting behind a stream of deadline-near work reads the schedule when the
    /// mark it saw lapses, instead of booking into a refusal each time the mark was extended.
    #[tokio::test]
    async fn normal_work_behind_a_near_stream_reads_instead_of_being_refused() {
        let c = clock();
        let near_for = Duration::from_secs(20);
        let store = NearKeepsComing {
            inner: MemorySlotStore::default(),
            clock: c.clone(),
            near_until_ms: c.now().timestamp_millis() + near_for.as_millis() as i64,
            normal_writes: Default::default(),
            normal_reads: Default::default(),
        };
        let normal = SharedLimiter::new(store.clone(), c.clone(), LimiterSettings::new(10.0), 2);
        let t = tenant();
        let t0 = c.now();
        store.near_books("provider#main").await;
        assert_eq!(
            normal.acquire(req(LimiterClass::Normal, &t), Duration::from_secs(60)).await.unwrap(),
            LimiterAnswer::Granted
        );
        let waited = crate::clock::until(t0, c.now());
        assert!(waited >= near_for, "normal work went ahead of the near stream after {waited:?}");
        let writes = store.normal_writes.load(std::sync::atomic::Ordering::Relaxed);
        let reads = store.normal_reads.load(std::sync::atomic::Ordering::Relaxed);
        // 20 s of near demand extended 2 s at a time: about ten wakes. Each used to be a
        // refused booking; now each is a read, and the one booking after the stream ends.
        assert!(writes <= 2, "{writes} writes (reads {reads}) behind 20 s of near work");
        assert!(reads >= 5, "{reads} reads: the wakes were not reads");
        assert_eq!(normal.stats().peeks, reads);
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
        // 40 at 20 % of 100/s = 20/s, with a burst of one block (10: a cap block's slots open
        // together): at least (40 − 10) / 20 = 1.5 s, not the 0.4 s the main quota allows.
        let took = crate::clock::until(t0, c.now()).as_secs_f64();
        assert!((1.5..2.2).contains(&took), "took {took}");
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
        // 50/s with a burst of one block: at least (50 − 10) / 50 = 0.8 s.
        let took = crate::clock::until(t0, c.now()).as_secs_f64();
        assert!((0.8..1.1).contains(&took), "one tenant at 50/s: {took}");
        let t1 = c.now();
        assert_eq!(
            l.acquire(req(LimiterClass::Normal, &small), Duration::from_secs(5)).await.unwrap(),
            LimiterAnswer::Granted
        );
        assert!(crate::clock::until(t1, c.now()) < Duration::from_millis(100), "the other tenant is not queued behind");
    }
}
