//! The local EventBridge rule: each firing invokes the **scheduler's own handler** (the one the
//! Lambda runs, with its pause rule, metrics and report) with a `Scheduled Event` and a 60 s
//! budget, as the `rate(1 minute)` rule would.

use std::time::Duration;

use chrono::Utc;
use lambda_runtime::LambdaEvent;
use punctual_core::scheduler::TickReport;
use punctual_lambda::batch::{local_context, scheduled_event};
use punctual_lambda::error::HandlerError;
use punctual_scheduler::app::App;
use punctual_scheduler::handler::handle;

/// The rule the local ticks claim to come from.
pub const RULE_ARN: &str = "arn:aws:events:us-east-1:000000000000:rule/punctual-local-tick";

/// One firing: the scheduler handler's answer.
pub async fn tick(scheduler: &App) -> Result<TickReport, HandlerError> {
    let now = Utc::now();
    let event = scheduled_event(now, RULE_ARN)
        .map_err(|e| HandlerError::Infrastructure { what: "building the scheduled event", source: Box::new(e) })?;
    let ctx = local_context(format!("local-tick-{}", now.timestamp_millis()), Duration::from_secs(60));
    handle(scheduler, LambdaEvent::new(event, ctx)).await
}
