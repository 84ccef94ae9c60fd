//! The delivery contract (docs/design.md#the-message-contract-v1): the SQS message body, its validating decoder and encoder.
//!
//! The body carries identifiers and the contract, never recipient data or credentials. The
//! decoder names exactly what is wrong so an operator reading the DLQ attribute can fix the
//! producer without opening the body. Unknown fields are ignored (a newer producer may add
//! optional fields within one version); an unknown `v` is refused.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::ids::{CorrelationId, IdError, RedriveId, ReminderId, ReminderKind, RenewalId, TenantId};

/// The only contract version this build understands.
pub const CONTRACT_VERSION: u64 = 1;

/// Largest body accepted, in bytes. A v1 body is ~400 bytes; anything near SQS's 256 KiB limit
/// is not a reminder.
pub const MAX_BODY_BYTES: usize = 8 * 1024;

/// Upper bound on the `attempt` hint; the ledger, not this field, enforces the real limit.
pub const MAX_ATTEMPT_HINT: u32 = 1_000;

/// Longest redrive `reason` and `owner` accepted.
pub const MAX_REDRIVE_TEXT: usize = 256;

/// One reminder attempt chain, decoded and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReminderMessage {
    /// Deterministic id; the idempotency key is derived from it.
    pub reminder_id: ReminderId,
    /// Where the sender looks up the recipient (renewals table).
    pub renewal_id: RenewalId,
    /// The renewal's tenant.
    pub tenant_id: TenantId,
    /// The reminder kind.
    pub kind: ReminderKind,
    /// Not to be delivered before this instant.
    pub deliver_after: DateTime<Utc>,
    /// Not to be delivered at or after this instant. Always after `deliver_after`.
    pub deliver_by: DateTime<Utc>,
    /// Provider attempts already made (a hint; the ledger is the truth).
    pub attempt: u32,
    /// When the scheduler first enqueued the chain.
    pub first_enqueued: DateTime<Utc>,
    /// Carried through every transition.
    pub correlation_id: CorrelationId,
    /// Present when an operator redrive re-released the message.
    pub redrive: Option<RedriveStamp>,
    /// The renewal's channel when the scheduler released it (absent from older bodies): which
    /// queue the message travels on when its channel has a queue of its own
    /// (docs/design.md#channels). The renewal row stays the truth the sender routes the call
    /// by; this only routes the message.
    pub channel: Option<String>,
}

/// The redrive that re-released a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedriveStamp {
    /// The redrive run's id (its audit record key).
    pub id: RedriveId,
    /// Why the operator redrove (non-empty).
    pub reason: String,
    /// Who redrove (non-empty).
    pub owner: String,
    /// Provider attempts the reminder had made when this redrive re-released it: the base of
    /// the redrive's fresh budget (`base_attempt + max_attempts`). Fixed once, at the redrive,
    /// so the budget does not move with every requeued copy's `attempt`. Optional on the wire:
    /// a stamp written before the field existed decodes with the message's `attempt`.
    pub base_attempt: u32,
    /// The operator chose to resend reminders whose last call's outcome is unknown (the
    /// request named `provider_indeterminate`): the copy may call a provider without keys
    /// again. Absent on the wire means false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resend_unknown: bool,
}

/// What is wrong with a message body. Each case names its class; the `Display` text is what
/// lands in the DLQ's `detail` attribute.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MalformedMessage {
    /// The body is larger than [`MAX_BODY_BYTES`].
    #[error("body is {len} bytes; at most {max} allowed")]
    TooLarge { len: usize, max: usize },
    /// The body is not JSON at all.
    #[error("body is not valid JSON: {detail}")]
    NotJson { detail: String },
    /// The body is JSON but not an object.
    #[error("body must be a JSON object, found {found}")]
    NotAnObject { found: &'static str },
    /// `v` is missing.
    #[error("missing contract version field `v`")]
    MissingVersion,
    /// `v` is present but not a non-negative integer.
    #[error("contract version `v` must be a non-negative integer, found {found}")]
    VersionNotInteger { found: String },
    /// `v` is a version this build does not understand.
    #[error("unsupported contract version {0} (this build understands version {CONTRACT_VERSION})")]
    UnsupportedVersion(u64),
    /// A required field is absent (or `null`).
    #[error("missing required field `{0}`")]
    MissingField(&'static str),
    /// A field has the wrong JSON type.
    #[error("field `{field}` must be {expected}, found {found}")]
    WrongType { field: &'static str, expected: &'static str, found: &'static str },
    /// An id field fails its newtype's validation.
    #[error("field `{field}` {source}")]
    InvalidId {
        field: &'static str,
        #[source]
        source: IdError,
    },
    /// A timestamp is not RFC 3339 with an explicit offset.
    #[error("field `{field}` must be an RFC 3339 timestamp with offset (e.g. 2026-12-01T09:00:00Z), found {value:?}")]
    InvalidTimestamp { field: &'static str, value: String },
    /// `deliver_by <= deliver_after`: an impossible window.
    #[error("deliver_by must be after deliver_after (deliver_after={deliver_after}, deliver_by={deliver_by})")]
    DeadlineNotAfterRelease { deliver_after: String, deliver_by: String },
    /// `attempt` is out of range.
    #[error("field `attempt` must be between 0 and {MAX_ATTEMPT_HINT}, found {found}")]
    AttemptOutOfRange { found: String },
    /// `first_enqueued` is after `deliver_by`, which no scheduler produces.
    #[error("first_enqueued ({first_enqueued}) must not be after deliver_by ({deliver_by})")]
    EnqueuedAfterDeadline { first_enqueued: String, deliver_by: String },
    /// `channel` is empty or longer than [`MAX_CHANNEL_CHARS`].
    #[error("field `channel` must be 1 to {MAX_CHANNEL_CHARS} characters, found {found:?}")]
    InvalidChannel { found: String },
    /// A redrive `reason` or `owner` is empty or too long.
    #[error("field `redrive.{field}` must be 1 to {MAX_REDRIVE_TEXT} characters")]
    InvalidRedriveText { field: &'static str },
}

/// How a JSON value's type is named in an error.
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Longest excerpt of a rejected value quoted in an error.
const MAX_EXCERPT: usize = 64;

/// `s`, cut to [`MAX_EXCERPT`] characters for an error.
pub(crate) fn excerpt(s: &str) -> String {
    match s.char_indices().nth(MAX_EXCERPT) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

fn field<'a>(obj: &'a Map<String, Value>, name: &'static str) -> Result<&'a Value, MalformedMessage> {
    match obj.get(name) {
        None | Some(Value::Null) => Err(MalformedMessage::MissingField(name)),
        Some(v) => Ok(v),
    }
}

fn string<'a>(obj: &'a Map<String, Value>, name: &'static str) -> Result<&'a str, MalformedMessage> {
    let v = field(obj, name)?;
    v.as_str().ok_or(MalformedMessage::WrongType { field: name, expected: "a string", found: json_type(v) })
}

fn id<T>(
    obj: &Map<String, Value>,
    name: &'static str,
    parse: fn(String) -> Result<T, IdError>,
) -> Result<T, MalformedMessage> {
    parse(string(obj, name)?.to_owned()).map_err(|source| MalformedMessage::InvalidId { field: name, source })
}

fn instant(obj: &Map<String, Value>, name: &'static str) -> Result<DateTime<Utc>, MalformedMessage> {
    let s = string(obj, name)?;
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| MalformedMessage::InvalidTimestamp { field: name, value: excerpt(s) })
}

fn redrive_text(obj: &Map<String, Value>, name: &'static str) -> Result<String, MalformedMessage> {
    let v = field(obj, name).map_err(|_| MalformedMessage::InvalidRedriveText { field: name })?;
    let s = v.as_str().ok_or(MalformedMessage::WrongType {
        field: if name == "reason" { "redrive.reason" } else { "redrive.owner" },
        expected: "a string",
        found: json_type(v),
    })?;
    let trimmed = s.trim();
    if trimmed.is_empty() || s.chars().count() > MAX_REDRIVE_TEXT {
        return Err(MalformedMessage::InvalidRedriveText { field: name });
    }
    Ok(s.to_owned())
}

/// `redrive.base_attempt`: an integer in `0..=MAX_ATTEMPT_HINT`; absent (a stamp from before
/// the field existed) means the message's own `attempt`.
fn base_attempt(obj: &Map<String, Value>, attempt: u32) -> Result<u32, MalformedMessage> {
    const EXPECTED: &str = "an integer between 0 and 1000";
    const _: () = assert!(MAX_ATTEMPT_HINT == 1_000, "keep EXPECTED in step");
    match obj.get("base_attempt") {
        None | Some(Value::Null) => Ok(attempt),
        Some(v) => v.as_u64().and_then(|a| u32::try_from(a).ok()).filter(|a| *a <= MAX_ATTEMPT_HINT).ok_or(
            MalformedMessage::WrongType { field: "redrive.base_attempt", expected: EXPECTED, found: json_type(v) },
        ),
    }
}

/// The longest `channel` a message carries, in characters: twice what an import accepts (32),
/// so every renewal's channel fits.
pub const MAX_CHANNEL_CHARS: usize = 64;

/// Whether `channel` travels in a message: any text of 1 to [`MAX_CHANNEL_CHARS`] characters —
/// the import's own rule, widened, so no channel a renewal may hold makes its message
/// undecodable (a malformed message is dead-lettered before its ledger record, beyond redrive).
pub fn channel_fits(channel: &str) -> bool {
    !channel.is_empty() && channel.chars().count() <= MAX_CHANNEL_CHARS
}

/// Format every instant the same way on the wire: UTC, `Z`, millisecond precision.
pub fn format_instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

impl ReminderMessage {
    /// Decodes and validates a message body. Checks run in a fixed order (size, JSON, version,
    /// fields in contract order, cross-field rules) so the same body always reports the same
    /// first problem.
    pub fn decode(body: &str) -> Result<Self, MalformedMessage> {
        if body.len() > MAX_BODY_BYTES {
            return Err(MalformedMessage::TooLarge { len: body.len(), max: MAX_BODY_BYTES });
        }
        Self::decode_plain(body).map_or_else(|| Self::decode_tree(body), Ok)
    }

    /// The common body — an object of the contract's fields only, each of the right type, no
    /// escape in a string, no redrive stamp — decoded straight into fields borrowed from the
    /// body instead of through a JSON tree (the tree costs a map and a string per field: a tenth
    /// of the simulator's CPU at a million reminders). `None` for anything else, including every
    /// body `decode_tree` refuses: it then decodes the body and names the first problem, so
    /// which path read a body never changes what `decode` answers (a test compares the two).
    fn decode_plain(body: &str) -> Option<Self> {
        // An unknown field sends the body to the tree too: serde skips an ignored value with
        // fewer checks than the tree reads it (no depth limit, numbers unconverted, surrogates
        // unchecked), so a body the tree refuses as JSON would pass here.
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Plain<'a> {
            v: u64,
            reminder_id: &'a str,
            renewal_id: &'a str,
            tenant_id: &'a str,
            kind: &'a str,
            deliver_after: &'a str,
            deliver_by: &'a str,
            attempt: u64,
            first_enqueued: &'a str,
            correlation_id: &'a str,
            /// Any stamp sends the body to the tree (a redrive's copies are few).
            redrive: Option<serde::de::IgnoredAny>,
            #[serde(borrow)]
            channel: Option<&'a str>,
        }
        // A derived struct also reads a JSON array, field by field: only an object may pass.
        if !body.starts_with('{') {
            return None;
        }
        let p: Plain<'_> = serde_json::from_str(body).ok()?;
        if p.v != CONTRACT_VERSION || p.redrive.is_some() {
            return None;
        }
        let at = |s: &str| DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc));
        let attempt = u32::try_from(p.attempt).ok().filter(|a| *a <= MAX_ATTEMPT_HINT)?;
        let channel = match p.channel {
            Some(c) if !channel_fits(c) => return None,
            c => c.map(str::to_owned),
        };
        let (deliver_after, deliver_by, first_enqueued) =
            (at(p.deliver_after)?, at(p.deliver_by)?, at(p.first_enqueued)?);
        if deliver_by <= deliver_after || first_enqueued > deliver_by {
            return None;
        }
        Some(Self {
            reminder_id: ReminderId::parse(p.reminder_id.to_owned()).ok()?,
            renewal_id: RenewalId::parse(p.renewal_id.to_owned()).ok()?,
            tenant_id: TenantId::parse(p.tenant_id.to_owned()).ok()?,
            kind: ReminderKind::parse(p.kind.to_owned()).ok()?,
            deliver_after,
            deliver_by,
            attempt,
            first_enqueued,
            correlation_id: CorrelationId::parse(p.correlation_id.to_owned()).ok()?,
            redrive: None,
            channel,
        })
    }

    /// Decodes any body through a JSON tree, checking in the fixed order `decode` promises.
    fn decode_tree(body: &str) -> Result<Self, MalformedMessage> {
        let value: Value =
            serde_json::from_str(body).map_err(|e| MalformedMessage::NotJson { detail: e.to_string() })?;
        let Value::Object(obj) = &value else {
            return Err(MalformedMessage::NotAnObject { found: json_type(&value) });
        };
        let v = match obj.get("v") {
            None | Some(Value::Null) => return Err(MalformedMessage::MissingVersion),
            Some(v) => v,
        };
        let version =
            v.as_u64().ok_or_else(|| MalformedMessage::VersionNotInteger { found: excerpt(&v.to_string()) })?;
        if version != CONTRACT_VERSION {
            return Err(MalformedMessage::UnsupportedVersion(version));
        }

        let reminder_id = id(obj, "reminder_id", ReminderId::parse)?;
        let renewal_id = id(obj, "renewal_id", RenewalId::parse)?;
        let tenant_id = id(obj, "tenant_id", TenantId::parse)?;
        let kind = id(obj, "kind", ReminderKind::parse)?;
        let deliver_after = instant(obj, "deliver_after")?;
        let deliver_by = instant(obj, "deliver_by")?;
        let attempt_v = field(obj, "attempt")?;
        let attempt = match attempt_v {
            Value::Number(n) => n
                .as_u64()
                .and_then(|a| u32::try_from(a).ok())
                .filter(|a| *a <= MAX_ATTEMPT_HINT)
                .ok_or_else(|| MalformedMessage::AttemptOutOfRange { found: excerpt(&n.to_string()) })?,
            other => {
                return Err(MalformedMessage::WrongType {
                    field: "attempt",
                    expected: "an integer",
                    found: json_type(other),
                });
            }
        };
        let first_enqueued = instant(obj, "first_enqueued")?;
        let correlation_id = id(obj, "correlation_id", CorrelationId::parse)?;
        let redrive = match obj.get("redrive") {
            None | Some(Value::Null) => None,
            Some(Value::Object(r)) => Some(RedriveStamp {
                id: RedriveId::parse(string(r, "id").map_err(|e| match e {
                    MalformedMessage::MissingField(_) => MalformedMessage::MissingField("redrive.id"),
                    MalformedMessage::WrongType { expected, found, .. } => {
                        MalformedMessage::WrongType { field: "redrive.id", expected, found }
                    }
                    other => other,
                })?)
                .map_err(|source| MalformedMessage::InvalidId { field: "redrive.id", source })?,
                reason: redrive_text(r, "reason")?,
                owner: redrive_text(r, "owner")?,
                base_attempt: base_attempt(r, attempt)?,
                resend_unknown: match r.get("resend_unknown") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(v) => {
                        return Err(MalformedMessage::WrongType {
                            field: "redrive.resend_unknown",
                            expected: "a boolean",
                            found: json_type(v),
                        });
                    }
                },
            }),
            Some(other) => {
                return Err(MalformedMessage::WrongType {
                    field: "redrive",
                    expected: "an object",
                    found: json_type(other),
                });
            }
        };

        let channel = match obj.get("channel") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => {
                if !channel_fits(c) {
                    return Err(MalformedMessage::InvalidChannel { found: excerpt(c) });
                }
                Some(c.clone())
            }
            Some(other) => {
                return Err(MalformedMessage::WrongType {
                    field: "channel",
                    expected: "a string",
                    found: json_type(other),
                });
            }
        };

        if deliver_by <= deliver_after {
            return Err(MalformedMessage::DeadlineNotAfterRelease {
                deliver_after: format_instant(deliver_after),
                deliver_by: format_instant(deliver_by),
            });
        }
        if first_enqueued > deliver_by {
            return Err(MalformedMessage::EnqueuedAfterDeadline {
                first_enqueued: format_instant(first_enqueued),
                deliver_by: format_instant(deliver_by),
            });
        }
        Ok(Self {
            reminder_id,
            renewal_id,
            tenant_id,
            kind,
            deliver_after,
            deliver_by,
            attempt,
            first_enqueued,
            correlation_id,
            redrive,
            channel,
        })
    }

    /// Encodes the message as a v1 body. `decode(encode(m)) == m` up to millisecond precision.
    pub fn encode(&self) -> String {
        #[derive(Serialize)]
        struct Wire<'a> {
            v: u64,
            reminder_id: &'a str,
            renewal_id: &'a str,
            tenant_id: &'a str,
            kind: &'a str,
            deliver_after: String,
            deliver_by: String,
            attempt: u32,
            first_enqueued: String,
            correlation_id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            redrive: Option<&'a RedriveStamp>,
            #[serde(skip_serializing_if = "Option::is_none")]
            channel: Option<&'a str>,
        }
        let wire = Wire {
            v: CONTRACT_VERSION,
            reminder_id: self.reminder_id.as_str(),
            renewal_id: self.renewal_id.as_str(),
            tenant_id: self.tenant_id.as_str(),
            kind: self.kind.as_str(),
            deliver_after: format_instant(self.deliver_after),
            deliver_by: format_instant(self.deliver_by),
            attempt: self.attempt,
            first_enqueued: format_instant(self.first_enqueued),
            correlation_id: self.correlation_id.as_str(),
            redrive: self.redrive.as_ref(),
            channel: self.channel.as_deref(),
        };
        // Serialising a struct of strings and integers cannot fail; fall back to an empty
        // object rather than panic so a bug shows up as `malformed` in the DLQ, not a crash loop.
        serde_json::to_string(&wire).unwrap_or_else(|_| String::from("{}"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::ReminderMessage;
    use crate::testing::valid_body as valid;

    /// What `decode` answers for `body` is the tree's answer, whichever path read it.
    fn agrees(body: &str) -> Result<(), TestCaseError> {
        if let Some(m) = ReminderMessage::decode_plain(body) {
            prop_assert_eq!(Ok(m), ReminderMessage::decode_tree(body), "body: {}", body);
        }
        Ok(())
    }

    /// The bodies the scheduler and the sender write go the short way: the body `encode`
    /// writes, with a channel, with nulls where a field is optional.
    #[test]
    fn the_common_bodies_skip_the_tree_and_decode_as_the_tree_does() {
        let mut bodies = vec![valid().to_string()];
        let m = ReminderMessage::decode(&bodies[0]).unwrap();
        bodies.push(m.encode());
        bodies.push(ReminderMessage { channel: Some("sms".into()), ..m.clone() }.encode());
        let mut extra = valid();
        extra["redrive"] = Value::Null;
        extra["channel"] = Value::Null;
        bodies.push(extra.to_string());
        for body in &bodies {
            assert!(ReminderMessage::decode_plain(body).is_some(), "the tree read {body}");
            agrees(body).unwrap();
        }
    }

    /// Bodies the tree refuses or reads its own way: the short path declines each one.
    #[test]
    fn the_short_path_declines_what_it_does_not_read_as_the_tree_does() {
        let v = valid();
        let array = format!(
            "[1,{}]",
            [
                "reminder_id",
                "renewal_id",
                "tenant_id",
                "kind",
                "deliver_after",
                "deliver_by",
                "attempt",
                "first_enqueued",
                "correlation_id",
                "redrive",
                "channel"
            ]
            .iter()
            .map(|k| v[k].to_string())
            .collect::<Vec<_>>()
            .join(",")
        );
        let duplicate = v.to_string().replacen('{', "{\"attempt\":7,", 1);
        let mut redriven = v.clone();
        redriven["redrive"] = json!({"id": "rd-20261201T140000Z-ab12", "reason": "fixed", "owner": "ops"});
        let escaped = v.to_string().replace("\"ren-0001\"", "\"ren-\\u0030001\"");
        let mut newer = v.clone();
        newer["newer_field"] = json!({"a": [1, 2]});
        let mut bodies = vec![array, duplicate, format!(" {v}"), redriven.to_string(), escaped, newer.to_string()];
        // Unknown fields the tree refuses as JSON and serde's skip of an ignored value would
        // not: nesting past the tree's depth limit, numbers beyond an f64, lone surrogates.
        let open = v.to_string();
        let open = open.trim_end_matches('}');
        for extra in [
            format!("{}{}", "[".repeat(200), "]".repeat(200)),
            "1e400".to_owned(),
            format!("1{}", "0".repeat(400)),
            "\"\\ud800\"".to_owned(),
            "{\"\\udc00\":0}".to_owned(),
        ] {
            let body = format!("{open},\"x\":{extra}}}");
            assert!(ReminderMessage::decode_tree(&body).is_err(), "the tree reads {body}");
            bodies.push(body);
        }
        for body in bodies {
            assert!(ReminderMessage::decode_plain(&body).is_none(), "short path read {body}");
            agrees(&body).unwrap();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any one field of a valid body set to any value: if the short path reads the body,
        /// the tree reads the same message.
        #[test]
        fn the_short_path_never_answers_differently_from_the_tree(field in 0usize..13, value in prop_oneof![
            Just(Value::Null), any::<bool>().prop_map(Value::from), any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from), any::<f64>().prop_map(Value::from), ".{0,70}".prop_map(Value::from),
            Just(json!("2026-12-01T21:59:59.999+00:00")), Just(json!("2026-12-02T00:00:00Z")), Just(json!("rem_C9DD29194F09D2128544BC59F58B2395")),
            Just(json!([])), Just(json!({})), Just(json!(1000)), Just(json!(1001)),
        ]) {
            let names = ["v", "reminder_id", "renewal_id", "tenant_id", "kind", "deliver_after", "deliver_by",
                "attempt", "first_enqueued", "correlation_id", "redrive", "channel", "unknown"];
            let mut m = valid();
            m[names[field]] = value;
            agrees(&m.to_string())?;
        }
    }
}
