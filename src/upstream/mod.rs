//! The model side: an OpenAI-compatible HTTP server, or the built-in demo model.
//!
//! [`Upstream::start`] sends one round's request and returns once the response has started
//! (status checked); [`RoundStream::next_data`] then yields SSE data payloads (or a whole JSON
//! body, for servers that ignore `stream: true`) under the idle and total timeouts. Upstream
//! HTTP statuses become [`UpstreamError`] values here and nowhere else; whether to retry is
//! the agent's call, because only it knows whether anything reached the client yet. This
//! module never touches the filesystem.

pub mod accumulate;
pub mod body;
pub mod demo;
pub mod sse;
pub mod textcalls;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;

use axum::http::StatusCode;
use serde_json::Value;

use crate::config::UpstreamConfig;
use crate::error::ApiError;
pub use body::RequestBody;
use sse::SseDecoder;

/// Why an upstream round failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot connect to the upstream at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("the upstream did not {phase} within {secs} s")]
    Timeout { phase: &'static str, secs: f64 },
    #[error("the upstream answered HTTP {status}: {message}")]
    Status {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("the upstream reported an error mid-stream: {0}")]
    InStream(String),
    #[error("{0}")]
    Truncated(String),
    #[error("reading the upstream response failed: {0}")]
    Body(String),
    #[error("the upstream response is larger than {0} bytes")]
    TooLarge(usize),
}

impl UpstreamError {
    /// A short label for metrics: "connect", "timeout", "http_429", "in_stream", …
    pub fn kind(&self) -> String {
        match self {
            UpstreamError::Connect { .. } => "connect".into(),
            UpstreamError::Timeout { .. } => "timeout".into(),
            UpstreamError::Status { status, .. } => format!("http_{status}"),
            UpstreamError::InStream(_) => "in_stream".into(),
            UpstreamError::Truncated(_) => "truncated".into(),
            UpstreamError::Body(_) => "body".into(),
            UpstreamError::TooLarge(_) => "too_large".into(),
        }
    }

    /// Worth another attempt (if nothing has reached the client yet).
    pub fn retryable(&self) -> bool {
        match self {
            UpstreamError::Connect { .. }
            | UpstreamError::Truncated(_)
            | UpstreamError::Body(_) => true,
            UpstreamError::Status { status, .. } => *status == 429 || *status >= 500,
            UpstreamError::Timeout { phase, .. } => *phase == "accept the connection",
            UpstreamError::InStream(_) | UpstreamError::TooLarge(_) => false,
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            UpstreamError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The error a client sees: the upstream's message, with 429, 502 or 504.
    pub fn to_api_error(&self) -> ApiError {
        let message = self.to_string();
        match self {
            UpstreamError::Status { status: 429, .. } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
                    .with_code("upstream_rate_limited")
            }
            UpstreamError::Status { status, .. } if matches!(*status, 400 | 404 | 413 | 422) => {
                let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY);
                ApiError::new(code, "invalid_request_error", message)
                    .with_code("upstream_rejected_request")
            }
            UpstreamError::Timeout { .. } => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, "upstream_error", message)
                    .with_code("upstream_timeout")
            }
            _ => ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", message)
                .with_code("upstream_error"),
        }
    }
}

/// Where rounds are sent.
pub enum Upstream {
    Http(Box<HttpUpstream>),
    Demo,
}

/// A round in progress.
pub enum RoundStream {
    Http(Box<HttpRound>),
    Demo(std::collections::VecDeque<String>),
}

impl Upstream {
    pub fn from_config(cfg: Option<&UpstreamConfig>) -> Result<Upstream, String> {
        match cfg {
            None => Ok(Upstream::Demo),
            Some(c) => HttpUpstream::new(c.clone()).map(|h| Upstream::Http(Box::new(h))),
        }
    }

    pub fn is_demo(&self) -> bool {
        matches!(self, Upstream::Demo)
    }

    /// A short description for logs and `/healthz`.
    pub fn describe(&self) -> String {
        match self {
            Upstream::Http(h) => h.cfg.base_url.to_string(),
            Upstream::Demo => "built-in demo model".into(),
        }
    }

    /// Sends one round. `body` is the complete chat-completions request, serialised.
    pub async fn start(&self, body: RequestBody) -> Result<RoundStream, UpstreamError> {
        match self {
            Upstream::Http(h) => h.start(body).await.map(|r| RoundStream::Http(Box::new(r))),
            Upstream::Demo => {
                let v: Value = serde_json::from_slice(&body.to_bytes()).unwrap_or(Value::Null);
                Ok(RoundStream::Demo(demo::respond(&v).into()))
            }
        }
    }

    /// `GET /models` of the upstream, as JSON.
    pub async fn models(&self) -> Result<Value, UpstreamError> {
        match self {
            Upstream::Http(h) => h.models().await,
            Upstream::Demo => Ok(serde_json::json!({
                "object": "list",
                "data": [{"id": demo::MODEL, "object": "model", "created": 0, "owned_by": "toolpilot"}]
            })),
        }
    }

    /// `POST /embeddings` of the upstream: one vector per input, in order.
    pub async fn embeddings(
        &self,
        model: &str,
        inputs: &[String],
    ) -> Result<Vec<Vec<f32>>, UpstreamError> {
        match self {
            Upstream::Http(h) => h.embeddings(model, inputs).await,
            Upstream::Demo => Err(UpstreamError::Body(
                "the built-in demo model has no embeddings".into(),
            )),
        }
    }
}

impl RoundStream {
    /// After `[DONE]`: reads what is left of the response for a moment, so the connection
    /// goes back to the pool (an unfinished body would close it). Servers that keep the stream
    /// open are not waited on longer than `grace`.
    pub async fn finish(&mut self, grace: std::time::Duration) {
        if let RoundStream::Http(h) = self {
            if h.ended {
                return;
            }
            let _ = tokio::time::timeout(grace, async {
                while let Some(Ok(_)) = h.body.next().await {}
            })
            .await;
        }
    }

    /// The next SSE event (`event` field, data), `None` at the end of the response.
    pub async fn next_data(&mut self) -> Result<Option<(Option<String>, String)>, UpstreamError> {
        match self {
            RoundStream::Http(h) => h.next_data().await,
            RoundStream::Demo(q) => Ok(q.pop_front().map(|d| (None, d))),
        }
    }
}

pub struct HttpUpstream {
    client: reqwest::Client,
    chat_url: url::Url,
    models_url: url::Url,
    cfg: UpstreamConfig,
}

/// The body of an upstream response, without its head: the response headers share the
/// connection's read buffer, so keeping them for a long stream would pin that buffer and make
/// every later read allocate another.
type BodyStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Bytes>> + Send>>;

pub struct HttpRound {
    body: BodyStream,
    decoder: SseDecoder,
    /// The server answered with a JSON body instead of an event stream.
    json_body: bool,
    json_buf: Vec<u8>,
    idle: Duration,
    deadline: Instant,
    total: Duration,
    ended: bool,
    received: usize,
    max_bytes: usize,
}

impl HttpUpstream {
    pub fn new(cfg: UpstreamConfig) -> Result<HttpUpstream, String> {
        crate::install_crypto_provider();
        let chat_url = cfg
            .base_url
            .join("chat/completions")
            .map_err(|e| format!("upstream.url: {e}"))?;
        let models_url = cfg
            .base_url
            .join("models")
            .map_err(|e| format!("upstream.url: {e}"))?;
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &cfg.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("upstream.headers: {k:?} is not a header name"))?;
            let value = reqwest::header::HeaderValue::from_str(v).map_err(|_| {
                format!("upstream.headers.{k}: the value is not a valid header value")
            })?;
            headers.insert(name, value);
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(1024)
            .tcp_nodelay(true)
            .default_headers(headers)
            .user_agent(concat!("toolpilot/", env!("CARGO_PKG_VERSION")));
        let loopback = match cfg.base_url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(d)) => d == "localhost",
            None => false,
        };
        if loopback {
            builder = builder.no_proxy();
        }
        let client = builder
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(HttpUpstream {
            client,
            chat_url,
            models_url,
            cfg,
        })
    }

    fn request(&self, method: reqwest::Method, url: &url::Url) -> reqwest::RequestBuilder {
        let mut r = self.client.request(method, url.clone());
        if let Some(key) = &self.cfg.api_key {
            r = r.bearer_auth(key);
        }
        r
    }

    fn connect_error(&self, e: &reqwest::Error) -> UpstreamError {
        if e.is_timeout() {
            return UpstreamError::Timeout {
                phase: "accept the connection",
                secs: self.cfg.connect_timeout.as_secs_f64(),
            };
        }
        UpstreamError::Connect {
            url: self.cfg.base_url.to_string(),
            reason: error_chain(e),
        }
    }

    async fn start(&self, body: RequestBody) -> Result<HttpRound, UpstreamError> {
        let started = Instant::now();
        let send = self
            .request(reqwest::Method::POST, &self.chat_url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "text/event-stream, application/json",
            )
            .body(body.into_reqwest())
            .send();
        let first_byte = self.cfg.first_byte_timeout.min(self.cfg.total_timeout);
        let response = match tokio::time::timeout(first_byte, send).await {
            Err(_) => {
                return Err(UpstreamError::Timeout {
                    phase: "start answering",
                    secs: first_byte.as_secs_f64(),
                });
            }
            Ok(Err(e)) => return Err(self.connect_error(&e)),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let body = read_capped(response, 64 * 1024, self.cfg.idle_timeout).await;
            return Err(UpstreamError::Status {
                status: status.as_u16(),
                message: status_message(status.as_u16(), &body),
                retry_after,
            });
        }
        let json_body = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/json"));
        Ok(HttpRound {
            body: Box::pin(response.bytes_stream()),
            decoder: SseDecoder::new(),
            json_body,
            json_buf: Vec::new(),
            idle: self.cfg.idle_timeout,
            deadline: started + self.cfg.total_timeout,
            total: self.cfg.total_timeout,
            ended: false,
            received: 0,
            max_bytes: self.cfg.max_response_bytes,
        })
    }

    async fn embeddings(
        &self,
        model: &str,
        inputs: &[String],
    ) -> Result<Vec<Vec<f32>>, UpstreamError> {
        let url = self
            .cfg
            .base_url
            .join("embeddings")
            .map_err(|e| UpstreamError::Body(format!("upstream.url: {e}")))?;
        let body = serde_json::json!({"model": model, "input": inputs});
        let send = self
            .request(reqwest::Method::POST, &url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send();
        let wait = self.cfg.first_byte_timeout.min(self.cfg.total_timeout);
        let response = match tokio::time::timeout(wait, send).await {
            Err(_) => {
                return Err(UpstreamError::Timeout {
                    phase: "answer POST /embeddings",
                    secs: wait.as_secs_f64(),
                });
            }
            Ok(Err(e)) => return Err(self.connect_error(&e)),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        let body = read_capped(response, 64 * 1024 * 1024, self.cfg.idle_timeout).await;
        if !status.is_success() {
            return Err(UpstreamError::Status {
                status: status.as_u16(),
                message: status_message(status.as_u16(), &body),
                retry_after: None,
            });
        }
        parse_embeddings(&body, inputs.len())
    }

    async fn models(&self) -> Result<Value, UpstreamError> {
        let send = self.request(reqwest::Method::GET, &self.models_url).send();
        let response = match tokio::time::timeout(self.cfg.first_byte_timeout, send).await {
            Err(_) => {
                return Err(UpstreamError::Timeout {
                    phase: "answer GET /models",
                    secs: self.cfg.first_byte_timeout.as_secs_f64(),
                });
            }
            Ok(Err(e)) => return Err(self.connect_error(&e)),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        let body = read_capped(response, 4 * 1024 * 1024, self.cfg.idle_timeout).await;
        if !status.is_success() {
            return Err(UpstreamError::Status {
                status: status.as_u16(),
                message: status_message(status.as_u16(), &body),
                retry_after: None,
            });
        }
        match serde_json::from_slice::<Value>(&body) {
            Ok(v) if v.get("data").is_some_and(Value::is_array) => Ok(v),
            _ => Err(UpstreamError::Body(format!(
                "GET /models did not return a model list: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ))),
        }
    }
}

impl HttpRound {
    async fn next_data(&mut self) -> Result<Option<(Option<String>, String)>, UpstreamError> {
        loop {
            if !self.json_body {
                if let Some(ev) = self.decoder.next_event() {
                    return Ok(Some((ev.event, ev.data)));
                }
            }
            if self.ended {
                if self.json_body {
                    return Ok(None);
                }
                return Ok(self.decoder.finish().map(|ev| (ev.event, ev.data)));
            }
            let now = Instant::now();
            if now >= self.deadline {
                return Err(UpstreamError::Timeout {
                    phase: "finish its answer",
                    secs: self.total.as_secs_f64(),
                });
            }
            let wait = self.idle.min(self.deadline - now);
            match tokio::time::timeout(wait, self.body.next()).await {
                Err(_) if wait < self.idle => {
                    return Err(UpstreamError::Timeout {
                        phase: "finish its answer",
                        secs: self.total.as_secs_f64(),
                    });
                }
                Err(_) => {
                    return Err(UpstreamError::Timeout {
                        phase: "send the next part of its answer",
                        secs: self.idle.as_secs_f64(),
                    });
                }
                Ok(Some(Err(e))) => return Err(UpstreamError::Body(error_chain(&e))),
                Ok(None) => {
                    self.ended = true;
                    if self.json_body {
                        let body = std::mem::take(&mut self.json_buf);
                        return Ok(Some((None, String::from_utf8_lossy(&body).into_owned())));
                    }
                }
                Ok(Some(Ok(bytes))) => {
                    self.received += bytes.len();
                    if self.received > self.max_bytes {
                        return Err(UpstreamError::TooLarge(self.max_bytes));
                    }
                    if self.json_body {
                        self.json_buf.extend_from_slice(&bytes);
                    } else {
                        self.decoder.push(&bytes);
                    }
                }
            }
        }
    }
}

/// `Retry-After` as seconds or an HTTP date; also `retry-after-ms`.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
    {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(secs));
        }
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

async fn read_capped(mut response: reqwest::Response, cap: usize, idle: Duration) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < cap {
        match tokio::time::timeout(idle, response.chunk()).await {
            Ok(Ok(Some(b))) => body.extend_from_slice(&b),
            _ => break,
        }
    }
    body.truncate(cap);
    body
}

/// The upstream's own error message if the body is OpenAI-shaped, else the text.
fn status_message(status: u16, body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let msg = accumulate::error_message(v.get("error").unwrap_or(&v));
        if !msg.is_empty() {
            return msg;
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("no message")
            .to_string()
    } else {
        text[..crate::tools::floor_char_boundary(text, 500)].to_string()
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = inner.source();
    }
    s
}

/// The vectors of an OpenAI embeddings response (`data[].embedding`, ordered by `index`).
fn parse_embeddings(body: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, UpstreamError> {
    let bad = |why: &str| {
        UpstreamError::Body(format!(
            "POST /embeddings {why}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        ))
    };
    let v: Value = serde_json::from_slice(body).map_err(|_| bad("did not return JSON"))?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("returned no `data` list"))?;
    let mut out: Vec<(usize, Vec<f32>)> = Vec::with_capacity(data.len());
    for (i, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .map_or(i, |n| n as usize);
        let vector = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("returned an item without an `embedding` list"))?
            .iter()
            .map(|x| x.as_f64().map(|f| f as f32))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| bad("returned a non-numeric embedding"))?;
        out.push((index, vector));
    }
    if out.len() != expected {
        return Err(bad(&format!(
            "returned {} vectors for {expected} inputs",
            out.len()
        )));
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, v)| v).collect())
}
