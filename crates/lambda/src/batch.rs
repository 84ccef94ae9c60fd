//! SQS event ⇄ per-record processing ⇄ `SqsBatchResponse` (ReportBatchItemFailures).
//!
//! Records run with bounded concurrency; a record whose processing returns `Err` is reported
//! as a batch item failure (SQS makes it visible again after the visibility timeout), every
//! other record is deleted by the event source mapping. One bad record never fails the batch.

use std::future::Future;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
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
