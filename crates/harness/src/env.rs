//! The local environment of `punctual run` and `punctual local`: an AWS API emulator on
//! loopback (the one at `AWS_ENDPOINT_URL`, or a pinned moto server started here), the
//! resources the functions use, and SDK configuration pointing at them.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_sdk_sqs::types::QueueAttributeName;
use punctual_aws::config::dynamodb_client;
use punctual_lambda::config::{ConfigError, Env};
use punctual_ops::Resources;
use punctual_scheduler::config::SchedulerConfig;
use punctual_sender::config::SenderConfig;

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
    Ok(free_ports(1)?[0])
}

/// `n` distinct free loopback ports, chosen while all `n` are held. Picked one at a time, the
/// second could be the first again while the process meant for the first was still starting:
/// moto (Python, a second to bind) lost its port to dynalite (node, fast), the harness's TCP
/// check found dynalite there, and `make run` sent its SQS calls to dynalite
/// (UnknownOperationException, seen on a fresh clone).
pub fn free_ports(n: usize) -> Result<Vec<u16>, EnvError> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").map_err(io("binding a loopback port")))
        .collect::<Result<_, _>>()?;
    held.iter().map(|l| Ok(l.local_addr().map_err(io("reading a loopback port"))?.port())).collect()
}

fn moto_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PUNCTUAL_MOTO_SERVER") {
        return Some(PathBuf::from(p));
    }
    // ./.venv (make run from the repo), then the venv next to the binary's workspace; in each,
    // punctual-moto (moto_server with SQS sends in constant time: tools/moto says why), else
    // moto's own server.
    let mut venvs = vec![PathBuf::from(".venv")];
    if let Ok(exe) = std::env::current_exe() {
        venvs.extend(exe.ancestors().skip(1).take(4).map(|dir| dir.join(".venv")));
    }
    venvs.iter().flat_map(|v| [v.join("bin/punctual-moto"), v.join("bin/moto_server")]).find(|p| p.is_file())
}

/// The emulator endpoint, and the processes this command started.
#[derive(Debug)]
pub struct Emulator {
    /// The endpoint URL (every service).
    pub endpoint: String,
    /// A separate DynamoDB endpoint (dynalite), when one was started.
    pub dynamodb_endpoint: Option<String>,
    children: Vec<Child>,
    detached: Vec<u32>,
}

/// dynalite's launcher and its installed module (`make tools` puts it in `.tools/dynalite`),
/// looked up from the working directory, then from the binary's ancestors (a `target/`
/// binary run from elsewhere). `PUNCTUAL_DYNALITE=0` leaves DynamoDB on the one emulator.
fn dynalite() -> Option<PathBuf> {
    if std::env::var("PUNCTUAL_DYNALITE").is_ok_and(|v| v == "0") {
        return None;
    }
    let mut roots = vec![PathBuf::from(".")];
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).take(4).map(PathBuf::from));
    }
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !node {
        return None;
    }
    roots.into_iter().map(|r| r.join("tools/dynalite/serve.js")).find(|launcher| {
        launcher.is_file()
            && launcher
                .parent()
                .and_then(|t| t.parent())
                .and_then(|t| t.parent())
                .is_some_and(|root| root.join(".tools/dynalite/node_modules/dynalite").is_dir())
    })
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
    /// it dynalite for DynamoDB when Node.js and `.tools/dynalite` are there (moto is one
    /// single-threaded Python process, ≈200 conditional updates/s, and loses concurrent
    /// conditional writes; dynalite serves ≈3,300/s in its own process and locks per key).
    /// `detach` leaves them running after this process exits.
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
        let ports = free_ports(2)?;
        let (port, dport) = (ports[0], ports[1]);
        // Owned while starting: a later step that fails stops what this one started (a
        // `Child` dropped does not kill its process).
        let mut children = Started(vec![spawn(
            Command::new(&bin).args(["-H", "127.0.0.1", "-p", &port.to_string()]).stderr(log("moto.log")?),
            "moto server",
        )?]);
        let mut dynamodb_endpoint = None;
        if let Some(launcher) = dynalite() {
            children.0.push(spawn(
                Command::new("node").arg(&launcher).arg(dport.to_string()).stderr(log("dynalite.log")?),
                "dynalite",
            )?);
            wait_port(dport, "dynalite")?;
            dynamodb_endpoint = Some(format!("http://127.0.0.1:{dport}"));
        }
        wait_port(port, "moto server")?;
        let endpoint = format!("http://127.0.0.1:{port}");
        let mut children = std::mem::take(&mut children.0);
        let detached = if detach { children.drain(..).map(|c| c.id()).collect() } else { Vec::new() };
        Ok(Self { endpoint, dynamodb_endpoint, children, detached })
    }

    /// The pids of the processes this command started (owned or detached).
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).chain(self.detached.iter().copied()).collect()
    }

    /// The processes this command started, by name (`moto`, then `dynalite` when started):
    /// what the run's CPU reading measures.
    pub fn named_pids(&self) -> Vec<(&'static str, u32)> {
        ["moto", "dynalite"].into_iter().zip(self.pids()).collect()
    }

    /// A DynamoDB client for this environment.
    pub fn dynamodb(&self, config: &SdkConfig) -> aws_sdk_dynamodb::Client {
        dynamodb_client(config, self.dynamodb_endpoint.as_deref())
    }
}

/// Processes being started: killed if the start fails half-way.
struct Started(Vec<Child>);

impl Drop for Started {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Stops processes by pid (SIGTERM; `kill` from the system: no signal code of our own).
pub fn stop_pids(pids: &[u32]) {
    for pid in pids {
        let _ = Command::new("kill").arg(pid.to_string()).stderr(Stdio::null()).status();
    }
}

/// Which signal stopped a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT: a terminal's Ctrl-C, a supervisor's `kill -INT`.
    Int,
    /// SIGTERM: what `timeout`, CI runners and `docker stop` send.
    Term,
}

impl Stop {
    /// The shell's convention: 128 + the signal's number (130, 143).
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Int => 130,
            Self::Term => 143,
        }
    }
}

/// Resolves on SIGINT or SIGTERM, whichever comes first, saying which.
pub async fn shutdown_signal() -> Stop {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            return tokio::select! {
                _ = tokio::signal::ctrl_c() => Stop::Int,
                _ = term.recv() => Stop::Term,
            };
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    Stop::Int
}

impl Drop for Emulator {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The sender as `punctual run`, `local drain` and `canary` compose it: the sender Lambda's
/// own composition root ([`punctual_sender::app::build`]) over the local resources.
pub type LocalSender = punctual_sender::app::App;

/// The declared channels' variables every function reads ([`Resources::channel_vars`]: the
/// quota reaches the scheduler too, which paces and projects each channel at it), for the
/// channels whose provider this target knows (`run --channels`): an environment target's
/// `CHANNELS` gives names alone, and its canary sends through the target's one provider as
/// before.
fn channel_vars(r: &Resources) -> std::collections::HashMap<String, String> {
    let known: Vec<_> = r.channels.iter().filter(|c| !c.kind.is_empty()).cloned().collect();
    Resources { channels: known, ..r.clone() }.channel_vars()
}

/// The sender configuration the local pipeline runs with, parsed by the sender's own
/// `SenderConfig::from_env` from the local resources and `quota` (everything else: the
/// function's defaults), with the pause switch re-read every 2 s instead of 5.
pub fn sender_config(res: &Resources, quota: f64) -> Result<SenderConfig, ConfigError> {
    let r = res.clone();
    let quota = quota.to_string();
    // Each declared channel's own variables, as a deployment sets them (docs/configuration.md#channels).
    let mut own = channel_vars(&r);
    for c in r.channels.iter().filter(|c| !c.kind.is_empty()) {
        let p = punctual_sender::config::channel_prefix(&c.name);
        own.insert(format!("{p}PROVIDER_KIND"), c.kind.clone());
        if c.kind == "ses" {
            own.insert(format!("{p}SES_FROM_ADDRESS"), crate::ses::LOCAL_FROM.into());
            own.insert(format!("{p}SES_CONTENT"), "inline".into());
        } else {
            own.insert(format!("{p}PROVIDER_URL"), c.provider_url.clone());
        }
    }
    let mut config = SenderConfig::from_env(&Env::new(move |k: &str| match k {
        _ if own.contains_key(k) => own.get(k).cloned(),
        "SEND_QUEUE_URL" => Some(r.send_queue_url.clone()),
        "URGENT_QUEUE_URL" => r.urgent_url().map(str::to_owned),
        "DLQ_URL" => Some(r.dlq_url.clone()),
        "LEDGER_TABLE" => Some(r.ledger_table.clone()),
        "RENEWALS_TABLE" => Some(r.renewals_table.clone()),
        "PROVIDER_URL" => Some(r.provider_url.clone()),
        "PROVIDER_RATE_PER_SEC" => Some(quota.clone()),
        "PROVIDER_KIND" if r.is_ses() => Some("ses".into()),
        "SES_FROM_ADDRESS" if r.is_ses() => Some(crate::ses::LOCAL_FROM.into()),
        // moto has no stored templates (docs/commands.md#punctual-local-up--drain--down).
        "SES_CONTENT" if r.is_ses() => Some("inline".into()),
        "RECIPIENTS_TABLE" if r.is_ses() => Some(r.recipients_table.clone()),
        _ => None,
    }))?;
    config.pause_check = Duration::from_secs(2);
    Ok(config)
}

/// One sender per simulated sender execution environment, each built by the sender's
/// composition root with its own clients' limiter handle (its own pool of booked slots, its
/// own count of writes) on the one shared schedule, as `instances` Lambda instances would.
pub fn local_senders(
    config: &SenderConfig,
    ddb: &aws_sdk_dynamodb::Client,
    sqs: &aws_sdk_sqs::Client,
    providers: &LocalProviders,
    seed: u64,
    instances: usize,
) -> Vec<std::sync::Arc<LocalSender>> {
    (0..instances.max(1) as u64)
        .map(|i| {
            let clients = punctual_sender::app::Clients {
                dynamodb: ddb.clone(),
                sqs: sqs.clone(),
                provider: providers.0.clone(),
                channels: providers.1.clone(),
            };
            std::sync::Arc::new(punctual_sender::app::build(config, clients, seed ^ i))
        })
        .collect()
}

/// Where the shared limiter's writes went, summed over local sender instances: what the
/// writes per call are made of (a booking buys `block` slots; a refused conditional write buys
/// none; a stranded slot is a booked call nobody made).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct LimiterBreakdown {
    /// Tokens granted (calls admitted).
    pub granted: u64,
    /// Bookings that succeeded.
    pub bookings: u64,
    /// Every write to the limiter's items (failed conditional writes, cuts and pauses too).
    pub writes: u64,
    /// Writes that booked nothing: refused or raced conditional writes, cuts, pauses.
    pub other_writes: u64,
    /// Slots booked and never used.
    pub stranded: u64,
    /// Requests denied (the sender deferred them).
    pub denied: u64,
    /// Reads of the schedule before a normal booking while deadline-near work was active.
    pub peeks: u64,
    /// Bookings refused, by lane (normal, deadline-near, capped): each a write that bought nothing.
    pub refused: [u64; 3],
    /// Slots by how late their call went: under 10 ms, 10–25, 25–50, 50 and over
    /// ([`punctual_core::limiter::LimiterStats::late`]).
    pub late_ms: [u64; 4],
    /// The latest call after its slot, ms.
    pub late_max_ms: u64,
}

impl LimiterBreakdown {
    /// Sums the instances' limiter statistics (each declared channel's limiter too).
    pub fn of(instances: &[std::sync::Arc<LocalSender>]) -> Self {
        use punctual_core::limiter::SlotStore;
        let mut b = Self::default();
        let limiters = instances
            .iter()
            .flat_map(|d| std::iter::once(d.sender.limiter()).chain(d.sender.channels().iter().map(|c| &c.limiter)));
        for limiter in limiters {
            let s = limiter.stats();
            b.granted += s.granted;
            b.bookings += s.bookings;
            b.stranded += s.stranded;
            b.denied += s.denied;
            b.peeks += s.peeks;
            b.refused[0] += s.refused_normal;
            b.refused[1] += s.refused_near;
            b.refused[2] += s.refused_cap;
            for (sum, n) in b.late_ms.iter_mut().zip(s.late) {
                *sum += n;
            }
            b.late_max_ms = b.late_max_ms.max(s.late_max_ms);
            b.writes += limiter.store().writes();
        }
        b.other_writes = b.writes.saturating_sub(b.bookings);
        b
    }

    /// Writes ÷ tokens granted.
    pub fn writes_per_call(&self) -> f64 {
        if self.granted > 0 { self.writes as f64 / self.granted as f64 } else { 0.0 }
    }
}

/// The redrive configuration the local pipeline runs with, parsed by the redrive function's
/// own `RedriveConfig::from_env` from the local resources and `quota` (its caps: the defaults,
/// the rate within the redrive share of `quota`).
pub fn redrive_config(res: &Resources, quota: f64) -> Result<punctual_redrive::config::RedriveConfig, ConfigError> {
    let r = res.clone();
    let quota = quota.to_string();
    let own = channel_vars(&r);
    punctual_redrive::config::RedriveConfig::from_env(&Env::new(move |k: &str| match k {
        _ if own.contains_key(k) => own.get(k).cloned(),
        "SEND_QUEUE_URL" => Some(r.send_queue_url.clone()),
        "URGENT_QUEUE_URL" => r.urgent_url().map(str::to_owned),
        "DLQ_URL" => Some(r.dlq_url.clone()),
        "LEDGER_TABLE" => Some(r.ledger_table.clone()),
        "PROVIDER_RATE_PER_SEC" => Some(quota.clone()),
        _ => None,
    }))
}

/// The scheduler configuration the local pipeline runs with, parsed by the scheduler's own
/// `SchedulerConfig::from_env` from the local resources and `sustainable_rate`.
pub fn scheduler_config(res: &Resources, sustainable_rate: f64) -> Result<SchedulerConfig, ConfigError> {
    let r = res.clone();
    let rate = sustainable_rate.to_string();
    let own = channel_vars(&r);
    SchedulerConfig::from_env(&Env::new(move |k: &str| match k {
        _ if own.contains_key(k) => own.get(k).cloned(),
        "SEND_QUEUE_URL" => Some(r.send_queue_url.clone()),
        "URGENT_QUEUE_URL" => r.urgent_url().map(str::to_owned),
        "LEDGER_TABLE" => Some(r.ledger_table.clone()),
        "RENEWALS_TABLE" => Some(r.renewals_table.clone()),
        "SUSTAINABLE_RATE_PER_SEC" => Some(rate.clone()),
        _ => None,
    }))
}

/// The send queue's visibility timeout in local runs (seconds): the sender's records finish
/// well inside it; a record reported as failed reappears after it, as on AWS.
pub const VISIBILITY_TIMEOUT_SECS: u32 = 30;
/// `maxReceiveCount` of the send queue's redrive policy (crash backstop).
pub const MAX_RECEIVE_COUNT: u32 = 5;

/// Creates a channel's own queue and its own urgent lane, `{prefix}-{channel}` and
/// `{prefix}-{channel}-urgent` beside the lanes, redriving to the DLQ as they do, and returns
/// their URLs.
pub async fn provision_channel_queue(
    config: &SdkConfig,
    res: &Resources,
    channel: &str,
) -> Result<(String, String), EnvError> {
    let sqs = aws_sdk_sqs::Client::new(config);
    let dlq_arn = queue_arn(&sqs, &res.dlq_url).await?;
    let send = res.send_queue_url.rsplit('/').next().unwrap_or_default();
    let base = format!("{}-{channel}", send.strip_suffix("-send").unwrap_or(send));
    let queue = lane_queue(&sqs, base.clone(), &dlq_arn, "a channel's queue").await?;
    let urgent = lane_queue(&sqs, format!("{base}-urgent"), &dlq_arn, "a channel's urgent lane").await?;
    Ok((queue, urgent))
}

/// The ARN of the queue at `url`.
async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<String, EnvError> {
    Ok(sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| EnvError::Provision { what: "the DLQ's ARN".into(), source: Box::new(e) })?
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .unwrap_or_default())
}

/// Creates a queue the sender drains (a lane, or a channel's own), redriving to `dlq_arn`.
async fn lane_queue(sqs: &aws_sdk_sqs::Client, name: String, dlq_arn: &str, what: &str) -> Result<String, EnvError> {
    sqs.create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::VisibilityTimeout, VISIBILITY_TIMEOUT_SECS.to_string())
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!("{{\"deadLetterTargetArn\":\"{dlq_arn}\",\"maxReceiveCount\":\"{MAX_RECEIVE_COUNT}\"}}"),
        )
        .send()
        .await
        .map_err(|e| EnvError::Provision { what: what.to_owned(), source: Box::new(e) })
        .map(|o| o.queue_url.unwrap_or_default())
}

/// Creates queues and tables named `{prefix}-send`, `{prefix}-urgent` (the two lanes, both
/// redriving to the DLQ), `{prefix}-dlq`, `{prefix}-ledger`, `{prefix}-renewals`.
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
    // A queue without a redrive policy, kept 14 days (the DLQs, the outcomes queue).
    let plain = |name: String, what: &'static str| {
        let sqs = sqs.clone();
        async move {
            sqs.create_queue()
                .queue_name(name)
                .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
                .send()
                .await
                .map_err(|e| EnvError::Provision { what: what.to_owned(), source: Box::new(e) })
                .map(|o| o.queue_url.unwrap_or_default())
        }
    };
    let dlq_url = plain(format!("{prefix}-dlq"), "the DLQ").await?;
    let dlq_arn = queue_arn(&sqs, &dlq_url).await?;
    let send_queue_url = lane_queue(&sqs, format!("{prefix}-send"), &dlq_arn, "the send queue").await?;
    let urgent_queue_url = lane_queue(&sqs, format!("{prefix}-urgent"), &dlq_arn, "the urgent lane's queue").await?;
    let ledger_table = format!("{prefix}-ledger");
    let renewals_table = format!("{prefix}-renewals");
    let recipients_table = format!("{prefix}-recipients");
    punctual_aws::ledger::create_table(ddb, &ledger_table).await.map_err(|e| p("the ledger table")(Box::new(e)))?;
    punctual_aws::recipients::create_table(ddb, &recipients_table)
        .await
        .map_err(|e| p("the recipients table")(Box::new(e)))?;
    punctual_aws::renewals::create_table(ddb, &renewals_table)
        .await
        .map_err(|e| p("the renewals table")(Box::new(e)))?;
    // The producers' side: the commands queue (five receives, then its own DLQ, as the
    // template's) and the stand-in for the outcome bus.
    let commands_dlq_url = plain(format!("{prefix}-commands-dlq"), "the commands DLQ").await?;
    let commands_dlq_arn = queue_arn(&sqs, &commands_dlq_url).await?;
    let commands_queue_url =
        lane_queue(&sqs, format!("{prefix}-commands"), &commands_dlq_arn, "the commands queue").await?;
    let outcomes_queue_url = plain(format!("{prefix}-outcomes"), "the outcomes queue").await?;
    Ok(Resources {
        commands_queue_url,
        commands_dlq_url,
        outcomes_queue_url,
        endpoint: String::new(),
        send_queue_url,
        urgent_queue_url,
        dlq_url,
        ledger_table,
        renewals_table,
        provider_url: provider_url.to_owned(),
        recipients_table,
        provider_kind: "http".into(),
        channels: Vec::new(),
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

/// The local senders' providers: their own, and each declared channel's (in the order of
/// `SenderConfig::channels`).
pub type LocalProviders = (punctual_sender::app::AnyProvider, Vec<punctual_sender::app::AnyProvider>);

/// The provider clients the local pipeline's senders use: the HTTP client for a double (with
/// its local `token`), or SES on the emulator with the recipients table; one per declared
/// channel, each to its own provider.
pub fn local_provider(
    sdk: &SdkConfig,
    ddb: &aws_sdk_dynamodb::Client,
    token: &punctual_core::secret::Secret,
    config: &SenderConfig,
) -> Result<LocalProviders, crate::HarnessError> {
    use punctual_sender::config::ProviderConfig;
    let one = |kind: &ProviderConfig| -> Result<punctual_sender::app::AnyProvider, crate::HarnessError> {
        match kind {
            ProviderConfig::Ses { settings, recipients_table, .. } => {
                Ok(punctual_sender::app::ses_provider(sdk, ddb.clone(), settings.clone(), recipients_table))
            }
            ProviderConfig::Http { url, .. } => {
                let http = punctual_provider::HttpProvider::new(url, token, Duration::from_secs(2))
                    .map_err(crate::step("building the provider client"))?;
                Ok(http.into())
            }
        }
    };
    let channels = config.channels.iter().map(|c| one(&c.provider)).collect::<Result<Vec<_>, _>>()?;
    // With channels declared, the first channel's stands as the default route no message takes.
    let own = match channels.first() {
        Some(first) => first.clone(),
        None => one(&config.provider)?,
    };
    Ok((own, channels))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests state their preconditions by unwrapping
    use super::*;

    /// Ports handed out together are distinct (the emulators of one run never share one).
    #[test]
    fn ports_chosen_together_are_distinct() {
        for _ in 0..50 {
            let p = free_ports(4).unwrap();
            let distinct: std::collections::HashSet<_> = p.iter().collect();
            assert_eq!(distinct.len(), 4, "{p:?}");
        }
    }
}
