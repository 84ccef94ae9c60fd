//! The sender end to end on real parts: the real AWS SDK against the emulator (SQS, DynamoDB),
//! the real HTTP client against the provider double on loopback, the real handler. Each test
//! asserts what the provider saw.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use chrono::{DateTime, TimeDelta, Utc};
use lambda_runtime::{Context, LambdaEvent};
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::renewals::DynamoRenewals;
use punctual_aws::sqs::{SqsQueues, attr};
use punctual_core::ReminderMessage;
use punctual_core::backoff::Backoff;
use punctual_core::clock::{Clock, ManualClock};
use punctual_core::decision::SenderPolicy;
use punctual_core::limiter::{LimiterSettings, SharedLimiter};
use punctual_core::ports::Ledger;
use punctual_core::reason::ReminderState;
use punctual_core::secret::Secret;
use punctual_core::sender::{Sender, SenderSettings};
use punctual_core::testing::{Fault, FaultyLedger, MemorySlotStore};
use punctual_provider::HttpProvider;
use punctual_provider_double::{Behaviour, Config, Double, Stats};
use punctual_sender::handler::{Deps, Handled, handle};
use punctual_tests::sdk_config;
use punctual_tests::stack::{Stack, sqs_event};

const TOKEN: &str = "integration-token-7f3a";

type RealDeps<L> =
    Deps<Sender<L, DynamoRenewals, SharedLimiter<MemorySlotStore, ManualClock>, HttpProvider, SqsQueues, ManualClock>>;

struct Rig<L> {
    stack: Stack,
    double: Double,
    clock: ManualClock,
    deps: RealDeps<L>,
}

fn settings() -> SenderSettings {
    SenderSettings {
        policy: SenderPolicy {
            backoff: Backoff { base: Duration::from_millis(500), cap: Duration::from_secs(5) },
            max_attempts: 5,
            invocation_margin: Duration::from_millis(200),
            min_call_timeout: Duration::from_millis(100),
            max_call_timeout: Duration::from_millis(400),
            ..SenderPolicy::default()
        },
        ..SenderSettings::default()
    }
}

async fn rig_with<L: Ledger>(name: &str, wrap: impl FnOnce(DynamoLedger) -> L) -> Rig<L> {
    let config = sdk_config().await;
    let stack = Stack::create(&config, name).await.unwrap();
    let double = Double::start(Config { token: Some(TOKEN.into()), ..Config::default() }, 0).await.unwrap();
    // Millisecond precision, as the ledger stores instants.
    let clock = ManualClock::new(DateTime::<Utc>::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap());
    let provider = HttpProvider::new(&double.url(), &Secret::new(TOKEN), Duration::from_secs(1)).unwrap();
    let renewals = DynamoRenewals::new(stack.ddb.clone(), &stack.renewals_table);
    let sender = Sender::new(
        wrap(DynamoLedger::new(stack.ddb.clone(), &stack.ledger_table)),
        renewals,
        SharedLimiter::new(MemorySlotStore::default(), clock.clone(), LimiterSettings::new(100.0), 1),
        provider,
        stack.queues.clone(),
        clock.clone(),
        settings(),
        42,
    );
    Rig { stack, double, clock, deps: Deps { sender, concurrency: 4, slo: Default::default(), max_receive_count: 5 } }
}

async fn rig(name: &str) -> Rig<DynamoLedger> {
    rig_with(name, |l| l).await
}

use punctual_core::testing::message;

impl<L: Ledger> Rig<L> {
    /// A due message for an active renewal, sent to the send queue.
    async fn enqueue(&self, n: &str) -> ReminderMessage {
        let now = self.clock.now();
        let m = message(n, now - TimeDelta::minutes(1), now + TimeDelta::hours(2));
        self.activate(&m).await;
        self.send_body(&m.encode()).await;
        m
    }

    async fn activate(&self, m: &ReminderMessage) {
        DynamoRenewals::new(self.stack.ddb.clone(), &self.stack.renewals_table)
            .put(&m.tenant_id, &m.renewal_id, "active", "recipient-ref-1", "email")
            .await
            .unwrap();
    }

    async fn send_body(&self, body: &str) {
        self.stack.sqs.send_message().queue_url(self.stack.queues.send_url()).message_body(body).send().await.unwrap();
    }

    /// Plays the event source mapping once: receive a batch, invoke, delete what succeeded.
    async fn drain_once(&self, wait: Duration) -> Option<Handled> {
        let msgs = self.stack.queues.receive(self.stack.queues.send_url(), 10, wait).await.unwrap();
        if msgs.is_empty() {
            return None;
        }
        let event = sqs_event(&msgs, "arn:aws:sqs:us-east-1:000000000000:send").unwrap();
        let mut ctx = Context::default();
        ctx.request_id = "req".into();
        ctx.deadline = u64::try_from((self.clock.now() + TimeDelta::seconds(30)).timestamp_millis()).unwrap();
        let handled = handle(&self.deps, LambdaEvent::new(event, ctx)).await.unwrap();
        let failed: Vec<_> = handled.response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
        for m in &msgs {
            if !failed.contains(&m.message_id) {
                self.stack.queues.delete(self.stack.queues.send_url(), &m.receipt_handle).await.unwrap();
            } else {
                // What the visibility timeout would do, without waiting 30 s for it.
                self.stack
                    .queues
                    .change_visibility(self.stack.queues.send_url(), &m.receipt_handle, Duration::ZERO)
                    .await
                    .unwrap();
            }
        }
        Some(handled)
    }

    async fn state(&self, m: &ReminderMessage) -> Option<ReminderState> {
        self.deps.sender.ledger().get(&m.reminder_id).await.unwrap().map(|r| r.state)
    }

    fn stats(&self) -> Stats {
        self.double.stats()
    }
}

fn assert_no_secret(stack_dlq: &[punctual_aws::sqs::Received]) {
    for m in stack_dlq {
        assert!(!m.body.contains(TOKEN));
        assert!(m.attributes.iter().all(|(_, v)| !v.contains(TOKEN)), "{:?}", m.attributes);
    }
}

#[tokio::test]
async fn happy_path_delivers_once() {
    let r = rig("happy").await;
    let m = r.enqueue("happy-1").await;
    let h = r.drain_once(Duration::from_secs(2)).await.unwrap();
    assert!(h.response.batch_item_failures.is_empty());
    assert_eq!(r.state(&m).await, Some(ReminderState::Delivered));
    let s = r.stats();
    assert_eq!((s.requests, s.accepted, s.unauthorized, s.missing_key), (1, 1, 0, 0));
    let rec = r.deps.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.receipt.as_deref(), Some("msg-1"), "the provider receipt is stored");
    r.stack.destroy().await;
}

#[tokio::test]
async fn the_same_message_twice_is_accepted_once_and_suppressed_once() {
    let r = rig("dup").await;
    let m = r.enqueue("dup-1").await;
    r.drain_once(Duration::from_secs(2)).await.unwrap();
    r.send_body(&m.encode()).await;
    let h = r.drain_once(Duration::from_secs(2)).await.unwrap();
    let text = h.metrics.lines("p", "sender", 0).join("\n");
    assert!(text.contains("\"SuppressedDuplicates\":1.0"), "{text}");
    let s = r.stats();
    assert_eq!((s.accepted, s.requests), (1, 1), "the duplicate never reached the provider");
    r.stack.destroy().await;
}

#[tokio::test]
async fn a_crash_between_provider_acceptance_and_the_ledger_write_is_recovered_with_the_same_key() {
    let r = rig_with("crash", |l| FaultyLedger::new(l, Fault::LoseDeliveredWrite, 1)).await;
    let m = r.enqueue("crash-1").await;
    let h = r.drain_once(Duration::from_secs(2)).await.unwrap();
    assert_eq!(h.response.batch_item_failures.len(), 1, "the lost write fails the record, so SQS keeps it");
    assert_eq!(r.state(&m).await, Some(ReminderState::Leased));
    // The crashed invocation's lease ends with its deadline; then SQS redelivers.
    r.clock.advance(Duration::from_secs(31));
    r.drain_once(Duration::from_secs(2)).await.unwrap();
    assert_eq!(r.state(&m).await, Some(ReminderState::Delivered));
    let s = r.stats();
    assert_eq!((s.requests, s.accepted, s.distinct_keys, s.duplicate_key_attempts), (2, 1, 1, 1));
    r.stack.destroy().await;
}

#[tokio::test]
async fn a_429_with_retry_after_7_is_deferred_at_least_7_seconds_not_dead_lettered() {
    let r = rig("throttle").await;
    r.double.script([Behaviour { status: Some(429), retry_after: Some("7".into()), ..Behaviour::default() }]);
    let m = r.enqueue("throttle-1").await;
    let decided_at = r.clock.now();
    r.drain_once(Duration::from_secs(2)).await.unwrap();
    let rec = r.deps.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.attempts), (ReminderState::Deferred, 1));
    assert!(rec.next_at.unwrap() >= decided_at + TimeDelta::seconds(7), "next_at {:?}", rec.next_at);
    // The copy waits on the queue, delayed: nothing is receivable now.
    assert_eq!(
        r.stack
            .queue_count(r.stack.queues.send_url(), QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .await
            .unwrap(),
        1
    );
    assert!(r.stack.queues.receive(r.stack.queues.send_url(), 10, Duration::ZERO).await.unwrap().is_empty());
    assert!(r.stack.dlq_messages().await.unwrap().is_empty());
    assert_eq!((r.stats().throttled, r.stats().accepted), (1, 0));
    r.stack.destroy().await;
}

#[tokio::test]
async fn past_the_deadline_goes_to_the_dlq_and_the_provider_is_never_called() {
    let r = rig("expired").await;
    let now = r.clock.now();
    let m = message("expired-1", now - TimeDelta::hours(3), now - TimeDelta::minutes(1));
    r.activate(&m).await;
    r.send_body(&m.encode()).await;
    r.drain_once(Duration::from_secs(2)).await.unwrap();
    let dlq = r.stack.dlq_messages().await.unwrap();
    assert_eq!(dlq.len(), 1);
    let attrs: std::collections::HashMap<_, _> = dlq[0].attributes.iter().cloned().collect();
    assert_eq!(attrs.get(attr::REASON).map(String::as_str), Some("business_deadline_expired"));
    assert_eq!(attrs.get(attr::REMINDER_ID).map(String::as_str), Some(m.reminder_id.as_str()));
    assert!(attrs.contains_key(attr::ORIGINAL_MESSAGE_ID) && attrs.contains_key(attr::FIRST_ENQUEUED));
    assert_eq!(dlq[0].body, m.encode(), "the DLQ keeps the original body for a redrive");
    assert_eq!(r.state(&m).await, Some(ReminderState::Expired));
    assert_eq!(r.stats().requests, 0);
    assert_no_secret(&dlq);
    r.stack.destroy().await;
}

#[tokio::test]
async fn a_400_is_dead_lettered_as_classified_permanent() {
    let r = rig("permanent").await;
    r.double.script([Behaviour { status: Some(400), ..Behaviour::default() }]);
    let m = r.enqueue("permanent-1").await;
    r.drain_once(Duration::from_secs(2)).await.unwrap();
    let dlq = r.stack.dlq_messages().await.unwrap();
    let attrs: std::collections::HashMap<_, _> = dlq[0].attributes.iter().cloned().collect();
    assert_eq!(attrs.get(attr::REASON).map(String::as_str), Some("classified_permanent"));
    assert_eq!(attrs.get(attr::PROVIDER_STATUS).map(String::as_str), Some("400"));
    assert_eq!(attrs.get(attr::ATTEMPTS).map(String::as_str), Some("1"));
    assert_eq!(r.state(&m).await, Some(ReminderState::DeadLettered));
    assert_eq!((r.stats().requests, r.stats().accepted), (1, 0));
    assert_no_secret(&dlq);
    r.stack.destroy().await;
}

#[tokio::test]
async fn a_timeout_is_retried_with_the_same_key() {
    let r = rig("timeout").await;
    r.double.script([Behaviour { slow_ms: Some(1_000), ..Behaviour::default() }]);
    let m = r.enqueue("timeout-1").await;
    r.drain_once(Duration::from_secs(2)).await.unwrap();
    let rec = r.deps.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.last_reason.map(|x| x.as_str())),
        (ReminderState::Deferred, Some("provider_indeterminate"))
    );
    // The requeued copy becomes visible after its (whole-second) delay.
    r.clock.set(rec.next_at.unwrap());
    let mut delivered = false;
    for _ in 0..5 {
        if r.drain_once(Duration::from_secs(2)).await.is_some() {
            delivered = true;
            break;
        }
    }
    assert!(delivered, "the deferred copy came back");
    let rec = r.deps.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.attempts), (ReminderState::Delivered, 2));
    let s = r.stats();
    assert_eq!((s.requests, s.accepted, s.duplicate_key_attempts), (2, 1, 1), "same key: one delivery");
    r.stack.destroy().await;
}

#[tokio::test]
async fn a_malformed_message_goes_to_the_dlq_and_the_rest_of_the_batch_succeeds() {
    let r = rig("poison").await;
    let a = r.enqueue("poison-a").await;
    r.send_body("{\"v\":1,\"reminder_id\":42}").await;
    let b = r.enqueue("poison-b").await;
    let mut handled = 0;
    while let Some(h) = r.drain_once(Duration::from_secs(1)).await {
        assert!(h.response.batch_item_failures.is_empty(), "a poison message never fails its batch");
        handled += 1;
        assert!(handled < 5);
    }
    let dlq = r.stack.dlq_messages().await.unwrap();
    assert_eq!(dlq.len(), 1);
    let attrs: std::collections::HashMap<_, _> = dlq[0].attributes.iter().cloned().collect();
    assert_eq!(attrs.get(attr::REASON).map(String::as_str), Some("malformed"));
    assert_eq!(
        attrs.get(attr::DETAIL).map(String::as_str),
        Some("field `reminder_id` must be a string, found a number")
    );
    assert_eq!(r.state(&a).await, Some(ReminderState::Delivered));
    assert_eq!(r.state(&b).await, Some(ReminderState::Delivered));
    assert_eq!(r.stats().accepted, 2);
    r.stack.destroy().await;
}
