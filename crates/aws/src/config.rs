//! One `SdkConfig` per process, built at cold start and shared by every client.

use aws_config::{BehaviorVersion, SdkConfig};

/// Loads the SDK configuration from the environment (region, credentials, endpoint overrides).
pub async fn load() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest()).load().await
}

/// SDK configuration for a local emulator at `endpoint`: the environment's region and
/// credentials when set, else `us-east-1` and dummy keys (an emulator accepts any).
pub async fn for_endpoint(endpoint: &str) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).endpoint_url(endpoint);
    if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
        loader = loader.region(aws_config::Region::new("us-east-1"));
    }
    if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
        loader = loader.credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing",
            "testing",
            None,
            None,
            "punctual-local",
        ));
    }
    loader.load().await
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
