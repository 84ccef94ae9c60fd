//! `punctual simulate` as scripts use it: exact report keys, the baseline beside it, the chart.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::process::Command;

use punctual_tests::unique;

const KEYS: [&str; 19] = [
    "reminders",
    "delivered",
    "duplicates",
    "late",
    "expired",
    "cancelled",
    "dead_lettered",
    "lost",
    "provider_calls",
    "provider_429",
    "drain_seconds",
    "floor_seconds",
    "utilisation",
    "retry_amplification",
    "max_oldest_age_seconds",
    "alarm_first_fired_seconds",
    "first_late_seconds",
    "edf_late",
    "cost_per_million_usd",
];

#[test]
fn json_report_has_every_key_for_punctual_and_the_baseline_and_the_chart_renders() {
    let dir = std::env::temp_dir().join(unique("punctual-sim"));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = dir.join("chart.png");
    let out = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args([
            "simulate",
            "--scenario",
            "crash",
            "--reminders",
            "1500",
            "--seed",
            "3",
            "--baseline",
            "naive",
            "--json",
        ])
        .arg("--chart")
        .arg(&chart)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in KEYS {
        assert!(r.get(k).is_some(), "missing {k}");
        assert!(r["baseline"].get(k).is_some(), "baseline missing {k}");
    }
    // `duplicates` is the documented alias of `repeated_key_requests` (harmless re-sends under
    // the same key); a second delivery is a `double_effects`.
    assert_eq!(
        (r["delivered"].as_u64(), r["double_effects"].as_u64(), r["lost"].as_u64()),
        (Some(1500), Some(0), Some(0))
    );
    assert_eq!(r["duplicates"], r["repeated_key_requests"]);
    assert!(r["baseline"]["double_effects"].as_u64().unwrap() > 0, "the naive worker re-sends after a crash");
    let cost = r["cost_per_million_usd"].as_f64().unwrap();
    assert!(cost > 0.0 && r["cost"]["dynamodb_writes"].as_f64().unwrap() > 1e6, "two ledger writes per reminder: {r}");
    assert_eq!(r["baseline"]["cost"]["dynamodb_writes"], 0.0, "the naive worker has no ledger");
    let png = std::fs::read(&chart).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 20_000, "a chart with three panels, lines and text: {} bytes", png.len());

    let again = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["simulate", "--scenario", "crash", "--reminders", "1500", "--seed", "3", "--json"])
        .output()
        .unwrap();
    let r2: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(r2["provider_calls"], r["provider_calls"], "same seed, same report");
}

#[test]
fn an_unknown_scenario_or_baseline_is_refused_by_name() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_punctual")).args(["simulate", "--scenario", "tsunami"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("unknown scenario \"tsunami\"; one of: normal, throttle, poison, crash, overload")
    );
    let out =
        Command::new(env!("CARGO_BIN_EXE_punctual")).args(["simulate", "--baseline", "sidekiq"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `--scenario channels --baseline shared`: both reports carry each channel's figures; the
/// shared baseline is refused by name for a scenario without channels.
#[test]
fn channels_report_each_channel_beside_a_shared_limiter() {
    let out = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["simulate", "--scenario", "channels", "--reminders", "2200", "--baseline", "shared", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for report in [&r, &r["baseline"]] {
        for (name, n) in [("email", 2000), ("sms", 200)] {
            let c = &report["channels"][name];
            assert_eq!(c["reminders"], n, "{name}: {c}");
            for k in
                ["delivered", "late", "provider_calls", "provider_429", "floor_seconds", "drain_seconds", "utilisation"]
            {
                assert!(c.get(k).is_some(), "{name} missing {k}: {c}");
            }
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["simulate", "--scenario", "normal", "--baseline", "shared"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only with --scenario channels"));
}
