//! Outcome events onto EventBridge: the sink the scheduler's sweep of the outbox publishes
//! to (docs/design.md#outcome-events), one `PutEvents` of up to 10 entries a call.

use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use punctual_core::outcome::{DETAIL_TYPE, OutcomeEvent, SOURCE};
use punctual_core::ports::{OutcomeSink, SinkError};

/// The bus outcome events go to.
#[derive(Debug, Clone)]
pub struct EventBridgeSink {
    client: Client,
    bus: String,
}

impl EventBridgeSink {
    /// Events onto `bus` (a name or an ARN).
    pub fn new(client: Client, bus: impl Into<String>) -> Self {
        Self { client, bus: bus.into() }
    }
}

impl OutcomeSink for EventBridgeSink {
    async fn publish(&self, events: &[OutcomeEvent]) -> Result<Vec<bool>, SinkError> {
        let entries: Vec<PutEventsRequestEntry> = events
            .iter()
            .map(|e| {
                PutEventsRequestEntry::builder()
                    .source(SOURCE)
                    .detail_type(DETAIL_TYPE)
                    .detail(e.to_json())
                    .event_bus_name(&self.bus)
                    .build()
            })
            .collect();
        let out = self
            .client
            .put_events()
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| SinkError::Unknown(Box::new(e)))?;
        // One result entry per request entry, in order; an entry with an error code was not
        // accepted (it stays in the outbox).
        let results = out.entries();
        Ok((0..events.len()).map(|i| results.get(i).is_some_and(|r| r.error_code().is_none())).collect())
    }
}
