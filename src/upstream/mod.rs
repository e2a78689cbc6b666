//! The model side: an OpenAI-compatible HTTP server, or the built-in demo model.
//!
//! [`Upstream::start`] sends one round's request and returns once the response has started
//! (status checked); [`RoundStream::next_data`] then yields SSE data payloads (or a whole JSON
//! body, for servers that ignore `stream: true`) under the idle and total timeouts. Upstream
//! HTTP statuses become [`UpstreamError`] values here and nowhere else (what the client is
//! told about one is `error.rs`'s business); whether to retry is
//! the agent's call, because only it knows whether anything reached the client yet. This
//! module never touches the filesystem.

pub mod accumulate;
pub mod body;
pub mod demo;
pub mod forward;
pub mod ollama;
pub mod overflow;
pub mod route;
pub mod sse;
pub mod textcalls;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;

use serde_json::Value;

use crate::config::{UpstreamConfig, UpstreamKind};
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
    #[error("the upstream sent a chunk that is not JSON ({0})")]
    Garbled(String),
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
            UpstreamError::Garbled(_) => "garbled".into(),
            UpstreamError::Body(_) => "body".into(),
            UpstreamError::TooLarge(_) => "too_large".into(),
        }
    }

    /// Worth another attempt (if nothing has reached the client yet).
    pub fn retryable(&self) -> bool {
        match self {
            UpstreamError::Connect { .. }
            | UpstreamError::Truncated(_)
            | UpstreamError::Garbled(_)
            | UpstreamError::Body(_) => true,
            UpstreamError::Status { status, .. } => *status == 429 || *status >= 500,
            UpstreamError::Timeout { phase, .. } => *phase == "accept the connection",
            UpstreamError::InStream(_) | UpstreamError::TooLarge(_) => false,
        }
    }

    /// The upstream said the request does not fit the model's context window.
    pub fn is_context_overflow(&self) -> bool {
        match self {
            UpstreamError::Status {
                status: 400 | 413 | 422 | 500,
                message,
                ..
            }
            | UpstreamError::InStream(message) => overflow::is_overflow(message),
            _ => false,
        }
    }

    /// The upstream cannot serve at all right now: another upstream may.
    pub fn is_unavailable(&self) -> bool {
        match self {
            UpstreamError::Connect { .. } => true,
            UpstreamError::Timeout { phase, .. } => *phase == "accept the connection",
            UpstreamError::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            UpstreamError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// What one round's request needs beyond its body.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hints {
    /// The context size the request needs (Ollama loads the model with it).
    pub num_ctx: Option<u64>,
}

/// The protocol an HTTP upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Ollama,
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
    pub async fn start(
        &self,
        body: RequestBody,
        hints: Hints,
    ) -> Result<RoundStream, UpstreamError> {
        match self {
            Upstream::Http(h) => h
                .start(body, hints)
                .await
                .map(|r| RoundStream::Http(Box::new(r))),
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

/// How many connection pools each HTTP upstream can keep (one per server worker thread; a
/// thread whose number is higher shares one, see [`use_pool`]).
const POOLS: usize = 64;

thread_local! {
    /// The connection pool this thread's requests use.
    static POOL: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Makes this thread's requests to every upstream use connection pool `n`. The server gives
/// each of its worker threads its own: a connection is driven by the event loop of the thread
/// that opened it, so a pool shared between threads would hand each read and write of a
/// request to another thread and back. Threads that never call this share pool 0.
pub fn use_pool(n: usize) {
    POOL.with(|p| p.set(n % POOLS));
}

pub struct HttpUpstream {
    /// Pool 0's client, built at start-up.
    client: reqwest::Client,
    /// The other pools' clients, each built by the first request made from a thread that
    /// uses it.
    pools: Box<[std::sync::OnceLock<reqwest::Client>]>,
    headers: reqwest::header::HeaderMap,
    chat_url: url::Url,
    models_url: url::Url,
    /// The server's root (the base URL without a final `v1/`), where Ollama's, llama.cpp's
    /// and LM Studio's own endpoints live.
    root: url::Url,
    /// The protocol, found out on first use when the kind is `auto`.
    wire: tokio::sync::OnceCell<Wire>,
    cfg: UpstreamConfig,
}

/// How a response body is framed.
enum Framing {
    Sse(SseDecoder),
    /// One JSON body (servers that ignore `stream: true`).
    Json(Vec<u8>),
    /// Ollama's newline-delimited JSON.
    Ndjson(ollama::NdjsonChunks),
}

/// The body of an upstream response, without its head: the response headers share the
/// connection's read buffer, so keeping them for a long stream would pin that buffer and make
/// every later read allocate another.
pub type BodyStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Bytes>> + Send>>;

pub struct HttpRound {
    body: BodyStream,
    framing: Framing,
    idle: Duration,
    deadline: Instant,
    total: Duration,
    ended: bool,
    received: usize,
    max_bytes: usize,
}

impl HttpUpstream {
    pub fn new(cfg: UpstreamConfig) -> Result<HttpUpstream, String> {
        crate::process::install_crypto_provider();
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
        let client = Self::build_client(&cfg, &headers)?;
        let pools = (1..POOLS).map(|_| std::sync::OnceLock::new()).collect();
        let root = match cfg.base_url.path().strip_suffix("v1/") {
            Some(p) => {
                let mut r = cfg.base_url.clone();
                r.set_path(p);
                r
            }
            None => cfg.base_url.clone(),
        };
        let wire = match cfg.kind {
            UpstreamKind::Auto => tokio::sync::OnceCell::new(),
            UpstreamKind::OpenAi => tokio::sync::OnceCell::new_with(Some(Wire::OpenAi)),
            UpstreamKind::Ollama => tokio::sync::OnceCell::new_with(Some(Wire::Ollama)),
        };
        Ok(HttpUpstream {
            client,
            pools,
            headers,
            chat_url,
            models_url,
            root,
            wire,
            cfg,
        })
    }

    fn build_client(
        cfg: &UpstreamConfig,
        headers: &reqwest::header::HeaderMap,
    ) -> Result<reqwest::Client, String> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(1024)
            .tcp_nodelay(true)
            // reqwest's gzip support is on for the web tools; the model's stream stays
            // uncompressed, as before, so no decoder sits between a token and the client.
            .no_gzip()
            .default_headers(headers.clone())
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
        builder
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))
    }

    /// The client of this thread's pool ([`use_pool`]).
    fn client(&self) -> &reqwest::Client {
        let n = POOL.with(std::cell::Cell::get);
        match n.checked_sub(1).and_then(|i| self.pools.get(i)) {
            None => &self.client,
            // The settings built pool 0's client at start-up, so this cannot fail in practice;
            // if it did, sharing pool 0 still works.
            Some(slot) => slot.get_or_init(|| {
                Self::build_client(&self.cfg, &self.headers).unwrap_or_else(|_| self.client.clone())
            }),
        }
    }

    /// The protocol to speak: as configured, or (kind `auto`) Ollama's own when the server
    /// answers Ollama's `GET /api/version`, else OpenAI's.
    pub async fn wire(&self) -> Wire {
        *self
            .wire
            .get_or_init(|| async {
                let Ok(url) = self.root.join("api/version") else {
                    return Wire::OpenAi;
                };
                let probe = self.request(reqwest::Method::GET, &url).send();
                let wire = match tokio::time::timeout(self.cfg.connect_timeout, probe).await {
                    Ok(Ok(r)) if r.status().is_success() => {
                        let body = read_capped(r, 64 * 1024, self.cfg.connect_timeout).await;
                        match serde_json::from_slice::<Value>(&body) {
                            Ok(v) if v.get("version").is_some_and(Value::is_string) => Wire::Ollama,
                            _ => Wire::OpenAi,
                        }
                    }
                    _ => Wire::OpenAi,
                };
                tracing::info!(upstream = %self.cfg.name, wire = ?wire, "upstream protocol");
                wire
            })
            .await
    }

    /// GETs (or POSTs `body` to) `url` and returns its JSON, or `None` for any failure.
    async fn json_of(&self, url: &url::Url, body: Option<Value>) -> Option<Value> {
        let r = match body {
            Some(b) => self
                .request(reqwest::Method::POST, url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b.to_string()),
            None => self.request(reqwest::Method::GET, url),
        };
        let wait = self.cfg.first_byte_timeout.min(Duration::from_secs(10));
        let resp = tokio::time::timeout(wait, r.send()).await.ok()?.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let bytes = read_capped(resp, 8 << 20, self.cfg.idle_timeout).await;
        serde_json::from_slice(&bytes).ok()
    }

    /// The model's context window, from whatever the server publishes: Ollama's
    /// `/api/show`, the model list (`max_model_len` from vLLM, `context_length` from
    /// OpenRouter, `meta.n_ctx_train` from llama.cpp), llama.cpp's `/props` (the size the
    /// server was started with), LM Studio's `/api/v0/models/{model}`.
    pub async fn discover_context_window(&self, model: &str) -> Option<u64> {
        if self.wire().await == Wire::Ollama {
            let url = self.root.join("api/show").ok()?;
            let v = self
                .json_of(&url, Some(serde_json::json!({"model": model})))
                .await?;
            return v
                .get("model_info")
                .and_then(Value::as_object)?
                .iter()
                .find(|(k, _)| k.ends_with(".context_length"))
                .and_then(|(_, n)| n.as_u64());
        }
        let mut train = None;
        if let Some(list) = self.json_of(&self.models_url, None).await {
            let entry = list["data"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m.get("id").and_then(Value::as_str) == Some(model));
            if let Some(m) = entry {
                for key in [
                    "max_model_len",
                    "context_length",
                    "context_window",
                    "max_context_length",
                ] {
                    if let Some(n) = m.get(key).and_then(Value::as_u64) {
                        return Some(n);
                    }
                }
                train = m.pointer("/meta/n_ctx_train").and_then(Value::as_u64);
            }
        }
        if let Ok(url) = self.root.join("props")
            && let Some(n) = self.json_of(&url, None).await.and_then(|v| {
                v.pointer("/default_generation_settings/n_ctx")
                    .and_then(Value::as_u64)
            })
        {
            return Some(n);
        }
        if let Ok(url) = self.root.join(&format!("api/v0/models/{model}"))
            && let Some(v) = self.json_of(&url, None).await
            && let Some(n) = v
                .get("loaded_context_length")
                .or_else(|| v.get("max_context_length"))
                .and_then(Value::as_u64)
        {
            return Some(n);
        }
        train
    }

    fn request(&self, method: reqwest::Method, url: &url::Url) -> reqwest::RequestBuilder {
        let mut r = self.client().request(method, url.clone());
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
            reason: crate::text::error_chain(e),
        }
    }

    async fn start(&self, body: RequestBody, hints: Hints) -> Result<HttpRound, UpstreamError> {
        let started = Instant::now();
        let wire = self.wire().await;
        let request = match wire {
            Wire::OpenAi => self
                .request(reqwest::Method::POST, &self.chat_url)
                .header(
                    reqwest::header::ACCEPT,
                    "text/event-stream, application/json",
                )
                .body(body.into_reqwest()),
            Wire::Ollama => {
                let url = self
                    .root
                    .join("api/chat")
                    .map_err(|e| UpstreamError::Connect {
                        url: self.cfg.base_url.to_string(),
                        reason: e.to_string(),
                    })?;
                let v: Value = serde_json::from_slice(&body.to_bytes()).unwrap_or(Value::Null);
                let native = ollama::native_request(&v, hints.num_ctx);
                self.request(reqwest::Method::POST, &url)
                    .body(native.to_string())
            }
        };
        let send = request
            .header(reqwest::header::CONTENT_TYPE, "application/json")
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
        let framing = match wire {
            Wire::Ollama => Framing::Ndjson(ollama::NdjsonChunks::default()),
            Wire::OpenAi if json_body => Framing::Json(Vec::new()),
            Wire::OpenAi => Framing::Sse(SseDecoder::new()),
        };
        Ok(HttpRound {
            body: Box::pin(response.bytes_stream()),
            framing,
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
    /// A payload already decoded, or at the end what is left.
    fn ready(&mut self) -> Option<(Option<String>, String)> {
        match &mut self.framing {
            Framing::Sse(d) => d
                .next_event()
                .or_else(|| if self.ended { d.finish() } else { None })
                .map(|ev| (ev.event, ev.data)),
            Framing::Ndjson(d) => {
                if self.ended {
                    d.finish();
                }
                d.next_payload().map(|data| (None, data))
            }
            Framing::Json(buf) if self.ended && !buf.is_empty() => {
                let body = std::mem::take(buf);
                Some((None, String::from_utf8_lossy(&body).into_owned()))
            }
            Framing::Json(_) => None,
        }
    }

    async fn next_data(&mut self) -> Result<Option<(Option<String>, String)>, UpstreamError> {
        loop {
            if let Some(ev) = self.ready() {
                return Ok(Some(ev));
            }
            if self.ended {
                return Ok(None);
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
                Ok(Some(Err(e))) => return Err(UpstreamError::Body(crate::text::error_chain(&e))),
                Ok(None) => self.ended = true,
                Ok(Some(Ok(bytes))) => {
                    self.received += bytes.len();
                    if self.received > self.max_bytes {
                        return Err(UpstreamError::TooLarge(self.max_bytes));
                    }
                    match &mut self.framing {
                        Framing::Sse(d) => d.push(&bytes),
                        Framing::Json(buf) => buf.extend_from_slice(&bytes),
                        Framing::Ndjson(d) => d.push(&bytes),
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
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Some(Duration::from_secs_f64(secs));
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
        reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("no message")
            .to_string()
    } else {
        text[..crate::text::floor_char_boundary(text, 500)].to_string()
    }
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
