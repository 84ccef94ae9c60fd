//! The sender's decision (docs/design.md#the-sender-decision): a pure function of (message, ledger view, now, limiter
//! answer, provider result, policy) that says what to do next.
//!
//! The sender service drives it as a small state machine: it calls [`decide`] with what it
//! knows, performs the [`Step`] it is told to (claim, look up the renewal, take a token, call
//! the provider), adds the answer to [`Inputs`] and calls again, until a [`Disposition`] comes
//! back. Checks run cheap and final first, so no token and no provider call is spent on work
//! that is not due, already expired, already delivered, over its attempt budget or cancelled.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::backoff::{Backoff, Jitter};
use crate::clock::{add, until};
use crate::contract::{MalformedMessage, ReminderMessage};
use crate::provider::{IndeterminatePolicy, ProviderOutcome};
use crate::reason::{ReasonCode, ReminderState};

/// Tunables of the sender's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderPolicy {
    /// Backoff between provider attempts (full jitter).
    pub backoff: Backoff,
    /// Provider attempts allowed per reminder, counted by the ledger.
    pub max_attempts: u32,
    /// Invocation time kept free after the provider call, for recording and acknowledging.
    pub invocation_margin: Duration,
    /// Below this much time, a provider call is not started.
    pub min_call_timeout: Duration,
    /// The longest a provider call may take.
    pub max_call_timeout: Duration,
    /// The provider honours idempotency keys (from its adapter's profile, set by the sender at
    /// composition). When it does not, every call is first marked in the ledger
    /// ([`Step::MarkCall`]) so a call whose outcome was lost is known to the next claim.
    pub provider_keys: bool,
    /// What an indeterminate outcome leads to when the provider does not honour keys.
    pub indeterminate: IndeterminatePolicy,
}

impl SenderPolicy {
    /// An indeterminate outcome may be followed by another call: always with a provider that
    /// honours keys (the repeat replays the first answer), and under `at_least_once` otherwise.
    pub fn resends_indeterminate(&self) -> bool {
        self.provider_keys || self.indeterminate == IndeterminatePolicy::AtLeastOnce
    }
}

impl Default for SenderPolicy {
    /// Defaults for a 100 calls/s email/SMS API and reminders with windows of hours.
    fn default() -> Self {
        Self {
            backoff: Backoff { base: Duration::from_secs(2), cap: Duration::from_secs(300) },
            max_attempts: 8,
            invocation_margin: Duration::from_secs(2),
            min_call_timeout: Duration::from_secs(1),
            max_call_timeout: Duration::from_secs(10),
            provider_keys: true,
            indeterminate: IndeterminatePolicy::AtMostOnce,
        }
    }
}

/// Measured delays the deadline cutoff accounts for (e.g. recent p95s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observed {
    /// Time from a message becoming visible to a sender receiving it.
    pub queue_delay: Duration,
    /// Time a provider call takes.
    pub call_latency: Duration,
}

/// What the idempotency ledger answered to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimView {
    /// This worker holds the lease; `prior_attempts` provider attempts are already recorded.
    Claimed {
        /// Provider attempts recorded before this one.
        prior_attempts: u32,
        /// An earlier holder marked a provider call ([`Step::MarkCall`]) and its lease ended
        /// without a settle: that call's outcome is unknown (only ever set for a provider that
        /// does not honour keys, the only kind whose calls are marked). Not set for a mark an
        /// operator's redrive covers: a copy stamped `resend_unknown` whose redrive is later
        /// than the release that made the mark (see the ledger contract).
        unsettled_call: bool,
    },
    /// The reminder is already delivered.
    AlreadyDelivered,
    /// The reminder already ended (`expired`; `cancelled` for a copy released before the
    /// cancellation; `dead_lettered` for a copy that no redrive re-released): a stale copy must
    /// not revive it. Nothing was written.
    Ended {
        /// The terminal state recorded.
        state: ReminderState,
    },
    /// A later redrive re-released the reminder: this copy (from before it) is superseded, and
    /// the redrive's own copies carry the work and its budget. Nothing was written.
    Superseded,
    /// Another live worker holds the lease until `lease_until`.
    HeldElsewhere {
        /// When that lease ends.
        lease_until: DateTime<Utc>,
    },
}

/// The ledger's record of a reminder, read without claiming it: what a copy received at or
/// after `deliver_by` consults before it may expire (a late duplicate of a delivered reminder
/// is not a deadline miss).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView {
    /// The recorded state; `None` when the ledger has no record.
    pub state: Option<ReminderState>,
    /// Provider attempts recorded (0 without a record).
    pub attempts: u32,
    /// A provider call is marked and was never settled (a provider without keys): its outcome
    /// is unknown.
    pub unknown_call: bool,
    /// While the reminder is leased: the lease's end. A lease still running belongs to a worker
    /// that may be calling the provider right now.
    pub lease_until: Option<DateTime<Utc>>,
    /// The reminder is dead-lettered and the copy in hand belongs to a redrive that has not run
    /// on it yet ([`crate::ports::revives_dead_letter`]): the copy carries the reminder on.
    /// Any other copy of a dead-lettered reminder is a duplicate (its letter is in the DLQ).
    pub redrive_pending: bool,
    /// The reminder is cancelled and the copy in hand was released after the cancellation
    /// ([`crate::ports::revives_cancelled`]): the renewal was re-armed since, and the copy
    /// carries the reminder on. Any other copy of a cancelled reminder owes nothing.
    pub cancel_superseded: bool,
}

/// The renewal as the system of record has it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalView {
    /// Still due: remind.
    Active,
    /// Cancelled meanwhile.
    Cancelled,
    /// Paid meanwhile.
    Paid,
    /// Deleted from the renewals table.
    Missing,
    /// Still due, but as another version than the copy in hand (re-imported with other times
    /// or another due date after the copy was released): the copy is stale.
    Rescheduled {
        /// The current version is for the same reminder (only its times changed), which is
        /// therefore still owed; otherwise the copy's reminder is owed no more.
        same_reminder: bool,
        /// The current version's `deliver_after`.
        deliver_after: DateTime<Utc>,
        /// The current version's `deliver_by`.
        deliver_by: DateTime<Utc>,
    },
}

/// What the shared rate limiter answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimiterAnswer {
    /// A token was taken.
    Granted,
    /// No token within the allowed wait; one is expected after `retry_in`.
    Denied {
        /// When to try again.
        retry_in: Duration,
    },
}

/// What the deployment says of the renewal's channel (docs/design.md#channels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelView<'a> {
    /// Declared and not paused, or no channels declared (one provider serves every channel).
    #[default]
    Open,
    /// Declared, and paused on its own (an operator's `pause --channel`, or the sender's own
    /// pause after that channel's provider refused its credentials).
    Paused,
    /// Not declared by the deployment: the name the renewal gave.
    Unknown(&'a str),
}

/// Everything known so far about one message.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The decoded message, or why it could not be decoded.
    pub message: Result<&'a ReminderMessage, &'a MalformedMessage>,
    /// The current instant.
    pub now: DateTime<Utc>,
    /// When this invocation is killed.
    pub invocation_deadline: DateTime<Utc>,
    /// Measured delays.
    pub observed: Observed,
    /// The ledger's answer to the claim, once claimed.
    pub claim: Option<ClaimView>,
    /// The ledger's record, once read (only asked for a copy past `deliver_by`).
    pub recorded: Option<RecordView>,
    /// The renewal's state, once looked up.
    pub renewal: Option<RenewalView>,
    /// The renewal's channel, once the renewal is looked up ([`ChannelView::Open`] before).
    pub channel: ChannelView<'a>,
    /// The limiter's answer, once asked.
    pub limiter: Option<LimiterAnswer>,
    /// The ledger's answer to the call mark (true: marked under this worker's lease), once
    /// asked (only for a provider that does not honour keys).
    pub call_marked: Option<bool>,
    /// The provider call's classified result, once called.
    pub provider: Option<&'a ProviderOutcome>,
}

/// An action the service must take before the decision can continue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Claim the idempotency record with a lease ending at `lease_until`.
    Claim {
        /// Never after the invocation deadline, never after `deliver_by`.
        lease_until: DateTime<Utc>,
    },
    /// Read the reminder's ledger record without claiming it (a copy past `deliver_by`).
    ReadLedger,
    /// Look up the renewal in the system of record.
    CheckRenewal,
    /// Take a token from the shared limiter, waiting at most `max_wait`.
    TakeToken {
        /// Longest wait that still leaves time for the call.
        max_wait: Duration,
    },
    /// Record in the ledger, under this worker's lease, that a provider call is about to start
    /// (a provider without idempotency keys only): if the worker dies or loses the answer, the
    /// next claim learns that a call may have reached the provider.
    MarkCall,
    /// Call the provider with this timeout; this is provider attempt number `attempt`.
    CallProvider {
        /// Ends before the invocation margin and before `deliver_by`.
        timeout: Duration,
        /// 1-based attempt number.
        attempt: u32,
    },
}

/// How a message ends this receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// The provider accepted it: record delivered with the receipt, acknowledge.
    Delivered {
        /// The attempt that succeeded.
        attempt: u32,
        /// The provider's receipt.
        receipt: Option<String>,
    },
    /// Acknowledge without a new attempt: already delivered or expired (`suppressed_duplicate`),
    /// owned by another live worker through the deadline (`claimed_elsewhere`), or a copy past
    /// `deliver_by` of a reminder already cancelled (`cancelled`).
    Acknowledge {
        /// Why nothing was done.
        reason: ReasonCode,
    },
    /// Try again at `until` (always before `deliver_by`); release the claim if held.
    Defer {
        /// When the message should next be visible.
        until: DateTime<Utc>,
        /// Why it waits.
        reason: ReasonCode,
        /// Provider attempts made so far.
        attempts_made: u32,
        /// Last provider status, if a call was made.
        provider_status: Option<u16>,
    },
    /// Send to the DLQ with this metadata, then delete from the send queue.
    Quarantine {
        /// Why.
        reason: ReasonCode,
        /// Provider attempts made so far.
        attempts_made: u32,
        /// Last provider status, if any.
        provider_status: Option<u16>,
        /// Human-readable detail for the DLQ `detail` attribute (never message content).
        detail: String,
    },
    /// `deliver_by` passed and the ledger shows the reminder neither delivered nor ended
    /// otherwise: record expired (never over a terminal state), send to the DLQ with
    /// `business_deadline_expired`.
    Expire {
        /// Provider attempts made so far (the ledger's count, or the message's hint when the
        /// ledger has none).
        attempts_made: u32,
    },
    /// The renewal is no longer due: record cancelled, acknowledge.
    Cancel {
        /// What the system of record said.
        renewal: RenewalView,
    },
    /// The copy belongs to a version of the renewal the table no longer holds (`rescheduled`),
    /// and is not sent: no attempt spent. When the current version is another reminder, the
    /// copy's reminder is recorded cancelled (`rescheduled`) and the copy dropped: the row,
    /// re-armed, releases the new reminder. When it is the same reminder (other times), the
    /// copy is requeued *as the current version* — its times replaced, visible at the new
    /// `deliver_after` — and a claim it holds is released: the current version's own release
    /// may already have come and gone (a duplicate of a dead-lettered reminder, say), so this
    /// copy may be the reminder's only carrier. Two carriers are harmless: the ledger delivers
    /// one reminder once.
    Rescheduled {
        /// The current version is the same reminder.
        same_reminder: bool,
        /// The current version's `deliver_after`.
        deliver_after: DateTime<Utc>,
        /// The current version's `deliver_by`.
        deliver_by: DateTime<Utc>,
    },
}

impl Disposition {
    /// The reason code recorded for this disposition, if any.
    pub fn reason(&self) -> Option<ReasonCode> {
        match self {
            Self::Delivered { .. } => None,
            Self::Acknowledge { reason } | Self::Defer { reason, .. } | Self::Quarantine { reason, .. } => {
                Some(*reason)
            }
            Self::Expire { .. } => Some(ReasonCode::BusinessDeadlineExpired),
            Self::Cancel { .. } => Some(ReasonCode::Cancelled),
            Self::Rescheduled { .. } => Some(ReasonCode::Rescheduled),
        }
    }
}

/// The decision's answer: one more step, or done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Perform this step, add its answer to the inputs, decide again.
    Next(Step),
    /// Finished.
    Done(Disposition),
}

/// Step 3: what a copy received at or after `deliver_by` comes to.
fn past_deadline(msg: &ReminderMessage, inputs: &Inputs<'_>) -> Decision {
    match past_deadline_ledger(msg, inputs) {
        // Before a copy expires its reminder, the renewal is read: a copy of a version the
        // table no longer holds is stale, not late (its renewal was moved after release, and
        // the current version is released at its own time). One read per would-be expiry.
        Decision::Done(Disposition::Expire { attempts_made }) => match inputs.renewal {
            None => Decision::Next(Step::CheckRenewal),
            Some(RenewalView::Rescheduled { same_reminder, deliver_after, deliver_by }) => {
                Decision::Done(Disposition::Rescheduled { same_reminder, deliver_after, deliver_by })
            }
            Some(_) => Decision::Done(Disposition::Expire { attempts_made }),
        },
        other => other,
    }
}

fn past_deadline_ledger(msg: &ReminderMessage, inputs: &Inputs<'_>) -> Decision {
    let duplicate = Decision::Done(Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate });
    match (inputs.claim, inputs.recorded) {
        // An earlier call's outcome is unknown (a provider without keys): the reminder may have
        // been delivered. Not an expiry (which would count it late and clear the mark): the DLQ
        // with what is known, for an operator.
        (Some(ClaimView::Claimed { prior_attempts, unsettled_call: true }), _) => {
            unknown_earlier_call(prior_attempts.max(msg.attempt), "deliver_by passed")
        }
        // This worker holds the lease (it claimed before the deadline passed): not delivered.
        (Some(ClaimView::Claimed { prior_attempts, .. }), _) => {
            Decision::Done(Disposition::Expire { attempts_made: prior_attempts.max(msg.attempt) })
        }
        (Some(ClaimView::AlreadyDelivered | ClaimView::Ended { .. } | ClaimView::Superseded), _) => duplicate,
        (_, None) => Decision::Next(Step::ReadLedger),
        (_, Some(rec)) => match rec.state {
            Some(ReminderState::Delivered) => duplicate,
            // Another worker holds a live lease (it claimed before the deadline and may be in
            // its provider call right now): its answer decides. Neither an unknown earlier call
            // nor an expiry: the copy comes back when the lease ends, and finds the reminder
            // delivered, expired, or with an unknown call. (Seen by the checker: a stale copy
            // arriving during the current version's call dead-lettered a reminder its holder
            // then delivered.)
            Some(ReminderState::Leased) if rec.lease_until.is_some_and(|l| l > inputs.now) => {
                Decision::Done(Disposition::Defer {
                    until: rec.lease_until.unwrap_or(inputs.now),
                    reason: ReasonCode::ClaimedElsewhere,
                    attempts_made: rec.attempts.max(msg.attempt),
                    provider_status: None,
                })
            }
            // Its letter is in the DLQ already (the DLQ is written before the ledger): a second
            // one, as an expiry, would be a letter no redrive takes (past `deliver_by`). Only a
            // redrive's copy that has not run on it carries a dead-lettered reminder on.
            Some(ReminderState::DeadLettered) if !rec.redrive_pending => duplicate,
            // Maybe delivered: never an expiry (see above).
            Some(ReminderState::Leased | ReminderState::Deferred | ReminderState::DeadLettered) if rec.unknown_call => {
                unknown_earlier_call(rec.attempts.max(msg.attempt), "deliver_by passed")
            }
            // Already expired: by a sender, whose DLQ entry exists (the DLQ is written before
            // the ledger), or by the scheduler at release (a copy whose mark failed): judged then.
            Some(ReminderState::Expired) => duplicate,
            // Nothing is owed to a cancelled renewal; a DLQ entry would be a false one. A copy
            // released after the cancellation (the renewal re-armed since) was owed again, and
            // expires below.
            Some(ReminderState::Cancelled) if !rec.cancel_superseded => {
                Decision::Done(Disposition::Acknowledge { reason: ReasonCode::Cancelled })
            }
            // Never delivered (a dead-lettered one too, for a redrive's copy that reached a
            // sender only after `deliver_by`: the ledger records the expiry over the quarantine).
            _ => Decision::Done(Disposition::Expire { attempts_made: rec.attempts.max(msg.attempt) }),
        },
    }
}

fn quarantine(reason: ReasonCode, attempts_made: u32, provider_status: Option<u16>, detail: String) -> Decision {
    Decision::Done(Disposition::Quarantine { reason, attempts_made, provider_status, detail })
}

/// An earlier call's outcome is unknown (its worker stopped before recording it): to the DLQ as
/// `provider_indeterminate`, saying `why` it is not called again.
fn unknown_earlier_call(attempts_made: u32, why: &str) -> Decision {
    quarantine(
        ReasonCode::ProviderIndeterminate,
        attempts_made,
        None,
        format!("an earlier call's outcome is unknown (its worker stopped before recording it); {why}"),
    )
}

/// Another worker holds (or took over) the lease: never acknowledged — when SQS handed the
/// *same* message to this worker (the holder's visibility ran out), deleting it here deletes the
/// holder's only copy, and a holder that then dies leaves the reminder leased forever with
/// nothing on a queue. The copy comes back when the lease ends (`lease_until`, if known)
/// or no later than the longest one provider call can hold a live lease — a holder that finished
/// released it already, and the copy is then acknowledged as a duplicate instead of waiting out
/// the whole invocation-long lease — and before `deliver_by`, like every deferral (a copy that
/// wakes to a lease still held right at the deadline comes back once more and then expires
/// through the ledger).
fn held_elsewhere(
    policy: &SenderPolicy,
    msg: &ReminderMessage,
    now: DateTime<Utc>,
    lease_until: Option<DateTime<Utc>>,
    attempts_made: u32,
) -> Decision {
    let recheck = add(now, policy.max_call_timeout + policy.invocation_margin);
    let last = msg.deliver_by - chrono::TimeDelta::milliseconds(1);
    let until = lease_until.map_or(recheck, |l| l.min(recheck));
    Decision::Done(Disposition::Defer {
        until: until.min(last).max(now),
        reason: ReasonCode::ClaimedElsewhere,
        attempts_made,
        provider_status: None,
    })
}

/// Waits for a pause's recheck (deferred `reason`, `attempts` kept), or, when the recheck plus
/// the queue delay lands at or after `deliver_by`, dead-letters the copy as a missed window
/// (`last` says what held it).
fn pause_recheck(
    inputs: &Inputs<'_>,
    msg: &ReminderMessage,
    reason: ReasonCode,
    attempts: u32,
    status: Option<u16>,
    last: &str,
) -> Decision {
    let next = add(inputs.now, crate::pause::PAUSE_RECHECK);
    if add(next, inputs.observed.queue_delay) >= msg.deliver_by {
        return quarantine(
            ReasonCode::NoSafeRetryWindow,
            attempts,
            status,
            format!(
                "{last}; the pause's recheck at {} would be at or after deliver_by",
                crate::contract::format_instant(next)
            ),
        );
    }
    Decision::Done(Disposition::Defer { until: next, reason, attempts_made: attempts, provider_status: status })
}

/// Decides the next step or the final disposition for one message. Pure: the same inputs and
/// jitter state give the same answer.
pub fn decide(policy: &SenderPolicy, inputs: &Inputs<'_>, jitter: &mut impl Jitter) -> Decision {
    // 1. Decode.
    let msg = match inputs.message {
        Ok(m) => m,
        Err(e) => return quarantine(ReasonCode::Malformed, 0, None, e.to_string()),
    };
    let now = inputs.now;
    // 2. Not yet due.
    if now < msg.deliver_after {
        return Decision::Done(Disposition::Defer {
            until: msg.deliver_after,
            reason: ReasonCode::NotDue,
            attempts_made: msg.attempt,
            provider_status: None,
        });
    }
    // 3. Past the business deadline: only an undelivered reminder expires, so the ledger is
    //    consulted first (a late at-least-once copy of a delivered one is a duplicate, not a
    //    deadline miss, and must not reach the DLQ).
    // A provider answer is classified whatever the time now: the call ended before
    // `deliver_by` (its timeout is bounded by it), so an acceptance at the last moment is a
    // delivery, not an expiry (the answer's own processing may cross the deadline).
    if now >= msg.deliver_by && inputs.provider.is_none() {
        return past_deadline(msg, inputs);
    }
    // 4. Claim.
    let (prior_attempts, unsettled_call) = match inputs.claim {
        None => {
            let lease_until = inputs.invocation_deadline.min(msg.deliver_by);
            return Decision::Next(Step::Claim { lease_until });
        }
        Some(ClaimView::AlreadyDelivered | ClaimView::Ended { .. } | ClaimView::Superseded) => {
            return Decision::Done(Disposition::Acknowledge { reason: ReasonCode::SuppressedDuplicate });
        }
        Some(ClaimView::HeldElsewhere { lease_until }) => {
            // The copy comes back when the lease ends and finds the reminder delivered,
            // expired, or free to claim (see `held_elsewhere`).
            return held_elsewhere(policy, msg, now, Some(lease_until), msg.attempt);
        }
        Some(ClaimView::Claimed { prior_attempts, unsettled_call }) => (prior_attempts, unsettled_call),
    };
    let limit = attempt_limit(policy, msg);
    if prior_attempts >= limit {
        return quarantine(
            ReasonCode::AttemptLimit,
            prior_attempts,
            None,
            format!("{prior_attempts} of {limit} provider attempts already made"),
        );
    }
    // 5. Still wanted, and still this version?
    match inputs.renewal {
        None => return Decision::Next(Step::CheckRenewal),
        Some(RenewalView::Active) => {}
        Some(RenewalView::Rescheduled { same_reminder, deliver_after, deliver_by }) => {
            return Decision::Done(Disposition::Rescheduled { same_reminder, deliver_after, deliver_by });
        }
        Some(renewal) => return Decision::Done(Disposition::Cancel { renewal }),
    }
    // 5b. An earlier call whose outcome is unknown, at a provider that would apply a resend as
    //     a second effect: under `at_most_once` an operator decides (a redrive resends).
    if unsettled_call && !policy.resends_indeterminate() {
        return unknown_earlier_call(
            prior_attempts.max(msg.attempt),
            "the provider does not honour idempotency keys; not resent under at_most_once",
        );
    }
    // 5c. A channel the deployment serves, and not paused on its own (after 5b: an unknown
    //     earlier call is the operator's first, whatever the channel). A paused channel waits
    //     for its recheck like a fleet pause, spending no attempt; an undeclared one has no
    //     provider at all, so an operator must decide (declare it, or fix the renewal).
    match inputs.channel {
        ChannelView::Open => {}
        ChannelView::Unknown(name) => {
            return quarantine(
                ReasonCode::UnknownChannel,
                prior_attempts,
                None,
                format!("channel {name:?} is not declared by this deployment"),
            );
        }
        ChannelView::Paused => {
            return pause_recheck(
                inputs,
                msg,
                ReasonCode::OperatorPause,
                prior_attempts,
                None,
                "its channel is paused",
            );
        }
    }
    let call_room = until(now, inputs.invocation_deadline).saturating_sub(policy.invocation_margin);
    // 6. A token from the shared limiter.
    match inputs.limiter {
        None => {
            let max_wait = call_room.saturating_sub(policy.min_call_timeout);
            return Decision::Next(Step::TakeToken { max_wait });
        }
        Some(LimiterAnswer::Denied { retry_in }) => {
            let next = add(now, retry_in);
            if add(next, inputs.observed.queue_delay) >= msg.deliver_by {
                return quarantine(
                    ReasonCode::NoSafeRetryWindow,
                    prior_attempts,
                    None,
                    format!("rate limiter has no token for {}ms, past deliver_by", retry_in.as_millis()),
                );
            }
            return Decision::Done(Disposition::Defer {
                until: next,
                reason: ReasonCode::RateLimited,
                attempts_made: prior_attempts,
                provider_status: None,
            });
        }
        Some(LimiterAnswer::Granted) => {}
    }
    let attempt = prior_attempts + 1;
    // 7. Call the provider, finishing before the invocation margin and before deliver_by.
    let Some(outcome) = inputs.provider else {
        let to_deadline = until(now, msg.deliver_by);
        if to_deadline < policy.min_call_timeout {
            return quarantine(
                ReasonCode::NoSafeRetryWindow,
                prior_attempts,
                None,
                format!("{}ms left before deliver_by, less than a provider call needs", to_deadline.as_millis()),
            );
        }
        if call_room < policy.min_call_timeout {
            return Decision::Done(Disposition::Defer {
                until: now,
                reason: ReasonCode::InvocationBudget,
                attempts_made: prior_attempts,
                provider_status: None,
            });
        }
        match inputs.call_marked {
            None if !policy.provider_keys => return Decision::Next(Step::MarkCall),
            // The lease passed to another worker meanwhile (this one waited past it): never
            // acknowledged while another holds it (see `HeldElsewhere`); rechecked instead.
            Some(false) => return held_elsewhere(policy, msg, now, None, prior_attempts),
            _ => {}
        }
        let timeout = policy.max_call_timeout.min(call_room).min(to_deadline);
        return Decision::Next(Step::CallProvider { timeout, attempt });
    };
    // 8. Classify.
    // A fleet refusal that cannot wait for the operator is dead-lettered as what it is, never
    // as `classified_permanent` (a 4xx about the request): at the attempt limit with its own
    // reason (`provider_credentials` / `provider_account`, which a redrive selects once the
    // credential or the account is fixed); with no time left for the pause's recheck as a
    // missed window (`no_safe_retry_window`, counted late like every deadline miss).
    let fleet_refusal = |reason: ReasonCode, status: Option<u16>, last: String| {
        let limit = attempt_limit(policy, msg);
        if attempt >= limit {
            return quarantine(reason, attempt, status, format!("{last}; {attempt} of {limit} provider attempts made"));
        }
        pause_recheck(inputs, msg, reason, attempt, status, &last)
    };
    let (status, retry_after, reason) = match outcome {
        ProviderOutcome::Accepted { receipt, .. } => {
            return Decision::Done(Disposition::Delivered { attempt, receipt: receipt.clone() });
        }
        // A credential refusal the client confirmed against the token source: the sender
        // pauses the fleet, so the morning waits for an operator instead of being
        // dead-lettered. Only 401: a 403 is as often about the request (a recipient, a
        // channel) as about the token, and one bad renewal must not stop every delivery. The
        // attempt counts, so a reminder that meets 401 after every resume still ends at its
        // attempt limit instead of pausing the fleet again until its deadline.
        ProviderOutcome::Permanent { status: status @ 401 } => {
            return fleet_refusal(
                ReasonCode::ProviderCredentials,
                Some(*status),
                format!("provider refused the credentials ({status}) with a fresh token"),
            );
        }
        // The same for a refusal of the whole account (SES suspended, sending paused).
        ProviderOutcome::AccountBlocked { detail } => {
            return fleet_refusal(
                ReasonCode::ProviderAccount,
                None,
                format!("provider refused the account ({detail})"),
            );
        }
        // Nothing reached the provider (its client failed before calling, or the call mark
        // failed): not a provider attempt, so no attempt is spent and the attempt limit cannot
        // be reached this way — only the deadline ends it.
        ProviderOutcome::NotSent { detail } => {
            let next = add(now, policy.backoff.delay(attempt, jitter));
            let earliest_done = add(add(next, inputs.observed.queue_delay), inputs.observed.call_latency);
            if earliest_done >= msg.deliver_by {
                return quarantine(
                    ReasonCode::NoSafeRetryWindow,
                    prior_attempts,
                    None,
                    format!(
                        "nothing was sent ({detail}); the next try at {} would finish at or after deliver_by",
                        crate::contract::format_instant(next)
                    ),
                );
            }
            return Decision::Done(Disposition::Defer {
                until: next,
                reason: ReasonCode::ProviderTransient,
                attempts_made: prior_attempts,
                provider_status: None,
            });
        }
        // Nothing was sent (no address): not a provider attempt.
        ProviderOutcome::Undeliverable { reason: reason @ ReasonCode::RecipientUnknown, detail } => {
            return quarantine(*reason, prior_attempts, None, detail.clone());
        }
        ProviderOutcome::Undeliverable { reason, detail } => {
            return quarantine(*reason, attempt, None, detail.clone());
        }
        ProviderOutcome::Permanent { status } => {
            return quarantine(
                ReasonCode::ClassifiedPermanent,
                attempt,
                Some(*status),
                format!("provider answered {status}"),
            );
        }
        ProviderOutcome::Transient { status, retry_after } => {
            let reason =
                if retry_after.is_some() { ReasonCode::ProviderRetryAfter } else { ReasonCode::ProviderTransient };
            (*status, *retry_after, reason)
        }
        ProviderOutcome::Indeterminate { status } if !policy.resends_indeterminate() => {
            return quarantine(
                ReasonCode::ProviderIndeterminate,
                attempt,
                *status,
                format!(
                    "the call's outcome is unknown ({}) and the provider does not honour idempotency keys; not resent \
                     under at_most_once",
                    status.map_or_else(|| "no answer".to_owned(), |s| format!("status {s}"))
                ),
            );
        }
        ProviderOutcome::Indeterminate { status } => (*status, None, ReasonCode::ProviderIndeterminate),
    };
    if attempt >= attempt_limit(policy, msg) {
        return quarantine(
            ReasonCode::AttemptLimit,
            attempt,
            status,
            format!("{attempt} of {} provider attempts made; last was {reason}", attempt_limit(policy, msg)),
        );
    }
    let backoff = policy.backoff.delay(attempt, jitter);
    // At most MAX_RETRY_AFTER: an absurd value must not dead-letter a healthy reminder (I6).
    let asked = retry_after.map_or(Duration::ZERO, |r| r.delay_from(now).min(crate::provider::MAX_RETRY_AFTER));
    let next = add(now, backoff.max(asked));
    let earliest_done = add(add(next, inputs.observed.queue_delay), inputs.observed.call_latency);
    if earliest_done >= msg.deliver_by {
        return quarantine(
            ReasonCode::NoSafeRetryWindow,
            attempt,
            status,
            format!(
                "next attempt at {} would finish no earlier than {}, at or after deliver_by",
                crate::contract::format_instant(next),
                crate::contract::format_instant(earliest_done)
            ),
        );
    }
    Decision::Done(Disposition::Defer { until: next, reason, attempts_made: attempt, provider_status: status })
}

/// The attempt budget of a message: `max_attempts`, and for a redriven message `max_attempts`
/// more beyond the attempts it had made when the operator redrove it (its stamp's
/// `base_attempt`, fixed at the redrive — never the copy's own `attempt`, which grows with
/// every requeue and would move the limit along with it): a redrive is a deliberate new
/// budget, and the ledger keeps the full history.
pub fn attempt_limit(policy: &SenderPolicy, msg: &ReminderMessage) -> u32 {
    match &msg.redrive {
        Some(r) => r.base_attempt.saturating_add(policy.max_attempts),
        None => policy.max_attempts,
    }
}
