//! The pending-renewals port: the sparse due index and the watermark the scheduler pages
//! (docs/design.md#the-scheduler).

use std::future::Future;

use chrono::{DateTime, Utc};

use super::{BoxError, Certainty};
use crate::ids::{ReminderId, ReminderKind, RenewalId, TenantId};

/// A renewal waiting to be released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Tenant.
    pub tenant_id: TenantId,
    /// Renewal.
    pub renewal_id: RenewalId,
    /// Reminder kind.
    pub kind: ReminderKind,
    /// The reminder.
    pub reminder_id: ReminderId,
    /// Release instant.
    pub deliver_after: DateTime<Utc>,
    /// Deadline.
    pub deliver_by: DateTime<Utc>,
    /// The renewal's channel (`None` when the index row has none): which queue its message
    /// takes when the channel has one of its own.
    pub channel: Option<String>,
}

impl From<&crate::renewal::Renewal> for Pending {
    /// The renewal's row as the scheduler's index holds it.
    fn from(r: &crate::renewal::Renewal) -> Self {
        Self {
            tenant_id: r.tenant_id.clone(),
            renewal_id: r.renewal_id.clone(),
            kind: r.kind.clone(),
            reminder_id: r.reminder_id.clone(),
            deliver_after: r.deliver_after,
            deliver_by: r.deliver_by,
            channel: Some(r.channel.clone()),
        }
    }
}

impl From<&crate::contract::ReminderMessage> for Pending {
    /// The row a released message came from.
    fn from(m: &crate::contract::ReminderMessage) -> Self {
        Self {
            tenant_id: m.tenant_id.clone(),
            renewal_id: m.renewal_id.clone(),
            kind: m.kind.clone(),
            reminder_id: m.reminder_id.clone(),
            deliver_after: m.deliver_after,
            deliver_by: m.deliver_by,
            channel: m.channel.clone(),
        }
    }
}

impl Pending {
    /// The pending reminder of `kind` for `tenant`/`renewal` with the window `[after, by)`, its
    /// id derived as production derives it (from the local due date of `after`, in UTC here).
    pub fn new(
        tenant_id: TenantId,
        renewal_id: RenewalId,
        kind: ReminderKind,
        deliver_after: DateTime<Utc>,
        deliver_by: DateTime<Utc>,
    ) -> Self {
        let reminder_id = ReminderId::derive(&tenant_id, &renewal_id, &kind, deliver_after.date_naive());
        Self { tenant_id, renewal_id, kind, reminder_id, deliver_after, deliver_by, channel: None }
    }
}

/// One page of pending renewals from one shard.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page<K> {
    /// Renewals with `deliver_after <= horizon`, oldest release first.
    pub items: Vec<Pending>,
    /// Where the next page starts, if there is one.
    pub next: Option<K>,
}

/// What marking a renewal came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// Written.
    Done,
    /// It was no longer pending (released or changed meanwhile): nothing written.
    NotPending,
}

/// The pending-renewals store failed as machinery.
#[derive(Debug, thiserror::Error)]
pub enum DueStoreError {
    /// Anything else.
    #[error("renewals store request failed")]
    Unknown(#[source] BoxError),
}

/// The pending-renewals index and the scheduler's watermark.
pub trait DueStore: Send + Sync {
    /// A cursor into one shard.
    type Cursor: Clone + Send + Sync;
    /// Number of shards of the index.
    fn shards(&self) -> u32;
    /// Up to `limit` pending renewals of `shard` with `deliver_after <= horizon`.
    fn due_page(
        &self,
        shard: u32,
        horizon: DateTime<Utc>,
        limit: usize,
        cursor: Option<Self::Cursor>,
    ) -> impl Future<Output = Result<Page<Self::Cursor>, DueStoreError>> + Send;
    /// Marks a renewal released (leaves the index).
    fn mark_enqueued(
        &self,
        p: &Pending,
        at: DateTime<Utc>,
    ) -> impl Future<Output = Result<Marked, DueStoreError>> + Send;
    /// Marks a renewal expired with `missed_schedule_window` (leaves the index).
    fn mark_expired(
        &self,
        p: &Pending,
        at: DateTime<Utc>,
    ) -> impl Future<Output = Result<Marked, DueStoreError>> + Send;
    /// The end of the last fully finished window.
    fn watermark(&self) -> impl Future<Output = Result<Option<DateTime<Utc>>, DueStoreError>> + Send;
    /// Advances the watermark (never moves it back).
    fn advance_watermark(&self, to: DateTime<Utc>) -> impl Future<Output = Result<(), DueStoreError>> + Send;
}

impl DueStoreError {
    /// A mark whose answer was lost may have been written.
    pub fn certainty(&self) -> Certainty {
        Certainty::Indeterminate
    }
}
