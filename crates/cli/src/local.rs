//! `punctual local up | drain | down`: leave the emulator and the provider double running so
//! a developer can poke the pipeline (AWS CLI, `punctual import`, hand-written messages), drain
//! what is queued through the real sender handler, and tear it all down.
//!
//! State lives in `$PUNCTUAL_STATE_DIR` (default `target/local`): `state.json` (endpoints,
//! names, pids, the double's local token) and the processes' logs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use punctual_aws::emf::Metrics;
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::renewals::DynamoRenewals;
use punctual_aws::sqs::{SqsQueues, attr};
use punctual_core::reason::ReminderState;
use punctual_core::scheduler::{ReleaseQueue, Scheduler, SchedulerSettings};
use punctual_core::secret::Secret;
use punctual_lambda::SystemClock;
use punctual_provider::HttpProvider;
use serde::{Deserialize, Serialize};

use crate::env::{Emulator, EnvError, Resources, dynamodb_client, free_port, local_senders, provision, sdk_config};
use crate::esm::{EsmStats, run_pollers};

/// What `local up` leaves behind for `drain` and `down`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LocalState {
    /// Endpoints and names.
    #[serde(flatten)]
    pub resources: Resources,
    /// DynamoDB Local's endpoint when it runs beside moto.
    pub dynamodb_endpoint: Option<String>,
    /// Processes to stop on `down`.
    pub pids: Vec<u32>,
    /// The double's bearer token (a throwaway local value, not a credential).
    pub provider_token: String,
    /// Provider quota, calls/s.
    pub quota: f64,
}

/// Why a local command failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// Environment.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// No state: `up` was not run.
    #[error("no local pipeline is up (no {0}): run `punctual local up` first")]
    NotUp(String),
    /// State exists: `up` twice.
    #[error("a local pipeline is already up ({0}); `punctual local down` first")]
    AlreadyUp(String),
    /// Anything else.
    #[error("{what}")]
    Step {
        /// What.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn step<E: std::error::Error + Send + Sync + 'static>(what: &'static str) -> impl FnOnce(E) -> LocalError {
    move |e| LocalError::Step { what, source: Box::new(e) }
}

/// The state directory.
pub fn state_dir() -> PathBuf {
    std::env::var_os("PUNCTUAL_STATE_DIR").map_or_else(|| PathBuf::from("target/local"), PathBuf::from)
}

fn state_file() -> PathBuf {
    state_dir().join("state.json")
}

/// Reads the state left by `up`.
pub fn load_state() -> Result<LocalState, LocalError> {
    let path = state_file();
    let text = std::fs::read_to_string(&path).map_err(|_| LocalError::NotUp(path.display().to_string()))?;
    serde_json::from_str(&text).map_err(step("reading the local state file"))
}

/// `local up`: start (or reuse) the emulator, start the provider double as its own process,
/// create the resources, seed three demo renewals, write the state file.
pub async fn up(quota: f64) -> Result<LocalState, LocalError> {
    let dir = state_dir();
    if state_file().exists() {
        return Err(LocalError::AlreadyUp(state_file().display().to_string()));
    }
    std::fs::create_dir_all(&dir).map_err(step("creating the state directory"))?;
    let emulator = Emulator::start(Some(&dir), true)?;
    let config = sdk_config(&emulator.endpoint).await;
    let ddb = emulator.dynamodb(&config);
    let token = format!("local-{:x}", Utc::now().timestamp_nanos_opt().unwrap_or_default());
    let port = free_port()?;
    let exe = std::env::current_exe().map_err(step("finding the punctual binary"))?;
    let log = std::fs::File::create(dir.join("provider-double.log")).map_err(step("creating the double's log"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["provider-double", "--port", &port.to_string(), "--quota", &quota.to_string(), "--token", &token])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log));
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let double = cmd.spawn().map_err(step("starting the provider double"))?;
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(10) {
            return Err(LocalError::Step { what: "the provider double did not start", source: "timeout".into() });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let provider_url = format!("http://127.0.0.1:{port}/v1/messages");
    let prefix = format!("punctual-local-{}", Utc::now().timestamp_millis());
    let mut resources = provision(&config, &ddb, &prefix, &provider_url).await?;
    resources.endpoint = emulator.endpoint.clone();
    // Demo renewals, so hand-written messages for them are delivered (see `demo_message`).
    let renewals = DynamoRenewals::new(ddb, &resources.renewals_table);
    for n in 0..DEMO_RENEWALS {
        let (tenant, renewal) = demo_ids(n);
        renewals
            .put(&tenant, &renewal, "active", &format!("demo-recipient-{n}"), "email")
            .await
            .map_err(step("seeding demo renewals"))?;
    }
    let mut pids = emulator.pids();
    pids.push(double.id());
    let state = LocalState {
        resources,
        dynamodb_endpoint: emulator.dynamodb_endpoint.clone(),
        pids,
        provider_token: token,
        quota,
    };
    std::fs::write(state_file(), serde_json::to_string_pretty(&state).unwrap_or_default())
        .map_err(step("writing the state file"))?;
    Ok(state)
}

/// Demo renewals `local up` seeds (`tenant-N` / `demo-N`).
pub const DEMO_RENEWALS: usize = 3;

fn demo_ids(n: usize) -> (punctual_core::TenantId, punctual_core::RenewalId) {
    let fallback = || punctual_core::TenantId::parse("tenant-0");
    let tenant = punctual_core::TenantId::parse(format!("tenant-{n}")).or_else(|_| fallback());
    let renewal = punctual_core::RenewalId::parse(format!("demo-{n}"));
    match (tenant, renewal) {
        (Ok(t), Ok(r)) => (t, r),
        // Unreachable: both formats are valid ids.
        _ => unreachable!("demo ids are valid"),
    }
}

/// A valid message body for demo renewal `n`, due now, for `aws sqs send-message`.
pub fn demo_message(n: usize) -> String {
    let now = Utc::now();
    let (tenant, renewal) = demo_ids(n);
    let mut m =
        punctual_core::testing::message(&format!("demo-{n}"), now - TimeDelta::minutes(1), now + TimeDelta::hours(4));
    m.reminder_id = punctual_core::ReminderId::derive(&tenant, &renewal, &m.kind, now.date_naive());
    m.tenant_id = tenant;
    m.renewal_id = renewal;
    m.encode()
}

/// Human description of a running local pipeline.
pub fn describe(s: &LocalState) -> String {
    let r = &s.resources;
    let mut out = format!(
        "endpoint          {}\n{}send_queue_url    {}\ndlq_url           {}\nledger_table      {}\nrenewals_table    {}\nprovider_url      {}\n",
        r.endpoint,
        s.dynamodb_endpoint.as_ref().map(|d| format!("dynamodb_endpoint {d}\n")).unwrap_or_default(),
        r.send_queue_url,
        r.dlq_url,
        r.ledger_table,
        r.renewals_table,
        r.provider_url
    );
    out.push_str(&format!(
        "\nTry it (dummy credentials are fine for the emulator):\n  export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1\n  aws --endpoint-url {} sqs send-message --queue-url {} --message-body '{}'\n  aws --endpoint-url {} sqs send-message --queue-url {} --message-body '{{\"v\":1}}'\n  punctual local drain\n  punctual local down\n",
        r.endpoint, r.send_queue_url, demo_message(0), r.endpoint, r.send_queue_url
    ));
    out
}

/// `local drain`'s report (the keys of `punctual run`'s report that apply).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DrainReport {
    /// Reminders the ledger knows plus messages quarantined as malformed.
    pub reminders: u64,
    /// Delivered.
    pub delivered: u64,
    /// Provider requests repeating an accepted key.
    pub duplicates: u64,
    /// Delivered at or after `deliver_by`.
    pub late: u64,
    /// Expired.
    pub expired: u64,
    /// Cancelled (renewal cancelled, paid or missing).
    pub cancelled: u64,
    /// DLQ contents by reason (read from the DLQ itself).
    pub dead_lettered: BTreeMap<String, u64>,
    /// Reminders in no terminal state and not in flight.
    pub lost: u64,
    /// Messages handed to the sender during this drain.
    pub records: u64,
    /// Seconds the drain took.
    pub drain_seconds: f64,
}

impl DrainReport {
    /// Human report.
    pub fn render(&self) -> String {
        let dlq: Vec<String> = self.dead_lettered.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "drained in {:.1} s ({} messages handled)\nreminders      {}\ndelivered      {}\ncancelled      {}\nexpired        {}\ndead-lettered  {}\nlate           {}\nduplicates     {}\nlost           {}\n",
            self.drain_seconds,
            self.records,
            self.reminders,
            self.delivered,
            self.cancelled,
            self.expired,
            if dlq.is_empty() { "0".to_owned() } else { dlq.join(", ") },
            self.late,
            self.duplicates,
            self.lost
        )
    }
}

/// `local drain`: run the scheduler and the event source mapping until the send queue holds
/// nothing visible, in flight or delayed, then account for every reminder.
pub async fn drain(progress: bool) -> Result<DrainReport, LocalError> {
    let state = load_state()?;
    let r = &state.resources;
    let config = sdk_config(&r.endpoint).await;
    let ddb = dynamodb_client(&config, state.dynamodb_endpoint.as_deref());
    let queues = SqsQueues::new(aws_sdk_sqs::Client::new(&config), &r.send_queue_url, &r.dlq_url);
    let renewals = DynamoRenewals::new(ddb.clone(), &r.renewals_table);
    let clock = SystemClock;
    let provider =
        HttpProvider::new(&r.provider_url, &Secret::new(state.provider_token.clone()), Duration::from_secs(2))
            .map_err(step("building the provider client"))?;
    let (instances, _) = local_senders(&ddb, r, &queues, &provider, state.quota, 7, 10);
    let scheduler = Scheduler::new(renewals, queues.clone(), clock, SchedulerSettings::default());
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(EsmStats::default());
    let metrics = Arc::new(Mutex::new(Metrics::new()));
    let started = Instant::now();
    let pollers = run_pollers(instances, queues.clone(), Arc::clone(&stop), Arc::clone(&stats), Arc::clone(&metrics));
    let watch = async {
        let mut idle = 0;
        let mut last_tick = Instant::now() - Duration::from_secs(60);
        let result = loop {
            if last_tick.elapsed() >= crate::run::TICK {
                if let Err(e) = scheduler.tick(Utc::now() + TimeDelta::seconds(60)).await {
                    eprintln!("scheduler tick failed: {e}");
                }
                last_tick = Instant::now();
            }
            let depth = match queues.depth().await {
                Ok(d) => d,
                Err(e) => break Err(step("reading the queue depth")(e)),
            };
            if progress {
                eprint!(
                    "\rdraining  {:>5.1}s  in queue {depth:>6}  handled {:>6}   ",
                    started.elapsed().as_secs_f64(),
                    stats.records.load(Ordering::Relaxed)
                );
            }
            idle = if depth == 0 { idle + 1 } else { 0 };
            if idle >= 3 {
                break Ok(());
            }
            tokio::time::sleep(Duration::from_millis(700)).await;
        };
        stop.store(true, Ordering::Relaxed);
        result
    };
    let ((), watched) = tokio::join!(pollers, watch);
    watched?;
    if progress {
        eprintln!();
    }
    let records = DynamoLedger::new(ddb, &r.ledger_table).scan_all().await.map_err(step("reading the ledger"))?;
    let mut report = DrainReport {
        records: stats.records.load(Ordering::Relaxed),
        drain_seconds: started.elapsed().as_secs_f64(),
        ..DrainReport::default()
    };
    for rec in &records {
        match rec.state {
            ReminderState::Delivered => {
                report.delivered += 1;
                let at = rec.history.iter().rev().find(|h| h.state == ReminderState::Delivered).map(|h| h.at);
                if at.is_some_and(|at| at >= rec.deliver_by) {
                    report.late += 1;
                }
            }
            ReminderState::Expired => report.expired += 1,
            ReminderState::Cancelled => report.cancelled += 1,
            ReminderState::DeadLettered => {}
            _ => report.lost += 1,
        }
    }
    // The DLQ itself says what is in it; peek with a short visibility so it stays there.
    let mut seen = std::collections::HashSet::new();
    loop {
        let batch =
            queues.receive(queues.dlq_url(), 10, Duration::from_millis(0)).await.map_err(step("reading the DLQ"))?;
        let fresh: Vec<_> = batch.into_iter().filter(|m| seen.insert(m.message_id.clone())).collect();
        if fresh.is_empty() {
            break;
        }
        for m in &fresh {
            let reason = m
                .attributes
                .iter()
                .find(|(k, _)| k == attr::REASON)
                .map_or("receive_count_backstop", |(_, v)| v.as_str())
                .to_owned();
            *report.dead_lettered.entry(reason).or_default() += 1;
            let _ = queues.change_visibility(queues.dlq_url(), &m.receipt_handle, Duration::ZERO).await;
        }
    }
    let malformed = report.dead_lettered.get("malformed").copied().unwrap_or(0);
    report.reminders = records.len() as u64 + malformed;
    let provider = provider_stats(&r.provider_url).await;
    report.duplicates = provider.map_or(0, |s| s.duplicate_key_attempts);
    Ok(report)
}

async fn provider_stats(provider_url: &str) -> Option<punctual_provider_double::Stats> {
    let base = provider_url.trim_end_matches("/v1/messages");
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(format!("GET /stats HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = Vec::new();
    // The double keeps connections open: read until the declared body length arrives.
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    let body = text.split("\r\n\r\n").nth(1)?;
    serde_json::from_str(body).ok()
}

/// `local down`: stop the processes `up` started and forget the state. Resources die with
/// the emulator (moto and DynamoDB Local run in memory).
pub fn down() -> Result<Vec<u32>, LocalError> {
    let state = load_state()?;
    for pid in &state.pids {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    std::fs::remove_file(state_file()).map_err(step("removing the state file"))?;
    Ok(state.pids)
}
