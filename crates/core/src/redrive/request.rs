//! The redrive request at the wire edge (docs/design.md#redrive): [`RedriveRequestWire`] is the
//! serde type the Lambda deserialises and the CLI fills from its flags — one path, the same
//! refusals — and [`RedriveRequestWire::validate`] is the one validation pass that turns it
//! into a [`RedriveRequest`] or lists **every** problem, each naming its field.
//!
//! Why not `#[serde(deny_unknown_fields)]` with plain field types: serde stops at the first
//! unknown field or wrong type, and an operator fixing a refused request one problem per
//! invocation is what the design rules out. So unknown fields are captured (and refused, each
//! named) and every field is a [`Field`], which keeps a value of the wrong type to report it
//! beside the others. Unknown fields are still refused, never ignored.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::contract::ReminderMessage;
use crate::ids::{ReminderId, TenantId};
use crate::reason::ReasonCode;

/// Hard caps from configuration; a request above them is refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedriveCaps {
    /// Most messages one request may move (`REDRIVE_MAX_MESSAGES`).
    pub max_messages: u32,
    /// Highest rate a request may ask for: min(`REDRIVE_MAX_PER_SECOND`, redrive share × quota).
    pub max_per_second: f64,
}

impl RedriveCaps {
    /// `REDRIVE_MAX_MESSAGES`'s default.
    pub const DEFAULT_MAX_MESSAGES: u32 = 1000;
    /// `REDRIVE_MAX_PER_SECOND`'s default.
    pub const DEFAULT_MAX_PER_SECOND: f64 = 20.0;

    /// The caps for `max_messages` and a configured `max_rate`, the rate held within the
    /// limiter's redrive share of its quota.
    pub fn within_share(max_messages: u32, max_rate: f64, limiter: &crate::limiter::LimiterSettings) -> Self {
        Self { max_messages, max_per_second: max_rate.min(limiter.redrive_share * limiter.quota) }
    }
}

/// Which dead letters a request selects (all lists: any of; empty: no constraint).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Selection {
    /// DLQ `reason` attribute.
    pub failure_reasons: Vec<ReasonCode>,
    /// Tenants.
    pub tenants: Vec<TenantId>,
    /// Reminders.
    pub reminder_ids: Vec<ReminderId>,
    /// Channels (a letter's message `channel`): a redrive of one channel at a time goes at
    /// that channel's own cap, not held behind a slower channel's letters.
    pub channels: Vec<String>,
    /// First enqueued strictly before.
    pub enqueued_before: Option<DateTime<Utc>>,
    /// First enqueued at or after.
    pub enqueued_after: Option<DateTime<Utc>>,
}

/// When to abort after the canary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AbortIf {
    /// Abort when more than this fraction of settled redriven reminders failed again.
    pub failure_ratio: f64,
    /// Abort when more than this fraction of their provider answers were 429.
    pub ratio_429: Option<f64>,
    /// Outcomes are checked every `window` moves.
    pub window: u32,
}

impl Default for AbortIf {
    fn default() -> Self {
        Self { failure_ratio: 0.0, ratio_429: None, window: 20 }
    }
}

/// A validated redrive request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RedriveRequest {
    /// Why (required, non-empty).
    pub reason: String,
    /// Who (required, non-empty).
    pub owner: String,
    /// What.
    pub selection: Selection,
    /// Most to move.
    pub max_messages: u32,
    /// Pace.
    pub max_per_second: f64,
    /// Moved first and watched before the rest.
    pub canary: u32,
    /// How long to wait for the canary to settle (`canary_timeout_seconds`, 1..=840; default:
    /// the service's, 60 s). A canary joins the back of the send queue: behind a large
    /// backlog it needs about as long as the backlog takes to drain.
    pub canary_timeout: Option<Duration>,
    /// Abort thresholds.
    pub abort_if: AbortIf,
    /// Count only; move nothing.
    pub dry_run: bool,
}

// ---- the wire type -------------------------------------------------------------------------

/// One field of a wire request: absent (or `null`), a value of the expected type, or a value of
/// another type, kept so validation can report it with every other problem.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Field<T> {
    /// Not given, or `null`.
    #[default]
    Absent,
    /// Given with the expected type.
    Given(T),
    /// Given with another type.
    Wrong(Value),
}

impl<T> Field<T> {
    /// True when not given.
    pub fn is_absent(&self) -> bool {
        matches!(self, Self::Absent)
    }
}

impl<T> From<Option<T>> for Field<T> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Self::Absent, Self::Given)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        if v.is_null() {
            return Ok(Self::Absent);
        }
        Ok(match T::deserialize(&v) {
            Ok(t) => Self::Given(t),
            Err(_) => Self::Wrong(v),
        })
    }
}

impl<T: Serialize> Serialize for Field<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Absent => s.serialize_none(),
            Self::Given(t) => t.serialize(s),
            Self::Wrong(v) => v.serialize(s),
        }
    }
}

/// The `selection` object on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SelectionWire {
    /// DLQ reasons (reason codes).
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub failure_reasons: Field<Vec<Value>>,
    /// Tenant ids.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub tenants: Field<Vec<Value>>,
    /// Reminder ids.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub reminder_ids: Field<Vec<Value>>,
    /// Channel names.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub channels: Field<Vec<Value>>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub enqueued_before: Field<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub enqueued_after: Field<String>,
    /// Anything else: refused.
    #[serde(flatten, skip_serializing)]
    pub unknown: BTreeMap<String, Value>,
}

/// The `abort_if` object on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AbortIfWire {
    /// In [0, 1].
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub failure_ratio: Field<f64>,
    /// In [0, 1].
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub ratio_429: Field<f64>,
    /// In 1..=10000.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub window: Field<u64>,
    /// Anything else: refused.
    #[serde(flatten, skip_serializing)]
    pub unknown: BTreeMap<String, Value>,
}

/// A redrive request as it arrives (the invocation payload) or as the CLI builds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RedriveRequestWire {
    /// Why (required).
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub reason: Field<String>,
    /// Who (required).
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub owner: Field<String>,
    /// Which dead letters.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub selection: Field<SelectionWire>,
    /// Most to move (required).
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub max_messages: Field<u64>,
    /// Pace (required).
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub max_per_second: Field<f64>,
    /// Canary size.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub canary: Field<u64>,
    /// How long to watch the canary.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub canary_timeout_seconds: Field<u64>,
    /// Abort thresholds.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub abort_if: Field<AbortIfWire>,
    /// Count only.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    pub dry_run: Field<bool>,
    /// Anything else: refused.
    #[serde(flatten, skip_serializing)]
    pub unknown: BTreeMap<String, Value>,
}

fn text(f: Field<String>, key: &str, p: &mut Vec<String>) -> String {
    match f {
        Field::Given(s) if !s.trim().is_empty() => s.trim().to_owned(),
        Field::Given(_) => {
            p.push(format!("{key} must not be empty"));
            String::new()
        }
        Field::Absent => {
            p.push(format!("{key} is required"));
            String::new()
        }
        Field::Wrong(_) => {
            p.push(format!("{key} must be a string"));
            String::new()
        }
    }
}

fn list<T>(f: Field<Vec<Value>>, key: &str, parse: impl Fn(&str) -> Result<T, String>, p: &mut Vec<String>) -> Vec<T> {
    match f {
        Field::Absent => Vec::new(),
        Field::Given(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v.as_str().map(&parse) {
                Some(Ok(t)) => Some(t),
                Some(Err(e)) => {
                    p.push(format!("selection.{key}[{i}]: {e}"));
                    None
                }
                None => {
                    p.push(format!("selection.{key}[{i}] must be a string"));
                    None
                }
            })
            .collect(),
        Field::Wrong(_) => {
            p.push(format!("selection.{key} must be an array of strings"));
            Vec::new()
        }
    }
}

fn instant(f: Field<String>, key: &str, p: &mut Vec<String>) -> Option<DateTime<Utc>> {
    match f {
        Field::Absent => None,
        Field::Given(s) => match DateTime::parse_from_rfc3339(&s) {
            Ok(t) => Some(t.with_timezone(&Utc)),
            Err(_) => {
                p.push(format!("selection.{key} must be an RFC 3339 instant, got {s:?}"));
                None
            }
        },
        Field::Wrong(_) => {
            p.push(format!("selection.{key} must be an RFC 3339 string"));
            None
        }
    }
}

fn ratio(f: Field<f64>, key: &str, p: &mut Vec<String>) -> Option<f64> {
    match f {
        Field::Absent => None,
        Field::Given(x) if (0.0..=1.0).contains(&x) => Some(x),
        _ => {
            p.push(format!("abort_if.{key} must be a number in [0, 1]"));
            None
        }
    }
}

impl RedriveRequestWire {
    /// Parses an invocation payload. Anything but a JSON object is refused as a whole.
    pub fn from_value(v: Value) -> Result<Self, Vec<String>> {
        if !v.is_object() {
            return Err(vec!["the request must be a JSON object".into()]);
        }
        serde_json::from_value(v).map_err(|e| vec![format!("unreadable request: {e}")])
    }

    /// The one validation pass: the request against `caps`, or **every** problem found, each
    /// naming its field.
    pub fn validate(self, caps: RedriveCaps) -> Result<RedriveRequest, Vec<String>> {
        let mut p: Vec<String> = self.unknown.keys().map(|k| format!("unknown field {k:?}")).collect();
        let reason = text(self.reason, "reason", &mut p);
        let owner = text(self.owner, "owner", &mut p);
        let sel = match self.selection {
            Field::Given(s) => s,
            Field::Absent => SelectionWire::default(),
            Field::Wrong(_) => {
                p.push("selection must be an object".into());
                SelectionWire::default()
            }
        };
        p.extend(sel.unknown.keys().map(|k| format!("unknown field selection.{k}")));
        let selection = Selection {
            failure_reasons: list(
                sel.failure_reasons,
                "failure_reasons",
                |s| s.parse::<ReasonCode>().map_err(|e| e.to_string()),
                &mut p,
            ),
            tenants: list(sel.tenants, "tenants", |s| TenantId::parse(s).map_err(|e| e.to_string()), &mut p),
            reminder_ids: list(
                sel.reminder_ids,
                "reminder_ids",
                |s| ReminderId::parse(s).map_err(|e| e.to_string()),
                &mut p,
            ),
            channels: list(
                sel.channels,
                "channels",
                |s| {
                    crate::ids::is_channel_name(s)
                        .then(|| s.to_owned())
                        .ok_or_else(|| format!("{s:?} is not a channel name ([a-z][a-z0-9-]*, at most 32)"))
                },
                &mut p,
            ),
            enqueued_before: instant(sel.enqueued_before, "enqueued_before", &mut p),
            enqueued_after: instant(sel.enqueued_after, "enqueued_after", &mut p),
        };
        if let (Some(a), Some(b)) = (selection.enqueued_after, selection.enqueued_before)
            && a >= b
        {
            p.push("selection.enqueued_after must be before selection.enqueued_before".into());
        }
        let max_messages = match self.max_messages {
            Field::Absent => {
                p.push("max_messages is required".into());
                0
            }
            Field::Given(n) if n >= 1 && n <= u64::from(caps.max_messages) => n as u32,
            _ => {
                p.push(format!("max_messages must be an integer in 1..={} (the configured cap)", caps.max_messages));
                0
            }
        };
        let max_per_second = match self.max_per_second {
            Field::Absent => {
                p.push("max_per_second is required".into());
                0.0
            }
            Field::Given(r) if r > 0.0 && r <= caps.max_per_second => r,
            _ => {
                p.push(format!(
                    "max_per_second must be a number in (0, {}] (the redrive share of the quota)",
                    caps.max_per_second
                ));
                0.0
            }
        };
        let canary = match self.canary {
            Field::Absent => 0,
            Field::Given(n) if max_messages == 0 || n <= u64::from(max_messages) => n as u32,
            _ => {
                p.push("canary must be an integer no larger than max_messages".into());
                0
            }
        };
        let canary_timeout = match self.canary_timeout_seconds {
            Field::Absent => None,
            Field::Given(n) if (1..=840).contains(&n) => Some(Duration::from_secs(n)),
            _ => {
                p.push("canary_timeout_seconds must be an integer in 1..=840 (a run lasts at most 15 minutes)".into());
                None
            }
        };
        let mut abort_if = AbortIf::default();
        match self.abort_if {
            Field::Absent => {}
            Field::Given(a) => {
                p.extend(a.unknown.keys().map(|k| format!("unknown field abort_if.{k}")));
                if let Some(x) = ratio(a.failure_ratio, "failure_ratio", &mut p) {
                    abort_if.failure_ratio = x;
                }
                abort_if.ratio_429 = ratio(a.ratio_429, "ratio_429", &mut p);
                match a.window {
                    Field::Absent => {}
                    Field::Given(w) if (1..=10_000).contains(&w) => abort_if.window = w as u32,
                    _ => p.push("abort_if.window must be an integer in 1..=10000".into()),
                }
            }
            Field::Wrong(_) => p.push("abort_if must be an object".into()),
        }
        let dry_run = match self.dry_run {
            Field::Absent => false,
            Field::Given(b) => b,
            Field::Wrong(_) => {
                p.push("dry_run must be true or false".into());
                false
            }
        };
        if p.is_empty() {
            Ok(RedriveRequest {
                reason,
                owner,
                selection,
                max_messages,
                max_per_second,
                canary,
                canary_timeout,
                abort_if,
                dry_run,
            })
        } else {
            Err(p)
        }
    }
}

impl RedriveRequest {
    /// Parses and validates a JSON request against `caps`. On failure returns **every**
    /// problem found, each naming its field.
    pub fn parse(json: &str, caps: RedriveCaps) -> Result<Self, Vec<String>> {
        let value: Value = serde_json::from_str(json).map_err(|e| vec![format!("not JSON: {e}")])?;
        Self::from_value(value, caps)
    }

    /// Validates an invocation payload (see [`RedriveRequest::parse`]).
    pub fn from_value(value: Value, caps: RedriveCaps) -> Result<Self, Vec<String>> {
        RedriveRequestWire::from_value(value)?.validate(caps)
    }
}

impl Selection {
    /// The request names `provider_indeterminate`: the operator decided that those calls'
    /// effects did not happen, so their letters may be resent (only they: a broad redrive skips
    /// them, and the ledger still refuses a resend over a call made after this redrive).
    pub fn names_unknown_outcomes(&self) -> bool {
        self.failure_reasons.contains(&ReasonCode::ProviderIndeterminate)
    }

    /// True when a dead letter with this message, DLQ reason and first-enqueued time is selected.
    pub fn matches(
        &self,
        msg: &ReminderMessage,
        reason: Option<ReasonCode>,
        first_enqueued: Option<DateTime<Utc>>,
    ) -> bool {
        let any = |empty: bool, hit: bool| empty || hit;
        any(self.failure_reasons.is_empty(), reason.is_some_and(|r| self.failure_reasons.contains(&r)))
            && any(self.tenants.is_empty(), self.tenants.contains(&msg.tenant_id))
            && any(self.reminder_ids.is_empty(), self.reminder_ids.contains(&msg.reminder_id))
            && any(self.channels.is_empty(), msg.channel.as_ref().is_some_and(|c| self.channels.contains(c)))
            && self.enqueued_before.is_none_or(|b| first_enqueued.is_some_and(|t| t < b))
            && self.enqueued_after.is_none_or(|a| first_enqueued.is_some_and(|t| t >= a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: RedriveCaps = RedriveCaps { max_messages: 1000, max_per_second: 20.0 };

    /// A selection by channel: names checked, letters matched on their message's channel.
    #[test]
    fn a_selection_by_channel_matches_the_letters_channel() {
        let r = RedriveRequest::parse(
            r#"{"reason":"sms outage over","owner":"oncall","max_messages":5,"max_per_second":1,
                "selection":{"channels":["sms"]}}"#,
            CAPS,
        )
        .unwrap();
        let at = DateTime::parse_from_rfc3339("2026-12-01T14:00:00Z").unwrap().with_timezone(&Utc);
        let base = crate::testing::message("r1", at, at + chrono::TimeDelta::hours(2));
        let sms = ReminderMessage { channel: Some("sms".into()), ..base };
        let email = ReminderMessage { channel: Some("email".into()), ..sms.clone() };
        let none = ReminderMessage { channel: None, ..sms.clone() };
        let m = |msg: &ReminderMessage| r.selection.matches(msg, None, None);
        assert_eq!((m(&sms), m(&email), m(&none)), (true, false, false));
        let e = RedriveRequest::parse(
            r#"{"reason":"r","owner":"o","max_messages":1,"max_per_second":1,"selection":{"channels":["SMS",3]}}"#,
            CAPS,
        )
        .unwrap_err();
        assert!(
            e[0].contains("selection.channels[0]") && e[1].contains("selection.channels[1] must be a string"),
            "{e:?}"
        );
    }

    #[test]
    fn a_valid_request_parses_with_defaults() {
        let r = RedriveRequest::parse(
            r#"{"reason":"provider outage INC-42","owner":"ops@example.com","max_messages":50,"max_per_second":5,
                "selection":{"failure_reasons":["no_safe_retry_window"],"tenants":["acme"]},"canary":2}"#,
            CAPS,
        )
        .unwrap();
        assert_eq!((r.max_messages, r.canary, r.dry_run, r.abort_if.failure_ratio), (50, 2, false, 0.0));
        assert_eq!(r.selection.failure_reasons, vec![ReasonCode::NoSafeRetryWindow]);
    }

    #[test]
    fn every_problem_is_listed() {
        let e = RedriveRequest::parse(
            r#"{"reason":"","max_messages":5000,"max_per_second":50,"canary":-1,"selection":{"tenants":["Bad Tenant"],
                "failure_reasons":["nope"],"enqueued_after":"yesterday"},"abort_if":{"failure_ratio":2},"dry_run":"yes","extra":1}"#,
            CAPS,
        )
        .unwrap_err();
        let all = e.join("\n");
        for needle in [
            "unknown field \"extra\"",
            "reason must not be empty",
            "owner is required",
            "selection.failure_reasons[0]",
            "selection.tenants[0]",
            "selection.enqueued_after must be an RFC 3339",
            "max_messages must be an integer in 1..=1000",
            "max_per_second must be a number in (0, 20]",
            "canary must be an integer",
            "abort_if.failure_ratio must be a number in [0, 1]",
            "dry_run must be true or false",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        assert_eq!(e.len(), 11, "{all}");
        let t = |v: &str| {
            RedriveRequest::parse(
                &format!(
                    r#"{{"reason":"r","owner":"o","max_messages":1,"max_per_second":1,"canary_timeout_seconds":{v}}}"#
                ),
                CAPS,
            )
        };
        assert_eq!(t("300").unwrap().canary_timeout, Some(Duration::from_secs(300)));
        assert!(t("900").unwrap_err()[0].contains("canary_timeout_seconds must be an integer in 1..=840"));
    }

    #[test]
    fn a_request_the_cli_fills_serialises_to_what_the_lambda_accepts() {
        let wire = RedriveRequestWire {
            reason: Field::Given("INC-7".into()),
            owner: Field::Given("ops".into()),
            max_messages: Field::Given(10),
            max_per_second: Field::Given(2.0),
            selection: Field::Given(SelectionWire {
                failure_reasons: Field::Given(vec!["attempt_limit".into()]),
                ..SelectionWire::default()
            }),
            abort_if: Field::Given(AbortIfWire { failure_ratio: Field::Given(0.5), ..AbortIfWire::default() }),
            ..RedriveRequestWire::default()
        };
        let json = serde_json::to_value(&wire).unwrap();
        let direct = wire.validate(CAPS).unwrap();
        let through_json = RedriveRequest::from_value(json, CAPS).unwrap();
        assert_eq!(direct, through_json);
        assert_eq!(direct.selection.failure_reasons, vec![ReasonCode::AttemptLimit]);
    }

    #[test]
    fn unknown_nested_fields_and_non_objects_are_refused() {
        let e = RedriveRequest::parse(
            r#"{"reason":"r","owner":"o","max_messages":1,"max_per_second":1,"selection":{"tenant":"x"},"abort_if":{"ratio":1}}"#,
            CAPS,
        )
        .unwrap_err();
        assert_eq!(e, vec!["unknown field selection.tenant".to_owned(), "unknown field abort_if.ratio".to_owned()]);
        assert_eq!(RedriveRequest::parse("[1]", CAPS).unwrap_err(), vec!["the request must be a JSON object"]);
    }

    #[test]
    fn only_a_selection_naming_the_reason_resends_unknown_outcomes() {
        assert!(!Selection::default().names_unknown_outcomes());
        let named = Selection { failure_reasons: vec![ReasonCode::ProviderIndeterminate], ..Selection::default() };
        assert!(named.names_unknown_outcomes());
    }
}
