//! Helpers for punctual's integration tests: reach the emulator, name things uniquely.
//!
//! Tests run against whatever `AWS_ENDPOINT_URL` names (moto server started by `make test`,
//! or a LocalStack the user runs). They refuse to run without one, and refuse a non-loopback
//! endpoint, so a stray credential can never point a test at a real AWS account.

pub mod stack;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_config::SdkConfig;

/// The endpoint the tests use, checked to be on loopback.
///
/// # Panics
/// When `AWS_ENDPOINT_URL` is unset or not a loopback address: integration tests must not
/// silently pass without an emulator, and must never reach a real account.
#[allow(clippy::panic)]
pub fn endpoint() -> String {
    let Ok(url) = std::env::var("AWS_ENDPOINT_URL") else {
        panic!("AWS_ENDPOINT_URL is not set: run `make test` (it starts moto server), or point it at LocalStack");
    };
    let host = url.split("://").nth(1).unwrap_or(&url).split(['/', ':']).next().unwrap_or_default();
    let loopback = host == "localhost" || host.starts_with("127.") || host == "[";
    assert!(
        loopback,
        "AWS_ENDPOINT_URL={url} is not a loopback address; integration tests only run against a local emulator"
    );
    url
}

/// The SDK configuration for the emulator, loaded through the same chain production uses.
pub async fn sdk_config() -> SdkConfig {
    endpoint();
    punctual_aws::config::load().await
}

/// A name no other test (or earlier run against a long-lived emulator) has used.
pub fn unique(prefix: &str) -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    format!("{prefix}-{}-{nanos:x}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

/// The SDK configuration for AWS's own DynamoDB Local, when `make test` started it
/// (`PUNCTUAL_DYNAMODB_LOCAL_URL`). `None` when it is not running; with
/// `PUNCTUAL_REQUIRE_DYNAMODB_LOCAL=1` (set by `make test` whenever Java is present) its
/// absence fails the test instead of passing quietly.
#[allow(clippy::panic)]
pub async fn dynamodb_local_config() -> Option<SdkConfig> {
    let Ok(url) = std::env::var("PUNCTUAL_DYNAMODB_LOCAL_URL") else {
        if std::env::var("PUNCTUAL_REQUIRE_DYNAMODB_LOCAL").is_ok_and(|v| v == "1") {
            panic!("PUNCTUAL_REQUIRE_DYNAMODB_LOCAL=1 but PUNCTUAL_DYNAMODB_LOCAL_URL is not set");
        }
        eprintln!("DynamoDB Local not running (no PUNCTUAL_DYNAMODB_LOCAL_URL): reference run skipped");
        return None;
    };
    let base = sdk_config().await;
    Some(base.into_builder().endpoint_url(url).build())
}
