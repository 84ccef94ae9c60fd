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

/// Where the token's variables are read: the process environment ([`process_vars`]), or a
/// test's own map (a test cannot set the process environment).
pub type Vars = std::sync::Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The variable `name` under `prefix` (`CHANNEL_SMS_` + `PROVIDER_TOKEN`; an empty prefix is
/// the deployment's own). tools/check_config_docs.py reads `under(prefix, "NAME")` as a read of
/// `NAME`.
fn under(prefix: &str, name: &str) -> String {
    format!("{prefix}{name}")
}

/// The process environment as [`Vars`].
pub fn process_vars() -> Vars {
    std::sync::Arc::new(|name: &str| std::env::var(name).ok())
}

/// Reads the token under `prefix` (empty: the deployment's own; a declared channel's own token,
/// `CHANNEL_SMS_PROVIDER_TOKEN` or `CHANNEL_SMS_PROVIDER_TOKEN_SECRET_ARN`, never another's),
/// through `vars`: `{prefix}PROVIDER_TOKEN` wins; else the secret named by
/// `{prefix}PROVIDER_TOKEN_SECRET_ARN`, whose value is the token itself or JSON `{"token": "..."}`.
pub async fn provider_token_in(config: &SdkConfig, prefix: &str, vars: &Vars) -> Result<Secret, TokenError> {
    if let Some(t) = vars(&under(prefix, "PROVIDER_TOKEN")).filter(|t| !t.is_empty()) {
        return Ok(Secret::new(t));
    }
    let Some(arn) = vars(&under(prefix, "PROVIDER_TOKEN_SECRET_ARN")) else {
        return Err(if prefix.is_empty() {
            TokenError::NotConfigured
        } else {
            TokenError::ChannelNotConfigured(prefix.to_owned())
        });
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
    /// `{prefix}PROVIDER_TOKEN_SECRET_ARN` read through `vars`, when the token came from it;
    /// `None` when `{prefix}PROVIDER_TOKEN` is set (an environment token cannot rotate under a
    /// running instance).
    pub fn from_vars(config: &SdkConfig, prefix: &str, vars: &Vars) -> Option<Self> {
        if vars(&under(prefix, "PROVIDER_TOKEN")).is_some_and(|t| !t.is_empty()) {
            return None;
        }
        let arn = vars(&under(prefix, "PROVIDER_TOKEN_SECRET_ARN")).filter(|a| !a.is_empty())?;
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
