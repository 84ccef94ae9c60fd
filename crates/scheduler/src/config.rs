//! The scheduler's environment (documented in the README, "Scheduler configuration").

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
    /// `LEDGER_TABLE`: where the operator pause switch lives (read once per tick).
    pub ledger_table: String,
    /// `METRICS_NAMESPACE` (default `punctual`).
    pub metrics_namespace: String,
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
        Ok(Self {
            renewals_table: env.required("RENEWALS_TABLE")?,
            send_queue_url: env.required("SEND_QUEUE_URL")?,
            urgent_queue_url: lanes.urgent_queue_url,
            ledger_table: env.required("LEDGER_TABLE")?,
            metrics_namespace: env.optional("METRICS_NAMESPACE").unwrap_or_else(|| "punctual".to_owned()),
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
                sustainable_rate: env.parse(
                    "SUSTAINABLE_RATE_PER_SEC",
                    d.sustainable_rate,
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
