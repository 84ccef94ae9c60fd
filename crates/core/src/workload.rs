//! The population `punctual run` imports, in one place, so the simulator can simulate exactly
//! it (`punctual simulate --workload run`) and the two reports can be compared.

use chrono::{DateTime, TimeDelta, Timelike, Utc};

use crate::renewal::{Renewal, RenewalInput};

/// Zones the generated renewals are spread over.
pub const ZONES: [&str; 5] =
    ["America/New_York", "Europe/London", "Asia/Kathmandu", "Australia/Lord_Howe", "America/Los_Angeles"];
/// Delivery windows (minutes) the generated renewals cycle through.
pub const WINDOWS: [u32; 4] = [30, 60, 120, 240];
/// Window (minutes) of the tight renewals `run` mixes in: due this minute, so between one and
/// two minutes of slack at release — well under the 15 minutes that make work urgent.
pub const TIGHT_WINDOW: u32 = 2;

/// `n` renewals due now (local due time = this minute in one of five zones), windows cycling
/// through [`WINDOWS`], over five tenants; a `tight_share` of them, spread evenly, with the
/// [`TIGHT_WINDOW`].
pub fn generate(n: usize, now: DateTime<Utc>, tight_share: f64) -> Vec<Renewal> {
    generate_spread(n, now, 0, tight_share)
}

/// Minutes a staggered day's renewals are spread over ([`generate_spread`]).
pub const STAGGERED_MINUTES: u32 = 40;

/// As [`generate`], but the `i`-th renewal is due `i * span_minutes / n` whole minutes after
/// `start`'s minute: arrivals spread evenly over `span_minutes` (0: all due at once), the
/// shape of a day whose customers are due at different times rather than in one burst.
pub fn generate_spread(n: usize, start: DateTime<Utc>, span_minutes: u32, tight_share: f64) -> Vec<Renewal> {
    let first = start.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap_or(start);
    let tight = |i: usize| (i as f64 * tight_share).floor() != ((i + 1) as f64 * tight_share).floor();
    (0..n)
        .filter_map(|i| {
            let offset = (i as u64 * u64::from(span_minutes)) / (n as u64).max(1);
            let due = first + TimeDelta::minutes(i64::try_from(offset).ok()?);
            run_renewal(i, due, if tight(i) { TIGHT_WINDOW } else { WINDOWS[i % WINDOWS.len()] })
        })
        .collect()
}

/// The channels of the generated renewals: every third is `sms` (index 0), the rest `email`.
pub const CHANNELS: [&str; 2] = ["sms", "email"];

/// The `i`-th renewal of a run's population, due at `due` (whole minutes) in the local time of
/// its zone, with a window of `window_minutes`: tenant, renewal id, recipient, channel and zone
/// all follow from `i`, so fresh renewals and dead letters are named and spread alike.
fn run_renewal(i: usize, due: DateTime<Utc>, window_minutes: u32) -> Option<Renewal> {
    let zone = ZONES[i % ZONES.len()];
    let tz: chrono_tz::Tz = zone.parse().ok()?;
    let local = due.with_timezone(&tz);
    Renewal::validate(&RenewalInput {
        tenant_id: format!("tenant-{}", i % 5),
        renewal_id: format!("run-{i:06}"),
        recipient_ref: format!("cust-{i}"),
        channel: CHANNELS[usize::from(!i.is_multiple_of(3))].into(),
        zone: zone.into(),
        local_due_date: local.format("%Y-%m-%d").to_string(),
        local_send_time: local.format("%H:%M").to_string(),
        window_minutes: window_minutes.to_string(),
        ..RenewalInput::default()
    })
    .ok()
}

// ---- the letters of `punctual run --redrive` ---------------------------------------------------

/// Windows (minutes) of the dead letters `--redrive` seeds: still due, hours ahead, so the
/// redrive selects every one and none expires while it paces them back.
pub const LETTER_WINDOWS: [u32; 2] = [120, 240];

/// Why the seeded letters were quarantined: the attempt budget spent against a throttling
/// provider, the kind a redrive selects by default once the provider is healthy again.
pub const LETTER_REASON: crate::ReasonCode = crate::ReasonCode::AttemptLimit;

/// The `n` renewals whose reminders are dead letters before a `--redrive` run: due in `now`'s
/// minute like [`generate`]'s, named after the `fresh` fresh ones (`run-{fresh + i}`), over the
/// same five tenants and zones, never tight ([`LETTER_WINDOWS`]).
pub fn letter_renewals(fresh: usize, n: usize, now: DateTime<Utc>) -> Vec<Renewal> {
    let first = now.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap_or(now);
    (fresh..fresh + n).filter_map(|i| run_renewal(i, first, LETTER_WINDOWS[i % LETTER_WINDOWS.len()])).collect()
}

/// The renewal's reminder as the scheduler released it at `at`.
pub fn released(r: &Renewal, at: DateTime<Utc>) -> crate::ReminderMessage {
    crate::scheduler::message_for(&crate::ports::Pending::from(r), at)
}

/// Leaves `msg` dead-lettered exactly as the sender does when a reminder's attempt budget is
/// spent, through the same ports in the same order: its attempts recorded by a claim and a
/// deferral (429, `provider_transient`, as the sender settles a throttled call), then the copy
/// carrying the last attempt claimed, quarantined to the DLQ with the sender's attributes
/// ([`SendQueue::dead_letter`](crate::ports::SendQueue::dead_letter), the body unchanged) and
/// settled `dead_lettered` with [`LETTER_REASON`] under the same lease. `at` is when it
/// happened; `message_id` the send queue's id of the copy.
pub async fn dead_letter<L: crate::ports::Ledger, Q: crate::ports::SendQueue>(
    ledger: &L,
    queue: &Q,
    msg: &crate::ReminderMessage,
    message_id: &str,
    at: DateTime<Utc>,
) -> Result<(), crate::ports::BoxError> {
    use crate::ports::{OwnerToken, Quarantine, Settlement};
    use crate::{ReasonCode, ReminderState};
    let attempts = crate::decision::SenderPolicy::default().max_attempts;
    let lease = at + TimeDelta::seconds(60);
    let claim = |owner: OwnerToken, copy: crate::ReminderMessage| async move {
        match ledger.claim(&copy, &owner, at, lease).await? {
            crate::decision::ClaimView::Claimed { .. } => Ok((owner, copy)),
            other => {
                Err(crate::ports::BoxError::from(format!("letter {}: claim answered {other:?}", copy.reminder_id)))
            }
        }
    };
    let settled = |outcome: crate::ports::SettleOutcome| match outcome {
        crate::ports::SettleOutcome::Recorded => Ok(()),
        other => Err(crate::ports::BoxError::from(format!("letter {}: settle answered {other:?}", msg.reminder_id))),
    };
    // The throttled attempts (the last of them), each requeued as the sender requeues a 429.
    let (owner, copy) = claim(OwnerToken::new(format!("{message_id}-throttled")), msg.clone()).await?;
    let deferred = Settlement {
        state: ReminderState::Deferred,
        reason: Some(ReasonCode::ProviderTransient),
        attempts,
        receipt: None,
        provider_status: Some(429),
        next_at: Some(at),
    };
    settled(ledger.settle(&copy, Some(&owner), at, &deferred).await?)?;
    // The copy of the last requeue: the budget is spent, the decision quarantines it.
    let last = crate::ReminderMessage { attempt: attempts, ..msg.clone() };
    let (owner, copy) = claim(OwnerToken::new(format!("{message_id}-limit")), last).await?;
    let body = copy.encode();
    let detail = format!("{attempts} of {attempts} provider attempts already made");
    let q = Quarantine {
        body: &body,
        reason: LETTER_REASON,
        detail: &detail,
        attempts,
        provider_status: None,
        reminder_id: Some(&copy.reminder_id),
        first_enqueued: Some(copy.first_enqueued),
        original_message_id: message_id,
        at,
    };
    queue.dead_letter(&q).await.map_err(|e| crate::ports::BoxError::from(e.to_string()))?;
    let dead = Settlement {
        state: ReminderState::DeadLettered,
        reason: Some(LETTER_REASON),
        attempts,
        receipt: None,
        provider_status: None,
        next_at: None,
    };
    settled(ledger.settle(&copy, Some(&owner), at, &dead).await?)
}

/// The redrive `--redrive` runs: every letter (`max_messages` = `letters`), an operator's
/// reason and owner, the default selection (every reason but unknown outcomes), a canary of
/// ten watched up to five minutes (it joins the back of the fresh backlog), paced at half the
/// redrive share of `quota` (`simulate --scenario redrive`'s cap: fresh traffic keeps the
/// rest of the quota). Validated against the redrive function's caps like any request.
pub fn redrive_request(letters: usize, quota: f64) -> crate::redrive::RedriveRequestWire {
    use crate::redrive::{Field, RedriveRequestWire};
    let share = crate::limiter::LimiterSettings::new(quota).redrive_share;
    RedriveRequestWire {
        reason: Field::Given("provider throttling over; the run's dead letters go back".into()),
        owner: Field::Given("punctual run".into()),
        max_messages: Field::Given(letters as u64),
        max_per_second: Field::Given((quota * share / 2.0).max(1.0)),
        canary: Field::Given(10),
        canary_timeout_seconds: Field::Given(300),
        ..RedriveRequestWire::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::Ledger;
    use crate::testing::{MemoryLedger, MemoryQueue};
    use crate::{ReasonCode, ReminderState};

    #[tokio::test]
    async fn a_seeded_letter_is_left_as_the_sender_leaves_a_spent_budget() {
        let now = Utc::now();
        let letters = letter_renewals(3000, 4, now);
        assert_eq!(letters.len(), 4);
        // Named after the fresh ones, never one of theirs; hours from their deadline.
        let fresh = generate(3000, now, 0.1);
        assert!(letters.iter().all(|l| fresh.iter().all(|f| f.reminder_id != l.reminder_id)));
        assert!(letters.iter().all(|l| l.deliver_by - l.deliver_after >= TimeDelta::hours(2)));

        let (ledger, queue) = (MemoryLedger::new(), MemoryQueue::default());
        let msg = released(&letters[0], now);
        dead_letter(&ledger, &queue, &msg, "m-1", now).await.unwrap();
        let rec = ledger.get(&msg.reminder_id).await.unwrap().unwrap();
        let spent = crate::decision::SenderPolicy::default().max_attempts;
        assert_eq!(
            (rec.state, rec.last_reason, rec.attempts),
            (ReminderState::DeadLettered, Some(LETTER_REASON), spent)
        );
        assert!(rec.history.iter().any(|h| h.state == ReminderState::Deferred), "{:?}", rec.history);
        let dead = queue.dead.lock().unwrap().clone();
        assert_eq!(dead.len(), 1);
        assert_eq!((dead[0].reason, dead[0].attempts), (ReasonCode::AttemptLimit, spent));
        let body = crate::ReminderMessage::decode(&dead[0].body).unwrap();
        assert_eq!((&body.reminder_id, body.attempt, &body.redrive), (&msg.reminder_id, spent, &None));

        // The redrive's request passes the redrive function's default caps at 100/s.
        let caps = crate::redrive::RedriveCaps { max_messages: 1000, max_per_second: 20.0 };
        let req = redrive_request(500, 100.0).validate(caps).unwrap();
        assert_eq!((req.max_messages, req.max_per_second, req.canary), (500, 10.0, 10));
        assert!(req.selection.matches(&body, Some(LETTER_REASON), Some(body.first_enqueued)));
    }
}
