//! The scheduler's environment (documented in docs/configuration.md#scheduler).

use std::time::Duration;

use punctual_core::scheduler::{MAX_LOOKAHEAD, SchedulerSettings};
use punctual_lambda::config::{ConfigError, Env, lane_config};

/// Everything the scheduler reads from its environment.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// `RENEWALS_TABLE`.
    pub renewals_table: String,
    /// `SEND_QUEUE_URL`.
    pub send_queue_url: String,
    /// `URGENT_QUEUE_URL` (unset: one lane).
    pub urgent_queue_url: Option<String>,
    /// Each declared channel's own queue (`CHANNELS`, `CHANNEL_{NAME}_QUEUE_URL`).
    pub channel_queues: Vec<(String, String)>,
    /// Their own urgent lanes (`CHANNEL_{NAME}_URGENT_QUEUE_URL`).
    pub channel_urgent_queues: Vec<(String, String)>,
    /// The declared channels (`CHANNELS`): each tick reads their own pause switches and reports
    /// the ones the sender tripped (`ChannelsTripped`).
    pub channels: Vec<String>,
    /// Each declared channel's sustainable rate, where its quota is set on the scheduler
    /// (`CHANNEL_{NAME}_PROVIDER_RATE_PER_SEC`, × `SUSTAINABLE_SHARE`): its urgent reminders are
    /// paced and its renewals projected at it. A channel without one goes by the fleet's rate.
    pub channel_rates: Vec<(String, f64)>,
    /// `LEDGER_TABLE`: where the operator pause switch lives (read once per tick).
    pub ledger_table: String,
    /// `METRICS_NAMESPACE` (default `punctual`).
    pub metrics_namespace: String,
    /// `OUTCOME_BUS_NAME` (default `default`): the EventBridge bus outcome events are
    /// published to after each tick.
    pub outcome_bus: String,
    /// Tick tunables.
    pub settings: SchedulerSettings,
}

impl SchedulerConfig {
    /// Reads and validates the configuration.
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let d = SchedulerSettings::default();
        let lookahead = env.parse(
            "LOOKAHEAD_SECS",
            d.lookahead.as_secs(),
            "seconds in 0..=900 (SQS delays at most 15 minutes)",
            |v| Duration::from_secs(*v) <= MAX_LOOKAHEAD,
        )?;
        let lanes = lane_config(env)?;
        let channels = punctual_lambda::config::channel_names(env)?;
        let channel_rates = channel_rates(env, &channels)?;
        // Without the fleet's quota, a deployment whose every channel states its own runs at
        // their sum (the template passes the channels' quotas: CloudFormation cannot add them).
        let summed = (!channels.is_empty() && channel_rates.len() == channels.len())
            .then(|| channel_rates.iter().map(|(_, r)| r).sum::<f64>());
        Ok(Self {
            renewals_table: env.required("RENEWALS_TABLE")?,
            send_queue_url: env.required("SEND_QUEUE_URL")?,
            urgent_queue_url: lanes.urgent_queue_url,
            channel_queues: lanes.channel_queues,
            channel_urgent_queues: lanes.channel_urgent_queues,
            channel_rates,
            channels,
            ledger_table: env.required("LEDGER_TABLE")?,
            metrics_namespace: env.optional("METRICS_NAMESPACE").unwrap_or_else(|| "punctual".to_owned()),
            outcome_bus: env.optional("OUTCOME_BUS_NAME").unwrap_or_else(|| "default".to_owned()),
            settings: SchedulerSettings {
                lookahead: Duration::from_secs(lookahead),
                page_size: env.parse("PAGE_SIZE", d.page_size, "an integer in 1..=1000", |v| (1..=1000).contains(v))?,
                safety_margin: env.millis(
                    "SAFETY_MARGIN_MS",
                    d.safety_margin,
                    Duration::from_millis(500),
                    Duration::from_secs(300),
                    "milliseconds in 500..=300000",
                )?,
                // Default: `SUSTAINABLE_SHARE` (97 %) of the provider's quota when the scheduler
                // is told the quota (the template passes PROVIDER_RATE_PER_SEC), else of every
                // declared channel's quota summed.
                sustainable_rate: env.parse(
                    "SUSTAINABLE_RATE_PER_SEC",
                    match env.optional("PROVIDER_RATE_PER_SEC") {
                        Some(_) => {
                            punctual_core::scheduler::SUSTAINABLE_SHARE
                                * env.parse(
                                    "PROVIDER_RATE_PER_SEC",
                                    100.0,
                                    "calls per second in (0, 100000]",
                                    |v: &f64| *v > 0.0 && *v <= 100_000.0,
                                )?
                        }
                        None => summed.unwrap_or(d.sustainable_rate),
                    },
                    "calls per second > 0",
                    |v: &f64| *v > 0.0,
                )?,
                urgent_below: lanes.deadline_near,
                urgent_lead: env.millis(
                    "URGENT_LEAD_MS",
                    d.urgent_lead,
                    Duration::ZERO,
                    Duration::from_secs(60),
                    "milliseconds in 0..=60000",
                )?,
            },
        })
    }
}

/// The quotas of `channels` set on the scheduler, as sustainable rates (see
/// [`SchedulerConfig::channel_rates`]).
fn channel_rates<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
    channels: &[String],
) -> Result<Vec<(String, f64)>, ConfigError> {
    Ok(punctual_lambda::config::channel_quotas(env, channels)?
        .into_iter()
        .map(|(name, quota)| (name, punctual_core::scheduler::SUSTAINABLE_SHARE * quota))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(pairs: &[(&str, &str)]) -> Result<SchedulerConfig, ConfigError> {
        let mut map: HashMap<String, String> =
            [("RENEWALS_TABLE", "r"), ("SEND_QUEUE_URL", "http://127.0.0.1:1/q"), ("LEDGER_TABLE", "l")]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
        map.extend(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        SchedulerConfig::from_env(&Env::new(move |k: &str| map.get(k).cloned()))
    }

    #[test]
    fn the_sustainable_rate_is_97_percent_of_the_quota_unless_set() {
        let rate = |pairs: &[(&str, &str)]| config(pairs).unwrap().settings.sustainable_rate;
        assert!((rate(&[("PROVIDER_RATE_PER_SEC", "200")]) - 194.0).abs() < 1e-9);
        assert!((rate(&[("PROVIDER_RATE_PER_SEC", "200"), ("SUSTAINABLE_RATE_PER_SEC", "150")]) - 150.0).abs() < 1e-9);
        assert!((rate(&[]) - 97.0).abs() < 1e-9);
        assert!(config(&[("PROVIDER_RATE_PER_SEC", "0")]).is_err(), "a zero quota is refused by name");
    }

    #[test]
    fn a_channels_quota_set_on_the_scheduler_is_its_pace_and_a_bad_one_is_named() {
        let c = config(&[("CHANNELS", "email,sms"), ("CHANNEL_SMS_PROVIDER_RATE_PER_SEC", "10")]).unwrap();
        assert_eq!(c.channels, ["email", "sms"]);
        assert_eq!(c.channel_rates.len(), 1, "email has no rate here: the fleet's");
        assert_eq!(c.channel_rates[0].0, "sms");
        assert!((c.channel_rates[0].1 - 9.7).abs() < 1e-9);
        assert!((c.settings.sustainable_rate - 97.0).abs() < 1e-9, "email's rate unknown: the default");
        let e = config(&[("CHANNELS", "sms"), ("CHANNEL_SMS_PROVIDER_RATE_PER_SEC", "-1")]).unwrap_err();
        assert!(e.to_string().contains("CHANNEL_SMS_PROVIDER_RATE_PER_SEC"), "{e}");
    }

    /// Every channel rated and no fleet quota (the template's two-channel stack): the fleet
    /// runs at the channels' quotas summed; a fleet quota set still binds.
    #[test]
    fn without_the_fleets_quota_every_channels_own_sum_to_it() {
        let both = [
            ("CHANNELS", "email,sms"),
            ("CHANNEL_EMAIL_PROVIDER_RATE_PER_SEC", "100"),
            ("CHANNEL_SMS_PROVIDER_RATE_PER_SEC", "10"),
        ];
        let rate = |pairs: &[(&str, &str)]| config(pairs).unwrap().settings.sustainable_rate;
        assert!((rate(&both) - 106.7).abs() < 1e-9);
        let mut with_fleet = both.to_vec();
        with_fleet.push(("PROVIDER_RATE_PER_SEC", "50"));
        assert!((rate(&with_fleet) - 48.5).abs() < 1e-9);
    }
}
