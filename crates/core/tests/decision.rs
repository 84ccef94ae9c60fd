//! The sender decision (docs/design.md#the-sender-decision): a table with a row for every branch, and property tests for
//! the invariants the delivery contract promises.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use proptest::prelude::*;
use punctual_core::backoff::{Backoff, Jitter, SplitMix64};
use punctual_core::contract::{MalformedMessage, ReminderMessage};
use punctual_core::decision::{
    ClaimView, Decision, Disposition, Inputs, LimiterAnswer, Observed, RecordView, RenewalView, SenderPolicy, Step,
    decide,
};
use punctual_core::provider::{IndeterminatePolicy, ProviderOutcome, RetryAfter};
use punctual_core::{ReasonCode, ReminderState};

/// A jitter source that always returns the same sample, so table rows are exact.
struct Fixed(f64);
impl Jitter for Fixed {
    fn next_unit(&mut self) -> f64 {
        self.0
    }
}

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}
fn secs(s: i64) -> TimeDelta {
    TimeDelta::seconds(s)
}

const AFTER: &str = "2026-12-01T14:00:00Z";
const BY: &str = "2026-12-01T16:00:00Z";

fn message(after: DateTime<Utc>, by: DateTime<Utc>) -> ReminderMessage {
    ReminderMessage { first_enqueued: after - secs(600), ..punctual_core::testing::message("1", after, by) }
}

fn policy() -> SenderPolicy {
    SenderPolicy {
        backoff: Backoff { base: Duration::from_secs(2), cap: Duration::from_secs(300) },
        max_attempts: 5,
        invocation_margin: Duration::from_secs(2),
        min_call_timeout: Duration::from_secs(1),
        max_call_timeout: Duration::from_secs(10),
        provider_keys: true,
        indeterminate: IndeterminatePolicy::AtMostOnce,
    }
}

/// A provider without idempotency keys, under `policy`.
fn keyless(indeterminate: IndeterminatePolicy) -> SenderPolicy {
    SenderPolicy { provider_keys: false, indeterminate, ..policy() }
}

/// One row's world, owned; `inputs()` borrows it the way the sender service does.
#[derive(Clone)]
struct World {
    message: Result<ReminderMessage, MalformedMessage>,
    now: DateTime<Utc>,
    invocation_deadline: DateTime<Utc>,
    observed: Observed,
    claim: Option<ClaimView>,
    recorded: Option<RecordView>,
    renewal: Option<RenewalView>,
    limiter: Option<LimiterAnswer>,
    call_marked: Option<bool>,
    provider: Option<ProviderOutcome>,
}

impl World {
    /// Due, claimed by us, active, token granted: one call away from the provider.
    fn ready() -> Self {
        let now = t(AFTER) + secs(60);
        Self {
            message: Ok(message(t(AFTER), t(BY))),
            now,
            invocation_deadline: now + secs(60),
            observed: Observed { queue_delay: Duration::from_secs(1), call_latency: Duration::from_millis(200) },
            claim: Some(ClaimView::Claimed { prior_attempts: 0, unsettled_call: false }),
            recorded: None,
            renewal: Some(RenewalView::Active),
            limiter: Some(LimiterAnswer::Granted),
            call_marked: None,
            provider: None,
        }
    }
    fn fresh() -> Self {
        Self { claim: None, renewal: None, limiter: None, ..Self::ready() }
    }
    fn inputs(&self) -> Inputs<'_> {
        Inputs {
            message: self.message.as_ref(),
            now: self.now,
            invocation_deadline: self.invocation_deadline,
            observed: self.observed,
            claim: self.claim,
            recorded: self.recorded,
            renewal: self.renewal,
            channel: punctual_core::decision::ChannelView::Open,
            limiter: self.limiter,
            call_marked: self.call_marked,
            provider: self.provider.as_ref(),
        }
    }
    fn decide(&self) -> Decision {
        decide(&policy(), &self.inputs(), &mut Fixed(0.5))
    }
    fn called(mut self, outcome: ProviderOutcome) -> Self {
        self.provider = Some(outcome);
        self
    }
}

fn late(state: Option<ReminderState>, attempts: u32) -> RecordView {
    RecordView {
        state,
        attempts,
        unknown_call: false,
        lease_until: None,
        redrive_pending: false,
        cancel_superseded: false,
    }
}

/// Leased until `until` by a worker whose call is marked and not settled.
fn leased_with_a_call(until: DateTime<Utc>) -> RecordView {
    RecordView {
        state: Some(ReminderState::Leased),
        attempts: 1,
        unknown_call: true,
        lease_until: Some(until),
        redrive_pending: false,
        cancel_superseded: false,
    }
}

fn defer(until: DateTime<Utc>, reason: ReasonCode, attempts_made: u32, provider_status: Option<u16>) -> Decision {
    Decision::Done(Disposition::Defer { until, reason, attempts_made, provider_status })
}

fn quarantined(d: &Decision) -> Option<(ReasonCode, u32, Option<u16>)> {
    match d {
        Decision::Done(Disposition::Quarantine { reason, attempts_made, provider_status, .. }) => {
            Some((*reason, *attempts_made, *provider_status))
        }
        _ => None,
    }
}

#[test]
fn decision_table_covers_every_branch() {
    let ready = World::ready();
    let now = ready.now;
    let bad = ReminderMessage::decode("{\"v\":7}").unwrap_err();
    let transient = |status, retry_after| ProviderOutcome::Transient { status, retry_after };

    // (name, world, expected decision)
    let rows: Vec<(&str, World, Decision)> = vec![
        // 1. decode
        (
            "malformed is quarantined",
            World { message: Err(bad.clone()), ..World::fresh() },
            Decision::Done(Disposition::Quarantine {
                reason: ReasonCode::Malformed,
                attempts_made: 0,
                provider_status: None,
                detail: "unsupported contract version 7 (this build understands version 1)".into(),
            }),
        ),
        // 2. not due
        (
            "early is deferred to deliver_after",
            World { now: t(AFTER) - secs(30), ..World::fresh() },
            defer(t(AFTER), ReasonCode::NotDue, 0, None),
        ),
        // 3. expired — only once the ledger shows it undelivered
        (
            "at deliver_by the ledger is read before anything expires",
            World { now: t(BY), ..World::fresh() },
            Decision::Next(Step::ReadLedger),
        ),
        (
            "at deliver_by, with no record, the renewal is read before anything expires",
            World { now: t(BY), recorded: Some(late(None, 0)), ..World::fresh() },
            Decision::Next(Step::CheckRenewal),
        ),
        (
            "at deliver_by, with no record, is expired",
            World { now: t(BY), recorded: Some(late(None, 0)), renewal: Some(RenewalView::Active), ..World::fresh() },
            Decision::Done(Disposition::Expire { attempts_made: 0 }),
        ),
        (
            "past deliver_by, a live lease elsewhere (its holder may be calling) defers to its end",
            World { now: t(BY) + secs(1), recorded: Some(leased_with_a_call(t(BY) + secs(20))), ..World::fresh() },
            defer(t(BY) + secs(20), ReasonCode::ClaimedElsewhere, 1, None),
        ),
        (
            "past deliver_by, a lease that ended with its call unknown is an unknown earlier call",
            World { now: t(BY) + secs(21), recorded: Some(leased_with_a_call(t(BY) + secs(20))), ..World::fresh() },
            Decision::Done(Disposition::Quarantine {
                reason: ReasonCode::ProviderIndeterminate,
                attempts_made: 1,
                provider_status: None,
                detail:
                    "an earlier call's outcome is unknown (its worker stopped before recording it); deliver_by passed"
                        .into(),
            }),
        ),
        (
            "past deliver_by, a copy of a renewal moved since is rescheduled, not expired",
            World {
                now: t(BY) + secs(1),
                recorded: Some(late(None, 0)),
                renewal: Some(RenewalView::Rescheduled {
                    same_reminder: true,
                    deliver_after: t(BY) + secs(3600),
                    deliver_by: t(BY) + secs(7200),
                }),
                ..World::fresh()
            },
            Decision::Done(Disposition::Rescheduled {
                same_reminder: true,
                deliver_after: t(BY) + secs(3600),
                deliver_by: t(BY) + secs(7200),
            }),
        ),
        (
            "past deliver_by, a delivered reminder's copy is a suppressed duplicate, not expired",
            World { now: t(BY) + secs(1), recorded: Some(late(Some(ReminderState::Delivered), 1)), ..World::fresh() },
            Decision::Done(Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate }),
        ),
        (
            "past deliver_by, an already expired reminder's copy is a suppressed duplicate",
            World { now: t(BY) + secs(1), recorded: Some(late(Some(ReminderState::Expired), 0)), ..World::fresh() },
            Decision::Done(Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate }),
        ),
        (
            "past deliver_by, a cancelled reminder's copy is acknowledged",
            World { now: t(BY) + secs(1), recorded: Some(late(Some(ReminderState::Cancelled), 0)), ..World::fresh() },
            Decision::Done(Disposition::Acknowledge { reason: ReasonCode::Cancelled }),
        ),
        (
            "past deliver_by, a deferred reminder expires with the ledger's attempt count",
            World {
                now: t(BY) + secs(1),
                recorded: Some(late(Some(ReminderState::Deferred), 3)),
                renewal: Some(RenewalView::Active),
                ..World::fresh()
            },
            Decision::Done(Disposition::Expire { attempts_made: 3 }),
        ),
        (
            "past deliver_by, a duplicate of a dead-lettered reminder is acknowledged (its letter exists)",
            World {
                now: t(BY) + secs(1),
                recorded: Some(late(Some(ReminderState::DeadLettered), 2)),
                renewal: Some(RenewalView::Cancelled),
                ..World::fresh()
            },
            Decision::Done(Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate }),
        ),
        (
            "past deliver_by, a redrive's copy of a dead-lettered reminder still expires (to the DLQ)",
            World {
                now: t(BY) + secs(1),
                recorded: Some(RecordView { redrive_pending: true, ..late(Some(ReminderState::DeadLettered), 2) }),
                renewal: Some(RenewalView::Cancelled),
                ..World::fresh()
            },
            Decision::Done(Disposition::Expire { attempts_made: 2 }),
        ),
        (
            "past deliver_by after a claim that reported delivered is a suppressed duplicate",
            World { now: t(BY), claim: Some(ClaimView::AlreadyDelivered), ..World::fresh() },
            Decision::Done(Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate }),
        ),
        (
            "after deliver_by is expired",
            World { now: t(BY) + secs(1), ..World::ready() },
            Decision::Done(Disposition::Expire { attempts_made: 0 }),
        ),
        (
            "a claimed copy of a renewal moved to another day is dropped as rescheduled, no call",
            World {
                renewal: Some(RenewalView::Rescheduled {
                    same_reminder: false,
                    deliver_after: t(BY) + secs(86_400),
                    deliver_by: t(BY) + secs(90_000),
                }),
                ..World::ready()
            },
            Decision::Done(Disposition::Rescheduled {
                same_reminder: false,
                deliver_after: t(BY) + secs(86_400),
                deliver_by: t(BY) + secs(90_000),
            }),
        ),
        // 4. claim
        (
            "due and unclaimed asks for a claim to the invocation deadline",
            World::fresh(),
            Decision::Next(Step::Claim { lease_until: now + secs(60) }),
        ),
        (
            "lease never outlives deliver_by",
            World { invocation_deadline: t(BY) + secs(600), ..World::fresh() },
            Decision::Next(Step::Claim { lease_until: t(BY) }),
        ),
        (
            "already delivered is acknowledged as a suppressed duplicate",
            World { claim: Some(ClaimView::AlreadyDelivered), ..World::fresh() },
            Decision::Done(Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate }),
        ),
        (
            "held elsewhere is deferred until the lease ends",
            World { claim: Some(ClaimView::HeldElsewhere { lease_until: now + secs(8) }), ..World::fresh() },
            defer(now + secs(8), ReasonCode::ClaimedElsewhere, 0, None),
        ),
        (
            "a long foreign lease is rechecked after the longest call a live holder can make",
            World { claim: Some(ClaimView::HeldElsewhere { lease_until: now + secs(45) }), ..World::fresh() },
            defer(now + secs(10 + 2), ReasonCode::ClaimedElsewhere, 0, None),
        ),
        (
            "a lapsed foreign lease defers to now, never to the past",
            World { claim: Some(ClaimView::HeldElsewhere { lease_until: now - secs(5) }), ..World::fresh() },
            defer(now, ReasonCode::ClaimedElsewhere, 0, None),
        ),
        (
            "a copy held elsewhere through the deadline is still kept until the lease ends",
            World {
                now: t(BY) - secs(5),
                claim: Some(ClaimView::HeldElsewhere { lease_until: t(BY) }),
                ..World::fresh()
            },
            defer(t(BY) - chrono::TimeDelta::milliseconds(1), ReasonCode::ClaimedElsewhere, 0, None),
        ),
        // 5. renewal
        (
            "claimed asks for the renewal",
            World { claim: Some(ClaimView::Claimed { prior_attempts: 2, unsettled_call: false }), ..World::fresh() },
            Decision::Next(Step::CheckRenewal),
        ),
        (
            "cancelled renewal is cancelled",
            World { renewal: Some(RenewalView::Cancelled), limiter: None, ..World::ready() },
            Decision::Done(Disposition::Cancel { renewal: RenewalView::Cancelled }),
        ),
        (
            "paid renewal is cancelled",
            World { renewal: Some(RenewalView::Paid), limiter: None, ..World::ready() },
            Decision::Done(Disposition::Cancel { renewal: RenewalView::Paid }),
        ),
        (
            "deleted renewal is cancelled",
            World { renewal: Some(RenewalView::Missing), limiter: None, ..World::ready() },
            Decision::Done(Disposition::Cancel { renewal: RenewalView::Missing }),
        ),
        // 6. limiter
        (
            "active asks for a token, waiting no longer than leaves room for a call",
            World { limiter: None, ..World::ready() },
            Decision::Next(Step::TakeToken { max_wait: Duration::from_secs(60 - 2 - 1) }),
        ),
        (
            "limiter denial defers by its wait",
            World { limiter: Some(LimiterAnswer::Denied { retry_in: Duration::from_secs(3) }), ..World::ready() },
            defer(now + secs(3), ReasonCode::RateLimited, 0, None),
        ),
        // 7. call
        (
            "granted calls the provider, bounded by the call cap",
            World::ready(),
            Decision::Next(Step::CallProvider { timeout: Duration::from_secs(10), attempt: 1 }),
        ),
        (
            "the call timeout shrinks to the invocation's remaining time minus the margin",
            World { invocation_deadline: now + secs(6), ..World::ready() },
            Decision::Next(Step::CallProvider { timeout: Duration::from_secs(4), attempt: 1 }),
        ),
        (
            "the call timeout shrinks to deliver_by",
            World { now: t(BY) - secs(3), invocation_deadline: t(BY) + secs(60), ..World::ready() },
            Decision::Next(Step::CallProvider { timeout: Duration::from_secs(3), attempt: 1 }),
        ),
        (
            "too little invocation time left defers to the next invocation at once",
            World {
                invocation_deadline: now + secs(2),
                claim: Some(ClaimView::Claimed { prior_attempts: 1, unsettled_call: false }),
                ..World::ready()
            },
            defer(now, ReasonCode::InvocationBudget, 1, None),
        ),
        // 8. classify
        (
            "2xx is delivered with its receipt",
            World::ready().called(ProviderOutcome::Accepted {
                status: 202,
                receipt: Some("msg-9".into()),
                budget: None,
            }),
            Decision::Done(Disposition::Delivered { attempt: 1, receipt: Some("msg-9".into()) }),
        ),
        (
            "429 with Retry-After 7 s waits the later of Retry-After and backoff",
            World::ready().called(transient(Some(429), Some(RetryAfter::Seconds(7)))),
            defer(now + secs(7), ReasonCode::ProviderRetryAfter, 1, Some(429)),
        ),
        (
            "backoff wins when later than Retry-After",
            World { claim: Some(ClaimView::Claimed { prior_attempts: 3, unsettled_call: false }), ..World::ready() }
                .called(transient(Some(429), Some(RetryAfter::Seconds(1)))),
            // attempt 4: ceiling 2 s · 2^3 = 16 s, jitter 0.5 → 8 s
            defer(now + secs(8), ReasonCode::ProviderRetryAfter, 4, Some(429)),
        ),
        (
            "503 without Retry-After backs off",
            World::ready().called(transient(Some(503), None)),
            defer(now + secs(1), ReasonCode::ProviderTransient, 1, Some(503)),
        ),
        (
            "connection refused backs off",
            World::ready().called(transient(None, None)),
            defer(now + secs(1), ReasonCode::ProviderTransient, 1, None),
        ),
        (
            "timeout is indeterminate and retried",
            World::ready().called(ProviderOutcome::Indeterminate { status: None }),
            defer(now + secs(1), ReasonCode::ProviderIndeterminate, 1, None),
        ),
        (
            "500 is indeterminate and retried",
            World::ready().called(ProviderOutcome::Indeterminate { status: Some(500) }),
            defer(now + secs(1), ReasonCode::ProviderIndeterminate, 1, Some(500)),
        ),
    ];
    for (name, world, want) in rows {
        assert_eq!(world.decide(), want, "row: {name}");
    }

    // Quarantine rows: the reason, attempts and status matter; the detail is prose.
    type QRow = (&'static str, World, (ReasonCode, u32, Option<u16>));
    let q_rows: Vec<QRow> = vec![
        (
            "attempts already spent (a crash after the last attempt) are dead-lettered before any token",
            World {
                claim: Some(ClaimView::Claimed { prior_attempts: 5, unsettled_call: false }),
                renewal: None,
                limiter: None,
                ..World::ready()
            },
            (ReasonCode::AttemptLimit, 5, None),
        ),
        (
            "limiter denial past the deadline has no safe window",
            World {
                now: t(BY) - secs(10),
                limiter: Some(LimiterAnswer::Denied { retry_in: Duration::from_secs(10) }),
                ..World::ready()
            },
            (ReasonCode::NoSafeRetryWindow, 0, None),
        ),
        (
            "less time to deliver_by than a call needs has no safe window",
            World { now: t(BY) - TimeDelta::milliseconds(500), ..World::ready() },
            (ReasonCode::NoSafeRetryWindow, 0, None),
        ),
        (
            "400 is permanent",
            World::ready().called(ProviderOutcome::Permanent { status: 400 }),
            (ReasonCode::ClassifiedPermanent, 1, Some(400)),
        ),
        (
            "the last allowed attempt failing transiently spends the budget",
            World { claim: Some(ClaimView::Claimed { prior_attempts: 4, unsettled_call: false }), ..World::ready() }
                .called(transient(Some(429), None)),
            (ReasonCode::AttemptLimit, 5, Some(429)),
        ),
        (
            "an indeterminate last attempt spends the budget too, never permanent",
            World { claim: Some(ClaimView::Claimed { prior_attempts: 4, unsettled_call: false }), ..World::ready() }
                .called(ProviderOutcome::Indeterminate { status: None }),
            (ReasonCode::AttemptLimit, 5, None),
        ),
        (
            "Retry-After landing past deliver_by has no safe window",
            World { now: t(BY) - secs(60), ..World::ready() }
                .called(transient(Some(429), Some(RetryAfter::Seconds(60)))),
            (ReasonCode::NoSafeRetryWindow, 1, Some(429)),
        ),
        (
            "queue delay plus call latency count against the window",
            World {
                now: t(BY) - secs(20),
                observed: Observed { queue_delay: Duration::from_secs(12), call_latency: Duration::from_secs(1) },
                ..World::ready()
            }
            .called(transient(Some(429), Some(RetryAfter::Seconds(7)))),
            (ReasonCode::NoSafeRetryWindow, 1, Some(429)),
        ),
    ];
    for (name, world, want) in q_rows {
        let got = world.decide();
        assert_eq!(quarantined(&got), Some(want), "row: {name}: {got:?}");
    }
}

#[test]
fn the_same_world_with_more_slack_still_retries() {
    // The counterpart of the last quarantine row: 8 s more window and it defers instead.
    let w = World {
        now: t(BY) - secs(28),
        observed: Observed { queue_delay: Duration::from_secs(12), call_latency: Duration::from_secs(1) },
        ..World::ready()
    }
    .called(ProviderOutcome::Transient { status: Some(429), retry_after: Some(RetryAfter::Seconds(7)) });
    assert!(matches!(w.decide(), Decision::Done(Disposition::Defer { reason: ReasonCode::ProviderRetryAfter, .. })));
}

#[test]
fn retry_after_as_an_http_date_is_honoured() {
    let w = World::ready();
    let at = w.now + secs(42);
    let w = w.called(ProviderOutcome::Transient { status: Some(503), retry_after: Some(RetryAfter::At(at)) });
    assert_eq!(w.decide(), defer(at, ReasonCode::ProviderRetryAfter, 1, Some(503)));
}

// ---- properties -------------------------------------------------------------------------

fn arb_outcome() -> impl Strategy<Value = ProviderOutcome> {
    prop_oneof![
        (200u16..300).prop_map(|status| ProviderOutcome::Accepted { status, receipt: None, budget: None }),
        (prop::option::of(prop_oneof![Just(429u16), Just(503u16)]), prop::option::of(0u64..100_000))
            .prop_map(|(status, ra)| ProviderOutcome::Transient { status, retry_after: ra.map(RetryAfter::Seconds) }),
        prop::option::of(500u16..600).prop_map(|status| ProviderOutcome::Indeterminate { status }),
        (400u16..429).prop_map(|status| ProviderOutcome::Permanent { status }),
    ]
}

fn arb_claim() -> impl Strategy<Value = ClaimView> {
    prop_oneof![
        (0u32..8, any::<bool>())
            .prop_map(|(prior_attempts, unsettled_call)| ClaimView::Claimed { prior_attempts, unsettled_call }),
        Just(ClaimView::AlreadyDelivered),
        (-100i64..20_000).prop_map(|s| ClaimView::HeldElsewhere { lease_until: t(AFTER) + secs(s) }),
    ]
}

fn arb_renewal() -> impl Strategy<Value = RenewalView> {
    prop_oneof![4 => Just(RenewalView::Active), 1 => Just(RenewalView::Cancelled), 1 => Just(RenewalView::Paid), 1 => Just(RenewalView::Missing)]
}

fn arb_limiter() -> impl Strategy<Value = LimiterAnswer> {
    prop_oneof![3 => Just(LimiterAnswer::Granted), 1 => (0u64..20_000).prop_map(|ms| LimiterAnswer::Denied { retry_in: Duration::from_millis(ms) })]
}

/// Everything a run through the state machine can meet.
#[derive(Debug, Clone)]
struct Run {
    window_s: i64,
    now_offset_s: i64,
    invocation_s: i64,
    queue_delay_ms: u64,
    call_latency_ms: u64,
    claim: ClaimView,
    renewal: RenewalView,
    limiter: LimiterAnswer,
    outcome: ProviderOutcome,
    seed: u64,
}

fn arb_run() -> impl Strategy<Value = Run> {
    (
        (1i64..20_000, -3_000i64..25_000, 0i64..900, 0u64..30_000, 0u64..10_000),
        (arb_claim(), arb_renewal(), arb_limiter(), arb_outcome(), any::<u64>()),
    )
        .prop_map(
            |(
                (window_s, now_offset_s, invocation_s, queue_delay_ms, call_latency_ms),
                (claim, renewal, limiter, outcome, seed),
            )| Run {
                window_s,
                now_offset_s,
                invocation_s,
                queue_delay_ms,
                call_latency_ms,
                claim,
                renewal,
                limiter,
                outcome,
                seed,
            },
        )
}

/// Drives the decision to its end, answering each step from `run`. Returns the disposition
/// and, if the provider was called, the (now, timeout) of the call.
fn drive(run: &Run) -> (World, Disposition, Option<(DateTime<Utc>, Duration)>) {
    let after = t(AFTER);
    let by = after + secs(run.window_s);
    let now = after + secs(run.now_offset_s);
    let mut world = World {
        message: Ok(message(after, by)),
        now,
        invocation_deadline: now + secs(run.invocation_s),
        observed: Observed {
            queue_delay: Duration::from_millis(run.queue_delay_ms),
            call_latency: Duration::from_millis(run.call_latency_ms),
        },
        claim: None,
        recorded: None,
        renewal: None,
        limiter: None,
        call_marked: None,
        provider: None,
    };
    let mut rng = SplitMix64::new(run.seed);
    let mut call = None;
    for _ in 0..10 {
        match decide(&policy(), &world.inputs(), &mut rng) {
            Decision::Done(d) => return (world, d, call),
            Decision::Next(Step::Claim { .. }) => world.claim = Some(run.claim),
            Decision::Next(Step::ReadLedger) => {
                let delivered = run.claim == ClaimView::AlreadyDelivered;
                world.recorded = Some(RecordView {
                    state: delivered.then_some(ReminderState::Delivered),
                    attempts: 0,
                    unknown_call: false,
                    lease_until: None,
                    redrive_pending: false,
                    cancel_superseded: false,
                });
            }
            Decision::Next(Step::CheckRenewal) => world.renewal = Some(run.renewal),
            Decision::Next(Step::TakeToken { .. }) => world.limiter = Some(run.limiter),
            Decision::Next(Step::MarkCall) => world.call_marked = Some(true),
            Decision::Next(Step::CallProvider { timeout, .. }) => {
                call = Some((world.now, timeout));
                world.provider = Some(run.outcome.clone());
            }
        }
    }
    panic!("decision did not finish in 10 steps: {run:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    /// The provider is only ever called inside [deliver_after, deliver_by), with a timeout that
    /// ends by deliver_by and leaves the invocation margin; so a delivery is never outside it.
    #[test]
    fn never_a_delivery_outside_the_window(run in arb_run()) {
        let (world, disposition, call) = drive(&run);
        let m = world.message.as_ref().unwrap();
        if let Some((at, timeout)) = call {
            prop_assert!(m.deliver_after <= at && at < m.deliver_by);
            prop_assert!(at + TimeDelta::from_std(timeout).unwrap() <= m.deliver_by);
            prop_assert!(at + TimeDelta::from_std(timeout + policy().invocation_margin).unwrap() <= world.invocation_deadline);
        }
        if matches!(disposition, Disposition::Delivered { .. }) {
            prop_assert!(call.is_some(), "delivered without a call");
        }
    }

    /// A deferral never lands at or after deliver_by, and never in the past.
    #[test]
    fn a_deferral_never_lands_at_or_after_deliver_by(run in arb_run()) {
        let (world, disposition, _) = drive(&run);
        if let Disposition::Defer { until, .. } = disposition {
            let m = world.message.as_ref().unwrap();
            prop_assert!(until < m.deliver_by, "deferred to {until}, deliver_by {}", m.deliver_by);
            prop_assert!(until >= world.now);
        }
    }

    /// A Retry-After is honoured up to MAX_RETRY_AFTER and never shortened below it: a
    /// deferral after one waits at least min(Retry-After, the cap); an absurd value (a day)
    /// never keeps a reminder out for longer than the cap and the backoff (F3, I6).
    #[test]
    fn a_retry_after_is_honoured_up_to_its_cap(run in arb_run(), ra in 0u64..200_000) {
        let run = Run { outcome: ProviderOutcome::Transient { status: Some(429), retry_after: Some(RetryAfter::Seconds(ra)) }, ..run };
        let (world, disposition, _) = drive(&run);
        let cap = punctual_core::provider::MAX_RETRY_AFTER.as_secs();
        if let Disposition::Defer { until, reason: ReasonCode::ProviderRetryAfter, .. } = disposition {
            prop_assert!(until >= world.now + secs(ra.min(cap) as i64));
            let backoff_cap = punctual_core::decision::SenderPolicy::default().backoff.cap;
            prop_assert!(until <= world.now + secs(cap.max(backoff_cap.as_secs()) as i64));
        }
    }

    /// Indeterminate results are never permanent and never delivered.
    #[test]
    fn indeterminate_is_never_permanent_nor_delivered(run in arb_run(), status in prop::option::of(500u16..600)) {
        let run = Run { outcome: ProviderOutcome::Indeterminate { status }, ..run };
        let (_, disposition, _) = drive(&run);
        let delivered = matches!(disposition, Disposition::Delivered { .. });
        prop_assert!(!delivered);
        prop_assert_ne!(disposition.reason(), Some(ReasonCode::ClassifiedPermanent));
    }
}

// ---- a provider without idempotency keys (the profile) ------------------------------------

#[test]
fn without_keys_every_call_is_marked_in_the_ledger_first() {
    let w = World::ready();
    let p = keyless(IndeterminatePolicy::AtMostOnce);
    assert_eq!(decide(&p, &w.inputs(), &mut Fixed(0.5)), Decision::Next(Step::MarkCall));
    let marked = World { call_marked: Some(true), ..w.clone() };
    assert!(matches!(decide(&p, &marked.inputs(), &mut Fixed(0.5)), Decision::Next(Step::CallProvider { .. })));
    // The lease passed to another worker while this one waited: rechecked, never acknowledged.
    let lost = World { call_marked: Some(false), ..w.clone() };
    match decide(&p, &lost.inputs(), &mut Fixed(0.5)) {
        Decision::Done(Disposition::Defer { reason: ReasonCode::ClaimedElsewhere, until, .. }) => {
            assert!(until > w.now && until < t(BY));
        }
        other => panic!("{other:?}"),
    }
    // A provider that honours keys needs no mark: straight to the call.
    assert!(matches!(w.decide(), Decision::Next(Step::CallProvider { .. })));
}

#[test]
fn an_indeterminate_answer_is_resent_only_where_a_resend_cannot_double_the_effect() {
    for status in [None, Some(500), Some(408), Some(504)] {
        let w = World { call_marked: Some(true), ..World::ready() }.called(ProviderOutcome::Indeterminate { status });
        // Keys: resent under the same key.
        assert!(matches!(
            w.decide(),
            Decision::Done(Disposition::Defer { reason: ReasonCode::ProviderIndeterminate, .. })
        ));
        // No keys, at_most_once: to the DLQ for an operator, with what is known.
        let d = decide(&keyless(IndeterminatePolicy::AtMostOnce), &w.inputs(), &mut Fixed(0.5));
        assert_eq!(quarantined(&d), Some((ReasonCode::ProviderIndeterminate, 1, status)), "{d:?}");
        // No keys, at_least_once: resent like any transient failure.
        let d = decide(&keyless(IndeterminatePolicy::AtLeastOnce), &w.inputs(), &mut Fixed(0.5));
        assert!(
            matches!(d, Decision::Done(Disposition::Defer { reason: ReasonCode::ProviderIndeterminate, .. })),
            "{d:?}"
        );
    }
}

#[test]
fn a_call_left_unsettled_by_a_dead_worker_is_not_repeated_under_at_most_once() {
    let w = World {
        claim: Some(ClaimView::Claimed { prior_attempts: 2, unsettled_call: true }),
        limiter: None,
        ..World::ready()
    };
    let d = decide(&keyless(IndeterminatePolicy::AtMostOnce), &w.inputs(), &mut Fixed(0.5));
    assert_eq!(quarantined(&d), Some((ReasonCode::ProviderIndeterminate, 2, None)), "{d:?}");
    // Before spending a token; and a cancelled renewal is still just cancelled.
    let cancelled = World { renewal: Some(RenewalView::Cancelled), ..w.clone() };
    let d = decide(&keyless(IndeterminatePolicy::AtMostOnce), &cancelled.inputs(), &mut Fixed(0.5));
    assert!(matches!(d, Decision::Done(Disposition::Cancel { .. })), "{d:?}");
    // at_least_once, or a provider with keys: carry on to the token.
    for p in [keyless(IndeterminatePolicy::AtLeastOnce), policy()] {
        assert!(matches!(decide(&p, &w.inputs(), &mut Fixed(0.5)), Decision::Next(Step::TakeToken { .. })));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Without keys and under at_most_once, nothing that may have reached the provider is ever
    /// followed by a deferral (which would resend it).
    #[test]
    fn at_most_once_never_defers_after_an_unknown_outcome(run in arb_run()) {
        let mut world = World {
            message: Ok(message(t(AFTER), t(BY))),
            now: t(AFTER) + secs(60),
            invocation_deadline: t(AFTER) + secs(120),
            claim: Some(run.claim),
            provider: Some(run.outcome.clone()),
            ..World::fresh()
        };
        world.call_marked = Some(true);
        world.renewal = Some(RenewalView::Active);
        world.limiter = Some(LimiterAnswer::Granted);
        let d = decide(&keyless(IndeterminatePolicy::AtMostOnce), &world.inputs(), &mut Fixed(0.5));
        let unknown = matches!(run.outcome, ProviderOutcome::Indeterminate { .. })
            || matches!(run.claim, ClaimView::Claimed { unsettled_call: true, .. });
        if unknown && matches!(run.claim, ClaimView::Claimed { .. }) {
            prop_assert!(!matches!(d, Decision::Done(Disposition::Defer { .. }) | Decision::Next(_)), "{d:?}");
        }
    }
}

/// An acceptance the sender finishes handling just after `deliver_by` (a limiter write in
/// between) is a delivery: the call itself ended before the deadline.
#[test]
fn an_answer_from_before_the_deadline_is_classified_even_if_handled_after_it() {
    let w = World { now: t(BY) + secs(1), ..World::ready() }.called(ProviderOutcome::Accepted {
        status: 202,
        receipt: Some("r".into()),
        budget: None,
    });
    assert!(matches!(w.decide(), Decision::Done(Disposition::Delivered { attempt: 1, .. })), "{:?}", w.decide());
    // A failure then has no time left: quarantined, never deferred past the deadline.
    let w = World { now: t(BY) + secs(1), ..World::ready() }
        .called(ProviderOutcome::Transient { status: Some(503), retry_after: None });
    assert!(matches!(w.decide(), Decision::Done(Disposition::Quarantine { .. })), "{:?}", w.decide());
}

// ---- edges: a fleet refusal that cannot wait for the operator -----------------------------

/// A confirmed 401 or an account refusal that cannot be deferred for an operator is not a
/// "4xx that retrying cannot fix" (`classified_permanent`): near the deadline it is a missed
/// window (`no_safe_retry_window`, counted late), and at the attempt limit it is dead-lettered
/// as what it is (`provider_credentials` / `provider_account`), so a redrive can select it once
/// the credential or the account is fixed.
#[test]
fn a_fleet_refusal_that_cannot_wait_is_dead_lettered_for_what_it_is() {
    let limit = policy().max_attempts;
    let refusals = [
        (ProviderOutcome::Permanent { status: 401 }, ReasonCode::ProviderCredentials, Some(401)),
        (ProviderOutcome::AccountBlocked { detail: "SES AccountSuspended".into() }, ReasonCode::ProviderAccount, None),
    ];
    for (outcome, fleet_reason, status) in refusals {
        // At the attempt limit, with hours left.
        let at_limit = World {
            claim: Some(ClaimView::Claimed { prior_attempts: limit - 1, unsettled_call: false }),
            ..World::ready()
        }
        .called(outcome.clone());
        assert_eq!(quarantined(&at_limit.decide()), Some((fleet_reason, limit, status)), "{:?}", at_limit.decide());
        // Near the deadline: the pause's recheck would land past deliver_by.
        let near = World { now: t(BY) - secs(30), invocation_deadline: t(BY) + secs(30), ..World::ready() }
            .called(outcome.clone());
        assert_eq!(
            quarantined(&near.decide()),
            Some((ReasonCode::NoSafeRetryWindow, 1, status)),
            "{:?}",
            near.decide()
        );
        // With time and attempts left it still waits for the operator (unchanged).
        let w = World::ready().called(outcome);
        assert!(
            matches!(w.decide(), Decision::Done(Disposition::Defer { reason, attempts_made: 1, .. }) if reason == fleet_reason),
            "{:?}",
            w.decide()
        );
    }
}

/// The renewal's channel is judged after the renewal and before the token: a paused channel
/// waits for the pause's recheck with its attempts kept (or misses its window when the recheck
/// lands at or after `deliver_by`), an undeclared one is dead-lettered without a call.
#[test]
fn a_paused_or_undeclared_channel_is_decided_before_the_token() {
    use punctual_core::decision::ChannelView;
    let mut w = World::ready();
    w.limiter = None;
    w.claim = Some(ClaimView::Claimed { prior_attempts: 2, unsettled_call: false });
    let d = |w: &World, channel: ChannelView<'_>| decide(&policy(), &Inputs { channel, ..w.inputs() }, &mut Fixed(0.5));
    assert!(
        matches!(d(&w, ChannelView::Open), Decision::Next(Step::TakeToken { .. })),
        "{:?}",
        d(&w, ChannelView::Open)
    );
    assert_eq!(d(&w, ChannelView::Paused), defer(w.now + secs(60), ReasonCode::OperatorPause, 2, None));
    assert_eq!(quarantined(&d(&w, ChannelView::Unknown("fax"))), Some((ReasonCode::UnknownChannel, 2, None)));
    w.now = t(BY) - secs(30);
    assert_eq!(quarantined(&d(&w, ChannelView::Paused)), Some((ReasonCode::NoSafeRetryWindow, 2, None)));
}
