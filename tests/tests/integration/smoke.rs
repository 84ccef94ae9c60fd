//! Smoke test of the emulator path: the real Rust SDK creates a uniquely named queue and table,
//! round-trips a contract message through SQS, and a repeated conditional write comes back as
//! an outcome value.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use chrono::{TimeDelta, Utc};
use punctual_aws::dynamodb::{ConditionalPut, put_if};
use punctual_core::ReminderMessage;
use punctual_tests::{sdk_config, unique};

fn message() -> ReminderMessage {
    let now = Utc::now();
    punctual_core::testing::message("smoke-1", now, now + TimeDelta::hours(8))
}

#[tokio::test]
async fn a_contract_message_round_trips_through_an_emulated_queue() {
    let sqs = aws_sdk_sqs::Client::new(&sdk_config().await);
    let name = unique("punctual-smoke");
    let url = sqs.create_queue().queue_name(&name).send().await.unwrap().queue_url.unwrap();

    let sent = message();
    sqs.send_message().queue_url(&url).message_body(sent.encode()).send().await.unwrap();
    let got =
        sqs.receive_message().queue_url(&url).wait_time_seconds(2).max_number_of_messages(10).send().await.unwrap();
    let msgs = got.messages.unwrap_or_default();
    assert_eq!(msgs.len(), 1);
    let decoded = ReminderMessage::decode(msgs[0].body().unwrap()).unwrap();
    assert_eq!(decoded.reminder_id, sent.reminder_id);
    assert_eq!(decoded.deliver_by.timestamp_millis(), sent.deliver_by.timestamp_millis());

    sqs.delete_message().queue_url(&url).receipt_handle(msgs[0].receipt_handle().unwrap()).send().await.unwrap();
    sqs.delete_queue().queue_url(&url).send().await.unwrap();
}

#[tokio::test]
async fn a_second_conditional_write_is_an_outcome_not_an_error() {
    let ddb = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let table = unique("punctual-smoke");
    ddb.create_table()
        .table_name(&table)
        .attribute_definitions(
            AttributeDefinition::builder().attribute_name("pk").attribute_type(ScalarAttributeType::S).build().unwrap(),
        )
        .key_schema(KeySchemaElement::builder().attribute_name("pk").key_type(KeyType::Hash).build().unwrap())
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();

    let key = message().reminder_id.idempotency_key();
    let item = |owner: &str| {
        [
            ("pk".to_owned(), AttributeValue::S(key.to_string())),
            ("owner".to_owned(), AttributeValue::S(owner.to_owned())),
        ]
        .into()
    };
    let first = put_if(&ddb, &table, item("worker-a"), "attribute_not_exists(pk)", None, None).await.unwrap();
    assert_eq!(first, ConditionalPut::Written);

    let second = put_if(&ddb, &table, item("worker-b"), "attribute_not_exists(pk)", None, None).await.unwrap();
    let ConditionalPut::ConditionFailed { existing } = second else {
        panic!("second write must fail its condition: {second:?}")
    };
    // ALL_OLD returns the holder in the same round trip, so a lost race needs no second read.
    let holder = existing.expect("ALL_OLD item");
    assert_eq!(holder.get("owner"), Some(&AttributeValue::S("worker-a".into())));

    ddb.delete_table().table_name(&table).send().await.unwrap();
}
