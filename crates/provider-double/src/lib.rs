//! A provider double: a real HTTP/1.1 server on loopback that behaves like a rate-limited
//! email/SMS API, for the integration tests and `make run`.
//!
//! - `POST /v1/messages` with `Idempotency-Key`: a token bucket (`quota`/s, `burst`) answers
//!   `429` + `Retry-After` past the quota; a repeated key returns the first result and counts
//!   as a duplicate attempt, never as a second delivery; a `Bearer` token is checked when
//!   configured.
//! - `POST /control/script` queues behaviours for the next requests (JSON array):
//!   `{"status": 429, "retry_after": "7"}`, `{"status": 503}`, `{"slow_ms": 3000}` (answer late,
//!   but process), `{"drop": true}` (close without processing), `{"accept_then_drop": true}`
//!   (process, then close without answering).
//! - `GET /stats`: counters as JSON; `POST /control/reset` clears them.
//! - `POST /v2/email/outbound-emails`: Amazon SES v2 `SendEmail`, enough of it to test the SES
//!   adapter's request (a template, tags, the destination) and its error parsing: each request
//!   body is kept ([`Double::ses_requests`]); a scripted behaviour answers with its status,
//!   headers (e.g. `x-amzn-ErrorType: TooManyRequestsException`) and body; otherwise
//!   `200 {"MessageId": …}`. (moto serves SES for the end-to-end runs; it has no templates.)
//! - Throttling speaks one of the common dialects ([`RateHeaders`]): `Retry-After` (default),
//!   the IETF `RateLimit` field or its split form, or `X-RateLimit-*` with the reset as a delta
//!   or a Unix time; every answer then carries the bucket's remaining budget. With
//!   `keys: false` it behaves like a provider without idempotency keys: every acceptance is
//!   another effect (`accepted` counts them all, `duplicate_effects` the repeats).
//!
//! Responses are written with one `write_all` on a `TCP_NODELAY` socket: a split write costs
//! ~40 ms per call on loopback (Nagle + delayed ACK).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Configuration of the double.
#[derive(Debug, Clone)]
pub struct Config {
    /// Accepted calls per second.
    pub quota: f64,
    /// Bucket size (burst).
    pub burst: f64,
    /// Required bearer token, if any.
    pub token: Option<String>,
    /// Latency added to every answer.
    pub latency: Duration,
    /// How throttling and the remaining budget are told.
    pub rate_headers: RateHeaders,
    /// Honours `Idempotency-Key` (false: a repeat is another effect, and no key is required).
    pub keys: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            quota: 100.0,
            burst: 10.0,
            token: None,
            latency: Duration::ZERO,
            rate_headers: RateHeaders::RetryAfter,
            keys: true,
        }
    }
}

/// The throttling dialect the double speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RateHeaders {
    /// `Retry-After: N` on a 429, nothing else.
    #[default]
    RetryAfter,
    /// `RateLimit: limit=L, remaining=R, reset=S` on every answer.
    Ietf,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (delta seconds).
    IetfSplit,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (delta seconds).
    XDelta,
    /// The same with `X-RateLimit-Reset` as a Unix time in seconds (GitHub's form).
    XEpoch,
}

impl RateHeaders {
    /// `retry-after`, `ietf`, `ietf-split`, `x-delta` or `x-epoch`.
    pub fn parse(v: &str) -> Option<Self> {
        match v {
            "retry-after" => Some(Self::RetryAfter),
            "ietf" => Some(Self::Ietf),
            "ietf-split" => Some(Self::IetfSplit),
            "x-delta" => Some(Self::XDelta),
            "x-epoch" => Some(Self::XEpoch),
            _ => None,
        }
    }

    /// The headers telling `remaining` of `limit` until `reset_s` (whole seconds).
    fn headers(self, limit: u64, remaining: u64, reset_s: u64) -> Vec<(String, String)> {
        let pair = |k: &str, v: String| (k.to_owned(), v);
        match self {
            Self::RetryAfter => Vec::new(),
            Self::Ietf => vec![pair("ratelimit", format!("limit={limit}, remaining={remaining}, reset={reset_s}"))],
            Self::IetfSplit => vec![
                pair("ratelimit-limit", limit.to_string()),
                pair("ratelimit-remaining", remaining.to_string()),
                pair("ratelimit-reset", reset_s.to_string()),
            ],
            Self::XDelta | Self::XEpoch => {
                let reset = if self == Self::XEpoch {
                    let now =
                        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                    now + reset_s
                } else {
                    reset_s
                };
                vec![
                    pair("x-ratelimit-limit", limit.to_string()),
                    pair("x-ratelimit-remaining", remaining.to_string()),
                    pair("x-ratelimit-reset", reset.to_string()),
                ]
            }
        }
    }
}

/// One scripted behaviour for the next request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Behaviour {
    /// Answer this status (without processing unless 2xx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// `Retry-After` value to send with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<String>,
    /// Wait this long before answering (the request is processed normally).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_ms: Option<u64>,
    /// Close the connection without processing or answering.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drop: bool,
    /// Process the request (accept it), then close without answering.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_then_drop: bool,
    /// Extra headers to send with the answer (any dialect, any value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// The body of a scripted error answer (default `{"error":"scripted N"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// Counters exposed on `/stats`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Requests to `/v1/messages`.
    pub requests: u64,
    /// Distinct deliveries (first acceptance of a key).
    pub accepted: u64,
    /// Distinct idempotency keys seen in processed requests.
    pub distinct_keys: u64,
    /// Requests repeating a key whose first result was stored.
    pub duplicate_key_attempts: u64,
    /// 429 answers (quota or scripted).
    pub throttled: u64,
    /// Scripted non-429 error answers.
    pub injected_errors: u64,
    /// Connections closed without an answer.
    pub dropped: u64,
    /// Requests refused for a missing or wrong token.
    pub unauthorized: u64,
    /// Requests without an `Idempotency-Key`.
    pub missing_key: u64,
    /// Acceptances that repeated an effect already made (only with `keys: false`).
    #[serde(default)]
    pub duplicate_effects: u64,
    /// Milliseconds since start of the first and last acceptance (for utilisation).
    pub first_accept_ms: Option<u64>,
    /// See `first_accept_ms`.
    pub last_accept_ms: Option<u64>,
    /// Acceptances in each whole second since start (index = second): the rate the provider
    /// really saw, for charts.
    #[serde(default)]
    pub accepted_per_second: Vec<u64>,
    /// The quota bucket at its lowest, in tokens, as a request found it (before taking its
    /// own): how close the run came to a 429. Below 1 that request got one; at the burst the
    /// calls never bunched. A continuous figure where the 429 count is a rare event (one in
    /// some runs of 3,000, none in others): a change to the limiter's spacing moves it in
    /// every run. `None` before the first request the bucket judged.
    #[serde(default)]
    pub lowest_tokens: Option<f64>,
}

#[derive(Debug)]
struct State {
    stats: Stats,
    script: VecDeque<Behaviour>,
    /// First stored result per key: (status, body).
    results: HashMap<String, (u16, String)>,
    tokens: f64,
    refilled: Instant,
    ses_requests: Vec<serde_json::Value>,
    /// The last [`KEPT_BODIES`] message bodies, oldest first (bounded: a run sends millions).
    bodies: VecDeque<serde_json::Value>,
}

/// Message bodies [`Double::recent_bodies`] keeps.
pub const KEPT_BODIES: usize = 16;

#[derive(Debug)]
struct Shared {
    config: Config,
    started: Instant,
    state: Mutex<State>,
}

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running double.
#[derive(Debug)]
pub struct Double {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Double {
    /// Starts a double on `127.0.0.1:port` (0 = any free port).
    pub async fn start(config: Config, port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                stats: Stats::default(),
                script: VecDeque::new(),
                results: HashMap::new(),
                tokens: config.burst,
                refilled: Instant::now(),
                ses_requests: Vec::new(),
                bodies: VecDeque::new(),
            }),
            config,
            started: Instant::now(),
        });
        let accept = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = Arc::clone(&accept);
                tokio::spawn(async move {
                    let _ = serve(stream, shared).await;
                });
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The messages endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/v1/messages", self.addr)
    }

    /// When the double started (the origin of `*_ms` and `accepted_per_second`).
    pub fn started(&self) -> Instant {
        self.shared.started
    }

    /// The counters now.
    pub fn stats(&self) -> Stats {
        lock(&self.shared).stats.clone()
    }

    /// The SES `SendEmail` request bodies received so far.
    pub fn ses_requests(&self) -> Vec<serde_json::Value> {
        lock(&self.shared).ses_requests.clone()
    }

    /// The last [`KEPT_BODIES`] bodies `POST /v1/messages` received (JSON), oldest first.
    pub fn recent_bodies(&self) -> Vec<serde_json::Value> {
        lock(&self.shared).bodies.iter().cloned().collect()
    }

    /// The SES endpoint (`AWS_ENDPOINT_URL_SESV2` for the SDK).
    pub fn ses_endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues behaviours for the next requests.
    pub fn script(&self, behaviours: impl IntoIterator<Item = Behaviour>) {
        lock(&self.shared).script.extend(behaviours);
    }
}

impl Drop for Double {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Request {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// Largest request accepted (headers + body).
const MAX_REQUEST: usize = 64 * 1024;

async fn read_request(reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or_default().to_owned(), parts.next().unwrap_or_default().to_owned());
    let mut headers = HashMap::new();
    let mut total = line.len();
    loop {
        let mut h = String::new();
        let n = reader.read_line(&mut h).await?;
        total += n;
        if n == 0 || total > MAX_REQUEST {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let len: usize = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
    if len > MAX_REQUEST {
        return Ok(None);
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).await?;
    Ok(Some(Request { method, path, headers, body }))
}

fn response(status: u16, retry_after: Option<&str>, body: &str) -> Vec<u8> {
    response_with(status, retry_after, &[], body)
}

fn response_with(status: u16, retry_after: Option<&str>, extra: &[(String, String)], body: &str) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let mut head =
        format!("HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n", body.len());
    if let Some(ra) = retry_after {
        head.push_str(&format!("retry-after: {ra}\r\n"));
    }
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

enum Answer {
    Respond(Vec<u8>),
    Close,
}

async fn serve(stream: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    while let Some(req) = read_request(&mut reader).await? {
        let answer = match (req.method.as_str(), req.path.as_str()) {
            ("POST", "/v1/messages") => messages(&shared, &req).await,
            ("POST", "/v2/email/outbound-emails") => ses_send(&shared, &req),
            ("HEAD", _) => Answer::Respond(response(200, None, "")),
            ("GET", "/stats") => {
                let body = serde_json::to_string(&lock(&shared).stats).unwrap_or_default();
                Answer::Respond(response(200, None, &body))
            }
            ("POST", "/control/script") => match serde_json::from_slice::<Vec<Behaviour>>(&req.body) {
                Ok(b) => {
                    lock(&shared).script.extend(b);
                    Answer::Respond(response(200, None, "{}"))
                }
                Err(e) => {
                    Answer::Respond(response(400, None, &serde_json::json!({"error": e.to_string()}).to_string()))
                }
            },
            ("POST", "/control/reset") => {
                let mut s = lock(&shared);
                s.stats = Stats::default();
                s.script.clear();
                s.results.clear();
                Answer::Respond(response(200, None, "{}"))
            }
            _ => Answer::Respond(response(404, None, "{\"error\":\"not found\"}")),
        };
        let close = req.headers.get("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        match answer {
            Answer::Respond(bytes) => write.write_all(&bytes).await?,
            Answer::Close => return Ok(()),
        }
        if close {
            return Ok(());
        }
    }
    Ok(())
}

fn take_token(shared: &Shared, s: &mut State) -> Result<(), u64> {
    let now = Instant::now();
    let dt = now.duration_since(s.refilled).as_secs_f64();
    s.refilled = now;
    s.tokens = (s.tokens + dt * shared.config.quota).min(shared.config.burst);
    let lowest = s.stats.lowest_tokens.map_or(s.tokens, |l| l.min(s.tokens));
    s.stats.lowest_tokens = Some(lowest);
    if s.tokens >= 1.0 {
        s.tokens -= 1.0;
        Ok(())
    } else {
        // Whole seconds, rounded up, at least 1: the header has no finer unit.
        let wait = ((1.0 - s.tokens) / shared.config.quota).ceil().max(1.0);
        Err(wait as u64)
    }
}

fn ses_send(shared: &Shared, req: &Request) -> Answer {
    let mut s = lock(shared);
    let body = serde_json::from_slice(&req.body).unwrap_or(serde_json::Value::Null);
    s.ses_requests.push(body);
    match s.script.pop_front() {
        Some(b) if b.drop => Answer::Close,
        Some(b) if b.status.is_some_and(|st| !(200..300).contains(&st)) => {
            let status = b.status.unwrap_or(500);
            let body = b.body.unwrap_or_else(|| "{}".into());
            Answer::Respond(response_with(status, None, &b.headers, &body))
        }
        _ => {
            let id = format!("ses-{}", s.ses_requests.len());
            Answer::Respond(response(200, None, &serde_json::json!({ "MessageId": id }).to_string()))
        }
    }
}

/// The bucket's budget in the configured dialect: what is left now, and the whole seconds
/// until the bucket is full again.
fn budget_headers(shared: &Shared, s: &State) -> Vec<(String, String)> {
    let c = &shared.config;
    let remaining = s.tokens.max(0.0).floor() as u64;
    let reset = ((c.burst - s.tokens).max(0.0) / c.quota).ceil() as u64;
    c.rate_headers.headers(c.burst as u64, remaining, reset)
}

async fn messages(shared: &Shared, req: &Request) -> Answer {
    let behaviour = {
        let mut s = lock(shared);
        s.stats.requests += 1;
        s.script.pop_front().unwrap_or_default()
    };
    if !shared.config.latency.is_zero() {
        tokio::time::sleep(shared.config.latency).await;
    }
    if let Some(ms) = behaviour.slow_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut s = lock(shared);
    if s.bodies.len() == KEPT_BODIES {
        s.bodies.pop_front();
    }
    s.bodies.push_back(serde_json::from_slice(&req.body).unwrap_or(serde_json::Value::Null));
    if behaviour.drop {
        s.stats.dropped += 1;
        return Answer::Close;
    }
    if let Some(expected) = &shared.config.token
        && req.headers.get("authorization").map(String::as_str) != Some(format!("Bearer {expected}").as_str())
        && req.headers.get("x-api-key") != Some(expected)
    {
        s.stats.unauthorized += 1;
        return Answer::Respond(response(401, None, "{\"error\":\"unauthorized\"}"));
    }
    let key = req.headers.get("idempotency-key").cloned();
    if shared.config.keys && key.is_none() {
        s.stats.missing_key += 1;
        return Answer::Respond(response(400, None, "{\"error\":\"Idempotency-Key header required\"}"));
    }
    // Without keys a repeat is processed like a first request.
    let stored = if shared.config.keys { key.as_ref().and_then(|k| s.results.get(k).cloned()) } else { None };
    if let Some((status, body)) = stored {
        s.stats.duplicate_key_attempts += 1;
        return if behaviour.accept_then_drop {
            s.stats.dropped += 1;
            Answer::Close
        } else {
            Answer::Respond(response(status, None, &body))
        };
    }
    if let Some(status) = behaviour.status
        && !(200..300).contains(&status)
    {
        if status == 429 {
            s.stats.throttled += 1;
        } else {
            s.stats.injected_errors += 1;
        }
        let body = behaviour.body.clone().unwrap_or_else(|| format!("{{\"error\":\"scripted {status}\"}}"));
        if let Some(key) = key.filter(|_| shared.config.keys)
            && (400..500).contains(&status)
            && status != 429
            && status != 408
        {
            // A permanent refusal is a processed result: a retry with the key gets it again.
            s.results.insert(key, (status, body.clone()));
            s.stats.distinct_keys += 1;
        }
        return Answer::Respond(response_with(status, behaviour.retry_after.as_deref(), &behaviour.headers, &body));
    }
    if let Err(wait) = take_token(shared, &mut s) {
        s.stats.throttled += 1;
        let body = "{\"error\":\"quota exceeded\"}";
        return Answer::Respond(match shared.config.rate_headers {
            RateHeaders::RetryAfter => response(429, Some(&wait.to_string()), body),
            dialect => {
                let told = dialect.headers(shared.config.burst as u64, 0, wait);
                response_with(429, None, &told, body)
            }
        });
    }
    let elapsed = u64::try_from(shared.started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let body = serde_json::json!({"id": format!("msg-{}", s.stats.accepted + 1), "idempotency_key": key}).to_string();
    let effect = key.clone().unwrap_or_else(|| format!("anonymous-{}", s.stats.requests));
    if s.results.insert(effect, (202, body.clone())).is_some() {
        s.stats.duplicate_effects += 1;
    } else {
        s.stats.distinct_keys += 1;
    }
    s.stats.accepted += 1;
    s.stats.first_accept_ms.get_or_insert(elapsed);
    s.stats.last_accept_ms = Some(elapsed);
    let second = usize::try_from(elapsed / 1000).unwrap_or(usize::MAX).min(86_400);
    if s.stats.accepted_per_second.len() <= second {
        s.stats.accepted_per_second.resize(second + 1, 0);
    }
    s.stats.accepted_per_second[second] += 1;
    if behaviour.accept_then_drop {
        s.stats.dropped += 1;
        return Answer::Close;
    }
    let mut told = budget_headers(shared, &s);
    told.extend(behaviour.headers.iter().cloned());
    Answer::Respond(response_with(202, None, &told, &body))
}
