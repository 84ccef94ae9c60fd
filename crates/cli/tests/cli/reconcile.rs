//! `punctual reconcile` and `punctual forecast` as an operator runs them: the real binary
//! against `punctual local up`'s emulator pipeline, on renewals imported through the real
//! import.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use punctual_aws::config::{dynamodb_client, for_endpoint};
use punctual_aws::renewals::DynamoRenewals;
use punctual_core::scheduler::{Scheduler, SchedulerSettings};
use punctual_lambda::SystemClock;
use punctual_ops::LocalState;
use punctual_tests::unique;

fn punctual(state: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_punctual")).args(args).env("PUNCTUAL_STATE_DIR", state).output().unwrap()
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

/// An import file of renewals due at `at` (UTC zone, so local = UTC), one per (id, status).
fn csv(at: DateTime<Utc>, rows: &[(&str, &str)]) -> String {
    let mut out =
        "tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,local_send_time,window_minutes,status\n"
            .to_owned();
    for (i, (id, status)) in rows.iter().enumerate() {
        let tenant = if i % 2 == 0 { "acme" } else { "globex" };
        out.push_str(&format!(
            "{tenant},{id},cust-{i},email,UTC,{},{},240,{status}\n",
            at.format("%Y-%m-%d"),
            at.format("%H:%M")
        ));
    }
    out
}

/// Imports `file` with the real import and drains the local pipeline.
fn import_and_drain(state: &std::path::Path, file: &std::path::Path) {
    let import = punctual(state, &["import", file.to_str().unwrap(), "--json"]);
    assert!(import.status.success(), "{}", String::from_utf8_lossy(&import.stderr));
    let drain = punctual(state, &["local", "drain", "--json"]);
    assert!(drain.status.success(), "{}", String::from_utf8_lossy(&drain.stderr));
}

#[tokio::test]
async fn a_drained_mix_reconciles_and_a_message_lost_behind_the_pipeline_is_named() {
    let state = std::env::temp_dir().join(unique("punctual-reconcile"));
    let up = punctual(&state, &["local", "up", "--json"]);
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let local: LocalState = serde_json::from_slice(&std::fs::read(state.join("state.json")).unwrap()).unwrap();

    // Due a minute ago (minute-aligned, as import's local times are): 6 active, 2 cancelled,
    // 2 paid.
    let now = Utc::now();
    let due = now.with_second(0).unwrap().with_nanosecond(0).unwrap() - TimeDelta::minutes(1);
    let mut rows: Vec<(String, &str)> = (0..6).map(|i| (format!("ren-active-{i}"), "active")).collect();
    rows.extend((0..2).map(|i| (format!("ren-cancelled-{i}"), "cancelled")));
    rows.extend((0..2).map(|i| (format!("ren-paid-{i}"), "paid")));
    let rows: Vec<(&str, &str)> = rows.iter().map(|(a, b)| (a.as_str(), *b)).collect();
    let file = state.join("mix.csv");
    std::fs::write(&file, csv(due, &rows)).unwrap();
    import_and_drain(&state, &file);

    let from = (due - TimeDelta::minutes(5)).to_rfc3339();
    let to = (due + TimeDelta::minutes(1)).to_rfc3339();
    let ok = punctual(&state, &["reconcile", "--from", &from, "--to", &to, "--json"]);
    let r = json(&ok);
    assert_eq!(ok.status.code(), Some(0), "{r:#}");
    assert_eq!((r["population"].as_u64(), r["due"].as_u64(), r["delivered"].as_u64()), (Some(10), Some(6), Some(6)));
    assert_eq!(r["excluded"], serde_json::json!({"cancelled": 2, "paid": 2}), "{r:#}");
    assert_eq!((r["unaccounted"].as_u64(), r["delivered_late"].as_u64()), (Some(0), Some(0)));
    assert_eq!(r["slo"]["met"].as_u64().unwrap() + r["slo"]["breached"].as_u64().unwrap(), 6, "{r:#}");
    assert_eq!(r["slo"]["excluded"], 4);
    // One tenant only: half of the mix.
    let acme = json(&punctual(&state, &["reconcile", "--from", &from, "--to", &to, "--tenant", "acme", "--json"]));
    assert_eq!(acme["population"], 5, "{acme:#}");

    // One more renewal, released by a scheduler tick, and its message deleted from the send
    // queue behind the pipeline's back before any sender saw it.
    std::fs::write(&file, csv(due, &[("ren-lost-1", "active")])).unwrap();
    assert!(punctual(&state, &["import", file.to_str().unwrap()]).status.success());
    let config = for_endpoint(&local.resources.endpoint).await;
    let ddb = dynamodb_client(&config, local.dynamodb_endpoint.as_deref());
    let queues = local.resources.queues(aws_sdk_sqs::Client::new(&config));
    let renewals = DynamoRenewals::new(ddb, local.resources.renewals_table.clone());
    let tick = Scheduler::new(renewals, queues.clone(), SystemClock, SchedulerSettings::default())
        .tick(Utc::now() + TimeDelta::seconds(30))
        .await
        .unwrap();
    assert_eq!(tick.released, 1);
    let mut lost = None;
    for _ in 0..10 {
        for lane in [queues.send_url().to_owned(), queues.urgent_url().to_owned()] {
            for m in queues.receive(&lane, 10, Duration::from_secs(1)).await.unwrap() {
                queues.delete(&lane, &m.receipt_handle).await.unwrap();
                lost = Some(punctual_core::ReminderMessage::decode(&m.body).unwrap().reminder_id);
            }
        }
        if lost.is_some() {
            break;
        }
    }
    let lost = lost.expect("the released message was on a lane");

    // Released seconds ago: within the default grace SQS's approximate counts get to show it,
    // reconcile still calls it waiting; with no grace it is named.
    let fresh = json(&punctual(&state, &["reconcile", "--from", &from, "--to", &to, "--json"]));
    assert_eq!((fresh["unaccounted"].as_u64(), fresh["waiting"]["on_queue"].as_u64()), (Some(0), Some(1)), "{fresh:#}");
    let bad = punctual(&state, &["reconcile", "--from", &from, "--to", &to, "--grace", "0", "--json"]);
    let r = json(&bad);
    assert_eq!(bad.status.code(), Some(3), "{r:#}");
    assert_eq!(r["unaccounted"], 1, "{r:#}");
    let named = &r["unaccounted_reminders"][0];
    assert_eq!(named["reminder_id"], lost.as_str(), "{r:#}");
    assert_eq!(
        (named["renewal_id"].as_str(), named["problem"].as_str()),
        (Some("ren-lost-1"), Some("released_not_on_any_queue"))
    );
    // The human report names it too.
    let text = punctual(&state, &["reconcile", "--from", &from, "--to", &to, "--grace", "0"]);
    assert_eq!(text.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&text.stdout).contains(&format!("UNACCOUNTED {lost}")));
    // status shows today's SLO over the same population, with the lost one breached once it
    // cannot make it any more (it was due a minute ago: within 300 s it is still pending).
    let s = json(&punctual(&state, &["status", "--json"]));
    assert!(s["slo_today"]["met"].as_u64().unwrap() + s["slo_today"]["breached"].as_u64().unwrap() >= 6, "{s:#}");

    // Bad input is refused with exit 2 and every problem named.
    let refused = punctual(&state, &["reconcile", "--from", "yesterday", "--to", "2020-01-01", "--tenant", "a b"]);
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("--from \"yesterday\"") && err.contains("--tenant \"a b\""), "{err}");

    assert!(punctual(&state, &["local", "down"]).status.success());
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test]
async fn a_forecast_reads_the_days_exact_population_and_agrees_with_simulate() {
    let state = std::env::temp_dir().join(unique("punctual-forecast"));
    let up = punctual(&state, &["local", "up", "--json"]);
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    // Tomorrow at 09:00 local in three zones, 30-minute windows, 5 % paid: at 0.05 calls/s the
    // morning cannot all make it.
    let day = (Utc::now() + TimeDelta::days(1)).date_naive();
    let zones = ["America/New_York", "Europe/London", "Asia/Kathmandu"];
    let mut text =
        "tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,local_send_time,window_minutes,status\n"
            .to_owned();
    let mut inputs = Vec::new();
    for i in 0..600 {
        let input = punctual_core::renewal::RenewalInput {
            tenant_id: ["acme", "globex", "initech"][i % 3].into(),
            renewal_id: format!("ren-{i:04}"),
            recipient_ref: format!("cust-{i}"),
            channel: "email".into(),
            zone: zones[i % 3].into(),
            local_due_date: day.format("%Y-%m-%d").to_string(),
            local_send_time: "09:00".into(),
            window_minutes: "30".into(),
            status: if i % 20 == 7 { "paid".into() } else { "active".into() },
            ..Default::default()
        };
        text.push_str(&format!(
            "{},{},{},{},{},{},{},{},{}\n",
            input.tenant_id,
            input.renewal_id,
            input.recipient_ref,
            input.channel,
            input.zone,
            input.local_due_date,
            input.local_send_time,
            input.window_minutes,
            input.status
        ));
        inputs.push(input);
    }
    let file = state.join("day.csv");
    std::fs::write(&file, text).unwrap();
    assert!(punctual(&state, &["import", file.to_str().unwrap()]).status.success());
    // Renewals due on the UTC day: the zones put some on the day before or after.
    let expected: Vec<punctual_core::renewal::Renewal> = inputs
        .iter()
        .map(|i| punctual_core::renewal::Renewal::validate(i).unwrap())
        .filter(|r| r.deliver_after.date_naive() == day)
        .collect();
    assert!(expected.len() >= 200, "{}", expected.len());

    let saved = state.join("population.csv");
    let date = day.to_string();
    let args = ["--quota", "0.05"];
    let f = punctual(
        &state,
        &[&["forecast", "--date", &date, "--save-population", saved.to_str().unwrap(), "--json"][..], &args[..]]
            .concat(),
    );
    let forecast = json(&f);
    // The population read from the table is exactly the one the import computed.
    let read = punctual_core::reconcile::parse_population(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let mut got: Vec<(String, DateTime<Utc>, DateTime<Utc>, &str)> =
        read.iter().map(|r| (r.reminder_id.to_string(), r.deliver_after, r.deliver_by, r.status.as_str())).collect();
    let mut want: Vec<(String, DateTime<Utc>, DateTime<Utc>, &str)> = expected
        .iter()
        .map(|r| (r.reminder_id.to_string(), r.deliver_after, r.deliver_by, r.status.as_str()))
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(forecast["population"], expected.len(), "{forecast:#}");
    assert_eq!(forecast["excluded"]["paid"], expected.iter().filter(|r| r.status.as_str() == "paid").count());
    // It misses the SLO at 0.05/s: exit 3, with late reminders per tenant and a first breach.
    assert_eq!(f.status.code(), Some(3), "{forecast:#}");
    let late = forecast["late"].as_u64().unwrap();
    assert!(late > 0, "{forecast:#}");
    assert!(forecast["earliest_breach_at"].as_str().is_some());
    let per_tenant: u64 = forecast["late_by_tenant"].as_array().unwrap().iter().map(|p| p[1].as_u64().unwrap()).sum();
    assert_eq!(per_tenant, late);

    // `simulate` on the same population agrees (late within 1 %).
    let sim =
        punctual(&state, &[&["simulate", "--population", saved.to_str().unwrap(), "--json"][..], &args[..]].concat());
    let sim = json(&sim);
    let sim_late = sim["late"].as_u64().unwrap();
    assert!(late.abs_diff(sim_late) * 100 <= late, "forecast {late} vs simulate {sim_late}");
    assert_eq!(sim["slo"]["breached"], forecast["slo"]["breached"]);

    // A day with nothing due forecasts nothing late and meets the SLO.
    let empty = punctual(&state, &["forecast", "--date", "2030-01-01", "--json"]);
    assert_eq!(empty.status.code(), Some(0), "{}", String::from_utf8_lossy(&empty.stderr));
    assert_eq!(json(&empty)["population"], 0);
    // A bad date is refused; `tomorrow` (UTC) is a day.
    assert_eq!(punctual(&state, &["forecast", "--date", "next week"]).status.code(), Some(2));
    let tomorrow = punctual(&state, &["forecast", "--date", "tomorrow", "--json"]);
    assert_eq!(tomorrow.status.code(), Some(0), "{}", String::from_utf8_lossy(&tomorrow.stderr));
    assert!(json(&tomorrow)["population"].is_u64(), "tomorrow's population is read");

    assert!(punctual(&state, &["local", "down"]).status.success());
    let _ = std::fs::remove_dir_all(&state);
}

/// With two channels declared, `reconcile` gives each channel's own account beside the totals,
/// `--channel` narrows the window to one channel, `status` gives today's SLO per channel and
/// `forecast --channel` projects one channel's renewals at that channel's own quota. A channel
/// the deployment does not declare is refused (exit 2), naming the declared ones.
#[tokio::test]
async fn two_channels_are_reconciled_and_forecast_each_on_its_own() {
    let state = std::env::temp_dir().join(unique("punctual-reconcile-channels"));
    let up = punctual(&state, &["local", "up", "--channels", "email=ses,sms=http:20", "--json"]);
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let now = Utc::now();
    let due = now.with_second(0).unwrap().with_nanosecond(0).unwrap() - TimeDelta::minutes(1);
    let mut text =
        "tenant_id,renewal_id,recipient_ref,email,channel,zone,local_due_date,local_send_time,window_minutes,status\n"
            .to_owned();
    let rows = [("e", "email", 4, "active"), ("s", "sms", 3, "active"), ("p", "sms", 1, "paid")];
    for (prefix, channel, n, status) in rows {
        for i in 0..n {
            text.push_str(&format!(
                "acme,ren-{prefix}-{i},cust-{prefix}-{i},c{prefix}{i}@example.com,{channel},UTC,{},{},240,{status}\n",
                due.format("%Y-%m-%d"),
                due.format("%H:%M")
            ));
        }
    }
    let file = state.join("channels.csv");
    std::fs::write(&file, text).unwrap();
    import_and_drain(&state, &file);

    let from = (due - TimeDelta::minutes(5)).to_rfc3339();
    let to = (due + TimeDelta::minutes(1)).to_rfc3339();
    let window = ["reconcile", "--from", &from, "--to", &to];
    let whole = punctual(&state, &[&window[..], &["--json"]].concat());
    let r = json(&whole);
    assert_eq!(whole.status.code(), Some(0), "{r:#}");
    assert_eq!((r["population"].as_u64(), r["delivered"].as_u64()), (Some(8), Some(7)), "{r:#}");
    let (email, sms) = (&r["channels"]["email"], &r["channels"]["sms"]);
    assert_eq!((email["population"].as_u64(), email["delivered"].as_u64()), (Some(4), Some(4)), "{r:#}");
    assert_eq!(
        (sms["population"].as_u64(), sms["due"].as_u64(), sms["delivered"].as_u64()),
        (Some(4), Some(3), Some(3)),
        "{r:#}"
    );
    assert_eq!(sms["slo"]["excluded"], 1, "the paid SMS renewal: {r:#}");
    let text = punctual(&state, &window);
    assert!(String::from_utf8_lossy(&text.stdout).contains("channel sms "), "{text:?}");

    // One channel only: its rows, no per-channel breakdown.
    let one = json(&punctual(&state, &[&window[..], &["--channel", "sms", "--json"]].concat()));
    assert_eq!((one["population"].as_u64(), one["delivered"].as_u64()), (Some(4), Some(3)), "{one:#}");
    assert_eq!(one["channel"], "sms");
    assert!(one.get("channels").is_none(), "{one:#}");
    let fax = punctual(&state, &[&window[..], &["--channel", "fax"]].concat());
    assert_eq!(fax.status.code(), Some(2), "{fax:?}");
    assert!(String::from_utf8_lossy(&fax.stderr).contains("declared: email, sms"), "{fax:?}");

    // Today's SLO per channel (when the renewals were due today, UTC).
    if due.date_naive() == Utc::now().date_naive() {
        let s = json(&punctual(&state, &["status", "--json"]));
        let per = &s["slo_today_by_channel"];
        let judged = |c: &str| per[c]["met"].as_u64().unwrap() + per[c]["breached"].as_u64().unwrap();
        assert_eq!((judged("email"), judged("sms")), (4, 3), "{s:#}");
    }

    // The day's SMS renewals projected at SMS's own quota.
    let date = due.date_naive().to_string();
    let f = punctual(&state, &["forecast", "--date", &date, "--channel", "sms", "--json"]);
    let forecast = json(&f);
    assert_eq!(f.status.code(), Some(0), "{forecast:#}");
    assert_eq!(
        (forecast["population"].as_u64(), forecast["quota"].as_f64(), forecast["channel"].as_str()),
        (Some(4), Some(20.0), Some("sms")),
        "{forecast:#}"
    );
    assert_eq!(forecast["excluded"]["paid"], 1, "{forecast:#}");
    assert_eq!(punctual(&state, &["forecast", "--date", &date, "--channel", "fax"]).status.code(), Some(2));

    assert!(punctual(&state, &["local", "down"]).status.success());
    let _ = std::fs::remove_dir_all(&state);
}
