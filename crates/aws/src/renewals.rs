//! The renewals table (system of record), as the sender reads it.
//!
//! Item key `pk = renewal:{tenant_id}:{renewal_id}`; the sender reads `status`
//! (`active` | `cancelled` | `paid`), `recipient_ref` and `channel`. The scheduler issue adds
//! the due-time attributes and the GSI; this adapter reads only what the sender needs.

use aws_sdk_dynamodb::Client;
use punctual_core::decision::RenewalView;
use punctual_core::ids::{RenewalId, TenantId};
use punctual_core::ports::{RenewalLookup, Renewals, RenewalsError};

use crate::dynamodb::{DynamoError, Item, get, get_s, s};

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
            return Ok(RenewalLookup { view: RenewalView::Missing, recipient_ref: None, channel: None });
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
        Ok(RenewalLookup {
            view,
            recipient_ref: get_s(&item, "recipient_ref").map(str::to_owned),
            channel: get_s(&item, "channel").map(str::to_owned),
        })
    }
}
