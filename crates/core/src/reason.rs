//! Reminder states and the closed set of reason codes (docs/design.md#states-and-reason-codes).
//!
//! Reason codes are stable wire strings: they appear in the ledger, DLQ message attributes,
//! EMF metric dimensions and operator output. Adding one is a contract change; renaming one
//! breaks dashboards and alarms.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

macro_rules! closed_enum {
    (
        $(#[$doc:meta])* $name:ident, $what:literal {
            $( $(#[$vdoc:meta])* $variant:ident => $wire:literal, )+
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $( $(#[$vdoc])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stable wire string.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire,)+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownCode;
            fn from_str(s: &str) -> Result<Self, UnknownCode> {
                match s {
                    $($wire => Ok($name::$variant),)+
                    _ => Err(UnknownCode { what: $what, value: s.to_owned() }),
                }
            }
        }
    };
}

/// A string that is not one of a closed set of codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}`")]
pub struct UnknownCode {
    /// Which set was consulted (`reason code`, `reminder state`).
    pub what: &'static str,
    /// The rejected value.
    pub value: String,
}

closed_enum! {
    /// Where a reminder is in its life:
    /// `scheduled → enqueued → (deferred ⇄ leased) → delivered`, or terminally
    /// `dead_lettered`, `expired`, `cancelled`.
    ReminderState, "reminder state" {
        /// In the renewals table, not yet released to the queue.
        Scheduled => "scheduled",
        /// Sent to the send queue by the scheduler.
        Enqueued => "enqueued",
        /// Waiting for a later attempt (reason says why).
        Deferred => "deferred",
        /// Claimed by a sender whose lease has not ended.
        Leased => "leased",
        /// The provider accepted it. Terminal.
        Delivered => "delivered",
        /// Quarantined in the DLQ (reason says why). Terminal until a redrive.
        DeadLettered => "dead_lettered",
        /// Its business deadline passed before delivery. Terminal.
        Expired => "expired",
        /// The renewal was cancelled or paid meanwhile. Terminal.
        Cancelled => "cancelled",
    }
}

impl ReminderState {
    /// True for states no sender acts on again (a redrive may re-open `dead_lettered`).
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Delivered | Self::DeadLettered | Self::Expired | Self::Cancelled)
    }
}

closed_enum! {
    /// Why a reminder moved, waited or stopped. A closed, documented set.
    ReasonCode, "reason code" {
        /// `deliver_after` has not come yet; deferred until it does.
        NotDue => "not_due",
        /// The shared limiter had no token within this invocation's budget.
        RateLimited => "rate_limited",
        /// The provider answered 429/503 with a `Retry-After` that set the next time.
        ProviderRetryAfter => "provider_retry_after",
        /// The provider answered 429/503 or refused the connection, without `Retry-After`; or,
        /// with a provider without keys, nothing reached it (its client or the call mark failed
        /// before the call: no attempt spent).
        ProviderTransient => "provider_transient",
        /// The request may have reached the provider (timeout, 5xx after send, a worker that
        /// died mid-call). Retried with the same key where the provider honours keys; without
        /// keys under `at_most_once`, quarantined for an operator to decide (docs/design.md#providers-and-idempotency-profiles).
        ProviderIndeterminate => "provider_indeterminate",
        /// Another live worker holds the lease; deferred until it ends.
        ClaimedElsewhere => "claimed_elsewhere",
        /// `deliver_by` passed before delivery.
        BusinessDeadlineExpired => "business_deadline_expired",
        /// The next safe attempt would land at or after `deliver_by`.
        NoSafeRetryWindow => "no_safe_retry_window",
        /// The attempt budget is spent.
        AttemptLimit => "attempt_limit",
        /// The provider answered a 4xx that retrying cannot fix.
        ClassifiedPermanent => "classified_permanent",
        /// The message body failed the contract decoder.
        Malformed => "malformed",
        /// The renewal was cancelled or paid meanwhile.
        Cancelled => "cancelled",
        /// SQS moved it after `maxReceiveCount` receives (a crash loop, not policy).
        ReceiveCountBackstop => "receive_count_backstop",
        /// The scheduler saw the renewal only after its `deliver_by` (missed or paused ticks).
        MissedScheduleWindow => "missed_schedule_window",
        /// Too little invocation time was left to call the provider safely; retried at once.
        InvocationBudget => "invocation_budget",
        /// The provider already has this reminder (ledger says delivered); the copy was acknowledged.
        SuppressedDuplicate => "suppressed_duplicate",
        /// An operator paused delivery (`punctual pause`); deferred without spending an attempt.
        OperatorPause => "operator_pause",
        /// The provider refused the credentials (401) even with a freshly read token: the sender
        /// paused the fleet (audited) and deferred the reminder for after an operator's fix; also
        /// the DLQ reason of such a refusal met at the attempt limit.
        ProviderCredentials => "provider_credentials",
        /// The provider refused the whole account (SES: account suspended, sending paused, the
        /// MAIL FROM domain not verified): the sender paused the fleet and deferred the reminder
        /// (dead-lettered with this reason at the attempt limit, like `provider_credentials`).
        ProviderAccount => "provider_account",
        /// The renewal's `recipient_ref` resolves to no address (recipients table), or the renewal
        /// has none: nothing was sent; fix the recipient, then redrive.
        RecipientUnknown => "recipient_unknown",
        /// The renewal was rescheduled (re-imported with other times or another due date) after
        /// this copy was released: the copy belongs to a version the table no longer holds and
        /// was dropped without an attempt; the current version is released at its own time.
        Rescheduled => "rescheduled",
        /// The renewal's channel is not one the deployment declares (`CHANNELS`): nothing was
        /// sent; declare the channel or fix the renewal, then redrive.
        UnknownChannel => "unknown_channel",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_code_round_trips_through_its_wire_string() {
        for code in ReasonCode::ALL {
            assert_eq!(code.as_str().parse::<ReasonCode>(), Ok(*code));
            assert_eq!(serde_json::to_string(code).unwrap(), format!("\"{}\"", code.as_str()));
        }
        for state in ReminderState::ALL {
            assert_eq!(state.as_str().parse::<ReminderState>(), Ok(*state));
        }
    }

    #[test]
    fn unknown_reason_code_is_named() {
        let e = "throttled".parse::<ReasonCode>().unwrap_err();
        assert_eq!(e.to_string(), "unknown reason code `throttled`");
    }

    #[test]
    fn wire_strings_are_unique() {
        let mut seen = std::collections::HashSet::new();
        assert!(ReasonCode::ALL.iter().all(|c| seen.insert(c.as_str())));
    }

    #[test]
    fn only_final_states_are_terminal() {
        let terminal: Vec<_> = ReminderState::ALL.iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(
            terminal,
            [
                &ReminderState::Delivered,
                &ReminderState::DeadLettered,
                &ReminderState::Expired,
                &ReminderState::Cancelled
            ]
        );
    }
}
