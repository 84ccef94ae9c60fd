//! The scheduler's one composition root: configuration + clients → the ready [`App`]. The
//! Lambda's `main.rs`, the local harness (`punctual run`, `local drain`, `canary`) and the
//! tests call [`build`], so every tick runs the same wiring and the same pause rule.

use std::time::Duration;

use aws_sdk_dynamodb::Client as DynamoClient;
use aws_sdk_sqs::Client as SqsClient;
use punctual_aws::control::DynamoControl;
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::renewals::DynamoRenewals;
use punctual_aws::sqs::SqsQueues;
use punctual_core::outcome::Publisher;
use punctual_core::pause::PauseGate;
use punctual_core::ports::OutcomeSink;
use punctual_core::scheduler::Scheduler;
use punctual_lambda::SystemClock;

use crate::config::SchedulerConfig;

/// The scheduler as production composes it.
pub type App = Scheduler<DynamoRenewals, SqsQueues, SystemClock>;

/// The outbox's publisher: the ledger's unpublished outcome events into `sink` (EventBridge in
/// production, [`crate::outcomes::EventBridgeSink`]; the local outcomes queue in `punctual local`).
pub fn build_publisher<S: OutcomeSink>(
    config: &SchedulerConfig,
    dynamodb: &DynamoClient,
    sink: S,
) -> Publisher<DynamoLedger, S> {
    Publisher::new(DynamoLedger::new(dynamodb.clone(), &config.ledger_table), sink)
}

/// Builds the scheduler. The pause switch is read at every tick (once a minute in production):
/// a pause takes effect at the next tick. What it finds past its deadline is expired through
/// the idempotency ledger (one verdict per reminder, whoever ends it).
pub fn build(config: &SchedulerConfig, dynamodb: &DynamoClient, sqs: &SqsClient) -> App {
    // The scheduler never quarantines; it has no DLQ.
    let queues = SqsQueues::new(sqs.clone(), &config.send_queue_url, "")
        .with_urgent(config.urgent_queue_url.as_deref())
        .with_channel_queues(&config.channel_queues)
        .with_channel_urgent_queues(&config.channel_urgent_queues);
    Scheduler::new(DynamoRenewals::new(dynamodb.clone(), &config.renewals_table), queues, SystemClock, config.settings)
        .with_pause(PauseGate::new(
            DynamoControl::new(dynamodb.clone(), &config.ledger_table),
            SystemClock,
            Duration::ZERO,
        ))
        .with_channel_switches(
            config
                .channels
                .iter()
                .map(|name| {
                    let control = DynamoControl::for_channel(dynamodb.clone(), &config.ledger_table, name);
                    (name.clone(), PauseGate::new(control, SystemClock, Duration::ZERO))
                })
                .collect(),
        )
        .with_channel_rates(config.channel_rates.clone())
        .with_ledger(DynamoLedger::new(dynamodb.clone(), &config.ledger_table))
}
