//! `punctual bench-limiter`: the shared limiter measured for real — `senders` sender
//! instances (each with its own limiter handle and `RECORD_CONCURRENCY` calls in flight) draw
//! from ONE DynamoDB schedule on the emulator and call the provider double on loopback, which
//! enforces the quota with a small burst and answers 429 past it. One row per block size, all
//! in one process and one run, so the rows compare side by side: utilisation, 429 ratio and
//! limiter writes per admitted call — the frontier the default block is chosen from.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use punctual_aws::limiter::DynamoSlotStore;
use punctual_core::decision::LimiterAnswer;
use punctual_core::limiter::{LimiterSettings, SharedLimiter, SlotStore};
use punctual_core::ports::{Limiter, LimiterClass, LimiterRequest, Provider, ProviderRequest};
use punctual_core::provider::ProviderOutcome;
use punctual_core::secret::Secret;
use punctual_core::{RenewalId, TenantId};
use punctual_lambda::SystemClock;
use punctual_provider::HttpProvider;
use serde::Serialize;

use crate::env::Emulator;
use crate::{HarnessError as RunError, step};

/// Options of one benchmark run (`punctual bench-limiter`'s flags).
#[derive(Debug, Clone, clap::Args)]
pub struct BenchOptions {
    /// Sender instances.
    #[arg(long, default_value_t = 10)]
    pub senders: usize,
    /// Calls in flight per sender instance.
    #[arg(long, default_value_t = 10)]
    pub in_flight: usize,
    /// Accepted calls per row.
    #[arg(long, default_value_t = 2000)]
    pub calls: u64,
    /// Provider quota, calls per second.
    #[arg(long, default_value_t = 100.0)]
    pub quota: f64,
    /// Block sizes (slots per DynamoDB write), one row each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,5,10,20,50")]
    pub blocks: Vec<u32>,
    /// Print progress to stderr (off with `--json`).
    #[arg(skip = true)]
    pub progress: bool,
}

/// One row of the frontier.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    /// Slots per booking.
    pub block: u32,
    /// Calls the provider accepted.
    pub accepted: u64,
    /// Requests the provider saw.
    pub requests: u64,
    /// Of which answered 429.
    pub provider_429: u64,
    /// 429s ÷ requests.
    pub ratio_429: f64,
    /// First to last acceptance (+ one interval).
    pub drain_seconds: f64,
    /// accepted ÷ quota.
    pub floor_seconds: f64,
    /// floor ÷ drain.
    pub utilisation: f64,
    /// DynamoDB write requests (failed conditional writes included) ÷ tokens granted.
    pub writes_per_call: f64,
    /// Booked slots that expired unused.
    pub stranded: u64,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Sender instances.
    pub senders: usize,
    /// Calls in flight per instance.
    pub in_flight: usize,
    /// Quota, calls/s.
    pub quota: f64,
    /// Where the schedule lived.
    pub dynamodb: String,
    /// One row per block size.
    pub rows: Vec<BenchRow>,
}

impl BenchReport {
    /// The human table.
    pub fn human(&self) -> String {
        let mut out = format!(
            "shared limiter: {} senders × {} in flight against quota {}/s, schedule on {}\n\
             block  accepted  requests  429s  429 ratio  drain s  floor s  utilisation  writes/call  stranded\n",
            self.senders, self.in_flight, self.quota, self.dynamodb
        );
        for r in &self.rows {
            out.push_str(&format!(
                "{:>5}  {:>8}  {:>8}  {:>4}  {:>9.4}  {:>7.2}  {:>7.2}  {:>11.3}  {:>11.3}  {:>8}\n",
                r.block,
                r.accepted,
                r.requests,
                r.provider_429,
                r.ratio_429,
                r.drain_seconds,
                r.floor_seconds,
                r.utilisation,
                r.writes_per_call,
                r.stranded
            ));
        }
        out
    }
}

/// Runs every row.
pub async fn bench(opts: &BenchOptions) -> Result<BenchReport, RunError> {
    std::fs::create_dir_all("target/bench").map_err(step("creating target/bench"))?;
    let emulator = Emulator::start(Some(std::path::Path::new("target/bench")), false)?;
    let config = punctual_aws::config::for_endpoint(&emulator.endpoint).await;
    let ddb = emulator.dynamodb(&config);
    let table = format!("punctual-bench-{}", Utc::now().timestamp_millis());
    punctual_aws::dynamodb::create_pk_table(&ddb, &table).await.map_err(step("creating the limiter table"))?;
    let mut rows = Vec::new();
    for &block in &opts.blocks {
        if opts.progress {
            eprintln!("block {block}: {} calls …", opts.calls);
        }
        rows.push(row(opts, &ddb, &table, block).await?);
    }
    let _ = ddb.delete_table().table_name(&table).send().await;
    Ok(BenchReport {
        senders: opts.senders,
        in_flight: opts.in_flight,
        quota: opts.quota,
        dynamodb: emulator.dynamodb_endpoint.clone().unwrap_or_else(|| emulator.endpoint.clone()),
        rows,
    })
}

async fn row(
    opts: &BenchOptions,
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    block: u32,
) -> Result<BenchRow, RunError> {
    let (double, token) = crate::env::start_double(
        opts.quota,
        Secret::new(format!("bench-{}", Utc::now().timestamp_nanos_opt().unwrap_or_default())),
    )
    .await
    .map_err(step("starting the provider double"))?;
    let provider = HttpProvider::new(&double.url(), &token, Duration::from_secs(2))
        .map_err(step("building the provider client"))?;
    let store = DynamoSlotStore::new(ddb.clone(), table);
    let mut settings = LimiterSettings::new(opts.quota);
    settings.block = block;
    settings.name = format!("bench-{block}-{}", Utc::now().timestamp_millis());
    let accepted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    // Bounded in time whatever happens: 4× the floor plus a minute.
    let limit = Duration::from_secs_f64(opts.calls as f64 / opts.quota * 4.0 + 60.0);
    let limiters: Vec<_> = (0..opts.senders as u64)
        .map(|i| Arc::new(SharedLimiter::new(store.clone(), SystemClock, settings.clone(), i)))
        .collect();
    let mut tasks = Vec::new();
    for (s, limiter) in limiters.iter().enumerate() {
        for k in 0..opts.in_flight {
            let (limiter, provider, accepted) = (Arc::clone(limiter), provider.clone(), Arc::clone(&accepted));
            let calls = opts.calls;
            tasks.push(tokio::spawn(async move {
                let tenant = TenantId::parse("bench").unwrap_or_else(|_| unreachable!("a valid literal"));
                let now = Utc::now();
                let mut n = 0u64;
                while accepted.load(Ordering::Relaxed) < calls && started.elapsed() < limit {
                    let req = LimiterRequest { class: LimiterClass::Normal, tenant: &tenant };
                    match limiter.acquire(req, Duration::from_secs(5)).await {
                        Ok(LimiterAnswer::Granted) => {}
                        Ok(LimiterAnswer::Denied { retry_in }) => {
                            tokio::time::sleep(retry_in.min(Duration::from_secs(1))).await;
                            continue;
                        }
                        Err(e) => {
                            eprintln!("limiter: {e}");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    }
                    if accepted.load(Ordering::Relaxed) >= calls {
                        break;
                    }
                    n += 1;
                    let Ok(renewal) = RenewalId::parse(format!("bench-{s}-{k}-{n}")) else { break };
                    let msg =
                        crate::local::message_for(tenant.clone(), renewal, now, now + chrono::TimeDelta::hours(1));
                    let call = ProviderRequest {
                        message: &msg,
                        recipient_ref: None,
                        channel: None,
                        data: None,
                        timeout: Duration::from_secs(2),
                    };
                    match provider.send(&call).await {
                        Ok(ProviderOutcome::Accepted { .. }) => {
                            accepted.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(ProviderOutcome::Transient { status: Some(429), retry_after }) => {
                            let ra = retry_after.map(|r| r.delay_from(Utc::now()));
                            let _ = limiter.throttled(ra).await;
                        }
                        Ok(_) | Err(_) => {}
                    }
                }
            }));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let st = double.stats();
    let granted: u64 = limiters.iter().map(|l| l.stats().granted).sum();
    let stranded: u64 = limiters.iter().map(|l| l.stats().stranded).sum();
    let drain = match (st.first_accept_ms, st.last_accept_ms) {
        (Some(a), Some(b)) => (b - a) as f64 / 1000.0 + 1.0 / opts.quota,
        _ => 0.0,
    };
    let floor = st.accepted as f64 / opts.quota;
    Ok(BenchRow {
        block,
        accepted: st.accepted,
        requests: st.requests,
        provider_429: st.throttled,
        ratio_429: if st.requests > 0 { st.throttled as f64 / st.requests as f64 } else { 0.0 },
        drain_seconds: drain,
        floor_seconds: floor,
        utilisation: if drain > 0.0 { (floor / drain).min(1.0) } else { 0.0 },
        writes_per_call: if granted > 0 { store.writes() as f64 / granted as f64 } else { 0.0 },
        stranded,
    })
}
