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

impl Recipients for DynamoRecipients {
    async fn address(&self, recipient_ref: &str) -> Result<Option<EmailAddress>, RecipientsError> {
        // Eventually consistent (half the read cost): an address written by an import minutes
        // or days before its reminder is due has long propagated.
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(recipient_ref.to_owned()))
            .projection_expression("email")
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
