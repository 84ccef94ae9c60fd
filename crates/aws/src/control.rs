//! The operator's controls on AWS: the pause switch and redrive audit records in the ledger
//! table (`pk = control:pause`, a channel's `control:pause#{channel}`, `audit:pause:{ms}`, `redrive:{id}`), and the DLQ as the
//! redrive sees it (SQS). One strongly consistent `GetItem` reads the switch; the sender caches
//! it for a few seconds (docs/design.md#the-pause-switch).

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use chrono::{DateTime, Utc};
use punctual_core::lanes::QueueLane;
use punctual_core::ports::{BoxError, Control, ControlError, DeadLetter, DeadLetters, DeadLettersError, Pause};
use punctual_core::redrive::AuditRecord;
use punctual_core::{ReasonCode, ReminderMessage};

use crate::dynamodb::{self, DynamoError, get_s, s};
use crate::sqs::{SqsQueues, attr};

/// A service's error answer changed nothing; a timeout or a lost connection may have.
fn sdk_refused<E, R>(e: &SdkError<E, R>) -> bool {
    matches!(e, SdkError::ServiceError(_) | SdkError::ConstructionFailure(_))
}

fn control_sdk<E, R>(e: SdkError<E, R>) -> ControlError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    if sdk_refused(&e) { ControlError::Refused(Box::new(e)) } else { ControlError::Unknown(Box::new(e)) }
}

fn control_ddb(e: DynamoError) -> ControlError {
    match e {
        DynamoError::TableNotFound(_) | DynamoError::Throttled(_) => ControlError::Refused(Box::new(e)),
        DynamoError::Unknown(_) => ControlError::Unknown(Box::new(e)),
    }
}

fn dlq_sdk<E, R>(e: SdkError<E, R>) -> DeadLettersError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    if sdk_refused(&e) { DeadLettersError::Refused(Box::new(e)) } else { DeadLettersError::Unknown(Box::new(e)) }
}

fn dlq_queue(e: punctual_core::ports::QueueError) -> DeadLettersError {
    DeadLettersError::Unknown(Box::new(e))
}

/// Pause switch and audit records in the ledger table.
#[derive(Debug, Clone)]
pub struct DynamoControl {
    client: Client,
    table: String,
    /// The switch's key: the fleet's `control:pause`, or a channel's `control:pause#{channel}`.
    pk: String,
    /// The channel whose switch this is (`None`: the fleet's).
    channel: Option<String>,
}

const PAUSE_PK: &str = "control:pause";

/// The key of `channel`'s own pause switch (`None`: the fleet's).
pub fn pause_key(channel: Option<&str>) -> String {
    channel.map_or_else(|| PAUSE_PK.to_owned(), |c| format!("{PAUSE_PK}#{c}"))
}

impl DynamoControl {
    /// Controls kept in `table` (the ledger table), with the fleet's pause switch.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into(), pk: pause_key(None), channel: None }
    }

    /// The same controls with `channel`'s own pause switch (`control:pause#{channel}`): a
    /// declared channel's pause stops that channel only (docs/design.md#channels).
    pub fn for_channel(client: Client, table: impl Into<String>, channel: &str) -> Self {
        Self { client, table: table.into(), pk: pause_key(Some(channel)), channel: Some(channel.to_owned()) }
    }

    /// Reads a redrive audit record's JSON.
    pub async fn audit(&self, id: &str) -> Result<Option<serde_json::Value>, BoxError> {
        let item = dynamodb::get(&self.client, &self.table, &format!("redrive:{id}")).await?;
        Ok(item.as_ref().and_then(|i| get_s(i, "record")).and_then(|r| serde_json::from_str(r).ok()))
    }
}

/// The pause a `control:pause` item records.
fn pause_of(item: &dynamodb::Item) -> Pause {
    let since = get_s(item, "since")
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map_or(DateTime::<Utc>::UNIX_EPOCH, |t| t.with_timezone(&Utc));
    Pause {
        reason: get_s(item, "reason").unwrap_or_default().to_owned(),
        owner: get_s(item, "owner").unwrap_or_default().to_owned(),
        since,
    }
}

impl DynamoControl {
    /// Appends the audit record of a change of the switch: who, what, when.
    async fn audit_pause(&self, pause: Option<&Pause>, by: &str, now: DateTime<Utc>) -> Result<(), ControlError> {
        let action = if pause.is_some() { "pause" } else { "resume" };
        // A channel's audit key names it: two switches changed in one millisecond keep both.
        let channel = self.channel.as_ref().map_or_else(String::new, |c| format!("#{c}"));
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("audit:pause:{}{channel}", now.timestamp_millis())))
            .item("action", s(action))
            .item("by", s(by))
            .item("at", s(now.to_rfc3339()));
        if let Some(c) = &self.channel {
            put = put.item("channel", s(c));
        }
        if let Some(p) = pause {
            put = put.item("reason", s(&p.reason));
        }
        put.send().await.map_err(control_sdk)?;
        Ok(())
    }
}

impl Control for DynamoControl {
    async fn pause(&self) -> Result<Option<Pause>, ControlError> {
        let item = dynamodb::get(&self.client, &self.table, &self.pk).await.map_err(control_ddb)?;
        Ok(item.as_ref().map(pause_of))
    }

    async fn pause_unless_paused(&self, p: &Pause, by: &str) -> Result<Option<Pause>, ControlError> {
        let item: dynamodb::Item = [
            ("pk".to_owned(), s(&self.pk)),
            ("reason".to_owned(), s(&p.reason)),
            ("owner".to_owned(), s(&p.owner)),
            ("since".to_owned(), s(p.since.to_rfc3339())),
        ]
        .into_iter()
        .collect();
        match dynamodb::put_if(&self.client, &self.table, item, "attribute_not_exists(pk)", None, None)
            .await
            .map_err(control_ddb)?
        {
            dynamodb::ConditionalPut::Written => {
                self.audit_pause(Some(p), by, Utc::now()).await?;
                Ok(None)
            }
            // Lifted between the refusal and the read: report it as the pause it was (the
            // caller may try again).
            dynamodb::ConditionalPut::ConditionFailed { existing } => Ok(Some(existing.as_ref().map_or_else(
                || Pause { reason: "lifted meanwhile".into(), owner: String::new(), since: Utc::now() },
                pause_of,
            ))),
        }
    }

    async fn set_pause(&self, pause: Option<&Pause>, by: &str) -> Result<(), ControlError> {
        let now = Utc::now();
        match pause {
            Some(p) => {
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .item("pk", s(&self.pk))
                    .item("reason", s(&p.reason))
                    .item("owner", s(&p.owner))
                    .item("since", s(p.since.to_rfc3339()))
                    .send()
                    .await
                    .map_err(control_sdk)?;
            }
            None => {
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .key("pk", s(&self.pk))
                    .send()
                    .await
                    .map_err(control_sdk)?;
            }
        }
        // Every change of the switch is kept: who, what, when.
        self.audit_pause(pause, by, now).await
    }

    async fn put_audit(&self, record: &AuditRecord) -> Result<(), ControlError> {
        let json = serde_json::to_string(record).map_err(|e| ControlError::Refused(Box::new(e)))?;
        self.client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("redrive:{}", record.id)))
            .item("record", s(json))
            .send()
            .await
            .map_err(control_sdk)?;
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
    async fn receive(&self, hold: Duration) -> Result<Vec<DeadLetter>, DeadLettersError> {
        // Invisible while this run decides (released or deleted before it ends).
        let dlq = self.queues.dlq_url();
        let got = self
            .queues
            .receive_holding(dlq, 10, Duration::from_secs(1), Some(hold.min(self.hold)))
            .await
            .map_err(dlq_queue)?;
        let mut out = Vec::with_capacity(got.len());
        for m in got {
            let get = |k: &str| m.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            // A message SQS moved itself (maxReceiveCount: the crash backstop) carries none of
            // the sender's quarantine attributes: it is `receive_count_backstop`, and its age
            // is the body's `first_enqueued`, so reason and age selections still find it.
            let first_enqueued = get(attr::FIRST_ENQUEUED)
                .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
                .map(|t| t.with_timezone(&Utc))
                .or_else(|| ReminderMessage::decode(&m.body).ok().map(|b| b.first_enqueued));
            out.push(DeadLetter {
                first_enqueued,
                reason: get(attr::REASON).or_else(|| Some(ReasonCode::ReceiveCountBackstop.as_str().to_owned())),
                handle: m.receipt_handle,
                message_id: m.message_id,
                body: m.body,
            });
        }
        Ok(out)
    }

    async fn send_back(&self, body: &str, lane: QueueLane) -> Result<(), DeadLettersError> {
        // The tenant is the fair-queue group, as on every send to a send queue (the redriver
        // sends only bodies it decoded; an undecodable one goes without a group).
        let msg = punctual_core::contract::ReminderMessage::decode(body).ok();
        let group = msg.as_ref().map(|m| m.tenant_id.to_string());
        // A channel's letter goes back to its channel's own queue when it has one.
        let url = msg.as_ref().map_or_else(|| self.queues.lane_url(lane), |m| self.queues.url_for(m, lane));
        self.queues
            .client()
            .send_message()
            .queue_url(url)
            .message_body(body)
            .set_message_group_id(group)
            .send()
            .await
            .map_err(dlq_sdk)?;
        Ok(())
    }

    async fn delete(&self, handle: &str) -> Result<(), DeadLettersError> {
        self.queues.delete(self.queues.dlq_url(), handle).await.map_err(dlq_queue)
    }

    async fn release(&self, handles: &[String]) -> Result<(), DeadLettersError> {
        // Ten per call: a run holding a few hundred letters releases them in seconds, inside
        // the margin it keeps before its deadline (one call each could outrun it).
        let refused = self.queues.release_batch(self.queues.dlq_url(), handles).await.map_err(dlq_queue)?;
        if refused > 0 {
            tracing::warn!(refused, "some DLQ letters could not be made visible now; they return after their hold");
        }
        Ok(())
    }
}
