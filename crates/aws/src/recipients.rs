//! The recipients table: `(tenant_id, recipient_ref)` → email address, read by the SES
//! provider at the moment of sending and written by `punctual import` (a CSV's optional `email`
//! column). The address lives here only: never in the renewals table, a message, the DLQ, the
//! ledger or a log line.
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `tenant_id` | S | partition key: the tenant whose reference this is |
//! | `recipient_ref` | S | sort key: the renewal's opaque reference, meaningful inside its tenant |
//! | `email` | S | the address |
//! | `updated_ms` | N | when it was last written |
//!
//! The key is the pair, held as two attributes, so no choice of characters in either id can
//! make two tenants' entries collide (a joined string such as `{tenant}:{ref}` could).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use punctual_core::TenantId;
use punctual_core::ports::{EmailAddress, Recipients, RecipientsError};

use crate::dynamodb::{DynamoError, classify, get_s, n, s};

/// The partition key attribute.
pub const TENANT: &str = "tenant_id";
/// The sort key attribute.
pub const KEY: &str = "recipient_ref";

/// One address to write: the tenant, its reference, the address.
pub type Entry = (TenantId, String, EmailAddress);

/// The recipients table.
#[derive(Debug, Clone)]
pub struct DynamoRecipients {
    client: Client,
    table: String,
}

impl DynamoRecipients {
    /// Over `table`.
    pub fn new(client: Client, table: &str) -> Self {
        Self { client, table: table.to_owned() }
    }

    /// Writes (or replaces) one address of `tenant`.
    pub async fn put(
        &self,
        tenant: &TenantId,
        recipient_ref: &str,
        address: &EmailAddress,
        now_ms: i64,
    ) -> Result<(), DynamoError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item(TENANT, s(tenant.as_str()))
            .item(KEY, s(recipient_ref))
            .item("email", s(address.expose()))
            .item("updated_ms", n(now_ms))
            .send()
            .await
            .map_err(classify)?;
        Ok(())
    }
}

impl DynamoRecipients {
    /// Writes many addresses, 25 to a `BatchWriteItem`, retrying what DynamoDB leaves
    /// unprocessed (a bounded number of times, then an error).
    pub async fn put_all(&self, entries: &[Entry], now_ms: i64) -> Result<(), DynamoError> {
        use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
        for chunk in entries.chunks(25) {
            let mut requests: Vec<WriteRequest> = Vec::with_capacity(chunk.len());
            for (tenant, reference, address) in chunk {
                let put = PutRequest::builder()
                    .item(TENANT, s(tenant.as_str()))
                    .item(KEY, s(reference.as_str()))
                    .item("email", s(address.expose()))
                    .item("updated_ms", n(now_ms))
                    .build()
                    .map_err(|e| DynamoError::Unknown(Box::new(e)))?;
                requests.push(WriteRequest::builder().put_request(put).build());
            }
            for _ in 0..8 {
                if requests.is_empty() {
                    break;
                }
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, std::mem::take(&mut requests))
                    .send()
                    .await
                    .map_err(classify)?;
                requests = out.unprocessed_items.and_then(|mut u| u.remove(&self.table)).unwrap_or_default();
            }
            if !requests.is_empty() {
                return Err(DynamoError::Unknown(format!("{} recipients left unprocessed", requests.len()).into()));
            }
        }
        Ok(())
    }
}

impl Recipients for DynamoRecipients {
    async fn address(&self, tenant: &TenantId, recipient_ref: &str) -> Result<Option<EmailAddress>, RecipientsError> {
        // Strongly consistent: an import may write the address moments before the scheduler
        // releases the renewal (a read costs one unit instead of half).
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(TENANT, AttributeValue::S(tenant.as_str().to_owned()))
            .key(KEY, AttributeValue::S(recipient_ref.to_owned()))
            .projection_expression("email")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| RecipientsError::Unknown(Box::new(e)))?
            .item;
        let Some(item) = item else { return Ok(None) };
        match get_s(&item, "email") {
            None => Ok(None),
            Some(raw) => EmailAddress::parse(raw).map(Some).map_err(|_| RecipientsError::Corrupt {
                tenant_id: tenant.as_str().to_owned(),
                recipient_ref: recipient_ref.to_owned(),
            }),
        }
    }
}

/// Creates the table (tests and `punctual local`; on AWS the SAM template owns it).
pub async fn create_table(client: &Client, table: &str) -> Result<(), DynamoError> {
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
    let unknown = |e: aws_sdk_dynamodb::error::BuildError| DynamoError::Unknown(Box::new(e));
    let def = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(unknown)
    };
    let key =
        |name: &str, kind| KeySchemaElement::builder().attribute_name(name).key_type(kind).build().map_err(unknown);
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(def(TENANT)?)
        .attribute_definitions(def(KEY)?)
        .key_schema(key(TENANT, KeyType::Hash)?)
        .key_schema(key(KEY, KeyType::Range)?)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(classify)?;
    crate::dynamodb::wait_active(client, table).await
}
