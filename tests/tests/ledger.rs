//! The ledger contract suite against the DynamoDB adapter: on the emulator (moto or
//! LocalStack) and on AWS's own DynamoDB Local, the reference for conditional expressions.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use chrono::Utc;
use punctual_aws::dynamodb::create_pk_table;
use punctual_aws::ledger::DynamoLedger;
use punctual_core::testing::ledger_contract;
use punctual_tests::{assert_on_dynamodb_local, dynamodb_local_client, sdk_config, unique};

async fn run_contract(client: aws_sdk_dynamodb::Client, on_dynamodb_local: bool) {
    let table = unique("punctual-ledger");
    create_pk_table(&client, &table).await.unwrap();
    if on_dynamodb_local {
        assert_on_dynamodb_local(&table).await;
    }
    // 3,000 claim+settle cycles on DynamoDB Local (AWS's engine, fast); on moto, whose writes
    // cost grows with the item, 300 — still three times the history bound, so every compaction
    // path runs; 3,000 there took 7.5 minutes.
    let cycles = if on_dynamodb_local { ledger_contract::CYCLES } else { 300 };
    ledger_contract::run_with(&DynamoLedger::new(client.clone(), &table), Utc::now(), cycles).await;
    client.delete_table().table_name(&table).send().await.unwrap();
}

#[tokio::test]
async fn dynamodb_ledger_obeys_the_ledger_contract_on_the_emulator() {
    // Boxed: the suite's state machine (every SDK future it awaits, inline) is large in a debug
    // build, and a `#[tokio::test]` body lives on the test thread's 2 MB stack.
    Box::pin(run_contract(aws_sdk_dynamodb::Client::new(&sdk_config().await), false)).await;
}

#[tokio::test]
async fn dynamodb_ledger_obeys_the_ledger_contract_on_dynamodb_local() {
    if let Some(client) = dynamodb_local_client().await {
        Box::pin(run_contract(client, true)).await;
    }
}
