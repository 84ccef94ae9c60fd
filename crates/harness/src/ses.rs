//! Amazon SES in the local pipeline (`punctual run --provider ses`, `local up --provider ses`):
//! moto's SES stands in for the real one. moto accepts `SendEmail` only from a verified
//! identity, refuses an unverified one with `MessageRejected`, and counts what it sent; it has
//! no stored templates (so the local sender renders content inline, `SES_CONTENT=inline`) and no
//! v2 `GetAccount` (so the count is read through SES v1's `GetSendQuota`).

use aws_config::SdkConfig;

use crate::{HarnessError, step};

/// The sending address of the local pipeline (verified on moto by [`verify`]).
pub const LOCAL_FROM: &str = "reminders@punctual.example";

/// The address the local pipeline stores for a recipient reference (a reserved `.example`
/// domain: nothing here can reach a real mailbox).
pub fn local_address(recipient_ref: &str) -> String {
    format!("{recipient_ref}@customers.punctual.example")
}

/// Verifies `from` as an SES identity on the emulator (idempotent).
pub async fn verify(config: &SdkConfig, from: &str) -> Result<(), HarnessError> {
    let ses = aws_sdk_sesv2::Client::new(config);
    match ses.create_email_identity().email_identity(from).send().await {
        Ok(_) => Ok(()),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_already_exists_exception()) => Ok(()),
        Err(e) => Err(step("verifying the SES identity on the emulator")(e)),
    }
}

pub use punctual_ses::emulator::sent_last_24_hours;
