//! SQS batch → sender service → partial batch response + EMF metrics.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;
use punctual_aws::emf::Metrics;
use punctual_core::decision::Disposition;
use punctual_core::metrics::sender as sender_metrics;
use punctual_core::reason::ReasonCode;
use punctual_core::sender::{Process, Processed, Received, SenderError};
use punctual_core::slo::SloPolicy;
use punctual_lambda::batch::process_records;
use punctual_lambda::error::HandlerError;
use punctual_lambda::invocation_deadline;

/// What a sender invocation needs, built once per cold start: the service (any [`Process`];
/// production's is `Sender` over the AWS adapters) and how many records run at once.
pub struct Deps<S> {
    /// The service.
    pub sender: S,
    /// Records processed at once.
    pub concurrency: usize,
    /// The deadline SLO the metrics judge (`SLO_TARGET`, `SLO_WITHIN_SECS`).
    pub slo: SloPolicy,
    /// The queues' `maxReceiveCount` (`MAX_RECEIVE_COUNT`): a message whose processing fails
    /// on this receive is moved to the DLQ by SQS itself next, without a decision; the SLO
    /// counts it breached then, once.
    pub max_receive_count: u32,
}

/// An invocation's answer and its metrics.
#[derive(Debug)]
pub struct Handled {
    /// For the event source mapping.
    pub response: SqsBatchResponse,
    /// To flush as EMF.
    pub metrics: Metrics,
}

fn log(message_id: &str, result: &Result<Processed, SenderError>) {
    match result {
        Ok(p) => {
            let reason = p.disposition.reason().map(ReasonCode::as_str);
            let outcome = match &p.disposition {
                Disposition::Delivered { .. } => "delivered",
                Disposition::Acknowledge { .. } => "acknowledged",
                Disposition::Defer { .. } => "deferred",
                Disposition::Quarantine { .. } => "dead_lettered",
                Disposition::Expire { .. } => "expired",
                Disposition::Cancel { .. } => "cancelled",
                Disposition::Rescheduled { .. } => "rescheduled",
            };
            tracing::info!(
                message_id,
                reminder_id = p.reminder_id.as_ref().map(|r| r.as_str()),
                outcome,
                reason,
                provider_status = p.provider_status,
                provider_calls = p.provider_calls,
                "processed"
            );
        }
        Err(e) => {
            let source = std::error::Error::source(e).map(|s| s.to_string());
            tracing::warn!(message_id, error_kind = e.kind(), error = %e, source, "infrastructure failure; message left for SQS to redeliver");
        }
    }
}

/// Handles one SQS batch. Records whose processing hit an infrastructure failure are reported
/// as batch item failures; everything else (including malformed and expired messages, which
/// are quarantined) is acknowledged. The invocation as a whole never fails for a record.
pub async fn handle<S: Process>(deps: &Deps<S>, event: LambdaEvent<SqsEvent>) -> Result<Handled, HandlerError> {
    let deadline = invocation_deadline(&event.context);
    let (response, results) = process_records(&event.payload, deps.concurrency, |record| {
        let received = Received {
            message_id: record.message_id.as_deref().unwrap_or_default(),
            body: record.body.as_deref().unwrap_or_default(),
        };
        // The service applies the operator pause (it holds without spending attempts).
        async move { deps.sender.process(received, deadline).await }
    })
    .await;
    let mut metrics = Metrics::new();
    for (record, result) in &results {
        log(record.message_id.as_deref().unwrap_or_default(), result);
        match result {
            Ok(p) => sender_metrics::record(&mut metrics, p, &deps.slo),
            Err(_) => {
                let receives = record.attributes.get("ApproximateReceiveCount").and_then(|v| v.parse::<u32>().ok());
                let body = record.body.as_deref().unwrap_or_default();
                sender_metrics::infrastructure_failure(&mut metrics, receives, body, deps.max_receive_count);
            }
        }
    }
    Ok(Handled { response, metrics })
}
