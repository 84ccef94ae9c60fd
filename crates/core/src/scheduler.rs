//! The scheduler service (docs/design.md#the-scheduler): release due renewals to the send queue so each becomes
//! visible at its `deliver_after`, in `deliver_by` order, never skipping one.
//!
//! A tick covers `(watermark, now + lookahead]`. Pending renewals live in a sparse, sharded
//! index keyed by `deliver_after` that holds only renewals not yet released, so a missed or
//! paused tick is caught up by the next one without any bookkeeping: whatever is still in the
//! index and due by the horizon is released, or expired when its `deliver_by` has passed.
//! Send first, mark second: a crash in between re-sends, and the ledger absorbs the duplicate.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;

use crate::clock::{Clock, add, until};
use crate::contract::ReminderMessage;
use crate::ids::{CorrelationId, ReminderId};
use crate::lanes::{LaneDepths, LanePolicy, QueueLane, ReleasePlanner};
use crate::pause::PauseGate;
use crate::ports::{
    DueStore, DueStoreError, Ledger, LedgerError, LedgerRecord, Marked, Pending, QueueError, Release, ReleaseQueue,
    SettleOutcome, Settlement,
};
use crate::reason::{ReasonCode, ReminderState};

/// Reminders a tick reads before it releases them (urgent first, in deadline order): ≈ 8 MB of
/// pending rows in the scheduler's memory; at 100/s, 20,000 are over three minutes of work.
pub const RELEASE_GROUP: usize = 20_000;

/// Chunks of ten released side by side (see `Scheduler::release_group`): 4 × (1 send + 10
/// marks) keeps at most 44 requests in flight, inside the SDK's default connection pool.
pub const CHUNKS_IN_FLIGHT: usize = 4;

/// What one chunk did, merged into the tick's report in chunk order.
#[derive(Default)]
struct Chunk {
    released: u64,
    released_urgent: u64,
    refused: u64,
    not_pending: u64,
    /// The tenant of each renewal marked enqueued (the SLO's due population).
    due: Vec<String>,
    failed: Option<SchedulerError>,
}

/// The share of a provider's quota the scheduler plans with: the full quota gave an
/// optimistic drain and a late projected-breach alarm; 429s, deferrals and idle slots keep the
/// real rate a few percent under it (simulator: 0.97–0.999 utilisation).
pub const SUSTAINABLE_SHARE: f64 = 0.97;

/// SQS's longest `DelaySeconds`; the lookahead may not exceed it.
pub const MAX_LOOKAHEAD: Duration = Duration::from_secs(900);

/// Scheduler tunables.
#[derive(Debug, Clone, Copy)]
pub struct SchedulerSettings {
    /// How far ahead of now renewals are released (≤ 15 min).
    pub lookahead: Duration,
    /// Renewals fetched per shard per page.
    pub page_size: usize,
    /// Stop this long before the invocation deadline.
    pub safety_margin: Duration,
    /// Sustainable delivery rate, for the projected drain time and the urgent lane's pace
    /// (calls/s).
    pub sustainable_rate: f64,
    /// Slack under which a reminder is released to the urgent lane (`DEADLINE_NEAR_SECS`).
    pub urgent_below: Duration,
    /// Lead of the urgent lane's pace (see [`crate::lanes`]).
    pub urgent_lead: Duration,
}

impl SchedulerSettings {
    /// The lane policy these settings imply.
    pub fn lanes(&self) -> LanePolicy {
        LanePolicy {
            urgent_below: self.urgent_below,
            lead: self.urgent_lead,
            rate: self.sustainable_rate,
            ..LanePolicy::new(self.sustainable_rate)
        }
    }
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            lookahead: Duration::from_secs(600),
            page_size: 100,
            safety_margin: Duration::from_secs(10),
            sustainable_rate: 97.0,
            urgent_below: crate::lanes::URGENT_BELOW,
            urgent_lead: crate::lanes::URGENT_LEAD,
        }
    }
}

/// What one tick did and saw.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TickReport {
    /// A pause was in force: nothing was released (the oldest due renewal is still measured).
    pub paused: bool,
    /// Who set that pause.
    pub paused_by: Option<crate::pause::PausedBy>,
    /// The fleet's pause was consulted (or there is none to consult): `paused` and `paused_by`
    /// are known, even when the tick then failed, so a failing tick still reports the pause
    /// instead of reading as its end.
    pub pause_read: bool,
    /// Declared channels whose own switch the sender tripped (a confirmed 401 on that
    /// channel's provider): that channel sends nothing until an operator resumes it, while the
    /// others go on (read every tick, paused or not).
    pub channels_tripped: Vec<String>,
    /// Messages accepted by the queue.
    pub released: u64,
    /// Of those, released to the urgent lane.
    pub released_urgent: u64,
    /// Renewals refused by the queue (left pending for the next tick).
    pub refused: u64,
    /// Renewals expired with `missed_schedule_window`.
    pub expired_missed: u64,
    /// Renewals another writer changed between query and mark.
    pub not_pending: u64,
    /// Pages read.
    pub pages: u64,
    /// Index entries skipped because this tick had already handled them.
    pub repeated: u64,
    /// True when every pending renewal due by the horizon was handled.
    pub finished: bool,
    /// Eligible backlog: released this tick + still pending + already on the queue.
    pub backlog: u64,
    /// Messages on each lane after the tick.
    pub lanes: LaneDepths,
    /// Backlog ÷ sustainable rate.
    pub projected_drain: Duration,
    /// Smallest `deliver_by − now` among live renewals seen (None when none).
    pub min_slack: Option<Duration>,
    /// 1 when the projected drain exceeds the smallest slack.
    pub projected_breach: bool,
    /// The channels whose renewals, projected at their own rate, miss a deadline (with
    /// [`Scheduler::with_channel_rates`]); empty when only the fleet's projection breaches.
    pub breach_channels: Vec<String>,
    /// `now − deliver_after` of the oldest due renewal seen, zero when none was due.
    pub oldest_due_age: Duration,
    /// Renewals found past their deadline that the ledger had already judged: a copy an
    /// earlier tick released (its mark failed) reached a sender, or an earlier expiry of this
    /// reminder lost its answer. Marked, with no verdict of the tick's.
    pub judged_before: u64,
    /// The watermark after the tick.
    pub watermark: Option<DateTime<Utc>>,
    /// The deadline SLO's due population this tick made, per tenant: (renewals released,
    /// renewals expired at release — each also a breach). Only renewals this tick marked: a
    /// copy released again after a crash is not counted twice.
    pub due_by_tenant: std::collections::BTreeMap<String, (u64, u64)>,
}

/// Infrastructure failed during a tick; what was released before stays released.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// The store.
    #[error(transparent)]
    Store(#[from] DueStoreError),
    /// The queue.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The idempotency ledger (an expiry at release is recorded there).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The lookahead is longer than SQS can delay.
    #[error("lookahead {0:?} exceeds the 15-minute SQS delay limit")]
    Lookahead(Duration),
}

/// How many of `jobs` — `(deliver_after, deliver_by)` pairs — would miss their `deliver_by`
/// with one server working at `rate` per second from `start`, always taking the available job
/// with the earliest deadline (earliest-deadline-first with release times). For unit jobs that
/// share one release time EDF is optimal; with release times it may count a miss another order
/// would avoid, so this is a projection, not a bound. Sorts `jobs`.
pub fn edf_misses(jobs: &mut [(DateTime<Utc>, DateTime<Utc>)], start: DateTime<Utc>, rate: f64) -> u64 {
    use std::cmp::Reverse;
    jobs.sort();
    let step = chrono::TimeDelta::microseconds((1e6 / rate.max(1e-9)) as i64);
    let mut ready: std::collections::BinaryHeap<Reverse<DateTime<Utc>>> = std::collections::BinaryHeap::new();
    let (mut next, mut late) = (0usize, 0u64);
    let mut t = jobs.first().map_or(start, |j| j.0.max(start));
    while next < jobs.len() || !ready.is_empty() {
        while next < jobs.len() && jobs[next].0 <= t {
            ready.push(Reverse(jobs[next].1));
            next += 1;
        }
        let Some(Reverse(by)) = ready.pop() else {
            t = jobs[next].0;
            continue;
        };
        t += step;
        if t >= by {
            late += 1;
        }
    }
    late
}

/// Builds the contract message for a pending renewal at `now`.
pub fn message_for(p: &Pending, now: DateTime<Utc>) -> ReminderMessage {
    ReminderMessage {
        // A channel no message can carry (a row written around the import) travels without
        // one: it routes by the lanes, and the sender by the renewal row, as before.
        channel: p.channel.clone().filter(|c| crate::contract::channel_fits(c)),
        reminder_id: p.reminder_id.clone(),
        renewal_id: p.renewal_id.clone(),
        tenant_id: p.tenant_id.clone(),
        kind: p.kind.clone(),
        deliver_after: p.deliver_after,
        deliver_by: p.deliver_by,
        attempt: 0,
        first_enqueued: now.min(p.deliver_by),
        // The reminder id is a valid correlation id and stable across re-sends.
        correlation_id: CorrelationId::parse(p.reminder_id.as_str()).unwrap_or_else(|_| {
            // Unreachable: reminder ids are `rem_` + hex, inside the correlation alphabet.
            CorrelationId::parse("scheduler").unwrap_or_else(|_| unreachable!())
        }),
        redrive: None,
    }
}

type ReadLedger =
    Box<dyn Fn(ReminderId) -> BoxFuture<'static, Result<Option<LedgerRecord>, LedgerError>> + Send + Sync>;
type ExpireInLedger =
    Box<dyn Fn(ReminderMessage, DateTime<Utc>) -> BoxFuture<'static, Result<SettleOutcome, LedgerError>> + Send + Sync>;

/// The idempotency ledger as the scheduler's expiries use it: one verdict per reminder.
struct ExpiryLedger {
    read: ReadLedger,
    expire: ExpireInLedger,
}

/// What the ledger says of a renewal the scheduler found past its deadline, still pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtExpiry {
    /// No copy of it ever reached a sender, or one left it deferred with no call in doubt:
    /// the scheduler expires it and judges it.
    Judge,
    /// A copy reached a sender (an earlier tick released it and failed to mark it), which
    /// judged it or will: delivered, cancelled, dead-lettered, held under a live lease, or with
    /// a call whose outcome is unknown (that copy goes to the DLQ as `provider_indeterminate`,
    /// never to an expiry). The row is marked released.
    Released,
    /// Already expired, and judged then (by a sender, or by an earlier tick whose answer was
    /// lost). The row is marked expired.
    Expired,
}

impl AtExpiry {
    fn of(rec: Option<&LedgerRecord>, now: DateTime<Utc>) -> Self {
        let Some(r) = rec else { return Self::Judge };
        match r.state {
            ReminderState::Expired => Self::Expired,
            // The row is pending again after a cancellation at send: the renewal is active
            // again (the import re-armed it), owed and now missed. An unknown call aside (the
            // mark outlives the cancellation), the tick judges it.
            ReminderState::Cancelled if r.call_owner.is_none() => Self::Judge,
            s if s.is_terminal() => Self::Released,
            _ if r.call_owner.is_some() => Self::Released,
            ReminderState::Leased if r.lease_until.is_some_and(|l| l > now) => Self::Released,
            _ => Self::Judge,
        }
    }

    /// What an expiry the ledger refused comes to.
    fn refused(outcome: &SettleOutcome) -> Self {
        match outcome {
            SettleOutcome::Recorded => Self::Judge,
            SettleOutcome::AlreadyEnded(ReminderState::Expired) => Self::Expired,
            _ => Self::Released,
        }
    }
}

/// The scheduler service.
pub struct Scheduler<S, Q, C> {
    store: S,
    queue: Q,
    clock: C,
    settings: SchedulerSettings,
    pause: Option<PauseGate<C>>,
    /// Each declared channel's own switch, by name: read to report, never to hold a release
    /// (the sender holds a paused channel's messages).
    channel_switches: Vec<(String, PauseGate<C>)>,
    /// Each declared channel's sustainable rate, by name (calls/s): its urgent reminders are
    /// paced, and its renewals projected, at its own provider's rate, not the fleet's.
    channel_rates: Vec<(String, f64)>,
    ledger: Option<ExpiryLedger>,
}

/// Which rate serves a renewal: index `i < n` is the `i`-th channel's, `n` the fleet's.
fn rate_index(rates: &[(String, f64)], channel: Option<&str>) -> usize {
    channel.and_then(|c| rates.iter().position(|(n, _)| n == c)).unwrap_or(rates.len())
}

impl<S: DueStore, Q: ReleaseQueue, C: Clock> Scheduler<S, Q, C> {
    /// Composes a scheduler.
    pub fn new(store: S, queue: Q, clock: C, settings: SchedulerSettings) -> Self {
        Self {
            store,
            queue,
            clock,
            settings,
            pause: None,
            channel_switches: Vec::new(),
            channel_rates: Vec::new(),
            ledger: None,
        }
    }

    /// Records each expiry at release in the idempotency ledger first, so a reminder has one
    /// verdict whoever ends it. A copy released by a tick whose mark then failed may reach a
    /// sender (which judges it) before a later tick finds its row past the deadline: without the
    /// ledger that tick judged it a second time. With it, the tick expires (and judges) only a
    /// reminder no sender has settled (an ownerless settle, the one a sender's own expiry makes:
    /// refused under a live lease or over an ending), and a copy still on a lane then finds it
    /// expired and is a duplicate. Without a ledger (tests), the row alone decides.
    pub fn with_ledger<L: Ledger + Clone + 'static>(mut self, ledger: L) -> Self {
        let reader = ledger.clone();
        let read: ReadLedger = Box::new(move |id| {
            let ledger = reader.clone();
            Box::pin(async move { ledger.get(&id).await })
        });
        let expire: ExpireInLedger = Box::new(move |msg, now| {
            let ledger = ledger.clone();
            Box::pin(async move {
                let expired = Settlement {
                    state: ReminderState::Expired,
                    reason: Some(ReasonCode::MissedScheduleWindow),
                    attempts: 0,
                    receipt: None,
                    provider_status: None,
                    next_at: None,
                };
                ledger.settle(&msg, None, now, &expired).await
            })
        });
        self.ledger = Some(ExpiryLedger { read, expire });
        self
    }

    /// Honours the operator pause switch read through `gate`: a paused tick releases nothing
    /// and leaves the watermark, so the first tick after `resume` catches up.
    pub fn with_pause(mut self, gate: PauseGate<C>) -> Self {
        self.pause = Some(gate);
        self
    }

    /// Reads each declared channel's own switch every tick, to report the ones the sender
    /// tripped ([`TickReport::channels_tripped`]): a channel's credentials refused page as the
    /// fleet's do, though the rest of the pipeline runs on.
    pub fn with_channel_switches(mut self, switches: Vec<(String, PauseGate<C>)>) -> Self {
        self.channel_switches = switches;
        self
    }

    /// Paces each declared channel's urgent reminders, and projects its renewals, at its own
    /// sustainable rate (calls/s, by channel name): an SMS vendor at a tenth of email's quota
    /// drains its morning ten times slower than the fleet's rate says, and its urgent copies
    /// paced at the fleet's rate would wait for its tokens past their turns. A renewal whose
    /// channel has no rate here goes by the fleet's.
    pub fn with_channel_rates(mut self, rates: Vec<(String, f64)>) -> Self {
        self.channel_rates = rates;
        self
    }

    /// The store (for tests).
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Sends one chunk (≤ 10) and marks what the queue accepted; what it did is returned, not
    /// written to the report, so chunks can run side by side.
    async fn release_chunk(&self, chunk: &[Pending], releases: Vec<Release>, now: DateTime<Utc>) -> Chunk {
        let mut out = Chunk::default();
        let sent = match self.queue.release(&releases).await {
            Ok(sent) => sent,
            Err(e) => {
                out.failed = Some(e.into());
                return out;
            }
        };
        out.released_urgent =
            releases.iter().zip(&sent).filter(|(m, ok)| **ok && m.lane == QueueLane::Urgent).count() as u64;
        // Marks are independent single-item writes: issue them together, so a chunk costs one
        // round trip of latency instead of ten.
        let marks = chunk.iter().zip(&sent).filter(|(_, ok)| **ok).map(|(p, _)| self.store.mark_enqueued(p, now));
        let marked = futures_util::future::join_all(marks).await;
        out.refused = sent.iter().filter(|ok| !**ok).count() as u64;
        out.released = marked.len() as u64;
        let accepted = chunk.iter().zip(&sent).filter(|(_, ok)| **ok).map(|(p, _)| p);
        // Every mark is counted before a failed one is reported: the marks that were written
        // are releases no later tick will see again.
        for (p, m) in accepted.zip(marked) {
            match m {
                Ok(Marked::NotPending) => out.not_pending += 1,
                Ok(Marked::Done) => out.due.push(p.tenant_id.to_string()),
                Err(e) => out.failed = out.failed.or(Some(e.into())),
            }
        }
        out
    }

    /// Releases a group: the urgent reminders first, in deadline order, each paced (see
    /// [`crate::lanes`]); then the normal ones in deadline order at their `deliver_after`.
    /// Empties both.
    ///
    /// Up to [`CHUNKS_IN_FLIGHT`] chunks go out side by side: a chunk is one `SendMessageBatch`
    /// and its marks, two round trips, so one at a time bounds a tick at ten messages per two
    /// round trips (at 20 ms each, 250 a second: a 100,000-renewal morning would need seven
    /// minutes of ticks). Measured on the emulators, which are CPU-bound here where AWS is
    /// latency-bound: 2,500 renewals in 6.4–7.0 s with four in flight, 8.2–9.1 s with one.
    /// Each chunk's delays are computed when its window starts, so none is released early.
    async fn release_group(
        &self,
        urgent: &mut Vec<Pending>,
        roomy: &mut Vec<Pending>,
        planners: &mut [ReleasePlanner],
        per_chunk: &mut Duration,
        report: &mut TickReport,
    ) -> Result<(), SchedulerError> {
        let order = |a: &Pending, b: &Pending| (a.deliver_by, &a.reminder_id).cmp(&(b.deliver_by, &b.reminder_id));
        urgent.sort_by(order);
        roomy.sort_by(order);
        // The urgent lane's turns for the whole group at once (work-conserving EDF over visible
        // time: see `ReleasePlanner::plan`); each is sent with the delay left when it goes out.
        // Each channel with a rate of its own is a lane of its own at that rate.
        let planned = {
            let at = self.clock.now();
            let msgs: Vec<ReminderMessage> = urgent.iter().map(|p| message_for(p, at)).collect();
            let mut groups: Vec<Vec<usize>> = vec![Vec::new(); planners.len()];
            for (i, p) in urgent.iter().enumerate() {
                groups[rate_index(&self.channel_rates, p.channel.as_deref())].push(i);
            }
            let mut planned = vec![at; msgs.len()];
            for (planner, idx) in planners.iter_mut().zip(groups).filter(|(_, idx)| !idx.is_empty()) {
                let turns = planner.plan(&idx.iter().map(|&i| &msgs[i]).collect::<Vec<_>>(), at);
                for (i, t) in idx.into_iter().zip(turns) {
                    planned[i] = t;
                }
            }
            planned
        };
        for (lane, group) in [(QueueLane::Urgent, &*urgent), (QueueLane::Normal, &*roomy)] {
            let chunks: Vec<(usize, &[Pending])> = group.chunks(10).enumerate().collect();
            for window in chunks.chunks(CHUNKS_IN_FLIGHT) {
                let now = self.clock.now();
                let sends = window.iter().map(|&(c, chunk)| {
                    let releases = chunk
                        .iter()
                        .enumerate()
                        .map(|(k, p)| {
                            let message = message_for(p, now);
                            let delay = match lane {
                                QueueLane::Urgent => until(now, planned[c * 10 + k]),
                                QueueLane::Normal => until(now, p.deliver_after),
                            };
                            Release { message, delay, lane }
                        })
                        .collect();
                    self.release_chunk(chunk, releases, now)
                });
                let done = futures_util::future::join_all(sends).await;
                // Every chunk of the window is counted before a failure is reported.
                let mut failed = None;
                for chunk in done {
                    report.released_urgent += chunk.released_urgent;
                    report.refused += chunk.refused;
                    report.released += chunk.released;
                    report.not_pending += chunk.not_pending;
                    for tenant in chunk.due {
                        report.due_by_tenant.entry(tenant).or_default().0 += 1;
                    }
                    failed = failed.or(chunk.failed);
                }
                if let Some(e) = failed {
                    return Err(e);
                }
                let each = until(now, self.clock.now()) / window.len() as u32;
                *per_chunk = per_chunk.mul_f64(0.8) + each.mul_f64(0.2);
            }
        }
        urgent.clear();
        roomy.clear();
        Ok(())
    }

    /// Expires `dead` (renewals found past their `deliver_by`, `missed_schedule_window`)
    /// [`CHUNKS_IN_FLIGHT`] × 10 at a time, the marks of a window side by side (4,000 a second
    /// at 10 ms a write, where one at a time made 100). Called after the live renewals read with
    /// them are released. Stops at the safety margin: what is left stays in `dead` (and in the
    /// index, for the next tick).
    async fn expire(
        &self,
        dead: &mut Vec<Pending>,
        deadline: DateTime<Utc>,
        report: &mut TickReport,
    ) -> Result<(), SchedulerError> {
        let mut done = 0;
        let mut failed = None;
        while done < dead.len() && failed.is_none() {
            let now = self.clock.now();
            if until(now, deadline) <= self.settings.safety_margin {
                break;
            }
            let window = &dead[done..(done + CHUNKS_IN_FLIGHT * 10).min(dead.len())];
            let marks = futures_util::future::join_all(window.iter().map(|p| self.expire_one(p, now))).await;
            // Every mark of the window is counted before a failed one is reported.
            for (p, m) in window.iter().zip(marks) {
                match m {
                    Ok((AtExpiry::Judge, verdict)) => {
                        report.expired_missed += 1;
                        report.due_by_tenant.entry(p.tenant_id.to_string()).or_default().1 += 1;
                        failed = failed.or(verdict.err());
                    }
                    Ok((AtExpiry::Released, Ok(Marked::Done))) => {
                        // Its release was never counted (the mark that would have failed).
                        report.judged_before += 1;
                        report.due_by_tenant.entry(p.tenant_id.to_string()).or_default().0 += 1;
                    }
                    Ok((AtExpiry::Expired, Ok(Marked::Done))) => report.judged_before += 1,
                    Ok((_, Ok(Marked::NotPending))) => report.not_pending += 1,
                    Ok((_, Err(e))) | Err(e) => failed = failed.or(Some(e)),
                }
            }
            done += window.len();
        }
        dead.drain(..done);
        failed.map_or(Ok(()), Err)
    }

    /// Ends one renewal found past its deadline: through the ledger first when there is one
    /// (see [`Scheduler::with_ledger`]), then its row. `Judge` is a verdict of this tick's (the
    /// ledger recorded the expiry; without a ledger, the row's mark did): counted whatever the
    /// row's mark then comes to. The others report the row's mark.
    async fn expire_one(
        &self,
        p: &Pending,
        now: DateTime<Utc>,
    ) -> Result<(AtExpiry, Result<Marked, SchedulerError>), SchedulerError> {
        let Some(ledger) = &self.ledger else {
            return match self.store.mark_expired(p, now).await? {
                Marked::Done => Ok((AtExpiry::Judge, Ok(Marked::Done))),
                Marked::NotPending => Ok((AtExpiry::Expired, Ok(Marked::NotPending))),
            };
        };
        let mut at = AtExpiry::of((ledger.read)(p.reminder_id.clone()).await?.as_ref(), now);
        if at == AtExpiry::Judge {
            // Refused when a sender claimed it meanwhile or ended it: then that sender judges.
            at = AtExpiry::refused(&(ledger.expire)(message_for(p, now), now).await?);
        }
        let mark = match at {
            AtExpiry::Judge | AtExpiry::Expired => self.store.mark_expired(p, now).await,
            AtExpiry::Released => self.store.mark_enqueued(p, now).await,
        };
        Ok((at, mark.map_err(SchedulerError::from)))
    }

    /// Runs one tick within an invocation ending at `deadline`.
    pub async fn tick(&self, deadline: DateTime<Utc>) -> Result<TickReport, SchedulerError> {
        let mut report = TickReport::default();
        self.tick_into(deadline, &mut report).await?;
        Ok(report)
    }

    /// [`Scheduler::tick`], filling `report` as it goes: when the tick fails part-way, what it
    /// released and expired before the failure is still in `report` (the function publishes
    /// that part of the SLO's due population instead of losing it with the error).
    pub async fn tick_into(&self, deadline: DateTime<Utc>, report: &mut TickReport) -> Result<(), SchedulerError> {
        let s = self.settings;
        if s.lookahead > MAX_LOOKAHEAD {
            return Err(SchedulerError::Lookahead(s.lookahead));
        }
        for (name, gate) in &self.channel_switches {
            if let Some(p) = gate.pause().await
                && crate::pause::PausedBy::of(&p) == crate::pause::PausedBy::Sender
            {
                report.channels_tripped.push(name.clone());
            }
        }
        let pause = match &self.pause {
            Some(gate) => gate.pause().await,
            None => None,
        };
        report.pause_read = true;
        if let Some(pause) = pause {
            // Nothing is released, but the tick still measures what waits: a pause must never
            // make the pipeline read healthy (the oldest due renewal keeps ageing on the
            // dashboard and in the alarms).
            report.paused = true;
            report.paused_by = Some(crate::pause::PausedBy::of(&pause));
            let now = self.clock.now();
            let mut oldest: Option<DateTime<Utc>> = None;
            for shard in 0..self.store.shards() {
                let page = self.store.due_page(shard, now, 1, None).await?;
                report.pages += 1;
                if let Some(p) = page.items.first() {
                    oldest = Some(oldest.map_or(p.deliver_after, |o| o.min(p.deliver_after)));
                }
            }
            report.oldest_due_age = oldest.map_or(Duration::ZERO, |o| until(o, now));
            // What the lanes hold is still worth showing (the dashboard's backlog).
            report.lanes = self.queue.depth().await.unwrap_or_default();
            report.backlog = report.lanes.total();
            return Ok(());
        }
        let start = self.clock.now();
        let horizon = add(start, s.lookahead);
        let mut cursors: Vec<Option<Option<S::Cursor>>> = (0..self.store.shards()).map(|_| Some(None)).collect();
        let mut oldest_due: Option<DateTime<Utc>> = None;
        // An index page may repeat an item this tick already handled (a sparse GSI is
        // eventually consistent, and a cursor can straddle an item that just left it):
        // skip repeats so one tick never sends a reminder twice.
        let mut seen = std::collections::HashSet::new();
        let mut min_by: Option<DateTime<Utc>> = None;
        // The live renewals this tick saw, for a projection that knows a wave released ahead
        // cannot start draining before its deliver_after.
        // By rate: each channel with its own, then the fleet's (`rate_index`).
        let mut windows: Vec<Vec<(DateTime<Utc>, DateTime<Utc>)>> = vec![Vec::new(); self.channel_rates.len() + 1];
        let policy = s.lanes();
        // The lanes' depths place the urgent lane's pace behind what it already holds. They are
        // advice: a failed read paces from an empty lane rather than releasing nothing.
        let ahead = match self.queue.depth().await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "lane depths unreadable; pacing the urgent lane from empty");
                LaneDepths::default()
            }
        };
        // The urgent lane's pacers, indexed as `rate_index` (each channel with a rate, then the
        // fleet's). A channel's pacer starts where the fleet's does, behind the urgent work already
        // ready on the lanes at the fleet's rate (the depth is the fleet's, whichever channels it
        // holds), and never paces faster than the fleet's rate.
        let fleet = ReleasePlanner::new(policy, start, ahead);
        let free = fleet.free_at();
        let mut planners: Vec<ReleasePlanner> = self
            .channel_rates
            .iter()
            .map(|(_, rate)| {
                let policy = LanePolicy { rate: rate.min(s.sustainable_rate), ..policy };
                ReleasePlanner::starting_at(policy, free)
            })
            .chain([fleet])
            .collect();
        // The tick reads pages into `urgent` and `roomy` and releases them in groups of up to
        // `RELEASE_GROUP`: the urgent ones first, sorted by deadline over the whole group (pages
        // come in `deliver_after` order, so a page-by-page pace would invert deadlines), then
        // the normal ones. Reading is cheap beside sending and marking, so urgent work waits
        // behind no normal send. A crash before a group is released leaves it pending: the
        // next tick finds it.
        let mut urgent: Vec<Pending> = Vec::new();
        let mut roomy: Vec<Pending> = Vec::new();
        // What is already past its deadline waits for the live renewals read with it: after an
        // outage the index holds hours of missed renewals ahead of live ones (pages come in
        // `deliver_after` order), and expiring them one write at a time as they were read held
        // every live reminder behind them (a 3-hour backlog: 77 s, and some crossed their
        // deadline waiting). They are expired after each group's release, side by side.
        let mut dead: Vec<Pending> = Vec::new();
        let mut per_chunk = Duration::from_millis(50);
        loop {
            let now = self.clock.now();
            // Stop paging in time to release what was read (measured time per chunk of ten).
            let flush = per_chunk.saturating_mul((urgent.len().div_ceil(10) + roomy.len().div_ceil(10)) as u32);
            if until(now, deadline) <= s.safety_margin + flush {
                break;
            }
            if urgent.len() + roomy.len() >= RELEASE_GROUP || dead.len() >= RELEASE_GROUP {
                self.release_group(&mut urgent, &mut roomy, &mut planners, &mut per_chunk, report).await?;
                self.expire(&mut dead, deadline, report).await?;
            }
            // One page from every shard that has more, merged and released in deadline order.
            let mut batch = Vec::new();
            for (shard, slot) in cursors.iter_mut().enumerate() {
                let Some(cursor) = slot.take() else { continue };
                let page = self.store.due_page(shard as u32, horizon, s.page_size, cursor).await?;
                report.pages += 1;
                report.repeated += page.items.iter().filter(|p| seen.contains(&p.reminder_id)).count() as u64;
                batch.extend(page.items.into_iter().filter(|p| seen.insert(p.reminder_id.clone())));
                *slot = page.next.map(Some);
            }
            if batch.is_empty() && cursors.iter().all(Option::is_none) {
                report.finished = true;
                break;
            }
            batch.sort_by(|a, b| (a.deliver_by, &a.reminder_id).cmp(&(b.deliver_by, &b.reminder_id)));
            let now = self.clock.now();
            let (missed, live): (Vec<_>, Vec<_>) = batch.into_iter().partition(|p| p.deliver_by <= now);
            dead.extend(missed);
            for p in &live {
                if p.deliver_after <= now {
                    oldest_due = Some(oldest_due.map_or(p.deliver_after, |o| o.min(p.deliver_after)));
                }
                min_by = Some(min_by.map_or(p.deliver_by, |m| m.min(p.deliver_by)));
                windows[rate_index(&self.channel_rates, p.channel.as_deref())].push((p.deliver_after, p.deliver_by));
            }
            let (tight, rest): (Vec<_>, Vec<_>) =
                live.into_iter().partition(|p| policy.lane(p.deliver_after, p.deliver_by, now) == QueueLane::Urgent);
            urgent.extend(tight);
            roomy.extend(rest);
        }
        self.release_group(&mut urgent, &mut roomy, &mut planners, &mut per_chunk, report).await?;
        self.expire(&mut dead, deadline, report).await?;
        // Expiries cut short by the deadline stay pending: the next tick finds them first.
        report.finished &= dead.is_empty();
        if report.finished && report.refused == 0 {
            self.store.advance_watermark(horizon).await?;
        }
        report.watermark = self.store.watermark().await?;
        let now = self.clock.now();
        // For the backlog metrics only: an unreadable depth leaves them at what this tick saw.
        report.lanes = self.queue.depth().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "lane depths unreadable after the tick");
            LaneDepths::default()
        });
        report.backlog = report.lanes.total().max(report.released) + report.refused;
        report.projected_drain = Duration::from_secs_f64(report.backlog as f64 / s.sustainable_rate.max(1e-9));
        report.min_slack = min_by.map(|b| until(now, b));
        // The renewals this tick saw, behind the work the lanes could hand out before it (visible
        // or in flight: what is still delayed was released for later and is not ahead), served
        // earliest-deadline-first, each from its own deliver_after: does one miss its deadline?
        // (Comparing the whole backlog's drain with the smallest slack counted delayed work as
        // ahead, and a wave released ahead of its deliver_after as draining from now.)
        // Each channel with a rate of its own is served at it; the work ahead on the lanes is
        // the fleet's, drained at the fleet's rate, whichever channels it holds.
        let behind = Duration::from_secs_f64(ahead.ready() as f64 / s.sustainable_rate.max(1e-9));
        // And all of them together at the fleet's rate: the senders' own capacity
        // (`SUSTAINABLE_RATE_PER_SEC`) binds whatever the channels' quotas.
        let from = add(start, behind);
        let mut all: Vec<(DateTime<Utc>, DateTime<Utc>)> =
            if self.channel_rates.is_empty() { Vec::new() } else { windows.concat() };
        let rates = self.channel_rates.iter().map(|(_, r)| *r).chain([s.sustainable_rate]);
        let missing: Vec<bool> =
            windows.iter_mut().zip(rates).map(|(jobs, rate)| edf_misses(jobs, from, rate) > 0).collect();
        report.breach_channels =
            self.channel_rates.iter().zip(&missing).filter(|(_, m)| **m).map(|((name, _), _)| name.clone()).collect();
        report.projected_breach = missing.contains(&true) || edf_misses(&mut all, from, s.sustainable_rate) > 0;
        report.oldest_due_age = oldest_due.map_or(Duration::ZERO, |o| until(o, now));
        Ok(())
    }
}
