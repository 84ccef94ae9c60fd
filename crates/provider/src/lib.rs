//! `punctual-provider`: the HTTP client that calls the reminder provider.
//!
//! One `reqwest::Client` (rustls) per cold start. Each call carries
//! `Authorization: Bearer <token>` and `Idempotency-Key: reminder:{reminder_id}`, has a timeout
//! the sender derived from the invocation's remaining time, and is classified (DESIGN §4 step
//! 8): a refused or failed *connection* is determinate (the request never left), anything that
//! fails after the request may have been sent — a timeout, a dropped connection, an unreadable
//! answer — is indeterminate and retried with the same key. Redirects are never followed: a
//! 3xx is a permanent answer (`classified_permanent` with its status), never a delivery.
//!
//! A 401 or 403 is first a credential event, not the reminder's fault: with a [`TokenSource`]
//! (the secret store), the client reads the token again — at most once per instance per
//! [`REFRESH_EVERY`], within the call's budget — and, if it changed, repeats the call once
//! under the same `Idempotency-Key` within what is left of the call's timeout (a refused call
//! was not processed, and the key makes the repeat safe anyway). So a rotation does not
//! dead-letter a morning. A refusal the source confirms (it holds the same token, or there is
//! no source) is returned as it is; one it cannot judge (unreadable, no time left) comes back
//! as transient, to be retried — never as a verdict on the credentials.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use punctual_core::ports::{Provider, ProviderError, ProviderRequest};
use punctual_core::provider::{ProviderOutcome, RetryAfter};
use punctual_core::secret::{Secret, TokenSource};
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

/// The longest a refused token is kept before the token source is asked again; also the
/// fewest seconds between two reads of the source by one instance.
pub const REFRESH_EVERY: Duration = Duration::from_secs(10);

/// The provider client.
#[derive(Debug, Clone)]
pub struct HttpProvider {
    client: reqwest::Client,
    url: String,
    auth: Arc<RwLock<HeaderValue>>,
    source: Option<Arc<dyn TokenSource>>,
    /// When the source was last read (one read at a time per instance).
    refreshed: Arc<futures_util::lock::Mutex<Option<Instant>>>,
}

fn bearer(token: &Secret) -> Result<HeaderValue, ClientError> {
    let mut auth = HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| ClientError::BadToken)?;
    auth.set_sensitive(true);
    Ok(auth)
}

impl HttpProvider {
    /// A client posting to `url` (e.g. `https://api.provider.example/v1/messages`) with `token`.
    pub fn new(url: &str, token: &Secret, connect_timeout: Duration) -> Result<Self, ClientError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ClientError::BadUrl(url.to_owned()));
        }
        let auth = bearer(token)?;
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
        Ok(Self {
            client,
            url: url.to_owned(),
            auth: Arc::new(RwLock::new(auth)),
            source: None,
            refreshed: Arc::new(futures_util::lock::Mutex::new(None)),
        })
    }

    /// Reads the token again from `source` after a 401/403 (see the module docs).
    pub fn with_token_source(mut self, source: Arc<dyn TokenSource>) -> Self {
        self.source = Some(source);
        self
    }

    fn current(&self) -> HeaderValue {
        self.auth.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// What the token source says about a refused token, within `budget`: another record of
    /// this instance may have refreshed already; else the source is read, unless it was read
    /// within [`REFRESH_EVERY`] (then the refusal is confirmed by that read).
    async fn fresh_token(&self, refused: &HeaderValue, budget: Duration) -> Refresh {
        let Some(source) = self.source.as_ref() else {
            // A configured token cannot change under a running instance: confirmed.
            return Refresh::Confirmed;
        };
        let mut last = self.refreshed.lock().await;
        let current = self.current();
        if current != *refused {
            return Refresh::Fresh(current);
        }
        if last.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
            return Refresh::Confirmed;
        }
        // Bounded by the call's own budget (the other records of the batch wait on the lock).
        let fetched =
            match futures_util::future::select(Box::pin(source.fetch()), Box::pin(tokio::time::sleep(budget))).await {
                futures_util::future::Either::Left((Ok(token), _)) => match bearer(&token) {
                    Ok(v) => v,
                    Err(_) => {
                        tracing::warn!("the token source holds a value that is not a valid header");
                        *last = Some(Instant::now());
                        return Refresh::Confirmed;
                    }
                },
                futures_util::future::Either::Left((Err(e), _)) => {
                    tracing::warn!(error = %e, "the provider refused the token and the token source could not be read");
                    return Refresh::Unknown;
                }
                futures_util::future::Either::Right(_) => {
                    tracing::warn!("the provider refused the token and the token source did not answer in time");
                    return Refresh::Unknown;
                }
            };
        *last = Some(Instant::now());
        if fetched == *refused {
            tracing::warn!("the provider refused the token and the token source holds the same one");
            return Refresh::Confirmed;
        }
        tracing::info!("the provider refused the token; using the token source's new one");
        *self.auth.write().unwrap_or_else(PoisonError::into_inner) = fetched.clone();
        Refresh::Fresh(fetched)
    }

    /// Opens a connection (TLS handshake included) so the first real call does not pay for it.
    /// Any answer, even an error status, means the connection is warm.
    pub async fn warm_up(&self) -> bool {
        self.client.head(&self.url).timeout(Duration::from_secs(2)).send().await.is_ok()
    }
}

/// What the token source says about a refused token.
enum Refresh {
    /// A different token: retry with it.
    Fresh(HeaderValue),
    /// The source holds the refused token (or was read within [`REFRESH_EVERY`], or there is
    /// no source): the refusal stands.
    Confirmed,
    /// The source could not be read in time: nothing is known; retry later.
    Unknown,
}

impl Provider for HttpProvider {
    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        let started = Instant::now();
        let auth = self.current();
        let outcome = self.call(req, auth.clone(), req.timeout).await?;
        let Some(status @ (401 | 403)) = outcome.status() else { return Ok(outcome) };
        // Only within the call's own budget: the sender sized it to its deadlines.
        let left = || req.timeout.saturating_sub(started.elapsed());
        let transient = ProviderOutcome::Transient { status: Some(status), retry_after: None };
        match self.fresh_token(&auth, left()).await {
            Refresh::Fresh(fresh) if left() >= Duration::from_millis(200) => self.call(req, fresh, left()).await,
            // A new token and no time to use it, or no answer from the source: not a verdict
            // on the credentials, so a retry (backoff), never the pause.
            Refresh::Fresh(_) | Refresh::Unknown => Ok(transient),
            Refresh::Confirmed => Ok(outcome),
        }
    }
}

impl HttpProvider {
    async fn call(
        &self,
        req: &ProviderRequest<'_>,
        auth: HeaderValue,
        timeout: Duration,
    ) -> Result<ProviderOutcome, ProviderError> {
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
            .header(reqwest::header::AUTHORIZATION, auth)
            .header("Idempotency-Key", m.reminder_id.idempotency_key().as_str())
            .timeout(timeout)
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
