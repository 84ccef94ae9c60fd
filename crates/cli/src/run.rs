//! `punctual run` (what `make run` calls): the whole pipeline on this machine, through the real
//! AWS SDK against the emulator — import → scheduler ticks (playing EventBridge) → send queue →
//! pollers (playing the SQS event source mapping) → the sender handler → the provider double —
//! with a live progress line and a final report.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use punctual_aws::emf::{Metrics, name};
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::renewals::DynamoRenewals;
use punctual_aws::sqs::SqsQueues;
use punctual_core::backoff::SplitMix64;
use punctual_core::ports::LedgerRecord;
use punctual_core::reason::ReminderState;
use punctual_core::renewal::{Renewal, RenewalInput};
use punctual_core::scheduler::{Scheduler, SchedulerSettings};
use punctual_core::secret::Secret;
use punctual_lambda::SystemClock;
use punctual_provider::HttpProvider;
use serde::Serialize;

use crate::env::{Emulator, EnvError, Resources, local_senders, provision, sdk_config};
use crate::esm::{EsmStats, run_pollers};

/// Zones the generated renewals are spread over.
pub const ZONES: [&str; 5] =
    ["America/New_York", "Europe/London", "Asia/Kathmandu", "Australia/Lord_Howe", "America/Los_Angeles"];
/// Delivery windows (minutes) the generated renewals cycle through.
pub const WINDOWS: [u32; 4] = [30, 60, 120, 240];
/// How often the local EventBridge fires the scheduler (production: rate(1 minute)).
pub const TICK: Duration = Duration::from_secs(5);

/// `punctual run` options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Renewals to import (default 3,000).
    pub reminders: usize,
    /// Provider quota, calls/s (default 100).
    pub quota: f64,
    /// Pollers (MaximumConcurrency of the event source mapping; default 10).
    pub concurrency: usize,
    /// Seed of the sender's jitter.
    pub seed: u64,
    /// Print progress to stderr.
    pub progress: bool,
}

/// The final report (`--json` keys are a contract).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunReport {
    /// Renewals imported.
    pub reminders: usize,
    /// Reminders the ledger records as delivered.
    pub delivered: u64,
    /// Provider requests repeating an idempotency key that was already accepted: sends that
    /// would have been duplicate deliveries without the provider's idempotency.
    pub duplicates: u64,
    /// Delivered after their `deliver_by`.
    pub late: u64,
    /// Expired (business deadline or missed schedule window).
    pub expired: u64,
    /// Cancelled before sending.
    pub cancelled: u64,
    /// In the DLQ, by reason.
    pub dead_lettered: BTreeMap<String, u64>,
    /// Not accounted for by any terminal or in-flight state.
    pub lost: u64,
    /// Provider requests.
    pub provider_calls: u64,
    /// Provider 429 answers.
    pub provider_429: u64,
    /// First to last provider acceptance, + one quota interval.
    pub drain_seconds: f64,
    /// The fastest possible drain at the quota: reminders ÷ quota.
    pub floor_seconds: f64,
    /// floor ÷ drain.
    pub utilisation: f64,
    /// Provider requests ÷ deliveries.
    pub retry_amplification: f64,
    /// Longest any reminder waited past its `deliver_after` before delivery.
    pub max_oldest_age_seconds: f64,
    /// Shared-limiter DynamoDB writes (failed conditional writes included) ÷ tokens granted.
    pub limiter_writes_per_call: f64,
    /// Wall time of the whole run, import included.
    pub wall_seconds: f64,
    /// Import time.
    pub import_seconds: f64,
    /// The PNG chart (backlog, delivered/s against the quota, oldest age), when written.
    pub chart: Option<String>,
}

/// One progress sample.
#[derive(Debug, Clone, Copy)]
struct Sample {
    t: f64,
    backlog: f64,
    delivered: f64,
    oldest_age: f64,
}

fn draw_run_chart(path: &std::path::Path, quota: f64, samples: &[Sample]) -> Result<(), crate::chart::ChartError> {
    use crate::chart::{Line, PUNCTUAL, Panel, REFERENCE, draw};
    let rate: Vec<(f64, f64)> =
        samples.windows(2).map(|w| (w[1].t, (w[1].delivered - w[0].delivered) / (w[1].t - w[0].t).max(1e-3))).collect();
    let line = |label: &str, points: Vec<(f64, f64)>, color| Line { label: label.into(), points, color };
    let end = samples.last().map_or(1.0, |s| s.t);
    draw(
        path,
        "punctual run",
        &[
            Panel {
                title: "backlog (messages on the send queue)".into(),
                lines: vec![line("backlog", samples.iter().map(|s| (s.t, s.backlog)).collect(), PUNCTUAL)],
            },
            Panel {
                title: "delivered per second".into(),
                lines: vec![
                    line("delivered/s", rate, PUNCTUAL),
                    line("quota", vec![(0.0, quota), (end, quota)], REFERENCE),
                ],
            },
            Panel {
                title: "oldest due, undelivered (seconds)".into(),
                lines: vec![line("oldest age", samples.iter().map(|s| (s.t, s.oldest_age)).collect(), PUNCTUAL)],
            },
        ],
        None,
    )
}

impl RunReport {
    /// Human report.
    pub fn render(&self, quota: f64) -> String {
        let dlq: Vec<String> = self.dead_lettered.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "punctual run: {} reminders, quota {quota}/s\n\
             delivered         {}\n\
             duplicates        {}\n\
             late              {}\n\
             expired           {}\n\
             cancelled         {}\n\
             dead-lettered     {}\n\
             lost              {}\n\
             provider calls    {} ({} answered 429, retry amplification {:.3})\n\
             drain             {:.1} s (floor {:.1} s) → utilisation {:.3}\n\
             max oldest age    {:.1} s\n\
             limiter writes    {:.3} per call\n\
             wall time         {:.1} s (import {:.1} s)\n\
             chart             {}\n",
            self.reminders,
            self.delivered,
            self.duplicates,
            self.late,
            self.expired,
            self.cancelled,
            if dlq.is_empty() { "0".to_owned() } else { dlq.join(", ") },
            self.lost,
            self.provider_calls,
            self.provider_429,
            self.retry_amplification,
            self.drain_seconds,
            self.floor_seconds,
            self.utilisation,
            self.max_oldest_age_seconds,
            self.limiter_writes_per_call,
            self.wall_seconds,
            self.import_seconds,
            self.chart.as_deref().unwrap_or("not written"),
        )
    }
}

/// Why a run failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The local environment.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// An AWS call or the provider double.
    #[error("{what}")]
    Step {
        /// What was being done.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Ctrl-C.
    #[error("interrupted; everything this run started was stopped")]
    Interrupted,
}

/// Wraps a failure of `what` (shared with `bench-limiter`, which reports the same way).
pub(crate) fn step<E: std::error::Error + Send + Sync + 'static>(what: &'static str) -> impl FnOnce(E) -> RunError {
    move |e| RunError::Step { what, source: Box::new(e) }
}

/// `n` renewals due now (local due time = this minute in one of five zones), windows cycling
/// through [`WINDOWS`], over five tenants.
pub fn generate(n: usize, now: DateTime<Utc>) -> Vec<Renewal> {
    let due = now.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap_or(now);
    (0..n)
        .filter_map(|i| {
            let zone = ZONES[i % ZONES.len()];
            let tz: chrono_tz::Tz = zone.parse().ok()?;
            let local = due.with_timezone(&tz);
            Renewal::validate(&RenewalInput {
                tenant_id: format!("tenant-{}", i % 5),
                renewal_id: format!("run-{i:06}"),
                recipient_ref: format!("cust-{i}"),
                channel: if i % 3 == 0 { "sms".into() } else { "email".into() },
                zone: zone.into(),
                local_due_date: local.format("%Y-%m-%d").to_string(),
                local_send_time: local.format("%H:%M").to_string(),
                window_minutes: WINDOWS[i % WINDOWS.len()].to_string(),
                ..RenewalInput::default()
            })
            .ok()
        })
        .collect()
}

/// Accounts for every reminder from the ledger and the renewals table.
pub fn account(
    reminders: usize,
    records: &[LedgerRecord],
    sched_expired: u64,
    in_flight: u64,
    metrics: &Metrics,
) -> (u64, u64, u64, u64, BTreeMap<String, u64>, u64, f64) {
    let mut delivered = 0;
    let mut late = 0;
    let mut expired = sched_expired;
    let mut cancelled = 0;
    let mut max_age: f64 = 0.0;
    for r in records {
        match r.state {
            ReminderState::Delivered => {
                delivered += 1;
                if let Some(at) = r.history.iter().rev().find(|h| h.state == ReminderState::Delivered).map(|h| h.at) {
                    if at >= r.deliver_by {
                        late += 1;
                    }
                    let after = r.history.first().map_or(at, |h| h.at);
                    max_age = max_age.max((at - after).num_milliseconds() as f64 / 1000.0);
                }
            }
            ReminderState::Expired => expired += 1,
            ReminderState::Cancelled => cancelled += 1,
            _ => {}
        }
    }
    let dead: BTreeMap<String, u64> = metrics
        .by_reason(name::DLQ_INGRESS)
        .into_iter()
        .filter(|(k, _)| k != "business_deadline_expired")
        .map(|(k, v)| (k, v as u64))
        .collect();
    let dead_total: u64 = dead.values().sum();
    let accounted = delivered + expired + cancelled + dead_total + in_flight;
    let lost = (reminders as u64).saturating_sub(accounted);
    (delivered, late, expired, cancelled, dead, lost, max_age)
}

/// Runs the pipeline end to end.
pub async fn run(opts: &RunOptions) -> Result<RunReport, RunError> {
    let started = Instant::now();
    let say = |s: String| {
        if opts.progress {
            eprintln!("{s}");
        }
    };
    std::fs::create_dir_all("target/run").map_err(step("creating target/run"))?;
    let emulator = Emulator::start(Some(std::path::Path::new("target/run")), false)?;
    let started_here = if emulator.pids().is_empty() { "" } else { " (moto, started here)" };
    say(format!("emulator       {}{started_here}", emulator.endpoint));
    if let Some(d) = &emulator.dynamodb_endpoint {
        say(format!("dynamodb       {d} (DynamoDB Local, started here)"));
    }
    let config = sdk_config(&emulator.endpoint).await;
    let ddb = emulator.dynamodb(&config);

    let mut rng = SplitMix64::new(opts.seed ^ 0x5eed);
    let (double, token) = crate::env::start_double(opts.quota, Secret::new(format!("local-{:016x}", rng.next_u64())))
        .await
        .map_err(step("starting the provider double"))?;
    say(format!("provider       {} (quota {}/s, burst 10)", double.url(), opts.quota));

    let prefix = format!("punctual-run-{}", Utc::now().timestamp_millis());
    let mut res: Resources = provision(&config, &ddb, &prefix, &double.url()).await?;
    res.endpoint = emulator.endpoint.clone();
    say(format!("resources      {prefix}-{{send,dlq,ledger,renewals}}"));

    let sqs = aws_sdk_sqs::Client::new(&config);
    let renewals = DynamoRenewals::new(ddb.clone(), &res.renewals_table);
    let rows = generate(opts.reminders, Utc::now());
    let import_started = Instant::now();
    for (i, chunk) in rows.chunks(500).enumerate() {
        renewals.import(chunk, Utc::now()).await.map_err(step("importing renewals"))?;
        if opts.progress {
            eprint!("\rimporting      {}/{}", (i * 500 + chunk.len()).min(rows.len()), rows.len());
        }
    }
    let import_seconds = import_started.elapsed().as_secs_f64();
    say(format!("\rimported       {} renewals over {} zones in {import_seconds:.1} s", rows.len(), ZONES.len()));

    let queues = SqsQueues::new(sqs, &res.send_queue_url, &res.dlq_url);
    let provider = HttpProvider::new(&double.url(), &token, Duration::from_secs(2))
        .map_err(step("building the provider client"))?;
    let clock = SystemClock;
    let (instances, limiter_store) =
        local_senders(&ddb, &res, &queues, &provider, opts.quota, opts.seed, opts.concurrency);
    let scheduler = Arc::new(Scheduler::new(
        renewals.clone(),
        queues.clone(),
        clock,
        SchedulerSettings { sustainable_rate: opts.quota * 0.97, ..SchedulerSettings::default() },
    ));

    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(EsmStats::default());
    let metrics = Arc::new(Mutex::new(Metrics::new()));
    let pollers =
        run_pollers(instances.clone(), queues.clone(), Arc::clone(&stop), Arc::clone(&stats), Arc::clone(&metrics));
    let ticks = {
        let (scheduler, stop) = (Arc::clone(&scheduler), Arc::clone(&stop));
        async move {
            let mut expired = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let deadline = Utc::now() + TimeDelta::seconds(60);
                match scheduler.tick(deadline).await {
                    Ok(r) => {
                        expired += r.expired_missed;
                        if std::env::var("PUNCTUAL_DEBUG").is_ok() {
                            eprintln!("\ndebug tick: {r:?}");
                        }
                    }
                    Err(e) => eprintln!("scheduler tick failed (next tick resumes): {e}"),
                }
                let next = Instant::now() + TICK;
                while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            expired
        }
    };

    let n = opts.reminders as u64;
    // Every generated renewal is due at the minute the run started.
    let due_at = import_started;
    let monitor = async {
        let limit = Duration::from_secs_f64(n as f64 / opts.quota * 4.0 + 120.0);
        let loop_started = Instant::now();
        let mut interrupted = false;
        let mut last_depth_check = Instant::now() - Duration::from_secs(10);
        let mut depth = punctual_aws::sqs::Depth { visible: u64::MAX, ..Default::default() };
        let mut samples: Vec<Sample> = Vec::new();
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => { interrupted = true; }
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            if interrupted {
                break;
            }
            let s = double.stats();
            let m = metrics.lock().map(|m| m.clone()).unwrap_or_default();
            let dlq = m.total(name::DLQ_INGRESS) as u64;
            let handled = s.accepted + dlq;
            if last_depth_check.elapsed() > Duration::from_secs(2) || handled >= n {
                depth = queues
                    .depth_of(queues.send_url())
                    .await
                    .unwrap_or(punctual_aws::sqs::Depth { visible: u64::MAX, ..Default::default() });
                last_depth_check = Instant::now();
            }
            if depth.visible != u64::MAX {
                samples.push(Sample {
                    t: loop_started.elapsed().as_secs_f64(),
                    backlog: depth.total() as f64,
                    delivered: s.accepted as f64,
                    oldest_age: if s.accepted + dlq < n { due_at.elapsed().as_secs_f64() } else { 0.0 },
                });
            }
            if opts.progress {
                let elapsed = loop_started.elapsed().as_secs_f64();
                let rate = match (s.first_accept_ms, s.last_accept_ms) {
                    (Some(a), Some(b)) if b > a => (s.accepted.saturating_sub(1)) as f64 * 1000.0 / (b - a) as f64,
                    _ => 0.0,
                };
                // Delayed copies near the end are messages SQS delivered twice (at-least-once):
                // they wait out a short recheck and are then acknowledged as duplicates.
                let queue = if depth.visible == u64::MAX {
                    "?".to_owned()
                } else {
                    format!("{} ready/{} in flight/{} delayed", depth.visible, depth.in_flight, depth.delayed)
                };
                eprint!(
                    "\r{elapsed:6.1}s  delivered {:>6}/{n}  dlq {:>4}  queue {queue:<32}  429s {:>4}  {rate:6.1}/s of {}/s ",
                    s.accepted, dlq, s.throttled, opts.quota
                );
                let _ = std::io::stderr().flush();
            }
            if (handled >= n && depth.total() == 0) || loop_started.elapsed() > limit {
                break;
            }
        }
        if opts.progress {
            eprintln!();
        }
        stop.store(true, Ordering::Relaxed);
        (interrupted, samples)
    };
    let ((), sched_expired, (interrupted, samples)) = tokio::join!(pollers, ticks, monitor);
    if interrupted {
        return Err(RunError::Interrupted);
    }

    let records =
        DynamoLedger::new(ddb.clone(), &res.ledger_table).scan_all().await.map_err(step("reading the ledger"))?;
    let in_flight = {
        use punctual_core::scheduler::ReleaseQueue;
        queues.depth().await.map_err(step("reading the queue depth"))?
    };
    let m = metrics.lock().map(|m| m.clone()).unwrap_or_default();
    if std::env::var("PUNCTUAL_DEBUG").is_ok() {
        eprintln!("debug metrics: {}", m.lines("punctual", "sender", 0).join("\n"));
        eprintln!(
            "debug esm: batches={} records={} failures={}",
            stats.batches.load(Ordering::Relaxed),
            stats.records.load(Ordering::Relaxed),
            stats.failures.load(Ordering::Relaxed)
        );
    }
    let (delivered, late, expired, cancelled, dead_lettered, lost, max_age) =
        account(opts.reminders, &records, sched_expired, in_flight, &m);
    let s = double.stats();
    let floor = n as f64 / opts.quota;
    let drain = match (s.first_accept_ms, s.last_accept_ms) {
        (Some(a), Some(b)) => (b - a) as f64 / 1000.0 + 1.0 / opts.quota,
        _ => 0.0,
    };
    let chart = std::path::PathBuf::from("target/run/chart.png");
    let chart_written = draw_run_chart(&chart, opts.quota, &samples).map(|()| chart.display().to_string());
    if let Err(e) = &chart_written {
        eprintln!("punctual run: {e}");
    }
    Ok(RunReport {
        chart: chart_written.ok(),
        reminders: opts.reminders,
        delivered,
        duplicates: s.duplicate_key_attempts,
        late,
        expired,
        cancelled,
        dead_lettered,
        lost,
        provider_calls: s.requests,
        provider_429: s.throttled,
        drain_seconds: drain,
        floor_seconds: floor,
        utilisation: if drain > 0.0 { floor / drain } else { 0.0 },
        retry_amplification: if delivered > 0 { s.requests as f64 / delivered as f64 } else { 0.0 },
        max_oldest_age_seconds: max_age,
        limiter_writes_per_call: {
            use punctual_core::limiter::SlotStore;
            let granted: u64 = instances.iter().map(|d| d.sender.limiter().stats().granted).sum();
            if granted > 0 { limiter_store.writes() as f64 / granted as f64 } else { 0.0 }
        },
        wall_seconds: started.elapsed().as_secs_f64(),
        import_seconds,
    })
}
