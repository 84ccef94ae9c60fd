//! The redrive function's one composition root: configuration + clients → the ready [`App`].
//! The Lambda's `main.rs` and the operator CLI's in-process redrive (`punctual redrive`
//! without `--function`) both call [`build`] and then the same handler.

use aws_sdk_dynamodb::Client as DynamoClient;
use aws_sdk_sqs::Client as SqsClient;
use punctual_aws::control::{DynamoControl, SqsDeadLetters};
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::sqs::SqsQueues;
use punctual_core::redrive::Redriver;
use punctual_lambda::SystemClock;

use crate::config::RedriveConfig;

/// The redrive service as production composes it.
pub type App = Redriver<DynamoLedger, SqsDeadLetters, DynamoControl, SystemClock>;

/// Builds the redrive service.
pub fn build(config: &RedriveConfig, dynamodb: &DynamoClient, sqs: &SqsClient) -> App {
    let queues = SqsQueues::new(sqs.clone(), &config.send_queue_url, &config.dlq_url)
        .with_urgent(config.lanes.urgent_queue_url.as_deref())
        .with_channel_queues(&config.lanes.channel_queues)
        .with_channel_urgent_queues(&config.lanes.channel_urgent_queues);
    let mut redriver = Redriver::new(
        DynamoLedger::new(dynamodb.clone(), &config.ledger_table),
        SqsDeadLetters::new(queues),
        DynamoControl::new(dynamodb.clone(), &config.ledger_table),
        SystemClock,
    );
    redriver.urgent_below = config.lanes.deadline_near;
    redriver.channel_caps = config.channel_caps.clone();
    redriver
}
