//! A uniquely named punctual stack on the emulator (both lanes with their DLQ and redrive policy,
//! ledger and renewals tables), and an event source that plays the SQS → Lambda event source
//! mapping: receive a batch, hand it to a handler as an `SqsEvent`, delete what succeeded.

use std::time::Duration;

use aws_config::SdkConfig;
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::QueueAttributeName;
use punctual_aws::sqs::{Received, SqsQueues};

use crate::unique;

/// Send queue `maxReceiveCount` before SQS itself moves a message to the DLQ (crash backstop).
pub const MAX_RECEIVE_COUNT: u32 = 5;

/// Queues and tables of one test.
#[derive(Debug, Clone)]
pub struct Stack {
    /// SQS client.
    pub sqs: aws_sdk_sqs::Client,
    /// DynamoDB client.
    pub ddb: aws_sdk_dynamodb::Client,
    /// The queues.
    pub queues: SqsQueues,
    /// Ledger table name.
    pub ledger_table: String,
    /// Renewals table name.
    pub renewals_table: String,
}

/// Machinery failure while building or driving the stack.
pub type StackError = Box<dyn std::error::Error + Send + Sync>;

impl Stack {
    /// Creates the queues and tables under fresh names.
    pub async fn create(config: &SdkConfig, prefix: &str) -> Result<Self, StackError> {
        let sqs = aws_sdk_sqs::Client::new(config);
        let ddb = aws_sdk_dynamodb::Client::new(config);
        let dlq_url =
            sqs.create_queue().queue_name(unique(&format!("{prefix}-dlq"))).send().await?.queue_url.unwrap_or_default();
        let dlq_arn = sqs
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await?
            .attributes
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .unwrap_or_default();
        let redrive = format!("{{\"deadLetterTargetArn\":\"{dlq_arn}\",\"maxReceiveCount\":\"{MAX_RECEIVE_COUNT}\"}}");
        let mut lanes = Vec::new();
        for lane in ["send", "urgent"] {
            let url = sqs
                .create_queue()
                .queue_name(unique(&format!("{prefix}-{lane}")))
                .attributes(QueueAttributeName::RedrivePolicy, redrive.clone())
                .attributes(QueueAttributeName::VisibilityTimeout, "30")
                .send()
                .await?
                .queue_url
                .unwrap_or_default();
            lanes.push(url);
        }
        let (send_url, urgent_url) = (lanes[0].clone(), lanes[1].clone());
        let ledger_table = unique(&format!("{prefix}-ledger"));
        let renewals_table = unique(&format!("{prefix}-renewals"));
        punctual_aws::ledger::create_table(&ddb, &ledger_table).await?;
        punctual_aws::renewals::create_table(&ddb, &renewals_table).await?;
        let queues = SqsQueues::new(sqs.clone(), send_url, dlq_url).with_urgent(Some(&urgent_url));
        Ok(Self { queues, sqs, ddb, ledger_table, renewals_table })
    }

    /// A queue attribute as a number (e.g. `ApproximateNumberOfMessagesDelayed`).
    pub async fn queue_count(&self, url: &str, name: QueueAttributeName) -> Result<u64, StackError> {
        let out = self.sqs.get_queue_attributes().queue_url(url).attribute_names(name.clone()).send().await?;
        Ok(out.attributes.and_then(|a| a.get(&name).and_then(|v| v.parse().ok())).unwrap_or(0))
    }

    /// Everything currently visible on the DLQ (received with a short visibility so tests can
    /// read it more than once).
    pub async fn dlq_messages(&self) -> Result<Vec<Received>, StackError> {
        let mut all = Vec::new();
        loop {
            let batch = self.queues.receive(self.queues.dlq_url(), 10, Duration::from_secs(1)).await?;
            if batch.is_empty() {
                return Ok(all);
            }
            all.extend(batch);
        }
    }

    /// The operator commands' target for this stack (on the emulator, quota 100/s).
    pub fn target(&self) -> punctual_ops::Target {
        punctual_ops::Target {
            resources: punctual_ops::Resources {
                endpoint: crate::endpoint(),
                send_queue_url: self.queues.send_url().to_owned(),
                urgent_queue_url: self.queues.urgent_url().to_owned(),
                dlq_url: self.queues.dlq_url().to_owned(),
                ledger_table: self.ledger_table.clone(),
                renewals_table: self.renewals_table.clone(),
                provider_url: String::new(),
                recipients_table: String::new(),
                provider_kind: String::new(),
                channels: Vec::new(),
                ..punctual_ops::Resources::default()
            },
            dynamodb_endpoint: None,
            quota: 100.0,
        }
    }

    /// Deletes the queues and tables.
    pub async fn destroy(&self) {
        let _ = self.sqs.delete_queue().queue_url(self.queues.send_url()).send().await;
        let _ = self.sqs.delete_queue().queue_url(self.queues.urgent_url()).send().await;
        let _ = self.sqs.delete_queue().queue_url(self.queues.dlq_url()).send().await;
        let _ = self.ddb.delete_table().table_name(&self.ledger_table).send().await;
        let _ = self.ddb.delete_table().table_name(&self.renewals_table).send().await;
    }
}

/// Builds the `SqsEvent` Lambda would deliver for these messages.
pub fn sqs_event(messages: &[Received], queue_arn: &str) -> Result<SqsEvent, serde_json::Error> {
    let records = messages.iter().map(|m| {
        let (message_id, receipt_handle, body, receive_count, sent_at_ms) = m.parts();
        punctual_lambda::batch::ReceivedRecord { message_id, receipt_handle, body, receive_count, sent_at_ms }
    });
    punctual_lambda::batch::sqs_event(records, queue_arn)
}
