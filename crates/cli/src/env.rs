//! The local environment of `punctual run` and `punctual local`: an AWS API emulator on
//! loopback (the one at `AWS_ENDPOINT_URL`, or a pinned moto server started here), the
//! resources the functions use, and SDK configuration pointing at them.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::config::Credentials;
use aws_sdk_sqs::types::QueueAttributeName;
use punctual_aws::dynamodb::create_pk_table;
use serde::{Deserialize, Serialize};

/// Why the local environment could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// No moto server to start.
    #[error(
        "no AWS_ENDPOINT_URL and no moto server found: run `make tools` (it installs the pinned moto into .venv), set PUNCTUAL_MOTO_SERVER to a moto_server binary, or point AWS_ENDPOINT_URL at an emulator"
    )]
    NoEmulator,
    /// moto did not start.
    #[error("moto server did not answer on {0} within 20 s")]
    EmulatorTimeout(String),
    /// A refused endpoint.
    #[error("AWS_ENDPOINT_URL={0} is not on loopback; punctual run only talks to a local emulator")]
    NotLoopback(String),
    /// Process or socket failure.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An AWS call while provisioning.
    #[error("provisioning {what} failed")]
    Provision {
        /// What.
        what: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EnvError {
    let what = what.into();
    move |source| EnvError::Io { what, source }
}

/// A free loopback port.
pub fn free_port() -> Result<u16, EnvError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io("binding a loopback port"))?;
    Ok(l.local_addr().map_err(io("reading a loopback port"))?.port())
}

fn moto_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PUNCTUAL_MOTO_SERVER") {
        return Some(PathBuf::from(p));
    }
    // ./.venv (make run from the repo), then the venv next to the binary's workspace.
    let mut candidates = vec![PathBuf::from(".venv/bin/moto_server")];
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(4) {
            candidates.push(dir.join(".venv/bin/moto_server"));
        }
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// The emulator endpoint, and the processes this command started.
#[derive(Debug)]
pub struct Emulator {
    /// The endpoint URL (every service).
    pub endpoint: String,
    /// A separate DynamoDB endpoint (DynamoDB Local), when one was started.
    pub dynamodb_endpoint: Option<String>,
    children: Vec<Child>,
    detached: Vec<u32>,
}

fn dynamodb_local_jar() -> Option<PathBuf> {
    if std::env::var("PUNCTUAL_DYNAMODB_LOCAL").is_ok_and(|v| v == "0") {
        return None;
    }
    let mut candidates = vec![PathBuf::from(".tools/dynamodb-local/DynamoDBLocal.jar")];
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(4) {
            candidates.push(dir.join(".tools/dynamodb-local/DynamoDBLocal.jar"));
        }
    }
    let java = Command::new("java")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !java {
        return None;
    }
    candidates.into_iter().find(|p| p.is_file())
}

fn wait_port(port: u16, what: &str) -> Result<(), EnvError> {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(20) {
            return Err(EnvError::EmulatorTimeout(format!("{what} on 127.0.0.1:{port}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

impl Emulator {
    /// Uses `AWS_ENDPOINT_URL` when set, else starts moto on a free loopback port, and beside
    /// it AWS's DynamoDB Local when Java and `.tools/dynamodb-local` are there (moto is one
    /// single-threaded Python process; DynamoDB Local in its own process doubles what the pair
    /// can serve on two cores). `detach` leaves them running after this process exits.
    pub fn start(log_dir: Option<&std::path::Path>, detach: bool) -> Result<Self, EnvError> {
        if let Ok(url) = std::env::var("AWS_ENDPOINT_URL") {
            let host = url.split("://").nth(1).unwrap_or(&url).split(['/', ':']).next().unwrap_or_default().to_owned();
            if !(host == "localhost" || host.starts_with("127.")) {
                return Err(EnvError::NotLoopback(url));
            }
            return Ok(Self { endpoint: url, dynamodb_endpoint: None, children: Vec::new(), detached: Vec::new() });
        }
        let log = |name: &str| -> Result<Stdio, EnvError> {
            match log_dir {
                Some(dir) => {
                    let path = dir.join(name);
                    Ok(Stdio::from(std::fs::File::create(&path).map_err(io(format!("creating {}", path.display())))?))
                }
                None => Ok(Stdio::null()),
            }
        };
        let spawn = |cmd: &mut Command, what: &str| -> Result<Child, EnvError> {
            #[cfg(unix)]
            if detach {
                use std::os::unix::process::CommandExt;
                cmd.process_group(0);
            }
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).spawn().map_err(io(format!("starting {what}")))
        };
        let bin = moto_binary().ok_or(EnvError::NoEmulator)?;
        let port = free_port()?;
        let mut children = vec![spawn(
            Command::new(&bin).args(["-H", "127.0.0.1", "-p", &port.to_string()]).stderr(log("moto.log")?),
            "moto server",
        )?];
        let mut dynamodb_endpoint = None;
        if let Some(jar) = dynamodb_local_jar() {
            let dport = free_port()?;
            let dir = jar.parent().map(PathBuf::from).unwrap_or_default();
            children.push(spawn(
                Command::new("java")
                    .current_dir(&dir)
                    .args(["-Xmx1g", "-Djava.library.path=DynamoDBLocal_lib", "-jar", "DynamoDBLocal.jar", "-inMemory"])
                    .args(["-port", &dport.to_string()])
                    .stderr(log("dynamodb-local.log")?),
                "DynamoDB Local",
            )?);
            wait_port(dport, "DynamoDB Local")?;
            dynamodb_endpoint = Some(format!("http://127.0.0.1:{dport}"));
        }
        wait_port(port, "moto server")?;
        let endpoint = format!("http://127.0.0.1:{port}");
        let detached = if detach { children.drain(..).map(|c| c.id()).collect() } else { Vec::new() };
        Ok(Self { endpoint, dynamodb_endpoint, children, detached })
    }

    /// The pids of the processes this command started (owned or detached).
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).chain(self.detached.iter().copied()).collect()
    }

    /// A DynamoDB client for this environment.
    pub fn dynamodb(&self, config: &SdkConfig) -> aws_sdk_dynamodb::Client {
        dynamodb_client(config, self.dynamodb_endpoint.as_deref())
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A DynamoDB client on `config`, at `endpoint` when DynamoDB runs apart from the rest.
pub fn dynamodb_client(config: &SdkConfig, endpoint: Option<&str>) -> aws_sdk_dynamodb::Client {
    match endpoint {
        Some(url) => aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(config).endpoint_url(url).build(),
        ),
        None => aws_sdk_dynamodb::Client::new(config),
    }
}

/// The sender as `punctual run` and `punctual local drain` compose it: the real adapters on
/// the local resources and the shared DynamoDB limiter, as the sender Lambda composes it.
pub type LocalDeps = punctual_sender::handler::Deps<
    punctual_aws::ledger::DynamoLedger,
    punctual_aws::renewals::DynamoRenewals,
    punctual_core::limiter::SharedLimiter<punctual_aws::limiter::DynamoSlotStore, punctual_lambda::SystemClock>,
    punctual_provider::HttpProvider,
    punctual_aws::sqs::SqsQueues,
    punctual_lambda::SystemClock,
>;

/// One sender per simulated sender execution environment: each has its own limiter
/// handle (its own pool of booked slots) on the one shared schedule, as `concurrency` Lambda
/// instances would. Returns them with the store all of them write to (for its write count).
pub fn local_senders(
    ddb: &aws_sdk_dynamodb::Client,
    res: &Resources,
    queues: &punctual_aws::sqs::SqsQueues,
    provider: &punctual_provider::HttpProvider,
    quota: f64,
    seed: u64,
    instances: usize,
) -> (Vec<std::sync::Arc<LocalDeps>>, punctual_aws::limiter::DynamoSlotStore) {
    let clock = punctual_lambda::SystemClock;
    let store = punctual_aws::limiter::DynamoSlotStore::new(ddb.clone(), &res.ledger_table);
    let senders = (0..instances.max(1) as u64)
        .map(|i| {
            let sender = punctual_core::sender::Sender::new(
                punctual_aws::ledger::DynamoLedger::new(ddb.clone(), &res.ledger_table),
                punctual_aws::renewals::DynamoRenewals::new(ddb.clone(), &res.renewals_table),
                punctual_core::limiter::SharedLimiter::new(
                    store.clone(),
                    clock,
                    punctual_core::limiter::LimiterSettings::new(quota),
                    seed ^ i,
                ),
                provider.clone(),
                queues.clone(),
                clock,
                punctual_core::sender::SenderSettings::default(),
                seed ^ (i << 32),
            );
            let control = punctual_aws::control::DynamoControl::new(ddb.clone(), &res.ledger_table);
            let pause = Some(punctual_core::redrive::PauseGate::new(control, std::time::Duration::from_secs(2)));
            std::sync::Arc::new(punctual_sender::handler::Deps { sender, concurrency: 10, pause })
        })
        .collect();
    (senders, store)
}

/// SDK configuration for `endpoint`: the environment's region and credentials when set,
/// else `us-east-1` and dummy keys (an emulator accepts any).
pub async fn sdk_config(endpoint: &str) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).endpoint_url(endpoint);
    if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
        loader = loader.region(Region::new("us-east-1"));
    }
    if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
        loader = loader.credentials_provider(Credentials::new("testing", "testing", None, None, "punctual-local"));
    }
    loader.load().await
}

/// What `punctual local up` and `punctual run` create, and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// The emulator.
    pub endpoint: String,
    /// Send queue.
    pub send_queue_url: String,
    /// Dead-letter queue.
    pub dlq_url: String,
    /// Idempotency ledger.
    pub ledger_table: String,
    /// Renewals (with the `due` GSI).
    pub renewals_table: String,
    /// The provider double.
    pub provider_url: String,
}

/// The send queue's visibility timeout in local runs (seconds): the sender's records finish
/// well inside it; a record reported as failed reappears after it, as on AWS.
pub const VISIBILITY_TIMEOUT_SECS: u32 = 30;
/// `maxReceiveCount` of the send queue's redrive policy (crash backstop).
pub const MAX_RECEIVE_COUNT: u32 = 5;

/// Creates queues and tables named `{prefix}-send`, `{prefix}-dlq`, `{prefix}-ledger`,
/// `{prefix}-renewals`.
pub async fn provision(
    config: &SdkConfig,
    ddb: &aws_sdk_dynamodb::Client,
    prefix: &str,
    provider_url: &str,
) -> Result<Resources, EnvError> {
    let p = |what: &str| {
        let what = what.to_owned();
        move |e: Box<dyn std::error::Error + Send + Sync>| EnvError::Provision { what, source: e }
    };
    let sqs = aws_sdk_sqs::Client::new(config);
    let dlq_url = sqs
        .create_queue()
        .queue_name(format!("{prefix}-dlq"))
        .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
        .send()
        .await
        .map_err(|e| p("the DLQ")(Box::new(e)))?
        .queue_url
        .unwrap_or_default();
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| p("the DLQ's ARN")(Box::new(e)))?
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .unwrap_or_default();
    let send_queue_url = sqs
        .create_queue()
        .queue_name(format!("{prefix}-send"))
        .attributes(QueueAttributeName::VisibilityTimeout, VISIBILITY_TIMEOUT_SECS.to_string())
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!("{{\"deadLetterTargetArn\":\"{dlq_arn}\",\"maxReceiveCount\":\"{MAX_RECEIVE_COUNT}\"}}"),
        )
        .send()
        .await
        .map_err(|e| p("the send queue")(Box::new(e)))?
        .queue_url
        .unwrap_or_default();
    let ledger_table = format!("{prefix}-ledger");
    let renewals_table = format!("{prefix}-renewals");
    create_pk_table(ddb, &ledger_table).await.map_err(|e| p("the ledger table")(Box::new(e)))?;
    punctual_aws::renewals::create_table(ddb, &renewals_table)
        .await
        .map_err(|e| p("the renewals table")(Box::new(e)))?;
    Ok(Resources {
        endpoint: String::new(),
        send_queue_url,
        dlq_url,
        ledger_table,
        renewals_table,
        provider_url: provider_url.to_owned(),
    })
}

/// Starts the provider double on a free loopback port with `quota` (burst 10) and a fresh
/// bearer token, returning both (`run` and `bench-limiter` share this).
pub async fn start_double(
    quota: f64,
    token: punctual_core::secret::Secret,
) -> std::io::Result<(punctual_provider_double::Double, punctual_core::secret::Secret)> {
    let double = punctual_provider_double::Double::start(
        punctual_provider_double::Config {
            quota,
            burst: 10.0,
            token: Some(token.expose().to_owned()),
            ..punctual_provider_double::Config::default()
        },
        0,
    )
    .await?;
    Ok((double, token))
}
