//! A local SQS event source mapping per lane: pollers that receive batches from a queue, call
//! the **same sender handler** the Lambda runs, and delete what succeeded — with AWS's
//! semantics: batch size ≤ 10, at most `concurrency` batches in flight (MaximumConcurrency),
//! records reported as batch item failures stay on the queue until their visibility timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use lambda_runtime::LambdaEvent;
use punctual_aws::emf::Metrics;
use punctual_aws::sqs::{Received, SqsQueues};
use punctual_core::lanes::QueueLane;
use punctual_core::sender::Process;
use punctual_lambda::batch::local_context;
use punctual_sender::handler::{Deps, handle};

/// Counters the pollers keep.
#[derive(Debug, Default)]
pub struct EsmStats {
    /// Batches handed to the handler.
    pub batches: AtomicU64,
    /// Records handed to the handler.
    pub records: AtomicU64,
    /// Records reported as batch item failures.
    pub failures: AtomicU64,
    /// Receive calls that returned nothing.
    pub empty_receives: AtomicU64,
}

/// The event Lambda would deliver for messages received from `queue_url`.
pub fn sqs_event(
    messages: &[Received],
    queue_url: &str,
) -> Result<aws_lambda_events::event::sqs::SqsEvent, serde_json::Error> {
    let queue_name = queue_url.rsplit('/').next().unwrap_or_default();
    let records = messages.iter().map(|m| {
        let (message_id, receipt_handle, body, receive_count, sent_at_ms) = m.parts();
        punctual_lambda::batch::ReceivedRecord { message_id, receipt_handle, body, receive_count, sent_at_ms }
    });
    punctual_lambda::batch::sqs_event(records, &format!("arn:aws:sqs:us-east-1:000000000000:{queue_name}"))
}

/// One poll of the event source mapping of `lane`: receives up to 10 messages (1 s long
/// poll), invokes the sender handler with them as Lambda would (60 s budget), deletes what
/// succeeded and leaves the batch item failures for their visibility timeout. Returns the
/// records handled.
pub async fn poll_once<S: Process>(
    deps: &Deps<S>,
    queues: &SqsQueues,
    lane: QueueLane,
    stats: &EsmStats,
    metrics: &std::sync::Mutex<Metrics>,
) -> usize {
    poll_queue(deps, queues, queues.lane_url(lane), stats, metrics).await
}

/// [`poll_once`] on the queue at `url` (a lane's, or a channel's own).
pub async fn poll_queue<S: Process>(
    deps: &Deps<S>,
    queues: &SqsQueues,
    url: &str,
    stats: &EsmStats,
    metrics: &std::sync::Mutex<Metrics>,
) -> usize {
    let url = url.to_owned();
    let msgs = match queues.receive(&url, 10, Duration::from_secs(1)).await {
        Ok(m) => m,
        Err(e) => {
            eprintln!("poller: receive failed: {e}");
            tokio::time::sleep(Duration::from_millis(500)).await;
            return 0;
        }
    };
    if msgs.is_empty() {
        stats.empty_receives.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    let Ok(event) = sqs_event(&msgs, &url) else { return 0 };
    let ctx = local_context(format!("local-{}", stats.batches.load(Ordering::Relaxed)), Duration::from_secs(60));
    stats.batches.fetch_add(1, Ordering::Relaxed);
    stats.records.fetch_add(msgs.len() as u64, Ordering::Relaxed);
    let handled = match handle(deps, LambdaEvent::new(event, ctx)).await {
        Ok(h) => h,
        Err(e) => {
            // A whole-invocation failure leaves every record for redelivery.
            eprintln!("poller: invocation failed: {e}");
            stats.failures.fetch_add(msgs.len() as u64, Ordering::Relaxed);
            return msgs.len();
        }
    };
    let failed: Vec<&str> = handled.response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    stats.failures.fetch_add(failed.len() as u64, Ordering::Relaxed);
    let done: Vec<&str> =
        msgs.iter().filter(|m| !failed.contains(&m.message_id.as_str())).map(|m| m.receipt_handle.as_str()).collect();
    if let Err(e) = queues.delete_batch(&url, &done).await {
        eprintln!("poller: delete failed (messages will be redelivered): {e}");
    }
    if let Ok(mut m) = metrics.lock() {
        m.merge(&handled.metrics);
    }
    msgs.len()
}

/// The sender's two event source mappings: one poller per instance in `normal` on the send
/// queue and one per instance in `urgent` on the urgent lane (each mapping's
/// MaximumConcurrency; the instances are the function's concurrent execution environments,
/// each with its own clients and limiter handle), until `stop` is set. With one lane (no
/// urgent queue) the urgent pollers are not started. Handler metrics are merged into `metrics`.
pub async fn run_pollers<S: Process>(
    normal: Vec<Arc<Deps<S>>>,
    urgent: Vec<Arc<Deps<S>>>,
    queues: SqsQueues,
    stop: Arc<AtomicBool>,
    stats: Arc<EsmStats>,
    metrics: Arc<std::sync::Mutex<Metrics>>,
) {
    run_pollers_with(normal, urgent, Vec::new(), queues, stop, stats, metrics).await;
}

/// [`run_pollers`], and for each channel with a queue of its own, `(its URL, its instances)`:
/// that queue's own event source mapping, one poller per instance.
pub async fn run_pollers_with<S: Process>(
    normal: Vec<Arc<Deps<S>>>,
    urgent: Vec<Arc<Deps<S>>>,
    channels: Vec<(String, Vec<Arc<Deps<S>>>)>,
    queues: SqsQueues,
    stop: Arc<AtomicBool>,
    stats: Arc<EsmStats>,
    metrics: Arc<std::sync::Mutex<Metrics>>,
) {
    let urgent = if queues.has_urgent_lane() { urgent } else { Vec::new() };
    let lanes = normal
        .into_iter()
        .map(|d| (d, queues.lane_url(QueueLane::Normal).to_owned()))
        .chain(urgent.into_iter().map(|d| (d, queues.lane_url(QueueLane::Urgent).to_owned())))
        .chain(channels.into_iter().flat_map(|(url, ds)| ds.into_iter().map(move |d| (d, url.clone()))));
    // The pollers run as futures of one task (they wait on I/O, not CPU); this keeps the
    // handler's borrowing futures off `tokio::spawn`'s `Send + 'static` requirement.
    let pollers = lanes.map(|(deps, url)| {
        let (queues, stop, stats, metrics) = (&queues, &stop, &stats, &metrics);
        async move {
            while !stop.load(Ordering::Relaxed) {
                poll_queue(&deps, queues, &url, stats, metrics).await;
            }
        }
    });
    futures_util::future::join_all(pollers).await;
}
