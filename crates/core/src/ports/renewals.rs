//! The renewals port: the system of record as the sender reads it.

use std::future::Future;

use chrono::{DateTime, Utc};

use super::{BoxError, Certainty};
use crate::contract::ReminderMessage;
use crate::decision::RenewalView;
use crate::ids::{ReminderId, RenewalId, TenantId};

/// Which version of a renewal a row holds: the reminder and the times the import computed. A
/// released copy carries the version it was released from; a re-import that changes any of the
/// three makes that copy stale (I8: nothing is delivered for a version the table no longer
/// holds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalVersion {
    /// The reminder the row is for (its due date is in the id).
    pub reminder_id: ReminderId,
    /// Not before.
    pub deliver_after: DateTime<Utc>,
    /// Not at or after.
    pub deliver_by: DateTime<Utc>,
}

impl RenewalVersion {
    /// The version a message was released from.
    pub fn of(m: &ReminderMessage) -> Self {
        Self { reminder_id: m.reminder_id.clone(), deliver_after: m.deliver_after, deliver_by: m.deliver_by }
    }
}

/// What the sender needs from the system of record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalLookup {
    /// Still due, cancelled, paid or gone.
    pub view: RenewalView,
    /// An opaque reference the provider resolves to an address (never the address itself).
    pub recipient_ref: Option<String>,
    /// `email`, `sms`, ...
    pub channel: Option<String>,
    /// The version the row holds now; `None` for a row written without computed times (tests'
    /// and local runs' bare rows), which no copy can be stale against.
    pub version: Option<RenewalVersion>,
    /// The template variables the producer gave (`data`), for the provider call.
    pub data: Option<crate::renewal::TemplateData>,
}

impl RenewalLookup {
    /// The row as the sender of `m` must see it: an active row whose version is not the one
    /// `m` was released from is [`RenewalView::Rescheduled`].
    pub fn view_for(&self, m: &ReminderMessage) -> RenewalView {
        match (&self.view, &self.version) {
            (RenewalView::Active, Some(v)) if *v != RenewalVersion::of(m) => RenewalView::Rescheduled {
                same_reminder: v.reminder_id == m.reminder_id,
                deliver_after: v.deliver_after,
                deliver_by: v.deliver_by,
            },
            (view, _) => *view,
        }
    }
}

/// The renewals table failed as machinery.
#[derive(Debug, thiserror::Error)]
pub enum RenewalsError {
    /// The stored renewal could not be read.
    #[error("renewal {tenant_id}/{renewal_id} is unreadable: {what}")]
    Corrupt {
        /// Tenant.
        tenant_id: String,
        /// Renewal.
        renewal_id: String,
        /// What is wrong.
        what: String,
    },
    /// Anything else.
    #[error("renewals store request failed")]
    Unknown(#[source] BoxError),
}

impl RenewalsError {
    /// Reads change nothing: every renewals failure is determinate.
    pub fn certainty(&self) -> Certainty {
        Certainty::Determinate
    }
}

/// The renewals table, read by the sender.
pub trait Renewals: Send + Sync {
    /// Looks up one renewal.
    fn lookup(
        &self,
        tenant: &TenantId,
        renewal: &RenewalId,
    ) -> impl Future<Output = Result<RenewalLookup, RenewalsError>> + Send;
}
