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
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).endpoint_url(endpoint);
    if is_loopback(endpoint) {
        loader = loader.credentials_provider(aws_sdk_sqs::config::Credentials::new(
            LOCAL_KEY,
            LOCAL_KEY,
            None,
            None,
            "punctual-local",
        ));
    }
    if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
        loader = loader.region(aws_config::Region::new("us-east-1"));
    }
    loader.load().await
}

/// The dummy access key (and secret) punctual uses with a local emulator: letters and digits
/// only, which every local engine accepts.
pub const LOCAL_KEY: &str = "punctuallocal";

/// True for an endpoint on this machine (`localhost`, a loopback IPv4 or IPv6 address): an
/// emulator. Anything else (an https VPC endpoint, a remote LocalStack) keeps the user's own
/// credentials.
pub fn is_loopback(endpoint: &str) -> bool {
    let authority = endpoint.split("://").nth(1).unwrap_or(endpoint);
    let authority = authority.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A DynamoDB client on `config`, at `endpoint` when DynamoDB runs apart from the rest
/// (dynalite beside moto). The override must be set on the service config: set on
/// `SdkConfig` alone, the client re-reads `AWS_ENDPOINT_URL` and goes elsewhere.
pub fn dynamodb_client(config: &SdkConfig, endpoint: Option<&str>) -> aws_sdk_dynamodb::Client {
    match endpoint {
        Some(url) => aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(config).endpoint_url(url).build(),
        ),
        None => aws_sdk_dynamodb::Client::new(config),
    }
}

#[cfg(test)]
mod tests {
    use super::is_loopback;

    #[test]
    fn only_endpoints_on_this_machine_count_as_loopback() {
        for yes in [
            "http://127.0.0.1:4566",
            "http://localhost:4566/",
            "http://LOCALHOST",
            "http://[::1]:4566",
            "http://u@127.0.0.2:9",
        ] {
            assert!(is_loopback(yes), "{yes}");
        }
        for no in [
            "https://sqs.eu-west-1.amazonaws.com",
            "http://127.evil.example:80",
            "http://10.0.0.1:4566",
            "http://[2001:db8::1]:80",
        ] {
            assert!(!is_loopback(no), "{no}");
        }
    }
}
