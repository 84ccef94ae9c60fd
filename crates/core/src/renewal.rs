//! The renewals table's row contract (the system of record) and its validation: a row names a
//! local due date, send time and IANA zone; validation computes `deliver_after` with the DST
//! policy and `deliver_by` from the window, and derives the reminder id.

use chrono::{DateTime, NaiveDate, NaiveTime, TimeDelta, Utc};

use crate::ids::{IdError, ReminderId, ReminderKind, RenewalId, TenantId};
use crate::tz::{DstAdjustment, ZoneError, parse_zone, resolve_local};

/// Longest delivery window accepted (7 days): a reminder due "sometime this month" is not a
/// deadline.
pub const MAX_WINDOW_MINUTES: u32 = 7 * 24 * 60;

/// Renewal status in the system of record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalStatus {
    /// Remind.
    Active,
    /// Do not remind: cancelled.
    Cancelled,
    /// Do not remind: paid.
    Paid,
}

impl RenewalStatus {
    /// The stored string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Cancelled => "cancelled",
            Self::Paid => "paid",
        }
    }
}

/// Every column of a row, as `punctual import` reads a file and a command carries one
/// (docs/commands.md#punctual-import).
pub const COLUMNS: [&str; 12] = [
    "tenant_id",
    "renewal_id",
    "recipient_ref",
    "channel",
    "zone",
    "local_due_date",
    "local_send_time",
    "window_minutes",
    "status",
    "kind",
    "email",
    "version",
];

/// One row as read from a file (all text, as written by a person or an export). Its `Debug`
/// never shows `email`.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct RenewalInput {
    /// Tenant id.
    pub tenant_id: String,
    /// Renewal id.
    pub renewal_id: String,
    /// Opaque reference the provider resolves (never an address).
    pub recipient_ref: String,
    /// `email`, `sms`, ...
    pub channel: String,
    /// IANA zone, e.g. `Europe/London`.
    pub zone: String,
    /// `YYYY-MM-DD`, local to `zone`.
    pub local_due_date: String,
    /// `HH:MM` or `HH:MM:SS`, local to `zone` (default `09:00`).
    #[serde(default)]
    pub local_send_time: String,
    /// Minutes from `deliver_after` to `deliver_by`.
    pub window_minutes: String,
    /// `active` (default), `cancelled`, `paid`.
    #[serde(default)]
    pub status: String,
    /// Reminder kind (default `renewal_due`).
    #[serde(default)]
    pub kind: String,
    /// The recipient's email address, optional: `punctual import` writes it to the recipients
    /// table under `recipient_ref` (for SES), never to the renewals table.
    #[serde(default)]
    pub email: String,
    /// The producer's revision of this renewal, optional for a file (docs/design.md#versions):
    /// a whole number from 1 to [`MAX_VERSION`]; a row with one applies only over an older one.
    #[serde(default)]
    pub version: String,
}

impl std::fmt::Debug for RenewalInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenewalInput")
            .field("tenant_id", &self.tenant_id)
            .field("renewal_id", &self.renewal_id)
            .field("recipient_ref", &self.recipient_ref)
            .field("channel", &self.channel)
            .field("zone", &self.zone)
            .field("local_due_date", &self.local_due_date)
            .field("local_send_time", &self.local_send_time)
            .field("window_minutes", &self.window_minutes)
            .field("status", &self.status)
            .field("kind", &self.kind)
            .field("email", &if self.email.is_empty() { "" } else { "<redacted>" })
            .field("version", &self.version)
            .finish()
    }
}

/// A validated renewal with its computed instants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// Tenant.
    pub tenant_id: TenantId,
    /// Renewal.
    pub renewal_id: RenewalId,
    /// Reminder kind.
    pub kind: ReminderKind,
    /// Provider-side recipient reference.
    pub recipient_ref: String,
    /// Channel.
    pub channel: String,
    /// IANA zone name.
    pub zone: String,
    /// Local due date.
    pub local_due_date: NaiveDate,
    /// Local send time.
    pub local_send_time: NaiveTime,
    /// Window length in minutes.
    pub window_minutes: u32,
    /// Status.
    pub status: RenewalStatus,
    /// Release instant (local due date + send time in the zone, DST policy applied).
    pub deliver_after: DateTime<Utc>,
    /// Business deadline: `deliver_after` + window.
    pub deliver_by: DateTime<Utc>,
    /// What the DST policy did.
    pub dst: DstAdjustment,
    /// The deterministic reminder id.
    pub reminder_id: ReminderId,
    /// The producer's revision (docs/design.md#versions); `None` for a file row without one.
    pub version: Option<u64>,
    /// Template variables a command carried (docs/integration.md#the-command), for the
    /// provider; never logged.
    pub data: Option<TemplateData>,
}

/// Largest producer revision accepted: 2^53 − 1, the largest integer every JSON reader keeps
/// exactly.
pub const MAX_VERSION: u64 = (1 << 53) - 1;

/// Largest `data` object accepted, serialized, in bytes.
pub const MAX_DATA_BYTES: usize = 4096;

/// A command's template variables: a JSON object, serialized (at most [`MAX_DATA_BYTES`]). It
/// travels only from the renewals table to the provider: its `Debug` shows its size, never its
/// content, so no log, message attribute or dead letter can carry it.
#[derive(Clone, PartialEq, Eq)]
pub struct TemplateData(String);

impl TemplateData {
    /// A JSON object's serialized text (checked by [`TemplateData::from_object`] on the way
    /// in; read back from the table as written).
    pub fn from_stored(json: impl Into<String>) -> Self {
        Self(json.into())
    }

    /// `data` from a command: an object of at most [`MAX_DATA_BYTES`] serialized.
    pub fn from_object(value: &serde_json::Map<String, serde_json::Value>) -> Result<Self, RowError> {
        let text = serde_json::Value::Object(value.clone()).to_string();
        if text.len() > MAX_DATA_BYTES {
            return Err(RowError::DataTooLarge(text.len()));
        }
        Ok(Self(text))
    }

    /// The serialized object, for the table and the provider call.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The object, for a provider that merges it into its own body (`{}` if unreadable).
    pub fn object(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_str(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Debug for TemplateData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TemplateData(<{} bytes>)", self.0.len())
    }
}

/// Why a row is rejected. The text is what the reject report prints after the line number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    /// An id column fails validation.
    #[error("{field} {source}")]
    BadId {
        /// Column.
        field: &'static str,
        /// Why.
        #[source]
        source: IdError,
    },
    /// A required column is empty.
    #[error("{0} is required")]
    Missing(&'static str),
    /// `recipient_ref` looks like an address: it is an opaque reference, resolved at send time
    /// (put the address in the `email` column). The value is not repeated.
    #[error(
        "recipient_ref must be an opaque reference, not an address (it contains '@'); put the address in the email column"
    )]
    AddressAsReference,
    /// A column is longer than allowed.
    #[error("{field} is longer than {max} characters")]
    TooLong {
        /// Column.
        field: &'static str,
        /// Limit.
        max: usize,
    },
    /// The zone is not an IANA zone.
    #[error(transparent)]
    Zone(#[from] ZoneError),
    /// The date does not parse.
    #[error("local_due_date {0:?} is not a date (expected YYYY-MM-DD)")]
    BadDate(String),
    /// The time does not parse.
    #[error("local_send_time {0:?} is not a time of day (expected HH:MM or HH:MM:SS)")]
    BadTime(String),
    /// The window is not a whole number of minutes in range.
    #[error("window_minutes {0:?} must be a whole number of minutes from 1 to {MAX_WINDOW_MINUTES}")]
    BadWindow(String),
    /// Unknown status.
    #[error("status {0:?} must be active, cancelled or paid")]
    BadStatus(String),
    /// The version is not a whole number in range.
    #[error("version {0:?} must be a whole number from 1 to {MAX_VERSION}")]
    BadVersion(String),
    /// `data` is too large.
    #[error("data is {0} bytes serialized; at most {MAX_DATA_BYTES}")]
    DataTooLarge(usize),
    /// `email` is not a bare address (the value is never echoed).
    #[error("email: {0}")]
    Email(crate::ports::InvalidAddress),
    /// The deployment declares channels and this is not one.
    #[error("channel {channel:?} is not declared by this deployment (declared: {declared})")]
    Undeclared {
        /// The row's channel.
        channel: String,
        /// The declared ones, comma-separated.
        declared: String,
    },
}

/// A row as the import and the command path both take it: its address (if any) and the
/// validated renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedRow {
    /// The renewal.
    pub renewal: Renewal,
    /// The `email` column, for the recipients table.
    pub address: Option<crate::ports::EmailAddress>,
}

/// The one validation of a row, for `punctual import` and the ingest function alike: the
/// address (when given), then every column ([`Renewal::validate`]), then the channel against
/// the deployment's declared ones (`channels`; empty: any).
pub fn check_row(input: &RenewalInput, channels: &[String]) -> Result<CheckedRow, RowError> {
    let address = if input.email.trim().is_empty() {
        None
    } else {
        Some(crate::ports::EmailAddress::parse(&input.email).map_err(RowError::Email)?)
    };
    let renewal = Renewal::validate(input)?;
    if !channels.is_empty() && !channels.contains(&renewal.channel) {
        return Err(RowError::Undeclared { channel: renewal.channel, declared: channels.join(", ") });
    }
    Ok(CheckedRow { renewal, address })
}

fn text(field: &'static str, v: &str, max: usize) -> Result<String, RowError> {
    let v = v.trim();
    if v.is_empty() {
        return Err(RowError::Missing(field));
    }
    if v.chars().count() > max {
        return Err(RowError::TooLong { field, max });
    }
    Ok(v.to_owned())
}

impl Renewal {
    /// Validates a row and computes its instants. Checks run in column order, so a row always
    /// reports the same first problem.
    pub fn validate(input: &RenewalInput) -> Result<Self, RowError> {
        let tenant_id =
            TenantId::parse(input.tenant_id.trim()).map_err(|source| RowError::BadId { field: "tenant_id", source })?;
        let renewal_id = RenewalId::parse(input.renewal_id.trim())
            .map_err(|source| RowError::BadId { field: "renewal_id", source })?;
        let recipient_ref = text("recipient_ref", &input.recipient_ref, 256)?;
        // An address would travel in messages, DLQ details, logs and the renewals table.
        if recipient_ref.contains('@') {
            return Err(RowError::AddressAsReference);
        }
        let channel = text("channel", &input.channel, 32)?;
        let zone_name = input.zone.trim();
        let zone = parse_zone(zone_name)?;
        let date_s = input.local_due_date.trim();
        let local_due_date =
            NaiveDate::parse_from_str(date_s, "%Y-%m-%d").map_err(|_| RowError::BadDate(date_s.to_owned()))?;
        let time_s = input.local_send_time.trim();
        let local_send_time = if time_s.is_empty() {
            NaiveTime::from_hms_opt(9, 0, 0).unwrap_or_default()
        } else {
            NaiveTime::parse_from_str(time_s, "%H:%M")
                .or_else(|_| NaiveTime::parse_from_str(time_s, "%H:%M:%S"))
                .map_err(|_| RowError::BadTime(time_s.to_owned()))?
        };
        let window_s = input.window_minutes.trim();
        let window_minutes = window_s
            .parse::<u32>()
            .ok()
            .filter(|w| (1..=MAX_WINDOW_MINUTES).contains(w))
            .ok_or_else(|| RowError::BadWindow(window_s.to_owned()))?;
        let status = match input.status.trim() {
            "" | "active" => RenewalStatus::Active,
            "cancelled" => RenewalStatus::Cancelled,
            "paid" => RenewalStatus::Paid,
            other => return Err(RowError::BadStatus(other.to_owned())),
        };
        let kind_s = input.kind.trim();
        let kind = if kind_s.is_empty() {
            ReminderKind::renewal_due()
        } else {
            ReminderKind::parse(kind_s).map_err(|source| RowError::BadId { field: "kind", source })?
        };
        let version_s = input.version.trim();
        let version = if version_s.is_empty() {
            None
        } else {
            Some(
                version_s
                    .parse::<u64>()
                    .ok()
                    .filter(|v| (1..=MAX_VERSION).contains(v))
                    .ok_or_else(|| RowError::BadVersion(version_s.to_owned()))?,
            )
        };
        let resolved = resolve_local(zone, local_due_date, local_send_time)?;
        let deliver_after = resolved.instant;
        let deliver_by = deliver_after + TimeDelta::minutes(i64::from(window_minutes));
        let reminder_id = ReminderId::derive(&tenant_id, &renewal_id, &kind, local_due_date);
        Ok(Self {
            tenant_id,
            renewal_id,
            kind,
            recipient_ref,
            channel,
            zone: zone_name.to_owned(),
            local_due_date,
            local_send_time,
            window_minutes,
            status,
            deliver_after,
            deliver_by,
            dst: resolved.adjustment,
            reminder_id,
            version,
            data: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> RenewalInput {
        RenewalInput {
            tenant_id: "acme".into(),
            renewal_id: "ren-1".into(),
            recipient_ref: "cust-881".into(),
            channel: "email".into(),
            zone: "America/New_York".into(),
            local_due_date: "2026-12-01".into(),
            local_send_time: "09:00".into(),
            window_minutes: "480".into(),
            status: String::new(),
            kind: String::new(),
            email: String::new(),
            version: String::new(),
        }
    }

    #[test]
    fn a_valid_row_gets_its_instants_and_id() {
        let r = Renewal::validate(&row()).unwrap();
        assert_eq!(r.deliver_after.to_rfc3339(), "2026-12-01T14:00:00+00:00");
        assert_eq!(r.deliver_by.to_rfc3339(), "2026-12-01T22:00:00+00:00");
        assert_eq!((r.status, r.kind.as_str()), (RenewalStatus::Active, "renewal_due"));
        assert_eq!(r.reminder_id, ReminderId::derive(&r.tenant_id, &r.renewal_id, &r.kind, r.local_due_date));
    }

    #[test]
    fn each_bad_column_is_named() {
        type Case = (fn(&mut RenewalInput), &'static str);
        let cases: Vec<Case> = vec![
            (|r| r.tenant_id = "acme corp".into(), "tenant_id contains ' ' at position 4"),
            (|r| r.recipient_ref = " ".into(), "recipient_ref is required"),
            (|r| r.zone = "Mars/Olympus".into(), "unknown time zone \"Mars/Olympus\""),
            (|r| r.local_due_date = "2026-02-30".into(), "local_due_date \"2026-02-30\" is not a date"),
            (|r| r.local_send_time = "9am".into(), "local_send_time \"9am\" is not a time of day"),
            (
                |r| r.window_minutes = "0".into(),
                "window_minutes \"0\" must be a whole number of minutes from 1 to 10080",
            ),
            (|r| r.window_minutes = "-30".into(), "window_minutes \"-30\""),
            (|r| r.window_minutes = "99999".into(), "window_minutes \"99999\""),
            (|r| r.status = "archived".into(), "status \"archived\" must be active, cancelled or paid"),
        ];
        for (mutate, want) in cases {
            let mut r = row();
            mutate(&mut r);
            let e = Renewal::validate(&r).unwrap_err().to_string();
            assert!(e.starts_with(want), "{e:?} should start with {want:?}");
        }
    }

    #[test]
    fn a_send_time_in_a_gap_is_moved_forward() {
        let r = Renewal::validate(&RenewalInput {
            local_due_date: "2026-03-08".into(),
            local_send_time: "02:30".into(),
            ..row()
        })
        .unwrap();
        assert_eq!(r.deliver_after.to_rfc3339(), "2026-03-08T07:00:00+00:00");
        assert!(matches!(r.dst, DstAdjustment::MovedOutOfGap { .. }));
    }

    #[test]
    fn an_address_is_never_a_recipient_ref_and_never_printed() {
        let mut r = row();
        r.recipient_ref = "ana@example.com".into();
        assert_eq!(Renewal::validate(&r).unwrap_err(), RowError::AddressAsReference);
        assert!(!RowError::AddressAsReference.to_string().contains("ana"));
        let mut r = row();
        r.email = "ana@example.com".into();
        assert!(!format!("{r:?}").contains("ana@"), "{r:?}");
    }
}
