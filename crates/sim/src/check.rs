//! The deterministic fault checker (docs/design.md#invariants-the-fault-checker-asserts): `punctual check --seeds N`.
//!
//! Each seed draws a **fault plan** and runs a small world in virtual time — the core's
//! scheduler, three sender instances (each with its own clock, skewed within [`SKEW`]), the
//! shared limiter, an operator pause and resume, a redrive racing live traffic and an import
//! racing the scheduler's ticks — over the core's in-memory adapters (whose behaviour the
//! contract suites tie to dynalite and moto) and models of SQS and the provider that
//! inject faults. After the world has drained, the invariants are checked:
//!
//! | id | invariant |
//! |---|---|
//! | I1 | at most one accepted provider effect per reminder id; a request repeating a key only after an indeterminate outcome (never once the ledger records the reminder delivered), and never a reminder recorded delivered without the provider holding its effect |
//! | I2 | no provider call outside `[deliver_after, deliver_by)`, beyond the skew bound |
//! | I3 | conservation: every released reminder ends delivered, expired, cancelled or dead-lettered with a reason, or is still on a queue; none leased or deferred with nothing on a queue |
//! | I4 | the provider never sees more than quota × (1 s + clock spread) + burst requests in any 1 s window |
//! | I5 | bounded work: provider requests per reminder ≤ attempt budget × (1 + redrives) + lost answers; ledger history ≤ its bound; SQS copies per reminder ≤ 128 |
//! | I6 | throttling sends no healthy reminder to the DLQ (a reminder the provider only ever throttled, with a long window, never ends `attempt_limit`) |
//! | I7 | the DLQ never holds a delivered reminder, and every DLQ message carries a known reason |
//! | I8 | nothing is delivered for a version of a renewal the table no longer holds, nor before the current `deliver_after`: no provider call for a copy whose version (reminder, `deliver_after`, `deliver_by`) is not the one its sender read from the renewals table, nor before that version's `deliver_after` (beyond the skew bound); and every renewal's current version ends (I3 over the versions the table holds at the end) |
//! | I11 | every reminder the ledger ended has a published outcome event of that ending; events sharing an id agree; at most one delivery event per reminder, and none unless it is delivered; the outbox is empty after the last sweep |
//!
//! Fault classes (each counted in `faults_injected`): a crash at every step boundary (after the
//! claim — its answer lost; during the call — a timeout; after the call before the settle;
//! after the settle, a requeue or a DLQ send before the ack; a redrive after its send before
//! its delete), SQS duplicate delivery and reordering, DynamoDB errors before a write and
//! applied-but-answer-lost writes, provider 429 with `Retry-After` in seconds, as an HTTP date
//! and absurd (a day), 503, 5xx, timeouts, accept-then-drop, 3xx, clock skew between
//! instances, an import racing a tick, a redrive racing live traffic, pause and resume at
//! random points, an import moving renewals (later the same day, to another due date, a new
//! deadline alone, or cancelled) while ticks hold them and their copies are queued, and a
//! population spread over the whole lookahead (after a pause, one catch-up group spans it).
//!
//! A run is a pure function of its seed: `punctual check --seeds 1 --first-seed S` replays
//! seed S exactly.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use punctual_core::backoff::{Backoff, Jitter, SplitMix64};

use crate::block_on;
use punctual_core::clock::{Clock, add};
use punctual_core::contract::ReminderMessage;
use punctual_core::decision::{RenewalView, SenderPolicy};
use punctual_core::ids::{ReminderKind, RenewalId, TenantId};
use punctual_core::lanes::{LaneDepths, QueueLane};
use punctual_core::limiter::{LimiterSettings, SharedLimiter};
use punctual_core::outcome::{Outcome, OutcomeEvent, Publisher};
use punctual_core::pause::PauseGate;
use punctual_core::ports::{
    Control, DeadLetter, DeadLetters, DeadLettersError, Ledger, Pause, Pending, Provider, ProviderError,
    ProviderRequest, Quarantine, QueueError, Release, ReleaseQueue, RenewalLookup, RenewalVersion, Renewals,
    RenewalsError, SendQueue,
};
use punctual_core::provider::{IndeterminatePolicy, ProviderOutcome, ProviderProfile, RetryAfter};
use punctual_core::reason::{ReasonCode, ReminderState};
use punctual_core::redrive::{RedriveRequest, Redriver, Selection};
use punctual_core::scheduler::{Scheduler, SchedulerSettings};
use punctual_core::sender::{Received, Sender, SenderSettings};
use punctual_core::testing::{
    Fault, FaultyLedger, MemoryControl, MemoryDueStore, MemoryLedger, MemoryRenewals, MemorySink, MemorySlotStore,
};

/// The clock-skew bound between instances: each sender's clock reads the true time ± this.
pub const SKEW: Duration = Duration::from_millis(250);
/// The provider's quota in the checker's world, calls/s.
pub const QUOTA: f64 = 20.0;
/// The provider's burst (token bucket size).
pub const BURST: f64 = 2.0;
/// Attempts per reminder in the checker's world (small, so budgets are reached).
pub const MAX_ATTEMPTS: u32 = 4;
/// The most SQS copies (releases, requeues, duplicates, redrives) one reminder may have. The
/// largest seen in the first 1,000 seeds was 73: a copy that finds the lease held rechecks every 12 s
/// (the longest call a live holder can make), a worker that died holding a lease keeps it up to
/// 60 s, and every SQS duplicate of the message rechecks on its own.
pub const MAX_COPIES: u64 = 128;
/// The most history entries a ledger record may keep: the ledger's stated bound.
pub const MAX_HISTORY: usize = punctual_core::ports::HISTORY_MAX;
/// Sender instances per seed by default (`--senders` for a larger world).
pub const SENDERS: usize = 3;
const VISIBILITY: Duration = Duration::from_secs(30);
const MAX_RECEIVES: u32 = 5;
const LATENCY: Duration = Duration::from_millis(40);
const OVERHEAD: Duration = Duration::from_millis(20);
const HORIZON: Duration = Duration::from_secs(40 * 60);

/// The invariants, by name.
pub const INVARIANTS: [&str; 10] = ["I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I10", "I11"];

/// The fault classes, by name (every one appears in `faults_injected`).
pub const FAULT_CLASSES: [&str; 28] = [
    "crash_after_claim",
    "crash_during_call",
    "crash_after_call_before_settle",
    "crash_after_settle_before_ack",
    "crash_after_requeue_before_ack",
    "crash_after_dlq_send_before_ack",
    "crash_redrive_after_send_before_delete",
    "sqs_duplicate_delivery",
    "sqs_reordering",
    "dynamodb_error",
    "dynamodb_answer_lost",
    "provider_429_seconds",
    "provider_429_http_date",
    "provider_429_absurd",
    "provider_503",
    "provider_5xx",
    "provider_timeout",
    "provider_accept_then_drop",
    "provider_3xx",
    "clock_skew",
    "import_racing_tick",
    "redrive_racing_traffic",
    "pause_resume",
    "renewal_moved",
    "renewal_moved_under_tick",
    "catch_up_over_the_lookahead",
    "outcome_publish_refused",
    "outcome_publish_answer_lost",
];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn t0() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(20_788) + TimeDelta::hours(9)
}

/// What `punctual check` runs.
#[derive(Debug, Clone)]
pub struct CheckConfig {
    /// Seeds to run.
    pub seeds: u64,
    /// The first seed (`first_seed .. first_seed + seeds`).
    pub first_seed: u64,
    /// Reminders per seed.
    pub reminders: usize,
    /// The provider honours idempotency keys (true: a repeated key replays the first answer;
    /// false: every acceptance is another effect — a provider without keys, where I1 can only
    /// hold if nothing is ever retried after an indeterminate answer).
    pub honours_keys: bool,
    /// What the sender does after an indeterminate outcome when the provider does not honour
    /// keys: under `at_most_once` I1 must hold; under `at_least_once` the double effects are
    /// counted (as I1 violations: the policy trades them for never losing a reminder).
    pub indeterminate: IndeterminatePolicy,
    /// Sender instances per seed (each with its own clock skew).
    pub senders: usize,
    /// Two channels (`--channels`): every other renewal by SMS, each channel on its own limiter
    /// (half the quota each) and pause, SMS's provider refusing the credentials (401) for a
    /// while; I10 asserts that SMS's pause never holds an email reminder.
    pub channels: bool,
}

impl CheckConfig {
    /// `seeds` seeds from `first_seed`, 40 reminders each, a provider that honours keys.
    pub fn new(seeds: u64, first_seed: u64) -> Self {
        Self {
            seeds,
            first_seed,
            reminders: 40,
            honours_keys: true,
            indeterminate: IndeterminatePolicy::AtMostOnce,
            senders: SENDERS,
            channels: false,
        }
    }
}

/// One broken invariant, with what replays it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    /// The seed.
    pub seed: u64,
    /// `I1` … `I7`.
    pub invariant: &'static str,
    /// The reminder it concerns (or `-`).
    pub reminder_id: String,
    /// What was seen.
    pub detail: String,
    /// The command that replays this seed.
    pub replay: String,
}

/// `punctual check`'s report (`--json` keys are a contract).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    /// Seeds run.
    pub seeds: u64,
    /// The provider in this run honours idempotency keys.
    pub provider_keys: bool,
    /// The sender's policy after an indeterminate outcome (matters only without keys).
    pub indeterminate: &'static str,
    /// The first seed.
    pub first_seed: u64,
    /// Reminders per seed.
    pub reminders: usize,
    /// Sender instances per seed.
    pub senders: usize,
    /// Reminders the provider applied more than once (the cost of `at_least_once` without
    /// keys; each is also an I1 violation).
    pub double_effects: u64,
    /// Violations by invariant (every invariant listed, 0 when it held).
    pub violations: BTreeMap<String, u64>,
    /// Faults injected by class over all seeds (every class listed).
    pub faults_injected: BTreeMap<String, u64>,
    /// The first violation found, with the command that replays it.
    pub first_violation: Option<Violation>,
    /// The seeds that broke an invariant (the first 50), to replay one by one.
    pub violating_seeds: Vec<u64>,
    /// How the reminders ended, over all seeds.
    pub outcomes: BTreeMap<String, u64>,
    /// The clock-skew bound, milliseconds.
    pub skew_bound_ms: u64,
    /// Wall time, seconds.
    pub wall_seconds: f64,
}

/// What one seed found.
#[derive(Debug, Clone, Default)]
pub struct SeedOutcome {
    /// Broken invariants.
    pub violations: Vec<Violation>,
    /// Faults injected, by class.
    pub faults: BTreeMap<&'static str, u64>,
    /// How the reminders ended.
    pub outcomes: BTreeMap<String, u64>,
    /// Reminders the provider applied more than once.
    pub double_effects: u64,
}

/// Runs every seed and checks the invariants after each.
pub fn check(config: &CheckConfig, mut progress: impl FnMut(u64, &CheckReport)) -> CheckReport {
    let started = Instant::now();
    let mut report = CheckReport {
        seeds: config.seeds,
        first_seed: config.first_seed,
        reminders: config.reminders,
        senders: config.senders,
        violations: INVARIANTS.iter().map(|i| ((*i).to_owned(), 0)).collect(),
        faults_injected: FAULT_CLASSES.iter().map(|c| ((*c).to_owned(), 0)).collect(),
        skew_bound_ms: SKEW.as_millis() as u64,
        provider_keys: config.honours_keys,
        indeterminate: config.indeterminate.as_str(),
        ..CheckReport::default()
    };
    for (done, seed) in (config.first_seed..config.first_seed.saturating_add(config.seeds)).enumerate() {
        let o = run_seed_on(
            seed,
            config.reminders,
            config.senders,
            config.honours_keys,
            config.indeterminate,
            config.channels,
        );
        for v in &o.violations {
            *report.violations.entry(v.invariant.to_owned()).or_default() += 1;
        }
        if report.first_violation.is_none() {
            report.first_violation = o.violations.first().cloned().map(|mut v| {
                if config.reminders != 40 || config.senders != SENDERS {
                    v.replay.push_str(&format!(" --reminders {} --senders {}", config.reminders, config.senders));
                }
                if !config.honours_keys {
                    v.replay.push_str(&format!(" --no-keys --indeterminate {}", config.indeterminate.as_str()));
                }
                if config.channels {
                    v.replay.push_str(" --channels");
                }
                v
            });
        }
        if !o.violations.is_empty() && report.violating_seeds.len() < 50 {
            report.violating_seeds.push(seed);
        }
        for (k, n) in o.faults {
            *report.faults_injected.entry(k.to_owned()).or_default() += n;
        }
        report.double_effects += o.double_effects;
        for (k, n) in o.outcomes {
            *report.outcomes.entry(k).or_default() += n;
        }
        progress(done as u64 + 1, &report);
    }
    report.wall_seconds = started.elapsed().as_secs_f64();
    report
}

// ---- virtual time ----------------------------------------------------------------------------

/// Virtual time (tokio's paused clock), read through an offset: an instance whose clock is
/// skewed.
#[derive(Debug, Clone)]
struct SkewedClock {
    start: tokio::time::Instant,
    offset_ms: i64,
}

impl SkewedClock {
    fn truth(&self) -> DateTime<Utc> {
        add(t0(), tokio::time::Instant::now().duration_since(self.start))
    }
}

impl Clock for SkewedClock {
    fn now(&self) -> DateTime<Utc> {
        self.truth() + TimeDelta::milliseconds(self.offset_ms)
    }

    fn sleep(&self, d: Duration) -> impl std::future::Future<Output = ()> + Send {
        tokio::time::sleep(d)
    }
}

// ---- the fault plan ---------------------------------------------------------------------------

/// Probabilities drawn once per seed.
#[derive(Debug, Clone)]
struct Plan {
    provider_fault: f64,
    ledger: Vec<(Fault, f64)>,
    crash_before_ack: f64,
    duplicate: f64,
    redrive_crash: f64,
    /// One clock offset per sender instance.
    skew_ms: Vec<i64>,
    pause_at: Option<(Duration, Duration)>,
    redrive_at: Option<Duration>,
    import_at: Option<Duration>,
    /// Reminders the provider always refuses with a transient answer (an outage of theirs).
    outage: f64,
    /// When an import moves renewals (later the same day, another due date, a new deadline,
    /// or cancelled) while ticks hold them and copies of them are on the queue.
    reschedule_at: Option<Duration>,
    /// The share of renewals that import moves.
    reschedule: f64,
    /// The population's due times spread over the whole lookahead (else over 20 s): with a
    /// pause, the first tick after the resume catches up one group spanning the lookahead.
    spread: bool,
    /// The share of each release batch whose renewals an import moves while the tick holds
    /// them: after the tick read the rows and sent their copies, before it marks them.
    under_tick: f64,
}

impl Plan {
    fn draw(rng: &mut SplitMix64, senders: usize) -> Self {
        let mut p = |max: f64| rng.next_unit() * max;
        let provider_fault = p(0.3);
        let ledger = vec![
            (Fault::UncertainClaim, p(0.05)),
            (Fault::ClaimRefused, p(0.05)),
            (Fault::LoseDeliveredWrite, p(0.05)),
            (Fault::UncertainSettle, p(0.05)),
        ];
        let crash_before_ack = p(0.05);
        let duplicate = p(0.05);
        let redrive_crash = p(0.3);
        let outage = p(0.15);
        let skew = SKEW.as_millis() as f64;
        // The first three drawn here, as they always were (seeds replay across versions).
        let mut skew_ms: Vec<i64> = (0..SENDERS).map(|_| ((rng.next_unit() * 2.0 - 1.0) * skew) as i64).collect();
        let secs = |rng: &mut SplitMix64, max: f64| Duration::from_millis((rng.next_unit() * max * 1000.0) as u64);
        let pause_at = (rng.next_unit() < 0.5).then(|| (secs(rng, 120.0), secs(rng, 60.0)));
        let redrive_at = (rng.next_unit() < 0.7).then(|| secs(rng, 240.0) + Duration::from_secs(20));
        let import_at = (rng.next_unit() < 0.5).then(|| secs(rng, 30.0));
        // Drawn last, so the draws above are what they were for every seed.
        let reschedule_at = (rng.next_unit() < 0.5).then(|| secs(rng, 60.0));
        let reschedule = rng.next_unit() * 0.4;
        let spread = rng.next_unit() < 0.3;
        let under_tick = if rng.next_unit() < 0.5 { rng.next_unit() * 0.3 } else { 0.0 };
        // A larger world's further senders, drawn after everything else.
        while skew_ms.len() < senders {
            skew_ms.push(((rng.next_unit() * 2.0 - 1.0) * skew) as i64);
        }
        skew_ms.truncate(senders.max(1));
        Self {
            provider_fault,
            ledger,
            crash_before_ack,
            duplicate,
            redrive_crash,
            skew_ms,
            pause_at,
            redrive_at,
            import_at,
            outage,
            reschedule_at,
            reschedule,
            spread,
            under_tick,
        }
    }
}

/// Fault counters of one seed.
#[derive(Debug, Clone, Default)]
struct Faults(Arc<Mutex<BTreeMap<&'static str, u64>>>);

impl Faults {
    fn add(&self, class: &'static str) {
        *lock(&self.0).entry(class).or_default() += 1;
    }
}

// ---- SQS model ---------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Msg {
    body: String,
    receives: u32,
    visible_at_ms: i64,
    generation: u64,
}

#[derive(Debug, Default)]
struct QueueState {
    next_id: u64,
    msgs: BTreeMap<u64, Msg>,
    /// DLQ: (id, body, reason attribute).
    dlq: Vec<(u64, String, Option<String>)>,
    /// Letters a redrive holds, until (ms): SQS makes them visible again after the hold.
    dlq_held: HashMap<u64, i64>,
    /// SQS copies per reminder id.
    copies: HashMap<String, u64>,
    /// Reminders a redrive sent back (reminder id → times).
    redriven: HashMap<String, u32>,
    /// Every letter the senders wrote, kept when a redrive deletes it: (reminder id, reason)
    /// → the deadline its copy carried (I6 judges the sender by what it knew).
    letters: HashMap<(String, Option<String>), DateTime<Utc>>,
}

/// An SQS standard queue and its DLQ: visibility timeouts, delays, receive counts, random
/// order, at-least-once copies, the `maxReceiveCount` backstop.
#[derive(Debug, Clone)]
struct Sqs {
    state: Arc<Mutex<QueueState>>,
    clock: SkewedClock,
}

fn reminder_of(body: &str) -> Option<String> {
    ReminderMessage::decode(body).ok().map(|m| m.reminder_id.to_string())
}

impl Sqs {
    fn push(&self, body: String, delay: Duration) {
        let now = self.clock.truth().timestamp_millis();
        let mut s = lock(&self.state);
        if let Some(r) = reminder_of(&body) {
            *s.copies.entry(r).or_default() += 1;
        }
        let id = s.next_id;
        s.next_id += 1;
        let visible_at_ms = now + delay.as_millis() as i64;
        s.msgs.insert(id, Msg { body, receives: 0, visible_at_ms, generation: 0 });
    }

    /// Up to 10 visible messages in random order, each hidden for the visibility timeout; with
    /// probability `dup` a copy of one stays visible too.
    fn receive(&self, rng: &mut SplitMix64, dup: f64, faults: &Faults) -> Vec<(u64, u64, String)> {
        let now = self.clock.truth().timestamp_millis();
        let mut s = lock(&self.state);
        let mut ready: Vec<u64> = s.msgs.iter().filter(|(_, m)| m.visible_at_ms <= now).map(|(id, _)| *id).collect();
        let mut out = Vec::new();
        while out.len() < 10 && !ready.is_empty() {
            let i = (rng.next_u64() % ready.len() as u64) as usize;
            if i != 0 {
                faults.add("sqs_reordering");
            }
            let id = ready.swap_remove(i);
            let Some(m) = s.msgs.get_mut(&id) else { continue };
            m.receives += 1;
            m.generation += 1;
            m.visible_at_ms = now + VISIBILITY.as_millis() as i64;
            let (body, receives, generation) = (m.body.clone(), m.receives, m.generation);
            if receives > MAX_RECEIVES {
                // The redrive policy moves it, without the sender's attributes.
                s.msgs.remove(&id);
                let dlq_id = s.next_id;
                s.next_id += 1;
                s.dlq.push((dlq_id, body, None));
                continue;
            }
            if rng.next_unit() < dup {
                faults.add("sqs_duplicate_delivery");
                let cid = s.next_id;
                s.next_id += 1;
                if let Some(r) = reminder_of(&body) {
                    *s.copies.entry(r).or_default() += 1;
                }
                s.msgs.insert(cid, Msg { body: body.clone(), receives: 0, visible_at_ms: now, generation: 0 });
            }
            out.push((id, generation, body));
        }
        out
    }

    /// Deletes a message if this receipt is still its latest.
    fn ack(&self, id: u64, generation: u64) {
        let mut s = lock(&self.state);
        if s.msgs.get(&id).is_some_and(|m| m.generation == generation) {
            s.msgs.remove(&id);
        }
    }

    fn is_empty(&self) -> bool {
        lock(&self.state).msgs.is_empty()
    }
}

impl SendQueue for Sqs {
    /// Both lanes are one queue here: the invariants are about what happens to each copy, not
    /// which pollers find it (the simulator measures the lanes).
    async fn requeue(&self, msg: &ReminderMessage, delay: Duration, _lane: QueueLane) -> Result<(), QueueError> {
        // As the SQS adapter sends it: DelaySeconds, rounded up to whole seconds, at most 900.
        let secs = (delay.as_secs() + u64::from(delay.subsec_nanos() > 0)).min(900);
        self.push(msg.encode(), Duration::from_secs(secs));
        Ok(())
    }

    async fn dead_letter(&self, q: &Quarantine<'_>) -> Result<(), QueueError> {
        let mut s = lock(&self.state);
        let id = s.next_id;
        s.next_id += 1;
        s.dlq.push((id, q.body.to_owned(), Some(q.reason.as_str().to_owned())));
        if let Ok(m) = ReminderMessage::decode(q.body) {
            s.letters.insert((m.reminder_id.to_string(), Some(q.reason.as_str().to_owned())), m.deliver_by);
        }
        Ok(())
    }
}

impl ReleaseQueue for Sqs {
    async fn release(&self, batch: &[Release]) -> Result<Vec<bool>, QueueError> {
        // A SendMessageBatch takes a round trip: a tick holds what it read across it, so an
        // import can move a renewal between the tick's read and its mark.
        tokio::time::sleep(LATENCY).await;
        for r in batch {
            // As the SQS adapter sends it: whole seconds, rounded up.
            let secs = (r.delay.as_secs() + u64::from(r.delay.subsec_nanos() > 0)).min(900);
            self.push(r.message.encode(), Duration::from_secs(secs));
        }
        Ok(vec![true; batch.len()])
    }

    async fn depth(&self) -> Result<LaneDepths, QueueError> {
        Ok(LaneDepths { normal: lock(&self.state).msgs.len() as u64, ..LaneDepths::default() })
    }
}

/// The scheduler's release queue: the SQS model, and an import that moves a share of each
/// batch's renewals while the tick holds them (after its read and its send, before its mark):
/// where an unversioned mark went wrong, which moves at random instants almost never hit.
#[derive(Debug, Clone)]
struct MovingRelease {
    sqs: Sqs,
    share: f64,
    rng: Arc<Mutex<SplitMix64>>,
    due: MemoryDueStore,
    renewals: MemoryRenewals,
    faults: Faults,
}

impl ReleaseQueue for MovingRelease {
    async fn release(&self, batch: &[Release]) -> Result<Vec<bool>, QueueError> {
        let sent = self.sqs.release(batch).await?;
        for r in batch {
            let draw = {
                let mut rng = lock(&self.rng);
                (rng.next_unit() < self.share).then(|| rng.next_u64())
            };
            let m = &r.message;
            if let Some(draw) = draw
                && let Some(current) = self.due.current(&m.tenant_id, &m.renewal_id)
                && version_of(&current).reminder_id == m.reminder_id
            {
                move_renewal(
                    &current,
                    draw,
                    self.sqs.clock.truth(),
                    &self.due,
                    &self.renewals,
                    &self.faults,
                    "renewal_moved_under_tick",
                );
            }
        }
        Ok(sent)
    }

    async fn depth(&self) -> Result<LaneDepths, QueueError> {
        self.sqs.depth().await
    }
}

/// The DLQ as the redrive sees it; a crash between its send and its delete leaves both copies.
#[derive(Debug, Clone)]
struct Dlq {
    sqs: Sqs,
    crash: f64,
    rng: Arc<Mutex<SplitMix64>>,
    faults: Faults,
}

impl DeadLetters for Dlq {
    async fn receive(&self, _hold: std::time::Duration) -> Result<Vec<DeadLetter>, DeadLettersError> {
        let now = self.sqs.clock.truth().timestamp_millis();
        let mut s = lock(&self.sqs.state);
        let QueueState { dlq, dlq_held, .. } = &mut *s;
        let out: Vec<DeadLetter> = dlq
            .iter()
            .filter(|(id, _, _)| dlq_held.get(id).is_none_or(|until| *until <= now))
            .take(10)
            .map(|(id, body, reason)| DeadLetter {
                handle: id.to_string(),
                message_id: id.to_string(),
                body: body.clone(),
                // As the SQS adapter reads it: no attribute means the backstop moved it.
                reason: Some(reason.clone().unwrap_or_else(|| ReasonCode::ReceiveCountBackstop.as_str().to_owned())),
                first_enqueued: ReminderMessage::decode(body).ok().map(|m| m.first_enqueued),
            })
            .collect();
        for d in &out {
            if let Ok(id) = d.handle.parse() {
                // The SQS adapter's hold: 15 minutes.
                dlq_held.insert(id, now + 900_000);
            }
            trace(&d.body, || {
                format!("{} redrive received letter {} ({:?})", self.sqs.clock.truth(), d.handle, d.reason)
            });
        }
        Ok(out)
    }

    async fn send_back(&self, body: &str, _lane: QueueLane) -> Result<(), DeadLettersError> {
        if let Some(r) = reminder_of(body) {
            *lock(&self.sqs.state).redriven.entry(r).or_default() += 1;
        }
        self.sqs.push(body.to_owned(), Duration::ZERO);
        if lock(&self.rng).next_unit() < self.crash {
            self.faults.add("crash_redrive_after_send_before_delete");
            // The run dies here: the sent copy stays in the DLQ too.
            return Err(DeadLettersError::Unknown("redrive crashed after its send".into()));
        }
        Ok(())
    }

    async fn delete(&self, handle: &str) -> Result<(), DeadLettersError> {
        if std::env::var("PUNCTUAL_CHECK_TRACE").is_ok() {
            eprintln!("trace {} redrive deleted letter {handle}", self.sqs.clock.truth());
        }
        let mut s = lock(&self.sqs.state);
        s.dlq.retain(|(id, _, _)| id.to_string() != handle);
        Ok(())
    }

    async fn release(&self, handles: &[String]) -> Result<(), DeadLettersError> {
        let mut s = lock(&self.sqs.state);
        for h in handles {
            if let Ok(id) = h.parse::<u64>() {
                s.dlq_held.remove(&id);
            }
        }
        Ok(())
    }
}

// ---- provider model ----------------------------------------------------------------------------

/// One request as the provider saw it.
#[derive(Debug, Clone)]
struct Call {
    at_ms: i64,
    reminder: String,
    /// The answer left the provider as a determinate one (the client saw it).
    determinate: bool,
    /// It repeated a key whose effect the provider already held.
    repeated: bool,
    /// A 429 (throttling).
    throttled: bool,
    /// A 429 because the quota was exceeded (not one the plan injected).
    over_quota: bool,
}

#[derive(Debug, Default)]
struct ProviderState {
    tokens: f64,
    refilled_ms: i64,
    effects: HashMap<String, u32>,
    calls: Vec<Call>,
    violations: Vec<(&'static str, String, String)>,
}

/// A provider that honours idempotency keys, enforces its quota with a token bucket and
/// answers with the seed's faults.
#[derive(Clone)]
struct ChaosProvider {
    state: Arc<Mutex<ProviderState>>,
    clock: SkewedClock,
    rng: Arc<Mutex<SplitMix64>>,
    plan: Arc<Plan>,
    faults: Faults,
    ledger: MemoryLedger,
    outage: Arc<HashSet<String>>,
    honours_keys: bool,
}

impl ChaosProvider {
    /// One request at the provider: checks I1/I2 at arrival, then answers (`refuse`: a 401 for
    /// every request within the quota, `--channels`' SMS while its credentials are refused).
    fn call(
        &self,
        msg: &ReminderMessage,
        delivered_in_ledger: bool,
        seen: Option<&str>,
        refuse: bool,
    ) -> ProviderOutcome {
        let now = self.clock.truth();
        let now_ms = now.timestamp_millis();
        let rid = msg.reminder_id.to_string();
        let mut s = lock(&self.state);
        let skew = TimeDelta::from_std(SKEW).unwrap_or_default();
        // I8: the version the sender read from the renewals table (TableRenewals passes it in
        // the recipient reference) is the copy's, and its deliver_after has come.
        if let Some(seen) = seen.and_then(SeenVersion::parse) {
            let copy = SeenVersion::of(msg);
            if seen != copy {
                s.violations.push((
                    "I8",
                    rid.clone(),
                    format!("called for version {copy:?} after its sender read {seen:?} from the table"),
                ));
            } else if now < seen.deliver_after - skew {
                s.violations.push((
                    "I8",
                    rid.clone(),
                    format!("called at {now}, before deliver_after {}", seen.deliver_after),
                ));
            }
        }
        if now < msg.deliver_after - skew || now >= msg.deliver_by + skew {
            let detail = format!(
                "called at {now}, window [{}, {}) (skew bound {} ms)",
                msg.deliver_after,
                msg.deliver_by,
                SKEW.as_millis()
            );
            s.violations.push(("I2", rid.clone(), detail));
        }
        if delivered_in_ledger {
            s.violations.push((
                "I1",
                rid.clone(),
                "a request for a reminder the ledger already records delivered".into(),
            ));
        }
        let mut call = Call {
            at_ms: now_ms,
            reminder: rid.clone(),
            determinate: true,
            repeated: s.effects.contains_key(&rid),
            throttled: false,
            over_quota: false,
        };
        // The quota: a token bucket of BURST refilled at QUOTA per second.
        let dt = (now_ms - s.refilled_ms).max(0) as f64 / 1000.0;
        s.tokens = if s.refilled_ms == 0 { BURST } else { (s.tokens + dt * QUOTA).min(BURST) };
        s.refilled_ms = now_ms;
        let mut rng = lock(&self.rng);
        let outcome = if s.tokens < 1.0 {
            call.throttled = true;
            call.over_quota = true;
            ProviderOutcome::Transient { status: Some(429), retry_after: Some(RetryAfter::Seconds(1)) }
        } else if refuse {
            s.tokens -= 1.0;
            self.faults.add("channel_401");
            ProviderOutcome::Permanent { status: 401 }
        } else if self.outage.contains(&rid) {
            s.tokens -= 1.0;
            self.faults.add("provider_503");
            ProviderOutcome::Transient { status: Some(503), retry_after: None }
        } else if rng.next_unit() < self.plan.provider_fault {
            s.tokens -= 1.0;
            // Honouring keys: a key's first acceptance is its one effect; a repeat replays it.
            let keys = self.honours_keys;
            let apply = |s: &mut ProviderState| effect(s, &rid, keys);
            match rng.next_u64() % 9 {
                0 => {
                    self.faults.add("provider_429_seconds");
                    call.throttled = true;
                    ProviderOutcome::Transient {
                        status: Some(429),
                        retry_after: Some(RetryAfter::Seconds(1 + rng.next_u64() % 5)),
                    }
                }
                1 => {
                    self.faults.add("provider_429_http_date");
                    call.throttled = true;
                    let at = now + TimeDelta::seconds(1 + (rng.next_u64() % 5) as i64);
                    ProviderOutcome::Transient { status: Some(429), retry_after: RetryAfter::parse(&at.to_rfc2822()) }
                }
                2 => {
                    self.faults.add("provider_429_absurd");
                    call.throttled = true;
                    ProviderOutcome::Transient { status: Some(429), retry_after: Some(RetryAfter::Seconds(86_400)) }
                }
                3 => {
                    self.faults.add("provider_503");
                    ProviderOutcome::from_status(503, Some(RetryAfter::Seconds(2)), None)
                }
                4 => {
                    // A 5xx after the request arrived: it may or may not have been applied.
                    self.faults.add("provider_5xx");
                    if rng.next_unit() < 0.5 {
                        apply(&mut s);
                    }
                    call.determinate = false;
                    ProviderOutcome::from_status(500, None, None)
                }
                5 => {
                    self.faults.add("provider_timeout");
                    self.faults.add("crash_during_call");
                    if rng.next_unit() < 0.5 {
                        apply(&mut s);
                    }
                    call.determinate = false;
                    ProviderOutcome::Indeterminate { status: None }
                }
                6 => {
                    self.faults.add("provider_accept_then_drop");
                    apply(&mut s);
                    call.determinate = false;
                    ProviderOutcome::Indeterminate { status: None }
                }
                7 => {
                    // A redirect: nothing applied; the client must not call it delivered.
                    self.faults.add("provider_3xx");
                    ProviderOutcome::from_status(302, None, None)
                }
                _ => {
                    apply(&mut s);
                    ProviderOutcome::Accepted { status: 202, receipt: Some(format!("r-{rid}")), budget: None }
                }
            }
        } else {
            s.tokens -= 1.0;
            effect(&mut s, &rid, self.honours_keys);
            ProviderOutcome::Accepted { status: 202, receipt: Some(format!("r-{rid}")), budget: None }
        };
        trace(&msg.encode(), || format!("{now} provider answered {outcome:?}"));
        s.calls.push(call);
        outcome
    }
}

/// One acceptance: the key's one effect when the provider honours keys, another otherwise.
fn effect(s: &mut ProviderState, rid: &str, honours_keys: bool) {
    let n = s.effects.entry(rid.to_owned()).or_insert(0);
    if *n == 0 || !honours_keys {
        *n += 1;
    }
}

impl Provider for ChaosProvider {
    fn profile(&self) -> ProviderProfile {
        ProviderProfile { honours_keys: self.honours_keys }
    }

    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        Ok(self.answer(req, false).await)
    }
}

impl ChaosProvider {
    /// [`ChaosProvider::call`] for a request, after its round trip.
    async fn answer(&self, req: &ProviderRequest<'_>, refuse: bool) -> ProviderOutcome {
        let delivered = self
            .ledger
            .get(&req.message.reminder_id)
            .await
            .ok()
            .flatten()
            .is_some_and(|r| r.state == ReminderState::Delivered);
        let outcome = self.call(req.message, delivered, req.recipient_ref, refuse);
        tokio::time::sleep(LATENCY.min(req.timeout)).await;
        outcome
    }
}

/// A version of a renewal as the checker writes it into the recipient reference.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SeenVersion {
    reminder_id: String,
    deliver_after: DateTime<Utc>,
    deliver_by: DateTime<Utc>,
}

impl SeenVersion {
    fn of(m: &ReminderMessage) -> Self {
        Self { reminder_id: m.reminder_id.to_string(), deliver_after: m.deliver_after, deliver_by: m.deliver_by }
    }

    fn encode(v: &RenewalVersion) -> String {
        format!("v|{}|{}|{}", v.reminder_id, v.deliver_after.timestamp_millis(), v.deliver_by.timestamp_millis())
    }

    fn parse(s: &str) -> Option<Self> {
        let mut it = s.strip_prefix("v|")?.split('|');
        let reminder_id = it.next()?.to_owned();
        let at = |x: Option<&str>| x?.parse::<i64>().ok().and_then(DateTime::<Utc>::from_timestamp_millis);
        Some(Self { reminder_id, deliver_after: at(it.next())?, deliver_by: at(it.next())? })
    }
}

/// The renewals table as the senders read it: the in-memory table, with the version each read
/// found passed on to the provider in the (opaque) recipient reference, for I8.
#[derive(Debug, Clone, Default)]
struct TableRenewals(MemoryRenewals);

impl Renewals for TableRenewals {
    async fn lookup(&self, tenant: &TenantId, renewal: &RenewalId) -> Result<RenewalLookup, RenewalsError> {
        let mut l = self.0.lookup(tenant, renewal).await?;
        if let Some(v) = &l.version {
            l.recipient_ref = Some(SeenVersion::encode(v));
        }
        Ok(l)
    }
}

// ---- one seed --------------------------------------------------------------------------------

/// Runs one seed (on its own thread: it drives its own virtual-time runtime).
pub fn run_seed(seed: u64, reminders: usize, honours_keys: bool, indeterminate: IndeterminatePolicy) -> SeedOutcome {
    run_seed_with(seed, reminders, SENDERS, honours_keys, indeterminate)
}

/// [`run_seed`] with `senders` sender instances.
pub fn run_seed_with(
    seed: u64,
    reminders: usize,
    senders: usize,
    honours_keys: bool,
    indeterminate: IndeterminatePolicy,
) -> SeedOutcome {
    run_seed_on(seed, reminders, senders, honours_keys, indeterminate, false)
}

/// [`run_seed_with`], with two channels if `channels` (see [`CheckConfig::channels`]).
pub fn run_seed_on(
    seed: u64,
    reminders: usize,
    senders: usize,
    honours_keys: bool,
    indeterminate: IndeterminatePolicy,
    channels: bool,
) -> SeedOutcome {
    std::thread::scope(|sc| {
        sc.spawn(|| run_here(seed, reminders, senders, honours_keys, indeterminate, channels))
            .join()
            .unwrap_or_default()
    })
}

/// The checker's two channels: every other renewal goes by SMS.
const CHANNELS: [&str; 2] = ["email", "sms"];

/// A channel's provider: the checker's one provider model (its quota, faults and the
/// invariants it checks at arrival, for every request), which refuses the credentials (401)
/// while `refuses` says.
#[derive(Clone)]
struct ChannelProvider {
    inner: ChaosProvider,
    refuses: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

impl Provider for ChannelProvider {
    fn profile(&self) -> ProviderProfile {
        self.inner.profile()
    }

    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        let now = self.inner.clock.truth();
        Ok(self.inner.answer(req, self.refuses.is_some_and(|(from, to)| now >= from && now < to)).await)
    }
}

type CheckSender = Sender<
    FaultyLedger<MemoryLedger>,
    TableRenewals,
    SharedLimiter<MemorySlotStore, SkewedClock>,
    ChannelProvider,
    Sqs,
    SkewedClock,
>;

fn run_here(
    seed: u64,
    n: usize,
    senders: usize,
    honours_keys: bool,
    indeterminate: IndeterminatePolicy,
    channels: bool,
) -> SeedOutcome {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build();
    let Ok(runtime) = runtime else { return SeedOutcome::default() };
    let _entered = runtime.enter();
    let mut rng = SplitMix64::new(seed ^ 0x0c4e_c4e5);
    let plan = Arc::new(Plan::draw(&mut rng, senders));
    let faults = Faults::default();
    let truth = SkewedClock { start: tokio::time::Instant::now(), offset_ms: 0 };

    // The population: renewals due within 20 s (or, spread, within the 10-minute lookahead),
    // windows of 20 s to 5 min, a few cancelled.
    let due = MemoryDueStore::new(2);
    let renewals = TableRenewals::default();
    let mut population = Vec::new();
    let due_within = if plan.spread { 540_000.0 } else { 20_000.0 };
    if plan.spread && plan.pause_at.is_some() {
        faults.add("catch_up_over_the_lookahead");
    }
    for i in 0..n {
        let (Ok(tenant), Ok(renewal)) = (TenantId::parse(format!("t{}", i % 3)), RenewalId::parse(format!("r-{i}")))
        else {
            continue;
        };
        let after = t0() + TimeDelta::milliseconds((rng.next_unit() * due_within) as i64);
        let by = after + TimeDelta::milliseconds(20_000 + (rng.next_unit() * 280_000.0) as i64);
        let view = if rng.next_unit() < 0.05 { RenewalView::Cancelled } else { RenewalView::Active };
        let mut p = Pending::new(tenant, renewal, ReminderKind::renewal_due(), after, by);
        renewals.0.set_version(&p.tenant_id, &p.renewal_id, version_of(&p));
        renewals.0.set(&p.tenant_id, &p.renewal_id, view);
        if channels {
            renewals.0.set_channel(&p.tenant_id, &p.renewal_id, CHANNELS[i % 2]);
            // The due index gives the scheduler the channel, and its message carries it: a
            // paused channel's copy is held before its claim.
            p.channel = Some(CHANNELS[i % 2].to_owned());
        }
        due.insert(p.clone());
        population.push(p);
    }
    let outage: Arc<HashSet<String>> = Arc::new(
        population.iter().filter(|_| rng.next_unit() < plan.outage).map(|p| p.reminder_id.to_string()).collect(),
    );

    // The ledger keeps its outbox, as the DynamoDB ledger does (I11).
    let ledger = MemoryLedger::with_outbox();
    let sink = MemorySink::default();
    let sqs = Sqs { state: Arc::default(), clock: truth.clone() };
    let provider = ChaosProvider {
        state: Arc::default(),
        clock: truth.clone(),
        rng: Arc::new(Mutex::new(SplitMix64::new(seed ^ 0x9e0))),
        plan: Arc::clone(&plan),
        faults: faults.clone(),
        ledger: ledger.clone(),
        outage: Arc::clone(&outage),
        honours_keys,
    };
    let control = MemoryControl::default();
    // `--channels`: each channel's own pause, and SMS's refusal window, drawn from a generator
    // of their own (every other draw of the seed is what it is without channels).
    let channel_controls = [MemoryControl::default(), MemoryControl::default()];
    let refusal = channels.then(|| {
        let mut r = SplitMix64::new(seed ^ 0x5c4a_77e1);
        let from = t0() + TimeDelta::milliseconds((5_000.0 + r.next_unit() * 55_000.0) as i64);
        (from, from + TimeDelta::milliseconds((5_000.0 + r.next_unit() * 25_000.0) as i64))
    });
    let slots = MemorySlotStore::default();
    let settings = SenderSettings {
        policy: SenderPolicy {
            backoff: Backoff { base: Duration::from_millis(200), cap: Duration::from_secs(5) },
            max_attempts: MAX_ATTEMPTS,
            indeterminate,
            ..SenderPolicy::default()
        },
        deadline_near: Duration::from_secs(60),
        queue_delay: Duration::from_secs(1),
        ..SenderSettings::default()
    };
    let faulty = FaultyLedger::with_chances(ledger.clone(), &plan.ledger, seed ^ 0x1ed9);
    let senders: Vec<Rc<CheckSender>> = (0..plan.skew_ms.len())
        .map(|i| {
            let clock = SkewedClock { start: truth.start, offset_ms: plan.skew_ms[i] };
            if plan.skew_ms[i] != 0 {
                faults.add("clock_skew");
            }
            let limiter =
                SharedLimiter::new(slots.clone(), clock.clone(), LimiterSettings::new(QUOTA), seed ^ i as u64);
            let gate = PauseGate::new(control.clone(), clock.clone(), Duration::from_secs(1));
            // `--channels`: two channels at half the quota each (one provider model holds both,
            // so I4 still bounds their sum), each with its own limiter schedule and pause.
            let routes = CHANNELS
                .iter()
                .zip(&channel_controls)
                .enumerate()
                .filter(|_| channels)
                .map(|(k, (name, switch))| punctual_core::sender::ChannelRoute {
                    name: (*name).to_owned(),
                    limiter: SharedLimiter::new(
                        slots.clone(),
                        clock.clone(),
                        LimiterSettings {
                            name: format!("provider.{name}"),
                            ..LimiterSettings::for_channel(QUOTA / 2.0)
                        },
                        seed ^ i as u64 ^ ((k as u64 + 1) << 40),
                    ),
                    provider: ChannelProvider { inner: provider.clone(), refuses: refusal.filter(|_| k == 1) },
                    pause: Some(PauseGate::new(switch.clone(), clock.clone(), Duration::from_secs(1))),
                })
                .collect();
            Rc::new(
                Sender::new(
                    faulty.clone(),
                    renewals.clone(),
                    limiter,
                    ChannelProvider { inner: provider.clone(), refuses: None },
                    sqs.clone(),
                    clock,
                    settings,
                    seed.rotate_left(7 * i as u32 + 1),
                )
                .with_pause(gate)
                .with_channels(routes),
            )
        })
        .collect();
    let release = MovingRelease {
        sqs: sqs.clone(),
        share: plan.under_tick,
        rng: Arc::new(Mutex::new(SplitMix64::new(seed ^ 0x71c4))),
        due: due.clone(),
        renewals: renewals.0.clone(),
        faults: faults.clone(),
    };
    let scheduler = Scheduler::new(
        due.clone(),
        release,
        truth.clone(),
        SchedulerSettings {
            lookahead: Duration::from_secs(600),
            page_size: 25,
            safety_margin: Duration::from_secs(1),
            sustainable_rate: QUOTA,
            ..SchedulerSettings::default()
        },
    )
    .with_pause(PauseGate::new(control.clone(), truth.clone(), Duration::ZERO))
    // Its expiries go through the ledger as production's do, with the ledger's faults.
    .with_ledger(faulty.clone());

    let errs: Rc<RefCell<HashMap<String, u64>>> = Rc::default();
    let stop = Rc::new(std::cell::Cell::new(false));
    let last_by = population.iter().map(|p| p.deliver_by).max().unwrap_or_else(t0);
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let mut tasks = Vec::new();
        // EventBridge: a tick every 5 s.
        {
            let (scheduler, stop, truth) = (Rc::new(scheduler), Rc::clone(&stop), truth.clone());
            tasks.push(tokio::task::spawn_local(async move {
                while !stop.get() {
                    let _ = scheduler.tick(truth.now() + TimeDelta::seconds(60)).await;
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
            }));
        }
        // The event source mapping: one poller per sender instance.
        let wrng = Rc::new(RefCell::new(SplitMix64::new(seed ^ 0x5eed)));
        for sender in &senders {
            let (sender, sqs, stop, wrng, plan, faults, errs) = (
                Rc::clone(sender),
                sqs.clone(),
                Rc::clone(&stop),
                Rc::clone(&wrng),
                Arc::clone(&plan),
                faults.clone(),
                Rc::clone(&errs),
            );
            tasks.push(tokio::task::spawn_local(async move {
                while !stop.get() {
                    let batch = sqs.receive(&mut wrng.borrow_mut(), plan.duplicate, &faults);
                    if batch.is_empty() {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                    let deadline = sender_deadline(&sqs);
                    let records = batch.into_iter().map(|(id, generation, body)| {
                        let (sender, sqs, wrng, plan, faults, errs) = (&sender, &sqs, &wrng, &plan, &faults, &errs);
                        async move {
                            let message_id = format!("m-{id}-{generation}");
                            let received = Received { message_id: &message_id, body: &body };
                            let result = sender.process(received, deadline).await;
                            trace(&body, || {
                                format!(
                                    "{} processed: {:?}",
                                    sqs.clock.truth(),
                                    result.as_ref().map(|p| &p.disposition)
                                )
                            });
                            match result {
                                Ok(p) => {
                                    if wrng.borrow_mut().next_unit() < plan.crash_before_ack {
                                        faults.add(match &p.disposition {
                                            punctual_core::Disposition::Defer { .. } => {
                                                "crash_after_requeue_before_ack"
                                            }
                                            punctual_core::Disposition::Quarantine { .. }
                                            | punctual_core::Disposition::Expire { .. } => {
                                                "crash_after_dlq_send_before_ack"
                                            }
                                            _ => "crash_after_settle_before_ack",
                                        });
                                    } else {
                                        sqs.ack(id, generation);
                                    }
                                }
                                Err(_) => {
                                    if let Some(r) = reminder_of(&body) {
                                        *errs.borrow_mut().entry(r).or_default() += 1;
                                    }
                                }
                            }
                        }
                    });
                    futures_util::future::join_all(records).await;
                    // The AWS calls around a batch take time (and virtual time must move: a copy
                    // requeued with no delay is received again at once).
                    tokio::time::sleep(OVERHEAD).await;
                }
            }));
        }
        // An operator pause and resume at random points.
        if let Some((at, lasts)) = plan.pause_at {
            let (control, faults) = (control.clone(), faults.clone());
            tasks.push(tokio::task::spawn_local(async move {
                tokio::time::sleep(at).await;
                faults.add("pause_resume");
                let pause = Pause { reason: "checker".into(), owner: "checker".into(), since: t0() };
                let _ = control.set_pause(Some(&pause), "checker").await;
                tokio::time::sleep(lasts).await;
                let _ = control.set_pause(None, "checker").await;
            }));
        }
        // `--channels`: the operator lifts SMS's pause (the sender set it on the 401s) once its
        // provider takes the credentials again.
        if let Some((_, to)) = refusal {
            let (switch, truth, faults) = (channel_controls[1].clone(), truth.clone(), faults.clone());
            tasks.push(tokio::task::spawn_local(async move {
                tokio::time::sleep(punctual_core::clock::until(truth.truth(), to) + Duration::from_secs(5)).await;
                if matches!(switch.pause().await, Ok(Some(_))) {
                    faults.add("channel_paused_by_sender");
                }
                let _ = switch.set_pause(None, "checker").await;
            }));
        }
        // A redrive racing live traffic.
        let redrive_done = Rc::new(std::cell::Cell::new(plan.redrive_at.is_none()));
        if let Some(at) = plan.redrive_at {
            let dlq = Dlq {
                sqs: sqs.clone(),
                crash: plan.redrive_crash,
                rng: Arc::new(Mutex::new(SplitMix64::new(seed ^ 0xd1a))),
                faults: faults.clone(),
            };
            let (ledger, control, truth, faults, done, sqs) =
                (ledger.clone(), control.clone(), truth.clone(), faults.clone(), Rc::clone(&redrive_done), sqs.clone());
            tasks.push(tokio::task::spawn_local(async move {
                tokio::time::sleep(at).await;
                faults.add("redrive_racing_traffic");
                let mut redriver = Redriver::new(ledger, dlq, control.clone(), truth.clone());
                redriver.canary_timeout = Duration::from_secs(30);
                let req = RedriveRequest {
                    reason: "checker".into(),
                    owner: "checker".into(),
                    selection: Selection::default(),
                    max_messages: 100,
                    max_per_second: 5.0,
                    canary: 0,
                    canary_timeout: None,
                    abort_if: punctual_core::redrive::AbortIf { failure_ratio: 1.0, ..Default::default() },
                    dry_run: false,
                };
                // A run that dies (between a send and its delete) is run again by the operator
                // once the traffic it released has settled, as the runbook says (its audit
                // record never finished); the rerun removes the letters of what was delivered.
                for _ in 0..6 {
                    let r = redriver.run(&req, truth.now() + TimeDelta::minutes(5)).await;
                    if std::env::var("PUNCTUAL_CHECK_TRACE").is_ok() {
                        eprintln!(
                            "trace {} redrive run: {:?}",
                            truth.truth(),
                            r.as_ref().map(|s| (s.moved, s.removed_delivered, &s.skipped))
                        );
                    }
                    if r.is_ok() {
                        break;
                    }
                    // The operator reruns once the traffic it released settled and no pause
                    // is in force (a paused system refuses a redrive).
                    while !sqs.is_empty() || control.pause().await.ok().flatten().is_some() {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                }
                done.set(true);
            }));
        }
        // An import racing the ticks: re-importing rows never re-arms one already released.
        if let Some(at) = plan.import_at {
            let (due, population, faults) = (due.clone(), population.clone(), faults.clone());
            tasks.push(tokio::task::spawn_local(async move {
                tokio::time::sleep(at).await;
                faults.add("import_racing_tick");
                for p in population.iter().step_by(3) {
                    if due.state(&p.tenant_id, &p.renewal_id) == Some("scheduled") {
                        due.insert(p.clone());
                    }
                }
            }));
        }
        // An import moving renewals while ticks hold them and their copies are queued: each
        // chosen renewal at its own instant within a minute, to a later time the same day, to
        // another due date (another reminder), to a new deadline alone, to now, or cancelled.
        if let Some(at) = plan.reschedule_at {
            let (due, renewals, population, faults, truth) =
                (due.clone(), renewals.clone(), population.clone(), faults.clone(), truth.clone());
            let mut rrng = SplitMix64::new(seed ^ 0x7e5c);
            let share = plan.reschedule;
            tasks.push(tokio::task::spawn_local(async move {
                let mut moves: Vec<(Duration, &Pending, u64)> = Vec::new();
                for p in &population {
                    if rrng.next_unit() < share {
                        let t = at + Duration::from_millis((rrng.next_unit() * 60_000.0) as u64);
                        moves.push((t, p, rrng.next_u64()));
                    }
                }
                moves.sort_by_key(|(t, _, _)| *t);
                let start = truth.truth();
                for (t, p, draw) in moves {
                    let wait = (start + TimeDelta::from_std(t).unwrap_or_default() - truth.truth()).to_std();
                    tokio::time::sleep(wait.unwrap_or_default()).await;
                    let Some(current) = due.current(&p.tenant_id, &p.renewal_id) else { continue };
                    move_renewal(&current, draw, truth.truth(), &due, &renewals.0, &faults, "renewal_moved");
                }
            }));
        }
        // The outbox's publisher, as the scheduler runs it after each minute's tick: the bus
        // refuses some sweeps, and loses the answer to others after taking their events (a
        // crash between the publish and the clear).
        {
            let publisher = Publisher::new(ledger.clone(), sink.clone());
            let (truth, faults, sink, stop) = (truth.clone(), faults.clone(), sink.clone(), Rc::clone(&stop));
            let mut prng = SplitMix64::new(seed ^ 0x0b0c);
            tasks.push(tokio::task::spawn_local(async move {
                while !stop.get() {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    let draw = prng.next_unit();
                    if draw < 0.15 {
                        sink.refuse_next(1);
                        faults.add("outcome_publish_refused");
                    } else if draw < 0.3 {
                        sink.lose_next_answers(1);
                        faults.add("outcome_publish_answer_lost");
                    }
                    let _ = publisher.sweep(truth.truth(), 50, || false).await;
                }
            }));
        }
        // Until everything settled (or the horizon).
        let settled = {
            let (sqs, truth, due, population) = (sqs.clone(), truth.clone(), due.clone(), population.clone());
            move || {
                truth.truth() > last_by + TimeDelta::seconds(30)
                    && sqs.is_empty()
                    && population.iter().all(|p| due.state(&p.tenant_id, &p.renewal_id) != Some("scheduled"))
            }
        };
        while !(settled() && redrive_done.get())
            && truth.truth() < t0() + TimeDelta::from_std(HORIZON).unwrap_or_default()
        {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        stop.set(true);
        for t in tasks {
            t.abort();
        }
    });
    for (f, k) in faulty.injected() {
        // A claim applied whose answer was lost is both a crash point and a lost answer.
        let classes: &[&'static str] = match f {
            Fault::UncertainClaim => &["crash_after_claim", "dynamodb_answer_lost"],
            Fault::ClaimRefused => &["dynamodb_error"],
            Fault::LoseDeliveredWrite => &["crash_after_call_before_settle"],
            Fault::UncertainSettle => &["dynamodb_answer_lost"],
        };
        for class in classes {
            *lock(&faults.0).entry(class).or_default() += k;
        }
    }
    let spread = plan.skew_ms.iter().max().copied().unwrap_or(0) - plan.skew_ms.iter().min().copied().unwrap_or(0);
    let spread = Duration::from_millis(u64::try_from(spread).unwrap_or(0));
    // The versions the table holds at the end: a moved renewal is judged by its last version
    // (its earlier versions' copies are I8's concern).
    let population: Vec<Pending> =
        population.iter().map(|p| due.current(&p.tenant_id, &p.renewal_id).unwrap_or_else(|| p.clone())).collect();
    let mut out = verify(seed, &population, &due, &ledger, &sqs, &provider, &errs.borrow(), &outage, spread);
    // I11: after a last sweep with the bus answering, every ended reminder has its event.
    sink.refuse_next(0);
    sink.lose_next_answers(0);
    let swept = block_on(Publisher::new(ledger.clone(), sink.clone()).sweep(truth.truth(), 1_000, || false));
    out.violations.extend(outcome_violations(seed, &ledger, &sink, swept.is_ok()));
    // I10: a channel's pause holds that channel only. The fleet's hold writes nothing to the
    // ledger (it requeues before the claim), so an email reminder whose history shows
    // `operator_pause` was held by SMS's pause.
    if channels {
        if control.sender_trips.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            out.violations.push(Violation {
                seed,
                invariant: "I10",
                reminder_id: String::new(),
                detail: "a sender paused the whole fleet: a channel's refusal must pause that channel only".into(),
                replay: format!("punctual check --seeds 1 --first-seed {seed}"),
            });
        }
        for (i, p) in population.iter().enumerate().filter(|(i, _)| CHANNELS[i % 2] == "email") {
            let held = block_on(ledger.get(&p.reminder_id))
                .ok()
                .flatten()
                .and_then(|r| r.history.into_iter().find(|h| h.reason == Some(ReasonCode::OperatorPause)));
            if let Some(h) = held {
                out.violations.push(Violation {
                    seed,
                    invariant: "I10",
                    reminder_id: p.reminder_id.to_string(),
                    detail: format!("email reminder {i} held by a channel's pause at {}", h.at),
                    replay: format!("punctual check --seeds 1 --first-seed {seed}"),
                });
            }
        }
    }
    out.faults = lock(&faults.0).clone();
    out
}

/// I11: every reminder the ledger ended has a published event of that ending (its outcome and
/// reason), and no two events for one reminder disagree: events sharing an id say the same
/// (outcome, attempts, reason, redrive), a reminder has at most one delivery event and none
/// unless the ledger records it delivered, and the outbox is empty after the last sweep.
fn outcome_violations(seed: u64, ledger: &MemoryLedger, sink: &MemorySink, swept: bool) -> Vec<Violation> {
    let replay = format!("punctual check --seeds 1 --first-seed {seed}");
    let mut out = Vec::new();
    let mut flag = |reminder: &str, detail: String| {
        out.push(Violation {
            seed,
            invariant: "I11",
            reminder_id: reminder.to_owned(),
            detail,
            replay: replay.clone(),
        });
    };
    if !swept {
        flag("", "the last sweep of the outbox failed".into());
    }
    let left = block_on(punctual_core::ports::Outbox::pending(ledger, 1_000)).unwrap_or_default();
    for e in &left {
        flag(&e.reminder_id, format!("{} events still unpublished after the last sweep", e.events.len()));
    }
    let mut by_reminder: HashMap<&str, Vec<&OutcomeEvent>> = HashMap::new();
    let events = sink.events();
    for e in &events {
        by_reminder.entry(e.reminder_id.as_str()).or_default().push(e);
    }
    let mut ids: HashMap<&str, &OutcomeEvent> = HashMap::new();
    for e in &events {
        let first = *ids.entry(e.event_id.as_str()).or_insert(e);
        let key =
            |x: &OutcomeEvent| (x.outcome, x.attempts, x.reason.clone(), x.redrive_id.clone(), x.reminder_id.clone());
        if key(first) != key(e) {
            flag(&e.reminder_id, format!("two events {} disagree: {first:?} and {e:?}", e.event_id));
        }
    }
    // Every reminder the ledger knows (a moved renewal's earlier reminders too) and every one
    // an event names.
    let mut reminders: Vec<String> = ledger.reminder_ids().iter().map(ToString::to_string).collect();
    reminders.extend(by_reminder.keys().map(|k| (*k).to_owned()));
    reminders.sort();
    reminders.dedup();
    for rid in reminders {
        let Ok(id) = punctual_core::ReminderId::parse(&rid) else { continue };
        let record = block_on(ledger.get(&id)).ok().flatten();
        let mine = by_reminder.get(rid.as_str()).cloned().unwrap_or_default();
        let deliveries: HashSet<&str> =
            mine.iter().filter(|e| e.outcome == Outcome::Delivered).map(|e| e.event_id.as_str()).collect();
        if deliveries.len() > 1 {
            flag(&rid, format!("{} delivery events", deliveries.len()));
        }
        let Some(r) = record else {
            if !mine.is_empty() {
                flag(&rid, format!("{} events for a reminder the ledger does not know", mine.len()));
            }
            continue;
        };
        if !deliveries.is_empty() && r.state != ReminderState::Delivered {
            flag(&rid, format!("a delivery event, but the ledger records {}", r.state.as_str()));
        }
        if let Some(ending) = Outcome::of_state(r.state) {
            let reason = r.last_reason.map(|x| x.as_str().to_owned());
            if !mine.iter().any(|e| e.outcome == ending && e.reason == reason) {
                flag(
                    &rid,
                    format!(
                        "ended {} ({reason:?}) with no such event among {} published",
                        r.state.as_str(),
                        mine.len()
                    ),
                );
            }
        }
    }
    out
}

/// With `PUNCTUAL_CHECK_TRACE=rem_…`, prints what happens to that reminder (replaying a seed).
fn trace(body: &str, line: impl FnOnce() -> String) {
    if let Some(r) = reminder_of(body) {
        trace_id(&r, line);
    }
}

fn trace_id(reminder: &str, line: impl FnOnce() -> String) {
    if std::env::var("PUNCTUAL_CHECK_TRACE").is_ok_and(|want| want == reminder) {
        eprintln!("trace {}", line());
    }
}

/// The version a row holds, as the renewals table gives it to the sender.
/// An import moving one renewal (`current`, its version in the table): by `draw`, to a later
/// time the same day, to another due date (another reminder), to a new deadline alone, to now,
/// or cancelled. The renewals table and the due index change together, as the import writes
/// one row.
fn move_renewal(
    current: &Pending,
    draw: u64,
    now: DateTime<Utc>,
    due: &MemoryDueStore,
    renewals: &MemoryRenewals,
    faults: &Faults,
    class: &'static str,
) {
    let window = current.deliver_by - current.deliver_after;
    let ms = |lo: u64, hi: u64, d: u64| TimeDelta::milliseconds((lo + d % (hi - lo)) as i64);
    let moved = match draw % 5 {
        // Later the same day: the same reminder, other times.
        0 => {
            let after = current.deliver_after.max(now) + ms(30_000, 180_000, draw >> 8);
            Pending { deliver_after: after, deliver_by: after + window, ..current.clone() }
        }
        // Another due date: another reminder (its times kept inside the run).
        1 => {
            let after = now + ms(10_000, 120_000, draw >> 8);
            let other_day = current.deliver_after.date_naive() + chrono::Days::new(1 + (draw >> 40) % 30);
            Pending {
                reminder_id: punctual_core::ids::ReminderId::derive(
                    &current.tenant_id,
                    &current.renewal_id,
                    &current.kind,
                    other_day,
                ),
                deliver_after: after,
                deliver_by: after + ms(20_000, 300_000, draw >> 20),
                ..current.clone()
            }
        }
        // A new deadline alone (never one already past: the import refuses those).
        2 => {
            let by = (current.deliver_after + ms(20_000, 300_000, draw >> 8)).max(now + TimeDelta::seconds(5));
            Pending { deliver_by: by, ..current.clone() }
        }
        // Due now.
        3 => Pending { deliver_after: now, deliver_by: now + window.max(TimeDelta::seconds(20)), ..current.clone() },
        // Cancelled.
        _ => {
            renewals.set(&current.tenant_id, &current.renewal_id, RenewalView::Cancelled);
            faults.add(class);
            return;
        }
    };
    faults.add(class);
    trace_id(&current.reminder_id.to_string(), || format!("{now} moved to {moved:?}"));
    renewals.set_version(&current.tenant_id, &current.renewal_id, version_of(&moved));
    due.reschedule(moved);
}

fn version_of(p: &Pending) -> RenewalVersion {
    RenewalVersion { reminder_id: p.reminder_id.clone(), deliver_after: p.deliver_after, deliver_by: p.deliver_by }
}

/// The invocation deadline a sender sees for a batch: 60 s from now.
fn sender_deadline(sqs: &Sqs) -> DateTime<Utc> {
    sqs.clock.truth() + TimeDelta::seconds(60)
}

// ---- the invariants ----------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
fn verify(
    seed: u64,
    population: &[Pending],
    due: &MemoryDueStore,
    ledger: &MemoryLedger,
    sqs: &Sqs,
    provider: &ChaosProvider,
    errs: &HashMap<String, u64>,
    outage: &HashSet<String>,
    skew_spread: Duration,
) -> SeedOutcome {
    let replay = format!("punctual check --seeds 1 --first-seed {seed}");
    let mut out = SeedOutcome::default();
    let mut double_effects = 0;
    let mut flag = |invariant: &'static str, reminder: &str, detail: String| {
        out.violations.push(Violation {
            seed,
            invariant,
            reminder_id: reminder.to_owned(),
            detail,
            replay: replay.clone(),
        });
    };
    let p = lock(&provider.state);
    for (inv, rid, detail) in &p.violations {
        flag(inv, rid, detail.clone());
    }
    let q = lock(&sqs.state);
    let live = { q.msgs.values().filter_map(|m| reminder_of(&m.body)).collect::<HashSet<_>>() };
    let in_dlq: HashMap<String, Option<String>> =
        q.dlq.iter().filter_map(|(_, body, reason)| reminder_of(body).map(|r| (r, reason.clone()))).collect();
    // The deadline each letter carried: a renewal moved after release was dead-lettered under
    // the deadline of the version its copy was (I6 judges the sender by what it knew).
    let letter_deadline = &q.letters;

    let mut calls_of: HashMap<&str, Vec<&Call>> = HashMap::new();
    for c in &p.calls {
        calls_of.entry(c.reminder.as_str()).or_default().push(c);
    }
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for pending in population {
        let rid = pending.reminder_id.to_string();
        let record = block_on(ledger.get(&pending.reminder_id)).ok().flatten();
        let scheduled = due.state(&pending.tenant_id, &pending.renewal_id);
        let calls = calls_of.get(rid.as_str()).map_or(&[][..], Vec::as_slice);
        // I3: conservation.
        let ending = match (&record, scheduled) {
            (Some(r), _) if r.state.is_terminal() => r.state.as_str().to_owned(),
            (_, Some("expired")) => "expired_at_release".to_owned(),
            (_, Some("scheduled")) => "never_released".to_owned(),
            (r, _) => {
                if live.contains(&rid) {
                    "waiting".to_owned()
                } else if in_dlq.contains_key(&rid) {
                    "dead_lettered".to_owned()
                } else {
                    let state = r.as_ref().map_or("no ledger record", |r| r.state.as_str());
                    flag("I3", &rid, format!("released, {state}, and on no queue"));
                    "lost".to_owned()
                }
            }
        };
        if ending == "never_released" {
            flag("I3", &rid, "due but never released".into());
        }
        // Dead-lettered means in the DLQ with a reason: a record that says so with no letter
        // left is a reminder no operator can see or redrive.
        if record.as_ref().is_some_and(|r| r.state == ReminderState::DeadLettered)
            && !in_dlq.contains_key(&rid)
            && !live.contains(&rid)
        {
            flag("I3", &rid, "dead-lettered in the ledger, but no letter in the DLQ and nothing on a queue".into());
        }
        *outcomes.entry(ending).or_default() += 1;
        // I1: at most one accepted effect.
        if let Some(n) = p.effects.get(&rid).copied()
            && n > 1
        {
            flag("I1", &rid, format!("{n} accepted effects at the provider"));
            double_effects += 1;
        }
        // I1: a reminder recorded delivered has its effect at the provider.
        if record.as_ref().is_some_and(|r| r.state == ReminderState::Delivered) && !p.effects.contains_key(&rid) {
            flag("I1", &rid, "recorded delivered, but the provider holds no effect for it".into());
        }
        // I1: a request repeating an accepted key only after an indeterminate outcome (an
        // answer the client never saw, or a crash before the ledger recorded it).
        let lost_answers = errs.get(&rid).copied().unwrap_or(0);
        for (k, c) in calls.iter().enumerate() {
            if c.repeated && lost_answers == 0 && calls[..k].iter().all(|e| e.determinate) {
                flag("I1", &rid, format!("request {} repeated an accepted key after determinate answers only", k + 1));
                break;
            }
        }
        // I5: bounded work.
        let redrives = u64::from(q.redriven.get(&rid).copied().unwrap_or(0));
        let budget = u64::from(MAX_ATTEMPTS) * (1 + redrives) + errs.get(&rid).copied().unwrap_or(0);
        if calls.len() as u64 > budget {
            flag(
                "I5",
                &rid,
                format!("{} provider requests against a budget of {budget} ({redrives} redrives)", calls.len()),
            );
        }
        if let Some(r) = &record
            && r.history.len() > MAX_HISTORY
        {
            flag("I5", &rid, format!("ledger history of {} entries (bound {MAX_HISTORY})", r.history.len()));
        }
        let copies = q.copies.get(&rid).copied().unwrap_or(0);
        if copies > MAX_COPIES {
            flag("I5", &rid, format!("{copies} SQS copies (bound {MAX_COPIES})"));
        }
        // I6: throttling alone never dead-letters a healthy reminder: not by spending its attempt
        // budget on 429s, and not for want of a retry window while a capped wait still fitted.
        let dead_for = record.as_ref().filter(|r| r.state == ReminderState::DeadLettered).and_then(|r| r.last_reason);
        let only_throttled = calls.iter().all(|c| c.throttled);
        if only_throttled && !outage.contains(&rid) {
            // The slack left when the sender gave up (its dead-letter entry in the ledger).
            let dead_at = record
                .as_ref()
                .and_then(|r| r.history.iter().rev().find(|h| h.state == ReminderState::DeadLettered))
                .map_or(0, |h| h.at.timestamp_millis());
            let deadline = letter_deadline
                .get(&(rid.clone(), dead_for.map(|r| r.as_str().to_owned())))
                .copied()
                .unwrap_or(pending.deliver_by);
            let slack_ms = deadline.timestamp_millis() - dead_at;
            let fitted =
                slack_ms > (punctual_core::provider::MAX_RETRY_AFTER + Duration::from_secs(10)).as_millis() as i64;
            match dead_for {
                // 429s spend the attempt budget by design (docs/design.md#the-sender-decision), so a provider that
                // throttles on its own (the plan's injected 429s) may exhaust it; the limiter
                // must never: a budget spent on over-quota 429s alone is the limiter's failure.
                Some(ReasonCode::AttemptLimit) if calls.iter().all(|c| c.over_quota) => {
                    flag("I6", &rid, format!("dead-lettered attempt_limit after {} over-quota 429s only", calls.len()))
                }
                Some(ReasonCode::NoSafeRetryWindow) if fitted => flag(
                    "I6",
                    &rid,
                    format!("dead-lettered no_safe_retry_window with {slack_ms} ms left, after 429s only"),
                ),
                _ => {}
            }
        }
    }
    // I4: the provider's 1 s windows. Instances book slots on their own clocks: with a spread
    // of `spread` between the fastest and the slowest clock, one window can hold the slots of
    // 1 s + spread (stated beside the skew bound).
    let mut times: Vec<i64> = p.calls.iter().map(|c| c.at_ms).collect();
    times.sort_unstable();
    let limit = (QUOTA * (1.0 + skew_spread.as_secs_f64()) + BURST).floor() as usize;
    let mut j = 0;
    for i in 0..times.len() {
        while times[i] - times[j] >= 1000 {
            j += 1;
        }
        if i + 1 - j > limit {
            flag("I4", "-", format!("{} requests within 1 s at t={} ms (limit {limit})", i + 1 - j, times[i]));
            break;
        }
    }
    // I7: the DLQ holds no delivered reminder, and every message carries a known reason.
    for (_, body, reason) in &q.dlq {
        let rid = reminder_of(body);
        if let Some(reason) = reason
            && reason.parse::<ReasonCode>().is_err()
        {
            flag("I7", rid.as_deref().unwrap_or("-"), format!("DLQ reason {reason:?} is not a reason code"));
        }
        let Some(rid) = rid else { continue };
        let delivered = population
            .iter()
            .find(|p| p.reminder_id.as_str() == rid)
            .and_then(|p| block_on(ledger.get(&p.reminder_id)).ok().flatten())
            .is_some_and(|r| r.state == ReminderState::Delivered);
        // The backstop (no reason attribute) moves what SQS could not get acknowledged; the
        // sender's own quarantine must never hold a delivered reminder.
        if delivered && reason.is_some() {
            flag("I7", &rid, format!("the DLQ holds it ({}) but it was delivered", reason.as_deref().unwrap_or("-")));
        }
    }
    out.outcomes = outcomes;
    out.double_effects = double_effects;
    out
}
