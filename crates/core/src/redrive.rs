//! Operator redrive (DESIGN §7): a bounded, paced, audited move of dead-lettered reminders
//! back to the send queue, and the pause switch every function honours.
//!
//! The request is validated as a whole — every problem is listed, nothing moves on any. A run
//! writes its audit record first, receives from the DLQ, checks each message with the same
//! decoder the sender uses, leaves what the selection does not match, skips (and leaves) what
//! is already delivered or past `deliver_by`, sends the rest back stamped with the redrive id
//! (same `reminder_id`, so the same idempotency key; the ledger keeps the attempt history) at
//! most `max_per_second`, deletes from the DLQ only what was sent, watches a canary first and
//! stops when the abort threshold trips, before the invocation deadline, or at `max_messages`.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::clock::{Clock, add, until};
use crate::contract::{RedriveStamp, ReminderMessage};
use crate::ids::{RedriveId, ReminderId, TenantId};
use crate::ports::{BoxError, Ledger, LedgerError};
use crate::reason::{ReasonCode, ReminderState};

/// Hard caps from configuration; a request above them is refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedriveCaps {
    /// Most messages one request may move (`REDRIVE_MAX_MESSAGES`).
    pub max_messages: u32,
    /// Highest rate a request may ask for: min(`REDRIVE_MAX_PER_SECOND`, redrive share × quota).
    pub max_per_second: f64,
}

/// Which dead letters a request selects (all lists: any of; empty: no constraint).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Selection {
    /// DLQ `reason` attribute.
    pub failure_reasons: Vec<ReasonCode>,
    /// Tenants.
    pub tenants: Vec<TenantId>,
    /// Reminders.
    pub reminder_ids: Vec<ReminderId>,
    /// First enqueued strictly before.
    pub enqueued_before: Option<DateTime<Utc>>,
    /// First enqueued at or after.
    pub enqueued_after: Option<DateTime<Utc>>,
}

/// When to abort after the canary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AbortIf {
    /// Abort when more than this fraction of settled redriven reminders failed again.
    pub failure_ratio: f64,
    /// Abort when more than this fraction of their provider answers were 429.
    pub ratio_429: Option<f64>,
    /// Outcomes are checked every `window` moves.
    pub window: u32,
}

impl Default for AbortIf {
    fn default() -> Self {
        Self { failure_ratio: 0.0, ratio_429: None, window: 20 }
    }
}

/// A validated redrive request (schema: README, "Redrive").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RedriveRequest {
    /// Why (required, non-empty).
    pub reason: String,
    /// Who (required, non-empty).
    pub owner: String,
    /// What.
    pub selection: Selection,
    /// Most to move.
    pub max_messages: u32,
    /// Pace.
    pub max_per_second: f64,
    /// Moved first and watched before the rest.
    pub canary: u32,
    /// How long to wait for the canary to settle (`canary_timeout_seconds`, 1..=840; default:
    /// the service's, 60 s). A canary joins the back of the send queue: behind a large
    /// backlog it needs about as long as the backlog takes to drain.
    pub canary_timeout: Option<Duration>,
    /// Abort thresholds.
    pub abort_if: AbortIf,
    /// Count only; move nothing.
    pub dry_run: bool,
}

fn text(obj: &Map<String, Value>, key: &str, problems: &mut Vec<String>) -> String {
    match obj.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
        Some(Value::String(_)) => {
            problems.push(format!("{key} must not be empty"));
            String::new()
        }
        None | Some(Value::Null) => {
            problems.push(format!("{key} is required"));
            String::new()
        }
        Some(_) => {
            problems.push(format!("{key} must be a string"));
            String::new()
        }
    }
}

fn list<T>(
    obj: &Map<String, Value>,
    key: &str,
    parse: impl Fn(&str) -> Result<T, String>,
    problems: &mut Vec<String>,
) -> Vec<T> {
    match obj.get(key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v.as_str().map(&parse) {
                Some(Ok(t)) => Some(t),
                Some(Err(e)) => {
                    problems.push(format!("selection.{key}[{i}]: {e}"));
                    None
                }
                None => {
                    problems.push(format!("selection.{key}[{i}] must be a string"));
                    None
                }
            })
            .collect(),
        Some(_) => {
            problems.push(format!("selection.{key} must be an array of strings"));
            Vec::new()
        }
    }
}

fn instant(obj: &Map<String, Value>, key: &str, problems: &mut Vec<String>) -> Option<DateTime<Utc>> {
    match obj.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match DateTime::parse_from_rfc3339(s) {
            Ok(t) => Some(t.with_timezone(&Utc)),
            Err(_) => {
                problems.push(format!("selection.{key} must be an RFC 3339 instant, got {s:?}"));
                None
            }
        },
        Some(_) => {
            problems.push(format!("selection.{key} must be an RFC 3339 string"));
            None
        }
    }
}

fn ratio(obj: &Map<String, Value>, key: &str, problems: &mut Vec<String>) -> Option<f64> {
    match obj.get(key) {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => Some(x),
            _ => {
                problems.push(format!("abort_if.{key} must be a number in [0, 1]"));
                None
            }
        },
    }
}

const KNOWN: [&str; 9] = [
    "reason",
    "owner",
    "selection",
    "max_messages",
    "max_per_second",
    "canary",
    "canary_timeout_seconds",
    "abort_if",
    "dry_run",
];

impl RedriveRequest {
    /// Parses and validates a JSON request against `caps`. On failure returns **every**
    /// problem found, each naming its field.
    pub fn parse(json: &str, caps: RedriveCaps) -> Result<Self, Vec<String>> {
        let value: Value = serde_json::from_str(json).map_err(|e| vec![format!("not JSON: {e}")])?;
        let Value::Object(obj) = value else { return Err(vec!["the request must be a JSON object".into()]) };
        Self::from_object(&obj, caps)
    }

    /// Validates an already-parsed object (see [`RedriveRequest::parse`]).
    pub fn from_object(obj: &Map<String, Value>, caps: RedriveCaps) -> Result<Self, Vec<String>> {
        let mut p = Vec::new();
        for k in obj.keys().filter(|k| !KNOWN.contains(&k.as_str())) {
            p.push(format!("unknown field {k:?}"));
        }
        let reason = text(obj, "reason", &mut p);
        let owner = text(obj, "owner", &mut p);
        let empty = Map::new();
        let sel = match obj.get("selection") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(m)) => m,
            Some(_) => {
                p.push("selection must be an object".into());
                &empty
            }
        };
        let selection = Selection {
            failure_reasons: list(
                sel,
                "failure_reasons",
                |s| s.parse::<ReasonCode>().map_err(|e| e.to_string()),
                &mut p,
            ),
            tenants: list(sel, "tenants", |s| TenantId::parse(s).map_err(|e| e.to_string()), &mut p),
            reminder_ids: list(sel, "reminder_ids", |s| ReminderId::parse(s).map_err(|e| e.to_string()), &mut p),
            enqueued_before: instant(sel, "enqueued_before", &mut p),
            enqueued_after: instant(sel, "enqueued_after", &mut p),
        };
        if let (Some(a), Some(b)) = (selection.enqueued_after, selection.enqueued_before)
            && a >= b
        {
            p.push("selection.enqueued_after must be before selection.enqueued_before".into());
        }
        let max_messages = match obj.get("max_messages").map(Value::as_u64) {
            None => {
                p.push("max_messages is required".into());
                0
            }
            Some(Some(n)) if n >= 1 && n <= u64::from(caps.max_messages) => n as u32,
            Some(_) => {
                p.push(format!("max_messages must be an integer in 1..={} (the configured cap)", caps.max_messages));
                0
            }
        };
        let max_per_second = match obj.get("max_per_second").map(Value::as_f64) {
            None => {
                p.push("max_per_second is required".into());
                0.0
            }
            Some(Some(r)) if r > 0.0 && r <= caps.max_per_second => r,
            Some(_) => {
                p.push(format!(
                    "max_per_second must be a number in (0, {}] (the redrive share of the quota)",
                    caps.max_per_second
                ));
                0.0
            }
        };
        let canary = match obj.get("canary") {
            None | Some(Value::Null) => 0,
            Some(v) => match v.as_u64() {
                Some(n) if max_messages == 0 || n <= u64::from(max_messages) => n as u32,
                _ => {
                    p.push("canary must be an integer no larger than max_messages".into());
                    0
                }
            },
        };
        let canary_timeout = match obj.get("canary_timeout_seconds") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=840).contains(&n) => Some(Duration::from_secs(n)),
                _ => {
                    p.push(
                        "canary_timeout_seconds must be an integer in 1..=840 (a run lasts at most 15 minutes)".into(),
                    );
                    None
                }
            },
        };
        let mut abort_if = AbortIf::default();
        match obj.get("abort_if") {
            None | Some(Value::Null) => {}
            Some(Value::Object(a)) => {
                for k in a.keys().filter(|k| !["failure_ratio", "ratio_429", "window"].contains(&k.as_str())) {
                    p.push(format!("unknown field abort_if.{k}"));
                }
                if let Some(x) = ratio(a, "failure_ratio", &mut p) {
                    abort_if.failure_ratio = x;
                }
                abort_if.ratio_429 = ratio(a, "ratio_429", &mut p);
                match a.get("window").map(Value::as_u64) {
                    None => {}
                    Some(Some(w)) if (1..=10_000).contains(&w) => abort_if.window = w as u32,
                    Some(_) => p.push("abort_if.window must be an integer in 1..=10000".into()),
                }
            }
            Some(_) => p.push("abort_if must be an object".into()),
        }
        let dry_run = match obj.get("dry_run") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                p.push("dry_run must be true or false".into());
                false
            }
        };
        if p.is_empty() {
            Ok(Self {
                reason,
                owner,
                selection,
                max_messages,
                max_per_second,
                canary,
                canary_timeout,
                abort_if,
                dry_run,
            })
        } else {
            Err(p)
        }
    }
}

impl Selection {
    /// True when a dead letter with this message, DLQ reason and first-enqueued time is selected.
    pub fn matches(
        &self,
        msg: &ReminderMessage,
        reason: Option<ReasonCode>,
        first_enqueued: Option<DateTime<Utc>>,
    ) -> bool {
        let any = |empty: bool, hit: bool| empty || hit;
        any(self.failure_reasons.is_empty(), reason.is_some_and(|r| self.failure_reasons.contains(&r)))
            && any(self.tenants.is_empty(), self.tenants.contains(&msg.tenant_id))
            && any(self.reminder_ids.is_empty(), self.reminder_ids.contains(&msg.reminder_id))
            && self.enqueued_before.is_none_or(|b| first_enqueued.is_some_and(|t| t < b))
            && self.enqueued_after.is_none_or(|a| first_enqueued.is_some_and(|t| t >= a))
    }
}

// ---- ports -----------------------------------------------------------------------------------

/// One message received from the DLQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Receipt handle (delete / release).
    pub handle: String,
    /// The DLQ's message id.
    pub message_id: String,
    /// The body as quarantined.
    pub body: String,
    /// The `reason` attribute.
    pub reason: Option<String>,
    /// The `first_enqueued` attribute.
    pub first_enqueued: Option<DateTime<Utc>>,
}

/// The DLQ as the redrive sees it.
pub trait DeadLetters: Send + Sync {
    /// Receives up to 10; each stays invisible until deleted or released.
    fn receive(&self) -> impl Future<Output = Result<Vec<DeadLetter>, BoxError>> + Send;
    /// Sends `body` to the send queue.
    fn send_back(&self, body: &str) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// Deletes a moved message from the DLQ.
    fn delete(&self, handle: &str) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// Makes a message visible again (left in the DLQ).
    fn release(&self, handles: &[String]) -> impl Future<Output = Result<(), BoxError>> + Send;
}

/// The pause switch (`punctual pause` / `resume`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    /// Why.
    pub reason: String,
    /// Who.
    pub owner: String,
    /// Since when.
    pub since: DateTime<Utc>,
}

/// The run's audit record (one per redrive, kept in the ledger table).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    /// The redrive id.
    pub id: RedriveId,
    /// The validated request (who, why, selection, caps).
    pub request: RedriveRequest,
    /// Started.
    pub started_at: DateTime<Utc>,
    /// Finished (`None` while running).
    pub finished_at: Option<DateTime<Utc>>,
    /// Counts and outcome, once finished.
    pub summary: Option<RedriveSummary>,
}

/// Where the pause switch and the audit records live.
pub trait Control: Send + Sync {
    /// The pause in force, if any.
    fn pause(&self) -> impl Future<Output = Result<Option<Pause>, BoxError>> + Send;
    /// Sets (Some) or lifts (None) the pause, and records who did it.
    fn set_pause(&self, pause: Option<&Pause>, by: &str) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// Writes (or overwrites) an audit record.
    fn put_audit(&self, record: &AuditRecord) -> impl Future<Output = Result<(), BoxError>> + Send;
}

// ---- the run ---------------------------------------------------------------------------------

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RedriveSummary {
    /// The redrive id (audit record key).
    pub redrive_id: String,
    /// Dry run: nothing moved.
    pub dry_run: bool,
    /// Matched the selection.
    pub selected: u64,
    /// Sent back and deleted from the DLQ (dry run: would be).
    pub moved: u64,
    /// Selected but not moved, by why (left in the DLQ).
    pub skipped: BTreeMap<String, u64>,
    /// Not selected, or not reached (caps, abort, deadline): left in the DLQ.
    pub left: u64,
    /// Canary reminders moved, and how many of them failed again.
    pub canary_moved: u64,
    /// Of the canary, failed again (dead-lettered, expired, or unsettled in time).
    pub canary_failed: u64,
    /// Why the run stopped early, if it did.
    pub aborted: Option<String>,
    /// Measured send rate (moved ÷ seconds from first to last send).
    pub measured_per_second: f64,
    /// The reminders moved (lineage; `explain` shows them).
    pub moved_ids: Vec<String>,
}

/// Why a run did not start or failed.
#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    /// Delivery is paused.
    #[error("delivery is paused by {owner} ({reason}); `punctual resume` first")]
    Paused {
        /// Who paused.
        owner: String,
        /// Why.
        reason: String,
    },
    /// The request is invalid; every problem is listed.
    #[error("invalid redrive request: {}", .0.join("; "))]
    Invalid(Vec<String>),
    /// A port failed.
    #[error("{what}")]
    Port {
        /// What was being done.
        what: &'static str,
        /// Why.
        #[source]
        source: BoxError,
    },
}

fn port<E: Into<BoxError>>(what: &'static str) -> impl FnOnce(E) -> RedriveError {
    move |e| RedriveError::Port { what, source: e.into() }
}

/// The redrive service.
pub struct Redriver<L, D, K, C> {
    ledger: L,
    dlq: D,
    control: K,
    clock: C,
    /// How long to wait for the canary to settle.
    pub canary_timeout: Duration,
    /// Stop this long before the invocation deadline.
    pub margin: Duration,
}

impl<L: Ledger, D: DeadLetters, K: Control, C: Clock> Redriver<L, D, K, C> {
    /// Composes the service.
    pub fn new(ledger: L, dlq: D, control: K, clock: C) -> Self {
        Self { ledger, dlq, control, clock, canary_timeout: Duration::from_secs(60), margin: Duration::from_secs(5) }
    }

    /// The ledger (for tests).
    pub fn ledger(&self) -> &L {
        &self.ledger
    }

    /// Runs one request until done, aborted, or `deadline - margin`.
    pub async fn run(&self, req: &RedriveRequest, deadline: DateTime<Utc>) -> Result<RedriveSummary, RedriveError> {
        if let Some(p) = self.control.pause().await.map_err(port("reading the pause switch"))? {
            return Err(RedriveError::Paused { owner: p.owner, reason: p.reason });
        }
        let started = self.clock.now();
        let id = RedriveId::parse(format!(
            "rd-{}-{:04x}",
            started.format("%Y%m%dT%H%M%S%3f"),
            started.timestamp_subsec_nanos() % 0xffff
        ))
        .map_err(port("making the redrive id"))?;
        let mut audit =
            AuditRecord { id: id.clone(), request: req.clone(), started_at: started, finished_at: None, summary: None };
        self.control.put_audit(&audit).await.map_err(port("writing the audit record"))?;
        let stamp = RedriveStamp { id: id.clone(), reason: req.reason.clone(), owner: req.owner.clone() };
        let mut sum = RedriveSummary { redrive_id: id.to_string(), dry_run: req.dry_run, ..RedriveSummary::default() };
        let mut held: Vec<String> = Vec::new();
        let stop_at = deadline - TimeDelta::from_std(self.margin).unwrap_or_default();
        let interval = Duration::from_secs_f64(1.0 / req.max_per_second.max(1e-6));
        let mut next_send = self.clock.now();
        let (mut first_send, mut last_send) = (None, None);
        let mut canary_checked = req.canary == 0;
        let mut checked_at = 0u64;
        let result = async {
            'outer: loop {
                if self.clock.now() >= stop_at {
                    sum.aborted.get_or_insert_with(|| "stopped before the invocation deadline".into());
                    break;
                }
                let batch = self.dlq.receive().await.map_err(port("receiving from the DLQ"))?;
                if batch.is_empty() {
                    break;
                }
                for (i, dl) in batch.iter().enumerate() {
                    let done = sum.moved >= u64::from(req.max_messages) || sum.aborted.is_some();
                    if done || self.clock.now() >= stop_at {
                        held.extend(batch[i..].iter().map(|d| d.handle.clone()));
                        sum.left += (batch.len() - i) as u64;
                        if self.clock.now() >= stop_at {
                            sum.aborted.get_or_insert_with(|| "stopped before the invocation deadline".into());
                        }
                        break 'outer;
                    }
                    held.push(dl.handle.clone());
                    let Ok(mut msg) = ReminderMessage::decode(&dl.body) else {
                        // Redriving a malformed body cannot help; it stays for a human.
                        *sum.skipped.entry("malformed".into()).or_default() += 1;
                        continue;
                    };
                    let reason = dl.reason.as_deref().and_then(|r| r.parse::<ReasonCode>().ok());
                    if !req.selection.matches(&msg, reason, dl.first_enqueued) {
                        sum.left += 1;
                        continue;
                    }
                    sum.selected += 1;
                    let now = self.clock.now();
                    if msg.deliver_by <= now {
                        *sum.skipped.entry("past_deliver_by".into()).or_default() += 1;
                        continue;
                    }
                    let record = self.ledger.get(&msg.reminder_id).await.map_err(port("reading the ledger"))?;
                    if record.as_ref().is_some_and(|r| r.state == ReminderState::Delivered) {
                        *sum.skipped.entry("already_delivered".into()).or_default() += 1;
                        continue;
                    }
                    if req.dry_run {
                        sum.moved += 1;
                        continue;
                    }
                    // Pace: never faster than max_per_second.
                    let now = self.clock.now();
                    if next_send > now {
                        self.clock.sleep(until(now, next_send)).await;
                    }
                    next_send = add(self.clock.now().max(next_send), interval);
                    msg.redrive = Some(stamp.clone());
                    msg.attempt = record.as_ref().map_or(msg.attempt, |r| r.attempts.max(msg.attempt));
                    self.dlq.send_back(&msg.encode()).await.map_err(port("sending back to the send queue"))?;
                    held.pop();
                    self.dlq.delete(&dl.handle).await.map_err(port("deleting from the DLQ"))?;
                    let t = self.clock.now();
                    first_send.get_or_insert(t);
                    last_send = Some(t);
                    sum.moved += 1;
                    sum.moved_ids.push(msg.reminder_id.to_string());
                    if !canary_checked && sum.moved == u64::from(req.canary) {
                        canary_checked = true;
                        sum.canary_moved = sum.moved;
                        let wait = req.canary_timeout.unwrap_or(self.canary_timeout);
                        let failed = self.watch(&sum.moved_ids, Some(wait)).await?.failed;
                        sum.canary_failed = failed;
                        if failed as f64 > req.abort_if.failure_ratio * sum.canary_moved as f64 {
                            sum.aborted = Some(format!("canary: {failed} of {} failed again", sum.canary_moved));
                        }
                    } else if canary_checked && sum.moved - checked_at >= u64::from(req.abort_if.window) {
                        checked_at = sum.moved;
                        let o = self.watch(&sum.moved_ids, None).await?;
                        if o.settled > 0 && o.failed as f64 > req.abort_if.failure_ratio * o.settled as f64 {
                            sum.aborted =
                                Some(format!("{} of {} settled redriven reminders failed again", o.failed, o.settled));
                        } else if let Some(max) = req.abort_if.ratio_429
                            && o.answers > 0
                            && o.throttled as f64 > max * o.answers as f64
                        {
                            sum.aborted = Some(format!("{} of {} provider answers were 429", o.throttled, o.answers));
                        }
                    }
                }
            }
            Ok::<(), RedriveError>(())
        }
        .await;
        // Whatever happened, what was not moved becomes visible again in the DLQ.
        if !held.is_empty() {
            self.dlq.release(&held).await.map_err(port("releasing what stays in the DLQ"))?;
        }
        result?;
        if let (Some(a), Some(b)) = (first_send, last_send) {
            let secs = until(a, b).as_secs_f64();
            sum.measured_per_second = if secs > 0.0 { (sum.moved - 1) as f64 / secs } else { 0.0 };
        }
        audit.finished_at = Some(self.clock.now());
        audit.summary = Some(sum.clone());
        self.control.put_audit(&audit).await.map_err(port("finishing the audit record"))?;
        Ok(sum)
    }

    /// Outcomes of moved reminders in the ledger; with `wait`, polls until all settled or the
    /// wait ends (an unsettled canary counts as failed).
    async fn watch(&self, ids: &[String], wait: Option<Duration>) -> Result<Outcomes, RedriveError> {
        let give_up = add(self.clock.now(), wait.unwrap_or_default());
        loop {
            let mut o = Outcomes::default();
            for id in ids {
                let Ok(rid) = ReminderId::parse(id.as_str()) else { continue };
                let rec = self.ledger.get(&rid).await.map_err(|e: LedgerError| RedriveError::Port {
                    what: "reading redriven outcomes",
                    source: Box::new(e),
                })?;
                let Some(rec) = rec else { continue };
                // Only what happened after this redrive counts.
                let ours: Vec<_> = rec.history.iter().filter(|h| h.redrive_id.is_some()).collect();
                o.answers += ours.iter().filter(|h| h.provider_status.is_some()).count() as u64;
                o.throttled += ours.iter().filter(|h| h.provider_status == Some(429)).count() as u64;
                match rec.state {
                    ReminderState::Delivered => o.settled += 1,
                    ReminderState::DeadLettered | ReminderState::Expired if !ours.is_empty() => {
                        o.settled += 1;
                        o.failed += 1;
                    }
                    _ => {}
                }
            }
            if wait.is_none() || o.settled as usize >= ids.len() {
                return Ok(o);
            }
            if self.clock.now() >= give_up {
                o.failed += ids.len() as u64 - o.settled;
                return Ok(o);
            }
            self.clock.sleep(Duration::from_millis(500)).await;
        }
    }
}

#[derive(Debug, Default)]
struct Outcomes {
    settled: u64,
    failed: u64,
    answers: u64,
    throttled: u64,
}

// ---- the pause gate --------------------------------------------------------------------------

type Probe = Box<dyn Fn() -> futures_util::future::BoxFuture<'static, Result<bool, BoxError>> + Send + Sync>;

/// The pause switch as a hot path reads it: one read per `ttl` per instance, the last answer
/// kept when a read fails (a failing read never pauses or unpauses delivery by itself).
pub struct PauseGate {
    probe: Probe,
    ttl: Duration,
    cache: std::sync::Mutex<Option<(std::time::Instant, bool)>>,
}

impl std::fmt::Debug for PauseGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PauseGate").field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

impl PauseGate {
    /// A gate over `control`, re-read at most every `ttl`.
    pub fn new<K: Control + Clone + 'static>(control: K, ttl: Duration) -> Self {
        let probe: Probe = Box::new(move || {
            let control = control.clone();
            Box::pin(async move { control.pause().await.map(|p| p.is_some()) })
        });
        Self { probe, ttl, cache: std::sync::Mutex::new(None) }
    }

    /// True while an operator pause is in force.
    pub async fn paused(&self) -> bool {
        let cached = *self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, v)) = cached
            && at.elapsed() < self.ttl
        {
            return v;
        }
        let v = match (self.probe)().await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the pause switch; keeping the last answer");
                cached.is_some_and(|(_, v)| v)
            }
        };
        *self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((std::time::Instant::now(), v));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: RedriveCaps = RedriveCaps { max_messages: 1000, max_per_second: 20.0 };

    #[test]
    fn a_valid_request_parses_with_defaults() {
        let r = RedriveRequest::parse(
            r#"{"reason":"provider outage INC-42","owner":"ops@example.com","max_messages":50,"max_per_second":5,
                "selection":{"failure_reasons":["no_safe_retry_window"],"tenants":["acme"]},"canary":2}"#,
            CAPS,
        )
        .unwrap();
        assert_eq!((r.max_messages, r.canary, r.dry_run, r.abort_if.failure_ratio), (50, 2, false, 0.0));
        assert_eq!(r.selection.failure_reasons, vec![ReasonCode::NoSafeRetryWindow]);
    }

    #[test]
    fn every_problem_is_listed() {
        let e = RedriveRequest::parse(
            r#"{"reason":"","max_messages":5000,"max_per_second":50,"canary":-1,"selection":{"tenants":["Bad Tenant"],
                "failure_reasons":["nope"],"enqueued_after":"yesterday"},"abort_if":{"failure_ratio":2},"dry_run":"yes","extra":1}"#,
            CAPS,
        )
        .unwrap_err();
        let all = e.join("\n");
        for needle in [
            "unknown field \"extra\"",
            "reason must not be empty",
            "owner is required",
            "selection.failure_reasons[0]",
            "selection.tenants[0]",
            "selection.enqueued_after must be an RFC 3339",
            "max_messages must be an integer in 1..=1000",
            "max_per_second must be a number in (0, 20]",
            "canary must be an integer",
            "abort_if.failure_ratio must be a number in [0, 1]",
            "dry_run must be true or false",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        assert_eq!(e.len(), 11, "{all}");
        let t = |v: &str| {
            RedriveRequest::parse(
                &format!(
                    r#"{{"reason":"r","owner":"o","max_messages":1,"max_per_second":1,"canary_timeout_seconds":{v}}}"#
                ),
                CAPS,
            )
        };
        assert_eq!(t("300").unwrap().canary_timeout, Some(Duration::from_secs(300)));
        assert!(t("900").unwrap_err()[0].contains("canary_timeout_seconds must be an integer in 1..=840"));
    }
}
