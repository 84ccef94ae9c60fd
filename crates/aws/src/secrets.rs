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

/// Where the token under a prefix comes from: the secret wins over a plaintext variable.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// `{prefix}PROVIDER_TOKEN_SECRET_ARN`: read from Secrets Manager, again after a 401/403.
    Secret(String),
    /// `{prefix}PROVIDER_TOKEN` with no secret named: local use only (it sits in the function's
    /// configuration in plaintext, and cannot rotate under a running instance).
    Plain(String),
}

/// The source `vars` name under `prefix`. Both set: the secret (found by review: a plaintext
/// token left in a stack's environment overrode its secret, and a rotation of the secret then
/// changed nothing).
fn source(prefix: &str, vars: &Vars) -> Option<Source> {
    if let Some(arn) = vars(&under(prefix, "PROVIDER_TOKEN_SECRET_ARN")).filter(|a| !a.is_empty()) {
        return Some(Source::Secret(arn));
    }
    vars(&under(prefix, "PROVIDER_TOKEN")).filter(|t| !t.is_empty()).map(Source::Plain)
}

/// Reads the token under `prefix` (empty: the deployment's own; a declared channel's own token,
/// `CHANNEL_SMS_PROVIDER_TOKEN_SECRET_ARN` or `CHANNEL_SMS_PROVIDER_TOKEN`, never another's),
/// through `vars`: the secret named by `{prefix}PROVIDER_TOKEN_SECRET_ARN`, whose value is the
/// token itself or JSON `{"token": "..."}`; else `{prefix}PROVIDER_TOKEN`, with a warning (a
/// plaintext token is for local runs: docs/configuration.md).
pub async fn provider_token_in(config: &SdkConfig, prefix: &str, vars: &Vars) -> Result<Secret, TokenError> {
    match source(prefix, vars) {
        Some(Source::Secret(arn)) => from_secrets_manager(config, &arn).await,
        Some(Source::Plain(t)) => {
            tracing::warn!(
                variable = %under(prefix, "PROVIDER_TOKEN"),
                "the provider token is a plaintext environment variable: for local runs only; a \
                 deployed stack names a secret (PROVIDER_TOKEN_SECRET_ARN)"
            );
            Ok(Secret::new(t))
        }
        None if prefix.is_empty() => Err(TokenError::NotConfigured),
        None => Err(TokenError::ChannelNotConfigured(prefix.to_owned())),
    }
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
    /// `{prefix}PROVIDER_TOKEN_SECRET_ARN` read through `vars`, when the token comes from it (it
    /// wins over `{prefix}PROVIDER_TOKEN`); `None` for a plaintext token (it cannot rotate under a
    /// running instance).
    pub fn from_vars(config: &SdkConfig, prefix: &str, vars: &Vars) -> Option<Self> {
        match source(prefix, vars)? {
            Source::Secret(arn) => Some(Self { config: config.clone(), arn }),
            Source::Plain(_) => None,
        }
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

#[cfg(test)]
mod tests {
    use super::{Source, Vars, source};

    fn vars(pairs: &[(&str, &str)]) -> Vars {
        let map: std::collections::HashMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        std::sync::Arc::new(move |k: &str| map.get(k).cloned())
    }

    #[test]
    fn the_secret_wins_over_a_plaintext_token() {
        let both = vars(&[("PROVIDER_TOKEN", "plain"), ("PROVIDER_TOKEN_SECRET_ARN", "arn:s")]);
        assert_eq!(source("", &both), Some(Source::Secret("arn:s".into())));
        assert_eq!(source("", &vars(&[("PROVIDER_TOKEN", "plain")])), Some(Source::Plain("plain".into())));
        let empty_arn = vars(&[("PROVIDER_TOKEN", "plain"), ("PROVIDER_TOKEN_SECRET_ARN", "")]);
        assert_eq!(source("", &empty_arn), Some(Source::Plain("plain".into())), "an empty ARN names nothing");
        assert_eq!(source("", &vars(&[("PROVIDER_TOKEN", "")])), None);
        let channel = vars(&[("CHANNEL_SMS_PROVIDER_TOKEN", "p"), ("PROVIDER_TOKEN_SECRET_ARN", "arn:fleet")]);
        assert_eq!(source("CHANNEL_SMS_", &channel), Some(Source::Plain("p".into())), "never another's secret");
    }
}
