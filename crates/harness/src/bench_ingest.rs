//! `punctual bench-ingest` (`make bench-ingest`; docs/measurements.md#ingest): a campaign of
//! renewal commands through the ingest function against the local emulators, set beside the
//! emulator's own rate of conditional writes measured in the same run.
//!
//! 1. The commands (one new renewal each, due tomorrow at 09:00 in one of five zones) are
//!    sent to the commands queue in `SendMessageBatch`es of 10: the producer's cost, not
//!    counted.
//! 2. The **raw rate**: conditional `PutItem`s (`attribute_not_exists(pk)`) of new renewals'
//!    row items (the ingest's own write) into a scratch table with the renewals table's indexes, as many in flight as the ingest can keep (its instances × a batch of 10), for as many
//!    items as there are commands, into a table as empty as the renewals table was: the most the
//!    engine gives to the write the ingest needs per command, over the same growth.
//! 3. The **ingest**: the same handler the Lambda runs, on `instances` pollers of the commands
//!    queue (the event source mapping's concurrency), its requests counted below the SDK.
//!
//! The ratio is (2) ÷ (3) in commands/s; the requests are per command.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use punctual_aws::counting::{RequestCounts, is_dynamodb_read};
use punctual_aws::sqs::{Letter, SqsQueues, send_letters};
use serde::Serialize;

use crate::env::{Emulator, provision};
use crate::{HarnessError, step};

/// The benchmark's knobs.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchIngestOptions {
    /// Commands in the campaign.
    #[arg(long, default_value_t = 200_000)]
    pub commands: usize,
    /// Ingest instances (the commands queue's event source mapping concurrency).
    #[arg(long, default_value_t = 8)]
    pub instances: usize,
    /// Progress lines on stderr.
    #[arg(skip)]
    pub progress: bool,
}

/// What one run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BenchIngestReport {
    /// Commands sent.
    pub commands: u64,
    /// Ingest instances.
    pub instances: usize,
    /// Where DynamoDB was (dynalite, or the emulator).
    pub dynamodb: String,
    /// Seconds the producer's sends took (not part of the rate).
    pub send_seconds: f64,
    /// The emulator's conditional writes per second, at the ingest's concurrency.
    pub raw_conditional_writes_per_second: f64,
    /// Items the raw measurement wrote.
    pub raw_items: u64,
    /// Commands ingested per second (first receive to last delete).
    pub commands_per_second: f64,
    /// `commands_per_second` ÷ `raw_conditional_writes_per_second` (goal ≥ 0.7).
    pub ratio_to_raw: f64,
    /// DynamoDB writes per command (goal ≤ 1.3).
    pub dynamodb_writes_per_command: f64,
    /// DynamoDB reads per command.
    pub dynamodb_reads_per_command: f64,
    /// SQS requests per command: the mapping's receives and deletes, and the DLQ's sends
    /// (goal ≤ 0.25).
    pub sqs_requests_per_command: f64,
    /// What the ingest did.
    pub ingest: crate::commands::CommandsReport,
    /// The ingest's requests by `service/Operation[/item kind]`.
    pub requests: BTreeMap<String, u64>,
    /// The same handler given as many more commands as SQS batches built in memory (as the
    /// event source mapping hands them over), `instances` at once, with nothing received or
    /// deleted: the ingest's own rate against the engine, without the emulator's SQS.
    pub direct_commands_per_second: f64,
    /// `direct_commands_per_second` ÷ `raw_conditional_writes_per_second`.
    pub direct_ratio_to_raw: f64,
    /// DynamoDB writes per command of the direct pass.
    pub direct_dynamodb_writes_per_command: f64,
}

impl BenchIngestReport {
    /// Human report.
    pub fn render(&self) -> String {
        format!(
            "bench-ingest   {} commands, {} instances, DynamoDB at {}\n\
             raw            {:.0} conditional writes/s ({} items, {} in flight)\n\
             ingest         {:.0} commands/s = {:.2} of raw (goal >= 0.7)\n\
             requests       {:.3} DynamoDB writes (goal <= 1.3), {:.3} reads, {:.3} SQS (goal <= 0.25) per command\n\
             direct         {:.0} commands/s = {:.2} of raw, {:.3} DynamoDB writes per command (the handler fed in memory: no SQS)\n\
             outcomes       {} applied, {} stale, {} rejected, {} failed\n\
             send           {:.1} s to put the campaign on the queue (not counted)\n",
            self.commands,
            self.instances,
            self.dynamodb,
            self.raw_conditional_writes_per_second,
            self.raw_items,
            self.instances * 10,
            self.commands_per_second,
            self.ratio_to_raw,
            self.dynamodb_writes_per_command,
            self.dynamodb_reads_per_command,
            self.sqs_requests_per_command,
            self.direct_commands_per_second,
            self.direct_ratio_to_raw,
            self.direct_dynamodb_writes_per_command,
            self.ingest.applied,
            self.ingest.stale,
            self.ingest.rejected,
            self.ingest.failed,
            self.send_seconds,
        )
    }
}

/// The `n`th command of the campaign.
fn command(n: usize, due: chrono::NaiveDate) -> String {
    const ZONES: [&str; 5] = ["Europe/London", "America/New_York", "Asia/Kolkata", "Australia/Sydney", "UTC"];
    serde_json::json!({
        "v": 1, "version": 1, "tenant_id": format!("tenant-{}", n % 7), "renewal_id": format!("campaign-{n:07}"),
        "recipient_ref": format!("cust-{n}"), "channel": "email", "zone": ZONES[n % ZONES.len()],
        "local_due_date": due.format("%Y-%m-%d").to_string(), "window_minutes": 480,
        "data": {"plan": "pro", "amount": "49.00 EUR"},
    })
    .to_string()
}

/// Runs the benchmark on emulators of its own (or `AWS_ENDPOINT_URL`'s).
pub async fn bench_ingest(opts: &BenchIngestOptions) -> Result<BenchIngestReport, HarnessError> {
    std::fs::create_dir_all("target/bench").map_err(step("creating target/bench"))?;
    let emulator = Emulator::start(Some(std::path::Path::new("target/bench")), false)?;
    let config = punctual_aws::config::for_endpoint(&emulator.endpoint).await;
    let ddb = emulator.dynamodb(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let prefix = format!("punctual-bench-ingest-{}", Utc::now().timestamp_millis());
    let resources = provision(&config, &ddb, &prefix, "").await?;
    let say = |line: String| {
        if opts.progress {
            eprintln!("{line}");
        }
    };

    // 1. The campaign onto the queue, 8 batches in flight.
    let started = Instant::now();
    let due = (Utc::now() + TimeDelta::days(1)).date_naive();
    let sent = Arc::new(AtomicU64::new(0));
    let batches: Vec<Vec<Letter>> = (0..opts.commands)
        .collect::<Vec<_>>()
        .chunks(10)
        .map(|c| {
            c.iter().map(|n| Letter { id: format!("c{n}"), body: command(*n, due), attributes: Vec::new() }).collect()
        })
        .collect();
    use futures_util::stream::{self, StreamExt};
    let mut sends = stream::iter(batches.iter().map(|b| {
        let (sqs, url, sent) = (&sqs, &resources.commands_queue_url, Arc::clone(&sent));
        async move {
            let r = send_letters(sqs, url, b).await;
            sent.fetch_add(b.len() as u64, Ordering::Relaxed);
            r
        }
    }))
    .buffer_unordered(8);
    let mut line = punctual_core::progress::Progress::timed(Duration::from_secs(5));
    while let Some(r) = sends.next().await {
        r.map_err(step("sending the campaign to the commands queue"))?;
        if opts.progress {
            let n = sent.load(Ordering::Relaxed);
            line.update(0, || format!("sending   {n:>7}/{} commands", opts.commands));
        }
    }
    line.finish();
    let send_seconds = started.elapsed().as_secs_f64();

    // 2. The raw conditional-write rate, at the ingest's concurrency.
    // What the ingest can have in flight: a batch of 10 commands per instance.
    let in_flight = opts.instances.max(1) * 10;
    // As many as there are commands: dynalite's writes slow as a table grows (measured: the
    // direct pass into a table of 200,000–400,000 items ran at 0.67 of a raw rate taken on
    // 20,000 items into an empty one), so the raw rate is taken over the same growth.
    let raw_items = opts.commands;
    // The same write the ingest makes: the row item of a new renewal, into a table with the
    // renewals table's two indexes (a table without them measured dynalite's easiest write).
    let scratch = format!("{prefix}-raw");
    punctual_aws::renewals::create_table(&ddb, &scratch).await.map_err(step("creating the scratch table"))?;
    let now = Utc::now();
    let items: Vec<punctual_aws::dynamodb::Item> = (2 * opts.commands..2 * opts.commands + raw_items)
        .filter_map(|n| punctual_core::command::RenewalCommand::read(&command(n, due), &[]).ok())
        .map(|(_, row)| punctual_aws::renewals::row_item(&row.renewal, now))
        .collect();
    say(format!("raw       {raw_items} conditional PutItems, {in_flight} in flight …"));
    let t = Instant::now();
    let puts = stream::iter(items)
        .map(|item| {
            let (ddb, table) = (&ddb, &scratch);
            async move {
                ddb.put_item()
                    .table_name(table)
                    .set_item(Some(item))
                    .condition_expression("attribute_not_exists(pk)")
                    .send()
                    .await
            }
        })
        .buffer_unordered(in_flight);
    let failed = puts.filter(|r| std::future::ready(r.is_err())).count().await;
    if failed > 0 {
        return Err(HarnessError::Step {
            what: "the raw conditional writes",
            source: format!("{failed} of {raw_items} failed").into(),
        });
    }
    let raw = raw_items as f64 / t.elapsed().as_secs_f64().max(1e-3);
    let _ = ddb.delete_table().table_name(&scratch).send().await;

    // 3. The ingest, its requests counted below the SDK.
    let counts = RequestCounts::new();
    let counted = counts.wrap(&config);
    let ingest = crate::commands::ingest_for(
        &resources,
        &punctual_aws::config::dynamodb_client(&counted, emulator.dynamodb_endpoint.as_deref()),
        &aws_sdk_sqs::Client::new(&counted),
    );
    let counted_queues = SqsQueues::new(aws_sdk_sqs::Client::new(&counted), "", "");
    say(format!("ingest    {} commands on {} instances …", opts.commands, opts.instances));
    let line = std::sync::Mutex::new(punctual_core::progress::Progress::timed(Duration::from_secs(5)));
    let t = Instant::now();
    let report =
        crate::commands::drain_commands(&ingest, &counted_queues, &resources.commands_queue_url, opts.instances, |n| {
            if opts.progress
                && let Ok(mut l) = line.lock()
            {
                let rate = n as f64 / t.elapsed().as_secs_f64().max(1e-3);
                l.update(0, || format!("ingesting {n:>7}/{} commands  {rate:.0}/s", opts.commands));
            }
        })
        .await;
    if let Ok(mut l) = line.lock() {
        l.finish();
    }
    // The rate is over the ingest's own span, to the last batch's delete: the mapping's last
    // empty polls are not work.
    let busy = report.busy_seconds.max(1e-3);
    let requests = counts.snapshot();
    let n = (report.received.max(1)) as f64;
    let dynamo: Vec<(&String, &u64)> = requests.iter().filter(|(k, _)| k.starts_with("dynamodb/")).collect();
    let reads: u64 = dynamo
        .iter()
        .filter(|(k, _)| is_dynamodb_read(k.split('/').nth(1).unwrap_or_default()))
        .map(|(_, v)| **v)
        .sum();
    let writes: u64 = dynamo.iter().map(|(_, v)| **v).sum::<u64>() - reads;
    let sqs_requests: u64 = requests.iter().filter(|(k, _)| k.starts_with("sqs/")).map(|(_, v)| v).sum();
    let commands_per_second = report.received as f64 / busy;

    // 4. The direct pass: new renewals (ids after the campaign's), the handler fed in memory.
    say(format!("direct    {} commands, {} batches at once …", opts.commands, opts.instances));
    let before = counts.snapshot();
    let dynamo_writes = |m: &BTreeMap<String, u64>| -> u64 {
        m.iter()
            .filter(|(k, _)| k.starts_with("dynamodb/") && !is_dynamodb_read(k.split('/').nth(1).unwrap_or_default()))
            .map(|(_, v)| v)
            .sum()
    };
    let t = Instant::now();
    let batches: Vec<Vec<usize>> =
        (opts.commands..2 * opts.commands).collect::<Vec<_>>().chunks(10).map(<[usize]>::to_vec).collect();
    stream::iter(batches)
        .map(|batch| {
            let ingest = &ingest;
            async move {
                let bodies: Vec<(String, String)> = batch.iter().map(|n| (format!("d{n}"), command(*n, due))).collect();
                let records = bodies.iter().map(|(id, body)| punctual_lambda::batch::ReceivedRecord {
                    message_id: id,
                    receipt_handle: id,
                    body,
                    receive_count: 1,
                    sent_at_ms: None,
                });
                let Ok(event) =
                    punctual_lambda::batch::sqs_event(records, "arn:aws:sqs:us-east-1:000000000000:commands")
                else {
                    return;
                };
                let ctx = punctual_lambda::batch::local_context("direct".into(), Duration::from_secs(60));
                let _ = punctual_ingest::handler::handle(ingest, lambda_runtime::LambdaEvent::new(event, ctx)).await;
            }
        })
        .buffer_unordered(opts.instances.max(1))
        .for_each(|()| std::future::ready(()))
        .await;
    let direct = opts.commands as f64 / t.elapsed().as_secs_f64().max(1e-3);
    let direct_writes =
        (dynamo_writes(&counts.snapshot()) - dynamo_writes(&before)) as f64 / opts.commands.max(1) as f64;
    Ok(BenchIngestReport {
        commands: opts.commands as u64,
        instances: opts.instances,
        dynamodb: emulator.dynamodb_endpoint.clone().unwrap_or_else(|| emulator.endpoint.clone()),
        send_seconds,
        raw_conditional_writes_per_second: raw,
        raw_items: raw_items as u64,
        commands_per_second,
        ratio_to_raw: commands_per_second / raw,
        dynamodb_writes_per_command: writes as f64 / n,
        dynamodb_reads_per_command: reads as f64 / n,
        sqs_requests_per_command: sqs_requests as f64 / n,
        ingest: report,
        requests,
        direct_commands_per_second: direct,
        direct_ratio_to_raw: direct / raw,
        direct_dynamodb_writes_per_command: direct_writes,
    })
}
