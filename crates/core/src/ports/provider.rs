//! The provider port: who delivers a reminder. A call that was made always ends in a
//! [`ProviderOutcome`] (determinate or indeterminate); the error is for a client that could not
//! call at all.

use std::future::Future;
use std::time::Duration;

use super::{BoxError, Certainty};
use crate::contract::ReminderMessage;
use crate::provider::{ProviderOutcome, ProviderProfile};

/// One provider call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRequest<'a> {
    /// The reminder (its idempotency key goes in the `Idempotency-Key` header).
    pub message: &'a ReminderMessage,
    /// From the renewal.
    pub recipient_ref: Option<&'a str>,
    /// From the renewal.
    pub channel: Option<&'a str>,
    /// The renewal's template variables (a command's `data`), for the provider's body; never
    /// logged.
    pub data: Option<&'a crate::renewal::TemplateData>,
    /// The whole call, connect to last byte, must finish within this.
    pub timeout: Duration,
}

/// The provider client failed before it could make a call (bad configuration); a call that
/// was made always ends in a [`ProviderOutcome`].
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// Anything else.
    #[error("provider client failed before calling")]
    Unknown(#[source] BoxError),
}

impl ProviderError {
    /// The client failed before calling: nothing reached the provider.
    pub fn certainty(&self) -> Certainty {
        Certainty::Determinate
    }
}

/// The downstream provider.
pub trait Provider: Send + Sync {
    /// What this adapter promises (whether it honours idempotency keys). The sender reads it
    /// once, at composition, to decide what an indeterminate outcome may lead to.
    fn profile(&self) -> ProviderProfile {
        ProviderProfile::default()
    }

    /// Sends one reminder.
    fn send(&self, req: &ProviderRequest<'_>) -> impl Future<Output = Result<ProviderOutcome, ProviderError>> + Send;
}
