//! The redrive service over in-memory ports, and what a redriven reminder does afterwards in
//! the sender.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use punctual_core::clock::{Clock, ManualClock};
use punctual_core::decision::Disposition;
use punctual_core::lanes::QueueLane;
use punctual_core::limiter::{LimiterSettings, SharedLimiter};
use punctual_core::ports::{DeadLetter, DeadLetters, DeadLettersError, Ledger, OwnerToken, SettleOutcome, Settlement};
use punctual_core::provider::ProviderOutcome;
use punctual_core::redrive::{AbortIf, RedriveRequest, Redriver, Selection};
use punctual_core::sender::{Received, Sender, SenderSettings};
use punctual_core::testing::{
    AllActive, MemoryControl, MemoryLedger, MemoryQueue, MemorySlotStore, ScriptedProvider, SlowReads,
};
use punctual_core::{ReasonCode, ReminderMessage, ReminderState};

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T14:00:00Z").unwrap().with_timezone(&Utc)
}

/// A DLQ holding some dead letters; records what was sent back and released. A released letter
/// can be received again, as from SQS.
#[derive(Clone, Default)]
struct Dlq {
    waiting: Arc<Mutex<Vec<DeadLetter>>>,
    handed_out: Arc<Mutex<Vec<DeadLetter>>>,
    sent_back: Arc<Mutex<Vec<(String, QueueLane)>>>,
    released: Arc<Mutex<Vec<String>>>,
    /// When given, the time of each send back.
    clock: Option<ManualClock>,
    sent_at: Arc<Mutex<Vec<DateTime<Utc>>>>,
}

impl Dlq {
    fn holding(letters: Vec<DeadLetter>) -> Self {
        Self { waiting: Arc::new(Mutex::new(letters)), ..Self::default() }
    }
    fn sent_back(&self) -> Vec<String> {
        self.sent_back.lock().unwrap().iter().map(|(b, _)| b.clone()).collect()
    }
    fn lanes(&self) -> Vec<QueueLane> {
        self.sent_back.lock().unwrap().iter().map(|(_, l)| *l).collect()
    }
}

impl DeadLetters for Dlq {
    async fn receive(&self, _hold: std::time::Duration) -> Result<Vec<DeadLetter>, DeadLettersError> {
        // Everything visible at once; hidden until deleted or released.
        let out = std::mem::take(&mut *self.waiting.lock().unwrap());
        self.handed_out.lock().unwrap().extend(out.iter().cloned());
        Ok(out)
    }
    async fn send_back(&self, body: &str, lane: QueueLane) -> Result<(), DeadLettersError> {
        self.sent_back.lock().unwrap().push((body.to_owned(), lane));
        if let Some(c) = &self.clock {
            self.sent_at.lock().unwrap().push(c.now());
        }
        Ok(())
    }
    async fn delete(&self, handle: &str) -> Result<(), DeadLettersError> {
        self.handed_out.lock().unwrap().retain(|d| d.handle != handle);
        Ok(())
    }
    async fn release(&self, handles: &[String]) -> Result<(), DeadLettersError> {
        self.released.lock().unwrap().extend(handles.iter().cloned());
        let mut out = self.handed_out.lock().unwrap();
        let (back, still): (Vec<_>, Vec<_>) = out.drain(..).partition(|d| handles.contains(&d.handle));
        *out = still;
        self.waiting.lock().unwrap().extend(back);
        Ok(())
    }
}

fn request() -> RedriveRequest {
    RedriveRequest {
        reason: "provider outage over".into(),
        owner: "oncall".into(),
        selection: Selection::default(),
        max_messages: 10,
        max_per_second: 5.0,
        canary: 0,
        canary_timeout: None,
        abort_if: AbortIf::default(),
        dry_run: false,
    }
}

fn letter(body: String, reason: ReasonCode) -> DeadLetter {
    DeadLetter {
        handle: "h-1".into(),
        message_id: "dlq-1".into(),
        body,
        reason: Some(reason.as_str().into()),
        first_enqueued: None,
    }
}

/// Records in `ledger` a reminder that spent `attempts` provider attempts and was dead-lettered.
async fn dead_lettered(ledger: &MemoryLedger, m: &ReminderMessage, attempts: u32, at: DateTime<Utc>) {
    let owner = OwnerToken::new("first-life");
    ledger.claim(m, &owner, at, at + TimeDelta::seconds(30)).await.unwrap();
    let s = Settlement {
        state: ReminderState::DeadLettered,
        reason: Some(ReasonCode::AttemptLimit),
        attempts,
        receipt: None,
        provider_status: Some(500),
        next_at: None,
    };
    assert_eq!(ledger.settle(m, Some(&owner), at, &s).await.unwrap(), SettleOutcome::Recorded);
}

/// A redrive is a deliberate new budget of `max_attempts` — not a budget that moves with every
/// attempt. A redriven reminder the provider always answers with 5xx must reach
/// `attempt_limit` after exactly `max_attempts` attempts of its own, and not defer forever.
#[tokio::test]
async fn redriven_reminder_hits_the_attempt_limit_after_max_attempts_of_its_own() {
    let settings = SenderSettings::default();
    let max = settings.policy.max_attempts;
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let ledger = MemoryLedger::new();
    // A day-long window: the budget, not the deadline, must end the chain.
    let m = ReminderMessage {
        attempt: max,
        ..punctual_core::testing::message("budget", t0(), t0() + TimeDelta::hours(24))
    };
    dead_lettered(&ledger, &m, max, clock.now()).await;

    let dlq = Dlq::holding(vec![letter(m.encode(), ReasonCode::AttemptLimit)]);
    let redriver = Redriver::new(ledger.clone(), dlq.clone(), MemoryControl::default(), clock.clone());
    let sum = redriver.run(&request(), clock.now() + TimeDelta::minutes(5)).await.unwrap();
    assert_eq!(sum.moved, 1, "{sum:?}");
    let mut body = dlq.sent_back().pop().unwrap();

    // The provider answers 500 to every call from now on.
    let queue = MemoryQueue::new();
    let provider = ScriptedProvider::new(
        clock.clone(),
        Duration::from_millis(100),
        std::iter::repeat_n(ProviderOutcome::Indeterminate { status: Some(500) }, 1000),
    );
    let sender = Sender::new(
        ledger.clone(),
        AllActive,
        SharedLimiter::new(MemorySlotStore::default(), clock.clone(), LimiterSettings::new(100.0), 1),
        provider.clone(),
        queue.clone(),
        clock.clone(),
        settings,
        7,
    );
    let mut seen = Vec::new();
    for _ in 0..3 * max {
        let deadline = clock.now() + TimeDelta::seconds(30);
        let p = sender.process(Received { message_id: "m-r", body: &body }, deadline).await.unwrap();
        seen.push(p.disposition.reason());
        match p.disposition {
            Disposition::Defer { until, .. } => {
                clock.set(until);
                body = queue.requeued().last().unwrap().0.encode();
            }
            Disposition::Quarantine { reason, attempts_made, .. } => {
                assert_eq!(reason, ReasonCode::AttemptLimit, "{seen:?}");
                assert_eq!(attempts_made, 2 * max, "the ledger counts both lives");
                break;
            }
            other => panic!("unexpected {other:?} after {seen:?}"),
        }
    }
    let calls = provider.calls().len() as u32;
    assert_eq!(
        calls, max,
        "expected attempt_limit after {max} attempts since the redrive; {calls} calls made, dispositions: {seen:?}"
    );
    let rec = ledger.get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.last_reason), (ReminderState::DeadLettered, Some(ReasonCode::AttemptLimit)));
}

/// Only this run's outcomes count for its abort threshold: ledger history left by an earlier
/// redrive of the same reminders (dead-lettered again, answered 429) must not abort it.
#[tokio::test]
async fn a_redrive_watches_its_own_outcomes_not_an_earlier_redrives() {
    use punctual_core::RedriveStamp;
    use punctual_core::ids::RedriveId;
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let ledger = MemoryLedger::new();
    let earlier = RedriveStamp {
        id: RedriveId::parse("rd-20261130-01").unwrap(),
        reason: "earlier attempt".into(),
        owner: "oncall".into(),
        base_attempt: 0,
        resend_unknown: false,
    };
    let mut letters = Vec::new();
    for name in ["a", "b"] {
        let m = punctual_core::testing::message(name, t0(), t0() + TimeDelta::hours(24));
        // Its earlier redrive ended in 429s and the DLQ again.
        let redriven = ReminderMessage { redrive: Some(earlier.clone()), ..m.clone() };
        let owner = OwnerToken::new(format!("earlier-{name}"));
        let at = clock.now() - TimeDelta::minutes(30);
        ledger.claim(&redriven, &owner, at, at + TimeDelta::seconds(30)).await.unwrap();
        let s = Settlement {
            state: ReminderState::DeadLettered,
            reason: Some(ReasonCode::NoSafeRetryWindow),
            attempts: 1,
            receipt: None,
            provider_status: Some(429),
            next_at: None,
        };
        ledger.settle(&redriven, Some(&owner), at, &s).await.unwrap();
        letters.push(DeadLetter { handle: format!("h-{name}"), ..letter(m.encode(), ReasonCode::NoSafeRetryWindow) });
    }
    let dlq = Dlq::holding(letters);
    let redriver = Redriver::new(ledger.clone(), dlq.clone(), MemoryControl::default(), clock.clone());
    let req = RedriveRequest { abort_if: AbortIf { failure_ratio: 0.0, ratio_429: Some(0.5), window: 1 }, ..request() };
    let sum = redriver.run(&req, clock.now() + TimeDelta::minutes(5)).await.unwrap();
    assert_eq!(sum.aborted, None, "aborted on an earlier redrive's outcomes: {sum:?}");
    assert_eq!(sum.moved, 2, "{sum:?}");
}

/// Redrive routes each letter by the slack it has now: a reminder due within the urgent
/// threshold goes back to the urgent lane, one with hours to spare to the normal lane.
#[tokio::test]
async fn a_redriven_letter_goes_back_to_the_lane_its_slack_calls_for() {
    let clock = ManualClock::new(t0());
    let ledger = MemoryLedger::new();
    let tight = punctual_core::testing::message("tight", t0(), t0() + TimeDelta::minutes(5));
    let roomy = punctual_core::testing::message("roomy", t0(), t0() + TimeDelta::hours(5));
    let mut letters = Vec::new();
    for (i, m) in [&tight, &roomy].into_iter().enumerate() {
        dead_lettered(&ledger, m, 1, clock.now()).await;
        letters.push(DeadLetter { handle: format!("h-{i}"), ..letter(m.encode(), ReasonCode::AttemptLimit) });
    }
    let dlq = Dlq::holding(letters);
    let redriver = Redriver::new(ledger, dlq.clone(), MemoryControl::default(), clock.clone());
    let sum = redriver.run(&request(), clock.now() + TimeDelta::minutes(5)).await.unwrap();
    assert_eq!(sum.moved, 2, "{sum:?}");
    let routed: Vec<(String, QueueLane)> = dlq
        .sent_back()
        .iter()
        .map(|b| ReminderMessage::decode(b).unwrap().reminder_id.to_string())
        .zip(dlq.lanes())
        .collect();
    assert!(routed.contains(&(tight.reminder_id.to_string(), QueueLane::Urgent)), "{routed:?}");
    assert!(routed.contains(&(roomy.reminder_id.to_string(), QueueLane::Normal)), "{routed:?}");
}

/// A DLQ of 40 letters, the `i`-th on `channel_of(i)`, timed as they are sent back, and a
/// redriver with `caps` per channel.
async fn letters_on(
    channel_of: fn(usize) -> Option<&'static str>,
    caps: &[(&str, f64)],
) -> (Dlq, Redriver<MemoryLedger, Dlq, MemoryControl, ManualClock>) {
    let clock = ManualClock::new(t0());
    let ledger = MemoryLedger::new();
    let mut letters = Vec::new();
    for i in 0..40 {
        let m = ReminderMessage {
            channel: channel_of(i).map(str::to_owned),
            ..punctual_core::testing::message(&format!("letter-{i}"), t0(), t0() + TimeDelta::hours(5))
        };
        dead_lettered(&ledger, &m, 1, clock.now()).await;
        letters.push(DeadLetter { handle: format!("h-{i}"), ..letter(m.encode(), ReasonCode::AttemptLimit) });
    }
    let dlq = Dlq { clock: Some(clock.clone()), ..Dlq::holding(letters) };
    let mut redriver = Redriver::new(ledger, dlq.clone(), MemoryControl::default(), clock);
    redriver.channel_caps = caps.iter().map(|(c, r)| ((*c).to_owned(), *r)).collect();
    (dlq, redriver)
}

/// 20 email and 20 SMS letters, interleaved, SMS capped at 2/s.
async fn two_channel_letters() -> (Dlq, Redriver<MemoryLedger, Dlq, MemoryControl, ManualClock>) {
    letters_on(|i| Some(if i % 2 == 0 { "email" } else { "sms" }), &[("sms", 2.0)]).await
}

/// Each channel's letters go at the lower of the request's rate and that channel's own cap:
/// 20 SMS letters at SMS's 2/s take ~10 s where the request asked 10/s (one pace for all let
/// them reach SMS's queue five times faster than its share). Letters are paced one by one, so
/// in a mixed run email's wait behind SMS's; a run of email's letters alone
/// (`selection.channels`) goes at the request's rate and leaves SMS's in the DLQ.
#[tokio::test]
async fn each_channels_letters_go_at_that_channels_own_cap() {
    let (dlq, redriver) = two_channel_letters().await;
    let req = RedriveRequest { max_messages: 40, max_per_second: 10.0, ..request() };
    let sum = redriver.run(&req, t0() + TimeDelta::minutes(5)).await.unwrap();
    assert_eq!(sum.moved, 40, "{sum:?}");
    let span = |dlq: &Dlq, channel: &str| {
        let times = dlq.sent_at.lock().unwrap().clone();
        let at: Vec<f64> = dlq
            .sent_back()
            .iter()
            .zip(&times)
            .filter(|(b, _)| ReminderMessage::decode(b).unwrap().channel.as_deref() == Some(channel))
            .map(|(_, t)| (*t - t0()).num_milliseconds() as f64 / 1000.0)
            .collect();
        (at.len(), at.first().copied().unwrap_or(0.0), at.last().copied().unwrap_or(0.0))
    };
    let sms = span(&dlq, "sms");
    assert_eq!(sms.0, 20);
    // 20 at 2/s: groups of 2 every second, the last 9 s or more after the first.
    assert!(sms.2 - sms.1 >= 9.0, "SMS's letters went faster than its 2/s: {sms:?}");

    let (dlq, redriver) = two_channel_letters().await;
    let mut email_only = RedriveRequest { max_messages: 40, max_per_second: 10.0, ..request() };
    email_only.selection.channels = vec!["email".to_owned()];
    let sum = redriver.run(&email_only, t0() + TimeDelta::minutes(5)).await.unwrap();
    assert_eq!((sum.moved, sum.left), (20, 20), "{sum:?}");
    let email = span(&dlq, "email");
    assert!(email.0 == 20 && email.2 - email.1 <= 2.0, "email alone at the request's 10/s: {email:?}");
}

/// A channel's own pace never lets the run go faster than it was asked: 20 email letters
/// (email capped at 20/s) and 20 letters from before channels, at a requested 5/s, take ~8 s
/// (one pace each let them go at 5/s apiece: 10/s in all).
#[tokio::test]
async fn the_run_as_a_whole_stays_at_the_requested_rate() {
    let (dlq, redriver) = letters_on(|i| (i % 2 == 0).then_some("email"), &[("email", 20.0)]).await;
    let req = RedriveRequest { max_messages: 40, max_per_second: 5.0, ..request() };
    let sum = redriver.run(&req, t0() + TimeDelta::minutes(5)).await.unwrap();
    assert_eq!(sum.moved, 40, "{sum:?}");
    let times = dlq.sent_at.lock().unwrap().clone();
    let span = (*times.last().unwrap() - times[0]).num_milliseconds() as f64 / 1000.0;
    assert!(span >= 7.0, "40 letters at 5/s went out in {span} s");
}

/// `n` reminders (5 h of slack) dead-lettered after one attempt, their letters in a DLQ, and a
/// redriver over them at `t0()`.
async fn dead_letter_rig(
    name: &str,
    n: usize,
) -> (ManualClock, Dlq, MemoryControl, Redriver<MemoryLedger, Dlq, MemoryControl, ManualClock>) {
    let clock = ManualClock::new(t0());
    let ledger = MemoryLedger::new();
    let mut letters = Vec::new();
    for i in 0..n {
        let m = punctual_core::testing::message(&format!("{name}-{i}"), t0(), t0() + TimeDelta::hours(5));
        dead_lettered(&ledger, &m, 1, clock.now()).await;
        letters.push(DeadLetter { handle: format!("h-{i}"), ..letter(m.encode(), ReasonCode::AttemptLimit) });
    }
    let dlq = Dlq::holding(letters);
    let control = MemoryControl::default();
    let redriver = Redriver::new(ledger, dlq.clone(), control.clone(), clock.clone());
    (clock, dlq, control, redriver)
}

/// A run whose deadline falls inside its canary wait stops in time: it does not sleep past its
/// margin, the letters it did not move become visible again (released), and its audit record
/// is finished. An unsettled canary at the deadline is not reported as a failed canary.
#[tokio::test]
async fn a_deadline_inside_the_canary_wait_stops_the_run_in_time_with_its_audit_record() {
    let (clock, dlq, control, redriver) = dead_letter_rig("canary", 5).await;
    // Canary of 1 with a 300 s wait; the invocation ends in 60 s (the service keeps 5 s).
    let req = RedriveRequest { canary: 1, canary_timeout: Some(Duration::from_secs(300)), ..request() };
    let deadline = t0() + TimeDelta::seconds(60);
    let sum = redriver.run(&req, deadline).await.unwrap();
    assert!(clock.now() <= deadline - TimeDelta::seconds(5), "ran until {}", clock.now());
    assert_eq!(sum.moved, 1, "{sum:?}");
    assert!(sum.aborted.as_deref().is_some_and(|a| a.contains("deadline")), "{sum:?}");
    assert_eq!(sum.canary_failed, 0, "an unsettled canary at the deadline is not a failure: {sum:?}");
    let released = dlq.released.lock().unwrap().clone();
    assert_eq!(released.len(), 4, "the four letters not moved are visible again: {released:?}");
    let audits = control.audits.lock().unwrap().clone();
    assert!(audits.last().is_some_and(|a| a.finished_at.is_some() && a.summary.is_some()), "{audits:?}");
}

/// The pacing never sleeps past the run's stop time: at 0.02/s the second send would be 50 s
/// after the first, beyond a 30 s invocation.
#[tokio::test]
async fn the_pacing_stops_at_the_deadline_instead_of_sleeping_past_it() {
    let (clock, dlq, _, redriver) = dead_letter_rig("slow", 3).await;
    let req = RedriveRequest { max_per_second: 0.02, ..request() };
    let deadline = t0() + TimeDelta::seconds(30);
    let sum = redriver.run(&req, deadline).await.unwrap();
    assert!(clock.now() <= deadline - TimeDelta::seconds(5), "ran until {}", clock.now());
    assert_eq!(sum.moved, 1, "{sum:?}");
    assert!(sum.aborted.as_deref().is_some_and(|a| a.contains("deadline")), "{sum:?}");
    assert_eq!(dlq.released.lock().unwrap().len(), 2);
}

/// A `provider_indeterminate` letter: a broad redrive leaves it (its call may have taken
/// effect), unless the ledger says delivered, in which case any run cleans it up; only a
/// request naming the reason resends it, stamped so the ledger lets exactly that resend through.
#[tokio::test]
async fn unknown_outcome_letters_are_resent_only_by_name_and_cleaned_up_when_delivered() {
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let ledger = MemoryLedger::new();
    let undelivered = punctual_core::testing::message("u", t0(), t0() + TimeDelta::hours(2));
    let delivered = punctual_core::testing::message("d", t0(), t0() + TimeDelta::hours(2));
    dead_lettered(&ledger, &undelivered, 1, clock.now()).await;
    let owner = OwnerToken::new("late-worker");
    ledger.claim(&delivered, &owner, clock.now(), clock.now() + TimeDelta::seconds(30)).await.unwrap();
    let done = Settlement {
        state: ReminderState::Delivered,
        reason: None,
        attempts: 1,
        receipt: Some("r".into()),
        provider_status: Some(200),
        next_at: None,
    };
    ledger.settle(&delivered, Some(&owner), clock.now(), &done).await.unwrap();
    let letters = || {
        vec![
            letter(undelivered.encode(), ReasonCode::ProviderIndeterminate),
            DeadLetter { handle: "h-2".into(), ..letter(delivered.encode(), ReasonCode::ProviderIndeterminate) },
        ]
    };
    let dlq = Dlq::holding(letters());
    let redriver = Redriver::new(ledger.clone(), dlq.clone(), MemoryControl::default(), clock.clone());
    let sum = redriver.run(&request(), clock.now() + TimeDelta::minutes(5)).await.unwrap();
    assert_eq!((sum.moved, sum.removed_delivered), (0, 1), "{sum:?}");
    assert_eq!(sum.skipped.get("unknown_outcome_not_named"), Some(&1), "{sum:?}");
    assert!(dlq.sent_back().is_empty());

    let dlq = Dlq::holding(letters());
    let redriver = Redriver::new(ledger.clone(), dlq.clone(), MemoryControl::default(), clock.clone());
    let named = RedriveRequest {
        selection: Selection { failure_reasons: vec![ReasonCode::ProviderIndeterminate], ..Selection::default() },
        ..request()
    };
    let sum = redriver.run(&named, clock.now() + TimeDelta::minutes(5)).await.unwrap();
    assert_eq!(sum.moved, 1, "{sum:?}");
    let sent = ReminderMessage::decode(&dlq.sent_back()[0]).unwrap();
    assert!(sent.redrive.as_ref().is_some_and(|r| r.resend_unknown), "{sent:?}");
}

/// The sender a [`ServedDlq`] hands its copies to.
type InlineSender = Sender<
    MemoryLedger,
    punctual_core::testing::MemoryRenewals,
    SharedLimiter<MemorySlotStore, ManualClock>,
    ScriptedProvider<ManualClock>,
    MemoryQueue,
    ManualClock,
>;

/// A DLQ whose redriven copies a sender picks up at once (the send queue's poller, inline).
#[derive(Clone)]
struct ServedDlq {
    inner: Dlq,
    sender: Arc<InlineSender>,
    clock: ManualClock,
}

impl DeadLetters for ServedDlq {
    async fn receive(&self, hold: std::time::Duration) -> Result<Vec<DeadLetter>, DeadLettersError> {
        self.inner.receive(hold).await
    }
    async fn send_back(&self, body: &str, lane: QueueLane) -> Result<(), DeadLettersError> {
        self.inner.send_back(body, lane).await?;
        let deadline = self.clock.now() + TimeDelta::seconds(30);
        self.sender.process(Received { message_id: "redriven", body }, deadline).await.unwrap();
        Ok(())
    }
    async fn delete(&self, handle: &str) -> Result<(), DeadLettersError> {
        self.inner.delete(handle).await
    }
    async fn release(&self, handles: &[String]) -> Result<(), DeadLettersError> {
        self.inner.release(handles).await
    }
}

/// A renewal paid after its reminder was dead-lettered is the happy ending, not a failure.
/// Its canary copy is cancelled by the sender; the canary watch must count that settled, and a
/// strict redrive (`failure_ratio 0.0`) must go on to the rest.
#[tokio::test]
async fn a_canary_whose_renewal_was_paid_meanwhile_is_settled_not_failed() {
    use punctual_core::decision::RenewalView;
    let clock = ManualClock::new(t0());
    let ledger = MemoryLedger::new();
    let renewals = punctual_core::testing::MemoryRenewals::new();
    let mut letters = Vec::new();
    for i in 0..3 {
        let m = punctual_core::testing::message(&format!("paid-{i}"), t0(), t0() + TimeDelta::hours(5));
        dead_lettered(&ledger, &m, 1, clock.now()).await;
        // Every one of them was paid after it was dead-lettered.
        renewals.set(&m.tenant_id, &m.renewal_id, RenewalView::Paid);
        letters.push(DeadLetter { handle: format!("h-{i}"), ..letter(m.encode(), ReasonCode::AttemptLimit) });
    }
    let limiter = SharedLimiter::new(MemorySlotStore::default(), clock.clone(), LimiterSettings::new(100.0), 1);
    let provider = ScriptedProvider::new(clock.clone(), Duration::from_millis(100), vec![]);
    let sender = Sender::new(
        ledger.clone(),
        renewals,
        limiter,
        provider.clone(),
        MemoryQueue::new(),
        clock.clone(),
        SenderSettings::default(),
        3,
    );
    let dlq = ServedDlq { inner: Dlq::holding(letters), sender: Arc::new(sender), clock: clock.clone() };
    let redriver = Redriver::new(ledger.clone(), dlq, MemoryControl::default(), clock.clone());
    let req = RedriveRequest {
        canary: 1,
        canary_timeout: Some(Duration::from_secs(60)),
        abort_if: AbortIf { failure_ratio: 0.0, ..AbortIf::default() },
        ..request()
    };
    let sum = redriver.run(&req, clock.now() + TimeDelta::minutes(5)).await.unwrap();
    assert_eq!(sum.canary_failed, 0, "a paid renewal's canary was counted failed: {sum:?}");
    assert_eq!(sum.aborted, None, "{sum:?}");
    assert_eq!(sum.moved, 3, "{sum:?}");
    assert!(provider.calls().is_empty(), "a paid renewal was reminded");
}

/// The periodic abort check reads the outcome of every redriven reminder not settled yet; begun
/// just before the run's stop time it must not read on past it. 140 letters moved at 20 ms of
/// ledger read each reach the stop time (the deadline less the 5 s margin) at about 2.8 s, where
/// the 140-move check begins: 140 more reads.
#[tokio::test]
async fn the_periodic_abort_check_stops_at_the_runs_stop_time() {
    let (clock, dlq, control, redriver) = dead_letter_rig("check", 300).await;
    let ledger = SlowReads::new(redriver.ledger().clone(), clock.clone(), Duration::from_millis(20));
    let redriver = Redriver::new(ledger, dlq.clone(), control.clone(), clock.clone());
    let req = RedriveRequest {
        max_messages: 300,
        max_per_second: 1000.0,
        abort_if: AbortIf { failure_ratio: 1.0, ratio_429: None, window: 140 },
        ..request()
    };
    let deadline = t0() + TimeDelta::seconds(8);
    let sum = redriver.run(&req, deadline).await.unwrap();
    let stop = deadline - TimeDelta::seconds(5);
    let brief = format!("moved {}, left {}, aborted {:?}", sum.moved, sum.left, sum.aborted);
    assert!(
        clock.now() <= stop + TimeDelta::milliseconds(20),
        "ran until {} ({} ms past its stop time): {brief}",
        clock.now(),
        (clock.now() - stop).num_milliseconds()
    );
    assert!(sum.aborted.as_deref().is_some_and(|a| a.contains("deadline")), "{brief}");
    assert_eq!(sum.moved as usize + dlq.released.lock().unwrap().len(), 300, "the rest is visible again: {brief}");
}

/// A letter on the timed DLQ: (message id, letter, hidden since).
type TimedLetter = (String, DeadLetter, Option<DateTime<Utc>>);

/// A DLQ as SQS hands it out: ten visible letters a receive, in order, each hidden from its
/// receive (under a new handle) until it is deleted or released; it records how long each
/// letter was hidden, in all.
#[derive(Clone)]
struct TimedDlq {
    clock: ManualClock,
    letters: Arc<Mutex<Vec<TimedLetter>>>,
    receives: Arc<Mutex<u64>>,
    /// Message id → time hidden so far.
    hidden: Arc<Mutex<std::collections::HashMap<String, Duration>>>,
}

impl TimedDlq {
    fn show(&self, handle: &str, delete: bool) {
        let now = self.clock.now();
        let mut letters = self.letters.lock().unwrap();
        if let Some(k) = letters.iter().position(|(_, d, _)| d.handle == handle) {
            let (id, _, since) = &mut letters[k];
            if let Some(at) = since.take() {
                *self.hidden.lock().unwrap().entry(id.clone()).or_default() += (now - at).to_std().unwrap();
            }
            if delete {
                letters.remove(k);
            }
        }
    }
}

impl DeadLetters for TimedDlq {
    async fn receive(&self, _hold: Duration) -> Result<Vec<DeadLetter>, DeadLettersError> {
        let now = self.clock.now();
        let mut n = self.receives.lock().unwrap();
        *n += 1;
        let mut out = Vec::new();
        for (id, d, since) in self.letters.lock().unwrap().iter_mut().filter(|l| l.2.is_none()).take(10) {
            *since = Some(now);
            d.handle = format!("{id}#{n}");
            out.push(d.clone());
        }
        Ok(out)
    }
    async fn send_back(&self, _body: &str, _lane: QueueLane) -> Result<(), DeadLettersError> {
        Ok(())
    }
    async fn delete(&self, handle: &str) -> Result<(), DeadLettersError> {
        self.show(handle, true);
        Ok(())
    }
    async fn release(&self, handles: &[String]) -> Result<(), DeadLettersError> {
        handles.iter().for_each(|h| self.show(h, false));
        Ok(())
    }
}

/// A narrow redrive (one reason: 10 letters of 1,000) cannot skip what it passes over without
/// holding it (SQS cannot be filtered), but it must not keep it hidden through its canary wait
/// (a minute by default, five in the runbook): held letters are what `explain` and `reconcile`
/// cannot see. Here the canary never settles within its 60 s (the threshold lets the run go on).
#[tokio::test]
async fn a_narrow_redrive_lets_go_of_what_it_passed_over_while_its_canary_settles() {
    let (clock, _, control, redriver) = dead_letter_rig("wide", 0).await;
    let ledger = redriver.ledger().clone();
    let mut letters = Vec::new();
    for i in 0..1_000 {
        let m = punctual_core::testing::message(&format!("narrow-{i}"), t0(), t0() + TimeDelta::hours(5));
        dead_lettered(&ledger, &m, 1, clock.now()).await;
        let reason = if i % 100 == 50 { ReasonCode::ProviderCredentials } else { ReasonCode::AttemptLimit };
        let d = DeadLetter { message_id: format!("dlq-{i}"), ..letter(m.encode(), reason) };
        letters.push((d.message_id.clone(), d, None));
    }
    let dlq = TimedDlq {
        clock: clock.clone(),
        letters: Arc::new(Mutex::new(letters)),
        receives: Arc::default(),
        hidden: Arc::default(),
    };
    let redriver = Redriver::new(ledger, dlq.clone(), control, clock.clone());
    let req = RedriveRequest {
        selection: Selection { failure_reasons: vec![ReasonCode::ProviderCredentials], ..Selection::default() },
        max_messages: 100,
        max_per_second: 10.0,
        canary: 1,
        canary_timeout: Some(Duration::from_secs(60)),
        abort_if: AbortIf { failure_ratio: 1.0, ..AbortIf::default() },
        ..request()
    };
    let sum = redriver.run(&req, t0() + TimeDelta::minutes(5)).await.unwrap();
    let brief = format!("selected {}, moved {}, left {}, aborted {:?}", sum.selected, sum.moved, sum.left, sum.aborted);
    assert_eq!((sum.selected, sum.moved, sum.left), (10, 10, 990), "each letter looked at once: {brief}");
    let letters = dlq.letters.lock().unwrap();
    assert_eq!(letters.len(), 990, "the ten moved were deleted");
    assert!(letters.iter().all(|(_, _, since)| since.is_none()), "the rest is visible again");
    let hidden = dlq.hidden.lock().unwrap();
    let (worst, longest) = hidden
        .iter()
        .filter(|(id, _)| letters.iter().any(|(l, _, _)| l == *id))
        .max_by_key(|(_, d)| **d)
        .map(|(id, d)| (id.clone(), *d))
        .unwrap();
    assert!(
        longest < Duration::from_secs(10),
        "{worst}, a letter the run did not move, was hidden {longest:?} (the run took {:?}; {brief})",
        (clock.now() - t0()).to_std().unwrap()
    );
}
