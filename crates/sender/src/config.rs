//! The sender's environment (documented in the README, "Sender configuration").

use std::time::Duration;

use punctual_core::backoff::Backoff;
use punctual_core::decision::SenderPolicy;
use punctual_core::limiter::LimiterSettings;
use punctual_core::sender::SenderSettings;
use punctual_lambda::config::{ConfigError, Env, lane_config, limiter_settings};

/// Everything the sender reads from its environment.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// `URGENT_QUEUE_URL`: the urgent lane (unset: one lane).
    pub urgent_queue_url: Option<String>,
    /// `SEND_QUEUE_URL`: where deferred copies are requeued.
    pub send_queue_url: String,
    /// `DLQ_URL`: where quarantined messages go.
    pub dlq_url: String,
    /// `LEDGER_TABLE`: the idempotency ledger.
    pub ledger_table: String,
    /// `RENEWALS_TABLE`: the system of record.
    pub renewals_table: String,
    /// `PROVIDER_URL`: the provider's messages endpoint.
    pub provider_url: String,
    /// The shared limiter (`PROVIDER_RATE_PER_SEC`, `LIMITER_*`, `REDRIVE_SHARE`,
    /// `TENANT_SHARE`).
    pub limiter: LimiterSettings,
    /// `RECORD_CONCURRENCY` (default 10): records of one batch in flight at once.
    pub concurrency: usize,
    /// `METRICS_NAMESPACE` (default `punctual`).
    pub metrics_namespace: String,
    /// Decision and service tunables.
    pub settings: SenderSettings,
    /// How often one instance re-reads the operator pause switch (5 s; not an environment
    /// variable: a pause reaches every instance within this).
    pub pause_check: Duration,
}

impl SenderConfig {
    /// Reads and validates the configuration; every problem names its variable.
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let d = SenderSettings::default();
        let p = d.policy;
        let provider_url = env.required("PROVIDER_URL")?;
        if !(provider_url.starts_with("http://") || provider_url.starts_with("https://")) {
            return Err(ConfigError::Invalid {
                name: "PROVIDER_URL",
                value: provider_url,
                expected: "an http:// or https:// URL",
            });
        }
        let sec = Duration::from_secs;
        let ms = Duration::from_millis;
        let policy = SenderPolicy {
            backoff: Backoff {
                base: env.millis("BACKOFF_BASE_MS", p.backoff.base, ms(1), sec(3600), "milliseconds in 1..=3600000")?,
                cap: env.millis(
                    "BACKOFF_CAP_MS",
                    p.backoff.cap,
                    ms(1),
                    sec(12 * 3600),
                    "milliseconds in 1..=43200000",
                )?,
            },
            max_attempts: env
                .parse("MAX_ATTEMPTS", p.max_attempts, "an integer in 1..=100", |v| (1..=100).contains(v))?,
            invocation_margin: env.millis(
                "INVOCATION_MARGIN_MS",
                p.invocation_margin,
                ms(100),
                sec(60),
                "milliseconds in 100..=60000",
            )?,
            min_call_timeout: env.millis(
                "MIN_CALL_TIMEOUT_MS",
                p.min_call_timeout,
                ms(50),
                sec(60),
                "milliseconds in 50..=60000",
            )?,
            max_call_timeout: env.millis(
                "CALL_TIMEOUT_MS",
                p.max_call_timeout,
                ms(100),
                sec(300),
                "milliseconds in 100..=300000",
            )?,
        };
        if policy.backoff.cap < policy.backoff.base {
            return Err(ConfigError::Invalid {
                name: "BACKOFF_CAP_MS",
                value: policy.backoff.cap.as_millis().to_string(),
                expected: "a cap at least BACKOFF_BASE_MS",
            });
        }
        if policy.max_call_timeout < policy.min_call_timeout {
            return Err(ConfigError::Invalid {
                name: "CALL_TIMEOUT_MS",
                value: policy.max_call_timeout.as_millis().to_string(),
                expected: "a timeout at least MIN_CALL_TIMEOUT_MS",
            });
        }
        let lanes = lane_config(env)?;
        Ok(Self {
            send_queue_url: env.required("SEND_QUEUE_URL")?,
            urgent_queue_url: lanes.urgent_queue_url.clone(),
            dlq_url: env.required("DLQ_URL")?,
            ledger_table: env.required("LEDGER_TABLE")?,
            renewals_table: env.required("RENEWALS_TABLE")?,
            provider_url,
            limiter: limiter_settings(env)?,
            concurrency: env.parse("RECORD_CONCURRENCY", 10, "an integer in 1..=100", |v| (1..=100).contains(v))?,
            metrics_namespace: env.optional("METRICS_NAMESPACE").unwrap_or_else(|| "punctual".to_owned()),
            settings: SenderSettings {
                policy,
                deadline_near: lanes.deadline_near,
                queue_delay: env.millis(
                    "QUEUE_DELAY_MS",
                    d.queue_delay,
                    ms(0),
                    sec(900),
                    "milliseconds in 0..=900000",
                )?,
                initial_call_latency: d.initial_call_latency,
            },
            pause_check: Duration::from_secs(5),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Env<impl Fn(&str) -> Option<String>> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Env::new(move |k: &str| map.get(k).cloned())
    }

    const BASE: &[(&str, &str)] = &[
        ("SEND_QUEUE_URL", "http://127.0.0.1:1/q"),
        ("DLQ_URL", "http://127.0.0.1:1/dlq"),
        ("LEDGER_TABLE", "ledger"),
        ("RENEWALS_TABLE", "renewals"),
        ("PROVIDER_URL", "http://127.0.0.1:2/v1/messages"),
    ];

    #[test]
    fn defaults_apply_when_only_the_required_variables_are_set() {
        let c = SenderConfig::from_env(&env(BASE)).unwrap();
        assert_eq!((c.limiter.quota, c.concurrency, c.settings.policy.max_attempts), (100.0, 10, 8));
        assert_eq!((c.limiter.block, c.limiter.redrive_share, c.limiter.tenant_share), (10, 0.2, None));
    }

    #[test]
    fn each_bad_variable_is_named() {
        for (var, value) in [
            ("PROVIDER_URL", "api.provider.example"),
            ("MAX_ATTEMPTS", "0"),
            ("PROVIDER_RATE_PER_SEC", "-5"),
            ("CALL_TIMEOUT_MS", "10"),
            ("BACKOFF_CAP_MS", "1"),
            ("LIMITER_BLOCK", "0"),
            ("REDRIVE_SHARE", "1.5"),
            ("TENANT_SHARE", "zero"),
            ("LIMITER_NAME", "a b"),
        ] {
            let mut pairs = BASE.to_vec();
            pairs.push((var, value));
            let e = SenderConfig::from_env(&env(&pairs)).unwrap_err();
            assert!(matches!(&e, ConfigError::Invalid { name, .. } if *name == var), "{var}: {e}");
        }
        let missing: Vec<_> = BASE.iter().copied().filter(|(k, _)| *k != "LEDGER_TABLE").collect();
        assert_eq!(SenderConfig::from_env(&env(&missing)).unwrap_err(), ConfigError::Missing("LEDGER_TABLE"));
    }
}
