//! The sender service over in-memory ports and a manual clock.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use punctual_core::clock::{Clock, ManualClock};
use punctual_core::decision::Disposition;
use punctual_core::ports::Ledger;
use punctual_core::provider::{ProviderOutcome, RetryAfter};
use punctual_core::sender::Received;
use punctual_core::testing::{Fault, FaultyLedger, MemoryLedger, MemoryQueue, ScriptedProvider};
use punctual_core::{ReasonCode, ReminderMessage, ReminderState};

type TestSender<L> = punctual_core::testing::ScriptedSender<L>;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T14:00:00Z").unwrap().with_timezone(&Utc)
}

fn message() -> ReminderMessage {
    punctual_core::testing::message("1", t0(), t0() + TimeDelta::hours(2))
}

struct Rig<L> {
    clock: ManualClock,
    queue: MemoryQueue,
    provider: ScriptedProvider<ManualClock>,
    sender: TestSender<L>,
}

fn rig_with<L: punctual_core::ports::Ledger>(ledger: L, script: Vec<ProviderOutcome>) -> Rig<L> {
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let (sender, queue, provider) =
        punctual_core::testing::scripted_sender(ledger, &clock, Duration::from_millis(100), script, 7);
    Rig { clock, queue, provider, sender }
}

fn rig(script: Vec<ProviderOutcome>) -> Rig<MemoryLedger> {
    rig_with(MemoryLedger::new(), script)
}

impl<L: punctual_core::ports::Ledger> Rig<L> {
    async fn process(
        &self,
        body: &str,
    ) -> Result<punctual_core::sender::Processed, punctual_core::sender::SenderError> {
        let deadline = self.clock.now() + TimeDelta::seconds(30);
        self.sender.process(Received { message_id: "m-1", body }, deadline).await
    }
}

#[tokio::test]
async fn sender_delivers_a_due_reminder_once() {
    let r = rig(vec![]);
    let m = message();
    let p = r.process(&m.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Delivered { attempt: 1, .. }));
    assert_eq!(r.provider.calls().len(), 1);
    assert_eq!(r.provider.calls()[0].0, format!("reminder:{}", m.reminder_id));
    let rec = r.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.state, ReminderState::Delivered);
    assert!(p.delivery_lag.unwrap() >= Duration::from_secs(5));
}

#[tokio::test]
async fn sender_acks_when_reminder_already_delivered() {
    let r = rig(vec![]);
    let body = message().encode();
    r.process(&body).await.unwrap();
    let p = r.process(&body).await.unwrap();
    assert_eq!(p.disposition, Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate });
    assert_eq!(r.provider.calls().len(), 1, "a duplicate must never reach the provider");
}

#[tokio::test]
async fn a_crash_after_the_provider_accepted_is_recovered_with_the_same_key() {
    let r = rig_with(FaultyLedger::new(MemoryLedger::new(), Fault::LoseDeliveredWrite, 1), vec![]);
    let m = message();
    assert!(r.process(&m.encode()).await.is_err(), "the lost ledger write fails the message, so SQS redelivers it");
    // The crashed invocation's lease blocks until it ends.
    let p = r.process(&m.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Defer { reason: ReasonCode::ClaimedElsewhere, .. }), "{p:?}");
    r.clock.advance(Duration::from_secs(31));
    let p = r.process(&m.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Delivered { .. }), "{p:?}");
    let keys: Vec<_> = r.provider.calls().into_iter().map(|c| c.0).collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1], "the redelivery must reuse the idempotency key");
    let rec = r.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.state, ReminderState::Delivered);
}

#[tokio::test]
async fn a_429_with_retry_after_is_deferred_at_least_that_long() {
    let r = rig(vec![ProviderOutcome::Transient { status: Some(429), retry_after: RetryAfter::parse("7") }]);
    let m = message();
    let p = r.process(&m.encode()).await.unwrap();
    assert!(matches!(
        p.disposition,
        Disposition::Defer { reason: ReasonCode::ProviderRetryAfter, attempts_made: 1, .. }
    ));
    assert!(p.throttled);
    let requeued = r.queue.requeued();
    assert_eq!(requeued.len(), 1);
    assert!(requeued[0].1 >= Duration::from_secs(7), "{:?}", requeued[0].1);
    assert_eq!(requeued[0].0.attempt, 1, "the copy carries the attempt count");
    assert!(r.queue.dead().is_empty());
    let rec = r.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.attempts, rec.owner), (ReminderState::Deferred, 1, None));
}

#[tokio::test]
async fn an_expired_reminder_goes_to_the_dlq_without_a_provider_call() {
    let r = rig(vec![]);
    r.clock.set(t0() + TimeDelta::hours(3));
    let m = message();
    let p = r.process(&m.encode()).await.unwrap();
    assert_eq!(p.disposition, Disposition::Expire { attempts_made: 0 });
    assert!(r.provider.calls().is_empty());
    let dead = r.queue.dead();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, ReasonCode::BusinessDeadlineExpired);
    assert_eq!(dead[0].body, m.encode(), "the DLQ keeps the original body");
    let rec = r.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.state, ReminderState::Expired);
}

#[tokio::test]
async fn a_permanent_4xx_is_dead_lettered_with_its_status() {
    let r = rig(vec![ProviderOutcome::Permanent { status: 400 }]);
    r.process(&message().encode()).await.unwrap();
    let dead = r.queue.dead();
    assert_eq!(
        (dead[0].reason, dead[0].provider_status, dead[0].attempts),
        (ReasonCode::ClassifiedPermanent, Some(400), 1)
    );
}

#[tokio::test]
async fn a_malformed_body_is_dead_lettered_with_its_specific_detail() {
    let r = rig(vec![]);
    let p = r.process("{\"v\": 7}").await.unwrap();
    assert_eq!(p.reminder_id, None);
    let dead = r.queue.dead();
    assert_eq!(dead[0].reason, ReasonCode::Malformed);
    assert_eq!(dead[0].detail, "unsupported contract version 7 (this build understands version 1)");
    assert_eq!(dead[0].body, "{\"v\": 7}");
    assert!(r.provider.calls().is_empty());
}

#[tokio::test]
async fn a_message_released_early_is_requeued_until_due_without_a_ledger_write() {
    let r = rig(vec![]);
    r.clock.set(t0() - TimeDelta::seconds(40));
    let m = message();
    let p = r.process(&m.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Defer { reason: ReasonCode::NotDue, .. }));
    assert_eq!(r.queue.requeued()[0].1, Duration::from_secs(40));
    assert_eq!(r.sender.ledger().get(&m.reminder_id).await.unwrap(), None);
}

#[tokio::test]
async fn a_timeout_is_retried_with_the_same_key_and_never_dead_lettered_as_permanent() {
    let r = rig(vec![ProviderOutcome::Indeterminate { status: None }]);
    let m = message();
    let p = r.process(&m.encode()).await.unwrap();
    let Disposition::Defer { reason, until, .. } = p.disposition else { panic!("{p:?}") };
    assert_eq!(reason, ReasonCode::ProviderIndeterminate);
    r.clock.set(until);
    let copy = r.queue.requeued()[0].0.encode();
    let p = r.process(&copy).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Delivered { attempt: 2, .. }), "{p:?}");
    let keys: Vec<_> = r.provider.calls().into_iter().map(|c| c.0).collect();
    assert_eq!(keys, [keys[0].clone(), keys[0].clone()]);
}

/// An at-least-once copy of a reminder that was already delivered, received after
/// `deliver_by`, is a duplicate: acknowledged, never dead-lettered as expired, and the ledger
/// keeps `delivered` (I7: the DLQ never holds a delivered reminder).
#[tokio::test]
async fn a_late_copy_of_a_delivered_reminder_is_acknowledged_not_expired() {
    let r = rig(vec![]);
    let m = message();
    let p = r.process(&m.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Delivered { .. }), "{p:?}");
    r.clock.set(m.deliver_by + TimeDelta::seconds(1));
    let p = r.process(&m.encode()).await.unwrap();
    assert_eq!(
        p.disposition,
        Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate },
        "a late duplicate of a delivered reminder"
    );
    assert!(r.queue.dead().is_empty(), "false DLQ entry: {:?}", r.queue.dead());
    let rec = r.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.state, ReminderState::Delivered);
    assert_eq!(r.provider.calls().len(), 1);
}

/// A late copy of a reminder that ended otherwise: a cancelled one is acknowledged (nothing
/// is owed), a dead-lettered one too (a duplicate: its letter is in the DLQ; a redrive's copy
/// carries its own stamp, see `a_late_redriven_copy_records_the_expiry_it_dead_letters`) — and
/// neither terminal state is overwritten by an expiry.
#[tokio::test]
async fn a_late_copy_never_overwrites_a_cancelled_or_dead_lettered_reminder() {
    use punctual_core::ports::{OwnerToken, Settlement};
    let r = rig(vec![]);
    let ended = |name: &str| punctual_core::testing::message(name, t0(), t0() + TimeDelta::hours(2));
    let (cancelled, dead) = (ended("c"), ended("d"));
    for (m, state, reason) in [
        (&cancelled, ReminderState::Cancelled, ReasonCode::Cancelled),
        (&dead, ReminderState::DeadLettered, ReasonCode::ClassifiedPermanent),
    ] {
        let owner = OwnerToken::new("earlier");
        let ledger = r.sender.ledger();
        ledger.claim(m, &owner, t0(), t0() + TimeDelta::seconds(30)).await.unwrap();
        let s = Settlement {
            state,
            reason: Some(reason),
            attempts: 1,
            receipt: None,
            provider_status: None,
            next_at: None,
        };
        ledger.settle(m, Some(&owner), t0() + TimeDelta::seconds(1), &s).await.unwrap();
    }
    r.clock.set(t0() + TimeDelta::hours(3));

    let p = r.process(&cancelled.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Acknowledge { .. }), "{p:?}");
    let rec = r.sender.ledger().get(&cancelled.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.state, ReminderState::Cancelled, "an expiry overwrote cancelled");

    let p = r.process(&dead.encode()).await.unwrap();
    assert_eq!(p.disposition, Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate }, "{p:?}");
    let rec = r.sender.ledger().get(&dead.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.state, ReminderState::DeadLettered, "an expiry overwrote dead_lettered");
    assert!(r.queue.dead().is_empty(), "a second letter: {:?}", r.queue.dead());
    assert!(r.provider.calls().is_empty());
}

/// A 503 with `Retry-After` is the provider saying "slow down" as plainly as a 429: the shared
/// limiter must hear it (its rate is cut and the schedule paused), not only this reminder.
#[tokio::test]
async fn a_503_with_retry_after_slows_the_shared_limiter_too() {
    use punctual_core::limiter::SlotStore;
    let r = rig(vec![ProviderOutcome::Transient { status: Some(503), retry_after: RetryAfter::parse("7") }]);
    let t = r.clock.now();
    let p = r.process(&message().encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Defer { reason: ReasonCode::ProviderRetryAfter, .. }), "{p:?}");
    let view = r.sender.limiter().store().view("provider#main").await.unwrap().unwrap_or_default();
    assert!(view.cut_rate.is_some(), "the limiter was not told about the 503: {view:?}");
    assert!(
        view.paused_until_ms >= (t + TimeDelta::seconds(7)).timestamp_millis(),
        "the shared schedule is not paused by the 503's Retry-After: {view:?}"
    );
}

/// A 401 that survives the client's fresh token read is not the reminder's fault: nothing is
/// dead-lettered, no attempt is spent, and the fleet is paused (audited, owned by the sender)
/// for an operator; the next message is then held by the pause without reaching the provider.
#[tokio::test]
async fn a_persistent_401_pauses_the_fleet_and_dead_letters_nothing() {
    use punctual_core::pause::{PauseGate, SENDER_OWNER};
    use punctual_core::ports::Control;
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let control = punctual_core::testing::MemoryControl::default();
    let (sender, queue, provider) = punctual_core::testing::scripted_sender(
        MemoryLedger::new(),
        &clock,
        Duration::from_millis(100),
        vec![ProviderOutcome::Permanent { status: 401 }],
        7,
    );
    let sender = sender.with_pause(PauseGate::new(control.clone(), clock.clone(), Duration::ZERO));
    let deadline = clock.now() + TimeDelta::seconds(30);
    let m = message();
    let p = sender.process(Received { message_id: "m-1", body: &m.encode() }, deadline).await.unwrap();
    let Disposition::Defer { reason, attempts_made, provider_status, .. } = p.disposition else {
        panic!("deferred, not {:?}", p.disposition);
    };
    assert_eq!((reason, attempts_made, provider_status), (ReasonCode::ProviderCredentials, 1, Some(401)));
    assert!(queue.dead().is_empty(), "nothing dead-lettered");
    let pause = control.pause().await.unwrap().expect("the fleet is paused");
    assert_eq!(pause.owner, SENDER_OWNER);
    assert!(pause.reason.contains("401"), "{}", pause.reason);
    // The next message is held by the pause: the provider is not called again.
    let other = punctual_core::testing::message("2", t0(), t0() + TimeDelta::hours(2));
    let p = sender.process(Received { message_id: "m-2", body: &other.encode() }, deadline).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Defer { reason: ReasonCode::OperatorPause, .. }), "{p:?}");
    assert_eq!(provider.calls().len(), 1);
}

/// Open item: a pause holds sending, not bookkeeping. A copy held past its
/// `deliver_by` is expired (a letter an operator can see, counted late) instead of being
/// requeued every minute for as long as the pause lasts; the provider is not called.
#[tokio::test]
async fn a_pause_expires_a_copy_past_its_deadline_instead_of_holding_it() {
    use punctual_core::pause::PauseGate;
    use punctual_core::ports::Control;
    let clock = ManualClock::new(t0() + TimeDelta::hours(3));
    let control = punctual_core::testing::MemoryControl::default();
    let ops = punctual_core::ports::Pause { reason: "maintenance".into(), owner: "ops".into(), since: clock.now() };
    control.set_pause(Some(&ops), "ops").await.unwrap();
    let (sender, queue, provider) = punctual_core::testing::scripted_sender(
        MemoryLedger::new(),
        &clock,
        Duration::from_millis(100),
        vec![ProviderOutcome::Accepted { status: 202, receipt: None, budget: None }],
        7,
    );
    let sender = sender.with_pause(PauseGate::new(control.clone(), clock.clone(), Duration::ZERO));
    let late = punctual_core::testing::message("late", t0(), t0() + TimeDelta::hours(2));
    let deadline = clock.now() + TimeDelta::seconds(30);
    let p = sender.process(Received { message_id: "m-1", body: &late.encode() }, deadline).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Expire { .. }), "held past its deadline: {p:?}");
    assert!(queue.requeued().is_empty(), "requeued while paused: {:?}", queue.requeued());
    assert_eq!(queue.dead().len(), 1, "its business_deadline_expired letter");
    assert!(provider.calls().is_empty());
    // A copy still inside its window is held, as before.
    let due = punctual_core::testing::message("due", t0(), t0() + TimeDelta::hours(5));
    let p = sender.process(Received { message_id: "m-2", body: &due.encode() }, deadline).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Defer { reason: ReasonCode::OperatorPause, .. }), "{p:?}");
}

/// Other permanent answers still quarantine: only 401 pauses. A 403 is as often about the
/// request (a recipient, a channel) as about the token: one bad renewal must not stop every
/// delivery.
#[tokio::test]
async fn a_400_or_a_403_is_still_classified_permanent() {
    for status in [400, 403] {
        let r = rig(vec![ProviderOutcome::Permanent { status }]);
        let p = r.process(&message().encode()).await.unwrap();
        let reason = match p.disposition {
            Disposition::Quarantine { reason, .. } => Some(reason),
            _ => None,
        };
        assert_eq!(reason, Some(ReasonCode::ClassifiedPermanent), "{status}: {p:?}");
    }
}

// ---- a provider without idempotency keys, account refusals, remaining budgets (#18) -------

fn keyless(
    ledger: MemoryLedger,
    script: Vec<ProviderOutcome>,
    indeterminate: punctual_core::provider::IndeterminatePolicy,
) -> Rig<MemoryLedger> {
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let provider = ScriptedProvider::new(clock.clone(), Duration::from_millis(100), script).without_keys();
    let mut settings = punctual_core::sender::SenderSettings::default();
    settings.policy.indeterminate = indeterminate;
    let (sender, queue, provider) = punctual_core::testing::scripted_sender_over(ledger, &clock, provider, settings, 7);
    Rig { clock, queue, provider, sender }
}

/// A worker claimed, marked its call and died: its lease has ended with the outcome unknown.
async fn dead_worker_mid_call(ledger: &MemoryLedger, clock: &ManualClock, m: &ReminderMessage) {
    let dead = punctual_core::ports::OwnerToken::new("dead-worker");
    let lease = clock.now() + TimeDelta::seconds(10);
    ledger.claim(m, &dead, clock.now(), lease).await.unwrap();
    assert!(ledger.mark_call(m, &dead, clock.now()).await.unwrap());
    clock.advance(Duration::from_secs(11));
}

#[tokio::test]
async fn without_keys_an_unknown_outcome_is_quarantined_never_resent_under_at_most_once() {
    use punctual_core::provider::IndeterminatePolicy::AtMostOnce;
    // The call timed out: it may have been applied.
    let r = keyless(MemoryLedger::new(), vec![ProviderOutcome::Indeterminate { status: None }], AtMostOnce);
    let m = message();
    let p = r.process(&m.encode()).await.unwrap();
    assert!(
        matches!(p.disposition, Disposition::Quarantine { reason: ReasonCode::ProviderIndeterminate, .. }),
        "{p:?}"
    );
    assert_eq!(r.queue.dead().len(), 1);
    assert!(r.queue.requeued().is_empty(), "nothing comes back to call again");
    // A duplicate copy of the message claims nothing and calls nothing.
    let again = r.process(&m.encode()).await.unwrap();
    assert!(matches!(again.disposition, Disposition::Acknowledge { .. }), "{again:?}");
    assert_eq!(r.provider.calls().len(), 1);
    assert!(!p.possible_double);

    // A worker died mid-call: the next copy learns it from the ledger and does not call.
    let ledger = MemoryLedger::new();
    let r = keyless(ledger.clone(), vec![], AtMostOnce);
    dead_worker_mid_call(&ledger, &r.clock, &m).await;
    let p = r.process(&m.encode()).await.unwrap();
    assert!(
        matches!(p.disposition, Disposition::Quarantine { reason: ReasonCode::ProviderIndeterminate, .. }),
        "{p:?}"
    );
    assert!(r.provider.calls().is_empty(), "no second call to a provider without keys");
    let rec = ledger.get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.state, ReminderState::DeadLettered);
    assert_eq!(rec.call_owner.as_deref(), Some("dead-worker"), "the unknown call stays on record");
}

#[tokio::test]
async fn without_keys_at_least_once_resends_and_counts_the_possible_double() {
    use punctual_core::provider::IndeterminatePolicy::AtLeastOnce;
    let r = keyless(MemoryLedger::new(), vec![ProviderOutcome::Indeterminate { status: Some(500) }], AtLeastOnce);
    let p = r.process(&message().encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Defer { reason: ReasonCode::ProviderIndeterminate, .. }), "{p:?}");
    assert!(!p.possible_double, "counted once, at the resend");
    // The requeued copy is the resend: counted there, once.
    let (copy, delay) = r.queue.requeued().pop().unwrap();
    r.clock.advance(delay);
    let p = r.process(&copy.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Delivered { .. }), "{p:?}");
    assert!(p.possible_double, "the resend may double the effect");

    let ledger = MemoryLedger::new();
    let r = keyless(ledger.clone(), vec![], AtLeastOnce);
    let m = message();
    dead_worker_mid_call(&ledger, &r.clock, &m).await;
    let p = r.process(&m.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Delivered { .. }), "{p:?}");
    assert!(p.possible_double);
    assert_eq!(r.provider.calls().len(), 1);
    assert_eq!(ledger.get(&m.reminder_id).await.unwrap().unwrap().call_owner, None, "settled: mark cleared");
}

#[tokio::test]
async fn a_keyed_provider_needs_no_call_mark() {
    let ledger = MemoryLedger::new();
    let r = rig_with(ledger.clone(), vec![ProviderOutcome::Indeterminate { status: None }]);
    let m = message();
    let p = r.process(&m.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Defer { reason: ReasonCode::ProviderIndeterminate, .. }));
    assert_eq!(ledger.get(&m.reminder_id).await.unwrap().unwrap().call_owner, None);
    assert!(!p.possible_double);
}

#[tokio::test]
async fn an_account_refusal_pauses_the_fleet_like_a_401() {
    use punctual_core::pause::PauseGate;
    use punctual_core::ports::Control;
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let control = punctual_core::testing::MemoryControl::default();
    let blocked = ProviderOutcome::AccountBlocked { detail: "SES AccountSuspendedException".into() };
    let (sender, queue, _) = punctual_core::testing::scripted_sender(
        MemoryLedger::new(),
        &clock,
        Duration::from_millis(100),
        vec![blocked],
        7,
    );
    let sender = sender.with_pause(PauseGate::new(control.clone(), clock.clone(), Duration::ZERO));
    let p = sender
        .process(Received { message_id: "m-1", body: &message().encode() }, clock.now() + TimeDelta::seconds(30))
        .await
        .unwrap();
    assert!(matches!(p.disposition, Disposition::Defer { reason: ReasonCode::ProviderAccount, .. }), "{p:?}");
    assert!(queue.dead().is_empty());
    let pause = control.pause().await.unwrap().expect("paused");
    assert!(pause.reason.contains("AccountSuspended"), "{}", pause.reason);
}

#[tokio::test]
async fn a_missing_recipient_is_quarantined_with_its_own_reason_and_no_attempt() {
    let r = rig(vec![ProviderOutcome::Undeliverable {
        reason: ReasonCode::RecipientUnknown,
        detail: "no address for recipient_ref r-1".into(),
    }]);
    let p = r.process(&message().encode()).await.unwrap();
    match p.disposition {
        Disposition::Quarantine { reason, attempts_made, .. } => {
            assert_eq!((reason, attempts_made), (ReasonCode::RecipientUnknown, 0));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_empty_window_pauses_the_limiter_before_the_provider_answers_429() {
    use punctual_core::provider::RateBudget;
    let spent = RateBudget { remaining: 0, reset: Duration::from_secs(3) };
    let r = rig(vec![ProviderOutcome::Accepted { status: 202, receipt: None, budget: Some(spent) }]);
    r.process(&message().encode()).await.unwrap();
    assert_eq!(r.sender.limiter().stats().budget_pauses, 1);
    // A 1 s window's "reset: 1" may mean 5 ms: never a pause of the whole schedule for it.
    let short = RateBudget { remaining: 0, reset: Duration::from_secs(1) };
    let r = rig(vec![ProviderOutcome::Accepted { status: 202, receipt: None, budget: Some(short) }]);
    r.process(&message().encode()).await.unwrap();
    assert_eq!(r.sender.limiter().stats().budget_pauses, 0);
    // A window with room left changes nothing.
    let room = RateBudget { remaining: 90, reset: Duration::from_secs(1) };
    let r = rig(vec![ProviderOutcome::Accepted { status: 202, receipt: None, budget: Some(room) }]);
    r.process(&message().encode()).await.unwrap();
    let s = r.sender.limiter().stats();
    assert_eq!((s.budget_pauses, s.budget_cuts), (0, 0));
}

// ---- review findings on the keyless path (each failed before its fix) ---------------------

/// The operator's decision covers the unknown call it was about, not one a copy of the same
/// redrive makes afterwards: a second unknown call is quarantined again, never resent.
#[tokio::test]
async fn a_redrive_decision_covers_only_the_unknown_call_before_it() {
    use punctual_core::provider::IndeterminatePolicy::AtMostOnce;
    let ledger = MemoryLedger::new();
    let r = keyless(ledger.clone(), vec![], AtMostOnce);
    let m0 = message();
    dead_worker_mid_call(&ledger, &r.clock, &m0).await;
    let p = r.process(&m0.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Quarantine { reason: ReasonCode::ProviderIndeterminate, .. }));
    // The operator redrives it naming the reason: the resend is allowed over that call...
    let m1 = punctual_core::testing::redriven(&m0, "rd-20261201T100000000-0001", 1, true);
    let w1 = punctual_core::ports::OwnerToken::new("w1");
    let lease = r.clock.now() + TimeDelta::seconds(10);
    let claimed = ledger.claim(&m1, &w1, r.clock.now(), lease).await.unwrap();
    assert_eq!(claimed, punctual_core::decision::ClaimView::Claimed { prior_attempts: 0, unsettled_call: false });
    // ...and its worker marks a call and dies too: the next copy of the same redrive must not
    // call again.
    assert!(ledger.mark_call(&m1, &w1, r.clock.now()).await.unwrap());
    r.clock.advance(Duration::from_secs(11));
    let p = r.process(&m1.encode()).await.unwrap();
    assert!(
        matches!(p.disposition, Disposition::Quarantine { reason: ReasonCode::ProviderIndeterminate, .. }),
        "{p:?}"
    );
    assert!(r.provider.calls().is_empty(), "no second call over an unknown one");
}

/// A limiter write that fails after the provider answered must not lose the answer: with a
/// keyless provider a lost delivery would later be quarantined as unknown and could be resent.
#[tokio::test]
async fn a_failing_limiter_hint_does_not_lose_the_providers_answer() {
    use punctual_core::provider::RateBudget;
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let spent = RateBudget { remaining: 0, reset: Duration::from_secs(5) };
    let provider = ScriptedProvider::new(
        clock.clone(),
        Duration::from_millis(100),
        vec![ProviderOutcome::Accepted { status: 202, receipt: None, budget: Some(spent) }],
    )
    .without_keys();
    let store = punctual_core::testing::FailingPauseStore::default();
    let limiter = punctual_core::limiter::SharedLimiter::new(
        store,
        clock.clone(),
        punctual_core::limiter::LimiterSettings::new(100.0),
        1,
    );
    let queue = MemoryQueue::new();
    let sender = punctual_core::sender::Sender::new(
        MemoryLedger::new(),
        punctual_core::testing::AllActive,
        limiter,
        provider,
        queue,
        clock.clone(),
        punctual_core::sender::SenderSettings::default(),
        7,
    );
    let p = sender
        .process(Received { message_id: "m-1", body: &message().encode() }, clock.now() + TimeDelta::seconds(30))
        .await;
    assert!(matches!(p, Ok(ref p) if matches!(p.disposition, Disposition::Delivered { .. })), "{p:?}");
}

/// The provider client failing before it calls (the SES adapter's recipients read, a builder
/// error) is not an unknown outcome: the next copy may call.
#[tokio::test]
async fn a_client_failure_before_the_call_is_not_an_unknown_outcome() {
    use punctual_core::provider::IndeterminatePolicy::AtMostOnce;
    let ledger = MemoryLedger::new();
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let provider =
        ScriptedProvider::new(clock.clone(), Duration::from_millis(100), vec![]).without_keys().failing_once();
    let mut settings = punctual_core::sender::SenderSettings::default();
    settings.policy.indeterminate = AtMostOnce;
    let (sender, queue, provider) =
        punctual_core::testing::scripted_sender_over(ledger.clone(), &clock, provider, settings, 7);
    let m = message();
    let p = sender
        .process(Received { message_id: "m-1", body: &m.encode() }, clock.now() + TimeDelta::seconds(30))
        .await
        .unwrap();
    assert!(matches!(p.disposition, Disposition::Defer { .. }), "{p:?}");
    assert_eq!(ledger.get(&m.reminder_id).await.unwrap().unwrap().call_owner, None, "the mark is cleared");
    let (copy, delay) = queue.requeued().pop().unwrap();
    clock.advance(delay);
    let p = sender
        .process(Received { message_id: "m-2", body: &copy.encode() }, clock.now() + TimeDelta::seconds(30))
        .await
        .unwrap();
    assert!(matches!(p.disposition, Disposition::Delivered { .. }), "{p:?}");
    assert_eq!(provider.calls().len(), 2, "one failed before calling, one delivered");
}

/// An unknown call found after `deliver_by` is not an expiry (which would count it late and
/// forget the call): the DLQ, as unknown.
#[tokio::test]
async fn an_unknown_call_found_past_the_deadline_is_not_called_expired() {
    use punctual_core::provider::IndeterminatePolicy::AtMostOnce;
    let ledger = MemoryLedger::new();
    let r = keyless(ledger.clone(), vec![], AtMostOnce);
    let m = punctual_core::testing::message("1", t0(), t0() + TimeDelta::seconds(10));
    dead_worker_mid_call(&ledger, &r.clock, &m).await;
    assert!(r.clock.now() >= m.deliver_by);
    let p = r.process(&m.encode()).await.unwrap();
    assert!(
        matches!(p.disposition, Disposition::Quarantine { reason: ReasonCode::ProviderIndeterminate, .. }),
        "{p:?}"
    );
}

// ---- edges ----------------------------------------------------------------------------------

/// A confirmed 401 a minute before `deliver_by` cannot wait for the operator: its letter
/// says the window was missed (counted late), never `classified_permanent`.
#[tokio::test]
async fn a_401_near_the_deadline_is_dead_lettered_as_a_missed_window() {
    let r = rig(vec![ProviderOutcome::Permanent { status: 401 }]);
    let m = punctual_core::testing::message("1", t0(), r.clock.now() + TimeDelta::seconds(50));
    let p = r.process(&m.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Quarantine { reason: ReasonCode::NoSafeRetryWindow, .. }), "{p:?}");
    let dead = r.queue.dead();
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].reason, dead[0].provider_status), (ReasonCode::NoSafeRetryWindow, Some(401)));
    assert!(punctual_core::accounting::is_deadline_reason(dead[0].reason.as_str()), "counted late");
    let rec = r.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.last_reason), (ReminderState::DeadLettered, Some(ReasonCode::NoSafeRetryWindow)));
}

/// Processes `m` and every copy it requeues (advancing the clock by each delay), at most
/// `rounds` times; the last processing's result.
async fn until_settled<L: Ledger>(r: &Rig<L>, m: &ReminderMessage, rounds: usize) -> punctual_core::sender::Processed {
    let mut body = m.encode();
    let mut last = None;
    for _ in 0..rounds {
        let before = r.queue.requeued().len();
        let p = r.process(&body).await.unwrap();
        let done = !matches!(p.disposition, Disposition::Defer { .. });
        last = Some(p);
        if done {
            break;
        }
        let requeued = r.queue.requeued();
        assert_eq!(requeued.len(), before + 1, "a deferral requeues one copy");
        let (copy, delay) = requeued.last().cloned().unwrap();
        r.clock.advance(delay);
        body = copy.encode();
    }
    last.unwrap()
}

/// With a provider without keys, a failure of the client before it calls (the SES
/// adapter's recipients read throttled, say) reaches no provider: it must not spend an
/// attempt. Eight in a row must not dead-letter a reminder that was never sent.
#[tokio::test]
async fn without_keys_failures_before_the_call_spend_no_attempt() {
    use punctual_core::provider::IndeterminatePolicy::AtMostOnce;
    let ledger = MemoryLedger::new();
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let provider = ScriptedProvider::new(clock.clone(), Duration::from_millis(100), vec![]).without_keys().failing(8);
    let mut settings = punctual_core::sender::SenderSettings::default();
    settings.policy.indeterminate = AtMostOnce;
    let (sender, queue, provider) =
        punctual_core::testing::scripted_sender_over(ledger.clone(), &clock, provider, settings, 7);
    let r = Rig { clock, queue, provider, sender };
    let m = message();
    let p = until_settled(&r, &m, 12).await;
    assert!(r.queue.dead().is_empty(), "dead-lettered a reminder never sent: {:?}", r.queue.dead());
    assert!(matches!(p.disposition, Disposition::Delivered { attempt: 1, .. }), "{p:?}");
    assert_eq!(r.provider.calls().len(), 9, "eight failed before calling, one delivered");
    let rec = ledger.get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.attempts), (ReminderState::Delivered, 1));
}

/// A ledger whose next `mark_call` writes the mark, then reports a failure (a timeout whose
/// write happened).
#[derive(Clone)]
struct UncertainMark {
    inner: MemoryLedger,
    left: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Ledger for UncertainMark {
    async fn claim(
        &self,
        msg: &ReminderMessage,
        owner: &punctual_core::ports::OwnerToken,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<punctual_core::decision::ClaimView, punctual_core::ports::LedgerError> {
        self.inner.claim(msg, owner, now, lease_until).await
    }
    async fn settle(
        &self,
        msg: &ReminderMessage,
        owner: Option<&punctual_core::ports::OwnerToken>,
        now: DateTime<Utc>,
        s: &punctual_core::ports::Settlement,
    ) -> Result<punctual_core::ports::SettleOutcome, punctual_core::ports::LedgerError> {
        self.inner.settle(msg, owner, now, s).await
    }
    async fn mark_call(
        &self,
        msg: &ReminderMessage,
        owner: &punctual_core::ports::OwnerToken,
        now: DateTime<Utc>,
    ) -> Result<bool, punctual_core::ports::LedgerError> {
        let marked = self.inner.mark_call(msg, owner, now).await?;
        if self
            .left
            .fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, |n| {
                n.checked_sub(1)
            })
            .is_ok()
        {
            return Err(punctual_core::ports::LedgerError::Unknown("mark timed out after writing".into()));
        }
        Ok(marked)
    }
    async fn get(
        &self,
        id: &punctual_core::ids::ReminderId,
    ) -> Result<Option<punctual_core::ports::LedgerRecord>, punctual_core::ports::LedgerError> {
        self.inner.get(id).await
    }

    async fn append_outcome(
        &self,
        msg: &punctual_core::ReminderMessage,
        event: &punctual_core::outcome::OutcomeEvent,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), punctual_core::ports::LedgerError> {
        self.inner.append_outcome(msg, event, now).await
    }
}

/// The ledger failing on the call mark is a failure before the call too: the worker knows
/// it did not call, so the reminder must not end up quarantined as an unknown outcome
/// (`provider_indeterminate` under `at_most_once`) nor spend an attempt.
#[tokio::test]
async fn without_keys_a_failed_call_mark_is_not_an_unknown_outcome() {
    use punctual_core::provider::IndeterminatePolicy::AtMostOnce;
    let inner = MemoryLedger::new();
    let ledger = UncertainMark { inner: inner.clone(), left: std::sync::Arc::new(1.into()) };
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let provider = ScriptedProvider::new(clock.clone(), Duration::from_millis(100), vec![]).without_keys();
    let mut settings = punctual_core::sender::SenderSettings::default();
    settings.policy.indeterminate = AtMostOnce;
    let (sender, queue, provider) = punctual_core::testing::scripted_sender_over(ledger, &clock, provider, settings, 7);
    let r = Rig { clock, queue, provider, sender };
    let m = message();
    let mut body = m.encode();
    let mut last = None;
    for _ in 0..6 {
        match r.process(&body).await {
            // Left to SQS: the copy comes back after its visibility timeout and the lease.
            Err(_) => r.clock.advance(Duration::from_secs(31)),
            Ok(p) if matches!(p.disposition, Disposition::Defer { .. }) => {
                let (copy, delay) = r.queue.requeued().last().cloned().unwrap();
                r.clock.advance(delay);
                body = copy.encode();
            }
            Ok(p) => {
                last = Some(p);
                break;
            }
        }
    }
    assert!(r.queue.dead().is_empty(), "dead-lettered a reminder never sent: {:?}", r.queue.dead());
    let p = last.expect("settled");
    assert!(matches!(p.disposition, Disposition::Delivered { attempt: 1, .. }), "{p:?}");
    let rec = inner.get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.attempts), (ReminderState::Delivered, 1));
}

/// A reminder dead-lettered `no_safe_retry_window` by this rig (a 503 with 3 s left).
async fn dead_lettered_no_safe_window(r: &Rig<MemoryLedger>) -> ReminderMessage {
    let m = punctual_core::testing::message("1", t0(), r.clock.now() + TimeDelta::seconds(3));
    let p = r.process(&m.encode()).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Quarantine { reason: ReasonCode::NoSafeRetryWindow, .. }), "{p:?}");
    assert_eq!(r.queue.dead().len(), 1);
    m
}

/// A duplicate of a quarantined reminder received after `deliver_by` (SQS at-least-once)
/// is a duplicate: its letter is already in the DLQ. A second letter, as
/// `business_deadline_expired`, would be one that redrive skips forever (past `deliver_by`).
#[tokio::test]
async fn a_late_duplicate_of_a_dead_lettered_reminder_writes_no_second_letter() {
    let r = rig(vec![ProviderOutcome::Transient { status: Some(503), retry_after: None }]);
    let m = dead_lettered_no_safe_window(&r).await;
    r.clock.set(m.deliver_by + TimeDelta::seconds(1));
    let p = r.process(&m.encode()).await.unwrap();
    assert_eq!(p.disposition, Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate });
    let reasons: Vec<_> = r.queue.dead().into_iter().map(|d| d.reason).collect();
    assert_eq!(reasons, [ReasonCode::NoSafeRetryWindow], "one letter per quarantine");
    let rec = r.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.last_reason), (ReminderState::DeadLettered, Some(ReasonCode::NoSafeRetryWindow)));
    assert_eq!(r.provider.calls().len(), 1);
}

/// A redrive's copy that reaches a sender only after `deliver_by` expires the reminder, and
/// the ledger says so — expired, `business_deadline_expired`, a history entry naming the
/// redrive — instead of keeping the old quarantine's reason beside the new letter. A second
/// copy of the same redrive is then a duplicate.
#[tokio::test]
async fn a_late_redriven_copy_records_the_expiry_it_dead_letters() {
    let r = rig(vec![ProviderOutcome::Transient { status: Some(503), retry_after: None }]);
    let m = dead_lettered_no_safe_window(&r).await;
    let copy = punctual_core::testing::redriven(&m, "rd-20261201T140000000-0001", 1, false);
    r.clock.set(m.deliver_by + TimeDelta::seconds(1));
    let p = r.process(&copy.encode()).await.unwrap();
    assert_eq!(p.disposition, Disposition::Expire { attempts_made: 1 }, "{p:?}");
    assert_eq!(p.settle_conflict, None, "the expiry was not recorded");
    let reasons: Vec<_> = r.queue.dead().into_iter().map(|d| d.reason).collect();
    assert_eq!(reasons, [ReasonCode::NoSafeRetryWindow, ReasonCode::BusinessDeadlineExpired]);
    let rec = r.sender.ledger().get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.last_reason), (ReminderState::Expired, Some(ReasonCode::BusinessDeadlineExpired)));
    let last = rec.history.last().unwrap();
    assert_eq!((last.state, last.redrive_id.as_deref()), (ReminderState::Expired, Some("rd-20261201T140000000-0001")));
    // Another copy of the same redrive: a duplicate, no third letter.
    let p = r.process(&copy.encode()).await.unwrap();
    assert_eq!(p.disposition, Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate });
    assert_eq!(r.queue.dead().len(), 2);
}

type ChannelSender = punctual_core::sender::Sender<
    MemoryLedger,
    punctual_core::testing::ActiveOn,
    punctual_core::limiter::SharedLimiter<punctual_core::testing::MemorySlotStore, ManualClock>,
    ScriptedProvider<ManualClock>,
    MemoryQueue,
    ManualClock,
>;

/// A sender with two declared channels, `email` (its own limiter and provider, no pause of its
/// own) and `sms` (its own limiter, `sms`, and the pause `sms_switch`), under the fleet pause
/// `fleet`. Renewals `ren-sms…` are SMS, `ren-fax…` an undeclared channel, the rest email.
fn two_channels(
    clock: &ManualClock,
    ledger: MemoryLedger,
    sms: ScriptedProvider<ManualClock>,
    settings: punctual_core::sender::SenderSettings,
) -> (ChannelSender, MemoryQueue, ScriptedProvider<ManualClock>, [punctual_core::testing::MemoryControl; 2]) {
    use punctual_core::limiter::{LimiterSettings, SharedLimiter};
    use punctual_core::pause::PauseGate;
    use punctual_core::sender::{ChannelRoute, Sender};
    use punctual_core::testing::{ActiveOn, MemoryControl, MemorySlotStore};
    let (fleet, sms_switch) = (MemoryControl::default(), MemoryControl::default());
    let gate = |c: &MemoryControl| PauseGate::new(c.clone(), clock.clone(), Duration::ZERO);
    let limiter = || SharedLimiter::new(MemorySlotStore::default(), clock.clone(), LimiterSettings::new(100.0), 1);
    let email = ScriptedProvider::new(clock.clone(), Duration::from_millis(100), vec![]);
    let queue = MemoryQueue::new();
    let channel_of = |r: &punctual_core::ids::RenewalId| match r.as_str() {
        id if id.starts_with("ren-sms") => "sms",
        id if id.starts_with("ren-fax") => "fax",
        _ => "email",
    };
    let sender =
        Sender::new(ledger, ActiveOn(channel_of), limiter(), email.clone(), queue.clone(), clock.clone(), settings, 7)
            .with_pause(gate(&fleet))
            .with_channels(vec![
                ChannelRoute { name: "email".into(), limiter: limiter(), provider: email.clone(), pause: None },
                ChannelRoute { name: "sms".into(), limiter: limiter(), provider: sms, pause: Some(gate(&sms_switch)) },
            ]);
    (sender, queue, email, [fleet, sms_switch])
}

/// Two declared channels, each with its own limiter, provider and pause: a confirmed 401 on
/// SMS pauses SMS only (email is still delivered and the fleet is not paused), and a renewal on
/// a channel the deployment does not declare is dead-lettered as `unknown_channel` without a
/// provider call or a spent attempt.
/// A channel's account refusal (the sender's answer for a channel whose token its cold start
/// could not read) pauses that channel only, naming it, as a 401 does.
#[tokio::test]
async fn an_account_refusal_on_one_channel_pauses_that_channel_only() {
    use punctual_core::ports::Control;
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let detail = "channel sms: its token could not be read: AccessDenied".to_owned();
    let sms = ScriptedProvider::new(
        clock.clone(),
        Duration::from_millis(100),
        vec![ProviderOutcome::AccountBlocked { detail }],
    );
    let (sender, _queue, email, [fleet, sms_switch]) =
        two_channels(&clock, MemoryLedger::new(), sms.clone(), punctual_core::sender::SenderSettings::default());
    let deadline = clock.now() + TimeDelta::seconds(30);
    let process = async |name: &str| {
        let m = punctual_core::testing::message(name, t0(), t0() + TimeDelta::hours(2));
        sender.process(Received { message_id: name, body: &m.encode() }, deadline).await.unwrap()
    };
    let d = process("sms-1").await.disposition;
    assert!(matches!(d, Disposition::Defer { reason: ReasonCode::ProviderAccount, .. }), "{d:?}");
    let tripped = sms_switch.pause().await.unwrap().expect("SMS is paused");
    assert!(tripped.reason.contains("its token could not be read"), "{}", tripped.reason);
    assert!(tripped.reason.ends_with("then `punctual resume --channel sms`"), "{}", tripped.reason);
    assert!(fleet.pause().await.unwrap().is_none(), "the fleet is not paused");
    let d = process("email-1").await.disposition;
    assert!(matches!(d, Disposition::Delivered { attempt: 1, .. }), "email still delivers: {d:?}");
    assert_eq!((email.calls().len(), sms.calls().len()), (1, 1));
}

#[tokio::test]
async fn a_401_on_one_channel_pauses_that_channel_only() {
    use punctual_core::ports::Control;
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let sms = ScriptedProvider::new(
        clock.clone(),
        Duration::from_millis(100),
        vec![ProviderOutcome::Permanent { status: 401 }],
    );
    let (sender, queue, email, [fleet, sms_switch]) =
        two_channels(&clock, MemoryLedger::new(), sms.clone(), punctual_core::sender::SenderSettings::default());
    let deadline = clock.now() + TimeDelta::seconds(30);
    let process = async |name: &str| {
        let m = punctual_core::testing::message(name, t0(), t0() + TimeDelta::hours(2));
        sender.process(Received { message_id: name, body: &m.encode() }, deadline).await.unwrap()
    };
    let p = process("sms-1").await;
    let d = p.disposition;
    assert!(matches!(d, Disposition::Defer { reason: ReasonCode::ProviderCredentials, .. }), "{d:?}");
    assert_eq!(p.channel.as_deref(), Some("sms"), "the call is the channel's, for its own metric series");
    let tripped = sms_switch.pause().await.unwrap().expect("SMS is paused");
    assert!(
        tripped.reason.starts_with("channel sms: ") && tripped.reason.ends_with("then `punctual resume --channel sms`"),
        "the reason names the channel and its own resume: {}",
        tripped.reason
    );
    assert!(fleet.pause().await.unwrap().is_none(), "the fleet is not paused");
    let p = process("email-1").await;
    assert_eq!(p.channel.as_deref(), Some("email"));
    let d = p.disposition;
    assert!(matches!(d, Disposition::Delivered { attempt: 1, .. }), "email still delivers: {d:?}");
    assert_eq!(email.calls().len(), 1);
    let d = process("sms-2").await.disposition;
    assert!(matches!(d, Disposition::Defer { reason: ReasonCode::OperatorPause, attempts_made: 0, .. }), "{d:?}");
    assert_eq!(sms.calls().len(), 1, "the paused channel's provider is not called again");
    let d = process("fax-1").await.disposition;
    assert!(matches!(d, Disposition::Quarantine { reason: ReasonCode::UnknownChannel, attempts_made: 0, .. }), "{d:?}");
    let dead = queue.dead();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].detail.contains("\"fax\""), "the letter names the channel: {}", dead[0].detail);
    assert_eq!((email.calls().len(), sms.calls().len()), (1, 1), "no call for the undeclared channel");
}

/// A message that carries its channel (the scheduler puts the renewal's in it) is held before
/// its claim while that channel is paused: requeued with `operator_pause`, nothing claimed (the
/// ledger has no record of it), no attempt spent; another channel's message is delivered.
#[tokio::test]
async fn a_paused_channels_message_is_held_before_its_claim() {
    use punctual_core::ports::{Control, Ledger, Pause};
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let sms = ScriptedProvider::new(clock.clone(), Duration::from_millis(100), vec![]);
    let ledger = MemoryLedger::new();
    let (sender, queue, email, [_, sms_switch]) =
        two_channels(&clock, ledger.clone(), sms.clone(), punctual_core::sender::SenderSettings::default());
    let pause = Pause { reason: "sms vendor incident".into(), owner: "ops".into(), since: clock.now() };
    sms_switch.set_pause(Some(&pause), "ops").await.unwrap();
    let deadline = clock.now() + TimeDelta::seconds(30);
    let message = |name: &str, channel: &str| punctual_core::ReminderMessage {
        channel: Some(channel.into()),
        ..punctual_core::testing::message(name, t0(), t0() + TimeDelta::hours(2))
    };
    let held = message("sms-1", "sms");
    let p = sender.process(Received { message_id: "m1", body: &held.encode() }, deadline).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Defer { reason: ReasonCode::OperatorPause, attempts_made: 0, .. }));
    assert!(ledger.get(&held.reminder_id).await.unwrap().is_none(), "held before its claim: no ledger record");
    assert_eq!(queue.requeued().len(), 1, "requeued unchanged");
    assert!(sms.calls().is_empty());
    let mail = message("email-1", "email");
    let p = sender.process(Received { message_id: "m2", body: &mail.encode() }, deadline).await.unwrap();
    assert!(matches!(p.disposition, Disposition::Delivered { .. }), "{:?}", p.disposition);
    assert_eq!(email.calls().len(), 1);
}

/// Found by review: a paused channel's deferral came before the check of an earlier call whose
/// outcome is unknown, and its settle cleared that call's mark, so a keyless provider was called
/// again once the channel resumed. Under `at_most_once` the unknown call is quarantined for an
/// operator whatever the channel's pause; under `at_least_once` the pause's deferral keeps the
/// mark (no call was made), so the resend after it is counted as a possible double.
#[tokio::test]
async fn a_paused_channel_keeps_an_unknown_earlier_call_on_record() {
    use punctual_core::pause::SENDER_OWNER;
    use punctual_core::ports::Control;
    use punctual_core::provider::IndeterminatePolicy::{AtLeastOnce, AtMostOnce};
    for policy in [AtMostOnce, AtLeastOnce] {
        let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
        let ledger = MemoryLedger::new();
        let sms = ScriptedProvider::new(clock.clone(), Duration::from_millis(100), vec![]).without_keys();
        let mut settings = punctual_core::sender::SenderSettings::default();
        settings.policy.indeterminate = policy;
        let (sender, _queue, _email, [_, sms_switch]) = two_channels(&clock, ledger.clone(), sms.clone(), settings);
        let m = punctual_core::testing::message("sms-1", t0(), t0() + TimeDelta::hours(2));
        dead_worker_mid_call(&ledger, &clock, &m).await;
        let pause =
            punctual_core::ports::Pause { reason: "test".into(), owner: SENDER_OWNER.into(), since: clock.now() };
        sms_switch.set_pause(Some(&pause), "test").await.unwrap();
        let deadline = clock.now() + TimeDelta::seconds(30);
        let p = sender.process(Received { message_id: "m-1", body: &m.encode() }, deadline).await.unwrap();
        let rec = ledger.get(&m.reminder_id).await.unwrap().unwrap();
        assert_eq!(rec.call_owner.as_deref(), Some("dead-worker"), "{policy:?}: the unknown call stays on record");
        match policy {
            AtMostOnce => assert!(
                matches!(p.disposition, Disposition::Quarantine { reason: ReasonCode::ProviderIndeterminate, .. }),
                "{p:?}"
            ),
            AtLeastOnce => {
                assert!(matches!(p.disposition, Disposition::Defer { reason: ReasonCode::OperatorPause, .. }), "{p:?}");
                sms_switch.set_pause(None, "test").await.unwrap();
                clock.advance(Duration::from_secs(61));
                let deadline = clock.now() + TimeDelta::seconds(30);
                let p = sender.process(Received { message_id: "m-2", body: &m.encode() }, deadline).await.unwrap();
                assert!(p.possible_double, "the resend after the pause is counted: {p:?}");
            }
        }
        assert!(sms.calls().len() <= 1);
    }
}
