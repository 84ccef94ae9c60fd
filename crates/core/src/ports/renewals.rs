//! The renewals port: the system of record as the sender reads it.

use std::future::Future;

use super::{BoxError, Certainty};
use crate::decision::RenewalView;
use crate::ids::{RenewalId, TenantId};

/// What the sender needs from the system of record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalLookup {
    /// Still due, cancelled, paid or gone.
    pub view: RenewalView,
    /// An opaque reference the provider resolves to an address (never the address itself).
    pub recipient_ref: Option<String>,
    /// `email`, `sms`, ...
    pub channel: Option<String>,
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
