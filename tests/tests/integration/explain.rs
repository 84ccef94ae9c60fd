//! `punctual explain` on reminders no sender has recorded: it reads the renewal's row (the
//! `by_day_channel` index) and says what `punctual reconcile` says of it — never released, expired at
//! release, a letter the queue's backstop moved — instead of "never processed".

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use punctual_aws::renewals::DynamoRenewals;
use punctual_core::ports::{DueStore, Ledger, Pending};
use punctual_core::renewal::{Renewal, RenewalInput};
use punctual_core::{ReminderMessage, ids::CorrelationId};
use punctual_tests::sdk_config;
use punctual_tests::stack::Stack;

fn minute(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_second(0).unwrap().with_nanosecond(0).unwrap()
}

/// A renewal due at `at` (UTC, minute-aligned) with a window of `window` minutes.
fn row(id: &str, at: DateTime<Utc>, window: u32) -> Renewal {
    Renewal::validate(&RenewalInput {
        tenant_id: "acme".into(),
        renewal_id: id.into(),
        recipient_ref: format!("cust-{id}"),
        channel: "email".into(),
        zone: "UTC".into(),
        local_due_date: at.format("%Y-%m-%d").to_string(),
        local_send_time: at.format("%H:%M").to_string(),
        window_minutes: window.to_string(),
        ..RenewalInput::default()
    })
    .unwrap()
}

#[tokio::test]
async fn explain_says_what_reconcile_says_of_a_reminder_no_sender_recorded() {
    let config = sdk_config().await;
    let stack = Stack::create(&config, "explain").await.unwrap();
    let renewals = DynamoRenewals::new(stack.ddb.clone(), stack.renewals_table.clone());
    let now = Utc::now();
    let due = minute(now - TimeDelta::minutes(10));
    // Due 10 minutes ago, never released (no scheduler ran).
    let never = row("never", due, 240);
    // Released 9 minutes ago; SQS's maxReceiveCount then moved its message to the DLQ (no
    // attributes: no sender ever decided it).
    let backstop = row("backstop", due, 240);
    renewals.import(&[never.clone(), backstop.clone()], now).await.unwrap();
    renewals.mark_enqueued(&Pending::from(&backstop), now - TimeDelta::minutes(9)).await.unwrap();
    let body = ReminderMessage {
        channel: None,
        reminder_id: backstop.reminder_id.clone(),
        renewal_id: backstop.renewal_id.clone(),
        tenant_id: backstop.tenant_id.clone(),
        kind: backstop.kind.clone(),
        deliver_after: backstop.deliver_after,
        deliver_by: backstop.deliver_by,
        attempt: 0,
        first_enqueued: now - TimeDelta::minutes(9),
        correlation_id: CorrelationId::parse("corr-backstop").unwrap(),
        redrive: None,
    };
    stack.sqs.send_message().queue_url(stack.queues.dlq_url()).message_body(body.encode()).send().await.unwrap();
    // Imported three hours ago with a one-hour window; the scheduler, paused meanwhile, found
    // it past its deadline and expired it at release.
    let expired = row("expired", minute(now - TimeDelta::hours(3)), 60);
    renewals.import(std::slice::from_ref(&expired), now - TimeDelta::hours(3) - TimeDelta::minutes(5)).await.unwrap();
    renewals.mark_expired(&Pending::from(&expired), now - TimeDelta::hours(1)).await.unwrap();

    let target = stack.target();
    for (r, want) in
        [(&never, "never released"), (&backstop, "receive_count_backstop"), (&expired, "expired at release")]
    {
        let e = punctual_ops::explain(&target, r.reminder_id.as_str())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", r.renewal_id));
        assert!(e.why.contains(want), "{}: {:?} should say {want:?}\n{}", r.renewal_id, e.why, e.render());
        assert_eq!(e.deliver_by, r.deliver_by);
        assert!(e.render().contains(&format!("renewal           acme/{}", r.renewal_id)), "{}", e.render());
    }
    let letter = punctual_ops::explain(&target, backstop.reminder_id.as_str()).await.unwrap();
    assert_eq!(
        (letter.state.as_str(), letter.dlq_reason.as_deref()),
        ("dead_lettered", Some("receive_count_backstop"))
    );
    assert!(letter.redrive_would_consume.starts_with("1 of the request's max_messages"), "{letter:?}");
    let pending = punctual_ops::explain(&target, never.reminder_id.as_str()).await.unwrap();
    assert_eq!(pending.renewal.as_ref().map(|r| r.reconcile.as_str()), Some("unaccounted"));

    // Cancelled at send, then active again and re-armed: the record says cancelled, reconcile
    // (from the row) says it waits for release — explain says the latter.
    let back = row("back", due, 240);
    renewals.import(std::slice::from_ref(&back), now).await.unwrap();
    renewals.mark_enqueued(&Pending::from(&back), now - TimeDelta::minutes(9)).await.unwrap();
    let mut cancelled = back.clone();
    cancelled.status = punctual_core::renewal::RenewalStatus::Cancelled;
    renewals.import(std::slice::from_ref(&cancelled), now).await.unwrap();
    let ledger = punctual_aws::ledger::DynamoLedger::new(stack.ddb.clone(), &stack.ledger_table);
    let copy = ReminderMessage { reminder_id: back.reminder_id.clone(), renewal_id: back.renewal_id.clone(), ..body };
    let owner = punctual_core::ports::OwnerToken::new("explain-test");
    ledger.claim(&copy, &owner, now - TimeDelta::minutes(8), now).await.unwrap();
    let cancel = punctual_core::testing::ending(
        punctual_core::ReminderState::Cancelled,
        punctual_core::ReasonCode::Cancelled,
        0,
        None,
    );
    ledger.settle(&copy, Some(&owner), now - TimeDelta::minutes(8), &cancel).await.unwrap();
    renewals.import(std::slice::from_ref(&back), now).await.unwrap();
    let e = punctual_ops::explain(&target, back.reminder_id.as_str()).await.unwrap();
    assert_eq!(e.state, "cancelled");
    assert!(e.why.contains("active again") && e.why.contains("never released"), "{}", e.render());

    // A reminder id nothing knows.
    let stranger = row("stranger", due, 240);
    let Err(punctual_ops::OpsError::NotFound(why)) =
        punctual_ops::explain(&target, stranger.reminder_id.as_str()).await
    else {
        panic!("found a reminder nothing holds")
    };
    assert!(why.contains("no renewal of the renewals table"), "{why}");
    stack.destroy().await;
}
