//! The renewals table (system of record): rows written by `punctual import`, pending renewals
//! paged by the scheduler through a sparse sharded GSI, status read by the sender.
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `pk` | S | `renewal:{tenant_id}:{renewal_id}` |
//! | `tenant_id`, `renewal_id`, `kind`, `recipient_ref`, `channel` | S | from the row |
//! | `zone`, `local_due_date`, `local_send_time`, `window_minutes` | S, S, S, N | from the row (`local_send_time` exactly: `HH:MM`, or `HH:MM:SS` when it has seconds) |
//! | `status` | S | `active`, `cancelled`, `paid` (the sender re-reads it before calling) |
//! | `reminder_id`, `deliver_after_ms`, `deliver_by_ms` | S, N, N | computed with the DST policy |
//! | `sched_state` | S | `scheduled` → `enqueued`, or `expired` (`sched_reason = missed_schedule_window`) |
//! | `due_shard`, `due_after_ms` | S, N | **GSI `due`** keys, present only while `active` and `scheduled` |
//! | `day_shard`, `deliver_after_ms` | S, N | **GSI `by_day_channel`** keys, on every row: `{UTC date of deliver_after}#{shard}` |
//! | `sched_at_ms` | N | when the scheduler released or expired it |
//!
//! The `due` index is sparse (only renewals waiting for release) and sharded 16 ways by reminder
//! id (`due#00` … `due#15`), so a 200,000-renewal morning spreads over 16 partitions and the
//! scheduler's query `due_shard = S AND due_after_ms <= horizon` returns exactly what is
//! pending and due, oldest first. The watermark lives in the item `pk = scheduler:watermark`.
//!
//! The `by_day_channel` index is not sparse: every row, whatever its status, is under
//! `day_shard = {UTC date of deliver_after}#{00..15}`, sorted by `deliver_after_ms`, projecting
//! the few attributes [`DAY_PROJECTION`] that `reconcile`, `status`, `forecast` and `explain` read. A
//! window's due population is 16 queries per UTC day it touches, O(population) whatever the
//! table holds. Its cost: every write of a row (import, the scheduler's mark) writes the index
//! too, ~250 bytes, 1 WCU; storage ~250 bytes per renewal. It projects each row's `channel`, so
//! a window can be read and judged per channel (`reconcile --channel`, `forecast --channel`,
//! `status`'s SLO per channel): a filter on the same queries, no index per channel. It replaces
//! the older `by_day`, which did not project the channel: a deployed index's projection cannot
//! change, so the new projection is a new index (the template's `KeepOldDayIndex` upgrades a
//! stack in two deploys: CloudFormation adds or removes one index per update).

use aws_sdk_dynamodb::Client;
use punctual_core::decision::RenewalView;
use punctual_core::ids::{RenewalId, TenantId};
use punctual_core::ports::{RenewalLookup, RenewalVersion, Renewals, RenewalsError};

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType,
};
use chrono::{DateTime, Utc};
use punctual_core::ids::{ReminderId, ReminderKind};
use punctual_core::ports::{DueStore, DueStoreError, Marked, Page, Pending};
use punctual_core::reconcile::{DueRow, ReleaseState};
use punctual_core::renewal::{Renewal, RenewalStatus};

use crate::dynamodb::{
    ConditionalPut, ConditionalUpdate, DynamoError, Item, get, get_i64, get_s, n, put_if, s, update_if,
};

/// The reconciliation index (see the module docs).
pub const DAY_INDEX: &str = "by_day_channel";
/// The non-key attributes `by_day_channel` projects (the template's `NonKeyAttributes`, checked by
/// `tools/check_template.py`).
pub const DAY_PROJECTION: [&str; 10] = [
    "tenant_id",
    "renewal_id",
    "reminder_id",
    "kind",
    "status",
    "sched_state",
    "sched_reason",
    "sched_at_ms",
    "deliver_by_ms",
    "channel",
];
/// Shards of the `due` index.
pub const DUE_SHARDS: u32 = 16;
/// The GSI name.
pub const DUE_INDEX: &str = "due";
const WATERMARK_KEY: &str = "scheduler:watermark";

/// The renewals table.
#[derive(Debug, Clone)]
pub struct DynamoRenewals {
    client: Client,
    table: String,
}

/// The item key of a renewal.
pub fn renewal_key(tenant: &TenantId, renewal: &RenewalId) -> String {
    format!("renewal:{tenant}:{renewal}")
}

impl DynamoRenewals {
    /// Renewals in `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    /// Writes a renewal's sender-facing attributes (tests and local runs; `punctual import`
    /// writes the full row).
    pub async fn put(
        &self,
        tenant: &TenantId,
        renewal: &RenewalId,
        status: &str,
        recipient_ref: &str,
        channel: &str,
    ) -> Result<(), RenewalsError> {
        let item: Item = [
            ("pk".to_owned(), s(renewal_key(tenant, renewal))),
            ("tenant_id".to_owned(), s(tenant.as_str())),
            ("renewal_id".to_owned(), s(renewal.as_str())),
            ("status".to_owned(), s(status)),
            ("recipient_ref".to_owned(), s(recipient_ref)),
            ("channel".to_owned(), s(channel)),
        ]
        .into();
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| RenewalsError::Unknown(Box::new(e)))?;
        Ok(())
    }
}

impl Renewals for DynamoRenewals {
    async fn lookup(&self, tenant: &TenantId, renewal: &RenewalId) -> Result<RenewalLookup, RenewalsError> {
        let item = get(&self.client, &self.table, &renewal_key(tenant, renewal)).await.map_err(|e| match e {
            DynamoError::TableNotFound(src) | DynamoError::Throttled(src) | DynamoError::Unknown(src) => {
                RenewalsError::Unknown(src)
            }
        })?;
        let Some(item) = item else {
            return Ok(RenewalLookup {
                view: RenewalView::Missing,
                recipient_ref: None,
                channel: None,
                version: None,
                data: None,
            });
        };
        let view = match get_s(&item, "status") {
            Some("active") => RenewalView::Active,
            Some("cancelled") => RenewalView::Cancelled,
            Some("paid") => RenewalView::Paid,
            other => {
                return Err(RenewalsError::Corrupt {
                    tenant_id: tenant.to_string(),
                    renewal_id: renewal.to_string(),
                    what: format!("status {other:?} is not active, cancelled or paid"),
                });
            }
        };
        // The version the row holds (an imported row has all three; a bare row has none).
        let version = (|| {
            Some(RenewalVersion {
                reminder_id: ReminderId::parse(get_s(&item, "reminder_id")?).ok()?,
                deliver_after: DateTime::<Utc>::from_timestamp_millis(get_i64(&item, "deliver_after_ms")?)?,
                deliver_by: DateTime::<Utc>::from_timestamp_millis(get_i64(&item, "deliver_by_ms")?)?,
            })
        })();
        Ok(RenewalLookup {
            view,
            recipient_ref: get_s(&item, "recipient_ref").map(str::to_owned),
            channel: get_s(&item, "channel").map(str::to_owned),
            version,
            data: get_s(&item, "data").map(punctual_core::renewal::TemplateData::from_stored),
        })
    }
}

/// The shard of a reminder in the `due` index: its id's first 32 bits, modulo the shard count.
pub fn shard_of(reminder: &ReminderId, shards: u32) -> u32 {
    let hex = reminder.as_str().get(4..12).unwrap_or("0");
    u32::from_str_radix(hex, 16).unwrap_or(0) % shards.max(1)
}

fn shard_key(shard: u32) -> String {
    format!("due#{shard:02}")
}

/// The `by_day_channel` partition of a reminder due at `deliver_after`.
pub fn day_shard(deliver_after: DateTime<Utc>, reminder: &ReminderId) -> String {
    day_key(deliver_after.date_naive(), shard_of(reminder, DUE_SHARDS))
}

fn day_key(day: chrono::NaiveDate, shard: u32) -> String {
    format!("{}#{shard:02}", day.format("%Y-%m-%d"))
}

fn ms(t: DateTime<Utc>) -> AttributeValue {
    n(t.timestamp_millis())
}

fn unknown(e: impl std::error::Error + Send + Sync + 'static) -> DueStoreError {
    DueStoreError::Unknown(Box::new(e))
}

fn from_dynamo(e: DynamoError) -> DueStoreError {
    match e {
        DynamoError::TableNotFound(src) | DynamoError::Throttled(src) | DynamoError::Unknown(src) => {
            DueStoreError::Unknown(src)
        }
    }
}

/// A send time as the row stores it: exactly what it means, `HH:MM:SS` when it has seconds
/// (`09:00:30` stored as `09:00` made a change of its seconds read as no change, and the
/// stored deliver_after stale), and `HH:MM` otherwise, the form every row was written in
/// before, so re-importing an unchanged file still finds every row unchanged.
fn send_time(t: chrono::NaiveTime) -> String {
    use chrono::Timelike;
    if t.second() == 0 { t.format("%H:%M").to_string() } else { t.format("%H:%M:%S").to_string() }
}

/// The full item for a validated row, pending release when active.
pub fn row_item(r: &Renewal, now: DateTime<Utc>) -> Item {
    let mut item: Item = [
        ("pk", s(renewal_key(&r.tenant_id, &r.renewal_id))),
        ("tenant_id", s(r.tenant_id.as_str())),
        ("renewal_id", s(r.renewal_id.as_str())),
        ("kind", s(r.kind.as_str())),
        ("recipient_ref", s(&r.recipient_ref)),
        ("channel", s(&r.channel)),
        ("zone", s(&r.zone)),
        ("local_due_date", s(r.local_due_date.format("%Y-%m-%d").to_string())),
        ("local_send_time", s(send_time(r.local_send_time))),
        ("window_minutes", n(r.window_minutes)),
        ("status", s(r.status.as_str())),
        ("reminder_id", s(r.reminder_id.as_str())),
        ("deliver_after_ms", ms(r.deliver_after)),
        ("deliver_by_ms", ms(r.deliver_by)),
        ("sched_state", s("scheduled")),
        ("updated_ms", ms(now)),
        ("day_shard", s(day_shard(r.deliver_after, &r.reminder_id))),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    if r.status == RenewalStatus::Active {
        item.insert("due_shard".into(), s(shard_key(shard_of(&r.reminder_id, DUE_SHARDS))));
        item.insert("due_after_ms".into(), ms(r.deliver_after));
    }
    if let Some(v) = r.version {
        item.insert(PRODUCER_VERSION.into(), n(v));
    }
    if let Some(d) = &r.data {
        item.insert("data".into(), s(d.expose()));
    }
    item
}

/// The attribute holding the producer's version of a renewal (docs/design.md#versions): a
/// command, or a file row with a `version` column, applies only over an older one.
pub const PRODUCER_VERSION: &str = "producer_version";

/// The producer's version `old` holds (absent: 0, a row imported without one).
fn stored_version(old: Option<&Item>) -> Option<u64> {
    old.and_then(|o| get_i64(o, PRODUCER_VERSION)).and_then(|v| u64::try_from(v).ok())
}

/// The condition every write of `r` adds, so a write decided against one version of the row
/// never lands over a newer one written meanwhile: a versioned row only over an older version,
/// an unversioned one only where no producer has set one.
fn version_guard(r: &Renewal) -> (&'static str, Option<AttributeValue>) {
    match r.version {
        Some(v) => ("(attribute_not_exists(producer_version) OR producer_version < :pv)", Some(n(v))),
        None => ("attribute_not_exists(producer_version)", None),
    }
}

/// The columns that define a row's content (a re-import with the same content changes nothing).
const CONTENT: &[&str] = &[
    "tenant_id",
    "renewal_id",
    "kind",
    "recipient_ref",
    "channel",
    "zone",
    "local_due_date",
    "local_send_time",
    "window_minutes",
    "status",
    "data",
];

/// The columns that make a row's version (see [`RenewalVersion`]): the reminder and the times
/// computed from the row (a released copy carries them; the scheduler's mark is conditioned on
/// them).
const VERSION: &[&str] = &["reminder_id", "deliver_after_ms", "deliver_by_ms"];

/// What an import read before deciding (see [`DynamoRenewals::read_for_import`]).
#[derive(Debug, Clone, Default)]
pub struct ImportRead {
    existing: HashMap<String, Item>,
    /// Nothing was read ([`ImportRead::unread`]): an absent item is a guess, confirmed by the
    /// conditional insert (refused with the item, which is then decided against) or, where the
    /// row would be refused as absent, by a read.
    unread: bool,
}

impl ImportRead {
    /// Writes without reading first: each row is tried as an insert (`attribute_not_exists`),
    /// and a refusal hands back the item to decide against. The command path's default (a
    /// campaign is mostly new renewals: one write and no read each, where the import's
    /// `BatchGetItem` costs a read per ten); a row the guess would refuse is read first.
    pub fn unread() -> Self {
        Self { existing: HashMap::new(), unread: true }
    }
}

/// The conditional write a row needs.
#[derive(Debug, Clone)]
enum RowWrite {
    /// A new renewal: only if still absent.
    Insert(Item),
    /// A pending renewal with new content: only if still `scheduled` and not updated since.
    /// Also a released renewal with a new version (rescheduled: another due date, other
    /// times): re-armed as pending, only if still in the released state read and not updated
    /// since.
    Replace { item: Item, seen_state: String, seen_updated: Option<AttributeValue> },
    /// A released renewal's status change (and its `by_day_channel` key, for a row imported before
    /// the index): only if still in the released state read, and still at the `deliver_after`
    /// the key was computed from (a key on another day than the instant it sorts would hide the
    /// row from both days' queries).
    /// Also only if not updated since it was read (found by review: without it, a write decided
    /// against one state of the row landed over another written meanwhile).
    Status {
        status: String,
        seen_state: String,
        day_shard: String,
        seen_after: Option<AttributeValue>,
        seen_updated: Option<AttributeValue>,
    },
    /// A newer producer version with nothing else changed: only the version is recorded, so an
    /// older command arriving after it stays stale. Only if the row was not updated since it
    /// was read (its content is what "unchanged" was judged against).
    Version { seen_updated: Option<AttributeValue> },
}

/// The condition that the item was not updated since it was read (`seen`: its `updated_ms`).
fn not_updated_since(seen: &Option<AttributeValue>) -> &'static str {
    match seen {
        Some(_) => "updated_ms = :seen_updated",
        None => "attribute_not_exists(updated_ms)",
    }
}

/// The status write of a released row `old` whose version `r` shares (see [`RowWrite::Status`]).
fn status_write(r: &Renewal, seen_state: &str, old: &Item) -> RowWrite {
    RowWrite::Status {
        status: r.status.as_str().to_owned(),
        seen_state: seen_state.to_owned(),
        day_shard: day_shard(r.deliver_after, &r.reminder_id),
        seen_after: old.get("deliver_after_ms").cloned(),
        seen_updated: old.get("updated_ms").cloned(),
    }
}

/// Decides one row against the item `old` (as read, or as it is now after a refused write).
fn plan(r: &Renewal, old: Option<&Item>, now: DateTime<Utc>) -> (RowOutcome, Option<RowWrite>) {
    // The producer's order first (docs/design.md#versions): an equal or older version is
    // stale whatever it says (a replay writes nothing; an older put never revives a newer
    // cancel), and a file row without a version does not overwrite a producer's renewal.
    match (r.version, stored_version(old)) {
        (Some(v), Some(stored)) if v <= stored => return (RowOutcome::Stale { stored }, None),
        (None, Some(stored)) => {
            return (
                RowOutcome::Conflict(format!(
                    "renewal is kept by its producer at version {stored}: give the row a version column above {stored} to change it from a file"
                )),
                None,
            );
        }
        _ => {}
    }
    let (outcome, write) = plan_row(r, old, now);
    if r.version.is_some() && old.is_some() && outcome == RowOutcome::Unchanged && write.is_none() {
        let seen_updated = old.and_then(|o| o.get("updated_ms").cloned());
        return (RowOutcome::Unchanged, Some(RowWrite::Version { seen_updated }));
    }
    // A window already over when the row arrives: a new or moved renewal whose deliver_by
    // has passed would only be expired at release and burn the SLO for a reminder nobody could
    // send. It is refused, with its times; a re-import of the same row, a status change, or a
    // cancelled or paid row (never sent, kept as a record) is still accepted.
    let arms = r.status == RenewalStatus::Active
        && matches!(
            outcome,
            RowOutcome::Inserted | RowOutcome::Updated | RowOutcome::Rescheduled | RowOutcome::Reactivated
        )
        && matches!(write, Some(RowWrite::Insert(_) | RowWrite::Replace { .. }));
    if arms && r.deliver_by <= now {
        return (
            RowOutcome::Conflict(format!(
                "its window is already over: deliver_by {} passed before the import ({}); nothing could be sent, so it is not imported",
                punctual_core::contract::format_instant(r.deliver_by),
                punctual_core::contract::format_instant(now)
            )),
            None,
        );
    }
    (outcome, write)
}

fn plan_row(r: &Renewal, old: Option<&Item>, now: DateTime<Utc>) -> (RowOutcome, Option<RowWrite>) {
    let item = row_item(r, now);
    let Some(old) = old else { return (RowOutcome::Inserted, Some(RowWrite::Insert(item))) };
    let state = get_s(old, "sched_state");
    // Unchanged means the same columns AND the same computed instants: the same row computed
    // again after a time-zone database update (a zone's rules changed) has other instants, and
    // keeping the stored ones would release it at the old time. It is rewritten (pending) or
    // re-armed with its new version (released) below, like any other move.
    let same_version = VERSION.iter().all(|c| old.get(*c) == item.get(*c));
    if same_version && CONTENT.iter().all(|c| old.get(*c) == item.get(*c)) {
        if get_s(old, "day_shard") == Some(day_shard(r.deliver_after, &r.reminder_id).as_str()) {
            return (RowOutcome::Unchanged, None);
        }
        // Imported before the `by_day` index: the same content, written again with its key, so
        // reconcile, status and forecast see it (re-importing the file backfills the index).
        return match state {
            Some("scheduled") => {
                let seen_updated = old.get("updated_ms").cloned();
                (RowOutcome::Updated, Some(RowWrite::Replace { item, seen_state: "scheduled".into(), seen_updated }))
            }
            Some(seen) => (RowOutcome::Updated, Some(status_write(r, seen, old))),
            None => (RowOutcome::Unchanged, None),
        };
    }
    if state == Some("scheduled") {
        let seen_updated = old.get("updated_ms").cloned();
        return (RowOutcome::Updated, Some(RowWrite::Replace { item, seen_state: "scheduled".into(), seen_updated }));
    }
    // Released (or expired at release) and now another version: the customer moved the
    // renewal (docs/design.md#renewals-and-rescheduling). The row is re-armed with the new version, pending release at its new
    // time; the copy released from the old version is stale, and its sender drops it
    // (`rescheduled`, no attempt spent) when it reads this row. A copy already delivered stays
    // delivered: for the same reminder (same due date, other times) the new copy is then a
    // duplicate; for a new due date it is a new reminder.
    let version_changed = VERSION.iter().any(|c| old.get(*c) != item.get(*c));
    if let Some(seen) = state
        && version_changed
    {
        let seen_updated = old.get("updated_ms").cloned();
        return (RowOutcome::Rescheduled, Some(RowWrite::Replace { item, seen_state: seen.to_owned(), seen_updated }));
    }
    // The status and the data may change after release (both are read at the call).
    let only_status = CONTENT.iter().filter(|c| !matches!(**c, "status" | "data")).all(|c| old.get(*c) == item.get(*c));
    // Active again (cancelled or paid after release, then not: a payment that bounced, a
    // cancellation undone) while its window is open: its copy may have been cancelled at send
    // meanwhile, and nothing else would release it again. The row is re-armed as it is, pending
    // release at the next tick; the ledger then decides, as for every copy: a reminder already
    // delivered stays delivered (the new copy is a duplicate), one cancelled at send is claimed
    // by the new copy, released after the cancellation, and sent once
    // (`punctual_core::ports::revives_cancelled`). Re-arming rather than giving it a new
    // reminder id keeps that decision with the ledger: a new id would send a reminder already
    // delivered before the cancellation a second time, and the import cannot read the ledger.
    let reactivated = r.status == RenewalStatus::Active && get_s(old, "status") != Some("active");
    if let Some(seen) = state
        && only_status
        && reactivated
        && r.deliver_by > now
    {
        let seen_updated = old.get("updated_ms").cloned();
        return (RowOutcome::Reactivated, Some(RowWrite::Replace { item, seen_state: seen.to_owned(), seen_updated }));
    }
    match state {
        // The same version (a changed one was re-armed above): the key stays on its day.
        Some(seen) if only_status => (RowOutcome::Updated, Some(status_write(r, seen, old))),
        _ => (
            RowOutcome::Conflict(format!(
                "renewal already {}; only its status or its schedule (due date, send time, zone, window) may change now",
                state.unwrap_or("released")
            )),
            None,
        ),
    }
}

/// What importing one row came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowOutcome {
    /// New renewal written.
    Inserted,
    /// Existing renewal not yet released, rewritten with new content.
    Updated,
    /// Released renewal with a new version (due date or times): re-armed, pending release at
    /// its new time; the copy released from the old version is dropped by its sender.
    Rescheduled,
    /// Released renewal active again (it was cancelled or paid) before its deadline: re-armed,
    /// released again at the next tick; the ledger sends the reminder if it is still owed.
    Reactivated,
    /// Already present with the same content: nothing written (re-import is idempotent), or
    /// for a newer producer version only the version.
    Unchanged,
    /// The producer's version is not newer than the stored one (`stored`): nothing written.
    /// A replay, or a command overtaken by a newer one.
    Stale {
        /// The version the row holds.
        stored: u64,
    },
    /// Already released; only a status change may follow it. The text says why not.
    Conflict(String),
}

/// Creates the renewals table with its sparse `due` GSI and its `by_day_channel` GSI (tests and `punctual local`; on AWS
/// the SAM template owns it).
pub async fn create_table(client: &Client, table: &str) -> Result<(), DynamoError> {
    let attr = |name: &str, t: ScalarAttributeType| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(t)
            .build()
            .map_err(|e| DynamoError::Unknown(Box::new(e)))
    };
    let key = |name: &str, t: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(t)
            .build()
            .map_err(|e| DynamoError::Unknown(Box::new(e)))
    };
    let gsi = GlobalSecondaryIndex::builder()
        .index_name(DUE_INDEX)
        .key_schema(key("due_shard", KeyType::Hash)?)
        .key_schema(key("due_after_ms", KeyType::Range)?)
        .projection(Projection::builder().projection_type(ProjectionType::All).build())
        .build()
        .map_err(|e| DynamoError::Unknown(Box::new(e)))?;
    let mut day_projection = Projection::builder().projection_type(ProjectionType::Include);
    for a in DAY_PROJECTION {
        day_projection = day_projection.non_key_attributes(a);
    }
    let by_day = GlobalSecondaryIndex::builder()
        .index_name(DAY_INDEX)
        .key_schema(key("day_shard", KeyType::Hash)?)
        .key_schema(key("deliver_after_ms", KeyType::Range)?)
        .projection(day_projection.build())
        .build()
        .map_err(|e| DynamoError::Unknown(Box::new(e)))?;
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(attr("pk", ScalarAttributeType::S)?)
        .attribute_definitions(attr("due_shard", ScalarAttributeType::S)?)
        .attribute_definitions(attr("due_after_ms", ScalarAttributeType::N)?)
        .attribute_definitions(attr("day_shard", ScalarAttributeType::S)?)
        .attribute_definitions(attr("deliver_after_ms", ScalarAttributeType::N)?)
        .key_schema(key("pk", KeyType::Hash)?)
        .global_secondary_indexes(gsi)
        .global_secondary_indexes(by_day)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(|e| DynamoError::Unknown(Box::new(e)))?;
    crate::dynamodb::wait_active(client, table).await
}

impl DynamoRenewals {
    /// Imports validated rows: reads the existing items (BatchGetItem, 100 keys), decides per
    /// row, writes new and changed ones with one conditional write each (16 in flight; see
    /// [`DynamoRenewals::write_import`]). Returns one outcome per row, in order.
    pub async fn import(&self, rows: &[Renewal], now: DateTime<Utc>) -> Result<Vec<RowOutcome>, RenewalsError> {
        let read = self.read_for_import(rows).await?;
        self.write_import(rows, read, now).await
    }

    /// Phase one of [`DynamoRenewals::import`]: reads the items `rows` would replace.
    pub async fn read_for_import(&self, rows: &[Renewal]) -> Result<ImportRead, RenewalsError> {
        let err = |e: Box<dyn std::error::Error + Send + Sync>| RenewalsError::Unknown(e);
        let mut existing: HashMap<String, Item> = HashMap::new();
        for chunk in rows.chunks(100) {
            let mut pks: Vec<String> = chunk.iter().map(|r| renewal_key(&r.tenant_id, &r.renewal_id)).collect();
            pks.sort();
            pks.dedup();
            // A key DynamoDB still leaves unread after 8 attempts is planned as absent: its
            // write is conditional on absence, so a refusal re-plans it against the item as it
            // is (`write_row`).
            let read = crate::dynamodb::get_batch(&self.client, &self.table, &pks, 8, Duration::from_millis(50))
                .await
                .map_err(|e| err(Box::new(e)))?;
            for item in read.items {
                if let Some(pk) = get_s(&item, "pk") {
                    existing.insert(pk.to_owned(), item);
                }
            }
        }
        Ok(ImportRead { existing, unread: false })
    }

    /// Phase two of [`DynamoRenewals::import`]: decides each row against what `read` found
    /// and writes new and changed ones, each with ONE conditional write that holds only while
    /// the item is as read (absent; still `scheduled` and not updated since; or released in the
    /// same state). A tick that released the row meanwhile fails the condition: the row is
    /// decided again against the item as it is now (`ALL_OLD`), so an import never re-arms a
    /// released renewal (the unconditional `BatchWriteItem` it replaces did: the row went
    /// back to `scheduled` and into the due index, and was released twice). Several rows with the same key are written
    /// one after the other, in version order (unversioned: input order).
    pub async fn write_import(
        &self,
        rows: &[Renewal],
        read: ImportRead,
        now: DateTime<Utc>,
    ) -> Result<Vec<RowOutcome>, RenewalsError> {
        /// Conditional writes in flight at once.
        const PARALLEL: usize = 16;
        // Rows of one key are written one after the other, in the producer's version order
        // (unversioned ones in input order), each decided against what the one before left:
        // commands of one batch arrive in any order, and an older one judged stale against a
        // newer one that is then refused (found by review: a cancel before a refused change
        // was lost) must have been written first. Keys run side by side.
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            let key = renewal_key(&r.tenant_id, &r.renewal_id);
            match at.get(&key) {
                Some(&g) => groups[g].1.push(i),
                None => {
                    at.insert(key.clone(), groups.len());
                    groups.push((key, vec![i]));
                }
            }
        }
        for (_, g) in &mut groups {
            g.sort_by_key(|&i| (rows[i].version, i));
        }
        let mut outcomes: Vec<Option<RowOutcome>> = vec![None; rows.len()];
        let mut jobs = groups.into_iter().map(|(key, g)| {
            let old = read.existing.get(&key).cloned();
            let rows: Vec<(usize, Renewal)> = g.into_iter().map(|i| (i, rows[i].clone())).collect();
            (rows, old)
        });
        let mut running = tokio::task::JoinSet::new();
        loop {
            while running.len() < PARALLEL {
                let Some((group, old)) = jobs.next() else { break };
                let this = self.clone();
                let unread = read.unread;
                running.spawn(async move {
                    let mut done = Vec::with_capacity(group.len());
                    let mut old = Some(old);
                    for (i, r) in group {
                        // The first row against what was read; each later one against the item
                        // as the write before left it (refused inserts hand it back).
                        let (seen, unread) = match old.take() {
                            Some(o) => (o, unread),
                            None => (None, true),
                        };
                        let outcome = this.write_row(&r, seen, unread, now).await;
                        let failed = outcome.is_err();
                        done.push((i, outcome));
                        if failed {
                            break;
                        }
                    }
                    done
                });
            }
            let Some(done) = running.join_next().await else { break };
            for (i, outcome) in done.map_err(|e| RenewalsError::Unknown(Box::new(e)))? {
                outcomes[i] = Some(outcome?);
            }
        }
        Ok(outcomes.into_iter().map(|o| o.unwrap_or(RowOutcome::Unchanged)).collect())
    }

    /// Writes one row: decides against `old`, writes on condition that the item is still
    /// `old`, and decides again against the current item when it is not.
    async fn write_row(
        &self,
        r: &Renewal,
        mut old: Option<Item>,
        mut unread: bool,
        now: DateTime<Utc>,
    ) -> Result<RowOutcome, RenewalsError> {
        let unknown = |e: DynamoError| match e {
            DynamoError::TableNotFound(src) | DynamoError::Throttled(src) | DynamoError::Unknown(src) => {
                RenewalsError::Unknown(src)
            }
        };
        for _ in 0..4 {
            let (outcome, write) = plan(r, old.as_ref(), now);
            // A refusal of a row guessed absent (a window already over) may be a replay of one
            // that is there (stale): read it, and decide again.
            if unread && old.is_none() && matches!(outcome, RowOutcome::Conflict(_)) {
                unread = false;
                old =
                    get(&self.client, &self.table, &renewal_key(&r.tenant_id, &r.renewal_id)).await.map_err(unknown)?;
                continue;
            }
            let Some(write) = write else { return Ok(outcome) };
            let current = match write {
                RowWrite::Insert(item) => {
                    match put_if(&self.client, &self.table, item, "attribute_not_exists(pk)", None, None)
                        .await
                        .map_err(unknown)?
                    {
                        ConditionalPut::Written => return Ok(outcome),
                        ConditionalPut::ConditionFailed { existing } => existing,
                    }
                }
                RowWrite::Replace { item, seen_state, seen_updated } => {
                    let mut values: Item = [(":state".to_owned(), s(seen_state))].into();
                    let (guard, pv) = version_guard(r);
                    if let Some(pv) = pv {
                        values.insert(":pv".into(), pv);
                    }
                    let condition =
                        format!("sched_state = :state AND {} AND {guard}", not_updated_since(&seen_updated));
                    if let Some(seen) = seen_updated {
                        values.insert(":seen_updated".into(), seen);
                    }
                    match put_if(&self.client, &self.table, item, &condition, None, Some(values))
                        .await
                        .map_err(unknown)?
                    {
                        ConditionalPut::Written => return Ok(outcome),
                        ConditionalPut::ConditionFailed { existing } => existing,
                    }
                }
                RowWrite::Status { status, seen_state, day_shard, seen_after, seen_updated } => {
                    // The status, the data (read at the call, so it may change after release)
                    // and the producer's version.
                    let mut set = "SET #status = :status, updated_ms = :now, day_shard = :day".to_owned();
                    let mut remove = Vec::new();
                    match &r.data {
                        Some(_) => set.push_str(", #data = :data"),
                        None => remove.push("#data"),
                    }
                    match r.version {
                        Some(_) => set.push_str(", producer_version = :pv"),
                        None => remove.push("producer_version"),
                    }
                    let expression =
                        if remove.is_empty() { set } else { format!("{set} REMOVE {}", remove.join(", ")) };
                    let (guard, pv) = version_guard(r);
                    let mut update = self
                        .client
                        .update_item()
                        .table_name(&self.table)
                        .key("pk", s(renewal_key(&r.tenant_id, &r.renewal_id)))
                        .update_expression(expression)
                        .expression_attribute_names("#data", "data")
                        .set_expression_attribute_values(pv.map(|v| [(":pv".to_owned(), v)].into()))
                        .expression_attribute_values(":day", s(day_shard));
                    if let Some(d) = &r.data {
                        update = update.expression_attribute_values(":data", s(d.expose()));
                    }
                    let since = not_updated_since(&seen_updated);
                    if let Some(v) = seen_updated {
                        update = update.expression_attribute_values(":seen_updated", v);
                    }
                    update = match seen_after {
                        Some(after) => update
                            .condition_expression(format!(
                                "sched_state = :seen AND deliver_after_ms = :after AND {since} AND {guard}"
                            ))
                            .expression_attribute_values(":after", after),
                        None => update.condition_expression(format!(
                            "sched_state = :seen AND attribute_not_exists(deliver_after_ms) AND {since} AND {guard}"
                        )),
                    };
                    let update = update
                        .expression_attribute_names("#status", "status")
                        .expression_attribute_values(":status", s(status))
                        .expression_attribute_values(":now", ms(now))
                        .expression_attribute_values(":seen", s(seen_state));
                    match update_if(&self.client, update).await.map_err(unknown)? {
                        ConditionalUpdate::Written(_) => return Ok(outcome),
                        ConditionalUpdate::ConditionFailed(existing) => existing,
                    }
                }
                RowWrite::Version { seen_updated } => {
                    let (guard, pv) = version_guard(r);
                    let since = not_updated_since(&seen_updated);
                    let mut update = self
                        .client
                        .update_item()
                        .table_name(&self.table)
                        .key("pk", s(renewal_key(&r.tenant_id, &r.renewal_id)))
                        .update_expression("SET producer_version = :pv, updated_ms = :now")
                        .condition_expression(format!("attribute_exists(pk) AND {since} AND {guard}"))
                        .set_expression_attribute_values(pv.map(|v| [(":pv".to_owned(), v)].into()))
                        .expression_attribute_values(":now", ms(now));
                    if let Some(v) = seen_updated {
                        update = update.expression_attribute_values(":seen_updated", v);
                    }
                    match update_if(&self.client, update).await.map_err(unknown)? {
                        ConditionalUpdate::Written(_) => return Ok(outcome),
                        ConditionalUpdate::ConditionFailed(existing) => existing,
                    }
                }
            };
            old = current;
        }
        Ok(RowOutcome::Conflict("the renewal kept changing during the import; import it again".into()))
    }

    async fn mark(
        &self,
        p: &Pending,
        at: DateTime<Utc>,
        state: &str,
        reason: Option<&str>,
    ) -> Result<Marked, DueStoreError> {
        // Only the version the tick read (a versioned mark): a row re-imported meanwhile with another reminder
        // or other times is left pending, so the next tick releases the current version; the
        // copy this tick may already have sent is stale, and its sender drops it.
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(renewal_key(&p.tenant_id, &p.renewal_id)))
            .condition_expression(
                "sched_state = :scheduled AND reminder_id = :rid AND deliver_after_ms = :da AND deliver_by_ms = :db",
            )
            .expression_attribute_values(":scheduled", s("scheduled"))
            .expression_attribute_values(":rid", s(p.reminder_id.as_str()))
            .expression_attribute_values(":da", ms(p.deliver_after))
            .expression_attribute_values(":db", ms(p.deliver_by))
            .expression_attribute_values(":state", s(state))
            .expression_attribute_values(":at", ms(at));
        let expr = match reason {
            Some(r) => {
                update = update.expression_attribute_values(":reason", s(r));
                "SET sched_state = :state, sched_at_ms = :at, sched_reason = :reason REMOVE due_shard, due_after_ms"
            }
            None => "SET sched_state = :state, sched_at_ms = :at REMOVE due_shard, due_after_ms",
        };
        match update_if(&self.client, update.update_expression(expr)).await.map_err(from_dynamo)? {
            ConditionalUpdate::Written(_) => Ok(Marked::Done),
            ConditionalUpdate::ConditionFailed(_) => Ok(Marked::NotPending),
        }
    }
}

fn pending_of(item: &Item) -> Option<Pending> {
    Some(Pending {
        tenant_id: TenantId::parse(get_s(item, "tenant_id")?).ok()?,
        renewal_id: RenewalId::parse(get_s(item, "renewal_id")?).ok()?,
        kind: ReminderKind::parse(get_s(item, "kind")?).ok()?,
        reminder_id: ReminderId::parse(get_s(item, "reminder_id")?).ok()?,
        deliver_after: DateTime::<Utc>::from_timestamp_millis(get_i64(item, "deliver_after_ms")?)?,
        deliver_by: DateTime::<Utc>::from_timestamp_millis(get_i64(item, "deliver_by_ms")?)?,
        channel: get_s(item, "channel").map(str::to_owned),
    })
}

impl DynamoRenewals {
    /// The oldest `deliver_after` among renewals due by `now` and not yet released (the sparse
    /// `due` index): one `Query` with `Limit 1` per shard, 16 in all, whatever the table holds.
    pub async fn oldest_unreleased(&self, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, DueStoreError> {
        let mut oldest: Option<DateTime<Utc>> = None;
        for shard in 0..DUE_SHARDS {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(DUE_INDEX)
                .key_condition_expression("due_shard = :shard AND due_after_ms <= :now")
                .expression_attribute_values(":shard", s(shard_key(shard)))
                .expression_attribute_values(":now", ms(now))
                .projection_expression("due_after_ms")
                .limit(1)
                .send()
                .await
                .map_err(unknown)?;
            let first = out.items.unwrap_or_default().first().and_then(|i| get_i64(i, "due_after_ms"));
            if let Some(at) = first.and_then(DateTime::<Utc>::from_timestamp_millis) {
                oldest = Some(oldest.map_or(at, |o| o.min(at)));
            }
        }
        Ok(oldest)
    }
}

impl DueStore for DynamoRenewals {
    type Cursor = Item;

    fn shards(&self) -> u32 {
        DUE_SHARDS
    }

    async fn due_page(
        &self,
        shard: u32,
        horizon: DateTime<Utc>,
        limit: usize,
        cursor: Option<Item>,
    ) -> Result<Page<Item>, DueStoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(DUE_INDEX)
            .key_condition_expression("due_shard = :shard AND due_after_ms <= :horizon")
            .expression_attribute_values(":shard", s(shard_key(shard)))
            .expression_attribute_values(":horizon", ms(horizon))
            .limit(i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000))
            .set_exclusive_start_key(cursor)
            .send()
            .await
            .map_err(unknown)?;
        let mut items = Vec::new();
        for item in out.items.unwrap_or_default() {
            // A row that no longer parses cannot be released; it stays in the index, visible
            // to `punctual status`, rather than stopping the whole tick.
            match pending_of(&item) {
                Some(p) => items.push(p),
                None => tracing::warn!(pk = get_s(&item, "pk"), "unreadable pending renewal skipped"),
            }
        }
        Ok(Page { items, next: out.last_evaluated_key.filter(|k| !k.is_empty()) })
    }

    async fn mark_enqueued(&self, p: &Pending, at: DateTime<Utc>) -> Result<Marked, DueStoreError> {
        self.mark(p, at, "enqueued", None).await
    }

    async fn mark_expired(&self, p: &Pending, at: DateTime<Utc>) -> Result<Marked, DueStoreError> {
        self.mark(p, at, "expired", Some("missed_schedule_window")).await
    }

    async fn watermark(&self) -> Result<Option<DateTime<Utc>>, DueStoreError> {
        let item = get(&self.client, &self.table, WATERMARK_KEY).await.map_err(from_dynamo)?;
        Ok(item.and_then(|i| get_i64(&i, "watermark_ms")).and_then(DateTime::<Utc>::from_timestamp_millis))
    }

    async fn advance_watermark(&self, to: DateTime<Utc>) -> Result<(), DueStoreError> {
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(WATERMARK_KEY))
            .update_expression("SET watermark_ms = :to")
            .condition_expression("attribute_not_exists(watermark_ms) OR watermark_ms < :to")
            .expression_attribute_values(":to", ms(to));
        // A lost condition means another tick already went further: fine.
        update_if(&self.client, update).await.map_err(from_dynamo)?;
        Ok(())
    }
}

/// A renewal of the `by_day_channel` index as reconcile reads it, or why it cannot be read.
fn due_row(item: &Item) -> Result<DueRow, String> {
    let text = |k: &str| get_s(item, k).ok_or_else(|| format!("{k} missing"));
    let at = |k: &str| {
        get_i64(item, k).and_then(DateTime::<Utc>::from_timestamp_millis).ok_or_else(|| format!("{k} missing"))
    };
    let status = match text("status")? {
        "active" => RenewalStatus::Active,
        "cancelled" => RenewalStatus::Cancelled,
        "paid" => RenewalStatus::Paid,
        other => return Err(format!("status {other:?}")),
    };
    let release = match get_s(item, "sched_state") {
        Some("enqueued") => ReleaseState::Enqueued(at("sched_at_ms").ok()),
        Some("expired") => ReleaseState::ExpiredAtRelease,
        _ => ReleaseState::Scheduled,
    };
    Ok(DueRow {
        tenant_id: text("tenant_id")?.to_owned(),
        renewal_id: text("renewal_id")?.to_owned(),
        reminder_id: ReminderId::parse(text("reminder_id")?).map_err(|e| e.to_string())?,
        status,
        release,
        deliver_after: at("deliver_after_ms")?,
        deliver_by: at("deliver_by_ms")?,
        channel: get_s(item, "channel").map(str::to_owned),
    })
}

/// What [`DynamoRenewals::population`] read.
#[derive(Debug, Clone, Default)]
pub struct Population {
    /// The renewals of the window.
    pub rows: Vec<DueRow>,
    /// Index items that did not parse (key and why): reported, never dropped silently.
    pub unreadable: Vec<(String, String)>,
    /// Query pages read.
    pub pages: u64,
}

impl DynamoRenewals {
    /// Reads the `by_day_channel` partition `day`#`shard` for `deliver_after` in `[from, to)`, page by
    /// page, keeping only the items `filter` (an attribute and its value) names, handing each
    /// item to `each` until it answers false. Returns the pages read.
    async fn day_pages(
        &self,
        (day, shard): (chrono::NaiveDate, u32),
        (from, to): (DateTime<Utc>, DateTime<Utc>),
        filter: &[(&str, &str)],
        mut each: impl FnMut(&Item) -> bool,
    ) -> Result<u64, DueStoreError> {
        let mut pages = 0;
        let mut start: Option<Item> = None;
        loop {
            let mut q = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(DAY_INDEX)
                .key_condition_expression("day_shard = :day AND deliver_after_ms BETWEEN :from AND :last")
                .expression_attribute_values(":day", s(day_key(day, shard)))
                .expression_attribute_values(":from", ms(from))
                .expression_attribute_values(":last", n(to.timestamp_millis() - 1))
                .set_exclusive_start_key(start.take());
            if !filter.is_empty() {
                let mut expression = Vec::new();
                for (i, (name, value)) in filter.iter().enumerate() {
                    expression.push(format!("#f{i} = :f{i}"));
                    q = q
                        .expression_attribute_names(format!("#f{i}"), *name)
                        .expression_attribute_values(format!(":f{i}"), s(*value));
                }
                q = q.filter_expression(expression.join(" AND "));
            }
            let page = q.send().await.map_err(unknown)?;
            pages += 1;
            for item in page.items.unwrap_or_default() {
                if !each(&item) {
                    return Ok(pages);
                }
            }
            match page.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(k) => start = Some(k),
                None => return Ok(pages),
            }
        }
    }

    /// Every renewal whose `deliver_after` is in `[from, to)` (of `tenant` only, of `channel`
    /// only, when given; a filter on the same queries: it reads the whole day's items):
    /// 16 queries per UTC day the window touches on the `by_day_channel` index, paged to the end.
    /// `progress` is told the rows read so far after each page.
    pub async fn population(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        tenant: Option<&str>,
        channel: Option<&str>,
        mut progress: impl FnMut(usize),
    ) -> Result<Population, DueStoreError> {
        let filter: Vec<(&str, &str)> =
            [tenant.map(|t| ("tenant_id", t)), channel.map(|c| ("channel", c))].into_iter().flatten().collect();
        let mut out = Population::default();
        if to <= from {
            return Ok(out);
        }
        let last = (to - chrono::TimeDelta::milliseconds(1)).date_naive();
        let mut day = from.date_naive();
        while day <= last {
            for shard in 0..DUE_SHARDS {
                let Population { rows, unreadable, .. } = &mut out;
                out.pages += self
                    .day_pages((day, shard), (from, to), &filter, |item| {
                        match due_row(item) {
                            Ok(r) => rows.push(r),
                            Err(why) => unreadable.push((get_s(item, "pk").unwrap_or("?").to_owned(), why)),
                        }
                        true
                    })
                    .await?;
                progress(out.rows.len());
            }
            let Some(next) = day.succ_opt() else { break };
            day = next;
        }
        Ok(out)
    }

    /// The renewal whose current reminder is `reminder`, looked for on the `by_day_channel` index: one
    /// query of the reminder's own shard per day in `days`, in that order, filtered on
    /// `reminder_id` and paged (it reads that shard's renewals of the day, a sixteenth of the
    /// day, and returns the one), until found. `Ok(None)` when no day holds it; the pages read
    /// either way. An unreadable item of that reminder is an error.
    pub async fn find_reminder(
        &self,
        reminder: &ReminderId,
        days: impl IntoIterator<Item = chrono::NaiveDate>,
    ) -> Result<(Option<DueRow>, u64), DueStoreError> {
        let shard = shard_of(reminder, DUE_SHARDS);
        let mut pages = 0;
        for day in days {
            let Some(from) = day.and_hms_opt(0, 0, 0).map(|t| t.and_utc()) else { continue };
            let mut found = None;
            pages += self
                .day_pages(
                    (day, shard),
                    (from, from + chrono::TimeDelta::days(1)),
                    &[("reminder_id", reminder.as_str())],
                    |item| {
                        found = Some(due_row(item));
                        false
                    },
                )
                .await?;
            match found {
                Some(Ok(row)) => return Ok((Some(row), pages)),
                Some(Err(why)) => {
                    return Err(DueStoreError::Unknown(
                        format!("the renewal of {reminder} is unreadable: {why}").into(),
                    ));
                }
                None => {}
            }
        }
        Ok((None, pages))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests state their preconditions by unwrapping
    use super::*;
    use punctual_core::renewal::RenewalInput;

    fn input(status: &str) -> RenewalInput {
        RenewalInput {
            tenant_id: "acme".into(),
            renewal_id: "ren-1".into(),
            recipient_ref: "cust-1".into(),
            channel: "email".into(),
            zone: "Europe/London".into(),
            local_due_date: "2026-12-02".into(),
            local_send_time: "09:00".into(),
            window_minutes: "240".into(),
            status: status.into(),
            ..RenewalInput::default()
        }
    }

    fn renewal(status: &str) -> Renewal {
        Renewal::validate(&input(status)).unwrap()
    }

    fn renewal_at(time: &str) -> Renewal {
        Renewal::validate(&RenewalInput { local_send_time: time.into(), ..input("active") }).unwrap()
    }

    /// What the table holds after `write` lands on `old` (the conditions assumed to hold).
    fn apply(old: &Item, write: &RowWrite) -> Item {
        match write {
            RowWrite::Insert(item) | RowWrite::Replace { item, .. } => item.clone(),
            RowWrite::Status { status, day_shard, .. } => {
                let mut item = old.clone();
                item.insert("status".into(), s(status.as_str()));
                item.insert("day_shard".into(), s(day_shard.as_str()));
                item
            }
            RowWrite::Version { .. } => old.clone(),
        }
    }

    /// The `by_day_channel` key of `item` agrees with the instant it is sorted by: the UTC date of
    /// `deliver_after_ms` (else a query of either day misses the row).
    fn day_key_agrees(item: &Item) -> bool {
        let after = get_i64(item, "deliver_after_ms").and_then(DateTime::<Utc>::from_timestamp_millis).unwrap();
        get_s(item, "day_shard").is_some_and(|d| d.starts_with(&after.format("%Y-%m-%d#").to_string()))
    }

    #[test]
    fn a_send_time_with_seconds_is_stored_exactly_and_a_change_of_its_seconds_is_seen() {
        let r = renewal_at("09:00:30");
        let now = r.deliver_after - chrono::TimeDelta::hours(12);
        let item = row_item(&r, now);
        assert_eq!(get_s(&item, "local_send_time"), Some("09:00:30"), "the seconds were dropped");
        // A minute-aligned time keeps the form rows were always stored in.
        assert_eq!(get_s(&row_item(&renewal("active"), now), "local_send_time"), Some("09:00"));
        // 09:00:30 → 09:00:45: another deliver_after, so the row is rewritten.
        let later = renewal_at("09:00:45");
        let (outcome, write) = plan(&later, Some(&item), now);
        assert_eq!(outcome, RowOutcome::Updated, "{write:?}");
        let stored = apply(&item, &write.unwrap());
        assert_eq!(get_i64(&stored, "deliver_after_ms"), Some(later.deliver_after.timestamp_millis()));
        assert_eq!(plan(&later, Some(&stored), now).0, RowOutcome::Unchanged);
    }

    /// `r`'s item as an older time-zone database computed it: the same columns, its instants
    /// an hour later (a zone whose rules changed), its `by_day_channel` key on that instant's day.
    fn computed_an_hour_later(r: &Renewal, now: DateTime<Utc>) -> (Item, DateTime<Utc>) {
        let mut old = row_item(r, now);
        let stale = r.deliver_after + chrono::TimeDelta::hours(1);
        old.insert("deliver_after_ms".into(), ms(stale));
        old.insert("deliver_by_ms".into(), ms(stale + chrono::TimeDelta::minutes(240)));
        old.insert("due_after_ms".into(), ms(stale));
        old.insert("day_shard".into(), s(day_shard(stale, &r.reminder_id)));
        (old, stale)
    }

    #[test]
    fn a_row_whose_computed_instants_changed_is_rewritten_not_unchanged() {
        let r = renewal("active");
        let now = r.deliver_after - chrono::TimeDelta::hours(12);
        let (mut old, _) = computed_an_hour_later(&r, now);
        // Pending: rewritten with the instants computed today.
        let (outcome, write) = plan(&r, Some(&old), now);
        assert_eq!(outcome, RowOutcome::Updated, "stale instants kept: {write:?}");
        let stored = apply(&old, &write.unwrap());
        assert_eq!(get_i64(&stored, "deliver_after_ms"), Some(r.deliver_after.timestamp_millis()));
        // Released: another version of the same reminder, re-armed at its corrected time.
        old.insert("sched_state".into(), s("enqueued"));
        let (outcome, write) = plan(&r, Some(&old), now);
        assert_eq!(outcome, RowOutcome::Rescheduled, "stale instants kept: {write:?}");
        let stored = apply(&old, &write.unwrap());
        assert_eq!(get_i64(&stored, "deliver_after_ms"), Some(r.deliver_after.timestamp_millis()));
        assert_eq!(get_s(&stored, "sched_state"), Some("scheduled"));
    }

    #[test]
    fn a_reimport_keeps_the_day_index_key_on_the_day_of_the_stored_instant() {
        // 23:30 in London in December is 23:30 UTC; an older computation put it at 00:30 the
        // next UTC day, with the `by_day_channel` key of that day. Released, then imported again.
        let r = renewal_at("23:30");
        let now = r.deliver_after - chrono::TimeDelta::hours(12);
        let (mut old, stale) = computed_an_hour_later(&r, now);
        assert_ne!(stale.date_naive(), r.deliver_after.date_naive());
        old.insert("sched_state".into(), s("enqueued"));
        old.remove("due_shard");
        old.remove("due_after_ms");
        assert!(day_key_agrees(&old));
        let (_, write) = plan(&r, Some(&old), now);
        let stored = write.map_or_else(|| old.clone(), |w| apply(&old, &w));
        assert!(day_key_agrees(&stored), "the row fell out of both days' by_day_channel queries: {stored:?}");
        assert_eq!(get_i64(&stored, "deliver_after_ms"), Some(r.deliver_after.timestamp_millis()));
        // A status change of a released row keeps its key on its own day too.
        let mut cancelled = r.clone();
        cancelled.status = RenewalStatus::Cancelled;
        let (_, write) = plan(&cancelled, Some(&stored), now);
        assert!(day_key_agrees(&apply(&stored, &write.unwrap())));
    }

    #[test]
    fn found_by_review_a_row_imported_before_the_day_index_is_backfilled_by_reimport() {
        let r = renewal("active");
        // An import the evening before the due date (a fixed instant: the row's window is over
        // in wall-clock time soon after 2026-12-02).
        let now = r.deliver_after - chrono::TimeDelta::hours(12);
        let mut old = row_item(&r, now);
        old.remove("day_shard");
        // Still pending: rewritten whole, with its key.
        let (outcome, write) = plan(&r, Some(&old), now);
        assert_eq!(outcome, RowOutcome::Updated);
        assert!(matches!(write, Some(RowWrite::Replace { ref item, .. }) if item.contains_key("day_shard")));
        // Released: only the status path, which now sets the key too.
        old.insert("sched_state".into(), s("enqueued"));
        let (outcome, write) = plan(&r, Some(&old), now);
        assert_eq!(outcome, RowOutcome::Updated);
        let Some(RowWrite::Status { day_shard: day, seen_state, .. }) = write else { panic!("{write:?}") };
        assert_eq!((day, seen_state.as_str()), (super::day_shard(r.deliver_after, &r.reminder_id), "enqueued"));
        // With its key, the same row is unchanged.
        let current = row_item(&r, now);
        assert_eq!(plan(&r, Some(&current), now).0, RowOutcome::Unchanged);
        assert!(current.get("day_shard").and_then(|v| v.as_s().ok()).unwrap().starts_with("2026-12-02#"));
    }
}
