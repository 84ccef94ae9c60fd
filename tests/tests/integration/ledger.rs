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

/// Loses the answer to the first compacting write (the one whose request binds
/// `:history_seen`): the write applies, then the SDK reads DynamoDB's 500 and sends the same
/// request again, as it does after any answer lost on the way back.
#[derive(Debug, Default, Clone)]
struct LoseCompactingAnswer {
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    lost: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl aws_sdk_dynamodb::config::Intercept for LoseCompactingAnswer {
    fn name(&self) -> &'static str {
        "LoseCompactingAnswer"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let body = context.request().body().bytes().map(String::from_utf8_lossy).unwrap_or_default();
        let first = self.lost.load(std::sync::atomic::Ordering::SeqCst) == 0;
        self.armed.store(first && body.contains(":history_seen"), std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextMut<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.lost.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let response = context.response_mut();
            *response.status_mut() = 500u16.try_into()?;
            response.headers_mut().remove("x-amz-crc32");
            *response.body_mut() =
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"answer lost"}"#.into();
        }
        Ok(())
    }
}

/// A claim that finds the history full compacts it (a second, conditional write). When that
/// write's answer is lost, the SDK sends it again; it finds the history compacted already (by
/// itself) and fails its condition. The claim is this owner's all the same: it must not read as
/// held elsewhere behind its own lease (which left the message to come back after the lease
/// and poll `claimed_elsewhere` meanwhile).
#[tokio::test]
async fn a_compacting_claim_whose_answer_was_lost_is_its_own_claim() {
    use punctual_core::decision::ClaimView;
    use punctual_core::ports::{HISTORY_MAX, HISTORY_RECENT, Ledger, OwnerToken, Settlement};
    use punctual_core::{ReasonCode, ReminderState};
    let config = sdk_config().await;
    let lose = LoseCompactingAnswer::default();
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&config).interceptor(lose.clone()).build(),
    );
    let table = unique("punctual-ledger-lost");
    punctual_aws::ledger::create_table(&client, &table).await.unwrap();
    let ledger = DynamoLedger::new(client.clone(), &table);
    let now = Utc::now();
    let m = punctual_core::testing::message("compact", now, now + chrono::TimeDelta::hours(2));
    let deferred = Settlement {
        state: ReminderState::Deferred,
        reason: Some(ReasonCode::RateLimited),
        attempts: 0,
        receipt: None,
        provider_status: None,
        next_at: Some(now),
    };
    // A history one entry short of full, then a claim that fills it and whose lease ends.
    for i in 0..(HISTORY_MAX - 1) / 2 {
        let owner = OwnerToken::new(format!("o-{i}"));
        ledger.claim(&m, &owner, now, now + chrono::TimeDelta::seconds(30)).await.unwrap();
        ledger.settle(&m, Some(&owner), now, &deferred).await.unwrap();
    }
    ledger.claim(&m, &OwnerToken::new("crashed"), now, now + chrono::TimeDelta::seconds(30)).await.unwrap();
    assert_eq!(ledger.get(&m.reminder_id).await.unwrap().unwrap().history.len(), HISTORY_MAX);
    let later = now + chrono::TimeDelta::seconds(60);
    let owner = OwnerToken::new("retried");
    let view = ledger.claim(&m, &owner, later, later + chrono::TimeDelta::seconds(30)).await.unwrap();
    assert_eq!(lose.lost.load(std::sync::atomic::Ordering::SeqCst), 1, "the compacting write's answer was lost");
    let rec = ledger.get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.owner.as_deref(), rec.history.len()), (Some("retried"), HISTORY_RECENT + 1), "compacted once");
    assert!(matches!(view, ClaimView::Claimed { unsettled_call: false, .. }), "{view:?}");
    client.delete_table().table_name(&table).send().await.unwrap();
}

/// The outbox's contract on both engines: its GSI, its list appends and its conditioned clear.
#[tokio::test]
async fn dynamodb_ledger_keeps_its_outbox_as_the_contract_says() {
    let config = sdk_config().await;
    let mut engines = vec![(aws_sdk_dynamodb::Client::new(&config), false)];
    if let Some(d) = dynalite_client().await {
        engines.push((d, true));
    }
    for (client, on_dynalite) in engines {
        let table = unique("punctual-outbox");
        punctual_aws::ledger::create_table(&client, &table).await.unwrap();
        if on_dynalite {
            assert_on_dynalite(&table).await;
        }
        let ledger = DynamoLedger::new(client.clone(), &table);
        punctual_core::testing::outbox_contract::run(&ledger, Utc::now()).await;
        client.delete_table().table_name(&table).send().await.unwrap();
    }
}
