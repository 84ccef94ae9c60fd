//! One `SdkConfig` per process, built at cold start and shared by every client.

use aws_config::{BehaviorVersion, SdkConfig};

/// Loads the SDK configuration from the environment (region, credentials, endpoint overrides).
pub async fn load() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest()).load().await
}
