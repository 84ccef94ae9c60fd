//! The operator commands as an operator runs them: the real binary against `punctual local
//! up`'s emulator pipeline.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::process::Command;

use punctual_tests::unique;

fn punctual(state: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_punctual")).args(args).env("PUNCTUAL_STATE_DIR", state).output().unwrap()
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn canary_status_pause_explain_and_redrive_on_the_local_pipeline() {
    let state = std::env::temp_dir().join(unique("punctual-ops"));
    json(&punctual(&state, &["local", "up", "--json"]));

    // The canary travels every stage and each is reported.
    let c = json(&punctual(&state, &["canary", "--json"]));
    let stages: Vec<&str> = c["stages"].as_array().unwrap().iter().map(|s| s["stage"].as_str().unwrap()).collect();
    assert_eq!(stages, ["import", "scheduler release", "sqs → sender claim", "limiter + provider", "ack"], "{c}");
    assert_eq!(c["ok"], true, "{c}");

    // explain on the delivered canary.
    let id = c["reminder_id"].as_str().unwrap();
    let e = json(&punctual(&state, &["explain", id, "--json"]));
    assert_eq!(e["state"], "delivered", "{e}");
    assert!(e["redrive_would_consume"].as_str().unwrap().starts_with("nothing"));

    // Pause: status shows it, redrive refuses, canary releases nothing; resume lifts it.
    let p = punctual(&state, &["pause", "--reason", "drain runbook", "--owner", "ops@example.com"]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let s = json(&punctual(&state, &["status", "--json"]));
    assert_eq!(s["paused"]["owner"], "ops@example.com", "{s}");
    // A second pause never replaces the one in force (the sender's own, or another operator's).
    let again = punctual(&state, &["pause", "--reason", "other", "--owner", "someone@example.com"]);
    assert!(!again.status.success(), "{again:?}");
    assert!(String::from_utf8_lossy(&again.stderr).contains("already paused by ops@example.com"), "{again:?}");
    assert_eq!(json(&punctual(&state, &["status", "--json"]))["paused"]["owner"], "ops@example.com");
    let r =
        punctual(&state, &["redrive", "--reason", "r", "--owner", "o", "--max-messages", "5", "--max-per-second", "2"]);
    assert!(!r.status.success() && String::from_utf8_lossy(&r.stderr).contains("paused"), "{r:?}");
    let c = punctual(&state, &["canary", "--json"]);
    assert_eq!(c.status.code(), Some(3), "the canary stops at the scheduler while paused");
    let c: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap();
    assert_eq!(c["stages"][1]["ok"], false, "{c}");
    assert!(punctual(&state, &["resume"]).status.success());
    assert!(json(&punctual(&state, &["status", "--json"]))["paused"].is_null());

    // A channel's own switch: refused where no channel is declared (no sender would read it).
    let none = punctual(&state, &["pause", "--channel", "sms", "--reason", "r", "--owner", "o"]);
    assert!(!none.status.success(), "{none:?}");
    assert!(String::from_utf8_lossy(&none.stderr).contains("declares no channels"), "{none:?}");
    // Declared (an environment target with CHANNELS), it sets that channel's switch only: the
    // fleet stays unpaused, a second pause finds the channel's, and resume lifts it.
    let up: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state.join("state.json")).unwrap()).unwrap();
    let res = &up;
    let declared = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_punctual"));
        for (var, key) in [
            ("SEND_QUEUE_URL", "send_queue_url"),
            ("DLQ_URL", "dlq_url"),
            ("LEDGER_TABLE", "ledger_table"),
            ("RENEWALS_TABLE", "renewals_table"),
            ("AWS_ENDPOINT_URL", "endpoint"),
            ("PROVIDER_URL", "provider_url"),
        ] {
            cmd.env(var, res[key].as_str().unwrap());
        }
        if let Some(d) = up["dynamodb_endpoint"].as_str() {
            cmd.env("AWS_ENDPOINT_URL_DYNAMODB", d);
        }
        cmd.env("CHANNELS", "email,sms").env("PUNCTUAL_STATE_DIR", &state).args(args).output().unwrap()
    };
    // The canary still travels every stage on a target that declares channels by name only
    // (its sender sends through the target's one provider, as before).
    let c = json(&declared(&["canary", "--json"]));
    assert_eq!(c["ok"], true, "{c}");
    let p = declared(&["pause", "--channel", "sms", "--reason", "sms vendor incident", "--owner", "ops@example.com"]);
    assert!(p.status.success(), "{p:?}");
    assert!(String::from_utf8_lossy(&p.stdout).starts_with("channel sms paused by ops@example.com"), "{p:?}");
    let s = json(&declared(&["status", "--json"]));
    assert!(s["paused"].is_null(), "the fleet is not paused: {s}");
    assert_eq!(s["channels_paused"]["sms"]["owner"], "ops@example.com", "{s}");
    assert!(s["channels_paused"]["email"].is_null(), "{s}");
    let text = String::from_utf8_lossy(&declared(&["status"]).stdout).into_owned();
    assert!(text.contains("channel sms      PAUSED since") && text.contains("channel email    not paused"), "{text}");
    let again = declared(&["pause", "--channel", "sms", "--reason", "x", "--owner", "someone@example.com"]);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("channel sms is already paused by ops@example.com"),
        "{again:?}"
    );
    let unknown = declared(&["pause", "--channel", "push", "--reason", "x", "--owner", "o"]);
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("not a declared channel (declared: email, sms)"),
        "{unknown:?}"
    );
    let r = declared(&["resume", "--channel", "sms", "--owner", "ops@example.com"]);
    assert!(
        String::from_utf8_lossy(&r.stdout).starts_with("channel sms resumed (was paused by ops@example.com"),
        "{r:?}"
    );
    let r = declared(&["resume", "--channel", "sms"]);
    assert!(String::from_utf8_lossy(&r.stdout).starts_with("channel sms was not paused"), "{r:?}");
    assert!(json(&declared(&["status", "--json"]))["channels_paused"]["sms"].is_null());

    // A request above the caps is refused with every problem, before anything runs.
    let bad = punctual(
        &state,
        &["redrive", "--reason", " ", "--owner", "o", "--max-messages", "5000000", "--max-per-second", "999"],
    );
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    for needle in ["reason must not be empty", "max_messages must be", "max_per_second must be"] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    // A dry run on an empty DLQ moves nothing and says so.
    let d = json(&punctual(
        &state,
        &[
            "redrive",
            "--reason",
            "r",
            "--owner",
            "o",
            "--max-messages",
            "5",
            "--max-per-second",
            "2",
            "--dry-run",
            "--json",
        ],
    ));
    assert_eq!(d["dry_run"]["moved"], 0, "{d}");
    assert!(d["result"].is_null());

    assert!(punctual(&state, &["local", "down"]).status.success());
}
