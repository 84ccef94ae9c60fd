//! The ledger contract suite against the DynamoDB adapter: on the emulator (moto or
//! LocalStack) and on AWS's own DynamoDB Local, the reference for conditional expressions.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use chrono::Utc;
use punctual_aws::ledger::DynamoLedger;
use punctual_core::testing::ledger_contract;
use punctual_tests::{assert_on_dynamodb_local, dynamodb_local_client, sdk_config, unique};

async fn run_contract(client: aws_sdk_dynamodb::Client, on_dynamodb_local: bool) {
    let table = unique("punctual-ledger");
    punctual_aws::ledger::create_table(&client, &table).await.unwrap();
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

/// The sparse `dead` index `punctual status` counts from: a reminder enters it when it is
/// dead-lettered or expired, under its reason, and leaves it when a redrive's copy claims it.
async fn dead_index(client: aws_sdk_dynamodb::Client, on_dynamodb_local: bool) {
    use punctual_core::ports::{Ledger, OwnerToken, Settlement};
    use punctual_core::{ReasonCode, ReminderState};
    let table = unique("punctual-ledger-dead");
    punctual_aws::ledger::create_table(&client, &table).await.unwrap();
    if on_dynamodb_local {
        assert_on_dynamodb_local(&table).await;
    }
    let ledger = DynamoLedger::new(client.clone(), &table);
    let now = Utc::now();
    let since = now - chrono::TimeDelta::days(1);
    let settle =
        |state, reason| Settlement { state, reason, attempts: 1, receipt: None, provider_status: None, next_at: None };
    let mut messages = Vec::new();
    for (i, (state, reason)) in [
        (ReminderState::DeadLettered, ReasonCode::AttemptLimit),
        (ReminderState::DeadLettered, ReasonCode::AttemptLimit),
        (ReminderState::DeadLettered, ReasonCode::ClassifiedPermanent),
        (ReminderState::Expired, ReasonCode::BusinessDeadlineExpired),
        (ReminderState::Delivered, ReasonCode::AttemptLimit),
    ]
    .into_iter()
    .enumerate()
    {
        let m = punctual_core::testing::message(&format!("dead-{i}"), now, now + chrono::TimeDelta::hours(1));
        let o = OwnerToken::new(format!("o-{i}"));
        ledger.claim(&m, &o, now, now + chrono::TimeDelta::seconds(30)).await.unwrap();
        let reason = (state != ReminderState::Delivered).then_some(reason);
        ledger.settle(&m, Some(&o), now, &settle(state, reason)).await.unwrap();
        messages.push(m);
    }
    let counts = ledger.dead_by_reason(since).await.unwrap().0.expect("the index exists");
    let want: std::collections::BTreeMap<String, u64> =
        [("attempt_limit", 2), ("business_deadline_expired", 1), ("classified_permanent", 1)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
    assert_eq!(counts, want);
    // A redrive's copy claims one: it leaves the index.
    let redriven = punctual_core::testing::redriven(&messages[0], "rd-20261201T000000000-0001", 1, false);
    ledger.claim(&redriven, &OwnerToken::new("again"), now, now + chrono::TimeDelta::seconds(30)).await.unwrap();
    let counts = ledger.dead_by_reason(since).await.unwrap().0.unwrap();
    assert_eq!(counts.get("attempt_limit"), Some(&1), "{counts:?}");
    // Outside the window: not counted.
    assert_eq!(ledger.dead_by_reason(now + chrono::TimeDelta::days(1)).await.unwrap().0.unwrap().len(), 0);
    // A table without the index says so instead of failing.
    let bare = unique("punctual-ledger-bare");
    punctual_aws::dynamodb::create_pk_table(&client, &bare).await.unwrap();
    assert_eq!(DynamoLedger::new(client.clone(), &bare).dead_by_reason(since).await.unwrap().0, None);
    // A table that does not exist is an error, not "no index".
    assert!(DynamoLedger::new(client.clone(), "no-such-table").dead_by_reason(since).await.is_err());
    client.delete_table().table_name(&table).send().await.unwrap();
    client.delete_table().table_name(&bare).send().await.unwrap();
}

#[tokio::test]
async fn the_dead_index_counts_by_reason_on_the_emulator() {
    Box::pin(dead_index(aws_sdk_dynamodb::Client::new(&sdk_config().await), false)).await;
}

#[tokio::test]
async fn the_dead_index_counts_by_reason_on_dynamodb_local() {
    if let Some(client) = dynamodb_local_client().await {
        Box::pin(dead_index(client, true)).await;
    }
}
