//! The idempotency ledger in DynamoDB (docs/design.md#the-idempotency-ledger).
//!
//! One item per reminder, `pk = reminder:{reminder_id}`:
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `state` | S | `leased`, `deferred`, `delivered`, `dead_lettered`, `expired`, `cancelled` |
//! | `attempts` | N | provider attempts recorded |
//! | `owner`, `lease_until_ms` | S, N | the live claim, absent when none |
//! | `receipt` | S | provider receipt, once delivered |
//! | `last_reason`, `next_at_ms` | S, N | last reason code; next eligible time while deferred |
//! | `deliver_after_ms`, `deliver_by_ms`, `tenant_id`, `renewal_id` | N, N, S, S | for `explain`, the run accounting and cleanup |
//! | `updated_ms` | N | the last claim or settle; of a `cancelled` reminder, when it was cancelled: only a copy released after it (`first_enqueued`) claims it again |
//! | `history` | L of M | the first transition and the most recent ones, appended by the same write that makes it |
//! | `history_dropped` | N | transitions dropped from the middle of `history` (absent: none) |
//! | `release_id` | S | the latest redrive whose copy claimed it; older copies are superseded |
//! | `ttl_epoch_s` | N | DynamoDB TTL, **seconds** as TTL requires: `deliver_by` + 30 days. Cleanup only. |
//!
//! Every instant the logic compares is epoch **milliseconds** (`*_ms`); the lease is expired
//! when `lease_until_ms <= now_ms` — a timestamp comparison in the condition, never TTL.
//! Keeping the history inside the item makes each transition one atomic write and the whole
//! history one strongly consistent `GetItem`.
//!
//! # Bounded item
//! An entry weighs ~100–190 bytes, and a reminder deferred again and again (a rate-limited
//! backlog, a flapping provider, redrives) once grew without bound: after ~2,100 claim+settle
//! cycles DynamoDB refused the item (400 KB) and every later claim failed. The history now
//! holds at most [`HISTORY_MAX`] = 97 entries — the first, and the most recent ones — so an
//! item stays below ~25 KB (1 WCU per KB per write, so the bound also caps the cost of a
//! write). Every write carries `size(history) < 97` in its condition, so nothing can grow past
//! the bound. A write refused only because the history is full compacts it: it rewrites the
//! history to the first entry plus the last [`HISTORY_RECENT`](punctual_core::ports::HISTORY_RECENT) = 64 (its own included) and
//! adds the 33 dropped to `history_dropped`, guarded by the size and `history_dropped` it read
//! from the refusal's `ALL_OLD`, with the transition's own condition unchanged.
//!
//! Why not one blind write always: `list_append` cannot trim; `REMOVE history[i]` needs the
//! stored length, overlaps with any `SET` of `history` itself (DynamoDB refuses overlapping
//! paths), and cannot apply to an item that does not exist yet; a ring of slots keyed by
//! sequence needs the sequence before the write, which a claim — blind by design — does not
//! have. So each transition stays ONE conditional write up to the bound and for 31 of every
//! 32 writes past it; the 32nd is refused at no effect and redone as the compacting write
//! (still one effective conditional write, still atomic). Reminders with the default 8
//! attempts (~20 transitions) never compact.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use punctual_core::contract::ReminderMessage;
use punctual_core::decision::ClaimView;
use punctual_core::ids::ReminderId;
use punctual_core::outcome::OutcomeEvent;
use punctual_core::ports::{
    HISTORY_MAX, HistoryEntry, Ledger, LedgerError, LedgerRecord, OwnerToken, SettleOutcome, Settlement,
    compact_history,
};
use punctual_core::ports::{Outbox, OutboxEntry, OutboxError};
use punctual_core::reason::{ReasonCode, ReminderState};

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;

use crate::dynamodb::{ConditionalUpdate, DynamoError, Item, get, get_i64, get_s, n, s, update_if};

/// Ledger items live this long after `deliver_by` before TTL may delete them.
pub const RETENTION_SECS: i64 = 30 * 24 * 3600;

/// The DynamoDB ledger.
#[derive(Debug, Clone)]
pub struct DynamoLedger {
    client: Client,
    table: String,
}

impl DynamoLedger {
    /// A ledger in `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    fn update(&self, msg: &ReminderMessage) -> UpdateItemFluentBuilder {
        self.client.update_item().table_name(&self.table).key("pk", s(key(&msg.reminder_id)))
    }

    /// Sends the transition `build` makes for a history write mode, appending `entry`; when the
    /// write is refused with a full history, redoes it as the compacting write (module docs).
    async fn write(
        &self,
        entry: &AttributeValue,
        build: impl Fn(&HistoryWrite) -> UpdateItemFluentBuilder,
    ) -> Result<ConditionalUpdate, LedgerError> {
        let mut mode = HistoryWrite::Append;
        // A compaction refused because another one won the race is retried once more.
        for _ in 0..3 {
            let result = update_if(&self.client, mode.bind(build(&mode), entry)).await.map_err(from_dynamo)?;
            let ConditionalUpdate::ConditionFailed(Some(old)) = &result else { return Ok(result) };
            match HistoryWrite::compaction(old, entry) {
                // Refused with the history we just tried to compact: the transition's own
                // condition failed; the caller classifies it from `old`.
                Some(next) if next.same_base(&mode) => return Ok(result),
                Some(next) => mode = next,
                None => return Ok(result),
            }
        }
        update_if(&self.client, mode.bind(build(&mode), entry)).await.map_err(from_dynamo)
    }
}

/// How a write adds its history entry.
#[derive(Debug, Clone, PartialEq)]
enum HistoryWrite {
    /// `list_append`, on condition that the history has room.
    Append,
    /// Replace the full history (`seen` entries, `seen_dropped` dropped before) by its
    /// compaction plus the new entry, on condition that it is still that history.
    Compact { seen: usize, seen_dropped: i64, history: Vec<AttributeValue>, dropped: i64 },
}

/// A transition's own condition: `absent` (the item may not exist yet) OR `present` (a
/// conjunction whose disjunctions sit in one level of parentheses, never deeper).
#[derive(Debug, Clone, Copy)]
struct Own<'a> {
    absent: bool,
    present: &'a str,
}

/// What a copy may not find when it claims or expires a reminder: ended (delivered, expired;
/// cancelled unless the copy was released after the cancellation —
/// [`punctual_core::ports::revives_cancelled`], `:first_enqueued` = its `first_enqueued`, and a
/// cancelled item's `updated_ms` is the cancellation; dead-lettered unless the copy belongs to
/// a redrive that has not claimed it yet: release ids sort by time, "" first). Flat, see
/// [`HistoryWrite::condition`]; a scheduler's copy binds no `:release` for it.
fn not_ended(redriven: bool) -> &'static str {
    if redriven {
        "#state <> :delivered AND #state <> :expired AND (#state <> :cancelled OR updated_ms < :first_enqueued) AND \
         (#state <> :dead OR attribute_not_exists(release_id) OR release_id < :release)"
    } else {
        "#state <> :delivered AND #state <> :expired AND (#state <> :cancelled OR updated_ms < :first_enqueued) AND \
         #state <> :dead"
    }
}

/// The claim's own condition for an existing item: not ended, not superseded (a copy from
/// before the latest redrive that claimed), and no live lease but our own (a retry after a
/// write whose answer was lost).
fn claim_condition(redriven: bool) -> String {
    format!(
        "{} AND (attribute_not_exists(release_id) OR release_id <= :release OR #state = :cancelled) AND \
         (attribute_not_exists(lease_until_ms) OR lease_until_ms <= :now OR #owner = :owner)",
        not_ended(redriven)
    )
}

/// An expiry's own condition for an existing item: not ended, and never under a live lease.
fn expiry_condition(redriven: bool) -> String {
    format!("{} AND (attribute_not_exists(lease_until_ms) OR lease_until_ms <= :now)", not_ended(redriven))
}

impl HistoryWrite {
    /// The compacting write for an item refused with a full history; `None` when the history
    /// had room (the refusal was the transition's own condition).
    fn compaction(old: &Item, entry: &AttributeValue) -> Option<Self> {
        let Some(AttributeValue::L(seen)) = old.get("history") else { return None };
        if seen.len() < HISTORY_MAX {
            return None;
        }
        let seen_dropped = get_i64(old, "history_dropped").unwrap_or(0);
        let mut history = seen.clone();
        let dropped = compact_history(&mut history);
        if let AttributeValue::L(new) = entry {
            history.extend(new.iter().cloned());
        }
        let dropped = seen_dropped.saturating_add(i64::try_from(dropped).unwrap_or(i64::MAX));
        Some(Self::Compact { seen: seen.len(), seen_dropped, history, dropped })
    }

    /// True when both compact the same stored history.
    fn same_base(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Compact { seen: a, seen_dropped: b, .. }, Self::Compact { seen: c, seen_dropped: d, .. }) => {
                (a, b) == (c, d)
            }
            _ => false,
        }
    }

    /// The `SET` clause that writes the history.
    fn set(&self) -> &'static str {
        match self {
            Self::Append => "#history = list_append(if_not_exists(#history, :empty), :entry)",
            Self::Compact { .. } => "#history = :history, history_dropped = :dropped",
        }
    }

    /// The transition's own condition with what the history adds, written flat: at most one
    /// level of parentheses. DynamoDB does not mind nesting, but dynalite's expression parser
    /// backtracks once per level (measured: the claim nested five deep took 34 ms of its CPU
    /// per request, flat 1 ms), and the local pipeline's throughput is dynalite's CPU. AND binds
    /// tighter than OR, so `attribute_not_exists(pk) OR A AND B` is `… OR (A AND B)`.
    fn condition(&self, own: Own<'_>) -> String {
        match self {
            // A missing item has no history: the history's clause is true for it.
            Self::Append => format!(
                "{}{} AND (attribute_not_exists(#history) OR size(#history) < :history_max)",
                if own.absent { "attribute_not_exists(pk) OR " } else { "" },
                own.present
            ),
            // Only a stored (full) history is compacted: the item exists.
            Self::Compact { .. } => format!(
                "{} AND size(#history) = :history_seen AND \
                 (attribute_not_exists(history_dropped) OR history_dropped = :dropped_seen)",
                own.present
            ),
        }
    }

    /// Binds this mode's values (DynamoDB refuses unused ones).
    fn bind(&self, update: UpdateItemFluentBuilder, entry: &AttributeValue) -> UpdateItemFluentBuilder {
        let update = update.expression_attribute_names("#history", "history");
        match self {
            Self::Append => update
                .expression_attribute_values(":empty", AttributeValue::L(vec![]))
                .expression_attribute_values(":entry", entry.clone())
                .expression_attribute_values(":history_max", n(HISTORY_MAX)),
            Self::Compact { seen, seen_dropped, history, dropped } => update
                .expression_attribute_values(":history", AttributeValue::L(history.clone()))
                .expression_attribute_values(":dropped", n(*dropped))
                .expression_attribute_values(":history_seen", n(*seen))
                .expression_attribute_values(":dropped_seen", n(*seen_dropped)),
        }
    }
}

fn key(id: &ReminderId) -> String {
    format!("reminder:{id}")
}

fn ms(t: DateTime<Utc>) -> AttributeValue {
    n(t.timestamp_millis())
}

fn history_entry(
    msg: &ReminderMessage,
    now: DateTime<Utc>,
    state: ReminderState,
    settlement: Option<&Settlement>,
) -> AttributeValue {
    let mut m = Item::new();
    m.insert("at_ms".into(), ms(now));
    m.insert("state".into(), s(state.as_str()));
    m.insert("attempts".into(), n(settlement.map_or(msg.attempt, |x| x.attempts)));
    m.insert("correlation_id".into(), s(msg.correlation_id.as_str()));
    if let Some(r) = &msg.redrive {
        m.insert("redrive_id".into(), s(r.id.as_str()));
    }
    if let Some(x) = settlement {
        if let Some(r) = x.reason {
            m.insert("reason".into(), s(r.as_str()));
        }
        if let Some(p) = x.provider_status {
            m.insert("provider_status".into(), n(p));
        }
        if let Some(t) = x.next_at {
            m.insert("next_at_ms".into(), ms(t));
        }
    }
    AttributeValue::L(vec![AttributeValue::M(m)])
}

fn from_dynamo(e: DynamoError) -> LedgerError {
    match e {
        DynamoError::Throttled(src) => LedgerError::Throttled(src),
        DynamoError::TableNotFound(src) | DynamoError::Unknown(src) => LedgerError::Unknown(src),
    }
}

fn instant(v: Option<i64>) -> Option<DateTime<Utc>> {
    v.and_then(DateTime::<Utc>::from_timestamp_millis)
}

fn state_of(item: &Item) -> Option<ReminderState> {
    get_s(item, "state").and_then(|s| s.parse().ok())
}

fn parse_record(id: &ReminderId, item: &Item) -> Result<LedgerRecord, LedgerError> {
    let corrupt = |what: &str| LedgerError::Corrupt { reminder_id: id.to_string(), what: what.to_owned() };
    let state = state_of(item).ok_or_else(|| corrupt("missing or unknown `state`"))?;
    let attempts = get_i64(item, "attempts").and_then(|a| u32::try_from(a).ok()).unwrap_or(0);
    let deliver_by = instant(get_i64(item, "deliver_by_ms")).ok_or_else(|| corrupt("missing `deliver_by_ms`"))?;
    let mut history = Vec::new();
    if let Some(AttributeValue::L(entries)) = item.get("history") {
        for e in entries {
            let AttributeValue::M(m) = e else { return Err(corrupt("history entry is not a map")) };
            history.push(HistoryEntry {
                at: instant(get_i64(m, "at_ms")).ok_or_else(|| corrupt("history entry without `at_ms`"))?,
                state: state_of(m).ok_or_else(|| corrupt("history entry without a known `state`"))?,
                reason: get_s(m, "reason").and_then(|r| r.parse::<ReasonCode>().ok()),
                attempts: get_i64(m, "attempts").and_then(|a| u32::try_from(a).ok()).unwrap_or(0),
                correlation_id: get_s(m, "correlation_id").unwrap_or_default().to_owned(),
                redrive_id: get_s(m, "redrive_id").map(str::to_owned),
                provider_status: get_i64(m, "provider_status").and_then(|p| u16::try_from(p).ok()),
                next_at: instant(get_i64(m, "next_at_ms")),
            });
        }
    }
    Ok(LedgerRecord {
        reminder_id: id.clone(),
        state,
        attempts,
        owner: get_s(item, "owner").map(str::to_owned),
        lease_until: instant(get_i64(item, "lease_until_ms")),
        receipt: get_s(item, "receipt").map(str::to_owned),
        last_reason: get_s(item, "last_reason").and_then(|r| r.parse().ok()),
        next_at: instant(get_i64(item, "next_at_ms")),
        deliver_after: instant(get_i64(item, "deliver_after_ms")),
        deliver_by,
        history,
        history_dropped: get_i64(item, "history_dropped").and_then(|d| u64::try_from(d).ok()).unwrap_or(0),
        release_id: get_s(item, "release_id").map(str::to_owned),
        call_owner: get_s(item, "call_owner").map(str::to_owned),
        call_release: get_s(item, "call_release").map(str::to_owned),
    })
}

/// The ledger's sparse GSI of records holding unpublished outcome events: partition key
/// `outbox_shard` (`outbox#00`..`outbox#15`, by reminder id, present only while the record
/// holds events), sort key `outbox_at_ms` (when the last was added), projecting `outbox`.
pub const OUTBOX_INDEX: &str = "outbox";

/// Shards of the outbox index.
pub const OUTBOX_SHARDS: u32 = 16;

/// What a write that adds an outcome event sets (`:now` is the write's own time).
const OUTBOX_APPEND: &str = "outbox = list_append(if_not_exists(outbox, :no_events), :event), \
     outbox_shard = :outbox_shard, outbox_at_ms = :now";

fn outbox_shard(id: &ReminderId) -> String {
    format!("outbox#{:02}", crate::renewals::shard_of(id, OUTBOX_SHARDS))
}

/// Binds what [`OUTBOX_APPEND`] reads.
fn bind_outbox(
    update: UpdateItemFluentBuilder,
    msg: &ReminderMessage,
    event: &OutcomeEvent,
) -> UpdateItemFluentBuilder {
    update
        .expression_attribute_values(":no_events", AttributeValue::L(Vec::new()))
        .expression_attribute_values(":event", AttributeValue::L(vec![s(event.to_json())]))
        .expression_attribute_values(":outbox_shard", s(outbox_shard(&msg.reminder_id)))
}

impl Outbox for DynamoLedger {
    /// Queries every shard of [`OUTBOX_INDEX`], oldest first, `limit` records in all (the
    /// index is eventually consistent: a record just cleared may be read again and its events
    /// published twice; one just written is found by the next sweep).
    async fn pending(&self, limit: usize) -> Result<Vec<OutboxEntry>, OutboxError> {
        let per_shard = limit.div_ceil(OUTBOX_SHARDS as usize).max(1) as i32;
        let mut out = Vec::new();
        // The 16 shards side by side.
        let pages = futures_util::future::join_all((0..OUTBOX_SHARDS).map(|shard| {
            self.client
                .query()
                .table_name(&self.table)
                .index_name(OUTBOX_INDEX)
                .key_condition_expression("outbox_shard = :s")
                .expression_attribute_values(":s", s(format!("outbox#{shard:02}")))
                .limit(per_shard)
                .send()
        }))
        .await;
        for page in pages {
            let page = page.map_err(|e| OutboxError::Unknown(Box::new(e)))?;
            for item in page.items.unwrap_or_default() {
                let (Some(pk), Some(added_ms)) = (get_s(&item, "pk"), get_i64(&item, "outbox_at_ms")) else { continue };
                let stored: Vec<&AttributeValue> =
                    item.get("outbox").and_then(|v| v.as_l().ok()).map(|l| l.iter().collect()).unwrap_or_default();
                let events: Vec<OutcomeEvent> = stored
                    .iter()
                    .filter_map(|v| v.as_s().ok())
                    .filter_map(|t| OutcomeEvent::from_json(t).ok())
                    .collect();
                out.push(OutboxEntry {
                    reminder_id: pk.strip_prefix("reminder:").unwrap_or(pk).to_owned(),
                    added_ms,
                    unreadable: stored.len() - events.len(),
                    events,
                });
            }
        }
        out.sort_by_key(|e| e.added_ms);
        out.truncate(limit);
        Ok(out)
    }

    /// Removes the events and the index keys, conditioned on the record holding exactly what
    /// was read (the same last addition, as many events).
    async fn clear(&self, entry: &OutboxEntry) -> Result<bool, OutboxError> {
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(format!("reminder:{}", entry.reminder_id)))
            .update_expression("REMOVE outbox, outbox_shard, outbox_at_ms")
            .condition_expression("outbox_at_ms = :seen AND size(outbox) = :n")
            .expression_attribute_values(":seen", n(entry.added_ms))
            .expression_attribute_values(":n", n(entry.events.len() + entry.unreadable));
        match update_if(&self.client, update).await.map_err(|e| OutboxError::Unknown(Box::new(e)))? {
            ConditionalUpdate::Written(_) => Ok(true),
            ConditionalUpdate::ConditionFailed(_) => Ok(false),
        }
    }
}

impl DynamoLedger {
    /// How many records hold unpublished outcome events, and when the oldest of their last
    /// additions was (`punctual status`): per shard of [`OUTBOX_INDEX`] one `Select=COUNT`
    /// query (paged) and one query of one item, side by side. Returns the count, the oldest
    /// instant and the requests made.
    pub async fn outbox_summary(&self) -> Result<(u64, Option<DateTime<Utc>>, u32), OutboxError> {
        let err = |e: Box<dyn std::error::Error + Send + Sync>| OutboxError::Unknown(e);
        let shard = |i: u32| async move {
            let key = s(format!("outbox#{i:02}"));
            let (mut count, mut requests, mut start) = (0u64, 0u32, None);
            loop {
                let page = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(OUTBOX_INDEX)
                    .key_condition_expression("outbox_shard = :s")
                    .expression_attribute_values(":s", key.clone())
                    .select(aws_sdk_dynamodb::types::Select::Count)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(|e| err(Box::new(e)))?;
                requests += 1;
                count += u64::try_from(page.count).unwrap_or(0);
                match page.last_evaluated_key.filter(|k| !k.is_empty()) {
                    Some(k) => start = Some(k),
                    None => break,
                }
            }
            let first = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(OUTBOX_INDEX)
                .key_condition_expression("outbox_shard = :s")
                .expression_attribute_values(":s", key)
                .limit(1)
                .send()
                .await
                .map_err(|e| err(Box::new(e)))?;
            let oldest = first.items().first().and_then(|i| get_i64(i, "outbox_at_ms"));
            Ok::<_, OutboxError>((count, oldest, requests + 1))
        };
        let mut total = (0u64, None::<i64>, 0u32);
        for r in futures_util::future::join_all((0..OUTBOX_SHARDS).map(shard)).await {
            let (count, oldest, requests) = r?;
            total.0 += count;
            total.1 = match (total.1, oldest) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            total.2 += requests;
        }
        Ok((total.0, total.1.and_then(DateTime::<Utc>::from_timestamp_millis), total.2))
    }
}

/// The ledger's sparse GSI of dead-lettered reminders: partition key `dead_reason` (present
/// only while a reminder is dead-lettered), sort key `deliver_by_ms`, keys only.
pub const DEAD_INDEX: &str = "dead";

impl DynamoLedger {
    /// Reminders dead-lettered or expired whose `deliver_by` is at or after `since`, by reason,
    /// from the sparse [`DEAD_INDEX`]: one `Query` (`Select=COUNT`) per reason code, paginated;
    /// reads proportional to those reminders, never to the table. `Ok(None)` when the table has
    /// no such index (a stack from before it).
    /// The second value is the number of requests made (one per page).
    pub async fn dead_by_reason(
        &self,
        since: DateTime<Utc>,
    ) -> Result<(Option<std::collections::BTreeMap<String, u64>>, u32), LedgerError> {
        let mut out = std::collections::BTreeMap::new();
        let mut requests = 0u32;
        let reasons = ReasonCode::ALL.iter().map(|r| r.as_str()).chain(["unknown"]);
        for reason in reasons {
            let mut start: Option<Item> = None;
            let mut count = 0u64;
            loop {
                let page = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(DEAD_INDEX)
                    .key_condition_expression("dead_reason = :r AND deliver_by_ms >= :since")
                    .expression_attribute_values(":r", s(reason))
                    .expression_attribute_values(":since", ms(since))
                    .select(aws_sdk_dynamodb::types::Select::Count)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await;
                requests += 1;
                let page = match page {
                    Ok(p) => p,
                    // Only a missing index means a stack from before it — DynamoDB (and DynamoDB
                    // Local) say "The table does not have the specified index", moto "Invalid
                    // index: … for table"; a missing table or any other refusal is an error.
                    Err(e)
                        if e.as_service_error().is_some_and(|s| {
                            s.meta()
                                .message()
                                .is_some_and(|m| m.contains("specified index") || m.contains("Invalid index"))
                        }) =>
                    {
                        return Ok((None, requests));
                    }
                    Err(e) => return Err(LedgerError::Unknown(Box::new(e))),
                };
                count += u64::try_from(page.count).unwrap_or(0);
                match page.last_evaluated_key.filter(|k| !k.is_empty()) {
                    Some(k) => start = Some(k),
                    None => break,
                }
            }
            if count > 0 {
                out.insert(reason.to_owned(), count);
            }
        }
        Ok((Some(out), requests))
    }

    /// The records of `ids` (absent ones are simply not in the map): strongly consistent
    /// `BatchGetItem`s of 100 keys, 4 in flight, unprocessed keys retried with backoff.
    /// O(ids), whatever the table holds: `punctual reconcile` and `status` join the due
    /// population with it. `progress` is told the records read so far.
    pub async fn get_many(
        &self,
        ids: &[ReminderId],
        mut progress: impl FnMut(usize),
    ) -> Result<std::collections::HashMap<ReminderId, LedgerRecord>, LedgerError> {
        use futures_util::StreamExt;
        use std::time::Duration;
        let unknown = |e: Box<dyn std::error::Error + Send + Sync>| LedgerError::Unknown(e);
        let mut unique: Vec<&ReminderId> = ids.iter().collect();
        unique.sort();
        unique.dedup();
        let chunks: Vec<Vec<String>> = unique.chunks(100).map(|c| c.iter().map(|id| key(id)).collect()).collect();
        let fetch = |pks: Vec<String>| async move {
            let read = crate::dynamodb::get_batch(&self.client, &self.table, &pks, 10, Duration::from_millis(25))
                .await
                .map_err(from_dynamo)?;
            if read.unread > 0 {
                return Err(unknown("DynamoDB left keys unprocessed after 10 attempts".into()));
            }
            Ok::<_, LedgerError>(read.items)
        };
        let mut stream = futures_util::stream::iter(chunks).map(fetch).buffer_unordered(4);
        let mut out = std::collections::HashMap::new();
        while let Some(items) = stream.next().await {
            for item in items? {
                let Some(id) = get_s(&item, "pk").and_then(|pk| pk.strip_prefix("reminder:")) else { continue };
                let Ok(id) = ReminderId::parse(id) else { continue };
                let rec = parse_record(&id, &item)?;
                out.insert(id, rec);
            }
            progress(out.len());
        }
        Ok(out)
    }

    /// Every record in the table (a paginated Scan): O(table), for `punctual run` and `local
    /// drain` reports on an emulator; `punctual status` never calls it (`make test` checks).
    pub async fn scan_all(&self) -> Result<Vec<LedgerRecord>, LedgerError> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| LedgerError::Unknown(Box::new(e)))?;
            for item in page.items.unwrap_or_default() {
                let Some(id) = get_s(&item, "pk").and_then(|pk| pk.strip_prefix("reminder:")) else { continue };
                let Ok(id) = ReminderId::parse(id) else { continue };
                out.push(parse_record(&id, &item)?);
            }
            match page.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(k) => start = Some(k),
                None => return Ok(out),
            }
        }
    }
}

/// What a claim written as `item` (`ALL_NEW`, or the item our own earlier write left) says.
fn claimed(item: &Item, owner: &OwnerToken, msg: &ReminderMessage) -> ClaimView {
    let prior_attempts = get_i64(item, "attempts").and_then(|a| u32::try_from(a).ok()).unwrap_or(0);
    // The claim leaves `call_owner` as it was: another owner's mark is a call whose outcome
    // nobody recorded.
    let unsettled_call = get_s(item, "call_owner").is_some_and(|o| o != owner.as_str())
        && !punctual_core::ports::covered_by_operator(msg, get_s(item, "call_release"));
    ClaimView::Claimed { prior_attempts, unsettled_call }
}

impl Ledger for DynamoLedger {
    async fn claim(
        &self,
        msg: &ReminderMessage,
        owner: &OwnerToken,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<ClaimView, LedgerError> {
        let entry = history_entry(msg, now, ReminderState::Leased, None);
        let claim_condition = claim_condition(msg.redrive.is_some());
        let build = |h: &HistoryWrite| {
            self.update(msg)
            .update_expression(format!(
                "SET #state = :leased, #owner = :owner, lease_until_ms = :lease, updated_ms = :now, \
                 deliver_after_ms = :after, deliver_by_ms = :by, tenant_id = :tenant, renewal_id = :renewal, ttl_epoch_s = :ttl, \
                 attempts = if_not_exists(attempts, :zero){}, {} REMOVE dead_reason{}",
                if msg.redrive.is_some() { ", release_id = :release" } else { "" },
                h.set(),
                // A scheduler's copy claims only when no redrive supersedes it: none ran, or a
                // cancellation ended the chain (`#state = :cancelled` above: `not_ended` lets a
                // cancelled item through only for a copy released after the cancellation).
                if msg.redrive.is_some() { "" } else { ", release_id" }
            ))
            // Free, or not ended (delivered, expired; cancelled unless this copy was released
            // after the cancellation; dead-lettered unless this copy belongs to a redrive that has
            // not claimed it yet), not superseded (a copy from
            // before the latest redrive that claimed: release ids sort by time, "" first), and
            // (no lease, an ended lease, or our own lease: a retry after a write whose answer
            // was lost). A stale copy never revives an ended reminder.
            .condition_expression(h.condition(Own { absent: true, present: &claim_condition }))
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_values(":leased", s(ReminderState::Leased.as_str()))
            .expression_attribute_values(":delivered", s(ReminderState::Delivered.as_str()))
            .expression_attribute_values(":expired", s(ReminderState::Expired.as_str()))
            .expression_attribute_values(":cancelled", s(ReminderState::Cancelled.as_str()))
            .expression_attribute_values(":first_enqueued", ms(msg.first_enqueued))
            .expression_attribute_values(":dead", s(ReminderState::DeadLettered.as_str()))
            // The release this copy belongs to ("" for the scheduler's; redrive ids sort by time).
            .expression_attribute_values(":release", s(msg.redrive.as_ref().map_or("", |r| r.id.as_str())))
            .expression_attribute_values(":owner", s(owner.as_str()))
            .expression_attribute_values(":lease", ms(lease_until))
            .expression_attribute_values(":now", ms(now))
            .expression_attribute_values(":after", ms(msg.deliver_after))
            .expression_attribute_values(":by", ms(msg.deliver_by))
            .expression_attribute_values(":tenant", s(msg.tenant_id.as_str()))
            .expression_attribute_values(":renewal", s(msg.renewal_id.as_str()))
            .expression_attribute_values(":ttl", n(msg.deliver_by.timestamp() + RETENTION_SECS))
            .expression_attribute_values(":zero", n(0))
        };
        match self.write(&entry, build).await? {
            ConditionalUpdate::Written(new) => Ok(claimed(&new.unwrap_or_default(), owner, msg)),
            ConditionalUpdate::ConditionFailed(old) => {
                let old = old.ok_or_else(|| LedgerError::Corrupt {
                    reminder_id: msg.reminder_id.to_string(),
                    what: "claim refused but no ALL_OLD item returned".into(),
                })?;
                // A copy released after a cancellation was refused for another reason
                // (superseded), not because the reminder ended.
                let cancel_superseded =
                    get_i64(&old, "updated_ms").is_some_and(|t| t < msg.first_enqueued.timestamp_millis());
                match state_of(&old) {
                    Some(ReminderState::Delivered) => return Ok(ClaimView::AlreadyDelivered),
                    Some(ReminderState::Cancelled) if cancel_superseded => {}
                    Some(state @ (ReminderState::Expired | ReminderState::Cancelled | ReminderState::DeadLettered)) => {
                        return Ok(ClaimView::Ended { state });
                    }
                    _ => {}
                }
                // Our own claim, applied by a write whose answer was lost and sent again (the
                // SDK retries a 500 or a timeout). A plain claim's second write passes its own
                // `#owner = :owner`; a compacting one's does not (the history it expected full
                // is compacted, by itself). Owner tokens are unique per processing.
                if get_s(&old, "owner") == Some(owner.as_str()) && state_of(&old) == Some(ReminderState::Leased) {
                    return Ok(claimed(&old, owner, msg));
                }
                let release = msg.redrive.as_ref().map_or("", |r| r.id.as_str());
                let reviving = state_of(&old) == Some(ReminderState::Cancelled);
                if !reviving && get_s(&old, "release_id").is_some_and(|latest| release < latest) {
                    return Ok(ClaimView::Superseded);
                }
                let lease_until = instant(get_i64(&old, "lease_until_ms")).unwrap_or(now);
                Ok(ClaimView::HeldElsewhere { lease_until })
            }
        }
    }

    async fn settle(
        &self,
        msg: &ReminderMessage,
        owner: Option<&OwnerToken>,
        now: DateTime<Utc>,
        x: &Settlement,
    ) -> Result<SettleOutcome, LedgerError> {
        let mut set = vec![
            "#state = :state",
            "attempts = :attempts",
            "updated_ms = :now",
            "deliver_after_ms = :after",
            "deliver_by_ms = :by",
            "tenant_id = :tenant",
            "renewal_id = :renewal",
            "ttl_epoch_s = :ttl",
        ];
        let mut remove = vec!["#owner", "lease_until_ms"];
        // The mark of an unknown call outlives only the quarantine that is about it, and a
        // rescheduled copy's release (which made no call).
        if !punctual_core::ports::keeps_call_mark(x.reason) {
            remove.push("call_owner");
            remove.push("call_release");
        }
        let mut update = self
            .update(msg)
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_values(":state", s(x.state.as_str()))
            .expression_attribute_values(":attempts", n(x.attempts))
            .expression_attribute_values(":now", ms(now))
            .expression_attribute_values(":after", ms(msg.deliver_after))
            .expression_attribute_values(":by", ms(msg.deliver_by))
            .expression_attribute_values(":tenant", s(msg.tenant_id.as_str()))
            .expression_attribute_values(":renewal", s(msg.renewal_id.as_str()))
            .expression_attribute_values(":ttl", n(msg.deliver_by.timestamp() + RETENTION_SECS));
        match x.reason {
            Some(r) => {
                set.push("last_reason = :reason");
                update = update.expression_attribute_values(":reason", s(r.as_str()));
            }
            None => remove.push("last_reason"),
        }
        // The sparse `dead` index holds exactly the reminders whose last word was the DLQ
        // (dead-lettered, or expired: `business_deadline_expired`), by reason: what `punctual
        // status` counts without a scan. The scheduler's expiry at release (`missed_schedule_window`)
        // writes no letter, and a missed backlog expires thousands a second: not in it.
        if matches!(x.state, ReminderState::DeadLettered | ReminderState::Expired)
            && x.reason != Some(ReasonCode::MissedScheduleWindow)
        {
            set.push("dead_reason = :dead_reason");
            update = update.expression_attribute_values(":dead_reason", s(x.reason.map_or("unknown", |r| r.as_str())));
        } else {
            remove.push("dead_reason");
        }
        match x.next_at {
            Some(t) => {
                set.push("next_at_ms = :next");
                update = update.expression_attribute_values(":next", ms(t));
            }
            None => remove.push("next_at_ms"),
        }
        if let Some(r) = &x.receipt {
            set.push("receipt = :receipt");
            update = update.expression_attribute_values(":receipt", s(r.as_str()));
        }
        // The ending's outcome event, in the same conditional write: the record is its outbox
        // (docs/design.md#outcome-events).
        if let Some(event) = OutcomeEvent::of_settlement(msg, x, now) {
            set.push(OUTBOX_APPEND);
            update = bind_outbox(update, msg, &event);
        }
        // DynamoDB refuses unused expression values, so `:delivered` is bound per condition.
        let delivered = s(ReminderState::Delivered.as_str());
        let expiry;
        let condition = if x.state == ReminderState::Delivered {
            // The provider accepted it: record that whoever holds the lease now.
            update = update.expression_attribute_values(":delivered", delivered);
            Own { absent: true, present: "#state <> :delivered" }
        } else if let Some(o) = owner {
            update = update
                .expression_attribute_values(":owner", s(o.as_str()))
                .expression_attribute_values(":leased", s(ReminderState::Leased.as_str()));
            Own { absent: false, present: "#owner = :owner AND #state = :leased" }
        } else {
            // An expiry: never over a reminder that ended (delivered, expired; cancelled, unless
            // this copy was released after the cancellation — `revives_cancelled`; and
            // dead-lettered, unless this copy belongs to a redrive that has not run on it —
            // `revives_dead_letter`, the claim's own rule: the expiry then records over the
            // quarantine, `dead_reason` included), never under a live lease.
            update = update
                .expression_attribute_values(":delivered", delivered)
                .expression_attribute_values(":dead", s(ReminderState::DeadLettered.as_str()))
                .expression_attribute_values(":expired", s(ReminderState::Expired.as_str()))
                .expression_attribute_values(":cancelled", s(ReminderState::Cancelled.as_str()))
                .expression_attribute_values(":first_enqueued", ms(msg.first_enqueued));
            if let Some(r) = &msg.redrive {
                update = update.expression_attribute_values(":release", s(r.id.as_str()));
            }
            expiry = expiry_condition(msg.redrive.is_some());
            Own { absent: true, present: &expiry }
        };
        let entry = history_entry(msg, now, x.state, Some(x));
        let build = |h: &HistoryWrite| {
            update
                .clone()
                .update_expression(format!("SET {}, {} REMOVE {}", set.join(", "), h.set(), remove.join(", ")))
                .condition_expression(h.condition(condition))
        };
        match self.write(&entry, build).await? {
            ConditionalUpdate::Written(_) => Ok(SettleOutcome::Recorded),
            ConditionalUpdate::ConditionFailed(old) => match old.as_ref().and_then(state_of) {
                Some(ReminderState::Delivered) => Ok(SettleOutcome::AlreadyDelivered),
                Some(ended) if owner.is_none() && ended.is_terminal() => Ok(SettleOutcome::AlreadyEnded(ended)),
                _ => Ok(SettleOutcome::LeaseLost),
            },
        }
    }

    async fn mark_call(
        &self,
        msg: &ReminderMessage,
        owner: &OwnerToken,
        now: DateTime<Utc>,
    ) -> Result<bool, LedgerError> {
        let update = self
            .update(msg)
            .update_expression("SET call_owner = :owner, call_release = :release")
            .expression_attribute_values(":release", s(msg.redrive.as_ref().map_or("", |r| r.id.as_str())))
            .condition_expression("#state = :leased AND #owner = :owner AND lease_until_ms > :now")
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_values(":leased", s(ReminderState::Leased.as_str()))
            .expression_attribute_values(":owner", s(owner.as_str()))
            .expression_attribute_values(":now", ms(now));
        // No value is needed back either way: ask for none (smaller answers).
        match update.send().await {
            Ok(_) => Ok(true),
            Err(aws_sdk_dynamodb::error::SdkError::ServiceError(e))
                if matches!(
                    e.err(),
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(from_dynamo(crate::dynamodb::classify(e))),
        }
    }

    async fn get(&self, id: &ReminderId) -> Result<Option<LedgerRecord>, LedgerError> {
        let item = get(&self.client, &self.table, &key(id)).await.map_err(from_dynamo)?;
        match item.map(|i| parse_record(id, &i)).transpose() {
            // moto applies an UpdateItem's actions one at a time, so a read racing the write
            // that creates an item can see it without `state`; DynamoDB never shows a
            // half-applied write. One more read tells the race from real corruption.
            Err(LedgerError::Corrupt { .. }) => {
                let item = get(&self.client, &self.table, &key(id)).await.map_err(from_dynamo)?;
                item.map(|i| parse_record(id, &i)).transpose()
            }
            other => other,
        }
    }

    /// One `UpdateItem` on an existing record (a reminder no sender ever claimed has none:
    /// its event is not written, and the redrive's copy writes the record's first ending).
    async fn append_outcome(
        &self,
        msg: &ReminderMessage,
        event: &OutcomeEvent,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let update = bind_outbox(self.update(msg), msg, event)
            .update_expression(format!("SET {OUTBOX_APPEND}"))
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":now", ms(now));
        if let ConditionalUpdate::ConditionFailed(_) = update_if(&self.client, update).await.map_err(from_dynamo)? {
            tracing::warn!(reminder_id = %msg.reminder_id, outcome = event.outcome.as_str(), "no ledger record: the event is not written");
        }
        Ok(())
    }
}

/// Creates a ledger table (tests and `punctual local`; on AWS the SAM template owns it): string
/// key `pk`, on demand, with the sparse [`DEAD_INDEX`].
pub async fn create_table(client: &Client, table: &str) -> Result<(), DynamoError> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
        ScalarAttributeType,
    };
    let build = |e: aws_sdk_dynamodb::error::BuildError| DynamoError::Unknown(Box::new(e));
    let attr = |name: &str, t: ScalarAttributeType| {
        AttributeDefinition::builder().attribute_name(name).attribute_type(t).build().map_err(build)
    };
    let key =
        |name: &str, t: KeyType| KeySchemaElement::builder().attribute_name(name).key_type(t).build().map_err(build);
    let gsi = GlobalSecondaryIndex::builder()
        .index_name(DEAD_INDEX)
        .key_schema(key("dead_reason", KeyType::Hash)?)
        .key_schema(key("deliver_by_ms", KeyType::Range)?)
        .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
        .build()
        .map_err(build)?;
    let outbox = GlobalSecondaryIndex::builder()
        .index_name(OUTBOX_INDEX)
        .key_schema(key("outbox_shard", KeyType::Hash)?)
        .key_schema(key("outbox_at_ms", KeyType::Range)?)
        .projection(Projection::builder().projection_type(ProjectionType::Include).non_key_attributes("outbox").build())
        .build()
        .map_err(build)?;
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(attr("pk", ScalarAttributeType::S)?)
        .attribute_definitions(attr("dead_reason", ScalarAttributeType::S)?)
        .attribute_definitions(attr("deliver_by_ms", ScalarAttributeType::N)?)
        .attribute_definitions(attr("outbox_shard", ScalarAttributeType::S)?)
        .attribute_definitions(attr("outbox_at_ms", ScalarAttributeType::N)?)
        .key_schema(key("pk", KeyType::Hash)?)
        .global_secondary_indexes(gsi)
        .global_secondary_indexes(outbox)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(crate::dynamodb::classify)?;
    crate::dynamodb::wait_active(client, table).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The deepest nesting of grouping parentheses (a function's or `IN`'s parentheses do not
    /// group: they follow a name other than AND, OR or NOT).
    fn grouping_depth(expr: &str) -> usize {
        let (mut stack, mut deepest, mut word, mut last) = (Vec::new(), 0, String::new(), String::new());
        for c in expr.chars() {
            if c.is_alphanumeric() || c == '_' || c == '#' || c == ':' {
                word.push(c);
                continue;
            }
            if !word.is_empty() {
                last = std::mem::take(&mut word);
            }
            match c {
                '(' => {
                    stack.push(last.is_empty() || ["AND", "OR", "NOT"].contains(&last.to_uppercase().as_str()));
                    deepest = deepest.max(stack.iter().filter(|g| **g).count());
                    last.clear();
                }
                ')' => {
                    stack.pop();
                    last = ")".into();
                }
                c if c.is_whitespace() => {}
                _ => last.clear(),
            }
        }
        deepest
    }

    #[test]
    fn the_depth_counts_groups_not_calls() {
        assert_eq!(grouping_depth("attribute_not_exists(pk) OR size(h) < :m"), 0);
        assert_eq!(grouping_depth("a = :b AND (c = :d OR attribute_exists(e))"), 1);
        assert_eq!(grouping_depth("(a = :b AND (c = :d OR e = :f))"), 2);
    }

    /// Every condition the ledger sends is flat (one level of parentheses at most): dynalite,
    /// the local engine, parses nested groups in time exponential in their depth.
    #[test]
    fn every_ledger_condition_is_flat() {
        let compact = HistoryWrite::Compact { seen: 97, seen_dropped: 0, history: vec![], dropped: 3 };
        let claims = [claim_condition(false), claim_condition(true)];
        let expiries = [expiry_condition(false), expiry_condition(true)];
        let mut owns: Vec<Own<'_>> = claims.iter().chain(&expiries).map(|c| Own { absent: true, present: c }).collect();
        owns.push(Own { absent: true, present: "#state <> :delivered" });
        owns.push(Own { absent: false, present: "#owner = :owner AND #state = :leased" });
        for own in owns {
            for mode in [&HistoryWrite::Append, &compact] {
                let expr = mode.condition(own);
                assert!(grouping_depth(&expr) <= 1, "nested condition: {expr}");
            }
        }
    }

    /// A scheduler's copy neither names nor needs `:release` to be not-ended (DynamoDB refuses
    /// an unused value); a redrive's copy does.
    #[test]
    fn only_a_redrives_expiry_names_its_release() {
        assert!(!expiry_condition(false).contains(":release"));
        assert!(expiry_condition(true).contains(":release"));
        assert!(claim_condition(false).contains(":release"));
        // Every copy binds its release time, for a cancelled reminder's rule.
        assert!(
            expiry_condition(false).contains(":first_enqueued") && claim_condition(true).contains(":first_enqueued")
        );
    }
}
