//! Operator redrive (docs/design.md#redrive): a bounded, paced, audited move of dead-lettered reminders
//! back to the send queue.
//!
//! The request is validated as a whole — every problem is listed, nothing moves on any. A run
//! writes its audit record first, receives from the DLQ, checks each message with the same
//! decoder the sender uses, leaves what the selection does not match, skips (and leaves) what
//! is past `deliver_by` (and deletes the letters of delivered reminders), sends the rest back stamped with the redrive id
//! (same `reminder_id`, so the same idempotency key; the ledger keeps the attempt history) at
//! most `max_per_second`, deletes from the DLQ only what was sent, watches a canary first and
//! stops when the abort threshold trips, before the invocation deadline, or at `max_messages`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use crate::clock::{Clock, add, until};
use crate::contract::{RedriveStamp, ReminderMessage};
use crate::ids::{RedriveId, ReminderId};
use crate::ports::{BoxError, Control, DeadLetters, Ledger, LedgerError};
use crate::reason::{ReasonCode, ReminderState};

mod request;

pub use request::{
    AbortIf, AbortIfWire, Field, RedriveCaps, RedriveRequest, RedriveRequestWire, Selection, SelectionWire,
};

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
    /// Selected but not moved, by why (left in the DLQ, except `already_delivered` in a real
    /// run: see `removed_delivered`).
    pub skipped: BTreeMap<String, u64>,
    /// Letters of reminders already delivered, deleted from the DLQ (they are owed nothing).
    pub removed_delivered: u64,
    /// Not selected, or not reached (caps, abort, deadline): left in the DLQ.
    pub left: u64,
    /// Canary reminders moved, and how many of them failed again.
    pub canary_moved: u64,
    /// Of the canary, failed again (dead-lettered, expired, or unsettled in time).
    pub canary_failed: u64,
    /// Why the run stopped early, if it did.
    pub aborted: Option<String>,
    /// Measured send rate: moved − 1 ÷ seconds from the first send's start to the last's (the
    /// pace the run kept; SQS's latency does not move it).
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
    /// A letter with less slack than this goes back to the urgent lane (`DEADLINE_NEAR_SECS`).
    pub urgent_below: Duration,
    /// Each declared channel's own redrive cap (its redrive share × its quota): a letter of that
    /// channel is paced at the lower of it and the request's `max_per_second`, on a pace of
    /// its own (and on the run's), so redriven SMS letters do not arrive faster than SMS's
    /// share while email's go at theirs. A letter of no listed channel takes the run's pace only.
    pub channel_caps: Vec<(String, f64)>,
}

impl<L: Ledger, D: DeadLetters, K: Control, C: Clock> Redriver<L, D, K, C> {
    /// Composes the service.
    pub fn new(ledger: L, dlq: D, control: K, clock: C) -> Self {
        Self {
            ledger,
            dlq,
            control,
            clock,
            canary_timeout: Duration::from_secs(60),
            margin: Duration::from_secs(5),
            urgent_below: crate::lanes::URGENT_BELOW,
            channel_caps: Vec::new(),
        }
    }

    /// The channel cap a letter of `channel` is paced by, when its channel has one.
    fn cap_of(&self, channel: Option<&str>) -> Option<&(String, f64)> {
        channel.and_then(|c| self.channel_caps.iter().find(|(n, _)| n == c))
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
        let stamp = RedriveStamp {
            id: id.clone(),
            reason: req.reason.clone(),
            owner: req.owner.clone(),
            base_attempt: 0,
            // Set per letter below: only a `provider_indeterminate` letter, in a request that
            // names that reason, may resend over an earlier unknown call.
            resend_unknown: false,
        };
        let mut sum = RedriveSummary { redrive_id: id.to_string(), dry_run: req.dry_run, ..RedriveSummary::default() };
        let mut held: Vec<String> = Vec::new();
        let stop_at = deadline - TimeDelta::from_std(self.margin).unwrap_or_default();
        // The run's pace at max_per_second, which every letter takes, and one per channel with
        // a cap of its own, which that channel's letters take too: the run never goes faster
        // than it was asked, and no channel faster than its own share.
        let mut pace = Pace::new(req.max_per_second, self.clock.now());
        let mut paces: HashMap<String, Pace> = HashMap::new();
        let (mut first_send, mut last_send) = (None, None);
        let mut canary_checked = req.canary == 0;
        let mut checked_at = 0u64;
        // Outcomes already final for this run are read once, not at every check: the checks
        // were O(moved²) ledger reads (8.5 reads per reminder in `simulate --scenario redrive`).
        let mut settled: HashMap<String, Outcomes> = HashMap::new();
        // Letters this run has looked at and left in the DLQ (handle → message id), and the
        // message ids of those it let go of before its canary wait (see `let_go`).
        let mut looked_at: HashMap<String, String> = HashMap::new();
        let mut let_go: HashSet<String> = HashSet::new();
        let result = async {
            'outer: loop {
                if self.clock.now() >= stop_at {
                    sum.aborted.get_or_insert_with(|| DEADLINE.into());
                    break;
                }
                if sum.aborted.is_some() || sum.moved >= u64::from(req.max_messages) {
                    break;
                }
                // Held for what is left of the run and a little more (SQS's own limit is 12 h):
                // a run killed mid-way leaves its letters invisible for seconds, not 15 minutes.
                let hold = until(self.clock.now(), stop_at) + DLQ_HOLD_SLACK;
                let batch = self.dlq.receive(hold).await.map_err(port("receiving from the DLQ"))?;
                if batch.is_empty() {
                    break;
                }
                // Every letter received is held until it is deleted, so whatever ends this run
                // (a cap, an abort, the deadline, a failed call) releases the rest of the batch
                // too: nothing stays invisible for the hold's 15 minutes behind a dead run.
                held.extend(batch.iter().map(|d| d.handle.clone()));
                for (i, dl) in batch.iter().enumerate() {
                    let done = sum.moved >= u64::from(req.max_messages) || sum.aborted.is_some();
                    if done || self.clock.now() >= stop_at {
                        sum.left += (batch.len() - i) as u64;
                        if self.clock.now() >= stop_at {
                            sum.aborted.get_or_insert_with(|| DEADLINE.into());
                        }
                        break 'outer;
                    }
                    // Seen before the canary wait and let go of: held again to get past it,
                    // and not counted twice.
                    if let_go.contains(&dl.message_id) {
                        looked_at.insert(dl.handle.clone(), dl.message_id.clone());
                        continue;
                    }
                    looked_at.insert(dl.handle.clone(), dl.message_id.clone());
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
                    let record = self.ledger.get(&msg.reminder_id).await.map_err(port("reading the ledger"))?;
                    if record.as_ref().is_some_and(|r| r.state == ReminderState::Delivered) {
                        *sum.skipped.entry("already_delivered".into()).or_default() += 1;
                        // Nothing is owed to a delivered reminder: its letter (a copy a crashed
                        // run left behind after sending, or one that raced a delivery) would be
                        // a false alarm in the DLQ forever (I7). A real run removes it.
                        if !req.dry_run {
                            held.retain(|h| *h != dl.handle);
                            self.dlq.delete(&dl.handle).await.map_err(port("deleting from the DLQ"))?;
                            sum.removed_delivered += 1;
                        }
                        continue;
                    }
                    // A letter whose provider call may have taken effect (`provider_indeterminate`,
                    // only ever quarantined for a provider without idempotency keys under
                    // `at_most_once`) is resent only when the request names that reason: the
                    // operator's decision that the effect did not happen, never a side effect of
                    // a broad redrive. (A delivered one was cleaned up above either way.)
                    let unknown = reason == Some(ReasonCode::ProviderIndeterminate);
                    if unknown && !req.selection.names_unknown_outcomes() {
                        *sum.skipped.entry("unknown_outcome_not_named".into()).or_default() += 1;
                        continue;
                    }
                    // A letter of this run's own making (its body carries this run's stamp: a copy
                    // it released failed again): sent back, it would be answered `Ended` and its
                    // letter deleted, leaving a dead-lettered reminder with no letter. It stays
                    // for the next run.
                    if msg.redrive.as_ref().is_some_and(|r| r.id == id) {
                        *sum.skipped.entry("failed_again_this_run".into()).or_default() += 1;
                        continue;
                    }
                    if msg.deliver_by <= self.clock.now() {
                        *sum.skipped.entry("past_deliver_by".into()).or_default() += 1;
                        continue;
                    }
                    if req.dry_run {
                        sum.moved += 1;
                        continue;
                    }
                    // Pace: never faster than max_per_second (nor the letter's channel's cap), in
                    // groups (see `Pace`).
                    let now = self.clock.now();
                    let own = self.cap_of(msg.channel.as_deref()).map(|(name, cap)| {
                        let rate = cap.min(req.max_per_second);
                        paces.entry(name.clone()).or_insert_with(|| Pace::new(rate, now)).next(now)
                    });
                    // The run's pace, booked when the channel's own lets the letter go.
                    let at = pace.next(own.unwrap_or(now));
                    if at >= stop_at {
                        // The next send would fall after the run's stop time.
                        sum.left += 1;
                        sum.aborted.get_or_insert_with(|| DEADLINE.into());
                        continue;
                    }
                    if at > now {
                        self.clock.sleep(until(now, at)).await;
                    }
                    msg.attempt = record.as_ref().map_or(msg.attempt, |r| r.attempts.max(msg.attempt));
                    // The fresh budget starts from the attempts made so far, once: requeued
                    // copies carry this base unchanged (see `decision::attempt_limit`).
                    msg.redrive =
                        Some(RedriveStamp { base_attempt: msg.attempt, resend_unknown: unknown, ..stamp.clone() });
                    // The send's start is what the pace holds; its completion moves with SQS's
                    // latency (a slow first answer made a paced run read above its cap).
                    let t = self.clock.now();
                    let lane = crate::lanes::lane_at(msg.deliver_by, t, self.urgent_below);
                    // The `redriven` event goes into the reminder's outbox before the letter
                    // moves: a crash between the two then tells of a redrive whose copy was not
                    // sent (the letter stays in the DLQ, and the next run's event has its own
                    // id), never of a copy sent without its event (docs/design.md#outcome-events).
                    let event = crate::outcome::OutcomeEvent::new(
                        &msg,
                        crate::outcome::Outcome::Redriven,
                        t,
                        msg.attempt,
                        None,
                    );
                    self.ledger.append_outcome(&msg, &event, t).await.map_err(port("writing the redriven event"))?;
                    self.dlq.send_back(&msg.encode(), lane).await.map_err(port("sending back to the send queue"))?;
                    held.retain(|h| *h != dl.handle);
                    self.dlq.delete(&dl.handle).await.map_err(port("deleting from the DLQ"))?;
                    first_send.get_or_insert(t);
                    last_send = Some(t);
                    sum.moved += 1;
                    sum.moved_ids.push(msg.reminder_id.to_string());
                    if !canary_checked && sum.moved == u64::from(req.canary) {
                        canary_checked = true;
                        sum.canary_moved = sum.moved;
                        let wanted = req.canary_timeout.unwrap_or(self.canary_timeout);
                        // The canary wait is the run's longest (a minute by default, five in the
                        // runbook): the letters it holds would stay hidden through it, and a
                        // narrow redrive holds every letter it passed over. It lets go of them
                        // all first (ten per call) and receives again after it; those it had
                        // looked at are held again without a second look.
                        let holding: HashSet<&String> = held.iter().collect();
                        let_go.extend(looked_at.drain().filter(|(h, _)| holding.contains(h)).map(|(_, m)| m));
                        if !held.is_empty() {
                            self.dlq.release(&held).await.map_err(port("releasing what stays in the DLQ"))?;
                            held.clear();
                        }
                        // The wait ends by the run's own stop time: a canary still unsettled
                        // then is not a failed canary, and the run stops, releasing the rest and
                        // writing its audit record, instead of being killed mid-wait.
                        let left = until(self.clock.now(), stop_at);
                        let o = self.watch(&id, &sum.moved_ids, &mut settled, Some(wanted.min(left)), stop_at).await?;
                        let cut = wanted > left || o.cut;
                        // Failures already settled count even when the deadline cuts the wait.
                        let settled_failed = o.failed.saturating_sub(sum.moved.saturating_sub(o.settled));
                        if cut
                            && o.settled < sum.moved
                            && settled_failed as f64 <= req.abort_if.failure_ratio * sum.canary_moved as f64
                        {
                            sum.aborted = Some(format!(
                                "{DEADLINE}: the canary was still settling ({} of {} settled)",
                                o.settled, sum.moved
                            ));
                            continue 'outer;
                        }
                        let failed = if cut { settled_failed } else { o.failed };
                        sum.canary_failed = failed;
                        if failed as f64 > req.abort_if.failure_ratio * sum.canary_moved as f64 {
                            sum.aborted = Some(format!("canary: {failed} of {} failed again", sum.canary_moved));
                        }
                        // The rest of this batch was let go of with the others: receive again.
                        continue 'outer;
                    } else if canary_checked && sum.moved - checked_at >= u64::from(req.abort_if.window) {
                        checked_at = sum.moved;
                        // Bounded by the stop time like every other wait: a check over thousands of
                        // unsettled reminders begun just before it would read on past it.
                        let o = self.watch(&id, &sum.moved_ids, &mut settled, None, stop_at).await?;
                        if o.cut {
                            // Not every outcome was read: no verdict on a part; the run stops next.
                            continue;
                        }
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
        // Whatever happened, what was not moved becomes visible again in the DLQ, and the audit
        // record is finished with what was moved (its lineage) — on a failure too.
        let released = if held.is_empty() {
            Ok(())
        } else {
            self.dlq.release(&held).await.map_err(port("releasing what stays in the DLQ"))
        };
        if let Err(e) = &result {
            sum.aborted.get_or_insert_with(|| format!("failed: {e}"));
        }
        if let (Some(a), Some(b)) = (first_send, last_send) {
            let secs = until(a, b).as_secs_f64();
            sum.measured_per_second = if secs > 0.0 { (sum.moved - 1) as f64 / secs } else { 0.0 };
        }
        audit.finished_at = Some(self.clock.now());
        audit.summary = Some(sum.clone());
        let audited = self.control.put_audit(&audit).await.map_err(port("finishing the audit record"));
        result?;
        released?;
        audited?;
        Ok(sum)
    }

    /// The outcomes of this run's copies of `ids` in the ledger (waiting up to `wait` for all
    /// to settle; an unsettled one counts as failed when the wait ends). `settled` caches the
    /// outcomes that are final for this run (delivered, or failed again): those are not read
    /// again. No read starts at or after `stop_at`: what is left unread then is `cut`.
    async fn watch(
        &self,
        run: &RedriveId,
        ids: &[String],
        settled: &mut HashMap<String, Outcomes>,
        wait: Option<Duration>,
        stop_at: DateTime<Utc>,
    ) -> Result<Outcomes, RedriveError> {
        let give_up = add(self.clock.now(), wait.unwrap_or_default()).min(stop_at);
        loop {
            let mut o = Outcomes::default();
            for id in ids {
                if let Some(done) = settled.get(id) {
                    o.add(done);
                    continue;
                }
                if self.clock.now() >= stop_at {
                    o.cut = true;
                    break;
                }
                let Ok(rid) = ReminderId::parse(id.as_str()) else { continue };
                let rec = self.ledger.get(&rid).await.map_err(|e: LedgerError| RedriveError::Port {
                    what: "reading redriven outcomes",
                    source: Box::new(e),
                })?;
                let Some(rec) = rec else { continue };
                // Only what happened to this run's copies counts: an earlier redrive of the same
                // reminder left entries (and maybe a dead_lettered state) of its own.
                let ours: Vec<_> =
                    rec.history.iter().filter(|h| h.redrive_id.as_deref() == Some(run.as_str())).collect();
                let mut one = Outcomes {
                    answers: ours.iter().filter(|h| h.provider_status.is_some()).count() as u64,
                    throttled: ours.iter().filter(|h| h.provider_status == Some(429)).count() as u64,
                    ..Outcomes::default()
                };
                match rec.state {
                    ReminderState::Delivered => one.settled = 1,
                    // Paid or cancelled after it was dead-lettered (the normal happy ending),
                    // or moved to another due date: nothing more is owed, nothing failed.
                    ReminderState::Cancelled if !ours.is_empty() => one.settled = 1,
                    ReminderState::DeadLettered | ReminderState::Expired if !ours.is_empty() => {
                        one.settled = 1;
                        one.failed = 1;
                    }
                    _ => {}
                }
                o.add(&one);
                if one.settled > 0 {
                    settled.insert(id.clone(), one);
                }
            }
            if wait.is_none() || o.settled as usize >= ids.len() {
                return Ok(o);
            }
            if o.cut || self.clock.now() >= give_up {
                o.failed += ids.len() as u64 - o.settled;
                return Ok(o);
            }
            self.clock.sleep(Duration::from_millis(500)).await;
        }
    }
}

/// How long past the run's stop time a received letter stays invisible if the run dies
/// before releasing it (its margin before the invocation deadline is 5 s).
pub const DLQ_HOLD_SLACK: Duration = Duration::from_secs(30);

/// The redrive's pacing: sends go out in groups of up to ten (a second's worth at the rate,
/// at least one) sent back to back, the groups `group / rate` apart. The rate over any group
/// window is `max_per_second`, as before; but the copies reach the send queue together, so one
/// worker receives them as one batch: one receive, one delete, one limiter booking for up to
/// ten, instead of one each (measured in `simulate --scenario redrive`: one at a time cost 0.24
/// limiter writes per call and 0.77 SQS requests per reminder).
#[derive(Debug, Clone, Copy)]
struct Pace {
    /// Sends per group.
    group: u32,
    /// Time between group starts.
    every: Duration,
    started: DateTime<Utc>,
    in_group: u32,
}

impl Pace {
    fn new(rate: f64, now: DateTime<Utc>) -> Self {
        let rate = rate.max(1e-6);
        let group = rate.floor().clamp(1.0, 10.0) as u32;
        Self {
            group,
            every: Duration::from_secs_f64(f64::from(group) / rate),
            started: now - TimeDelta::days(1),
            in_group: group,
        }
    }

    /// When the next send may go, given it is `now`.
    fn next(&mut self, now: DateTime<Utc>) -> DateTime<Utc> {
        let window_end = add(self.started, self.every);
        if self.in_group < self.group && now < window_end {
            self.in_group += 1;
            return now;
        }
        // A new group: at the end of the last group's window, or now if that has passed.
        self.started = now.max(window_end);
        self.in_group = 1;
        self.started
    }
}

/// Why a run stopped before its work was done, when its time ran out.
const DEADLINE: &str = "stopped before the invocation deadline";

#[derive(Debug, Default, Clone, Copy)]
struct Outcomes {
    settled: u64,
    failed: u64,
    answers: u64,
    throttled: u64,
    /// The stop time came before every outcome was read.
    cut: bool,
}

impl Outcomes {
    fn add(&mut self, other: &Outcomes) {
        self.settled += other.settled;
        self.failed += other.failed;
        self.answers += other.answers;
        self.throttled += other.throttled;
    }
}
