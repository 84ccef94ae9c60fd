//! Identifier newtypes with validating constructors, and the deterministic [`ReminderId`].
//!
//! Ids travel in SQS bodies, DynamoDB keys, DLQ attributes and logs, so every id is restricted
//! to a short, printable, shell-safe alphabet: no recipient data can hide in one, and none
//! needs escaping anywhere it goes.

use std::fmt;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The string is empty.
    #[error("must not be empty")]
    Empty,
    /// The string is longer than the id allows.
    #[error("is {len} characters long; at most {max} allowed")]
    TooLong { len: usize, max: usize },
    /// The string contains a character outside the id's alphabet.
    #[error("contains {found:?} at position {position}; allowed: {allowed}")]
    BadCharacter { found: char, position: usize, allowed: &'static str },
    /// The string does not have the id's fixed shape.
    #[error("must look like {shape}")]
    BadShape { shape: &'static str },
}

const SLUG_ALLOWED: &str = "ASCII letters, digits and . _ : -";

fn check_slug(s: &str, max: usize, allowed_char: fn(char) -> bool, allowed: &'static str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty);
    }
    let len = s.chars().count();
    if len > max {
        return Err(IdError::TooLong { len, max });
    }
    if let Some((position, found)) = s.chars().enumerate().find(|(_, c)| !allowed_char(*c)) {
        return Err(IdError::BadCharacter { found, position, allowed });
    }
    Ok(())
}

fn is_slug_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

const TENANT_ALLOWED: &str =
    "ASCII letters, digits and . _ - (no `:`: it separates the tenant from the renewal in keys)";

/// A tenant id has no `:` (S1): keys such as `renewal:{tenant}:{renewal}` put the tenant first,
/// so with a `:`-free tenant the first `:` after the prefix ends it, and tenant `acme` with
/// renewal `eu:42` can never share a key with tenant `acme:eu` and renewal `42`.
fn is_tenant_char(c: char) -> bool {
    c != ':' && is_slug_char(c)
}

macro_rules! slug_id {
    ($(#[$doc:meta])* $name:ident, $max:expr) => {
        slug_id!($(#[$doc])* $name, $max, is_slug_char, SLUG_ALLOWED);
    };
    ($(#[$doc:meta])* $name:ident, $max:expr, $allowed_char:expr, $allowed:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Longest accepted id, in characters.
            pub const MAX_LEN: usize = $max;

            /// Validates `s` (1 to `MAX_LEN` characters of ASCII letters, digits and `. _ : -`;
            /// no `:` in a tenant id).
            pub fn parse(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                check_slug(&s, Self::MAX_LEN, $allowed_char, $allowed)?;
                Ok(Self(s))
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

slug_id!(
    /// A tenant (customer account) of the platform team running punctual.
    TenantId,
    64,
    is_tenant_char,
    TENANT_ALLOWED
);
slug_id!(
    /// A renewal in the renewals table (the system of record).
    RenewalId,
    128
);
slug_id!(
    /// A correlation id carried through every transition of one reminder.
    CorrelationId,
    128
);
slug_id!(
    /// The id of one operator redrive run.
    RedriveId,
    64
);

/// A channel's name as a deployment declares it (`CHANNELS`) and a redrive selects it: 1 to 32
/// characters, a lowercase ASCII letter first, then lowercase letters, digits and `-`.
pub fn is_channel_name(name: &str) -> bool {
    name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The kind of reminder (`renewal_7d`, `renewal_due`, ...): lowercase letters, digits, `_`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ReminderKind(String);

impl ReminderKind {
    /// Longest accepted kind, in characters.
    pub const MAX_LEN: usize = 48;

    /// Validates `s` (1 to 48 characters of `a-z`, `0-9`, `_`).
    pub fn parse(s: impl Into<String>) -> Result<Self, IdError> {
        let s = s.into();
        check_slug(
            &s,
            Self::MAX_LEN,
            |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_',
            "lowercase ASCII letters, digits and _",
        )?;
        Ok(Self(s))
    }

    /// The kind as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `renewal_due`, the kind a renewal gets when its row names none.
    pub fn renewal_due() -> Self {
        Self("renewal_due".to_owned())
    }
}

impl TryFrom<String> for ReminderKind {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        Self::parse(s)
    }
}

impl From<ReminderKind> for String {
    fn from(k: ReminderKind) -> String {
        k.0
    }
}

impl fmt::Display for ReminderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The deterministic id of one reminder: `rem_` + 32 lowercase hex digits.
///
/// Derived by [`ReminderId::derive`] from exactly four inputs — tenant id, renewal id, reminder
/// kind and the reminder's **local** due date (in the renewal's zone) — as the first 128 bits of
/// SHA-256 over `punctual/reminder/v1` and the four inputs, each NUL-separated. The same
/// renewal, kind and date therefore always yield the same id, whoever computes it and however
/// often the scheduler re-sends; the SQS `messageId`, which a redrive changes, is never used.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ReminderId(String);

impl ReminderId {
    const PREFIX: &'static str = "rem_";
    const HEX_LEN: usize = 32;
    const DOMAIN: &'static [u8] = b"punctual/reminder/v1";

    /// Derives the id from its documented inputs.
    pub fn derive(tenant: &TenantId, renewal: &RenewalId, kind: &ReminderKind, local_due_date: NaiveDate) -> Self {
        let mut h = Sha256::new();
        let date = local_due_date.format("%Y-%m-%d").to_string();
        for part in [
            Self::DOMAIN,
            tenant.as_str().as_bytes(),
            renewal.as_str().as_bytes(),
            kind.as_str().as_bytes(),
            date.as_bytes(),
        ] {
            h.update(part);
            h.update([0u8]);
        }
        let digest = h.finalize();
        let mut s = String::with_capacity(Self::PREFIX.len() + Self::HEX_LEN);
        s.push_str(Self::PREFIX);
        for b in &digest[..Self::HEX_LEN / 2] {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
        Self(s)
    }

    /// Validates an id received from outside (a message body, a CLI argument).
    pub fn parse(s: impl Into<String>) -> Result<Self, IdError> {
        let s = s.into();
        match Self::bits_of(&s) {
            Some(_) => Ok(Self(s)),
            None if s.is_empty() => Err(IdError::Empty),
            None => Err(IdError::BadShape { shape: "rem_ followed by 32 lowercase hex digits" }),
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 128 bits the digits of `s` spell if it is a reminder id's text (`rem_` and 32
    /// lower-case hex digits). Lower-case hex orders as its number does, so ids compare as
    /// their bits do: a table can key an id by 16 bytes instead of a string.
    pub fn bits_of(s: &str) -> Option<u128> {
        let hex = s.strip_prefix(Self::PREFIX)?;
        if hex.len() != Self::HEX_LEN || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        u128::from_str_radix(hex, 16).ok()
    }

    /// The idempotency key for this reminder, sent to the provider and used as the ledger key.
    pub fn idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey(format!("reminder:{}", self.0))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl TryFrom<String> for ReminderId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        Self::parse(s)
    }
}

impl From<ReminderId> for String {
    fn from(id: ReminderId) -> String {
        id.0
    }
}

impl fmt::Display for ReminderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `reminder:{reminder_id}`: the provider's `Idempotency-Key` header and the ledger's key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> (TenantId, RenewalId, ReminderKind, NaiveDate) {
        (
            TenantId::parse("acme").unwrap(),
            RenewalId::parse("ren-0001").unwrap(),
            ReminderKind::parse("renewal_7d").unwrap(),
            NaiveDate::from_ymd_opt(2026, 12, 1).unwrap(),
        )
    }

    #[test]
    fn reminder_id_bits_order_as_the_text() {
        let (t, r, k, d) = inputs();
        let ids: Vec<ReminderId> = (0..64)
            .map(|i| ReminderId::derive(&t, &RenewalId::parse(format!("ren-{i}")).unwrap(), &k, d))
            .chain([ReminderId::derive(&t, &r, &k, d)])
            .collect();
        let bits = |id: &ReminderId| ReminderId::bits_of(id.as_str()).expect("a derived id has bits");
        for a in &ids {
            for b in &ids {
                assert_eq!(bits(a).cmp(&bits(b)), a.cmp(b), "{a} against {b}");
            }
        }
        assert_eq!(ReminderId::bits_of("rem_000000000000000000000000000000ff"), Some(255));
        for not_an_id in
            ["", "rem_", "rem_0123", "REM_0123456789abcdef0123456789abcdef", "rem_0123456789ABCDEF0123456789abcdef"]
        {
            assert_eq!(ReminderId::bits_of(not_an_id), None, "{not_an_id}");
            assert!(ReminderId::parse(not_an_id).is_err(), "{not_an_id}");
        }
    }

    #[test]
    fn reminder_id_is_the_same_for_the_same_inputs() {
        let (t, r, k, d) = inputs();
        assert_eq!(ReminderId::derive(&t, &r, &k, d), ReminderId::derive(&t, &r, &k, d));
    }

    #[test]
    fn reminder_id_changes_with_each_input() {
        let (t, r, k, d) = inputs();
        let base = ReminderId::derive(&t, &r, &k, d);
        assert_ne!(base, ReminderId::derive(&TenantId::parse("acme2").unwrap(), &r, &k, d));
        assert_ne!(base, ReminderId::derive(&t, &RenewalId::parse("ren-0002").unwrap(), &k, d));
        assert_ne!(base, ReminderId::derive(&t, &r, &ReminderKind::parse("renewal_due").unwrap(), d));
        assert_ne!(base, ReminderId::derive(&t, &r, &k, d.succ_opt().unwrap()));
    }

    #[test]
    fn reminder_id_inputs_cannot_be_shifted_across_the_separator() {
        // "ab" + "c" and "a" + "bc" must not collide.
        let k = ReminderKind::parse("k").unwrap();
        let d = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
        let a = ReminderId::derive(&TenantId::parse("ab").unwrap(), &RenewalId::parse("c").unwrap(), &k, d);
        let b = ReminderId::derive(&TenantId::parse("a").unwrap(), &RenewalId::parse("bc").unwrap(), &k, d);
        assert_ne!(a, b);
    }

    #[test]
    fn reminder_id_is_pinned_so_a_change_of_derivation_is_noticed() {
        // Ids are stored in ledgers and queues: changing the derivation re-sends every
        // reminder in flight. This value was computed once and must never change.
        let (t, r, k, d) = inputs();
        let id = ReminderId::derive(&t, &r, &k, d);
        assert_eq!(id.as_str().len(), 36);
        assert_eq!(ReminderId::parse(id.as_str()).unwrap(), id);
        assert_eq!(id.as_str(), PINNED_ID);
    }
    // Independently: python3 -c "import hashlib; print(hashlib.sha256(b'punctual/reminder/v1\\0acme\\0ren-0001\\0renewal_7d\\0' b'2026-12-01\\0').hexdigest()[:32])"
    const PINNED_ID: &str = "rem_c9dd29194f09d2128544bc59f58b2395";

    #[test]
    fn idempotency_key_is_prefixed_reminder_id() {
        let (t, r, k, d) = inputs();
        let id = ReminderId::derive(&t, &r, &k, d);
        assert_eq!(id.idempotency_key().as_str(), format!("reminder:{id}"));
    }

    #[test]
    fn reminder_id_parse_rejects_wrong_shapes() {
        assert_eq!(ReminderId::parse(""), Err(IdError::Empty));
        assert!(ReminderId::parse("rem_123").is_err());
        assert!(ReminderId::parse("rem_0123456789ABCDEF0123456789abcdef").is_err());
        assert!(ReminderId::parse("msg_0123456789abcdef0123456789abcdef").is_err());
        assert!(ReminderId::parse("rem_0123456789abcdef0123456789abcdef").is_ok());
    }

    #[test]
    fn slug_ids_name_the_offending_character() {
        let e = RenewalId::parse("acme corp").unwrap_err();
        assert_eq!(e, IdError::BadCharacter { found: ' ', position: 4, allowed: SLUG_ALLOWED });
        // S1: `acme:eu` / `42` and `acme` / `eu:42` would share the key renewal:acme:eu:42.
        assert_eq!(
            TenantId::parse("acme:eu").unwrap_err(),
            IdError::BadCharacter { found: ':', position: 4, allowed: TENANT_ALLOWED }
        );
        assert!(RenewalId::parse("eu:42").is_ok(), "a renewal id may keep its `:`");
        assert!(e.to_string().contains("' ' at position 4"));
        assert_eq!(TenantId::parse(""), Err(IdError::Empty));
        assert_eq!(TenantId::parse("x".repeat(65)), Err(IdError::TooLong { len: 65, max: 64 }));
        assert!(ReminderKind::parse("Renewal").is_err());
    }
}
