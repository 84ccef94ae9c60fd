//! The ingest function's environment (documented in docs/configuration.md#ingest).

use punctual_lambda::config::{ConfigError, Env};

/// Everything the ingest function reads from its environment.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// `RENEWALS_TABLE`.
    pub renewals_table: String,
    /// `COMMANDS_DLQ_URL`: where a command that cannot be applied goes, with its reason.
    pub commands_dlq_url: String,
    /// `RECIPIENTS_TABLE` (unset: a command carrying an `email` is refused).
    pub recipients_table: Option<String>,
    /// `CHANNELS`: a command for a channel the deployment does not declare is refused (empty:
    /// any channel).
    pub channels: Vec<String>,
    /// `METRICS_NAMESPACE` (default `punctual`).
    pub metrics_namespace: String,
}

impl IngestConfig {
    /// Reads and validates the configuration.
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        Ok(Self {
            renewals_table: env.required("RENEWALS_TABLE")?,
            commands_dlq_url: env.required("COMMANDS_DLQ_URL")?,
            recipients_table: env.optional("RECIPIENTS_TABLE"),
            channels: punctual_lambda::config::channel_names(env)?,
            metrics_namespace: env.optional("METRICS_NAMESPACE").unwrap_or_else(|| "punctual".to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::HashMap;

    fn config(pairs: &[(&str, &str)]) -> Result<IngestConfig, ConfigError> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        IngestConfig::from_env(&Env::new(move |k: &str| map.get(k).cloned()))
    }

    #[test]
    fn the_tables_and_the_dlq_are_required_and_named() {
        let e = config(&[("RENEWALS_TABLE", "r")]).unwrap_err();
        assert!(e.to_string().contains("COMMANDS_DLQ_URL"), "{e}");
        let c =
            config(&[("RENEWALS_TABLE", "r"), ("COMMANDS_DLQ_URL", "http://127.0.0.1:1/q"), ("CHANNELS", "email,sms")])
                .unwrap();
        assert_eq!((c.channels.len(), c.recipients_table, c.metrics_namespace.as_str()), (2, None, "punctual"));
    }
}
