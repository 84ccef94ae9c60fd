//! `punctual-ses`: Amazon SES (API v2) behind the provider port.
//!
//! - **No idempotency key.** SES has none, so the adapter's profile says so
//!   (`honours_keys: false`): the sender marks each call in the ledger first and, after an
//!   outcome it cannot know (a timeout, a dropped connection, a 5xx), follows
//!   `PROVIDER_IDEMPOTENCY` (`at_most_once` by default: quarantine as `provider_indeterminate`).
//!   For the same reason the SDK's own retries are **off** on this client: a retried
//!   `SendEmail` after a timeout would be a second email that nothing counted.
//! - **Addresses at the last moment.** The renewal's `recipient_ref` is resolved through the
//!   [`Recipients`] port (default: the DynamoDB recipients table) inside the call; a missing
//!   one is `recipient_unknown` (nothing sent, no attempt spent). A lookup that leaves less
//!   than [`MIN_SEND_BUDGET`] of the call's budget sends nothing either: a transient, not a
//!   call that times out after the request may have left (an indeterminate one). No address
//!   ever reaches a message, the DLQ, the ledger or a log: SES error messages that quote one
//!   are redacted.
//! - **Content per kind.** `template` (default): the SES stored template
//!   `{SES_TEMPLATE_PREFIX}{kind}` with `{tenant_id, renewal_id, reminder_id, kind,
//!   deliver_by}` as template data. `inline`: a plain-text message punctual renders itself —
//!   for emulators (moto 5.2.5 raises NotImplementedError on `Content.Template`) and for teams
//!   without templates yet.
//! - **Classification** ([`classify`]): throttling (`TooManyRequestsException`, `Throttling`)
//!   is a 429 to the shared limiter; "Daily message quota exceeded" or `LimitExceededException`
//!   also asks for 10 minutes (SES's own advice), which the limiter caps at its shared pause
//!   and re-probes; `AccountSuspended`, `SendingPaused`, `MailFromDomainNotVerified`, a missing
//!   template or configuration set (`NotFound`), a refused From identity (its address, whole,
//!   in SES's message), and every credential, permission or signing error ([`ACCOUNT_CODES`],
//!   any 401/403) refuse the whole
//!   deployment (the sender pauses the fleet for an operator instead of dead-lettering the
//!   morning); `MessageRejected` for the recipient and `BadRequest` are permanent for the
//!   message; a 503 or a refused connection is a determinate transient; a 408, a 500 and
//!   anything that may have reached SES is indeterminate.

pub mod emulator;

use std::time::Duration;

use aws_sdk_sesv2::Client;
use aws_sdk_sesv2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sesv2::operation::send_email::SendEmailError;
use aws_sdk_sesv2::types::{Body, Content, Destination, EmailContent, Message, MessageTag, Template};
use punctual_core::ports::{Provider, ProviderError, ProviderRequest, Recipients};
use punctual_core::provider::{ProviderOutcome, ProviderProfile, RetryAfter};
use punctual_core::reason::ReasonCode;

/// How long SES asks a sender over its daily quota to wait before asking again.
pub const DAILY_QUOTA_WAIT: Duration = Duration::from_secs(600);

/// The least of the call's budget worth calling SES with, once the recipients lookup has spent
/// its part. A `SendEmail` given a few milliseconds times out after the request may have left:
/// an indeterminate outcome (quarantined under `at_most_once`) for an email that was most
/// likely never sent. Below this the adapter does not call: a transient, nothing sent.
pub const MIN_SEND_BUDGET: Duration = Duration::from_millis(250);

/// What the email holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SesContent {
    /// The SES stored template `{prefix}{kind}` (production).
    #[default]
    Template,
    /// A plain-text message rendered by punctual (emulators, no templates yet).
    Inline,
}

impl SesContent {
    /// `template` or `inline`.
    pub fn parse(v: &str) -> Option<Self> {
        match v.trim() {
            "template" => Some(Self::Template),
            "inline" => Some(Self::Inline),
            _ => None,
        }
    }
}

/// The SES settings (the sender's `SES_*` variables).
#[derive(Debug, Clone)]
pub struct SesSettings {
    /// `SES_FROM_ADDRESS`: a verified identity's address.
    pub from_address: String,
    /// `SES_CONFIGURATION_SET`, if any (event publishing, dedicated IPs).
    pub configuration_set: Option<String>,
    /// `SES_TEMPLATE_PREFIX` (default `punctual-`).
    pub template_prefix: String,
    /// `SES_CONTENT`.
    pub content: SesContent,
}

/// The SES provider.
#[derive(Debug, Clone)]
pub struct SesProvider<R> {
    client: Client,
    recipients: R,
    settings: SesSettings,
}

impl<R: Recipients> SesProvider<R> {
    /// A provider over `sdk` (its endpoint and credentials; the SDK's retries are turned off
    /// here, see the module docs).
    pub fn new(sdk: &aws_sdk_sesv2::config::Config, recipients: R, settings: SesSettings) -> Self {
        let config = sdk.to_builder().retry_config(aws_sdk_sesv2::config::retry::RetryConfig::disabled()).build();
        Self { client: Client::from_conf(config), recipients, settings }
    }

    /// The account's `MaxSendRate` (SES `GetAccount`), for a limiter with no configured rate.
    pub async fn max_send_rate(&self) -> Result<f64, aws_sdk_sesv2::Error> {
        let account = self.client.get_account().send().await?;
        Ok(account.send_quota().map_or(0.0, |q| q.max_send_rate()))
    }

    fn content(&self, req: &ProviderRequest<'_>) -> Result<EmailContent, ProviderError> {
        let m = req.message;
        let build = |e: aws_sdk_sesv2::error::BuildError| ProviderError::Unknown(Box::new(e));
        match self.settings.content {
            SesContent::Template => {
                // The producer's variables (a command's `data`), then punctual's own, which
                // win a clash: a template can rely on them.
                let mut data = req.data.map(|d| d.object()).unwrap_or_default();
                for (k, v) in [
                    ("tenant_id", m.tenant_id.as_str().to_owned()),
                    ("renewal_id", m.renewal_id.as_str().to_owned()),
                    ("reminder_id", m.reminder_id.as_str().to_owned()),
                    ("kind", m.kind.as_str().to_owned()),
                    ("deliver_by", punctual_core::contract::format_instant(m.deliver_by)),
                ] {
                    data.insert(k.to_owned(), serde_json::Value::String(v));
                }
                let data = serde_json::Value::Object(data);
                let template = Template::builder()
                    .template_name(format!("{}{}", self.settings.template_prefix, m.kind.as_str()))
                    .template_data(data.to_string())
                    .build();
                Ok(EmailContent::builder().template(template).build())
            }
            SesContent::Inline => {
                let text = format!(
                    "Your renewal {} is due. Please act before {}.\n\nReference: {}\n",
                    m.renewal_id.as_str(),
                    punctual_core::contract::format_instant(m.deliver_by),
                    m.reminder_id.as_str()
                );
                let subject = Content::builder()
                    .data(format!("Renewal reminder ({})", m.kind.as_str()))
                    .build()
                    .map_err(build)?;
                let body = Body::builder().text(Content::builder().data(text).build().map_err(build)?).build();
                Ok(EmailContent::builder().simple(Message::builder().subject(subject).body(body).build()).build())
            }
        }
    }
}

impl<R: Recipients> Provider for SesProvider<R> {
    fn profile(&self) -> ProviderProfile {
        ProviderProfile { honours_keys: false }
    }

    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        let unknown =
            |detail: String| Ok(ProviderOutcome::Undeliverable { reason: ReasonCode::RecipientUnknown, detail });
        let Some(reference) = req.recipient_ref else {
            return unknown("the renewal has no recipient_ref".into());
        };
        // The lookup spends the call's own budget (the sender sized it to the deadline and the
        // lease): the send gets what is left, and a lookup that overruns sends nothing.
        let started = std::time::Instant::now();
        let address =
            match tokio::time::timeout(req.timeout, self.recipients.address(&req.message.tenant_id, reference)).await {
                Ok(Ok(Some(a))) => a,
                Ok(Ok(None)) => {
                    return unknown(format!(
                        "no address for recipient_ref {reference:?} of tenant {} in the recipients table",
                        req.message.tenant_id
                    ));
                }
                // The store failed or was too slow: nothing was sent; the sender defers.
                Ok(Err(e)) => return Err(ProviderError::Unknown(Box::new(e))),
                Err(_) => return Err(ProviderError::Unknown("the recipients lookup overran the call's budget".into())),
            };
        let left = req.timeout.saturating_sub(started.elapsed());
        if left < MIN_SEND_BUDGET {
            tracing::warn!(
                left_ms = left.as_millis() as u64,
                "the recipients lookup left too little to call SES; deferred"
            );
            return Ok(ProviderOutcome::Transient { status: None, retry_after: None });
        }
        let tag = MessageTag::builder()
            .name("punctual_reminder")
            .value(req.message.reminder_id.as_str())
            .build()
            .map_err(|e| ProviderError::Unknown(Box::new(e)))?;
        let timeout = aws_sdk_sesv2::config::timeout::TimeoutConfig::builder().operation_timeout(left).build();
        let sent = self
            .client
            .send_email()
            .from_email_address(&self.settings.from_address)
            .destination(Destination::builder().to_addresses(address.expose()).build())
            .content(self.content(req)?)
            .email_tags(tag)
            .set_configuration_set_name(self.settings.configuration_set.clone())
            .customize()
            .config_override(aws_sdk_sesv2::config::Builder::default().timeout_config(timeout))
            .send()
            .await;
        Ok(match sent {
            Ok(out) => ProviderOutcome::Accepted { status: 200, receipt: out.message_id, budget: None },
            Err(e) => classify(&e, &self.settings.from_address),
        })
    }
}

/// Replaces every word holding an `@` (an address SES quotes back) with `<address>`.
pub fn redact(text: &str) -> String {
    text.split(' ').map(|w| if w.contains('@') { "<address>" } else { w }).collect::<Vec<_>>().join(" ")
}

/// Error codes that refuse every email this deployment would send, whatever the recipient:
/// credentials, permissions, signing, the account. They pause the fleet (like a confirmed 401)
/// instead of dead-lettering the morning one reminder at a time.
pub const ACCOUNT_CODES: &[&str] = &[
    "AccessDeniedException",
    "AccessDenied",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "NotAuthorized",
];

/// Classifies a failed `SendEmail` from `from` (module docs).
pub fn classify<R: std::fmt::Debug + HasStatus>(e: &SdkError<SendEmailError, R>, from: &str) -> ProviderOutcome {
    let throttled = |retry_after| ProviderOutcome::Transient { status: Some(429), retry_after };
    match e {
        // Never left this process.
        SdkError::ConstructionFailure(_) => ProviderOutcome::Transient { status: None, retry_after: None },
        SdkError::DispatchFailure(d) if refused_before_sending(&format!("{d:?}")) => {
            ProviderOutcome::Transient { status: None, retry_after: None }
        }
        // A timeout, a connection lost mid-request, an answer that could not be read: SES may
        // have sent it.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ProviderOutcome::Indeterminate { status: None }
        }
        SdkError::ServiceError(ctx) => {
            let err = ctx.err();
            let status = ctx.raw().status_code();
            let detail = |name: &str| {
                let message = err.message().map(redact).unwrap_or_default();
                format!("SES {name}: {message}").trim_end_matches([' ', ':']).to_owned()
            };
            let quota = err.message().is_some_and(|m| m.contains("Daily message quota exceeded"));
            // The From identity itself is refused (not verified, or not ours): every email
            // would be, so the fleet pauses. Checked before the message is redacted.
            let sender_refused = err.message().is_some_and(|m| names_address(m, from));
            let wait = Some(RetryAfter::Seconds(DAILY_QUOTA_WAIT.as_secs()));
            match err {
                SendEmailError::TooManyRequestsException(_) => throttled(if quota { wait } else { None }),
                SendEmailError::LimitExceededException(_) => throttled(wait),
                SendEmailError::AccountSuspendedException(_) => {
                    ProviderOutcome::AccountBlocked { detail: detail("AccountSuspendedException") }
                }
                SendEmailError::SendingPausedException(_) => {
                    ProviderOutcome::AccountBlocked { detail: detail("SendingPausedException") }
                }
                SendEmailError::MailFromDomainNotVerifiedException(_) => {
                    ProviderOutcome::AccountBlocked { detail: detail("MailFromDomainNotVerifiedException") }
                }
                SendEmailError::MessageRejected(_) if sender_refused => {
                    ProviderOutcome::AccountBlocked { detail: detail("MessageRejected (the From identity)") }
                }
                SendEmailError::MessageRejected(_) => ProviderOutcome::Undeliverable {
                    reason: ReasonCode::ClassifiedPermanent,
                    detail: detail("MessageRejected"),
                },
                // A missing template or configuration set: the deployment's, not the message's.
                SendEmailError::NotFoundException(_) => {
                    ProviderOutcome::AccountBlocked { detail: detail("NotFoundException") }
                }
                SendEmailError::BadRequestException(_) => ProviderOutcome::Undeliverable {
                    reason: ReasonCode::ClassifiedPermanent,
                    detail: detail("BadRequestException"),
                },
                other if matches!(other.code(), Some("Throttling" | "ThrottlingException")) => {
                    throttled(if quota { wait } else { None })
                }
                other if other.code().is_some_and(|c| ACCOUNT_CODES.contains(&c)) => {
                    ProviderOutcome::AccountBlocked { detail: detail(other.code().unwrap_or("error")) }
                }
                // Unmodelled: by status, like any HTTP provider (a 503 was not processed; a
                // 500 may have been; a 4xx will not change).
                _ => match status {
                    429 => throttled(None),
                    // 401/403 without a modelled code: about the credentials, not the message.
                    401 | 403 => ProviderOutcome::AccountBlocked { detail: detail(err.code().unwrap_or("error")) },
                    // 408: SES may or may not act on it (as for any HTTP provider).
                    408 => ProviderOutcome::Indeterminate { status: Some(408) },
                    400..=499 => ProviderOutcome::Undeliverable {
                        reason: ReasonCode::ClassifiedPermanent,
                        detail: detail(err.code().unwrap_or("error")),
                    },
                    s => ProviderOutcome::from_status(s, None, None),
                },
            }
        }
        _ => ProviderOutcome::Indeterminate { status: None },
    }
}

/// Whether `message` names the address of `from` (`a@b.c` or `Name <a@b.c>`) as a word of its
/// own, case aside: a rejected recipient `xnoreply@x.com` or `noreply@x.com.au` is not the From
/// address `noreply@x.com`, and must not pause the fleet as a refused identity.
fn names_address(message: &str, from: &str) -> bool {
    let from = from.rsplit_once('<').map_or(from, |(_, a)| a.trim_end_matches('>')).trim();
    !from.is_empty()
        && message
            .split(|c: char| {
                c.is_whitespace() || matches!(c, ',' | ';' | '<' | '>' | '"' | '\'' | '(' | ')' | '[' | ']')
            })
            .map(|w| w.trim_end_matches(['.', ':']))
            .any(|w| w.eq_ignore_ascii_case(from))
}

/// A raw response's HTTP status (so [`classify`] is testable without a live client).
pub trait HasStatus {
    /// The status code.
    fn status_code(&self) -> u16;
}

impl HasStatus for aws_sdk_sesv2::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

/// A dispatch failure that happened while connecting (refused, unreachable, DNS): the
/// request never left. Read from the error's description, the only place the SDK's connector
/// keeps it (`ConnectError` from hyper-util, "Connection refused" from the OS); anything else
/// counts as maybe sent.
fn refused_before_sending(debug: &str) -> bool {
    ["ConnectError", "Connection refused", "dns error", "failed to lookup address"].iter().any(|m| debug.contains(m))
}

#[cfg(test)]
mod tests {
    use super::names_address;

    #[test]
    fn the_from_address_is_matched_whole() {
        let from = "noreply@x.com";
        assert!(names_address("identities failed the check: noreply@x.com", from));
        assert!(names_address("not verified: NoReply@X.com.", from));
        assert!(names_address("identity <noreply@x.com> refused", "Billing <noreply@x.com>"));
        assert!(!names_address("identities failed the check: xnoreply@x.com", from));
        assert!(!names_address("identities failed the check: noreply@x.com.au", from));
        assert!(!names_address("noreply@x.com", ""));
    }
}
