//! The SAM template, deployed: `tools/deploy_to_emulator.py` translates infra/template.yaml
//! offline (pinned aws-sam-translator) and creates the stack with the emulator's
//! CloudFormation. Then every function's configuration is read from the environment the
//! template gave it, and one renewal travels scheduler → send queue → sender → provider
//! through the queues and tables the stack created. Template and code cannot drift apart.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::collections::HashMap;
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use lambda_runtime::{Context, LambdaEvent};
use punctual_aws::renewals::DynamoRenewals;
use punctual_aws::sqs::SqsQueues;
use punctual_core::ports::Ledger;
use punctual_core::reason::ReminderState;
use punctual_core::renewal::{Renewal, RenewalInput};
use punctual_core::secret::Secret;
use punctual_lambda::config::Env;
use punctual_provider::HttpProvider;
use punctual_provider_double::{Config, Double};
use punctual_redrive::config::RedriveConfig;
use punctual_scheduler::config::SchedulerConfig;
use punctual_sender::config::SenderConfig;
use punctual_sender::handler::handle;
use punctual_tests::stack::sqs_event;
use punctual_tests::{endpoint, sdk_config};

fn deploy() -> serde_json::Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".venv/bin/python");
    assert!(python.exists(), "run `make tools` first: {} is missing", python.display());
    let out = std::process::Command::new(python)
        .arg(root.join("tools/deploy_to_emulator.py"))
        .arg(root.join("infra/template.yaml"))
        .env("AWS_ENDPOINT_URL", endpoint())
        .output()
        .unwrap();
    assert!(out.status.success(), "deploy failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A function's environment as the template set it (numbers as the strings Lambda passes).
fn environment(stack: &serde_json::Value, function: &str) -> HashMap<String, String> {
    stack["functions"][function]["environment"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
        .collect()
}

#[tokio::test]
async fn the_deployed_template_configures_every_function_and_delivers_a_renewal() {
    let stack = deploy();
    // Two mappings, one per lane, each with its own MaximumConcurrency.
    assert_eq!(stack["sender_event_source_mappings"], 2, "{stack}");
    let polled: Vec<&str> = stack["sender_mappings"].as_array().unwrap().iter().filter_map(|m| m[0].as_str()).collect();
    for q in ["send_queue", "urgent_queue"] {
        assert!(polled.contains(&stack[q].as_str().unwrap()), "no mapping polls the {q}: {stack}");
    }
    assert!(stack["sender_mappings"].as_array().unwrap().iter().all(|m| m[1].as_u64().is_some()), "{stack}");
    let config = sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    // Queue URLs in the stack carry the AWS host: look the queues up by name on the emulator.
    let url = |name: &str| {
        let sqs = sqs.clone();
        let name = name.to_owned();
        async move { sqs.get_queue_url().queue_name(name).send().await.unwrap().queue_url.unwrap() }
    };
    let (send_url, dlq_url) =
        (url(stack["send_queue"].as_str().unwrap()).await, url(stack["dlq"].as_str().unwrap()).await);
    let urgent_url = url(stack["urgent_queue"].as_str().unwrap()).await;
    // Every function is told where the urgent lane is.
    for f in ["SenderFunction", "SchedulerFunction", "RedriveFunction"] {
        assert!(environment(&stack, f).contains_key("URGENT_QUEUE_URL"), "{f} has no URGENT_QUEUE_URL");
    }
    let double = Double::start(Config { token: Some("deployed-token".into()), ..Config::default() }, 0).await.unwrap();

    // Each function's configuration parses from exactly what the template gives it.
    let mut sender_env = environment(&stack, "SenderFunction");
    sender_env.insert("SEND_QUEUE_URL".into(), send_url.clone());
    sender_env.insert("URGENT_QUEUE_URL".into(), urgent_url.clone());
    sender_env.insert("DLQ_URL".into(), dlq_url.clone());
    sender_env.insert("PROVIDER_URL".into(), double.url());
    let sender_cfg = SenderConfig::from_env(&Env::new(|k: &str| sender_env.get(k).cloned())).unwrap();
    let mut sched_env = environment(&stack, "SchedulerFunction");
    sched_env.insert("SEND_QUEUE_URL".into(), send_url.clone());
    sched_env.insert("URGENT_QUEUE_URL".into(), urgent_url.clone());
    let sched_cfg = SchedulerConfig::from_env(&Env::new(|k: &str| sched_env.get(k).cloned())).unwrap();
    let redrive_env = environment(&stack, "RedriveFunction");
    let redrive_cfg = RedriveConfig::from_env(&Env::new(|k: &str| redrive_env.get(k).cloned())).unwrap();
    assert_eq!(redrive_cfg.caps.max_per_second, 20.0, "the redrive cap is the share of the quota");
    assert_eq!(sender_cfg.ledger_table, stack["ledger_table"].as_str().unwrap());

    // Two renewals due now, in the stack's renewals table: one with two hours to spare, one
    // with five minutes (urgent).
    let now = Utc::now();
    let renewal_at = |id: &str, window: &str| {
        Renewal::validate(&RenewalInput {
            tenant_id: "acme".into(),
            renewal_id: id.into(),
            recipient_ref: "cust-1".into(),
            channel: "email".into(),
            zone: "Europe/Paris".into(),
            local_due_date: now.with_timezone(&chrono_tz::Europe::Paris).format("%Y-%m-%d").to_string(),
            local_send_time: now.with_timezone(&chrono_tz::Europe::Paris).format("%H:%M").to_string(),
            window_minutes: window.into(),
            ..RenewalInput::default()
        })
        .unwrap()
    };
    let (renewal, tight) = (renewal_at("deployed-1", "120"), renewal_at("deployed-tight", "5"));
    let renewals = DynamoRenewals::new(ddb.clone(), &sched_cfg.renewals_table);
    renewals.import(&[renewal.clone(), tight.clone()], now).await.unwrap();

    // The scheduler, as configured, releases the roomy one to the send queue and the tight one
    // to the urgent lane.
    let queues = SqsQueues::new(sqs.clone(), &send_url, &dlq_url).with_urgent(Some(&urgent_url));
    let scheduler = punctual_scheduler::app::build(&sched_cfg, &ddb, &sqs);
    let tick = scheduler.tick(Utc::now() + TimeDelta::seconds(60)).await.unwrap();
    assert_eq!((tick.released, tick.released_urgent), (2, 1), "{tick:?}");
    assert_eq!((tick.lanes.normal, tick.lanes.urgent), (1, 1), "{tick:?}");

    // The sender, as configured, delivers it.
    let provider = HttpProvider::new(&double.url(), &Secret::new("deployed-token"), Duration::from_secs(2)).unwrap();
    // The sender's own composition root, on the configuration the stack gave it.
    let clients = punctual_sender::app::Clients { dynamodb: ddb.clone(), sqs: sqs.clone(), provider: provider.into() };
    let deps = punctual_sender::app::build(&sender_cfg, clients, 3);
    let mut states = Vec::new();
    for _ in 0..10 {
        // Both mappings: the send queue's and the urgent lane's.
        for (lane_url, lane) in [(&send_url, "send"), (&urgent_url, "urgent")] {
            let msgs = queues.receive(lane_url, 10, Duration::from_secs(1)).await.unwrap();
            if msgs.is_empty() {
                continue;
            }
            let event = sqs_event(&msgs, &format!("arn:aws:sqs:us-east-1:123456789012:{lane}")).unwrap();
            let mut ctx = Context::default();
            ctx.deadline = u64::try_from((Utc::now() + TimeDelta::seconds(60)).timestamp_millis()).unwrap();
            let handled = handle(&deps, LambdaEvent::new(event, ctx)).await.unwrap();
            assert!(handled.response.batch_item_failures.is_empty());
            for m in &msgs {
                queues.delete(lane_url, &m.receipt_handle).await.unwrap();
            }
        }
        states.clear();
        for r in [&renewal, &tight] {
            states.push(deps.sender.ledger().get(&r.reminder_id).await.unwrap().map(|r| r.state));
        }
        if states.iter().all(|s| *s == Some(ReminderState::Delivered)) {
            break;
        }
    }
    assert_eq!(states, vec![Some(ReminderState::Delivered); 2]);
    assert_eq!(double.stats().accepted, 2);
}
