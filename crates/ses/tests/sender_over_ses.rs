//! The sender service over the SES adapter (real SDK, loopback SES double): what each SES
//! answer comes to for a reminder, with `at_most_once` in force because SES honours no key.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use aws_sdk_sesv2::config::{Credentials, Region};
use chrono::TimeDelta;
use punctual_core::clock::{Clock, ManualClock};
use punctual_core::decision::Disposition;
use punctual_core::limiter::{LimiterSettings, SharedLimiter};
use punctual_core::sender::{Received, Sender, SenderSettings};
use punctual_core::testing::{AllActive, MemoryLedger, MemoryQueue, MemoryRecipients, MemorySlotStore};
use punctual_core::{ReasonCode, ReminderState};
use punctual_provider_double::{Behaviour, Config, Double};
use punctual_ses::{SesContent, SesProvider, SesSettings};

#[tokio::test]
async fn throttling_defers_a_rejection_quarantines_and_an_unknown_outcome_is_never_resent() {
    let double = Double::start(Config::default(), 0).await.unwrap();
    let sdk = aws_sdk_sesv2::config::Builder::new()
        .behavior_version_latest()
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static"))
        .endpoint_url(double.ses_endpoint())
        .build();
    let recipients = MemoryRecipients::default();
    // testing::AllActive gives every renewal the recipient_ref "recipient:{tenant}:{renewal}".
    for n in 1..=3 {
        recipients.set("acme", &format!("recipient:acme:ren-{n}"), &format!("c{n}@example.com"));
    }
    let settings = SesSettings {
        from_address: "r@example.com".into(),
        configuration_set: None,
        template_prefix: "punctual-".into(),
        content: SesContent::Template,
    };
    let clock = ManualClock::new(chrono::Utc::now());
    let ledger = MemoryLedger::new();
    let queue = MemoryQueue::new();
    let limiter = SharedLimiter::new(MemorySlotStore::default(), clock.clone(), LimiterSettings::new(100.0), 1);
    let sender = Sender::new(
        ledger.clone(),
        AllActive,
        limiter,
        SesProvider::new(&sdk, recipients, settings),
        queue.clone(),
        clock.clone(),
        SenderSettings::default(),
        3,
    );
    double.script([
        Behaviour {
            status: Some(429),
            headers: vec![("x-amzn-errortype".into(), "TooManyRequestsException".into())],
            body: Some(r#"{"message":"Maximum sending rate exceeded."}"#.into()),
            ..Behaviour::default()
        },
        Behaviour {
            status: Some(400),
            headers: vec![("x-amzn-errortype".into(), "MessageRejected".into())],
            body: Some(r#"{"message":"Email address is not verified: c2@example.com"}"#.into()),
            ..Behaviour::default()
        },
        Behaviour { drop: true, ..Behaviour::default() },
    ]);
    let now = clock.now();
    let deadline = now + TimeDelta::seconds(30);
    let mut outcomes = Vec::new();
    for n in 1..=3 {
        let m = punctual_core::testing::message(&n.to_string(), now - TimeDelta::minutes(1), now + TimeDelta::hours(2));
        outcomes.push((
            m.clone(),
            sender.process(Received { message_id: "m", body: &m.encode() }, deadline).await.unwrap(),
        ));
    }
    assert!(matches!(outcomes[0].1.disposition, Disposition::Defer { .. }), "{:?}", outcomes[0].1);
    assert!(outcomes[0].1.throttled, "the limiter heard the throttle");
    assert!(
        matches!(outcomes[1].1.disposition, Disposition::Quarantine { reason: ReasonCode::ClassifiedPermanent, .. }),
        "{:?}",
        outcomes[1].1
    );
    assert!(
        matches!(outcomes[2].1.disposition, Disposition::Quarantine { reason: ReasonCode::ProviderIndeterminate, .. }),
        "{:?}",
        outcomes[2].1
    );
    let dead = queue.dead();
    assert_eq!(dead.len(), 2);
    assert!(dead.iter().all(|d| !format!("{d:?}").contains("@example.com")), "no address in the DLQ: {dead:?}");
    // The unknown one stays marked: a duplicate copy neither claims nor sends.
    let (m, _) = &outcomes[2];
    let rec = punctual_core::ports::Ledger::get(&ledger, &m.reminder_id).await.unwrap().unwrap();
    assert_eq!(rec.state, ReminderState::DeadLettered);
    assert!(rec.call_owner.is_some());
    clock.advance(Duration::from_secs(1));
    sender.process(Received { message_id: "m-dup", body: &m.encode() }, deadline).await.unwrap();
    assert_eq!(double.ses_requests().len(), 3, "three sends, none repeated");
}
