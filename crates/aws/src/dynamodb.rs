//! DynamoDB primitives shared by the adapters: conditional writes whose failure is an outcome,
//! attribute helpers, and the table definitions punctual needs.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType,
};
use punctual_core::ports::BoxError;

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// The result of a conditional put: both cases are normal outcomes, not errors.
#[derive(Debug, Clone, PartialEq)]
pub enum ConditionalPut {
    /// The condition held and the item was written.
    Written,
    /// The condition failed; `existing` is the item that made it fail (`ALL_OLD`), read in the
    /// same round trip.
    ConditionFailed {
        /// The item as it was, when the service returned it.
        existing: Option<Item>,
    },
}

/// The result of a conditional update.
#[derive(Debug, Clone, PartialEq)]
pub enum ConditionalUpdate {
    /// The condition held; the item as written (`ALL_NEW`).
    Written(Option<Item>),
    /// The condition failed; the item that made it fail (`ALL_OLD`).
    ConditionFailed(Option<Item>),
}

/// The machinery failed (network, throttling, validation, permissions).
#[derive(Debug, thiserror::Error)]
pub enum DynamoError {
    /// The table does not exist.
    #[error("DynamoDB table not found")]
    TableNotFound(#[source] BoxError),
    /// DynamoDB throttled the request (after the SDK's own retries).
    #[error("DynamoDB throttled the request")]
    Throttled(#[source] BoxError),
    /// Anything else, with its source kept.
    #[error("DynamoDB request failed")]
    Unknown(#[source] BoxError),
}

pub(crate) fn classify<E, R>(e: SdkError<E, R>) -> DynamoError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match e.code() {
        Some("ResourceNotFoundException") => DynamoError::TableNotFound(Box::new(e)),
        Some(
            "ProvisionedThroughputExceededException"
            | "ThrottlingException"
            | "RequestLimitExceeded"
            | "TransactionConflictException",
        ) => DynamoError::Throttled(Box::new(e)),
        _ => DynamoError::Unknown(Box::new(e)),
    }
}

/// Puts `item` into `table` (keyed by `pk` alone) if `condition` holds, returning the existing
/// item when it does not.
pub async fn put_if(
    client: &Client,
    table: &str,
    item: Item,
    condition: &str,
    names: Option<HashMap<String, String>>,
    values: Option<Item>,
) -> Result<ConditionalPut, DynamoError> {
    let item_key: Item = item.get("pk").map(|pk| HashMap::from([("pk".to_owned(), pk.clone())])).unwrap_or_default();
    let result = client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression(condition)
        .set_expression_attribute_names(names)
        .set_expression_attribute_values(values)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    match result {
        Ok(_) => Ok(ConditionalPut::Written),
        Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
            let existing = match e.err() {
                PutItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                _ => None,
            };
            let existing = match existing {
                Some(item) => Some(item),
                None => Box::pin(refused_item(client, table, (!item_key.is_empty()).then_some(item_key))).await?,
            };
            Ok(ConditionalPut::ConditionFailed { existing })
        }
        Err(e) => Err(classify(e)),
    }
}

/// The refused item, read when the engine's refusal did not carry it.
///
/// DynamoDB returns the item a condition failed on (`ReturnValuesOnConditionCheckFailure =
/// ALL_OLD`) in the same round trip, so on AWS this read happens only when there is no item
/// (and then finds none, for one read unit). Engines that drop the parameter (dynalite, the
/// engine `make test` races concurrent writers on) would otherwise look like "no item" to every
/// caller that decides on it (the ledger's claim, the limiter's booking, the import); a
/// strongly consistent read of the same key gives them the item as it is now, which is what
/// ALL_OLD would have been or newer. `tests/tests/ledger.rs` counts the requests of a refused
/// claim on moto, which returns ALL_OLD: one, no read.
async fn refused_item(client: &Client, table: &str, key: Option<Item>) -> Result<Option<Item>, DynamoError> {
    let Some(key) = key else { return Ok(None) };
    client
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .consistent_read(true)
        .send()
        .await
        .map(|o| o.item)
        .map_err(classify)
}

/// Sends a conditional update (its condition already set on `update`), returning `ALL_NEW` when
/// it is written and `ALL_OLD` when the condition fails — one round trip either way.
pub async fn update_if(client: &Client, update: UpdateItemFluentBuilder) -> Result<ConditionalUpdate, DynamoError> {
    let (table, key) = (update.get_table_name().clone().unwrap_or_default(), update.get_key().clone());
    let result = update
        .return_values(ReturnValue::AllNew)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    match result {
        Ok(out) => Ok(ConditionalUpdate::Written(out.attributes)),
        Err(SdkError::ServiceError(e)) if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) => {
            let existing = match e.err() {
                UpdateItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                _ => None,
            };
            let existing = match existing {
                Some(item) => Some(item),
                None => Box::pin(refused_item(client, &table, key)).await?,
            };
            Ok(ConditionalUpdate::ConditionFailed(existing))
        }
        Err(e) => Err(classify(e)),
    }
}

/// Reads one item by its string partition key `pk`, strongly consistent.
pub async fn get(client: &Client, table: &str, pk: &str) -> Result<Option<Item>, DynamoError> {
    client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .map(|o| o.item)
        .map_err(classify)
}

/// What [`get_batch`] read.
#[derive(Debug, Default)]
pub struct BatchRead {
    /// The items found (an absent key has none).
    pub items: Vec<Item>,
    /// Keys DynamoDB still left unprocessed after the last attempt (throttling): unread, not
    /// absent. Each caller decides what that means for it.
    pub unread: usize,
}

/// Reads the items of up to 100 string `pk` keys with strongly consistent `BatchGetItem`s,
/// asking again for the keys DynamoDB leaves unprocessed, `attempts` times in all, waiting
/// `first_wait << min(attempt, 6)` between them.
pub async fn get_batch(
    client: &Client,
    table: &str,
    pks: &[String],
    attempts: u32,
    first_wait: std::time::Duration,
) -> Result<BatchRead, DynamoError> {
    let mut keys = aws_sdk_dynamodb::types::KeysAndAttributes::builder().consistent_read(true);
    for pk in pks {
        keys = keys.keys([("pk".to_owned(), AttributeValue::S(pk.clone()))].into());
    }
    let mut request = Some(keys.build().map_err(|e| DynamoError::Unknown(Box::new(e)))?);
    let mut read = BatchRead::default();
    for attempt in 0..attempts {
        let Some(req) = request.take() else { break };
        let out = client.batch_get_item().request_items(table, req).send().await.map_err(classify)?;
        read.items.extend(out.responses.and_then(|mut r| r.remove(table)).unwrap_or_default());
        request = out.unprocessed_keys.and_then(|mut u| u.remove(table)).filter(|k| !k.keys().is_empty());
        if request.is_some() && attempt + 1 < attempts {
            tokio::time::sleep(first_wait * (1u32 << attempt.min(6))).await;
        }
    }
    read.unread = request.map_or(0, |k| k.keys().len());
    Ok(read)
}

/// Creates an on-demand table keyed by a string `pk` (the ledger and renewals lookups). Used by
/// tests and `punctual local`; on AWS the SAM template owns the tables.
pub async fn create_pk_table(client: &Client, table: &str) -> Result<(), DynamoError> {
    create_keyed_table(client, table, "pk").await
}

/// Creates an on-demand table keyed by the string attribute `key` (tests and `punctual local`).
pub async fn create_keyed_table(client: &Client, table: &str, key: &str) -> Result<(), DynamoError> {
    let def = AttributeDefinition::builder()
        .attribute_name(key)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|e| DynamoError::Unknown(Box::new(e)))?;
    let key = KeySchemaElement::builder()
        .attribute_name(key)
        .key_type(KeyType::Hash)
        .build()
        .map_err(|e| DynamoError::Unknown(Box::new(e)))?;
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(def)
        .key_schema(key)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(classify)?;
    wait_active(client, table).await
}

/// Waits until a table just created is `ACTIVE`: DynamoDB (and dynalite, even with no creation
/// delay) answers `ResourceNotFoundException` to reads and writes while it is `CREATING`, and a
/// test or `punctual local` that wrote at once failed now and then. Polls every 50 ms, for at
/// most two minutes (DynamoDB's on-demand tables take seconds).
pub async fn wait_active(client: &Client, table: &str) -> Result<(), DynamoError> {
    use aws_sdk_dynamodb::types::TableStatus;
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let out = client.describe_table().table_name(table).send().await.map_err(classify)?;
        let status = out.table.and_then(|t| t.table_status);
        if status == Some(TableStatus::Active) || std::time::Instant::now() >= give_up {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `S` attribute.
pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// `N` attribute.
pub fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Reads an `S` attribute.
pub fn get_s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

/// Reads an `N` attribute as `i64`.
pub fn get_i64(item: &Item, name: &str) -> Option<i64> {
    item.get(name).and_then(|v| v.as_n().ok()).and_then(|s| s.parse().ok())
}
