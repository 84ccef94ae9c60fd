//! The scheduler Lambda's composition root.

use std::sync::Arc;

use lambda_runtime::{LambdaEvent, service_fn};
use punctual_aws::control::DynamoControl;
use punctual_aws::renewals::DynamoRenewals;
use punctual_aws::sqs::SqsQueues;
use punctual_core::redrive::PauseGate;
use punctual_core::scheduler::Scheduler;
use punctual_lambda::config::process_env;
use punctual_lambda::error::HandlerError;
use punctual_lambda::{SystemClock, init_tracing};
use punctual_scheduler::config::SchedulerConfig;
use punctual_scheduler::handler::{handle, metrics};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let config = SchedulerConfig::from_env(&process_env())?;
    let sdk = punctual_aws::config::load().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    if let Err(e) = ddb.describe_table().table_name(&config.renewals_table).send().await {
        tracing::warn!(error = %e, table = %config.renewals_table, "renewals table warm-up failed");
    }
    // The scheduler never quarantines; the DLQ URL is unused here.
    let queues = SqsQueues::new(sqs, &config.send_queue_url, "");
    // Read at every tick (once a minute): a pause takes effect at the next tick.
    let pause = Arc::new(PauseGate::new(DynamoControl::new(ddb.clone(), &config.ledger_table), Duration::ZERO));
    let scheduler = Arc::new(Scheduler::new(
        DynamoRenewals::new(ddb, &config.renewals_table),
        queues,
        SystemClock,
        config.settings,
    ));
    let namespace: Arc<str> = config.metrics_namespace.into();
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| {
        let (scheduler, pause) = (Arc::clone(&scheduler), Arc::clone(&pause));
        let namespace = Arc::clone(&namespace);
        async move {
            let report = handle(&scheduler, Some(&pause), event).await?;
            let now_ms = chrono::Utc::now().timestamp_millis();
            if let Err(e) = metrics(&report).flush(&mut std::io::stdout().lock(), &namespace, "scheduler", now_ms) {
                tracing::warn!(error = %e, "could not write EMF metrics");
            }
            Ok::<_, HandlerError>(tick_summary(&report))
        }
    }))
    .await
}

/// The invocation's answer: the tick summary, for `aws lambda invoke` users.
fn tick_summary(r: &punctual_core::scheduler::TickReport) -> String {
    format!(
        "released={} expired_missed={} refused={} finished={} backlog={} projected_breach={}",
        r.released, r.expired_missed, r.refused, r.finished, r.backlog, r.projected_breach
    )
}
