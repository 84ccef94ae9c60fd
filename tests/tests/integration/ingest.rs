//! The ingest function on the emulators, through its handler and the real SDK: the renewals
//! table on dynalite when `make test` started it (its conditional writes are isolated as
//! DynamoDB's are), the commands DLQ on the emulator's SQS. Each rule of the producer's order
//! (docs/design.md#versions) and each bad input of the command contract.

use std::collections::HashMap;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{TimeDelta, Utc};
use lambda_runtime::LambdaEvent;
use punctual_aws::dynamodb::get;
use punctual_aws::renewals::{DynamoRenewals, RowOutcome, create_table};
use punctual_core::renewal::{Renewal, RenewalInput};
use punctual_ingest::config::IngestConfig;
use punctual_ingest::handler::handle;
use punctual_lambda::batch::{ReceivedRecord, local_context, sqs_event};
use punctual_tests::{sdk_config, unique};

type Item = HashMap<String, AttributeValue>;

struct Rig {
    ddb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    renewals_table: String,
    recipients_table: String,
    dlq_url: String,
    ingest: punctual_ingest::app::Ingest,
}

async fn rig(name: &str) -> Rig {
    let config = sdk_config().await;
    let dynalite = punctual_tests::dynalite_client().await;
    let ddb = dynalite.clone().unwrap_or_else(|| aws_sdk_dynamodb::Client::new(&config));
    let sqs = aws_sdk_sqs::Client::new(&config);
    let renewals_table = unique(&format!("{name}-renewals"));
    create_table(&ddb, &renewals_table).await.unwrap();
    if dynalite.is_some() {
        // The racing and ordering cases need the engine that isolates conditional writes.
        punctual_tests::assert_on_dynalite(&renewals_table).await;
    }
    let dlq_url =
        sqs.create_queue().queue_name(unique(&format!("{name}-cdlq"))).send().await.unwrap().queue_url.unwrap();
    let recipients_table = unique(&format!("{name}-recipients"));
    punctual_aws::recipients::create_table(&ddb, &recipients_table).await.unwrap();
    let config = IngestConfig {
        renewals_table: renewals_table.clone(),
        commands_dlq_url: dlq_url.clone(),
        recipients_table: Some(recipients_table.clone()),
        channels: vec!["email".into(), "sms".into()],
        metrics_namespace: "punctual".into(),
    };
    let ingest = punctual_ingest::app::build(&config, &ddb, &sqs);
    Rig { ddb, sqs, renewals_table, recipients_table, dlq_url, ingest }
}

/// A command for `acme/ren-1` due tomorrow at 09:00 London (window 8 h), version `version`.
fn command(version: u64, extra: &[(&str, serde_json::Value)]) -> String {
    let tomorrow = (Utc::now() + TimeDelta::days(1)).format("%Y-%m-%d").to_string();
    let mut c = serde_json::json!({
        "v": 1, "version": version, "tenant_id": "acme", "renewal_id": "ren-1", "recipient_ref": "cust-1",
        "channel": "email", "zone": "Europe/London", "local_due_date": tomorrow, "window_minutes": 480,
    });
    for (k, v) in extra {
        c[*k] = v.clone();
    }
    c.to_string()
}

impl Rig {
    fn ingest_recipients_table(&self) -> String {
        self.recipients_table.clone()
    }

    /// Hands `bodies` to the handler as one SQS batch; returns the ids it failed.
    async fn deliver(&self, bodies: &[String]) -> (Vec<String>, punctual_aws::emf::Metrics) {
        let ids: Vec<String> = (0..bodies.len()).map(|i| format!("m{i}")).collect();
        let records = bodies.iter().zip(&ids).map(|(body, id)| ReceivedRecord {
            message_id: id,
            receipt_handle: id,
            body,
            receive_count: 1,
            sent_at_ms: None,
        });
        let event: SqsEvent = sqs_event(records, "arn:aws:sqs:us-east-1:000000000000:commands").unwrap();
        let ctx = local_context("test".into(), Duration::from_secs(30));
        let handled = handle(&self.ingest, LambdaEvent::new(event, ctx)).await.unwrap();
        (handled.response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect(), handled.metrics)
    }

    async fn row(&self) -> Option<Item> {
        get(&self.ddb, &self.renewals_table, "renewal:acme:ren-1").await.unwrap()
    }

    /// Marks the row released, as the scheduler's tick does.
    async fn release(&self) {
        self.ddb
            .update_item()
            .table_name(&self.renewals_table)
            .key("pk", AttributeValue::S("renewal:acme:ren-1".into()))
            .update_expression("SET sched_state = :e REMOVE due_shard, due_after_ms")
            .expression_attribute_values(":e", AttributeValue::S("enqueued".into()))
            .send()
            .await
            .unwrap();
    }

    /// Every letter on the commands DLQ: (body, attributes).
    async fn letters(&self) -> Vec<(String, HashMap<String, String>)> {
        let mut out = Vec::new();
        loop {
            let got = self
                .sqs
                .receive_message()
                .queue_url(&self.dlq_url)
                .max_number_of_messages(10)
                .message_attribute_names("All")
                .wait_time_seconds(0)
                .send()
                .await
                .unwrap();
            let msgs = got.messages.unwrap_or_default();
            if msgs.is_empty() {
                return out;
            }
            for m in msgs {
                let attrs = m
                    .message_attributes
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.string_value.unwrap_or_default()))
                    .collect();
                out.push((m.body.unwrap_or_default(), attrs));
            }
        }
    }
}

fn text<'a>(item: &'a Item, k: &str) -> Option<&'a str> {
    item.get(k).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn number(item: &Item, k: &str) -> Option<i64> {
    item.get(k).and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok())
}

#[tokio::test]
async fn a_command_applies_only_over_an_older_version_and_a_replay_writes_nothing() {
    let rig = rig("ingest-order").await;
    let (failed, m) = rig.deliver(&[command(1, &[])]).await;
    assert!(failed.is_empty());
    assert_eq!(m.by_reason("CommandsApplied").get("inserted"), Some(&1.0));
    let v2 = command(2, &[("local_send_time", "10:30".into())]);
    rig.deliver(std::slice::from_ref(&v2)).await;
    let row = rig.row().await.unwrap();
    assert_eq!((text(&row, "local_send_time"), number(&row, "producer_version")), (Some("10:30"), Some(2)));
    let written = number(&row, "updated_ms");
    // The same command again (SQS delivers at least once), then an older one arriving late.
    let (failed, m) = rig.deliver(&[v2, command(1, &[("local_send_time", "08:00".into())])]).await;
    assert!(failed.is_empty(), "a stale command is acknowledged, not failed");
    assert_eq!(m.total("CommandsStale"), 2.0);
    let row = rig.row().await.unwrap();
    assert_eq!(text(&row, "local_send_time"), Some("10:30"), "an older version overwrote a newer one");
    assert_eq!(number(&row, "updated_ms"), written, "a stale command wrote");
    assert!(rig.letters().await.is_empty(), "a stale command is not dead-lettered");
}

#[tokio::test]
async fn a_newer_cancel_that_arrives_first_is_never_revived_by_the_older_put() {
    let rig = rig("ingest-cancel-first").await;
    rig.deliver(&[command(2, &[("status", "cancelled".into())])]).await;
    let (_, m) = rig.deliver(&[command(1, &[])]).await;
    assert_eq!(m.total("CommandsStale"), 1.0);
    let row = rig.row().await.unwrap();
    assert_eq!(text(&row, "status"), Some("cancelled"));
    assert!(!row.contains_key("due_shard"), "the older put armed the renewal for release: {row:?}");
    // Both in one batch, the older last: they are written oldest first, so the cancel is last.
    let rig = self::rig("ingest-cancel-batch").await;
    let (failed, m) = rig.deliver(&[command(4, &[("status", "cancelled".into())]), command(3, &[])]).await;
    assert!(failed.is_empty());
    assert_eq!(m.total("CommandsApplied"), 2.0);
    let row = rig.row().await.unwrap();
    assert_eq!((text(&row, "status"), number(&row, "producer_version")), (Some("cancelled"), Some(4)));
    assert!(!row.contains_key("due_shard"), "the older put armed the renewal for release: {row:?}");
}

#[tokio::test]
async fn a_newer_version_of_the_same_content_is_recorded_so_an_older_change_stays_stale() {
    let rig = rig("ingest-same").await;
    rig.deliver(&[command(1, &[])]).await;
    let (_, m) = rig.deliver(&[command(5, &[])]).await;
    assert_eq!(m.by_reason("CommandsApplied").get("unchanged"), Some(&1.0));
    assert_eq!(number(&rig.row().await.unwrap(), "producer_version"), Some(5));
    let (_, m) = rig.deliver(&[command(3, &[("status", "paid".into())])]).await;
    assert_eq!(m.total("CommandsStale"), 1.0);
    assert_eq!(text(&rig.row().await.unwrap(), "status"), Some("active"));
}

#[tokio::test]
async fn after_release_a_command_reschedules_cancels_reactivates_and_changes_data_as_import_does() {
    let rig = rig("ingest-released").await;
    rig.deliver(&[command(1, &[("data", serde_json::json!({"plan": "pro"}))])]).await;
    rig.release().await;
    let in_two_days = (Utc::now() + TimeDelta::days(2)).format("%Y-%m-%d").to_string();
    let (_, m) = rig.deliver(&[command(2, &[("local_due_date", in_two_days.clone().into())])]).await;
    assert_eq!(m.by_reason("CommandsApplied").get("rescheduled"), Some(&1.0));
    let row = rig.row().await.unwrap();
    assert_eq!((text(&row, "sched_state"), row.contains_key("due_shard")), (Some("scheduled"), true));
    assert!(!row.contains_key("data"), "a command is the whole row: without data, the data is gone");
    rig.release().await;
    let moved = [("local_due_date", serde_json::Value::from(in_two_days))];
    let cancel = [moved[0].clone(), ("status", "cancelled".into())];
    let (_, m) = rig.deliver(&[command(3, &cancel)]).await;
    assert_eq!(m.by_reason("CommandsApplied").get("updated"), Some(&1.0));
    assert_eq!(text(&rig.row().await.unwrap(), "status"), Some("cancelled"));
    let with_data = [moved[0].clone(), ("data", serde_json::json!({"plan": "team"}))];
    let (_, m) = rig.deliver(&[command(4, &with_data)]).await;
    assert_eq!(m.by_reason("CommandsApplied").get("reactivated"), Some(&1.0));
    let row = rig.row().await.unwrap();
    assert_eq!((text(&row, "status"), text(&row, "data")), (Some("active"), Some(r#"{"plan":"team"}"#)));
    // Released again: a change of the recipient is refused, as import refuses it, to the DLQ.
    rig.release().await;
    let other = [moved[0].clone(), ("recipient_ref", "cust-2".into())];
    let (failed, m) = rig.deliver(&[command(5, &other)]).await;
    assert!(failed.is_empty());
    assert_eq!(m.by_reason("CommandsRejected").get("refused"), Some(&1.0));
    let letters = rig.letters().await;
    assert_eq!(letters.len(), 1);
    assert!(letters[0].1["reason"].contains("renewal already enqueued"), "{:?}", letters[0].1);
    assert_eq!(letters[0].1["error_class"], "refused");
}

#[tokio::test]
async fn an_unversioned_import_row_does_not_overwrite_a_producers_renewal_and_a_command_takes_an_imported_one() {
    let rig = rig("ingest-import").await;
    let tomorrow = (Utc::now() + TimeDelta::days(1)).format("%Y-%m-%d").to_string();
    let file_row = |status: &str, version: &str| {
        Renewal::validate(&RenewalInput {
            tenant_id: "acme".into(),
            renewal_id: "ren-1".into(),
            recipient_ref: "cust-1".into(),
            channel: "email".into(),
            zone: "Europe/London".into(),
            local_due_date: tomorrow.clone(),
            window_minutes: "480".into(),
            status: status.into(),
            version: version.into(),
            ..RenewalInput::default()
        })
        .unwrap()
    };
    let store = DynamoRenewals::new(rig.ddb.clone(), &rig.renewals_table);
    assert_eq!(store.import(&[file_row("active", "")], Utc::now()).await.unwrap(), [RowOutcome::Inserted]);
    let (_, m) = rig.deliver(&[command(1, &[("status", "paid".into())])]).await;
    assert_eq!(m.by_reason("CommandsApplied").get("updated"), Some(&1.0), "a command takes an imported row");
    let got = store.import(&[file_row("active", "")], Utc::now()).await.unwrap();
    assert!(
        matches!(&got[0], RowOutcome::Conflict(why) if why.contains("kept by its producer at version 1")),
        "{got:?}"
    );
    assert_eq!(store.import(&[file_row("active", "1")], Utc::now()).await.unwrap(), [RowOutcome::Stale { stored: 1 }]);
    assert_eq!(store.import(&[file_row("active", "2")], Utc::now()).await.unwrap(), [RowOutcome::Updated]);
    assert_eq!(text(&rig.row().await.unwrap(), "status"), Some("active"));
}

/// Every file of `events/commands/invalid/`, with the text its `.expect` beside it names.
fn invalid_examples() -> Vec<(String, String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../events/commands/invalid");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "expect") {
            continue;
        }
        let expect = std::fs::read_to_string(path.with_extension("expect")).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name, std::fs::read_to_string(&path).unwrap(), expect.trim_end_matches('\n').to_owned()));
    }
    out.sort();
    assert!(out.len() >= 8, "{out:?}");
    out
}

#[tokio::test]
async fn each_bad_command_lands_on_the_commands_dlq_with_its_reason_and_never_fails_its_batch() {
    let rig = rig("ingest-bad").await;
    let examples = invalid_examples();
    let mut bodies: Vec<String> = examples.iter().map(|(_, b, _)| b.clone()).collect();
    // A window already over: refused by the import's rule, named with its times.
    let yesterday = (Utc::now() - TimeDelta::days(2)).format("%Y-%m-%d").to_string();
    bodies.push(command(1, &[("local_due_date", yesterday.into()), ("renewal_id", "ren-past".into())]));
    // A good command in the same batch is applied.
    bodies.push(command(1, &[]));
    let mut delivered = Vec::new();
    for chunk in bodies.chunks(10) {
        let (failed, m) = rig.deliver(chunk).await;
        assert!(failed.is_empty(), "a bad command failed its batch: {failed:?}");
        delivered.push(m);
    }
    let rejected: f64 = delivered.iter().map(|m| m.total("CommandsRejected")).sum();
    assert_eq!(rejected as usize, bodies.len() - 1);
    assert!(rig.row().await.is_some(), "the good command of the batch was not applied");
    let letters = rig.letters().await;
    assert_eq!(letters.len(), bodies.len() - 1);
    for (name, body, expect) in &examples {
        let redacted = punctual_core::command::redacted_body(body);
        let (_, attrs) =
            letters.iter().find(|(b, _)| *b == redacted).unwrap_or_else(|| panic!("{name}: not on the DLQ"));
        assert!(
            attrs["reason"].contains(expect.as_str()),
            "{name}: reason {:?} should contain {expect:?}",
            attrs["reason"]
        );
        assert!(matches!(attrs["error_class"].as_str(), "malformed" | "invalid"), "{name}: {attrs:?}");
    }
    let past = letters.iter().find(|(b, _)| b.contains("ren-past")).unwrap();
    assert!(past.1["reason"].contains("its window is already over"), "{:?}", past.1);
    // The data never reaches the DLQ.
    let oversized = letters.iter().find(|(_, a)| a["reason"].starts_with("data is")).unwrap();
    assert!(oversized.0.contains("<redacted:"), "{}", &oversized.0[..oversized.0.len().min(200)]);
}

#[tokio::test]
async fn a_table_that_fails_leaves_the_command_for_redelivery_not_on_the_dlq() {
    let mut rig = rig("ingest-down").await;
    let config = IngestConfig {
        renewals_table: "no-such-table".into(),
        commands_dlq_url: rig.dlq_url.clone(),
        recipients_table: None,
        channels: Vec::new(),
        metrics_namespace: "punctual".into(),
    };
    rig.ingest = punctual_ingest::app::build(&config, &rig.ddb, &rig.sqs);
    let (failed, m) = rig.deliver(&[command(1, &[]), "not json".into()]).await;
    assert_eq!(failed, ["m0"], "only the command the table failed is left for redelivery");
    assert_eq!((m.total("CommandsFailed"), m.total("CommandsRejected")), (1.0, 1.0));
    assert_eq!(rig.letters().await.len(), 1);
}

/// Found by review: a write planned against one state of the row (here v3, the same content as
/// v1, planned as a version-only write) landed over a cancel (v2) written meanwhile, and the
/// renewal was left cancelled at v3. Every partial write is now conditioned on the row not
/// having been updated since it was read.
#[tokio::test]
async fn a_write_planned_before_a_racing_change_is_decided_again_not_laid_over_it() {
    let rig = rig("ingest-race").await;
    rig.deliver(&[command(1, &[])]).await;
    let store = DynamoRenewals::new(rig.ddb.clone(), &rig.renewals_table);
    let (v3, _) = punctual_core::command::RenewalCommand::read(&command(3, &[]), &[]).unwrap();
    let v3 = v3.check(&[]).unwrap().renewal;
    let read = store.read_for_import(std::slice::from_ref(&v3)).await.unwrap();
    rig.deliver(&[command(2, &[("status", "cancelled".into())])]).await;
    assert_eq!(text(&rig.row().await.unwrap(), "status"), Some("cancelled"));
    let got = store.write_import(std::slice::from_ref(&v3), read, Utc::now()).await.unwrap();
    let row = rig.row().await.unwrap();
    assert_eq!(
        (text(&row, "status"), number(&row, "producer_version")),
        (Some("active"), Some(3)),
        "v3 (active) was laid over v2's cancel as a version-only write: {got:?}"
    );
}

/// Found by review: of v2 (a cancel) and v3 (a change the import refuses after release) in one
/// batch, v2 was judged stale against v3 before v3 was tried, and v3 was then refused: the
/// cancel was lost. The versions of one renewal in a batch are now written oldest first.
#[tokio::test]
async fn in_one_batch_an_older_cancel_is_applied_even_when_the_newer_change_is_refused() {
    let rig = rig("ingest-batch-order").await;
    rig.deliver(&[command(1, &[])]).await;
    rig.release().await;
    let (failed, m) = rig
        .deliver(&[command(3, &[("recipient_ref", "cust-2".into())]), command(2, &[("status", "cancelled".into())])])
        .await;
    assert!(failed.is_empty());
    assert_eq!(m.by_reason("CommandsApplied").get("updated"), Some(&1.0), "{m:?}");
    assert_eq!(m.by_reason("CommandsRejected").get("refused"), Some(&1.0));
    assert_eq!(text(&rig.row().await.unwrap(), "status"), Some("cancelled"), "the cancel was lost");
}

async fn address(rig: &Rig, table: &str, reference: &str) -> Option<String> {
    let got = rig
        .ddb
        .get_item()
        .table_name(table)
        .key("tenant_id", AttributeValue::S("acme".into()))
        .key("recipient_ref", AttributeValue::S(reference.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    got.item.and_then(|i| i.get("email").and_then(|v| v.as_s().ok()).cloned())
}

/// Found by review: every command's address was written before its version was judged, so a
/// late older command put back an old address; and two commands of one batch for one
/// recipient made BatchWriteItem refuse the whole batch of addresses.
#[tokio::test]
async fn only_an_applied_commands_address_is_kept_and_one_batch_may_name_a_recipient_twice() {
    let rig = rig("ingest-address").await;
    let table = rig.ingest_recipients_table();
    rig.deliver(&[command(5, &[("email", "new@example.com".into())])]).await;
    let (failed, m) = rig.deliver(&[command(4, &[("email", "old@example.com".into())])]).await;
    assert!(failed.is_empty());
    assert_eq!(m.total("CommandsStale"), 1.0);
    assert_eq!(
        address(&rig, &table, "cust-1").await.as_deref(),
        Some("new@example.com"),
        "a stale command's address was written"
    );
    // Two renewals of one recipient, each with its address, in one batch: both applied.
    let other = |r: &str, v: u64, e: &str| {
        command(v, &[("renewal_id", r.into()), ("recipient_ref", "cust-9".into()), ("email", e.into())])
    };
    let (failed, m) = rig.deliver(&[other("ren-a", 1, "a@example.com"), other("ren-b", 2, "b@example.com")]).await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(m.total("CommandsApplied"), 2.0);
    assert!(address(&rig, &table, "cust-9").await.is_some());
}
