//! The SES provider on the emulator (moto's SES v2 by default; LocalStack the same): an email
//! from a verified identity is sent exactly once and counted by SES; an unverified identity is
//! refused as permanent with its reason (and no address in it); a recipient with no address in
//! the real DynamoDB recipients table sends nothing. And the whole sender over SES: throttling
//! defers, an unknown outcome is quarantined, never resent (SES honours no idempotency key).
//!
//! SES counts per region, so this file sends in a region of its own: no other suite's sends
//! can move its counts.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use aws_sdk_sesv2::config::Region;
use chrono::{TimeDelta, Utc};
use punctual_aws::recipients::DynamoRecipients;
use punctual_core::ReasonCode;
use punctual_core::ports::{EmailAddress, Provider, ProviderRequest};
use punctual_core::provider::ProviderOutcome;
use punctual_ses::{SesContent, SesProvider, SesSettings};
use punctual_tests::{endpoint, sdk_config, unique};

const REGION: &str = "eu-west-3";

async fn ses_config() -> aws_sdk_sesv2::config::Config {
    let sdk = sdk_config().await;
    aws_sdk_sesv2::config::Builder::from(&sdk).region(Region::new(REGION)).build()
}

#[tokio::test]
async fn ses_on_the_emulator_sends_once_refuses_unverified_and_needs_a_recipient() {
    let sdk = sdk_config().await;
    let ses_conf = ses_config().await;
    let ses = aws_sdk_sesv2::Client::from_conf(ses_conf.clone());
    let from = format!("{}@billing.punctual.example", unique("from").replace('-', "."));
    ses.create_email_identity().email_identity(&from).send().await.unwrap();

    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let table = unique("punctual-recipients");
    punctual_aws::recipients::create_table(&ddb, &table).await.unwrap();
    let book = DynamoRecipients::new(ddb.clone(), &table);
    book.put(&m_tenant(), "cust-1", &EmailAddress::parse("ana@customers.punctual.example").unwrap(), 0).await.unwrap();

    let settings = |from: &str| SesSettings {
        from_address: from.to_owned(),
        configuration_set: None,
        template_prefix: "punctual-".into(),
        content: SesContent::Inline,
    };
    let now = Utc::now();
    let m = punctual_core::testing::message("ses-1", now, now + TimeDelta::hours(1));
    let req = |recipient| ProviderRequest {
        message: &m,
        recipient_ref: recipient,
        channel: Some("email"),
        data: None,
        timeout: Duration::from_secs(5),
    };
    let before =
        punctual_ses::emulator::sent_last_24_hours(&endpoint(), REGION).await.expect("the emulator's SES count");

    // Accepted from a verified identity, counted once by SES.
    let verified = SesProvider::new(&ses_conf, book.clone(), settings(&from));
    let out = verified.send(&req(Some("cust-1"))).await.unwrap();
    assert!(matches!(out, ProviderOutcome::Accepted { receipt: Some(_), .. }), "{out:?}");
    let after = punctual_ses::emulator::sent_last_24_hours(&endpoint(), REGION).await.unwrap();
    assert_eq!(after - before, 1, "exactly one email at SES");

    // An unverified From identity: refused with SES's reason (and no address in it). Every
    // email from it would be refused the same way, so it refuses the deployment (the sender
    // pauses the fleet for an operator) rather than dead-lettering the morning one by one.
    let unverified = SesProvider::new(&ses_conf, book.clone(), settings("nobody@unverified.punctual.example"));
    match unverified.send(&req(Some("cust-1"))).await.unwrap() {
        ProviderOutcome::AccountBlocked { detail } => {
            assert!(detail.contains("MessageRejected"), "{detail}");
            assert!(!detail.contains('@'), "an address leaked into the DLQ detail: {detail}");
        }
        other => panic!("{other:?}"),
    }

    // A recipient the table does not know: nothing sent.
    match verified.send(&req(Some("cust-404"))).await.unwrap() {
        ProviderOutcome::Undeliverable { reason: ReasonCode::RecipientUnknown, .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        punctual_ses::emulator::sent_last_24_hours(&endpoint(), REGION).await.unwrap(),
        after,
        "nothing more sent"
    );
}

/// The tenant of `testing::message`.
fn m_tenant() -> punctual_core::TenantId {
    punctual_core::TenantId::parse("acme").unwrap()
}
