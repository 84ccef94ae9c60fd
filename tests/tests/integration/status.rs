//! `punctual status` in O(1)-ish reads: what it sends to DynamoDB is counted by an SDK
//! interceptor (the `X-Amz-Target` of every request), and no request is a Scan, however many
//! reminders the ledger holds.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use chrono::{TimeDelta, Timelike, Utc};
use punctual_aws::ledger::DynamoLedger;
use punctual_core::ports::{Ledger, OwnerToken, Settlement};
use punctual_core::renewal::{Renewal, RenewalInput};
use punctual_core::{ReasonCode, ReminderState};
use punctual_tests::stack::Stack;
use punctual_tests::{Operations, sdk_config};

#[tokio::test]
async fn status_reads_indexes_never_scans_and_its_cost_does_not_grow_with_the_tables() {
    let config = sdk_config().await;
    let stack = Stack::create(&config, "status").await.unwrap();
    let ledger = DynamoLedger::new(stack.ddb.clone(), &stack.ledger_table);
    let now = Utc::now();
    // 60 reminders in the ledger: 40 delivered, 15 dead-lettered by attempts, 5 expired.
    for i in 0..60 {
        let m = punctual_core::testing::message(&format!("s-{i}"), now, now + TimeDelta::hours(1));
        let o = OwnerToken::new(format!("o-{i}"));
        ledger.claim(&m, &o, now, now + TimeDelta::seconds(30)).await.unwrap();
        let (state, reason) = match i {
            0..40 => (ReminderState::Delivered, None),
            40..55 => (ReminderState::DeadLettered, Some(ReasonCode::AttemptLimit)),
            _ => (ReminderState::Expired, Some(ReasonCode::BusinessDeadlineExpired)),
        };
        let s = Settlement { state, reason, attempts: 1, receipt: None, provider_status: None, next_at: None };
        ledger.settle(&m, Some(&o), now, &s).await.unwrap();
    }
    // Two renewals due ten minutes ago, never released.
    let renewals = punctual_aws::renewals::DynamoRenewals::new(stack.ddb.clone(), stack.renewals_table.clone());
    let due = (now - TimeDelta::minutes(10)).with_second(0).unwrap().with_nanosecond(0).unwrap();
    let rows: Vec<Renewal> = (0..2)
        .map(|n| {
            Renewal::validate(&RenewalInput {
                tenant_id: "acme".into(),
                renewal_id: format!("late-{n}"),
                recipient_ref: format!("cust-{n}"),
                channel: "email".into(),
                zone: "UTC".into(),
                local_due_date: due.format("%Y-%m-%d").to_string(),
                local_send_time: due.format("%H:%M").to_string(),
                window_minutes: "240".into(),
                ..RenewalInput::default()
            })
            .unwrap()
        })
        .collect();
    renewals.import(&rows, now).await.unwrap();

    let ops = Operations::default();
    let counted = ops.client(aws_sdk_dynamodb::config::Builder::from(&config));
    let target = stack.target();
    let s = punctual_ops::status_with(&target, counted.clone(), &stack.queues, false).await.unwrap();
    let by_reason = s.dlq_by_reason.clone().expect("the dead index exists");
    assert_eq!(by_reason.get("attempt_limit"), Some(&15), "{by_reason:?}");
    assert_eq!(by_reason.get("business_deadline_expired"), Some(&5), "{by_reason:?}");
    let waited = s.oldest_unreleased_seconds.expect("two renewals wait for the scheduler");
    assert!((540.0..=700.0).contains(&waited), "{waited}");
    let sent = ops.sent();
    assert!(!sent.iter().any(|op| op == "Scan"), "status scanned: {sent:?}");
    assert!(sent.iter().all(|op| op == "Query" || op == "GetItem"), "{sent:?}");
    // One COUNT query per reason code, one per due shard, one GetItem for the pause switch,
    // two per outbox shard (its count, its oldest): the same number for 60 reminders as for 60
    // million (an outbox of more than a page per shard, 1 MB of keys, adds a page).
    let queries = sent.iter().filter(|op| *op == "Query").count();
    let outbox = 2 * punctual_aws::ledger::OUTBOX_SHARDS as usize;
    assert_eq!(queries, ReasonCode::ALL.len() + 1 + punctual_aws::renewals::DUE_SHARDS as usize + outbox, "{sent:?}");
    let o = s.outbox.expect("the outbox index exists");
    assert_eq!(o.pending > 0, o.oldest_seconds.is_some(), "{o:?}");
    assert_eq!(s.requests as usize, sent.len() + 3, "the reported cost is the real one (3 SQS reads)");
    assert!(s.slo_today.is_none());

    // With today's SLO: the two renewals due ten minutes ago and never released are breached
    // (past the grace, nothing can meet them), and their tenant is the worst. Still no scan.
    ops.clear();
    let s = punctual_ops::status_with(&target, counted, &stack.queues, true).await.unwrap();
    let slo = s.slo_today.clone().unwrap_or_else(|| panic!("{:?}", s.slo_unavailable));
    if due.date_naive() == now.date_naive() {
        assert_eq!((slo.counts.breached, slo.counts.met), (2, 0), "{slo:?}");
        assert_eq!(slo.worst_tenants[0].tenant_id, "acme");
    }
    let sent = ops.sent();
    assert!(sent.iter().all(|op| op == "Query" || op == "GetItem" || op == "BatchGetItem"), "{sent:?}");
    assert_eq!(s.requests as usize, sent.len() + 5, "the reported cost is the real one (5 SQS reads)");
    stack.destroy().await;
}
