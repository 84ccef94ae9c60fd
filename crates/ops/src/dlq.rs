//! Reading the DLQ without taking from it: `local drain`, `run` and `reconcile` count what
//! it holds by reminder (a dead-lettered reminder's message names it in an attribute; one the
//! queue's `maxReceiveCount` backstop moved has no attributes, but its body names it).

use std::collections::HashMap;

use punctual_aws::sqs::{SqsQueues, attr};
use punctual_core::ports::QueueError;

/// What the DLQ holds, read without hiding it: every letter, also when one reminder has
/// several (a sender's quarantine and the backstop's copy, a late copy's expiry).
#[derive(Debug, Default, Clone)]
pub struct DlqContents {
    /// Reminder id → the reason of each of its letters, for messages that name their reminder.
    pub by_reminder: HashMap<String, Vec<String>>,
    /// Reasons of messages that name no reminder (malformed bodies).
    pub anonymous: Vec<String>,
}

impl DlqContents {
    /// Letters read.
    pub fn letters(&self) -> usize {
        self.by_reminder.values().map(Vec::len).sum::<usize>() + self.anonymous.len()
    }

    /// The reason a reminder's letters give it: a sender's (it says why) before the backstop's,
    /// which only says the sender never decided; `None` when it has no letter.
    pub fn reason_of(&self, reminder: &str) -> Option<&str> {
        let letters = self.by_reminder.get(reminder)?;
        letters.iter().find(|r| *r != BACKSTOP).or(letters.first()).map(String::as_str)
    }
}

/// DLQ messages without a `reason` attribute were moved by the queue's `maxReceiveCount`.
pub const BACKSTOP: &str = "receive_count_backstop";

/// The reminder a DLQ message names (its attribute, or for a letter the backstop moved, its
/// body) and its reason.
fn letter(m: &punctual_aws::sqs::Received) -> (Option<String>, String) {
    let get = |k: &str| m.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let reason = get(attr::REASON).unwrap_or_else(|| BACKSTOP.to_owned());
    // Moved by the backstop: no attributes, but the body names the reminder.
    let reminder = get(attr::REMINDER_ID)
        .or_else(|| punctual_core::ReminderMessage::decode(&m.body).ok().map(|msg| msg.reminder_id.to_string()));
    (reminder, reason)
}

/// Reads up to `limit` DLQ messages without hiding them (`SqsQueues::peek`).
pub async fn peek_dlq(queues: &SqsQueues, limit: usize) -> Result<DlqContents, QueueError> {
    let mut out = DlqContents::default();
    for m in queues.peek(queues.dlq_url(), limit, |_| false).await? {
        match letter(&m) {
            (Some(id), reason) => out.by_reminder.entry(id).or_default().push(reason),
            (None, reason) => out.anonymous.push(reason),
        }
    }
    Ok(out)
}

/// The reason of `reminder`'s letter in the DLQ, if one of the first `limit` messages is it:
/// read without hiding anything, stopping at that letter.
pub async fn letter_of(queues: &SqsQueues, reminder: &str, limit: usize) -> Result<Option<String>, QueueError> {
    let is_it = |m: &punctual_aws::sqs::Received| letter(m).0.as_deref() == Some(reminder);
    let read = queues.peek(queues.dlq_url(), limit, is_it).await?;
    Ok(read.iter().find(|m| is_it(m)).map(|m| letter(m).1))
}
