//! The ledger contract suite against the DynamoDB adapter: on the emulator (moto or
//! LocalStack) and on AWS's own DynamoDB Local, the reference for conditional expressions.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use aws_config::SdkConfig;
use chrono::Utc;
use punctual_aws::dynamodb::create_pk_table;
use punctual_aws::ledger::DynamoLedger;
use punctual_core::testing::ledger_contract;
use punctual_tests::{dynamodb_local_config, sdk_config, unique};

async fn run_contract(config: &SdkConfig) {
    let client = aws_sdk_dynamodb::Client::new(config);
    let table = unique("punctual-ledger");
    create_pk_table(&client, &table).await.unwrap();
    ledger_contract::run(&DynamoLedger::new(client.clone(), &table), Utc::now()).await;
    client.delete_table().table_name(&table).send().await.unwrap();
}

#[tokio::test]
async fn dynamodb_ledger_obeys_the_ledger_contract_on_the_emulator() {
    run_contract(&sdk_config().await).await;
}

#[tokio::test]
async fn dynamodb_ledger_obeys_the_ledger_contract_on_dynamodb_local() {
    if let Some(config) = dynamodb_local_config().await {
        run_contract(&config).await;
    }
}
