//! A producer of renewal commands (docs/integration.md#sending-from-rust): one command for one
//! renewal, sent both ways punctual takes it.
//!
//! - straight to the commands queue: SQS `SendMessage`, the body is the command;
//! - onto the producer's event bus: EventBridge `PutEvents` with the source the stack's rule
//!   matches (`ProducerSource`) and the detail-type `punctual.renewal`; the rule's SQS target
//!   puts the whole event on the commands queue.
//!
//! Environment: `PUNCTUAL_COMMANDS_QUEUE_URL` (the stack's output `CommandsQueueUrl`),
//! `PUNCTUAL_EVENT_BUS` (the stack's parameter `ProducerEventBusName`), `PUNCTUAL_SOURCE`
//! (`ProducerSource`), and the SDK's own (`AWS_PROFILE`, `AWS_REGION`, `AWS_ENDPOINT_URL`).
//!
//! ```sh
//! cargo run -p punctual-tests --example producer
//! ```

use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use serde_json::json;

/// The detail-type the stack's rule matches.
const DETAIL_TYPE: &str = "punctual.renewal";

fn env(name: &str) -> Result<String, Box<dyn std::error::Error>> {
    std::env::var(name).map_err(|e| format!("{name}: {e}").into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let queue_url = env("PUNCTUAL_COMMANDS_QUEUE_URL")?;
    let bus = env("PUNCTUAL_EVENT_BUS")?;
    let source = env("PUNCTUAL_SOURCE")?;
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;

    // The whole renewal, with the producer's revision of it: here its row's updated-at in
    // milliseconds, which only grows while the row changes.
    let command = json!({
        "v": 1,
        "version": 1_796_115_600_000_u64,
        "tenant_id": "acme",
        "renewal_id": "ren-1001",
        "recipient_ref": "cust-881",
        "channel": "email",
        "zone": "Europe/London",
        "local_due_date": "2027-12-01",
        "window_minutes": 480,
        "data": {"plan": "pro", "amount": "49.00 EUR"},
    });

    // 1. Straight to the commands queue.
    let sqs = aws_sdk_sqs::Client::new(&config);
    let sent = sqs.send_message().queue_url(&queue_url).message_body(command.to_string()).send().await?;
    println!("sent to the commands queue: message {}", sent.message_id().unwrap_or("?"));

    // 2. Onto the producer's bus. The same command again: same version, same content, so
    //    punctual takes it as a replay (stale) and writes nothing.
    let events = aws_sdk_eventbridge::Client::new(&config);
    let entry = PutEventsRequestEntry::builder()
        .event_bus_name(&bus)
        .source(&source)
        .detail_type(DETAIL_TYPE)
        .detail(command.to_string())
        .build();
    let put = events.put_events().entries(entry).send().await?;
    // PutEvents answers 200 even when an entry failed: each entry says.
    if put.failed_entry_count() > 0 {
        let why: Vec<String> = put
            .entries()
            .iter()
            .filter_map(|e| e.error_code().map(|code| format!("{code}: {}", e.error_message().unwrap_or(""))))
            .collect();
        return Err(format!("PutEvents refused the command: {}", why.join("; ")).into());
    }
    for e in put.entries() {
        println!("put on {bus}: event {}", e.event_id().unwrap_or("?"));
    }
    Ok(())
}
