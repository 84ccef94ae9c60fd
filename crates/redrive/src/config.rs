//! The redrive function's environment (docs/configuration.md#redrive).

use punctual_core::redrive::RedriveCaps;
use punctual_lambda::config::{
    ConfigError, Env, LaneConfig, channel_names, channel_quotas, lane_config, limiter_settings,
};

/// Everything the redrive function reads from its environment.
#[derive(Debug, Clone)]
pub struct RedriveConfig {
    /// `SEND_QUEUE_URL`: where redriven messages go.
    pub send_queue_url: String,
    /// `URGENT_QUEUE_URL` and `DEADLINE_NEAR_SECS`: a letter with less slack goes back to the
    /// urgent lane.
    pub lanes: LaneConfig,
    /// `DLQ_URL`: where they come from.
    pub dlq_url: String,
    /// `LEDGER_TABLE`: outcomes, audit records, the pause switch.
    pub ledger_table: String,
    /// `REDRIVE_MAX_MESSAGES` (default 1000) and `REDRIVE_MAX_PER_SECOND` (default 20, never
    /// above `REDRIVE_SHARE × PROVIDER_RATE_PER_SEC`).
    pub caps: RedriveCaps,
    /// Each declared channel's own cap, `REDRIVE_SHARE × CHANNEL_{NAME}_PROVIDER_RATE_PER_SEC`
    /// (channels without that variable: none; their letters go at the request's rate).
    pub channel_caps: Vec<(String, f64)>,
}

impl RedriveConfig {
    /// Reads and validates the configuration; every problem names its variable.
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let limiter = limiter_settings(env)?;
        let max_messages =
            env.parse("REDRIVE_MAX_MESSAGES", RedriveCaps::DEFAULT_MAX_MESSAGES, "an integer in 1..=100000", |v| {
                (1..=100_000).contains(v)
            })?;
        let max_rate = env.parse(
            "REDRIVE_MAX_PER_SECOND",
            RedriveCaps::DEFAULT_MAX_PER_SECOND,
            "a rate in (0, 10000]",
            |v: &f64| *v > 0.0 && *v <= 10_000.0,
        )?;
        Ok(Self {
            send_queue_url: env.required("SEND_QUEUE_URL")?,
            lanes: lane_config(env)?,
            dlq_url: env.required("DLQ_URL")?,
            ledger_table: env.required("LEDGER_TABLE")?,
            caps: RedriveCaps::within_share(max_messages, max_rate, &limiter),
            channel_caps: channel_caps(env)?,
        })
    }
}

/// Each declared channel's cap: its redrive share of its quota, both read under its prefix
/// exactly as its senders' limiter reads them (`limiter_settings`: `CHANNEL_{NAME}_REDRIVE_SHARE`,
/// default 0.2, of `CHANNEL_{NAME}_PROVIDER_RATE_PER_SEC`); a channel without a quota here has none.
fn channel_caps<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Vec<(String, f64)>, ConfigError> {
    let mut caps = Vec::new();
    for (name, _) in channel_quotas(env, &channel_names(env)?)? {
        let prefix = punctual_lambda::config::channel_prefix(&name);
        let own = limiter_settings(&env.under(&prefix, &[])).map_err(|e| e.under(&prefix))?;
        caps.push((name, own.redrive_share * own.quota));
    }
    Ok(caps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Env<impl Fn(&str) -> Option<String>> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Env::new(move |k: &str| map.get(k).cloned())
    }

    const BASE: &[(&str, &str)] =
        &[("SEND_QUEUE_URL", "http://127.0.0.1:1/q"), ("DLQ_URL", "http://127.0.0.1:1/dlq"), ("LEDGER_TABLE", "l")];

    /// Each channel with a quota gets its own cap, the same share of its own quota; a bad quota
    /// is named under its channel's prefix.
    #[test]
    fn each_channel_is_capped_at_the_redrive_share_of_its_own_quota() {
        let mut pairs = BASE.to_vec();
        pairs.extend([
            ("CHANNELS", "email,sms"),
            ("CHANNEL_SMS_PROVIDER_RATE_PER_SEC", "10"),
            ("CHANNEL_SMS_QUEUE_URL", "http://127.0.0.1:1/sms"),
        ]);
        let c = RedriveConfig::from_env(&env(&pairs)).unwrap();
        assert_eq!(c.channel_caps, [("sms".to_owned(), 2.0)], "email has no quota of its own here");
        let mut own_share = pairs.clone();
        own_share.push(("CHANNEL_SMS_REDRIVE_SHARE", "0.5"));
        let c = RedriveConfig::from_env(&env(&own_share)).unwrap();
        assert_eq!(c.channel_caps, [("sms".to_owned(), 5.0)], "SMS's own share, as its senders' limiter reads it");
        pairs.push(("CHANNEL_EMAIL_PROVIDER_RATE_PER_SEC", "0"));
        let Err(e) = RedriveConfig::from_env(&env(&pairs)) else { panic!("a zero quota was taken") };
        assert!(e.to_string().contains("CHANNEL_EMAIL_PROVIDER_RATE_PER_SEC"), "{e}");
        assert!(RedriveConfig::from_env(&env(BASE)).unwrap().channel_caps.is_empty());
    }

    #[test]
    fn the_rate_cap_never_exceeds_the_redrive_share() {
        let c = RedriveConfig::from_env(&env(BASE)).unwrap();
        assert_eq!((c.caps.max_messages, c.caps.max_per_second), (1000, 20.0));
        let mut pairs = BASE.to_vec();
        pairs.extend([("PROVIDER_RATE_PER_SEC", "10"), ("REDRIVE_MAX_PER_SECOND", "50")]);
        let c = RedriveConfig::from_env(&env(&pairs)).unwrap();
        assert_eq!(c.caps.max_per_second, 2.0, "20 % of 10/s");
        let mut bad = BASE.to_vec();
        bad.push(("REDRIVE_MAX_MESSAGES", "0"));
        assert!(matches!(
            RedriveConfig::from_env(&env(&bad)),
            Err(ConfigError::Invalid { name: "REDRIVE_MAX_MESSAGES", .. })
        ));
    }
}

#[cfg(test)]
mod events {
    use punctual_core::redrive::{RedriveCaps, RedriveRequest};

    const CAPS: RedriveCaps = RedriveCaps { max_messages: 1000, max_per_second: 20.0 };

    #[test]
    fn the_sample_events_parse_as_documented() {
        let dry = RedriveRequest::parse(include_str!("../../../events/redrive/dry-run.json"), CAPS).unwrap();
        assert!(dry.dry_run && dry.canary == 5);
        let canary = RedriveRequest::parse(include_str!("../../../events/redrive/canary.json"), CAPS).unwrap();
        assert!(!canary.dry_run && canary.abort_if.failure_ratio == 0.2);
        let problems = RedriveRequest::parse(include_str!("../../../events/redrive/invalid.json"), CAPS).unwrap_err();
        assert_eq!(problems.len(), 6, "{problems:#?}");
    }
}
