//! In-memory implementations of every port, and a fault-injecting ledger wrapper, for unit
//! tests, handler tests and the simulator (feature `testing`). The ledger fake obeys the same
//! contract suite as the DynamoDB adapter, so it cannot drift.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::backoff::{Jitter, SplitMix64};
use crate::clock::Clock;
use crate::contract::ReminderMessage;
use crate::decision::{ClaimView, RenewalView};
use crate::ids::{ReminderId, RenewalId, TenantId};
use crate::ports::{
    HistoryEntry, Ledger, LedgerError, LedgerRecord, OwnerToken, Provider, ProviderError, ProviderRequest, Quarantine,
    QueueError, RenewalLookup, Renewals, RenewalsError, SendQueue, SettleOutcome, Settlement,
};
use crate::provider::ProviderOutcome;
use crate::reason::{ReasonCode, ReminderState};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn entry(msg: &ReminderMessage, at: DateTime<Utc>, state: ReminderState, s: Option<&Settlement>) -> HistoryEntry {
    HistoryEntry {
        at,
        state,
        reason: s.and_then(|s| s.reason),
        attempts: s.map_or(msg.attempt, |s| s.attempts),
        correlation_id: msg.correlation_id.to_string(),
        redrive_id: msg.redrive.as_ref().map(|r| r.id.to_string()),
        provider_status: s.and_then(|s| s.provider_status),
        next_at: s.and_then(|s| s.next_at),
    }
}

/// A settlement that ends a reminder in `state` for `reason` (no receipt, no next time).
pub fn ending(state: ReminderState, reason: ReasonCode, attempts: u32, provider_status: Option<u16>) -> Settlement {
    Settlement { state, reason: Some(reason), attempts, receipt: None, provider_status, next_at: None }
}

/// `msg` as a redrive with id `id` re-released it (its stamp: `base_attempt`, `resend_unknown`).
#[allow(clippy::panic)]
pub fn redriven(msg: &ReminderMessage, id: &str, base_attempt: u32, resend_unknown: bool) -> ReminderMessage {
    let id = crate::ids::RedriveId::parse(id).unwrap_or_else(|e| panic!("test redrive id {id:?}: {e}"));
    let stamp = crate::contract::RedriveStamp {
        id,
        reason: "redrive (test)".into(),
        owner: "tests".into(),
        base_attempt,
        resend_unknown,
    };
    ReminderMessage { redrive: Some(stamp), ..msg.clone() }
}

/// A valid message for tests: tenant `acme`, kind `renewal_7d`, renewal `ren-{name}`,
/// correlation `corr-{name}`, window `[after, by)`, first enqueued at `after`, attempt 0; the
/// reminder id is derived from these as production derives it.
///
/// # Panics
/// When `name` makes an invalid renewal id (test support only).
#[allow(clippy::panic)]
pub fn message(name: &str, after: DateTime<Utc>, by: DateTime<Utc>) -> ReminderMessage {
    use crate::ids::{CorrelationId, ReminderKind};
    let ok = |e: crate::ids::IdError| -> ! { panic!("test message {name:?}: {e}") };
    let tenant = TenantId::parse("acme").unwrap_or_else(|e| ok(e));
    let renewal = RenewalId::parse(format!("ren-{name}")).unwrap_or_else(|e| ok(e));
    let kind = ReminderKind::parse("renewal_7d").unwrap_or_else(|e| ok(e));
    ReminderMessage {
        channel: None,
        reminder_id: ReminderId::derive(&tenant, &renewal, &kind, after.date_naive()),
        renewal_id: renewal,
        tenant_id: tenant,
        kind,
        deliver_after: after,
        deliver_by: by,
        attempt: 0,
        first_enqueued: after,
        correlation_id: CorrelationId::parse(format!("corr-{name}")).unwrap_or_else(|e| ok(e)),
        redrive: None,
    }
}

/// DynamoDB's item size limit (400 KB), which the in-memory ledger enforces too.
pub const DYNAMODB_MAX_ITEM_BYTES: usize = 400 * 1024;

/// The size DynamoDB bills and limits for a ledger record stored as the DynamoDB adapter
/// stores it (`punctual_aws::ledger`): every attribute's name plus its value — a string its
/// UTF-8 bytes, a number about one byte per two digits plus one, a list or map 3 bytes plus
/// 1 per element plus its elements (and a map its keys).
pub fn ledger_item_bytes(rec: &LedgerRecord, msg: &ReminderMessage) -> usize {
    fn num(v: i64) -> usize {
        v.unsigned_abs().to_string().len().div_ceil(2) + 1
    }
    fn attr(name: &str, value: usize) -> usize {
        name.len() + value
    }
    let ms = |t: DateTime<Utc>| num(t.timestamp_millis());
    let mut n = attr("pk", "reminder:".len() + rec.reminder_id.as_str().len())
        + attr("state", rec.state.as_str().len())
        + attr("attempts", num(i64::from(rec.attempts)))
        + attr("deliver_by_ms", ms(rec.deliver_by))
        + attr("tenant_id", msg.tenant_id.as_str().len())
        + attr("renewal_id", msg.renewal_id.as_str().len())
        // `updated_ms` is not kept in memory: any instant of this era has as many digits.
        + attr("updated_ms", ms(rec.deliver_by))
        + attr("ttl_epoch_s", num(rec.deliver_by.timestamp()));
    n += rec.deliver_after.map_or(0, |t| attr("deliver_after_ms", ms(t)));
    n += rec.owner.as_ref().map_or(0, |o| attr("owner", o.len()));
    n += rec.lease_until.map_or(0, |t| attr("lease_until_ms", ms(t)));
    n += rec.receipt.as_ref().map_or(0, |r| attr("receipt", r.len()));
    n += rec.last_reason.map_or(0, |r| attr("last_reason", r.as_str().len()));
    n += rec.next_at.map_or(0, |t| attr("next_at_ms", ms(t)));
    if rec.history_dropped > 0 {
        n += attr("history_dropped", num(i64::try_from(rec.history_dropped).unwrap_or(i64::MAX)));
    }
    let entry = |h: &HistoryEntry| {
        let mut m = 3
            + 1
            + attr("at_ms", ms(h.at))
            + 1
            + attr("state", h.state.as_str().len())
            + 1
            + attr("attempts", num(i64::from(h.attempts)))
            + 1
            + attr("correlation_id", h.correlation_id.len());
        m += h.redrive_id.as_ref().map_or(0, |r| 1 + attr("redrive_id", r.len()));
        m += h.reason.map_or(0, |r| 1 + attr("reason", r.as_str().len()));
        m += h.provider_status.map_or(0, |p| 1 + attr("provider_status", num(i64::from(p))));
        m += h.next_at.map_or(0, |t| 1 + attr("next_at_ms", ms(t)));
        m
    };
    n + attr("history", 3 + rec.history.iter().map(|h| 1 + entry(h)).sum::<usize>())
}

#[derive(Debug, thiserror::Error)]
#[error("item size {bytes} bytes has exceeded the maximum allowed size ({DYNAMODB_MAX_ITEM_BYTES})")]
struct ItemTooLarge {
    bytes: usize,
}

/// Appends `e` to `r`'s history the way every ledger must: compacting first when it is full.
fn append(r: &mut LedgerRecord, e: HistoryEntry) {
    r.history_dropped += crate::ports::compact_history(&mut r.history);
    // Exactly one more: a record is cloned on every write anyway, and doubling would leave a
    // million two-entry histories holding four (the simulator's ledger is its largest table).
    r.history.reserve_exact(1);
    r.history.push(e);
}

/// Stores `next` as `msg`'s record unless it exceeds DynamoDB's item limit (which refuses the
/// whole write, as DynamoDB does).
fn store(records: &mut Records, msg: &ReminderMessage, next: Box<LedgerRecord>) -> Result<(), LedgerError> {
    let bytes = ledger_item_bytes(&next, msg);
    if bytes > DYNAMODB_MAX_ITEM_BYTES {
        return Err(LedgerError::Unknown(Box::new(ItemTooLarge { bytes })));
    }
    debug_assert_eq!(next.reminder_id, msg.reminder_id);
    records.replace(Stored(next));
    Ok(())
}

/// The records, each boxed: a hash table keeps about twice its length in slots, and a slot of
/// a pointer instead of a whole record is most of what the simulator's 1,000,000-reminder
/// ledger weighs. A record is found by its own `reminder_id` (no second copy as a key).
type Records = std::collections::HashSet<Stored>;

/// A stored record, equal and hashed as its reminder id, so the table is searched by id.
#[derive(Debug, Clone)]
struct Stored(Box<LedgerRecord>);

impl PartialEq for Stored {
    fn eq(&self, other: &Self) -> bool {
        self.0.reminder_id == other.0.reminder_id
    }
}

impl Eq for Stored {}

impl std::hash::Hash for Stored {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.reminder_id.hash(state);
    }
}

impl std::borrow::Borrow<ReminderId> for Stored {
    fn borrow(&self) -> &ReminderId {
        &self.0.reminder_id
    }
}

/// The in-memory ledger. It enforces what DynamoDB would: the bounded history and the 400 KB
/// item limit ([`ledger_item_bytes`]).
#[derive(Debug, Clone, Default)]
pub struct MemoryLedger {
    records: Arc<Mutex<Records>>,
    /// Write requests (claims, settles) and read requests received, as DynamoDB would bill them.
    requests: Arc<[std::sync::atomic::AtomicU64; 2]>,
    /// The outbox, when kept ([`MemoryLedger::with_outbox`]).
    outbox: Option<Arc<Mutex<MemoryOutbox>>>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Write requests received so far (every claim and settle that reached the store).
    pub fn writes(&self) -> u64 {
        self.requests[0].load(Ordering::Relaxed)
    }

    /// The id of every record (the fault checker's census).
    pub fn reminder_ids(&self) -> Vec<ReminderId> {
        lock(&self.records).iter().map(|r| r.0.reminder_id.clone()).collect()
    }

    /// Read requests received so far.
    pub fn reads(&self) -> u64 {
        self.requests[1].load(Ordering::Relaxed)
    }

    fn count(&self, i: usize) {
        self.requests[i].fetch_add(1, Ordering::Relaxed);
    }
}

fn fresh_record(msg: &ReminderMessage) -> Box<LedgerRecord> {
    Box::new(LedgerRecord {
        deliver_after: Some(msg.deliver_after),
        ..LedgerRecord::new(msg.reminder_id.clone(), ReminderState::Enqueued, msg.deliver_by)
    })
}

/// The release a copy belongs to: its redrive id, or "" for the scheduler's release. Redrive ids
/// sort by time (`rd-{UTC timestamp}-…`), so a later redrive compares greater.
fn release_of(msg: &ReminderMessage) -> &str {
    msg.redrive.as_ref().map_or("", |r| r.id.as_str())
}

/// A record `r` may be claimed by `msg`: not ended, or dead-lettered and re-released by a
/// redrive, or cancelled and released again since (the ledger contract; the DynamoDB
/// adapter's condition says the same).
fn claimable(r: &LedgerRecord, msg: &ReminderMessage) -> bool {
    match r.state {
        ReminderState::Delivered | ReminderState::Expired => false,
        ReminderState::Cancelled => crate::ports::revives_cancelled(msg, r),
        ReminderState::DeadLettered => msg.redrive.is_some(),
        _ => true,
    }
}

fn lease_live(r: &LedgerRecord, now: DateTime<Utc>) -> bool {
    r.lease_until.is_some_and(|l| l > now)
}

impl Ledger for MemoryLedger {
    async fn claim(
        &self,
        msg: &ReminderMessage,
        owner: &OwnerToken,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<ClaimView, LedgerError> {
        self.count(0);
        let mut records = lock(&self.records);
        let mut r = records.get(&msg.reminder_id).map_or_else(|| fresh_record(msg), |s| s.0.clone());
        if r.state == ReminderState::Delivered {
            return Ok(ClaimView::AlreadyDelivered);
        }
        let release = release_of(msg);
        if !claimable(&r, msg)
            || (r.state == ReminderState::DeadLettered
                && !crate::ports::revives_dead_letter(msg, r.release_id.as_deref()))
        {
            // A dead-lettered reminder is revived only by a redrive that has not run on it yet:
            // a copy of a redrive whose own chain already ended it is a duplicate of that chain.
            return Ok(ClaimView::Ended { state: r.state });
        }
        // A copy reviving a cancellation (`claimable` checked it was released after it) is not
        // superseded by a redrive that ran before the cancellation: the cancellation ended that
        // chain, and the re-armed release carries the reminder on.
        let reviving = r.state == ReminderState::Cancelled;
        if !reviving && r.release_id.as_deref().is_some_and(|latest| release < latest) {
            return Ok(ClaimView::Superseded);
        }
        let ours = r.owner.as_deref() == Some(owner.as_str());
        if lease_live(&r, now) && !ours {
            return Ok(ClaimView::HeldElsewhere { lease_until: r.lease_until.unwrap_or(now) });
        }
        r.state = ReminderState::Leased;
        if msg.redrive.is_some() {
            r.release_id = Some(release.to_owned());
        } else {
            // Only a copy no redrive supersedes (none ran, or a cancellation ended its chain)
            // gets here: the scheduler's release is the latest.
            r.release_id = None;
        }
        r.owner = Some(owner.as_str().to_owned());
        r.lease_until = Some(lease_until);
        append(&mut r, entry(msg, now, ReminderState::Leased, None));
        let prior_attempts = r.attempts;
        let unsettled_call = r.call_owner.as_deref().is_some_and(|o| o != owner.as_str())
            && !crate::ports::covered_by_operator(msg, r.call_release.as_deref());
        store(&mut records, msg, r)?;
        Ok(ClaimView::Claimed { prior_attempts, unsettled_call })
    }

    async fn settle(
        &self,
        msg: &ReminderMessage,
        owner: Option<&OwnerToken>,
        now: DateTime<Utc>,
        s: &Settlement,
    ) -> Result<SettleOutcome, LedgerError> {
        self.count(0);
        let mut records = lock(&self.records);
        let existing = records.get(&msg.reminder_id).map(|s| &*s.0);
        if let Some(r) = existing {
            if r.state == ReminderState::Delivered {
                return Ok(SettleOutcome::AlreadyDelivered);
            }
            if s.state != ReminderState::Delivered {
                let revived = (r.state == ReminderState::DeadLettered
                    && crate::ports::revives_dead_letter(msg, r.release_id.as_deref()))
                    || crate::ports::revives_cancelled(msg, r);
                if owner.is_none() && r.state.is_terminal() && !revived {
                    return Ok(SettleOutcome::AlreadyEnded(r.state));
                }
                let allowed = match owner {
                    Some(o) => r.owner.as_deref() == Some(o.as_str()) && r.state == ReminderState::Leased,
                    None => !lease_live(r, now),
                };
                if !allowed {
                    return Ok(SettleOutcome::LeaseLost);
                }
            }
        }
        let mut r = records.get(&msg.reminder_id).map_or_else(|| fresh_record(msg), |s| s.0.clone());
        r.state = s.state;
        r.attempts = s.attempts;
        r.owner = None;
        r.lease_until = None;
        if !crate::ports::keeps_call_mark(s.reason) {
            r.call_owner = None;
            r.call_release = None;
        }
        r.receipt = s.receipt.clone().or(r.receipt.take());
        r.last_reason = s.reason;
        r.next_at = s.next_at;
        append(&mut r, entry(msg, now, s.state, Some(s)));
        store(&mut records, msg, r)?;
        // The ending's event, in the same write (the DynamoDB ledger's one update).
        if let Some(event) = crate::outcome::OutcomeEvent::of_settlement(msg, s, now) {
            self.add_event(&msg.reminder_id, event, now);
        }
        Ok(SettleOutcome::Recorded)
    }

    async fn mark_call(
        &self,
        msg: &ReminderMessage,
        owner: &OwnerToken,
        now: DateTime<Utc>,
    ) -> Result<bool, LedgerError> {
        self.count(0);
        let mut records = lock(&self.records);
        let Some(Stored(r)) = records.get(&msg.reminder_id) else { return Ok(false) };
        if r.state != ReminderState::Leased || r.owner.as_deref() != Some(owner.as_str()) || !lease_live(r, now) {
            return Ok(false);
        }
        let Some(Stored(mut r)) = records.take(&msg.reminder_id) else { return Ok(false) };
        r.call_owner = Some(owner.as_str().to_owned());
        r.call_release = Some(release_of(msg).to_owned());
        records.insert(Stored(r));
        Ok(true)
    }

    async fn get(&self, id: &ReminderId) -> Result<Option<LedgerRecord>, LedgerError> {
        self.count(1);
        Ok(lock(&self.records).get(id).map(|s| LedgerRecord::clone(&s.0)))
    }

    async fn append_outcome(
        &self,
        msg: &ReminderMessage,
        event: &crate::outcome::OutcomeEvent,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        self.count(0);
        // Only to a record that exists, as the DynamoDB ledger's conditional update.
        if lock(&self.records).contains(&msg.reminder_id) {
            self.add_event(&msg.reminder_id, event.clone(), now);
        }
        Ok(())
    }
}

/// The in-memory ledger's outbox: each record's unpublished events and when the last was added.
type MemoryOutbox = HashMap<ReminderId, (i64, Vec<crate::outcome::OutcomeEvent>)>;

impl MemoryLedger {
    /// A ledger that keeps an outbox, as the DynamoDB ledger does (the fault checker's world;
    /// the simulator's large runs leave it off: a million reminders' events would be most of
    /// what it weighs).
    pub fn with_outbox() -> Self {
        Self { outbox: Some(Arc::default()), ..Self::default() }
    }

    fn add_event(&self, id: &ReminderId, event: crate::outcome::OutcomeEvent, now: DateTime<Utc>) {
        if let Some(outbox) = &self.outbox {
            let mut o = lock(outbox);
            let entry = o.entry(id.clone()).or_default();
            entry.0 = now.timestamp_millis().max(entry.0 + 1);
            entry.1.push(event);
        }
    }
}

impl crate::ports::Outbox for MemoryLedger {
    async fn pending(&self, limit: usize) -> Result<Vec<crate::ports::OutboxEntry>, crate::ports::OutboxError> {
        let Some(outbox) = &self.outbox else { return Ok(Vec::new()) };
        let o = lock(outbox);
        let mut entries: Vec<crate::ports::OutboxEntry> = o
            .iter()
            .map(|(id, (added_ms, events))| crate::ports::OutboxEntry {
                reminder_id: id.to_string(),
                added_ms: *added_ms,
                events: events.clone(),
                unreadable: 0,
            })
            .collect();
        entries.sort_by(|a, b| (a.added_ms, &a.reminder_id).cmp(&(b.added_ms, &b.reminder_id)));
        entries.truncate(limit);
        Ok(entries)
    }

    async fn clear(&self, entry: &crate::ports::OutboxEntry) -> Result<bool, crate::ports::OutboxError> {
        let Some(outbox) = &self.outbox else { return Ok(true) };
        let mut o = lock(outbox);
        let Ok(id) = ReminderId::parse(&entry.reminder_id) else { return Ok(true) };
        match o.get(&id) {
            Some((added, _)) if *added == entry.added_ms => {
                o.remove(&id);
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Ok(true),
        }
    }
}

/// An outcome sink in memory: every event it accepted, in order; it can refuse a set number of
/// calls (an EventBridge outage), and lose the answer to an accepted call (a crash after the
/// publish, before the clear).
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    events: Arc<Mutex<Vec<crate::outcome::OutcomeEvent>>>,
    refuse: Arc<AtomicU32>,
    lose_answer: Arc<AtomicU32>,
}

impl MemorySink {
    /// Every event accepted, in order (a republished one is listed again).
    pub fn events(&self) -> Vec<crate::outcome::OutcomeEvent> {
        lock(&self.events).clone()
    }

    /// The next `n` calls fail without accepting anything.
    pub fn refuse_next(&self, n: u32) {
        self.refuse.store(n, Ordering::Relaxed);
    }

    /// The next `n` calls accept their events and then fail (the answer is lost).
    pub fn lose_next_answers(&self, n: u32) {
        self.lose_answer.store(n, Ordering::Relaxed);
    }
}

fn take_one(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1)).is_ok()
}

impl crate::ports::OutcomeSink for MemorySink {
    async fn publish(&self, events: &[crate::outcome::OutcomeEvent]) -> Result<Vec<bool>, crate::ports::SinkError> {
        #[derive(Debug, thiserror::Error)]
        #[error("injected sink failure")]
        struct SinkDown;
        if take_one(&self.refuse) {
            return Err(crate::ports::SinkError::Unknown(Box::new(SinkDown)));
        }
        lock(&self.events).extend(events.iter().cloned());
        if take_one(&self.lose_answer) {
            return Err(crate::ports::SinkError::Unknown(Box::new(SinkDown)));
        }
        Ok(vec![true; events.len()])
    }
}

/// A ledger whose reads take `read` of `clock`'s time (DynamoDB's round trip, when a service
/// reads many records); its writes take none.
#[derive(Debug, Clone)]
pub struct SlowReads<L, C> {
    inner: L,
    clock: C,
    read: Duration,
}

impl<L, C> SlowReads<L, C> {
    /// `inner`, each read taking `read` on `clock`.
    pub fn new(inner: L, clock: C, read: Duration) -> Self {
        Self { inner, clock, read }
    }
}

impl<L: Ledger, C: Clock> Ledger for SlowReads<L, C> {
    async fn claim(
        &self,
        msg: &ReminderMessage,
        owner: &OwnerToken,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<ClaimView, LedgerError> {
        self.inner.claim(msg, owner, now, lease_until).await
    }

    async fn settle(
        &self,
        msg: &ReminderMessage,
        owner: Option<&OwnerToken>,
        now: DateTime<Utc>,
        s: &Settlement,
    ) -> Result<SettleOutcome, LedgerError> {
        self.inner.settle(msg, owner, now, s).await
    }

    async fn mark_call(
        &self,
        msg: &ReminderMessage,
        owner: &OwnerToken,
        now: DateTime<Utc>,
    ) -> Result<bool, LedgerError> {
        self.inner.mark_call(msg, owner, now).await
    }

    async fn get(&self, id: &ReminderId) -> Result<Option<LedgerRecord>, LedgerError> {
        self.clock.sleep(self.read).await;
        self.inner.get(id).await
    }

    async fn append_outcome(
        &self,
        msg: &ReminderMessage,
        event: &crate::outcome::OutcomeEvent,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        self.inner.append_outcome(msg, event, now).await
    }
}

/// Which ledger call a [`FaultyLedger`] breaks, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// `settle(delivered)` fails without writing: a crash after the provider accepted and
    /// before the ledger recorded it.
    LoseDeliveredWrite,
    /// `claim` writes, then reports a failure: a timeout whose write actually happened.
    UncertainClaim,
    /// `claim` fails without writing (the store refused or was unreachable).
    ClaimRefused,
    /// `settle` writes, then reports a failure: the answer to an applied write was lost.
    UncertainSettle,
}

impl Fault {
    /// Every fault.
    pub const ALL: [Fault; 4] =
        [Fault::LoseDeliveredWrite, Fault::UncertainClaim, Fault::ClaimRefused, Fault::UncertainSettle];
}

/// When a [`FaultyLedger`] fires.
#[derive(Debug, Clone)]
enum Trigger {
    /// The next `n` times the fault applies.
    Times(Arc<AtomicU32>),
    /// Each time it applies, with probability `p` (seeded, so a run replays).
    Chance(Arc<Mutex<SplitMix64>>, f64),
    /// Every time it applies while the switch is on (an outage with a start and an end).
    While(Arc<std::sync::atomic::AtomicBool>),
}

/// A ledger wrapper that injects faults: a set number of times (unit tests) or at random with
/// seeded probabilities (the simulator's crash model, the fault checker's plans). The one
/// fault injector of the ledger port; it counts what it injected.
#[derive(Debug, Clone)]
pub struct FaultyLedger<L> {
    inner: L,
    plan: Vec<(Fault, Trigger)>,
    injected: Arc<Mutex<HashMap<Fault, u64>>>,
}

impl<L> FaultyLedger<L> {
    /// Wraps `inner`, injecting `fault` the next `times` times it applies.
    pub fn new(inner: L, fault: Fault, times: u32) -> Self {
        Self::planned(inner, vec![(fault, Trigger::Times(Arc::new(AtomicU32::new(times))))])
    }

    /// Wraps `inner`, injecting `fault` with probability `p` each time it applies, drawn from
    /// a generator seeded with `seed`.
    pub fn with_chance(inner: L, fault: Fault, p: f64, seed: u64) -> Self {
        Self::with_chances(inner, &[(fault, p)], seed)
    }

    /// Wraps `inner`, injecting each listed fault with its probability (one generator per
    /// fault, seeded from `seed`).
    pub fn with_chances(inner: L, faults: &[(Fault, f64)], seed: u64) -> Self {
        let plan = faults
            .iter()
            .enumerate()
            .map(|(i, (f, p))| {
                (*f, Trigger::Chance(Arc::new(Mutex::new(SplitMix64::new(seed ^ ((i as u64) << 8)))), *p))
            })
            .collect();
        Self::planned(inner, plan)
    }

    /// Wraps `inner`, injecting `fault` every time it applies while `on` is set (the drill's
    /// outages: the world sets it at the start and clears it at the end).
    pub fn while_on(inner: L, fault: Fault, on: Arc<std::sync::atomic::AtomicBool>) -> Self {
        Self::planned(inner, vec![(fault, Trigger::While(on))])
    }

    fn planned(inner: L, plan: Vec<(Fault, Trigger)>) -> Self {
        Self { inner, plan, injected: Arc::default() }
    }

    /// The wrapped ledger.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// How many times each fault was injected so far.
    pub fn injected(&self) -> HashMap<Fault, u64> {
        lock(&self.injected).clone()
    }

    fn fire(&self, fault: Fault) -> bool {
        let fired = self.plan.iter().filter(|(f, _)| *f == fault).any(|(_, t)| match t {
            Trigger::Times(n) => n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok(),
            Trigger::Chance(rng, p) => lock(rng).next_unit() < *p,
            Trigger::While(on) => on.load(Ordering::SeqCst),
        });
        if fired {
            *lock(&self.injected).entry(fault).or_default() += 1;
        }
        fired
    }
}

#[derive(Debug, thiserror::Error)]
#[error("injected fault: {0:?}")]
struct Injected(Fault);

fn injected(f: Fault) -> LedgerError {
    LedgerError::Unknown(Box::new(Injected(f)))
}

impl<L: Ledger> Ledger for FaultyLedger<L> {
    async fn claim(
        &self,
        msg: &ReminderMessage,
        owner: &OwnerToken,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<ClaimView, LedgerError> {
        if self.fire(Fault::ClaimRefused) {
            return Err(injected(Fault::ClaimRefused));
        }
        let view = self.inner.claim(msg, owner, now, lease_until).await?;
        if self.fire(Fault::UncertainClaim) {
            return Err(injected(Fault::UncertainClaim));
        }
        Ok(view)
    }

    async fn settle(
        &self,
        msg: &ReminderMessage,
        owner: Option<&OwnerToken>,
        now: DateTime<Utc>,
        s: &Settlement,
    ) -> Result<SettleOutcome, LedgerError> {
        if s.state == ReminderState::Delivered && self.fire(Fault::LoseDeliveredWrite) {
            return Err(injected(Fault::LoseDeliveredWrite));
        }
        let outcome = self.inner.settle(msg, owner, now, s).await?;
        if self.fire(Fault::UncertainSettle) {
            return Err(injected(Fault::UncertainSettle));
        }
        Ok(outcome)
    }

    async fn mark_call(
        &self,
        msg: &ReminderMessage,
        owner: &OwnerToken,
        now: DateTime<Utc>,
    ) -> Result<bool, LedgerError> {
        if self.fire(Fault::ClaimRefused) {
            return Err(injected(Fault::ClaimRefused));
        }
        let marked = self.inner.mark_call(msg, owner, now).await?;
        if self.fire(Fault::UncertainClaim) {
            return Err(injected(Fault::UncertainClaim));
        }
        Ok(marked)
    }

    async fn get(&self, id: &ReminderId) -> Result<Option<LedgerRecord>, LedgerError> {
        self.inner.get(id).await
    }

    async fn append_outcome(
        &self,
        msg: &ReminderMessage,
        event: &crate::outcome::OutcomeEvent,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        self.inner.append_outcome(msg, event, now).await
    }
}

/// The in-memory recipients table.
#[derive(Debug, Clone, Default)]
pub struct MemoryRecipients {
    rows: Arc<Mutex<HashMap<(String, String), crate::ports::EmailAddress>>>,
}

impl MemoryRecipients {
    /// Stores one address of `tenant` (panics on an invalid one: test support).
    #[allow(clippy::panic)]
    pub fn set(&self, tenant: &str, recipient_ref: &str, address: &str) {
        let a = crate::ports::EmailAddress::parse(address).unwrap_or_else(|e| panic!("{e}"));
        lock(&self.rows).insert((tenant.to_owned(), recipient_ref.to_owned()), a);
    }
}

impl crate::ports::Recipients for MemoryRecipients {
    async fn address(
        &self,
        tenant: &TenantId,
        recipient_ref: &str,
    ) -> Result<Option<crate::ports::EmailAddress>, crate::ports::RecipientsError> {
        Ok(lock(&self.rows).get(&(tenant.as_str().to_owned(), recipient_ref.to_owned())).cloned())
    }
}

/// The in-memory renewals table. Unknown renewals are `Missing`.
#[derive(Debug, Clone, Default)]
pub struct MemoryRenewals {
    rows: Arc<Mutex<HashMap<(TenantId, RenewalId), RenewalLookup>>>,
}

impl MemoryRenewals {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets one renewal's view (its channel and version kept; a new row's channel is `email`).
    pub fn set(&self, tenant: &TenantId, renewal: &RenewalId, view: RenewalView) {
        let mut rows = lock(&self.rows);
        let row = rows.get(&(tenant.clone(), renewal.clone()));
        let version = row.and_then(|r| r.version.clone());
        let channel = row.and_then(|r| r.channel.clone()).unwrap_or_else(|| "email".to_owned());
        let lookup = RenewalLookup {
            view,
            recipient_ref: Some(format!("recipient:{tenant}:{renewal}")),
            channel: Some(channel),
            version,
            data: None,
        };
        rows.insert((tenant.clone(), renewal.clone()), lookup);
    }

    /// Sets the channel a renewal's row names (an unknown renewal becomes active).
    pub fn set_channel(&self, tenant: &TenantId, renewal: &RenewalId, channel: &str) {
        if !lock(&self.rows).contains_key(&(tenant.clone(), renewal.clone())) {
            self.set(tenant, renewal, RenewalView::Active);
        }
        if let Some(row) = lock(&self.rows).get_mut(&(tenant.clone(), renewal.clone())) {
            row.channel = Some(channel.to_owned());
        }
    }

    /// Sets the version a renewal's row holds (an import computed its reminder and times);
    /// an unknown renewal becomes active.
    pub fn set_version(&self, tenant: &TenantId, renewal: &RenewalId, version: crate::ports::RenewalVersion) {
        let mut rows = lock(&self.rows);
        let row = rows.entry((tenant.clone(), renewal.clone())).or_insert_with(|| RenewalLookup {
            view: RenewalView::Active,
            recipient_ref: Some(format!("recipient:{tenant}:{renewal}")),
            channel: Some("email".to_owned()),
            version: None,
            data: None,
        });
        row.version = Some(version);
    }

    /// A table where every renewal is active.
    pub fn all_active() -> AllActive {
        AllActive
    }
}

impl Renewals for MemoryRenewals {
    async fn lookup(&self, tenant: &TenantId, renewal: &RenewalId) -> Result<RenewalLookup, RenewalsError> {
        Ok(lock(&self.rows).get(&(tenant.clone(), renewal.clone())).cloned().unwrap_or(RenewalLookup {
            view: RenewalView::Missing,
            recipient_ref: None,
            channel: None,
            version: None,
            data: None,
        }))
    }
}

/// A renewals table where every renewal is active.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllActive;

impl Renewals for AllActive {
    async fn lookup(&self, tenant: &TenantId, renewal: &RenewalId) -> Result<RenewalLookup, RenewalsError> {
        Ok(RenewalLookup {
            view: RenewalView::Active,
            recipient_ref: Some(format!("recipient:{tenant}:{renewal}")),
            channel: Some("email".to_owned()),
            version: None,
            data: None,
        })
    }
}

/// A renewals table where every renewal is active, on the channel the function names for its
/// renewal id (two channels from one population, an undeclared one).
#[derive(Debug, Clone, Copy)]
pub struct ActiveOn(pub fn(&RenewalId) -> &'static str);

impl Renewals for ActiveOn {
    async fn lookup(&self, tenant: &TenantId, renewal: &RenewalId) -> Result<RenewalLookup, RenewalsError> {
        let mut view = AllActive.lookup(tenant, renewal).await?;
        view.channel = Some((self.0)(renewal).to_owned());
        Ok(view)
    }
}

/// An owned copy of a quarantined message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLettered {
    /// The body.
    pub body: String,
    /// Why.
    pub reason: ReasonCode,
    /// Detail.
    pub detail: String,
    /// Attempts.
    pub attempts: u32,
    /// Last provider status.
    pub provider_status: Option<u16>,
    /// The send queue's message id.
    pub original_message_id: String,
}

/// The in-memory send queue and DLQ, recording what the sender put on them.
#[derive(Debug, Clone, Default)]
pub struct MemoryQueue {
    /// Requeued copies and their delays.
    pub requeued: Arc<Mutex<Vec<(ReminderMessage, Duration)>>>,
    /// The lane of each requeued copy, in the same order.
    pub lanes: Arc<Mutex<Vec<crate::lanes::QueueLane>>>,
    /// Dead-lettered messages.
    pub dead: Arc<Mutex<Vec<DeadLettered>>>,
}

impl MemoryQueue {
    /// Empty queues.
    pub fn new() -> Self {
        Self::default()
    }
    /// Requeued copies so far.
    pub fn requeued(&self) -> Vec<(ReminderMessage, Duration)> {
        lock(&self.requeued).clone()
    }
    /// The lane of each requeued copy so far.
    pub fn lanes(&self) -> Vec<crate::lanes::QueueLane> {
        lock(&self.lanes).clone()
    }
    /// Dead-lettered messages so far.
    pub fn dead(&self) -> Vec<DeadLettered> {
        lock(&self.dead).clone()
    }
}

impl SendQueue for MemoryQueue {
    async fn requeue(
        &self,
        msg: &ReminderMessage,
        delay: Duration,
        lane: crate::lanes::QueueLane,
    ) -> Result<(), QueueError> {
        lock(&self.requeued).push((msg.clone(), delay));
        lock(&self.lanes).push(lane);
        Ok(())
    }

    async fn dead_letter(&self, q: &Quarantine<'_>) -> Result<(), QueueError> {
        lock(&self.dead).push(DeadLettered {
            body: q.body.to_owned(),
            reason: q.reason,
            detail: q.detail.to_owned(),
            attempts: q.attempts,
            provider_status: q.provider_status,
            original_message_id: q.original_message_id.to_owned(),
        });
        Ok(())
    }
}

/// A provider that answers from a script (then accepts), advancing a clock by its latency,
/// and records every call's idempotency key and timeout.
#[derive(Debug, Clone)]
pub struct ScriptedProvider<C> {
    script: Arc<Mutex<VecDeque<ProviderOutcome>>>,
    calls: Arc<Mutex<Vec<(String, Duration)>>>,
    latency: Duration,
    clock: C,
    honours_keys: bool,
    fail_next: Arc<AtomicU32>,
}

impl<C: Clock> ScriptedProvider<C> {
    /// A provider answering `script` in order, then 202 for every further call.
    pub fn new(clock: C, latency: Duration, script: impl IntoIterator<Item = ProviderOutcome>) -> Self {
        Self {
            script: Arc::new(Mutex::new(script.into_iter().collect())),
            calls: Arc::default(),
            latency,
            clock,
            honours_keys: true,
            fail_next: Arc::default(),
        }
    }

    /// The same provider, profiled as not honouring idempotency keys (like SES).
    pub fn without_keys(mut self) -> Self {
        self.honours_keys = false;
        self
    }

    /// The first call fails before calling (a `ProviderError`, like a failed recipients read);
    /// the call is still recorded, so tests can count it.
    pub fn failing_once(self) -> Self {
        self.failing(1)
    }

    /// The next `times` calls fail before calling (see [`ScriptedProvider::failing_once`]).
    pub fn failing(self, times: u32) -> Self {
        self.fail_next.store(times, Ordering::SeqCst);
        self
    }

    /// Every call so far: (idempotency key, timeout).
    pub fn calls(&self) -> Vec<(String, Duration)> {
        lock(&self.calls).clone()
    }
}

impl<C: Clock> Provider for ScriptedProvider<C> {
    fn profile(&self) -> crate::provider::ProviderProfile {
        crate::provider::ProviderProfile { honours_keys: self.honours_keys }
    }

    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        let key = req.message.reminder_id.idempotency_key().to_string();
        lock(&self.calls).push((key.clone(), req.timeout));
        if self.fail_next.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(ProviderError::Unknown("the client failed before calling".into()));
        }
        self.clock.sleep(self.latency).await;
        let next = lock(&self.script).pop_front();
        Ok(next.unwrap_or(ProviderOutcome::Accepted {
            status: 202,
            receipt: Some(format!("receipt-{key}")),
            budget: None,
        }))
    }
}

#[allow(clippy::panic)]
pub mod outbox_contract {
    //! The outbox's contract (docs/design.md#outcome-events), for every ledger that keeps one:
    //! run against the memory ledger and the DynamoDB ledger on both emulators. `ledger` must
    //! be empty of other outbox entries (a fresh table).
    use super::*;
    use crate::outcome::{Outcome, OutcomeEvent, Publisher, event_id};
    use crate::ports::{Outbox, OutboxEntry};
    use chrono::TimeDelta;

    async fn must<T, E: std::fmt::Debug>(what: &str, f: impl std::future::Future<Output = Result<T, E>>) -> T {
        match f.await {
            Ok(v) => v,
            Err(e) => panic!("{what}: machinery failed: {e:?}"),
        }
    }

    fn settlement(state: ReminderState, reason: Option<ReasonCode>, attempts: u32) -> Settlement {
        Settlement { state, reason, attempts, receipt: None, provider_status: None, next_at: None }
    }

    async fn entry_of<L: Outbox>(ledger: &L, m: &ReminderMessage) -> Option<OutboxEntry> {
        must("pending", ledger.pending(100)).await.into_iter().find(|e| e.reminder_id == m.reminder_id.as_str())
    }

    /// Every case, in order.
    pub async fn run<L: Ledger + Outbox + Clone>(ledger: &L, base: DateTime<Utc>) {
        let run = base.timestamp_nanos_opt().unwrap_or_default();
        let m = |n: u32| super::message(&format!("outbox-{run}-{n}"), base, base + TimeDelta::hours(2));
        let owner = OwnerToken::new("o1");
        let lease = base + TimeDelta::minutes(1);
        // A deferral is no outcome; a delivery is, with what the detail says.
        let a = m(1);
        must("claim", ledger.claim(&a, &owner, base, lease)).await;
        let x = settlement(ReminderState::Deferred, Some(ReasonCode::ProviderTransient), 1);
        must("settle", ledger.settle(&a, Some(&owner), base, &x)).await;
        assert!(entry_of(ledger, &a).await.is_none(), "a deferral wrote an outcome event");
        must("claim", ledger.claim(&a, &owner, base, lease)).await;
        must("settle", ledger.settle(&a, Some(&owner), base, &settlement(ReminderState::Delivered, None, 2))).await;
        let e = entry_of(ledger, &a).await.unwrap_or_else(|| panic!("the delivery wrote no event"));
        assert_eq!(e.events.len(), 1, "{e:?}");
        let ev = &e.events[0];
        assert_eq!(
            (ev.outcome, ev.attempts, ev.event_id.clone()),
            (Outcome::Delivered, 2, event_id(&a, Outcome::Delivered))
        );
        assert_eq!(
            (ev.tenant_id.as_str(), ev.correlation_id.as_str()),
            (a.tenant_id.as_str(), a.correlation_id.as_str())
        );
        // An ownerless expiry (the scheduler's, a sender's) is one too.
        let b = m(2);
        let x = settlement(ReminderState::Expired, Some(ReasonCode::MissedScheduleWindow), 0);
        must("expire", ledger.settle(&b, None, base, &x)).await;
        let e = entry_of(ledger, &b).await.unwrap_or_else(|| panic!("the expiry wrote no event"));
        assert_eq!(e.events[0].reason.as_deref(), Some("missed_schedule_window"));
        // An event added after the read: the clear refuses, and both are swept next.
        let seen = entry_of(ledger, &b).await.unwrap_or_else(|| panic!("gone"));
        let later = base + TimeDelta::seconds(1);
        let redriven = OutcomeEvent::new(&b, Outcome::Redriven, later, 0, None);
        must("append", ledger.append_outcome(&b, &redriven, later)).await;
        assert!(!must("clear", ledger.clear(&seen)).await, "a clear removed an event added after its read");
        assert_eq!(entry_of(ledger, &b).await.map(|e| e.events.len()), Some(2));
        // No record, no event.
        let none = m(3);
        must(
            "append",
            ledger.append_outcome(&none, &OutcomeEvent::new(&none, Outcome::Redriven, later, 0, None), later),
        )
        .await;
        assert!(
            entry_of(ledger, &none).await.is_none(),
            "an event was written for a reminder the ledger does not know"
        );
        // The publisher: a refusing sink clears nothing; a lost answer republishes (same ids);
        // then the outbox is empty and every event was published.
        let sink = MemorySink::default();
        let publisher = Publisher::new(ledger.clone(), sink.clone());
        sink.refuse_next(1);
        let r = must("sweep", publisher.sweep(later, 10, || false)).await;
        assert_eq!((r.published, r.cleared), (0, 0), "{r:?}");
        assert!(entry_of(ledger, &a).await.is_some(), "a refused publish cleared the outbox");
        sink.lose_next_answers(1);
        must("sweep", publisher.sweep(later, 10, || false)).await;
        assert!(entry_of(ledger, &a).await.is_some(), "an unconfirmed publish cleared the outbox");
        let r = must("sweep", publisher.sweep(later, 10, || false)).await;
        assert_eq!(r.left, 0, "{r:?}");
        assert!(must("pending", ledger.pending(100)).await.is_empty(), "the outbox is not empty after a good sweep");
        let published = sink.events();
        for want in [event_id(&a, Outcome::Delivered), event_id(&b, Outcome::Expired), redriven.event_id.clone()] {
            assert!(published.iter().any(|e| e.event_id == want), "{want} was never published: {published:?}");
        }
        let ids: std::collections::HashSet<&str> = published.iter().map(|e| e.event_id.as_str()).collect();
        assert!(published.len() > ids.len(), "the lost answer's events were not published again");
        // Nothing left: a sweep of an empty outbox publishes nothing.
        let r = must("sweep", publisher.sweep(later, 10, || false)).await;
        assert_eq!((r.records, r.published, r.oldest_age_seconds), (0, 0, 0.0));
    }
}

/// The ledger contract suite: every [`Ledger`] implementation must pass it. Panics with the
/// failed expectation (it is test support).
#[allow(clippy::panic)]
pub mod ledger_contract {
    use super::*;
    use crate::ports::{HISTORY_MAX, HISTORY_RECENT};
    use chrono::TimeDelta;

    fn msg(n: u32, base: DateTime<Utc>) -> ReminderMessage {
        // A fresh id per run and case, so a long-lived store needs no cleanup.
        let run = base.timestamp_nanos_opt().unwrap_or_default();
        let mut m = super::message(&format!("{run}-{n}"), base, base + TimeDelta::hours(2));
        m.correlation_id = crate::ids::CorrelationId::parse(format!("corr-{n}")).unwrap_or_else(|e| panic!("{e}"));
        m
    }

    fn deferred(attempts: u32, next_at: DateTime<Utc>) -> Settlement {
        Settlement {
            state: ReminderState::Deferred,
            reason: Some(ReasonCode::ProviderTransient),
            attempts,
            receipt: None,
            provider_status: Some(503),
            next_at: Some(next_at),
        }
    }

    fn delivered(attempts: u32) -> Settlement {
        Settlement {
            state: ReminderState::Delivered,
            reason: None,
            attempts,
            receipt: Some("prov-receipt-1".into()),
            provider_status: Some(202),
            next_at: None,
        }
    }

    async fn must<T, E: std::fmt::Debug>(what: &str, f: impl std::future::Future<Output = Result<T, E>>) -> T {
        match f.await {
            Ok(v) => v,
            Err(e) => panic!("{what}: machinery failed: {e:?}"),
        }
    }

    /// Runs every case against `ledger`. `base` should be "now-ish" with millisecond precision.
    pub async fn run<L: Ledger>(ledger: &L, base: DateTime<Utc>) {
        run_with(ledger, base, CYCLES).await;
    }

    /// [`run`], with `cycles` claim+settle cycles in the bounded-history case (at least twice
    /// the history bound, so the item is compacted again and again).
    pub async fn run_with<L: Ledger>(ledger: &L, base: DateTime<Utc>, cycles: u32) {
        let base = DateTime::<Utc>::from_timestamp_millis(base.timestamp_millis()).unwrap_or(base);
        let s = TimeDelta::seconds;
        let (a, b) = (OwnerToken::new("owner-a"), OwnerToken::new("owner-b"));

        // claim; lost race returns the holder's lease end; own claim recognised after an
        // uncertain write; expired lease reclaimable.
        let m = msg(1, base);
        let lease = base + s(30);
        assert_eq!(
            must("claim", ledger.claim(&m, &a, base, lease)).await,
            ClaimView::Claimed { prior_attempts: 0, unsettled_call: false }
        );
        assert_eq!(
            must("rival claim", ledger.claim(&m, &b, base + s(1), base + s(60))).await,
            ClaimView::HeldElsewhere { lease_until: lease },
            "a live lease must be reported with its end, from the same write"
        );
        assert_eq!(
            must("own re-claim", ledger.claim(&m, &a, base + s(2), lease)).await,
            ClaimView::Claimed { prior_attempts: 0, unsettled_call: false },
            "a retry by the same owner must recognise its own claim"
        );
        assert_eq!(
            must("claim at lease end", ledger.claim(&m, &b, lease, lease + s(30))).await,
            ClaimView::Claimed { prior_attempts: 0, unsettled_call: false },
            "a lease ending at `now` is expired"
        );
        // The old owner lost its lease: its settle writes nothing.
        assert_eq!(
            must("stale settle", ledger.settle(&m, Some(&a), lease + s(1), &deferred(1, lease + s(10)))).await,
            SettleOutcome::LeaseLost
        );

        // release after a determinate failure: attempts carried, lease freed at once.
        assert_eq!(
            must("release", ledger.settle(&m, Some(&b), lease + s(2), &deferred(1, lease + s(10)))).await,
            SettleOutcome::Recorded
        );
        assert_eq!(
            must("claim after release", ledger.claim(&m, &a, lease + s(3), lease + s(33))).await,
            ClaimView::Claimed { prior_attempts: 1, unsettled_call: false }
        );

        // Each group of cases is its own boxed future: inlined, the suite's state machine
        // outgrows a test thread's stack in a debug build.
        Box::pin(ended_reminders(ledger, base)).await;
        Box::pin(cancellations_superseded(ledger, base)).await;
        Box::pin(a_cancellation_ends_no_unknown_call_and_no_redrive_chain(ledger, base)).await;
        Box::pin(call_marks(ledger, base)).await;

        // complete with receipt; then every claim and settle sees delivered.
        assert_eq!(
            must("complete", ledger.settle(&m, Some(&a), lease + s(4), &delivered(2))).await,
            SettleOutcome::Recorded
        );
        assert_eq!(
            must("claim delivered", ledger.claim(&m, &b, lease + s(5), lease + s(35))).await,
            ClaimView::AlreadyDelivered
        );
        assert_eq!(
            must("settle over delivered", ledger.settle(&m, Some(&a), lease + s(6), &deferred(3, lease + s(20)))).await,
            SettleOutcome::AlreadyDelivered
        );
        assert_eq!(
            must("complete twice", ledger.settle(&m, Some(&b), lease + s(6), &delivered(3))).await,
            SettleOutcome::AlreadyDelivered
        );
        let Some(rec) = must("get", ledger.get(&m.reminder_id)).await else { panic!("record must exist") };
        assert_eq!(rec.state, ReminderState::Delivered);
        assert_eq!((rec.attempts, rec.receipt.as_deref()), (2, Some("prov-receipt-1")));
        assert_eq!((rec.owner.as_deref(), rec.lease_until), (None, None));
        assert_eq!(rec.deliver_by, m.deliver_by);
        let states: Vec<_> = rec.history.iter().map(|h| h.state).collect();
        use ReminderState::{Deferred, Delivered, Leased};
        assert_eq!(states, [Leased, Leased, Leased, Deferred, Leased, Delivered], "history: {:?}", rec.history);
        assert_eq!(rec.history[3].reason, Some(ReasonCode::ProviderTransient));
        assert_eq!(rec.history[3].next_at, Some(lease + s(10)));
        assert_eq!(rec.history[3].provider_status, Some(503));
        assert!(rec.history.iter().all(|h| h.correlation_id == "corr-1"));
        assert!(rec.history.windows(2).all(|w| w[0].at <= w[1].at));

        // delivered is recorded even by a worker whose lease lapsed (the provider took it).
        let m2 = msg(2, base);
        must("claim 2", ledger.claim(&m2, &a, base, base + s(10))).await;
        must("claim 2 by b", ledger.claim(&m2, &b, base + s(11), base + s(40))).await;
        assert_eq!(
            must("late complete", ledger.settle(&m2, Some(&a), base + s(12), &delivered(1))).await,
            SettleOutcome::Recorded
        );

        // settle without an owner (expiry before any claim): refused under a live lease.
        let m3 = msg(3, base);
        let expired = ending(ReminderState::Expired, ReasonCode::BusinessDeadlineExpired, 0, None);
        assert_eq!(must("expire fresh", ledger.settle(&m3, None, base, &expired)).await, SettleOutcome::Recorded);
        let m4 = msg(4, base);
        must("claim 4", ledger.claim(&m4, &a, base, base + s(10))).await;
        assert_eq!(
            must("expire under lease", ledger.settle(&m4, None, base + s(1), &expired)).await,
            SettleOutcome::LeaseLost
        );
        assert_eq!(
            must("expire after lease", ledger.settle(&m4, None, base + s(10), &expired)).await,
            SettleOutcome::Recorded
        );
        let Some(rec) = must("get 4", ledger.get(&m4.reminder_id)).await else { panic!("record 4 must exist") };
        assert_eq!((rec.state, rec.last_reason), (ReminderState::Expired, Some(ReasonCode::BusinessDeadlineExpired)));

        // An expiry (a late copy) never overwrites a reminder that already ended.
        let ended = [
            (6, ReminderState::Cancelled, Some(ReasonCode::Cancelled)),
            (7, ReminderState::DeadLettered, Some(ReasonCode::AttemptLimit)),
            (8, ReminderState::Delivered, None),
        ];
        for (n, state, reason) in ended {
            let m = msg(n, base);
            must("claim ended", ledger.claim(&m, &a, base, base + s(10))).await;
            let end = Settlement { state, reason, attempts: 1, receipt: None, provider_status: None, next_at: None };
            assert_eq!(must("end", ledger.settle(&m, Some(&a), base + s(1), &end)).await, SettleOutcome::Recorded);
            let late = must("late expiry", ledger.settle(&m, None, base + s(7200), &expired)).await;
            let want = match state {
                ReminderState::Delivered => SettleOutcome::AlreadyDelivered,
                other => SettleOutcome::AlreadyEnded(other),
            };
            assert_eq!(late, want, "an expiry overwrote {state}");
            let Some(rec) = must("get ended", ledger.get(&m.reminder_id)).await else {
                panic!("record {n} must exist")
            };
            assert_eq!((rec.state, rec.last_reason), (state, reason), "an expiry overwrote {state}");
        }

        assert_eq!(must("get missing", ledger.get(&msg(5, base).reminder_id)).await, None);

        Box::pin(bounded_history(ledger, base, cycles.max(HISTORY_MAX as u32))).await;
    }

    // Each ledger call's future is built in a plain function and boxed there: an async fn's
    // frame in a debug build keeps a slot for every temporary future it awaits, and the SDK's
    // are tens of KB each (the suite overflowed the 2 MB test-thread stack on DynamoDB).
    type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, LedgerError>> + Send + 'a>>;

    fn claim_boxed<'a, L: Ledger>(
        l: &'a L,
        m: &'a ReminderMessage,
        o: &'a OwnerToken,
        now: DateTime<Utc>,
        lease: DateTime<Utc>,
    ) -> Boxed<'a, ClaimView> {
        Box::pin(l.claim(m, o, now, lease))
    }

    fn mark_boxed<'a, L: Ledger>(
        l: &'a L,
        m: &'a ReminderMessage,
        o: &'a OwnerToken,
        now: DateTime<Utc>,
    ) -> Boxed<'a, bool> {
        Box::pin(l.mark_call(m, o, now))
    }

    fn settle_boxed<'a, L: Ledger>(
        l: &'a L,
        m: &'a ReminderMessage,
        o: Option<&'a OwnerToken>,
        now: DateTime<Utc>,
        x: &'a Settlement,
    ) -> Boxed<'a, SettleOutcome> {
        Box::pin(l.settle(m, o, now, x))
    }

    fn get_boxed<'a, L: Ledger>(l: &'a L, id: &'a ReminderId) -> Boxed<'a, Option<LedgerRecord>> {
        Box::pin(l.get(id))
    }

    /// The call mark (a provider without idempotency keys): only the lease holder marks, a
    /// claim that takes the record over reports another owner's mark, and a settle clears it.
    async fn call_marks<L: Ledger>(ledger: &L, base: DateTime<Utc>) {
        let s = TimeDelta::seconds;
        let (a, b, c) = (OwnerToken::new("mark-a"), OwnerToken::new("mark-b"), OwnerToken::new("mark-c"));
        let m = msg(40, base);
        assert!(!must("mark unclaimed", mark_boxed(ledger, &m, &a, base)).await, "no record: nothing to mark");
        let lease = base + s(30);
        must("claim", claim_boxed(ledger, &m, &a, base, lease)).await;
        assert!(!must("mark by a non-holder", mark_boxed(ledger, &m, &b, base + s(1))).await);
        assert!(must("mark by the holder", mark_boxed(ledger, &m, &a, base + s(1))).await);
        let rec = must("get", get_boxed(ledger, &m.reminder_id)).await.unwrap_or_else(|| panic!("no record"));
        assert_eq!(rec.call_owner.as_deref(), Some("mark-a"));
        assert!(!must("mark after the lease", mark_boxed(ledger, &m, &a, lease)).await, "an ended lease marks nothing");
        // The holder's own retried claim (an answer lost) is not an unknown call.
        assert_eq!(
            must("own re-claim", claim_boxed(ledger, &m, &a, base + s(2), lease)).await,
            ClaimView::Claimed { prior_attempts: 0, unsettled_call: false }
        );
        // a died mid-call: b takes over and learns of it, and so does c if b dies too.
        assert_eq!(
            must("take over", claim_boxed(ledger, &m, &b, lease, lease + s(30))).await,
            ClaimView::Claimed { prior_attempts: 0, unsettled_call: true }
        );
        assert_eq!(
            must("take over again", claim_boxed(ledger, &m, &c, lease + s(30), lease + s(60))).await,
            ClaimView::Claimed { prior_attempts: 0, unsettled_call: true },
            "a claim keeps the mark it found"
        );
        // A settle clears it.
        assert_eq!(
            must("settle", settle_boxed(ledger, &m, Some(&c), lease + s(31), &deferred(1, lease + s(40)))).await,
            SettleOutcome::Recorded
        );
        assert_eq!(
            must("get", get_boxed(ledger, &m.reminder_id)).await.unwrap_or_else(|| panic!("no record")).call_owner,
            None
        );
        assert_eq!(
            must("claim after settle", claim_boxed(ledger, &m, &a, lease + s(41), lease + s(70))).await,
            ClaimView::Claimed { prior_attempts: 1, unsettled_call: false }
        );
        // A quarantine *about* the unknown call keeps the mark: a redrive's copy learns of it.
        assert!(must("mark again", mark_boxed(ledger, &m, &a, lease + s(42))).await);
        let unknown = Settlement {
            state: ReminderState::DeadLettered,
            reason: Some(ReasonCode::ProviderIndeterminate),
            attempts: 2,
            receipt: None,
            provider_status: None,
            next_at: None,
        };
        assert_eq!(
            must("quarantine", settle_boxed(ledger, &m, Some(&a), lease + s(43), &unknown)).await,
            SettleOutcome::Recorded
        );
        assert_eq!(
            must("get", get_boxed(ledger, &m.reminder_id))
                .await
                .unwrap_or_else(|| panic!("no record"))
                .call_owner
                .as_deref(),
            Some("mark-a")
        );
        let redriven = super::redriven(&m, "rd-marks", 2, false);
        assert_eq!(
            must("redriven claim", claim_boxed(ledger, &redriven, &b, lease + s(44), lease + s(74))).await,
            ClaimView::Claimed { prior_attempts: 2, unsettled_call: true }
        );
    }

    /// A stale copy never revives an ended reminder, and copies from before the latest
    /// redrive are superseded.
    async fn ended_reminders<L: Ledger>(ledger: &L, base: DateTime<Utc>) {
        let s = TimeDelta::seconds;
        let (a, b) = (OwnerToken::new("owner-a"), OwnerToken::new("owner-b"));
        // A stale copy never revives an ended reminder (F9/F11): dead-lettered, expired and
        // cancelled records refuse a claim, with nothing written; a copy a redrive re-released
        // may claim a dead-lettered one.
        for (n, ended) in
            [(20, ReminderState::DeadLettered), (21, ReminderState::Expired), (22, ReminderState::Cancelled)]
        {
            let e = msg(n, base);
            assert_eq!(
                must("claim to end", ledger.claim(&e, &a, base, base + s(30))).await,
                ClaimView::Claimed { prior_attempts: 0, unsettled_call: false }
            );
            let end = ending(ended, ReasonCode::ClassifiedPermanent, 1, Some(400));
            assert_eq!(must("end", ledger.settle(&e, Some(&a), base + s(1), &end)).await, SettleOutcome::Recorded);
            assert_eq!(
                must("stale copy claims an ended reminder", ledger.claim(&e, &b, base + s(40), base + s(70))).await,
                ClaimView::Ended { state: ended },
                "a stale copy must not revive a {ended:?} reminder"
            );
            let history = must("read ended", ledger.get(&e.reminder_id)).await.map(|r| (r.state, r.history.len()));
            assert_eq!(history, Some((ended, 2)), "a refused claim writes nothing");
            if ended == ReminderState::DeadLettered {
                let redriven = super::redriven(&e, "rd-contract", 1, false);
                assert!(
                    matches!(
                        must("redriven claim", ledger.claim(&redriven, &b, base + s(41), base + s(71))).await,
                        ClaimView::Claimed { .. }
                    ),
                    "a redriven copy may claim a dead-lettered reminder"
                );
                // Once a redrive's copy claimed, older copies are superseded: a stale
                // pre-redrive copy must not spend the old budget and dead-letter what the
                // redrive's chain is working on; a later redrive's copy still claims.
                let free = base + s(72);
                assert_eq!(
                    must("stale pre-redrive copy", ledger.claim(&e, &a, free, free + s(30))).await,
                    ClaimView::Superseded
                );
                let mut later = redriven.clone();
                if let Some(stamp) = later.redrive.as_mut() {
                    stamp.id = crate::ids::RedriveId::parse("rd-contract-2").unwrap_or_else(|e| panic!("{e}"));
                }
                assert!(
                    matches!(
                        must("later redrive's copy", ledger.claim(&later, &a, free, free + s(30))).await,
                        ClaimView::Claimed { .. }
                    ),
                    "a later redrive's copy claims"
                );
                assert_eq!(
                    must("earlier redrive's copy", ledger.claim(&redriven, &b, free + s(31), free + s(60))).await,
                    ClaimView::Superseded
                );
                // The later redrive's own chain dead-letters it again: another copy of that same
                // redrive (an SQS duplicate) must not revive it.
                let again = ending(ReminderState::DeadLettered, ReasonCode::ClassifiedPermanent, 2, Some(400));
                assert_eq!(
                    must("ended again", ledger.settle(&later, Some(&a), free + s(1), &again)).await,
                    SettleOutcome::Recorded
                );
                assert_eq!(
                    must("a copy of the same redrive", ledger.claim(&later, &b, free + s(40), free + s(70))).await,
                    ClaimView::Ended { state: ReminderState::DeadLettered }
                );
                // An expiry (a copy past `deliver_by`) records over the quarantine only for a
                // redrive's copy that has not run on it: never for the redrive that ended it.
                let expired = ending(ReminderState::Expired, ReasonCode::BusinessDeadlineExpired, 2, None);
                assert_eq!(
                    must("expiry by the same redrive", ledger.settle(&later, None, free + s(80), &expired)).await,
                    SettleOutcome::AlreadyEnded(ReminderState::DeadLettered)
                );
                let mut third = later.clone();
                if let Some(stamp) = third.redrive.as_mut() {
                    stamp.id = crate::ids::RedriveId::parse("rd-contract-3").unwrap_or_else(|e| panic!("{e}"));
                }
                assert_eq!(
                    must("expiry by a later redrive", ledger.settle(&third, None, free + s(81), &expired)).await,
                    SettleOutcome::Recorded,
                    "a late copy of a redrive not yet run on a dead-lettered reminder records its expiry"
                );
                let rec = must("read expired", ledger.get(&e.reminder_id)).await;
                let rec = rec.unwrap_or_else(|| panic!("record must exist"));
                assert_eq!(
                    (rec.state, rec.last_reason),
                    (ReminderState::Expired, Some(ReasonCode::BusinessDeadlineExpired))
                );
                let last = rec.history.last().map(|h| (h.state, h.redrive_id.clone()));
                assert_eq!(last, Some((ReminderState::Expired, Some("rd-contract-3".to_owned()))));
                assert_eq!(
                    must("expired twice", ledger.settle(&third, None, free + s(82), &expired)).await,
                    SettleOutcome::AlreadyEnded(ReminderState::Expired)
                );
            }
        }
    }

    /// A reminder cancelled at send (its renewal was cancelled or paid, or the copy was of
    /// another version) is ended for every copy released before the cancellation; a copy
    /// released after it (`first_enqueued` later: the scheduler's release of a row re-armed
    /// since, a renewal active again or moved back to this due date) claims it, and a late one
    /// records its expiry. A delivered reminder is never claimed again, whenever its copy was
    /// released.
    /// A cancellation at send ends the reminder only until the renewal is re-armed, so it must
    /// leave what the next copy needs: the mark of an earlier call whose outcome is unknown (a
    /// keyless provider may have applied it: the copy released after the re-arm must see
    /// `unsettled_call`, not call again), and it ends any redrive chain (the re-armed release is
    /// the scheduler's, not superseded by the redrive that ran before the cancellation).
    async fn a_cancellation_ends_no_unknown_call_and_no_redrive_chain<L: Ledger>(ledger: &L, base: DateTime<Utc>) {
        let s = TimeDelta::seconds;
        let (a, b, c) = (OwnerToken::new("owner-a"), OwnerToken::new("owner-b"), OwnerToken::new("owner-c"));
        let cancel = ending(ReminderState::Cancelled, ReasonCode::Cancelled, 0, None);
        // A call started, its outcome never recorded (the sender crashed); the lease ends, and
        // the next copy finds the renewal cancelled.
        let m = msg(25, base);
        must("claim", ledger.claim(&m, &a, base, base + s(30))).await;
        assert!(must("mark", ledger.mark_call(&m, &a, base + s(1))).await);
        assert_eq!(
            must("claim after the lease", ledger.claim(&m, &b, base + s(31), base + s(61))).await,
            ClaimView::Claimed { prior_attempts: 0, unsettled_call: true }
        );
        must("cancel", ledger.settle(&m, Some(&b), base + s(32), &cancel)).await;
        let again = ReminderMessage { first_enqueued: base + s(40), ..m.clone() };
        assert_eq!(
            must("the re-armed copy", ledger.claim(&again, &c, base + s(41), base + s(71))).await,
            ClaimView::Claimed { prior_attempts: 0, unsettled_call: true },
            "the cancellation erased the mark of a call whose outcome is unknown"
        );
        // Redriven, then cancelled at send, then re-armed: the scheduler's copy claims.
        let d = msg(26, base);
        let copy = super::redriven(&d, "rd-20261201T100000000-0001", 1, false);
        must("redriven claim", ledger.claim(&copy, &a, base, base + s(30))).await;
        must("cancel", ledger.settle(&copy, Some(&a), base + s(1), &cancel)).await;
        let rearmed = ReminderMessage { first_enqueued: base + s(10), ..d.clone() };
        assert_eq!(
            must("the re-armed copy", ledger.claim(&rearmed, &b, base + s(11), base + s(41))).await,
            ClaimView::Claimed { prior_attempts: 0, unsettled_call: false },
            "a redrive that ran before the cancellation superseded the re-armed release"
        );
    }

    async fn cancellations_superseded<L: Ledger>(ledger: &L, base: DateTime<Utc>) {
        let s = TimeDelta::seconds;
        let (a, b) = (OwnerToken::new("owner-a"), OwnerToken::new("owner-b"));
        let cancel = ending(ReminderState::Cancelled, ReasonCode::Cancelled, 0, None);
        let stale = msg(23, base);
        must("claim", ledger.claim(&stale, &a, base, base + s(30))).await;
        assert_eq!(
            must("cancel", ledger.settle(&stale, Some(&a), base + s(1), &cancel)).await,
            SettleOutcome::Recorded
        );
        assert_eq!(
            must("stale copy", ledger.claim(&stale, &b, base + s(40), base + s(70))).await,
            ClaimView::Ended { state: ReminderState::Cancelled },
            "a copy released before the cancellation revived it"
        );
        let again = ReminderMessage { first_enqueued: base + s(30), ..stale.clone() };
        assert_eq!(
            must("copy released after", ledger.claim(&again, &b, base + s(40), base + s(70))).await,
            ClaimView::Claimed { prior_attempts: 0, unsettled_call: false },
            "a copy released after the cancellation must claim the reminder"
        );
        // Cancelled again (the renewal is cancelled again): that copy is now the stale one.
        assert_eq!(
            must("cancel again", ledger.settle(&again, Some(&b), base + s(41), &cancel)).await,
            SettleOutcome::Recorded
        );
        assert_eq!(
            must("the same copy again", ledger.claim(&again, &a, base + s(50), base + s(80))).await,
            ClaimView::Ended { state: ReminderState::Cancelled }
        );
        let expired = ending(ReminderState::Expired, ReasonCode::BusinessDeadlineExpired, 0, None);
        let late = stale.deliver_by + s(1);
        assert_eq!(
            must("a stale copy's expiry", ledger.settle(&again, None, late, &expired)).await,
            SettleOutcome::AlreadyEnded(ReminderState::Cancelled)
        );
        let last = ReminderMessage { first_enqueued: base + s(60), ..stale.clone() };
        assert_eq!(
            must("a later release's expiry", ledger.settle(&last, None, late, &expired)).await,
            SettleOutcome::Recorded,
            "a copy released after the cancellation, late, expires the reminder"
        );
        let rec = must("read", ledger.get(&stale.reminder_id)).await.unwrap_or_else(|| panic!("record must exist"));
        assert_eq!((rec.state, rec.last_reason), (ReminderState::Expired, Some(ReasonCode::BusinessDeadlineExpired)));
        // Delivered is final for every copy.
        let done = msg(24, base);
        must("claim", ledger.claim(&done, &a, base, base + s(30))).await;
        must("deliver", ledger.settle(&done, Some(&a), base + s(1), &delivered(1))).await;
        let later = ReminderMessage { first_enqueued: base + s(60), ..done.clone() };
        assert_eq!(
            must("a later release of a delivered one", ledger.claim(&later, &b, base + s(61), base + s(90))).await,
            ClaimView::AlreadyDelivered
        );
    }

    /// Claim+settle cycles of one reminder in [`bounded_history`]: far past the ~2,100 cycles
    /// at which an unbounded history reaches DynamoDB's 400 KB item limit.
    pub const CYCLES: u32 = 3_000;

    /// The contract's concurrent cases: writers racing on one reminder, as sender instances do
    /// when SQS hands two copies out at once. Only an engine that isolates concurrent
    /// conditional writes can pass them (moto applies them without isolation; dynalite locks
    /// per key; DynamoDB serialises per item).
    ///
    /// - `racers` claims of one fresh reminder at the same instant: exactly one is `Claimed`,
    ///   every other sees `HeldElsewhere` with the winner's lease end.
    /// - The losers' settles, all at once, record nothing; the winner's settle records.
    /// - After the lease ends, `racers` claims race again: one wins, and it sees the attempt
    ///   the first holder recorded.
    /// - Each winner's delivered settle races the others' claims: the reminder ends delivered
    ///   once, and every later claim sees `AlreadyDelivered`.
    pub async fn run_concurrent<L: Ledger>(ledger: &L, base: DateTime<Utc>, racers: u32) {
        use futures_util::future::join_all;
        let base = DateTime::<Utc>::from_timestamp_millis(base.timestamp_millis()).unwrap_or(base);
        let s = TimeDelta::seconds;
        for round in 0..4 {
            let m = msg(100 + round, base);
            let owners: Vec<OwnerToken> = (0..racers).map(|i| OwnerToken::new(format!("racer-{round}-{i}"))).collect();
            let lease = base + s(30);
            let claims = join_all(owners.iter().map(|o| must("racing claim", ledger.claim(&m, o, base, lease)))).await;
            let winners: Vec<usize> = claims
                .iter()
                .enumerate()
                .filter(|(_, c)| matches!(c, ClaimView::Claimed { .. }))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(winners.len(), 1, "round {round}: exactly one of {racers} racing claims wins: {claims:?}");
            let w = winners[0];
            for (i, c) in claims.iter().enumerate().filter(|(i, _)| *i != w) {
                assert_eq!(*c, ClaimView::HeldElsewhere { lease_until: lease }, "round {round}: loser {i}");
            }
            let retry = deferred(1, base + s(5));
            let settles = join_all(
                owners
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != w)
                    .map(|(_, o)| must("loser's settle", ledger.settle(&m, Some(o), base + s(1), &retry))),
            )
            .await;
            assert!(settles.iter().all(|o| *o == SettleOutcome::LeaseLost), "round {round}: {settles:?}");
            let mine = must("winner's settle", ledger.settle(&m, Some(&owners[w]), base + s(1), &retry)).await;
            assert_eq!(mine, SettleOutcome::Recorded, "round {round}");
            // The lease ended: a second race; its one winner sees the first attempt.
            let later = base + s(40);
            let again =
                join_all(owners.iter().map(|o| must("second race", ledger.claim(&m, o, later, later + s(30))))).await;
            let won: Vec<&ClaimView> = again.iter().filter(|c| matches!(c, ClaimView::Claimed { .. })).collect();
            assert_eq!(
                won,
                vec![&ClaimView::Claimed { prior_attempts: 1, unsettled_call: false }],
                "round {round}: {again:?}"
            );
            let w2 = again.iter().position(|c| matches!(c, ClaimView::Claimed { .. })).unwrap_or_default();
            // The winner delivers while every other racer claims again.
            let done = delivered(2);
            let deliver = must("winner delivers", ledger.settle(&m, Some(&owners[w2]), later + s(1), &done));
            let rivals = join_all(
                owners
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != w2)
                    .map(|(_, o)| ledger.claim(&m, o, later + s(1), later + s(60))),
            );
            let (delivered_outcome, rivals) = futures_util::future::join(deliver, rivals).await;
            assert_eq!(delivered_outcome, SettleOutcome::Recorded, "round {round}");
            for r in rivals {
                let r = r.unwrap_or_else(|e| panic!("rival claim: machinery failed: {e:?}"));
                assert!(
                    matches!(r, ClaimView::AlreadyDelivered | ClaimView::HeldElsewhere { .. }),
                    "round {round}: a rival racing the delivery must see it held or delivered: {r:?}"
                );
            }
            let late = OwnerToken::new("late");
            let after = must("claim after delivery", ledger.claim(&m, &late, later + s(90), later + s(120))).await;
            assert_eq!(after, ClaimView::AlreadyDelivered, "round {round}");
            let rec = must("read", ledger.get(&m.reminder_id)).await;
            assert_eq!(rec.map(|r| (r.state, r.attempts)), Some((ReminderState::Delivered, 2)), "round {round}");
        }
    }

    /// What a record of the test reminder may weigh at most, history full: far below
    /// DynamoDB's 400 KB.
    pub const MAX_RECORD_BYTES: usize = 32 * 1024;

    /// A reminder deferred again and again (a rate-limited backlog, a flapping provider, a
    /// redrive loop) keeps working: every claim and settle is written, and the item stays
    /// bounded — the first entry and the most recent ones are kept, the rest counted.
    pub async fn bounded_history<L: Ledger>(ledger: &L, base: DateTime<Utc>, cycles: u32) {
        let m = msg(9, base);
        let ms = TimeDelta::milliseconds;
        let owner = OwnerToken::new("owner-cycle");
        let mut t = base;
        for i in 0..cycles {
            let view = must("cycle claim", ledger.claim(&m, &owner, t, t + TimeDelta::seconds(30))).await;
            assert_eq!(view, ClaimView::Claimed { prior_attempts: 0, unsettled_call: false }, "cycle {i}");
            let out = must("cycle settle", ledger.settle(&m, Some(&owner), t + ms(1), &deferred(0, t + ms(2)))).await;
            assert_eq!(out, SettleOutcome::Recorded, "cycle {i}");
            t += ms(2);
        }
        let Some(rec) = must("get cycled", ledger.get(&m.reminder_id)).await else { panic!("record 9 must exist") };
        let written = 2 * cycles as usize;
        let kept = rec.history.len();
        assert!(kept <= HISTORY_MAX, "history holds {kept} of {written} entries: unbounded");
        assert!(kept > HISTORY_RECENT, "history keeps the first and the last {HISTORY_RECENT}, holds {kept}");
        assert_eq!(kept as u64 + rec.history_dropped, written as u64, "every entry is kept or counted as dropped");
        let bytes = ledger_item_bytes(&rec, &m);
        assert!(bytes <= MAX_RECORD_BYTES, "record of {bytes} bytes after {cycles} cycles");
        assert_eq!(rec.history[0].at, base, "the first entry is kept");
        assert_eq!(rec.history[0].state, ReminderState::Leased);
        let last = &rec.history[kept - 1];
        assert_eq!((last.state, last.at), (ReminderState::Deferred, t - ms(1)), "the last entry is kept");
        assert!(rec.history.windows(2).all(|w| w[0].at < w[1].at), "kept entries stay in order");
        assert_eq!(rec.state, ReminderState::Deferred);
    }
}

/// The in-memory pending-renewals index (sharded like the DynamoDB GSI).
#[derive(Debug, Clone, Default)]
pub struct MemoryDueStore {
    inner: Arc<Mutex<DueState>>,
}

#[derive(Debug, Default)]
struct DueState {
    shards: u32,
    /// Forget a row when it is marked ([`MemoryDueStore::forgetting`]).
    forget_marked: bool,
    /// (tenant, renewal) → the rest of the pending renewal, and its state.
    rows: HashMap<(TenantId, RenewalId), DueRow>,
    /// The channel names rows refer to (a handful), by [`DueRow::channel`] − 1.
    channels: Vec<String>,
    watermark: Option<DateTime<Utc>>,
}

/// A row of the index: a pending renewal but its tenant and renewal ids, which are the row's
/// key (not a second copy of them: the simulator holds a million rows).
#[derive(Debug)]
struct DueRow {
    kind: crate::ids::ReminderKind,
    reminder_id: ReminderId,
    deliver_after: DateTime<Utc>,
    deliver_by: DateTime<Utc>,
    /// An index into [`DUE_STATES`] (a byte, not a `&str`: a million rows).
    state: u8,
    /// 0: no channel; else 1 + an index into the store's channel names.
    channel: u16,
}

/// A due row's states, by their index in [`DueRow::state`].
const DUE_STATES: [&str; 3] = ["scheduled", "enqueued", "expired"];

/// The index of `state` in [`DUE_STATES`]; a name not there is a bug in this file's callers
/// (it must not read as `scheduled`, released again on the next tick).
fn due_state(state: &str) -> u8 {
    match DUE_STATES.iter().position(|s| *s == state) {
        Some(i) => i as u8,
        None => unreachable!("no due state {state:?}"),
    }
}

impl DueRow {
    fn pending(&self, (tenant, renewal): &(TenantId, RenewalId), channels: &[String]) -> crate::ports::Pending {
        crate::ports::Pending {
            tenant_id: tenant.clone(),
            renewal_id: renewal.clone(),
            kind: self.kind.clone(),
            reminder_id: self.reminder_id.clone(),
            deliver_after: self.deliver_after,
            deliver_by: self.deliver_by,
            channel: usize::from(self.channel).checked_sub(1).and_then(|i| channels.get(i)).cloned(),
        }
    }
}

impl MemoryDueStore {
    /// An empty store with `shards` shards.
    pub fn new(shards: u32) -> Self {
        Self { inner: Arc::new(Mutex::new(DueState { shards: shards.max(1), ..DueState::default() })) }
    }

    /// An empty store with `shards` shards that forgets a row when a tick marks it (released or
    /// expired), as [`prune`](Self::prune) would after the tick: the simulator's million rows
    /// give their memory back while the tick moves them onto the queue, instead of both
    /// holding the population at once. A forgotten row's [`state`](Self::state) is `None`.
    pub fn forgetting(shards: u32) -> Self {
        let store = Self::new(shards);
        lock(&store.inner).forget_marked = true;
        store
    }

    /// Adds a pending renewal.
    pub fn insert(&self, p: crate::ports::Pending) {
        let mut s = lock(&self.inner);
        let channel = match p.channel {
            None => 0,
            Some(c) => match s.channels.iter().position(|n| *n == c) {
                Some(i) => i + 1,
                None => {
                    s.channels.push(c);
                    s.channels.len()
                }
            },
        };
        let row = DueRow {
            kind: p.kind,
            reminder_id: p.reminder_id,
            deliver_after: p.deliver_after,
            deliver_by: p.deliver_by,
            state: due_state("scheduled"),
            // 65,535 distinct channel names in one store: the simulator uses two.
            channel: u16::try_from(channel).unwrap_or_else(|_| unreachable!("more channel names than a row can index")),
        };
        s.rows.insert((p.tenant_id, p.renewal_id), row);
    }

    /// Forgets every renewal no longer pending (released or expired), so a long simulated day
    /// pages only what is still pending (each page filters every row the store holds).
    pub fn prune(&self) {
        let mut s = lock(&self.inner);
        s.rows.retain(|_, row| row.state == due_state("scheduled"));
        s.fit();
    }

    /// Renewals still pending.
    pub fn pending(&self) -> usize {
        lock(&self.inner).rows.values().filter(|row| row.state == due_state("scheduled")).count()
    }

    /// The scheduling state of a renewal (`scheduled`, `enqueued`, `expired`).
    pub fn state(&self, tenant: &TenantId, renewal: &RenewalId) -> Option<&'static str> {
        lock(&self.inner).rows.get(&(tenant.clone(), renewal.clone())).map(|row| DUE_STATES[usize::from(row.state)])
    }

    fn shard_of(shards: u32, reminder_id: &ReminderId) -> u32 {
        let h = reminder_id.as_str().bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        h % shards
    }

    /// Replaces a renewal's row with a new version (an import of the same renewal with another
    /// due date or other times), pending release whatever state the old one was in: the
    /// import's re-arm (`DynamoRenewals::write_import`).
    pub fn reschedule(&self, p: crate::ports::Pending) {
        self.insert(p);
    }

    /// The version a renewal's row holds now.
    pub fn current(&self, tenant: &TenantId, renewal: &RenewalId) -> Option<crate::ports::Pending> {
        let key = (tenant.clone(), renewal.clone());
        let s = lock(&self.inner);
        s.rows.get(&key).map(|row| row.pending(&key, &s.channels))
    }

    /// Marks the row, only while it is pending and still the version `p` was read as (like
    /// the DynamoDB adapter's condition: a row re-imported under a tick is left pending).
    fn mark(&self, p: &crate::ports::Pending, to: &'static str) -> crate::ports::Marked {
        let mut s = lock(&self.inner);
        let key = (p.tenant_id.clone(), p.renewal_id.clone());
        match s.rows.get_mut(&key) {
            Some(row)
                if row.state == due_state("scheduled")
                    && (&row.reminder_id, row.deliver_after, row.deliver_by)
                        == (&p.reminder_id, p.deliver_after, p.deliver_by) =>
            {
                row.state = due_state(to);
                if s.forget_marked {
                    s.rows.remove(&key);
                    s.fit();
                }
                crate::ports::Marked::Done
            }
            _ => crate::ports::Marked::NotPending,
        }
    }
}

impl DueState {
    /// Gives back the table's room once three quarters of it is empty (a table never shrinks
    /// by itself): amortised, as each shrink halves it at least.
    fn fit(&mut self) {
        if self.rows.capacity() > 1024 && self.rows.len() * 4 < self.rows.capacity() {
            self.rows.shrink_to_fit();
        }
    }
}

impl crate::ports::DueStore for MemoryDueStore {
    /// The last returned (deliver_after, reminder id): a key position, like DynamoDB's
    /// `LastEvaluatedKey`, so items marked meanwhile do not shift the next page.
    type Cursor = (DateTime<Utc>, ReminderId);

    fn shards(&self) -> u32 {
        lock(&self.inner).shards
    }

    async fn due_page(
        &self,
        shard: u32,
        horizon: DateTime<Utc>,
        limit: usize,
        cursor: Option<(DateTime<Utc>, ReminderId)>,
    ) -> Result<crate::ports::Page<(DateTime<Utc>, ReminderId)>, crate::ports::DueStoreError> {
        let limit = limit.max(1);
        let s = lock(&self.inner);
        // References first, clones only of the page: the simulator pages a million rows.
        let mut rest: Vec<(&(TenantId, RenewalId), &DueRow)> = s
            .rows
            .iter()
            .filter(|(_, r)| {
                r.state == due_state("scheduled")
                    && r.deliver_after <= horizon
                    && Self::shard_of(s.shards, &r.reminder_id) == shard
            })
            .filter(|(_, r)| cursor.as_ref().is_none_or(|(at, id)| (r.deliver_after, &r.reminder_id) > (*at, id)))
            .collect();
        let order = |a: &(&(TenantId, RenewalId), &DueRow), b: &(&(TenantId, RenewalId), &DueRow)| {
            (a.1.deliver_after, &a.1.reminder_id).cmp(&(b.1.deliver_after, &b.1.reminder_id))
        };
        let more = rest.len() > limit;
        if more {
            rest.select_nth_unstable_by(limit - 1, order);
            rest.truncate(limit);
        }
        rest.sort_by(order);
        let next = more.then(|| rest.last().map(|(_, r)| (r.deliver_after, r.reminder_id.clone()))).flatten();
        Ok(crate::ports::Page { items: rest.into_iter().map(|(k, r)| r.pending(k, &s.channels)).collect(), next })
    }

    async fn mark_enqueued(
        &self,
        p: &crate::ports::Pending,
        _at: DateTime<Utc>,
    ) -> Result<crate::ports::Marked, crate::ports::DueStoreError> {
        Ok(self.mark(p, "enqueued"))
    }

    async fn mark_expired(
        &self,
        p: &crate::ports::Pending,
        _at: DateTime<Utc>,
    ) -> Result<crate::ports::Marked, crate::ports::DueStoreError> {
        Ok(self.mark(p, "expired"))
    }

    async fn watermark(&self) -> Result<Option<DateTime<Utc>>, crate::ports::DueStoreError> {
        Ok(lock(&self.inner).watermark)
    }

    async fn advance_watermark(&self, to: DateTime<Utc>) -> Result<(), crate::ports::DueStoreError> {
        let mut s = lock(&self.inner);
        s.watermark = Some(s.watermark.map_or(to, |w| w.max(to)));
        Ok(())
    }
}

/// The in-memory index behind a store's latency, slept on `clock` (a query page `query`, a
/// mark `write`), one of whose marks can fail before writing ([`SlowDueStore::fail_mark`]: a
/// throttled write after its message was sent).
#[derive(Debug, Clone)]
pub struct SlowDueStore<C> {
    inner: MemoryDueStore,
    clock: C,
    query: Duration,
    write: Duration,
    failing: Arc<AtomicU32>,
}

impl<C: Clock> SlowDueStore<C> {
    /// `inner` behind `query` and `write` of latency on `clock`.
    pub fn new(inner: MemoryDueStore, clock: C, query: Duration, write: Duration) -> Self {
        Self { inner, clock, query, write, failing: Arc::default() }
    }

    /// The `k`-th mark from now (either kind; 1: the next) fails without writing.
    pub fn fail_mark(&self, k: u32) {
        self.failing.store(k, Ordering::SeqCst);
    }

    async fn mark(&self) -> Result<(), crate::ports::DueStoreError> {
        self.clock.sleep(self.write).await;
        match self.failing.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |k| k.checked_sub(1)) {
            Ok(1) => Err(crate::ports::DueStoreError::Unknown("the renewals table throttled the mark".into())),
            _ => Ok(()),
        }
    }
}

impl<C: Clock> crate::ports::DueStore for SlowDueStore<C> {
    type Cursor = <MemoryDueStore as crate::ports::DueStore>::Cursor;

    fn shards(&self) -> u32 {
        self.inner.shards()
    }

    async fn due_page(
        &self,
        shard: u32,
        horizon: DateTime<Utc>,
        limit: usize,
        cursor: Option<Self::Cursor>,
    ) -> Result<crate::ports::Page<Self::Cursor>, crate::ports::DueStoreError> {
        self.clock.sleep(self.query).await;
        self.inner.due_page(shard, horizon, limit, cursor).await
    }

    async fn mark_enqueued(
        &self,
        p: &crate::ports::Pending,
        at: DateTime<Utc>,
    ) -> Result<crate::ports::Marked, crate::ports::DueStoreError> {
        self.mark().await?;
        self.inner.mark_enqueued(p, at).await
    }

    async fn mark_expired(
        &self,
        p: &crate::ports::Pending,
        at: DateTime<Utc>,
    ) -> Result<crate::ports::Marked, crate::ports::DueStoreError> {
        self.mark().await?;
        self.inner.mark_expired(p, at).await
    }

    async fn watermark(&self) -> Result<Option<DateTime<Utc>>, crate::ports::DueStoreError> {
        self.inner.watermark().await
    }

    async fn advance_watermark(&self, to: DateTime<Utc>) -> Result<(), crate::ports::DueStoreError> {
        self.inner.advance_watermark(to).await
    }
}

/// A release queue that records what it was given.
#[derive(Debug, Clone, Default)]
pub struct MemoryRelease {
    /// Every released message with its delay and lane, in order.
    pub sent: Arc<Mutex<Vec<crate::ports::Release>>>,
}

impl MemoryRelease {
    /// Everything released so far, with its delay.
    pub fn sent(&self) -> Vec<(ReminderMessage, Duration)> {
        lock(&self.sent).iter().map(|r| (r.message.clone(), r.delay)).collect()
    }

    /// Everything released so far, as released.
    pub fn releases(&self) -> Vec<crate::ports::Release> {
        lock(&self.sent).clone()
    }
}

impl crate::ports::ReleaseQueue for MemoryRelease {
    async fn release(&self, batch: &[crate::ports::Release]) -> Result<Vec<bool>, QueueError> {
        lock(&self.sent).extend(batch.iter().cloned());
        Ok(vec![true; batch.len()])
    }

    async fn depth(&self) -> Result<crate::lanes::LaneDepths, QueueError> {
        let mut d = crate::lanes::LaneDepths::default();
        for r in lock(&self.sent).iter() {
            d.add(r.lane, 1);
            if !r.delay.is_zero() {
                match r.lane {
                    crate::lanes::QueueLane::Urgent => d.urgent_delayed += 1,
                    crate::lanes::QueueLane::Normal => d.normal_delayed += 1,
                }
            }
        }
        Ok(d)
    }
}

// ---- limiter slot store ---------------------------------------------------------------------

/// A slot store whose `pause` and `cut` always fail (a throttled or unreachable limiter item),
/// bookings served by an in-memory store: what a sender must survive after the provider
/// answered.
#[derive(Debug, Clone, Default)]
pub struct FailingPauseStore(MemorySlotStore);

impl crate::limiter::SlotStore for FailingPauseStore {
    async fn book(
        &self,
        key: &str,
        req: &crate::limiter::Book,
    ) -> Result<crate::limiter::Booked, crate::ports::LimiterError> {
        self.0.book(key, req).await
    }
    async fn cut(&self, _: &str, _: i64, _: f64, _: i64, _: i64) -> Result<(), crate::ports::LimiterError> {
        Err(crate::ports::LimiterError::Unknown("limiter item throttled".into()))
    }
    async fn pause(&self, _: &str, _: i64) -> Result<(), crate::ports::LimiterError> {
        Err(crate::ports::LimiterError::Unknown("limiter item throttled".into()))
    }
    async fn view(&self, key: &str) -> Result<Option<crate::limiter::SlotView>, crate::ports::LimiterError> {
        self.0.view(key).await
    }
    fn writes(&self) -> u64 {
        self.0.writes()
    }
}

/// The in-memory [`SlotStore`](crate::limiter::SlotStore): one mutex makes every operation
/// atomic. Clones share the schedule (the simulator's senders all draw from one).
#[derive(Debug, Clone, Default)]
pub struct MemorySlotStore {
    views: Arc<Mutex<HashMap<String, crate::limiter::SlotView>>>,
    writes: Arc<std::sync::atomic::AtomicU64>,
}

impl crate::limiter::SlotStore for MemorySlotStore {
    async fn book(
        &self,
        key: &str,
        req: &crate::limiter::Book,
    ) -> Result<crate::limiter::Booked, crate::ports::LimiterError> {
        use crate::limiter::{Booked, Lane};
        self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut views = lock(&self.views);
        let v = views.entry(key.to_owned()).or_default();
        let start = if v.next_ms < req.now_ms - req.grace_ms {
            req.now_ms
        } else {
            if req.refuses(v) {
                return Ok(Booked::Full { view: *v });
            }
            v.next_ms
        };
        v.next_ms = start + req.block_ms;
        if let Lane::Near { hold_until_ms } = req.lane {
            v.near_until_ms = hold_until_ms;
        }
        Ok(Booked::Got { start_ms: start, view: *v })
    }

    async fn cut(
        &self,
        key: &str,
        now_ms: i64,
        rate: f64,
        recovered_ms: i64,
        min_gap_ms: i64,
    ) -> Result<(), crate::ports::LimiterError> {
        self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut views = lock(&self.views);
        let v = views.entry(key.to_owned()).or_default();
        // The DynamoDB store's condition: `(attribute_not_exists(cut_at) OR cut_at < :gap) AND
        // (attribute_not_exists(cut_recovered) OR cut_recovered < :rec)`.
        let outside_gap = v.cut_rate.is_none() || v.cut_at_ms < now_ms - min_gap_ms;
        let lowers = v.cut_rate.is_none() || v.cut_recovered_ms < recovered_ms;
        if outside_gap && lowers {
            v.cut_rate = Some(rate);
            v.cut_at_ms = now_ms;
            v.cut_recovered_ms = recovered_ms;
        }
        Ok(())
    }

    async fn pause(&self, key: &str, until_ms: i64) -> Result<(), crate::ports::LimiterError> {
        self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut views = lock(&self.views);
        let v = views.entry(key.to_owned()).or_default();
        v.paused_until_ms = v.paused_until_ms.max(until_ms);
        v.next_ms = v.next_ms.max(until_ms);
        Ok(())
    }

    async fn view(&self, key: &str) -> Result<Option<crate::limiter::SlotView>, crate::ports::LimiterError> {
        Ok(lock(&self.views).get(key).copied())
    }

    fn writes(&self) -> u64 {
        self.writes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The contract every [`SlotStore`](crate::limiter::SlotStore) must obey; run against the
/// in-memory store (core tests) and the DynamoDB store (emulator).
pub mod limiter_contract {
    use crate::limiter::{Book, Booked, Lane, SlotStore, SlotView};

    async fn book<S: SlotStore>(s: &S, key: &str, now: i64, block: i64, ahead: i64, lane: Lane) -> Booked {
        s.book(key, &Book { now_ms: now, block_ms: block, ahead_ms: ahead, grace_ms: 0, lane })
            .await
            .unwrap_or_else(|e| panic!("book {key}: {e}"))
    }

    fn start(b: Booked) -> i64 {
        match b {
            Booked::Got { start_ms, .. } => start_ms,
            Booked::Full { view } => panic!("expected a block, got Full({view:?})"),
        }
    }

    /// Runs every case under keys prefixed with `prefix` (unique per run, so a long-lived
    /// store needs no cleanup). `now` is a millisecond instant.
    pub async fn run<S: SlotStore>(store: &S, prefix: &str, now: i64) {
        let normal = Lane::Normal { fill_ms: 50 };

        // An idle schedule starts at now; consecutive blocks are contiguous.
        let k = format!("{prefix}#seq");
        assert_eq!(start(book(store, &k, now, 100, 2000, normal).await), now);
        assert_eq!(start(book(store, &k, now, 100, 2000, normal).await), now + 100);
        assert_eq!(
            start(book(store, &k, now + 10, 100, 2000, normal).await),
            now + 200,
            "booked slots are never handed out twice"
        );

        // A schedule gone idle is not used retroactively.
        assert_eq!(start(book(store, &k, now + 5000, 100, 2000, normal).await), now + 5000);
        // …but within the grace its last slots may still be in use: it continues from `next`.
        let graced = Book { now_ms: now + 5150, block_ms: 100, ahead_ms: 2000, grace_ms: 100, lane: normal };
        assert_eq!(start(store.book(&k, &graced).await.unwrap_or_else(|e| panic!("{e}"))), now + 5100, "no overlap");
        let idle = Book { now_ms: now + 5400, block_ms: 100, ahead_ms: 2000, grace_ms: 100, lane: normal };
        assert_eq!(
            start(store.book(&k, &idle).await.unwrap_or_else(|e| panic!("{e}"))),
            now + 5400,
            "idle past the grace"
        );

        // Too far ahead: refused, nothing changes.
        let k = format!("{prefix}#ahead");
        for _ in 0..5 {
            book(store, &k, now, 1000, 10_000, normal).await;
        }
        let before = store.view(&k).await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_default();
        assert_eq!(before.next_ms, now + 5000);
        match book(store, &k, now, 1000, 2000, normal).await {
            Booked::Full { view } => assert_eq!(view.next_ms, now + 5000, "a refusal reports the schedule"),
            b @ Booked::Got { .. } => panic!("booked past the horizon: {b:?}"),
        }
        let after = store.view(&k).await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_default();
        assert_eq!(after, before, "a refusal writes nothing");

        // Normal work yields while near work is active, except to fill slots about to idle.
        let k = format!("{prefix}#lanes");
        let near = Lane::Near { hold_until_ms: now + 2000 };
        assert_eq!(start(book(store, &k, now, 500, 10_000, near).await), now);
        assert!(matches!(book(store, &k, now, 100, 10_000, normal).await, Booked::Full { .. }), "normal must yield");
        assert_eq!(start(book(store, &k, now, 500, 10_000, near).await), now + 500, "near work keeps booking");
        assert_eq!(
            start(book(store, &k, now + 960, 100, 10_000, normal).await),
            now + 1000,
            "normal may fill slots that would go idle"
        );
        assert_eq!(start(book(store, &k, now + 2100, 100, 10_000, normal).await), now + 2100, "the hold ends");

        // A pause pushes the schedule past Retry-After; a cut happens once per gap.
        let k = format!("{prefix}#adaptive");
        book(store, &k, now, 100, 2000, normal).await;
        store.pause(&k, now + 7000).await.unwrap_or_else(|e| panic!("{e}"));
        store.pause(&k, now + 3000).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            start(book(store, &k, now + 10, 100, 10_000, Lane::Cap).await),
            now + 7000,
            "no slot before the pause ends"
        );
        // Cuts of a quota of 100/s recovering by 1/s: back at the quota (100 − rate) s later.
        let recovered = |at: i64, rate: f64| at + ((100.0 - rate) * 1000.0) as i64;
        store.cut(&k, now, 75.0, recovered(now, 75.0), 1000).await.unwrap_or_else(|e| panic!("{e}"));
        store.cut(&k, now + 500, 50.0, recovered(now + 500, 50.0), 1000).await.unwrap_or_else(|e| panic!("{e}"));
        let v: SlotView = store.view(&k).await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_default();
        assert_eq!((v.cut_rate, v.cut_at_ms), (Some(75.0), now), "a second 429 within the gap is not a second cut");
        assert_eq!(v.paused_until_ms, now + 7000, "the later pause wins");
        store.cut(&k, now + 1500, 56.25, recovered(now + 1500, 56.25), 1000).await.unwrap_or_else(|e| panic!("{e}"));
        let v = store.view(&k).await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_default();
        assert_eq!((v.cut_rate, v.cut_at_ms), (Some(56.25), now + 1500));
        assert_eq!(v.cut_recovered_ms, recovered(now + 1500, 56.25));
        // A cut from a stale view (75/s, computed from the full quota) past the gap: the stored
        // cut is lower now (59.75/s) and recovers later, so it stands.
        store.cut(&k, now + 5000, 75.0, recovered(now + 5000, 75.0), 1000).await.unwrap_or_else(|e| panic!("{e}"));
        let v = store.view(&k).await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_default();
        assert_eq!((v.cut_rate, v.cut_at_ms), (Some(56.25), now + 1500), "a cut never raises the rate");
        // A cut below the stored one's current rate applies, though above its stored rate.
        store.cut(&k, now + 9500, 60.0, recovered(now + 9500, 60.0), 1000).await.unwrap_or_else(|e| panic!("{e}"));
        let v = store.view(&k).await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_default();
        assert_eq!((v.cut_rate, v.cut_at_ms), (Some(60.0), now + 9500), "64.25/s now: 60 lowers it");
        assert!(store.view(&format!("{prefix}#never")).await.unwrap_or_else(|e| panic!("{e}")).is_none());
    }
}

// ---- operator controls ----------------------------------------------------------------------

/// In-memory pause switch and audit log.
#[derive(Debug, Clone, Default)]
pub struct MemoryControl {
    /// The pause in force.
    pub paused: Arc<Mutex<Option<crate::ports::Pause>>>,
    /// Audit records written, latest version per id.
    pub audits: Arc<Mutex<Vec<crate::redrive::AuditRecord>>>,
    /// Times a sender asked to pause (its trip after a refusal of the whole account), whether
    /// or not a pause was already in force.
    pub sender_trips: Arc<std::sync::atomic::AtomicU64>,
}

impl crate::ports::Control for MemoryControl {
    async fn pause(&self) -> Result<Option<crate::ports::Pause>, crate::ports::ControlError> {
        Ok(lock(&self.paused).clone())
    }

    async fn set_pause(
        &self,
        pause: Option<&crate::ports::Pause>,
        _by: &str,
    ) -> Result<(), crate::ports::ControlError> {
        *lock(&self.paused) = pause.cloned();
        Ok(())
    }

    async fn pause_unless_paused(
        &self,
        pause: &crate::ports::Pause,
        by: &str,
    ) -> Result<Option<crate::ports::Pause>, crate::ports::ControlError> {
        if by == crate::pause::SENDER_OWNER {
            self.sender_trips.fetch_add(1, Ordering::SeqCst);
        }
        let mut held = lock(&self.paused);
        if let Some(existing) = held.as_ref() {
            return Ok(Some(existing.clone()));
        }
        *held = Some(pause.clone());
        Ok(None)
    }

    async fn put_audit(&self, record: &crate::redrive::AuditRecord) -> Result<(), crate::ports::ControlError> {
        let mut a = lock(&self.audits);
        a.retain(|r| r.id != record.id);
        a.push(record.clone());
        Ok(())
    }
}

// ---- a sender for tests ------------------------------------------------------------------------

/// The sender service over in-memory ports and a scripted provider, as unit and handler tests
/// build it.
pub type ScriptedSender<L> = crate::sender::Sender<
    L,
    AllActive,
    crate::limiter::SharedLimiter<MemorySlotStore, crate::clock::ManualClock>,
    ScriptedProvider<crate::clock::ManualClock>,
    MemoryQueue,
    crate::clock::ManualClock,
>;

/// A sender over `ledger`, every renewal active, a 100/s limiter, an in-memory queue and a
/// provider answering `script` in `latency` each, on `clock`; with its queue and provider to
/// inspect.
pub fn scripted_sender<L: Ledger>(
    ledger: L,
    clock: &crate::clock::ManualClock,
    latency: Duration,
    script: Vec<ProviderOutcome>,
    seed: u64,
) -> (ScriptedSender<L>, MemoryQueue, ScriptedProvider<crate::clock::ManualClock>) {
    let provider = ScriptedProvider::new(clock.clone(), latency, script);
    scripted_sender_over(ledger, clock, provider, crate::sender::SenderSettings::default(), seed)
}

/// [`scripted_sender`] with a given provider (e.g. [`ScriptedProvider::without_keys`]) and
/// settings.
pub fn scripted_sender_over<L: Ledger>(
    ledger: L,
    clock: &crate::clock::ManualClock,
    provider: ScriptedProvider<crate::clock::ManualClock>,
    settings: crate::sender::SenderSettings,
    seed: u64,
) -> (ScriptedSender<L>, MemoryQueue, ScriptedProvider<crate::clock::ManualClock>) {
    let queue = MemoryQueue::new();
    let limiter = crate::limiter::SharedLimiter::new(
        MemorySlotStore::default(),
        clock.clone(),
        crate::limiter::LimiterSettings::new(100.0),
        1,
    );
    let sender = crate::sender::Sender::new(
        ledger,
        AllActive,
        limiter,
        provider.clone(),
        queue.clone(),
        clock.clone(),
        settings,
        seed,
    );
    (sender, queue, provider)
}

/// A valid v1 message body as JSON, for decoder tests to mutate one field at a time.
pub fn valid_body() -> serde_json::Value {
    serde_json::json!({
        "v": 1,
        "reminder_id": "rem_c9dd29194f09d2128544bc59f58b2395",
        "renewal_id": "ren-0001",
        "tenant_id": "acme",
        "kind": "renewal_7d",
        "deliver_after": "2026-12-01T14:00:00Z",
        "deliver_by": "2026-12-01T22:00:00Z",
        "attempt": 0,
        "first_enqueued": "2026-12-01T13:50:00Z",
        "correlation_id": "corr-1"
    })
}
