//! EventBridge tick → one scheduler tick → EMF metrics.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::LambdaEvent;
use punctual_core::clock::Clock;
use punctual_core::outcome::{Publisher, SweepReport};
use punctual_core::ports::{DueStore, ReleaseQueue};
use punctual_core::ports::{Outbox, OutcomeSink};
use punctual_core::scheduler::{Scheduler, TickReport};
use punctual_lambda::error::HandlerError;
use punctual_lambda::invocation_deadline;

// The tick's metrics are assembled in the core, where the simulator builds the same ones.
pub use punctual_core::metrics::scheduler::{failure_metrics, metrics, name};

/// Rounds of [`publish`]'s sweep: about 100 records a round, so up to 20,000 outcome events a
/// tick (the minute's deliveries at a 300/s quota), within the invocation's time.
pub const SWEEP_ROUNDS: usize = 200;

/// The longest a sweep runs after a tick: inside the minute before the next one.
pub const SWEEP_BUDGET: std::time::Duration = std::time::Duration::from_secs(40);

/// Time a sweep leaves before the invocation's deadline.
pub const SWEEP_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

/// After the tick: publishes the ledger's outcome events (also while paused: a pause holds
/// reminders, not what became of them), until the outbox is empty or the invocation's time is
/// nearly spent. A failed sweep is logged and reported; it never fails the tick (what it did
/// not publish stays in the outbox for the next one, and `OutboxOldestAgeSeconds` rises).
pub async fn publish<O: Outbox, K: OutcomeSink>(
    publisher: &Publisher<O, K>,
    deadline: chrono::DateTime<chrono::Utc>,
) -> Option<SweepReport> {
    let margin = chrono::TimeDelta::from_std(SWEEP_MARGIN).unwrap_or_default();
    let now = chrono::Utc::now();
    // Within the tick's minute, whatever the invocation's timeout (found by review: a sweep
    // run to a 120 s deadline overlapped the next tick, which then swept the same records).
    let budget = now + chrono::TimeDelta::from_std(SWEEP_BUDGET).unwrap_or_default();
    match publisher
        .sweep(now, SWEEP_ROUNDS, || {
            let t = chrono::Utc::now();
            t + margin >= deadline || t >= budget
        })
        .await
    {
        Ok(r) => {
            if r.published > 0 || r.failed > 0 || r.left > 0 {
                tracing::info!(
                    published = r.published,
                    failed = r.failed,
                    cleared = r.cleared,
                    left = r.left,
                    unreadable = r.unreadable,
                    oldest_age_s = r.oldest_age_seconds,
                    "outcome events"
                );
            }
            Some(r)
        }
        Err(e) => {
            // Its metrics say so (OutboxSweepFailed = 1 and no age, which the alarm's missing
            // data would hide: OutboxSweepFailingAlarm reads this one).
            tracing::warn!(error = %e, "sweeping the outbox failed; its events stay for the next tick");
            Some(SweepReport { sweep_failed: true, ..SweepReport::default() })
        }
    }
}

/// Runs one tick. Fails the invocation only when the store or queue failed; what was released
/// before the failure stays released and the next tick resumes.
/// While an operator pause is in force the service releases nothing (the watermark stays, so
/// the next tick after `resume` catches up) and reports `paused`.
pub async fn handle<S: DueStore, Q: ReleaseQueue, C: Clock>(
    scheduler: &Scheduler<S, Q, C>,
    event: LambdaEvent<EventBridgeEvent>,
) -> Result<TickReport, HandlerError> {
    let (report, result) = handle_reporting(scheduler, event).await;
    result.map(|()| report)
}

/// [`handle`], keeping what a failed tick did before it failed (the Lambda's metrics publish
/// it: see [`failure_metrics`]).
pub async fn handle_reporting<S: DueStore, Q: ReleaseQueue, C: Clock>(
    scheduler: &Scheduler<S, Q, C>,
    event: LambdaEvent<EventBridgeEvent>,
) -> (TickReport, Result<(), HandlerError>) {
    let deadline = invocation_deadline(&event.context);
    let mut report = TickReport::default();
    if let Err(e) = scheduler.tick_into(deadline, &mut report).await {
        let failed = HandlerError::Infrastructure { what: "scheduler tick", source: Box::new(e) };
        return (report, Err(failed));
    }
    if !report.channels_tripped.is_empty() {
        // The page (ChannelsTripped) says how many; this says which, and what resumes them.
        tracing::warn!(
            channels = %report.channels_tripped.join(","),
            "channels paused by the sender after their provider refused the credentials: fix the \
             secret, then `punctual resume --channel NAME`"
        );
    }
    if report.paused {
        tracing::info!(trigger = %event.payload.detail_type, "tick skipped: delivery is paused");
        return (report, Ok(()));
    }
    tracing::info!(
        trigger = %event.payload.detail_type,
        released = report.released,
        released_urgent = report.released_urgent,
        expired_missed = report.expired_missed,
        refused = report.refused,
        finished = report.finished,
        backlog = report.backlog,
        projected_drain_s = report.projected_drain.as_secs(),
        projected_breach = report.projected_breach,
        breach_channels = %report.breach_channels.join(","),
        "tick"
    );
    (report, Ok(()))
}
