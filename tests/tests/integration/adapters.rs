//! Adapters on the emulator beyond the ledger: Secrets Manager token loading, the renewals
//! table, SQS batch sends with per-entry results.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use punctual_aws::dynamodb::create_pk_table;
use punctual_aws::renewals::DynamoRenewals;
use punctual_aws::secrets::{TokenError, from_secrets_manager};
use punctual_aws::sqs::{EntryResult, Outgoing};
use punctual_core::decision::RenewalView;
use punctual_core::ports::Renewals;
use punctual_core::{RenewalId, TenantId};
use punctual_tests::stack::Stack;
use punctual_tests::{sdk_config, unique};

#[tokio::test]
async fn the_provider_token_is_read_from_secrets_manager_in_both_shapes() {
    let config = sdk_config().await;
    let sm = aws_sdk_secretsmanager::Client::new(&config);
    let plain = sm.create_secret().name(unique("punctual-token")).secret_string("tok-plain").send().await.unwrap();
    let json = sm
        .create_secret()
        .name(unique("punctual-token"))
        .secret_string("{\"token\":\"tok-json\"}")
        .send()
        .await
        .unwrap();
    let bad = sm.create_secret().name(unique("punctual-token")).secret_string("{\"key\":\"x\"}").send().await.unwrap();
    assert_eq!(from_secrets_manager(&config, plain.arn().unwrap()).await.unwrap().expose(), "tok-plain");
    assert_eq!(from_secrets_manager(&config, json.arn().unwrap()).await.unwrap().expose(), "tok-json");
    let e = from_secrets_manager(&config, bad.arn().unwrap()).await.unwrap_err();
    assert!(matches!(e, TokenError::NoTokenField { .. }), "{e}");
    let missing =
        from_secrets_manager(&config, "arn:aws:secretsmanager:us-east-1:000000000000:secret:nope").await.unwrap_err();
    assert!(matches!(missing, TokenError::SecretsManager { .. }));
}

/// After a rotation (a new secret value), the token source the sender hands the provider client
/// reads the new token through the real SDK.
#[tokio::test]
async fn the_token_source_reads_a_rotated_secret() {
    use punctual_core::secret::TokenSource;
    let config = sdk_config().await;
    let sm = aws_sdk_secretsmanager::Client::new(&config);
    let secret = sm.create_secret().name(unique("punctual-token")).secret_string("tok-before").send().await.unwrap();
    let arn = secret.arn().unwrap();
    let source = punctual_aws::secrets::SecretsManagerToken::new(&config, arn);
    assert_eq!(source.fetch().await.unwrap().expose(), "tok-before");
    sm.put_secret_value().secret_id(arn).secret_string("{\"token\":\"tok-after\"}").send().await.unwrap();
    assert_eq!(source.fetch().await.unwrap().expose(), "tok-after");
}

#[tokio::test]
async fn the_renewals_table_answers_each_status() {
    let config = sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let table = unique("punctual-renewals");
    create_pk_table(&ddb, &table).await.unwrap();
    let renewals = DynamoRenewals::new(ddb.clone(), &table);
    let tenant = TenantId::parse("acme").unwrap();
    for (id, status, view) in [
        ("r-a", "active", RenewalView::Active),
        ("r-c", "cancelled", RenewalView::Cancelled),
        ("r-p", "paid", RenewalView::Paid),
    ] {
        let rid = RenewalId::parse(id).unwrap();
        renewals.put(&tenant, &rid, status, "ref-1", "sms").await.unwrap();
        let got = renewals.lookup(&tenant, &rid).await.unwrap();
        assert_eq!(
            (got.view, got.recipient_ref.as_deref(), got.channel.as_deref()),
            (view, Some("ref-1"), Some("sms"))
        );
    }
    let none = renewals.lookup(&tenant, &RenewalId::parse("r-none").unwrap()).await.unwrap();
    assert_eq!(none.view, RenewalView::Missing);
    renewals.put(&tenant, &RenewalId::parse("r-x").unwrap(), "archived", "ref", "email").await.unwrap();
    let e = renewals.lookup(&tenant, &RenewalId::parse("r-x").unwrap()).await.unwrap_err();
    assert!(e.to_string().contains("archived"), "{e}");
    ddb.delete_table().table_name(&table).send().await.unwrap();
}

#[tokio::test]
async fn batch_sends_split_into_tens_and_report_each_entry() {
    let stack = Stack::create(&sdk_config().await, "batch").await.unwrap();
    let out: Vec<Outgoing> = (0..23)
        .map(|i| Outgoing { id: format!("e{i}"), body: format!("{{\"n\":{i}}}"), delay: Duration::ZERO, group: None })
        .collect();
    let results = stack.queues.send_batch(stack.queues.send_url(), &out).await.unwrap();
    assert_eq!(results.len(), 23);
    assert!(results.iter().all(|r| matches!(r, EntryResult::Sent { .. })), "{results:?}");
    assert_eq!(
        stack.queue_count(stack.queues.send_url(), QueueAttributeName::ApproximateNumberOfMessages).await.unwrap(),
        23
    );
    let ids: Vec<_> = results
        .iter()
        .map(|r| match r {
            EntryResult::Sent { id, .. } | EntryResult::Failed { id, .. } => id.clone(),
        })
        .collect();
    assert_eq!(ids, (0..23).map(|i| format!("e{i}")).collect::<Vec<_>>(), "results come back in input order");
    stack.destroy().await;
}

/// SQS fair queues (2025): every send to a send queue — the scheduler's release, the sender's
/// requeue, the redrive's send-back — carries `MessageGroupId = tenant_id`, read back through
/// the emulator; the DLQ copy carries none.
#[tokio::test]
async fn every_send_to_a_send_queue_names_its_tenant_as_the_message_group() {
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    use punctual_aws::control::SqsDeadLetters;
    use punctual_core::lanes::QueueLane;
    use punctual_core::ports::{DeadLetters, Release, ReleaseQueue, SendQueue};
    let config = sdk_config().await;
    let stack = Stack::create(&config, "fair").await.unwrap();
    let now = chrono::Utc::now();
    let msg = |name: &str, tenant: &str| punctual_core::ReminderMessage {
        tenant_id: TenantId::parse(tenant).unwrap(),
        ..punctual_core::testing::message(name, now, now + chrono::TimeDelta::hours(1))
    };
    let q = &stack.queues;
    q.release(&[Release { message: msg("a", "tenant-a"), delay: Duration::ZERO, lane: QueueLane::Normal }])
        .await
        .unwrap();
    q.requeue(&msg("b", "tenant-b"), Duration::ZERO, QueueLane::Normal).await.unwrap();
    SqsDeadLetters::new(q.clone()).send_back(&msg("c", "tenant-c").encode(), QueueLane::Normal).await.unwrap();
    let mut groups = Vec::new();
    for _ in 0..10 {
        let got = stack
            .sqs
            .receive_message()
            .queue_url(q.send_url())
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .send()
            .await
            .unwrap();
        for m in got.messages() {
            let group = m.attributes().and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId)).cloned();
            groups.push(group.unwrap_or_else(|| "<none>".into()));
        }
        if groups.len() >= 3 {
            break;
        }
    }
    groups.sort();
    assert_eq!(groups, ["tenant-a", "tenant-b", "tenant-c"]);
    stack.destroy().await;
}

/// A message due now for an hour, on `channel` (`None`: a body from before channels).
fn on_channel(name: &str, channel: Option<&str>) -> punctual_core::ReminderMessage {
    let now = chrono::Utc::now();
    punctual_core::ReminderMessage {
        channel: channel.map(str::to_owned),
        ..punctual_core::testing::message(name, now, now + chrono::TimeDelta::hours(1))
    }
}

/// A channel with a queue of its own: the scheduler's release, the sender's requeue (whatever
/// its lane) and the redrive's send-back of an SMS message all land on the SMS queue, an email
/// message and an older body without a channel on the lanes, and the depth the scheduler
/// paces by counts the SMS queue's messages too.
#[tokio::test]
async fn a_channel_with_its_own_queue_gets_every_send_of_its_messages() {
    use punctual_aws::control::SqsDeadLetters;
    use punctual_core::lanes::QueueLane;
    use punctual_core::ports::{DeadLetters, Release, ReleaseQueue, SendQueue};
    let config = sdk_config().await;
    let stack = Stack::create(&config, "chq").await.unwrap();
    let sms_url = stack.sqs.create_queue().queue_name(unique("punctual-sms")).send().await.unwrap().queue_url.unwrap();
    let q = stack.queues.clone().with_channel_queues(&[("sms".to_owned(), sms_url.clone())]);
    let msg = on_channel;
    let release = |m, lane| Release { message: m, delay: Duration::ZERO, lane };
    q.release(&[
        release(msg("sms-1", Some("sms")), QueueLane::Normal),
        release(msg("mail-1", Some("email")), QueueLane::Normal),
        release(msg("sms-2", Some("sms")), QueueLane::Urgent),
        release(msg("old-1", None), QueueLane::Normal),
    ])
    .await
    .unwrap();
    q.requeue(&msg("sms-3", Some("sms")), Duration::ZERO, QueueLane::Urgent).await.unwrap();
    SqsDeadLetters::new(q.clone()).send_back(&msg("sms-4", Some("sms")).encode(), QueueLane::Normal).await.unwrap();
    let depths = punctual_core::ports::ReleaseQueue::depth(&q).await.unwrap();
    assert_eq!(depths.normal, 6, "the SMS queue's four count with the normal lane's two: {depths:?}");
    let ids = |url: String| {
        let sqs = stack.sqs.clone();
        async move {
            let mut got = Vec::new();
            for _ in 0..10 {
                let out = sqs.receive_message().queue_url(&url).max_number_of_messages(10).send().await.unwrap();
                for m in out.messages() {
                    let body = punctual_core::ReminderMessage::decode(m.body().unwrap()).unwrap();
                    got.push(body.reminder_id.as_str().to_owned());
                }
                if out.messages().is_empty() {
                    break;
                }
            }
            got.sort();
            got
        }
    };
    let id = |name: &str| msg(name, None).reminder_id.as_str().to_owned();
    let mut want_sms: Vec<String> = ["sms-1", "sms-2", "sms-3", "sms-4"].map(id).to_vec();
    want_sms.sort();
    assert_eq!(ids(sms_url).await, want_sms);
    let mut want_lanes: Vec<String> = ["mail-1", "old-1"].map(id).to_vec();
    want_lanes.sort();
    let mut lanes = ids(q.send_url().to_owned()).await;
    lanes.extend(ids(q.urgent_url().to_owned()).await);
    lanes.sort();
    assert_eq!(lanes, want_lanes);
    stack.destroy().await;
}

/// Reading the DLQ for a count keeps every letter: two letters of one reminder (a sender's
/// quarantine and a copy the `maxReceiveCount` backstop moved) are two letters, not one, and a
/// malformed body is a third.
#[tokio::test]
async fn reading_the_dlq_keeps_every_letter_of_a_reminder() {
    use punctual_core::ReasonCode;
    use punctual_core::ports::{Quarantine, SendQueue};
    let config = sdk_config().await;
    let stack = Stack::create(&config, "dlq-letters").await.unwrap();
    let now = chrono::Utc::now();
    let m = punctual_core::testing::message("two-letters", now, now + chrono::TimeDelta::hours(1));
    let body = m.encode();
    let q = Quarantine {
        body: &body,
        reason: ReasonCode::AttemptLimit,
        detail: "eight attempts",
        attempts: 8,
        provider_status: Some(500),
        reminder_id: Some(&m.reminder_id),
        first_enqueued: Some(m.first_enqueued),
        original_message_id: "m-1",
        at: now,
    };
    stack.queues.dead_letter(&q).await.unwrap();
    // The backstop's copy: the body alone, no attributes.
    for raw in [body.as_str(), "{\"v\":1}"] {
        stack.sqs.send_message().queue_url(stack.queues.dlq_url()).message_body(raw).send().await.unwrap();
    }
    let dlq = punctual_ops::dlq::peek_dlq(&stack.queues, 100).await.unwrap();
    assert_eq!(dlq.letters(), 3, "{dlq:?}");
    // Whatever order SQS hands them out in, the sender's reason says why.
    assert_eq!(dlq.reason_of(m.reminder_id.as_str()), Some("attempt_limit"), "{dlq:?}");
    stack.destroy().await;
}

/// The sender's trip of the pause switch is one conditional write on the real store: an
/// operator's pause set after the instance last read the switch stays as it is (owner, reason),
/// and the instance then sees it; with nothing in force the trip sets the sender's own.
#[tokio::test]
async fn a_sender_trip_never_replaces_an_operators_pause_on_the_store() {
    use punctual_aws::control::DynamoControl;
    use punctual_core::pause::{PauseGate, SENDER_OWNER};
    use punctual_core::ports::{Control, Pause};
    let config = sdk_config().await;
    let stack = Stack::create(&config, "pause-trip").await.unwrap();
    let control = DynamoControl::new(stack.ddb.clone(), &stack.ledger_table);
    let gate = PauseGate::new(control.clone(), punctual_lambda::SystemClock, Duration::from_secs(60));
    assert!(!gate.paused().await, "read, and cached for a minute: not paused");
    let ops =
        Pause { reason: "provider maintenance".into(), owner: "ops@example.com".into(), since: chrono::Utc::now() };
    control.set_pause(Some(&ops), "ops@example.com").await.unwrap();
    gate.trip("provider refused the credentials").await.unwrap();
    let in_force = control.pause().await.unwrap().unwrap();
    assert_eq!((in_force.owner.as_str(), in_force.reason.as_str()), ("ops@example.com", "provider maintenance"));
    assert_eq!(gate.pause().await.map(|p| p.owner).as_deref(), Some("ops@example.com"), "the gate sees it now");
    control.set_pause(None, "ops@example.com").await.unwrap();
    let gate = PauseGate::new(control.clone(), punctual_lambda::SystemClock, Duration::from_secs(60));
    gate.trip("provider refused the credentials").await.unwrap();
    assert_eq!(control.pause().await.unwrap().map(|p| p.owner).as_deref(), Some(SENDER_OWNER));
    stack.destroy().await;
}

/// The scheduler as production composes it (`app::build`, `CHANNELS=email,sms`) reads each
/// channel's own switch on the real store every tick: a sender's trip of SMS's switch is
/// reported (the `ChannelsTripped` page), email's untouched switch and an operator's pause of
/// a channel are not, and the tick still releases.
#[tokio::test]
async fn the_scheduler_reports_a_channel_the_sender_tripped_on_the_store() {
    use punctual_aws::control::DynamoControl;
    use punctual_core::pause::PauseGate;
    use punctual_core::ports::{Control, Pause};
    let config = sdk_config().await;
    let stack = Stack::create(&config, "channel-trip").await.unwrap();
    let env: std::collections::HashMap<&str, String> = [
        ("RENEWALS_TABLE", stack.renewals_table.clone()),
        ("SEND_QUEUE_URL", stack.queues.send_url().to_owned()),
        ("LEDGER_TABLE", stack.ledger_table.clone()),
        ("CHANNELS", "email,sms".to_owned()),
    ]
    .into();
    let cfg = punctual_scheduler::config::SchedulerConfig::from_env(&punctual_lambda::config::Env::new(|k: &str| {
        env.get(k).cloned()
    }))
    .unwrap();
    let scheduler = punctual_scheduler::app::build(&cfg, &stack.ddb, &stack.sqs);
    let deadline = chrono::Utc::now() + chrono::TimeDelta::seconds(30);
    assert!(scheduler.tick(deadline).await.unwrap().channels_tripped.is_empty());
    let sms = DynamoControl::for_channel(stack.ddb.clone(), &stack.ledger_table, "sms");
    PauseGate::new(sms.clone(), punctual_lambda::SystemClock, Duration::ZERO)
        .trip("channel sms: provider refused the credentials")
        .await
        .unwrap();
    let r = scheduler.tick(deadline).await.unwrap();
    assert_eq!(r.channels_tripped, vec!["sms".to_owned()]);
    assert!(!r.paused, "the fleet is not paused");
    let ops = Pause { reason: "vendor maintenance".into(), owner: "ops@example.com".into(), since: chrono::Utc::now() };
    sms.set_pause(Some(&ops), "ops@example.com").await.unwrap();
    assert!(scheduler.tick(deadline).await.unwrap().channels_tripped.is_empty(), "an operator's pause is no trip");
    stack.destroy().await;
}

/// The sender's cold start with two channels whose SMS secret cannot be read (it does not
/// exist yet): the cold start goes on, email's client is built, SMS's calls answer
/// `AccountBlocked` without reaching its vendor (which trips SMS's own switch); once the secret
/// exists and the channel's variable names it, the next call reads it and is accepted by the
/// vendor with that token. A channel whose token variables are unset is the deployment's
/// mistake and still fails the cold start, naming the channel.
#[tokio::test]
async fn one_channels_unreadable_secret_blocks_that_channel_only_until_it_can_be_read() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use punctual_core::ports::{Provider, ProviderRequest};
    use punctual_core::provider::ProviderOutcome;
    use punctual_provider_double::{Config, Double};
    use punctual_sender::app::{AnyProvider, providers_in};

    let config = sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let sm = aws_sdk_secretsmanager::Client::new(&config);
    let double = Double::start(Config { token: Some("tok-sms".into()), ..Config::default() }, 0).await.unwrap();
    let missing = format!("arn:aws:secretsmanager:us-east-1:123456789012:secret:{}-AbCdEf", unique("sms"));
    let mut vars: HashMap<String, String> = [
        ("SEND_QUEUE_URL", "http://127.0.0.1:1/q"),
        ("DLQ_URL", "http://127.0.0.1:1/dlq"),
        ("LEDGER_TABLE", "ledger"),
        ("RENEWALS_TABLE", "renewals"),
        ("CHANNELS", "email,sms"),
        ("CHANNEL_EMAIL_PROVIDER_URL", "http://127.0.0.1:9/v1/messages"),
        ("CHANNEL_EMAIL_PROVIDER_TOKEN", "tok-email"),
        ("CHANNEL_EMAIL_PROVIDER_KIND", "http"),
        ("CHANNEL_EMAIL_PROVIDER_RATE_PER_SEC", "100"),
        ("CHANNEL_SMS_PROVIDER_KIND", "http"),
        ("CHANNEL_SMS_PROVIDER_RATE_PER_SEC", "10"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    vars.insert("CHANNEL_SMS_PROVIDER_URL".into(), double.url());
    vars.insert("CHANNEL_SMS_PROVIDER_TOKEN_SECRET_ARN".into(), missing);
    let read = vars.clone();
    let mut sender =
        punctual_sender::config::SenderConfig::from_env(&punctual_lambda::config::Env::new(move |k: &str| {
            read.get(k).cloned()
        }))
        .unwrap();
    let shared = Arc::new(Mutex::new(vars));
    let view = Arc::clone(&shared);
    let env: punctual_aws::secrets::Vars = Arc::new(move |k: &str| view.lock().unwrap().get(k).cloned());

    let (_, channels) =
        providers_in(&mut sender, &config, &ddb, &env).await.expect("one channel's secret fails nothing else");
    assert!(matches!(channels[0], AnyProvider::Http(_)), "email is built");
    assert!(matches!(channels[1], AnyProvider::Pending(_)), "SMS waits for its token");
    let now = chrono::Utc::now();
    let m = punctual_core::testing::message("sms-1", now, now + chrono::TimeDelta::hours(2));
    let req = ProviderRequest {
        message: &m,
        recipient_ref: Some("r-1"),
        channel: Some("sms"),
        data: None,
        timeout: Duration::from_secs(2),
    };
    let blocked = channels[1].send(&req).await.unwrap();
    assert!(
        matches!(&blocked, ProviderOutcome::AccountBlocked { detail } if detail.contains("could not read secret")),
        "{blocked:?}"
    );
    assert_eq!(double.stats().requests, 0, "the vendor is not called without a token");

    let secret = sm.create_secret().name(unique("punctual-sms")).secret_string("tok-sms").send().await.unwrap();
    shared.lock().unwrap().insert("CHANNEL_SMS_PROVIDER_TOKEN_SECRET_ARN".into(), secret.arn().unwrap().to_owned());
    let sent = channels[1].send(&req).await.unwrap();
    assert!(matches!(sent, ProviderOutcome::Accepted { .. }), "the vendor accepts the token read now: {sent:?}");
    assert_eq!(double.stats().requests, 1);

    shared.lock().unwrap().remove("CHANNEL_SMS_PROVIDER_TOKEN_SECRET_ARN");
    let e = providers_in(&mut sender, &config, &ddb, &env).await.expect_err("a channel with no token variables");
    assert!(e.to_string().contains("CHANNEL_SMS_PROVIDER_TOKEN"), "{e}");
}

/// A channel with its own queue and its own urgent lane: its urgent release, urgent requeue
/// and urgent send-back land on its urgent lane, its normal ones on its queue, the fleet's
/// urgent work on the fleet's urgent lane; the depth the scheduler paces by counts the
/// channel's queue and urgent lane with the normal lane (not ahead of the fleet's urgent work).
#[tokio::test]
async fn a_channels_urgent_work_goes_to_its_own_urgent_lane() {
    use punctual_aws::control::SqsDeadLetters;
    use punctual_core::lanes::QueueLane;
    use punctual_core::ports::{DeadLetters, Release, ReleaseQueue, SendQueue};
    let config = sdk_config().await;
    let stack = Stack::create(&config, "chu").await.unwrap();
    let new_queue = |name: &str| {
        let sqs = stack.sqs.clone();
        let name = unique(name);
        async move { sqs.create_queue().queue_name(name).send().await.unwrap().queue_url.unwrap() }
    };
    let (sms_url, sms_urgent) = (new_queue("punctual-sms").await, new_queue("punctual-sms-urgent").await);
    let q = stack
        .queues
        .clone()
        .with_channel_queues(&[("sms".to_owned(), sms_url.clone())])
        .with_channel_urgent_queues(&[("sms".to_owned(), sms_urgent.clone())]);
    let msg = on_channel;
    let release = |m, lane| Release { message: m, delay: Duration::ZERO, lane };
    q.release(&[
        release(msg("sms-n", Some("sms")), QueueLane::Normal),
        release(msg("sms-u", Some("sms")), QueueLane::Urgent),
        release(msg("mail-u", Some("email")), QueueLane::Urgent),
    ])
    .await
    .unwrap();
    q.requeue(&msg("sms-u2", Some("sms")), Duration::ZERO, QueueLane::Urgent).await.unwrap();
    SqsDeadLetters::new(q.clone()).send_back(&msg("sms-u3", Some("sms")).encode(), QueueLane::Urgent).await.unwrap();
    let depths = punctual_core::ports::ReleaseQueue::depth(&q).await.unwrap();
    // SMS's queue and urgent lane count with the normal lane: they do not hold back the fleet's
    // urgent pace (their own pollers drain them).
    assert_eq!((depths.normal, depths.urgent), (4, 1), "{depths:?}");
    let names = |url: String| {
        let sqs = stack.sqs.clone();
        async move {
            let out = sqs.receive_message().queue_url(&url).max_number_of_messages(10).send().await.unwrap();
            let mut got: Vec<String> = out
                .messages()
                .iter()
                .map(|m| punctual_core::ReminderMessage::decode(m.body().unwrap()).unwrap().renewal_id.to_string())
                .collect();
            got.sort();
            got
        }
    };
    assert_eq!(names(sms_urgent).await, ["ren-sms-u", "ren-sms-u2", "ren-sms-u3"]);
    assert_eq!(names(sms_url).await, ["ren-sms-n"]);
    assert_eq!(names(q.urgent_url().to_owned()).await, ["ren-mail-u"]);
    let per_channel = q.channel_depths().await.unwrap();
    assert_eq!(per_channel.len(), 1, "{per_channel:?}");
    stack.destroy().await;
}
