//! The local stand-in for the outcome bus: each event sent to an SQS queue as the whole
//! EventBridge event, as a rule's SQS target delivers it (`punctual local`'s outcomes queue;
//! production publishes onto EventBridge, `punctual_scheduler::outcomes`).

use aws_sdk_sqs::Client;
use punctual_core::outcome::OutcomeEvent;
use punctual_core::ports::{OutcomeSink, SinkError};

use crate::sqs::{EntryResult, Letter, send_letters};

/// Outcome events onto a queue.
#[derive(Debug, Clone)]
pub struct QueueSink {
    client: Client,
    queue_url: String,
    bus: String,
}

impl QueueSink {
    /// Events onto `queue_url`, enveloped as if they had been put on `bus`.
    pub fn new(client: Client, queue_url: impl Into<String>, bus: impl Into<String>) -> Self {
        Self { client, queue_url: queue_url.into(), bus: bus.into() }
    }
}

impl OutcomeSink for QueueSink {
    async fn publish(&self, events: &[OutcomeEvent]) -> Result<Vec<bool>, SinkError> {
        let letters: Vec<Letter> = events
            .iter()
            .enumerate()
            .map(|(i, e)| Letter {
                id: format!("e{i}"),
                body: e.envelope(&self.bus).to_string(),
                attributes: Vec::new(),
            })
            .collect();
        let sent =
            send_letters(&self.client, &self.queue_url, &letters).await.map_err(|e| SinkError::Unknown(Box::new(e)))?;
        Ok(sent.iter().map(|r| matches!(r, EntryResult::Sent { .. })).collect())
    }
}
