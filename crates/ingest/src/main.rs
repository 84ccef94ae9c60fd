//! The ingest Lambda's entry point: tracing, configuration, the clients built once per cold
//! start, then [`app::build`] and the runtime loop.

use std::sync::Arc;

use lambda_runtime::{LambdaEvent, service_fn};
use punctual_ingest::app;
use punctual_ingest::config::IngestConfig;
use punctual_ingest::handler::handle;
use punctual_lambda::config::process_env;
use punctual_lambda::error::HandlerError;
use punctual_lambda::init_tracing;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let config = IngestConfig::from_env(&process_env())?;
    let sdk = punctual_aws::config::load().await;
    let ingest = Arc::new(app::build(&config, &aws_sdk_dynamodb::Client::new(&sdk), &aws_sdk_sqs::Client::new(&sdk)));
    let namespace: Arc<str> = config.metrics_namespace.into();
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| {
        let ingest = Arc::clone(&ingest);
        let namespace = Arc::clone(&namespace);
        async move {
            let handled = handle(&ingest, event).await?;
            let now_ms = chrono::Utc::now().timestamp_millis();
            if let Err(e) = handled.metrics.flush(&mut std::io::stdout().lock(), &namespace, "ingest", now_ms) {
                tracing::warn!(error = %e, "could not write EMF metrics");
            }
            Ok::<_, HandlerError>(handled.response)
        }
    }))
    .await
}
