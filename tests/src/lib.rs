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

/// A DynamoDB client for dynalite, when `make test` started it (`PUNCTUAL_DYNALITE_URL`):
/// the engine whose concurrent conditional writes are isolated (it locks per key; moto loses
/// acknowledged writes under contention), for the suites that race writers. `None` when it is
/// not running; with `PUNCTUAL_REQUIRE_DYNALITE=1` (set by `make test`) its absence fails the
/// test instead of passing quietly.
///
/// The endpoint is set on the DynamoDB service config: set on `SdkConfig` alone, the client
/// re-reads `AWS_ENDPOINT_URL` and the suite silently runs on moto. Suites prove where they run
/// with [`assert_on_dynalite`].
#[allow(clippy::panic)]
pub async fn dynalite_client() -> Option<aws_sdk_dynamodb::Client> {
    let Ok(url) = std::env::var("PUNCTUAL_DYNALITE_URL") else {
        if std::env::var("PUNCTUAL_REQUIRE_DYNALITE").is_ok_and(|v| v == "1") {
            panic!("PUNCTUAL_REQUIRE_DYNALITE=1 but PUNCTUAL_DYNALITE_URL is not set");
        }
        eprintln!("dynalite not running (no PUNCTUAL_DYNALITE_URL): the isolated-engine run is skipped");
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

/// Proves that `table`, just created through a client the test believes talks to dynalite,
/// lives at `PUNCTUAL_DYNALITE_URL` (ListTables there lists it) and not in the other emulator
/// (ListTables on `AWS_ENDPOINT_URL` does not), and that the engine there behaves as dynalite
/// does and DynamoDB and moto do not: a refused conditional update carries no `Item` although
/// `ReturnValuesOnConditionCheckFailure = ALL_OLD` asked for it. A suite that silently ran
/// elsewhere fails here.
///
/// # Panics
/// When the table is not where it must be, the engine is not dynalite, or
/// `PUNCTUAL_DYNALITE_URL` is unset.
#[allow(clippy::panic)]
pub async fn assert_on_dynalite(table: &str) {
    use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
    let Ok(url) = std::env::var("PUNCTUAL_DYNALITE_URL") else {
        panic!("PUNCTUAL_DYNALITE_URL is not set");
    };
    let other = endpoint();
    assert!(
        list_tables_at(&url).await.iter().any(|t| t == table),
        "table {table} is not listed by dynalite at {url}: the suite did not run on dynalite"
    );
    assert!(
        !list_tables_at(&other).await.iter().any(|t| t == table),
        "table {table} is listed by the emulator at {other} (AWS_ENDPOINT_URL): the dynalite suite ran there"
    );
    let client = punctual_aws::config::dynamodb_client(&sdk_config().await, Some(&url));
    let key = AttributeValue::S(unique("engine-fingerprint"));
    let schema = client.describe_table().table_name(table).send().await.unwrap_or_else(|e| panic!("{e:?}"));
    let keys = schema.table.and_then(|t| t.key_schema).unwrap_or_default();
    assert_eq!(keys.len(), 1, "the fingerprint writes to a table keyed by a partition key alone");
    let key_name = keys[0].attribute_name.clone();
    client.put_item().table_name(table).item(&key_name, key.clone()).send().await.unwrap_or_else(|e| panic!("{e:?}"));
    let refused = client
        .update_item()
        .table_name(table)
        .key(&key_name, key)
        .update_expression("SET fingerprint = :v")
        .condition_expression("attribute_not_exists(#k)")
        .expression_attribute_names("#k", &key_name)
        .expression_attribute_values(":v", AttributeValue::N("1".into()))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    let Err(refused) = refused else { panic!("the fingerprint's condition must fail at {url}") };
    let item = refused.as_service_error().and_then(|e| match e {
        aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => {
            Some(c.item().is_some())
        }
        _ => None,
    });
    assert_eq!(item, Some(false), "the engine at {url} returned the refused item (ALL_OLD): not dynalite");
}

/// Runs `fut` to completion on a thread of its own with a 64 MB stack (a current-thread
/// runtime): the contract suites await hundreds of SDK calls inline, and a debug build's state
/// machines for them outgrow a test thread's 2 MB.
///
/// # Panics
/// When the thread or its runtime cannot start, or `fut` panics (test support).
#[allow(clippy::panic)]
pub fn on_big_stack<F>(fut: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            let rt =
                tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
            rt.block_on(fut)
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// What a DynamoDB client sends, by operation (`PutItem`, `Query`…), in order — and, when made
/// with [`Operations::refusing`], a table that breaks on cue: an operation the rule refuses
/// fails before it leaves. Interpose it with [`Operations::client`].
#[derive(Clone, Default)]
pub struct Operations {
    sent: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    #[allow(clippy::type_complexity)]
    refuse: Option<std::sync::Arc<dyn Fn(&str, usize) -> bool + Send + Sync>>,
}

impl std::fmt::Debug for Operations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operations").field("sent", &self.sent()).finish_non_exhaustive()
    }
}

impl Operations {
    /// Refuses an operation when `rule(name, n)` says so, `n` being how many of that name were
    /// sent before it.
    pub fn refusing(rule: impl Fn(&str, usize) -> bool + Send + Sync + 'static) -> Self {
        Self { refuse: Some(std::sync::Arc::new(rule)), ..Self::default() }
    }

    /// The operations sent so far.
    pub fn sent(&self) -> Vec<String> {
        self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Forgets what was sent.
    pub fn clear(&self) {
        self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }

    /// A client built from `builder` that goes through this.
    pub fn client(&self, builder: aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::from_conf(builder.interceptor(self.clone()).build())
    }
}

impl aws_sdk_dynamodb::config::Intercept for Operations {
    fn name(&self) -> &'static str {
        "operations"
    }

    fn read_before_transmit(
        &self,
        ctx: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let target = ctx.request().headers().get("x-amz-target").unwrap_or("?");
        let name = target.rsplit('.').next().unwrap_or_default().to_owned();
        let mut sent = self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = sent.iter().filter(|s| **s == name).count();
        sent.push(name.clone());
        match &self.refuse {
            Some(rule) if rule(&name, before) => Err(format!("injected: {name} refused").into()),
            _ => Ok(()),
        }
    }
}
