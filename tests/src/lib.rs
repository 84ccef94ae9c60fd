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

/// A DynamoDB client for AWS's own DynamoDB Local, when `make test` started it
/// (`PUNCTUAL_DYNAMODB_LOCAL_URL`). `None` when it is not running; with
/// `PUNCTUAL_REQUIRE_DYNAMODB_LOCAL=1` (set by `make test` whenever Java is present) its
/// absence fails the test instead of passing quietly.
///
/// The endpoint is set on the DynamoDB service config: set on `SdkConfig` alone, the client
/// re-reads `AWS_ENDPOINT_URL` and the "DynamoDB Local" suites silently ran on moto. Suites
/// prove where they run with [`assert_on_dynamodb_local`].
#[allow(clippy::panic)]
pub async fn dynamodb_local_client() -> Option<aws_sdk_dynamodb::Client> {
    let Ok(url) = std::env::var("PUNCTUAL_DYNAMODB_LOCAL_URL") else {
        if std::env::var("PUNCTUAL_REQUIRE_DYNAMODB_LOCAL").is_ok_and(|v| v == "1") {
            panic!("PUNCTUAL_REQUIRE_DYNAMODB_LOCAL=1 but PUNCTUAL_DYNAMODB_LOCAL_URL is not set");
        }
        eprintln!("DynamoDB Local not running (no PUNCTUAL_DYNAMODB_LOCAL_URL): reference run skipped");
        return None;
    };
    Some(punctual_aws::config::dynamodb_client(&sdk_config().await, Some(&url)))
}

/// Every table name the DynamoDB endpoint `url` lists (ListTables, all pages).
///
/// # Panics
/// When ListTables fails (test support).
#[allow(clippy::panic)]
pub async fn list_tables_at(url: &str) -> Vec<String> {
    let client = punctual_aws::config::dynamodb_client(&sdk_config().await, Some(url));
    let mut names = Vec::new();
    let mut start: Option<String> = None;
    loop {
        let page = client
            .list_tables()
            .set_exclusive_start_table_name(start.take())
            .send()
            .await
            .unwrap_or_else(|e| panic!("ListTables at {url}: {e:?}"));
        names.extend(page.table_names.unwrap_or_default());
        match page.last_evaluated_table_name {
            Some(last) => start = Some(last),
            None => return names,
        }
    }
}

/// Proves that `table`, just created through a client the test believes talks to DynamoDB
/// Local, lives in DynamoDB Local (ListTables on `PUNCTUAL_DYNAMODB_LOCAL_URL` lists it) and
/// not in the other emulator (ListTables on `AWS_ENDPOINT_URL` does not): a "DynamoDB Local"
/// suite that silently ran on moto fails here.
///
/// # Panics
/// When the table is not where it must be, or `PUNCTUAL_DYNAMODB_LOCAL_URL` is unset.
#[allow(clippy::panic)]
pub async fn assert_on_dynamodb_local(table: &str) {
    let Ok(local) = std::env::var("PUNCTUAL_DYNAMODB_LOCAL_URL") else {
        panic!("PUNCTUAL_DYNAMODB_LOCAL_URL is not set");
    };
    let other = endpoint();
    assert!(
        list_tables_at(&local).await.iter().any(|t| t == table),
        "table {table} is not listed by DynamoDB Local at {local}: the suite did not run on DynamoDB Local"
    );
    assert!(
        !list_tables_at(&other).await.iter().any(|t| t == table),
        "table {table} is listed by the emulator at {other} (AWS_ENDPOINT_URL): the DynamoDB Local suite ran there"
    );
}
