//! Decoder tests: each malformed class gets its own specific message, and valid bodies
//! round-trip.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use punctual_core::contract::{MAX_BODY_BYTES, MalformedMessage, ReminderMessage};
use punctual_core::testing::valid_body as valid;
use serde_json::{Value, json};

fn with(path: &str, v: Value) -> String {
    let mut m = valid();
    match path.split_once('.') {
        Some((outer, inner)) => m[outer][inner] = v,
        None => m[path] = v,
    }
    m.to_string()
}

fn without(field: &str) -> String {
    let mut m = valid();
    m.as_object_mut().unwrap().remove(field);
    m.to_string()
}

fn err(body: &str) -> MalformedMessage {
    ReminderMessage::decode(body).expect_err("must be malformed")
}

#[test]
fn a_valid_body_decodes_and_round_trips() {
    let m = ReminderMessage::decode(&valid().to_string()).unwrap();
    assert_eq!(m.tenant_id.as_str(), "acme");
    assert_eq!(m.deliver_after, "2026-12-01T14:00:00Z".parse::<DateTime<Utc>>().unwrap());
    assert_eq!(m.redrive, None);
    assert_eq!(ReminderMessage::decode(&m.encode()).unwrap(), m);
}

#[test]
fn offsets_are_normalised_to_utc() {
    let m = ReminderMessage::decode(&with("deliver_after", json!("2026-12-01T09:00:00-05:00"))).unwrap();
    assert_eq!(m.deliver_after, "2026-12-01T14:00:00Z".parse::<DateTime<Utc>>().unwrap());
}

#[test]
fn unknown_fields_are_ignored_within_a_version() {
    assert!(ReminderMessage::decode(&with("added_in_v1_1", json!("x"))).is_ok());
}

#[test]
fn a_redrive_stamp_is_decoded_and_kept() {
    let body = with("redrive", json!({"id": "rd-42", "reason": "provider outage 09:00-09:20", "owner": "oncall@acme"}));
    let m = ReminderMessage::decode(&body).unwrap();
    let r = m.redrive.as_ref().unwrap();
    assert_eq!((r.id.as_str(), r.owner.as_str()), ("rd-42", "oncall@acme"));
    assert_eq!(ReminderMessage::decode(&m.encode()).unwrap(), m);
}

/// The redrive budget's base travels in the stamp; a stamp written before the field existed
/// still decodes (wire compatibility), taking the message's own attempt count as its base.
#[test]
fn a_redrive_stamp_keeps_its_budget_base_and_old_stamps_still_decode() {
    let mut old = valid();
    old["attempt"] = json!(8);
    old["redrive"] = json!({"id": "rd-42", "reason": "outage", "owner": "oncall@acme"});
    let m = ReminderMessage::decode(&old.to_string()).unwrap();
    assert_eq!(m.redrive.as_ref().unwrap().base_attempt, 8, "an old stamp's base is the message's attempt");

    let mut new = old.clone();
    new["attempt"] = json!(11);
    new["redrive"]["base_attempt"] = json!(8);
    let m = ReminderMessage::decode(&new.to_string()).unwrap();
    assert_eq!((m.attempt, m.redrive.as_ref().unwrap().base_attempt), (11, 8));
    let encoded = m.encode();
    assert!(encoded.contains("\"base_attempt\":8"), "{encoded}");
    assert_eq!(ReminderMessage::decode(&encoded).unwrap(), m);

    for bad in [json!("8"), json!(-1), json!(1001), json!(1.5)] {
        let mut b = new.clone();
        b["redrive"]["base_attempt"] = bad.clone();
        assert!(
            matches!(err(&b.to_string()), MalformedMessage::WrongType { field: "redrive.base_attempt", .. }),
            "{bad}"
        );
    }
}

/// Each malformed class, its error value and the exact text an operator sees.
#[test]
fn each_malformed_class_gets_its_own_message() {
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(MAX_BODY_BYTES));
    let cases: Vec<(String, MalformedMessage, &str)> = vec![
        (
            big.clone(),
            MalformedMessage::TooLarge { len: big.len(), max: MAX_BODY_BYTES },
            "body is 8202 bytes; at most 8192 allowed",
        ),
        ("{\"v\":1,".into(), err("{\"v\":1,"), "body is not valid JSON: EOF while parsing a value at line 1 column 7"),
        (
            "[1,2]".into(),
            MalformedMessage::NotAnObject { found: "an array" },
            "body must be a JSON object, found an array",
        ),
        (without("v"), MalformedMessage::MissingVersion, "missing contract version field `v`"),
        (
            with("v", json!("1")),
            MalformedMessage::VersionNotInteger { found: "\"1\"".into() },
            "contract version `v` must be a non-negative integer, found \"1\"",
        ),
        (
            with("v", json!(7)),
            MalformedMessage::UnsupportedVersion(7),
            "unsupported contract version 7 (this build understands version 1)",
        ),
        (without("tenant_id"), MalformedMessage::MissingField("tenant_id"), "missing required field `tenant_id`"),
        (
            with("renewal_id", Value::Null),
            MalformedMessage::MissingField("renewal_id"),
            "missing required field `renewal_id`",
        ),
        (
            with("deliver_by", json!(1764626400)),
            MalformedMessage::WrongType { field: "deliver_by", expected: "a string", found: "a number" },
            "field `deliver_by` must be a string, found a number",
        ),
        (
            with("attempt", json!("0")),
            MalformedMessage::WrongType { field: "attempt", expected: "an integer", found: "a string" },
            "field `attempt` must be an integer, found a string",
        ),
        (
            with("attempt", json!(-1)),
            MalformedMessage::AttemptOutOfRange { found: "-1".into() },
            "field `attempt` must be between 0 and 1000, found -1",
        ),
        (
            with("attempt", json!(1.5)),
            MalformedMessage::AttemptOutOfRange { found: "1.5".into() },
            "field `attempt` must be between 0 and 1000, found 1.5",
        ),
        (
            with("reminder_id", json!("msg-123")),
            err(&with("reminder_id", json!("msg-123"))),
            "field `reminder_id` must look like rem_ followed by 32 lowercase hex digits",
        ),
        (
            with("tenant_id", json!("acme corp")),
            err(&with("tenant_id", json!("acme corp"))),
            "field `tenant_id` contains ' ' at position 4; allowed: ASCII letters, digits and . _ - (no `:`: it separates the tenant from the renewal in keys)",
        ),
        (with("kind", json!("")), err(&with("kind", json!(""))), "field `kind` must not be empty"),
        (
            with("deliver_after", json!("2026-12-01 09:00")),
            MalformedMessage::InvalidTimestamp { field: "deliver_after", value: "2026-12-01 09:00".into() },
            "field `deliver_after` must be an RFC 3339 timestamp with offset (e.g. 2026-12-01T09:00:00Z), found \"2026-12-01 09:00\"",
        ),
        (
            with("deliver_by", json!("2026-12-01T14:00:00Z")),
            err(&with("deliver_by", json!("2026-12-01T14:00:00Z"))),
            "deliver_by must be after deliver_after (deliver_after=2026-12-01T14:00:00.000Z, deliver_by=2026-12-01T14:00:00.000Z)",
        ),
        (
            with("first_enqueued", json!("2026-12-02T00:00:00Z")),
            err(&with("first_enqueued", json!("2026-12-02T00:00:00Z"))),
            "first_enqueued (2026-12-02T00:00:00.000Z) must not be after deliver_by (2026-12-01T22:00:00.000Z)",
        ),
        (
            with("redrive", json!("yes")),
            MalformedMessage::WrongType { field: "redrive", expected: "an object", found: "a string" },
            "field `redrive` must be an object, found a string",
        ),
        (
            with("redrive", json!({"id": "rd-1", "reason": "  ", "owner": "me"})),
            MalformedMessage::InvalidRedriveText { field: "reason" },
            "field `redrive.reason` must be 1 to 256 characters",
        ),
        (
            with("redrive", json!({"id": "rd-1", "reason": "outage"})),
            MalformedMessage::InvalidRedriveText { field: "owner" },
            "field `redrive.owner` must be 1 to 256 characters",
        ),
        (
            with("redrive", json!({"reason": "x", "owner": "y"})),
            MalformedMessage::MissingField("redrive.id"),
            "missing required field `redrive.id`",
        ),
    ];
    let mut texts = std::collections::HashSet::new();
    for (body, want, text) in &cases {
        let got = err(body);
        assert_eq!(&got, want, "body {body}");
        assert_eq!(got.to_string(), *text, "body {body}");
        assert!(texts.insert(text), "two classes share the text {text}");
    }
}

#[test]
fn malformed_classes_do_not_leak_the_body() {
    // The detail lands in DLQ attributes and logs: it names fields, never echoes free text.
    let e = err(&with("correlation_id", json!("alice@example.com is a recipient")));
    assert!(!e.to_string().contains("alice"));
    // Echoed values are cut short so a huge field cannot flood a DLQ attribute.
    let e = err(&with("deliver_after", json!("y".repeat(5_000))));
    assert!(e.to_string().len() < 200, "{e}");
    let e = err(&with("v", json!("z".repeat(5_000))));
    assert!(e.to_string().len() < 200, "{e}");
}

/// Cases per decoder property: 2,000 in `make test`; raise with `PUNCTUAL_FUZZ_CASES=200000`
/// for a longer fuzzing run.
fn fuzz_cases() -> u32 {
    std::env::var("PUNCTUAL_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases()))]

    /// The decoder never panics and never accepts a window that is not `after < by`.
    #[test]
    fn decoder_never_panics_on_arbitrary_bytes(body in ".{0,600}") {
        let _ = ReminderMessage::decode(&body);
    }

    #[test]
    fn decoder_never_panics_on_mutated_valid_bodies(field in 0usize..11, value in prop_oneof![
        Just(Value::Null), any::<bool>().prop_map(Value::from), any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from), ".{0,40}".prop_map(Value::from),
        Just(json!([])), Just(json!({})),
    ]) {
        let names = ["v","reminder_id","renewal_id","tenant_id","kind","deliver_after","deliver_by","attempt","first_enqueued","correlation_id","redrive"];
        let body = with(names[field], value);
        if let Ok(m) = ReminderMessage::decode(&body) {
            prop_assert!(m.deliver_after < m.deliver_by);
            prop_assert_eq!(ReminderMessage::decode(&m.encode()).unwrap(), m);
        }
    }

    #[test]
    fn any_valid_window_round_trips(after_s in 0i64..4_000_000_000, len_ms in 1i64..10_000_000, attempt in 0u32..=1000) {
        let after = DateTime::<Utc>::from_timestamp_millis(after_s * 1000).unwrap();
        let by = after + chrono::TimeDelta::milliseconds(len_ms);
        let mut m = valid();
        m["deliver_after"] = json!(after.to_rfc3339());
        m["deliver_by"] = json!(by.to_rfc3339());
        m["first_enqueued"] = json!(after.to_rfc3339());
        m["attempt"] = json!(attempt);
        let decoded = ReminderMessage::decode(&m.to_string()).unwrap();
        prop_assert_eq!((decoded.deliver_after, decoded.deliver_by, decoded.attempt), (after, by, attempt));
    }
}

/// The channel travels with the message when the scheduler knows it, is omitted when it
/// does not (a body from before it decodes as `None`), and a bad one is named.
#[test]
fn the_channel_round_trips_is_optional_and_a_bad_one_is_named() {
    let t = chrono::Utc::now();
    let m = ReminderMessage {
        channel: Some("sms".into()),
        ..punctual_core::testing::message("c", t, t + chrono::TimeDelta::hours(1))
    };
    let body = m.encode();
    assert!(body.contains("\"channel\":\"sms\""), "{body}");
    assert_eq!(ReminderMessage::decode(&body).unwrap().channel.as_deref(), Some("sms"));
    let none = ReminderMessage { channel: None, ..m.clone() };
    assert!(!none.encode().contains("channel"), "absent, not null: {}", none.encode());
    assert_eq!(ReminderMessage::decode(&none.encode()).unwrap().channel, None);
    let long = format!("\"{}\"", "x".repeat(65));
    for (value, says) in [
        ("\"\"", "field `channel` must be 1 to 64"),
        (long.as_str(), "field `channel` must be 1 to 64"),
        ("7", "field `channel` must be a string"),
    ] {
        let bad = body.replace("\"sms\"", value);
        let e = ReminderMessage::decode(&bad).unwrap_err().to_string();
        assert!(e.contains(says), "{value}: {e}");
    }
}

/// Found by review: every channel an import accepts (any text up to 32 characters) rides in a
/// message that decodes. A stricter decoder made `e.mail` or `push notification` renewals'
/// messages malformed: dead-lettered before their ledger record, beyond redrive.
#[test]
fn every_channel_an_import_accepts_travels_in_a_message_that_decodes() {
    let t = chrono::Utc::now();
    for channel in ["e.mail", "push notification", "sms/eu", "courrier électronique", &"x".repeat(32)] {
        let row = punctual_core::renewal::Renewal::validate(&punctual_core::renewal::RenewalInput {
            tenant_id: "acme".into(),
            renewal_id: "ren-1".into(),
            recipient_ref: "cust-1".into(),
            channel: channel.into(),
            zone: "Europe/London".into(),
            local_due_date: (t + chrono::TimeDelta::days(3)).format("%Y-%m-%d").to_string(),
            window_minutes: "480".into(),
            ..Default::default()
        })
        .unwrap();
        let m = punctual_core::scheduler::message_for(&punctual_core::ports::Pending::from(&row), t);
        let back = ReminderMessage::decode(&m.encode()).unwrap_or_else(|e| panic!("{channel}: {e}"));
        assert_eq!(back.channel.as_deref(), Some(channel));
    }
}
