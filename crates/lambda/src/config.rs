//! Reading configuration from the environment, with errors that name the variable.

use std::str::FromStr;
use std::time::Duration;

/// A configuration problem, naming the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is unset or empty.
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    /// A variable does not parse.
    #[error("environment variable {name}={value:?} is invalid: expected {expected}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A declared channel's own variable (`CHANNEL_{NAME}_{VAR}`): the message names it in full.
    #[error("{0}")]
    Channel(String),
}

impl ConfigError {
    /// The same problem, naming the variable as `prefix` + its name (a channel's own variables
    /// are read under `CHANNEL_{NAME}_`).
    #[must_use]
    pub fn under(self, prefix: &str) -> Self {
        match self {
            Self::Missing(n) => Self::Channel(format!("environment variable {} is required", prefixed(prefix, n))),
            Self::Invalid { name, value, expected } => Self::Channel(format!(
                "environment variable {}={value:?} is invalid: expected {expected}",
                prefixed(prefix, name)
            )),
            Self::Channel(m) => Self::Channel(m),
        }
    }
}

/// `name` under `prefix`; each of several names a message joins with `|` (`A|B`) too.
fn prefixed(prefix: &str, name: &str) -> String {
    name.split('|').map(|n| format!("{prefix}{n}")).collect::<Vec<_>>().join("|")
}

/// Reads variables from a source (the process environment, or a map in tests).
pub struct Env<F: Fn(&str) -> Option<String>> {
    get: F,
}

/// The process environment.
pub fn process_env() -> Env<impl Fn(&str) -> Option<String>> {
    Env { get: |k: &str| std::env::var(k).ok() }
}

impl<F: Fn(&str) -> Option<String>> Env<F> {
    /// An environment backed by `get`.
    pub fn new(get: F) -> Self {
        Self { get }
    }

    /// The variables under `prefix` (`CHANNEL_SMS_` reads `PROVIDER_URL` as
    /// `CHANNEL_SMS_PROVIDER_URL`), and the `shared` ones as they are. Errors from it name the
    /// bare variable: map them with [`ConfigError::under`].
    pub fn under<'a>(&'a self, prefix: &'a str, shared: &'a [&'a str]) -> Env<impl Fn(&str) -> Option<String> + 'a> {
        Env::new(move |k: &str| if shared.contains(&k) { (self.get)(k) } else { (self.get)(&format!("{prefix}{k}")) })
    }

    fn raw(&self, name: &str) -> Option<String> {
        (self.get)(name).filter(|v| !v.trim().is_empty())
    }

    /// A required string.
    pub fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.raw(name).ok_or(ConfigError::Missing(name))
    }

    /// An optional string.
    pub fn optional(&self, name: &'static str) -> Option<String> {
        self.raw(name)
    }

    /// A parsed value with a default; `check` rejects values out of range.
    pub fn parse<T: FromStr>(
        &self,
        name: &'static str,
        default: T,
        expected: &'static str,
        check: impl Fn(&T) -> bool,
    ) -> Result<T, ConfigError> {
        let Some(value) = self.raw(name) else { return Ok(default) };
        match value.trim().parse::<T>() {
            Ok(v) if check(&v) => Ok(v),
            _ => Err(ConfigError::Invalid { name, value, expected }),
        }
    }

    /// A duration in milliseconds with a default, within `[min, max]`.
    pub fn millis(
        &self,
        name: &'static str,
        default: Duration,
        min: Duration,
        max: Duration,
        expected: &'static str,
    ) -> Result<Duration, ConfigError> {
        let ms = self.parse::<u64>(name, u64::try_from(default.as_millis()).unwrap_or(u64::MAX), expected, |v| {
            (min..=max).contains(&Duration::from_millis(*v))
        })?;
        Ok(Duration::from_millis(ms))
    }
}

/// `CHANNELS`: the declared channel names, comma-separated (unset: none). Each name is
/// lowercase `[a-z][a-z0-9-]*`, at most 32 characters, declared once.
pub fn channel_names<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Vec<String>, ConfigError> {
    let Some(list) = env.optional("CHANNELS") else { return Ok(Vec::new()) };
    let mut names: Vec<String> = Vec::new();
    for name in list.split(',').map(str::trim) {
        if !punctual_core::ids::is_channel_name(name) || names.iter().any(|n| n == name) {
            return Err(ConfigError::Invalid {
                name: "CHANNELS",
                value: list.clone(),
                expected: "distinct channel names, comma-separated, each [a-z][a-z0-9-]* of at most 32 characters",
            });
        }
        // A name whose variables' prefix starts another's would read that one's variables as its
        // own (`sms` and `sms-urgent`: CHANNEL_SMS_URGENT_QUEUE_URL is both sms's urgent lane and
        // sms-urgent's queue), as would two names alike but for `-` and `_`.
        let (b, mine) = (name, channel_prefix(name));
        if let Some(a) = names.iter().find(|n| {
            let theirs = channel_prefix(n);
            theirs.starts_with(&mine) || mine.starts_with(&theirs)
        }) {
            return Err(ConfigError::Channel(format!(
                "environment variable CHANNELS={list:?} is invalid: the variables of channels {a} and {b} would overlap ({} and {}: one starts the other, so one channel's variables could be read as the other's); name them apart (e.g. sms-us and sms-eu)",
                channel_prefix(a),
                mine
            )));
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

/// The quota of each of `channels` that sets `CHANNEL_{NAME}_PROVIDER_RATE_PER_SEC` (calls per
/// second in (0, 100000], the sender's own bounds), in `channels`' order; a channel without it
/// is left out. What the scheduler projects each channel at, and what the redrive caps each
/// channel's letters by.
pub fn channel_quotas<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
    channels: &[String],
) -> Result<Vec<(String, f64)>, ConfigError> {
    let mut quotas = Vec::new();
    for name in channels {
        let prefix = channel_prefix(name);
        let under = env.under(&prefix, &[]);
        if under.optional("PROVIDER_RATE_PER_SEC").is_none() {
            continue;
        }
        let quota = under
            .parse("PROVIDER_RATE_PER_SEC", 0.0, "calls per second in (0, 100000]", |v: &f64| {
                *v > 0.0 && *v <= 100_000.0
            })
            .map_err(|e| e.under(&prefix))?;
        quotas.push((name.clone(), quota));
    }
    Ok(quotas)
}

/// Where `channel`'s own variables are read: `sms` → `CHANNEL_SMS_`, `push-eu` → `CHANNEL_PUSH_EU_`.
pub fn channel_prefix(channel: &str) -> String {
    format!("CHANNEL_{}_", channel.to_ascii_uppercase().replace('-', "_"))
}

/// A channel's own queue, read under its prefix: `CHANNEL_{NAME}_QUEUE_URL` (listed with the
/// other per-channel variables in docs/configuration.md#channels).
const CHANNEL_QUEUE_URL: &str = "QUEUE_URL";
/// A channel's own urgent lane, read under its prefix: `CHANNEL_{NAME}_URGENT_QUEUE_URL`.
const CHANNEL_URGENT_QUEUE_URL: &str = "URGENT_QUEUE_URL";

/// The lanes (docs/design.md#lanes-and-pacing), read the same way by scheduler, sender and redrive:
/// `URGENT_QUEUE_URL` (unset: one lane, urgent work stays on the send queue — a deployment
/// from before the urgent lane keeps working) and `DEADLINE_NEAR_SECS` (default 900: the slack
/// under which work is urgent, for routing and for the limiter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneConfig {
    /// `URGENT_QUEUE_URL`.
    pub urgent_queue_url: Option<String>,
    /// `DEADLINE_NEAR_SECS`.
    pub deadline_near: Duration,
    /// `CHANNEL_{NAME}_QUEUE_URL` of each declared channel (`CHANNELS`) that has a queue of its
    /// own: (channel, URL). Its messages are released, requeued and redriven there (its urgent
    /// ones to its own urgent lane when it has one), and drained by its own event source
    /// mapping (docs/design.md#channels).
    pub channel_queues: Vec<(String, String)>,
    /// `CHANNEL_{NAME}_URGENT_QUEUE_URL` of each channel with a queue of its own that has an
    /// urgent lane of its own too: (channel, URL). That channel's urgent messages go there, its
    /// normal ones to its queue, each drained by its own mapping, so its deadline-near work is
    /// never behind its normal work waiting for tokens (as the two lanes keep the fleet's).
    pub channel_urgent_queues: Vec<(String, String)>,
}

/// Reads [`LaneConfig`].
pub fn lane_config<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<LaneConfig, ConfigError> {
    let secs =
        env.parse("DEADLINE_NEAR_SECS", punctual_core::lanes::URGENT_BELOW.as_secs(), "seconds in 0..=86400", |v| {
            *v <= 86_400
        })?;
    let (mut channel_queues, mut channel_urgent_queues) = (Vec::new(), Vec::new());
    for name in channel_names(env)? {
        let prefix = channel_prefix(&name);
        let own = env.under(&prefix, &[]);
        match (own.optional(CHANNEL_QUEUE_URL), own.optional(CHANNEL_URGENT_QUEUE_URL)) {
            (Some(url), urgent) => {
                if let Some(u) = urgent {
                    channel_urgent_queues.push((name.clone(), u));
                }
                channel_queues.push((name, url));
            }
            // An urgent lane without the queue it is the urgent lane of: its normal work would
            // go to the fleet's lanes and its urgent work to a queue of its own, which no
            // deployment means.
            (None, Some(_)) => {
                return Err(ConfigError::Channel(format!(
                    "environment variable {prefix}{CHANNEL_URGENT_QUEUE_URL} is set without {prefix}{CHANNEL_QUEUE_URL}: a channel's urgent lane is the urgent lane of its own queue"
                )));
            }
            (None, None) => {}
        }
    }
    Ok(LaneConfig {
        urgent_queue_url: env.optional("URGENT_QUEUE_URL").filter(|u| !u.is_empty()),
        deadline_near: Duration::from_secs(secs),
        channel_queues,
        channel_urgent_queues,
    })
}

/// The shared limiter's settings, read the same way by every function that draws from it
/// (docs/design.md#the-shared-limiter): `PROVIDER_RATE_PER_SEC` (the quota, default 100),
/// `LIMITER_NAME`, `LIMITER_BLOCK`, `LIMITER_NORMAL_AHEAD_MS`, `LIMITER_NEAR_HOLD_MS`,
/// `LIMITER_NORMAL_FILL_MS`, `LIMITER_SLOT_VALIDITY_MS`, `REDRIVE_SHARE`, `TENANT_SHARE` (unset:
/// no per-tenant cap).
pub fn limiter_settings<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
) -> Result<punctual_core::limiter::LimiterSettings, ConfigError> {
    let quota = env.parse("PROVIDER_RATE_PER_SEC", 100.0, "calls per second in (0, 100000]", |v: &f64| {
        *v > 0.0 && *v <= 100_000.0
    })?;
    let mut s = punctual_core::limiter::LimiterSettings::new(quota);
    let share = |v: &f64| *v > 0.0 && *v <= 1.0;
    if let Some(name) = env.optional("LIMITER_NAME") {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(ConfigError::Invalid { name: "LIMITER_NAME", value: name, expected: "[A-Za-z0-9._-]+" });
        }
        s.name = name;
    }
    s.block = env.parse("LIMITER_BLOCK", s.block, "slots per booking in 1..=100", |v| (1..=100).contains(v))?;
    let (ms, sec) = (Duration::from_millis, Duration::from_secs);
    s.normal_ahead =
        env.millis("LIMITER_NORMAL_AHEAD_MS", s.normal_ahead, ms(10), sec(60), "milliseconds in 10..=60000")?;
    s.near_hold = env.millis("LIMITER_NEAR_HOLD_MS", s.near_hold, ms(0), sec(60), "milliseconds in 0..=60000")?;
    s.normal_fill = env.millis("LIMITER_NORMAL_FILL_MS", s.normal_fill, ms(0), sec(10), "milliseconds in 0..=10000")?;
    // At least 10 ms: the runtime's timers wake a millisecond or two late, so a shorter window
    // would strand most slots.
    s.validity = env.millis("LIMITER_SLOT_VALIDITY_MS", s.validity, ms(10), sec(1), "milliseconds in 10..=1000")?;
    s.redrive_share = env.parse("REDRIVE_SHARE", s.redrive_share, "a fraction in (0, 1]", share)?;
    s.tenant_share = match env.optional("TENANT_SHARE") {
        None => None,
        Some(_) => Some(env.parse("TENANT_SHARE", 1.0, "a fraction in (0, 1]", share)?),
    };
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Env<impl Fn(&str) -> Option<String>> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Env::new(move |k: &str| map.get(k).cloned())
    }

    /// Channel names whose variables would overlap are refused, naming both.
    #[test]
    fn channels_whose_variables_overlap_are_refused() {
        let names = |list: &'static str| {
            channel_names(&Env::new(move |k: &str| (k == "CHANNELS").then(|| list.to_owned())))
                .map_err(|e| e.to_string())
        };
        assert_eq!(names("email,sms-us,sms-eu").unwrap(), ["email", "sms-us", "sms-eu"]);
        let e = names("sms,sms-urgent").unwrap_err();
        assert!(e.contains("sms and sms-urgent") && e.contains("CHANNEL_SMS_URGENT_"), "{e}");
        assert!(names("sms,sms").is_err(), "declared twice");
    }

    /// A channel's own urgent lane is read beside its queue; one without the queue is refused,
    /// naming both variables.
    #[test]
    fn a_channels_urgent_lane_is_read_only_beside_its_queue() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            Env::new(move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned()))
        };
        let lanes = lane_config(&vars(&[
            ("CHANNELS", "email,sms"),
            ("CHANNEL_SMS_QUEUE_URL", "http://127.0.0.1:1/sms"),
            ("CHANNEL_SMS_URGENT_QUEUE_URL", "http://127.0.0.1:1/sms-urgent"),
        ]))
        .unwrap();
        assert_eq!(lanes.channel_queues, [("sms".to_owned(), "http://127.0.0.1:1/sms".to_owned())]);
        assert_eq!(lanes.channel_urgent_queues, [("sms".to_owned(), "http://127.0.0.1:1/sms-urgent".to_owned())]);
        let Err(e) =
            lane_config(&vars(&[("CHANNELS", "sms"), ("CHANNEL_SMS_URGENT_QUEUE_URL", "http://127.0.0.1:1/u")]))
        else {
            panic!("an urgent lane without its queue was taken")
        };
        let e = e.to_string();
        assert!(e.contains("CHANNEL_SMS_URGENT_QUEUE_URL") && e.contains("CHANNEL_SMS_QUEUE_URL"), "{e}");
    }

    #[test]
    fn errors_name_the_variable_and_what_was_expected() {
        let e = env(&[("RATE", "fast"), ("EMPTY", " ")]);
        assert_eq!(e.required("QUEUE_URL"), Err(ConfigError::Missing("QUEUE_URL")));
        assert_eq!(e.required("EMPTY"), Err(ConfigError::Missing("EMPTY")));
        let err = e.parse::<f64>("RATE", 1.0, "a number of calls per second > 0", |v| *v > 0.0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable RATE=\"fast\" is invalid: expected a number of calls per second > 0"
        );
        assert_eq!(e.parse::<u32>("UNSET", 7, "x", |_| true), Ok(7));
        let ms = env(&[("T", "50")]).millis(
            "T",
            Duration::from_secs(1),
            Duration::from_millis(100),
            Duration::from_secs(5),
            "100..5000",
        );
        assert!(matches!(ms, Err(ConfigError::Invalid { name: "T", .. })));
    }
}
