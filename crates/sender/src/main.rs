//! The sender Lambda's entry point: tracing, configuration, one SdkConfig and the clients
//! built once per cold start and warmed, then [`app::build`] and the runtime loop.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use lambda_runtime::{LambdaEvent, service_fn};
use punctual_lambda::config::process_env;
use punctual_lambda::error::HandlerError;
use punctual_lambda::init_tracing;
use punctual_sender::app::{self, Clients};
use punctual_sender::config::SenderConfig;
use punctual_sender::handler::handle;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let mut config = SenderConfig::from_env(&process_env())?;
    let sdk = punctual_aws::config::load().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let (provider, channels) = app::providers(&mut config, &sdk, &ddb).await?;

    // Warm the connections during init so the first invocation does not pay TLS handshakes.
    let warm_all = async {
        // With channels declared, `provider` is the first channel's.
        let mut ok = true;
        for p in if channels.is_empty() { std::slice::from_ref(&provider) } else { &channels[..] } {
            ok &= p.warm_up().await;
        }
        ok
    };
    let (ledger_ok, provider_ok) = tokio::join!(ddb.describe_table().table_name(&config.ledger_table).send(), warm_all);
    if let Err(e) = ledger_ok {
        tracing::warn!(error = %e, table = %config.ledger_table, "ledger table warm-up failed");
    }
    if !provider_ok {
        tracing::warn!("provider warm-up got no answer");
    }

    let seed = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or_default()
        ^ u64::from(std::process::id());
    let clients = Clients { dynamodb: ddb, sqs: aws_sdk_sqs::Client::new(&sdk), provider, channels };
    let deps = Arc::new(app::build(&config, clients, seed));
    let namespace: Arc<str> = config.metrics_namespace.into();
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| {
        let deps = Arc::clone(&deps);
        let namespace = Arc::clone(&namespace);
        async move {
            let handled = handle(&deps, event).await?;
            let now_ms = chrono::Utc::now().timestamp_millis();
            if let Err(e) = handled.metrics.flush(&mut std::io::stdout().lock(), &namespace, "sender", now_ms) {
                tracing::warn!(error = %e, "could not write EMF metrics");
            }
            Ok::<_, HandlerError>(handled.response)
        }
    }))
    .await
}
