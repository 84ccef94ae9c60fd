//! `punctual-provider`: the HTTP client that calls the reminder provider.
//!
//! One `reqwest::Client` (rustls) per cold start. Each call carries
//! `Authorization: Bearer <token>` and `Idempotency-Key: reminder:{reminder_id}`, has a timeout
//! the sender derived from the invocation's remaining time, and is classified (DESIGN §4 step
//! 8): a refused or failed *connection* is determinate (the request never left), anything that
//! fails after the request may have been sent — a timeout, a dropped connection, an unreadable
//! answer — is indeterminate and retried with the same key. Redirects are never followed: a
//! 3xx is a permanent answer (`classified_permanent` with its status), never a delivery.

use std::time::Duration;

use punctual_core::ports::{Provider, ProviderError, ProviderRequest};
use punctual_core::provider::{ProviderOutcome, RetryAfter};
use punctual_core::secret::Secret;
use reqwest::header::{HeaderValue, RETRY_AFTER};

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `PROVIDER_URL` is not an http(s) URL.
    #[error("provider URL {0:?} must be an absolute http:// or https:// URL")]
    BadUrl(String),
    /// The token has characters a header cannot carry.
    #[error("provider token contains characters not allowed in an HTTP header")]
    BadToken,
    /// reqwest refused the configuration.
    #[error("could not build the HTTP client")]
    Build(#[source] reqwest::Error),
}

/// The provider client.
#[derive(Debug, Clone)]
pub struct HttpProvider {
    client: reqwest::Client,
    url: String,
    auth: HeaderValue,
}

impl HttpProvider {
    /// A client posting to `url` (e.g. `https://api.provider.example/v1/messages`) with `token`.
    pub fn new(url: &str, token: &Secret, connect_timeout: Duration) -> Result<Self, ClientError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ClientError::BadUrl(url.to_owned()));
        }
        let mut auth =
            HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| ClientError::BadToken)?;
        auth.set_sensitive(true);
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            // Never follow a redirect: reqwest turns a 301/302/303 POST into a GET, and a 200
            // on that GET would be recorded as a delivery. A 3xx is classified permanent.
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("punctual/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(ClientError::Build)?;
        Ok(Self { client, url: url.to_owned(), auth })
    }

    /// Opens a connection (TLS handshake included) so the first real call does not pay for it.
    /// Any answer, even an error status, means the connection is warm.
    pub async fn warm_up(&self) -> bool {
        self.client.head(&self.url).timeout(Duration::from_secs(2)).send().await.is_ok()
    }
}

impl Provider for HttpProvider {
    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        let m = req.message;
        let body = serde_json::json!({
            "reminder_id": m.reminder_id.as_str(),
            "tenant_id": m.tenant_id.as_str(),
            "renewal_id": m.renewal_id.as_str(),
            "kind": m.kind.as_str(),
            "recipient_ref": req.recipient_ref,
            "channel": req.channel,
            "correlation_id": m.correlation_id.as_str(),
        });
        let sent = self
            .client
            .post(&self.url)
            .header(reqwest::header::AUTHORIZATION, self.auth.clone())
            .header("Idempotency-Key", m.reminder_id.idempotency_key().as_str())
            .timeout(req.timeout)
            .json(&body)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_builder() => return Err(ProviderError::Unknown(Box::new(e))),
            // No connection was made: the request never reached the provider.
            Err(e) if e.is_connect() => return Ok(ProviderOutcome::Transient { status: None, retry_after: None }),
            // Timeout or a connection lost mid-request: it may have been processed.
            Err(_) => return Ok(ProviderOutcome::Indeterminate { status: None }),
        };
        let status = resp.status().as_u16();
        let retry_after = resp.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(RetryAfter::parse);
        let receipt = if resp.status().is_success() {
            // A 2xx whose body cannot be read is still a delivery; only the receipt is lost.
            resp.json::<serde_json::Value>()
                .await
                .ok()
                .and_then(|v| v.get("id").and_then(|id| id.as_str()).map(str::to_owned))
        } else {
            None
        };
        Ok(ProviderOutcome::from_status(status, retry_after, receipt))
    }
}
