//! Where an operator command acts, found one way for every command: flags, then the
//! environment (`SEND_QUEUE_URL`, `DLQ_URL`, `LEDGER_TABLE`, `RENEWALS_TABLE`, the names the
//! functions read; `AWS_ENDPOINT_URL[_DYNAMODB]` for an emulator), then the state file a
//! running `punctual local up` left behind (`PUNCTUAL_STATE_DIR`, default `target/local`).
//! With no endpoint they talk to AWS itself through the SDK's default chain.

use std::path::PathBuf;

use aws_config::SdkConfig;
use punctual_aws::config::{dynamodb_client, for_endpoint};
use punctual_aws::sqs::SqsQueues;
use punctual_lambda::config::{ConfigError, Env};
use punctual_redrive::config::RedriveConfig;
use serde::{Deserialize, Serialize};

use crate::OpsError;

/// A declared channel (`CHANNELS`, docs/design.md#channels): its own provider and quota.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChannelResources {
    /// The channel's name, as renewal rows give it.
    pub name: String,
    /// `http` or `ses`.
    pub kind: String,
    /// Its provider's quota, calls per second.
    pub quota: f64,
    /// Its HTTP provider (empty for SES).
    #[serde(default)]
    pub provider_url: String,
    /// Its own queue (empty: it shares the lanes).
    #[serde(default)]
    pub queue_url: String,
    /// Its own urgent lane (empty: none; its urgent work goes to its own queue, or the lanes).
    #[serde(default)]
    pub urgent_queue_url: String,
}

/// Queues, tables and endpoints of one deployment (or of `punctual local up`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// The emulator (empty: AWS itself).
    pub endpoint: String,
    /// Send queue (the normal lane).
    pub send_queue_url: String,
    /// The urgent lane (empty: one lane; a state file from before the urgent lane).
    #[serde(default)]
    pub urgent_queue_url: String,
    /// Dead-letter queue.
    pub dlq_url: String,
    /// Idempotency ledger.
    pub ledger_table: String,
    /// Renewals (with the `due` GSI).
    pub renewals_table: String,
    /// The provider (HTTP kind).
    pub provider_url: String,
    /// Where `recipient_ref` resolves to an address (empty: none; older state files).
    #[serde(default)]
    pub recipients_table: String,
    /// `http` or `ses` (empty: `http`).
    #[serde(default)]
    pub provider_kind: String,
    /// The declared channels (empty: none, one provider for every renewal).
    #[serde(default)]
    pub channels: Vec<ChannelResources>,
    /// Where producers send renewal commands (empty: not known; `COMMANDS_QUEUE_URL`).
    #[serde(default)]
    pub commands_queue_url: String,
    /// Where the ingest function sends the commands it cannot apply (`COMMANDS_DLQ_URL`).
    #[serde(default)]
    pub commands_dlq_url: String,
    /// `punctual local` only: the stand-in for the outcome bus, each message the whole
    /// EventBridge event as a rule's SQS target delivers it.
    #[serde(default)]
    pub outcomes_queue_url: String,
}

impl Resources {
    /// True when the pipeline sends through Amazon SES (with channels: any channel does).
    pub fn is_ses(&self) -> bool {
        self.provider_kind == "ses" || self.channels.iter().any(|c| c.kind == "ses")
    }
}

impl Resources {
    /// The declared channel `name`, or why a `--channel` naming it is refused (`otherwise`: what
    /// to do instead when the deployment declares no channels).
    pub fn declared_channel(&self, name: &str, otherwise: &str) -> Result<&ChannelResources, OpsError> {
        self.channels.iter().find(|c| c.name == name).ok_or_else(|| {
            let declared: Vec<&str> = self.channels.iter().map(|c| c.name.as_str()).collect();
            OpsError::Invalid(vec![if declared.is_empty() {
                format!("--channel {name}: this deployment declares no channels (CHANNELS is unset); {otherwise}")
            } else {
                format!("--channel {name}: not a declared channel (declared: {})", declared.join(", "))
            }])
        })
    }

    /// The declared channel `name`'s quota, or why it is not known here (read from the
    /// environment without a positive `CHANNEL_{NAME}_PROVIDER_RATE_PER_SEC`).
    pub fn channel_quota(&self, name: &str) -> Result<f64, OpsError> {
        let c = self.declared_channel(name, "every renewal goes through the one provider: leave out --channel")?;
        if c.quota > 0.0 {
            return Ok(c.quota);
        }
        Err(OpsError::Invalid(vec![format!(
            "--channel {name}: its quota is not known here (set {}PROVIDER_RATE_PER_SEC to its calls per second, or give --quota)",
            punctual_lambda::config::channel_prefix(name)
        )]))
    }

    /// The urgent lane's URL, when it has a queue of its own.
    pub fn urgent_url(&self) -> Option<&str> {
        Some(self.urgent_queue_url.as_str()).filter(|u| !u.is_empty())
    }

    /// Both lanes and the DLQ over `client`, and each channel's own queue and urgent lane.
    pub fn queues(&self, client: aws_sdk_sqs::Client) -> SqsQueues {
        let own = |url: fn(&ChannelResources) -> &str| -> Vec<(String, String)> {
            self.channels.iter().filter(|c| !url(c).is_empty()).map(|c| (c.name.clone(), url(c).to_owned())).collect()
        };
        SqsQueues::new(client, &self.send_queue_url, &self.dlq_url)
            .with_urgent(self.urgent_url())
            .with_channel_queues(&own(|c| &c.queue_url))
            .with_channel_urgent_queues(&own(|c| &c.urgent_queue_url))
    }

    /// The declared channels' variables, as a deployment gives them to its functions
    /// (docs/configuration.md#channels): `CHANNELS`, and each channel's
    /// `CHANNEL_{NAME}_QUEUE_URL`, `CHANNEL_{NAME}_URGENT_QUEUE_URL` and
    /// `CHANNEL_{NAME}_PROVIDER_RATE_PER_SEC` that it has (empty without channels).
    pub fn channel_vars(&self) -> std::collections::HashMap<String, String> {
        let mut vars = std::collections::HashMap::new();
        if !self.channels.is_empty() {
            vars.insert(
                "CHANNELS".to_owned(),
                self.channels.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(","),
            );
        }
        for c in &self.channels {
            let p = punctual_lambda::config::channel_prefix(&c.name);
            let own = [
                ("QUEUE_URL", c.queue_url.clone()),
                ("URGENT_QUEUE_URL", c.urgent_queue_url.clone()),
                ("PROVIDER_RATE_PER_SEC", if c.quota > 0.0 { c.quota.to_string() } else { String::new() }),
            ];
            vars.extend(own.into_iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (format!("{p}{k}"), v)));
        }
        vars
    }
}

/// What `local up` leaves behind for `drain`, `down` and the operator commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LocalState {
    /// Endpoints and names.
    #[serde(flatten)]
    pub resources: Resources,
    /// dynalite's endpoint when it runs beside moto.
    pub dynamodb_endpoint: Option<String>,
    /// Processes to stop on `down`.
    pub pids: Vec<u32>,
    /// The same processes by name (`moto`, `dynalite`, `provider-double`), for the CPU reading
    /// of `local drain` (absent in a state file written before it was kept).
    #[serde(default)]
    pub processes: std::collections::BTreeMap<String, u32>,
    /// Each process's start time (`/proc/PID/stat` field 22, clock ticks after boot), so a pid
    /// the kernel has since given to another process is not signalled or measured as ours
    /// (absent in a state file written before it was kept: those pids are trusted as before).
    #[serde(default)]
    pub pid_starts: std::collections::BTreeMap<u32, u64>,
    /// The double's bearer token (a throwaway local value, not a credential).
    pub provider_token: String,
    /// Provider quota, calls/s.
    pub quota: f64,
}

impl LocalState {
    /// Whether `pid` is still the process `local up` started: its start time is the one
    /// recorded (a pid reused after a crash or a reboot has another), or none was recorded.
    pub fn is_ours(&self, pid: u32) -> bool {
        match self.pid_starts.get(&pid) {
            Some(recorded) => process_start(pid) == Some(*recorded),
            None => true,
        }
    }
}

/// A process's start time, clock ticks after boot (`/proc/PID/stat` field 22); `None` when the
/// process is gone or this is not Linux.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_fields(&stat)?.nth(19)?.parse().ok()
}

/// The fields of one `/proc/PID/stat` line from field 3 (the state) on. The command name (field
/// 2) may hold spaces and parentheses: fields are counted after its last closing parenthesis.
pub fn stat_fields(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat.rsplit_once(')')?.1.split_whitespace())
}

/// The state directory of `punctual local` (`PUNCTUAL_STATE_DIR`, default `target/local`).
pub fn state_dir() -> PathBuf {
    std::env::var_os("PUNCTUAL_STATE_DIR").map_or_else(|| PathBuf::from("target/local"), PathBuf::from)
}

/// The state file `local up` writes.
pub fn state_file() -> PathBuf {
    state_dir().join("state.json")
}

/// Why the local state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// No state: `local up` was not run (or `down` ran).
    #[error("no local pipeline is up (no {0}): run `punctual local up` first")]
    NotUp(String),
    /// The file is unreadable.
    #[error("the local state file {path} is unreadable")]
    Corrupt {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// Reads the state left by `local up`.
pub fn load_state() -> Result<LocalState, StateError> {
    let path = state_file();
    let text = std::fs::read_to_string(&path).map_err(|_| StateError::NotUp(path.display().to_string()))?;
    serde_json::from_str(&text).map_err(|source| StateError::Corrupt { path: path.display().to_string(), source })
}

/// Where the commands act.
#[derive(Debug, Clone)]
pub struct Target {
    /// Names and URLs.
    pub resources: Resources,
    /// A separate DynamoDB endpoint (dynalite beside moto).
    pub dynamodb_endpoint: Option<String>,
    /// Provider quota (for drain projections and the redrive cap).
    pub quota: f64,
}

impl Target {
    /// Resolves the target from `endpoint`, the environment, then the local state.
    pub fn resolve(endpoint: Option<&str>) -> Result<Self, OpsError> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let local = load_state().ok();
        let quota = env("PROVIDER_RATE_PER_SEC")
            .and_then(|q| q.parse().ok())
            .or(local.as_ref().map(|l| l.quota))
            .unwrap_or(100.0);
        let endpoint = endpoint.map(str::to_owned).or_else(|| env("AWS_ENDPOINT_URL"));
        if let (Some(send), Some(dlq), Some(ledger), Some(renewals)) =
            (env("SEND_QUEUE_URL"), env("DLQ_URL"), env("LEDGER_TABLE"), env("RENEWALS_TABLE"))
        {
            return Ok(Self {
                resources: Resources {
                    endpoint: endpoint.unwrap_or_default(),
                    send_queue_url: send,
                    urgent_queue_url: env("URGENT_QUEUE_URL").unwrap_or_default(),
                    dlq_url: dlq,
                    ledger_table: ledger,
                    renewals_table: renewals,
                    provider_url: env("PROVIDER_URL").unwrap_or_default(),
                    recipients_table: env("RECIPIENTS_TABLE").unwrap_or_default(),
                    provider_kind: env("PROVIDER_KIND").unwrap_or_default(),
                    commands_queue_url: env("COMMANDS_QUEUE_URL").unwrap_or_default(),
                    commands_dlq_url: env("COMMANDS_DLQ_URL").unwrap_or_default(),
                    outcomes_queue_url: String::new(),
                    // Names, own queues and quotas (what `import`, `pause --channel`,
                    // `status`, `reconcile` and `forecast` need); the senders read each
                    // channel's provider.
                    channels: {
                        let env = punctual_lambda::config::process_env();
                        let names = punctual_lambda::config::channel_names(&env)
                            .map_err(|e| OpsError::Invalid(vec![e.to_string()]))?;
                        let lanes = punctual_lambda::config::lane_config(&env)
                            .map_err(|e| OpsError::Invalid(vec![e.to_string()]))?;
                        // Read as the functions read them: a bad value is refused, naming it.
                        let quotas = punctual_lambda::config::channel_quotas(&env, &names)
                            .map_err(|e| OpsError::Invalid(vec![e.to_string()]))?;
                        let url_of = |list: &[(String, String)], name: &str| {
                            list.iter().find(|(n, _)| n == name).map(|(_, u)| u.clone()).unwrap_or_default()
                        };
                        names
                            .into_iter()
                            .map(|name| ChannelResources {
                                // Its quota (`forecast --channel`'s default; 0: not set here).
                                quota: quotas.iter().find(|(n, _)| *n == name).map_or(0.0, |(_, q)| *q),
                                queue_url: url_of(&lanes.channel_queues, &name),
                                urgent_queue_url: url_of(&lanes.channel_urgent_queues, &name),
                                name,
                                ..ChannelResources::default()
                            })
                            .collect()
                    },
                },
                dynamodb_endpoint: env("AWS_ENDPOINT_URL_DYNAMODB"),
                quota,
            });
        }
        let local = local.ok_or(OpsError::NoTarget)?;
        let mut resources = local.resources.clone();
        if let Some(e) = endpoint {
            resources.endpoint = e;
        }
        Ok(Self { resources, dynamodb_endpoint: local.dynamodb_endpoint.clone(), quota })
    }

    /// The SDK configuration for this target.
    pub async fn sdk_config(&self) -> SdkConfig {
        if self.resources.endpoint.is_empty() {
            punctual_aws::config::load().await
        } else {
            for_endpoint(&self.resources.endpoint).await
        }
    }

    /// A DynamoDB client and the target's queues.
    pub async fn clients(&self) -> (aws_sdk_dynamodb::Client, SqsQueues) {
        let config = self.sdk_config().await;
        let ddb = dynamodb_client(&config, self.dynamodb_endpoint.as_deref());
        (ddb, self.resources.queues(aws_sdk_sqs::Client::new(&config)))
    }

    /// The redrive function's configuration for this target, read exactly as the function
    /// reads its own (`RedriveConfig::from_env`): the environment's `REDRIVE_*`, `LIMITER_*`
    /// and `PROVIDER_RATE_PER_SEC` (else the target's quota), the target's queues and table —
    /// so an in-process redrive gets the same caps and the same validation as the Lambda.
    pub fn redrive_config(&self) -> Result<RedriveConfig, ConfigError> {
        let r = self.resources.clone();
        let quota = self.quota.to_string();
        // The target's channels, as the function is given them: their queues (a channel's
        // letters go back there) and quotas (its letters' cap), unless the environment says.
        let own = r.channel_vars();
        RedriveConfig::from_env(&Env::new(move |k: &str| match k {
            "SEND_QUEUE_URL" => Some(r.send_queue_url.clone()),
            "URGENT_QUEUE_URL" => r.urgent_url().map(str::to_owned),
            "DLQ_URL" => Some(r.dlq_url.clone()),
            "LEDGER_TABLE" => Some(r.ledger_table.clone()),
            "PROVIDER_RATE_PER_SEC" => {
                Some(std::env::var(k).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| quota.clone()))
            }
            _ => std::env::var(k).ok().filter(|v| !v.is_empty()).or_else(|| own.get(k).cloned()),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(pids: &[u32], pid_starts: &[(u32, u64)]) -> LocalState {
        LocalState {
            resources: Resources::default(),
            dynamodb_endpoint: None,
            pids: pids.to_vec(),
            processes: std::collections::BTreeMap::new(),
            pid_starts: pid_starts.iter().copied().collect(),
            provider_token: String::new(),
            quota: 1.0,
        }
    }

    /// A pid the kernel gave to another process since `local up` is not ours: `down` must not
    /// signal it, `drain` must not measure it as an emulator.
    #[test]
    fn a_reused_pid_is_not_ours() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let started = process_start(pid).expect("a live process has a start time on Linux");
        assert!(state(&[pid], &[(pid, started)]).is_ours(pid), "the recorded process");
        assert!(!state(&[pid], &[(pid, started + 1)]).is_ours(pid), "another process under the same pid");
        assert!(state(&[pid], &[]).is_ours(pid), "a state file from before start times were kept");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!state(&[pid], &[(pid, started)]).is_ours(pid), "a process that is gone");
    }
}
