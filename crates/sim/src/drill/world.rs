//! One drill run: a morning of reminders through the real core services — the scheduler ticking
//! every minute as EventBridge runs it, one sender service per Lambda instance polling each
//! lane as its event source mapping does, the shared limiter, the pause switch, the redrive —
//! over the simulator's AWS models, with trouble injected in time windows.
//!
//! What comes out is what CloudWatch would hold: every metric the functions emit, assembled by
//! `punctual_core::metrics` (the handlers' own code), rendered as EMF documents and extracted
//! from them as CloudWatch Logs does; and the AWS-side metrics the alarms read, from the models:
//! SQS's counts, ages and receives per queue, Lambda's `Invocations`, `Errors` and `Throttles`
//! per function, and SES's reputation rates when the provider is SES.
//!
//! The physical names are the template's logical ids (the template reader resolves `!Ref` and
//! `!GetAtt … .QueueName` to them): queues `SendQueue`, `UrgentQueue`, `DeadLetterQueue`;
//! functions `SenderFunction`, `SchedulerFunction`, `RedriveFunction`.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use punctual_alarms::{MetricId, MetricStore};
use punctual_core::backoff::{Jitter, SplitMix64};
use punctual_core::clock::{Clock, until};
use punctual_core::contract::ReminderMessage;
use punctual_core::lanes::QueueLane;
use punctual_core::limiter::{LimiterSettings, SharedLimiter};
use punctual_core::metrics::Metrics;
use punctual_core::pause::PauseGate;
use punctual_core::ports::{Control, Pause, Pending, Provider, ProviderError, ProviderRequest};
use punctual_core::provider::{ProviderOutcome, ProviderProfile, RetryAfter};
use punctual_core::reason::ReasonCode;
use punctual_core::scheduler::{Scheduler, SchedulerSettings, TickReport};
use punctual_core::sender::{ChannelRoute, Received, Sender, SenderSettings};
use punctual_core::slo::SloPolicy;
use punctual_core::testing::{ActiveOn, MemoryControl, MemoryDueStore, MemoryLedger, MemorySlotStore};

use crate::sqs::{AgeFrom, DlqState, QueueStats, SimClock, SimLanes, SimQueue, Usage, lock};

/// The logical ids the drill binds the AWS-side metrics to.
pub mod names {
    /// The normal lane.
    pub const SEND_QUEUE: &str = "SendQueue";
    /// The urgent lane.
    pub const URGENT_QUEUE: &str = "UrgentQueue";
    /// SMS's own queue (the template's sms channel).
    pub const SMS_QUEUE: &str = "SmsQueue";
    /// SMS's own urgent lane.
    pub const SMS_URGENT_QUEUE: &str = "SmsUrgentQueue";
    /// The producers' commands queue.
    pub const COMMANDS_QUEUE: &str = "CommandsQueue";
    /// The dead-letter queue.
    pub const DLQ: &str = "DeadLetterQueue";
    /// The sender function.
    pub const SENDER: &str = "SenderFunction";
    /// The scheduler function.
    pub const SCHEDULER: &str = "SchedulerFunction";
    /// The redrive function.
    pub const REDRIVE: &str = "RedriveFunction";
}

/// A Lambda invocation's timeout as the template sets it (the sender's 60 s).
const SENDER_TIMEOUT: Duration = Duration::from_secs(60);
/// The scheduler stops this long into its 120 s timeout.
const SCHEDULER_BUDGET: Duration = Duration::from_secs(110);
/// The lanes' visibility timeout and `maxReceiveCount` (the template's).
const VISIBILITY: Duration = Duration::from_secs(360);
const MAX_RECEIVES: u32 = 5;
/// How often an instance re-reads the pause switch (the sender's `pause_check`).
const PAUSE_TTL: Duration = Duration::from_secs(5);
/// The provider's latency when nothing is wrong.
const LATENCY: Duration = Duration::from_millis(80);
/// What each record costs besides the provider call (DynamoDB and SQS round trips).
const OVERHEAD: Duration = Duration::from_millis(10);
/// An event source mapping backs off this long after a throttled invocation.
const THROTTLE_BACKOFF: Duration = Duration::from_secs(10);
/// How long an invocation that crashes at cold start runs before it fails (the runtime's
/// init, then the error).
const CRASH_AFTER: Duration = Duration::from_secs(1);

/// One renewal of the morning.
#[derive(Debug, Clone)]
pub struct Row {
    /// Its tenant (an index into [`WorldConfig::tenants`]).
    pub tenant: u32,
    /// `deliver_after`.
    pub after: DateTime<Utc>,
    /// `deliver_by`.
    pub by: DateTime<Utc>,
    /// The provider refuses its recipient for good (a bounced address): a normal morning has a few.
    pub bad_address: bool,
    /// Sent by SMS in a two-channel run (else by email).
    pub sms: bool,
}

/// What goes wrong, while its [`Window`] lasts.
#[derive(Debug, Clone, PartialEq)]
pub enum Trouble {
    /// The provider answers every call with this HTTP status (500: indeterminate; 401: the
    /// credentials are refused).
    ProviderStatus(u16),
    /// One channel's provider answers every call with this status; the other channel's is well
    /// (a 401 trips that channel's own switch, which the operator resumes at the end).
    ChannelStatus(&'static str, u16),
    /// The provider answers after this long.
    ProviderSlow(Duration),
    /// The provider's quota is this, calls/s (its burst a tenth of it), below the one the
    /// deployment was told.
    ProviderQuota(f64),
    /// The provider refuses every call as permanent (400).
    ProviderPermanent,
    /// SES refuses the account (`SendingPaused`).
    AccountPaused,
    /// SES's `Reputation.BounceRate` reads this.
    BounceRate(f64),
    /// An operator pause is in force (set at the start, lifted at the end).
    OperatorPause,
    /// Every scheduler tick fails.
    SchedulerFailing,
    /// The scheduler's rule does not fire.
    SchedulerNotInvoked,
    /// This lane's event source mapping is disabled.
    LaneNotPolled(QueueLane),
    /// SMS's own queue's event source mapping is disabled.
    ChannelQueueNotPolled,
    /// The commands queue's event source mapping is disabled: producers' commands wait.
    IngestStalled,
    /// SMS's own urgent lane's event source mapping is disabled.
    ChannelUrgentQueueNotPolled,
    /// The sender's concurrency is 0: every invocation is throttled.
    SenderThrottled,
    /// Every sender invocation fails before it handles a record (a deploy that crashes at cold
    /// start: a missing variable, a bad package).
    SenderCrashing,
    /// DynamoDB refuses every claim the senders write to the ledger (a throttled table, as the
    /// claim sees it; settles and the other writes are untouched): each record fails before its
    /// call, its message comes back after the visibility timeout; the invocation succeeds.
    LedgerRefusing,
    /// A broken producer writes this many malformed messages per due reminder to the normal lane.
    Poison(f64),
    /// The provider refuses every reminder of this tenant as permanent.
    TenantRefused(u32),
    /// An operator redrives the DLQ's letters of these reasons (all when empty) at the start of
    /// the window, capped as the runbook says.
    Redrive(Vec<ReasonCode>),
}

/// A [`Trouble`] from `from` until `until`.
#[derive(Debug, Clone)]
pub struct Window {
    /// What.
    pub trouble: Trouble,
    /// From.
    pub from: DateTime<Utc>,
    /// Until (recovery).
    pub until: DateTime<Utc>,
}

impl Window {
    fn active(&self, at: DateTime<Utc>) -> bool {
        self.from <= at && at < self.until
    }
}

/// One run's inputs.
#[derive(Debug, Clone)]
pub struct WorldConfig {
    /// The morning's renewals.
    pub rows: Vec<Row>,
    /// Tenant names.
    pub tenants: Vec<String>,
    /// Where the run starts and stops (virtual time).
    pub start: DateTime<Utc>,
    /// End.
    pub end: DateTime<Utc>,
    /// Provider quota, calls/s.
    pub quota: f64,
    /// Instances polling the normal lane, and the urgent lane.
    pub concurrency: usize,
    /// Urgent.
    pub urgent_concurrency: usize,
    /// Amazon SES (no idempotency keys, reputation metrics) instead of an HTTP vendor.
    pub ses: bool,
    /// The trouble.
    pub windows: Vec<Window>,
    /// Letters already in the DLQ at the start: (reason, entered at).
    pub old_letters: Vec<(ReasonCode, DateTime<Utc>)>,
    /// Where SQS counts a message's age from.
    pub age_from: AgeFrom,
    /// Seed.
    pub seed: u64,
    /// The custom metrics' namespace (`punctual/{stack}`).
    pub namespace: String,
    /// Two channels (`CHANNELS=email,sms`): the rows marked [`Row::sms`] go by SMS, whose
    /// provider has this quota; email's has [`WorldConfig::quota`]. Each channel has its own
    /// provider, limiter and pause switch; SMS's queue is [`WorldConfig::sms_queue`]'s. `None`:
    /// one provider, no channels.
    pub sms_quota: Option<f64>,
    /// A two-channel run's scheduler is told each channel's quota
    /// (`CHANNEL_{NAME}_PROVIDER_RATE_PER_SEC` on the scheduler): it paces and projects each
    /// channel at it. `false`: the fleet's summed rate for all (a deployment that set the rates on
    /// the sender only).
    pub channel_rates: bool,
    /// A two-channel run: SMS on a queue of its own (`CHANNEL_SMS_QUEUE_URL`) drained by this
    /// many instances (its own event source mapping), as the simulator's `channels` scenario
    /// runs it; `None`: both channels on the two lanes (the one-provider template, read with
    /// two channels declared on the same lanes).
    pub sms_queue: Option<usize>,
    /// With [`WorldConfig::sms_queue`]: SMS's urgent reminders on an urgent lane of its own
    /// (`CHANNEL_SMS_URGENT_QUEUE_URL`, the template's `SmsUrgentQueue`), drained by as many
    /// instances again; `false`: SMS's one queue carries both.
    pub sms_urgent_lane: bool,
}

/// The channels of a two-channel run, by index.
pub const CHANNELS: [&str; 2] = ["email", "sms"];

/// A two-channel run's channel of a renewal, from its id (`ren-s{i}` for an SMS row, `ren-d{i}`
/// otherwise), as the renewals table would give it.
fn channel_of_renewal(r: &punctual_core::ids::RenewalId) -> &'static str {
    CHANNELS[usize::from(r.as_str().starts_with("ren-s"))]
}

/// One channel's figures in a two-channel run.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ChannelFigures {
    /// Its reminders.
    pub reminders: u64,
    /// Accepted by its provider.
    pub delivered: u64,
    /// Missed their window.
    pub late: u64,
    /// Not delivered within the SLO (`SloPolicy::default().within` of `deliver_after`, the
    /// template's `SloWithinSecs`): accepted later, or not accepted by the end of the run when
    /// that time had passed. A four-hour window hides an hour's wait; this does not.
    pub past_slo: u64,
    /// The longest a delivered reminder waited after its `deliver_after`, seconds.
    pub worst_wait_seconds: f64,
    /// Whose address its provider refuses for good (a normal morning's few bounces).
    pub bounced: u64,
    /// Times a sender tripped the channel's own switch (a confirmed 401).
    pub switch_trips: u64,
}

/// What a run leaves.
#[derive(Debug)]
pub struct WorldRun {
    /// Every metric, as CloudWatch would hold it.
    pub store: MetricStore,
    /// `deliver_by` of each reminder that missed its window (accepted at or after it, or never
    /// accepted while its deadline passed inside the run).
    pub late: Vec<DateTime<Utc>>,
    /// Reminders accepted by the provider.
    pub delivered: u64,
    /// Reminders in the morning.
    pub reminders: u64,
    /// What the DLQ received during the run, by reason (the letters it started with left out).
    pub dead_lettered: std::collections::BTreeMap<String, u64>,
    /// Letters an operator's redrive moved back, when one ran.
    pub redriven: Option<u64>,
    /// Each channel's figures (two-channel runs only).
    pub channels: std::collections::BTreeMap<String, ChannelFigures>,
    /// Times a sender tripped the fleet's switch.
    pub fleet_trips: u64,
}

// ---- the provider ------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct ProviderState {
    tokens: f64,
    at: Option<DateTime<Utc>>,
    accepted: HashMap<String, DateTime<Utc>>,
}

/// A provider with a quota (a token bucket; `429` + `Retry-After` past it), that honours
/// `Idempotency-Key`s unless it is SES, and answers as the active trouble says.
#[derive(Debug, Clone)]
struct DrillProvider {
    state: Arc<Mutex<ProviderState>>,
    clock: SimClock,
    quota: f64,
    ses: bool,
    /// Its channel in a two-channel run (`ChannelStatus` troubles name it).
    channel: Option<&'static str>,
    windows: Arc<Vec<Window>>,
    /// Reminders whose recipient is refused for good.
    bad: Arc<HashSet<String>>,
    /// Tenant names, to match `TenantRefused`.
    tenants: Arc<Vec<String>>,
}

impl DrillProvider {
    fn trouble(&self, at: DateTime<Utc>) -> impl Iterator<Item = &Trouble> {
        self.windows.iter().filter(move |w| w.active(at)).map(|w| &w.trouble)
    }

    fn answer(&self, msg: &ReminderMessage, now: DateTime<Utc>) -> ProviderOutcome {
        for t in self.trouble(now) {
            match t {
                Trouble::AccountPaused if self.ses => {
                    return ProviderOutcome::AccountBlocked { detail: "SendingPaused".into() };
                }
                Trouble::ProviderStatus(s) => return ProviderOutcome::from_status(*s, None, None),
                Trouble::ChannelStatus(c, s) if self.channel == Some(*c) => {
                    return ProviderOutcome::from_status(*s, None, None);
                }
                Trouble::ProviderPermanent => return ProviderOutcome::Permanent { status: 400 },
                Trouble::TenantRefused(i)
                    if self.tenants.get(*i as usize).map(String::as_str) == Some(msg.tenant_id.as_str()) =>
                {
                    return ProviderOutcome::Permanent { status: 400 };
                }
                _ => {}
            }
        }
        if self.bad.contains(msg.reminder_id.as_str()) {
            return ProviderOutcome::Permanent { status: 400 };
        }
        let quota = self
            .trouble(now)
            .filter_map(|t| match t {
                Trouble::ProviderQuota(q) if self.channel.is_none_or(|c| c == "email") => Some(*q),
                _ => None,
            })
            .fold(self.quota, f64::min);
        let mut s = lock(&self.state);
        let burst = (quota / 10.0).max(1.0);
        let dt = s.at.map_or(0.0, |a| until(a, now).as_secs_f64());
        s.tokens = if s.at.is_none() { burst } else { (s.tokens + dt * quota).min(burst) };
        s.at = Some(now.max(s.at.unwrap_or(now)));
        let key = msg.reminder_id.as_str();
        if !self.ses && s.accepted.contains_key(key) {
            return ProviderOutcome::Accepted { status: 200, receipt: None, budget: None };
        }
        if s.tokens < 1.0 {
            let wait = ((1.0 - s.tokens) / quota).ceil().max(1.0) as u64;
            return ProviderOutcome::Transient { status: Some(429), retry_after: Some(RetryAfter::Seconds(wait)) };
        }
        s.tokens -= 1.0;
        s.accepted.entry(key.to_owned()).or_insert(now);
        ProviderOutcome::Accepted { status: 202, receipt: None, budget: None }
    }
}

impl Provider for DrillProvider {
    fn profile(&self) -> ProviderProfile {
        ProviderProfile { honours_keys: !self.ses }
    }

    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        let now = self.clock.now();
        let latency = self
            .trouble(now)
            .find_map(|t| if let Trouble::ProviderSlow(d) = t { Some(*d) } else { None })
            .unwrap_or(LATENCY);
        if latency > req.timeout {
            // The client gives up after the request left: nobody knows whether it was taken.
            self.clock.sleep(req.timeout).await;
            return Ok(ProviderOutcome::Indeterminate { status: None });
        }
        let outcome = self.answer(req.message, now);
        self.clock.sleep(latency).await;
        Ok(outcome)
    }
}

// ---- the dead-letter queue as the redrive sees it ---------------------------------------------

/// The DLQ model behind the redrive's port: a receive hides letters for `hold`, as SQS's
/// visibility timeout does, which is what a DLQ alarm sees move from visible to not visible.
#[derive(Debug, Clone)]
struct DrillDeadLetters {
    dlq: Arc<Mutex<DlqState>>,
    lanes: SimLanes,
}

impl punctual_core::ports::DeadLetters for DrillDeadLetters {
    async fn receive(
        &self,
        hold: Duration,
    ) -> Result<Vec<punctual_core::ports::DeadLetter>, punctual_core::ports::DeadLettersError> {
        let now_ms = self.lanes.normal.clock.now().timestamp_millis();
        let mut d = lock(&self.dlq);
        Ok(d.letters
            .iter_mut()
            .filter(|l| l.hidden_until_ms <= now_ms)
            .take(10)
            .map(|l| {
                l.hidden_until_ms = now_ms + hold.as_millis() as i64;
                punctual_core::ports::DeadLetter {
                    handle: l.id.to_string(),
                    message_id: format!("dlq-{}", l.id),
                    body: l.body.clone(),
                    reason: Some(l.reason.as_str().to_owned()),
                    first_enqueued: ReminderMessage::decode(&l.body).ok().map(|m| m.first_enqueued),
                }
            })
            .collect())
    }

    async fn send_back(&self, body: &str, lane: QueueLane) -> Result<(), punctual_core::ports::DeadLettersError> {
        let m = ReminderMessage::decode(body).ok();
        let (tenant, channel) =
            (m.as_ref().map(|m| m.tenant_id.as_str()), m.as_ref().and_then(|m| m.channel.as_deref()));
        // To the channel's own queue when it has one, as `SqsQueues::url_for` sends it back.
        self.lanes.send_to(self.lanes.queue_for(channel, lane), body.to_owned(), Duration::ZERO, tenant);
        Ok(())
    }

    async fn delete(&self, handle: &str) -> Result<(), punctual_core::ports::DeadLettersError> {
        lock(&self.dlq).letters.retain(|l| l.id.to_string() != handle);
        Ok(())
    }

    async fn release(&self, handles: &[String]) -> Result<(), punctual_core::ports::DeadLettersError> {
        for l in &mut lock(&self.dlq).letters {
            if handles.contains(&l.id.to_string()) {
                l.hidden_until_ms = i64::MIN;
            }
        }
        Ok(())
    }
}

// ---- CloudWatch's side ------------------------------------------------------------------------

/// The metric store the run writes, shared by its tasks.
#[derive(Clone)]
struct Sink {
    store: Rc<std::cell::RefCell<MetricStore>>,
    namespace: String,
}

impl Sink {
    fn put(&self, namespace: &str, name: &str, dims: &[(&str, &str)], at: DateTime<Utc>, value: f64) {
        self.store.borrow_mut().put(&MetricId::new(namespace, name, dims), at.timestamp(), value);
    }

    fn lambda(&self, function: &str, metric: &str, at: DateTime<Utc>) {
        self.put("AWS/Lambda", metric, &[("FunctionName", function)], at, 1.0);
    }

    /// An invocation's EMF documents, rendered by the functions' own code and extracted as
    /// CloudWatch Logs extracts them.
    fn emf(&self, metrics: &Metrics, function: &str, at: DateTime<Utc>) {
        for line in metrics.lines(&self.namespace, function, at.timestamp_millis()) {
            super::emf::extract(&line, &mut self.store.borrow_mut());
        }
    }

    fn queue(&self, queue: &str, s: &QueueStats, received: u64, sent: u64, at: DateTime<Utc>) {
        let dims = [("QueueName", queue)];
        self.put("AWS/SQS", "ApproximateNumberOfMessagesVisible", &dims, at, s.visible as f64);
        self.put("AWS/SQS", "ApproximateNumberOfMessagesNotVisible", &dims, at, s.not_visible as f64);
        self.put("AWS/SQS", "ApproximateNumberOfMessagesDelayed", &dims, at, s.delayed as f64);
        // An active queue reports a non-negative age; an empty one 0.
        self.put("AWS/SQS", "ApproximateAgeOfOldestMessage", &dims, at, s.oldest_age.unwrap_or(0.0));
        self.put("AWS/SQS", "NumberOfMessagesReceived", &dims, at, received as f64);
        self.put("AWS/SQS", "NumberOfMessagesSent", &dims, at, sent as f64);
    }
}

/// The commands queue as the drill models it: [`CommandsModel::PER_MINUTE`] commands sent every
/// minute, all received by the ingest in that minute unless its mapping is stalled.
#[derive(Default)]
struct CommandsModel {
    /// When each waiting command was sent.
    waiting: std::collections::VecDeque<DateTime<Utc>>,
    sent: u64,
    received: u64,
}

impl CommandsModel {
    const PER_MINUTE: u64 = 30;

    /// One minute: its sends, its receives; the queue's stats, and this minute's receives and sends.
    fn minute(&mut self, now: DateTime<Utc>, stalled: bool) -> (QueueStats, u64, u64) {
        for _ in 0..Self::PER_MINUTE {
            self.waiting.push_back(now);
        }
        self.sent += Self::PER_MINUTE;
        let received = if stalled { 0 } else { self.waiting.drain(..).count() as u64 };
        self.received += received;
        let stats = QueueStats {
            visible: self.waiting.len() as u64,
            not_visible: 0,
            delayed: 0,
            oldest_age: self.waiting.front().map(|t| (now - *t).num_seconds().max(0) as f64),
            received: self.received,
            sent: self.sent,
        };
        (stats, received, Self::PER_MINUTE)
    }
}

// ---- the run ----------------------------------------------------------------------------------

/// The randomness SQS's receives draw from (which ready message a receive hands out).
struct Receives(SplitMix64);

impl AsMut<SplitMix64> for Receives {
    fn as_mut(&mut self) -> &mut SplitMix64 {
        &mut self.0
    }
}

fn message_for(cfg: &WorldConfig, i: usize) -> Result<ReminderMessage, String> {
    let r = &cfg.rows[i];
    let sms = cfg.sms_quota.is_some() && r.sms;
    let mut m = punctual_core::testing::message(&format!("{}{i}", if sms { "s" } else { "d" }), r.after, r.by);
    if cfg.sms_quota.is_some() {
        m.channel = Some(CHANNELS[usize::from(sms)].to_owned());
    }
    let tenant_id =
        punctual_core::TenantId::parse(cfg.tenants[r.tenant as usize].as_str()).map_err(|e| e.to_string())?;
    let reminder_id =
        punctual_core::ids::ReminderId::derive(&tenant_id, &m.renewal_id, &m.kind, m.deliver_after.date_naive());
    Ok(ReminderMessage { tenant_id, reminder_id, ..m })
}

fn pending(m: &ReminderMessage) -> Pending {
    Pending::from(m)
}

fn any(windows: &[Window], at: DateTime<Utc>, f: impl Fn(&Trouble) -> bool) -> bool {
    windows.iter().any(|w| w.active(at) && f(&w.trouble))
}

/// Runs one morning.
pub fn run(cfg: &WorldConfig) -> Result<WorldRun, String> {
    let cfg = cfg.clone();
    std::thread::scope(|sc| sc.spawn(|| run_here(&cfg)).join().map_err(|_| "the drill's run panicked".to_owned())?)
}

#[allow(clippy::too_many_lines)]
fn run_here(cfg: &WorldConfig) -> Result<WorldRun, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    let _entered = runtime.enter();
    let clock = SimClock::new(cfg.start);
    let usage = Arc::new(Usage::default());
    let dead = Arc::new(Mutex::new(DlqState::default()));
    let lanes = SimLanes {
        normal: SimQueue::new(&clock, &usage, true, &dead, MAX_RECEIVES),
        urgent: SimQueue::new(&clock, &usage, true, &dead, MAX_RECEIVES),
        channel: cfg
            .sms_quota
            .and(cfg.sms_queue)
            .map(|_| (CHANNELS[1], SimQueue::new(&clock, &usage, true, &dead, MAX_RECEIVES))),
        channel_urgent: cfg
            .sms_quota
            .and(cfg.sms_queue)
            .filter(|_| cfg.sms_urgent_lane)
            .map(|_| SimQueue::new(&clock, &usage, true, &dead, MAX_RECEIVES)),
    };
    let mut rng = SplitMix64::new(cfg.seed);
    for (reason, at) in &cfg.old_letters {
        let m = punctual_core::testing::message(
            &format!("old{}", rng.next_u64() % 1_000_000),
            *at,
            *at + TimeDelta::hours(4),
        );
        lock(&dead).push(m.encode(), *reason, at.timestamp_millis());
    }
    let mut messages = Vec::with_capacity(cfg.rows.len());
    for i in 0..cfg.rows.len() {
        messages.push(message_for(cfg, i)?);
    }
    let bad: HashSet<String> =
        cfg.rows.iter().zip(&messages).filter(|(r, _)| r.bad_address).map(|(_, m)| m.reminder_id.to_string()).collect();
    let windows = Arc::new(cfg.windows.clone());
    let provider = DrillProvider {
        state: Arc::default(),
        clock: clock.clone(),
        quota: cfg.quota,
        ses: cfg.ses,
        channel: None,
        windows: Arc::clone(&windows),
        bad: Arc::new(bad),
        tenants: Arc::new(cfg.tenants.clone()),
    };
    // A two-channel run: each channel's own provider (its own quota and accepted calls) and its
    // own pause switch, as `CHANNELS=email,sms` gives the sender.
    let channels: Vec<(&'static str, DrillProvider, MemoryControl)> = cfg.sms_quota.map_or_else(Vec::new, |sms| {
        CHANNELS
            .iter()
            .zip([cfg.quota, sms])
            .map(|(name, quota)| {
                let p = DrillProvider { state: Arc::default(), quota, channel: Some(*name), ..provider.clone() };
                (*name, p, MemoryControl::default())
            })
            .collect()
    });
    let control = MemoryControl::default();
    let ledger = MemoryLedger::new();
    // The senders' view of the ledger: refusing claims while a `LedgerRefusing` window lasts.
    let ledger_refusing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let senders_ledger = punctual_core::testing::FaultyLedger::while_on(
        ledger.clone(),
        punctual_core::testing::Fault::ClaimRefused,
        Arc::clone(&ledger_refusing),
    );
    let slots = MemorySlotStore::default();
    let slo = SloPolicy::default();
    let sink = Sink { store: Rc::new(std::cell::RefCell::new(MetricStore::new())), namespace: cfg.namespace.clone() };
    // SMS's own queue's instances, and as many again on its own urgent lane when it has one.
    let per_sms_queue = if lanes.channel.is_some() { cfg.sms_queue.unwrap_or(0) } else { 0 };
    let sms_workers = per_sms_queue * (1 + usize::from(lanes.channel_urgent.is_some()));
    let workers = cfg.concurrency + cfg.urgent_concurrency + sms_workers;
    let senders: Vec<_> = (0..workers as u64)
        .map(|w| {
            let routes = channels
                .iter()
                .enumerate()
                .map(|(k, (name, p, switch))| ChannelRoute {
                    name: (*name).to_owned(),
                    limiter: SharedLimiter::new(
                        slots.clone(),
                        clock.clone(),
                        LimiterSettings { name: format!("provider.{name}"), ..LimiterSettings::for_channel(p.quota) },
                        cfg.seed ^ w ^ ((k as u64 + 1) << 48),
                    ),
                    provider: p.clone(),
                    pause: Some(PauseGate::new(switch.clone(), clock.clone(), PAUSE_TTL)),
                })
                .collect();
            let channel_of: fn(&punctual_core::ids::RenewalId) -> &'static str =
                if channels.is_empty() { |_| CHANNELS[0] } else { channel_of_renewal };
            Sender::new(
                senders_ledger.clone(),
                ActiveOn(channel_of),
                SharedLimiter::new(slots.clone(), clock.clone(), LimiterSettings::new(cfg.quota), cfg.seed ^ w),
                provider.clone(),
                lanes.clone(),
                clock.clone(),
                SenderSettings::default(),
                cfg.seed ^ (w << 32),
            )
            .with_pause(PauseGate::new(control.clone(), clock.clone(), PAUSE_TTL))
            .with_channels(routes)
        })
        .collect();
    let senders = Rc::new(senders);
    // The renewals, latest first: each minute's tick gets the ones its lookahead reaches.
    let mut upcoming: Vec<Pending> = messages.iter().map(pending).collect();
    upcoming.sort_by_key(|p| std::cmp::Reverse(p.deliver_after));
    let due = MemoryDueStore::new(1);
    // A two-channel run's scheduler knows each channel's quota (CHANNEL_{NAME}_PROVIDER_RATE_PER_SEC)
    // and the fleet's is their sum.
    let share = punctual_core::scheduler::SUSTAINABLE_SHARE;
    let channel_rates: Vec<(String, f64)> = channels
        .iter()
        .filter(|_| cfg.channel_rates)
        .map(|(name, p, _)| ((*name).to_owned(), p.quota * share))
        .collect();
    let settings = SchedulerSettings {
        sustainable_rate: (cfg.quota + cfg.sms_quota.unwrap_or(0.0)) * share,
        page_size: 20_000,
        urgent_below: SenderSettings::default().deadline_near,
        ..SchedulerSettings::default()
    };
    let end = cfg.end;
    let local = tokio::task::LocalSet::new();
    let shared = Rc::new(std::cell::RefCell::new(Receives(SplitMix64::new(cfg.seed ^ 0x5eed))));

    // EventBridge → the scheduler, every minute.
    {
        let (due, lanes, clock, sink, windows, control) =
            (due.clone(), lanes.clone(), clock.clone(), sink.clone(), Arc::clone(&windows), control.clone());
        let lookahead = TimeDelta::from_std(settings.lookahead).unwrap_or(TimeDelta::zero());
        let switches: Vec<(String, PauseGate<SimClock>)> = channels
            .iter()
            .map(|(name, _, switch)| {
                ((*name).to_owned(), PauseGate::new(switch.clone(), clock.clone(), Duration::ZERO))
            })
            .collect();
        local.spawn_local(async move {
            let scheduler = Scheduler::new(due.clone(), lanes, clock.clone(), settings)
                .with_pause(PauseGate::new(control, clock.clone(), Duration::ZERO))
                .with_channel_switches(switches)
                .with_channel_rates(channel_rates);
            loop {
                let now = clock.now();
                if now >= end {
                    break;
                }
                if !any(&windows, now, |t| *t == Trouble::SchedulerNotInvoked) {
                    while upcoming.last().is_some_and(|p| p.deliver_after <= now + lookahead + TimeDelta::minutes(1)) {
                        if let Some(p) = upcoming.pop() {
                            due.insert(p);
                        }
                    }
                    sink.lambda(names::SCHEDULER, "Invocations", now);
                    let mut report = TickReport::default();
                    let failed = if any(&windows, now, |t| *t == Trouble::SchedulerFailing) {
                        true
                    } else {
                        let deadline = now + TimeDelta::from_std(SCHEDULER_BUDGET).unwrap_or(TimeDelta::zero());
                        scheduler.tick_into(deadline, &mut report).await.is_err()
                    };
                    let at = clock.now();
                    if failed {
                        sink.lambda(names::SCHEDULER, "Errors", at);
                        sink.emf(&punctual_core::metrics::scheduler::failure_metrics(&report), "scheduler", at);
                    } else {
                        sink.emf(&punctual_core::metrics::scheduler::metrics(&report), "scheduler", at);
                    }
                    due.prune();
                }
                clock.sleep(Duration::from_secs(60)).await;
            }
        });
    }

    // The event source mappings: `concurrency` instances on the normal lane, the rest on the
    // urgent lane; each receives a batch, invokes the sender, and deletes what it handled.
    for w in 0..workers {
        // The last `sms_workers` poll SMS's own queue (a lane of its own: no lane trouble).
        let lane = if w < cfg.concurrency { QueueLane::Normal } else { QueueLane::Urgent };
        let first_sms = cfg.concurrency + cfg.urgent_concurrency;
        let on_sms_urgent = w >= first_sms + per_sms_queue;
        let own = match (&lanes.channel, &lanes.channel_urgent) {
            (_, Some(u)) if on_sms_urgent => Some(u.clone()),
            (Some((_, q)), _) if w >= first_sms => Some(q.clone()),
            _ => None,
        };
        let (lanes, clock, sink, windows, senders, shared) =
            (lanes.clone(), clock.clone(), sink.clone(), Arc::clone(&windows), Rc::clone(&senders), Rc::clone(&shared));
        local.spawn_local(async move {
            let polls_a_lane = own.is_none();
            let queue = own.unwrap_or_else(|| lanes.of(lane).clone());
            loop {
                let now = clock.now();
                if now >= end {
                    break;
                }
                let stopped = if polls_a_lane {
                    any(&windows, now, |t| *t == Trouble::LaneNotPolled(lane))
                } else {
                    // SmsQueue's mapping only: its urgent lane's is another mapping.
                    let stopped_mapping = if on_sms_urgent {
                        Trouble::ChannelUrgentQueueNotPolled
                    } else {
                        Trouble::ChannelQueueNotPolled
                    };
                    any(&windows, now, |t| *t == stopped_mapping)
                };
                if stopped {
                    clock.sleep(Duration::from_secs(10)).await;
                    continue;
                }
                let batch = queue.long_poll(VISIBILITY, 0.0, &shared, true).await;
                if batch.is_empty() {
                    continue;
                }
                let now = clock.now();
                if any(&windows, now, |t| *t == Trouble::SenderThrottled) {
                    // The mapping received the batch; Lambda refused the invocation. The
                    // messages come back after the visibility timeout, one receive older.
                    sink.lambda(names::SENDER, "Throttles", now);
                    clock.sleep(THROTTLE_BACKOFF).await;
                    continue;
                }
                sink.lambda(names::SENDER, "Invocations", now);
                if any(&windows, now, |t| *t == Trouble::SenderCrashing) {
                    // Invoked, and failed before any record: the batch comes back after the
                    // visibility timeout, one receive older, and nothing else is measured.
                    clock.sleep(CRASH_AFTER).await;
                    sink.lambda(names::SENDER, "Errors", clock.now());
                    continue;
                }
                let deadline = now + TimeDelta::from_std(SENDER_TIMEOUT).unwrap_or(TimeDelta::zero());
                let records = batch.into_iter().map(|(id, body, receives)| {
                    let (senders, clock, queue) = (&senders, &clock, &queue);
                    async move {
                        let received = Received { message_id: &id.to_string(), body: &body };
                        let result = senders[w].process(received, deadline).await;
                        clock.sleep(OVERHEAD).await;
                        if result.is_ok() {
                            queue.delete(id);
                        }
                        (result, receives, body)
                    }
                });
                let results = futures_util::future::join_all(records).await;
                let mut m = Metrics::new();
                for (result, receives, body) in &results {
                    match result {
                        Ok(p) => punctual_core::metrics::sender::record(&mut m, p, &slo),
                        Err(_) => punctual_core::metrics::sender::infrastructure_failure(
                            &mut m,
                            Some(*receives),
                            body,
                            MAX_RECEIVES,
                        ),
                    }
                }
                sink.emf(&m, "sender", clock.now());
            }
        });
    }

    let redriven: Rc<std::cell::RefCell<Option<u64>>> = Rc::default();
    // The operators: pauses set and lifted, a resume after a credential or account fix, a
    // redrive; a broken producer's malformed messages.
    for win in cfg.windows.iter().cloned() {
        let (clock, control, lanes, sink, ledger, dead) =
            (clock.clone(), control.clone(), lanes.clone(), sink.clone(), ledger.clone(), Arc::clone(&dead));
        let switches: HashMap<&'static str, MemoryControl> =
            channels.iter().map(|(name, _, switch)| (*name, switch.clone())).collect();
        let due_in_window: Vec<DateTime<Utc>> =
            cfg.rows.iter().map(|r| r.after).filter(|a| win.from <= *a && *a < win.until).collect();
        let (quota, seed, redriven) = (cfg.quota, cfg.seed, Rc::clone(&redriven));
        let ledger_refusing = Arc::clone(&ledger_refusing);
        local.spawn_local(async move {
            clock.sleep(until(clock.now(), win.from)).await;
            let operator = "oncall@example.com";
            match win.trouble {
                Trouble::LedgerRefusing => {
                    ledger_refusing.store(true, std::sync::atomic::Ordering::SeqCst);
                    clock.sleep(until(clock.now(), win.until)).await;
                    ledger_refusing.store(false, std::sync::atomic::Ordering::SeqCst);
                }
                Trouble::OperatorPause => {
                    let p = Pause { reason: "maintenance".into(), owner: operator.into(), since: clock.now() };
                    let _ = control.set_pause(Some(&p), operator).await;
                    clock.sleep(until(clock.now(), win.until)).await;
                    let _ = control.set_pause(None, operator).await;
                }
                Trouble::ProviderStatus(401) | Trouble::AccountPaused => {
                    // Fixed at the end of the window: the operator resumes the fleet pause.
                    clock.sleep(until(clock.now(), win.until)).await;
                    let _ = control.set_pause(None, operator).await;
                }
                Trouble::ChannelStatus(channel, 401) => {
                    // The channel's secret is fixed at the end: `punctual resume --channel`.
                    clock.sleep(until(clock.now(), win.until)).await;
                    if let Some(switch) = switches.get(channel) {
                        let _ = switch.set_pause(None, operator).await;
                    }
                }
                Trouble::Poison(share) => {
                    let mut rng = SplitMix64::new(seed ^ 0x9015);
                    for at in due_in_window {
                        if rng.next_unit() >= share {
                            continue;
                        }
                        clock.sleep(until(clock.now(), at)).await;
                        let body = format!("{{\"v\":1,\"reminder_id\":\"broken-{}\"}}", rng.next_u64());
                        lanes.normal.push(body, clock.now(), None);
                    }
                }
                Trouble::Redrive(reasons) => {
                    sink.lambda(names::REDRIVE, "Invocations", clock.now());
                    let dlq = DrillDeadLetters { dlq: dead, lanes };
                    let debug_ledger = ledger.clone();
                    let redriver = punctual_core::redrive::Redriver::new(ledger, dlq, control, clock.clone());
                    let cap = (quota * LimiterSettings::new(quota).redrive_share / 2.0).max(1.0);
                    let req = punctual_core::redrive::RedriveRequest {
                        reason: "drill: yesterday's provider outage is over".into(),
                        owner: operator.into(),
                        selection: punctual_core::redrive::Selection {
                            failure_reasons: reasons,
                            ..punctual_core::redrive::Selection::default()
                        },
                        max_messages: 1000,
                        max_per_second: cap,
                        canary: 10,
                        canary_timeout: Some(Duration::from_secs(300)),
                        // A bounced address among the letters (dead-lettered by the outage before its
                        // 400 could show) fails again; one in twenty is the runbook's threshold.
                        abort_if: punctual_core::redrive::AbortIf {
                            failure_ratio: 0.05,
                            ..punctual_core::redrive::AbortIf::default()
                        },
                        dry_run: false,
                    };
                    let deadline = clock.now() + TimeDelta::minutes(15);
                    match redriver.run(&req, deadline).await {
                        Ok(summary) => {
                            if std::env::var_os("PUNCTUAL_DRILL_DEBUG").is_some() {
                                eprintln!("redrive: {summary:?}");
                                for id in &summary.moved_ids {
                                    let Ok(rid) = punctual_core::ReminderId::parse(id.as_str()) else { continue };
                                    if let Ok(Some(r)) = punctual_core::ports::Ledger::get(&debug_ledger, &rid).await
                                        && r.state != punctual_core::reason::ReminderState::Delivered
                                    {
                                        eprintln!(
                                            "  {id}: {:?} {:#?}",
                                            r.state,
                                            r.history.iter().rev().take(4).collect::<Vec<_>>()
                                        );
                                    }
                                }
                            }
                            *redriven.borrow_mut() = Some(summary.moved);
                        }
                        Err(_) => sink.lambda(names::REDRIVE, "Errors", clock.now()),
                    }
                }
                _ => {}
            }
        });
    }

    // SQS's and SES's own metrics, once a minute (mid-minute, so each falls in its minute).
    {
        let (lanes, clock, sink, dead, windows) =
            (lanes.clone(), clock.clone(), sink.clone(), Arc::clone(&dead), Arc::clone(&windows));
        let (age_from, ses) = (cfg.age_from, cfg.ses);
        // The DLQ existed before the watch started: its letters already had a history (without
        // one, the first sample would read as letters arriving at the start).
        {
            let stats = lock(&dead).stats(cfg.start.timestamp_millis());
            for k in 1..=30 {
                let at = cfg.start - TimeDelta::minutes(k) + TimeDelta::seconds(30);
                sink.queue(
                    names::DLQ,
                    &QueueStats { oldest_age: stats.oldest_age.map(|a| (a - 60.0 * k as f64).max(0.0)), ..stats },
                    0,
                    0,
                    at,
                );
            }
        }
        local.spawn_local(async move {
            clock.sleep(Duration::from_secs(30)).await;
            let mut before: HashMap<&str, (u64, u64)> = HashMap::from([(names::DLQ, (0, lock(&dead).sent))]);
            // The producers' commands queue: a steady trickle the ingest's mapping receives
            // within its minute, unless it is stalled (the commands then wait, aging).
            let mut commands = CommandsModel::default();
            loop {
                let now = clock.now();
                if now >= end {
                    break;
                }
                let stalled = windows.iter().any(|w| w.active(now) && w.trouble == Trouble::IngestStalled);
                let (stats, received, sent) = commands.minute(now, stalled);
                sink.queue(names::COMMANDS_QUEUE, &stats, received, sent, now);
                let dlq = lock(&dead).stats(now.timestamp_millis());
                let own = lanes.channel.as_ref().map(|(_, q)| (names::SMS_QUEUE, q.stats(age_from)));
                let own_urgent = lanes.channel_urgent.as_ref().map(|q| (names::SMS_URGENT_QUEUE, q.stats(age_from)));
                for (name, stats) in [
                    (names::SEND_QUEUE, lanes.normal.stats(age_from)),
                    (names::URGENT_QUEUE, lanes.urgent.stats(age_from)),
                    (names::DLQ, dlq),
                ]
                .into_iter()
                .chain(own)
                .chain(own_urgent)
                {
                    let (r0, s0) = before.insert(name, (stats.received, stats.sent)).unwrap_or((0, 0));
                    sink.queue(name, &stats, stats.received - r0, stats.sent - s0, now);
                }
                if ses {
                    let bounce = windows
                        .iter()
                        .filter(|w| w.active(now))
                        .find_map(|w| if let Trouble::BounceRate(r) = w.trouble { Some(r) } else { None })
                        .unwrap_or(0.004);
                    sink.put("AWS/SES", "Reputation.BounceRate", &[], now, bounce);
                    sink.put("AWS/SES", "Reputation.ComplaintRate", &[], now, 0.0002);
                }
                clock.sleep(Duration::from_secs(60)).await;
            }
        });
    }

    runtime.block_on(local.run_until(tokio::time::sleep(until(cfg.start, end))));
    drop(local);

    let mut accepted = lock(&provider.state).accepted.clone();
    for (_, p, _) in &channels {
        accepted.extend(lock(&p.state).accepted.iter().map(|(k, v)| (k.clone(), *v)));
    }
    let mut late = Vec::new();
    let mut by_channel: std::collections::BTreeMap<String, ChannelFigures> = std::collections::BTreeMap::new();
    for (m, row) in messages.iter().zip(&cfg.rows) {
        let missed = match accepted.get(m.reminder_id.as_str()) {
            Some(at) => *at >= m.deliver_by,
            None => m.deliver_by <= end,
        };
        if missed {
            late.push(m.deliver_by);
        }
        if let Some(c) = &m.channel {
            let slo = m.deliver_after + TimeDelta::from_std(slo.within).unwrap_or(TimeDelta::zero());
            let f = by_channel.entry(c.clone()).or_default();
            match accepted.get(m.reminder_id.as_str()) {
                Some(at) => {
                    f.delivered += 1;
                    f.past_slo += u64::from(*at > slo);
                    f.worst_wait_seconds =
                        f.worst_wait_seconds.max((*at - m.deliver_after).num_milliseconds() as f64 / 1000.0);
                }
                None => f.past_slo += u64::from(slo <= end && !row.bad_address),
            }
            f.reminders += 1;
            f.late += u64::from(missed);
            f.bounced += u64::from(row.bad_address);
        }
    }
    for (name, _, switch) in &channels {
        by_channel.entry((*name).to_owned()).or_default().switch_trips =
            switch.sender_trips.load(std::sync::atomic::Ordering::SeqCst);
    }
    // Every reminder the provider accepted is a delivery (a keyless provider's repeat is not
    // counted twice here: the drill is about alarms, the accounting about effects).
    let delivered = messages.iter().filter(|m| accepted.contains_key(m.reminder_id.as_str())).count() as u64;
    let mut dead_lettered = std::collections::BTreeMap::new();
    for l in lock(&dead).letters.iter().filter(|l| l.sent_ms >= cfg.start.timestamp_millis()) {
        *dead_lettered.entry(l.reason.as_str().to_owned()).or_insert(0) += 1;
    }
    let store =
        Rc::try_unwrap(sink.store).map(std::cell::RefCell::into_inner).map_err(|_| "metric store still shared")?;
    let redriven = *redriven.borrow();
    Ok(WorldRun {
        store,
        late,
        delivered,
        reminders: messages.len() as u64,
        dead_lettered,
        redriven,
        channels: by_channel,
        fleet_trips: control.sender_trips.load(std::sync::atomic::Ordering::SeqCst),
    })
}
