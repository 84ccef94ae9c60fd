//! The sender service: drives [`decide`] for one received message over the ports, then
//! applies the disposition (ledger, requeue, DLQ) and says whether the message can be
//! acknowledged.
//!
//! Order of effects, chosen so that a crash at any point loses nothing:
//! - deferral: requeue the copy first, then release the claim, then acknowledge — a crash in
//!   between leaves two copies, and the ledger absorbs the duplicate;
//! - quarantine: DLQ first, then the ledger, then acknowledge — the message is never only in
//!   a log;
//! - delivery: ledger after the provider accepted; if that write fails the message is retried,
//!   reaches the provider again with the same `Idempotency-Key`, and is recorded then.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::backoff::SplitMix64;
use crate::clock::{Clock, until};
use crate::contract::{MalformedMessage, ReminderMessage};
use crate::decision::{
    ChannelView, ClaimView, Decision, Disposition, Inputs, Observed, RecordView, SenderPolicy, Step, decide,
};
use crate::lanes::QueueLane;
use crate::pause::{PAUSE_RECHECK, PauseGate, is_paused};
use crate::ports::{
    Ledger, LedgerError, Limiter, LimiterClass, LimiterError, LimiterRequest, OwnerToken, Provider, ProviderError,
    ProviderRequest, Quarantine, QueueError, RenewalLookup, Renewals, RenewalsError, SendQueue, SettleOutcome,
    Settlement,
};
use crate::provider::ProviderOutcome;
use crate::reason::{ReasonCode, ReminderState};

/// One message as received from a queue: a send queue's (the sender), the commands queue's (the
/// ingest).
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// SQS message id (used for the owner token and DLQ metadata, never as the reminder id).
    pub message_id: &'a str,
    /// The raw body.
    pub body: &'a str,
}

/// The result of processing one message, for metrics and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processed {
    /// The reminder, when the body decoded.
    pub reminder_id: Option<crate::ids::ReminderId>,
    /// What was decided.
    pub disposition: Disposition,
    /// Provider calls made (0 or 1).
    pub provider_calls: u32,
    /// The provider's last answer, if called.
    pub provider_status: Option<u16>,
    /// True when the provider answered 429.
    pub throttled: bool,
    /// Time from `deliver_after` to delivery, for delivered reminders.
    pub delivery_lag: Option<Duration>,
    /// Time left to `deliver_by` when decided.
    pub slack: Option<Duration>,
    /// The ledger said the lease was lost or the reminder already delivered at settle time.
    pub settle_conflict: Option<SettleOutcome>,
    /// A call was made after an indeterminate outcome to a provider that does not honour
    /// idempotency keys (`at_least_once`): its effect may be the reminder's second.
    pub possible_double: bool,
    /// The reminder's tenant, when the body decoded (the SLO's per-tenant views).
    pub tenant_id: Option<crate::ids::TenantId>,
    /// The message is a redrive's copy: its reminder was judged against the SLO when it was
    /// dead-lettered, so this decision is not judged again.
    pub redriven: bool,
    /// How long past its `deliver_after` the reminder was when this copy was decided (None
    /// before it is due, and for a malformed body): the age of released, undelivered work, which
    /// SQS's own age cannot show (every deferral is a fresh message).
    pub waited: Option<Duration>,
    /// How long the provider call took, when one was made.
    pub call_latency: Option<Duration>,
    /// The declared channel whose provider the call went to (`None`: no channels declared, or
    /// no route was chosen).
    pub channel: Option<String>,
}

/// How long past `deliver_after` a reminder is at `now` (None when not yet due).
fn waited(msg: &ReminderMessage, now: DateTime<Utc>) -> Option<Duration> {
    (now >= msg.deliver_after).then(|| until(msg.deliver_after, now))
}

/// Infrastructure failed while processing one message; the message is retried.
#[derive(Debug, thiserror::Error)]
pub enum SenderError {
    /// The ledger.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The renewals table.
    #[error(transparent)]
    Renewals(#[from] RenewalsError),
    /// The limiter.
    #[error(transparent)]
    Limiter(#[from] LimiterError),
    /// The provider client (before any call).
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// A queue.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl SenderError {
    /// A stable, low-cardinality name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Ledger(_) => "ledger",
            Self::Renewals(_) => "renewals",
            Self::Limiter(_) => "limiter",
            Self::Provider(_) => "provider_client",
            Self::Queue(_) => "queue",
        }
    }
}

/// The oldest renewal read the limiter's token may be asked for on: past it, the renewal is
/// read again before the token, never between the token and the call. A read there delays
/// the call past the slot the limiter booked for it, calls bunch, and the provider answers
/// 429: measured by `make run` (debug, 3,000 reminders), 214 429s and 0.43 limiter writes per
/// call with the read after the token, 3 and 0.27 without it. So a call goes out on a read at
/// most this old plus one limiter wait (bounded by the invocation's room).
pub const RENEWAL_FRESH_FOR: Duration = Duration::from_secs(1);

/// What a handler needs of the sender service: process one received message within an
/// invocation (see [`Sender::process`]). Handlers and the local event source are generic over
/// this one bound instead of the service's six ports.
pub trait Process: Send + Sync {
    /// Processes one message within an invocation ending at `invocation_deadline`.
    fn process(
        &self,
        received: Received<'_>,
        invocation_deadline: DateTime<Utc>,
    ) -> impl std::future::Future<Output = Result<Processed, SenderError>> + Send;
}

/// Tunables of the service beyond the pure policy.
#[derive(Debug, Clone, Copy)]
pub struct SenderSettings {
    /// The decision policy.
    pub policy: SenderPolicy,
    /// Work with less slack than this is `deadline_near` for the limiter, and a copy that will
    /// have less than this when it becomes visible is requeued to the urgent lane.
    pub deadline_near: Duration,
    /// Expected time from visible to received (added to the retry cutoff).
    pub queue_delay: Duration,
    /// Starting estimate of a provider call's latency, refined by measurement.
    pub initial_call_latency: Duration,
}

impl Default for SenderSettings {
    fn default() -> Self {
        Self {
            policy: SenderPolicy::default(),
            deadline_near: crate::lanes::URGENT_BELOW,
            queue_delay: Duration::from_secs(5),
            initial_call_latency: Duration::from_millis(500),
        }
    }
}

/// A declared channel's own limiter, provider and pause (docs/design.md#channels): a storm or a
/// credential refusal on one channel slows or stops that channel only.
pub struct ChannelRoute<T, P, C> {
    /// The channel's name, as renewals give it (`email`, `sms`).
    pub name: String,
    /// The channel's limiter, on its own schedule (its own key, quota and adaptive cut).
    pub limiter: T,
    /// The channel's provider.
    pub provider: P,
    /// The channel's own pause switch (`None`: only the fleet pause stops it).
    pub pause: Option<PauseGate<C>>,
}

/// Which limiter, provider and pause serve a message: the sender's own (no channels declared)
/// or a declared channel's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Default,
    Channel(usize),
}

/// The sender service, generic over its ports.
pub struct Sender<L, R, T, P, Q, C> {
    ledger: L,
    renewals: R,
    limiter: T,
    provider: P,
    queue: Q,
    clock: C,
    settings: SenderSettings,
    jitter: Mutex<SplitMix64>,
    /// Exponentially weighted provider latency, seconds.
    latency: Mutex<f64>,
    /// The operator pause switch (`None`: never paused).
    pause: Option<PauseGate<C>>,
    /// The declared channels (empty: the limiter and provider above serve every channel).
    channels: Vec<ChannelRoute<T, P, C>>,
}

impl<L, R, T, P, Q, C> Sender<L, R, T, P, Q, C>
where
    L: Ledger,
    R: Renewals,
    T: Limiter,
    P: Provider,
    Q: SendQueue,
    C: Clock,
{
    /// Composes a sender. `seed` seeds the backoff jitter and owner-token nonces.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ledger: L,
        renewals: R,
        limiter: T,
        provider: P,
        queue: Q,
        clock: C,
        settings: SenderSettings,
        seed: u64,
    ) -> Self {
        let latency = settings.initial_call_latency.as_secs_f64();
        // What the provider promises comes from its adapter, never from configuration alone.
        let mut settings = settings;
        settings.policy.provider_keys = provider.profile().honours_keys;
        Self {
            ledger,
            renewals,
            limiter,
            provider,
            queue,
            clock,
            settings,
            jitter: Mutex::new(SplitMix64::new(seed)),
            latency: Mutex::new(latency),
            pause: None,
            channels: Vec::new(),
        }
    }

    /// Routes each message by its renewal's channel to that channel's limiter, provider and
    /// pause; a renewal whose channel is not among `routes` is dead-lettered as
    /// `unknown_channel`. Once channels are declared, the limiter and provider given to
    /// [`Sender::new`] serve no message (the fleet pause still holds every channel).
    pub fn with_channels(mut self, routes: Vec<ChannelRoute<T, P, C>>) -> Self {
        self.channels = routes;
        self
    }

    /// The declared channels.
    pub fn channels(&self) -> &[ChannelRoute<T, P, C>] {
        &self.channels
    }

    /// The route of a renewal's channel; `None` if channels are declared and it is not one.
    fn route(&self, channel: Option<&str>) -> Option<Via> {
        if self.channels.is_empty() {
            return Some(Via::Default);
        }
        let name = channel?;
        self.channels.iter().position(|c| c.name == name).map(Via::Channel)
    }

    fn limiter_of(&self, via: Option<Via>) -> &T {
        match via {
            Some(Via::Channel(i)) => &self.channels[i].limiter,
            _ => &self.limiter,
        }
    }

    fn provider_of(&self, via: Option<Via>) -> &P {
        match via {
            Some(Via::Channel(i)) => &self.channels[i].provider,
            _ => &self.provider,
        }
    }

    /// The pause a refusal of `via`'s credentials trips: the channel's own, else the fleet's.
    fn pause_of(&self, via: Option<Via>) -> Option<&PauseGate<C>> {
        match via {
            Some(Via::Channel(i)) => self.channels[i].pause.as_ref().or(self.pause.as_ref()),
            _ => self.pause.as_ref(),
        }
    }

    /// The policy for `via`: what its provider promises about keys.
    fn policy_of(&self, via: Option<Via>) -> SenderPolicy {
        let mut policy = self.settings.policy;
        if let Some(Via::Channel(_)) = via {
            policy.provider_keys = self.provider_of(via).profile().honours_keys;
        }
        policy
    }

    /// Honours the operator pause switch read through `gate` (docs/design.md#the-pause-switch).
    pub fn with_pause(mut self, gate: PauseGate<C>) -> Self {
        self.pause = Some(gate);
        self
    }

    /// The ledger port (for tests and `explain`).
    pub fn ledger(&self) -> &L {
        &self.ledger
    }

    /// The limiter port (its counters go in reports).
    pub fn limiter(&self) -> &T {
        &self.limiter
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The lane of a copy of `msg` that becomes visible at `visible_at` (see [`crate::lanes`]).
    fn lane_at(&self, msg: &ReminderMessage, visible_at: DateTime<Utc>) -> QueueLane {
        crate::lanes::lane_at(msg.deliver_by, visible_at, self.settings.deadline_near)
    }

    fn observed(&self) -> Observed {
        let secs = *self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        Observed { queue_delay: self.settings.queue_delay, call_latency: Duration::from_secs_f64(secs) }
    }

    fn measure(&self, took: Duration) {
        let mut l = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        *l = 0.8 * *l + 0.2 * took.as_secs_f64();
    }

    fn owner_token(&self, message_id: &str) -> OwnerToken {
        let nonce = self.jitter.lock().unwrap_or_else(PoisonError::into_inner).next_u64();
        OwnerToken::new(format!("{message_id}/{nonce:016x}"))
    }

    /// While an operator pause is in force: a well-formed message is requeued unchanged with
    /// `delay` (its attempt count untouched, nothing claimed, no token taken) and acknowledged;
    /// a malformed one, or one past its `deliver_by`, is processed as usual (to the DLQ, or
    /// expired or a duplicate: nothing reaches the provider past a deadline).
    async fn hold(
        &self,
        received: Received<'_>,
        decoded: Result<ReminderMessage, MalformedMessage>,
        delay: Duration,
        deadline: DateTime<Utc>,
    ) -> Result<Processed, SenderError> {
        let now = self.clock.now();
        // A pause holds sending, not bookkeeping: a copy already past its deadline can never be
        // sent, so it is processed as usual (the ledger decides: expired, with its letter, or a
        // duplicate) — no provider call — instead of being requeued every minute for as long as
        // the pause lasts. A malformed one goes to the DLQ as usual.
        let msg = match decoded {
            Ok(msg) if now < msg.deliver_by => msg,
            other => return self.process_unpaused(received, other, deadline).await,
        };
        self.queue.requeue(&msg, delay, self.lane_at(&msg, crate::clock::add(now, delay))).await?;
        Ok(Processed {
            reminder_id: Some(msg.reminder_id.clone()),
            disposition: Disposition::Defer {
                until: crate::clock::add(now, delay),
                reason: ReasonCode::OperatorPause,
                attempts_made: msg.attempt,
                provider_status: None,
            },
            provider_calls: 0,
            provider_status: None,
            throttled: false,
            delivery_lag: None,
            slack: Some(until(now, msg.deliver_by)),
            settle_conflict: None,
            possible_double: false,
            tenant_id: Some(msg.tenant_id.clone()),
            redriven: msg.redrive.is_some(),
            waited: waited(&msg, now),
            call_latency: None,
            channel: None,
        })
    }

    /// Processes one message within an invocation ending at `invocation_deadline`.
    ///
    /// `Ok` means the message is handled (delivered, requeued, quarantined or dropped) and must
    /// be deleted from the send queue. `Err` means infrastructure failed mid-way: leave the
    /// message to reappear after its visibility timeout (SQS's `maxReceiveCount` is the crash
    /// backstop).
    ///
    /// While an operator pause is in force (see [`Sender::with_pause`]) a well-formed message is
    /// held: requeued unchanged for [`PAUSE_RECHECK`], nothing claimed, no attempt spent.
    pub async fn process(
        &self,
        received: Received<'_>,
        invocation_deadline: DateTime<Utc>,
    ) -> Result<Processed, SenderError> {
        // Decoded once, for the holds and for the decision.
        let decoded = ReminderMessage::decode(received.body);
        if is_paused(self.pause.as_ref()).await {
            return self.hold(received, decoded, PAUSE_RECHECK, invocation_deadline).await;
        }
        // A message that names a declared channel whose own switch is set is held the same way,
        // before its claim: no claim, renewal read and settle per held copy per minute. The
        // renewal row stays the truth a call is routed by: a renewal whose channel changed
        // after the release is held until the old channel resumes (or its deadline passes,
        // and it is processed as usual: expired).
        if let Some(name) = decoded.as_ref().ok().and_then(|m| m.channel.as_deref())
            && let Some(route) = self.channels.iter().find(|c| c.name == name)
            && is_paused(route.pause.as_ref()).await
        {
            return self.hold(received, decoded, PAUSE_RECHECK, invocation_deadline).await;
        }
        self.process_unpaused(received, decoded, invocation_deadline).await
    }

    async fn process_unpaused(
        &self,
        received: Received<'_>,
        decoded: Result<ReminderMessage, MalformedMessage>,
        invocation_deadline: DateTime<Utc>,
    ) -> Result<Processed, SenderError> {
        let owner = self.owner_token(received.message_id);
        let mut claim = None;
        let mut recorded = None;
        let mut renewal: Option<RenewalLookup> = None;
        let mut renewal_read_at: Option<DateTime<Utc>> = None;
        let mut limiter = None;
        let mut provider: Option<ProviderOutcome> = None;
        let mut provider_calls = 0;
        let mut call_marked = None;
        let mut possible_double = false;
        let mut call_latency = None;
        // The renewal's route, and whether its channel is paused, as of the renewal's read.
        let mut via: Option<Via> = None;
        let mut channel_paused = false;
        let mut now = self.clock.now();
        let disposition = loop {
            // A renewal read before this copy's deadline is read again before the copy expires:
            // the renewal may have been moved meanwhile (a limiter wait can be long), and a copy
            // of a moved renewal is stale, not late — another copy may carry it to a later
            // deadline, and an expiry here would put a delivered reminder in the DLQ.
            if let (Some(at), Ok(m)) = (renewal_read_at, decoded.as_ref())
                && at < m.deliver_by
                && now >= m.deliver_by
                && provider.is_none()
            {
                renewal = None;
                renewal_read_at = None;
            }
            // Likewise before the token, when the renewal was read a while ago (a slow claim, a
            // retried step): read again, so the call goes out on a read at most one limiter
            // wait old. Never after the token (see RENEWAL_FRESH_FOR: it makes calls bunch).
            if limiter.is_none()
                && provider.is_none()
                && renewal_read_at.is_some_and(|at| until(at, now) > RENEWAL_FRESH_FOR)
            {
                renewal = None;
                renewal_read_at = None;
            }
            let inputs = Inputs {
                message: decoded.as_ref(),
                now,
                invocation_deadline,
                observed: self.observed(),
                claim,
                recorded,
                renewal: renewal.as_ref().zip(decoded.as_ref().ok()).map(|(r, m)| r.view_for(m)),
                channel: match (renewal.as_ref(), via) {
                    (None, _) => ChannelView::Open,
                    (Some(r), None) => ChannelView::Unknown(r.channel.as_deref().unwrap_or("")),
                    (Some(_), Some(_)) if channel_paused => ChannelView::Paused,
                    (Some(_), Some(_)) => ChannelView::Open,
                },
                limiter,
                call_marked,
                provider: provider.as_ref(),
            };
            let decision = {
                let mut j = self.jitter.lock().unwrap_or_else(PoisonError::into_inner);
                decide(&self.policy_of(via), &inputs, &mut *j)
            };
            // Every step is only asked for once the message decoded.
            let Ok(msg) = decoded.as_ref() else {
                if let Decision::Done(d) = decision {
                    break d;
                }
                continue;
            };
            match decision {
                Decision::Done(d) => break d,
                Decision::Next(Step::Claim { lease_until }) => {
                    claim = Some(self.ledger.claim(msg, &owner, now, lease_until).await?);
                }
                Decision::Next(Step::ReadLedger) => {
                    let rec = self.ledger.get(&msg.reminder_id).await?;
                    recorded = Some(RecordView {
                        state: rec.as_ref().map(|r| r.state),
                        attempts: rec.as_ref().map_or(0, |r| r.attempts),
                        unknown_call: rec.as_ref().is_some_and(|r| r.call_owner.is_some()),
                        lease_until: rec
                            .as_ref()
                            .filter(|r| r.state == ReminderState::Leased)
                            .and_then(|r| r.lease_until),
                        redrive_pending: rec.as_ref().is_some_and(|r| {
                            r.state == ReminderState::DeadLettered
                                && crate::ports::revives_dead_letter(msg, r.release_id.as_deref())
                        }),
                        cancel_superseded: rec.as_ref().is_some_and(|r| crate::ports::revives_cancelled(msg, r)),
                    });
                }
                Decision::Next(Step::CheckRenewal) => {
                    let read = self.renewals.lookup(&msg.tenant_id, &msg.renewal_id).await?;
                    via = self.route(read.channel.as_deref());
                    channel_paused = match via {
                        Some(Via::Channel(i)) => is_paused(self.channels[i].pause.as_ref()).await,
                        _ => false,
                    };
                    renewal = Some(read);
                    renewal_read_at = Some(now);
                }
                Decision::Next(Step::TakeToken { max_wait }) => {
                    let class = LimiterClass::of(msg, now, self.settings.deadline_near);
                    let req = LimiterRequest { class, tenant: &msg.tenant_id };
                    limiter = Some(self.limiter_of(via).acquire(req, max_wait).await?);
                }
                Decision::Next(Step::MarkCall) => match self.ledger.mark_call(msg, &owner, now).await {
                    Ok(marked) => call_marked = Some(marked),
                    // No call was made, whether or not the mark was written: a deferral that
                    // spends no attempt, whose settle (under this worker's lease) clears a mark
                    // the write may have left. Left to SQS instead, the next claim would find
                    // that mark and take it for a call whose outcome is unknown.
                    Err(e) => {
                        tracing::warn!(error = %e, "the call mark failed; nothing was sent, deferred");
                        provider = Some(ProviderOutcome::NotSent { detail: format!("the call mark failed: {e}") });
                    }
                },
                Decision::Next(Step::CallProvider { timeout, .. }) => {
                    // A call after one whose outcome is unknown, to a provider that may apply it as
                    // a second effect (`at_least_once`): counted, never hidden.
                    possible_double |= !self.policy_of(via).provider_keys
                        && matches!(claim, Some(ClaimView::Claimed { unsettled_call: true, .. }));
                    let r = renewal.as_ref();
                    let req = ProviderRequest {
                        message: msg,
                        recipient_ref: r.and_then(|r| r.recipient_ref.as_deref()),
                        channel: r.and_then(|r| r.channel.as_deref()),
                        data: r.and_then(|r| r.data.as_ref()),
                        timeout,
                    };
                    let started = self.clock.now();
                    let outcome = match self.provider_of(via).send(&req).await {
                        Ok(o) => o,
                        // The client failed before calling (nothing reached the provider). With
                        // a marked call this must not look like an unknown outcome to the next
                        // claim: it becomes a deferral that settles and clears the mark, and
                        // spends no attempt (no call was made). Without a mark it is
                        // infrastructure, retried by SQS.
                        Err(e) if call_marked == Some(true) => {
                            tracing::warn!(error = %e, "the provider client failed before calling; deferred");
                            provider = Some(ProviderOutcome::NotSent { detail: e.to_string() });
                            now = self.clock.now();
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    };
                    provider_calls += 1;
                    let took = until(started, self.clock.now());
                    call_latency = Some(took);
                    self.measure(took);
                    // The provider says "slow down": a 429, or a 503 that says for how long.
                    // The shared limiter hears it (rate cut, capped pause), not just this reminder.
                    let slow_down = match &outcome {
                        ProviderOutcome::Transient { status: Some(429), retry_after } => Some(*retry_after),
                        ProviderOutcome::Transient { status: Some(503), retry_after: Some(ra) } => Some(Some(*ra)),
                        _ => None,
                    };
                    // Best effort: the provider's answer is known now and must reach the ledger;
                    // a limiter write that fails here is logged, never allowed to lose it (the
                    // next 429 or budget hint tries again).
                    if let Some(retry_after) = slow_down {
                        let ra = retry_after.map(|r| r.delay_from(self.clock.now()));
                        if let Err(e) = self.limiter_of(via).throttled(ra).await {
                            tracing::warn!(error = %e, "could not slow the shared limiter after a throttle");
                        }
                    }
                    // The provider said its window is nearly spent: slow down before a 429.
                    if let ProviderOutcome::Accepted { budget: Some(b), .. } = &outcome
                        && let Err(e) = self.limiter_of(via).budget(b.remaining, b.reset).await
                    {
                        tracing::warn!(error = %e, "could not pass the provider's remaining budget to the limiter");
                    }
                    provider = Some(outcome);
                }
            }
            now = self.clock.now();
        };
        let mut processed = self
            .apply(
                received,
                &decoded,
                &owner,
                claim,
                (now, renewal_read_at),
                disposition,
                provider_calls,
                provider.as_ref(),
                via,
            )
            .await?;
        processed.possible_double = possible_double;
        processed.call_latency = call_latency;
        processed.channel = match via {
            Some(Via::Channel(i)) => Some(self.channels[i].name.clone()),
            _ => None,
        };
        Ok(processed)
    }

    #[allow(clippy::too_many_arguments)]
    async fn apply(
        &self,
        received: Received<'_>,
        decoded: &Result<ReminderMessage, MalformedMessage>,
        owner: &OwnerToken,
        claim: Option<ClaimView>,
        (now, renewal_read_at): (DateTime<Utc>, Option<DateTime<Utc>>),
        disposition: Disposition,
        provider_calls: u32,
        outcome: Option<&ProviderOutcome>,
        via: Option<Via>,
    ) -> Result<Processed, SenderError> {
        let msg = decoded.as_ref().ok();
        let held = matches!(claim, Some(ClaimView::Claimed { .. })).then_some(owner);
        let mut settle_conflict = None;
        // A cancellation (the renewal not active, or another version) is recorded as of the read
        // of the renewal that decided it: a row re-armed after that read is released after it,
        // and its copy may claim the reminder again (`ports::revives_cancelled`). Recorded as of
        // the write, a re-arm and a release landing between the read and the write would leave
        // the renewal, active again, with a reminder nobody sends.
        let cancelled_as_of = renewal_read_at.map_or(now, |at| at.min(now));
        let mut settle = async |owner: Option<&OwnerToken>, s: Settlement| -> Result<(), SenderError> {
            if let Some(m) = msg {
                let at = if s.state == ReminderState::Cancelled { cancelled_as_of } else { now };
                match self.ledger.settle(m, owner, at, &s).await? {
                    SettleOutcome::Recorded => {}
                    other => settle_conflict = Some(other),
                }
            }
            Ok(())
        };
        let provider_status = outcome.and_then(ProviderOutcome::status);
        let mut delivery_lag = None;
        match &disposition {
            Disposition::Delivered { attempt, receipt } => {
                settle(
                    held,
                    Settlement {
                        state: ReminderState::Delivered,
                        reason: None,
                        attempts: *attempt,
                        receipt: receipt.clone(),
                        provider_status,
                        next_at: None,
                    },
                )
                .await?;
                delivery_lag = msg.map(|m| until(m.deliver_after, now));
            }
            Disposition::Acknowledge { .. } => {}
            Disposition::Defer { until: at, reason, attempts_made, provider_status } => {
                if matches!(*reason, ReasonCode::ProviderCredentials | ReasonCode::ProviderAccount)
                    && let Some(gate) = self.pause_of(via)
                {
                    // Every other message would meet the same refusal: pause the fleet for an
                    // operator (who lifts it with `punctual resume` once the credential is
                    // fixed) rather than spend the morning's attempts. A failed write leaves
                    // this reminder deferred all the same.
                    // A channel's own switch names the channel and its own resume: an operator
                    // reading `status` must not lift the fleet's (there is none) instead.
                    let (whose, resume) = match via {
                        Some(Via::Channel(i)) if self.channels[i].pause.is_some() => {
                            let name = &self.channels[i].name;
                            (format!("channel {name}: "), format!("punctual resume --channel {name}"))
                        }
                        _ => (String::new(), "punctual resume".to_owned()),
                    };
                    let why = match (reason, outcome) {
                        (ReasonCode::ProviderAccount, Some(ProviderOutcome::AccountBlocked { detail })) => format!(
                            "{whose}provider refused the account ({detail}); fix the account or identity, then `{resume}`"
                        ),
                        _ => format!(
                            "{whose}provider refused the credentials ({}) with a freshly read token; fix the secret, then `{resume}`",
                            provider_status.map_or_else(|| "401/403".to_owned(), |s| s.to_string())
                        ),
                    };
                    if let Err(e) = gate.trip(&why).await {
                        tracing::error!(error = %e, "could not set the pause switch after a credential refusal");
                    }
                }
                if let Some(m) = msg {
                    let copy = ReminderMessage { attempt: *attempts_made, ..m.clone() };
                    self.queue.requeue(&copy, until(now, *at), self.lane_at(&copy, *at)).await?;
                }
                // Only a claimed reminder changes state; a not-yet-due or lease-blocked copy
                // leaves the ledger alone (no write spent on a message that merely waits).
                if held.is_some() {
                    settle(
                        held,
                        Settlement {
                            state: ReminderState::Deferred,
                            reason: Some(*reason),
                            attempts: *attempts_made,
                            receipt: None,
                            provider_status: *provider_status,
                            next_at: Some(*at),
                        },
                    )
                    .await?;
                }
            }
            Disposition::Quarantine { reason, attempts_made, provider_status, detail } => {
                self.dead_letter(received, msg, *reason, detail, *attempts_made, *provider_status, now).await?;
                settle(
                    held,
                    Settlement {
                        state: ReminderState::DeadLettered,
                        reason: Some(*reason),
                        attempts: *attempts_made,
                        receipt: None,
                        provider_status: *provider_status,
                        next_at: None,
                    },
                )
                .await?;
            }
            Disposition::Expire { attempts_made } => {
                let detail = msg.map_or_else(String::new, |m| {
                    format!("deliver_by {} passed", crate::contract::format_instant(m.deliver_by))
                });
                self.dead_letter(
                    received,
                    msg,
                    ReasonCode::BusinessDeadlineExpired,
                    &detail,
                    *attempts_made,
                    None,
                    now,
                )
                .await?;
                settle(
                    None,
                    Settlement {
                        state: ReminderState::Expired,
                        reason: Some(ReasonCode::BusinessDeadlineExpired),
                        attempts: *attempts_made,
                        receipt: None,
                        provider_status: None,
                        next_at: None,
                    },
                )
                .await?;
            }
            Disposition::Rescheduled { same_reminder, deliver_after, deliver_by } => {
                let attempts = match claim {
                    Some(ClaimView::Claimed { prior_attempts, .. }) => prior_attempts,
                    _ => 0,
                };
                if *same_reminder {
                    // Still owed, now at the current version's times: this copy carries it
                    // there (the current version's own copy may have come and gone already).
                    if let Some(m) = msg {
                        let copy =
                            ReminderMessage { deliver_after: *deliver_after, deliver_by: *deliver_by, ..m.clone() };
                        let at = (*deliver_after).max(now);
                        self.queue.requeue(&copy, until(now, at), self.lane_at(&copy, at)).await?;
                    }
                    if held.is_some() {
                        settle(
                            held,
                            Settlement {
                                state: ReminderState::Deferred,
                                reason: Some(ReasonCode::Rescheduled),
                                attempts,
                                receipt: None,
                                provider_status: None,
                                next_at: Some(*deliver_after),
                            },
                        )
                        .await?;
                    }
                } else {
                    // The copy's reminder is owed no more: the current version is another.
                    settle(
                        held,
                        Settlement {
                            state: ReminderState::Cancelled,
                            reason: Some(ReasonCode::Rescheduled),
                            attempts,
                            receipt: None,
                            provider_status: None,
                            next_at: None,
                        },
                    )
                    .await?;
                }
            }
            Disposition::Cancel { .. } => {
                let attempts = match claim {
                    Some(ClaimView::Claimed { prior_attempts, .. }) => prior_attempts,
                    _ => 0,
                };
                settle(
                    held,
                    Settlement {
                        state: ReminderState::Cancelled,
                        reason: Some(ReasonCode::Cancelled),
                        attempts,
                        receipt: None,
                        provider_status: None,
                        next_at: None,
                    },
                )
                .await?;
            }
        }
        let processed = Processed {
            reminder_id: msg.map(|m| m.reminder_id.clone()),
            disposition,
            provider_calls,
            provider_status,
            throttled: provider_status == Some(429),
            delivery_lag,
            slack: msg.map(|m| until(now, m.deliver_by)),
            settle_conflict,
            possible_double: false,
            tenant_id: msg.map(|m| m.tenant_id.clone()),
            redriven: msg.is_some_and(|m| m.redrive.is_some()),
            waited: msg.and_then(|m| waited(m, now)),
            call_latency: None,
            channel: None,
        };
        Ok(processed)
    }

    #[allow(clippy::too_many_arguments)]
    async fn dead_letter(
        &self,
        received: Received<'_>,
        msg: Option<&ReminderMessage>,
        reason: ReasonCode,
        detail: &str,
        attempts: u32,
        provider_status: Option<u16>,
        now: DateTime<Utc>,
    ) -> Result<(), SenderError> {
        let q = Quarantine {
            body: received.body,
            reason,
            detail,
            attempts,
            provider_status,
            reminder_id: msg.map(|m| &m.reminder_id),
            first_enqueued: msg.map(|m| m.first_enqueued),
            original_message_id: received.message_id,
            at: now,
        };
        self.queue.dead_letter(&q).await?;
        Ok(())
    }
}

impl<L: Ledger, R: Renewals, T: Limiter, P: Provider, Q: SendQueue, C: Clock> Process for Sender<L, R, T, P, Q, C> {
    fn process(
        &self,
        received: Received<'_>,
        invocation_deadline: DateTime<Utc>,
    ) -> impl std::future::Future<Output = Result<Processed, SenderError>> + Send {
        Sender::process(self, received, invocation_deadline)
    }
}
