//! Every AWS request a process sends, counted by service, operation and purpose, below the SDK
//! (the HTTP client the `SdkConfig` hands to every client): every attempt counts, retries and
//! refused conditional writes included (AWS bills those; it does not bill a throttled request,
//! which emulators do not make). `punctual run` reports these per reminder, so the simulator's
//! cost model can be checked against the real pipeline (`make fidelity`).
//!
//! The purpose of a DynamoDB request is the kind of item it touches, the prefix of the first
//! `pk` in the request's JSON (`reminder`, `limiter`, `renewal`, `control`, `scheduler`…): the
//! limiter's writes and the ledger's land in the same table. A request naming no `pk` (the
//! recipients table's keys, a Query's first page) is counted under its operation alone.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_config::SdkConfig;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;

/// Requests counted so far, by `service/Operation[/purpose]`.
#[derive(Debug, Clone, Default)]
pub struct RequestCounts(Arc<Mutex<BTreeMap<String, u64>>>);

impl RequestCounts {
    /// A new, empty count.
    pub fn new() -> Self {
        Self::default()
    }

    /// `config` with an HTTP client that counts every request through it here: the one the
    /// config names, else the SDK's default (rustls with aws-lc, as `default-https-client`
    /// builds it; a config loaded from defaults names none and picks it lazily).
    pub fn wrap(&self, config: &SdkConfig) -> SdkConfig {
        let inner = config.http_client().unwrap_or_else(|| {
            aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::AwsLc,
                ))
                .build_https()
        });
        config.to_builder().http_client(Counting { inner, counts: self.clone() }).build()
    }

    /// The counts, by key.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// The total of the keys that start with `prefix`.
    pub fn total(&self, prefix: &str) -> u64 {
        self.snapshot().iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v).sum()
    }

    fn add(&self, key: String) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(key).or_default() += 1;
        }
    }
}

/// What one DynamoDB operation is to the bill.
pub fn is_dynamodb_read(operation: &str) -> bool {
    matches!(operation, "GetItem" | "BatchGetItem" | "Query" | "Scan" | "TransactGetItems")
}

/// The counting key of one request: `dynamodb/UpdateItem/limiter`, `sqs/ReceiveMessage`,
/// `sesv2/POST /v2/email/outbound-emails`.
pub fn classify(target: Option<&str>, method: &str, path: &str, body: Option<&[u8]>) -> String {
    if let Some(target) = target {
        // awsJson protocols: `DynamoDB_20120810.UpdateItem`, `AmazonSQS.ReceiveMessage`,
        // `secretsmanager.GetSecretValue`.
        let (service, operation) = target.split_once('.').unwrap_or((target, ""));
        let service = match service {
            s if s.starts_with("DynamoDB") => "dynamodb",
            "AmazonSQS" => "sqs",
            s => return format!("{}/{operation}", s.to_ascii_lowercase()),
        };
        if service == "dynamodb"
            && let Some(purpose) = body.and_then(item_kind)
        {
            return format!("dynamodb/{operation}/{purpose}");
        }
        return format!("{service}/{operation}");
    }
    // REST protocols (SES v2, Lambda): the service from the path's first segments.
    let service = if path.starts_with("/v2/email") { "sesv2" } else { "rest" };
    let path = path.split('?').next().unwrap_or(path);
    format!("{service}/{method} {path}")
}

/// The prefix of the first `pk` string in a DynamoDB request body (`"pk":{"S":"limiter:…"}`).
fn item_kind(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let at = text.find("\"pk\"")?;
    let rest = &text[at + 4..];
    let value = rest.split_once("\"S\"")?.1.trim_start_matches([':', ' ']);
    let value = value.strip_prefix('"')?;
    let end = value.find(['"', ':'])?;
    Some(value[..end].to_owned())
}

#[derive(Debug)]
struct Counting {
    inner: SharedHttpClient,
    counts: RequestCounts,
}

impl HttpClient for Counting {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        SharedHttpConnector::new(CountingConnector {
            inner: self.inner.http_connector(settings, components),
            counts: self.counts.clone(),
        })
    }
}

#[derive(Debug)]
struct CountingConnector {
    inner: SharedHttpConnector,
    counts: RequestCounts,
}

impl HttpConnector for CountingConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let target = request.headers().get("x-amz-target");
        self.counts.add(classify(target, request.method(), request.uri(), request.body().bytes()));
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamodb_requests_are_counted_by_the_kind_of_item() {
        let body = br#"{"TableName":"t","Key":{"pk":{"S":"limiter:provider"}},"UpdateExpression":"SET"}"#;
        assert_eq!(
            classify(Some("DynamoDB_20120810.UpdateItem"), "POST", "/", Some(body)),
            "dynamodb/UpdateItem/limiter"
        );
        let body = br#"{"TableName":"t","Key":{"pk": {"S": "reminder:rem_1"}}}"#;
        assert_eq!(classify(Some("DynamoDB_20120810.GetItem"), "POST", "/", Some(body)), "dynamodb/GetItem/reminder");
        assert_eq!(
            classify(Some("DynamoDB_20120810.DescribeTable"), "POST", "/", Some(b"{}")),
            "dynamodb/DescribeTable"
        );
    }

    #[test]
    fn other_services_by_target_or_path() {
        assert_eq!(classify(Some("AmazonSQS.ReceiveMessage"), "POST", "/", None), "sqs/ReceiveMessage");
        assert_eq!(classify(Some("secretsmanager.GetSecretValue"), "POST", "/", None), "secretsmanager/GetSecretValue");
        assert_eq!(
            classify(None, "POST", "/v2/email/outbound-emails?x=1", None),
            "sesv2/POST /v2/email/outbound-emails"
        );
    }

    #[test]
    fn reads_are_the_read_operations() {
        assert!(is_dynamodb_read("BatchGetItem") && is_dynamodb_read("Query"));
        assert!(!is_dynamodb_read("UpdateItem") && !is_dynamodb_read("PutItem"));
    }
}
