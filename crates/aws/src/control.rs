//! The operator's controls on AWS: the pause switch and redrive audit records in the ledger
//! table (`pk = control:pause`, `audit:pause:{ms}`, `redrive:{id}`), and the DLQ as the
//! redrive sees it (SQS). One strongly consistent `GetItem` reads the switch; the sender caches
//! it for a few seconds (README, "Pause").

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use chrono::{DateTime, Utc};
use punctual_core::ports::BoxError;
use punctual_core::redrive::{AuditRecord, Control, DeadLetter, DeadLetters, Pause};

use crate::dynamodb::{self, get_s, s};
use crate::sqs::{SqsQueues, attr};

/// Pause switch and audit records in the ledger table.
#[derive(Debug, Clone)]
pub struct DynamoControl {
    client: Client,
    table: String,
}

const PAUSE_PK: &str = "control:pause";

impl DynamoControl {
    /// Controls kept in `table` (the ledger table).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    /// Reads a redrive audit record's JSON.
    pub async fn audit(&self, id: &str) -> Result<Option<serde_json::Value>, BoxError> {
        let item = dynamodb::get(&self.client, &self.table, &format!("redrive:{id}")).await?;
        Ok(item.as_ref().and_then(|i| get_s(i, "record")).and_then(|r| serde_json::from_str(r).ok()))
    }
}

impl Control for DynamoControl {
    async fn pause(&self) -> Result<Option<Pause>, BoxError> {
        let Some(item) = dynamodb::get(&self.client, &self.table, PAUSE_PK).await? else { return Ok(None) };
        let since = get_s(&item, "since")
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map_or(DateTime::<Utc>::UNIX_EPOCH, |t| t.with_timezone(&Utc));
        Ok(Some(Pause {
            reason: get_s(&item, "reason").unwrap_or_default().to_owned(),
            owner: get_s(&item, "owner").unwrap_or_default().to_owned(),
            since,
        }))
    }

    async fn set_pause(&self, pause: Option<&Pause>, by: &str) -> Result<(), BoxError> {
        let now = Utc::now();
        match pause {
            Some(p) => {
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .item("pk", s(PAUSE_PK))
                    .item("reason", s(&p.reason))
                    .item("owner", s(&p.owner))
                    .item("since", s(p.since.to_rfc3339()))
                    .send()
                    .await?;
            }
            None => {
                self.client.delete_item().table_name(&self.table).key("pk", s(PAUSE_PK)).send().await?;
            }
        }
        // Every change of the switch is kept: who, what, when.
        let action = if pause.is_some() { "pause" } else { "resume" };
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("audit:pause:{}", now.timestamp_millis())))
            .item("action", s(action))
            .item("by", s(by))
            .item("at", s(now.to_rfc3339()));
        if let Some(p) = pause {
            put = put.item("reason", s(&p.reason));
        }
        put.send().await?;
        Ok(())
    }

    async fn put_audit(&self, record: &AuditRecord) -> Result<(), BoxError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("redrive:{}", record.id)))
            .item("record", s(serde_json::to_string(record)?))
            .send()
            .await?;
        Ok(())
    }
}

/// The DLQ and send queue as the redrive uses them.
#[derive(Debug, Clone)]
pub struct SqsDeadLetters {
    queues: SqsQueues,
    /// How long received dead letters stay invisible while a run decides about them.
    pub hold: Duration,
}

impl SqsDeadLetters {
    /// Over `queues` (send queue + DLQ).
    pub fn new(queues: SqsQueues) -> Self {
        Self { queues, hold: Duration::from_secs(900) }
    }
}

impl DeadLetters for SqsDeadLetters {
    async fn receive(&self) -> Result<Vec<DeadLetter>, BoxError> {
        // Invisible while this run decides (released or deleted before it ends).
        let dlq = self.queues.dlq_url();
        let got = self.queues.receive_holding(dlq, 10, Duration::from_secs(1), Some(self.hold)).await?;
        let mut out = Vec::with_capacity(got.len());
        for m in got {
            let get = |k: &str| m.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            out.push(DeadLetter {
                first_enqueued: get(attr::FIRST_ENQUEUED)
                    .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
                    .map(|t| t.with_timezone(&Utc)),
                reason: get(attr::REASON),
                handle: m.receipt_handle,
                message_id: m.message_id,
                body: m.body,
            });
        }
        Ok(out)
    }

    async fn send_back(&self, body: &str) -> Result<(), BoxError> {
        self.queues.client().send_message().queue_url(self.queues.send_url()).message_body(body).send().await?;
        Ok(())
    }

    async fn delete(&self, handle: &str) -> Result<(), BoxError> {
        Ok(self.queues.delete(self.queues.dlq_url(), handle).await?)
    }

    async fn release(&self, handles: &[String]) -> Result<(), BoxError> {
        for h in handles {
            self.queues.change_visibility(self.queues.dlq_url(), h, Duration::ZERO).await?;
        }
        Ok(())
    }
}
