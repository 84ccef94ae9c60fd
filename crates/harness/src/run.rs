//! `punctual run` (what `make run` calls): the whole pipeline on this machine, through the real
//! AWS SDK against the emulator — import → scheduler ticks (playing EventBridge) → send queue →
//! pollers (playing the SQS event source mapping) → the sender handler → the provider double —
//! with a live progress line and a final report.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use punctual_aws::emf::{Metrics, name};
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::renewals::DynamoRenewals;
use punctual_core::accounting::{DeliveryCounts, Throughput, oldest_age_series};
use punctual_core::backoff::SplitMix64;
use punctual_core::secret::Secret;
use serde::Serialize;

use crate::count::{Observed, count, peek_dlq};
use crate::counted::{CountedPipeline, PipelineRequests, Shape};
use crate::env::{Emulator, provision};
use crate::esm::EsmStats;
use crate::eventbridge;
use crate::{HarnessError as RunError, step};

/// How often the local EventBridge fires the scheduler (production: rate(1 minute)).
pub const TICK: Duration = Duration::from_secs(5);

/// `punctual run` options (its flags).
#[derive(Debug, Clone, clap::Args)]
pub struct RunOptions {
    /// Renewals to import, all due now.
    #[arg(long, default_value_t = 3000)]
    pub reminders: usize,
    /// Provider quota, calls per second.
    #[arg(long, default_value_t = 100.0)]
    pub quota: f64,
    /// Pollers of the normal lane (its event source mapping's MaximumConcurrency).
    #[arg(long, default_value_t = 10)]
    pub concurrency: usize,
    /// Pollers of the urgent lane (its mapping's MaximumConcurrency).
    #[arg(long, default_value_t = 10)]
    pub urgent_concurrency: usize,
    /// Share of the renewals with a tight window (2 minutes: the scheduler releases them to
    /// the urgent lane), 0..=1.
    #[arg(long, default_value_t = 0.1)]
    pub tight_share: f64,
    /// Seed of the sender's jitter.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Who delivers: `http` (the provider double, which honours idempotency keys) or `ses`
    /// (Amazon SES on the emulator: no keys, addresses from the recipients table).
    #[arg(long, default_value = "http", value_parser = ["http", "ses"])]
    pub provider: String,
    /// Declared channels, each with its own provider, limiter and pause
    /// (docs/design.md#channels): `email=ses,sms=http`, both declared (the workload makes
    /// every third renewal `sms`, the rest `email`). A kind may carry its quota, `sms=http:10`
    /// (default: `--quota`). Each `http` channel has a provider double of its own; every
    /// renewal goes through its channel's provider. Instead of `--provider`.
    #[arg(long, conflicts_with = "provider")]
    pub channels: Option<String>,
    /// `--channels`: pollers of each channel's own queue after the first (the first channel
    /// shares the two lanes; each other has a queue, a mapping and this many pollers of its
    /// own, so a batch never mixes channels). 0: every channel shares the lanes.
    #[arg(long, default_value_t = 2)]
    pub channel_concurrency: usize,
    /// Dead letters before the run starts (at most the redrive function's
    /// `REDRIVE_MAX_MESSAGES`, 1,000): renewals due now, hours from their deadline, whose
    /// reminders the sender gave up on (`attempt_limit`: a ledger record `dead_lettered`, a
    /// letter in the DLQ with the sender's attributes). The redrive function moves them back
    /// while the fresh reminders run, paced at half the redrive share of the quota.
    #[arg(long, default_value_t = 0)]
    pub redrive: usize,
    /// Print progress to stderr (always on for the command line).
    #[arg(skip = true)]
    pub progress: bool,
}

/// The final report (`--json` keys are a contract; the delivery figures are the one
/// accounting's, [`DeliveryCounts`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunReport {
    /// Renewals imported.
    pub reminders: usize,
    /// What happened to them (docs/design.md#the-one-accounting).
    #[serde(flatten)]
    pub counts: DeliveryCounts,
    /// What the provider saw, and utilisation of its quota.
    #[serde(flatten)]
    pub throughput: Throughput,
    /// The functions' requests per ended message, counted below the SDK, in the simulator's
    /// shape (the keys `local drain` prints too).
    #[serde(flatten)]
    pub requests: PipelineRequests,
    /// `http` (the double) or `ses` (SES on the emulator).
    pub provider: String,
    /// `--channels`: each channel's own figures, its provider's count beside its deliveries.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub channels: BTreeMap<String, RunChannel>,
    /// Effects the provider itself holds: the double's distinct acceptances, or SES's
    /// `SentLast24Hours` growth over the run. Equal to `delivered` when each reminder reached
    /// the provider exactly once. `None` when the emulator's SES count could not be read.
    pub provider_effects: Option<u64>,
    /// The provider double's quota bucket at its lowest, tokens ([`punctual_provider_double::Stats::lowest_tokens`]):
    /// how close the run came to a 429 (below 1: a request got one). `None` for SES and channels.
    pub provider_lowest_tokens: Option<f64>,
    /// Renewals generated with a tight window.
    pub tight: usize,
    /// Reminders the scheduler released to the urgent lane.
    pub released_urgent: u64,
    /// `--redrive`: dead letters before the run.
    pub dead_letters: usize,
    /// `--redrive`: dead letters the redrive moved back to the send queue.
    pub redriven: u64,
    /// `--redrive`: the redrive's answer (`done`, `aborted` with why, `refused`).
    pub redrive_status: Option<String>,
    /// `--redrive`: from the pipeline's start to the redrive's last send back, seconds.
    pub redrive_seconds: f64,
    /// CPU seconds of the emulators this run started and of `punctual` itself, from the
    /// pipeline's start to its drain: who spent the cores (`None` off Linux).
    pub cpu: Option<crate::cpu::CpuShare>,
    /// Wall time of the whole run, import included.
    pub wall_seconds: f64,
    /// Import time.
    pub import_seconds: f64,
    /// The PNG chart (backlog, delivered/s against the quota, oldest age), when written.
    pub chart: Option<String>,
    /// The run's own window reconciled as `punctual reconcile` does, with its deadline SLO.
    pub window: Option<crate::count::WindowCheck>,
    /// The chart's series (not part of the JSON report).
    #[serde(skip)]
    pub series: RunSeries,
}

/// What the chart plots, seconds after the run's pipeline started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSeries {
    /// Messages on the send queue.
    pub backlog: Vec<(f64, f64)>,
    /// Provider acceptances in each whole second.
    pub delivered_per_second: Vec<(f64, f64)>,
    /// The oldest due, undelivered reminder's age (the one accounting's definition).
    pub oldest_age: Vec<(f64, f64)>,
}

fn draw_run_chart(path: &std::path::Path, quota: f64, series: &RunSeries) -> Result<(), punctual_chart::ChartError> {
    use punctual_chart::{Line, PUNCTUAL, Panel, REFERENCE, draw};
    let line = |label: &str, points: Vec<(f64, f64)>, color| Line { label: label.into(), points, color };
    let end = series.backlog.last().map_or(1.0, |s| s.0);
    draw(
        path,
        "punctual run",
        &[
            Panel {
                title: "backlog (messages on both lanes)".into(),
                lines: vec![line("backlog", series.backlog.clone(), PUNCTUAL)],
            },
            Panel {
                title: "delivered per second".into(),
                lines: vec![
                    line("delivered/s", series.delivered_per_second.clone(), PUNCTUAL),
                    line("quota", vec![(0.0, quota), (end, quota)], REFERENCE),
                ],
            },
            Panel {
                title: "oldest due, undelivered (seconds)".into(),
                lines: vec![line("oldest age", series.oldest_age.clone(), PUNCTUAL)],
            },
        ],
        None,
    )
}

impl RunReport {
    /// Human report.
    pub fn render(&self, quota: f64) -> String {
        // With channels, the run's quota is theirs summed.
        let quota = if self.channels.is_empty() { quota } else { self.channels.values().map(|c| c.quota).sum() };
        let dlq: Vec<String> = self.counts.dead_lettered.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "punctual run: {} reminders{}, quota {quota}/s\n\
             delivered         {}\n\
             duplicates        {}\n\
             late              {}\n\
             expired           {}\n\
             cancelled         {}\n\
             dead-lettered     {}\n\
             lost              {}\n\
             provider calls    {} ({} answered 429, retry amplification {:.3}){}\n\
             drain             {:.1} s (floor {:.1} s) → utilisation {:.3}\n\
             max oldest age    {:.1} s\n\
             lanes             {} released urgent ({} tight renewals), the rest normal\n\
             provider effects  {} at the provider ({})\n\
             wall time         {:.1} s (import {:.1} s)\n\
             chart             {}\n",
            self.reminders,
            if self.dead_letters > 0 { format!(" + {} dead letters", self.dead_letters) } else { String::new() },
            self.counts.delivered,
            self.counts.duplicates,
            self.counts.late,
            self.counts.expired,
            self.counts.cancelled,
            if dlq.is_empty() { "0".to_owned() } else { dlq.join(", ") },
            self.counts.lost,
            self.throughput.provider_calls,
            self.throughput.provider_429,
            self.throughput.retry_amplification,
            self.provider_lowest_tokens.map_or_else(String::new, |t| format!("; its bucket at least {t:.2} tokens")),
            self.throughput.drain_seconds,
            self.throughput.floor_seconds,
            self.throughput.utilisation,
            self.counts.max_oldest_age_seconds,
            self.released_urgent,
            self.tight,
            self.provider_effects.map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
            if self.provider == "ses" {
                "SES SentLast24Hours on the emulator"
            } else if self.provider == "channels" {
                "each channel's provider, below"
            } else {
                "the double's distinct acceptances"
            },
            self.wall_seconds,
            self.import_seconds,
            self.chart.as_deref().unwrap_or("not written"),
        ) + &self
            .channels
            .iter()
            .map(|(name, c)| {
                format!(
                    "channel {name:<9} {}/{} delivered ({} late) at {} ({}/s), {} there; drain {:.1} s (floor {:.1} s) → utilisation {:.3}{}\n",
                    c.delivered,
                    c.reminders,
                    c.late,
                    if c.provider == "ses" { "SES" } else { "its double" },
                    c.quota,
                    c.provider_effects.map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
                    c.drain_seconds,
                    c.floor_seconds,
                    c.utilisation,
                    c.provider_429.map_or_else(String::new, |n| format!(", {n} answered 429")),
                )
            })
            .collect::<String>()
            + &self.requests.render(18)
            + &self.cpu.as_ref().map_or_else(String::new, |c| c.render(18))
            + &self.window.as_ref().map_or_else(|| "reconcile         not run\n".to_owned(), |w| w.render())
            + &if self.dead_letters > 0 {
                format!(
                    "redrive           {} of {} dead letters moved back in {:.1} s ({})\n",
                    self.redriven,
                    self.dead_letters,
                    self.redrive_seconds,
                    self.redrive_status.as_deref().unwrap_or("not run")
                )
            } else {
                String::new()
            }
    }
}

pub use punctual_core::workload::{TIGHT_WINDOW, WINDOWS, ZONES, generate};

/// One declared channel's figures in a run (`--channels`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunChannel {
    /// `http` (its own provider double) or `ses` (SES on the emulator).
    pub provider: String,
    /// Its quota, calls per second.
    pub quota: f64,
    /// Its renewals.
    pub reminders: u64,
    /// Its reminders delivered (the ledger's `delivered`).
    pub delivered: u64,
    /// Of those, delivered at or after their `deliver_by`.
    pub late: u64,
    /// First to last of its deliveries (the ledger's `delivered` entries), plus one slot.
    pub drain_seconds: f64,
    /// Its reminders at its own quota.
    pub floor_seconds: f64,
    /// `floor_seconds / drain_seconds`: 1 when its quota was used all along.
    pub utilisation: f64,
    /// Its provider's 429s: the double's count (`None` for SES, which keeps none the emulator
    /// shows; the run's `provider_429` counts them from the senders' metrics).
    pub provider_429: Option<u64>,
    /// What its provider holds: the double's distinct acceptances, or SES's count of sends
    /// over the run (SES serves no other channel here). `None` when it could not be read.
    pub provider_effects: Option<u64>,
}

impl RunChannel {
    /// A channel's figures: its `reminders`, and of the ledger's `records` those `on` it (by
    /// reminder id) that were delivered; its provider's count from its double's `double` stats,
    /// or SES's sends over the run (`ses`: `Some` for an SES channel, its count `None` when
    /// unread).
    pub fn measure(
        kind: &str,
        quota: f64,
        reminders: u64,
        records: &[punctual_core::ports::LedgerRecord],
        on: impl Fn(&punctual_core::ids::ReminderId) -> bool,
        double: Option<punctual_provider_double::Stats>,
        ses: Option<Option<u64>>,
    ) -> Self {
        use punctual_core::ReminderState;
        // Each of its delivered reminders: when it was delivered, and its deadline.
        let at: Vec<(DateTime<Utc>, DateTime<Utc>)> = records
            .iter()
            .filter(|r| r.state == ReminderState::Delivered && on(&r.reminder_id))
            .filter_map(|r| {
                r.history.iter().rev().find(|h| h.state == ReminderState::Delivered).map(|h| (h.at, r.deliver_by))
            })
            .collect();
        let drain_seconds = match (at.iter().map(|a| a.0).min(), at.iter().map(|a| a.0).max()) {
            (Some(a), Some(b)) => (b - a).num_milliseconds() as f64 / 1000.0 + 1.0 / quota,
            _ => 0.0,
        };
        let floor_seconds = reminders as f64 / quota;
        Self {
            provider: kind.to_owned(),
            quota,
            reminders,
            delivered: at.len() as u64,
            late: at.iter().filter(|(t, by)| t >= by).count() as u64,
            drain_seconds,
            floor_seconds,
            utilisation: if drain_seconds > 0.0 { (floor_seconds / drain_seconds).min(1.0) } else { 0.0 },
            provider_429: double.as_ref().map(|s| s.throttled),
            provider_effects: match ses {
                Some(sent) => sent,
                None => double.map(|s| s.accepted),
            },
        }
    }
}

/// `--channels` of `local up` and `run`: (name, kind, quota) of each channel, in order:
/// `NAME=http|ses[:RATE]`, comma-separated, each name as `CHANNELS` takes it, one SES at most.
pub fn parse_channel_spec(spec: &str, quota: f64) -> Result<Vec<(String, String, f64)>, String> {
    let mut out: Vec<(String, String, f64)> = Vec::new();
    for part in spec.split(',').map(str::trim) {
        let bad =
            || format!("--channels {spec:?}: expected NAME=http|ses[:RATE], comma-separated, as email=ses,sms=http:10");
        let (name, provider) = part.split_once('=').ok_or_else(bad)?;
        let (kind, rate) = match provider.split_once(':') {
            Some((k, r)) => (k, r.parse::<f64>().ok().filter(|r| *r > 0.0 && r.is_finite()).ok_or_else(bad)?),
            None => (provider, quota),
        };
        if !matches!(kind, "http" | "ses") || name.is_empty() || out.iter().any(|(n, ..)| n == name) {
            return Err(bad());
        }
        // The name as the functions will read it from `CHANNELS`.
        let env = punctual_lambda::config::Env::new(|k: &str| (k == "CHANNELS").then(|| name.to_owned()));
        punctual_lambda::config::channel_names(&env).map_err(|e| format!("--channels {spec:?}: {e}"))?;
        if kind == "ses" && out.iter().any(|(_, k, _)| k == "ses") {
            return Err(format!(
                "--channels {spec:?}: one SES channel at most (the emulator's SES count cannot tell two apart)"
            ));
        }
        out.push((name.to_owned(), kind.to_owned(), rate));
    }
    Ok(out)
}

/// `run --channels`: [`parse_channel_spec`], every channel one of the workload's and each of
/// them declared.
pub fn parse_channels(spec: &str, quota: f64) -> Result<Vec<(String, String, f64)>, String> {
    let out = parse_channel_spec(spec, quota)?;
    for (name, ..) in &out {
        let name = name.as_str();
        if !punctual_core::workload::CHANNELS.contains(&name) {
            return Err(format!(
                "--channels {spec:?}: {name:?} is not a channel of the run's workload ({}): its renewals would all be dead-lettered unknown_channel",
                punctual_core::workload::CHANNELS.join(", ")
            ));
        }
    }
    if let Some(missing) = punctual_core::workload::CHANNELS.iter().find(|c| !out.iter().any(|(n, ..)| n == *c)) {
        return Err(format!(
            "--channels {spec:?}: declare every channel of the run's workload ({}); {missing:?} is missing, so its renewals would be dead-lettered unknown_channel",
            punctual_core::workload::CHANNELS.join(", ")
        ));
    }
    Ok(out)
}

/// Who delivers in this run, and how to read what it saw.
enum ProviderSide {
    /// The provider double (its own counters are the truth).
    Double(punctual_provider_double::Double),
    /// SES on the emulator: what it sent before the run, and when the run's clock started.
    Ses { endpoint: String, sent_before: Option<u64>, started: Instant },
    /// `--channels`: each channel's own provider, SES on the emulator for at most one.
    Channels {
        ses: Option<(String, Option<u64>)>,
        doubles: Vec<(String, punctual_provider_double::Double)>,
        started: Instant,
    },
}

impl ProviderSide {
    fn started(&self) -> Instant {
        match self {
            Self::Double(d) => d.started(),
            Self::Ses { started, .. } | Self::Channels { started, .. } => *started,
        }
    }

    /// (accepted, throttled) so far, for the progress line.
    fn progress(&self, metrics: &Metrics) -> (u64, u64) {
        match self {
            Self::Double(d) => {
                let s = d.stats();
                (s.accepted, s.throttled)
            }
            Self::Ses { .. } | Self::Channels { .. } => {
                (metrics.total(name::DELIVERED) as u64, metrics.total(name::THROTTLED) as u64)
            }
        }
    }
}

/// Runs the pipeline end to end. A SIGINT or SIGTERM at any point (starting the emulator,
/// importing, delivering, reporting) stops it: the run's future is dropped, and with it the
/// emulator processes it started (`Emulator`'s drop). While delivering, the monitor sees the
/// signal first and gives the pollers two seconds to finish what they hold.
pub async fn run(opts: &RunOptions) -> Result<RunReport, RunError> {
    tokio::select! {
        r = run_inner(opts) => r,
        stop = async {
            let stop = crate::env::shutdown_signal().await;
            // Let the monitor's own graceful stop (2 s) go first when it is running.
            tokio::time::sleep(Duration::from_secs(3)).await;
            stop
        } => Err(RunError::Interrupted(stop)),
    }
}

async fn run_inner(opts: &RunOptions) -> Result<RunReport, RunError> {
    let started = Instant::now();
    let channels = match &opts.channels {
        Some(spec) => parse_channels(spec, opts.quota).map_err(RunError::Invalid)?,
        None => Vec::new(),
    };
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
        say(format!("dynamodb       {d} (dynalite, started here)"));
    }
    let config = punctual_aws::config::for_endpoint(&emulator.endpoint).await;
    let ddb = emulator.dynamodb(&config);

    let mut rng = SplitMix64::new(opts.seed ^ 0x5eed);
    let token = Secret::new(format!("local-{:016x}", rng.next_u64()));
    let ses = opts.provider == "ses" || channels.iter().any(|(_, k, _)| k == "ses");
    let region = config.region().map_or_else(|| "us-east-1".to_owned(), ToString::to_string);
    let mut declared = Vec::new();
    let side = if !channels.is_empty() {
        let mut ses_side = None;
        let mut doubles = Vec::new();
        for (name, kind, quota) in &channels {
            let mut url = String::new();
            if kind == "ses" {
                crate::ses::verify(&config, crate::ses::LOCAL_FROM).await?;
                let sent_before = crate::ses::sent_last_24_hours(&emulator.endpoint, &region).await;
                say(format!("channel {name:<6} Amazon SES on the emulator (quota {quota}/s by its limiter)"));
                ses_side = Some((emulator.endpoint.clone(), sent_before));
            } else {
                let (double, _) = crate::env::start_double(*quota, token.clone())
                    .await
                    .map_err(step("starting a channel's provider double"))?;
                say(format!("channel {name:<6} {} (quota {quota}/s, burst 10)", double.url()));
                url = double.url();
                doubles.push((name.clone(), double));
            }
            declared.push(punctual_ops::target::ChannelResources {
                name: name.clone(),
                kind: kind.clone(),
                quota: *quota,
                provider_url: url,
                queue_url: String::new(),
                urgent_queue_url: String::new(),
            });
        }
        ProviderSide::Channels { ses: ses_side, doubles, started: Instant::now() }
    } else if ses {
        crate::ses::verify(&config, crate::ses::LOCAL_FROM).await?;
        let sent_before = crate::ses::sent_last_24_hours(&emulator.endpoint, &region).await;
        say(format!(
            "provider       Amazon SES on the emulator (from {}, quota {}/s by the limiter)",
            crate::ses::LOCAL_FROM,
            opts.quota
        ));
        ProviderSide::Ses { endpoint: emulator.endpoint.clone(), sent_before, started: Instant::now() }
    } else {
        let (double, _) =
            crate::env::start_double(opts.quota, token.clone()).await.map_err(step("starting the provider double"))?;
        say(format!("provider       {} (quota {}/s, burst 10)", double.url(), opts.quota));
        ProviderSide::Double(double)
    };
    let provider_url = match &side {
        ProviderSide::Double(d) => d.url(),
        ProviderSide::Ses { .. } | ProviderSide::Channels { .. } => String::new(),
    };

    let prefix = format!("punctual-run-{}-{}", Utc::now().timestamp_millis(), std::process::id());
    let mut res = provision(&config, &ddb, &prefix, &provider_url).await?;
    res.endpoint = emulator.endpoint.clone();
    if ses && channels.is_empty() {
        res.provider_kind = "ses".into();
    }
    res.channels = declared;
    if opts.channel_concurrency > 0 {
        for i in 1..res.channels.len() {
            let (url, urgent) = crate::env::provision_channel_queue(&config, &res, &res.channels[i].name).await?;
            (res.channels[i].queue_url, res.channels[i].urgent_queue_url) = (url, urgent);
        }
    }
    // The channels' quotas summed: what the scheduler releases at and the run is measured by.
    let quota = if channels.is_empty() { opts.quota } else { channels.iter().map(|(_, _, q)| q).sum() };
    say(format!("resources      {prefix}-{{send,urgent,dlq,ledger,renewals,recipients}}"));

    let sqs = aws_sdk_sqs::Client::new(&config);
    let renewals = DynamoRenewals::new(ddb.clone(), &res.renewals_table);
    let rows = generate(opts.reminders, Utc::now(), opts.tight_share.clamp(0.0, 1.0));
    let tight = rows.iter().filter(|r| r.window_minutes == TIGHT_WINDOW).count();
    let import_started = Instant::now();
    let mut progress = punctual_core::progress::Progress::new(rows.len() as u64);
    for (i, chunk) in rows.chunks(500).enumerate() {
        let outcomes = renewals.import(chunk, Utc::now()).await.map_err(step("importing renewals"))?;
        // Fresh tables: every row is new. Anything else (a conflict, a row already there) is a
        // renewal the run would then count as lost for a reason that is not the pipeline's.
        if let Some((r, o)) =
            chunk.iter().zip(&outcomes).find(|(_, o)| !matches!(o, punctual_aws::renewals::RowOutcome::Inserted))
        {
            return Err(step("importing renewals")(format!(
                "renewal {}/{} was not inserted into the run's fresh table: {o:?}",
                r.tenant_id, r.renewal_id
            )));
        }
        if opts.progress {
            let done = (i * 500 + chunk.len()).min(rows.len());
            progress.update(done as u64, || format!("importing      {done}/{}", rows.len()));
        }
    }
    progress.finish();
    if ses {
        // Each customer's address, in the recipients table only (never in a renewal row).
        let book = punctual_aws::recipients::DynamoRecipients::new(ddb.clone(), &res.recipients_table);
        let entries: Vec<_> = rows
            .iter()
            .filter_map(|r| {
                let address =
                    punctual_core::ports::EmailAddress::parse(&crate::ses::local_address(&r.recipient_ref)).ok()?;
                Some((r.tenant_id.clone(), r.recipient_ref.clone(), address))
            })
            .collect();
        book.put_all(&entries, Utc::now().timestamp_millis()).await.map_err(step("writing the recipients"))?;
    }
    let import_seconds = import_started.elapsed().as_secs_f64();
    say(format!("imported       {} renewals over {} zones in {import_seconds:.1} s", rows.len(), ZONES.len()));
    let letters = punctual_core::workload::letter_renewals(opts.reminders, opts.redrive, Utc::now());
    // The floor: every reminder (the letters' too) at its provider's quota; with channels, the
    // slowest channel's share at its own quota (each drains on its own).
    let floor = if channels.is_empty() {
        (rows.len() + letters.len()) as f64 / opts.quota
    } else {
        channels
            .iter()
            .map(|(name, _, q)| rows.iter().chain(&letters).filter(|r| &r.channel == name).count() as f64 / q)
            .fold(0.0, f64::max)
    };
    if !letters.is_empty() {
        let seeded = Instant::now();
        dead_letters_before_the_run(
            &renewals,
            &DynamoLedger::new(ddb.clone(), &res.ledger_table),
            &res.queues(sqs.clone()),
            &letters,
        )
        .await?;
        say(format!(
            "dead letters   {} in the DLQ, their ledger records dead_lettered ({}) in {:.1} s",
            letters.len(),
            punctual_core::workload::LETTER_REASON.as_str(),
            seeded.elapsed().as_secs_f64()
        ));
    }

    let queues = res.queues(sqs);
    let pipeline = CountedPipeline::build(
        &res,
        &config,
        emulator.dynamodb_endpoint.as_deref(),
        &token,
        opts.quota,
        Shape {
            concurrency: opts.concurrency,
            urgent_concurrency: opts.urgent_concurrency,
            seed: opts.seed,
            release_rate: quota * punctual_core::scheduler::SUSTAINABLE_SHARE,
            channel_concurrency: opts.channel_concurrency,
        },
    )?;
    let scheduler = Arc::clone(&pipeline.scheduler);
    let redrive = if letters.is_empty() {
        None
    } else {
        Some(pipeline.redrive(&res, &config, emulator.dynamodb_endpoint.as_deref(), opts.quota)?)
    };

    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(EsmStats::default());
    let metrics = Arc::new(Mutex::new(Metrics::new()));
    let cpu = crate::cpu::CpuMeter::start(&emulator.named_pids());
    let pollers = pipeline.poll(Arc::clone(&stop), Arc::clone(&stats), Arc::clone(&metrics));
    let ticks = {
        let (scheduler, stop) = (Arc::clone(&scheduler), Arc::clone(&stop));
        async move {
            let (mut expired, mut released_urgent) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                match eventbridge::tick(&scheduler).await {
                    Ok(r) => {
                        expired += r.expired_missed;
                        released_urgent += r.released_urgent;
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
            (expired, released_urgent)
        }
    };

    // Every fresh reminder and every letter ends; a redrive that stops short (refused,
    // aborted) lowers the count to what it moved back.
    let n = (opts.reminders + letters.len()) as u64;
    let expected = Arc::new(std::sync::atomic::AtomicU64::new(n));
    // The redrive runs beside the fresh reminders (as `simulate --scenario redrive` and
    // `simulate --workload run --redrive` run it): a redrive is an operator's move while the
    // day's traffic goes on, and its rate cap is there to leave that traffic its quota. The
    // request goes through the redrive function's own handler, validated against its caps.
    let redrive_run = {
        let (stop, expected) = (Arc::clone(&stop), Arc::clone(&expected));
        let request = punctual_core::workload::redrive_request(letters.len(), opts.quota);
        let fresh = opts.reminders as u64;
        let redrive = redrive.as_ref();
        async move {
            let (redriver, caps) = redrive?;
            let function = punctual_redrive::handler::Function { redriver, caps: *caps };
            // The Lambda's longest invocation.
            let deadline = Utc::now() + TimeDelta::minutes(15);
            let answer = tokio::select! {
                a = function.answer(request, deadline) => a,
                () = async { while !stop.load(Ordering::Relaxed) { tokio::time::sleep(Duration::from_millis(200)).await } } => {
                    return None;
                }
            };
            let moved = match &answer {
                Ok(
                    punctual_redrive::handler::Answer::Done { summary }
                    | punctual_redrive::handler::Answer::Aborted { summary },
                ) => summary.moved,
                _ => 0,
            };
            expected.store(fresh + moved, Ordering::Relaxed);
            Some((answer, Instant::now()))
        }
    };
    let monitor = async {
        let limit = Duration::from_secs_f64(floor * 4.0 + 120.0);
        let loop_started = Instant::now();
        let mut progress = punctual_core::progress::Progress::new(n);
        let mut interrupted: Option<crate::env::Stop> = None;
        let mut last_depth_check = Instant::now() - Duration::from_secs(10);
        let mut depth: Option<(punctual_aws::sqs::Depth, punctual_aws::sqs::Depth)> = None;
        let mut backlog: Vec<(DateTime<Utc>, f64)> = Vec::new();
        let signalled = crate::env::shutdown_signal();
        tokio::pin!(signalled);
        loop {
            tokio::select! {
                stop = &mut signalled => { interrupted = Some(stop); }
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            if interrupted.is_some() {
                break;
            }
            let m = metrics.lock().map(|m| m.clone()).unwrap_or_default();
            let (accepted, throttled) = side.progress(&m);
            let dlq = m.total(name::DLQ_INGRESS) as u64;
            let handled = accepted + dlq;
            if last_depth_check.elapsed() > Duration::from_secs(2) || handled >= n {
                // Each channel's own queue counts with the normal lane (the scheduler counts it
                // so too): the run is not over while it holds messages.
                let normal = match (queues.depth_of(queues.send_url()).await, queues.channel_depth().await) {
                    (Ok(mut n), Ok(own)) => {
                        n += own;
                        Some(n)
                    }
                    _ => None,
                };
                let urgent = if queues.has_urgent_lane() {
                    queues.depth_of(queues.urgent_url()).await.ok()
                } else {
                    Some(punctual_aws::sqs::Depth::default())
                };
                depth = normal.zip(urgent);
                last_depth_check = Instant::now();
            }
            let total = depth.map(|(a, b)| a.total() + b.total());
            if let Some(total) = total {
                backlog.push((Utc::now(), total as f64));
            }
            if opts.progress {
                let elapsed = loop_started.elapsed().as_secs_f64();
                let rate = accepted as f64 / side.started().elapsed().as_secs_f64().max(1e-3);
                // Delayed copies near the end are messages SQS delivered twice (at-least-once):
                // they wait out a short recheck and are then acknowledged as duplicates.
                let queue = match depth {
                    None => "?".to_owned(),
                    Some((a, b)) => format!(
                        "normal {}/{}/{} urgent {}/{}/{} (ready/in flight/delayed)",
                        a.visible, a.in_flight, a.delayed, b.visible, b.in_flight, b.delayed
                    ),
                };
                progress.update(handled, || {
                    format!(
                        "{elapsed:6.1}s  delivered {:>6}/{n}  dlq {:>4}  {queue:<52}  429s {:>4}  {rate:6.1}/s of {}/s ",
                        accepted, dlq, throttled, quota
                    )
                });
            }
            if (handled >= expected.load(Ordering::Relaxed) && total == Some(0)) || loop_started.elapsed() > limit {
                break;
            }
        }
        progress.finish();
        stop.store(true, Ordering::Relaxed);
        (interrupted, backlog)
    };
    // The pollers and the scheduler run until the monitor says stop. Interrupted (SIGINT or
    // SIGTERM), the run gives them two seconds to finish what they hold and then drops them
    // (an abandoned message returns to its queue after its visibility timeout), so it exits
    // promptly and `Emulator`'s drop stops the processes it started.
    let mut work = std::pin::pin!(async { tokio::join!(pollers, ticks, redrive_run) });
    let mut monitor = std::pin::pin!(monitor);
    let mut finished = None;
    let (interrupted, backlog) = loop {
        tokio::select! {
            m = &mut monitor => break m,
            w = &mut work, if finished.is_none() => finished = Some(w),
        }
    };
    if let Some(stop) = interrupted {
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            if finished.is_none() {
                let _ = (&mut work).await;
            }
        })
        .await;
        return Err(RunError::Interrupted(stop));
    }
    let ((), (sched_expired, released_urgent), redrive_answer) = match finished {
        Some(w) => w,
        None => work.await,
    };
    let cpu = cpu.stop();
    let as_of = Utc::now();

    let records =
        DynamoLedger::new(ddb.clone(), &res.ledger_table).scan_all().await.map_err(step("reading the ledger"))?;
    let on_queue = queues.lane_depths().await.map_err(step("reading the queue depth"))?.total();
    let dlq = peek_dlq(&queues, 100_000).await.map_err(step("reading the DLQ"))?;
    if std::env::var("PUNCTUAL_DEBUG").is_ok() {
        let m = metrics.lock().map(|m| m.clone()).unwrap_or_default();
        eprintln!("debug metrics: {}", m.lines("punctual", "sender", 0).join("\n"));
        eprintln!(
            "debug esm: batches={} records={} failures={}",
            stats.batches.load(Ordering::Relaxed),
            stats.records.load(Ordering::Relaxed),
            stats.failures.load(Ordering::Relaxed)
        );
    }
    let m = metrics.lock().map(|m| m.clone()).unwrap_or_default();
    // Every series on one time axis: seconds since the provider started.
    let t0 = Utc::now() - TimeDelta::from_std(side.started().elapsed()).unwrap_or_default();
    let seen = match &side {
        ProviderSide::Double(d) => {
            let s = d.stats();
            let drain = match (s.first_accept_ms, s.last_accept_ms) {
                (Some(a), Some(b)) => (b - a) as f64 / 1000.0 + 1.0 / opts.quota,
                _ => 0.0,
            };
            // The double stores each key's first answer and replays it: a second effect cannot
            // happen there (the simulator and the checker count real ones).
            ProviderSeen {
                requests: s.requests,
                throttled: s.throttled,
                per_second: s.accepted_per_second.clone(),
                drain,
                effects: Some(s.accepted),
                repeated_keys: s.duplicate_key_attempts,
                double_effects: 0,
                lowest_tokens: s.lowest_tokens,
            }
        }
        ProviderSide::Ses { endpoint, sent_before, .. } => {
            let after = crate::ses::sent_last_24_hours(endpoint, &region).await;
            let sent = sent_before.zip(after).map(|(b, a)| a.saturating_sub(b));
            ProviderSeen::from_ledger(&records, t0, opts.quota, &m, sent)
        }
        ProviderSide::Channels { .. } => ProviderSeen::from_ledger(&records, t0, quota, &m, None),
    };
    // `--channels`: each channel's deliveries beside what its own provider holds.
    let mut per_channel = BTreeMap::new();
    if let ProviderSide::Channels { ses: ses_side, doubles, .. } = &side {
        let channel_of: std::collections::HashMap<&punctual_core::ids::ReminderId, &str> =
            rows.iter().chain(&letters).map(|r| (&r.reminder_id, r.channel.as_str())).collect();
        let ses_sent = match ses_side {
            Some((endpoint, before)) => {
                let after = crate::ses::sent_last_24_hours(endpoint, &region).await;
                before.zip(after).map(|(b, a)| a.saturating_sub(b))
            }
            None => None,
        };
        for (name, kind, q) in &channels {
            let double = doubles.iter().find(|(n, _)| n == name).map(|(_, d)| d.stats());
            let ses = if kind == "ses" { Some(ses_sent) } else { None };
            let reminders = rows.iter().chain(&letters).filter(|r| &r.channel == name).count() as u64;
            let on = |id: &punctual_core::ids::ReminderId| channel_of.get(id) == Some(&name.as_str());
            per_channel.insert(name.clone(), RunChannel::measure(kind, *q, reminders, &records, on, double, ses));
        }
    }
    let seen = if per_channel.is_empty() {
        seen
    } else {
        let effects = per_channel.values().map(|c| c.provider_effects).sum::<Option<u64>>();
        ProviderSeen { effects, ..seen }
    };
    let observed = Observed {
        records,
        dlq,
        on_queue,
        expired_at_release: sched_expired,
        repeated_key_requests: seen.repeated_keys,
        double_effects: seen.double_effects,
    };
    let (redriven, redrive_status, redrive_seconds) = match &redrive_answer {
        None => (0, letters.first().map(|_| "not finished".to_owned()), 0.0),
        Some((answer, at)) => {
            use punctual_redrive::handler::Answer;
            let secs = at.duration_since(side.started()).as_secs_f64();
            match answer {
                Ok(Answer::Done { summary }) => (summary.moved, Some("done".to_owned()), secs),
                Ok(Answer::Aborted { summary }) => {
                    (summary.moved, Some(format!("aborted: {}", summary.aborted.as_deref().unwrap_or("?"))), secs)
                }
                Ok(Answer::Refused { problems, .. }) => (0, Some(format!("refused: {}", problems.join("; "))), secs),
                Err(e) => (0, Some(format!("failed: {e}")), secs),
            }
        }
    };
    let (counts, endings) = count(&observed, as_of, Some(n));
    let drain = seen.drain;
    let since = |t: DateTime<Utc>| (t - t0).num_milliseconds() as f64 / 1000.0;
    let spans: Vec<_> = endings.iter().filter_map(|e| e.due_span(as_of)).collect();
    let times: Vec<DateTime<Utc>> = backlog.iter().map(|(t, _)| *t).collect();
    let series = RunSeries {
        backlog: backlog.iter().map(|(t, b)| (since(*t), *b)).collect(),
        delivered_per_second: seen.per_second.iter().enumerate().map(|(i, c)| (i as f64, *c as f64)).collect(),
        oldest_age: oldest_age_series(&spans, t0, &times),
    };
    // The chart's data beside it, so what the chart shows can be checked against the report.
    let data = serde_json::json!({
        "backlog": series.backlog,
        "delivered_per_second": series.delivered_per_second,
        "oldest_age": series.oldest_age,
    });
    if let Err(e) = std::fs::write("target/run/series.json", data.to_string()) {
        eprintln!("punctual run: could not write target/run/series.json: {e}");
    }
    let chart = std::path::PathBuf::from("target/run/chart.png");
    let chart_written = draw_run_chart(&chart, quota, &series).map(|()| chart.display().to_string());
    if let Err(e) = &chart_written {
        eprintln!("punctual run: {e}");
    }
    let delivered = counts.delivered;
    // The run's window, reconciled as an operator would: every renewal in a bucket.
    let first = rows.iter().map(|r| r.deliver_after).min();
    let last = rows.iter().map(|r| r.deliver_after).max();
    let window = match first.zip(last) {
        Some((from, last)) => Some(
            crate::count::check_window(
                &res,
                emulator.dynamodb_endpoint.clone(),
                ddb.clone(),
                &queues,
                from,
                last + TimeDelta::milliseconds(1),
            )
            .await?,
        ),
        None => None,
    };
    Ok(RunReport {
        window,
        chart: chart_written.ok(),
        reminders: opts.reminders,
        counts,
        throughput: Throughput::measure(seen.requests, seen.throttled, delivered, drain, floor),
        provider: if channels.is_empty() { opts.provider.clone() } else { "channels".to_owned() },
        provider_effects: seen.effects,
        provider_lowest_tokens: seen.lowest_tokens,
        channels: per_channel,
        requests: pipeline.requests(n, seen.requests, (!letters.is_empty()).then_some(redriven)),
        tight,
        released_urgent,
        dead_letters: letters.len(),
        redriven,
        redrive_status,
        redrive_seconds,
        cpu: std::path::Path::new("/proc/self/stat").exists().then_some(cpu),
        wall_seconds: started.elapsed().as_secs_f64(),
        import_seconds,
        series,
    })
}

/// Leaves `letters`' reminders as the sender leaves a reminder whose attempts ran out, before
/// the run starts: each renewal imported and released (the scheduler's own mark, so no tick
/// releases it again), its reminder claimed, deferred, claimed again and quarantined through
/// the product's ports ([`punctual_core::workload::dead_letter`]) on the command's own,
/// uncounted clients.
async fn dead_letters_before_the_run(
    renewals: &DynamoRenewals,
    ledger: &DynamoLedger,
    queues: &punctual_aws::sqs::SqsQueues,
    letters: &[punctual_core::renewal::Renewal],
) -> Result<(), RunError> {
    use futures_util::{StreamExt, TryStreamExt};
    use punctual_core::ports::DueStore;
    let now = Utc::now();
    for chunk in letters.chunks(500) {
        renewals.import(chunk, now).await.map_err(step("importing the dead letters' renewals"))?;
    }
    let released_at = now - TimeDelta::seconds(1);
    futures_util::stream::iter(letters.iter().enumerate())
        .map(|(i, r)| async move {
            renewals
                .mark_enqueued(&punctual_core::ports::Pending::from(r), released_at)
                .await
                .map_err(step("marking the dead letters' renewals released"))?;
            let msg = punctual_core::workload::released(r, released_at);
            punctual_core::workload::dead_letter(ledger, queues, &msg, &format!("letter-{i:06}"), now)
                .await
                .map_err(step("dead-lettering a reminder before the run"))
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// What the provider saw over a run.
struct ProviderSeen {
    requests: u64,
    throttled: u64,
    /// Acceptances in each whole second since the provider started.
    per_second: Vec<u64>,
    drain: f64,
    effects: Option<u64>,
    repeated_keys: u64,
    double_effects: u64,
    lowest_tokens: Option<f64>,
}

impl ProviderSeen {
    /// For SES (which keeps no per-call log the emulator shows): calls and 429s from the
    /// sender's own metrics, acceptance times from the ledger's `delivered` entries, and the
    /// effects SES counted (`sent`). SES cannot tell which reminder an email was, so a second
    /// effect of one reminder cannot be told from an unrecorded one (a quarantined unknown
    /// outcome that went out): `double_effects` stays 0 and the report compares `sent` with
    /// `delivered` instead.
    fn from_ledger(
        records: &[punctual_core::ports::LedgerRecord],
        t0: DateTime<Utc>,
        quota: f64,
        m: &Metrics,
        sent: Option<u64>,
    ) -> Self {
        use punctual_core::ReminderState;
        let at: Vec<DateTime<Utc>> = records
            .iter()
            .filter(|r| r.state == ReminderState::Delivered)
            .filter_map(|r| r.history.iter().rev().find(|h| h.state == ReminderState::Delivered).map(|h| h.at))
            .collect();
        let mut per_second = Vec::new();
        for t in &at {
            let i = usize::try_from((*t - t0).num_seconds().max(0)).unwrap_or(0).min(86_400);
            if per_second.len() <= i {
                per_second.resize(i + 1, 0);
            }
            per_second[i] += 1;
        }
        let drain = match (at.iter().min(), at.iter().max()) {
            (Some(a), Some(b)) => (*b - *a).num_milliseconds() as f64 / 1000.0 + 1.0 / quota,
            _ => 0.0,
        };
        Self {
            requests: m.total(name::ATTEMPTS) as u64,
            throttled: m.total(name::THROTTLED) as u64,
            per_second,
            drain,
            effects: sent,
            repeated_keys: 0,
            double_effects: 0,
            lowest_tokens: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_channels;

    /// `--channels` is checked before anything starts: each name once, a known kind, a rate
    /// above 0, and every channel the workload generates declared (a missing one would
    /// dead-letter a third of the run as `unknown_channel`).
    #[test]
    fn channels_flag_is_refused_by_name_before_anything_starts() {
        assert_eq!(
            parse_channels("email=ses, sms=http:30", 100.0),
            Ok(vec![("email".into(), "ses".into(), 100.0), ("sms".into(), "http".into(), 30.0)])
        );
        for (spec, says) in [
            ("email=ses", "\"sms\" is missing"),
            ("email=ses,sms=http,push=http", "\"push\" is not a channel of the run's workload"),
            ("email=ses,sms=ses", "one SES channel at most"),
            ("email=ses,email=http,sms=http", "expected NAME=http|ses[:RATE]"),
            ("email=smtp,sms=http", "expected NAME=http|ses[:RATE]"),
            ("email=ses,sms=http:0", "expected NAME=http|ses[:RATE]"),
            ("email=ses,sms", "expected NAME=http|ses[:RATE]"),
        ] {
            let e = parse_channels(spec, 100.0).unwrap_err();
            assert!(e.contains(says), "{spec}: {e}");
        }
    }
}
