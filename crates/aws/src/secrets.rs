//! The provider token, read once at cold start: from `PROVIDER_TOKEN`, or from Secrets
//! Manager when `PROVIDER_TOKEN_SECRET_ARN` is set. The value is a [`Secret`] from the moment
//! it is read, so it never prints.

use aws_config::SdkConfig;
use punctual_core::ports::BoxError;
use punctual_core::secret::Secret;

/// Why the token could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Neither variable is set.
    #[error("set PROVIDER_TOKEN, or PROVIDER_TOKEN_SECRET_ARN to a Secrets Manager secret holding the token")]
    NotConfigured,
    /// A declared channel's token is not configured (its prefix, `CHANNEL_SMS_`).
    #[error(
        "set {0}PROVIDER_TOKEN, or {0}PROVIDER_TOKEN_SECRET_ARN to a Secrets Manager secret holding the channel's token"
    )]
    ChannelNotConfigured(String),
    /// The secret has no string value.
    #[error("secret {arn} has no SecretString")]
    NotAString {
        /// The secret.
        arn: String,
    },
    /// The secret is JSON without a `token` string field.
    #[error("secret {arn} is a JSON object without a string field `token`")]
    NoTokenField {
        /// The secret.
        arn: String,
    },
    /// Secrets Manager failed.
    #[error("could not read secret {arn} from Secrets Manager")]
    SecretsManager {
        /// The secret.
        arn: String,
        /// Why.
        #[source]
        source: BoxError,
    },
}

/// Reads the token: `PROVIDER_TOKEN` wins; else the secret named by
/// `PROVIDER_TOKEN_SECRET_ARN`, whose value is the token itself or JSON `{"token": "..."}`.
pub async fn provider_token(config: &SdkConfig) -> Result<Secret, TokenError> {
    if let Ok(t) = std::env::var("PROVIDER_TOKEN")
        && !t.is_empty()
    {
        return Ok(Secret::new(t));
    }
    let Ok(arn) = std::env::var("PROVIDER_TOKEN_SECRET_ARN") else {
        return Err(TokenError::NotConfigured);
    };
    from_secrets_manager(config, &arn).await
}

/// [`provider_token`] from the variables under `prefix`: a declared channel's own token
/// (`CHANNEL_SMS_PROVIDER_TOKEN`, `CHANNEL_SMS_PROVIDER_TOKEN_SECRET_ARN`), never another's.
pub async fn provider_token_under(config: &SdkConfig, prefix: &str) -> Result<Secret, TokenError> {
    if prefix.is_empty() {
        return provider_token(config).await;
    }
    if let Ok(t) = std::env::var(format!("{prefix}PROVIDER_TOKEN"))
        && !t.is_empty()
    {
        return Ok(Secret::new(t));
    }
    let Ok(arn) = std::env::var(format!("{prefix}PROVIDER_TOKEN_SECRET_ARN")) else {
        return Err(TokenError::ChannelNotConfigured(prefix.to_owned()));
    };
    from_secrets_manager(config, &arn).await
}

/// The token's secret in Secrets Manager as a [`TokenSource`]: the provider client reads it
/// again after a 401/403 (a rotation): after a 403 at most once per instance per interval,
/// after a 401 unless a read begun after that call already judged the token (a 401 pauses the
/// fleet once confirmed, so it is never confirmed by an older read).
#[derive(Debug, Clone)]
pub struct SecretsManagerToken {
    config: SdkConfig,
    arn: String,
}

impl SecretsManagerToken {
    /// `PROVIDER_TOKEN_SECRET_ARN` when the token came from it; `None` when `PROVIDER_TOKEN` is
    /// set (an environment token cannot rotate under a running instance).
    pub fn from_env(config: &SdkConfig) -> Option<Self> {
        if std::env::var("PROVIDER_TOKEN").is_ok_and(|t| !t.is_empty()) {
            return None;
        }
        let arn = std::env::var("PROVIDER_TOKEN_SECRET_ARN").ok().filter(|a| !a.is_empty())?;
        Some(Self { config: config.clone(), arn })
    }

    /// [`Self::from_env`] from the variables under `prefix` (a declared channel's own).
    pub fn from_env_under(config: &SdkConfig, prefix: &str) -> Option<Self> {
        if prefix.is_empty() {
            return Self::from_env(config);
        }
        if std::env::var(format!("{prefix}PROVIDER_TOKEN")).is_ok_and(|t| !t.is_empty()) {
            return None;
        }
        let arn = std::env::var(format!("{prefix}PROVIDER_TOKEN_SECRET_ARN")).ok().filter(|a| !a.is_empty())?;
        Some(Self { config: config.clone(), arn })
    }

    /// The secret `arn`.
    pub fn new(config: &SdkConfig, arn: impl Into<String>) -> Self {
        Self { config: config.clone(), arn: arn.into() }
    }
}

impl punctual_core::secret::TokenSource for SecretsManagerToken {
    fn fetch(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Secret, punctual_core::ports::BoxError>> + Send + '_>>
    {
        Box::pin(async move { from_secrets_manager(&self.config, &self.arn).await.map_err(Into::into) })
    }
}

/// Reads the token from one Secrets Manager secret.
pub async fn from_secrets_manager(config: &SdkConfig, arn: &str) -> Result<Secret, TokenError> {
    let client = aws_sdk_secretsmanager::Client::new(config);
    let out = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| TokenError::SecretsManager { arn: arn.to_owned(), source: Box::new(e) })?;
    let value = out.secret_string().ok_or_else(|| TokenError::NotAString { arn: arn.to_owned() })?;
    if value.trim_start().starts_with('{') {
        let v: serde_json::Value =
            serde_json::from_str(value).map_err(|_| TokenError::NoTokenField { arn: arn.to_owned() })?;
        return v
            .get("token")
            .and_then(|t| t.as_str())
            .map(Secret::new)
            .ok_or_else(|| TokenError::NoTokenField { arn: arn.to_owned() });
    }
    Ok(Secret::new(value))
}
