//! Redrive request (the invocation payload) → validated request → run → summary.
//!
//! Refusals are answers, not function errors: an invalid request or a paused system returns
//! `{"status":"refused","problems":[…]}` with every problem listed, and nothing moves.

use chrono::{DateTime, Utc};
use punctual_core::clock::Clock;
use punctual_core::ports::Ledger;
use punctual_core::redrive::{Control, DeadLetters, RedriveCaps, RedriveError, RedriveRequest, Redriver};
use punctual_lambda::error::HandlerError;
use serde_json::{Value, json};

/// Handles one invocation's payload, stopping before `deadline`.
pub async fn handle<L: Ledger, D: DeadLetters, K: Control, C: Clock>(
    redriver: &Redriver<L, D, K, C>,
    caps: RedriveCaps,
    payload: &Value,
    deadline: DateTime<Utc>,
) -> Result<Value, HandlerError> {
    let Some(obj) = payload.as_object() else {
        return Ok(json!({"status": "refused", "problems": ["the request must be a JSON object"]}));
    };
    let req = match RedriveRequest::from_object(obj, caps) {
        Ok(r) => r,
        Err(problems) => {
            tracing::warn!(?problems, "redrive request refused");
            return Ok(json!({"status": "refused", "problems": problems}));
        }
    };
    match redriver.run(&req, deadline).await {
        Ok(s) => {
            tracing::info!(redrive_id = %s.redrive_id, owner = %req.owner, reason = %req.reason, moved = s.moved, selected = s.selected, aborted = s.aborted.as_deref(), "redrive finished");
            let status = if s.aborted.is_some() { "aborted" } else { "done" };
            Ok(json!({"status": status, "summary": s}))
        }
        Err(RedriveError::Paused { owner, reason }) => Ok(json!({
            "status": "refused",
            "problems": [format!("delivery is paused by {owner} ({reason}); resume first")],
        })),
        Err(e) => Err(HandlerError::Infrastructure { what: "redrive", source: Box::new(e) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use punctual_core::clock::ManualClock;
    use punctual_core::ports::BoxError;
    use punctual_core::redrive::{DeadLetter, Pause};
    use punctual_core::testing::{MemoryControl, MemoryLedger};
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Dlq(Arc<Mutex<Vec<String>>>);

    impl DeadLetters for Dlq {
        async fn receive(&self) -> Result<Vec<DeadLetter>, BoxError> {
            Ok(Vec::new())
        }
        async fn send_back(&self, body: &str) -> Result<(), BoxError> {
            self.0.lock().unwrap().push(body.to_owned());
            Ok(())
        }
        async fn delete(&self, _: &str) -> Result<(), BoxError> {
            Ok(())
        }
        async fn release(&self, _: &[String]) -> Result<(), BoxError> {
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
        let out = handle(&r, CAPS, &json!({"max_messages": 11}), deadline).await.unwrap();
        assert_eq!(out["status"], "refused");
        assert_eq!(out["problems"].as_array().unwrap().len(), 4, "{out}");
        let p = Pause { reason: "drain".into(), owner: "ops".into(), since: clock.now() };
        control.set_pause(Some(&p), "ops").await.unwrap();
        let ok = json!({"reason": "r", "owner": "o", "max_messages": 1, "max_per_second": 1});
        let out = handle(&r, CAPS, &ok, deadline).await.unwrap();
        assert!(out["problems"][0].as_str().unwrap().contains("paused"), "{out}");
        assert!(control.audits.lock().unwrap().is_empty(), "a refused run writes no audit record");
    }
}
