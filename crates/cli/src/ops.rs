//! The operator commands: `status`, `explain`, `pause`, `resume`, `redrive`, `canary`.
//!
//! They find the queues and tables from flags, from the environment (`SEND_QUEUE_URL`,
//! `DLQ_URL`, `LEDGER_TABLE`, `RENEWALS_TABLE`, the names the functions read) or, failing
//! both, from the state `punctual local up` left behind. The endpoint is `--endpoint`, else
//! `AWS_ENDPOINT_URL`, else the local state's; with none of them they talk to AWS itself
//! through the SDK's default chain.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use punctual_aws::control::{DynamoControl, SqsDeadLetters};
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::sqs::SqsQueues;
use punctual_core::ReminderId;
use punctual_core::decision::SenderPolicy;
use punctual_core::limiter::LimiterSettings;
use punctual_core::ports::{Ledger, LedgerRecord};
use punctual_core::reason::ReminderState;
use punctual_core::redrive::{Control, Pause, RedriveCaps, RedriveRequest, RedriveSummary, Redriver};
use punctual_lambda::SystemClock;
use serde::Serialize;

use crate::env::{Resources, dynamodb_client, sdk_config};

/// An operator command failed.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// Where to act is unknown.
    #[error(
        "no target: set SEND_QUEUE_URL, DLQ_URL, LEDGER_TABLE and RENEWALS_TABLE (and AWS_ENDPOINT_URL or --endpoint for an emulator), or run `punctual local up` first"
    )]
    NoTarget,
    /// The request is invalid.
    #[error("refused, nothing was moved:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
    /// Not found.
    #[error("{0}")]
    NotFound(String),
    /// A step failed.
    #[error("{what}")]
    Step {
        /// What.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn step<E: Into<Box<dyn std::error::Error + Send + Sync>>>(what: &'static str) -> impl FnOnce(E) -> OpsError {
    move |e| OpsError::Step { what, source: e.into() }
}

/// Where the commands act.
#[derive(Debug, Clone)]
pub struct Target {
    /// Names and URLs.
    pub resources: Resources,
    /// A separate DynamoDB endpoint (DynamoDB Local beside moto).
    pub dynamodb_endpoint: Option<String>,
    /// Provider quota (for drain projections and the redrive cap).
    pub quota: f64,
}

impl Target {
    /// Resolves the target from `endpoint`, the environment, then the local state.
    pub fn resolve(endpoint: Option<&str>) -> Result<Self, OpsError> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let local = crate::local::load_state().ok();
        let quota = env("PROVIDER_RATE_PER_SEC")
            .and_then(|q| q.parse().ok())
            .or(local.as_ref().map(|l| l.quota))
            .unwrap_or(100.0);
        let endpoint = endpoint.map(str::to_owned).or_else(|| env("AWS_ENDPOINT_URL"));
        if let (Some(send), Some(dlq), Some(ledger), Some(renewals)) =
            (env("SEND_QUEUE_URL"), env("DLQ_URL"), env("LEDGER_TABLE"), env("RENEWALS_TABLE"))
        {
            return Ok(Self {
                resources: Resources {
                    endpoint: endpoint.unwrap_or_default(),
                    send_queue_url: send,
                    dlq_url: dlq,
                    ledger_table: ledger,
                    renewals_table: renewals,
                    provider_url: env("PROVIDER_URL").unwrap_or_default(),
                },
                dynamodb_endpoint: env("AWS_ENDPOINT_URL_DYNAMODB"),
                quota,
            });
        }
        let local = local.ok_or(OpsError::NoTarget)?;
        let mut resources = local.resources.clone();
        if let Some(e) = endpoint {
            resources.endpoint = e;
        }
        Ok(Self { resources, dynamodb_endpoint: local.dynamodb_endpoint.clone(), quota })
    }

    async fn clients(&self) -> (aws_sdk_dynamodb::Client, SqsQueues) {
        let config = sdk_config(&self.resources.endpoint).await;
        let ddb = dynamodb_client(&config, self.dynamodb_endpoint.as_deref());
        let r = &self.resources;
        (ddb, SqsQueues::new(aws_sdk_sqs::Client::new(&config), &r.send_queue_url, &r.dlq_url))
    }

    /// The redrive caps: `REDRIVE_MAX_MESSAGES` (default 1000) and the lower of
    /// `REDRIVE_MAX_PER_SECOND` (default 20) and the redrive share of the quota.
    pub fn caps(&self) -> RedriveCaps {
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<f64>().ok());
        let share = LimiterSettings::new(self.quota).redrive_share;
        RedriveCaps {
            max_messages: env("REDRIVE_MAX_MESSAGES").map_or(1000, |v| v as u32),
            max_per_second: env("REDRIVE_MAX_PER_SECOND").unwrap_or(20.0).min(share * self.quota),
        }
    }
}

// ---- pause / resume ----------------------------------------------------------------------------

/// `punctual pause`.
pub async fn pause(target: &Target, reason: &str, owner: &str) -> Result<Pause, OpsError> {
    let mut problems = Vec::new();
    if reason.trim().is_empty() {
        problems.push("--reason must not be empty".to_owned());
    }
    if owner.trim().is_empty() {
        problems.push("--owner must not be empty".to_owned());
    }
    if !problems.is_empty() {
        return Err(OpsError::Invalid(problems));
    }
    let (ddb, _) = target.clients().await;
    let control = DynamoControl::new(ddb, &target.resources.ledger_table);
    let p = Pause { reason: reason.trim().into(), owner: owner.trim().into(), since: Utc::now() };
    control.set_pause(Some(&p), owner.trim()).await.map_err(step("setting the pause switch"))?;
    Ok(p)
}

/// `punctual resume`; returns the pause that was lifted.
pub async fn resume(target: &Target, by: &str) -> Result<Option<Pause>, OpsError> {
    let (ddb, _) = target.clients().await;
    let control = DynamoControl::new(ddb, &target.resources.ledger_table);
    let was = control.pause().await.map_err(step("reading the pause switch"))?;
    control.set_pause(None, by).await.map_err(step("lifting the pause switch"))?;
    Ok(was)
}

// ---- status ------------------------------------------------------------------------------------

/// `punctual status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Send queue: visible.
    pub send_visible: u64,
    /// Send queue: in flight.
    pub send_in_flight: u64,
    /// Send queue: delayed (scheduled for later, or deferred).
    pub send_delayed: u64,
    /// DLQ messages.
    pub dlq: u64,
    /// Reminders dead-lettered, by their last reason (from the ledger).
    pub dlq_by_reason: BTreeMap<String, u64>,
    /// Oldest due-but-undelivered reminder's age (ledger: not terminal, deliver_after passed).
    pub oldest_age_seconds: f64,
    /// Reminders in the ledger by state.
    pub by_state: BTreeMap<String, u64>,
    /// Send-queue backlog ÷ quota.
    pub projected_drain_seconds: f64,
    /// The smallest time left to `deliver_by` among undelivered reminders.
    pub min_slack_seconds: Option<f64>,
    /// True when the projected drain exceeds the smallest slack.
    pub projected_breach: bool,
    /// The pause in force, if any.
    pub paused: Option<Pause>,
}

impl Status {
    /// Human lines.
    pub fn render(&self) -> String {
        let reasons: Vec<String> = self.dlq_by_reason.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let states: Vec<String> = self.by_state.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "paused            {}\n\
             send queue        {} visible, {} in flight, {} delayed\n\
             dlq               {} ({})\n\
             ledger            {}\n\
             oldest due age    {:.1} s\n\
             backlog vs drain  projected drain {:.1} s, smallest slack {} → {}\n",
            self.paused
                .as_ref()
                .map_or("no".to_owned(), |p| format!("YES since {} by {}: {}", p.since, p.owner, p.reason)),
            self.send_visible,
            self.send_in_flight,
            self.send_delayed,
            self.dlq,
            if reasons.is_empty() { "none by reason".to_owned() } else { reasons.join(", ") },
            if states.is_empty() { "empty".to_owned() } else { states.join(", ") },
            self.oldest_age_seconds,
            self.projected_drain_seconds,
            self.min_slack_seconds.map_or("n/a".to_owned(), |s| format!("{s:.1} s")),
            if self.projected_breach { "BREACH PROJECTED" } else { "ok" },
        )
    }
}

/// Reads queue depths, the ledger (a scan: fine for an operator command, not for a hot path)
/// and the pause switch.
pub async fn status(target: &Target) -> Result<Status, OpsError> {
    let (ddb, queues) = target.clients().await;
    let send = queues.depth_of(queues.send_url()).await.map_err(step("reading the send queue"))?;
    let dlq = queues.depth_of(queues.dlq_url()).await.map_err(step("reading the DLQ"))?;
    let ledger = DynamoLedger::new(ddb.clone(), &target.resources.ledger_table);
    let records = ledger.scan_all().await.map_err(step("reading the ledger"))?;
    let paused = DynamoControl::new(ddb, &target.resources.ledger_table)
        .pause()
        .await
        .map_err(step("reading the pause switch"))?;
    let now = Utc::now();
    let mut s = Status {
        send_visible: send.visible,
        send_in_flight: send.in_flight,
        send_delayed: send.delayed,
        dlq: dlq.total(),
        dlq_by_reason: BTreeMap::new(),
        oldest_age_seconds: 0.0,
        by_state: BTreeMap::new(),
        projected_drain_seconds: send.total() as f64 / target.quota,
        min_slack_seconds: None,
        projected_breach: false,
        paused,
    };
    for r in &records {
        *s.by_state.entry(r.state.as_str().into()).or_default() += 1;
        if r.state == ReminderState::DeadLettered {
            *s.dlq_by_reason.entry(r.last_reason.map_or("unknown", |c| c.as_str()).into()).or_default() += 1;
        }
        if !r.state.is_terminal() {
            let first = r.history.first().map_or(now, |h| h.at);
            s.oldest_age_seconds = s.oldest_age_seconds.max((now - first).num_milliseconds() as f64 / 1000.0);
            let slack = (r.deliver_by - now).num_milliseconds() as f64 / 1000.0;
            s.min_slack_seconds = Some(s.min_slack_seconds.map_or(slack, |m: f64| m.min(slack)));
        }
    }
    s.projected_breach = s.min_slack_seconds.is_some_and(|m| s.projected_drain_seconds > m);
    Ok(s)
}

// ---- explain -----------------------------------------------------------------------------------

/// `punctual explain`.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The reminder.
    pub reminder_id: String,
    /// Its state.
    pub state: String,
    /// Provider attempts made.
    pub attempts: u32,
    /// Why it is where it is (last reason).
    pub why: String,
    /// When it runs next (deferred), if known.
    pub next_eligible: Option<DateTime<Utc>>,
    /// Its business deadline.
    pub deliver_by: DateTime<Utc>,
    /// Time left to `deliver_by` (negative: late).
    pub slack_seconds: f64,
    /// The DLQ reason, when dead-lettered.
    pub dlq_reason: Option<String>,
    /// Redrive runs that touched it, oldest first.
    pub redrive_lineage: Vec<String>,
    /// What a redrive of it would consume.
    pub redrive_would_consume: String,
    /// Every transition.
    pub history: Vec<serde_json::Value>,
}

impl Explanation {
    /// Human lines.
    pub fn render(&self) -> String {
        let mut out = format!(
            "reminder          {}\nstate             {} after {} provider attempt(s)\nwhy               {}\nnext eligible     {}\ndeliver_by        {} ({})\ndlq reason        {}\nredrive lineage   {}\nredrive would use {}\nhistory:\n",
            self.reminder_id,
            self.state,
            self.attempts,
            self.why,
            self.next_eligible.map_or("—".to_owned(), |t| t.to_rfc3339()),
            self.deliver_by.to_rfc3339(),
            if self.slack_seconds >= 0.0 {
                format!("{:.0} s of slack", self.slack_seconds)
            } else {
                format!("late by {:.0} s", -self.slack_seconds)
            },
            self.dlq_reason.as_deref().unwrap_or("—"),
            if self.redrive_lineage.is_empty() { "none".to_owned() } else { self.redrive_lineage.join(" → ") },
            self.redrive_would_consume,
        );
        for h in &self.history {
            out.push_str(&format!("  {h}\n"));
        }
        out
    }
}

/// Explains a reminder id, or a message id found on the DLQ (its `original_message_id` or its
/// own id).
pub async fn explain(target: &Target, id: &str) -> Result<Explanation, OpsError> {
    let (ddb, queues) = target.clients().await;
    let ledger = DynamoLedger::new(ddb, &target.resources.ledger_table);
    let rid = match ReminderId::parse(id) {
        Ok(r) => r,
        Err(_) => find_in_dlq(&queues, id).await?.ok_or_else(|| {
            OpsError::NotFound(format!("{id:?} is not a reminder id (rem_…) and no DLQ message has that id"))
        })?,
    };
    let rec = ledger
        .get(&rid)
        .await
        .map_err(step("reading the ledger"))?
        .ok_or_else(|| OpsError::NotFound(format!("no ledger record for {rid}: never processed by a sender")))?;
    Ok(explanation(&rec, Utc::now(), target))
}

/// The answers `explain` gives for one ledger record at `now`.
pub fn explanation(rec: &LedgerRecord, now: DateTime<Utc>, target: &Target) -> Explanation {
    let slack = (rec.deliver_by - now).num_milliseconds() as f64 / 1000.0;
    let reason = rec.last_reason.map(|r| r.as_str().to_owned());
    let why = match rec.state {
        ReminderState::Delivered => "delivered; nothing left to do".to_owned(),
        ReminderState::Deferred => {
            format!("waiting: {} — it is back on the send queue with a delay", reason.as_deref().unwrap_or("deferred"))
        }
        ReminderState::DeadLettered => format!(
            "in the DLQ: {} — nothing retries it until an operator redrives it",
            reason.as_deref().unwrap_or("unknown")
        ),
        ReminderState::Leased => "a sender holds it right now".to_owned(),
        ReminderState::Expired => "expired: deliver_by passed".to_owned(),
        s => format!("{}{}", s.as_str(), reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()),
    };
    let mut lineage: Vec<String> = Vec::new();
    for h in &rec.history {
        if let Some(r) = &h.redrive_id
            && !lineage.contains(r)
        {
            lineage.push(r.clone());
        }
    }
    let share = LimiterSettings::new(target.quota).redrive_share * target.quota;
    let policy = SenderPolicy::default();
    let would = match rec.state {
        ReminderState::Delivered => "nothing: a redrive skips delivered reminders".to_owned(),
        _ if slack <= 0.0 => "nothing: a redrive skips reminders past deliver_by".to_owned(),
        _ => format!(
            "1 of the request's max_messages, 1 token of the redrive share ({share:.0}/s), and a fresh budget of {} provider attempts (it has made {})",
            policy.max_attempts, rec.attempts
        ),
    };
    Explanation {
        reminder_id: rec.reminder_id.to_string(),
        state: rec.state.as_str().into(),
        attempts: rec.attempts,
        why,
        next_eligible: rec.next_at.filter(|_| !rec.state.is_terminal()),
        deliver_by: rec.deliver_by,
        slack_seconds: slack,
        dlq_reason: (rec.state == ReminderState::DeadLettered).then(|| reason.unwrap_or_default()),
        redrive_lineage: lineage,
        redrive_would_consume: would,
        history: rec.history.iter().map(|h| serde_json::to_value(h).unwrap_or_default()).collect(),
    }
}

async fn find_in_dlq(queues: &SqsQueues, id: &str) -> Result<Option<ReminderId>, OpsError> {
    // Peek: receive with a short hold and release at once (bounded to 100 messages).
    let mut handles = Vec::new();
    let mut found = None;
    for _ in 0..10 {
        let got =
            queues.receive(queues.dlq_url(), 10, Duration::from_millis(200)).await.map_err(step("reading the DLQ"))?;
        if got.is_empty() {
            break;
        }
        for m in got {
            let orig = m
                .attributes
                .iter()
                .find(|(k, _)| k == punctual_aws::sqs::attr::ORIGINAL_MESSAGE_ID)
                .map(|(_, v)| v.as_str());
            if m.message_id == id || orig == Some(id) {
                let rid = m
                    .attributes
                    .iter()
                    .find(|(k, _)| k == punctual_aws::sqs::attr::REMINDER_ID)
                    .map(|(_, v)| v.clone());
                found = rid.and_then(|r| ReminderId::parse(r).ok());
            }
            handles.push(m.receipt_handle);
        }
        if found.is_some() {
            break;
        }
    }
    for h in handles {
        let _ = queues.change_visibility(queues.dlq_url(), &h, Duration::ZERO).await;
    }
    Ok(found)
}

// ---- redrive -------------------------------------------------------------------------------------

/// `punctual redrive` in process: a dry run first, then (unless `dry_run`) the run itself.
pub async fn redrive(
    target: &Target,
    request: &serde_json::Value,
) -> Result<(RedriveSummary, Option<RedriveSummary>), OpsError> {
    let obj = request.as_object().cloned().unwrap_or_default();
    let req = RedriveRequest::from_object(&obj, target.caps()).map_err(OpsError::Invalid)?;
    let (ddb, queues) = target.clients().await;
    let t = &target.resources;
    let redriver = Redriver::new(
        DynamoLedger::new(ddb.clone(), &t.ledger_table),
        SqsDeadLetters::new(queues),
        DynamoControl::new(ddb, &t.ledger_table),
        SystemClock,
    );
    // The same bound a Lambda invocation would have (15 min).
    let deadline = Utc::now() + TimeDelta::minutes(14);
    let dry = RedriveRequest { dry_run: true, ..req.clone() };
    let preview = redriver.run(&dry, deadline).await.map_err(step("dry run"))?;
    if req.dry_run {
        return Ok((preview, None));
    }
    let done = redriver.run(&req, deadline).await.map_err(step("redrive"))?;
    Ok((preview, Some(done)))
}

/// Prints a summary.
pub fn render_summary(s: &RedriveSummary) -> String {
    let skipped: Vec<String> = s.skipped.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "redrive {}{}: selected {}, {} {}, skipped {}, left {}{}{}\n",
        s.redrive_id,
        if s.dry_run { " (dry run)" } else { "" },
        s.selected,
        if s.dry_run { "would move" } else { "moved" },
        s.moved,
        if skipped.is_empty() { "0".to_owned() } else { skipped.join(", ") },
        s.left,
        if s.canary_moved > 0 {
            format!(", canary {} of which {} failed", s.canary_moved, s.canary_failed)
        } else {
            String::new()
        },
        s.aborted.as_ref().map(|a| format!(", ABORTED: {a}")).unwrap_or_default(),
    )
}

// ---- canary --------------------------------------------------------------------------------------

/// One stage of the canary's trip.
#[derive(Debug, Clone, Serialize)]
pub struct Stage {
    /// Stage name.
    pub stage: &'static str,
    /// Reached.
    pub ok: bool,
    /// Time the stage took.
    pub millis: u64,
    /// What was seen.
    pub detail: String,
}

/// `punctual canary`: the stages, and where it stopped if it did.
#[derive(Debug, Clone, Serialize)]
pub struct CanaryReport {
    /// The synthetic reminder.
    pub reminder_id: String,
    /// Stages in order.
    pub stages: Vec<Stage>,
    /// True when every stage passed.
    pub ok: bool,
}

impl CanaryReport {
    /// Human lines.
    pub fn render(&self) -> String {
        let mut out = format!("canary {}\n", self.reminder_id);
        for s in &self.stages {
            out.push_str(&format!(
                "  {:<18} {:<4} {:>6} ms  {}\n",
                s.stage,
                if s.ok { "ok" } else { "FAIL" },
                s.millis,
                s.detail
            ));
        }
        out.push_str(if self.ok { "every stage passed\n" } else { "stopped at the first FAIL\n" });
        out
    }
}

/// Sends one synthetic reminder for tenant `canary` through import → scheduler release → SQS
/// → sender (ledger claim, shared limiter, provider) → ack, driving the scheduler tick and the
/// event source mapping itself (as `local drain` does), and times each stage.
pub async fn canary(target: &Target) -> Result<CanaryReport, OpsError> {
    use punctual_core::renewal::{Renewal, RenewalInput};
    use punctual_core::scheduler::{Scheduler, SchedulerSettings};
    let (ddb, queues) = target.clients().await;
    let t = &target.resources;
    let renewals = punctual_aws::renewals::DynamoRenewals::new(ddb.clone(), &t.renewals_table);
    let mut stages = Vec::new();
    let now = Utc::now();
    let renewal = Renewal::validate(&RenewalInput {
        tenant_id: "canary".into(),
        renewal_id: format!("canary-{}", now.timestamp_millis()),
        recipient_ref: "canary-recipient".into(),
        channel: "email".into(),
        zone: "UTC".into(),
        local_due_date: now.format("%Y-%m-%d").to_string(),
        local_send_time: now.format("%H:%M").to_string(),
        window_minutes: "60".into(),
        ..RenewalInput::default()
    })
    .map_err(|e| OpsError::Step { what: "building the canary renewal", source: e.to_string().into() })?;
    let rid = renewal.reminder_id.clone();
    let mut report = CanaryReport { reminder_id: rid.to_string(), stages: Vec::new(), ok: false };
    let timed = |stages: &mut Vec<Stage>, stage, ok, started: Instant, detail: String| {
        stages.push(Stage { stage, ok, millis: started.elapsed().as_millis() as u64, detail });
        ok
    };

    let s = Instant::now();
    let imported = renewals.import(std::slice::from_ref(&renewal), now).await;
    if !timed(
        &mut stages,
        "import",
        imported.is_ok(),
        s,
        imported.as_ref().map_or_else(
            |e| e.to_string(),
            |_| format!("renewal {} due {}", renewal.renewal_id, renewal.deliver_after),
        ),
    ) {
        report.stages = stages;
        return Ok(report);
    }
    let s = Instant::now();
    // The scheduler function's own rule: nothing is released while paused.
    let paused =
        DynamoControl::new(ddb.clone(), &t.ledger_table).pause().await.map_err(step("reading the pause switch"))?;
    if let Some(p) = paused {
        let detail = format!("paused by {} ({}): the scheduler releases nothing", p.owner, p.reason);
        timed(&mut stages, "scheduler release", false, s, detail);
        report.stages = stages;
        return Ok(report);
    }
    let scheduler = Scheduler::new(renewals.clone(), queues.clone(), SystemClock, SchedulerSettings::default());
    let tick = scheduler.tick(Utc::now() + TimeDelta::seconds(60)).await;
    let released = tick.as_ref().map(|r| r.released).unwrap_or(0);
    if !timed(
        &mut stages,
        "scheduler release",
        released > 0,
        s,
        match &tick {
            Ok(r) => format!("{} released this tick (paused: {})", r.released, r.paused),
            Err(e) => e.to_string(),
        },
    ) {
        report.stages = stages;
        return Ok(report);
    }
    // Play the event source mapping until the canary's ledger record is settled (30 s bound).
    let provider = punctual_provider::HttpProvider::new(
        &t.provider_url,
        // PROVIDER_TOKEN for a configured target; `local up`'s token for the local pipeline.
        &punctual_core::secret::Secret::new(
            std::env::var("PROVIDER_TOKEN")
                .ok()
                .or_else(|| crate::local::load_state().ok().map(|l| l.provider_token))
                .unwrap_or_default(),
        ),
        Duration::from_secs(2),
    )
    .map_err(step("building the provider client"))?;
    let (instances, _) = crate::env::local_senders(&ddb, t, &queues, &provider, target.quota, 1, 1);
    let ledger = DynamoLedger::new(ddb.clone(), &t.ledger_table);
    let s = Instant::now();
    let mut record = None;
    while s.elapsed() < Duration::from_secs(30) {
        let msgs = queues.receive(queues.send_url(), 10, Duration::from_secs(1)).await.map_err(step("receiving"))?;
        if !msgs.is_empty() {
            let event = crate::esm::sqs_event(&msgs, queues.send_url()).map_err(step("building the SQS event"))?;
            let mut ctx = lambda_runtime::Context::default();
            ctx.deadline = u64::try_from((Utc::now() + TimeDelta::seconds(60)).timestamp_millis()).unwrap_or(0);
            let handled = punctual_sender::handler::handle(&instances[0], lambda_runtime::LambdaEvent::new(event, ctx))
                .await
                .map_err(step("running the sender"))?;
            let failed: Vec<&str> =
                handled.response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
            let done: Vec<&str> = msgs
                .iter()
                .filter(|m| !failed.contains(&m.message_id.as_str()))
                .map(|m| m.receipt_handle.as_str())
                .collect();
            queues.delete_batch(queues.send_url(), &done).await.map_err(step("acknowledging"))?;
        }
        record = ledger.get(&rid).await.map_err(step("reading the ledger"))?;
        if record.as_ref().is_some_and(|r| r.state.is_terminal()) {
            break;
        }
    }
    let hist = |st: ReminderState| record.as_ref().and_then(|r| r.history.iter().find(|h| h.state == st).map(|h| h.at));
    let claimed = hist(ReminderState::Leased);
    let delivered = hist(ReminderState::Delivered);
    let released_at = now;
    let span = |a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>| match (a, b) {
        (Some(a), Some(b)) => (b - a).num_milliseconds().max(0) as u64,
        _ => 0,
    };
    stages.push(Stage {
        stage: "sqs → sender claim",
        ok: claimed.is_some(),
        millis: span(Some(released_at), claimed),
        detail: claimed.map_or("the sender never claimed it within 30 s".into(), |t| format!("claimed at {t}")),
    });
    let state = record.as_ref().map(|r| r.state);
    stages.push(Stage {
        stage: "limiter + provider",
        ok: delivered.is_some(),
        millis: span(claimed, delivered),
        detail: match record.as_ref() {
            Some(r) if r.state == ReminderState::Delivered => {
                format!("accepted, receipt {}", r.receipt.as_deref().unwrap_or("none"))
            }
            Some(r) => format!("{} ({})", r.state.as_str(), r.last_reason.map_or("no reason", |c| c.as_str())),
            None => "not reached".into(),
        },
    });
    stages.push(Stage {
        stage: "ack",
        ok: state == Some(ReminderState::Delivered),
        millis: 0,
        detail: if state == Some(ReminderState::Delivered) {
            "deleted from the send queue".into()
        } else {
            "not acknowledged as delivered".into()
        },
    });
    report.ok = stages.iter().all(|s| s.ok);
    report.stages = stages;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use punctual_core::ports::HistoryEntry;
    use punctual_core::reason::ReasonCode;

    fn target() -> Target {
        Target {
            resources: Resources {
                endpoint: String::new(),
                send_queue_url: String::new(),
                dlq_url: String::new(),
                ledger_table: String::new(),
                renewals_table: String::new(),
                provider_url: String::new(),
            },
            dynamodb_endpoint: None,
            quota: 100.0,
        }
    }

    fn record(
        state: ReminderState,
        reason: Option<ReasonCode>,
        redrive: Option<&str>,
        now: DateTime<Utc>,
    ) -> LedgerRecord {
        let h = |at: i64, state, reason, redrive_id: Option<&str>| HistoryEntry {
            at: now - TimeDelta::seconds(at),
            state,
            reason,
            attempts: 1,
            correlation_id: "c".into(),
            redrive_id: redrive_id.map(str::to_owned),
            provider_status: Some(503),
            next_at: None,
        };
        LedgerRecord {
            reminder_id: ReminderId::parse("rem_0123456789abcdef0123456789abcdef").unwrap(),
            state,
            attempts: 2,
            owner: None,
            lease_until: None,
            receipt: None,
            last_reason: reason,
            next_at: Some(now + TimeDelta::seconds(30)),
            deliver_by: now + TimeDelta::hours(1),
            history: vec![h(60, ReminderState::Leased, None, None), h(30, state, reason, redrive)],
        }
    }

    #[test]
    fn explain_answers_why_when_next_when_late_and_what_a_redrive_costs() {
        let now = Utc::now();
        let t = target();
        let delivered = explanation(&record(ReminderState::Delivered, None, None, now), now, &t);
        assert!(delivered.why.contains("delivered") && delivered.redrive_would_consume.starts_with("nothing"));
        assert_eq!(delivered.next_eligible, None);

        let deferred =
            explanation(&record(ReminderState::Deferred, Some(ReasonCode::ProviderTransient), None, now), now, &t);
        assert!(deferred.why.contains("provider_transient"), "{}", deferred.why);
        assert_eq!(deferred.next_eligible, Some(now + TimeDelta::seconds(30)), "when it runs next");
        assert!((deferred.slack_seconds - 3600.0).abs() < 1.0, "when it becomes late");

        let dead =
            explanation(&record(ReminderState::DeadLettered, Some(ReasonCode::AttemptLimit), None, now), now, &t);
        assert_eq!(dead.dlq_reason.as_deref(), Some("attempt_limit"));
        assert!(dead.redrive_would_consume.contains("20/s") && dead.redrive_would_consume.contains("has made 2"));

        let redriven =
            explanation(&record(ReminderState::Deferred, Some(ReasonCode::RateLimited), Some("rd-1"), now), now, &t);
        assert_eq!(redriven.redrive_lineage, vec!["rd-1".to_owned()]);
        assert!(redriven.render().contains("redrive lineage   rd-1"));
    }
}
