//! SQS batch → sender service → partial batch response + EMF metrics.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;
use punctual_aws::emf::{Metrics, name};
use punctual_core::decision::Disposition;
use punctual_core::reason::ReasonCode;
use punctual_core::sender::{Process, Processed, Received, SenderError};
use punctual_core::slo::{SloPolicy, Verdict, verdict_of};
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

fn record_metrics(m: &mut Metrics, p: &Processed, slo: &SloPolicy) {
    // The SLO: one verdict per reminder released by the scheduler, counted per tenant. None
    // for a redrive's copy (judged when it was dead-lettered), nor for a decision the ledger
    // refused to record (another copy settled the reminder first and was judged for it).
    if let (Some(tenant), false, None) = (&p.tenant_id, p.redriven, &p.settle_conflict) {
        let metric = match verdict_of(&p.disposition, p.delivery_lag, p.slack, slo) {
            Some(Verdict::Met) => Some(name::SLO_MET),
            Some(Verdict::Breached) => Some(name::SLO_BREACHED),
            Some(Verdict::Excluded) => Some(name::SLO_EXCLUDED),
            Some(Verdict::Pending) | None => None,
        };
        if let Some(metric) = metric {
            m.slo(tenant.as_str(), metric, 1.0);
        }
    }
    m.count(name::ATTEMPTS, f64::from(p.provider_calls));
    if p.throttled {
        m.count(name::THROTTLED, 1.0);
    }
    if p.possible_double {
        m.count(name::POSSIBLE_DOUBLE, 1.0);
    }
    if let Some(slack) = p.slack {
        m.observe(name::DEADLINE_SLACK, slack.as_millis() as f64);
    }
    match &p.disposition {
        Disposition::Delivered { .. } => {
            m.count(name::DELIVERED, 1.0);
            if let Some(lag) = p.delivery_lag {
                m.observe(name::DELIVERY_LAG, lag.as_millis() as f64);
            }
        }
        Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate } => m.count(name::SUPPRESSED, 1.0),
        Disposition::Acknowledge { .. } => {}
        Disposition::Defer { reason, .. } => m.count_reason(name::DEFERRED, reason.as_str(), 1.0),
        Disposition::Quarantine { reason, .. } => {
            if *reason == ReasonCode::ClassifiedPermanent {
                m.count(name::PERMANENT, 1.0);
            }
            m.count_reason(name::DLQ_INGRESS, reason.as_str(), 1.0);
        }
        Disposition::Expire { .. } => {
            m.count_reason(name::DLQ_INGRESS, ReasonCode::BusinessDeadlineExpired.as_str(), 1.0);
        }
        Disposition::Cancel { .. } => m.count(name::CANCELLED, 1.0),
    }
}

/// A reminder whose processing failed on its last receive leaves for the DLQ through SQS's
/// redrive policy (`receive_count_backstop`) with no decision of the sender's, and its redriven
/// copy is not judged: without this, an outage that fails every record (the ledger down for an
/// hour) would publish no breach at all, and the burn rate would read 0 through it.
fn backstop_verdict(m: &mut Metrics, record: &aws_lambda_events::event::sqs::SqsMessage, max_receive: u32) {
    let receives = record.attributes.get("ApproximateReceiveCount").and_then(|v| v.parse::<u32>().ok());
    if receives.is_none_or(|n| n < max_receive) {
        return;
    }
    if let Ok(msg) = punctual_core::ReminderMessage::decode(record.body.as_deref().unwrap_or_default())
        && msg.redrive.is_none()
    {
        m.slo(msg.tenant_id.as_str(), name::SLO_BREACHED, 1.0);
    }
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
            Ok(p) => record_metrics(&mut metrics, p, &deps.slo),
            Err(_) => {
                metrics.count(name::INFRA_FAILURES, 1.0);
                backstop_verdict(&mut metrics, record, deps.max_receive_count);
            }
        }
    }
    Ok(Handled { response, metrics })
}
