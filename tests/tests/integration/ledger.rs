//! The ledger contract suite against the DynamoDB adapter, on two engines, each for what it
//! gets right:
//! - moto (or LocalStack): every sequential case, and the adapter's real path for a refused
//!   write — the refused item comes back in the same round trip (`ALL_OLD`), counted below;
//! - dynalite: the same sequential cases and the concurrent ones (racing claims, settles and
//!   deliveries on one reminder), which need an engine that isolates concurrent conditional
//!   writes. dynalite drops `ReturnValuesOnConditionCheckFailure`; the adapter then reads the
//!   refused item (`dynamodb::update_if`), a path DynamoDB takes only when there is no item.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use chrono::Utc;
use punctual_aws::ledger::DynamoLedger;
use punctual_core::testing::ledger_contract;
use punctual_tests::{Operations, assert_on_dynalite, dynalite_client, on_big_stack, sdk_config, unique};

async fn run_contract(client: aws_sdk_dynamodb::Client, on_dynalite: bool) {
    let table = unique("punctual-ledger");
    punctual_aws::ledger::create_table(&client, &table).await.unwrap();
    if on_dynalite {
        assert_on_dynalite(&table).await;
    }
    // Claim+settle cycles past the history bound (HISTORY_MAX, 97), so every compaction path runs: 300 on
    // dynalite (≈ 40 s), 150 on moto, whose cost per write grows with the item (300 took 159 s
    // there; 3,000 took 7.5 minutes on moto and 168 s on dynalite).
    let cycles = if on_dynalite { 300 } else { 150 };
    let ledger = DynamoLedger::new(client.clone(), &table);
    Box::pin(ledger_contract::run_with(&ledger, Utc::now(), cycles)).await;
    if on_dynalite {
        // 16 sender instances racing on each of four reminders.
        Box::pin(ledger_contract::run_concurrent(&ledger, Utc::now(), 16)).await;
    }
    client.delete_table().table_name(&table).send().await.unwrap();
}

#[test]
fn dynamodb_ledger_obeys_the_ledger_contract_on_the_emulator() {
    on_big_stack(async { run_contract(aws_sdk_dynamodb::Client::new(&sdk_config().await), false).await });
}

#[test]
fn dynamodb_ledger_obeys_the_ledger_contract_on_dynalite() {
    on_big_stack(async {
        if let Some(client) = dynalite_client().await {
            run_contract(client, true).await;
        }
    });
}

/// The sparse `dead` index `punctual status` counts from: a reminder enters it when it is
/// dead-lettered or expired, under its reason, and leaves it when a redrive's copy claims it.
async fn dead_index(client: aws_sdk_dynamodb::Client, on_dynalite: bool) {
    use punctual_core::ports::{Ledger, OwnerToken, Settlement};
    use punctual_core::{ReasonCode, ReminderState};
    let table = unique("punctual-ledger-dead");
    punctual_aws::ledger::create_table(&client, &table).await.unwrap();
    if on_dynalite {
        assert_on_dynalite(&table).await;
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
async fn the_dead_index_counts_by_reason_on_dynalite() {
    if let Some(client) = dynalite_client().await {
        Box::pin(dead_index(client, true)).await;
    }
}

/// On an engine that returns the refused item (moto, like DynamoDB), a refused claim is one
/// round trip: the `ALL_OLD` item decides it, and the adapter's fallback read (for engines that
/// drop the parameter) is not taken. The same claim on dynalite takes the read.
#[tokio::test]
async fn a_refused_claim_reads_the_refused_item_from_the_same_round_trip() {
    use punctual_core::decision::ClaimView;
    use punctual_core::ports::{Ledger, OwnerToken};
    async fn refused_claim_operations(client: aws_sdk_dynamodb::Client, ops: &Operations) -> Vec<String> {
        let table = unique("punctual-ledger");
        punctual_aws::ledger::create_table(&client, &table).await.unwrap();
        let ledger = DynamoLedger::new(client, &table);
        let now = chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap();
        let m = punctual_core::testing::message("refused", now, now + chrono::TimeDelta::hours(1));
        let lease = now + chrono::TimeDelta::seconds(30);
        ledger.claim(&m, &OwnerToken::new("a"), now, lease).await.unwrap();
        ops.clear();
        let rival = ledger.claim(&m, &OwnerToken::new("b"), now, lease).await.unwrap();
        assert_eq!(rival, ClaimView::HeldElsewhere { lease_until: lease });
        ops.sent()
    }
    let config = sdk_config().await;
    let ops = Operations::default();
    let moto = ops.client(aws_sdk_dynamodb::config::Builder::from(&config));
    assert_eq!(refused_claim_operations(moto, &ops).await, ["UpdateItem"], "one round trip on moto");
    if let Ok(url) = std::env::var("PUNCTUAL_DYNALITE_URL") {
        let ops = Operations::default();
        let dynalite = ops.client(aws_sdk_dynamodb::config::Builder::from(&config).endpoint_url(url));
        assert_eq!(
            refused_claim_operations(dynalite, &ops).await,
            ["UpdateItem", "GetItem"],
            "dynalite drops ALL_OLD: the adapter reads the refused item"
        );
    }
}
