//! The scheduler Lambda's entry point: tracing, configuration, clients built once and warmed,
//! then [`app::build`] and the runtime loop.

use std::sync::Arc;

use lambda_runtime::{LambdaEvent, service_fn};
use punctual_lambda::config::process_env;
use punctual_lambda::error::HandlerError;
use punctual_lambda::init_tracing;
use punctual_scheduler::app;
use punctual_scheduler::config::SchedulerConfig;
use punctual_scheduler::handler::{failure_metrics, handle_reporting, metrics, publish};
use punctual_scheduler::outcomes::EventBridgeSink;

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
    let scheduler = Arc::new(app::build(&config, &ddb, &sqs));
    let sink = EventBridgeSink::new(aws_sdk_eventbridge::Client::new(&sdk), &config.outcome_bus);
    let publisher = Arc::new(app::build_publisher(&config, &ddb, sink));
    let namespace: Arc<str> = config.metrics_namespace.into();
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| {
        let scheduler = Arc::clone(&scheduler);
        let publisher = Arc::clone(&publisher);
        let namespace = Arc::clone(&namespace);
        async move {
            let deadline = punctual_lambda::invocation_deadline(&event.context);
            let (report, handled) = handle_reporting(&scheduler, event).await;
            let swept = publish(&publisher, deadline).await;
            let now_ms = chrono::Utc::now().timestamp_millis();
            let mut m = if handled.is_ok() { metrics(&report) } else { failure_metrics(&report) };
            if let Some(s) = &swept {
                m.merge(&punctual_core::metrics::outcomes::metrics(s));
            }
            if let Err(e) = m.flush(&mut std::io::stdout().lock(), &namespace, "scheduler", now_ms) {
                tracing::warn!(error = %e, "could not write EMF metrics");
            }
            handled?;
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
