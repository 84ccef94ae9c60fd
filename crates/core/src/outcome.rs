//! Outcome events (docs/integration.md#consuming-outcomes): what became of each reminder, told
//! to the producing application at least once, none lost.
//!
//! **The outbox.** The ledger's own record of a reminder is the outbox: the write that ends a
//! reminder (delivered, expired, cancelled, dead-lettered) appends the event to the record in
//! the same conditional write, and a redrive appends `redriven`. A publisher ([`Publisher`])
//! sweeps the records that hold events, publishes them, and clears what it published. A crash
//! between the ledger's commit and the publish loses nothing: the event is in the record until
//! a sweep publishes it. Why a sweep of the ledger and not DynamoDB Streams:
//! docs/design.md#outcome-events.
//!
//! **Identity.** `event_id` is derived, never random: `evt_` + 32 hex digits of SHA-256 over
//! `punctual/outcome/v1`, the reminder id, the outcome, the redrive id (empty outside one) and
//! the copy's `first_enqueued`, each followed by a NUL byte. A settle written again after an
//! indeterminate failure, a second sweep of an event whose clear failed, and a redelivered
//! copy all give the same id: consumers deduplicate on it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::contract::{ReminderMessage, format_instant};
use crate::ports::Settlement;
use crate::reason::{ReasonCode, ReminderState};

/// The event's `source`.
pub const SOURCE: &str = "punctual";
/// The event's `detail-type`.
pub const DETAIL_TYPE: &str = "punctual.outcome";
/// The detail's contract version.
pub const OUTCOME_VERSION: u64 = 1;

/// What became of a reminder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The provider accepted it.
    Delivered,
    /// Its deadline passed before it could be sent.
    Expired,
    /// The renewal was cancelled, paid or moved before the call.
    Cancelled,
    /// Quarantined to the DLQ for an operator.
    DeadLettered,
    /// An operator's redrive sent it back from the DLQ.
    Redriven,
}

impl Outcome {
    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
            Self::DeadLettered => "dead_lettered",
            Self::Redriven => "redriven",
        }
    }

    /// The outcome a ledger state ends a reminder with (`None`: not an end).
    pub const fn of_state(state: ReminderState) -> Option<Self> {
        match state {
            ReminderState::Delivered => Some(Self::Delivered),
            ReminderState::Expired => Some(Self::Expired),
            ReminderState::Cancelled => Some(Self::Cancelled),
            ReminderState::DeadLettered => Some(Self::DeadLettered),
            _ => None,
        }
    }
}

/// One outcome event's `detail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeEvent {
    /// [`OUTCOME_VERSION`].
    pub v: u64,
    /// Stable per reminder and outcome (see the module docs).
    pub event_id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Renewal.
    pub renewal_id: String,
    /// Reminder.
    pub reminder_id: String,
    /// Reminder kind.
    pub kind: String,
    /// The renewal's channel as released (absent from copies released before channels).
    pub channel: Option<String>,
    /// What became of it.
    pub outcome: Outcome,
    /// When (RFC 3339, UTC, milliseconds).
    pub at: String,
    /// The copy's window.
    pub deliver_after: String,
    /// The copy's window.
    pub deliver_by: String,
    /// Provider attempts made.
    pub attempts: u32,
    /// Why (the closed reason set; `None` for a delivery).
    pub reason: Option<String>,
    /// Carried from the release.
    pub correlation_id: String,
    /// The redrive this copy belongs to, if any.
    pub redrive_id: Option<String>,
}

/// The id of `outcome` of the copy `msg` (see the module docs).
pub fn event_id(msg: &ReminderMessage, outcome: Outcome) -> String {
    let mut h = Sha256::new();
    for part in [
        "punctual/outcome/v1",
        msg.reminder_id.as_str(),
        outcome.as_str(),
        msg.redrive.as_ref().map_or("", |r| r.id.as_str()),
        &msg.first_enqueued.timestamp_millis().to_string(),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let hex: String = h.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("evt_{hex}")
}

impl OutcomeEvent {
    /// The event of `msg` ending with `outcome` at `at`.
    pub fn new(
        msg: &ReminderMessage,
        outcome: Outcome,
        at: DateTime<Utc>,
        attempts: u32,
        reason: Option<ReasonCode>,
    ) -> Self {
        Self {
            v: OUTCOME_VERSION,
            event_id: event_id(msg, outcome),
            tenant_id: msg.tenant_id.to_string(),
            renewal_id: msg.renewal_id.to_string(),
            reminder_id: msg.reminder_id.to_string(),
            kind: msg.kind.to_string(),
            channel: msg.channel.clone(),
            outcome,
            at: format_instant(at),
            deliver_after: format_instant(msg.deliver_after),
            deliver_by: format_instant(msg.deliver_by),
            attempts,
            reason: reason.map(|r| r.as_str().to_owned()),
            correlation_id: msg.correlation_id.to_string(),
            redrive_id: msg.redrive.as_ref().map(|r| r.id.to_string()),
        }
    }

    /// The event a settlement writes, when it ends the reminder (`None` for a deferral or a
    /// lease).
    pub fn of_settlement(msg: &ReminderMessage, x: &Settlement, at: DateTime<Utc>) -> Option<Self> {
        Outcome::of_state(x.state).map(|o| Self::new(msg, o, at, x.attempts, x.reason))
    }

    /// The detail as JSON text (what the outbox stores and EventBridge carries).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A detail read back from the outbox.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The whole EventBridge event, as a rule's SQS target delivers it (the local stand-in for
    /// the bus: `punctual local`'s outcomes queue).
    pub fn envelope(&self, bus: &str) -> serde_json::Value {
        serde_json::json!({
            "version": "0",
            "id": self.event_id,
            "detail-type": DETAIL_TYPE,
            "source": SOURCE,
            "account": "000000000000",
            "time": self.at.get(..19).map(|t| format!("{t}Z")).unwrap_or_default(),
            "region": "us-east-1",
            "resources": [format!("arn:aws:events:us-east-1:000000000000:event-bus/{bus}")],
            "detail": self,
        })
    }
}

/// Records one round of a sweep reads.
pub const SWEEP_PAGE: usize = 100;

/// Clears a sweep has in flight at once.
pub const CLEARS_IN_FLIGHT: usize = 16;

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SweepReport {
    /// Records read holding events.
    pub records: u64,
    /// Events the sink accepted.
    pub published: u64,
    /// Events the sink refused or could not take (they stay in the outbox).
    pub failed: u64,
    /// Records cleared after all their events were published.
    pub cleared: u64,
    /// Records an event was added to meanwhile (swept again next time, whole).
    pub changed: u64,
    /// Stored events that could not be read (left in the outbox, reported).
    pub unreadable: u64,
    /// Clears that failed as machinery (their records are swept again).
    pub clear_failed: u64,
    /// The sweep could not read the outbox at all (nothing else in the report is known).
    pub sweep_failed: bool,
    /// The oldest event's age when the sweep began, in seconds (0 with none).
    pub oldest_age_seconds: f64,
    /// Records still holding events when the sweep stopped (its round or time budget was
    /// spent, or their events failed).
    pub left: u64,
}

/// The publisher: drains the outbox into the sink, clearing only what the sink accepted.
#[derive(Debug, Clone)]
pub struct Publisher<O, S> {
    outbox: O,
    sink: S,
}

impl<O: crate::ports::Outbox, S: crate::ports::OutcomeSink> Publisher<O, S> {
    /// A publisher of `outbox` into `sink`.
    pub fn new(outbox: O, sink: S) -> Self {
        Self { outbox, sink }
    }

    /// The outbox (tests).
    pub fn outbox(&self) -> &O {
        &self.outbox
    }

    /// The sink (tests).
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// Publishes what the outbox holds, round by round ([`SWEEP_PAGE`] records a round), until
    /// it is empty, a round clears nothing, `rounds` are spent or `stop` says so (checked
    /// between rounds: the caller's time budget). A sink failure ends the sweep with what it
    /// did; nothing it did not publish is cleared.
    pub async fn sweep(
        &self,
        now: DateTime<Utc>,
        rounds: usize,
        mut stop: impl FnMut() -> bool,
    ) -> Result<SweepReport, crate::ports::OutboxError> {
        let mut report = SweepReport::default();
        // Records this sweep cleared: the outbox index is eventually consistent, so the next
        // round may read one again (found by review: it was published again, its clear refused,
        // and a round that cleared nothing ended the sweep).
        let mut cleared_ids: std::collections::HashSet<String> = std::collections::HashSet::new();
        for round in 0..rounds {
            let mut entries = self.outbox.pending(SWEEP_PAGE).await?;
            entries.retain(|e| !cleared_ids.contains(&e.reminder_id));
            if round == 0 {
                report.oldest_age_seconds = entries
                    .iter()
                    .map(|e| e.added_ms)
                    .min()
                    .map_or(0.0, |t| ((now.timestamp_millis() - t).max(0) as f64) / 1000.0);
            }
            if entries.is_empty() {
                report.left = 0;
                return Ok(report);
            }
            report.records += entries.len() as u64;
            // Each entry's distinct events, flattened with their entry's index.
            let mut flat: Vec<(usize, &OutcomeEvent)> = Vec::new();
            for (i, e) in entries.iter().enumerate() {
                report.unreadable += e.unreadable as u64;
                let mut seen = std::collections::HashSet::new();
                flat.extend(e.events.iter().filter(|ev| seen.insert(ev.event_id.as_str())).map(|ev| (i, ev)));
            }
            // An entry is cleared only when every one of its events was accepted: a chunk the
            // sink refused, and every chunk after a failed call, leave theirs in the outbox.
            let mut wanted = vec![0usize; entries.len()];
            for (i, _) in &flat {
                wanted[*i] += 1;
            }
            let mut accepted_of = vec![0usize; entries.len()];
            let mut sink_failed = false;
            for chunk in flat.chunks(self.sink.batch_limit().max(1)) {
                if sink_failed {
                    report.failed += chunk.len() as u64;
                    continue;
                }
                let events: Vec<OutcomeEvent> = chunk.iter().map(|(_, ev)| (*ev).clone()).collect();
                match self.sink.publish(&events).await {
                    Ok(accepted) => {
                        for (k, (i, _)) in chunk.iter().enumerate() {
                            if accepted.get(k).copied().unwrap_or(false) {
                                report.published += 1;
                                accepted_of[*i] += 1;
                            } else {
                                report.failed += 1;
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "publishing outcome events failed; they stay in the outbox");
                        report.failed += chunk.len() as u64;
                        sink_failed = true;
                    }
                }
            }
            let ok: Vec<bool> = wanted.iter().zip(&accepted_of).map(|(w, a)| w == a).collect();
            // The clears, 16 in flight. A clear that fails leaves its record for the next sweep
            // (its events were published: they go again, at least once) and does not end this one.
            use futures_util::stream::{self, StreamExt};
            let clears: Vec<(String, Result<bool, crate::ports::OutboxError>)> = stream::iter(
                entries.iter().zip(&ok).filter(|(e, published)| **published && e.unreadable == 0).map(|(e, _)| e),
            )
            .map(|e| async move { (e.reminder_id.clone(), self.outbox.clear(e).await) })
            .buffer_unordered(CLEARS_IN_FLIGHT)
            .collect()
            .await;
            let mut cleared = 0;
            for (id, c) in clears {
                match c {
                    Ok(true) => {
                        cleared += 1;
                        cleared_ids.insert(id);
                    }
                    Ok(false) => report.changed += 1,
                    Err(e) => {
                        report.clear_failed += 1;
                        tracing::warn!(error = %e, "clearing an outbox record failed; its events go again next sweep");
                    }
                }
            }
            report.cleared += cleared;
            report.left = entries.len() as u64 - cleared;
            if sink_failed || cleared == 0 || stop() {
                return Ok(report);
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::message;

    #[test]
    fn an_event_id_is_stable_per_reminder_outcome_and_copy() {
        let now = Utc::now();
        let m = message("1", now, now + chrono::TimeDelta::hours(1));
        assert_eq!(event_id(&m, Outcome::Delivered), event_id(&m.clone(), Outcome::Delivered));
        assert_ne!(event_id(&m, Outcome::Delivered), event_id(&m, Outcome::Expired));
        let mut later = m.clone();
        later.first_enqueued = m.first_enqueued + chrono::TimeDelta::seconds(1);
        assert_ne!(
            event_id(&m, Outcome::Cancelled),
            event_id(&later, Outcome::Cancelled),
            "a re-release is a new copy"
        );
        let id = event_id(&m, Outcome::Delivered);
        assert!(id.starts_with("evt_") && id.len() == 36, "{id}");
    }

    /// A bus that fails its second call.
    #[derive(Clone, Default)]
    struct SecondCallFails(std::sync::Arc<std::sync::atomic::AtomicU32>);

    impl crate::ports::OutcomeSink for SecondCallFails {
        async fn publish(&self, events: &[OutcomeEvent]) -> Result<Vec<bool>, crate::ports::SinkError> {
            if self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                return Err(crate::ports::SinkError::Unknown("down".into()));
            }
            Ok(vec![true; events.len()])
        }
    }

    #[tokio::test]
    async fn found_by_the_checker_a_failed_call_clears_nothing_it_did_not_publish() {
        use crate::ports::{Ledger, Outbox, OwnerToken};
        let ledger = crate::testing::MemoryLedger::with_outbox();
        let now = Utc::now();
        // 25 reminders delivered: three calls of 10, 10 and 5 events; the second fails.
        for i in 0..25 {
            let m = message(&format!("p{i}"), now, now + chrono::TimeDelta::hours(1));
            let owner = OwnerToken::new("o");
            ledger.claim(&m, &owner, now, now + chrono::TimeDelta::minutes(1)).await.unwrap();
            let x = Settlement {
                state: ReminderState::Delivered,
                reason: None,
                attempts: 1,
                receipt: None,
                provider_status: None,
                next_at: None,
            };
            ledger.settle(&m, Some(&owner), now, &x).await.unwrap();
        }
        let publisher = Publisher::new(ledger.clone(), SecondCallFails::default());
        let r = publisher.sweep(now, 5, || false).await.unwrap();
        assert_eq!((r.published, r.failed), (10, 15), "{r:?}");
        // Only the first call's ten are cleared: the failed call's and the one skipped after it stay.
        assert_eq!(ledger.pending(100).await.unwrap().len(), 15);
        let r = publisher.sweep(now, 5, || false).await.unwrap();
        assert_eq!((r.published, r.cleared), (15, 15), "{r:?}");
        assert!(ledger.pending(100).await.unwrap().is_empty());
    }

    #[test]
    fn only_an_ending_settlement_has_an_event_and_it_round_trips() {
        let now = Utc::now();
        let m = message("2", now, now + chrono::TimeDelta::hours(1));
        let x = |state| Settlement {
            state,
            reason: Some(ReasonCode::ProviderTransient),
            attempts: 2,
            receipt: None,
            provider_status: None,
            next_at: None,
        };
        assert!(OutcomeEvent::of_settlement(&m, &x(ReminderState::Deferred), now).is_none());
        let e = OutcomeEvent::of_settlement(&m, &x(ReminderState::DeadLettered), now).unwrap();
        assert_eq!(
            (e.outcome, e.attempts, e.reason.as_deref()),
            (Outcome::DeadLettered, 2, Some("provider_transient"))
        );
        assert_eq!(OutcomeEvent::from_json(&e.to_json()).unwrap(), e);
        let env = e.envelope("default");
        assert_eq!((env["source"].as_str(), env["detail-type"].as_str()), (Some("punctual"), Some("punctual.outcome")));
        assert_eq!(env["detail"]["outcome"], "dead_lettered");
    }
}
