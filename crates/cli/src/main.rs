//! `punctual` — the command line: a thin clap front. Each subcommand has its own args struct
//! and is dispatched to the room that does the job: the operator commands to `punctual-ops`,
//! the local pipeline (`run`, `local`, `canary`, `bench-limiter`) to `punctual-harness`, and
//! `simulate` to the `punctual-sim` binary beside this one (so this binary never links the
//! in-memory fakes). Flag names, exit statuses and JSON keys are a contract.
//!
//! Exit statuses: 0 success; 1 failure; 2 refused input; 3 ran but reports a failure (rows
//! rejected, aborted redrive, failed canary, unaccounted reminders, a forecast missing the SLO);
//! 4 a run or drain lost reminders or could not reconcile its window; 130 interrupted.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use punctual_harness::{HarnessError, bench, canary, local, run};
use punctual_ops::{OpsError, Target};

#[derive(Parser)]
#[command(
    name = "punctual",
    version,
    about = "Deadline-aware, rate-limited reminder delivery on AWS Lambda + SQS + DynamoDB"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Import renewals from a CSV or JSON Lines file into the renewals table.
    ///
    /// Exit status: 0 all rows imported, 3 some rows rejected (the rest imported), 1 failure (a
    /// table failure part-way prints the summary of what was written first).
    Import(ImportArgs),
    /// Run the whole pipeline on this machine against the emulator, with a live progress line
    /// and a final report: import → scheduler → SQS → sender → provider double.
    Run(RunArgs),
    /// Simulate a runbook scenario in virtual time with the same core services over in-memory
    /// adapters; optionally side by side with a naive worker (runs `punctual-sim`; see
    /// `punctual simulate --help`).
    #[command(disable_help_flag = true)]
    Simulate(PassThrough),
    /// The deterministic fault checker: seeded fault plans, invariants I1–I8 checked after
    /// every seed (runs `punctual-sim`; see `punctual check --help`).
    #[command(disable_help_flag = true)]
    Check(PassThrough),
    /// The template's alarms proven against incidents: each incident of the runbook through the
    /// simulator, the template's own alarms evaluated with CloudWatch's semantics; which alarm
    /// pages, when, and whether a normal morning pages anyone (runs `punctual-sim`; see
    /// `punctual drill --help`).
    #[command(disable_help_flag = true)]
    Drill(PassThrough),
    /// Leave a local pipeline running (emulator, provider double, queues, tables), drain it
    /// through the sender, tear it down.
    Local(LocalArgs),
    /// Queue depths, DLQ by reason, oldest age, backlog against projected drain, pause state,
    /// today's deadline SLO and its worst tenants.
    Status(StatusArgs),
    /// Account for every renewal due in a window: delivered, late, expired, cancelled,
    /// dead-lettered by reason, waiting (with slack) or UNACCOUNTED (named), plus the window's
    /// deadline SLO. Reads O(due population) through the renewals table's `by_day_channel` index.
    ///
    /// Exit status: 0 every renewal accounted for, 3 some unaccounted, 2 refused input.
    Reconcile(ReconcileArgs),
    /// Project tomorrow morning before it happens: the renewals due on a day, read from the
    /// table, run through the simulator (both lanes, the real quota and concurrency): projected
    /// SLO attainment, late reminders per tenant, the earliest projected breach.
    ///
    /// Exit status: 0 the projection meets SLO_TARGET, 3 it misses it, 2 refused input.
    Forecast(ForecastArgs),
    /// Why a reminder is where it is: state, attempts, history, next time, slack, DLQ reason,
    /// redrive lineage, what a redrive would consume.
    Explain(ExplainArgs),
    /// Pause delivery: the scheduler releases nothing, the sender holds messages without
    /// spending attempts, redrive refuses to start. Audited.
    Pause(PauseArgs),
    /// Lift a pause. Audited.
    Resume(ResumeArgs),
    /// Move dead letters back to the send queue: bounded, paced, audited; a dry run first.
    Redrive(RedriveArgs),
    /// One synthetic reminder through import → scheduler → SQS → limiter → provider → ack,
    /// each stage timed. Run it before each production change.
    Canary(CanaryArgs),
    /// Measure the shared limiter for real: sender instances drawing from one DynamoDB
    /// schedule against the provider double, one row per block size (the frontier).
    BenchLimiter(BenchLimiterArgs),
    /// Measure the ingest for real: a campaign of renewal commands through the ingest
    /// function on the local emulators, beside the emulator's raw conditional-write rate.
    BenchIngest(BenchIngestArgs),
    /// Serve the provider double (used by `local up`; also handy on its own).
    #[command(hide = true)]
    ProviderDouble(ProviderDoubleArgs),
}

/// Arguments handed over verbatim to a sibling binary.
#[derive(Args)]
struct PassThrough {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// `punctual import`.
#[derive(Args)]
struct ImportArgs {
    /// The file (.csv with a header row, or .jsonl).
    file: PathBuf,
    /// The renewals table (else RENEWALS_TABLE, else the running `local up` pipeline's).
    #[arg(long)]
    table: Option<String>,
    /// Where the file's optional `email` column goes (else RECIPIENTS_TABLE, else the local
    /// pipeline's): addresses are never written to the renewals table.
    #[arg(long)]
    recipients_table: Option<String>,
    /// The AWS endpoint (else the SDK's chain: AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB;
    /// else the local pipeline's endpoints).
    #[arg(long)]
    endpoint: Option<String>,
    /// Format, when the extension does not say.
    #[arg(long, value_enum)]
    format: Option<punctual_ops::import::Format>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// `punctual run`.
#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    options: run::RunOptions,
    /// Print the report as JSON (progress still goes to stderr).
    #[arg(long)]
    json: bool,
}

/// `punctual local`.
#[derive(Args)]
struct LocalArgs {
    #[command(subcommand)]
    action: LocalAction,
}

/// `punctual status`.
#[derive(Args)]
struct StatusArgs {
    /// Leave out today's deadline SLO (which reads today's due population): the
    /// constant-cost status for a large incident.
    #[arg(long)]
    no_slo: bool,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

/// `punctual reconcile`.
#[derive(Args)]
struct ReconcileArgs {
    /// Window start on `deliver_after`, inclusive: RFC 3339, a date (00:00 UTC) or `now`.
    #[arg(long)]
    from: String,
    /// Window end, exclusive (at most 31 days after --from).
    #[arg(long, default_value = "now")]
    to: String,
    /// One tenant only.
    #[arg(long)]
    tenant: Option<String>,
    /// One declared channel only, judged against the queues that carry it (without it, each
    /// channel the window's renewals use gets its own figures beside the totals).
    #[arg(long)]
    channel: Option<String>,
    /// Seconds a due renewal may stay unreleased before it counts as never released, and a
    /// released one may take to show in SQS's approximate counts (default 120: two scheduler
    /// ticks).
    #[arg(long)]
    grace: Option<u64>,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

/// `punctual forecast`.
#[derive(Args)]
struct ForecastArgs {
    /// The UTC day whose due renewals to project: YYYY-MM-DD, `today` or `tomorrow` (UTC).
    #[arg(long)]
    date: String,
    /// Provider quota, calls per second (default: PROVIDER_RATE_PER_SEC, else the target's;
    /// with --channel, that channel's own).
    #[arg(long)]
    quota: Option<f64>,
    /// One declared channel only: its renewals of the day at its own quota (a channel's
    /// limiter and pause are its own, so it drains on its own).
    #[arg(long)]
    channel: Option<String>,
    /// Concurrent senders on the normal lane (the mapping's MaximumConcurrency).
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Concurrent senders on the urgent lane.
    #[arg(long, default_value_t = 10)]
    urgent_concurrency: usize,
    /// Also write the population read from the table to this CSV (`punctual simulate
    /// --population FILE` replays it).
    #[arg(long)]
    save_population: Option<PathBuf>,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

/// `punctual explain`.
#[derive(Args)]
struct ExplainArgs {
    /// A reminder id (rem_…) or a DLQ / send-queue message id.
    id: String,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

/// `punctual pause`.
#[derive(Args)]
struct PauseArgs {
    /// Why (required).
    #[arg(long)]
    reason: String,
    /// Who (required).
    #[arg(long)]
    owner: String,
    /// Pause one declared channel only (its own switch): the other channels keep sending.
    #[arg(long)]
    channel: Option<String>,
}

/// `punctual resume`.
#[derive(Args)]
struct ResumeArgs {
    /// Who (recorded; default $USER).
    #[arg(long)]
    owner: Option<String>,
    /// Resume one declared channel's own switch (the fleet's stays as it is).
    #[arg(long)]
    channel: Option<String>,
}

/// `punctual redrive`.
#[derive(Args)]
struct RedriveArgs {
    /// Why (required).
    #[arg(long)]
    reason: String,
    /// Who (required).
    #[arg(long)]
    owner: String,
    /// Most to move (hard cap REDRIVE_MAX_MESSAGES).
    #[arg(long)]
    max_messages: u64,
    /// Pace (never above the redrive share of the quota).
    #[arg(long)]
    max_per_second: f64,
    /// Only these DLQ reasons.
    #[arg(long = "failure-reason")]
    failure_reasons: Vec<String>,
    /// Only these tenants.
    #[arg(long = "tenant")]
    tenants: Vec<String>,
    /// Only these reminders.
    #[arg(long = "reminder")]
    reminders: Vec<String>,
    /// Only these channels' letters (a channel at a time goes at its own redrive cap; a mixed
    /// run is paced letter by letter, so a slower channel's letters hold the others).
    #[arg(long = "channel")]
    channels: Vec<String>,
    /// Move this many first and watch them.
    #[arg(long)]
    canary: Option<u64>,
    /// How long to watch the canary (default 60 s; behind a large backlog, longer).
    #[arg(long)]
    canary_timeout_seconds: Option<u64>,
    /// Abort when more than this fraction of settled redriven reminders fail again.
    #[arg(long)]
    abort_failure_ratio: Option<f64>,
    /// Show what would move; move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Invoke this deployed redrive function instead of running in process.
    #[arg(long, conflicts_with = "endpoint")]
    function: Option<String>,
    /// Run in process against this endpoint (default AWS_ENDPOINT_URL or `local up`'s).
    #[arg(long)]
    endpoint: Option<String>,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

/// `punctual canary`.
#[derive(Args)]
struct CanaryArgs {
    /// Print as JSON.
    #[arg(long)]
    json: bool,
}

/// `punctual bench-ingest`.
#[derive(Args)]
struct BenchIngestArgs {
    #[command(flatten)]
    options: punctual_harness::bench_ingest::BenchIngestOptions,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// `punctual bench-limiter`.
#[derive(Args)]
struct BenchLimiterArgs {
    #[command(flatten)]
    options: bench::BenchOptions,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// `punctual provider-double`.
#[derive(Args)]
struct ProviderDoubleArgs {
    #[arg(long, default_value_t = 0)]
    port: u16,
    #[arg(long, default_value_t = 100.0)]
    quota: f64,
    #[arg(long, default_value_t = 10.0)]
    burst: f64,
    #[arg(long)]
    token: Option<String>,
}

#[derive(Subcommand)]
enum LocalAction {
    /// Start the emulator (or use AWS_ENDPOINT_URL) and the provider double, create the
    /// resources, and print how to reach them.
    Up {
        /// Provider quota, calls per second.
        #[arg(long, default_value_t = 100.0)]
        quota: f64,
        /// Who delivers: `http` (the provider double) or `ses` (Amazon SES on the emulator,
        /// addresses in the recipients table).
        #[arg(long, default_value = "http", value_parser = ["http", "ses"])]
        provider: String,
        /// Declared channels, each with its own provider and quota: `NAME=http|ses[:RATE]`,
        /// comma-separated (`email=ses,sms=http:10`): `http` is a provider double of its own,
        /// `ses` Amazon SES on the emulator (one at most); RATE defaults to `--quota`. Every
        /// channel after the first gets a queue and an urgent lane of its own; the demo renewals take the
        /// channels in turn.
        #[arg(long)]
        channels: Option<String>,
        /// Print endpoints and names as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the scheduler and the sender (as the event source mapping would) until the send
    /// queue holds nothing visible, in flight or delayed; report every reminder.
    Drain {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop what `local up` started.
    Down,
    /// Print a valid message body for demo renewal N (0..3) that `local up` seeded, due now:
    /// for hand-sent messages (`aws sqs send-message`) and smoke tests.
    DemoMessage {
        /// Which demo renewal.
        #[arg(default_value_t = 0)]
        n: usize,
    },
}

fn fail(e: &dyn std::error::Error) -> ExitCode {
    eprintln!("punctual: {e}");
    let mut source = e.source();
    while let Some(s) = source {
        eprintln!("  caused by: {s}");
        source = s.source();
    }
    ExitCode::from(1)
}

fn print_json(value: &impl serde::Serialize) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
}

/// Prints an operator command's answer (human or `--json`). Exit 0 when it reports success,
/// 3 when it ran but reports a failure, 2 on refused input, 1 on errors.
fn ops_out<T: serde::Serialize>(result: Result<(T, String, bool), OpsError>, json: bool) -> ExitCode {
    match result {
        Ok((value, text, ok)) => {
            if json {
                print_json(&value);
            } else {
                print!("{text}");
            }
            if ok { ExitCode::SUCCESS } else { ExitCode::from(3) }
        }
        Err(e @ OpsError::Invalid(_)) => {
            eprintln!("punctual: {e}");
            ExitCode::from(2)
        }
        Err(e) => fail(&e),
    }
}

/// Prints a report (JSON, or `human` followed by where the JSON was saved) and saves its JSON
/// to `path`.
fn report_out<T: serde::Serialize>(report: &T, path: &str, json: bool, human: String, label: &str) {
    let text = serde_json::to_string_pretty(report).unwrap_or_default();
    let saved = std::fs::write(path, &text).is_ok();
    if json {
        println!("{text}");
    } else {
        print!("{human}");
        if saved {
            println!("{label}{path}");
        }
    }
}

fn harness_err(e: &HarnessError) -> ExitCode {
    match e {
        HarnessError::Interrupted(stop) => {
            eprintln!("punctual: interrupted ({stop:?}); everything it started was stopped");
            ExitCode::from(stop.exit_code())
        }
        e => fail(e),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Import(a) => import(a).await,
        Command::Run(a) => run_command(a).await,
        Command::Local(a) => local_command(a).await,
        Command::Simulate(a) => sibling("punctual-sim", "simulate", &a.args),
        Command::Check(a) => sibling("punctual-sim", "check", &a.args),
        Command::Drill(a) => sibling("punctual-sim", "drill", &a.args),
        Command::Status(a) => status(a).await,
        Command::Reconcile(a) => reconcile(a).await,
        Command::Forecast(a) => forecast(a).await,
        Command::Explain(a) => explain(a).await,
        Command::Pause(a) => pause(a).await,
        Command::Resume(a) => resume(a).await,
        Command::Redrive(a) => redrive(a).await,
        Command::Canary(a) => canary_command(a).await,
        Command::BenchLimiter(a) => bench_limiter(a).await,
        Command::BenchIngest(a) => bench_ingest(a).await,
        Command::ProviderDouble(a) => provider_double(a).await,
    }
}

/// Runs `name subcommand args…` from beside this binary (else from `PATH`) and exits with its
/// status.
fn sibling(name: &str, subcommand: &str, args: &[String]) -> ExitCode {
    let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join(name))).filter(|p| p.is_file());
    let program = beside.unwrap_or_else(|| PathBuf::from(name));
    match std::process::Command::new(&program).arg(subcommand).args(args).status() {
        Ok(status) => status.code().and_then(|c| u8::try_from(c).ok()).map_or(ExitCode::from(1), ExitCode::from),
        Err(e) => {
            eprintln!(
                "punctual {subcommand}: cannot run {}: {e} (build it with `cargo build --workspace`, or install it beside punctual)",
                program.display()
            );
            ExitCode::from(1)
        }
    }
}

async fn import(a: ImportArgs) -> ExitCode {
    let target =
        match punctual_ops::import::ImportTarget::resolve(a.table, a.recipients_table, a.endpoint.as_deref()).await {
            Ok(t) => t,
            Err(e) => return fail(&e),
        };
    if !a.json {
        eprintln!("importing into {}", target.describe);
    }
    let show = |summary: &punctual_ops::import::ImportSummary| {
        if a.json {
            print_json(summary);
        } else {
            print!("{}", summary.render());
        }
    };
    match punctual_ops::import::import_file(&target, &a.file, a.format, !a.json).await {
        Ok(summary) => {
            show(&summary);
            if summary.rejected.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(3) }
        }
        // Stopped part-way: what was written is said first, then why it stopped (exit 1).
        Err(e @ punctual_ops::import::ImportError::Stopped { .. }) => {
            if let punctual_ops::import::ImportError::Stopped { summary, .. } = &e {
                show(summary);
            }
            fail(&e)
        }
        Err(e) => fail(&e),
    }
}

/// Resolves the target (flags, environment, `local up`'s state) and runs one operator command
/// on it.
async fn on_target<T, F, Fut>(endpoint: Option<&str>, json: bool, command: F) -> ExitCode
where
    T: serde::Serialize,
    F: FnOnce(Target) -> Fut,
    Fut: std::future::Future<Output = Result<(T, String, bool), OpsError>>,
{
    let result = match Target::resolve(endpoint) {
        Ok(t) => command(t).await,
        Err(e) => Err(e),
    };
    ops_out(result, json)
}

async fn status(a: StatusArgs) -> ExitCode {
    on_target(None, a.json, |t| async move {
        let s = punctual_ops::status(&t, !a.no_slo).await?;
        let text = s.render();
        Ok((s, text, true))
    })
    .await
}

async fn reconcile(a: ReconcileArgs) -> ExitCode {
    let json = a.json;
    on_target(None, json, |t| async move {
        let policy = punctual_ops::reconcile::slo_policy()?;
        let window = punctual_ops::reconcile::Window {
            channel: a.channel,
            ..punctual_ops::reconcile::Window::parse(&a.from, &a.to, a.tenant, a.grace)?
        };
        let r = punctual_ops::reconcile::reconcile(&t, &window, &policy, !json).await?;
        let text = r.render();
        let ok = r.accounted;
        Ok((r, text, ok))
    })
    .await
}

/// `--date`: `YYYY-MM-DD`, or `today` / `tomorrow` (any case) counted from `today`, the UTC day
/// (the forecast's days are UTC days, as its population is read by UTC `deliver_after`).
fn forecast_day(date: &str, today: chrono::NaiveDate) -> Option<chrono::NaiveDate> {
    let date = date.trim();
    if date.eq_ignore_ascii_case("today") {
        return Some(today);
    }
    if date.eq_ignore_ascii_case("tomorrow") {
        return today.succ_opt();
    }
    chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()
}

/// Reads the day's population from the table, writes it as a population file, and hands it
/// to `punctual-sim forecast` (the simulator lives in its own binary: this one never links
/// the in-memory fakes). The file is kept with `--save-population`, else removed.
async fn forecast(a: ForecastArgs) -> ExitCode {
    let day = match forecast_day(&a.date, chrono::Utc::now().date_naive()) {
        Some(d) => d,
        None => {
            eprintln!("punctual: refused: --date {:?} is not a day (YYYY-MM-DD, today or tomorrow)", a.date);
            return ExitCode::from(2);
        }
    };
    if let Err(e) = punctual_ops::reconcile::slo_policy() {
        eprintln!("punctual: {e}");
        return ExitCode::from(2);
    }
    let target = match Target::resolve(None) {
        Ok(t) => t,
        Err(e) => return fail(&e),
    };
    // With --channel, that channel's own quota unless --quota says otherwise.
    let quota = match (a.quota, a.channel.as_deref()) {
        (Some(q), _) => q,
        (None, None) => target.quota,
        (None, Some(c)) => match target.resources.channel_quota(c) {
            Ok(q) => q,
            Err(e) => return ops_out::<()>(Err(e), a.json),
        },
    };
    let rows = match punctual_ops::reconcile::day_population(&target, day, a.channel.as_deref(), !a.json).await {
        Ok(r) => r,
        Err(e) => return ops_out::<()>(Err(e), a.json),
    };
    // A temporary file of our own: a fresh name, created new (never through a link someone
    // left at a guessable path), removed after; `--save-population` writes where it is told.
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let path = a.save_population.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("punctual-population-{day}-{}-{stamp}.csv", std::process::id()))
    });
    let written = if a.save_population.is_some() {
        std::fs::write(&path, punctual_core::reconcile::population_csv(&rows))
    } else {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.write_all(punctual_core::reconcile::population_csv(&rows).as_bytes()))
    };
    if let Err(e) = written {
        eprintln!("punctual forecast: cannot write the population to {}: {e}", path.display());
        return ExitCode::from(1);
    }
    if !a.json {
        let of = a.channel.as_deref().map_or_else(String::new, |c| format!(" on channel {c}"));
        eprintln!("forecast: {} renewals due on {day}{of} read from {}", rows.len(), target.resources.renewals_table);
    }
    let mut args: Vec<String> = vec![
        "--population".into(),
        path.display().to_string(),
        "--date".into(),
        day.to_string(),
        "--quota".into(),
        quota.to_string(),
        "--concurrency".into(),
        a.concurrency.to_string(),
        "--urgent-concurrency".into(),
        a.urgent_concurrency.to_string(),
    ];
    if let Some(c) = &a.channel {
        args.extend(["--channel".into(), c.clone()]);
    }
    if a.json {
        args.push("--json".into());
    }
    let code = sibling("punctual-sim", "forecast", &args);
    if a.save_population.is_none() {
        let _ = std::fs::remove_file(&path);
    }
    code
}

async fn explain(a: ExplainArgs) -> ExitCode {
    on_target(None, a.json, |t| async move {
        let e = punctual_ops::explain(&t, &a.id).await?;
        let text = e.render();
        Ok((e, text, true))
    })
    .await
}

async fn pause(a: PauseArgs) -> ExitCode {
    on_target(None, false, |t| async move {
        let p = punctual_ops::pause(&t, &a.reason, &a.owner, a.channel.as_deref()).await?;
        let what = a.channel.as_deref().map_or_else(String::new, |c| format!("channel {c} "));
        let text = format!("{what}paused by {} since {}: {}\n", p.owner, p.since, p.reason);
        Ok((p, text, true))
    })
    .await
}

async fn resume(a: ResumeArgs) -> ExitCode {
    let by = a.owner.or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "unknown".into());
    on_target(None, false, |t| async move {
        let was = punctual_ops::resume(&t, &by, a.channel.as_deref()).await?;
        let what = a.channel.as_deref().map_or_else(String::new, |c| format!("channel {c} "));
        let text = match &was {
            Some(p) => format!("{what}resumed (was paused by {} since {}: {})\n", p.owner, p.since, p.reason),
            None => format!("{what}was not paused; nothing to resume\n"),
        };
        Ok((was, text, true))
    })
    .await
}

impl RedriveArgs {
    /// The request the redrive function takes, filled from the flags (the Lambda deserialises
    /// the same type; one validation pass serves both).
    fn request(&self) -> punctual_core::redrive::RedriveRequestWire {
        use punctual_core::redrive::{AbortIfWire, Field, RedriveRequestWire, SelectionWire};
        let strings = |v: &[String]| Field::Given(v.iter().map(|s| serde_json::Value::from(s.as_str())).collect());
        RedriveRequestWire {
            reason: Field::Given(self.reason.clone()),
            owner: Field::Given(self.owner.clone()),
            selection: Field::Given(SelectionWire {
                failure_reasons: strings(&self.failure_reasons),
                tenants: strings(&self.tenants),
                reminder_ids: strings(&self.reminders),
                channels: strings(&self.channels),
                ..SelectionWire::default()
            }),
            max_messages: Field::Given(self.max_messages),
            max_per_second: Field::Given(self.max_per_second),
            canary: self.canary.into(),
            canary_timeout_seconds: self.canary_timeout_seconds.into(),
            abort_if: self
                .abort_failure_ratio
                .map(|r| AbortIfWire { failure_ratio: Field::Given(r), ..AbortIfWire::default() })
                .into(),
            dry_run: Field::Given(self.dry_run),
            unknown: Default::default(),
        }
    }
}

async fn redrive(a: RedriveArgs) -> ExitCode {
    let request = a.request();
    if let Some(name) = &a.function {
        return match punctual_ops::redrive_function(a.endpoint.as_deref(), name, &request).await {
            Ok((answer, function_error)) => {
                if a.json {
                    print_json(&answer);
                } else {
                    println!("{name} answered: {answer}");
                }
                let refused = answer["status"] == "refused";
                if function_error || answer["status"] == "aborted" {
                    ExitCode::from(3)
                } else if refused {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => fail(&e),
        };
    }
    on_target(a.endpoint.as_deref(), a.json, |t| async move {
        let (preview, done) = punctual_ops::redrive(&t, request).await?;
        let mut text = punctual_ops::render_summary(&preview);
        if let Some(d) = &done {
            text.push_str(&punctual_ops::render_summary(d));
        }
        let ok = done.as_ref().is_none_or(|d| d.aborted.is_none());
        Ok((serde_json::json!({ "dry_run": preview, "result": done }), text, ok))
    })
    .await
}

async fn canary_command(a: CanaryArgs) -> ExitCode {
    let target = match Target::resolve(None) {
        Ok(t) => t,
        Err(e) => return fail(&e),
    };
    match canary::canary(&target).await {
        Ok(c) => {
            if a.json {
                print_json(&c);
            } else {
                print!("{}", c.render());
            }
            if c.ok { ExitCode::SUCCESS } else { ExitCode::from(3) }
        }
        Err(e) => harness_err(&e),
    }
}

async fn bench_ingest(a: BenchIngestArgs) -> ExitCode {
    let opts = punctual_harness::bench_ingest::BenchIngestOptions { progress: !a.json, ..a.options };
    if opts.commands == 0 || opts.instances == 0 {
        eprintln!("punctual bench-ingest: --commands and --instances must be positive");
        return ExitCode::from(2);
    }
    match punctual_harness::bench_ingest::bench_ingest(&opts).await {
        Ok(report) => {
            report_out(&report, "target/bench/ingest.json", a.json, report.render(), "report: ");
            ExitCode::SUCCESS
        }
        Err(e) => harness_err(&e),
    }
}

async fn bench_limiter(a: BenchLimiterArgs) -> ExitCode {
    let opts = bench::BenchOptions { progress: !a.json, ..a.options };
    if opts.senders == 0
        || opts.in_flight == 0
        || opts.calls == 0
        || opts.quota <= 0.0
        || opts.blocks.iter().any(|b| *b == 0 || *b > 100)
    {
        eprintln!("punctual bench-limiter: counts and quota must be positive, blocks in 1..=100");
        return ExitCode::from(2);
    }
    match bench::bench(&opts).await {
        Ok(report) => {
            report_out(&report, "target/bench/limiter.json", a.json, report.human(), "report: ");
            ExitCode::SUCCESS
        }
        Err(e) => harness_err(&e),
    }
}

async fn run_command(a: RunArgs) -> ExitCode {
    let opts = a.options;
    if opts.reminders == 0 || opts.quota <= 0.0 || opts.concurrency == 0 || opts.urgent_concurrency == 0 {
        // No pollers on a lane would leave what is routed there unread until the time limit.
        eprintln!("punctual run: --reminders, --quota, --concurrency and --urgent-concurrency must be positive");
        return ExitCode::from(2);
    }
    if !(0.0..=1.0).contains(&opts.tight_share) {
        eprintln!("punctual run: --tight-share must be between 0 and 1");
        return ExitCode::from(2);
    }
    match run::run(&opts).await {
        Ok(report) => {
            report_out(&report, "target/run/report.json", a.json, report.render(opts.quota), "report            ");
            let accounted = report.window.as_ref().is_none_or(|w| w.accounted);
            if report.counts.lost == 0 && accounted { ExitCode::SUCCESS } else { ExitCode::from(4) }
        }
        Err(e) => harness_err(&e),
    }
}

async fn local_command(a: LocalArgs) -> ExitCode {
    match a.action {
        LocalAction::Up { quota, provider, channels, json } => {
            match local::up(quota, &provider, channels.as_deref()).await {
                Ok(state) => {
                    if json {
                        print_json(&state.resources);
                    } else {
                        print!("{}", local::describe(&state));
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => harness_err(&e),
            }
        }
        LocalAction::Drain { json } => match local::drain(!json).await {
            Ok(report) => {
                if json {
                    print_json(&report);
                } else {
                    print!("{}", report.render());
                }
                let accounted = report.window.as_ref().is_none_or(|w| w.accounted);
                if report.counts.lost == 0 && accounted { ExitCode::SUCCESS } else { ExitCode::from(4) }
            }
            Err(e) => harness_err(&e),
        },
        LocalAction::DemoMessage { n } => match local::demo_message(n) {
            Ok(body) => {
                println!("{body}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("punctual local demo-message: {e}");
                ExitCode::from(2)
            }
        },
        LocalAction::Down => match local::down() {
            Ok(pids) => {
                println!("stopped {} processes; local state removed", pids.len());
                ExitCode::SUCCESS
            }
            Err(e) => harness_err(&e),
        },
    }
}

async fn provider_double(a: ProviderDoubleArgs) -> ExitCode {
    match punctual_harness::serve_provider_double(a.port, a.quota, a.burst, a.token).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => harness_err(&e),
    }
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::forecast_day;

    #[test]
    fn forecast_takes_today_and_tomorrow_beside_a_date() {
        let today = NaiveDate::from_ymd_opt(2026, 12, 31).unwrap();
        assert_eq!(forecast_day("today", today), Some(today));
        assert_eq!(forecast_day(" Tomorrow ", today), NaiveDate::from_ymd_opt(2027, 1, 1));
        assert_eq!(forecast_day("2026-12-02", today), NaiveDate::from_ymd_opt(2026, 12, 2));
        for bad in ["yesterday", "2026-13-01", "12/02/2026", "", "tomorrow+1"] {
            assert_eq!(forecast_day(bad, today), None, "{bad:?} is not a day");
        }
    }
}
