//! EventBridge tick → one scheduler tick → EMF metrics.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::LambdaEvent;
use punctual_aws::emf::Metrics;
use punctual_core::clock::Clock;
use punctual_core::ports::{DueStore, ReleaseQueue};
use punctual_core::scheduler::{Scheduler, TickReport};
use punctual_lambda::error::HandlerError;
use punctual_lambda::invocation_deadline;

/// Scheduler metric names (DESIGN §6, §8).
pub mod name {
    /// Messages released this tick.
    pub const RELEASED: &str = "Released";
    /// Of those, released to the urgent lane.
    pub const RELEASED_URGENT: &str = "ReleasedUrgent";
    /// Messages on the urgent lane after the tick (visible, in flight, delayed).
    pub const URGENT_BACKLOG: &str = "UrgentLaneBacklog";
    /// Renewals expired because their window passed before release.
    pub const EXPIRED_MISSED: &str = "ExpiredMissedWindow";
    /// Eligible backlog (on the queue + still pending).
    pub const BACKLOG: &str = "EligibleBacklog";
    /// Backlog ÷ sustainable rate, seconds.
    pub const PROJECTED_DRAIN: &str = "ProjectedDrainSeconds";
    /// Smallest remaining slack among live renewals seen, seconds.
    pub const MIN_SLACK: &str = "MinSlackSeconds";
    /// 1 when the projected drain exceeds the smallest slack.
    pub const BREACH: &str = "ProjectedDeadlineBreach";
    /// Age of the oldest due renewal the scheduler still saw pending, seconds.
    pub const OLDEST_DUE: &str = "OldestDueUndeliveredSeconds";
    /// 1 when the tick stopped before finishing its window.
    pub const UNFINISHED: &str = "SchedulerUnfinished";
    /// 1 when the tick failed (store, queue): written on the failure path too, so a scheduler
    /// that fails on every tick is a series of 1s, not silence (0 on every good tick).
    pub const TICK_FAILED: &str = "SchedulerTickFailed";
}

/// The metrics of a tick that failed: a heartbeat on the failure path, and the part of the
/// SLO's due population it released before failing (those renewals are marked: no later tick
/// counts them again).
pub fn failure_metrics(partial: &TickReport) -> Metrics {
    let mut m = Metrics::new();
    m.count(name::TICK_FAILED, 1.0);
    slo_due(&mut m, partial);
    m
}

fn slo_due(m: &mut Metrics, r: &TickReport) {
    // The deadline SLO's due population, per tenant (a property, never a dimension): counted
    // at release; one expired at release is due and breached at once.
    for (tenant, (released, expired)) in &r.due_by_tenant {
        m.slo(tenant, punctual_aws::emf::name::SLO_DUE, (released + expired) as f64);
        if *expired > 0 {
            m.slo(tenant, punctual_aws::emf::name::SLO_BREACHED, *expired as f64);
        }
    }
}

/// The tick's metrics.
pub fn metrics(r: &TickReport) -> Metrics {
    let mut m = Metrics::new();
    m.count(name::RELEASED, r.released as f64);
    m.count(name::RELEASED_URGENT, r.released_urgent as f64);
    m.count(name::URGENT_BACKLOG, r.lanes.urgent as f64);
    m.count(name::EXPIRED_MISSED, r.expired_missed as f64);
    m.count(name::BACKLOG, r.backlog as f64);
    m.count(name::PROJECTED_DRAIN, r.projected_drain.as_secs_f64());
    if let Some(slack) = r.min_slack {
        m.count(name::MIN_SLACK, slack.as_secs_f64());
    }
    m.count(name::BREACH, if r.projected_breach { 1.0 } else { 0.0 });
    m.count(name::OLDEST_DUE, r.oldest_due_age.as_secs_f64());
    m.count(name::UNFINISHED, if r.finished { 0.0 } else { 1.0 });
    m.count(name::TICK_FAILED, 0.0);
    slo_due(&mut m, r);
    m
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
        "tick"
    );
    (report, Ok(()))
}
