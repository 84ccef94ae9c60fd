//! The ingest function's one composition root and its service: the Lambda's `main.rs`, the
//! local harness (`punctual local drain`, `bench-ingest`) and the tests call [`build`], so every
//! command goes through the same wiring.
//!
//! A batch of commands is applied in four steps:
//! 1. each body is decoded and checked with the rules `punctual import` applies to a row
//!    ([`RenewalCommand::read`]); what fails is a rejection;
//! 2. the renewals are written by the import's own conditional write
//!    ([`DynamoRenewals::write_import`]), without the import's read first
//!    ([`ImportRead::unread`]): each is tried as a new renewal, and a refusal hands back the
//!    stored item, against which the import's planner decides again. A campaign of new
//!    renewals costs one write each and no read; a change of a stored one, a refused write
//!    and the real one. The planner applies the producer's version order: an equal or older
//!    version is `stale` and writes nothing; several versions of one renewal in one batch are
//!    written one after the other, oldest first;
//! 3. the addresses of the commands applied (or replayed) are written to the recipients table,
//!    one per tenant's `recipient_ref` (step 3 below says why after, not before);
//! 4. every rejection (malformed, invalid, or refused by the import rules) is sent to the
//!    commands DLQ, its `data` redacted, with `reason` and `error_class` attributes.
//!
//! A command whose step failed on infrastructure (a table or the DLQ unreachable) is an `Err`:
//! the handler reports it as a batch item failure and SQS delivers it again; its version makes
//! the retry safe (what was written is then stale).

use std::collections::HashMap;

use aws_sdk_dynamodb::Client as DynamoClient;
use aws_sdk_sqs::Client as SqsClient;
use chrono::{DateTime, Utc};
use punctual_aws::recipients::{DynamoRecipients, Entry};
use punctual_aws::renewals::{DynamoRenewals, ImportRead, RowOutcome};
use punctual_aws::sqs::{EntryResult, Letter, send_letters};
use punctual_core::command::{CommandError, RenewalCommand, redacted_body};

use crate::config::IngestConfig;

/// The ingest service as production composes it.
#[derive(Debug, Clone)]
pub struct Ingest {
    renewals: DynamoRenewals,
    recipients: Option<DynamoRecipients>,
    sqs: SqsClient,
    dlq_url: String,
    channels: Vec<String>,
}

/// Builds the ingest service.
pub fn build(config: &IngestConfig, dynamodb: &DynamoClient, sqs: &SqsClient) -> Ingest {
    Ingest {
        renewals: DynamoRenewals::new(dynamodb.clone(), &config.renewals_table),
        recipients: config.recipients_table.as_deref().map(|t| DynamoRecipients::new(dynamodb.clone(), t)),
        sqs: sqs.clone(),
        dlq_url: config.commands_dlq_url.clone(),
        channels: config.channels.clone(),
    }
}

/// One received command: the message id (the DLQ letter keeps it as `source_message_id`) and
/// the body, as the sender receives its messages.
pub use punctual_core::sender::Received;

/// What became of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Written: the import's outcome (inserted, updated, rescheduled, reactivated; unchanged
    /// for a newer version of identical content, whose version alone was recorded).
    Applied {
        /// Tenant and renewal.
        renewal: (String, String),
        /// The version applied.
        version: u64,
        /// What the write did.
        outcome: RowOutcome,
    },
    /// Its version is not newer than the stored one: acknowledged, nothing written.
    Stale {
        /// Tenant and renewal.
        renewal: (String, String),
        /// The command's version.
        version: u64,
        /// The stored one.
        stored: u64,
    },
    /// Sent to the commands DLQ with its reason.
    Rejected {
        /// `malformed`, `invalid` or `refused`.
        class: &'static str,
        /// What is wrong (the DLQ's `reason` attribute).
        reason: String,
    },
}

/// A command that could not be settled now; SQS delivers it again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {source_text}")]
pub struct IngestError {
    /// The step that failed.
    pub what: &'static str,
    /// Why (the source error's text; never the body).
    pub source_text: String,
}

fn failed(what: &'static str, e: &dyn std::error::Error) -> IngestError {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    IngestError { what, source_text: text }
}

impl Ingest {
    /// Applies a batch of commands; one result per command, in order.
    pub async fn apply(&self, commands: &[Received<'_>], now: DateTime<Utc>) -> Vec<Result<Applied, IngestError>> {
        let mut results: Vec<Option<Result<Applied, IngestError>>> = vec![None; commands.len()];
        // 1. decode and check.
        let mut valid = Vec::new();
        for (i, c) in commands.iter().enumerate() {
            match RenewalCommand::read(c.body, &self.channels) {
                Ok((_, row)) if row.address.is_some() && self.recipients.is_none() => {
                    results[i] = Some(Ok(Applied::Rejected {
                        class: "invalid",
                        reason: "email: this deployment has no recipients table (RECIPIENTS_TABLE), so no address can be kept; send the command without email".into(),
                    }));
                }
                Ok((command, row)) => valid.push((i, command, row)),
                Err(e) => results[i] = Some(Ok(rejected(&e))),
            }
        }
        // 2. the renewals, through the import's conditional write.
        let rows: Vec<_> = valid.iter().map(|(_, _, row)| row.renewal.clone()).collect();
        // 3. (gathered here, written below) the addresses of what was applied, after the
        // renewal and never for a stale or refused command (found by review: an address written
        // first for every command let a late older command put back an old address): applied,
        // or a replay of the applied version (its address write may have failed the first
        // time). One per tenant's `recipient_ref`, the highest version's (BatchWriteItem
        // refuses two writes of one key). The cost: a renewal due at once could be released in
        // the milliseconds before its address is in; its sender then finds no address
        // (`recipient_unknown`). A failed write fails its commands for redelivery; their replay
        // is stale and writes the address then.
        let mut book: HashMap<(String, String), (u64, usize, Entry)> = HashMap::new();
        if !rows.is_empty() {
            match self.renewals.write_import(&rows, ImportRead::unread(), now).await {
                Ok(outcomes) => {
                    for ((i, command, row), outcome) in valid.iter().zip(outcomes) {
                        let renewal = (row.renewal.tenant_id.to_string(), row.renewal.renewal_id.to_string());
                        let applied = match &outcome {
                            RowOutcome::Stale { stored } => *stored == command.version,
                            RowOutcome::Conflict(_) => false,
                            _ => true,
                        };
                        if let (true, Some(address)) = (applied, &row.address) {
                            let key = (row.renewal.tenant_id.to_string(), row.renewal.recipient_ref.clone());
                            if book.get(&key).is_none_or(|(v, _, _)| *v < command.version) {
                                let entry =
                                    (row.renewal.tenant_id.clone(), row.renewal.recipient_ref.clone(), address.clone());
                                book.insert(key, (command.version, *i, entry));
                            }
                        }
                        results[*i] = Some(Ok(match outcome {
                            RowOutcome::Stale { stored } => {
                                Applied::Stale { renewal, version: command.version, stored }
                            }
                            RowOutcome::Conflict(reason) => Applied::Rejected { class: "refused", reason: cut(reason) },
                            outcome => Applied::Applied { renewal, version: command.version, outcome },
                        }));
                    }
                }
                Err(e) => {
                    let err = failed("writing the renewals table", &e);
                    for (i, _, _) in &valid {
                        results[*i] = Some(Err(err.clone()));
                    }
                }
            }
        }
        // 3. the addresses gathered above.
        if let (Some(recipients), false) = (&self.recipients, book.is_empty()) {
            let entries: Vec<Entry> = book.values().map(|(_, _, e)| e.clone()).collect();
            if let Err(e) = recipients.put_all(&entries, now.timestamp_millis()).await {
                let err = failed("writing the recipients table", &e);
                for (_, i, _) in book.values() {
                    results[*i] = Some(Err(err.clone()));
                }
            }
        }
        // 4. the rejections, to the commands DLQ.
        let letters: Vec<(usize, Letter)> = results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(Ok(Applied::Rejected { class, reason })) => Some((
                    i,
                    Letter {
                        id: format!("c{i}"),
                        body: redacted_body(commands[i].body),
                        attributes: vec![
                            ("reason", reason.clone()),
                            ("error_class", (*class).to_owned()),
                            ("source_message_id", commands[i].message_id.to_owned()),
                        ],
                    },
                )),
                _ => None,
            })
            .collect();
        if !letters.is_empty() {
            let batch: Vec<Letter> = letters.iter().map(|(_, l)| l.clone()).collect();
            match send_letters(&self.sqs, &self.dlq_url, &batch).await {
                Ok(sent) => {
                    for ((i, _), entry) in letters.iter().zip(sent) {
                        if let EntryResult::Failed { code, message, .. } = entry {
                            results[*i] = Some(Err(IngestError {
                                what: "sending to the commands DLQ",
                                source_text: format!("{code}: {message}"),
                            }));
                        }
                    }
                }
                Err(e) => {
                    let err = failed("sending to the commands DLQ", &e);
                    for (i, _) in &letters {
                        results[*i] = Some(Err(err.clone()));
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(IngestError { what: "applying", source_text: "no outcome".into() })))
            .collect()
    }
}

fn rejected(e: &CommandError) -> Applied {
    Applied::Rejected { class: e.class(), reason: cut(e.to_string()) }
}

/// A reason as the letter's attribute and the log carry it: at most 256 characters (a bad
/// value is echoed in it, and a producer's value may be long).
fn cut(mut reason: String) -> String {
    if let Some((at, _)) = reason.char_indices().nth(256) {
        reason.truncate(at);
        reason.push('…');
    }
    reason
}
