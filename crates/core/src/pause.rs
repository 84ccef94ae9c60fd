//! The operator pause policy (docs/design.md#the-pause-switch): while an operator pause is in force the
//! scheduler releases nothing, the sender holds messages without spending attempts, and a
//! redrive refuses to start. The services apply it; handlers and harnesses only compose it.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;

use crate::clock::{Clock, add};
use crate::ports::{Control, ControlError, Pause};

/// How long a message held by an operator pause waits before it is looked at again.
pub const PAUSE_RECHECK: Duration = Duration::from_secs(60);

type Probe = Box<dyn Fn() -> BoxFuture<'static, Result<Option<Pause>, ControlError>> + Send + Sync>;
type Trip = Box<dyn Fn(Pause) -> BoxFuture<'static, Result<Option<Pause>, ControlError>> + Send + Sync>;

/// Who a pause set by the sender itself names as its owner (`punctual status` shows it).
pub const SENDER_OWNER: &str = "punctual-sender";

/// The pause switch as a hot path reads it: one read per `ttl` per instance (time from the
/// [`Clock`] port), the last answer kept when a read fails — a failing read never pauses or
/// unpauses delivery by itself.
pub struct PauseGate<C> {
    probe: Probe,
    trip: Trip,
    clock: C,
    ttl: Duration,
    /// (writes so far, the last answer and when it arrived).
    cache: Mutex<(u64, Cached)>,
    /// Held by the caller reading the switch, so the records of a batch that ask together when
    /// the answer ages out make one read, not one each.
    refresh: futures_util::lock::Mutex<()>,
}

type Cached = Option<(DateTime<Utc>, Option<Pause>)>;

impl<C> std::fmt::Debug for PauseGate<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PauseGate").field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

impl<C: Clock> PauseGate<C> {
    /// A gate over `control`, re-read at most every `ttl` of `clock`'s time (`ZERO`: every
    /// call reads it).
    pub fn new<K: Control + Clone + 'static>(control: K, clock: C, ttl: Duration) -> Self {
        let reader = control.clone();
        let probe: Probe = Box::new(move || {
            let control = reader.clone();
            Box::pin(async move { control.pause().await })
        });
        let trip: Trip = Box::new(move |pause| {
            let control = control.clone();
            Box::pin(async move { control.pause_unless_paused(&pause, SENDER_OWNER).await })
        });
        Self { probe, trip, clock, ttl, cache: Mutex::new((0, None)), refresh: futures_util::lock::Mutex::new(()) }
    }

    /// Pauses the fleet (audited as [`SENDER_OWNER`]) unless a pause is already in force — one
    /// conditional write, so an operator's pause set meanwhile is never replaced; only an
    /// operator lifts it. For a fault no single reminder can fix (credentials).
    pub async fn trip(&self, reason: &str) -> Result<(), ControlError> {
        if self.paused().await {
            return Ok(());
        }
        let pause = Pause { reason: reason.to_owned(), owner: SENDER_OWNER.to_owned(), since: self.clock.now() };
        let in_force = (self.trip)(pause.clone()).await?.unwrap_or(pause);
        self.store(Some(in_force));
        Ok(())
    }

    /// True while a pause is in force.
    pub async fn paused(&self) -> bool {
        self.pause().await.is_some()
    }

    /// The pause in force, if any: who set it (an operator, or [`SENDER_OWNER`] after a
    /// refusal no reminder can fix), why and since when.
    ///
    /// Read at most once per `ttl` (`ZERO`: every call reads). When the answer has aged out,
    /// one caller reads and the others keep the last answer meanwhile (at most `ttl` plus one
    /// read old) instead of waiting: a slow or hung read holds up only its own record. With no
    /// answer yet (a cold instance) each caller reads. An answer counts from when it arrived.
    pub async fn pause(&self) -> Option<Pause> {
        if self.ttl.is_zero() {
            return self.read(self.cached().1).await;
        }
        let (seen, cached) = self.cached();
        if let Some((at, v)) = &cached
            && self.clock.now() < add(*at, self.ttl)
        {
            return v.clone();
        }
        let Some(_reading) = self.refresh.try_lock() else {
            return match cached {
                Some((_, v)) => v,
                None => self.read(None).await,
            };
        };
        // A read that landed since this caller looked serves it too.
        let (now_seen, latest) = self.cached();
        if now_seen != seen {
            return latest.and_then(|(_, v)| v);
        }
        self.read(cached).await
    }

    fn cached(&self) -> (u64, Cached) {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn store(&self, v: Option<Pause>) {
        let mut c = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        *c = (c.0 + 1, Some((self.clock.now(), v)));
    }

    /// Reads the switch; a failed read keeps `last`'s answer.
    async fn read(&self, last: Cached) -> Option<Pause> {
        let v = match (self.probe)().await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the pause switch; keeping the last answer");
                last.and_then(|(_, v)| v)
            }
        };
        self.store(v.clone());
        v
    }
}

/// Who set a pause: what the scheduler publishes each tick, so a pause never reads as health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PausedBy {
    /// An operator (`punctual pause`).
    Operator,
    /// The sender itself, after a refusal no reminder can fix (a confirmed 401, an account
    /// SES refuses): it pages at once.
    Sender,
}

impl PausedBy {
    /// Of `pause`.
    pub fn of(pause: &Pause) -> Self {
        if pause.owner == SENDER_OWNER { Self::Sender } else { Self::Operator }
    }
}

/// Reads `gate` when there is one: `None` is never paused.
pub async fn is_paused<C: Clock>(gate: Option<&PauseGate<C>>) -> bool {
    match gate {
        Some(g) => g.paused().await,
        None => false,
    }
}
