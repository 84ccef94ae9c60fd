//! One `SdkConfig` per process, built at cold start and shared by every client.

use aws_config::{BehaviorVersion, SdkConfig};

/// Loads the SDK configuration from the environment (region, credentials, endpoint overrides).
pub async fn load() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest()).load().await
}

/// SDK configuration for an emulator at `endpoint`: the environment's region (else
/// `us-east-1`) and, on loopback, always the same dummy credentials, whatever the user exported — DynamoDB
/// Local keeps a database per access key unless started with `-sharedDb`, and refuses key ids
/// that are not letters and digits (`operator-a`), so a `local up` and a `local drain` run from
/// shells with different credentials must still meet the same tables. Emulators accept any key.
pub async fn for_endpoint(endpoint: &str) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).endpoint_url(endpoint).credentials_provider(
        aws_sdk_sqs::config::Credentials::new(LOCAL_KEY, LOCAL_KEY, None, None, "punctual-local"),
    );
    if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
        loader = loader.region(aws_config::Region::new("us-east-1"));
    }
    loader.load().await
}

/// The dummy access key (and secret) punctual uses with a local emulator: letters and digits,
/// as DynamoDB Local requires.
pub const LOCAL_KEY: &str = "punctuallocal";

/// True for an endpoint on this machine (`localhost`, `127.x`, `[::1]`): an emulator.
pub fn is_loopback(endpoint: &str) -> bool {
    let host = endpoint.split("://").nth(1).unwrap_or(endpoint);
    let host = host.split('/').next().unwrap_or_default();
    let host = if host.starts_with('[') {
        host.split(']').next().unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    host == "localhost" || host.starts_with("127.") || host == "[::1"
}

/// A DynamoDB client on `config`, at `endpoint` when DynamoDB runs apart from the rest
/// (DynamoDB Local beside moto). The override must be set on the service config: set on
/// `SdkConfig` alone, the client re-reads `AWS_ENDPOINT_URL` and goes elsewhere.
pub fn dynamodb_client(config: &SdkConfig, endpoint: Option<&str>) -> aws_sdk_dynamodb::Client {
    match endpoint {
        Some(url) => aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(config).endpoint_url(url).build(),
        ),
        None => aws_sdk_dynamodb::Client::new(config),
    }
}
