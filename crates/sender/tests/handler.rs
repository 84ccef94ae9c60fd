//! Handler tests: the real sample payloads in `events/` through the handler, over in-memory
//! ports and a manual clock at 2026-12-01T14:05:00Z, asserting the batch response.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use chrono::{DateTime, TimeDelta, Utc};
use lambda_runtime::{Context, LambdaEvent};
use punctual_core::ReminderMessage;
use punctual_core::clock::{Clock, ManualClock};
use punctual_core::ports::Ledger;
use punctual_core::provider::ProviderOutcome;
use punctual_core::reason::{ReasonCode, ReminderState};
use punctual_core::testing::{Fault, FaultyLedger, MemoryLedger, MemoryQueue, ScriptedProvider};
use punctual_sender::handler::{Deps, Handled, handle};

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events")
}

fn load(name: &str) -> SqsEvent {
    let text = std::fs::read_to_string(events_dir().join("sender").join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T14:05:00Z").unwrap().with_timezone(&Utc)
}

type TestSender<L> = punctual_core::testing::ScriptedSender<L>;

struct Rig<L> {
    clock: ManualClock,
    queue: MemoryQueue,
    provider: ScriptedProvider<ManualClock>,
    deps: Deps<TestSender<L>>,
}

fn rig_with<L: Ledger>(ledger: L, script: Vec<ProviderOutcome>) -> Rig<L> {
    let clock = ManualClock::new(now());
    let (sender, queue, provider) =
        punctual_core::testing::scripted_sender(ledger, &clock, Duration::from_millis(50), script, 1);
    Rig { clock, queue, provider, deps: Deps { sender, concurrency: 4, slo: Default::default(), max_receive_count: 5 } }
}

fn rig() -> Rig<MemoryLedger> {
    rig_with(MemoryLedger::new(), vec![])
}

impl<L: Ledger> Rig<L> {
    async fn invoke(&self, event: SqsEvent) -> Handled {
        let mut ctx = Context::default();
        ctx.request_id = "req-1".into();
        ctx.deadline = u64::try_from((self.clock.now() + TimeDelta::seconds(30)).timestamp_millis()).unwrap();
        handle(&self.deps, LambdaEvent::new(event, ctx)).await.unwrap()
    }
    async fn state(&self, body_of: &SqsEvent, i: usize) -> Option<ReminderState> {
        let m = ReminderMessage::decode(body_of.records[i].body.as_deref().unwrap()).unwrap();
        self.deps.sender.ledger().get(&m.reminder_id).await.unwrap().map(|r| r.state)
    }
}

fn metric_lines(h: &Handled) -> String {
    h.metrics.lines("punctual", "sender", 0).join("\n")
}

#[tokio::test]
async fn a_due_message_is_delivered_and_acknowledged() {
    let r = rig();
    let event = load("due.json");
    let h = r.invoke(event.clone()).await;
    assert!(h.response.batch_item_failures.is_empty());
    assert_eq!(r.provider.calls().len(), 1);
    assert_eq!(r.state(&event, 0).await, Some(ReminderState::Delivered));
    assert!(metric_lines(&h).contains("\"Delivered\":1.0"));
}

#[tokio::test]
async fn a_message_not_yet_due_is_requeued_until_due() {
    let r = rig();
    let h = r.invoke(load("not-yet-due.json")).await;
    assert!(h.response.batch_item_failures.is_empty());
    let requeued = r.queue.requeued();
    assert_eq!(requeued.len(), 1);
    assert_eq!(requeued[0].1, Duration::from_secs(55 * 60));
    assert!(r.provider.calls().is_empty());
    assert!(metric_lines(&h).contains("\"Reason\":\"not_due\""));
}

#[tokio::test]
async fn an_expired_message_is_dead_lettered_without_a_provider_call() {
    let r = rig();
    let event = load("expired.json");
    let h = r.invoke(event.clone()).await;
    assert!(h.response.batch_item_failures.is_empty());
    assert!(r.provider.calls().is_empty());
    assert_eq!(r.queue.dead()[0].reason, ReasonCode::BusinessDeadlineExpired);
    assert_eq!(r.state(&event, 0).await, Some(ReminderState::Expired));
}

#[tokio::test]
async fn a_duplicate_in_the_same_batch_reaches_the_provider_once() {
    let r = rig();
    let h = r.invoke(load("duplicate.json")).await;
    assert!(h.response.batch_item_failures.is_empty());
    assert_eq!(r.provider.calls().len(), 1);
    assert!(metric_lines(&h).contains("\"SuppressedDuplicates\":1.0"));
}

#[tokio::test]
async fn a_malformed_body_is_dead_lettered_and_never_fails_the_batch() {
    let r = rig();
    let h = r.invoke(load("malformed-body.json")).await;
    assert!(h.response.batch_item_failures.is_empty());
    let dead = r.queue.dead();
    assert_eq!(dead[0].reason, ReasonCode::Malformed);
    assert!(dead[0].detail.starts_with("body is not valid JSON"), "{}", dead[0].detail);
}

#[tokio::test]
async fn an_unknown_contract_version_is_dead_lettered_as_malformed() {
    let r = rig();
    r.invoke(load("unknown-version.json")).await;
    let dead = r.queue.dead();
    assert_eq!(
        (dead[0].reason, dead[0].detail.as_str()),
        (ReasonCode::Malformed, "unsupported contract version 7 (this build understands version 1)")
    );
}

#[tokio::test]
async fn a_redriven_message_is_delivered_and_its_redrive_id_recorded() {
    let r = rig();
    let event = load("redriven.json");
    r.invoke(event.clone()).await;
    let m = ReminderMessage::decode(event.records[0].body.as_deref().unwrap()).unwrap();
    let rec = r.deps.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.state, ReminderState::Delivered);
    assert!(rec.history.iter().all(|h| h.redrive_id.as_deref() == Some("rd-20261201-01")));
    assert_eq!(rec.attempts, 1, "the ledger, not the message's attempt hint, counts attempts");
}

#[tokio::test]
async fn a_mixed_batch_with_poison_messages_succeeds_for_every_record() {
    let r = rig();
    let event = load("mixed-batch.json");
    let h = r.invoke(event.clone()).await;
    assert!(h.response.batch_item_failures.is_empty());
    assert_eq!(r.provider.calls().len(), 2);
    let mut reasons: Vec<_> = r.queue.dead().iter().map(|d| d.reason).collect();
    reasons.sort();
    assert_eq!(reasons, [ReasonCode::BusinessDeadlineExpired, ReasonCode::Malformed, ReasonCode::Malformed]);
    assert_eq!(r.state(&event, 0).await, Some(ReminderState::Delivered));
    assert_eq!(r.state(&event, 4).await, Some(ReminderState::Delivered));
}

#[tokio::test]
async fn an_infrastructure_failure_fails_only_its_record() {
    let r = rig_with(FaultyLedger::new(MemoryLedger::new(), Fault::LoseDeliveredWrite, 1), vec![]);
    let event = load("mixed-batch.json");
    let h = r.invoke(event.clone()).await;
    let failed: Vec<_> = h.response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed.len(), 1, "exactly the record whose ledger write failed: {failed:?}");
    assert!(failed[0] == "0b3f6a1e-0009-4c1e-9a51-000000000009" || failed[0] == "0b3f6a1e-0013-4c1e-9a51-000000000013");
    assert!(metric_lines(&h).contains("\"InfrastructureFailures\":1.0"));
    assert_eq!(r.queue.dead().len(), 3, "the poison messages were still quarantined");
}

#[tokio::test]
async fn a_throttled_message_is_deferred_not_dead_lettered() {
    let r = rig_with(
        MemoryLedger::new(),
        vec![ProviderOutcome::Transient {
            status: Some(429),
            retry_after: punctual_core::provider::RetryAfter::parse("7"),
        }],
    );
    let h = r.invoke(load("due.json")).await;
    assert!(h.response.batch_item_failures.is_empty());
    assert!(r.queue.dead().is_empty());
    assert!(r.queue.requeued()[0].1 >= Duration::from_secs(7));
    let text = metric_lines(&h);
    assert!(text.contains("\"Provider429\":1.0") && text.contains("\"Reason\":\"provider_retry_after\""), "{text}");
}

/// The SLO documents of an invocation: (tenant, metric, value).
fn slo_counts(h: &Handled) -> Vec<(String, String, f64)> {
    let mut out = Vec::new();
    for line in h.metrics.lines("punctual", "sender", 0) {
        let doc: serde_json::Value = serde_json::from_str(&line).unwrap();
        let Some(tenant) = doc.get("tenant_id").and_then(|t| t.as_str()) else { continue };
        for def in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap() {
            let name = def["Name"].as_str().unwrap();
            out.push((tenant.to_owned(), name.to_owned(), doc[name].as_f64().unwrap()));
        }
    }
    out
}

#[tokio::test]
async fn the_slo_is_judged_once_per_released_reminder_per_tenant() {
    // due.json became due at 14:00; the clock says 14:05 and the provider answers 50 ms
    // later: accepted 300.05 s after deliver_after. Within 301 s that is met ...
    let mut r = rig();
    r.deps.slo = punctual_core::slo::SloPolicy::parse(None, Some("301")).unwrap();
    let h = r.invoke(load("due.json")).await;
    assert_eq!(slo_counts(&h), [("acme".to_owned(), "SloMet".to_owned(), 1.0)]);
    // ... and within the default 300 s the same delivery breaches it.
    let h = rig().invoke(load("due.json")).await;
    assert_eq!(slo_counts(&h), [("acme".to_owned(), "SloBreached".to_owned(), 1.0)]);
    // Expired: breached, with no provider call.
    let h = rig().invoke(load("expired.json")).await;
    assert!(slo_counts(&h).iter().all(|(_, m, _)| m == "SloBreached"), "{:?}", slo_counts(&h));
    assert_eq!(slo_counts(&h).len(), 1);
    // A redrive's copy was judged when it was dead-lettered: no second verdict.
    let h = rig().invoke(load("redriven.json")).await;
    assert!(slo_counts(&h).is_empty(), "{:?}", slo_counts(&h));
    // Not yet due: no verdict yet.
    let h = rig().invoke(load("not-yet-due.json")).await;
    assert!(slo_counts(&h).is_empty());
}

#[tokio::test]
async fn found_by_review_a_message_failing_on_its_last_receive_is_breached_once() {
    // The ledger refuses every claim (an outage): each receive fails and SQS redelivers; on
    // the 5th (the lanes' maxReceiveCount) SQS's own redrive policy moves it to the DLQ next,
    // with no decision of the sender's. That receive, and only that one, counts it breached.
    let at = |n: &str, file: &str| {
        let mut e = load(file);
        e.records[0].attributes.insert("ApproximateReceiveCount".into(), n.into());
        e
    };
    for (n, file, want) in [("4", "due.json", 0usize), ("5", "due.json", 1), ("5", "redriven.json", 0)] {
        let r = rig_with(FaultyLedger::new(MemoryLedger::new(), Fault::ClaimRefused, 10), vec![]);
        let h = r.invoke(at(n, file)).await;
        assert_eq!(h.response.batch_item_failures.len(), 1, "the outage fails the record");
        let breached: Vec<_> = slo_counts(&h).into_iter().filter(|(_, m, _)| m == "SloBreached").collect();
        assert_eq!(breached.len(), want, "receive {n} of {file}: {breached:?}");
    }
}
