//! SQS event ⇄ per-record processing ⇄ `SqsBatchResponse` (ReportBatchItemFailures).
//!
//! Records run with bounded concurrency; a record whose processing returns `Err` is reported
//! as a batch item failure (SQS makes it visible again after the visibility timeout), every
//! other record is deleted by the event source mapping. One bad record never fails the batch.

use std::future::Future;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};

/// What an event source knows of one received message.
#[derive(Debug, Clone, Copy)]
pub struct ReceivedRecord<'a> {
    /// SQS message id.
    pub message_id: &'a str,
    /// Receipt handle.
    pub receipt_handle: &'a str,
    /// Body.
    pub body: &'a str,
    /// `ApproximateReceiveCount`.
    pub receive_count: u32,
    /// `SentTimestamp`, epoch milliseconds.
    pub sent_at_ms: Option<i64>,
}

/// Builds the `SqsEvent` Lambda's event source mapping would deliver for these messages, for
/// local event sources and tests. Through JSON, because the event types are
/// `#[non_exhaustive]`.
pub fn sqs_event<'a>(
    records: impl IntoIterator<Item = ReceivedRecord<'a>>,
    queue_arn: &str,
) -> Result<SqsEvent, serde_json::Error> {
    let records: Vec<serde_json::Value> = records
        .into_iter()
        .map(|m| {
            serde_json::json!({
                "messageId": m.message_id,
                "receiptHandle": m.receipt_handle,
                "body": m.body,
                "attributes": {
                    "ApproximateReceiveCount": m.receive_count.to_string(),
                    "SentTimestamp": m.sent_at_ms.map(|t| t.to_string()).unwrap_or_default(),
                },
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records }))
}
use futures_util::stream::{self, StreamExt};

/// Processes every record of `event` with at most `concurrency` in flight, and reports the
/// records for which `process` returned `Err` as failures (in event order).
pub async fn process_records<'a, T, E, F, Fut>(
    event: &'a SqsEvent,
    concurrency: usize,
    process: F,
) -> (SqsBatchResponse, Vec<(&'a SqsMessage, Result<T, E>)>)
where
    F: Fn(&'a SqsMessage) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut results: Vec<(usize, &SqsMessage, Result<T, E>)> = stream::iter(event.records.iter().enumerate())
        .map(|(i, record)| {
            let fut = process(record);
            async move { (i, record, fut.await) }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    results.sort_by_key(|(i, _, _)| *i);
    let mut response = SqsBatchResponse::default();
    for (_, record, result) in &results {
        if result.is_err() {
            response.add_failure(record.message_id.clone().unwrap_or_default());
        }
    }
    (response, results.into_iter().map(|(_, r, res)| (r, res)).collect())
}

/// The `Scheduled Event` EventBridge delivers for a `rate(...)` rule firing at `at`, for local
/// event sources (the harness's tick) and tests. Through JSON, because the event types are
/// `#[non_exhaustive]`.
pub fn scheduled_event(
    at: chrono::DateTime<chrono::Utc>,
    rule_arn: &str,
) -> Result<aws_lambda_events::event::eventbridge::EventBridgeEvent, serde_json::Error> {
    serde_json::from_value(serde_json::json!({
        "version": "0",
        "id": format!("local-{}", at.timestamp_millis()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "000000000000",
        "time": at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": "us-east-1",
        "resources": [rule_arn],
        "detail": {},
    }))
}

/// A runtime `Context` for a local invocation with `timeout` left (a real deadline: the
/// default context's is 0, already expired).
pub fn local_context(request_id: String, timeout: std::time::Duration) -> lambda_runtime::Context {
    let mut ctx = lambda_runtime::Context::default();
    ctx.request_id = request_id;
    let deadline = chrono::Utc::now() + chrono::TimeDelta::from_std(timeout).unwrap_or_default();
    ctx.deadline = u64::try_from(deadline.timestamp_millis()).unwrap_or(0);
    ctx
}
