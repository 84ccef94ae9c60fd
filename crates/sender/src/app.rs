//! The sender's one composition root: configuration + clients → the ready [`App`]. The
//! Lambda's `main.rs`, the local harness (`punctual run`, `local drain`, `canary`) and the
//! integration tests all call [`build`], so every sender runs the same wiring: the DynamoDB
//! ledger and renewals, the one shared limiter schedule in the ledger table, the provider,
//! SQS, and the operator pause switch.

use aws_sdk_dynamodb::Client as DynamoClient;
use aws_sdk_sqs::Client as SqsClient;
use punctual_aws::control::DynamoControl;
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::limiter::DynamoSlotStore;
use punctual_aws::renewals::DynamoRenewals;
use punctual_aws::sqs::SqsQueues;
use punctual_core::limiter::SharedLimiter;
use punctual_core::pause::PauseGate;
use punctual_core::sender::Sender;
use punctual_lambda::SystemClock;
use punctual_provider::HttpProvider;

use crate::config::SenderConfig;
use crate::handler::Deps;

/// A sender instance as production composes it.
pub type App = Deps<LiveSender>;

/// The sender service over the AWS adapters, the shared DynamoDB limiter and the HTTP provider.
pub type LiveSender = Sender<
    DynamoLedger,
    DynamoRenewals,
    SharedLimiter<DynamoSlotStore, SystemClock>,
    HttpProvider,
    SqsQueues,
    SystemClock,
>;

/// The clients an instance is built from (built once per cold start by the caller, which
/// decides endpoints and credentials).
#[derive(Debug, Clone)]
pub struct Clients {
    /// DynamoDB (ledger, renewals, limiter schedule, pause switch).
    pub dynamodb: DynamoClient,
    /// SQS (requeue, DLQ).
    pub sqs: SqsClient,
    /// The provider.
    pub provider: HttpProvider,
}

/// Builds one sender instance. `seed` seeds its backoff jitter, owner-token nonces and limiter
/// pool (each instance its own; many instances share one schedule).
pub fn build(config: &SenderConfig, clients: Clients, seed: u64) -> App {
    let clock = SystemClock;
    let ddb = clients.dynamodb;
    let sender = Sender::new(
        DynamoLedger::new(ddb.clone(), &config.ledger_table),
        DynamoRenewals::new(ddb.clone(), &config.renewals_table),
        // One schedule in the ledger table, shared by every sender instance and by redrive.
        SharedLimiter::new(
            DynamoSlotStore::new(ddb.clone(), &config.ledger_table),
            clock,
            config.limiter.clone(),
            seed,
        ),
        clients.provider,
        SqsQueues::new(clients.sqs, &config.send_queue_url, &config.dlq_url)
            .with_urgent(config.urgent_queue_url.as_deref()),
        clock,
        config.settings,
        seed.rotate_left(32),
    )
    .with_pause(PauseGate::new(DynamoControl::new(ddb, &config.ledger_table), clock, config.pause_check));
    Deps { sender, concurrency: config.concurrency }
}
