//! The sender's environment (documented in docs/configuration.md#sender).

use std::time::Duration;

use punctual_core::backoff::Backoff;
use punctual_core::decision::SenderPolicy;
use punctual_core::limiter::LimiterSettings;
use punctual_core::provider::{IndeterminatePolicy, ResetForm};
use punctual_core::sender::SenderSettings;
use punctual_lambda::config::{ConfigError, Env, lane_config, limiter_settings};
pub use punctual_lambda::config::{channel_names, channel_prefix};
use punctual_provider::VendorProfile;
use punctual_ses::{SesContent, SesSettings};

/// Who delivers (`PROVIDER_KIND`).
#[derive(Debug, Clone)]
pub enum ProviderConfig {
    /// `http` (default): a vendor HTTP API (`PROVIDER_URL` and the `PROVIDER_*` dialect).
    Http {
        /// `PROVIDER_URL`.
        url: String,
        /// The vendor's dialect (`PROVIDER_AUTH`, `PROVIDER_KEY_HEADER`,
        /// `PROVIDER_RECEIPT_POINTER`, `PROVIDER_ERROR_CODE_POINTER`, `PROVIDER_THROTTLE_CODES`,
        /// `PROVIDER_RATELIMIT_RESET`).
        vendor: VendorProfile,
    },
    /// `ses`: Amazon SES v2 (`SES_*`, `RECIPIENTS_TABLE`).
    Ses {
        /// From address, configuration set, template prefix, content.
        settings: SesSettings,
        /// `RECIPIENTS_TABLE`: where `recipient_ref` resolves to an address.
        recipients_table: String,
        /// `PROVIDER_RATE_FROM_ACCOUNT=true`: the limiter's rate is the lower of
        /// `PROVIDER_RATE_PER_SEC` and the account's `MaxSendRate`, read at cold start.
        rate_from_account: bool,
    },
}

/// One declared channel (`CHANNELS`, docs/design.md#channels): its provider and its own limiter
/// schedule, every variable of both read under its prefix (`CHANNEL_SMS_PROVIDER_URL`).
#[derive(Debug, Clone)]
pub struct ChannelConfig {
    /// The channel's name, as renewal rows give it (`email`, `sms`).
    pub name: String,
    /// `CHANNEL_{NAME}_`: where its variables are read, its token included.
    pub prefix: String,
    /// `{prefix}PROVIDER_KIND` and what that kind needs.
    pub provider: ProviderConfig,
    /// `{prefix}PROVIDER_RATE_PER_SEC` and `{prefix}LIMITER_*`: its own schedule, named after
    /// the channel unless `{prefix}LIMITER_NAME` says otherwise.
    pub limiter: LimiterSettings,
}

/// Everything the sender reads from its environment.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// `URGENT_QUEUE_URL`: the urgent lane (unset: one lane).
    pub urgent_queue_url: Option<String>,
    /// Each declared channel's own queue (`CHANNEL_{NAME}_QUEUE_URL`): where its deferred
    /// copies are requeued.
    pub channel_queues: Vec<(String, String)>,
    /// Their own urgent lanes (`CHANNEL_{NAME}_URGENT_QUEUE_URL`): where their urgent copies are.
    pub channel_urgent_queues: Vec<(String, String)>,
    /// `SEND_QUEUE_URL`: where deferred copies are requeued.
    pub send_queue_url: String,
    /// `DLQ_URL`: where quarantined messages go.
    pub dlq_url: String,
    /// `LEDGER_TABLE`: the idempotency ledger.
    pub ledger_table: String,
    /// `RENEWALS_TABLE`: the system of record.
    pub renewals_table: String,
    /// `PROVIDER_KIND` and what that kind needs (with channels declared: the first channel's).
    pub provider: ProviderConfig,
    /// `CHANNELS` (unset: none, one provider and one limiter for every message): each declared
    /// channel's own provider and limiter. A renewal whose channel is not declared is
    /// dead-lettered `unknown_channel`.
    pub channels: Vec<ChannelConfig>,
    /// The shared limiter (`PROVIDER_RATE_PER_SEC`, `LIMITER_*`, `REDRIVE_SHARE`,
    /// `TENANT_SHARE`).
    pub limiter: LimiterSettings,
    /// `RECORD_CONCURRENCY` (default 10): records of one batch in flight at once.
    pub concurrency: usize,
    /// `METRICS_NAMESPACE` (default `punctual`).
    pub metrics_namespace: String,
    /// `SLO_TARGET` (default 0.99) and `SLO_WITHIN_SECS` (default 300): the deadline SLO its
    /// metrics judge.
    pub slo: punctual_core::slo::SloPolicy,
    /// `MAX_RECEIVE_COUNT` (default 5): the lanes' redrive policy `maxReceiveCount` (the
    /// template sets both; `check_template.py` checks they agree).
    pub max_receive_count: u32,
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
        let channels = channel_configs(env)?;
        // With channels declared, the top-level provider and limiter variables are not read:
        // every message goes through its channel's (the first channel's stand as the sender's
        // default route, which no message takes).
        let (provider, limiter) = match channels.first() {
            Some(c) => (c.provider.clone(), c.limiter.clone()),
            None => (provider_config(env)?, limiter_settings(env)?),
        };
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
            // Set from the adapter's profile when the sender is composed.
            provider_keys: p.provider_keys,
            indeterminate: match env.optional("PROVIDER_IDEMPOTENCY") {
                None => IndeterminatePolicy::default(),
                Some(v) => IndeterminatePolicy::parse(&v).ok_or(ConfigError::Invalid {
                    name: "PROVIDER_IDEMPOTENCY",
                    value: v,
                    expected: "at_most_once or at_least_once",
                })?,
            },
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
        let (target, within) = (env.optional("SLO_TARGET"), env.optional("SLO_WITHIN_SECS"));
        let slo = punctual_core::slo::SloPolicy::parse(target.as_deref(), within.as_deref()).map_err(|e| match e {
            punctual_core::slo::SloError::Target(v) => {
                ConfigError::Invalid { name: "SLO_TARGET", value: v, expected: "a fraction strictly between 0 and 1" }
            }
            punctual_core::slo::SloError::Within(v) => {
                ConfigError::Invalid { name: "SLO_WITHIN_SECS", value: v, expected: "whole seconds in 1..=86400" }
            }
        })?;
        Ok(Self {
            slo,
            max_receive_count: env.parse(
                "MAX_RECEIVE_COUNT",
                5,
                "an integer in 1..=1000 (the lanes' maxReceiveCount)",
                |v| (1..=1000).contains(v),
            )?,
            send_queue_url: env.required("SEND_QUEUE_URL")?,
            urgent_queue_url: lanes.urgent_queue_url.clone(),
            channel_queues: lanes.channel_queues.clone(),
            channel_urgent_queues: lanes.channel_urgent_queues.clone(),
            dlq_url: env.required("DLQ_URL")?,
            ledger_table: env.required("LEDGER_TABLE")?,
            renewals_table: env.required("RENEWALS_TABLE")?,
            provider,
            channels,
            limiter,
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

/// Variables a channel reads as the deployment's, not under its prefix: the one recipients
/// table serves every channel.
const SHARED_BY_CHANNELS: &[&str] = &["RECIPIENTS_TABLE"];

/// Each declared channel's provider and limiter. Nothing is inherited from the top-level
/// variables (but [`SHARED_BY_CHANNELS`]): a channel states its own kind and rate, so one
/// channel's endpoint, token or quota can never reach another's provider.
fn channel_configs<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Vec<ChannelConfig>, ConfigError> {
    let mut channels: Vec<ChannelConfig> = Vec::new();
    for name in channel_names(env)? {
        let prefix = channel_prefix(&name);
        let own = env.under(&prefix, SHARED_BY_CHANNELS);
        let read = || -> Result<ChannelConfig, ConfigError> {
            own.required("PROVIDER_KIND")?;
            own.required("PROVIDER_RATE_PER_SEC")?;
            let provider = provider_config(&own)?;
            let mut limiter = limiter_settings(&own)?;
            // A channel books a tenth of a second of its own quota at a time
            // (LimiterSettings::for_channel says why), unless it sets its own block.
            // Its deadline-near bookings take the same block: the slots a ten-slot near block
            // would strand are what the tenth saves.
            if own.optional("LIMITER_BLOCK").is_none() {
                limiter.block = LimiterSettings::for_channel(limiter.quota).block;
            }
            limiter.near_block = limiter.block;
            if own.optional("LIMITER_NAME").is_none() {
                limiter.name.clone_from(&name);
            }
            Ok(ChannelConfig { name: name.clone(), prefix: prefix.clone(), provider, limiter })
        };
        let channel = read().map_err(|e| match e {
            ConfigError::Missing(n) if SHARED_BY_CHANNELS.contains(&n) => e,
            e => e.under(&prefix),
        })?;
        if let Some(other) = channels.iter().find(|c| c.limiter.name == channel.limiter.name) {
            return Err(ConfigError::Channel(format!(
                "channels {} and {} name one limiter schedule ({:?}): each channel needs its own ({}LIMITER_NAME)",
                other.name, channel.name, channel.limiter.name, channel.prefix
            )));
        }
        channels.push(channel);
    }
    Ok(channels)
}

/// `PROVIDER_KIND` (`http` or `ses`) and each kind's variables (docs/design.md#providers-and-idempotency-profiles).
fn provider_config<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<ProviderConfig, ConfigError> {
    let invalid =
        |name: &'static str, value: String, expected: &'static str| ConfigError::Invalid { name, value, expected };
    match env.optional("PROVIDER_KIND").as_deref() {
        None | Some("http") => {
            let url = env.required("PROVIDER_URL")?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid("PROVIDER_URL", url, "an http:// or https:// URL"));
            }
            let reset = match env.optional("PROVIDER_RATELIMIT_RESET") {
                None => ResetForm::Auto,
                Some(v) => {
                    ResetForm::parse(&v).ok_or(invalid("PROVIDER_RATELIMIT_RESET", v, "delta, epoch or auto"))?
                }
            };
            let (auth, key, receipt, code, throttle) = (
                env.optional("PROVIDER_AUTH"),
                env.optional("PROVIDER_KEY_HEADER"),
                env.optional("PROVIDER_RECEIPT_POINTER"),
                env.optional("PROVIDER_ERROR_CODE_POINTER"),
                env.optional("PROVIDER_THROTTLE_CODES"),
            );
            let vendor = VendorProfile::parse(
                auth.as_deref(),
                key.as_deref(),
                receipt.as_deref(),
                code.as_deref(),
                throttle.as_deref(),
                reset,
            )
            .map_err(|e| {
                let (name, value): (&'static str, String) = match &e {
                    punctual_provider::ClientError::BadPointer(v) => {
                        ("PROVIDER_RECEIPT_POINTER|PROVIDER_ERROR_CODE_POINTER", v.clone())
                    }
                    _ => ("PROVIDER_AUTH|PROVIDER_KEY_HEADER", e.to_string()),
                };
                invalid(name, value, "bearer or header:NAME; a header name or none; RFC 6901 pointers")
            })?;
            Ok(ProviderConfig::Http { url, vendor })
        }
        Some("ses") => {
            let from_address = env.required("SES_FROM_ADDRESS")?;
            if punctual_core::ports::EmailAddress::parse(&from_address).is_err() {
                return Err(invalid("SES_FROM_ADDRESS", from_address, "a bare address local@domain"));
            }
            let content = match env.optional("SES_CONTENT") {
                None => SesContent::Template,
                Some(v) => SesContent::parse(&v).ok_or(invalid("SES_CONTENT", v, "template or inline"))?,
            };
            let rate_from_account = match env.optional("PROVIDER_RATE_FROM_ACCOUNT").as_deref() {
                None | Some("false") => false,
                Some("true") => true,
                Some(v) => return Err(invalid("PROVIDER_RATE_FROM_ACCOUNT", v.to_owned(), "true or false")),
            };
            Ok(ProviderConfig::Ses {
                settings: SesSettings {
                    from_address,
                    configuration_set: env.optional("SES_CONFIGURATION_SET"),
                    template_prefix: env.optional("SES_TEMPLATE_PREFIX").unwrap_or_else(|| "punctual-".to_owned()),
                    content,
                },
                recipients_table: env.required("RECIPIENTS_TABLE")?,
                rate_from_account,
            })
        }
        Some(other) => Err(invalid("PROVIDER_KIND", other.to_owned(), "http or ses")),
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
    fn the_slo_settings_default_and_a_bad_one_fails_the_cold_start_by_name() {
        let c = SenderConfig::from_env(&env(BASE)).unwrap();
        assert_eq!(c.slo, punctual_core::slo::SloPolicy::default());
        let set =
            |k: &'static str, v: &'static str| -> Vec<(&str, &str)> { BASE.iter().copied().chain([(k, v)]).collect() };
        let c = SenderConfig::from_env(&env(&set("SLO_WITHIN_SECS", "120"))).unwrap();
        assert_eq!(c.slo.within, Duration::from_secs(120));
        for (k, v) in [("SLO_TARGET", "1"), ("SLO_TARGET", "99"), ("SLO_WITHIN_SECS", "0"), ("SLO_WITHIN_SECS", "5m")] {
            let Err(ConfigError::Invalid { name, .. }) = SenderConfig::from_env(&env(&set(k, v))) else {
                panic!("{k}={v} accepted")
            };
            assert_eq!(name, k);
        }
    }

    #[test]
    fn each_provider_kind_reads_its_own_variables() {
        let ses: Vec<(&str, &str)> = BASE
            .iter()
            .copied()
            .filter(|(k, _)| *k != "PROVIDER_URL")
            .chain([
                ("PROVIDER_KIND", "ses"),
                ("SES_FROM_ADDRESS", "reminders@example.com"),
                ("RECIPIENTS_TABLE", "recipients"),
                ("PROVIDER_RATE_FROM_ACCOUNT", "true"),
            ])
            .collect();
        let c = SenderConfig::from_env(&env(&ses)).unwrap();
        let ProviderConfig::Ses { settings, recipients_table, rate_from_account } = c.provider else { panic!("ses") };
        assert_eq!(
            (settings.template_prefix.as_str(), settings.content, recipients_table.as_str(), rate_from_account),
            ("punctual-", SesContent::Template, "recipients", true)
        );
        assert_eq!(c.settings.policy.indeterminate, IndeterminatePolicy::AtMostOnce);
        for (var, missing_or_bad) in [
            ("RECIPIENTS_TABLE", None),
            ("SES_FROM_ADDRESS", Some("Billing <b@example.com>")),
            ("SES_CONTENT", Some("html")),
            ("PROVIDER_KIND", Some("smtp")),
        ] {
            let mut pairs: Vec<_> = ses.iter().copied().filter(|(k, _)| *k != var).collect();
            if let Some(v) = missing_or_bad {
                pairs.push((var, v));
            }
            let e = SenderConfig::from_env(&env(&pairs)).unwrap_err();
            assert!(e.to_string().contains(var), "{var}: {e}");
        }
        let mut http = BASE.to_vec();
        http.extend([
            ("PROVIDER_AUTH", "header:X-Api-Key"),
            ("PROVIDER_KEY_HEADER", "none"),
            ("PROVIDER_IDEMPOTENCY", "at_least_once"),
        ]);
        let c = SenderConfig::from_env(&env(&http)).unwrap();
        let ProviderConfig::Http { vendor, .. } = c.provider else { panic!("http") };
        assert!(vendor.key_header.is_none());
        assert_eq!(c.settings.policy.indeterminate, IndeterminatePolicy::AtLeastOnce);
        for (var, v) in
            [("PROVIDER_IDEMPOTENCY", "exactly_once"), ("PROVIDER_RATELIMIT_RESET", "unix"), ("PROVIDER_AUTH", "basic")]
        {
            let mut pairs = BASE.to_vec();
            pairs.push((var, v));
            let e = SenderConfig::from_env(&env(&pairs)).unwrap_err();
            assert!(e.to_string().contains(var), "{var}: {e}");
        }
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
            ("LIMITER_SLOT_VALIDITY_MS", "5"),
            ("LIMITER_SLOT_VALIDITY_MS", "5000"),
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

    /// Two channels, each read under its own prefix: nothing of one reaches the other, and
    /// each error names the variable as it is set.
    #[test]
    fn each_declared_channel_reads_its_own_provider_and_rate() {
        const CHANNELS: &[(&str, &str)] = &[
            ("SEND_QUEUE_URL", "http://127.0.0.1:1/q"),
            ("DLQ_URL", "http://127.0.0.1:1/dlq"),
            ("LEDGER_TABLE", "ledger"),
            ("RENEWALS_TABLE", "renewals"),
            ("RECIPIENTS_TABLE", "recipients"),
            ("CHANNELS", "email, sms"),
            ("CHANNEL_EMAIL_PROVIDER_KIND", "ses"),
            ("CHANNEL_EMAIL_SES_FROM_ADDRESS", "reminders@example.com"),
            ("CHANNEL_EMAIL_PROVIDER_RATE_PER_SEC", "100"),
            ("CHANNEL_SMS_PROVIDER_KIND", "http"),
            ("CHANNEL_SMS_PROVIDER_URL", "http://127.0.0.1:3/sms"),
            ("CHANNEL_SMS_PROVIDER_RATE_PER_SEC", "10"),
            // The top-level provider is not read with channels declared: not even this rate.
            ("PROVIDER_RATE_PER_SEC", "5000"),
        ];
        let c = SenderConfig::from_env(&env(CHANNELS)).unwrap();
        let names: Vec<_> = c.channels.iter().map(|c| (c.name.as_str(), c.prefix.as_str())).collect();
        assert_eq!(names, [("email", "CHANNEL_EMAIL_"), ("sms", "CHANNEL_SMS_")]);
        let [email, sms] = &c.channels[..] else { panic!("two channels") };
        assert!(
            matches!(&email.provider, ProviderConfig::Ses { recipients_table, .. } if recipients_table == "recipients")
        );
        assert!(matches!(&sms.provider, ProviderConfig::Http { url, .. } if url == "http://127.0.0.1:3/sms"));
        assert_eq!((email.limiter.name.as_str(), email.limiter.quota, email.limiter.block), ("email", 100.0, 10));
        assert_eq!((sms.limiter.name.as_str(), sms.limiter.quota, sms.limiter.block), ("sms", 10.0, 1));
        assert_eq!((email.limiter.near_block, sms.limiter.near_block), (10, 1), "near work books the same block");
        assert_eq!(c.limiter.quota, 100.0, "the default route is the first channel's");

        let without =
            |var: &str| -> Vec<(&str, &str)> { CHANNELS.iter().copied().filter(|(k, _)| *k != var).collect() };
        let with = |var: &'static str, v: &'static str| -> Vec<(&str, &str)> {
            CHANNELS.iter().copied().filter(|(k, _)| *k != var).chain([(var, v)]).collect()
        };
        for (pairs, named) in [
            (without("CHANNEL_SMS_PROVIDER_RATE_PER_SEC"), "CHANNEL_SMS_PROVIDER_RATE_PER_SEC is required"),
            (without("CHANNEL_EMAIL_PROVIDER_KIND"), "CHANNEL_EMAIL_PROVIDER_KIND is required"),
            (without("RECIPIENTS_TABLE"), "variable RECIPIENTS_TABLE is required"),
            (with("CHANNEL_SMS_PROVIDER_URL", "sms.example"), "CHANNEL_SMS_PROVIDER_URL=\"sms.example\" is invalid"),
            (with("CHANNEL_SMS_LIMITER_NAME", "email"), "channels email and sms name one limiter schedule"),
            (with("CHANNELS", "email,Email"), "CHANNELS=\"email,Email\" is invalid"),
            (with("CHANNELS", "email,email"), "CHANNELS=\"email,email\" is invalid"),
            (with("CHANNELS", "email,"), "CHANNELS=\"email,\" is invalid"),
            (
                with("CHANNEL_SMS_PROVIDER_KEY_HEADER", "bad header"),
                "CHANNEL_SMS_PROVIDER_AUTH|CHANNEL_SMS_PROVIDER_KEY_HEADER=",
            ),
        ] {
            let e = SenderConfig::from_env(&env(&pairs)).unwrap_err().to_string();
            assert!(e.contains(named), "{named}: {e}");
        }
        let block = SenderConfig::from_env(&env(&with("CHANNEL_SMS_LIMITER_BLOCK", "2"))).unwrap();
        assert_eq!((block.channels[1].limiter.block, block.channels[1].limiter.near_block), (2, 2));
        // A provider with a smaller burst than the top-level one: its slots' window, its own.
        let window = SenderConfig::from_env(&env(&with("CHANNEL_SMS_LIMITER_SLOT_VALIDITY_MS", "20"))).unwrap();
        assert_eq!(window.channels[1].limiter.validity, Duration::from_millis(20));
        assert_eq!(window.limiter.validity, Duration::from_millis(50), "the top-level default");
    }
}
