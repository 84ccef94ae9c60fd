//! The producers' side of the local pipeline: the commands queue's event source mapping (the
//! **same ingest handler** the Lambda runs, `instances` batches of up to 10 in flight, batch
//! item failures left for their visibility timeout) and the outcome publisher (the scheduler's
//! sweep of the outbox, onto the outcomes queue that stands in for the bus).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lambda_runtime::LambdaEvent;
use punctual_aws::emf::Metrics;
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::outcomes::QueueSink;
use punctual_aws::sqs::SqsQueues;
use punctual_core::outcome::{Publisher, SweepReport};
use punctual_ingest::app::Ingest;
use punctual_ingest::handler::{handle, name};
use punctual_lambda::batch::local_context;
use punctual_ops::Resources;
use serde::Serialize;

use crate::esm::sqs_event;

/// What the ingest did with the commands queue.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CommandsReport {
    /// Commands handed to the handler.
    pub received: u64,
    /// Written.
    pub applied: u64,
    /// Not newer than the stored version: acknowledged, nothing written.
    pub stale: u64,
    /// Sent to the commands DLQ with their reason.
    pub rejected: u64,
    /// Left on the queue after an infrastructure failure (delivered again).
    pub failed: u64,
    /// `ReceiveMessage` + `DeleteMessageBatch` calls the mapping made.
    pub sqs_requests: u64,
    /// Seconds from the first receive to the mapping's stop (its last empty polls included).
    pub seconds: f64,
    /// Seconds from the first receive to the last batch's delete: the span of the work.
    pub busy_seconds: f64,
}

impl CommandsReport {
    /// One line for a report.
    pub fn render(&self) -> String {
        format!(
            "commands       {} received: {} applied, {} stale, {} rejected to the commands DLQ, {} failed (left for redelivery) in {:.1} s\n",
            self.received, self.applied, self.stale, self.rejected, self.failed, self.seconds
        )
    }
}

/// Runs the ingest handler over the commands queue at `url` with `instances` pollers until
/// each has found it empty twice in a row (long polls of 1 s), as the event source mapping
/// would: receive up to 10, invoke, delete what did not fail (the next receive and the last
/// delete overlap the invocation, as the mapping's poller does). `progress` is told the commands
/// handled so far after every batch.
pub async fn drain_commands(
    ingest: &Ingest,
    queues: &SqsQueues,
    url: &str,
    instances: usize,
    progress: impl Fn(u64) + Sync,
) -> CommandsReport {
    let started = Instant::now();
    let totals: [AtomicU64; 7] = Default::default();
    // Microseconds from `started` to the end of the latest batch.
    let last_done = AtomicU64::new(0);
    let add = |i: usize, n: u64| totals[i].fetch_add(n, Ordering::Relaxed);
    // The mapping's poller works ahead of its function, as Lambda's does: while the handler
    // runs batch n, the next batch is received and batch n-1's acknowledged commands deleted,
    // so the function's instances wait on neither (measured: docs/measurements.md#ingest).
    let add = &add;
    let receive = move || async move {
        add(5, 1);
        match queues.receive(url, 10, Duration::from_secs(1)).await {
            Ok(m) => m,
            Err(e) => {
                eprintln!("commands mapping: receive failed: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                Vec::new()
            }
        }
    };
    let last_done = &last_done;
    let delete = move |handles: Vec<String>| async move {
        if handles.is_empty() {
            return;
        }
        add(5, 1);
        let handles: Vec<&str> = handles.iter().map(String::as_str).collect();
        if let Err(e) = queues.delete_batch(url, &handles).await {
            eprintln!("commands mapping: delete failed (the commands are delivered again, stale): {e}");
        }
        last_done.fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    };
    let poller = |k: usize| {
        let (progress, totals) = (&progress, &totals);
        let (receive, delete) = (&receive, &delete);
        async move {
            let mut empty = 0;
            let mut batch = 0u64;
            // The previous batch's commands that did not fail: deleted beside the next batch.
            let mut acknowledged: Vec<String> = Vec::new();
            let mut msgs = receive().await;
            loop {
                if msgs.is_empty() {
                    delete(std::mem::take(&mut acknowledged)).await;
                    empty += 1;
                    if empty >= 2 {
                        break;
                    }
                    msgs = receive().await;
                    continue;
                }
                empty = 0;
                batch += 1;
                let invoke = async {
                    let event = sqs_event(&msgs, url).ok()?;
                    let ctx = local_context(format!("ingest-{k}-{batch}"), Duration::from_secs(60));
                    handle(ingest, LambdaEvent::new(event, ctx)).await.ok()
                };
                let (handled, next, ()) = tokio::join!(invoke, receive(), delete(std::mem::take(&mut acknowledged)));
                match handled {
                    None => {
                        add(4, msgs.len() as u64);
                    }
                    Some(handled) => {
                        let failed: Vec<&str> =
                            handled.response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
                        acknowledged = msgs
                            .iter()
                            .filter(|m| !failed.contains(&m.message_id.as_str()))
                            .map(|m| m.receipt_handle.clone())
                            .collect();
                        count(&handled.metrics, add, msgs.len() as u64);
                    }
                }
                progress(totals[0].load(Ordering::Relaxed));
                msgs = next;
            }
        }
    };
    futures_util::future::join_all((0..instances.max(1)).map(poller)).await;
    let get = |i: usize| totals[i].load(Ordering::Relaxed);
    CommandsReport {
        received: get(0),
        applied: get(1),
        stale: get(2),
        rejected: get(3),
        failed: get(4),
        sqs_requests: get(5),
        seconds: started.elapsed().as_secs_f64(),
        busy_seconds: last_done.load(Ordering::Relaxed) as f64 / 1e6,
    }
}

fn count(m: &Metrics, add: &impl Fn(usize, u64) -> u64, received: u64) {
    add(0, received);
    for (i, metric) in [(1, name::APPLIED), (2, name::STALE), (3, name::REJECTED), (4, name::FAILED)] {
        add(i, m.total(metric) as u64);
    }
}

/// The ingest function as `punctual local` composes it for `resources`.
pub fn ingest_for(resources: &Resources, ddb: &aws_sdk_dynamodb::Client, sqs: &aws_sdk_sqs::Client) -> Ingest {
    let config = punctual_ingest::config::IngestConfig {
        renewals_table: resources.renewals_table.clone(),
        commands_dlq_url: resources.commands_dlq_url.clone(),
        recipients_table: Some(resources.recipients_table.clone()).filter(|t| !t.is_empty()),
        channels: resources.channels.iter().map(|c| c.name.clone()).collect(),
        metrics_namespace: "punctual".into(),
    };
    punctual_ingest::app::build(&config, ddb, sqs)
}

/// The local bus's name in the events' `resources`.
pub const LOCAL_BUS: &str = "punctual-local";

/// Publishes every outcome event the ledger holds onto the outcomes queue, sweep after sweep
/// until the outbox is empty (or 20 sweeps found events they could not clear).
pub async fn publish_outcomes(
    resources: &Resources,
    ddb: &aws_sdk_dynamodb::Client,
    sqs: &aws_sdk_sqs::Client,
) -> Result<SweepReport, punctual_core::ports::OutboxError> {
    let publisher = Publisher::new(
        DynamoLedger::new(ddb.clone(), &resources.ledger_table),
        QueueSink::new(sqs.clone(), &resources.outcomes_queue_url, LOCAL_BUS),
    );
    let mut total = SweepReport::default();
    for _ in 0..20 {
        let r = publisher.sweep(chrono::Utc::now(), 1_000, || false).await?;
        total.records += r.records;
        total.published += r.published;
        total.failed += r.failed;
        total.cleared += r.cleared;
        total.changed += r.changed;
        total.unreadable += r.unreadable;
        total.oldest_age_seconds = total.oldest_age_seconds.max(r.oldest_age_seconds);
        total.left = r.left;
        if r.records == 0 {
            break;
        }
    }
    Ok(total)
}
