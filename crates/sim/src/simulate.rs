//! A deterministic discrete-event simulator: the **same core services** (the sender service,
//! the scheduler's projected-breach computation, the token bucket) over in-memory adapters and
//! virtual time, so hundreds of thousands of reminders run in seconds. Used by
//! `punctual simulate` and as the measuring instrument of policy changes.
//!
//! Models, each kept simple and stated:
//! - **SQS standard queues**, two lanes (normal and urgent, sharing the DLQ): no ordering (a
//!   random ready message is received), visibility timeout (30 s), receive counts, delays in
//!   whole seconds, batches of ≤ 10, at-least-once (a configurable fraction of receives also
//!   leaves a duplicate copy visible), long polling (one request waits up to 20 s for a message).
//! - **Scheduler**: the core's scheduler releases the due population in one tick through the
//!   same lane planner as production (routing by slack, pacing the urgent lane). Its requests
//!   (one SQS send and one DynamoDB write per reminder, the same in every design) are not in
//!   the cost model, which prices the sender side.
//! - **Event source mappings**: one per lane, `concurrency` workers on the normal lane and
//!   `urgent_concurrency` on the urgent lane. An idle lane is long-polled by the five pollers a
//!   mapping with a `MaximumConcurrency` keeps (fewer workers, fewer): only their empty receives
//!   are requests (`IDLE_POLLERS` in `sqs.rs`); the others join while there are messages.
//! - **Provider**: a token bucket of `quota`/s with a small burst, `429` + `Retry-After` past
//!   it, honours `Idempotency-Key`s, fixed latency; the quota can change over time (throttle).
//! - **Workers**: `concurrency` Lambda invocations polling in parallel; each record costs the
//!   provider latency plus `overhead` (the DynamoDB and SQS calls around it).
//! - **Crash**: the worker dies after the provider accepted and before the ledger write / ack,
//!   with probability `crash_p`; SQS redelivers after the visibility timeout.
//!
//! Records are processed atomically in virtual-time order, one event at a time, so a run is a
//! pure function of its inputs and seed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use crate::block_on;
use crate::sqs::{DlqState, IDLE_POLLERS, SimClock, SimLanes, SimQueue, Usage, lock};
use punctual_core::accounting::{DeliveryCounts, Ending, Outcome, Tally, Throughput};
use punctual_core::backoff::{Jitter, SplitMix64};
use punctual_core::clock::{Clock, until};
use punctual_core::contract::ReminderMessage;
use punctual_core::decision::Disposition;
use punctual_core::lanes::QueueLane;
use punctual_core::limiter::{LimiterSettings, SharedLimiter, SlotStore};
use punctual_core::ports::Pending;
use punctual_core::ports::{Ledger, Provider, ProviderError, ProviderRequest};
use punctual_core::provider::{ProviderOutcome, RetryAfter};
use punctual_core::reason::{ReasonCode, ReminderState};
use punctual_core::scheduler::{Scheduler, SchedulerSettings};
use punctual_core::sender::{ChannelRoute, Received, Sender, SenderSettings};
use punctual_core::slo::{SloPolicy, SloSummary, SloTally, Verdict, judge};
use punctual_core::testing::{Fault, FaultyLedger, MemoryDueStore, MemoryLedger, MemoryRelease, MemorySlotStore};
use std::cell::RefCell;
use std::rc::Rc;

/// A scenario of the runbook (`--scenario`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// 12,000 due at 09:00, quota 100/s.
    Normal,
    /// The quota halves for 5 minutes, unannounced.
    Throttle,
    /// 1 % of messages malformed.
    Poison,
    /// Workers killed after the provider call, before the ack, p = 2 %.
    Crash,
    /// 200,000 with a window too short: the projected-breach alarm must fire first.
    Overload,
    /// 60,000 due at once, 10 % with tight deadlines (2–5 min; `--tight-share`,
    /// `--tight-seconds`): lateness against EDF.
    Mixed,
    /// 12,000 fresh reminders while a DLQ of 2,000 throttled ones is redriven under a cap.
    Redrive,
    /// One tenant releases 50,000 and nine release 1,000 each, at once: each tenant's p99
    /// delay, with fair queues on or off (`--no-fair-queues`) and `--tenant-share`.
    Tenants,
    /// Two channels from one population: email at the quota and SMS (one reminder in 11) at a
    /// tenth of it, each with its own provider; SMS meets a 429 storm, then an outage
    /// ([`SMS_STORM`], [`SMS_OUTAGE`]). Each channel on its own limiter, or all on one
    /// (`shared_limiter`, `--baseline shared`).
    Channels,
}

/// `channels`: one reminder in this many goes by SMS.
pub const SMS_EVERY: usize = 11;
/// `channels`: seconds after T0 during which SMS's provider allows a fifth of its quota and
/// answers the rest with 429 and `Retry-After`.
pub const SMS_STORM: (u64, u64) = (20, 50);
/// `channels`: seconds after T0 during which SMS's provider answers every call 503 without
/// `Retry-After` (an outage).
pub const SMS_OUTAGE: (u64, u64) = (50, 80);

/// `channels`: the channel names, by index.
pub const CHANNELS: [&str; 2] = ["email", "sms"];

/// `channels`: the channel of the `i`-th reminder (an index into [`CHANNELS`]).
fn channel_of_reminder(i: usize) -> u8 {
    u8::from(i % SMS_EVERY == SMS_EVERY - 1)
}

/// `channels`: a renewal's channel, from its simulated id (`ren-sim-{i}`).
fn channel_of_renewal(r: &punctual_core::ids::RenewalId) -> &'static str {
    let i = r.as_str().strip_prefix("ren-sim-").and_then(|i| i.parse::<usize>().ok());
    CHANNELS[usize::from(i.map_or(0, channel_of_reminder))]
}

impl Scenario {
    /// Every scenario this build simulates.
    pub const ALL: [Scenario; 9] = [
        Self::Normal,
        Self::Throttle,
        Self::Poison,
        Self::Crash,
        Self::Overload,
        Self::Mixed,
        Self::Redrive,
        Self::Tenants,
        Self::Channels,
    ];

    /// Parses a `--scenario` value.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The scenario's name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Throttle => "throttle",
            Self::Poison => "poison",
            Self::Crash => "crash",
            Self::Overload => "overload",
            Self::Mixed => "mixed",
            Self::Redrive => "redrive",
            Self::Tenants => "tenants",
            Self::Channels => "channels",
        }
    }

    /// Default reminder count.
    pub const fn default_reminders(self) -> usize {
        match self {
            Self::Overload => 200_000,
            Self::Mixed => 60_000,
            Self::Tenants => TENANTS_NOISY + TENANTS_QUIET * TENANTS_QUIET_EACH,
            _ => 12_000,
        }
    }
}

/// Simulation parameters.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Scenario.
    pub scenario: Scenario,
    /// Reminders, all due at T0.
    pub reminders: usize,
    /// Provider quota, calls/s.
    pub quota: f64,
    /// Concurrent workers on the normal lane (its mapping's `MaximumConcurrency`).
    pub concurrency: usize,
    /// Concurrent workers on the urgent lane.
    pub urgent_concurrency: usize,
    /// Share of the reminders with tight deadlines (`mixed`: 0.10, others 0).
    pub tight_share: f64,
    /// A tight reminder's `deliver_by`, seconds after T0, uniform in this range (120–300).
    pub tight_seconds: (u64, u64),
    /// Seed.
    pub seed: u64,
    /// Provider latency.
    pub latency: Duration,
    /// Per-record cost besides the provider call.
    pub overhead: Duration,
    /// Fraction of receives that also leave a duplicate copy (SQS at-least-once).
    pub duplicate_fraction: f64,
    /// SQS fair queues (the tenant is each message's group; on by default, as the sender
    /// sets `MessageGroupId` on every send).
    pub fair_queues: bool,
    /// The limiter's per-tenant share of the quota (`TENANT_SHARE`), if any.
    pub tenant_share: Option<f64>,
    /// A real population (`simulate --population`, `forecast`) instead of the scenario's:
    /// each reminder due at its own `deliver_after`, released by scheduler ticks every minute.
    pub population: Option<Arc<SimPopulation>>,
    /// The deadline SLO the report judges (`SLO_TARGET`, `SLO_WITHIN_SECS`).
    pub slo: SloPolicy,
    /// A population only: the operator's pause holds the scheduler from the day's first tick
    /// until this long after its first `deliver_after`, then lifts (`--pause-minutes`): the
    /// first tick after it catches up the whole backlog at once.
    pub paused_for: Duration,
    /// `channels`: workers of SMS's own queue (`CHANNEL_SMS_QUEUE_URL`, its own mapping's
    /// concurrency); `None`: the scenario's default (2 for `channels`: a slow channel wants few
    /// instances contending for its tokens); 0: every channel on the two lanes.
    pub channel_concurrency: Option<usize>,
    /// `channels`, with SMS on its own queue: SMS's urgent reminders on an urgent lane of its
    /// own (`CHANNEL_SMS_URGENT_QUEUE_URL`), drained by as many workers again; `false`: its
    /// one queue carries both (its deadline-near work behind its normal work).
    pub channel_urgent_lane: bool,
    /// `channels`: every channel on one limiter at their summed quota (one schedule, one
    /// adaptive cut), as a deployment without channels would be, instead of one each.
    pub shared_limiter: bool,
}

/// A population to simulate: the active renewals of a population file, times shifted so the
/// first tick (10 minutes before the first `deliver_after`) is the simulator's T0.
#[derive(Debug, Clone, Default)]
pub struct SimPopulation {
    /// (tenant index, reminder id, deliver_after, deliver_by), shifted, in file order.
    pub rows: Vec<(u32, punctual_core::ids::ReminderId, DateTime<Utc>, DateTime<Utc>)>,
    /// Tenant names by index.
    pub tenants: Vec<String>,
    /// Simulated time − real time.
    pub shift: TimeDelta,
    /// Renewals of the file excluded by status (not simulated), by status.
    pub excluded: BTreeMap<String, u64>,
    /// `--workload run --redrive N`: reminders already dead letters at T0, as `rows` (shifted
    /// the same), their renewals released before T0; redriven while the rows run.
    pub letters: Vec<(u32, punctual_core::ids::ReminderId, DateTime<Utc>, DateTime<Utc>)>,
}

impl SimPopulation {
    /// The earliest `deliver_after` (simulated time): when the day's work can first start.
    pub fn first_due(&self) -> Option<DateTime<Utc>> {
        self.rows.iter().map(|r| r.2).min()
    }

    /// Freshly imported renewals (none released yet) as a population: the simulator's view of
    /// a generated workload (`punctual_core::workload`).
    pub fn from_renewals(renewals: &[punctual_core::renewal::Renewal]) -> Self {
        use punctual_core::reconcile::{DueRow, ReleaseState};
        let rows: Vec<DueRow> = renewals
            .iter()
            .map(|r| DueRow {
                tenant_id: r.tenant_id.to_string(),
                renewal_id: r.renewal_id.to_string(),
                reminder_id: r.reminder_id.clone(),
                status: r.status,
                release: ReleaseState::Scheduled,
                deliver_after: r.deliver_after,
                deliver_by: r.deliver_by,
                // Not kept: the population is one pipeline's (a channel's own is read from the
                // table by `forecast --channel`), and a string per row would cost the
                // 1,000,000-reminder morning ~50 MB.
                channel: None,
            })
            .collect();
        Self::new(&rows)
    }

    /// With `letters` (`punctual_core::workload::letter_renewals`) dead-lettered before T0.
    pub fn with_letters(mut self, letters: &[punctual_core::renewal::Renewal]) -> Self {
        for r in letters {
            let t = match self.tenants.iter().position(|t| t == r.tenant_id.as_str()) {
                Some(t) => t as u32,
                None => {
                    self.tenants.push(r.tenant_id.to_string());
                    (self.tenants.len() - 1) as u32
                }
            };
            self.letters.push((t, r.reminder_id.clone(), r.deliver_after + self.shift, r.deliver_by + self.shift));
        }
        self
    }

    /// The active renewals of `rows` (cancelled and paid ones are counted, not simulated).
    pub fn new(rows: &[punctual_core::reconcile::DueRow]) -> Self {
        let mut pop = Self::default();
        let mut index: HashMap<&str, u32> = HashMap::new();
        let first = rows
            .iter()
            .filter(|r| r.status == punctual_core::renewal::RenewalStatus::Active)
            .map(|r| r.deliver_after)
            .min();
        let lookahead = TimeDelta::from_std(SchedulerSettings::default().lookahead).unwrap_or(TimeDelta::zero());
        pop.shift = first.map_or(TimeDelta::zero(), |f| t0() - (f - lookahead));
        for r in rows {
            if r.status != punctual_core::renewal::RenewalStatus::Active {
                *pop.excluded.entry(r.status.as_str().to_owned()).or_default() += 1;
                continue;
            }
            let next = index.len() as u32;
            let t = *index.entry(r.tenant_id.as_str()).or_insert(next);
            if t as usize == pop.tenants.len() {
                pop.tenants.push(r.tenant_id.clone());
            }
            pop.rows.push((t, r.reminder_id.clone(), r.deliver_after + pop.shift, r.deliver_by + pop.shift));
        }
        pop
    }

    /// A simulated instant in real time.
    pub fn real(&self, simulated: DateTime<Utc>) -> DateTime<Utc> {
        simulated - self.shift
    }
}

/// `tenants`: the noisy tenant's reminders.
pub const TENANTS_NOISY: usize = 50_000;
/// `tenants`: the quiet tenants.
pub const TENANTS_QUIET: usize = 9;
/// `tenants`: each quiet tenant's reminders.
pub const TENANTS_QUIET_EACH: usize = 1_000;

impl SimConfig {
    /// The scenario's defaults.
    pub fn new(scenario: Scenario) -> Self {
        Self {
            scenario,
            reminders: scenario.default_reminders(),
            quota: 100.0,
            concurrency: 10,
            urgent_concurrency: 10,
            tight_share: if scenario == Scenario::Mixed { 0.10 } else { 0.0 },
            tight_seconds: (120, 300),
            seed: 1,
            latency: Duration::from_millis(80),
            overhead: Duration::from_millis(10),
            duplicate_fraction: 0.001,
            fair_queues: true,
            tenant_share: None,
            population: None,
            slo: SloPolicy::default(),
            paused_for: Duration::ZERO,
            shared_limiter: false,
            channel_concurrency: None,
            channel_urgent_lane: true,
        }
    }

    /// Workers of a channel's own queue (0: no channel has one).
    fn channel_workers(&self) -> usize {
        if self.scenario != Scenario::Channels || self.shared_limiter {
            return 0;
        }
        self.channel_concurrency.unwrap_or(2)
    }

    /// `channels`: each channel's provider model (email at the quota, SMS at a tenth of it with
    /// its storm and outage); empty for the other scenarios.
    fn channel_models(&self) -> Vec<ChannelModel> {
        if self.scenario != Scenario::Channels {
            return Vec::new();
        }
        vec![
            ChannelModel { quota: self.quota, storm: None, outage: None },
            ChannelModel { quota: self.quota / 10.0, storm: Some(SMS_STORM), outage: Some(SMS_OUTAGE) },
        ]
    }

    /// The instant after which the run stops, whatever is left.
    fn horizon(&self) -> DateTime<Utc> {
        match &self.population {
            Some(p) => p.rows.iter().map(|r| r.3).max().unwrap_or(t0()) + TimeDelta::hours(1),
            None => t0() + self.window() * 3,
        }
    }

    fn window(&self) -> TimeDelta {
        match self.scenario {
            // 30 minutes for a backlog that needs more than that at the quota.
            Scenario::Overload => TimeDelta::minutes(30),
            _ => TimeDelta::hours(4),
        }
    }

    /// Reminders already in the DLQ at T0 (`redrive`: one sixth of the fresh ones; a
    /// population: its letters).
    fn dead_at_start(&self) -> usize {
        match &self.population {
            Some(p) => p.letters.len(),
            None if self.scenario == Scenario::Redrive => self.reminders / 6,
            None => 0,
        }
    }

    fn quota_at(&self, since_start: Duration) -> f64 {
        match self.scenario {
            Scenario::Throttle if (60..360).contains(&since_start.as_secs()) => self.quota / 2.0,
            _ => self.quota,
        }
    }
}

/// The report (`--json` keys are a contract).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SimReport {
    /// Reminders.
    pub reminders: usize,
    /// What happened to them (docs/design.md#the-one-accounting).
    #[serde(flatten)]
    pub counts: DeliveryCounts,
    /// What the provider saw, and utilisation of its quota.
    #[serde(flatten)]
    pub throughput: Throughput,
    /// When the projected-breach alarm first fired (seconds after T0), if it did.
    pub alarm_first_fired_seconds: Option<f64>,
    /// When the first reminder became late (seconds after T0), if one did.
    pub first_late_seconds: Option<f64>,
    /// Late reminders under the earliest-deadline-first optimum at the same quota.
    pub edf_late: u64,
    /// A population: SLO breaches under the same optimum (each reminder's SLO instant as its
    /// deadline).
    pub edf_slo_breached: Option<u64>,
    /// Healthy (well-formed) reminders that ended in the DLQ.
    pub healthy_dead_lettered: u64,
    /// Virtual seconds simulated.
    pub simulated_seconds: f64,
    /// AWS cost per million reminders at the on-demand prices of [`Cost`] (arm64).
    pub cost_per_million_usd: Option<f64>,
    /// The cost model's inputs and result, per million reminders.
    pub cost: Cost,
    /// Shared-limiter store writes ÷ tokens granted (punctual only; 0 for the baseline).
    pub limiter_writes_per_call: f64,
    /// Sender-side SQS requests per reminder (receives, deletes, requeues, DLQ sends).
    pub sqs_requests_per_message: f64,
    /// The same requests per reminder by kind.
    pub sqs_requests_by_kind: SqsByKind,
    /// Sender-side DynamoDB writes per reminder (ledger and limiter).
    pub dynamodb_writes_per_message: f64,
    /// The sender side's requests per reminder, in the shape `punctual run` reports them.
    pub requests_per_message: punctual_core::cost::RequestsPerMessage,
    /// Reminders the scheduler released to the urgent lane.
    pub released_urgent: u64,
    /// Booked limiter slots that expired unused.
    pub limiter_stranded: u64,
    /// `redrive`: dead letters moved back to the send queue.
    pub redriven: u64,
    /// `--workload run --redrive`: the redrive's own requests per message it moved back (its
    /// DLQ requests and ledger reads; they are in `requests_per_message` too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redrive_requests_per_message: Option<punctual_core::cost::RequestsPerMessage>,
    /// `redrive`: T0 → the last one moved back.
    pub redrive_seconds: f64,
    /// `redrive`: fresh (never dead-lettered) reminders that were late.
    pub fresh_late: u64,
    /// Fair queues were on.
    pub fair_queues: bool,
    /// Per tenant (more than one only in `tenants`): the p99 of delivery − `deliver_after`,
    /// seconds, over its delivered reminders.
    pub tenant_p99_delay_seconds: BTreeMap<String, f64>,
    /// The deadline SLO over the simulated due population.
    pub slo: Option<SloSummary>,
    /// Late reminders (as in `late`) per tenant, tenants with none left out.
    pub late_by_tenant: BTreeMap<String, u64>,
    /// `channels`: each channel's own figures beside the totals (absent otherwise).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub channels: BTreeMap<String, ChannelReport>,
    /// When the first reminder's SLO was breached (its `deliver_after` + within, or its
    /// deadline if sooner), seconds after T0.
    pub first_slo_breach_seconds: Option<f64>,
    /// Time series for charts (not part of the JSON report).
    #[serde(skip)]
    pub timeline: Timeline,
}

/// On-demand prices (us-east-1, arm64, list prices as published in 2026; no free tier).
pub use punctual_core::cost::price;

/// What a million reminders cost at [`price`] (counts from the run, scaled).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Cost {
    /// SQS requests (receives, batch deletes, requeues, DLQ sends) per million reminders.
    pub sqs_requests: f64,
    /// DynamoDB writes (ledger claims and settlements, limiter bookings) per million.
    pub dynamodb_writes: f64,
    /// DynamoDB reads (renewal lookups, ledger reads) per million.
    pub dynamodb_reads: f64,
    /// Sender invocations per million.
    pub lambda_invocations: f64,
    /// Sender GB-seconds per million (waiting for a limiter slot is billed time too).
    pub lambda_gb_seconds: f64,
    /// The sum at on-demand prices, USD per million reminders.
    pub usd: f64,
}

impl Cost {
    fn per_million(usage: &Usage, limiter_writes: u64, reminders: usize) -> Self {
        let scale = 1e6 / reminders.max(1) as f64;
        let sqs = Usage::get(&usage.sqs_requests) as f64 * scale;
        let writes = (Usage::get(&usage.ddb_writes) + limiter_writes) as f64 * scale;
        let reads = Usage::get(&usage.ddb_reads) as f64 * scale;
        let invocations = Usage::get(&usage.invocations) as f64 * scale;
        let gb_s = Usage::get(&usage.busy_ms) as f64 / 1000.0 * price::SENDER_GB * scale;
        let usd = sqs * price::SQS_REQUEST
            + writes * price::DDB_WRITE
            + reads * price::DDB_READ
            + invocations * price::LAMBDA_REQUEST
            + gb_s * price::LAMBDA_GB_SECOND;
        Self {
            sqs_requests: sqs.round(),
            dynamodb_writes: writes.round(),
            dynamodb_reads: reads.round(),
            lambda_invocations: invocations.round(),
            lambda_gb_seconds: (gb_s * 10.0).round() / 10.0,
            usd: (usd * 100.0).round() / 100.0,
        }
    }
}

/// Sender-side SQS requests per reminder, by kind (they sum to `sqs_requests_per_message`,
/// up to rounding).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SqsByKind {
    /// `ReceiveMessage` calls that returned messages.
    pub receives: f64,
    /// `ReceiveMessage` long polls that returned nothing (idle pollers).
    pub empty_receives: f64,
    /// `DeleteMessageBatch`, one per invocation.
    pub deletes: f64,
    /// `SendMessage` of a deferred copy (requeue).
    pub requeues: f64,
    /// `SendMessage` of a quarantined message to the DLQ.
    pub dead_letters: f64,
    /// A redrive's receives, sends back and deletes on the DLQ.
    pub redrive: f64,
}

impl SqsByKind {
    fn per_message(usage: &Usage, reminders: usize) -> Self {
        let per = |c: &std::sync::atomic::AtomicU64| {
            (Usage::get(c) as f64 / reminders.max(1) as f64 * 1000.0).round() / 1000.0
        };
        let k = &usage.sqs;
        Self {
            receives: per(&k.receives),
            empty_receives: per(&k.empty_receives),
            deletes: per(&k.deletes),
            requeues: per(&k.requeues),
            dead_letters: per(&k.dead_letters),
            redrive: per(&k.redrive),
        }
    }
}

/// Per-second series of a run, seconds after T0.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// Messages on the queue (ready + in flight + delayed).
    pub backlog: Vec<(f64, f64)>,
    /// Provider acceptances per second.
    pub delivered_per_second: Vec<(f64, f64)>,
    /// Reminders late so far.
    pub late_cumulative: Vec<(f64, f64)>,
    /// The provider's quota over time.
    pub quota: Vec<(f64, f64)>,
}

/// A key of the run's per-reminder tables: a reminder id (`rem_` and 32 hex digits) as the 128
/// bits its digits spell — 24 bytes in the table instead of a string's 24-byte handle and the
/// 48-byte heap block behind it — and anything else as its text. An idempotency key
/// (`reminder:` and an id) is a variant of its own, so keys and bare ids stay as distinct as
/// the strings were.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Id(u64, u64),
    Idempotency(u64, u64),
    Text(Box<str>),
}

impl Key {
    fn of(s: &str) -> Self {
        if let Some((hi, lo)) = s.strip_prefix("reminder:").and_then(Self::digits) {
            return Self::Idempotency(hi, lo);
        }
        match Self::digits(s) {
            Some((hi, lo)) => Self::Id(hi, lo),
            None => Self::Text(s.into()),
        }
    }

    /// The string it was made of.
    fn text(&self) -> String {
        match self {
            Self::Id(hi, lo) => format!("rem_{hi:016x}{lo:016x}"),
            Self::Idempotency(hi, lo) => format!("reminder:rem_{hi:016x}{lo:016x}"),
            Self::Text(s) => s.to_string(),
        }
    }

    /// The two halves of a reminder id's digits (lower-case only, so one number is one id).
    fn digits(id: &str) -> Option<(u64, u64)> {
        // Two halves, not one u128: a u128's 16-byte alignment would widen the enum.
        punctual_core::ids::ReminderId::bits_of(id).map(|bits| ((bits >> 64) as u64, bits as u64))
    }
}

/// What the workers share besides the ports.
struct Shared {
    rng: SplitMix64,
    delivered_at: HashMap<Key, DateTime<Utc>>,
    backlog: Vec<(f64, f64)>,
}

impl AsMut<SplitMix64> for Shared {
    fn as_mut(&mut self) -> &mut SplitMix64 {
        &mut self.rng
    }
}

/// One channel's figures (`channels`): its reminders, its provider's answers, its drain against
/// its own quota.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ChannelReport {
    /// The channel's reminders.
    pub reminders: u64,
    /// Delivered.
    pub delivered: u64,
    /// Late (as in `late`).
    pub late: u64,
    /// Its provider's calls.
    pub provider_calls: u64,
    /// Its provider's 429s.
    pub provider_429: u64,
    /// Its reminders over its quota, seconds.
    pub floor_seconds: f64,
    /// From the start to its last delivery, seconds.
    pub drain_seconds: f64,
    /// `floor_seconds / drain_seconds` (1: the channel's quota used all along).
    pub utilisation: f64,
}

/// The providers' answers summed (`channels`: one provider per channel).
struct ProviderTotals {
    calls: u64,
    throttled: u64,
    duplicate_key_attempts: u64,
    duplicate_deliveries: u64,
    per_second: BTreeMap<i64, u64>,
}

impl ProviderTotals {
    fn of(states: &[std::sync::MutexGuard<'_, ProviderState>]) -> Self {
        let mut t = Self {
            calls: 0,
            throttled: 0,
            duplicate_key_attempts: 0,
            duplicate_deliveries: 0,
            per_second: BTreeMap::new(),
        };
        for s in states {
            t.calls += s.calls;
            t.throttled += s.throttled;
            t.duplicate_key_attempts += s.duplicate_key_attempts;
            t.duplicate_deliveries += s.duplicate_deliveries;
            for (k, n) in &s.per_second {
                *t.per_second.entry(*k).or_default() += n;
            }
        }
        t
    }
}

// ---- provider model --------------------------------------------------------------------------

#[derive(Debug, Default)]
struct ProviderState {
    tokens: f64,
    at: Option<DateTime<Utc>>,
    accepted: HashMap<Key, u32>,
    calls: u64,
    throttled: u64,
    duplicate_deliveries: u64,
    duplicate_key_attempts: u64,
    first_accept: Option<DateTime<Utc>>,
    last_accept: Option<DateTime<Utc>>,
    per_second: BTreeMap<i64, u64>,
}

#[derive(Debug, Clone)]
struct SimProvider {
    state: Arc<Mutex<ProviderState>>,
    clock: SimClock,
    config: SimConfig,
    t0: DateTime<Utc>,
    burst: f64,
    /// A channel's own provider (`channels`): its quota and trouble instead of the config's.
    model: Option<ChannelModel>,
    /// `channels` with `shared_limiter`: the one provider the sender knows, which passes each
    /// request to its channel's provider (as a deployment without channels whose one client
    /// reached both vendors would).
    by_channel: Arc<Vec<SimProvider>>,
}

/// One channel's provider: its quota, a storm (a fifth of it, the rest answered 429) and an
/// outage (503 without `Retry-After`), each as seconds after T0.
#[derive(Debug, Clone, Copy)]
struct ChannelModel {
    quota: f64,
    storm: Option<(u64, u64)>,
    outage: Option<(u64, u64)>,
}

impl ChannelModel {
    fn quota_at(&self, since_start: Duration) -> f64 {
        match self.storm {
            Some((from, to)) if (from..to).contains(&since_start.as_secs()) => self.quota / 5.0,
            _ => self.quota,
        }
    }

    fn down(&self, since_start: Duration) -> bool {
        self.outage.is_some_and(|(from, to)| (from..to).contains(&since_start.as_secs()))
    }
}

impl SimProvider {
    /// One call: `key` is `None` for clients that send no idempotency key.
    fn call(&self, key: Option<&str>, reminder: &str) -> ProviderOutcome {
        let now = self.clock.now();
        let since = until(self.t0, now);
        let quota = self.model.map_or_else(|| self.config.quota_at(since), |m| m.quota_at(since));
        let mut s = lock(&self.state);
        s.calls += 1;
        if self.model.is_some_and(|m| m.down(since)) {
            return ProviderOutcome::Transient { status: Some(503), retry_after: None };
        }
        let dt = s.at.map_or(0.0, |a| until(a, now).as_secs_f64());
        s.tokens = if s.at.is_none() { self.burst } else { (s.tokens + dt * quota).min(self.burst) };
        s.at = Some(now.max(s.at.unwrap_or(now)));
        if let Some(k) = key
            && s.accepted.contains_key(&Key::of(k))
        {
            s.duplicate_key_attempts += 1;
            return ProviderOutcome::Accepted { status: 200, receipt: None, budget: None };
        }
        if s.tokens < 1.0 {
            s.throttled += 1;
            let wait = ((1.0 - s.tokens) / quota).ceil().max(1.0) as u64;
            return ProviderOutcome::Transient { status: Some(429), retry_after: Some(RetryAfter::Seconds(wait)) };
        }
        s.tokens -= 1.0;
        // A keyless client cannot be deduplicated: a second acceptance of the same reminder is
        // a second delivery to the recipient.
        let seen = s.accepted.entry(Key::of(key.unwrap_or(reminder))).or_insert(0);
        *seen += 1;
        if *seen > 1 {
            s.duplicate_deliveries += 1;
        }
        s.first_accept.get_or_insert(now);
        s.last_accept = Some(now);
        *s.per_second.entry(until(self.t0, now).as_secs() as i64).or_default() += 1;
        ProviderOutcome::Accepted { status: 202, receipt: None, budget: None }
    }
}

impl Provider for SimProvider {
    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        let key = req.message.reminder_id.idempotency_key();
        let channel = CHANNELS.iter().position(|c| Some(*c) == req.channel);
        let to = channel.and_then(|k| self.by_channel.get(k)).unwrap_or(self);
        let outcome = to.call(Some(key.as_str()), req.message.reminder_id.as_str());
        self.clock.sleep(self.config.latency.min(req.timeout)).await;
        Ok(outcome)
    }
}

// ---- crash model -----------------------------------------------------------------------------

/// Renewal lookups, counted (every one is a DynamoDB read in production).
#[derive(Debug, Clone)]
struct CountedRenewals(Arc<Usage>, punctual_core::testing::ActiveOn);

impl punctual_core::ports::Renewals for CountedRenewals {
    async fn lookup(
        &self,
        tenant: &punctual_core::ids::TenantId,
        renewal: &punctual_core::ids::RenewalId,
    ) -> Result<punctual_core::ports::RenewalLookup, punctual_core::ports::RenewalsError> {
        Usage::add(&self.0.ddb_reads, 1);
        self.1.lookup(tenant, renewal).await
    }
}

// ---- the DLQ as the redrive sees it ------------------------------------------------------

/// The DLQ of the `redrive` scenario: what was dead-lettered before T0.
#[derive(Debug, Clone)]
struct SimDeadLetters {
    /// (id, body, held by a running redrive).
    items: Arc<Mutex<Vec<(u64, String, bool)>>>,
    queue: SimLanes,
    moved_at: Arc<Mutex<Option<DateTime<Utc>>>>,
    /// The letters' `reason` attribute.
    reason: ReasonCode,
}

/// The sender's quarantine as the letters of a population reach the DLQ before T0
/// (`punctual_core::workload::dead_letter`): uncounted, as `punctual run` seeds them on the
/// command's own clients.
impl punctual_core::ports::SendQueue for SimDeadLetters {
    async fn requeue(
        &self,
        _msg: &ReminderMessage,
        _delay: Duration,
        _lane: QueueLane,
    ) -> Result<(), punctual_core::ports::QueueError> {
        Err(punctual_core::ports::QueueError::Unknown("the letters are only ever quarantined".into()))
    }

    async fn dead_letter(
        &self,
        q: &punctual_core::ports::Quarantine<'_>,
    ) -> Result<(), punctual_core::ports::QueueError> {
        let mut items = lock(&self.items);
        let id = items.len() as u64 + 1_000_000_000;
        items.push((id, q.body.to_owned(), false));
        Ok(())
    }
}

/// A ledger whose reads are counted apart: the redrive's own (its `redrive_requests_per_message`).
#[derive(Clone)]
struct ReadsCounted<L>(L, Arc<std::sync::atomic::AtomicU64>);

impl<L: Ledger> Ledger for ReadsCounted<L> {
    async fn claim(
        &self,
        msg: &ReminderMessage,
        owner: &punctual_core::ports::OwnerToken,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<punctual_core::decision::ClaimView, punctual_core::ports::LedgerError> {
        self.0.claim(msg, owner, now, lease_until).await
    }

    async fn settle(
        &self,
        msg: &ReminderMessage,
        owner: Option<&punctual_core::ports::OwnerToken>,
        now: DateTime<Utc>,
        settlement: &punctual_core::ports::Settlement,
    ) -> Result<punctual_core::ports::SettleOutcome, punctual_core::ports::LedgerError> {
        self.0.settle(msg, owner, now, settlement).await
    }

    async fn mark_call(
        &self,
        msg: &ReminderMessage,
        owner: &punctual_core::ports::OwnerToken,
        now: DateTime<Utc>,
    ) -> Result<bool, punctual_core::ports::LedgerError> {
        self.0.mark_call(msg, owner, now).await
    }

    async fn get(
        &self,
        id: &punctual_core::ids::ReminderId,
    ) -> Result<Option<punctual_core::ports::LedgerRecord>, punctual_core::ports::LedgerError> {
        Usage::add(&self.1, 1);
        self.0.get(id).await
    }

    async fn append_outcome(
        &self,
        msg: &punctual_core::ReminderMessage,
        event: &punctual_core::outcome::OutcomeEvent,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), punctual_core::ports::LedgerError> {
        self.0.append_outcome(msg, event, now).await
    }
}

impl punctual_core::ports::DeadLetters for SimDeadLetters {
    async fn receive(
        &self,
        _hold: std::time::Duration,
    ) -> Result<Vec<punctual_core::ports::DeadLetter>, punctual_core::ports::DeadLettersError> {
        self.queue.normal.usage.sqs_request(&self.queue.normal.usage.sqs.redrive);
        let mut items = lock(&self.items);
        Ok(items
            .iter_mut()
            .filter(|(_, _, held)| !*held)
            .take(10)
            .map(|(id, body, held)| {
                *held = true;
                punctual_core::ports::DeadLetter {
                    handle: id.to_string(),
                    message_id: format!("dlq-{id}"),
                    body: body.clone(),
                    reason: Some(self.reason.as_str().to_owned()),
                    first_enqueued: Some(t0() - TimeDelta::hours(1)),
                }
            })
            .collect())
    }

    async fn send_back(&self, body: &str, lane: QueueLane) -> Result<(), punctual_core::ports::DeadLettersError> {
        self.queue.normal.usage.sqs_request(&self.queue.normal.usage.sqs.redrive);
        let now = self.queue.normal.clock.now();
        let m = ReminderMessage::decode(body).ok();
        let q = self.queue.queue_for(m.as_ref().and_then(|m| m.channel.as_deref()), lane);
        self.queue.send_to(q, body.to_owned(), Duration::ZERO, m.as_ref().map(|m| m.tenant_id.as_str()));
        *lock(&self.moved_at) = Some(now);
        Ok(())
    }

    async fn delete(&self, handle: &str) -> Result<(), punctual_core::ports::DeadLettersError> {
        self.queue.normal.usage.sqs_request(&self.queue.normal.usage.sqs.redrive);
        lock(&self.items).retain(|(id, _, _)| id.to_string() != handle);
        Ok(())
    }

    async fn release(&self, handles: &[String]) -> Result<(), punctual_core::ports::DeadLettersError> {
        for (id, _, held) in lock(&self.items).iter_mut() {
            if handles.contains(&id.to_string()) {
                *held = false;
            }
        }
        Ok(())
    }
}

// ---- the run ----------------------------------------------------------------------------------

/// Which worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worker {
    /// punctual's sender service.
    Punctual,
    /// The common naive worker: fixed concurrency, fixed 30 s nack, no limiter, no deadline
    /// checks, no idempotency.
    Naive,
}

/// The simulator's T0 (2026-12-01T09:00:00Z): every report's seconds count from it.
pub fn t0() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(1_796_115_600, 0).unwrap_or(DateTime::<Utc>::UNIX_EPOCH) // 2026-12-01T09:00:00Z
}

/// One reminder of a scenario: due at T0, 1 % malformed for `poison`, a `tight_share` with
/// tight deadlines (`mixed`: 10 % within 2–5 minutes). `None` for a malformed body.
fn reminder(config: &SimConfig, rng: &mut SplitMix64, i: usize) -> Result<ReminderMessage, String> {
    if let Some(pop) = &config.population {
        let (t, id, after, by) = pop.rows.get(i).unwrap_or_else(|| &pop.letters[i - pop.rows.len()]);
        let m = punctual_core::testing::message(&format!("sim-{i}"), *after, *by);
        let tenant_id = punctual_core::TenantId::parse(pop.tenants[*t as usize].as_str()).map_err(|e| e.to_string())?;
        return Ok(ReminderMessage { tenant_id, reminder_id: id.clone(), ..m });
    }
    if config.scenario == Scenario::Poison && rng.next_unit() < 0.01 {
        return Err(format!("{{\"v\":1,\"reminder_id\":\"bad-{i}\"}}"));
    }
    let by = if config.tight_share > 0.0 && rng.next_unit() < config.tight_share {
        let (lo, hi) = config.tight_seconds;
        let span = hi.saturating_sub(lo) as f64 * 1000.0;
        t0() + TimeDelta::milliseconds((lo * 1000) as i64 + (rng.next_unit() * span) as i64)
    } else {
        t0() + config.window()
    };
    let m = punctual_core::testing::message(&format!("sim-{i}"), t0(), by);
    if config.scenario == Scenario::Tenants {
        let tenant = tenant_name(tenant_of(i));
        let tenant_id = punctual_core::TenantId::parse(&tenant).map_err(|e| e.to_string())?;
        let reminder_id =
            punctual_core::ids::ReminderId::derive(&tenant_id, &m.renewal_id, &m.kind, m.deliver_after.date_naive());
        return Ok(ReminderMessage { tenant_id, reminder_id, ..m });
    }
    Ok(m)
}

/// `tenants`: reminder `i`'s tenant (0 the noisy one), interleaved as an import of a mixed
/// file would be: of every 59 reminders, 50 are the noisy tenant's and one each the nine quiet
/// tenants' (so the default 59,000 are 50,000 and 9 × 1,000, and a smaller run keeps the mix).
fn tenant_of(i: usize) -> u32 {
    const ROUND: usize = TENANTS_NOISY / TENANTS_QUIET_EACH + TENANTS_QUIET;
    let k = i % ROUND;
    let noisy = TENANTS_NOISY / TENANTS_QUIET_EACH;
    if k < noisy { 0 } else { (1 + k - noisy) as u32 }
}

fn tenant_name(t: u32) -> String {
    if t == 0 { "noisy".to_owned() } else { format!("quiet-{t}") }
}

/// What the accounting needs of a healthy reminder: a tenth of the message in memory, and
/// nothing on the heap (the id's 128 bits instead of its string).
#[derive(Debug, Clone)]
struct Tracked {
    id: Key,
    deliver_after: DateTime<Utc>,
    deliver_by: DateTime<Utc>,
    /// The tenant's index (`tenants`, a population; 0 otherwise).
    tenant: u32,
    /// The channel's index (`channels`: into [`CHANNELS`]; 0 otherwise).
    channel: u8,
}

/// Late reminders under earliest-deadline-first at the quota (the optimum for one server).
pub fn edf_late(deadlines: &mut [DateTime<Utc>], start: DateTime<Utc>, quota: f64) -> u64 {
    deadlines.sort();
    deadlines
        .iter()
        .enumerate()
        .filter(|(k, by)| start + TimeDelta::milliseconds(((*k as f64 + 1.0) / quota * 1000.0) as i64) >= **by)
        .count() as u64
}

/// Late reminders under earliest-deadline-first at the quota when each reminder becomes
/// available at its own `deliver_after` (a population's day): one server, one job per
/// 1/quota, always the available job with the earliest deadline — the optimum for unit jobs
/// with release times. Jobs are `(deliver_after, deliver_by)`.
pub fn edf_late_released(jobs: &mut [(DateTime<Utc>, DateTime<Utc>)], quota: f64) -> u64 {
    let start = jobs.iter().map(|j| j.0).min().unwrap_or_else(t0);
    punctual_core::scheduler::edf_misses(jobs, start, quota)
}

/// Runs one simulation (on its own thread: it drives its own virtual-time runtime, and the
/// caller may already be inside one).
pub fn run(config: &SimConfig, worker: Worker) -> SimReport {
    std::thread::scope(|sc| sc.spawn(|| run_here(config, worker)).join().unwrap_or_default())
}

fn run_here(config: &SimConfig, worker: Worker) -> SimReport {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build();
    let Ok(runtime) = runtime else { return SimReport::default() };
    // Inside the runtime, `Instant::now()` is the paused virtual clock: time starts exactly at T0.
    let _entered = runtime.enter();
    let mut rng = SplitMix64::new(config.seed);
    let clock = SimClock::new(t0());
    let usage = Arc::new(Usage::default());
    let fair = config.fair_queues;
    let max_receives = 5;
    let dead = Arc::new(Mutex::new(DlqState::default()));
    let queue = SimLanes {
        normal: SimQueue::new(&clock, &usage, fair, &dead, max_receives),
        urgent: SimQueue::new(&clock, &usage, fair, &dead, max_receives),
        channel: (config.channel_workers() > 0 && worker == Worker::Punctual)
            .then(|| (CHANNELS[1], SimQueue::new(&clock, &usage, fair, &dead, max_receives))),
        channel_urgent: (config.channel_workers() > 0 && worker == Worker::Punctual && config.channel_urgent_lane)
            .then(|| SimQueue::new(&clock, &usage, fair, &dead, max_receives)),
    };
    let provider = SimProvider {
        state: Arc::default(),
        clock: clock.clone(),
        config: config.clone(),
        t0: t0(),
        burst: (config.quota / 10.0).max(1.0),
        model: None,
        by_channel: Arc::default(),
    };
    // `channels`: each channel's own provider.
    let channel_providers: Vec<SimProvider> = config
        .channel_models()
        .into_iter()
        .map(|m| SimProvider {
            state: Arc::default(),
            burst: (m.quota / 10.0).max(1.0),
            model: Some(m),
            ..provider.clone()
        })
        .collect();
    // The population, streamed: the scheduler's index gets each fresh healthy reminder, the
    // DLQ (`redrive`) the dead ones, the naive worker's one queue everything; the run keeps
    // only what the accounting needs (`Tracked`, or a malformed body).
    let fresh = config.population.as_ref().map_or(config.reminders, |p| p.rows.len());
    // Rows leave the index as the tick releases them (the runs read no row's state after).
    let due = MemoryDueStore::forgetting(1);
    // A population is released minute by minute (below); a scenario's is all due at T0.
    let mut upcoming: Vec<Pending> = Vec::new();
    let letters_at_t0 = config.population.as_ref().is_some_and(|p| !p.letters.is_empty());
    let dlq = SimDeadLetters {
        items: Arc::default(),
        queue: queue.clone(),
        moved_at: Arc::default(),
        reason: if letters_at_t0 { punctual_core::workload::LETTER_REASON } else { ReasonCode::NoSafeRetryWindow },
    };
    // A population's letters: dead-lettered through the ledger below, as the sender leaves them.
    let mut letters: Vec<ReminderMessage> = Vec::new();
    let mut msgs: Vec<(String, Option<Tracked>)> = Vec::with_capacity(fresh + config.dead_at_start());
    for i in 0..fresh + config.dead_at_start() {
        let m = reminder(config, &mut rng, i);
        let body = || m.as_ref().map_or_else(Clone::clone, ReminderMessage::encode);
        if i >= fresh {
            if let (true, Ok(m)) = (letters_at_t0, &m) {
                if worker == Worker::Naive {
                    queue.normal.push(body(), t0(), Some(m.tenant_id.as_str()));
                } else {
                    letters.push(m.clone());
                }
            } else if worker == Worker::Naive {
                // The naive operator moves the whole DLQ back at once (SQS's own redrive).
                queue.normal.push(body(), t0(), m.as_ref().ok().map(|m| m.tenant_id.as_str()));
            } else {
                lock(&dlq.items).push((i as u64, body(), false));
            }
        } else if let Ok(m) = &m {
            let mut p = Pending::from(m);
            // `channels`: the renewal's channel, as the due index gives it to the scheduler.
            if config.scenario == Scenario::Channels {
                p.channel = Some(CHANNELS[usize::from(channel_of_reminder(i))].to_owned());
            }
            if config.population.is_some() {
                upcoming.push(p)
            } else {
                due.insert(p)
            }
            if worker == Worker::Naive {
                queue.normal.push(body(), t0(), Some(m.tenant_id.as_str()));
            }
        } else {
            // A malformed body has no renewal to schedule: it reaches the queue as it would
            // from a broken producer.
            queue.normal.push(body(), t0(), m.as_ref().ok().map(|m| m.tenant_id.as_str()));
        }
        msgs.push(match m {
            Ok(m) => (
                String::new(),
                Some(Tracked {
                    channel: if channel_providers.is_empty() { 0 } else { channel_of_reminder(i) },
                    id: Key::of(m.reminder_id.as_str()),
                    deliver_after: m.deliver_after,
                    deliver_by: m.deliver_by,
                    tenant: match &config.population {
                        Some(p) => p.rows.get(i).unwrap_or_else(|| &p.letters[i - p.rows.len()]).0,
                        None if config.scenario == Scenario::Tenants => tenant_of(i),
                        None => 0,
                    },
                }),
            ),
            Err(body) => (body, None),
        });
    }
    let mut deadlines: Vec<DateTime<Utc>> = msgs.iter().filter_map(|(_, m)| m.as_ref().map(|m| m.deliver_by)).collect();
    let healthy = deadlines.len();
    // A population's reminders become available at their own deliver_after, not all at T0.
    // Under a pause, nothing is available before it lifts: the optimum's release times are
    // `max(deliver_after, lifted)`, so both figures compare against what any scheduler could
    // still have done after the pause.
    let lifted = config
        .population
        .as_ref()
        .filter(|_| !config.paused_for.is_zero())
        .and_then(|p| p.first_due())
        .map(|first| first + TimeDelta::from_std(config.paused_for).unwrap_or(TimeDelta::zero()));
    let released = |after: DateTime<Utc>| lifted.map_or(after, |l| after.max(l));
    let (edf, edf_slo) = if config.population.is_some() {
        let mut jobs: Vec<(DateTime<Utc>, DateTime<Utc>)> =
            msgs.iter().filter_map(|(_, m)| m.as_ref().map(|m| (released(m.deliver_after), m.deliver_by))).collect();
        let late = edf_late_released(&mut jobs, config.quota);
        let mut slo_jobs: Vec<(DateTime<Utc>, DateTime<Utc>)> = msgs
            .iter()
            .filter_map(|(_, m)| {
                m.as_ref().map(|m| (released(m.deliver_after), config.slo.met_by(m.deliver_after, m.deliver_by)))
            })
            .collect();
        (late, Some(edf_late_released(&mut slo_jobs, config.quota)))
    } else {
        (edf_late(&mut deadlines, t0(), config.quota), None)
    };
    drop(deadlines);

    // The scheduler: the core's tick releases the fresh reminders (punctual: through the lane
    // planner onto both lanes; the naive worker's are on its queue already), and computes the
    // projected breach.
    let settings = SchedulerSettings {
        sustainable_rate: config.quota * punctual_core::scheduler::SUSTAINABLE_SHARE,
        // Pages as production does, large enough that paging stays cheap; a single page of the
        // whole population held a clone of every pending row (+400 MB at 1,000,000).
        page_size: 200_000,
        urgent_below: SenderSettings::default().deadline_near,
        ..SchedulerSettings::default()
    };
    // Latest first: the minute-by-minute release pops from the end.
    upcoming.sort_by_key(|p| std::cmp::Reverse(p.deliver_after));
    // A population's ticks run in virtual time beside the workers (below).
    let tick = match worker {
        _ if config.population.is_some() => None,
        Worker::Punctual => Some(block_on(
            Scheduler::new(due.clone(), queue.clone(), clock.clone(), settings).tick(t0() + TimeDelta::hours(1)),
        )),
        Worker::Naive => Some(block_on(
            Scheduler::new(due.clone(), MemoryRelease::default(), clock.clone(), settings)
                .tick(t0() + TimeDelta::hours(1)),
        )),
    };
    let mut alarm = tick.as_ref().and_then(|t| t.as_ref().ok()).is_some_and(|r| r.projected_breach).then_some(0.0);
    let mut released_urgent = tick.as_ref().and_then(|t| t.as_ref().ok()).map_or(0, |r| r.released_urgent);

    // The crash model: the core's one fault injector over the in-memory ledger, whose request
    // counts are the cost model's DynamoDB writes and reads (a crashed write never reached it).
    let memory = MemoryLedger::new();
    let ledger = FaultyLedger::with_chance(
        memory.clone(),
        Fault::LoseDeliveredWrite,
        if config.scenario == Scenario::Crash { 0.02 } else { 0.0 },
        config.seed ^ 0xc4a5,
    );
    // One sender (one Lambda instance) per worker, each with its own handle on ONE shared
    // limiter schedule, as in production.
    // A population's letters: dead-lettered before T0 as the sender leaves them (through the
    // same ports); the requests that took are not the run's, as `punctual run`'s seeding is not.
    for (k, m) in letters.iter().enumerate() {
        let seeded = block_on(punctual_core::workload::dead_letter(&ledger, &dlq, m, &format!("letter-{k:06}"), t0()));
        debug_assert!(seeded.is_ok(), "{seeded:?}");
    }
    let (seed_reads, seed_writes) = (memory.reads(), memory.writes());
    let redrive_reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let slots = MemorySlotStore::default();
    // Workers 0..concurrency poll the normal lane, the rest the urgent lane (naive: one queue).
    let urgent_workers = if worker == Worker::Punctual { config.urgent_concurrency } else { 0 };
    // `channels`: then the workers of SMS's own queue.
    // (and as many again on its own urgent lane when it has one).
    let per_channel_queue = if queue.channel.is_some() { config.channel_workers() } else { 0 };
    let channel_workers = per_channel_queue * (1 + usize::from(queue.channel_urgent.is_some()));
    let senders: Vec<_> = (0..(config.concurrency + urgent_workers + channel_workers) as u64)
        .map(|w| {
            // `channels`: a limiter per channel on its own schedule, or (`shared_limiter`) none
            // declared: the sender's one limiter at the summed quota and one provider that
            // passes each request to its channel's, as a deployment without channels would
            // run both vendors.
            let shared = config.shared_limiter && !channel_providers.is_empty();
            let routes = channel_providers
                .iter()
                .zip(CHANNELS)
                .enumerate()
                .filter(|_| !shared)
                .filter_map(|(k, (p, name))| {
                    let m = p.model?;
                    Some(ChannelRoute {
                        name: name.to_owned(),
                        limiter: SharedLimiter::new(
                            slots.clone(),
                            clock.clone(),
                            LimiterSettings {
                                name: format!("provider.{name}"),
                                tenant_share: config.tenant_share,
                                ..LimiterSettings::for_channel(m.quota)
                            },
                            config.seed ^ w ^ ((k as u64 + 1) << 48),
                        ),
                        provider: p.clone(),
                        pause: None,
                    })
                })
                .collect();
            let quota = if shared {
                channel_providers.iter().filter_map(|p| p.model.map(|m| m.quota)).sum()
            } else {
                config.quota
            };
            let provider = if shared {
                SimProvider { by_channel: Arc::new(channel_providers.clone()), ..provider.clone() }
            } else {
                provider.clone()
            };
            let channel_of: fn(&punctual_core::ids::RenewalId) -> &'static str =
                if channel_providers.is_empty() { |_| "email" } else { channel_of_renewal };
            Sender::new(
                ledger.clone(),
                CountedRenewals(Arc::clone(&usage), punctual_core::testing::ActiveOn(channel_of)),
                SharedLimiter::new(
                    slots.clone(),
                    clock.clone(),
                    LimiterSettings { tenant_share: config.tenant_share, ..LimiterSettings::new(quota) },
                    config.seed ^ w,
                ),
                provider,
                queue.clone(),
                clock.clone(),
                SenderSettings::default(),
                config.seed ^ (w << 32),
            )
            .with_channels(routes)
        })
        .collect();
    let vt = Duration::from_secs(30);
    let horizon = config.horizon();
    let shared = Rc::new(RefCell::new(Shared { rng, delivered_at: HashMap::new(), backlog: Vec::new() }));
    let senders = Rc::new(senders);
    let local = tokio::task::LocalSet::new();
    // Workers wait (instead of retiring on an empty queue) while a redrive is still feeding it.
    let feeding = Rc::new(std::cell::Cell::new(!lock(&dlq.items).is_empty()));
    // ... and while the scheduler still has a population to release.
    let scheduling = Rc::new(std::cell::Cell::new(!upcoming.is_empty()));
    let (summary, ticked) = runtime.block_on(local.run_until(async {
        // A population: the core's scheduler ticks every minute, as EventBridge runs it; before
        // each tick the rows due within its lookahead join the in-memory index (released ones
        // leave it), so each tick pages only what is pending, not the whole day.
        let ticks = {
            let (due, queue, clock, scheduling) = (due.clone(), queue.clone(), clock.clone(), Rc::clone(&scheduling));
            let lookahead = TimeDelta::from_std(settings.lookahead).unwrap_or(TimeDelta::zero());
            // As deployed: a row found past its deadline is expired through the ledger (one
            // verdict, its requests counted like the senders').
            let scheduler = Scheduler::new(due.clone(), queue, clock.clone(), settings).with_ledger(ledger.clone());
            tokio::task::spawn_local(async move {
                let (mut alarm, mut urgent) = (None, 0u64);
                while scheduling.get() {
                    let now = clock.now();
                    if lifted.is_some_and(|l| now < l) {
                        // Paused: the tick releases nothing (the rows wait in the table).
                        clock.sleep(Duration::from_secs(60)).await;
                        continue;
                    }
                    while upcoming.last().is_some_and(|p| p.deliver_after <= now + lookahead + TimeDelta::minutes(1)) {
                        if let Some(p) = upcoming.pop() {
                            due.insert(p);
                        }
                    }
                    if let Ok(r) = scheduler.tick(now + TimeDelta::seconds(50)).await {
                        urgent += r.released_urgent;
                        if r.projected_breach && alarm.is_none() {
                            alarm = Some(until(t0(), now).as_secs_f64());
                        }
                    }
                    due.prune();
                    if upcoming.is_empty() && due.pending() == 0 {
                        scheduling.set(false);
                        break;
                    }
                    clock.sleep(Duration::from_secs(60)).await;
                }
                (alarm, urgent)
            })
        };
        let redrive = {
            let (ledger, dlq, clock, feeding) = (ledger.clone(), dlq.clone(), clock.clone(), Rc::clone(&feeding));
            // Half the redrive share: fresh traffic keeps the rest of the quota.
            let cap = (config.quota * LimiterSettings::new(config.quota).redrive_share / 2.0).max(1.0);
            let population = config.population.clone();
            let (quota, reads) = (config.quota, Arc::clone(&redrive_reads));
            tokio::task::spawn_local(async move {
                if !feeding.get() {
                    return None;
                }
                if let Some(pop) = population.filter(|p| !p.letters.is_empty()) {
                    // `punctual run --redrive`'s redrive, the same request validated against the
                    // redrive function's default caps (REDRIVE_MAX_MESSAGES 1,000,
                    // REDRIVE_MAX_PER_SECOND 20 within the redrive share), started when the
                    // fresh reminders can first go, as `run` starts it with its pipeline.
                    use punctual_core::redrive::RedriveCaps;
                    let caps = RedriveCaps::within_share(
                        RedriveCaps::DEFAULT_MAX_MESSAGES,
                        RedriveCaps::DEFAULT_MAX_PER_SECOND,
                        &LimiterSettings::new(quota),
                    );
                    let req = punctual_core::workload::redrive_request(pop.letters.len(), quota).validate(caps).ok()?;
                    if let Some(first) = pop.first_due().filter(|f| *f > clock.now()) {
                        clock.sleep(until(clock.now(), first)).await;
                    }
                    let deadline = clock.now() + TimeDelta::minutes(15);
                    let redriver = punctual_core::redrive::Redriver::new(
                        ReadsCounted(ledger, reads),
                        dlq,
                        punctual_core::testing::MemoryControl::default(),
                        clock,
                    );
                    let summary = redriver.run(&req, deadline).await.ok();
                    feeding.set(false);
                    return summary;
                }
                let redriver = punctual_core::redrive::Redriver::new(
                    ledger,
                    dlq,
                    punctual_core::testing::MemoryControl::default(),
                    clock,
                );
                let req = punctual_core::redrive::RedriveRequest {
                    reason: "provider outage over".into(),
                    owner: "sim".into(),
                    selection: punctual_core::redrive::Selection::default(),
                    max_messages: u32::MAX,
                    max_per_second: cap,
                    canary: 10,
                    // The canary joins the back of a 12,000-message backlog in random order:
                    // the default 60 s is too short for it to be received; the run would abort.
                    canary_timeout: Some(Duration::from_secs(300)),
                    abort_if: punctual_core::redrive::AbortIf::default(),
                    dry_run: false,
                };
                let summary = redriver.run(&req, t0() + TimeDelta::hours(2)).await.ok();
                feeding.set(false);
                summary
            })
        };
        let mut workers = Vec::new();
        for w in 0..config.concurrency + urgent_workers + channel_workers {
            let lane = if w < config.concurrency { QueueLane::Normal } else { QueueLane::Urgent };
            let on_channel = w >= config.concurrency + urgent_workers;
            // Each queue's first IDLE_POLLERS workers are the pollers its mapping keeps on an
            // idle queue; the rest poll only while it has messages.
            let on_channel_urgent = w >= config.concurrency + urgent_workers + per_channel_queue;
            let first = if on_channel_urgent {
                config.concurrency + urgent_workers + per_channel_queue
            } else if on_channel {
                config.concurrency + urgent_workers
            } else if w < config.concurrency {
                0
            } else {
                config.concurrency
            };
            let idle_poller = w - first < IDLE_POLLERS;
            let (lanes, provider, clock, shared, senders, config) = (
                queue.clone(),
                provider.clone(),
                clock.clone(),
                Rc::clone(&shared),
                Rc::clone(&senders),
                config.clone(),
            );
            let feeding = Rc::clone(&feeding);
            let scheduling = Rc::clone(&scheduling);
            workers.push(tokio::task::spawn_local(async move {
                let queue = match (&lanes.channel, &lanes.channel_urgent, on_channel, on_channel_urgent) {
                    (_, Some(u), _, true) => u.clone(),
                    (Some((_, q)), _, true, _) => q.clone(),
                    _ => lanes.of(lane).clone(),
                };
                loop {
                    if clock.now() > horizon {
                        break;
                    }
                    let batch = queue.long_poll(vt, config.duplicate_fraction, &shared, idle_poller).await;
                    if batch.is_empty() {
                        if lanes.depth() == 0 && !feeding.get() && !scheduling.get() {
                            break; // this worker retires
                        }
                        continue;
                    }
                    // The records of one batch run concurrently, as the sender handler runs
                    // them (RECORD_CONCURRENCY); the next receive waits for the whole batch.
                    let records = batch.into_iter().map(|(id, body, _)| {
                        let (queue, provider, clock, shared, senders, config) =
                            (&queue, &provider, &clock, &shared, &senders, &config);
                        // The redrive policy (the crash backstop, the naive worker's only DLQ
                        // path) is the queue model's: a message past maxReceiveCount never
                        // comes back from a receive.
                        async move {
                            match worker {
                                Worker::Punctual => {
                                    let deadline = clock.now() + TimeDelta::seconds(60);
                                    let received = Received { message_id: &id.to_string(), body: &body };
                                    let result = senders[w].process(received, deadline).await;
                                    if let Ok(p) = &result {
                                        if let (Disposition::Delivered { .. }, Some(rid)) =
                                            (&p.disposition, &p.reminder_id)
                                        {
                                            shared
                                                .borrow_mut()
                                                .delivered_at
                                                .entry(Key::of(rid.as_str()))
                                                .or_insert(clock.now());
                                        }
                                        queue.delete(id);
                                    }
                                }
                                Worker::Naive => {
                                    let decoded = ReminderMessage::decode(&body).ok();
                                    let reminder = decoded
                                        .as_ref()
                                        .map_or_else(|| format!("poison-{id}"), |m| m.reminder_id.to_string());
                                    let outcome = if decoded.is_some() {
                                        provider.call(None, &reminder)
                                    } else {
                                        ProviderOutcome::Permanent { status: 400 }
                                    };
                                    clock.sleep(config.latency).await;
                                    let crashed = config.scenario == Scenario::Crash
                                        && shared.borrow_mut().rng.next_unit() < 0.02;
                                    if matches!(outcome, ProviderOutcome::Accepted { .. }) {
                                        shared
                                            .borrow_mut()
                                            .delivered_at
                                            .entry(Key::of(&reminder))
                                            .or_insert(clock.now());
                                        if !crashed {
                                            queue.delete(id);
                                        }
                                    }
                                    // Anything else: a fixed 30 s nack (the visibility timeout).
                                }
                            }
                            clock.sleep(config.overhead).await;
                        }
                    });
                    let started = clock.now();
                    futures_util::future::join_all(records).await;
                    // One invocation per batch; the event source mapping deletes the batch in
                    // one request.
                    Usage::add(&queue.usage.invocations, 1);
                    Usage::add(&queue.usage.busy_ms, until(started, clock.now()).as_millis() as u64);
                    queue.usage.sqs_request(&queue.usage.sqs.deletes);
                }
            }));
        }
        let sampler = {
            let (queue, clock, shared, feeding, scheduling) =
                (queue.clone(), clock.clone(), Rc::clone(&shared), Rc::clone(&feeding), Rc::clone(&scheduling));
            tokio::task::spawn_local(async move {
                while (queue.depth() > 0 || feeding.get() || scheduling.get()) && clock.now() <= horizon {
                    let t = until(t0(), clock.now()).as_secs_f64();
                    shared.borrow_mut().backlog.push((t, queue.depth() as f64));
                    clock.sleep(Duration::from_secs(1)).await;
                }
            })
        };
        for w in workers {
            let _ = w.await;
        }
        sampler.abort();
        (redrive.await.ok().flatten(), ticks.await.unwrap_or((None, 0)))
    }));
    if config.population.is_some() {
        (alarm, released_urgent) = ticked;
    }
    let Shared { delivered_at, backlog, .. } = Rc::try_unwrap(shared).map(RefCell::into_inner).unwrap_or_else(|rc| {
        let sh = rc.borrow();
        Shared { rng: SplitMix64::new(0), delivered_at: sh.delivered_at.clone(), backlog: sh.backlog.clone() }
    });

    // What the run asked of the ledger (before the accounting reads it).
    Usage::add(&usage.ddb_writes, memory.writes() - seed_writes);
    Usage::add(&usage.ddb_reads, memory.reads() - seed_reads);
    // Accounting: the one accounting (docs/design.md#the-one-accounting) over every reminder's ending.
    // Every provider's answers: the scenario's one, or each channel's.
    let states: Vec<_> = std::iter::once(&provider).chain(&channel_providers).map(|p| lock(&p.state)).collect();
    let p = ProviderTotals::of(&states);
    // `channels`: per channel (reminders, delivered, late, last delivery).
    let mut per_channel: Vec<(u64, u64, u64, Option<DateTime<Utc>>)> = vec![(0, 0, 0, None); channel_providers.len()];
    let q = lock(&queue.normal.state);
    let dead = lock(queue.dlq());
    let mut report = SimReport {
        reminders: msgs.len(),
        edf_late: edf,
        edf_slo_breached: edf_slo,
        alarm_first_fired_seconds: alarm,
        ..SimReport::default()
    };
    // Copies are followed by reminder id: the scheduler's release and every requeue re-encode
    // the body (first_enqueued, attempt), so a body is not a reminder's identity. A malformed
    // body is its own key.
    let key =
        |body: &str| ReminderMessage::decode(body).map_or_else(|_| body.to_owned(), |m| m.reminder_id.to_string());
    let mut healthy_dead = HashSet::new();
    let mut dlq_reason: HashMap<String, String> = HashMap::new();
    for letter in &dead.letters {
        dlq_reason.insert(key(&letter.body), letter.reason.as_str().to_owned());
        if letter.healthy && letter.reason != ReasonCode::BusinessDeadlineExpired {
            healthy_dead.insert(key(&letter.body));
        }
    }
    report.healthy_dead_lettered = healthy_dead.len() as u64;
    // `redrive`: what the run left in the DLQ is still there (dead-lettered before T0), not lost.
    let left_in_dlq = lock(&dlq.items).clone();
    let mut dead_before_t0: HashSet<String> = HashSet::new();
    for (_, body, _) in &left_in_dlq {
        dlq_reason.entry(key(body)).or_insert_with(|| dlq.reason.as_str().to_owned());
        dead_before_t0.insert(key(body));
    }
    let urgent_q = lock(&queue.urgent.state);
    let on_queue: HashSet<String> = q.msgs.values().chain(urgent_q.msgs.values()).map(|m| key(&m.body)).collect();
    let as_of = clock.now();
    let mut tally = Tally::new(as_of);
    let mut late_times: Vec<f64> = Vec::new();
    let mut last: Option<DateTime<Utc>> = None;
    let mut delays: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    let name_of = |t: u32| match &config.population {
        Some(p) => p.tenants.get(t as usize).cloned().unwrap_or_default(),
        None if config.scenario == Scenario::Tenants => tenant_name(t),
        None => "acme".to_owned(),
    };
    let names: Vec<String> =
        (0..=msgs.iter().filter_map(|(_, m)| m.as_ref().map(|m| m.tenant)).max().unwrap_or(0)).map(name_of).collect();
    let mut slo = SloTally::new();
    let mut late_by_tenant: BTreeMap<String, u64> = BTreeMap::new();
    let mut first_breach: Option<DateTime<Utc>> = None;
    for (body, m) in &msgs {
        let Some(m) = m else {
            // Malformed: in the DLQ by reason, no reminder to follow.
            if let Some(reason) = dlq_reason.get(body.as_str()) {
                tally.dead_letter(reason);
            }
            continue;
        };
        let delivered = delivered_at.get(&m.id).copied();
        let (outcome, ended_at) = match delivered_at.get(&m.id) {
            Some(at) => {
                last = Some(last.map_or(*at, |l| l.max(*at)));
                delays.entry(m.tenant).or_default().push(until(m.deliver_after, *at).as_secs_f64());
                (Outcome::Delivered { at: *at }, Some(*at))
            }
            // Only a reminder not delivered needs its record (these reads are after the cost
            // model's count): a million clones of delivered records were a tenth of the run.
            None => {
                let id = m.id.text();
                let id = id.as_str();
                let record = match punctual_core::ids::ReminderId::parse(id) {
                    Ok(rid) => block_on(memory.get(&rid)).ok().flatten(),
                    Err(_) => None,
                };
                let entered = |s: ReminderState| {
                    record.as_ref().and_then(|r| r.history.iter().rev().find(|h| h.state == s).map(|h| h.at))
                };
                match record.as_ref().map(|r| r.state) {
                    Some(ReminderState::Expired) => (Outcome::Expired, entered(ReminderState::Expired)),
                    Some(ReminderState::Cancelled) => (Outcome::Cancelled, entered(ReminderState::Cancelled)),
                    _ => match dlq_reason.get(id) {
                        Some(reason) => {
                            let at = if dead_before_t0.contains(id) {
                                Some(t0())
                            } else {
                                entered(ReminderState::DeadLettered)
                            };
                            (Outcome::DeadLettered { reason: reason.clone() }, at)
                        }
                        None if on_queue.contains(id) => (Outcome::Waiting, None),
                        None => (Outcome::Lost, None),
                    },
                }
            }
        };
        let ending = Ending { deliver_after: Some(m.deliver_after), deliver_by: m.deliver_by, outcome, ended_at };
        let tenant = &names[m.tenant as usize];
        if let Some(c) = per_channel.get_mut(usize::from(m.channel)) {
            c.0 += 1;
            c.1 += u64::from(delivered.is_some());
            c.2 += u64::from(ending.is_late());
            c.3 = c.3.max(delivered);
        }
        if ending.is_late() {
            late_times.push(until(t0(), m.deliver_by).as_secs_f64());
            *late_by_tenant.entry(tenant.clone()).or_default() += 1;
        }
        let verdict = judge(&ending, &config.slo, as_of);
        if verdict == Verdict::Breached {
            let at = config.slo.met_by(m.deliver_after, m.deliver_by);
            first_breach = Some(first_breach.map_or(at, |f| f.min(at)));
        }
        slo.add(tenant, verdict);
        if ending.outcome == Outcome::Expired
            && let Some(reason) = dlq_reason.get(m.id.text().as_str())
        {
            tally.dlq_copy(reason);
        }
        tally.reminder(&ending);
    }
    // The simulated provider honours keys; a second acceptance of one reminder (a keyless
    // client: the naive worker) is a double effect.
    tally.provider(p.duplicate_key_attempts, p.duplicate_deliveries);
    report.counts = tally.finish(None, 0);
    report.fair_queues = config.fair_queues;
    report.tenant_p99_delay_seconds = delays
        .into_iter()
        .map(|(t, mut d)| {
            d.sort_by(f64::total_cmp);
            let p99 = d.get(((d.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0);
            (names[t as usize].clone(), (p99 * 10.0).round() / 10.0)
        })
        .collect();
    // Work can start at T0, or for a population at its first deliver_after (the population is
    // shifted a lookahead after T0): the drain is measured from there, as `run` measures from
    // its first call.
    let start = config.population.as_ref().and_then(|p| p.first_due()).map_or(t0(), |f| f.max(t0()));
    let drain = last.map_or(0.0, |l| until(start, l).as_secs_f64());
    let models = config.channel_models();
    // With channels, the floor is the slowest channel's: each drains at its own quota (the
    // naive worker calls the scenario's one provider at the quota).
    let floor = models
        .iter()
        .filter(|_| worker == Worker::Punctual)
        .zip(&per_channel)
        .map(|(m, c)| c.0 as f64 / m.quota)
        .reduce(f64::max)
        .unwrap_or(healthy as f64 / config.quota);
    report.throughput = Throughput::measure(p.calls, p.throttled, report.counts.delivered, drain, floor);
    // The naive worker calls the scenario's one provider: it has no channels to report.
    report.channels = CHANNELS
        .iter()
        .take(if worker == Worker::Punctual { CHANNELS.len() } else { 0 })
        .zip(models.iter().zip(&per_channel).zip(&states[1..]))
        .map(|(name, ((m, &(n, delivered, late, last)), s))| {
            let drain = last.map_or(0.0, |l| until(start, l).as_secs_f64());
            let t = Throughput::measure(s.calls, s.throttled, delivered, drain, n as f64 / m.quota);
            let report = ChannelReport {
                reminders: n,
                delivered,
                late,
                provider_calls: s.calls,
                provider_429: s.throttled,
                floor_seconds: t.floor_seconds,
                drain_seconds: t.drain_seconds,
                utilisation: t.utilisation,
            };
            ((*name).to_owned(), report)
        })
        .collect();
    if worker == Worker::Punctual {
        let stats = senders
            .iter()
            .flat_map(|s| std::iter::once(s.limiter()).chain(s.channels().iter().map(|c| &c.limiter)))
            .map(SharedLimiter::stats);
        let (granted, stranded, peeks) =
            stats.fold((0, 0, 0), |(g, s, p), x| (g + x.granted, s + x.stranded, p + x.peeks));
        report.limiter_writes_per_call = if granted > 0 { slots.writes() as f64 / granted as f64 } else { 0.0 };
        report.limiter_stranded = stranded;
        // The schedule reads normal work takes while deadline-near work is active: DynamoDB
        // reads like the real sender's (GetItem on the limiter's item).
        Usage::add(&usage.ddb_reads, peeks);
    }
    let limiter_writes = if worker == Worker::Punctual { slots.writes() } else { 0 };
    report.cost = Cost::per_million(&usage, limiter_writes, msgs.len());
    report.requests_per_message = punctual_core::cost::RequestsPerMessage::from_totals(
        Usage::get(&usage.ddb_reads),
        Usage::get(&usage.ddb_writes) + limiter_writes,
        Usage::get(&usage.sqs_requests),
        limiter_writes,
        msgs.len() as u64,
        p.calls,
    );
    report.cost_per_million_usd = Some(report.cost.usd);
    report.sqs_requests_per_message = (report.cost.sqs_requests / 1e4).round() / 100.0;
    report.sqs_requests_by_kind = SqsByKind::per_message(&usage, msgs.len());
    report.dynamodb_writes_per_message = (report.cost.dynamodb_writes / 1e4).round() / 100.0;
    report.released_urgent = released_urgent;
    if letters_at_t0 {
        report.redriven = summary.as_ref().map_or(0, |s| s.moved);
        let start = config.population.as_ref().and_then(|p| p.first_due()).map_or(t0(), |f| f.max(t0()));
        report.redrive_seconds = lock(&dlq.moved_at).map_or(0.0, |t| until(start, t).as_secs_f64());
        report.redrive_requests_per_message = Some(punctual_core::cost::RequestsPerMessage::from_totals(
            Usage::get(&redrive_reads),
            0,
            Usage::get(&usage.sqs.redrive),
            0,
            report.redriven,
            0,
        ));
    } else if config.scenario == Scenario::Redrive {
        report.redriven = match &summary {
            Some(s) => s.moved,
            None => (msgs.len() - fresh) as u64, // the naive bulk move
        };
        report.redrive_seconds = lock(&dlq.moved_at).map_or(0.0, |t| until(t0(), t).as_secs_f64());
        report.fresh_late = msgs[..fresh]
            .iter()
            .filter_map(|(_, m)| m.as_ref())
            .filter(|m| delivered_at.get(&m.id).is_none_or(|at| *at >= m.deliver_by))
            .count() as u64;
    }
    report.first_late_seconds = late_times.iter().copied().reduce(f64::min);
    report.slo = Some(slo.summary(&config.slo));
    report.late_by_tenant = late_by_tenant;
    report.first_slo_breach_seconds = first_breach.map(|t| until(t0(), t).as_secs_f64());
    report.simulated_seconds = until(t0(), clock.now()).as_secs_f64();
    late_times.sort_by(f64::total_cmp);
    let end = report.simulated_seconds.max(report.throughput.drain_seconds).ceil();
    // A step function: flat until each reminder's deadline passes, then one higher.
    let mut late_cumulative: Vec<(f64, f64)> = vec![(0.0, 0.0)];
    for (i, t) in late_times.iter().enumerate() {
        late_cumulative.push((*t, i as f64));
        late_cumulative.push((*t, (i + 1) as f64));
    }
    late_cumulative.push((end.max(late_times.last().copied().unwrap_or(0.0)), late_times.len() as f64));
    let last_second = p.per_second.keys().next_back().copied().unwrap_or(0);
    report.timeline = Timeline {
        backlog,
        delivered_per_second: (0..=last_second)
            .map(|s| (s as f64, p.per_second.get(&s).copied().unwrap_or(0) as f64))
            .collect(),
        late_cumulative,
        quota: (0..=report.simulated_seconds.ceil() as u64)
            .map(|s| {
                let at = Duration::from_secs(s);
                // `channels`: the channels' quotas summed, as their providers take them.
                let quota =
                    models.iter().filter(|_| worker == Worker::Punctual).map(|m| m.quota_at(at)).reduce(|a, b| a + b);
                (s as f64, quota.unwrap_or_else(|| config.quota_at(at)))
            })
            .collect(),
    };
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_by_review_edf_with_release_times_does_not_deliver_before_deliver_after() {
        // 1,000 reminders all available at X with 5 s to their deadline, at 100/s: 500 make it.
        let x = t0() + TimeDelta::hours(3);
        let mut jobs = vec![(x, x + TimeDelta::seconds(5)); 1000];
        let late = edf_late_released(&mut jobs, 100.0);
        assert!((499..=501).contains(&late), "{late}");
        // Everything released at T0 agrees with the T0 formula.
        let mut at_t0: Vec<_> = (0..300).map(|k| (t0(), t0() + TimeDelta::seconds(1 + k % 4))).collect();
        let mut deadlines: Vec<_> = at_t0.iter().map(|j| j.1).collect();
        assert_eq!(edf_late_released(&mut at_t0, 100.0), edf_late(&mut deadlines, t0(), 100.0));
    }
}
