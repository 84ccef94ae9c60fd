//! Redrive request (the invocation payload) → validated request → run → summary.
//!
//! Refusals are answers, not function errors: an invalid request or a paused system returns
//! `{"status":"refused","problems":[…]}` with every problem listed, and nothing moves.

use chrono::{DateTime, Utc};
use punctual_core::clock::Clock;
use punctual_core::ports::{Control, DeadLetters, Ledger};
use punctual_core::redrive::{RedriveCaps, RedriveError, RedriveRequestWire, RedriveSummary, Redriver};
use punctual_lambda::error::HandlerError;
use serde::Serialize;
use serde_json::Value;

/// A redrive invocation's answer (the JSON the function returns, tagged by `status`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Answer {
    /// Nothing moved: the request is invalid (every problem listed) or delivery is paused.
    Refused {
        /// Each problem, naming its field.
        problems: Vec<String>,
        /// True when refused because delivery is paused (not part of the JSON).
        #[serde(skip)]
        paused: bool,
    },
    /// The run finished.
    Done {
        /// What it did.
        summary: RedriveSummary,
    },
    /// The run stopped early (canary, abort threshold, deadline).
    Aborted {
        /// What it did before stopping.
        summary: RedriveSummary,
    },
}

/// The redrive function: the service and the caps its configuration allows.
pub struct Function<'a, L, D, K, C> {
    /// The service.
    pub redriver: &'a Redriver<L, D, K, C>,
    /// `REDRIVE_MAX_MESSAGES`, `REDRIVE_MAX_PER_SECOND` (within the redrive share).
    pub caps: RedriveCaps,
}

impl<L: Ledger, D: DeadLetters, K: Control, C: Clock> Function<'_, L, D, K, C> {
    /// Validates `request` against the caps and runs it, stopping before `deadline`.
    /// Refusals are answers; `Err` only when the machinery failed.
    pub async fn answer(&self, request: RedriveRequestWire, deadline: DateTime<Utc>) -> Result<Answer, HandlerError> {
        let req = match request.validate(self.caps) {
            Ok(r) => r,
            Err(problems) => {
                tracing::warn!(?problems, "redrive request refused");
                return Ok(Answer::Refused { problems, paused: false });
            }
        };
        match self.redriver.run(&req, deadline).await {
            Ok(s) => {
                tracing::info!(redrive_id = %s.redrive_id, owner = %req.owner, reason = %req.reason, moved = s.moved, selected = s.selected, aborted = s.aborted.as_deref(), "redrive finished");
                Ok(if s.aborted.is_some() { Answer::Aborted { summary: s } } else { Answer::Done { summary: s } })
            }
            Err(RedriveError::Paused { owner, reason }) => Ok(Answer::Refused {
                problems: vec![format!("delivery is paused by {owner} ({reason}); resume first")],
                paused: true,
            }),
            Err(e) => Err(HandlerError::Infrastructure { what: "redrive", source: Box::new(e) }),
        }
    }

    /// Handles one invocation's payload, stopping before `deadline`: the payload is read as a
    /// [`RedriveRequestWire`] (anything but an object is refused) and answered by
    /// [`Function::answer`].
    pub async fn handle(&self, payload: Value, deadline: DateTime<Utc>) -> Result<Value, HandlerError> {
        let out = match RedriveRequestWire::from_value(payload) {
            Ok(request) => self.answer(request, deadline).await?,
            Err(problems) => Answer::Refused { problems, paused: false },
        };
        serde_json::to_value(&out)
            .map_err(|e| HandlerError::Infrastructure { what: "encoding the answer", source: Box::new(e) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use punctual_core::clock::ManualClock;
    use punctual_core::ports::{DeadLetter, DeadLettersError, Pause};
    use punctual_core::testing::{MemoryControl, MemoryLedger};
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Dlq(Arc<Mutex<Vec<String>>>);

    impl DeadLetters for Dlq {
        async fn receive(&self, _hold: std::time::Duration) -> Result<Vec<DeadLetter>, DeadLettersError> {
            Ok(Vec::new())
        }
        async fn send_back(&self, body: &str, _: punctual_core::lanes::QueueLane) -> Result<(), DeadLettersError> {
            self.0.lock().unwrap().push(body.to_owned());
            Ok(())
        }
        async fn delete(&self, _: &str) -> Result<(), DeadLettersError> {
            Ok(())
        }
        async fn release(&self, _: &[String]) -> Result<(), DeadLettersError> {
            Ok(())
        }
    }

    const CAPS: RedriveCaps = RedriveCaps { max_messages: 10, max_per_second: 5.0 };

    #[tokio::test]
    async fn invalid_and_paused_requests_are_refused_with_reasons() {
        let clock = ManualClock::new(Utc::now());
        let control = MemoryControl::default();
        let r = Redriver::new(MemoryLedger::new(), Dlq::default(), control.clone(), clock.clone());
        let deadline = clock.now() + chrono::TimeDelta::minutes(5);
        let out = Function { redriver: &r, caps: CAPS }.handle(json!({"max_messages": 11}), deadline).await.unwrap();
        assert_eq!(out["status"], "refused");
        assert_eq!(out["problems"].as_array().unwrap().len(), 4, "{out}");
        let p = Pause { reason: "drain".into(), owner: "ops".into(), since: clock.now() };
        control.set_pause(Some(&p), "ops").await.unwrap();
        let ok = json!({"reason": "r", "owner": "o", "max_messages": 1, "max_per_second": 1});
        let out = Function { redriver: &r, caps: CAPS }.handle(ok, deadline).await.unwrap();
        assert!(out["problems"][0].as_str().unwrap().contains("paused"), "{out}");
        assert!(control.audits.lock().unwrap().is_empty(), "a refused run writes no audit record");
    }
}
