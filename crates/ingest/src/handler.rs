//! SQS batch of commands → the ingest service → partial batch response + EMF metrics.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;
use punctual_aws::emf::Metrics;
use punctual_lambda::error::HandlerError;

use crate::app::{Applied, Ingest, Received};

/// The metrics the ingest function publishes (EMF, `Function=ingest`).
pub mod name {
    /// Commands written (inserted, updated, rescheduled, reactivated, or a newer version of
    /// the same content), by `Reason` = the write's outcome.
    pub const APPLIED: &str = "CommandsApplied";
    /// Commands whose version was not newer than the stored one: acknowledged, not written.
    pub const STALE: &str = "CommandsStale";
    /// Commands sent to the commands DLQ, by `Reason` = `malformed`, `invalid` or `refused`.
    pub const REJECTED: &str = "CommandsRejected";
    /// Commands left on the queue for SQS to deliver again (an infrastructure failure).
    pub const FAILED: &str = "CommandsFailed";
}

/// An invocation's answer and its metrics.
#[derive(Debug)]
pub struct Handled {
    /// For the event source mapping.
    pub response: SqsBatchResponse,
    /// To flush as EMF.
    pub metrics: Metrics,
}

fn outcome_name(o: &punctual_aws::renewals::RowOutcome) -> &'static str {
    use punctual_aws::renewals::RowOutcome;
    match o {
        RowOutcome::Inserted => "inserted",
        RowOutcome::Updated => "updated",
        RowOutcome::Rescheduled => "rescheduled",
        RowOutcome::Reactivated => "reactivated",
        RowOutcome::Unchanged => "unchanged",
        RowOutcome::Stale { .. } => "stale",
        RowOutcome::Conflict(_) => "refused",
    }
}

/// Handles one SQS batch of commands. A command is never failed for what it says (that goes to
/// the commands DLQ); only an infrastructure failure leaves it for redelivery.
pub async fn handle(ingest: &Ingest, event: LambdaEvent<SqsEvent>) -> Result<Handled, HandlerError> {
    let records = &event.payload.records;
    let commands: Vec<Received<'_>> = records
        .iter()
        .map(|r| Received {
            message_id: r.message_id.as_deref().unwrap_or_default(),
            body: r.body.as_deref().unwrap_or_default(),
        })
        .collect();
    let results = ingest.apply(&commands, chrono::Utc::now()).await;
    let mut response = SqsBatchResponse::default();
    let mut metrics = Metrics::new();
    for (c, result) in commands.iter().zip(&results) {
        let message_id = c.message_id;
        match result {
            Ok(Applied::Applied { renewal: (tenant_id, renewal_id), version, outcome }) => {
                metrics.count_reason(name::APPLIED, outcome_name(outcome), 1.0);
                tracing::info!(
                    message_id,
                    tenant_id,
                    renewal_id,
                    version,
                    outcome = outcome_name(outcome),
                    "command applied"
                );
            }
            Ok(Applied::Stale { renewal: (tenant_id, renewal_id), version, stored }) => {
                metrics.count(name::STALE, 1.0);
                tracing::info!(message_id, tenant_id, renewal_id, version, stored, "command stale");
            }
            Ok(Applied::Rejected { class, reason }) => {
                metrics.count_reason(name::REJECTED, class, 1.0);
                // The reason echoes at most 64 characters of a bad value, never data or an address.
                tracing::warn!(message_id, error_class = class, reason, "command rejected to the commands DLQ");
            }
            Err(e) => {
                metrics.count(name::FAILED, 1.0);
                response.add_failure(message_id.to_owned());
                tracing::warn!(message_id, error = %e, "infrastructure failure; command left for SQS to redeliver");
            }
        }
    }
    Ok(Handled { response, metrics })
}
