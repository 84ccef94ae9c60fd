//! The renewal command contract (v1, docs/integration.md#the-command): what a producer sends
//! to the commands queue, bare or as the `detail` of an EventBridge event, and its decoder.
//!
//! One command is one renewal row: the columns `punctual import` reads, plus the producer's
//! `version` of the renewal and optional template variables (`data`). The decoder turns a body
//! into a [`RenewalInput`] and then the row goes through the one validation import uses
//! ([`crate::renewal::check_row`]) and the one conditional write (the renewals adapter's
//! `import`): no second copy of the rules.
//!
//! Unlike the message contract, unknown fields are refused by name: a producer's misspelled
//! optional field (`emial`) would otherwise be dropped without a word, and the producer is told
//! at once, in the dead letter's `reason`.

use serde_json::{Map, Value};

use crate::contract::{excerpt, json_type};

use crate::renewal::{CheckedRow, RenewalInput, RowError, TemplateData, check_row};

/// The only command contract version this build understands.
pub const COMMAND_VERSION: u64 = 1;

/// Largest body accepted, in bytes: a command with 4 KiB of data is under 5 KiB, its
/// EventBridge envelope adds under 1 KiB.
pub const MAX_COMMAND_BYTES: usize = 16 * 1024;

/// The `detail-type` of an EventBridge event carrying a command.
pub const DETAIL_TYPE: &str = "punctual.renewal";

/// The fields of a v1 command besides a row's columns ([`crate::renewal::COLUMNS`]).
pub const OWN_FIELDS: [&str; 2] = ["v", "data"];

fn known(field: &str) -> bool {
    OWN_FIELDS.contains(&field) || crate::renewal::COLUMNS.contains(&field)
}

/// A decoded command: the row, its version and its data. `Debug` shows neither the address
/// nor the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalCommand {
    /// The row, as `punctual import` reads one (its `version` column set).
    pub input: RenewalInput,
    /// The producer's revision.
    pub version: u64,
    /// Template variables.
    pub data: Option<TemplateData>,
}

/// Why a command is refused. [`CommandError::class`] names the class an operator filters on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// The body cannot be read as a v1 command.
    #[error("{0}")]
    Malformed(String),
    /// A field's value breaks the row rules (the same text `punctual import` reports).
    #[error(transparent)]
    Invalid(#[from] RowError),
}

impl CommandError {
    /// `malformed` or `invalid` (the dead letter's `error_class` attribute).
    pub fn class(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::Invalid(_) => "invalid",
        }
    }
}

fn malformed(text: impl Into<String>) -> CommandError {
    CommandError::Malformed(text.into())
}

/// The command object of a body: the body itself, or the `detail` of an EventBridge event
/// (a body with a `detail-type`).
fn command_object(body: &str) -> Result<Map<String, Value>, CommandError> {
    if body.len() > MAX_COMMAND_BYTES {
        return Err(malformed(format!("command body is {} bytes; at most {MAX_COMMAND_BYTES}", body.len())));
    }
    let v: Value = serde_json::from_str(body).map_err(|e| malformed(format!("body is not JSON: {e}")))?;
    let Value::Object(mut obj) = v else {
        return Err(malformed(format!("body must be a JSON object, found {}", json_type(&v))));
    };
    let Some(detail_type) = obj.get("detail-type") else { return Ok(obj) };
    let Some(detail_type) = detail_type.as_str() else {
        return Err(malformed("an EventBridge event's `detail-type` must be a string"));
    };
    if detail_type != DETAIL_TYPE {
        return Err(malformed(format!(
            "an EventBridge event whose detail-type {:?} is not {DETAIL_TYPE}",
            excerpt(detail_type)
        )));
    }
    match obj.remove("detail") {
        Some(Value::Object(detail)) => Ok(detail),
        None | Some(Value::Null) => Err(malformed("an EventBridge event without `detail`")),
        Some(other) => Err(malformed(format!("`detail` must be a JSON object, found {}", json_type(&other)))),
    }
}

fn integer(obj: &Map<String, Value>, name: &'static str) -> Result<Option<u64>, CommandError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| malformed(format!("field `{name}` must be a non-negative integer, found {n}"))),
        Some(v) => Err(malformed(format!("field `{name}` must be an integer, found {}", json_type(v)))),
    }
}

fn text(obj: &Map<String, Value>, name: &'static str, required: bool) -> Result<String, CommandError> {
    match obj.get(name) {
        None | Some(Value::Null) if required => Err(malformed(format!("missing required field `{name}`"))),
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(malformed(format!("field `{name}` must be a string, found {}", json_type(v)))),
    }
}

impl RenewalCommand {
    /// Decodes a body: its shape, in field order (`v`, `version`, the row's columns, `data`).
    /// The row's values are checked by [`RenewalCommand::check`].
    pub fn decode(body: &str) -> Result<Self, CommandError> {
        let obj = command_object(body)?;
        if let Some(unknown) = obj.keys().find(|k| !known(k)) {
            return Err(malformed(format!(
                "unknown field `{}` (a v1 command has: v, {}, data)",
                excerpt(unknown),
                crate::renewal::COLUMNS.join(", ")
            )));
        }
        match integer(&obj, "v")? {
            None => return Err(malformed("missing command contract version field `v`")),
            Some(COMMAND_VERSION) => {}
            Some(other) => {
                return Err(malformed(format!(
                    "unsupported command version {other} (this build understands version {COMMAND_VERSION})"
                )));
            }
        }
        let version = integer(&obj, "version")?.ok_or_else(|| malformed("missing required field `version`"))?;
        let window =
            integer(&obj, "window_minutes")?.ok_or_else(|| malformed("missing required field `window_minutes`"))?;
        let input = RenewalInput {
            tenant_id: text(&obj, "tenant_id", true)?,
            renewal_id: text(&obj, "renewal_id", true)?,
            recipient_ref: text(&obj, "recipient_ref", true)?,
            channel: text(&obj, "channel", true)?,
            zone: text(&obj, "zone", true)?,
            local_due_date: text(&obj, "local_due_date", true)?,
            local_send_time: text(&obj, "local_send_time", false)?,
            window_minutes: window.to_string(),
            status: text(&obj, "status", false)?,
            kind: text(&obj, "kind", false)?,
            email: text(&obj, "email", false)?,
            version: version.to_string(),
        };
        let data = match obj.get("data") {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) => Some(TemplateData::from_object(o)?),
            Some(v) => return Err(malformed(format!("field `data` must be an object, found {}", json_type(v)))),
        };
        Ok(Self { input, version, data })
    }

    /// The row through the one validation `punctual import` uses, with this command's data.
    pub fn check(&self, channels: &[String]) -> Result<CheckedRow, CommandError> {
        let mut row = check_row(&self.input, channels)?;
        row.renewal.data = self.data.clone();
        Ok(row)
    }

    /// Decodes and checks a body.
    pub fn read(body: &str, channels: &[String]) -> Result<(Self, CheckedRow), CommandError> {
        let command = Self::decode(body)?;
        let row = command.check(channels)?;
        Ok((command, row))
    }
}

/// The body as a dead letter may hold it: every field whose name holds `data` (any case: a
/// misspelled `Data` or `template_data` too; top level, or an EventBridge event's `detail`)
/// replaced by `"<redacted: N bytes>"`. A body that is not a JSON object holds no field to
/// redact: it is kept as it came (the DLQ must lose nothing an operator needs to fix the
/// producer), unless it mentions `data` at all (a BOM, a truncated or over-deep body: found by
/// review), when it is withheld whole and only its size and SHA-256 are kept, to match it with
/// the producer's own record.
pub fn redacted_body(body: &str) -> String {
    let Ok(Value::Object(mut obj)) = serde_json::from_str::<Value>(body) else {
        if !body.to_ascii_lowercase().contains("data") {
            return body.to_owned();
        }
        use sha2::{Digest, Sha256};
        let hex: String = Sha256::digest(body.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        return format!("<withheld: {} bytes that are not a JSON object and may hold data; sha256 {hex}>", body.len());
    };
    fn redact(obj: &mut Map<String, Value>) -> bool {
        let mut changed = false;
        for (k, v) in obj.iter_mut() {
            if k.to_ascii_lowercase().contains("data") && !v.is_null() {
                *v = Value::String(format!("<redacted: {} bytes>", v.to_string().len()));
                changed = true;
            }
        }
        changed
    }
    let mut changed = redact(&mut obj);
    if let Some(Value::Object(detail)) = obj.get_mut("detail") {
        changed |= redact(detail);
    }
    if changed { Value::Object(obj).to_string() } else { body.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(extra: &str) -> String {
        format!(
            r#"{{"v":1,"version":3,"tenant_id":"acme","renewal_id":"ren-1","recipient_ref":"cust-1","channel":"email","zone":"Europe/London","local_due_date":"2027-03-01","window_minutes":480{extra}}}"#
        )
    }

    #[test]
    fn a_bare_command_and_its_eventbridge_envelope_decode_alike() {
        let bare = RenewalCommand::decode(&body(r#","data":{"plan":"pro"}"#)).unwrap();
        assert_eq!((bare.version, bare.input.window_minutes.as_str()), (3, "480"));
        let wrapped = format!(
            r#"{{"version":"0","id":"e1","detail-type":"punctual.renewal","source":"com.example.billing","account":"1","time":"2027-01-01T00:00:00Z","region":"eu-west-1","resources":[],"detail":{}}}"#,
            body(r#","data":{"plan":"pro"}"#)
        );
        assert_eq!(RenewalCommand::decode(&wrapped).unwrap(), bare);
        let (_, row) = RenewalCommand::read(&wrapped, &[]).unwrap();
        assert_eq!(row.renewal.version, Some(3));
        assert_eq!(row.renewal.data.as_ref().map(TemplateData::expose), Some(r#"{"plan":"pro"}"#));
    }

    #[test]
    fn each_bad_shape_is_named() {
        let cases: Vec<(String, &str)> = vec![
            ("renewal please".into(), "body is not JSON"),
            ("[1]".into(), "must be a JSON object, found an array"),
            (body("").replace(r#""version":3,"#, ""), "missing required field `version`"),
            (body("").replace(r#""v":1"#, r#""v":2"#), "unsupported command version 2"),
            (body("").replace("480", r#""480""#), "field `window_minutes` must be an integer, found a string"),
            (body(r#","emial":"a@b.c""#), "unknown field `emial`"),
            (body(r#","data":[1]"#), "field `data` must be an object"),
            (body("").replace(r#""version":3"#, r#""version":-1"#), "field `version` must be a non-negative integer"),
            (r#"{"detail-type":"renewal.created","detail":{}}"#.into(), "is not punctual.renewal"),
            (format!(r#"{{"x":"{}"}}"#, "a".repeat(MAX_COMMAND_BYTES)), "at most 16384"),
        ];
        for (b, want) in cases {
            let e = RenewalCommand::decode(&b).unwrap_err();
            assert_eq!(e.class(), "malformed", "{e}");
            assert!(e.to_string().contains(want), "{e:?} should contain {want:?}");
        }
    }

    #[test]
    fn the_row_rules_are_imports_own() {
        let cases = [
            (body("").replace("Europe/London", "Mars/Olympus"), "unknown time zone \"Mars/Olympus\""),
            (body("").replace(r#""acme""#, r#""acme corp""#), "tenant_id contains ' ' at position 4"),
            (body("").replace(r#""version":3"#, r#""version":0"#), "version \"0\" must be a whole number"),
            (body("").replace("cust-1", "ana@example.com"), "recipient_ref must be an opaque reference"),
            (body(r#","email":"not an address""#), "email:"),
            (
                body(&format!(r#","data":{{"k":"{}"}}"#, "x".repeat(5000))),
                "data is 5008 bytes serialized; at most 4096",
            ),
        ];
        for (b, want) in cases {
            let e = RenewalCommand::read(&b, &[]).unwrap_err();
            assert!(e.to_string().contains(want), "{e} should contain {want:?}");
        }
        let e = RenewalCommand::read(&body(""), &["sms".to_owned()]).unwrap_err();
        assert_eq!(e.to_string(), "channel \"email\" is not declared by this deployment (declared: sms)");
        assert_eq!(e.class(), "invalid");
    }

    #[test]
    fn a_dead_letter_never_holds_the_data() {
        let b = body(r#","data":{"amount":"49.00 EUR"}"#);
        let kept = redacted_body(&b);
        assert!(!kept.contains("49.00"), "{kept}");
        assert!(kept.contains("<redacted: 22 bytes>"), "{kept}");
        let wrapped = format!(r#"{{"detail-type":"punctual.renewal","detail":{b}}}"#);
        assert!(!redacted_body(&wrapped).contains("49.00"));
        assert_eq!(redacted_body("not json"), "not json");
        // Found by review: a body serde cannot read, and a misspelled data field.
        let bom = format!("\u{feff}{}", body(r#","data":{"k":"SECRET"}"#));
        let kept = redacted_body(&bom);
        assert!(!kept.contains("SECRET") && kept.starts_with("<withheld:"), "{kept}");
        assert!(!redacted_body(&body(r#","Template_Data":{"k":"SECRET"}"#)).contains("SECRET"));
        let cmd = RenewalCommand::decode(&b).unwrap();
        assert!(!format!("{cmd:?}").contains("49.00"), "{cmd:?}");
    }
}
