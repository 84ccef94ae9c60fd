//! The operator commands: `status`, `explain`, `pause`, `resume`, `redrive`.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use punctual_aws::control::DynamoControl;
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::sqs::SqsQueues;
use punctual_core::ReminderId;
use punctual_core::decision::SenderPolicy;
use punctual_core::limiter::LimiterSettings;
use punctual_core::ports::{Control, Ledger, LedgerRecord, Pause};
use punctual_core::reason::ReminderState;
use punctual_core::redrive::{Field, RedriveRequestWire, RedriveSummary};
use punctual_redrive::handler::{Answer, Function};
use serde::Serialize;

use crate::target::Target;
use crate::{OpsError, step};

// ---- pause / resume ----------------------------------------------------------------------------

/// The pause switch of `channel` (`None`: the fleet's), refused for a channel the deployment
/// does not declare: its switch would be read by no sender, a pause that stops nothing.
fn switch(target: &Target, ddb: aws_sdk_dynamodb::Client, channel: Option<&str>) -> Result<DynamoControl, OpsError> {
    let table = &target.resources.ledger_table;
    let Some(name) = channel else { return Ok(DynamoControl::new(ddb, table)) };
    target.resources.declared_channel(name, "no sender reads a channel's switch: pause the fleet instead")?;
    Ok(DynamoControl::for_channel(ddb, table, name))
}

/// `punctual pause` (with `channel`: that channel's own switch only).
pub async fn pause(target: &Target, reason: &str, owner: &str, channel: Option<&str>) -> Result<Pause, OpsError> {
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
    let control = switch(target, ddb, channel)?;
    let p = Pause { reason: reason.trim().into(), owner: owner.trim().into(), since: Utc::now() };
    // Never over another pause: replacing the sender's own (a refused credential) with an
    // operator's would read as the fleet pause ending (its alarm clears) while nothing is fixed.
    match control.pause_unless_paused(&p, owner.trim()).await.map_err(step("setting the pause switch"))? {
        None => Ok(p),
        Some(existing) => Err(OpsError::Paused(format!(
            "{} already paused by {} since {} ({}); nothing changed — `punctual resume{}` first if it must change",
            channel.map_or_else(|| "the fleet is".to_owned(), |c| format!("channel {c} is")),
            existing.owner,
            existing.since,
            existing.reason,
            channel.map_or_else(String::new, |c| format!(" --channel {c}"))
        ))),
    }
}

/// `punctual resume` (with `channel`: that channel's own switch only); returns the pause that
/// was lifted.
pub async fn resume(target: &Target, by: &str, channel: Option<&str>) -> Result<Option<Pause>, OpsError> {
    let (ddb, _) = target.clients().await;
    let control = switch(target, ddb, channel)?;
    let was = control.pause().await.map_err(step("reading the pause switch"))?;
    control.set_pause(None, by).await.map_err(step("lifting the pause switch"))?;
    Ok(was)
}

// ---- status ------------------------------------------------------------------------------------

/// `punctual status`: what an operator needs in an incident, read without a scan (the read
/// cost per call: docs/commands.md#punctual-status).
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Send queue: visible.
    pub send_visible: u64,
    /// Send queue: in flight.
    pub send_in_flight: u64,
    /// Send queue: delayed (scheduled for later, or deferred).
    pub send_delayed: u64,
    /// Urgent lane: visible (0 with one lane).
    pub urgent_visible: u64,
    /// Urgent lane: in flight.
    pub urgent_in_flight: u64,
    /// Urgent lane: delayed (paced releases, deferred copies).
    pub urgent_delayed: u64,
    /// DLQ messages (the queue's own count).
    pub dlq: u64,
    /// Reminders whose last word was the DLQ (dead-lettered, or expired), `deliver_by` within
    /// the DLQ's 14-day retention, by reason: the ledger's sparse `dead` index. `None` when the
    /// ledger table has no such index (a stack from before it).
    pub dlq_by_reason: Option<BTreeMap<String, u64>>,
    /// How long the oldest renewal due by now has waited for the scheduler (the renewals
    /// table's sparse `due` index); `None` when every due renewal was released.
    pub oldest_unreleased_seconds: Option<f64>,
    /// Both lanes' backlog ÷ quota.
    pub projected_drain_seconds: f64,
    /// Each channel's own queue and urgent lane (visible, in flight, delayed), by channel;
    /// absent when no channel has a queue of its own. Its backlog drains at that channel's
    /// quota, not in `projected_drain_seconds`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub channel_queues: BTreeMap<String, ChannelQueues>,
    /// The pause in force, if any.
    pub paused: Option<Pause>,
    /// Each declared channel's own pause switch (`CHANNELS`; absent with none declared): its
    /// pause, or `null`. One read each.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub channels_paused: BTreeMap<String, Option<Pause>>,
    /// The deadline SLO of today's due population (00:00 UTC to now: `reconcile`'s judgement
    /// of it), with the worst tenants. `None` with `--no-slo`, when the renewals table has no
    /// `by_day_channel` index (a stack from before it: the upgrade adds it) or the SLO settings
    /// are invalid (`slo_unavailable` says why).
    pub slo_today: Option<punctual_core::slo::SloSummary>,
    /// The same SLO per channel (the renewals' `channel`; absent when the deployment declares
    /// no channels), from the same read.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub slo_today_by_channel: BTreeMap<String, punctual_core::slo::SloSummary>,
    /// Why `slo_today` is absent.
    pub slo_unavailable: Option<String>,
    /// The commands queue and its DLQ (absent when the target names no commands queue:
    /// `COMMANDS_QUEUE_URL`).
    pub commands: Option<CommandsStatus>,
    /// Records holding outcome events not yet published, and the age of the oldest (the
    /// ledger's sparse `outbox` index; absent on a ledger table from before it).
    pub outbox: Option<OutboxStatus>,
    /// AWS requests this status made (none of them a Scan).
    pub requests: u32,
}

/// The producers' queue as `status` reads it.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CommandsStatus {
    /// Commands waiting for the ingest function.
    pub queue: QueueDepth,
    /// Commands it could not apply, waiting for an operator (`commands_dlq` of the target).
    pub dlq: u64,
}

/// The outbox as `status` reads it.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct OutboxStatus {
    /// Ledger records holding unpublished events.
    pub pending: u64,
    /// Seconds since the oldest of them was added to (`None`: none pending).
    pub oldest_seconds: Option<f64>,
}

/// One queue's messages: visible, in flight, delayed (JSON keys are a contract).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct QueueDepth {
    /// Visible.
    pub visible: u64,
    /// In flight.
    pub in_flight: u64,
    /// Delayed.
    pub delayed: u64,
}

impl From<punctual_aws::sqs::Depth> for QueueDepth {
    fn from(d: punctual_aws::sqs::Depth) -> Self {
        Self { visible: d.visible, in_flight: d.in_flight, delayed: d.delayed }
    }
}

/// A channel's own queue and its own urgent lane (all zero without one).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ChannelQueues {
    /// Its queue.
    pub queue: QueueDepth,
    /// Its urgent lane.
    pub urgent: QueueDepth,
}

impl Status {
    /// Human lines.
    pub fn render(&self) -> String {
        let reasons = match &self.dlq_by_reason {
            None => "by reason: unavailable (the ledger table has no `dead` index: update the stack)".to_owned(),
            Some(r) if r.is_empty() => "none by reason in the ledger".to_owned(),
            Some(r) => r.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "),
        };
        format!(
            "paused            {}\n{}\
             send queue        {} visible, {} in flight, {} delayed (normal lane)\n\
             urgent lane       {} visible, {} in flight, {} delayed\n{}\
             dlq               {} ({})\n\
             unreleased        {}\n\
             projected drain   {:.1} s for both lanes' backlog at the quota\n\
             slo today         {}\n{}\
             cost              {} requests, no scan\n",
            self.paused
                .as_ref()
                .map_or("no".to_owned(), |p| format!("YES since {} by {}: {}", p.since, p.owner, p.reason)),
            self.channels_paused
                .iter()
                .map(|(c, p)| format!(
                    "  channel {c:<8} {}\n",
                    p.as_ref().map_or("not paused".to_owned(), |p| format!(
                        "PAUSED since {} by {}: {}",
                        p.since, p.owner, p.reason
                    ))
                ))
                .collect::<String>(),
            self.send_visible,
            self.send_in_flight,
            self.send_delayed,
            self.urgent_visible,
            self.urgent_in_flight,
            self.urgent_delayed,
            self.channel_queues
                .iter()
                .map(|(c, q)| format!(
                    "  channel {c:<8} queue {} visible, {} in flight, {} delayed; urgent lane {} visible, {} in flight, {} delayed\n",
                    q.queue.visible,
                    q.queue.in_flight,
                    q.queue.delayed,
                    q.urgent.visible,
                    q.urgent.in_flight,
                    q.urgent.delayed
                ))
                .collect::<String>(),
            self.dlq,
            reasons,
            self.oldest_unreleased_seconds.map_or_else(
                || "every renewal due by now was released".to_owned(),
                |s| format!("the oldest due renewal has waited {s:.1} s for the scheduler")
            ),
            self.projected_drain_seconds,
            self.slo_line(),
            self.producer_lines(),
            self.requests,
        )
    }
}

impl Status {
    fn producer_lines(&self) -> String {
        let mut out = String::new();
        if let Some(c) = &self.commands {
            out += &format!(
                "commands          {} visible, {} in flight; commands dlq {}{}\n",
                c.queue.visible,
                c.queue.in_flight,
                c.dlq,
                if c.dlq > 0 { " (read their reason: docs/operations.md#commands-rejected)" } else { "" }
            );
        }
        match &self.outbox {
            Some(o) => {
                out += &format!(
                    "outcome events    {}\n",
                    match o.oldest_seconds {
                        None => "every outcome published".to_owned(),
                        Some(s) => format!("{} records unpublished, the oldest for {s:.0} s", o.pending),
                    }
                )
            }
            None => {
                out += "outcome events    unavailable (the ledger's `outbox` index could not be read; a stack from before it: update the stack)\n"
            }
        }
        out
    }

    fn slo_line(&self) -> String {
        match (&self.slo_today, &self.slo_unavailable) {
            (Some(s), _) => {
                let worst: Vec<String> = s
                    .worst_tenants
                    .iter()
                    .map(|t| format!("{} ({} breached)", t.tenant_id, t.counts.breached))
                    .collect();
                let mut line = s.line();
                if !worst.is_empty() {
                    line += &format!("\n                  worst tenants: {}", worst.join(", "));
                }
                for (c, s) in &self.slo_today_by_channel {
                    line += &format!("\n  channel {c:<8} {}", s.line());
                }
                line
            }
            (None, why) => format!("unavailable: {}", why.as_deref().unwrap_or("unknown")),
        }
    }
}

/// How far back `status` counts dead-lettered reminders: the DLQ's retention.
pub const DLQ_RETENTION: chrono::TimeDelta = chrono::TimeDelta::days(14);

/// Reads the queues' attributes (3 requests, and one per channel queue and urgent lane), the
/// pause switch (1 `GetItem`, and one per declared channel's), the ledger's
/// sparse `dead` index (one `Select=COUNT` `Query` per reason code, reading only dead-lettered
/// keys) and the renewals' `due` index (16 `Query`s of one item). No Scan: the cost does not
/// grow with the tables (docs/commands.md#punctual-status).
///
/// With `slo`, also today's deadline SLO: `reconcile`'s judgement of 00:00 UTC → now, which
/// reads today's due population (16 `Query`s on the `by_day_channel` index plus one page per ~4,000
/// renewals, one `BatchGetItem` per 100 released ones, and the DLQ only when a released
/// reminder is in no terminal state): O(today's due population), 13 s for 200,000 on DynamoDB
/// Local. `--no-slo` leaves it out for the constant-cost status.
pub async fn status(target: &Target, slo: bool) -> Result<Status, OpsError> {
    let (ddb, queues) = target.clients().await;
    status_with(target, ddb, &queues, slo).await
}

/// [`status`] over given clients (a test counts what it sends).
pub async fn status_with(
    target: &Target,
    ddb: aws_sdk_dynamodb::Client,
    queues: &punctual_aws::sqs::SqsQueues,
    slo: bool,
) -> Result<Status, OpsError> {
    let mut requests = 0u32;
    let send = queues.depth_of(queues.send_url()).await.map_err(step("reading the send queue"))?;
    requests += 1;
    let urgent = if queues.has_urgent_lane() {
        requests += 1;
        queues.depth_of(queues.urgent_url()).await.map_err(step("reading the urgent lane"))?
    } else {
        punctual_aws::sqs::Depth::default()
    };
    let dlq = queues.depth_of(queues.dlq_url()).await.map_err(step("reading the DLQ"))?;
    requests += 1;
    let mut channel_queues = BTreeMap::new();
    for (name, queue, urgent) in queues.own_depths().await.map_err(step("reading a channel's queues"))? {
        channel_queues.insert(name, ChannelQueues { queue: queue.into(), urgent: urgent.into() });
    }
    requests += target.resources.channels.iter().map(crate::reconcile::own_queues).sum::<u64>() as u32;
    let now = Utc::now();
    let ledger = DynamoLedger::new(ddb.clone(), &target.resources.ledger_table);
    let (dlq_by_reason, pages) =
        ledger.dead_by_reason(now - DLQ_RETENTION).await.map_err(step("reading the ledger's dead index"))?;
    requests += pages;
    let renewals = punctual_aws::renewals::DynamoRenewals::new(ddb.clone(), target.resources.renewals_table.clone());
    let oldest = renewals.oldest_unreleased(now).await.map_err(step("reading the renewals' due index"))?;
    requests += punctual_aws::renewals::DUE_SHARDS;
    let paused = DynamoControl::new(ddb.clone(), &target.resources.ledger_table)
        .pause()
        .await
        .map_err(step("reading the pause switch"))?;
    requests += 1;
    let mut channels_paused = BTreeMap::new();
    for c in &target.resources.channels {
        let p = DynamoControl::for_channel(ddb.clone(), &target.resources.ledger_table, &c.name)
            .pause()
            .await
            .map_err(step("reading a channel's pause switch"))?;
        requests += 1;
        channels_paused.insert(c.name.clone(), p);
    }
    // The producers' side: the commands queue and its DLQ, and the outbox.
    let r = &target.resources;
    let commands = if r.commands_queue_url.is_empty() {
        None
    } else {
        let queue = queues.depth_of(&r.commands_queue_url).await.map_err(step("reading the commands queue"))?;
        requests += 1;
        let dlq = if r.commands_dlq_url.is_empty() {
            0
        } else {
            requests += 1;
            queues.depth_of(&r.commands_dlq_url).await.map_err(step("reading the commands DLQ"))?.total()
        };
        Some(CommandsStatus { queue: queue.into(), dlq })
    };
    let outbox = match ledger.outbox_summary().await {
        Ok((pending, oldest, n)) => {
            requests += n;
            Some(OutboxStatus {
                pending,
                oldest_seconds: oldest.map(|t| (now - t).num_milliseconds().max(0) as f64 / 1000.0),
            })
        }
        // A ledger table from before the index.
        Err(_) => None,
    };
    // Today's SLO: reconcile's judgement of 00:00 UTC → now, O(today's due population).
    let mut slo_today_by_channel = BTreeMap::new();
    let (slo_today, slo_unavailable) = match crate::reconcile::slo_policy() {
        _ if !slo => (None, Some("not read (--no-slo)".to_owned())),
        Err(e) => (None, Some(e.to_string())),
        Ok(policy) => {
            let window = crate::reconcile::Window {
                from: now.date_naive().and_hms_opt(0, 0, 0).map_or(now, |t| t.and_utc()),
                to: now + TimeDelta::milliseconds(1),
                tenant: None,
                channel: None,
                grace: punctual_core::reconcile::DEFAULT_GRACE,
            };
            match crate::reconcile::reconcile_with(target, ddb.clone(), queues, &window, &policy, false, false).await {
                Ok((r, n)) => {
                    requests += n;
                    // Per channel when the deployment declares them (with one provider the
                    // rows' single channel would repeat the line above).
                    if !target.resources.channels.is_empty() {
                        slo_today_by_channel = r.channels.into_iter().map(|(c, a)| (c, a.slo)).collect();
                    }
                    (Some(r.slo), None)
                }
                Err(e) => (
                    None,
                    Some(format!("{e}: {}", std::error::Error::source(&e).map_or_else(String::new, |s| s.to_string()))),
                ),
            }
        }
    };
    Ok(Status {
        send_visible: send.visible,
        send_in_flight: send.in_flight,
        send_delayed: send.delayed,
        urgent_visible: urgent.visible,
        urgent_in_flight: urgent.in_flight,
        urgent_delayed: urgent.delayed,
        dlq: dlq.total(),
        dlq_by_reason,
        oldest_unreleased_seconds: oldest.map(|t| (now - t).num_milliseconds().max(0) as f64 / 1000.0),
        projected_drain_seconds: (send.total() + urgent.total()) as f64 / target.quota,
        channel_queues,
        paused,
        channels_paused,
        commands,
        outbox,
        slo_today,
        slo_today_by_channel,
        slo_unavailable,
        requests,
    })
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
    /// The renewal whose reminder it is, and what `reconcile` says of it (absent when no row of
    /// the renewals table names this reminder any more: moved to another due date, or gone).
    pub renewal: Option<RenewalSeen>,
}

/// A reminder's renewal as the renewals table has it, and what `punctual reconcile` says of the
/// two together (the same judgement, over a window of this one renewal).
#[derive(Debug, Clone, Serialize)]
pub struct RenewalSeen {
    /// Tenant.
    pub tenant_id: String,
    /// Renewal.
    pub renewal_id: String,
    /// `active`, `cancelled` or `paid`.
    pub status: String,
    /// Where the scheduler left it: `not released`, `released <time>`, `expired at release`.
    pub release: String,
    /// Due from.
    pub deliver_after: DateTime<Utc>,
    /// Deadline.
    pub deliver_by: DateTime<Utc>,
    /// Reconcile's bucket: `delivered`, `expired`, `cancelled`, `dead_lettered`, `excluded`,
    /// `waiting` or `unaccounted`.
    pub reconcile: String,
    /// What reconcile's bucket means for it, in words.
    pub verdict: String,
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
        if let Some(r) = &self.renewal {
            // The verdict in words once: `why` already says it when the row decided.
            let verdict = if self.why.contains(&r.verdict) { String::new() } else { format!(": {}", r.verdict) };
            out.push_str(&format!(
                "renewal           {}/{} {}, {}; due {} by {}\nreconcile         {}{verdict}\n",
                r.tenant_id,
                r.renewal_id,
                r.status,
                r.release,
                r.deliver_after.to_rfc3339(),
                r.deliver_by.to_rfc3339(),
                r.reconcile,
            ));
        }
        out
    }
}

/// How far back `explain` looks for the renewal of a reminder the ledger has no record of: as
/// far as `reconcile` reaches (the ledger keeps its records 30 days past `deliver_by`).
pub const EXPLAIN_DAYS_BACK: u64 = 31;
/// How far ahead: the longest window, a week.
pub const EXPLAIN_DAYS_AHEAD: u64 = 7;

/// The UTC days whose `by_day_channel` partitions may hold `rec`'s renewal: the day of its
/// `deliver_after` and its neighbours (a move to another send time keeps the reminder id and may
/// cross midnight) when the ledger knows it; otherwise today, then each day back to
/// [`EXPLAIN_DAYS_BACK`] days ago, then each day ahead to [`EXPLAIN_DAYS_AHEAD`].
fn days_to_search(rec: Option<&LedgerRecord>, now: DateTime<Utc>) -> Vec<chrono::NaiveDate> {
    let shift = |d: chrono::NaiveDate, n: i64| d.checked_add_signed(TimeDelta::days(n));
    if let Some(after) = rec.and_then(|r| r.deliver_after) {
        let d = after.date_naive();
        return [Some(d), shift(d, -1), shift(d, 1)].into_iter().flatten().collect();
    }
    let today = now.date_naive();
    (0..=EXPLAIN_DAYS_BACK as i64)
        .map(|n| shift(today, -n))
        .chain((1..=EXPLAIN_DAYS_AHEAD as i64).map(|n| shift(today, n)))
        .flatten()
        .collect()
}

/// Explains a reminder id, or a message id found on the DLQ (its `original_message_id` or its
/// own id): the ledger's record, and the renewal's row with what `reconcile` says of both
/// (docs/commands.md#punctual-explain). A reminder no sender has recorded (never released,
/// expired at release, a letter the queue's backstop moved) is explained from its row.
pub async fn explain(target: &Target, id: &str) -> Result<Explanation, OpsError> {
    let (ddb, queues) = target.clients().await;
    let ledger = DynamoLedger::new(ddb.clone(), &target.resources.ledger_table);
    let rid = match ReminderId::parse(id) {
        Ok(r) => r,
        Err(_) => find_in_dlq(&queues, id).await?.ok_or_else(|| {
            OpsError::NotFound(format!("{id:?} is not a reminder id (rem_…) and no DLQ message has that id"))
        })?,
    };
    let rec = ledger.get(&rid).await.map_err(step("reading the ledger"))?;
    let now = Utc::now();
    let days = days_to_search(rec.as_ref(), now);
    let renewals = punctual_aws::renewals::DynamoRenewals::new(ddb, target.resources.renewals_table.clone());
    let (row, _) = renewals
        .find_reminder(&rid, days.iter().copied())
        .await
        .map_err(step("reading the renewals table's by_day_channel index"))?;
    let (seen, letter) = match &row {
        Some(row) => {
            let (seen, letter) = reconcile_one(&queues, row, rec.as_ref(), now).await?;
            (Some(seen), letter)
        }
        None => (None, None),
    };
    match (rec, seen) {
        (Some(rec), seen) => {
            let mut e = explanation(&rec, now, target);
            // A cancellation the renewal has superseded since (active again, re-armed): the
            // record no longer says where the reminder is; reconcile, from the row, does.
            if let Some(s) =
                seen.as_ref().filter(|s| rec.state == ReminderState::Cancelled && s.reconcile != "cancelled")
            {
                e.why = format!(
                    "cancelled at send earlier, but the renewal is active again and was re-armed since: {}",
                    s.verdict
                );
            }
            Ok(Explanation { renewal: seen, ..e })
        }
        (None, Some(seen)) => Ok(unrecorded(&rid, seen, letter, now, target)),
        (None, None) => {
            let span = match (days.iter().min(), days.iter().max()) {
                (Some(a), Some(b)) => format!(" between {a} and {b}"),
                _ => String::new(),
            };
            Err(OpsError::NotFound(format!(
                "no ledger record for {rid}, and no renewal of the renewals table is due with it{span}: not a reminder of this deployment, a renewal moved to another due date since (another reminder id), or older than the ledger keeps"
            )))
        }
    }
}

/// Reconcile's judgement of one renewal: its row, its ledger record, the lanes' depth, and —
/// when it is released and in no terminal state, as reconcile reads it — its letter in the DLQ.
/// Returns the letter's reason too.
async fn reconcile_one(
    queues: &SqsQueues,
    row: &punctual_core::reconcile::DueRow,
    rec: Option<&LedgerRecord>,
    now: DateTime<Utc>,
) -> Result<(RenewalSeen, Option<String>), OpsError> {
    use punctual_core::reconcile::{DEFAULT_GRACE, ReconcileInput, ReleaseState, open_releases, reconcile};
    let records: std::collections::HashMap<ReminderId, LedgerRecord> =
        rec.map(|r| (r.reminder_id.clone(), r.clone())).into_iter().collect();
    let rows = std::slice::from_ref(row);
    let queued = crate::reconcile::lanes_hold(queues).await?.of(punctual_core::reconcile::channel_key(row));
    let mut letter = None;
    if open_releases(rows, &records) > 0 {
        letter = crate::dlq::letter_of(queues, row.reminder_id.as_str(), crate::reconcile::DLQ_READ_MAX)
            .await
            .map_err(step("reading the DLQ"))?;
    }
    let in_dlq: std::collections::HashMap<String, String> =
        letter.iter().map(|reason| (row.reminder_id.to_string(), reason.clone())).collect();
    let r = reconcile(&ReconcileInput {
        from: row.deliver_after,
        to: row.deliver_after + TimeDelta::milliseconds(1),
        tenant: None,
        channel: None,
        rows,
        records: &records,
        queued,
        in_dlq: &in_dlq,
        now,
        grace: DEFAULT_GRACE,
        policy: &punctual_core::slo::SloPolicy::default(),
    });
    let at = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let release = match row.release {
        ReleaseState::Scheduled => "not released".to_owned(),
        ReleaseState::Enqueued(Some(t)) => format!("released {}", at(t)),
        ReleaseState::Enqueued(None) => "released".to_owned(),
        ReleaseState::ExpiredAtRelease => "expired at release".to_owned(),
    };
    let ended = rec.is_some_and(|r| r.state.is_terminal());
    let (bucket, verdict) = if let Some(u) = r.unaccounted_reminders.first() {
        let why = match u.problem {
            punctual_core::reconcile::Problem::NeverReleased => format!(
                "never released: due since {} and still pending in the renewals table past reconcile's {} s grace; the scheduler releases what is due on its 1-minute tick — is delivery paused (`punctual status`), or the scheduler failing or not ticking?",
                at(row.deliver_after),
                DEFAULT_GRACE.as_secs()
            ),
            punctual_core::reconcile::Problem::ReleasedNotOnAnyQueue => format!(
                "released {}on no queue: no sender recorded an outcome, and the lanes hold no message — its message was lost",
                u.released_at.map(|t| format!("{}, ", at(t))).unwrap_or_default()
            ),
            punctual_core::reconcile::Problem::PossiblyLost => {
                "possibly lost: the lanes hold fewer messages than such reminders".to_owned()
            }
        };
        ("unaccounted", format!("UNACCOUNTED ({}), {why}", u.problem.as_str()))
    } else if r.delivered > 0 {
        ("delivered", "delivered".to_owned())
    } else if r.expired > 0 && row.release == ReleaseState::ExpiredAtRelease && !ended {
        (
            "expired",
            "expired at release (missed_schedule_window): the scheduler found it past its deliver_by and never sent it; counted late".to_owned(),
        )
    } else if r.expired > 0 {
        ("expired", "expired: its deliver_by passed before it was delivered; counted late".to_owned())
    } else if r.cancelled > 0 {
        (
            "cancelled",
            "cancelled at send: the renewal was not due when its copy came (cancelled, paid, or moved)".to_owned(),
        )
    } else if let Some(reason) = r.dead_lettered.keys().next() {
        let why = if reason == crate::dlq::BACKSTOP {
            "dead-lettered as receive_count_backstop: SQS moved its message to the DLQ after maxReceiveCount receives with no outcome recorded (a sender that crashed or timed out each time); nothing retries it until an operator redrives it".to_owned()
        } else {
            format!("dead-lettered ({reason}): nothing retries it until an operator redrives it")
        };
        ("dead_lettered", why)
    } else if let Some(status) = r.excluded.keys().next() {
        ("excluded", format!("not due: the renewal is {status}; nothing is sent, and the SLO leaves it out"))
    } else if r.waiting.on_queue > 0 {
        (
            "waiting",
            format!(
                "released and waiting on a lane (the lanes hold {} messages); no sender has recorded an outcome yet",
                r.queued_messages
            ),
        )
    } else {
        (
            "waiting",
            format!(
                "not released yet: due at {}; the scheduler releases it ahead of that, on its 1-minute tick",
                at(row.deliver_after)
            ),
        )
    };
    let seen = RenewalSeen {
        tenant_id: row.tenant_id.clone(),
        renewal_id: row.renewal_id.clone(),
        status: row.status.as_str().to_owned(),
        release,
        deliver_after: row.deliver_after,
        deliver_by: row.deliver_by,
        reconcile: bucket.to_owned(),
        verdict,
    };
    Ok((seen, letter))
}

/// What a redrive of a reminder would consume: nothing when it is delivered or past its
/// deadline, else one message, one token of the redrive share and a fresh attempt budget.
fn would_consume(delivered: bool, slack: f64, attempts: u32, target: &Target) -> String {
    let share = LimiterSettings::new(target.quota).redrive_share * target.quota;
    if delivered {
        "nothing: a redrive skips delivered reminders".to_owned()
    } else if slack <= 0.0 {
        "nothing: a redrive skips reminders past deliver_by".to_owned()
    } else {
        format!(
            "1 of the request's max_messages, 1 token of the redrive share ({share:.0}/s), and a fresh budget of {} provider attempts (it has made {attempts})",
            SenderPolicy::default().max_attempts
        )
    }
}

/// The answers `explain` gives for a reminder the ledger has no record of, from its renewal.
fn unrecorded(
    rid: &ReminderId,
    seen: RenewalSeen,
    letter: Option<String>,
    now: DateTime<Utc>,
    target: &Target,
) -> Explanation {
    let slack = (seen.deliver_by - now).num_milliseconds() as f64 / 1000.0;
    let would = if letter.is_some() {
        would_consume(false, slack, 0, target)
    } else {
        "nothing: no letter of it is in the DLQ".to_owned()
    };
    Explanation {
        reminder_id: rid.to_string(),
        state: seen.reconcile.clone(),
        attempts: 0,
        why: format!("no sender has recorded it; {}", seen.verdict),
        next_eligible: None,
        deliver_by: seen.deliver_by,
        slack_seconds: slack,
        dlq_reason: letter,
        redrive_lineage: Vec::new(),
        redrive_would_consume: would,
        history: Vec::new(),
        renewal: Some(seen),
    }
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
        // A lease is a holder only while it runs; one that ended without a settle is a
        // sender that stopped mid-work (a crash, a timeout), and the copy returns when its
        // visibility timeout ends.
        ReminderState::Leased if rec.lease_until.is_some_and(|l| l > now) => format!(
            "a sender holds it right now (its lease ends {})",
            rec.lease_until.map(|l| l.format("%H:%M:%SZ").to_string()).unwrap_or_default()
        ),
        ReminderState::Leased => format!(
            "its sender stopped before recording an outcome (the lease ended {}){}; the message returns to its queue when its visibility timeout ends, and the next claim takes over",
            rec.lease_until.map_or("at an unknown time".to_owned(), |l| l.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
            if rec.call_owner.is_some() { ", in a provider call whose answer is unknown" } else { "" }
        ),
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
    let would = would_consume(rec.state == ReminderState::Delivered, slack, rec.attempts, target);
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
        renewal: None,
    }
}

async fn find_in_dlq(queues: &SqsQueues, id: &str) -> Result<Option<ReminderId>, OpsError> {
    let attr =
        |m: &punctual_aws::sqs::Received, k: &str| m.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let names_it = |m: &punctual_aws::sqs::Received| {
        m.message_id == id || attr(m, punctual_aws::sqs::attr::ORIGINAL_MESSAGE_ID).as_deref() == Some(id)
    };
    // Bounded like reconcile's read (100 missed a message deeper in a real DLQ); the peek
    // stops at the first message that names it, and every message read stays in the DLQ.
    let read = queues
        .peek(queues.dlq_url(), crate::reconcile::DLQ_READ_MAX, names_it)
        .await
        .map_err(step("reading the DLQ"))?;
    Ok(read
        .iter()
        .find(|m| names_it(m))
        .and_then(|m| attr(m, punctual_aws::sqs::attr::REMINDER_ID))
        .and_then(|r| ReminderId::parse(r).ok()))
}

// ---- redrive -------------------------------------------------------------------------------------

/// `punctual redrive` in process: the redrive function's own composition root and handler
/// against the target — the same caps, validation and refusals as the Lambda. A dry run first,
/// then (unless `dry_run`) the run itself.
pub async fn redrive(
    target: &Target,
    request: RedriveRequestWire,
) -> Result<(RedriveSummary, Option<RedriveSummary>), OpsError> {
    let config = target.redrive_config().map_err(step("reading the redrive configuration"))?;
    let (ddb, queues) = target.clients().await;
    let redriver = punctual_redrive::app::build(&config, &ddb, queues.client());
    // The same bound a Lambda invocation would have (15 min).
    let deadline = Utc::now() + TimeDelta::minutes(14);
    let dry_run = matches!(request.dry_run, Field::Given(true));
    let dry = RedriveRequestWire { dry_run: Field::Given(true), ..request.clone() };
    let summary = |a: Answer| match a {
        Answer::Done { summary } | Answer::Aborted { summary } => Ok(summary),
        Answer::Refused { problems, paused: true } => Err(OpsError::Paused(problems.join("; "))),
        Answer::Refused { problems, paused: false } => Err(OpsError::Invalid(problems)),
    };
    let function = Function { redriver: &redriver, caps: config.caps };
    let preview = summary(function.answer(dry, deadline).await.map_err(step("dry run"))?)?;
    if dry_run {
        return Ok((preview, None));
    }
    let done = summary(function.answer(request, deadline).await.map_err(step("redrive"))?)?;
    Ok((preview, Some(done)))
}

/// `punctual redrive --function NAME`: invokes the deployed redrive function through the
/// Lambda Invoke API with the same request. Returns the function's answer and whether it
/// reported a function error.
pub async fn redrive_function(
    target_endpoint: Option<&str>,
    name: &str,
    request: &RedriveRequestWire,
) -> Result<(serde_json::Value, bool), OpsError> {
    let config = match target_endpoint.filter(|e| !e.is_empty()) {
        Some(e) => punctual_aws::config::for_endpoint(e).await,
        None => punctual_aws::config::load().await,
    };
    let client = aws_sdk_lambda::Client::new(&config);
    let body = serde_json::to_vec(request).map_err(step("encoding the request"))?;
    let out = client
        .invoke()
        .function_name(name)
        .payload(aws_sdk_lambda::primitives::Blob::new(body))
        .send()
        .await
        .map_err(step("invoking the redrive function"))?;
    let text = out.payload().map(|p| String::from_utf8_lossy(p.as_ref()).into_owned()).unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    Ok((value, out.function_error().is_some()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Resources;
    use punctual_core::ports::HistoryEntry;
    use punctual_core::reason::ReasonCode;

    fn target() -> Target {
        Target { resources: Resources::default(), dynamodb_endpoint: None, quota: 100.0 }
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
            history_dropped: 0,
            release_id: None,
            call_owner: None,
            call_release: None,
            reminder_id: ReminderId::parse("rem_0123456789abcdef0123456789abcdef").unwrap(),
            state,
            attempts: 2,
            owner: None,
            lease_until: None,
            receipt: None,
            last_reason: reason,
            next_at: Some(now + TimeDelta::seconds(30)),
            deliver_after: Some(now - TimeDelta::minutes(2)),
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

    /// A lease that ended is not a sender holding the reminder.
    #[test]
    fn explain_tells_a_running_lease_from_one_that_ended() {
        let now = Utc::now();
        let t = target();
        let mut rec = record(ReminderState::Leased, None, None, now);
        rec.lease_until = Some(now + TimeDelta::seconds(20));
        assert!(explanation(&rec, now, &t).why.starts_with("a sender holds it right now"));
        rec.lease_until = Some(now - TimeDelta::minutes(5));
        rec.call_owner = Some("worker-1".into());
        let why = explanation(&rec, now, &t).why;
        assert!(!why.contains("holds it"), "{why}");
        assert!(why.contains("stopped before recording") && why.contains("answer is unknown"), "{why}");
    }
}
