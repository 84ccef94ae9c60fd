//! Gathers what the local pipeline knows of every reminder — the ledger, the DLQ, the send
//! queue's depth, the provider double's counters — and counts it with the core's one
//! accounting (`punctual_core::accounting`), for `run` and `local drain` alike.

use chrono::{DateTime, Utc};
use punctual_aws::sqs::SqsQueues;
use punctual_core::accounting::{DeliveryCounts, Ending, Outcome, Tally};
use punctual_core::ports::LedgerRecord;
use punctual_core::reason::ReminderState;

pub use punctual_ops::dlq::{BACKSTOP, DlqContents, peek_dlq};

/// Everything one count needs.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Every ledger record.
    pub records: Vec<LedgerRecord>,
    /// The DLQ.
    pub dlq: DlqContents,
    /// Messages still on the send queue (visible, in flight, delayed).
    pub on_queue: u64,
    /// Renewals the scheduler expired at release (`missed_schedule_window`), from its tick
    /// reports. Those it recorded in the ledger (the functions' scheduler expires through it)
    /// are counted once, from their records.
    pub expired_at_release: u64,
    /// Provider requests repeating an accepted key.
    pub repeated_key_requests: u64,
    /// Second accepted effects (a provider double that honours keys has none).
    pub double_effects: u64,
}

/// The endings of every reminder the ledger knows (a non-terminal reminder in the DLQ is
/// dead-lettered with its letters' reason), the DLQ letters of reminders the ledger never saw
/// (one reminder each), and the DLQ letters that are copies: every letter of a reminder that
/// ended in another bucket (expired, delivered), and every letter of a reminder beyond its own.
/// Each letter read is in exactly one of these.
pub fn endings(o: &Observed) -> (Vec<Ending>, Vec<String>, Vec<String>) {
    let mut waiting_left = o.on_queue;
    let mut endings = Vec::with_capacity(o.records.len());
    let mut known = std::collections::HashSet::new();
    let mut copies = Vec::new();
    let no_letters: &[String] = &[];
    for rec in &o.records {
        let id = rec.reminder_id.as_str();
        known.insert(id);
        let letters = o.dlq.by_reminder.get(id).map_or(no_letters, Vec::as_slice);
        // The letter that is the reminder itself: a dead-lettered record's (by its reason), or
        // a non-terminal one's (the backstop moved it; it is dead-lettered by its letters).
        let own = match rec.state {
            ReminderState::DeadLettered => {
                let reason = rec.last_reason.map(|r| r.as_str());
                letters.iter().position(|l| Some(l.as_str()) == reason).or((!letters.is_empty()).then_some(0))
            }
            s if !s.is_terminal() => o.dlq.reason_of(id).and_then(|reason| letters.iter().position(|l| l == reason)),
            _ => None,
        };
        copies.extend(letters.iter().enumerate().filter(|(i, _)| Some(*i) != own).map(|(_, l)| l.clone()));
        let dead = (!rec.state.is_terminal()).then(|| own.map(|i| &letters[i])).flatten();
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
    for (id, letters) in o.dlq.by_reminder.iter().filter(|(id, _)| !known.contains(id.as_str())) {
        // A reminder the ledger never saw is one dead-lettered reminder, however many letters.
        let reason = o.dlq.reason_of(id).unwrap_or(BACKSTOP);
        let own = letters.iter().position(|l| l == reason);
        dead.push(reason.to_owned());
        copies.extend(letters.iter().enumerate().filter(|(i, _)| Some(*i) != own).map(|(_, l)| l.clone()));
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
    let recorded = o
        .records
        .iter()
        .filter(|r| {
            r.state == ReminderState::Expired && r.last_reason == Some(punctual_core::ReasonCode::MissedScheduleWindow)
        })
        .count() as u64;
    tally.expired_at_release(o.expired_at_release.saturating_sub(recorded));
    tally.provider(o.repeated_key_requests, o.double_effects);
    let unseen = o.on_queue.saturating_sub(tally.waiting());
    (tally.finish(expected, unseen), endings)
}

/// A run's (or a drain's) own window reconciled as an operator would (`punctual reconcile`):
/// the renewals table's population joined with the ledger and the queues, and the window's
/// deadline SLO. The report keeps the verdict and names at most ten unaccounted reminders.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WindowCheck {
    /// Window start (first `deliver_after`).
    pub from: DateTime<Utc>,
    /// Window end, exclusive.
    pub to: DateTime<Utc>,
    /// Every renewal of the window is in a bucket.
    pub accounted: bool,
    /// Renewals in the window, every status.
    pub population: u64,
    /// The due population (cancelled and paid excluded).
    pub due: u64,
    /// Unaccounted reminders.
    pub unaccounted: u64,
    /// The first of them known by name.
    pub unaccounted_reminders: Vec<punctual_core::reconcile::Unaccounted>,
    /// Released reminders of which `missing_among_suspects` are on no queue (which ones cannot
    /// be told from the queues' counts); the first ten.
    pub suspects: Vec<punctual_core::reconcile::Unaccounted>,
    /// How many of the suspects are missing.
    pub missing_among_suspects: u64,
    /// The window's deadline SLO (`SLO_TARGET`, `SLO_WITHIN_SECS`).
    pub slo: punctual_core::slo::SloSummary,
}

impl WindowCheck {
    /// Two lines for a human: the SLO, then the reconciliation's verdict.
    pub fn render(&self) -> String {
        let verdict = if self.accounted {
            format!("all {} renewals of the window accounted for ({} due)", self.population, self.due)
        } else {
            let ids: Vec<&str> = self.unaccounted_reminders.iter().map(|u| u.reminder_id.as_str()).collect();
            let mut v = format!("{} of {} renewals UNACCOUNTED: {}", self.unaccounted, self.population, ids.join(", "));
            if self.missing_among_suspects > 0 {
                let suspects: Vec<&str> = self.suspects.iter().map(|u| u.reminder_id.as_str()).collect();
                v.push_str(&format!(
                    "; {} missing among these released ones: {}",
                    self.missing_among_suspects,
                    suspects.join(", ")
                ));
            }
            v
        };
        format!("{}\nreconcile         {verdict}\n", self.slo.line())
    }
}

/// Reconciles `[from, to)` on a local pipeline's resources (see [`WindowCheck`]).
pub async fn check_window(
    resources: &punctual_ops::Resources,
    dynamodb_endpoint: Option<String>,
    ddb: aws_sdk_dynamodb::Client,
    queues: &SqsQueues,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<WindowCheck, crate::HarnessError> {
    let policy =
        punctual_ops::reconcile::slo_policy().map_err(crate::step("reading SLO_TARGET and SLO_WITHIN_SECS"))?;
    let target = punctual_ops::Target { resources: resources.clone(), dynamodb_endpoint, quota: 1.0 };
    let window = punctual_ops::reconcile::Window {
        from,
        to,
        tenant: None,
        channel: None,
        grace: punctual_core::reconcile::DEFAULT_GRACE,
    };
    let (r, _) = punctual_ops::reconcile::reconcile_with(&target, ddb, queues, &window, &policy, false, true)
        .await
        .map_err(crate::step("reconciling the window"))?;
    let (mut named, mut suspects) = (r.unaccounted_reminders, r.suspects);
    named.truncate(10);
    suspects.truncate(10);
    Ok(WindowCheck {
        suspects,
        missing_among_suspects: r.missing_among_suspects,
        from,
        to,
        accounted: r.accounted,
        population: r.population,
        due: r.due,
        unaccounted: r.unaccounted,
        unaccounted_reminders: named,
        slo: r.slo,
    })
}

#[cfg(test)]
mod tests {
    use chrono::{TimeDelta, Utc};
    use punctual_core::ReasonCode;
    use punctual_core::ids::ReminderId;

    use super::*;

    fn record(n: u32, state: ReminderState, reason: Option<ReasonCode>) -> LedgerRecord {
        let (now, id) = (Utc::now(), ReminderId::parse(format!("rem_{n:032x}")).unwrap_or_else(|e| panic!("{e}")));
        LedgerRecord {
            attempts: 1,
            last_reason: reason,
            deliver_after: Some(now - TimeDelta::minutes(10)),
            ..LedgerRecord::new(id, state, now + TimeDelta::hours(1))
        }
    }

    /// Every letter read is counted, once: a reminder with two letters has one of its own and a
    /// copy, and conservation counts the reminder once.
    #[test]
    fn every_letter_is_counted_and_every_reminder_once() {
        let dead = record(1, ReminderState::DeadLettered, Some(ReasonCode::AttemptLimit));
        let moved = record(2, ReminderState::Deferred, Some(ReasonCode::RateLimited));
        let expired = record(3, ReminderState::Expired, Some(ReasonCode::BusinessDeadlineExpired));
        let letters = |v: &[&str]| v.iter().map(|r| (*r).to_owned()).collect::<Vec<_>>();
        let mut dlq = DlqContents::default();
        dlq.by_reminder.insert(dead.reminder_id.to_string(), letters(&[BACKSTOP, "attempt_limit"]));
        dlq.by_reminder.insert(moved.reminder_id.to_string(), letters(&[BACKSTOP, "attempt_limit"]));
        dlq.by_reminder.insert(expired.reminder_id.to_string(), letters(&["business_deadline_expired"]));
        dlq.by_reminder.insert(format!("rem_{:032x}", 9), letters(&[BACKSTOP, BACKSTOP]));
        dlq.anonymous.push("malformed".into());
        let o = Observed { records: vec![dead, moved, expired], dlq, ..Observed::default() };
        let (counts, endings) = count(&o, Utc::now(), Some(5));
        assert_eq!(counts.dead_lettered.values().sum::<u64>(), 8, "every letter: {counts:?}");
        assert_eq!((counts.lost, counts.expired), (0, 1), "{counts:?}");
        assert_eq!(
            endings[1].outcome,
            Outcome::DeadLettered { reason: "attempt_limit".into() },
            "a non-terminal reminder with letters takes the sender's reason, not the backstop's"
        );
    }
}
