//! `punctual` — operator and developer CLI. Flag names are a contract (scripts depend on them).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use punctual::{import, local, ops, run};
use punctual_aws::renewals::DynamoRenewals;

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
    /// Exit status: 0 all rows imported, 3 some rows rejected (the rest imported), 1 failure.
    Import {
        /// The file (.csv with a header row, or .jsonl).
        file: PathBuf,
        /// The renewals table.
        #[arg(long, env = "RENEWALS_TABLE")]
        table: String,
        /// Format, when the extension does not say.
        #[arg(long, value_enum)]
        format: Option<import::Format>,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the whole pipeline on this machine against the emulator, with a live progress line
    /// and a final report: import → scheduler → SQS → sender → provider double.
    Run {
        /// Renewals to import, all due now.
        #[arg(long, default_value_t = 3000)]
        reminders: usize,
        /// Provider quota, calls per second.
        #[arg(long, default_value_t = 100.0)]
        quota: f64,
        /// Pollers (the event source mapping's MaximumConcurrency).
        #[arg(long, default_value_t = 10)]
        concurrency: usize,
        /// Seed of the sender's jitter.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print the report as JSON (progress still goes to stderr).
        #[arg(long)]
        json: bool,
    },
    /// Leave a local pipeline running (emulator, provider double, queues, tables), drain it
    /// through the sender, tear it down.
    Local {
        #[command(subcommand)]
        action: LocalAction,
    },
    /// Simulate a runbook scenario in virtual time with the same core services over in-memory
    /// adapters; optionally side by side with a naive worker.
    Simulate {
        /// normal, throttle, poison, crash, overload.
        #[arg(long, default_value = "normal")]
        scenario: String,
        /// Reminders (default: the scenario's).
        #[arg(long)]
        reminders: Option<usize>,
        /// Provider quota, calls per second.
        #[arg(long, default_value_t = 100.0)]
        quota: f64,
        /// Concurrent workers.
        #[arg(long, default_value_t = 10)]
        concurrency: usize,
        /// Seed (same seed, same report).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Also run this baseline on the same scenario and seed (only `naive`).
        #[arg(long)]
        baseline: Option<String>,
        /// Draw backlog, delivered/s against the quota, and late reminders over time to a PNG.
        #[arg(long)]
        chart: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Queue depths, DLQ by reason, oldest age, backlog against projected drain, pause state.
    Status {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Why a reminder is where it is: state, attempts, history, next time, slack, DLQ reason,
    /// redrive lineage, what a redrive would consume.
    Explain {
        /// A reminder id (rem_…) or a DLQ / send-queue message id.
        id: String,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Pause delivery: the scheduler releases nothing, the sender holds messages without
    /// spending attempts, redrive refuses to start. Audited.
    Pause {
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// Who (required).
        #[arg(long)]
        owner: String,
    },
    /// Lift a pause. Audited.
    Resume {
        /// Who (recorded; default $USER).
        #[arg(long)]
        owner: Option<String>,
    },
    /// Move dead letters back to the send queue: bounded, paced, audited; a dry run first.
    Redrive {
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
    },
    /// One synthetic reminder through import → scheduler → SQS → limiter → provider → ack,
    /// each stage timed. Run it before each production change.
    Canary {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure the shared limiter for real: sender instances drawing from one DynamoDB
    /// schedule against the provider double, one row per block size (the frontier).
    BenchLimiter {
        /// Sender instances.
        #[arg(long, default_value_t = 10)]
        senders: usize,
        /// Calls in flight per sender instance.
        #[arg(long, default_value_t = 10)]
        in_flight: usize,
        /// Accepted calls per row.
        #[arg(long, default_value_t = 2000)]
        calls: u64,
        /// Provider quota, calls per second.
        #[arg(long, default_value_t = 100.0)]
        quota: f64,
        /// Block sizes (slots per DynamoDB write), one row each.
        #[arg(long, value_delimiter = ',', default_value = "1,2,5,10,20,50")]
        blocks: Vec<u32>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the provider double (used by `local up`; also handy on its own).
    #[command(hide = true)]
    ProviderDouble {
        #[arg(long, default_value_t = 0)]
        port: u16,
        #[arg(long, default_value_t = 100.0)]
        quota: f64,
        #[arg(long, default_value_t = 10.0)]
        burst: f64,
        #[arg(long)]
        token: Option<String>,
    },
}

#[derive(Subcommand)]
enum LocalAction {
    /// Start the emulator (or use AWS_ENDPOINT_URL) and the provider double, create the
    /// resources, and print how to reach them.
    Up {
        /// Provider quota, calls per second.
        #[arg(long, default_value_t = 100.0)]
        quota: f64,
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
}

/// Runs an operator command and prints its answer (human or `--json`). Exit 0 when the
/// command reports success, 3 when it ran but reports a failure (aborted redrive, failed
/// canary), 1 on errors, 2 on refused input.
async fn ops_out<F, Fut>(target: Result<ops::Target, ops::OpsError>, json: bool, f: F) -> ExitCode
where
    F: FnOnce(ops::Target) -> Fut,
    Fut: std::future::Future<Output = Result<(serde_json::Value, String, bool), ops::OpsError>>,
{
    let target = match target {
        Ok(t) => t,
        Err(e) => return fail(&e),
    };
    match f(target).await {
        Ok((value, text, ok)) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
            } else {
                print!("{text}");
            }
            if ok { ExitCode::SUCCESS } else { ExitCode::from(3) }
        }
        Err(e @ ops::OpsError::Invalid(_)) => {
            eprintln!("punctual: {e}");
            ExitCode::from(2)
        }
        Err(e) => fail(&e),
    }
}

/// `redrive --function NAME`: invokes the deployed redrive function with the request.
async fn invoke_function(name: &str, request: &serde_json::Value, json: bool) -> ExitCode {
    let config = punctual_aws::config::load().await;
    let client = aws_sdk_lambda::Client::new(&config);
    let payload = aws_sdk_lambda::primitives::Blob::new(serde_json::to_vec(request).unwrap_or_default());
    match client.invoke().function_name(name).payload(payload).send().await {
        Ok(out) => {
            let body = out.payload().map(|p| String::from_utf8_lossy(p.as_ref()).into_owned()).unwrap_or_default();
            if json {
                println!("{body}");
            } else {
                println!("{name} answered: {body}");
            }
            if out.function_error().is_some() { ExitCode::from(3) } else { ExitCode::SUCCESS }
        }
        Err(e) => fail(&e),
    }
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

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Import { file, table, format, json } => {
            let sdk = punctual_aws::config::load().await;
            let store = DynamoRenewals::new(aws_sdk_dynamodb::Client::new(&sdk), table);
            match import::run(&store, &file, format, !json).await {
                Ok(summary) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&summary).unwrap_or_default());
                    } else {
                        print!("{}", summary.render());
                    }
                    if summary.rejected.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(3) }
                }
                Err(e) => fail(&e),
            }
        }
        Command::Status { json } => {
            ops_out(ops::Target::resolve(None), json, |t| async move {
                ops::status(&t).await.map(|s| (serde_json::to_value(&s).unwrap_or_default(), s.render(), true))
            })
            .await
        }
        Command::Explain { id, json } => {
            ops_out(ops::Target::resolve(None), json, |t| async move {
                ops::explain(&t, &id).await.map(|e| (serde_json::to_value(&e).unwrap_or_default(), e.render(), true))
            })
            .await
        }
        Command::Pause { reason, owner } => {
            ops_out(ops::Target::resolve(None), false, |t| async move {
                ops::pause(&t, &reason, &owner).await.map(|p| {
                    (
                        serde_json::to_value(&p).unwrap_or_default(),
                        format!("paused by {} since {}: {}\n", p.owner, p.since, p.reason),
                        true,
                    )
                })
            })
            .await
        }
        Command::Resume { owner } => {
            ops_out(ops::Target::resolve(None), false, |t| async move {
                let by = owner.or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "unknown".into());
                ops::resume(&t, &by).await.map(|was| {
                    let text = match &was {
                        Some(p) => format!("resumed (was paused by {} since {}: {})\n", p.owner, p.since, p.reason),
                        None => "was not paused; nothing to resume\n".to_owned(),
                    };
                    (serde_json::to_value(&was).unwrap_or_default(), text, true)
                })
            })
            .await
        }
        Command::Redrive {
            reason,
            owner,
            max_messages,
            max_per_second,
            failure_reasons,
            tenants,
            reminders,
            canary,
            canary_timeout_seconds,
            abort_failure_ratio,
            dry_run,
            function,
            endpoint,
            json,
        } => {
            let mut request = serde_json::json!({
                "reason": reason, "owner": owner, "max_messages": max_messages, "max_per_second": max_per_second,
                "selection": {"failure_reasons": failure_reasons, "tenants": tenants, "reminder_ids": reminders},
                "dry_run": dry_run,
            });
            if let Some(c) = canary {
                request["canary"] = c.into();
            }
            if let Some(t) = canary_timeout_seconds {
                request["canary_timeout_seconds"] = t.into();
            }
            if let Some(r) = abort_failure_ratio {
                request["abort_if"] = serde_json::json!({ "failure_ratio": r });
            }
            if let Some(name) = function {
                return invoke_function(&name, &request, json).await;
            }
            ops_out(ops::Target::resolve(endpoint.as_deref()), json, |t| async move {
                ops::redrive(&t, &request).await.map(|(preview, done)| {
                    let mut text = ops::render_summary(&preview);
                    if let Some(d) = &done {
                        text.push_str(&ops::render_summary(d));
                    }
                    let ok = done.as_ref().is_none_or(|d| d.aborted.is_none());
                    (serde_json::json!({ "dry_run": preview, "result": done }), text, ok)
                })
            })
            .await
        }
        Command::Canary { json } => {
            ops_out(ops::Target::resolve(None), json, |t| async move {
                ops::canary(&t).await.map(|c| (serde_json::to_value(&c).unwrap_or_default(), c.render(), c.ok))
            })
            .await
        }
        Command::BenchLimiter { senders, in_flight, calls, quota, blocks, json } => {
            if senders == 0
                || in_flight == 0
                || calls == 0
                || quota <= 0.0
                || blocks.iter().any(|b| *b == 0 || *b > 100)
            {
                eprintln!("punctual bench-limiter: counts and quota must be positive, blocks in 1..=100");
                return ExitCode::from(2);
            }
            let opts = punctual::bench::BenchOptions { senders, in_flight, calls, quota, blocks, progress: !json };
            match punctual::bench::bench(&opts).await {
                Ok(report) => {
                    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
                    let _ = std::fs::write("target/bench/limiter.json", &text);
                    if json {
                        println!("{text}");
                    } else {
                        print!("{}", report.human());
                        println!("report: target/bench/limiter.json");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        Command::Run { reminders, quota, concurrency, seed, json } => {
            if reminders == 0 || quota <= 0.0 || concurrency == 0 {
                eprintln!("punctual run: --reminders, --quota and --concurrency must be positive");
                return ExitCode::from(2);
            }
            let opts = run::RunOptions { reminders, quota, concurrency, seed, progress: true };
            match run::run(&opts).await {
                Ok(report) => {
                    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
                    let path = std::path::Path::new("target/run/report.json");
                    let saved = std::fs::write(path, &text).is_ok();
                    if json {
                        println!("{text}");
                    } else {
                        print!("{}", report.render(quota));
                        if saved {
                            println!("report            {}", path.display());
                        }
                    }
                    if report.lost == 0 { ExitCode::SUCCESS } else { ExitCode::from(4) }
                }
                Err(run::RunError::Interrupted) => {
                    eprintln!("punctual run: interrupted; everything it started was stopped");
                    ExitCode::from(130)
                }
                Err(e) => fail(&e),
            }
        }
        Command::Local { action } => match action {
            LocalAction::Up { quota, json } => match local::up(quota).await {
                Ok(state) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&state.resources).unwrap_or_default());
                    } else {
                        print!("{}", local::describe(&state));
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            },
            LocalAction::Drain { json } => match local::drain(!json).await {
                Ok(report) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
                    } else {
                        print!("{}", report.render());
                    }
                    if report.lost == 0 { ExitCode::SUCCESS } else { ExitCode::from(4) }
                }
                Err(e) => fail(&e),
            },
            LocalAction::Down => match local::down() {
                Ok(pids) => {
                    println!("stopped {} processes; local state removed", pids.len());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            },
        },
        Command::Simulate { scenario, reminders, quota, concurrency, seed, baseline, chart, json } => {
            use punctual_core::sim::{Scenario, SimConfig, Worker, run as simulate};
            let Some(sc) = Scenario::parse(&scenario) else {
                let names: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
                eprintln!("punctual simulate: unknown scenario {scenario:?}; one of: {}", names.join(", "));
                return ExitCode::from(2);
            };
            if baseline.as_deref().is_some_and(|b| b != "naive") {
                eprintln!(
                    "punctual simulate: unknown baseline {:?}; the only baseline is `naive`",
                    baseline.unwrap_or_default()
                );
                return ExitCode::from(2);
            }
            if quota <= 0.0 || concurrency == 0 || reminders == Some(0) {
                eprintln!("punctual simulate: --quota, --concurrency and --reminders must be positive");
                return ExitCode::from(2);
            }
            let config = SimConfig {
                reminders: reminders.unwrap_or(sc.default_reminders()),
                quota,
                concurrency,
                seed,
                ..SimConfig::new(sc)
            };
            let report = simulate(&config, Worker::Punctual);
            let mut value = serde_json::to_value(&report).unwrap_or_default();
            let naive = baseline.is_some().then(|| simulate(&config, Worker::Naive));
            if let Some(n) = &naive {
                value["baseline"] = serde_json::to_value(n).unwrap_or_default();
            }
            if let Some(path) = &chart {
                let title = format!(
                    "punctual simulate --scenario {} ({} reminders, quota {quota}/s)",
                    sc.name(),
                    config.reminders
                );
                if let Err(e) = punctual::simulate_chart::draw(path, &title, &report, naive.as_ref()) {
                    return fail(&e);
                }
                eprintln!("chart written to {}", path.display());
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
            } else {
                println!(
                    "scenario {} ({} reminders, quota {quota}/s, concurrency {concurrency}, seed {seed})",
                    sc.name(),
                    config.reminders
                );
                let keys = [
                    "delivered",
                    "duplicates",
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
                    "limiter_writes_per_call",
                    "cost_per_million_usd",
                ];
                println!("{:<28} {:>16} {:>16}", "", "punctual", if baseline.is_some() { "naive" } else { "" });
                for k in keys {
                    let show = |v: &serde_json::Value| match v {
                        serde_json::Value::Number(n) => n.as_f64().map_or(n.to_string(), |f| {
                            if f.fract() == 0.0 { format!("{f:.0}") } else { format!("{f:.3}") }
                        }),
                        serde_json::Value::Null => "-".to_owned(),
                        other => other.to_string(),
                    };
                    let b = value.get("baseline").map(|b| show(&b[k])).unwrap_or_default();
                    println!("{k:<28} {:>16} {b:>16}", show(&value[k]));
                }
                for k in ["sqs_requests", "dynamodb_writes", "dynamodb_reads", "lambda_gb_seconds"] {
                    let b = value.get("baseline").map(|b| b["cost"][k].to_string()).unwrap_or_default();
                    println!("{:<28} {:>16} {b:>16}", format!("  {k}/1M"), value["cost"][k].to_string());
                }
            }
            ExitCode::SUCCESS
        }
        Command::ProviderDouble { port, quota, burst, token } => {
            let config = punctual_provider_double::Config { quota, burst, token, ..Default::default() };
            match punctual_provider_double::Double::start(config, port).await {
                Ok(double) => {
                    println!("{}", double.url());
                    let _ = tokio::signal::ctrl_c().await;
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
    }
}
