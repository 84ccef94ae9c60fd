//! The SES adapter through the real AWS SDK against a loopback double of the SES v2 REST API:
//! the request it builds (a stored template, no address outside `Destination`), SES's error
//! answers as the SDK parses them, and the failures of the connection itself. The end-to-end
//! sends run on moto (`tests/tests/ses.rs`, `punctual run --provider ses`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use aws_sdk_sesv2::config::{Credentials, Region};
use chrono::{TimeDelta, Utc};
use punctual_core::ReasonCode;
use punctual_core::ports::{Provider, ProviderRequest};
use punctual_core::provider::{ProviderOutcome, RetryAfter};
use punctual_core::testing::MemoryRecipients;
use punctual_provider_double::{Behaviour, Config, Double};
use punctual_ses::{SesContent, SesProvider, SesSettings};

const ADDRESS: &str = "ana.customer@example.com";

fn sdk(endpoint: &str) -> aws_sdk_sesv2::config::Config {
    aws_sdk_sesv2::config::Builder::new()
        .behavior_version_latest()
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static"))
        .endpoint_url(endpoint)
        .build()
}

fn provider(endpoint: &str, content: SesContent) -> SesProvider<MemoryRecipients> {
    let recipients = MemoryRecipients::default();
    recipients.set("acme", "cust-1", ADDRESS);
    // Another tenant's customer under the same reference.
    recipients.set("globex", "cust-1", "bo@globex.example");
    recipients.set("globex", "cust-2", "cy@globex.example");
    let settings = SesSettings {
        from_address: "reminders@billing.example.com".into(),
        configuration_set: Some("punctual-events".into()),
        template_prefix: "punctual-".into(),
        content,
    };
    SesProvider::new(&sdk(endpoint), recipients, settings)
}

async fn send(p: &SesProvider<MemoryRecipients>, recipient: Option<&str>) -> ProviderOutcome {
    let now = Utc::now();
    let m = punctual_core::testing::message("1", now, now + TimeDelta::hours(1));
    p.send(&ProviderRequest {
        message: &m,
        recipient_ref: recipient,
        channel: Some("email"),
        data: None,
        timeout: Duration::from_secs(2),
    })
    .await
    .unwrap()
}

fn error(status: u16, kind: &str, message: &str) -> Behaviour {
    Behaviour {
        status: Some(status),
        headers: vec![("x-amzn-errortype".into(), format!("{kind}:http://internal.amazon.com/"))],
        body: Some(serde_json::json!({ "message": message }).to_string()),
        ..Behaviour::default()
    }
}

#[tokio::test]
async fn a_send_names_the_kinds_template_and_carries_the_address_only_in_the_destination() {
    let double = Double::start(Config::default(), 0).await.unwrap();
    let p = provider(&double.ses_endpoint(), SesContent::Template);
    assert!(!p.profile().honours_keys, "SES honours no idempotency key");
    let out = send(&p, Some("cust-1")).await;
    assert_eq!(out, ProviderOutcome::Accepted { status: 200, receipt: Some("ses-1".into()), budget: None });
    let reqs = double.ses_requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r["Destination"]["ToAddresses"][0], ADDRESS);
    assert_eq!(r["FromEmailAddress"], "reminders@billing.example.com");
    assert_eq!(r["ConfigurationSetName"], "punctual-events");
    assert_eq!(r["Content"]["Template"]["TemplateName"], "punctual-renewal_7d");
    let data: serde_json::Value =
        serde_json::from_str(r["Content"]["Template"]["TemplateData"].as_str().unwrap()).unwrap();
    assert_eq!(data["renewal_id"], "ren-1");
    assert_eq!(r["EmailTags"][0]["Name"], "punctual_reminder");
    // The address appears exactly once: in the destination.
    assert_eq!(r.to_string().matches(ADDRESS).count(), 1, "{r}");

    let inline = provider(&double.ses_endpoint(), SesContent::Inline);
    send(&inline, Some("cust-1")).await;
    let r = &double.ses_requests()[1];
    assert!(r["Content"]["Simple"]["Body"]["Text"]["Data"].as_str().unwrap().contains("ren-1"), "{r}");
}

#[tokio::test]
async fn ses_errors_are_classified_and_addresses_in_them_redacted() {
    let double = Double::start(Config::default(), 0).await.unwrap();
    let p = provider(&double.ses_endpoint(), SesContent::Template);
    double.script([
        error(429, "TooManyRequestsException", "Maximum sending rate exceeded."),
        error(429, "TooManyRequestsException", "Daily message quota exceeded."),
        error(400, "AccountSuspendedException", "Account suspended."),
        error(400, "MessageRejected", &format!("Email address is not verified: {ADDRESS}")),
        error(404, "NotFoundException", "Template punctual-renewal_due does not exist."),
        error(400, "Throttling", "Rate exceeded"),
        error(503, "ServiceUnavailable", "try later"),
        error(500, "InternalFailure", "oops"),
        error(403, "AccessDeniedException", "not authorized to perform ses:SendEmail"),
        error(400, "MessageRejected", "Email address is not verified: reminders@billing.example.com"),
        error(408, "RequestTimeout", "timed out"),
    ]);
    let outcomes = [
        send(&p, Some("cust-1")).await,
        send(&p, Some("cust-1")).await,
        send(&p, Some("cust-1")).await,
        send(&p, Some("cust-1")).await,
        send(&p, Some("cust-1")).await,
        send(&p, Some("cust-1")).await,
        send(&p, Some("cust-1")).await,
        send(&p, Some("cust-1")).await,
        send(&p, Some("cust-1")).await,
        send(&p, Some("cust-1")).await,
        send(&p, Some("cust-1")).await,
    ];
    assert_eq!(outcomes[0], ProviderOutcome::Transient { status: Some(429), retry_after: None });
    assert_eq!(
        outcomes[1],
        ProviderOutcome::Transient { status: Some(429), retry_after: Some(RetryAfter::Seconds(600)) }
    );
    assert!(
        matches!(&outcomes[2], ProviderOutcome::AccountBlocked { detail } if detail.contains("AccountSuspended")),
        "{:?}",
        outcomes[2]
    );
    match &outcomes[3] {
        ProviderOutcome::Undeliverable { reason: ReasonCode::ClassifiedPermanent, detail } => {
            assert!(detail.contains("MessageRejected") && !detail.contains('@'), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    // A missing template is the deployment's: the fleet pauses.
    assert!(matches!(&outcomes[4], ProviderOutcome::AccountBlocked { detail } if detail.contains("NotFound")));
    assert_eq!(outcomes[5], ProviderOutcome::Transient { status: Some(429), retry_after: None });
    assert_eq!(outcomes[6], ProviderOutcome::Transient { status: Some(503), retry_after: None });
    assert_eq!(outcomes[7], ProviderOutcome::Indeterminate { status: Some(500) });
    // Permissions, and a refused From identity, are the deployment's too; a 408 may have acted.
    assert!(
        matches!(&outcomes[8], ProviderOutcome::AccountBlocked { detail } if detail.contains("AccessDenied")),
        "{:?}",
        outcomes[8]
    );
    assert!(
        matches!(&outcomes[9], ProviderOutcome::AccountBlocked { detail } if !detail.contains('@')),
        "{:?}",
        outcomes[9]
    );
    assert_eq!(outcomes[10], ProviderOutcome::Indeterminate { status: Some(408) });
    // The SDK retried none of them: a retried SendEmail would be a second email.
    assert_eq!(double.ses_requests().len(), 11);
}

#[tokio::test]
async fn a_lost_connection_is_indeterminate_a_refused_one_is_not() {
    let double = Double::start(Config::default(), 0).await.unwrap();
    let p = provider(&double.ses_endpoint(), SesContent::Template);
    double.script([Behaviour { drop: true, ..Behaviour::default() }]);
    assert_eq!(send(&p, Some("cust-1")).await, ProviderOutcome::Indeterminate { status: None });
    assert_eq!(double.ses_requests().len(), 1, "no SDK retry after the drop");
    // Nothing listens here: the request never left.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let p = provider(&format!("http://{closed}"), SesContent::Template);
    assert_eq!(send(&p, Some("cust-1")).await, ProviderOutcome::Transient { status: None, retry_after: None });
}

#[tokio::test]
async fn a_missing_recipient_sends_nothing_and_says_why() {
    let double = Double::start(Config::default(), 0).await.unwrap();
    let p = provider(&double.ses_endpoint(), SesContent::Template);
    for (recipient, why) in
        [(None, "no recipient_ref"), (Some("cust-404"), "no address for recipient_ref \"cust-404\"")]
    {
        match send(&p, recipient).await {
            ProviderOutcome::Undeliverable { reason: ReasonCode::RecipientUnknown, detail } => {
                assert!(detail.contains(why), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(double.ses_requests().is_empty());
}

/// A reference is resolved inside the message's tenant only: acme's `cust-1` goes to acme's
/// customer although globex holds a `cust-1` too, and globex's `cust-2` is never an answer for
/// acme.
#[tokio::test]
async fn a_reference_resolves_inside_the_messages_tenant_only() {
    let double = Double::start(Config::default(), 0).await.unwrap();
    let p = provider(&double.ses_endpoint(), SesContent::Template);
    assert!(matches!(send(&p, Some("cust-1")).await, ProviderOutcome::Accepted { .. }));
    assert_eq!(double.ses_requests()[0]["Destination"]["ToAddresses"][0], ADDRESS);
    match send(&p, Some("cust-2")).await {
        ProviderOutcome::Undeliverable { reason: ReasonCode::RecipientUnknown, detail } => {
            assert!(detail.contains("of tenant acme"), "{detail}");
        }
        other => panic!("globex's cust-2 answered acme's lookup: {other:?}"),
    }
    assert_eq!(double.ses_requests().len(), 1);
}

/// A recipient refused by SES whose address merely contains the From address
/// (`xreminders@…`, `…example.com.au`) is that message's problem, not the deployment's: only
/// the From address itself, as a whole word, is a refused identity that pauses the fleet.
#[tokio::test]
async fn only_the_from_address_itself_is_a_refused_identity() {
    let double = Double::start(Config::default(), 0).await.unwrap();
    let p = provider(&double.ses_endpoint(), SesContent::Template);
    let failed = "Email address is not verified. The following identities failed the check in region US-EAST-1:";
    double.script([
        error(400, "MessageRejected", &format!("{failed} xreminders@billing.example.com")),
        error(400, "MessageRejected", &format!("{failed} reminders@billing.example.com.au")),
        error(400, "MessageRejected", &format!("{failed} Reminders@Billing.example.com.")),
        error(400, "MessageRejected", &format!("{failed} <reminders@billing.example.com>, {ADDRESS}")),
    ]);
    for (i, what) in ["a recipient with a prefix", "a recipient with a suffix"].iter().enumerate() {
        match send(&p, Some("cust-1")).await {
            ProviderOutcome::Undeliverable { reason: ReasonCode::ClassifiedPermanent, detail } => {
                assert!(!detail.contains('@'), "{detail}");
            }
            other => panic!("case {i}, {what}, read as the From identity: {other:?}"),
        }
    }
    for what in ["the From address, another case, end of sentence", "the From address in brackets"] {
        let out = send(&p, Some("cust-1")).await;
        assert!(matches!(&out, ProviderOutcome::AccountBlocked { .. }), "{what}: {out:?}");
    }
}

/// A recipients store slow enough to leave the SES call almost none of the budget.
#[derive(Clone)]
struct SlowRecipients(MemoryRecipients, Duration);

impl punctual_core::ports::Recipients for SlowRecipients {
    async fn address(
        &self,
        tenant: &punctual_core::ids::TenantId,
        recipient_ref: &str,
    ) -> Result<Option<punctual_core::ports::EmailAddress>, punctual_core::ports::RecipientsError> {
        tokio::time::sleep(self.1).await;
        self.0.address(tenant, recipient_ref).await
    }
}

/// R10a: when the recipients lookup has spent nearly all of the call's budget, calling SES with
/// what is left (a few ms) would time out after the request may have left: an indeterminate
/// outcome for an email that was most likely never sent. Below a floor the adapter does not
/// call: a transient, nothing sent.
#[tokio::test]
async fn a_budget_spent_on_the_lookup_sends_nothing() {
    let double = Double::start(Config::default(), 0).await.unwrap();
    let recipients = MemoryRecipients::default();
    recipients.set("acme", "cust-1", ADDRESS);
    let settings = SesSettings {
        from_address: "reminders@billing.example.com".into(),
        configuration_set: None,
        template_prefix: "punctual-".into(),
        content: SesContent::Template,
    };
    // The lookup takes 450 ms of a 500 ms budget: at most 50 ms are left, below the floor.
    let p = SesProvider::new(
        &sdk(&double.ses_endpoint()),
        SlowRecipients(recipients, Duration::from_millis(450)),
        settings,
    );
    assert!(punctual_ses::MIN_SEND_BUDGET > Duration::from_millis(50));
    let now = Utc::now();
    let m = punctual_core::testing::message("1", now, now + TimeDelta::hours(1));
    let out = p
        .send(&ProviderRequest {
            message: &m,
            recipient_ref: Some("cust-1"),
            channel: Some("email"),
            data: None,
            timeout: Duration::from_millis(500),
        })
        .await
        .unwrap();
    assert_eq!(
        out,
        ProviderOutcome::Transient { status: None, retry_after: None },
        "SES was called with at most 50 ms left ({} requests reached it)",
        double.ses_requests().len()
    );
    assert!(double.ses_requests().is_empty(), "nothing may reach SES");
}

#[tokio::test]
async fn the_renewals_template_variables_are_the_templates_data_beside_punctuals_own() {
    let double = Double::start(Config::default(), 0).await.unwrap();
    let p = provider(&double.ses_endpoint(), SesContent::Template);
    let now = Utc::now();
    let m = punctual_core::testing::message("1", now, now + TimeDelta::hours(1));
    let mut fields = serde_json::Map::new();
    fields.insert("plan".into(), "pro".into());
    // A clash: punctual's own variable wins, so a template can rely on it.
    fields.insert("renewal_id".into(), "spoofed".into());
    let data = punctual_core::renewal::TemplateData::from_object(&fields).unwrap();
    let req = ProviderRequest {
        message: &m,
        recipient_ref: Some("cust-1"),
        channel: Some("email"),
        data: Some(&data),
        timeout: Duration::from_secs(2),
    };
    assert!(matches!(p.send(&req).await.unwrap(), ProviderOutcome::Accepted { .. }));
    let reqs = double.ses_requests();
    let sent: serde_json::Value =
        serde_json::from_str(reqs[0]["Content"]["Template"]["TemplateData"].as_str().unwrap()).unwrap();
    assert_eq!(sent["plan"], "pro");
    assert_eq!(sent["renewal_id"], m.renewal_id.as_str());
}
