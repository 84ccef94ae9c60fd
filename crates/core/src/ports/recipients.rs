//! The recipients port: where a renewal's opaque `recipient_ref` is resolved to an address,
//! only at the moment of sending, by a provider that needs one (SES). Messages, the DLQ, the
//! ledger and the logs only ever carry the reference.
//!
//! A reference means something only inside its tenant: two tenants may both call a customer
//! `cust-1`. Every lookup and every write is therefore keyed by `(tenant_id, recipient_ref)`;
//! a store keyed by the reference alone would let one tenant's import replace another tenant's
//! address, and a reminder would go to the wrong company's customer.

use std::fmt;
use std::future::Future;

use super::{BoxError, Certainty};
use crate::ids::TenantId;

/// An email address. Its `Debug` and `Display` never show it (it is personal data): only
/// [`EmailAddress::expose`] does, at the one place that hands it to the provider.
#[derive(Clone, PartialEq, Eq)]
pub struct EmailAddress(String);

impl EmailAddress {
    /// Accepts `local@domain` with no whitespace, no angle brackets or display name, one `@`,
    /// a non-empty local part and a dotted domain, at most 254 characters (RFC 5321's path
    /// limit). Anything else is refused before it reaches a store.
    pub fn parse(value: &str) -> Result<Self, InvalidAddress> {
        let v = value.trim();
        let bad = v.len() > 254
            || v.chars().any(|c| c.is_whitespace() || c.is_control() || matches!(c, '<' | '>' | ',' | ';' | '"'))
            || v.matches('@').count() != 1;
        let Some((local, domain)) = v.split_once('@') else { return Err(InvalidAddress) };
        if bad || local.is_empty() || !domain.contains('.') || domain.starts_with('.') || domain.ends_with('.') {
            return Err(InvalidAddress);
        }
        Ok(Self(v.to_owned()))
    }

    /// The address itself, for the provider call.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for EmailAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EmailAddress(<redacted>)")
    }
}

/// Not an address punctual will store or send to (the value is not repeated: it may be one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an email address (local@domain, no display name, at most 254 characters)")]
pub struct InvalidAddress;

/// The recipients store failed as machinery.
#[derive(Debug, thiserror::Error)]
pub enum RecipientsError {
    /// A stored address is not one.
    #[error("recipient {recipient_ref} of tenant {tenant_id} holds an unusable address")]
    Corrupt {
        /// The tenant.
        tenant_id: String,
        /// The reference.
        recipient_ref: String,
    },
    /// Anything else.
    #[error("recipients store request failed")]
    Unknown(#[source] BoxError),
}

impl RecipientsError {
    /// Reads change nothing.
    pub fn certainty(&self) -> Certainty {
        Certainty::Determinate
    }
}

/// Resolves a tenant's references to addresses.
pub trait Recipients: Send + Sync {
    /// The address `tenant` holds for `recipient_ref`; `None` when the store has none (another
    /// tenant's entry under the same reference is never an answer).
    fn address(
        &self,
        tenant: &TenantId,
        recipient_ref: &str,
    ) -> impl Future<Output = Result<Option<EmailAddress>, RecipientsError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_checked_and_never_printed() {
        let a = EmailAddress::parse(" ana@example.com ").unwrap();
        assert_eq!(a.expose(), "ana@example.com");
        assert!(!format!("{a:?}").contains("ana"));
        for bad in [
            "",
            "ana",
            "@example.com",
            "ana@",
            "ana@example",
            "a b@example.com",
            "Ana <ana@example.com>",
            "a@b@c.com",
            "ana@.com",
            "x,y@example.com",
        ] {
            assert_eq!(EmailAddress::parse(bad), Err(InvalidAddress), "{bad:?}");
        }
        assert!(EmailAddress::parse(&format!("{}@example.com", "a".repeat(250))).is_err());
    }
}
