//! Gathers what the local pipeline knows of every reminder — the ledger, the DLQ, the send
//! queue's depth, the provider double's counters — and counts it with the core's one
//! accounting (`punctual_core::accounting`), for `run` and `local drain` alike.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use punctual_aws::sqs::{SqsQueues, attr};
use punctual_core::accounting::{DeliveryCounts, Ending, Outcome, Tally};
use punctual_core::ports::{LedgerRecord, QueueError};

/// What the DLQ holds, read without hiding it.
#[derive(Debug, Default, Clone)]
pub struct DlqContents {
    /// Reminder id → DLQ reason, for messages that name their reminder.
    pub by_reminder: HashMap<String, String>,
    /// Reasons of messages that name no reminder (malformed bodies).
    pub anonymous: Vec<String>,
}

/// DLQ messages without a `reason` attribute were moved by the queue's `maxReceiveCount`.
pub const BACKSTOP: &str = "receive_count_backstop";

/// Reads up to `limit` DLQ messages without hiding them (`SqsQueues::peek`).
pub async fn peek_dlq(queues: &SqsQueues, limit: usize) -> Result<DlqContents, QueueError> {
    let mut out = DlqContents::default();
    for m in queues.peek(queues.dlq_url(), limit, |_| false).await? {
        let get = |k: &str| m.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let reason = get(attr::REASON).unwrap_or_else(|| BACKSTOP.to_owned());
        match get(attr::REMINDER_ID) {
            Some(id) => {
                out.by_reminder.insert(id, reason);
            }
            // Moved by the backstop: no attributes, but the body names the reminder.
            None => match punctual_core::ReminderMessage::decode(&m.body) {
                Ok(msg) => {
                    out.by_reminder.insert(msg.reminder_id.to_string(), reason);
                }
                Err(_) => out.anonymous.push(reason),
            },
        }
    }
    Ok(out)
}

/// Everything one count needs.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Every ledger record.
    pub records: Vec<LedgerRecord>,
    /// The DLQ.
    pub dlq: DlqContents,
    /// Messages still on the send queue (visible, in flight, delayed).
    pub on_queue: u64,
    /// Renewals the scheduler expired at release (`missed_schedule_window`).
    pub expired_at_release: u64,
    /// Provider requests repeating an accepted key.
    pub repeated_key_requests: u64,
    /// Second accepted effects (a provider double that honours keys has none).
    pub double_effects: u64,
}

/// The endings of every reminder the ledger knows (a non-terminal reminder in the DLQ is
/// dead-lettered with the DLQ's reason), the DLQ messages of reminders the ledger never saw,
/// and the DLQ copies of reminders that ended in another bucket (expired).
pub fn endings(o: &Observed) -> (Vec<Ending>, Vec<String>, Vec<String>) {
    let mut waiting_left = o.on_queue;
    let mut endings = Vec::with_capacity(o.records.len());
    let mut known = std::collections::HashSet::new();
    let mut copies = Vec::new();
    for rec in &o.records {
        known.insert(rec.reminder_id.to_string());
        if rec.state.is_terminal()
            && let Some(reason) = o.dlq.by_reminder.get(rec.reminder_id.as_str())
        {
            // An expired (or already dead-lettered) reminder's DLQ message.
            copies.push(reason.clone());
        }
        // A non-terminal reminder with a DLQ letter is dead-lettered (the backstop moved it);
        // only the rest may take one of the copies still on the queue.
        let dead = (!rec.state.is_terminal()).then(|| o.dlq.by_reminder.get(rec.reminder_id.as_str())).flatten();
        let mut e = Ending::from_record(rec, dead.is_none() && waiting_left > 0);
        if e.outcome == Outcome::Waiting {
            waiting_left -= 1;
        }
        if let Some(reason) = dead {
            e.outcome = Outcome::DeadLettered { reason: reason.clone() };
        }
        endings.push(e);
    }
    let mut dead: Vec<String> = o.dlq.anonymous.clone();
    dead.extend(o.dlq.by_reminder.iter().filter(|(id, _)| !known.contains(*id)).map(|(_, r)| r.clone()));
    // A dead-lettered record's own DLQ message is the reminder itself, not a copy.
    let own: Vec<String> = o
        .records
        .iter()
        .filter(|r| r.state == punctual_core::reason::ReminderState::DeadLettered)
        .filter_map(|r| o.dlq.by_reminder.get(r.reminder_id.as_str()).cloned())
        .collect();
    for reason in own {
        if let Some(i) = copies.iter().position(|c| *c == reason) {
            copies.swap_remove(i);
        }
    }
    (endings, dead, copies)
}

/// The one accounting over what the local pipeline observed. `expected`: reminders the run
/// released (those never seen anywhere count as lost).
pub fn count(o: &Observed, as_of: DateTime<Utc>, expected: Option<u64>) -> (DeliveryCounts, Vec<Ending>) {
    let (endings, dead, copies) = endings(o);
    let mut tally = Tally::new(as_of);
    endings.iter().for_each(|e| tally.reminder(e));
    dead.iter().for_each(|r| tally.dead_letter(r));
    copies.iter().for_each(|r| tally.dlq_copy(r));
    tally.expired_at_release(o.expired_at_release);
    tally.provider(o.repeated_key_requests, o.double_effects);
    let unseen = o.on_queue.saturating_sub(tally.waiting());
    (tally.finish(expected, unseen), endings)
}
