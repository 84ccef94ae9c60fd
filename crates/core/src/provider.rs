//! What a provider call can come to, and `Retry-After` parsing. Pure, so the HTTP client, the
//! simulator's provider model and the tests all classify the same way (docs/design.md#the-sender-decision).

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The longest wait a provider's `Retry-After` is honoured for, per message and for the shared
/// limiter's pause alike. A longer value (a day, a date next week: a provider bug or a
/// misconfigured gateway) is not credible enough to send healthy reminders to the DLQ or to
/// stall every tenant: punctual waits this long and asks again (the limiter also slows down on
/// every 429). For a real, long provider outage an operator uses `punctual pause`.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A provider's `Retry-After`, in either of its HTTP forms, resolved against a reference time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// `Retry-After: 7`.
    Seconds(u64),
    /// `Retry-After: Wed, 21 Oct 2026 07:28:00 GMT`.
    At(DateTime<Utc>),
}

impl RetryAfter {
    /// Parses a header value; `None` when it is neither delta-seconds nor an HTTP date.
    pub fn parse(value: &str) -> Option<Self> {
        let v = value.trim();
        if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
            return Some(Self::Seconds(v.parse().unwrap_or(u64::MAX)));
        }
        // IMF-fixdate is a subset of RFC 2822 (which also accepts the obsolete forms HTTP
        // tolerates). A "GMT" zone is required by HTTP; RFC 2822 parsing accepts it.
        DateTime::parse_from_rfc2822(v).ok().map(|t| Self::At(t.with_timezone(&Utc)))
    }

    /// The wait from `now` this header asks for (zero for a date in the past), as asked; the
    /// decision and the limiter honour at most [`MAX_RETRY_AFTER`] of it.
    pub fn delay_from(self, now: DateTime<Utc>) -> Duration {
        match self {
            Self::Seconds(s) => Duration::from_secs(s),
            Self::At(t) => crate::clock::until(now, t),
        }
    }
}

/// How a provider's `X-RateLimit-Reset` is to be read: vendors disagree (GitHub sends epoch
/// seconds, others a delta).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResetForm {
    /// Seconds until the window resets.
    Delta,
    /// The Unix time (seconds) at which it resets.
    Epoch,
    /// A value above [`EPOCH_FLOOR`] is a Unix time (a delta that large would be 31 years;
    /// above 10^12 it is read as Unix milliseconds), anything else a delta. The default: it
    /// reads both common forms right and cannot mistake one for the other in practice.
    #[default]
    Auto,
}

/// Values of `X-RateLimit-Reset` above this (2001-09-09) are Unix times under [`ResetForm::Auto`].
pub const EPOCH_FLOOR: u64 = 1_000_000_000;

impl ResetForm {
    /// `delta`, `epoch` or `auto`.
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim() {
            "delta" => Some(Self::Delta),
            "epoch" => Some(Self::Epoch),
            "auto" => Some(Self::Auto),
            _ => None,
        }
    }

    /// The wait from `now` a reset value asks for.
    fn wait(self, value: u64, now: DateTime<Utc>) -> Duration {
        let at = |secs: i64| {
            DateTime::<Utc>::from_timestamp(secs, 0).map_or(Duration::ZERO, |t| crate::clock::until(now, t))
        };
        match self {
            Self::Delta => Duration::from_secs(value),
            Self::Epoch => at(i64::try_from(value).unwrap_or(i64::MAX)),
            Self::Auto if value > EPOCH_FLOOR * 1000 => at(i64::try_from(value / 1000).unwrap_or(i64::MAX)),
            Self::Auto if value > EPOCH_FLOOR => at(i64::try_from(value).unwrap_or(i64::MAX)),
            Self::Auto => Duration::from_secs(value),
        }
    }
}

/// What a provider's answer headers say about throttling, in every common form:
/// `Retry-After` (RFC 9110: delta-seconds or an HTTP date), the IETF `RateLimit` field
/// (`RateLimit: limit=100, remaining=0, reset=7`, draft-ietf-httpapi-ratelimit-headers) and its
/// older split form (`RateLimit-Remaining` / `RateLimit-Reset`, reset in delta seconds), and the
/// vendor `X-RateLimit-Remaining` / `X-RateLimit-Reset` (reset read per [`ResetForm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThrottleHints {
    /// How long to wait before the next request: `Retry-After`, else the window's reset when
    /// nothing remains.
    pub retry_after: Option<RetryAfter>,
    /// The remaining budget and its reset, when the answer gave both.
    pub budget: Option<RateBudget>,
}

impl ThrottleHints {
    /// Reads the hints from `header` (a case-insensitive lookup) at `now`.
    pub fn read<'h>(header: impl Fn(&str) -> Option<&'h str>, form: ResetForm, now: DateTime<Utc>) -> Self {
        let number = |v: &str| v.trim().parse::<u64>().ok();
        let (mut remaining, mut reset) = (None, None);
        if let Some(field) = header("ratelimit") {
            // `limit=100, remaining=0, reset=7` (a structured-field dictionary; one policy).
            for item in field.split([',', ';']) {
                if let Some((k, v)) = item.split_once('=') {
                    match k.trim() {
                        "remaining" | "r" => remaining = number(v),
                        "reset" | "t" => reset = number(v).map(Duration::from_secs),
                        _ => {}
                    }
                }
            }
        }
        if remaining.is_none() {
            remaining = header("ratelimit-remaining").and_then(number);
        }
        if reset.is_none() {
            // A delta by the IETF draft; some vendors send a Unix time here too, which `auto`
            // tells apart (a 31-year delta is not credible).
            reset = header("ratelimit-reset").and_then(number).map(|v| ResetForm::Auto.wait(v, now));
        }
        if remaining.is_none() {
            remaining = header("x-ratelimit-remaining").and_then(number);
        }
        if reset.is_none() {
            reset = header("x-ratelimit-reset").and_then(number).map(|v| form.wait(v, now));
        }
        let budget = remaining.zip(reset).map(|(remaining, reset)| RateBudget { remaining, reset });
        let retry_after = header("retry-after").and_then(RetryAfter::parse).or_else(|| {
            // No Retry-After: an exhausted window says when to come back.
            budget.filter(|b| b.remaining == 0).map(|b| RetryAfter::Seconds(b.reset.as_secs().max(1)))
        });
        Self { retry_after, budget }
    }
}

/// What a provider said about its remaining quota (`RateLimit-Remaining` / `X-RateLimit-Remaining`
/// with the matching reset), so the shared limiter slows down *before* a 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateBudget {
    /// Requests left in the provider's current window.
    pub remaining: u64,
    /// Until the window resets, from when the answer was read.
    pub reset: Duration,
}

/// What an indeterminate outcome (timeout after send, a 5xx, a connection lost after the
/// request left, a worker that died holding a lease mid-call) leads to when the provider does
/// **not** honour idempotency keys. With a provider that does, the answer is always "resend
/// under the same key": the provider replays its first answer, so there is nothing to choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndeterminatePolicy {
    /// No automatic resend: the reminder goes to the DLQ as `provider_indeterminate` with what
    /// is known, for an operator to decide (a redrive resends; nothing else does). Never two
    /// effects; possibly none.
    #[default]
    AtMostOnce,
    /// Resend like any transient failure, counting each resend that may double an effect
    /// (`PossibleDoubleEffect`). Never none while there is time; possibly two.
    AtLeastOnce,
}

impl IndeterminatePolicy {
    /// `at_most_once` or `at_least_once`.
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim() {
            "at_most_once" => Some(Self::AtMostOnce),
            "at_least_once" => Some(Self::AtLeastOnce),
            _ => None,
        }
    }

    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AtMostOnce => "at_most_once",
            Self::AtLeastOnce => "at_least_once",
        }
    }
}

/// What a provider adapter promises, read by the sender at composition (the port carries it, so
/// configuration cannot claim keys the adapter does not send).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderProfile {
    /// A repeated `Idempotency-Key` gets the first answer replayed, not a second effect.
    pub honours_keys: bool,
}

impl Default for ProviderProfile {
    fn default() -> Self {
        Self { honours_keys: true }
    }
}

/// The result of one provider call, classified (docs/design.md#the-sender-decision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderOutcome {
    /// 2xx: the provider has it.
    Accepted {
        /// HTTP status.
        status: u16,
        /// The provider's receipt (message id), if it returned one.
        receipt: Option<String>,
        /// What the answer said of the remaining quota, if anything.
        budget: Option<RateBudget>,
    },
    /// Determinate transient: 429, 503, or the connection was refused — the request was not
    /// processed and may be retried after `retry_after` (if given).
    Transient {
        /// HTTP status; `None` when no connection was made.
        status: Option<u16>,
        /// The provider's `Retry-After`, if any.
        retry_after: Option<RetryAfter>,
    },
    /// Indeterminate: the request was sent and may have been processed (timeout after send,
    /// a 5xx other than 503, a dropped connection). Retried with the same idempotency key;
    /// never treated as permanent, never as delivered.
    Indeterminate {
        /// HTTP status; `None` for a timeout or dropped connection.
        status: Option<u16>,
    },
    /// Permanent: a 4xx other than 429 (and 408, which is a timeout), or a 3xx (redirects are
    /// not followed). Retrying cannot help.
    Permanent {
        /// HTTP status.
        status: u16,
    },
    /// Determinate and permanent for this reminder, with a reason more specific than a status:
    /// nothing was sent (no address for the recipient), or the provider refused this message
    /// (SES `MessageRejected`, a missing template). Quarantined with `reason` and `detail`.
    Undeliverable {
        /// The DLQ reason.
        reason: crate::reason::ReasonCode,
        /// What the adapter knows (never an address or message content).
        detail: String,
    },
    /// Determinate: the provider refuses the whole account (SES `AccountSuspended`,
    /// `SendingPaused`, `MailFromDomainNotVerified`). Nothing will pass until an operator acts:
    /// the sender pauses the fleet (like a confirmed 401) and defers the reminder.
    AccountBlocked {
        /// What the provider said.
        detail: String,
    },
    /// Determinate: nothing reached the provider — its client failed before calling (the SES
    /// adapter's recipients read, a request that could not be built) or the ledger failed on
    /// the call mark. Not a provider attempt: deferred without spending one. Made by the sender
    /// from such a failure, never answered by an adapter (which returns a `ProviderError`).
    NotSent {
        /// What failed (never an address or message content).
        detail: String,
    },
}

impl ProviderOutcome {
    /// Classifies an HTTP answer by its status.
    pub fn from_status(status: u16, retry_after: Option<RetryAfter>, receipt: Option<String>) -> Self {
        match status {
            200..=299 => Self::Accepted { status, receipt, budget: None },
            429 | 503 => Self::Transient { status: Some(status), retry_after },
            // 408: the server timed out reading our request; it may or may not act on it.
            408 => Self::Indeterminate { status: Some(status) },
            400..=499 => Self::Permanent { status },
            // A redirect is never followed (following turns the POST into a GET, or re-sends
            // it to an address nobody configured) and retrying the same URL gets the same
            // answer: a misconfigured endpoint, permanent until an operator fixes it.
            300..=399 => Self::Permanent { status },
            // 1xx is not an answer a JSON API gives to a POST; treat like 5xx: maybe done.
            _ => Self::Indeterminate { status: Some(status) },
        }
    }

    /// The HTTP status, if an answer came back.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Accepted { status, .. } | Self::Permanent { status } => Some(*status),
            Self::Transient { status, .. } | Self::Indeterminate { status } => *status,
            Self::Undeliverable { .. } | Self::AccountBlocked { .. } | Self::NotSent { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn retry_after_parses_both_http_forms() {
        assert_eq!(RetryAfter::parse("7"), Some(RetryAfter::Seconds(7)));
        assert_eq!(RetryAfter::parse(" 120 "), Some(RetryAfter::Seconds(120)));
        assert_eq!(
            RetryAfter::parse("Wed, 21 Oct 2026 07:28:00 GMT"),
            Some(RetryAfter::At(utc("2026-10-21T07:28:00Z")))
        );
        for bad in ["", "-1", "1.5", "soon", "2026-10-21T07:28:00Z"] {
            assert_eq!(RetryAfter::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_after_delay_is_relative_to_now_and_clamped() {
        let now = utc("2026-10-21T07:27:50Z");
        assert_eq!(RetryAfter::At(utc("2026-10-21T07:28:00Z")).delay_from(now), Duration::from_secs(10));
        assert_eq!(RetryAfter::At(utc("2026-10-21T07:00:00Z")).delay_from(now), Duration::ZERO);
        assert_eq!(RetryAfter::Seconds(7).delay_from(now), Duration::from_secs(7));
        assert_eq!(RetryAfter::parse("99999999999999999999999"), Some(RetryAfter::Seconds(u64::MAX)));
    }

    #[test]
    fn throttle_hints_read_every_common_form() {
        let now = utc("2026-12-01T09:00:00Z");
        let read = |pairs: &[(&str, &str)], form| {
            ThrottleHints::read(
                |name| pairs.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| *v),
                form,
                now,
            )
        };
        let budget = |remaining, secs| Some(RateBudget { remaining, reset: Duration::from_secs(secs) });
        // IETF structured field.
        let h = read(&[("RateLimit", "limit=100, remaining=0, reset=7")], ResetForm::Auto);
        assert_eq!(h, ThrottleHints { retry_after: Some(RetryAfter::Seconds(7)), budget: budget(0, 7) });
        // IETF split fields.
        let h = read(&[("RateLimit-Remaining", "12"), ("RateLimit-Reset", "30")], ResetForm::Auto);
        assert_eq!(h, ThrottleHints { retry_after: None, budget: budget(12, 30) });
        // X-RateLimit, reset as a delta and as an epoch (auto tells them apart).
        let h = read(&[("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", "5")], ResetForm::Auto);
        assert_eq!(h.retry_after, Some(RetryAfter::Seconds(5)));
        let epoch = (now.timestamp() + 42).to_string();
        let h = read(&[("X-RateLimit-Remaining", "3"), ("X-RateLimit-Reset", epoch.as_str())], ResetForm::Auto);
        assert_eq!(h.budget, budget(3, 42));
        let millis = ((now.timestamp() + 42) * 1000).to_string();
        let h = read(&[("X-RateLimit-Remaining", "3"), ("X-RateLimit-Reset", millis.as_str())], ResetForm::Auto);
        assert_eq!(h.budget, budget(3, 42));
        // Forced forms; an epoch in the past waits nothing.
        let h = read(&[("X-RateLimit-Remaining", "3"), ("X-RateLimit-Reset", "5")], ResetForm::Epoch);
        assert_eq!(h.budget, budget(3, 0));
        let h = read(&[("X-RateLimit-Remaining", "3"), ("X-RateLimit-Reset", epoch.as_str())], ResetForm::Delta);
        assert_eq!(h.budget.map(|b| b.reset), Some(Duration::from_secs(now.timestamp() as u64 + 42)));
        // Retry-After wins over a window's reset; garbage is ignored, not guessed at.
        let h = read(&[("Retry-After", "2"), ("RateLimit", "remaining=0, reset=9")], ResetForm::Auto);
        assert_eq!(h.retry_after, Some(RetryAfter::Seconds(2)));
        for junk in ["remaining=-1, reset=x", "", "limit=5"] {
            assert_eq!(read(&[("RateLimit", junk)], ResetForm::Auto), ThrottleHints::default(), "{junk:?}");
        }
        assert_eq!(read(&[("X-RateLimit-Remaining", "0")], ResetForm::Auto), ThrottleHints::default());
        assert_eq!(ResetForm::parse("epoch"), Some(ResetForm::Epoch));
        assert_eq!(ResetForm::parse("unix"), None);
    }

    #[test]
    fn status_classification_table() {
        use ProviderOutcome as P;
        let cases: &[(u16, &str)] = &[
            (200, "accepted"),
            (202, "accepted"),
            (400, "permanent"),
            (401, "permanent"),
            (404, "permanent"),
            (408, "indeterminate"),
            (409, "permanent"),
            (422, "permanent"),
            (429, "transient"),
            (500, "indeterminate"),
            (502, "indeterminate"),
            (503, "transient"),
            (504, "indeterminate"),
            (301, "permanent"),
            (302, "permanent"),
            (303, "permanent"),
            (307, "permanent"),
            (308, "permanent"),
        ];
        for (status, want) in cases {
            let got = match P::from_status(*status, None, None) {
                P::Accepted { .. } => "accepted",
                P::Transient { .. } | P::NotSent { .. } => "transient",
                P::Indeterminate { .. } => "indeterminate",
                P::Permanent { .. } | P::Undeliverable { .. } | P::AccountBlocked { .. } => "permanent",
            };
            assert_eq!(got, *want, "status {status}");
            assert_eq!(P::from_status(*status, None, None).status(), Some(*status));
        }
    }
}
