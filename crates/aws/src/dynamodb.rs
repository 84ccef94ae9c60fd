//! DynamoDB primitives shared by the adapters: conditional writes whose failure is an outcome.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

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

/// The machinery failed (network, throttling, validation, permissions).
#[derive(Debug, thiserror::Error)]
pub enum DynamoError {
    /// The table does not exist.
    #[error("DynamoDB table not found")]
    TableNotFound(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Anything else, with its source kept.
    #[error("DynamoDB request failed")]
    Unknown(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Puts `item` into `table` if `condition` holds, returning the existing item when it does not.
pub async fn put_if(
    client: &Client,
    table: &str,
    item: Item,
    condition: &str,
    names: Option<HashMap<String, String>>,
    values: Option<Item>,
) -> Result<ConditionalPut, DynamoError> {
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
        Err(SdkError::ServiceError(e)) => match e.err() {
            PutItemError::ConditionalCheckFailedException(c) => {
                Ok(ConditionalPut::ConditionFailed { existing: c.item().cloned() })
            }
            PutItemError::ResourceNotFoundException(_) => {
                Err(DynamoError::TableNotFound(Box::new(SdkError::ServiceError(e))))
            }
            _ => Err(DynamoError::Unknown(Box::new(SdkError::ServiceError(e)))),
        },
        Err(other) => Err(DynamoError::Unknown(Box::new(other))),
    }
}
