//! The provider client against the real HTTP double on loopback: every answer class.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use punctual_core::ReminderMessage;
use punctual_core::ports::{Provider, ProviderRequest};
use punctual_core::provider::{ProviderOutcome, RetryAfter};
use punctual_core::secret::Secret;
use punctual_provider::HttpProvider;
use punctual_provider_double::{Behaviour, Config, Double};

const TOKEN: &str = "test-token-not-a-secret";

fn message(n: u32) -> ReminderMessage {
    let now = Utc::now();
    punctual_core::testing::message(&n.to_string(), now, now + TimeDelta::hours(1))
}

async fn setup() -> (Double, HttpProvider) {
    let double = Double::start(Config { token: Some(TOKEN.into()), ..Config::default() }, 0).await.unwrap();
    let client = HttpProvider::new(&double.url(), &Secret::new(TOKEN), Duration::from_secs(1)).unwrap();
    (double, client)
}

async fn send(client: &HttpProvider, m: &ReminderMessage, timeout: Duration) -> ProviderOutcome {
    client
        .send(&ProviderRequest { message: m, recipient_ref: Some("r"), channel: Some("email"), data: None, timeout })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_2xx_is_accepted_with_the_receipt_and_a_repeat_is_a_duplicate_attempt() {
    let (double, client) = setup().await;
    let m = message(1);
    let first = send(&client, &m, Duration::from_secs(2)).await;
    assert_eq!(first, ProviderOutcome::Accepted { status: 202, receipt: Some("msg-1".into()), budget: None });
    let again = send(&client, &m, Duration::from_secs(2)).await;
    assert_eq!(again, first, "a repeated key returns the first result");
    let s = double.stats();
    assert_eq!((s.accepted, s.distinct_keys, s.duplicate_key_attempts, s.missing_key), (1, 1, 1, 0));
}

#[tokio::test]
async fn a_429_carries_retry_after_in_both_forms() {
    let (double, client) = setup().await;
    double.script([
        Behaviour { status: Some(429), retry_after: Some("7".into()), ..Behaviour::default() },
        Behaviour {
            status: Some(503),
            retry_after: Some("Wed, 21 Oct 2026 07:28:00 GMT".into()),
            ..Behaviour::default()
        },
    ]);
    assert_eq!(
        send(&client, &message(2), Duration::from_secs(2)).await,
        ProviderOutcome::Transient { status: Some(429), retry_after: Some(RetryAfter::Seconds(7)) }
    );
    let ProviderOutcome::Transient { status: Some(503), retry_after: Some(RetryAfter::At(at)) } =
        send(&client, &message(2), Duration::from_secs(2)).await
    else {
        panic!("503 with an HTTP-date Retry-After");
    };
    assert_eq!(at.to_rfc3339(), "2026-10-21T07:28:00+00:00");
    assert_eq!(double.stats().accepted, 0);
}

#[tokio::test]
async fn the_quota_answers_429_past_the_burst() {
    let double = Double::start(Config { quota: 1.0, burst: 2.0, ..Config::default() }, 0).await.unwrap();
    let client = HttpProvider::new(&double.url(), &Secret::new("x"), Duration::from_secs(1)).unwrap();
    let mut outcomes = Vec::new();
    let mut lowest = Vec::new();
    for n in 0..4 {
        outcomes.push(send(&client, &message(100 + n), Duration::from_secs(2)).await);
        lowest.push(double.stats().lowest_tokens.unwrap_or(f64::NAN));
    }
    // The bucket's lowest level, as each request found it: the full burst, then one token
    // less, then under one (the 429s).
    assert!((1.9..=2.0).contains(&lowest[0]) && (0.9..1.2).contains(&lowest[1]), "{lowest:?}");
    assert!(lowest[2] < 1.0 && lowest[3] <= lowest[2] + 0.01, "{lowest:?}");
    assert!(matches!(outcomes[0], ProviderOutcome::Accepted { .. }));
    assert!(matches!(outcomes[1], ProviderOutcome::Accepted { .. }));
    assert!(matches!(
        outcomes[2],
        ProviderOutcome::Transient { status: Some(429), retry_after: Some(RetryAfter::Seconds(1)) }
    ));
    assert_eq!(double.stats().throttled, 2);
}

#[tokio::test]
async fn other_4xx_are_permanent_and_a_wrong_token_is_refused() {
    let (double, client) = setup().await;
    double.script([Behaviour { status: Some(400), ..Behaviour::default() }]);
    assert_eq!(send(&client, &message(3), Duration::from_secs(2)).await, ProviderOutcome::Permanent { status: 400 });
    let bad = HttpProvider::new(&double.url(), &Secret::new("wrong"), Duration::from_secs(1)).unwrap();
    assert_eq!(send(&bad, &message(4), Duration::from_secs(2)).await, ProviderOutcome::Permanent { status: 401 });
    assert_eq!(double.stats().unauthorized, 1);
}

#[tokio::test]
async fn a_5xx_is_indeterminate() {
    let (double, client) = setup().await;
    double.script([Behaviour { status: Some(500), ..Behaviour::default() }]);
    assert_eq!(
        send(&client, &message(5), Duration::from_secs(2)).await,
        ProviderOutcome::Indeterminate { status: Some(500) }
    );
}

#[tokio::test]
async fn a_slow_answer_times_out_as_indeterminate_and_the_retry_with_the_same_key_is_not_a_second_delivery() {
    let (double, client) = setup().await;
    // The double answers after 2.5 s; the 200 ms timeout must end the call long before (the
    // bound leaves a loaded CI machine 1.8 s of slack, and still fails if the timeout is
    // ignored).
    double.script([Behaviour { slow_ms: Some(2500), ..Behaviour::default() }]);
    let m = message(6);
    let started = std::time::Instant::now();
    assert_eq!(send(&client, &m, Duration::from_millis(200)).await, ProviderOutcome::Indeterminate { status: None });
    assert!(started.elapsed() < Duration::from_millis(2000), "the timeout bounds the call");
    tokio::time::sleep(Duration::from_millis(2500)).await; // the double processes it anyway
    assert!(matches!(send(&client, &m, Duration::from_secs(2)).await, ProviderOutcome::Accepted { .. }));
    let s = double.stats();
    assert_eq!((s.accepted, s.duplicate_key_attempts), (1, 1));
}

#[tokio::test]
async fn a_dropped_connection_is_indeterminate_and_accept_then_drop_is_found_by_the_retry() {
    let (double, client) = setup().await;
    double.script([
        Behaviour { drop: true, ..Behaviour::default() },
        Behaviour { accept_then_drop: true, ..Behaviour::default() },
    ]);
    let m = message(7);
    assert_eq!(send(&client, &m, Duration::from_secs(2)).await, ProviderOutcome::Indeterminate { status: None });
    assert_eq!(double.stats().accepted, 0, "drop closes before processing");
    assert_eq!(send(&client, &m, Duration::from_secs(2)).await, ProviderOutcome::Indeterminate { status: None });
    assert!(matches!(send(&client, &m, Duration::from_secs(2)).await, ProviderOutcome::Accepted { .. }));
    let s = double.stats();
    assert_eq!((s.accepted, s.duplicate_key_attempts, s.dropped), (1, 1, 2));
}

#[tokio::test]
async fn a_refused_connection_is_a_determinate_transient() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // closed again: nothing listens there now
    let client =
        HttpProvider::new(&format!("http://127.0.0.1:{port}/v1/messages"), &Secret::new("x"), Duration::from_secs(1))
            .unwrap();
    assert_eq!(
        send(&client, &message(8), Duration::from_secs(2)).await,
        ProviderOutcome::Transient { status: None, retry_after: None }
    );
}

#[test]
fn a_bad_url_or_token_is_refused_by_name() {
    assert!(HttpProvider::new("ftp://x", &Secret::new("t"), Duration::from_secs(1)).is_err());
    let e = HttpProvider::new("http://127.0.0.1:1/", &Secret::new("bad\ntoken"), Duration::from_secs(1)).unwrap_err();
    assert!(!e.to_string().contains("bad"), "the token must not leak into the error: {e}");
}

/// A loopback server that answers `POST /v1/messages` with `status` and `Location: /landing`,
/// and anything sent to `/landing` with 200 and a receipt. Returns its URL and the request
/// lines it saw.
fn redirecting_server(status: u16) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/messages", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            log.lock().unwrap().push(line.trim_end().to_owned());
            let response = if line.contains(" /landing ") {
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\nconnection: close\r\n\r\n{\"id\":\"landed\"}".to_owned()
            } else {
                format!(
                    "HTTP/1.1 {status} Redirect\r\nlocation: /landing\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                )
            };
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (url, seen)
}

/// A redirect is never followed: following a 301/302/303 turns the POST into a GET, and a 200
/// on that GET is not a delivery (307/308 would re-send to an address nobody configured). Any
/// 3xx is permanent, with its status.
#[tokio::test]
async fn a_redirect_is_not_followed_and_never_counts_as_delivered() {
    for status in [301u16, 302, 303, 307, 308] {
        let (url, seen) = redirecting_server(status);
        let client = HttpProvider::new(&url, &Secret::new(TOKEN), Duration::from_secs(1)).unwrap();
        let outcome = send(&client, &message(9), Duration::from_secs(2)).await;
        assert_eq!(outcome, ProviderOutcome::Permanent { status }, "a {status} must be permanent, never delivered");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, ["POST /v1/messages HTTP/1.1"], "{status}: the redirect target must never be requested");
    }
}

/// A token source that counts its reads and hands out whatever it holds now (a secret store
/// after a rotation).
#[derive(Debug, Default)]
struct Rotated {
    token: std::sync::Mutex<String>,
    reads: std::sync::atomic::AtomicU32,
}

impl punctual_core::secret::TokenSource for Rotated {
    fn fetch(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Secret, punctual_core::ports::BoxError>> + Send + '_>>
    {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = self.token.lock().unwrap().clone();
        Box::pin(async move { Ok(Secret::new(t)) })
    }
}

/// The secret was rotated: the provider now wants the new token while the client still holds
/// the old one. The first 401 makes the client read the source and repeat the call under the
/// same key: delivered once, not dead-lettered; later calls use the new token directly.
#[tokio::test]
async fn a_401_after_a_rotation_is_retried_once_with_the_rotated_token() {
    let double = Double::start(Config { token: Some("new-token".into()), ..Config::default() }, 0).await.unwrap();
    let source = std::sync::Arc::new(Rotated { token: "new-token".to_owned().into(), ..Rotated::default() });
    let client = HttpProvider::new(&double.url(), &Secret::new("old-token"), Duration::from_secs(1))
        .unwrap()
        .with_token_source(source.clone());
    let first = send(&client, &message(70), Duration::from_secs(2)).await;
    assert!(matches!(first, ProviderOutcome::Accepted { .. }), "{first:?}");
    let second = send(&client, &message(71), Duration::from_secs(2)).await;
    assert!(matches!(second, ProviderOutcome::Accepted { .. }), "{second:?}");
    let s = double.stats();
    assert_eq!((s.accepted, s.unauthorized), (2, 1), "one refusal, then the new token: {s:?}");
    assert_eq!(source.reads.load(std::sync::atomic::Ordering::Relaxed), 1, "the source is read once");
}

/// A refusal that survives a fresh token stands (permanent). A 401 (which pauses the fleet)
/// is confirmed by one read of its own, never more; a 403 does not read the source again within
/// the interval: a recipient the provider forbids cannot make every call read the secret store.
#[tokio::test]
async fn a_401_with_the_same_token_in_the_source_stands_and_the_source_is_not_hammered() {
    let double = Double::start(Config { token: Some("right".into()), ..Config::default() }, 0).await.unwrap();
    let source = std::sync::Arc::new(Rotated { token: "wrong".to_owned().into(), ..Rotated::default() });
    let client = HttpProvider::new(&double.url(), &Secret::new("wrong"), Duration::from_secs(1))
        .unwrap()
        .with_token_source(source.clone());
    for n in 0..5 {
        let o = send(&client, &message(80 + n), Duration::from_secs(2)).await;
        assert_eq!(o.status(), Some(401), "{o:?}");
        assert!(matches!(o, ProviderOutcome::Permanent { .. }), "{o:?}");
    }
    assert_eq!(source.reads.load(std::sync::atomic::Ordering::Relaxed), 5, "one read per 401, never more");
    assert_eq!(double.stats().accepted, 0);

    let double = Double::start(Config { keys: false, ..Config::default() }, 0).await.unwrap();
    double.script((0..5).map(|_| Behaviour { status: Some(403), ..Behaviour::default() }));
    let source = std::sync::Arc::new(Rotated { token: "same".to_owned().into(), ..Rotated::default() });
    let client = HttpProvider::new(&double.url(), &Secret::new("same"), Duration::from_secs(1))
        .unwrap()
        .with_token_source(source.clone());
    for n in 0..5 {
        let o = send(&client, &message(85 + n), Duration::from_secs(2)).await;
        assert_eq!(o, ProviderOutcome::Permanent { status: 403 });
    }
    assert_eq!(source.reads.load(std::sync::atomic::Ordering::Relaxed), 1, "403s read the source once per interval");
}

/// A token source that cannot be read is no verdict on the credentials: the refusal comes back
/// transient (retried with backoff), never as a permanent answer that would pause the fleet.
#[tokio::test]
async fn a_401_with_an_unreadable_token_source_is_transient() {
    #[derive(Debug)]
    struct Broken;
    impl punctual_core::secret::TokenSource for Broken {
        fn fetch(
            &self,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Secret, punctual_core::ports::BoxError>> + Send + '_>,
        > {
            Box::pin(async { Err("secrets manager throttled".into()) })
        }
    }
    let double = Double::start(Config { token: Some("right".into()), ..Config::default() }, 0).await.unwrap();
    let client = HttpProvider::new(&double.url(), &Secret::new("old"), Duration::from_secs(1))
        .unwrap()
        .with_token_source(std::sync::Arc::new(Broken));
    let o = send(&client, &message(90), Duration::from_secs(2)).await;
    assert_eq!(o, ProviderOutcome::Transient { status: Some(401), retry_after: None });
}

// ---- vendor dialects: rate-limit headers, auth schemes, keys, body shapes (#18) ------------

async fn dialect(rate_headers: punctual_provider_double::RateHeaders) -> (Double, HttpProvider) {
    let config = Config { quota: 1.0, burst: 2.0, rate_headers, ..Config::default() };
    let double = Double::start(config, 0).await.unwrap();
    let client = HttpProvider::new(&double.url(), &Secret::new("x"), Duration::from_secs(1)).unwrap();
    (double, client)
}

/// Every dialect: the 2xx answers carry the remaining budget (so the limiter can slow before a
/// 429), and the 429 past the bucket says when to come back without any `Retry-After`.
#[tokio::test]
async fn every_rate_limit_dialect_gives_the_budget_and_the_wait() {
    use punctual_core::provider::RateBudget;
    use punctual_provider_double::RateHeaders as H;
    for form in [H::Ietf, H::IetfSplit, H::XDelta, H::XEpoch] {
        let (_double, client) = dialect(form).await;
        let first = send(&client, &message(300), Duration::from_secs(2)).await;
        let ProviderOutcome::Accepted { budget: Some(RateBudget { remaining: 1, reset }), .. } = first else {
            panic!("{form:?}: {first:?}");
        };
        assert!(reset <= Duration::from_secs(2), "{form:?}: {reset:?}");
        let second = send(&client, &message(301), Duration::from_secs(2)).await;
        assert!(
            matches!(second, ProviderOutcome::Accepted { budget: Some(RateBudget { remaining: 0, .. }), .. }),
            "{form:?}: {second:?}"
        );
        match send(&client, &message(302), Duration::from_secs(2)).await {
            ProviderOutcome::Transient { status: Some(429), retry_after: Some(ra) } => {
                let wait = ra.delay_from(Utc::now());
                assert!(wait >= Duration::from_millis(1) && wait <= Duration::from_secs(2), "{form:?}: {wait:?}");
            }
            other => panic!("{form:?}: {other:?}"),
        }
    }
    // The plain dialect: Retry-After on the 429, no budget on a 2xx.
    let (_double, client) = dialect(H::RetryAfter).await;
    assert!(matches!(
        send(&client, &message(303), Duration::from_secs(2)).await,
        ProviderOutcome::Accepted { budget: None, .. }
    ));
}

/// An epoch reset read as a delta would be a 56-year wait: `auto` tells them apart, and a
/// configured form is obeyed.
#[tokio::test]
async fn x_ratelimit_reset_is_read_as_configured() {
    use punctual_core::provider::ResetForm;
    use punctual_provider::VendorProfile;
    let double = Double::start(Config::default(), 0).await.unwrap();
    let epoch = (Utc::now().timestamp() + 30).to_string();
    let script = |reset: &str| Behaviour {
        status: Some(429),
        headers: vec![("x-ratelimit-remaining".into(), "0".into()), ("x-ratelimit-reset".into(), reset.into())],
        ..Behaviour::default()
    };
    for (form, value, lo, hi) in
        [(ResetForm::Auto, epoch.as_str(), 25, 31), (ResetForm::Auto, "9", 9, 9), (ResetForm::Delta, "9", 9, 9)]
    {
        let vendor = VendorProfile { reset: form, ..VendorProfile::default() };
        let client = HttpProvider::new(&double.url(), &Secret::new("x"), Duration::from_secs(1))
            .unwrap()
            .with_vendor(vendor, &Secret::new("x"))
            .unwrap();
        double.script([script(value)]);
        let ProviderOutcome::Transient { status: Some(429), retry_after: Some(ra) } =
            send(&client, &message(310), Duration::from_secs(2)).await
        else {
            panic!("{form:?} {value}");
        };
        let wait = ra.delay_from(Utc::now()).as_secs();
        assert!((lo..=hi).contains(&wait), "{form:?} {value}: {wait}");
    }
}

/// A vendor with its own dialect: an API-key header, no idempotency keys, the receipt and an
/// error code elsewhere in the body; a "rate_limited" code on a 400 is a throttle, not a
/// permanent refusal.
#[tokio::test]
async fn a_vendor_profile_changes_auth_keys_receipt_and_error_codes() {
    use punctual_provider::VendorProfile;
    let token = "vendor-key-not-a-secret";
    let double =
        Double::start(Config { token: Some(token.into()), keys: false, ..Config::default() }, 0).await.unwrap();
    let vendor = VendorProfile::parse(
        Some("header:X-Api-Key"),
        Some("none"),
        Some("/idempotency_key"),
        Some("/error/code"),
        Some("rate_limited, slow_down"),
        punctual_core::provider::ResetForm::Auto,
    )
    .unwrap();
    let client = HttpProvider::new(&double.url(), &Secret::new(token), Duration::from_secs(1))
        .unwrap()
        .with_vendor(vendor, &Secret::new(token))
        .unwrap();
    assert!(!client.profile().honours_keys, "no key header: the profile says so");
    let accepted = send(&client, &message(320), Duration::from_secs(2)).await;
    // No key was sent: the double's body echoes `idempotency_key: null`, so no receipt there.
    assert!(matches!(accepted, ProviderOutcome::Accepted { status: 202, receipt: None, .. }), "{accepted:?}");
    assert_eq!(double.stats().unauthorized, 0, "the X-Api-Key header carried the token");
    double.script([Behaviour {
        status: Some(400),
        body: Some(r#"{"error":{"code":"rate_limited","message":"slow down"}}"#.into()),
        ..Behaviour::default()
    }]);
    let throttled = send(&client, &message(321), Duration::from_secs(2)).await;
    assert_eq!(throttled, ProviderOutcome::Transient { status: Some(429), retry_after: None });
    double.script([Behaviour {
        status: Some(400),
        body: Some(r#"{"error":{"code":"bad_address"}}"#.into()),
        ..Behaviour::default()
    }]);
    assert_eq!(send(&client, &message(322), Duration::from_secs(2)).await, ProviderOutcome::Permanent { status: 400 });
    // Without keys, a repeat is a second effect: what the sender's profile check is for.
    send(&client, &message(320), Duration::from_secs(2)).await;
    let s = double.stats();
    assert_eq!((s.accepted, s.duplicate_effects), (2, 0), "no key sent: the double cannot even tell; {s:?}");
    for bad in [("header:", None), ("basic", None), ("bearer", Some("no/pointer"))] {
        assert!(VendorProfile::parse(Some(bad.0), None, bad.1, None, None, Default::default()).is_err(), "{bad:?}");
    }
}

// ---- edges ----------------------------------------------------------------------------------

/// A 401 is confirmed only by a read of the source made after the refused call went out.
/// A 403 makes the client read the source (the token in use: the 403 stands); the secret then
/// rotates, and the next call's 401 comes within the 10 s interval. Taking that earlier read as
/// confirmation would call the credentials bad — the sender pauses the fleet on it — while the
/// source holds a new token: the client must read it again and repeat the call with it.
#[tokio::test]
async fn a_401_just_after_a_read_is_confirmed_only_by_a_fresh_read() {
    let config = Config { keys: false, ..Config::default() };
    let double = Double::start(config, 0).await.unwrap();
    // The double answers the first request 403 (about the request) and the second 401 (the
    // old token, revoked by the rotation); the third is accepted.
    double.script([
        Behaviour { status: Some(403), ..Behaviour::default() },
        Behaviour { status: Some(401), ..Behaviour::default() },
    ]);
    let source = std::sync::Arc::new(Rotated { token: "old-token".to_owned().into(), ..Rotated::default() });
    let client = HttpProvider::new(&double.url(), &Secret::new("old-token"), Duration::from_secs(1))
        .unwrap()
        .with_token_source(source.clone());
    let first = send(&client, &message(100), Duration::from_secs(5)).await;
    assert_eq!(first, ProviderOutcome::Permanent { status: 403 }, "the source holds the same token: it stands");
    assert_eq!(source.reads.load(std::sync::atomic::Ordering::Relaxed), 1);
    // The secret rotates.
    *source.token.lock().unwrap() = "new-token".to_owned();
    let second = send(&client, &message(101), Duration::from_secs(5)).await;
    assert!(matches!(second, ProviderOutcome::Accepted { .. }), "a 401 confirmed by a read from before it: {second:?}");
    assert_eq!(source.reads.load(std::sync::atomic::Ordering::Relaxed), 2, "the 401 read the source again");
}

#[tokio::test]
async fn the_renewals_template_variables_travel_in_the_body_and_nowhere_else() {
    let (double, client) = setup().await;
    let m = message(40);
    let mut fields = serde_json::Map::new();
    fields.insert("plan".into(), "pro".into());
    fields.insert("amount".into(), "49.00 EUR".into());
    let data = punctual_core::renewal::TemplateData::from_object(&fields).unwrap();
    let req = ProviderRequest {
        message: &m,
        recipient_ref: Some("r"),
        channel: Some("email"),
        data: Some(&data),
        timeout: Duration::from_secs(2),
    };
    assert!(matches!(client.send(&req).await.unwrap(), ProviderOutcome::Accepted { .. }));
    let body = double.recent_bodies().pop().unwrap();
    assert_eq!(body["data"], serde_json::json!({"plan": "pro", "amount": "49.00 EUR"}));
    assert_eq!(body["reminder_id"], m.reminder_id.as_str());
    assert!(!format!("{req:?}").contains("49.00"), "the request's Debug shows the data: {req:?}");
    // Without data the body has no `data` key.
    send(&client, &message(41), Duration::from_secs(2)).await;
    assert!(double.recent_bodies().pop().unwrap().get("data").is_none());
}
