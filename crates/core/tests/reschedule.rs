//! A renewal moved after its reminder was released (docs/design.md#renewals-and-rescheduling): the copy on the queue belongs to a
//! version the renewals table no longer holds. Its sender does not send it — no provider call,
//! no attempt spent, `rescheduled` in the ledger — and the current version goes out at its own
//! time (I8: nothing is delivered for a version the table no longer holds, nor before the
//! current `deliver_after`). Moved to another day, the copy's reminder is recorded cancelled
//! and the copy dropped; moved within the day (the same reminder), the copy is requeued with
//! the current times.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use punctual_core::clock::{Clock, ManualClock};
use punctual_core::decision::{Disposition, RenewalView};
use punctual_core::limiter::{LimiterSettings, SharedLimiter};
use punctual_core::ports::{Ledger, RenewalVersion};
use punctual_core::sender::{Received, Sender, SenderSettings};
use punctual_core::testing::{MemoryLedger, MemoryQueue, MemoryRenewals, MemorySlotStore, ScriptedProvider};
use punctual_core::{ReasonCode, ReminderMessage, ReminderState};

type TestSender = Sender<
    MemoryLedger,
    MemoryRenewals,
    SharedLimiter<MemorySlotStore, ManualClock>,
    ScriptedProvider<ManualClock>,
    MemoryQueue,
    ManualClock,
>;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T14:00:00Z").unwrap().with_timezone(&Utc)
}

struct Rig {
    clock: ManualClock,
    renewals: MemoryRenewals,
    ledger: MemoryLedger,
    queue: MemoryQueue,
    provider: ScriptedProvider<ManualClock>,
    sender: TestSender,
}

fn rig() -> Rig {
    rig_with(true)
}

/// With `keys` false: a provider that does not honour idempotency keys, under `at_most_once`.
fn rig_with(keys: bool) -> Rig {
    let clock = ManualClock::new(t0() + TimeDelta::seconds(5));
    let renewals = MemoryRenewals::new();
    let ledger = MemoryLedger::new();
    let queue = MemoryQueue::new();
    let mut provider = ScriptedProvider::new(clock.clone(), Duration::from_millis(100), vec![]);
    let mut settings = SenderSettings::default();
    if !keys {
        provider = provider.without_keys();
        settings.policy.indeterminate = punctual_core::provider::IndeterminatePolicy::AtMostOnce;
    }
    let limiter = SharedLimiter::new(MemorySlotStore::default(), clock.clone(), LimiterSettings::new(100.0), 1);
    let sender = Sender::new(
        ledger.clone(),
        renewals.clone(),
        limiter,
        provider.clone(),
        queue.clone(),
        clock.clone(),
        settings,
        7,
    );
    Rig { clock, renewals, ledger, queue, provider, sender }
}

impl Rig {
    async fn process(&self, m: &ReminderMessage) -> Disposition {
        let deadline = self.clock.now() + TimeDelta::seconds(30);
        self.sender.process(Received { message_id: "m-1", body: &m.encode() }, deadline).await.unwrap().disposition
    }

    /// The row now holds `m` (an import of its renewal).
    fn holds(&self, m: &ReminderMessage) {
        self.renewals.set_version(&m.tenant_id, &m.renewal_id, RenewalVersion::of(m));
    }
}

/// The copy released at 14:00 for a window until 16:00.
fn released() -> ReminderMessage {
    punctual_core::testing::message("1", t0(), t0() + TimeDelta::hours(2))
}

#[tokio::test]
async fn a_copy_of_a_renewal_moved_to_another_day_is_dropped_and_its_reminder_recorded_rescheduled() {
    let r = rig();
    let old = released();
    // The customer moved the renewal to tomorrow after the copy was released: another due
    // date, so another reminder.
    let new = punctual_core::testing::message(
        "1",
        t0() + TimeDelta::days(1),
        t0() + TimeDelta::days(1) + TimeDelta::hours(2),
    );
    assert_ne!(old.reminder_id, new.reminder_id);
    r.holds(&new);

    let d = r.process(&old).await;
    assert!(matches!(d, Disposition::Rescheduled { same_reminder: false, .. }), "{d:?}");
    assert!(r.provider.calls().is_empty(), "the old version reached the provider");
    assert!(r.queue.dead().is_empty(), "a rescheduled copy is not a dead letter");
    assert!(r.queue.requeued().is_empty(), "a rescheduled copy is dropped, not requeued");
    let rec = r.ledger.get(&old.reminder_id).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.last_reason, rec.attempts),
        (ReminderState::Cancelled, Some(ReasonCode::Rescheduled), 0)
    );

    // Tomorrow's copy goes out tomorrow.
    r.clock.set(new.deliver_after + TimeDelta::seconds(1));
    assert!(matches!(r.process(&new).await, Disposition::Delivered { .. }));
    assert_eq!(r.provider.calls().len(), 1);
}

/// `old`'s renewal moved three hours later the same day (the same reminder, other times).
fn later_same_day(old: &ReminderMessage) -> ReminderMessage {
    ReminderMessage { deliver_after: t0() + TimeDelta::hours(3), deliver_by: t0() + TimeDelta::hours(5), ..old.clone() }
}

#[tokio::test]
async fn a_copy_of_a_renewal_moved_later_the_same_day_is_dropped_and_the_new_time_delivers_it() {
    let r = rig();
    let old = released();
    // Same due date, a later send time: the same reminder, other times.
    let new = later_same_day(&old);
    r.holds(&new);

    let d = r.process(&old).await;
    assert_eq!(
        d,
        Disposition::Rescheduled { same_reminder: true, deliver_after: new.deliver_after, deliver_by: new.deliver_by }
    );
    assert!(r.provider.calls().is_empty(), "delivered hours before the current deliver_after");
    let rec = r.ledger.get(&old.reminder_id).await.unwrap().unwrap();
    assert!(!rec.state.is_terminal(), "the reminder is still owed, by the new version: {:?}", rec.state);
    assert_eq!(rec.last_reason, Some(ReasonCode::Rescheduled));
    assert_eq!(rec.attempts, 0, "no attempt spent");
    // The copy itself carries the reminder to its new time, as the current version.
    let requeued = r.queue.requeued();
    assert_eq!(requeued.len(), 1, "{requeued:?}");
    let (copy, delay) = &requeued[0];
    assert_eq!((copy.deliver_after, copy.deliver_by), (new.deliver_after, new.deliver_by));
    assert_eq!(*delay, (new.deliver_after - r.clock.now()).to_std().unwrap());

    // The new version's copy, at its time, claims the reminder at once and delivers it.
    r.clock.set(new.deliver_after + TimeDelta::seconds(1));
    assert!(matches!(r.process(&new).await, Disposition::Delivered { attempt: 1, .. }));
    assert_eq!(r.provider.calls().len(), 1);
}

/// Only `deliver_by` changed (the window was widened or narrowed): the copy carries the old
/// deadline, which the sender would enforce (an early expiry, or a send past the new one). It
/// is not sent as it is: it is requeued at once with the new deadline (its `deliver_after` has
/// come), and the row, re-armed by the import, is released again at the next tick too; the
/// ledger delivers the reminder once.
#[tokio::test]
async fn a_copy_whose_deadline_alone_moved_is_dropped_for_the_current_one() {
    let r = rig();
    let old = released();
    let new = ReminderMessage { deliver_by: t0() + TimeDelta::minutes(30), ..old.clone() };
    r.holds(&new);
    let d = r.process(&old).await;
    assert_eq!(
        d,
        Disposition::Rescheduled { same_reminder: true, deliver_after: new.deliver_after, deliver_by: new.deliver_by }
    );
    let requeued = r.queue.requeued();
    assert_eq!((requeued[0].0.deliver_by, requeued[0].1), (new.deliver_by, Duration::ZERO));
    assert!(matches!(r.process(&requeued[0].0).await, Disposition::Delivered { .. }));
    assert!(matches!(r.process(&new).await, Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate }));
    assert_eq!(r.provider.calls().len(), 1);
}

/// A stale copy received after its own `deliver_by` is not a deadline miss: before it expires
/// anything, the sender reads the renewal.
#[tokio::test]
async fn a_stale_copy_past_its_old_deadline_is_not_expired() {
    let r = rig();
    let old = released();
    let new = later_same_day(&old);
    r.holds(&new);
    r.clock.set(old.deliver_by + TimeDelta::minutes(1));
    let d = r.process(&old).await;
    assert_eq!(d.reason(), Some(ReasonCode::Rescheduled), "{d:?}");
    assert!(r.queue.dead().is_empty(), "a stale copy wrote a business_deadline_expired letter");
    let rec = r.ledger.get(&old.reminder_id).await.unwrap();
    assert!(
        rec.as_ref().is_none_or(|rec| rec.state != ReminderState::Expired),
        "expired a reminder still owed: {rec:?}"
    );
}

/// The copy of the version the table holds is delivered; a cancelled renewal still cancels.
#[tokio::test]
async fn the_current_version_is_delivered_and_a_cancel_still_wins() {
    let r = rig();
    let m = released();
    r.holds(&m);
    assert!(matches!(r.process(&m).await, Disposition::Delivered { .. }));
    let other = punctual_core::testing::message("2", t0(), t0() + TimeDelta::hours(2));
    r.holds(&other);
    r.renewals.set(&other.tenant_id, &other.renewal_id, RenewalView::Cancelled);
    assert!(matches!(r.process(&other).await, Disposition::Cancel { .. }));
}

/// The released copy of a renewal cancelled after release, cancelled at send by `r`'s sender.
async fn cancelled_at_send(r: &Rig) -> ReminderMessage {
    let m = released();
    r.holds(&m);
    r.renewals.set(&m.tenant_id, &m.renewal_id, RenewalView::Cancelled);
    assert!(matches!(r.process(&m).await, Disposition::Cancel { .. }));
    m
}

/// The copy the scheduler releases from a row re-armed at `at` (the same reminder, released
/// again).
fn released_again(m: &ReminderMessage, at: DateTime<Utc>) -> ReminderMessage {
    ReminderMessage { first_enqueued: at, ..m.clone() }
}

/// A renewal cancelled (or paid) after release: its copy is cancelled at send. The customer
/// is then active again before `deliver_by` (a payment that bounced, a cancellation undone),
/// and the import re-arms the row: the copy the scheduler releases from it is delivered, once.
/// A copy released before the cancellation never revives the reminder.
#[tokio::test]
async fn a_renewal_active_again_after_a_cancel_at_send_is_delivered_once() {
    let r = rig();
    let m = cancelled_at_send(&r).await;
    let rec = r.ledger.get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.last_reason), (ReminderState::Cancelled, Some(ReasonCode::Cancelled)));

    // Active again; the re-armed row's release comes at the next tick.
    r.clock.advance(Duration::from_secs(120));
    r.renewals.set(&m.tenant_id, &m.renewal_id, RenewalView::Active);
    // A stale copy (released before the cancellation: an SQS duplicate) revives nothing.
    assert!(matches!(r.process(&m).await, Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate }));
    assert!(r.provider.calls().is_empty());
    let again = released_again(&m, r.clock.now());
    let d = r.process(&again).await;
    assert!(matches!(d, Disposition::Delivered { attempt: 1, .. }), "the re-activated renewal was not sent: {d:?}");
    // Once: another copy of that release, or the stale one, is a duplicate.
    assert!(matches!(r.process(&again).await, Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate }));
    assert!(matches!(r.process(&m).await, Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate }));
    assert_eq!(r.provider.calls().len(), 1);
}

/// The re-armed copy reaches a sender only after `deliver_by`: the reminder was owed again and
/// missed, so it expires (counted late), not "cancelled" by the old record.
#[tokio::test]
async fn a_renewal_active_again_whose_copy_comes_after_its_deadline_expires() {
    let r = rig();
    let m = cancelled_at_send(&r).await;
    let again = released_again(&m, r.clock.now() + TimeDelta::seconds(60));
    r.renewals.set(&m.tenant_id, &m.renewal_id, RenewalView::Active);
    r.clock.set(m.deliver_by + TimeDelta::seconds(1));
    let d = r.process(&again).await;
    assert!(matches!(d, Disposition::Expire { .. }), "{d:?}");
    let rec = r.ledger.get(&m.reminder_id).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.last_reason), (ReminderState::Expired, Some(ReasonCode::BusinessDeadlineExpired)));
    // A stale copy past the deadline is still just the old cancellation's duplicate.
    let r2 = rig();
    cancelled_at_send(&r2).await;
    r2.clock.set(m.deliver_by + TimeDelta::seconds(1));
    assert!(matches!(r2.process(&m).await, Disposition::Acknowledge { reason: ReasonCode::Cancelled }));
}

/// A renewals table whose reads take `slow` (under the sender's 1 s freshness: a read that
/// takes longer is read again, and again): the clock moves on while a sender reads.
#[derive(Clone)]
struct SlowRead {
    inner: MemoryRenewals,
    clock: ManualClock,
    slow: Duration,
}

impl punctual_core::ports::Renewals for SlowRead {
    async fn lookup(
        &self,
        tenant: &punctual_core::TenantId,
        renewal: &punctual_core::ids::RenewalId,
    ) -> Result<punctual_core::ports::RenewalLookup, punctual_core::ports::RenewalsError> {
        let seen = self.inner.lookup(tenant, renewal).await;
        self.clock.advance(self.slow);
        seen
    }
}

/// The renewal is active again, re-armed and released while a sender is between its read
/// (which found it cancelled) and its write of the cancellation: the copy released then was
/// released after what the read saw, and still claims the reminder.
#[tokio::test]
async fn a_release_between_the_read_and_the_cancellation_still_claims() {
    let r = rig();
    let slow = SlowRead { inner: r.renewals.clone(), clock: r.clock.clone(), slow: Duration::from_millis(800) };
    let limiter = SharedLimiter::new(MemorySlotStore::default(), r.clock.clone(), LimiterSettings::new(100.0), 1);
    let sender = Sender::new(
        r.ledger.clone(),
        slow,
        limiter,
        r.provider.clone(),
        r.queue.clone(),
        r.clock.clone(),
        SenderSettings::default(),
        7,
    );
    let m = released();
    r.holds(&m);
    r.renewals.set(&m.tenant_id, &m.renewal_id, RenewalView::Cancelled);
    let read_at = r.clock.now();
    let deadline = read_at + TimeDelta::seconds(30);
    let d = sender.process(Received { message_id: "m-1", body: &m.encode() }, deadline).await.unwrap().disposition;
    assert!(matches!(d, Disposition::Cancel { .. }), "{d:?}");
    // Released 400 ms into the 800 ms read: after the read began, before the write.
    r.renewals.set(&m.tenant_id, &m.renewal_id, RenewalView::Active);
    let again = released_again(&m, read_at + TimeDelta::milliseconds(400));
    let d = r.process(&again).await;
    assert!(matches!(d, Disposition::Delivered { .. }), "{d:?}");
}

/// A provider without idempotency keys, `at_most_once`: a sender started a call and crashed
/// before recording its outcome; the next copy found the renewal cancelled; then the renewal is
/// active again and re-armed. The re-armed copy must not call again (the first call may have
/// been applied): it goes to the DLQ as `provider_indeterminate`, for an operator to decide.
#[tokio::test]
async fn a_re_armed_renewal_does_not_resend_a_call_whose_outcome_is_unknown() {
    use punctual_core::decision::ClaimView;
    use punctual_core::ports::OwnerToken;
    let r = rig_with(false);
    let m = released();
    r.holds(&m);
    let (crashed, now) = (OwnerToken::new("crashed"), r.clock.now());
    let claim = r.ledger.claim(&m, &crashed, now, now + TimeDelta::seconds(30)).await.unwrap();
    assert!(matches!(claim, ClaimView::Claimed { .. }), "{claim:?}");
    assert!(r.ledger.mark_call(&m, &crashed, now).await.unwrap());
    r.clock.advance(Duration::from_secs(60));
    r.renewals.set(&m.tenant_id, &m.renewal_id, RenewalView::Cancelled);
    assert!(matches!(r.process(&m).await, Disposition::Cancel { .. }));
    r.clock.advance(Duration::from_secs(120));
    r.renewals.set(&m.tenant_id, &m.renewal_id, RenewalView::Active);
    let d = r.process(&released_again(&m, r.clock.now())).await;
    assert!(r.provider.calls().is_empty(), "called again after an unknown call: {d:?}");
    assert!(matches!(d, Disposition::Quarantine { reason: ReasonCode::ProviderIndeterminate, .. }), "{d:?}");
}

/// A reminder a redrive once carried, cancelled at send, then re-armed: the scheduler's copy of
/// the re-armed row is sent (the cancellation ended the redrive's chain).
#[tokio::test]
async fn a_re_armed_renewal_once_redriven_is_delivered() {
    let r = rig();
    let m = released();
    r.holds(&m);
    let copy = punctual_core::testing::redriven(&m, "rd-20261201T140000000-0001", 0, false);
    r.renewals.set(&m.tenant_id, &m.renewal_id, RenewalView::Cancelled);
    assert!(matches!(r.process(&copy).await, Disposition::Cancel { .. }));
    r.clock.advance(Duration::from_secs(120));
    r.renewals.set(&m.tenant_id, &m.renewal_id, RenewalView::Active);
    let d = r.process(&released_again(&m, r.clock.now())).await;
    assert!(matches!(d, Disposition::Delivered { attempt: 1, .. }), "the re-armed renewal was not sent: {d:?}");
    assert_eq!(r.provider.calls().len(), 1);
}
