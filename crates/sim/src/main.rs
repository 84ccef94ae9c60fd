//! `punctual-sim`: the research commands of `punctual` that run on the simulator
//! (`punctual simulate …` hands its arguments to `punctual-sim simulate …`). A binary of its own
//! so the operator CLI never links the in-memory fakes or tokio's paused clock.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use punctual_sim::{Scenario, SimConfig, Worker, run as simulate};

#[derive(Parser)]
#[command(name = "punctual", bin_name = "punctual", about = "punctual's simulator commands")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a runbook scenario in virtual time with the same core services over in-memory
    /// adapters; optionally side by side with a naive worker.
    Simulate(SimulateArgs),
    /// The deterministic fault checker: each seed draws a fault plan, runs scheduler, senders,
    /// redrive, import and pause/resume together in virtual time, and checks the invariants
    /// I1–I8. Exit 0 with no violation, 3 with one (the JSON names the seed to replay).
    Check(CheckArgs),
    /// Project a day's population (a file written by `punctual forecast`): SLO attainment,
    /// late reminders per tenant, the earliest projected breach. Exit 3 when it misses the SLO.
    Forecast(ForecastArgs),
    /// The template's alarms proven against incidents. Each incident of the runbook runs
    /// inside a 09:00 morning through the simulator, with the metrics the functions emit (same
    /// code) and the AWS-side metrics from the models; the template's alarms are evaluated with
    /// CloudWatch's semantics. Reports which alarm pages each incident and when, what was missed
    /// by then, when it cleared after recovery, and whether normal mornings page anyone. Exit 0
    /// when every incident pages in time and no normal morning pages; 3 otherwise; 2 on a
    /// template it cannot read or evaluate.
    Drill(DrillArgs),
}

/// `punctual drill`.
#[derive(Args)]
struct DrillArgs {
    /// An incident, a comma-separated list of them, `all`, or `none`.
    #[arg(long, default_value = "all")]
    incident: String,
    /// The template whose alarms are drilled (an edited one can be drilled before deploying).
    #[arg(long, default_value = "infra/template.yaml")]
    template: PathBuf,
    /// How many of the 24 normal days to run (0–24).
    #[arg(long, default_value_t = punctual_sim::drill::catalogue::NORMAL_DAYS)]
    mornings: usize,
    /// A template parameter, KEY=VALUE (repeatable); the rest take their defaults.
    #[arg(long = "parameter", value_parser = parse_parameter)]
    parameters: Vec<(String, String)>,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON (progress still goes to stderr).
    #[arg(long)]
    json: bool,
}

fn parse_parameter(v: &str) -> Result<(String, String), String> {
    v.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{v:?} is not KEY=VALUE"))
}

/// `punctual check`.
#[derive(Args)]
struct CheckArgs {
    /// Seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed (replay one seed with `--seeds 1 --first-seed S`).
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Reminders per seed.
    #[arg(long, default_value_t = 40)]
    reminders: usize,
    /// Sender instances per seed (a larger world: `make soak` runs 1,000 reminders and 10).
    #[arg(long, default_value_t = punctual_sim::check::SENDERS)]
    senders: usize,
    /// Two channels: every other renewal by SMS, each channel on its own limiter and pause,
    /// SMS's provider refusing the credentials for a while (invariant I10).
    #[arg(long)]
    channels: bool,
    /// Print the report as JSON (progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// The provider does not honour idempotency keys (like Amazon SES): every acceptance is
    /// another effect.
    #[arg(long)]
    no_keys: bool,
    /// After an indeterminate outcome with a provider without keys: at_most_once (quarantine,
    /// I1 must hold) or at_least_once (resend; the double effects are counted under I1).
    #[arg(long, default_value = "at_most_once", value_parser = parse_indeterminate)]
    indeterminate: punctual_core::provider::IndeterminatePolicy,
}

fn parse_indeterminate(v: &str) -> Result<punctual_core::provider::IndeterminatePolicy, String> {
    punctual_core::provider::IndeterminatePolicy::parse(v)
        .ok_or_else(|| format!("{v:?} is not a policy: at_most_once or at_least_once"))
}

/// `punctual simulate`.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("day").args(["population", "workload"]).multiple(false)))]
struct SimulateArgs {
    /// normal, throttle, poison, crash, overload, mixed, redrive, tenants, channels.
    #[arg(long, default_value = "normal")]
    scenario: String,
    /// Reminders (default: the scenario's).
    #[arg(long)]
    reminders: Option<usize>,
    #[command(flatten)]
    capacity: Capacity,
    /// Share of reminders with tight deadlines, 0..=1 (default: 0.1 for `mixed`, else 0).
    #[arg(long)]
    tight_share: Option<f64>,
    /// Tight reminders' deliver_by, seconds after their deliver_after: MIN-MAX (default 120-300).
    #[arg(long, value_parser = parse_range)]
    tight_seconds: Option<(u64, u64)>,
    /// Seed (same seed, same report).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Model the queues without SQS fair queues (random order across tenants; the sender sets
    /// MessageGroupId = tenant_id, so fair queues are what AWS does).
    #[arg(long)]
    no_fair_queues: bool,
    /// The limiter's per-tenant share of the quota (TENANT_SHARE), 0..=1.
    #[arg(long)]
    tenant_share: Option<f64>,
    /// Also run this baseline on the same scenario and seed: `naive` (a worker without the
    /// sender's safeguards), or with `channels`, `shared` (every channel on one limiter).
    #[arg(long)]
    baseline: Option<String>,
    /// `channels`: workers of SMS's own queue (its own mapping's concurrency; default 2); 0:
    /// every channel on the two lanes, one queue for both.
    #[arg(long)]
    channel_concurrency: Option<usize>,
    /// `channels`, SMS on its own queue: no urgent lane of its own (its urgent and normal
    /// reminders share its one queue), to compare with the default.
    #[arg(long)]
    no_channel_urgent_lane: bool,
    /// Draw backlog, delivered/s against the quota, and late reminders over time to a PNG.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Simulate this population file (`punctual forecast --save-population`) instead of the
    /// scenario's: each reminder due at its own deliver_after, released minute by minute.
    #[arg(long, conflicts_with_all = ["scenario", "reminders", "tight_share", "tight_seconds", "baseline"])]
    population: Option<PathBuf>,
    /// Simulate the population another command generates, with the same flags: `run` (the
    /// renewals `punctual run` imports: --reminders, default 3,000, and --tight-share, default
    /// 0.1), so the two reports can be compared key by key (`make fidelity`); `staggered` (the
    /// same renewals due over 40 minutes instead of in one minute; default 12,000).
    #[arg(long, value_parser = ["run", "staggered"], conflicts_with_all = ["scenario", "population", "tight_seconds", "baseline"])]
    workload: Option<String>,
    /// With --population or --workload: the operator's pause holds the scheduler until this
    /// many minutes after the day's first deliver_after, then lifts; the next tick catches up
    /// the whole backlog at once. EDF's optimum is then measured from the lift.
    #[arg(long, default_value_t = 0, requires = "day")]
    pause_minutes: u64,
    /// With `--workload run`: this many reminders are dead letters at T0 (`punctual run
    /// --redrive`'s: due with the fresh ones, hours from their deadline, `attempt_limit`), and
    /// the redrive moves them back while the fresh ones run, at half the redrive share.
    #[arg(long, default_value_t = 0, requires = "workload")]
    redrive: usize,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// `punctual forecast` (after `punctual` has read the day from the table).
#[derive(Args)]
struct ForecastArgs {
    /// The day's population file.
    #[arg(long)]
    population: PathBuf,
    /// The day (for the report).
    #[arg(long)]
    date: String,
    /// The channel the population is of (for the report).
    #[arg(long)]
    channel: Option<String>,
    #[command(flatten)]
    capacity: Capacity,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

/// The quota and the senders a simulation runs with (`simulate` and `forecast` alike).
#[derive(Args)]
struct Capacity {
    /// Provider quota, calls per second.
    #[arg(long, default_value_t = 100.0)]
    quota: f64,
    /// Concurrent workers on the normal lane (its mapping's MaximumConcurrency).
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Concurrent workers on the urgent lane.
    #[arg(long, default_value_t = 10)]
    urgent_concurrency: usize,
}

impl Capacity {
    /// False when a lane would have no workers or the provider no quota.
    fn is_positive(&self) -> bool {
        self.quota > 0.0 && self.concurrency > 0 && self.urgent_concurrency > 0
    }
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (lo, hi) = s.split_once('-').ok_or_else(|| format!("{s:?} is not MIN-MAX (e.g. 30-90)"))?;
    let num = |x: &str| x.trim().parse::<u64>().map_err(|_| format!("{x:?} is not a whole number of seconds"));
    let (lo, hi) = (num(lo)?, num(hi)?);
    if lo == 0 || hi < lo {
        return Err(format!("{s:?}: need 0 < MIN <= MAX"));
    }
    Ok((lo, hi))
}

/// Peak resident memory of this process, kB (`VmHWM`; Linux, None elsewhere).
fn peak_rss_kb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Simulate(args) => simulate_command(args),
        Command::Check(args) => check_command(args),
        Command::Forecast(args) => forecast_command(args),
        Command::Drill(args) => drill_command(args),
    }
}

fn drill_command(a: DrillArgs) -> ExitCode {
    use punctual_sim::drill::catalogue::Incident;
    let incidents: Vec<Incident> = match a.incident.as_str() {
        "all" => Incident::ALL.to_vec(),
        "none" => Vec::new(),
        list => {
            let mut out = Vec::new();
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let Some(i) = Incident::parse(name) else {
                    let names: Vec<_> = Incident::ALL.iter().map(|i| i.name()).collect();
                    eprintln!("punctual drill: unknown incident {name:?}; one of: {}, all, none", names.join(", "));
                    return ExitCode::from(2);
                };
                out.push(i);
            }
            out
        }
    };
    if a.mornings > punctual_sim::drill::catalogue::NORMAL_DAYS {
        eprintln!("punctual drill: --mornings is at most {}", punctual_sim::drill::catalogue::NORMAL_DAYS);
        return ExitCode::from(2);
    }
    let opts = punctual_sim::drill::DrillOptions {
        incidents,
        mornings: a.mornings,
        seed: a.seed,
        parameters: a.parameters.into_iter().collect(),
    };
    let runs = opts.incidents.len() + opts.mornings;
    let mut done = 0;
    let started = std::time::Instant::now();
    let report = punctual_sim::drill::drill(&a.template, &opts, |line| {
        done += 1;
        eprintln!("[{done:>2}/{runs}] {line}  ({:.0} s)", started.elapsed().as_secs_f64());
    });
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("punctual drill: {e}");
            return ExitCode::from(2);
        }
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        print!("{}", punctual_sim::drill::render(&report));
    }
    if report.ok { ExitCode::SUCCESS } else { ExitCode::from(3) }
}

fn check_command(a: CheckArgs) -> ExitCode {
    use punctual_sim::check::{CheckConfig, check};
    if a.seeds == 0 || a.reminders == 0 || a.senders == 0 {
        eprintln!("punctual check: --seeds, --reminders and --senders must be positive");
        return ExitCode::from(2);
    }
    let config = CheckConfig {
        reminders: a.reminders,
        senders: a.senders,
        channels: a.channels,
        honours_keys: !a.no_keys,
        indeterminate: a.indeterminate,
        ..CheckConfig::new(a.seeds, a.first_seed)
    };
    let every = (a.seeds / 100).max(1);
    let mut progress = punctual_core::progress::Progress::new(a.seeds);
    let report = check(&config, |done, r| {
        if done % every == 0 || done == a.seeds {
            let broken: u64 = r.violations.values().sum();
            progress.update(done, || format!("check  {done:>6}/{} seeds  violations {broken:<6}", a.seeds));
        }
    });
    progress.finish();
    let broken: u64 = report.violations.values().sum();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        println!(
            "punctual check: {} seeds from {} ({} reminders and {} senders each, skew bound {} ms) in {:.1} s",
            report.seeds,
            report.first_seed,
            report.reminders,
            report.senders,
            report.skew_bound_ms,
            report.wall_seconds
        );
        let v: Vec<String> = report.violations.iter().map(|(k, n)| format!("{k}={n}")).collect();
        println!("violations       {}", v.join(" "));
        let f: Vec<String> = report.faults_injected.iter().map(|(k, n)| format!("{k}={n}")).collect();
        println!("faults injected  {}", f.join(" "));
        let o: Vec<String> = report.outcomes.iter().map(|(k, n)| format!("{k}={n}")).collect();
        println!("outcomes         {}", o.join(" "));
        let keys = if report.provider_keys { "honours idempotency keys" } else { "no idempotency keys" };
        println!("provider         {keys}, {}; double effects {}", report.indeterminate, report.double_effects);
        if let Some(v) = &report.first_violation {
            println!("first violation  {} seed {} reminder {}: {}", v.invariant, v.seed, v.reminder_id, v.detail);
            println!("replay           {}", v.replay);
        }
    }
    if broken == 0 { ExitCode::SUCCESS } else { ExitCode::from(3) }
}

fn simulate_command(a: SimulateArgs) -> ExitCode {
    let Some(sc) = Scenario::parse(&a.scenario) else {
        let names: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
        eprintln!("punctual simulate: unknown scenario {:?}; one of: {}", a.scenario, names.join(", "));
        return ExitCode::from(2);
    };
    match a.baseline.as_deref() {
        None | Some("naive") => {}
        Some("shared") if sc == Scenario::Channels => {}
        Some("shared") => {
            eprintln!(
                "punctual simulate: --baseline shared compares channels' limiters: only with --scenario channels"
            );
            return ExitCode::from(2);
        }
        Some(other) => {
            eprintln!(
                "punctual simulate: unknown baseline {other:?}; one of: naive, shared (with --scenario channels)"
            );
            return ExitCode::from(2);
        }
    }
    if a.channel_concurrency.is_some() && sc != Scenario::Channels {
        eprintln!("punctual simulate: --channel-concurrency gives SMS its own queue: only with --scenario channels");
        return ExitCode::from(2);
    }
    if !a.capacity.is_positive() || a.reminders == Some(0) {
        eprintln!("punctual simulate: --quota, --concurrency, --urgent-concurrency and --reminders must be positive");
        return ExitCode::from(2);
    }
    if a.tight_share.is_some_and(|f| !(0.0..=1.0).contains(&f)) {
        eprintln!("punctual simulate: --tight-share must be between 0 and 1");
        return ExitCode::from(2);
    }
    if a.tenant_share.is_some_and(|f| !(f > 0.0 && f <= 1.0)) {
        eprintln!("punctual simulate: --tenant-share must be in (0, 1]");
        return ExitCode::from(2);
    }
    let slo = match slo_policy() {
        Ok(p) => p,
        Err(code) => return code,
    };
    let population = match (&a.population, &a.workload) {
        (Some(path), _) => match load_population(path) {
            Ok(p) => Some(std::sync::Arc::new(p)),
            Err(code) => return code,
        },
        (None, Some(w)) => Some(std::sync::Arc::new(run_workload(w, a.reminders, a.tight_share, a.redrive))),
        (None, None) => None,
    };
    let (quota, concurrency, seed) = (a.capacity.quota, a.capacity.concurrency, a.seed);
    let config = SimConfig {
        reminders: population.as_ref().map_or(a.reminders.unwrap_or(sc.default_reminders()), |p| p.rows.len()),
        population,
        slo,
        quota,
        concurrency,
        urgent_concurrency: a.capacity.urgent_concurrency,
        seed,
        tight_share: a.tight_share.unwrap_or(if a.workload.is_some() { 0.1 } else { SimConfig::new(sc).tight_share }),
        tight_seconds: a.tight_seconds.unwrap_or(SimConfig::new(sc).tight_seconds),
        fair_queues: !a.no_fair_queues,
        tenant_share: a.tenant_share,
        paused_for: std::time::Duration::from_secs(a.pause_minutes.saturating_mul(60)),
        channel_concurrency: a.channel_concurrency,
        channel_urgent_lane: !a.no_channel_urgent_lane,
        ..SimConfig::new(sc)
    };
    let started = std::time::Instant::now();
    let report = simulate(&config, Worker::Punctual);
    let scenario_name = match (&a.population, &a.workload) {
        (Some(_), _) => "population",
        (None, Some(w)) if w == "staggered" => "workload staggered",
        (None, Some(_)) => "workload run",
        (None, None) => sc.name(),
    };
    let wall = started.elapsed().as_secs_f64();
    let mut value = serde_json::to_value(&report).unwrap_or_default();
    // Measurements of this process, not of the simulated system (they vary run to run).
    value["wall_seconds"] = serde_json::json!((wall * 100.0).round() / 100.0);
    let peak_kb = peak_rss_kb();
    value["peak_rss_mb"] = serde_json::json!(peak_kb.map(|kb| (kb / 1024.0).round()));
    // The process's peak over the reminders (the simulator's own tables are most of it at scale).
    value["bytes_per_reminder"] =
        serde_json::json!(peak_kb.map(|kb| (kb * 1024.0 / report.reminders.max(1) as f64).round()));
    let baseline_name = a.baseline.as_deref().unwrap_or("");
    let naive = match a.baseline.as_deref() {
        Some("shared") => Some(simulate(&SimConfig { shared_limiter: true, ..config.clone() }, Worker::Punctual)),
        Some(_) => Some(simulate(&config, Worker::Naive)),
        None => None,
    };
    if let Some(n) = &naive {
        value["baseline"] = serde_json::to_value(n).unwrap_or_default();
    }
    if let Some(path) = &a.chart {
        let title =
            format!("punctual simulate --scenario {scenario_name} ({} reminders, quota {quota}/s)", config.reminders);
        if let Err(e) = punctual_sim::chart::draw(path, &title, &report, naive.as_ref().map(|n| (baseline_name, n))) {
            eprintln!("punctual: {e}");
            return ExitCode::from(1);
        }
        eprintln!("chart written to {}", path.display());
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    println!(
        "scenario {} ({} reminders, quota {quota}/s, concurrency {concurrency} + {} urgent, seed {seed}, tight {:.0} % in {}-{} s)",
        scenario_name,
        config.reminders,
        config.urgent_concurrency,
        config.tight_share * 100.0,
        config.tight_seconds.0,
        config.tight_seconds.1
    );
    let keys = [
        "delivered",
        "duplicates",
        "double_effects",
        "late",
        "expired",
        "dead_lettered",
        "lost",
        "provider_calls",
        "provider_429",
        "drain_seconds",
        "floor_seconds",
        "utilisation",
        "retry_amplification",
        "max_oldest_age_seconds",
        "alarm_first_fired_seconds",
        "first_late_seconds",
        "edf_late",
        "edf_slo_breached",
        "limiter_writes_per_call",
        "sqs_requests_per_message",
        "dynamodb_writes_per_message",
        "released_urgent",
        "cost_per_million_usd",
        "wall_seconds",
        "peak_rss_mb",
        "bytes_per_reminder",
    ];
    println!("{:<28} {:>16} {baseline_name:>16}", "", "punctual");
    let show = |v: &serde_json::Value| match v {
        serde_json::Value::Number(n) => {
            n.as_f64().map_or(n.to_string(), |f| if f.fract() == 0.0 { format!("{f:.0}") } else { format!("{f:.3}") })
        }
        serde_json::Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
    for k in keys {
        let b = value.get("baseline").map(|b| show(&b[k])).unwrap_or_default();
        println!("{k:<28} {:>16} {b:>16}", show(&value[k]));
    }
    for k in ["sqs_requests", "dynamodb_writes", "dynamodb_reads", "lambda_gb_seconds"] {
        let b = value.get("baseline").map(|b| b["cost"][k].to_string()).unwrap_or_default();
        println!("{:<28} {:>16} {b:>16}", format!("  {k}/1M"), value["cost"][k].to_string());
    }
    println!("{:<28} {}", "requests/msg", report.requests_per_message.line());
    let k = &report.sqs_requests_by_kind;
    println!(
        "{:<28} receives {:.3} + empty {:.3} + deletes {:.3} + requeues {:.3} + DLQ {:.3} + redrive {:.3}",
        "SQS/msg by kind", k.receives, k.empty_receives, k.deletes, k.requeues, k.dead_letters, k.redrive
    );
    if let Some(slo) = &report.slo {
        println!("{}", slo.line());
    }
    for (name, c) in &report.channels {
        let b = naive.as_ref().and_then(|n| n.channels.get(name));
        let pair = |f: fn(&punctual_sim::simulate::ChannelReport) -> String, c| {
            format!("{:>16} {:>16}", f(c), b.map(f).unwrap_or_default())
        };
        println!("channel {name}");
        println!("{:<28} {}", "  delivered / reminders", pair(|c| format!("{} / {}", c.delivered, c.reminders), c));
        println!("{:<28} {}", "  late", pair(|c| c.late.to_string(), c));
        println!("{:<28} {}", "  provider_429", pair(|c| c.provider_429.to_string(), c));
        println!(
            "{:<28} {}",
            "  drain / floor, s",
            pair(|c| format!("{:.1} / {:.1}", c.drain_seconds, c.floor_seconds), c)
        );
        println!("{:<28} {}", "  utilisation", pair(|c| format!("{:.3}", c.utilisation), c));
    }
    if report.tenant_p99_delay_seconds.len() > 1 {
        println!("p99 delay per tenant, s (fair queues {})", if config.fair_queues { "on" } else { "off" });
        for (t, d) in &report.tenant_p99_delay_seconds {
            println!("  {t:<26} {d:>16.1}");
        }
    }
    ExitCode::SUCCESS
}

/// The SLO from the environment, as the functions read it; exit 2 when invalid.
fn slo_policy() -> Result<punctual_core::slo::SloPolicy, ExitCode> {
    let env = |k: &str| std::env::var(k).ok();
    punctual_core::slo::SloPolicy::parse(env("SLO_TARGET").as_deref(), env("SLO_WITHIN_SECS").as_deref()).map_err(|e| {
        eprintln!("punctual: refused: {e}");
        ExitCode::from(2)
    })
}

/// The renewals `punctual run` would import now (its generator, its defaults), as the
/// simulator's population: all active, none released yet.
fn run_workload(
    workload: &str,
    reminders: Option<usize>,
    tight_share: Option<f64>,
    letters: usize,
) -> punctual_sim::SimPopulation {
    let (n, span) = match workload {
        "staggered" => (12_000, punctual_core::workload::STAGGERED_MINUTES),
        _ => (3000, 0),
    };
    let (n, now) = (reminders.unwrap_or(n), chrono::Utc::now());
    punctual_sim::SimPopulation::from_renewals(&punctual_core::workload::generate_spread(
        n,
        now,
        span,
        tight_share.unwrap_or(0.1).clamp(0.0, 1.0),
    ))
    .with_letters(&punctual_core::workload::letter_renewals(n, letters, now))
}

/// Reads a population file; exit 2 (with the line) when it does not read whole.
fn load_population(path: &std::path::Path) -> Result<punctual_sim::SimPopulation, ExitCode> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        eprintln!("punctual: cannot read the population {}: {e}", path.display());
        ExitCode::from(2)
    })?;
    let rows = punctual_core::reconcile::parse_population(&text).map_err(|e| {
        eprintln!("punctual: refused: {}: {e}", path.display());
        ExitCode::from(2)
    })?;
    Ok(punctual_sim::SimPopulation::new(&rows))
}

/// The forecast report (`--json` keys are a contract).
#[derive(serde::Serialize)]
struct Forecast {
    date: String,
    /// The one channel projected (absent: the whole day).
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<String>,
    /// Renewals of the day in the file, every status.
    population: u64,
    /// Not simulated: cancelled or paid.
    excluded: std::collections::BTreeMap<String, u64>,
    quota: f64,
    concurrency: usize,
    urgent_concurrency: usize,
    /// The projected SLO over the day's due population.
    slo: Option<punctual_core::slo::SloSummary>,
    /// Projected late reminders (missed `deliver_by`), all tenants.
    late: u64,
    /// Projected late reminders per tenant, most first.
    late_by_tenant: Vec<(String, u64)>,
    /// The first projected SLO breach (a reminder's deliver_after + within passing
    /// undelivered), real time.
    earliest_breach_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The first reminder projected to miss its deadline, real time.
    first_late_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When the projected-breach alarm would first fire, real time.
    alarm_first_fired_at: Option<chrono::DateTime<chrono::Utc>>,
    dead_lettered: std::collections::BTreeMap<String, u64>,
    wall_seconds: f64,
}

fn forecast_command(a: ForecastArgs) -> ExitCode {
    if !a.capacity.is_positive() {
        eprintln!("punctual forecast: --quota, --concurrency and --urgent-concurrency must be positive");
        return ExitCode::from(2);
    }
    let slo = match slo_policy() {
        Ok(p) => p,
        Err(code) => return code,
    };
    let pop = match load_population(&a.population) {
        Ok(p) => std::sync::Arc::new(p),
        Err(code) => return code,
    };
    let started = std::time::Instant::now();
    if !a.json {
        eprintln!("forecast: simulating {} reminders of {} at {}/s …", pop.rows.len(), a.date, a.capacity.quota);
    }
    let config = SimConfig {
        reminders: pop.rows.len(),
        population: Some(std::sync::Arc::clone(&pop)),
        slo,
        quota: a.capacity.quota,
        concurrency: a.capacity.concurrency,
        urgent_concurrency: a.capacity.urgent_concurrency,
        seed: a.seed,
        ..SimConfig::new(Scenario::Normal)
    };
    let report = simulate(&config, Worker::Punctual);
    let real = |secs: Option<f64>| {
        secs.map(|s| pop.real(punctual_sim::simulate::t0() + chrono::TimeDelta::milliseconds((s * 1000.0) as i64)))
    };
    let mut late_by_tenant: Vec<(String, u64)> = report.late_by_tenant.clone().into_iter().collect();
    late_by_tenant.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    let f = Forecast {
        date: a.date.clone(),
        channel: a.channel.clone(),
        population: (pop.rows.len() as u64) + pop.excluded.values().sum::<u64>(),
        excluded: pop.excluded.clone(),
        quota: a.capacity.quota,
        concurrency: a.capacity.concurrency,
        urgent_concurrency: a.capacity.urgent_concurrency,
        slo: report.slo.clone(),
        late: report.counts.late,
        late_by_tenant,
        earliest_breach_at: real(report.first_slo_breach_seconds),
        first_late_at: real(report.first_late_seconds),
        alarm_first_fired_at: real(report.alarm_first_fired_seconds),
        dead_lettered: report.counts.dead_lettered.clone(),
        wall_seconds: (started.elapsed().as_secs_f64() * 100.0).round() / 100.0,
    };
    let meets = f.slo.as_ref().is_none_or(|s| s.meets_target);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&f).unwrap_or_default());
    } else {
        let at = |t: Option<chrono::DateTime<chrono::Utc>>| t.map_or_else(|| "none".to_owned(), |t| t.to_rfc3339());
        println!(
            "forecast {}{}: {} renewals ({} excluded), quota {}/s, concurrency {} + {} urgent",
            f.date,
            f.channel.as_deref().map_or_else(String::new, |c| format!(" channel {c}")),
            f.population,
            f.excluded.values().sum::<u64>(),
            f.quota,
            f.concurrency,
            f.urgent_concurrency
        );
        if let Some(s) = &f.slo {
            println!("  projected {}", s.line());
        }
        println!("  projected late     {}", f.late);
        println!("  earliest breach    {}", at(f.earliest_breach_at));
        println!("  first late         {}", at(f.first_late_at));
        println!("  breach alarm fires {}", at(f.alarm_first_fired_at));
        for (t, n) in f.late_by_tenant.iter().take(10) {
            println!("  late  {t:<24} {n}");
        }
        println!("  ({:.1} s)", f.wall_seconds);
        println!("{}", if meets { "the projection meets the SLO" } else { "the projection MISSES the SLO (exit 3)" });
    }
    if meets { ExitCode::SUCCESS } else { ExitCode::from(3) }
}
