//! `punctual canary`: one synthetic reminder through every stage of the pipeline, each stage
//! timed — the scheduler and sender driven through their own handlers.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use punctual_aws::control::DynamoControl;
use punctual_aws::emf::Metrics;
use punctual_aws::ledger::DynamoLedger;
use punctual_core::ports::{Control, Ledger};
use punctual_core::reason::ReminderState;
use punctual_ops::Target;
use serde::Serialize;

use crate::env::{local_senders, scheduler_config, sender_config};
use crate::esm::{EsmStats, poll_once};
use crate::{HarnessError, eventbridge, step};

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
/// → sender (ledger claim, shared limiter, provider) → ack on `target`, playing EventBridge
/// and the event source mapping against the scheduler's and the sender's own handlers (as
/// `local drain` does), and times each stage.
pub async fn canary(target: &Target) -> Result<CanaryReport, HarnessError> {
    use punctual_core::renewal::{Renewal, RenewalInput};
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
    .map_err(step("building the canary renewal"))?;
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
    // One firing of the scheduler function's own handler: its pause rule decides.
    let scheduler = punctual_scheduler::app::build(
        &scheduler_config(t, punctual_core::scheduler::SchedulerSettings::default().sustainable_rate)?,
        &ddb,
        queues.client(),
    );
    let tick = eventbridge::tick(&scheduler).await;
    if let Ok(r) = &tick
        && r.paused
    {
        let who = DynamoControl::new(ddb.clone(), &t.ledger_table).pause().await.ok().flatten();
        let detail = who.map_or("paused: the scheduler releases nothing".to_owned(), |p| {
            format!("paused by {} ({}): the scheduler releases nothing", p.owner, p.reason)
        });
        timed(&mut stages, "scheduler release", false, s, detail);
        report.stages = stages;
        return Ok(report);
    }
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
    // PROVIDER_TOKEN for a configured target; `local up`'s token for the local pipeline.
    let token = punctual_core::secret::Secret::new(
        std::env::var("PROVIDER_TOKEN")
            .ok()
            .or_else(|| punctual_ops::target::load_state().ok().map(|l| l.provider_token))
            .unwrap_or_default(),
    );
    let sender = sender_config(t, target.quota)?;
    let provider = crate::env::local_provider(&target.sdk_config().await, &ddb, &token, &sender)?;
    let instances = local_senders(&sender, &ddb, queues.client(), &provider, 1, 1);
    let ledger = DynamoLedger::new(ddb.clone(), &t.ledger_table);
    let (stats, metrics) = (EsmStats::default(), std::sync::Mutex::new(Metrics::new()));
    let s = Instant::now();
    let mut record = None;
    while s.elapsed() < Duration::from_secs(30) {
        // The canary's slack decides its lane: poll both, as the two mappings would.
        for sender in &instances {
            for lane in punctual_core::lanes::QueueLane::ALL {
                poll_once(sender, &queues, lane, &stats, &metrics).await;
            }
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
