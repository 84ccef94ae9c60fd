//! The recipients table: `recipient_ref` → email address, read by the SES provider at the
//! moment of sending and written by `punctual import` (a CSV's optional `email` column). The
//! address lives here only: never in the renewals table, a message, the DLQ, the ledger or a
//! log line.
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `recipient_ref` | S | the key (the renewal's opaque reference) |
//! | `email` | S | the address |
//! | `updated_ms` | N | when it was last written |

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use punctual_core::ports::{EmailAddress, Recipients, RecipientsError};

use crate::dynamodb::{DynamoError, classify, get_s, n, s};

/// The key attribute.
pub const KEY: &str = "recipient_ref";

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

    /// Writes (or replaces) one address.
    pub async fn put(&self, recipient_ref: &str, address: &EmailAddress, now_ms: i64) -> Result<(), DynamoError> {
        self.client
            .put_item()
            .table_name(&self.table)
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
    pub async fn put_all(&self, entries: &[(String, EmailAddress)], now_ms: i64) -> Result<(), DynamoError> {
        use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
        for chunk in entries.chunks(25) {
            let mut requests: Vec<WriteRequest> = Vec::with_capacity(chunk.len());
            for (reference, address) in chunk {
                let put = PutRequest::builder()
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
    async fn address(&self, recipient_ref: &str) -> Result<Option<EmailAddress>, RecipientsError> {
        // Strongly consistent: an import may write the address moments before the scheduler
        // releases the renewal (a read costs one unit instead of half).
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
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
            Some(raw) => EmailAddress::parse(raw)
                .map(Some)
                .map_err(|_| RecipientsError::Corrupt { recipient_ref: recipient_ref.to_owned() }),
        }
    }
}

/// Creates the table (tests and `punctual local`; on AWS the SAM template owns it).
pub async fn create_table(client: &Client, table: &str) -> Result<(), DynamoError> {
    crate::dynamodb::create_keyed_table(client, table, KEY).await
}
