//! The redrive Lambda's composition root. It has no trigger: an operator invokes it
//! (`punctual redrive --function NAME`, or `aws lambda invoke`) with a redrive request.

use lambda_runtime::{LambdaEvent, service_fn};
use punctual_lambda::config::process_env;
use punctual_lambda::error::HandlerError;
use punctual_lambda::{init_tracing, invocation_deadline};
use punctual_redrive::app;
use punctual_redrive::config::RedriveConfig;
use punctual_redrive::handler::Function;
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let config = RedriveConfig::from_env(&process_env())?;
    let sdk = punctual_aws::config::load().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let redriver = Arc::new(app::build(&config, &ddb, &aws_sdk_sqs::Client::new(&sdk)));
    let caps = config.caps;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let redriver = Arc::clone(&redriver);
        async move {
            let deadline = invocation_deadline(&event.context);
            Function { redriver: &redriver, caps }.handle(event.payload, deadline).await.map_err(|e: HandlerError| e)
        }
    }))
    .await
}
