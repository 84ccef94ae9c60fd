//! `punctual-provider`: the HTTP client that calls the reminder provider.
//!
//! One `reqwest::Client` (rustls) per cold start. Each call carries
//! `Authorization: Bearer <token>` and `Idempotency-Key: reminder:{reminder_id}`, has a timeout
//! the sender derived from the invocation's remaining time, and is classified
//! (docs/design.md#the-sender-decision): a refused or failed *connection* is determinate (the request never left), anything that
//! fails after the request may have been sent — a timeout, a dropped connection, an unreadable
//! answer — is indeterminate and retried with the same key. Redirects are never followed: a
//! 3xx is a permanent answer (`classified_permanent` with its status), never a delivery.
//!
//! A 401 or 403 is first a credential event, not the reminder's fault: with a [`TokenSource`]
//! (the secret store), the client reads the token again — for a 403 at most once per instance
//! per [`REFRESH_EVERY`]; for a 401 (which pauses the fleet once confirmed) unless a read begun
//! after the refused call went out already judged the token — within the call's budget — and,
//! if it changed, repeats the call once
//! under the same `Idempotency-Key` within what is left of the call's timeout (a refused call
//! was not processed, and the key makes the repeat safe anyway). So a rotation does not
//! dead-letter a morning. A refusal the source confirms (it holds the same token, or there is
//! no source) is returned as it is; one it cannot judge (unreadable, no time left) comes back
//! as transient, to be retried — never as a verdict on the credentials.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use punctual_core::ports::{Provider, ProviderError, ProviderRequest};
use punctual_core::provider::{ProviderOutcome, ProviderProfile, ResetForm, ThrottleHints};
use punctual_core::secret::{Secret, TokenSource};
use reqwest::header::{HeaderName, HeaderValue};

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
    /// A header name in the vendor profile is not a valid HTTP header name.
    #[error("{0:?} is not a valid HTTP header name")]
    BadHeaderName(String),
    /// A JSON pointer in the vendor profile does not start with `/`.
    #[error("{0:?} is not a JSON pointer (RFC 6901: empty, or starting with /)")]
    BadPointer(String),
}

/// How the token is presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <token>` (the default).
    Bearer,
    /// `<name>: <token>` (e.g. `X-Api-Key`).
    Header(HeaderName),
}

/// What differs between vendors' HTTP APIs (docs/design.md#providers-and-idempotency-profiles). The defaults are punctual's
/// own contract, which the provider double speaks.
#[derive(Debug, Clone)]
pub struct VendorProfile {
    /// How the token is sent.
    pub auth: Auth,
    /// The idempotency-key header; `None`: the vendor honours none (no key is sent, and the
    /// sender treats an unknown outcome per `PROVIDER_IDEMPOTENCY`).
    pub key_header: Option<HeaderName>,
    /// JSON pointer to the receipt in a 2xx body (default `/id`).
    pub receipt_pointer: String,
    /// JSON pointer to an error code in a non-2xx body, read with `throttle_codes`.
    pub error_code_pointer: Option<String>,
    /// Error codes that mean "slow down" whatever the status (some vendors answer 400 or 403
    /// with `{"error": {"code": "rate_limited"}}`): classified like a 429.
    pub throttle_codes: Vec<String>,
    /// How `X-RateLimit-Reset` is read.
    pub reset: ResetForm,
}

impl Default for VendorProfile {
    fn default() -> Self {
        Self {
            auth: Auth::Bearer,
            key_header: Some(HeaderName::from_static("idempotency-key")),
            receipt_pointer: "/id".into(),
            error_code_pointer: None,
            throttle_codes: Vec::new(),
            reset: ResetForm::Auto,
        }
    }
}

impl VendorProfile {
    /// What a vendor of this dialect promises: it honours idempotency keys when it is sent one
    /// (a key header is configured).
    pub fn profile(&self) -> ProviderProfile {
        ProviderProfile { honours_keys: self.key_header.is_some() }
    }

    /// Parses the profile's textual settings (the sender's `PROVIDER_*` variables; `None`
    /// keeps the default): `auth` is `bearer` or `header:NAME`; `key_header` a header name or
    /// `none`; pointers are RFC 6901; `throttle_codes` comma-separated.
    pub fn parse(
        auth: Option<&str>,
        key_header: Option<&str>,
        receipt_pointer: Option<&str>,
        error_code_pointer: Option<&str>,
        throttle_codes: Option<&str>,
        reset: ResetForm,
    ) -> Result<Self, ClientError> {
        let header = |name: &str| {
            HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| ClientError::BadHeaderName(name.to_owned()))
        };
        let pointer = |p: &str| {
            if p.is_empty() || p.starts_with('/') {
                Ok(p.to_owned())
            } else {
                Err(ClientError::BadPointer(p.to_owned()))
            }
        };
        let d = Self::default();
        Ok(Self {
            auth: match auth.map(str::trim) {
                None | Some("bearer") => Auth::Bearer,
                Some(other) => match other.strip_prefix("header:") {
                    Some(name) => Auth::Header(header(name)?),
                    None => return Err(ClientError::BadHeaderName(other.to_owned())),
                },
            },
            key_header: match key_header.map(str::trim) {
                None => d.key_header,
                Some("none") => None,
                Some(name) => Some(header(name)?),
            },
            receipt_pointer: receipt_pointer.map(pointer).transpose()?.unwrap_or(d.receipt_pointer),
            error_code_pointer: error_code_pointer.map(pointer).transpose()?,
            throttle_codes: throttle_codes
                .map(|c| c.split(',').map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect())
                .unwrap_or_default(),
            reset,
        })
    }
}

/// After a 403, the longest a refused token is kept before the token source is asked again;
/// also the fewest seconds between two reads of the source for 403s by one instance. A 401 is
/// never confirmed by a read older than its call (see `fresh_token`).
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
    vendor: Arc<VendorProfile>,
}

fn credential(auth: &Auth, token: &Secret) -> Result<HeaderValue, ClientError> {
    let value = match auth {
        Auth::Bearer => format!("Bearer {}", token.expose()),
        Auth::Header(_) => token.expose().to_owned(),
    };
    let mut value = HeaderValue::from_str(&value).map_err(|_| ClientError::BadToken)?;
    value.set_sensitive(true);
    Ok(value)
}

impl HttpProvider {
    /// A client posting to `url` (e.g. `https://api.provider.example/v1/messages`) with `token`.
    pub fn new(url: &str, token: &Secret, connect_timeout: Duration) -> Result<Self, ClientError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ClientError::BadUrl(url.to_owned()));
        }
        let auth = credential(&Auth::Bearer, token)?;
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
            vendor: Arc::new(VendorProfile::default()),
        })
    }

    /// Speaks a vendor's dialect (auth scheme, key header, body shapes, reset form); `token`
    /// is presented the profile's way.
    pub fn with_vendor(mut self, vendor: VendorProfile, token: &Secret) -> Result<Self, ClientError> {
        self.auth = Arc::new(RwLock::new(credential(&vendor.auth, token)?));
        self.vendor = Arc::new(vendor);
        Ok(self)
    }

    /// Reads the token again from `source` after a 401/403 (see the module docs).
    pub fn with_token_source(mut self, source: Arc<dyn TokenSource>) -> Self {
        self.source = Some(source);
        self
    }

    fn current(&self) -> HeaderValue {
        self.auth.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// What the token source says about `refused`, which the provider answered `status` to a
    /// call sent at `sent`, within `budget`: another record of this instance may have refreshed
    /// already; a read begun after the call went out judged this very token (the records of a
    /// batch refused together share one read); else the source is read — for a 403 only when
    /// the last read is older than [`REFRESH_EVERY`] (a 403 is often about the request, and
    /// must not make every call read the store), for a 401 always: the sender pauses the fleet
    /// on a confirmed 401, and a read from before the call cannot tell that the secret was not
    /// rotated since.
    async fn fresh_token(&self, refused: &HeaderValue, status: u16, sent: Instant, budget: Duration) -> Refresh {
        let Some(source) = self.source.as_ref() else {
            // A configured token cannot change under a running instance: confirmed.
            return Refresh::Confirmed;
        };
        let mut last = self.refreshed.lock().await;
        let current = self.current();
        if current != *refused {
            return Refresh::Fresh(current);
        }
        if last.is_some_and(|t| t >= sent) {
            return Refresh::Confirmed;
        }
        if status != 401 && last.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
            return Refresh::Confirmed;
        }
        // Bounded by the call's own budget (the other records of the batch wait on the lock).
        // The read's start is what it can vouch for: the source held this value then or later.
        let asked = Instant::now();
        let fetched =
            match futures_util::future::select(Box::pin(source.fetch()), Box::pin(tokio::time::sleep(budget))).await {
                futures_util::future::Either::Left((Ok(token), _)) => match credential(&self.vendor.auth, &token) {
                    Ok(v) => v,
                    Err(_) => {
                        tracing::warn!("the token source holds a value that is not a valid header");
                        *last = Some(asked);
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
        *last = Some(asked);
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
    /// The source holds the refused token (read after the refused call went out; for a 403,
    /// within [`REFRESH_EVERY`]), or there is no source: the refusal stands.
    Confirmed,
    /// The source could not be read in time: nothing is known; retry later.
    Unknown,
}

impl Provider for HttpProvider {
    fn profile(&self) -> ProviderProfile {
        self.vendor.profile()
    }

    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        let started = Instant::now();
        let auth = self.current();
        let outcome = self.call(req, auth.clone(), req.timeout).await?;
        let Some(status @ (401 | 403)) = outcome.status() else { return Ok(outcome) };
        // Only within the call's own budget: the sender sized it to its deadlines.
        let left = || req.timeout.saturating_sub(started.elapsed());
        let transient = ProviderOutcome::Transient { status: Some(status), retry_after: None };
        match self.fresh_token(&auth, status, started, left()).await {
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
        let mut body = serde_json::json!({
            "reminder_id": m.reminder_id.as_str(),
            "tenant_id": m.tenant_id.as_str(),
            "renewal_id": m.renewal_id.as_str(),
            "kind": m.kind.as_str(),
            "recipient_ref": req.recipient_ref,
            "channel": req.channel,
            "correlation_id": m.correlation_id.as_str(),
        });
        // The producer's template variables, as the renewal holds them (docs/integration.md).
        if let Some(data) = req.data {
            body["data"] = serde_json::Value::Object(data.object());
        }
        let v = &*self.vendor;
        let auth_name = match &v.auth {
            Auth::Bearer => reqwest::header::AUTHORIZATION,
            Auth::Header(name) => name.clone(),
        };
        let mut request = self.client.post(&self.url).header(auth_name, auth).timeout(timeout).json(&body);
        if let Some(key) = &v.key_header {
            request = request.header(key, m.reminder_id.idempotency_key().as_str());
        }
        let sent = request.send().await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_builder() => return Err(ProviderError::Unknown(Box::new(e))),
            // No connection was made: the request never reached the provider.
            Err(e) if e.is_connect() => return Ok(ProviderOutcome::Transient { status: None, retry_after: None }),
            // Timeout or a connection lost mid-request: it may have been processed.
            Err(_) => return Ok(ProviderOutcome::Indeterminate { status: None }),
        };
        let status = resp.status().as_u16();
        let headers = resp.headers();
        let hints =
            ThrottleHints::read(|name| headers.get(name).and_then(|v| v.to_str().ok()), v.reset, chrono::Utc::now());
        // A body is read within the call's timeout (set on the request); an unreadable one is
        // no answer to read from, never a reason to reclassify the status.
        let body = resp.bytes().await.ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        let text_at = |pointer: &str| {
            body.as_ref().and_then(|b| b.pointer(pointer)).and_then(|v| match v {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
        };
        if (200..300).contains(&status) {
            // A 2xx whose body cannot be read is still a delivery; only the receipt is lost.
            let receipt = text_at(&v.receipt_pointer);
            return Ok(ProviderOutcome::Accepted { status, receipt, budget: hints.budget });
        }
        let throttled_by_code =
            v.error_code_pointer.as_deref().and_then(text_at).is_some_and(|code| v.throttle_codes.contains(&code));
        if throttled_by_code {
            return Ok(ProviderOutcome::Transient { status: Some(429), retry_after: hints.retry_after });
        }
        Ok(ProviderOutcome::from_status(status, hints.retry_after, None))
    }
}
