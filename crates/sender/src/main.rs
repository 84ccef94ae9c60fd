//! The sender Lambda's composition root: tracing, configuration, one SdkConfig, clients built
//! once per cold start and warmed, then the runtime loop.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_runtime::{LambdaEvent, service_fn};
use punctual_aws::control::DynamoControl;
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::limiter::DynamoSlotStore;
use punctual_aws::renewals::DynamoRenewals;
use punctual_aws::secrets::provider_token;
use punctual_aws::sqs::SqsQueues;
use punctual_core::limiter::SharedLimiter;
use punctual_core::redrive::PauseGate;
use punctual_core::sender::Sender;
use punctual_lambda::config::process_env;
use punctual_lambda::error::HandlerError;
use punctual_lambda::{SystemClock, init_tracing};
use punctual_provider::HttpProvider;
use punctual_sender::config::SenderConfig;
use punctual_sender::handler::{Deps, handle};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let config = SenderConfig::from_env(&process_env())?;
    let sdk = punctual_aws::config::load().await;
    let token = provider_token(&sdk).await?;
    let provider = HttpProvider::new(&config.provider_url, &token, Duration::from_secs(2))?;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let ddb_control = ddb.clone();
    let sqs = aws_sdk_sqs::Client::new(&sdk);

    // Warm the connections during init so the first invocation does not pay TLS handshakes.
    let (ledger_ok, provider_ok) =
        tokio::join!(ddb.describe_table().table_name(&config.ledger_table).send(), provider.warm_up());
    if let Err(e) = ledger_ok {
        tracing::warn!(error = %e, table = %config.ledger_table, "ledger table warm-up failed");
    }
    if !provider_ok {
        tracing::warn!("provider warm-up got no answer");
    }

    let clock = SystemClock;
    let seed = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or_default()
        ^ u64::from(std::process::id());
    let sender = Sender::new(
        DynamoLedger::new(ddb.clone(), &config.ledger_table),
        DynamoRenewals::new(ddb.clone(), &config.renewals_table),
        // One schedule in the ledger table, shared by every sender instance and by redrive.
        SharedLimiter::new(DynamoSlotStore::new(ddb, &config.ledger_table), clock, config.limiter, seed),
        provider,
        SqsQueues::new(sqs, &config.send_queue_url, &config.dlq_url),
        clock,
        config.settings,
        seed,
    );
    // The operator pause switch, read at most every 5 s per instance.
    let pause = PauseGate::new(DynamoControl::new(ddb_control, &config.ledger_table), Duration::from_secs(5));
    let deps = Arc::new(Deps { sender, concurrency: config.concurrency, pause: Some(pause) });
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
