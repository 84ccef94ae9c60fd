//! The SAM template's functions as CloudFormation would deploy them: each function's
//! `Environment`, resolved for a choice of parameters, read by that function's own
//! configuration parser. With one provider (the default) and with the sms channel
//! (`SmsProviderUrl`), for either provider kind: what cfn-lint and `check_template.py` cannot
//! say is whether the code accepts what the template gives it.

use std::collections::HashMap;
use std::path::PathBuf;

use punctual_alarms::Options;
use punctual_lambda::config::Env;
use punctual_redrive::config::RedriveConfig;
use punctual_scheduler::config::SchedulerConfig;
use punctual_sender::config::{ProviderConfig, SenderConfig};

const SECRET: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:punctual/provider-AbCdEf";
const SMS_SECRET: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:punctual/sms-GhIjKl";

/// Each function's environment (logical id → variables) for `parameters` over the defaults.
fn environments(parameters: &[(&str, &str)]) -> HashMap<String, HashMap<String, String>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../infra/template.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut opts = Options::default();
    opts.parameters.insert("AlarmTopicArn".into(), "arn:aws:sns:us-east-1:123456789012:page".into());
    for (k, v) in parameters {
        opts.parameters.insert((*k).into(), (*v).into());
    }
    punctual_alarms::resources(&text, &opts)
        .unwrap()
        .into_iter()
        .filter(|r| r.kind.as_deref() == Some("AWS::Serverless::Function"))
        .map(|r| {
            let vars = r.properties.as_ref().and_then(|p| p.pointer("/Environment/Variables")).cloned();
            let vars = vars.and_then(|v| v.as_object().cloned()).unwrap_or_default();
            let vars = vars.into_iter().map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_owned)));
            (r.logical_id, vars.collect())
        })
        .collect()
}

fn env(vars: &HashMap<String, String>) -> Env<impl Fn(&str) -> Option<String> + '_> {
    Env::new(move |k: &str| vars.get(k).cloned())
}

/// The parameters of a stack of `kind`, with or without the sms channel.
fn stack(kind: &'static str, sms: bool) -> Vec<(&'static str, &'static str)> {
    let mut p = match kind {
        "http" => vec![("ProviderUrl", "https://api.vendor.example/v1/messages"), ("ProviderTokenSecretArn", SECRET)],
        _ => vec![
            ("ProviderKind", "ses"),
            ("SesFromAddress", "reminders@acme.example"),
            ("SesIdentityName", "acme.example"),
        ],
    };
    if sms {
        p.extend([
            ("SmsProviderUrl", "https://sms.vendor.example/v1/messages"),
            ("SmsProviderTokenSecretArn", SMS_SECRET),
        ]);
    }
    p
}

#[test]
fn every_function_accepts_what_the_template_gives_it_with_one_provider() {
    for kind in ["http", "ses"] {
        let envs = environments(&stack(kind, false));
        let sender = SenderConfig::from_env(&env(&envs["SenderFunction"])).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert!(sender.channels.is_empty(), "{kind}: one provider declares no channels");
        assert_eq!(matches!(sender.provider, ProviderConfig::Ses { .. }), kind == "ses");
        let scheduler = SchedulerConfig::from_env(&env(&envs["SchedulerFunction"])).unwrap();
        assert!((scheduler.settings.sustainable_rate - 97.0).abs() < 1e-9, "97 % of the default 100/s");
        assert!(scheduler.channels.is_empty() && scheduler.channel_queues.is_empty());
        let redrive = RedriveConfig::from_env(&env(&envs["RedriveFunction"])).unwrap();
        assert!(redrive.lanes.channel_queues.is_empty());
    }
}

#[test]
fn with_the_sms_channel_every_function_reads_both_channels_each_with_its_own_provider_rate_and_queue() {
    for kind in ["http", "ses"] {
        let envs = environments(&stack(kind, true));
        let sender = SenderConfig::from_env(&env(&envs["SenderFunction"])).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let names: Vec<_> = sender.channels.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["email", "sms"], "{kind}");
        let (email, sms) = (&sender.channels[0], &sender.channels[1]);
        assert_eq!(
            matches!(email.provider, ProviderConfig::Ses { .. }),
            kind == "ses",
            "email is the stack's provider"
        );
        assert!(
            matches!(&sms.provider, ProviderConfig::Http { url, .. } if url == "https://sms.vendor.example/v1/messages"),
            "{kind}: sms is the vendor: {:?}",
            sms.provider
        );
        assert_eq!((email.limiter.quota, sms.limiter.quota), (100.0, 10.0), "{kind}: each its own quota");
        // Email books where the one-provider stack booked (an update's old and new instances
        // share one schedule and its cut); SMS on a schedule of its own.
        let single = environments(&stack(kind, false));
        let single = SenderConfig::from_env(&env(&single["SenderFunction"])).unwrap();
        assert_eq!(email.limiter.name, single.limiter.name, "{kind}: email keeps the stack's schedule");
        assert_eq!(sms.limiter.name, "sms", "{kind}: SMS has its own");
        let sms_queue = vec![("sms".to_owned(), "SmsQueue".to_owned())];
        assert_eq!(sender.channel_queues, sms_queue, "{kind}: SMS is requeued to its own queue");
        let sms_urgent = vec![("sms".to_owned(), "SmsUrgentQueue".to_owned())];
        assert_eq!(sender.channel_urgent_queues, sms_urgent, "{kind}: urgent SMS to its own urgent lane");

        let scheduler = SchedulerConfig::from_env(&env(&envs["SchedulerFunction"])).unwrap();
        assert_eq!(scheduler.channels, ["email", "sms"]);
        assert_eq!(scheduler.channel_queues, sms_queue, "SMS is released to its own queue");
        assert_eq!(scheduler.channel_urgent_queues, sms_urgent, "urgent SMS to its own urgent lane");
        let rates: Vec<_> =
            scheduler.channel_rates.iter().map(|(n, r)| (n.as_str(), (r * 10.0).round() / 10.0)).collect();
        assert_eq!(rates, [("email", 97.0), ("sms", 9.7)], "each channel paced at 97 % of its own quota");
        assert!(
            (scheduler.settings.sustainable_rate - 106.7).abs() < 1e-9,
            "the fleet at 97 % of the two quotas summed: {}",
            scheduler.settings.sustainable_rate
        );

        let redrive = RedriveConfig::from_env(&env(&envs["RedriveFunction"])).unwrap();
        assert_eq!(redrive.lanes.channel_queues, sms_queue, "SMS letters go back to its own queue");
        assert_eq!(redrive.lanes.channel_urgent_queues, sms_urgent, "urgent SMS letters to its urgent lane");
        let caps: Vec<(&str, f64)> = redrive.channel_caps.iter().map(|(c, r)| (c.as_str(), *r)).collect();
        assert_eq!(caps, [("email", 20.0), ("sms", 2.0)], "each channel's letters at 20 % of its own quota");
    }
}
