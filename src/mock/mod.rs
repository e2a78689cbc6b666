//! `toolpilot mock-upstream`: a scripted OpenAI-compatible model for tests, demos and
//! benchmarks.
//!
//! A script is a JSON list of rounds; each `POST /v1/chat/completions` consumes the next one.
//! A round answers with text, tool calls, an HTTP error, raw SSE bytes or a non-streamed JSON
//! body, shaped by chunk size, delays, truncation, an in-stream error, a hold (released by
//! `POST /_mock/release`) and the quirks real servers have. Every request is recorded with
//! its headers, body and how its response ended; `GET /_mock/requests` returns the record.
//! The format is documented in `README.md` ("The mock upstream").

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// A whole script.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    pub rounds: Vec<ScriptRound>,
    /// After the last round, answer every further request with it again.
    #[serde(default)]
    pub repeat_last: bool,
    /// After the last round, start again from the first (benchmarks of multi-round loops).
    #[serde(default)]
    pub cycle: bool,
    /// Record requests (default true). Benchmarks turn it off: nothing is kept per request.
    #[serde(default = "yes")]
    pub record: bool,
    /// Model ids listed by `GET /v1/models` (default `["mock-model"]`).
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// The context window published for every model (`max_model_len` in the model list, as
    /// vLLM does; `context_length` in Ollama's model info).
    #[serde(default)]
    pub context_length: Option<u64>,
    /// Also answer as Ollama does: `GET /api/version`, `POST /api/show`, `GET /api/tags`, and
    /// `POST /api/chat` (the same rounds, as newline-delimited JSON).
    #[serde(default)]
    pub ollama: bool,
    /// `POST /v1/embeddings`: an input containing `contains` gets `vector` (first rule that
    /// matches); any other input gets a deterministic hashed bag of its words (16 numbers).
    #[serde(default)]
    pub embeddings: Vec<EmbeddingRule>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingRule {
    pub contains: String,
    pub vector: Vec<f32>,
}

fn yes() -> bool {
    true
}

/// One scripted answer.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptRound {
    /// Assistant text, streamed in pieces.
    pub text: Option<String>,
    /// Reasoning text sent (as `reasoning_content`) before the answer.
    pub reasoning: Option<String>,
    /// Tool calls: `{"name", "arguments" (object or string), "id"?}`.
    pub tool_calls: Option<Vec<ScriptCall>>,
    /// Answer with this HTTP status and an OpenAI-shaped error instead.
    pub status: Option<u16>,
    /// The error message for `status`.
    pub error: Option<String>,
    /// `Retry-After` seconds for `status`.
    pub retry_after: Option<f64>,
    /// Send exactly these body pieces (as SSE), one after another.
    pub raw: Option<Vec<String>>,
    /// Answer with a non-streamed `application/json` completion, even to a request that asked
    /// for a stream (a request without `stream: true` gets one anyway, unless the round is
    /// about the stream itself).
    #[serde(default)]
    pub json: bool,
    /// Characters per content piece (default 8).
    pub chunk_size: Option<usize>,
    /// Wait before the response headers.
    #[serde(default)]
    pub delay_ms: u64,
    /// Wait between body pieces.
    #[serde(default)]
    pub chunk_delay_ms: u64,
    /// Close the stream after this many pieces (no finish, no `[DONE]`).
    pub truncate_after: Option<usize>,
    /// Send an error object after this many pieces and end the stream.
    pub error_after: Option<ErrorAfter>,
    /// Send this many pieces, then wait for `POST /_mock/release`.
    pub hold_after: Option<usize>,
    pub finish_reason: Option<String>,
    pub usage: Option<Value>,
    #[serde(default)]
    pub quirks: Quirks,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
    pub id: Option<String>,
}

impl ScriptRound {
    /// Whether the round is about how a stream is sent (raw pieces, chunking, quirks, a cut,
    /// an error or a hold mid-stream): it is streamed even to a request that asked for no
    /// stream, as a server that ignores `stream: false` would. Other rounds follow the request.
    fn stream_only(&self) -> bool {
        self.raw.is_some()
            || self.chunk_size.is_some()
            || self.chunk_delay_ms > 0
            || self.truncate_after.is_some()
            || self.error_after.is_some()
            || self.hold_after.is_some()
            || self.quirks != Quirks::default()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorAfter {
    pub chunks: usize,
    pub message: String,
}

/// Quirks of real servers, reproduced on request.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Quirks {
    /// Omit the final `data: [DONE]`.
    #[serde(default)]
    pub no_done: bool,
    /// Tool-call `index`: "normal", "missing", "zero" (always 0) or "from_one".
    pub index: Option<String>,
    /// Repeat `id`, `type` and `name` in every tool-call delta.
    #[serde(default)]
    pub id_every_delta: bool,
    /// Send `"id": ""`.
    #[serde(default)]
    pub empty_ids: bool,
    /// Send `arguments` as a JSON object, whole, in one delta.
    #[serde(default)]
    pub arguments_object: bool,
    /// Split each arguments string into this many pieces (default 2).
    pub split_arguments: Option<usize>,
    /// No usage chunk.
    #[serde(default)]
    pub no_usage: bool,
    /// Start with a chunk whose `choices` is empty.
    #[serde(default)]
    pub empty_first_chunk: bool,
    /// Put SSE comment lines between chunks.
    #[serde(default)]
    pub comments: bool,
    /// Use CRLF line endings.
    #[serde(default)]
    pub crlf: bool,
}

/// One recorded request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recorded {
    pub path: String,
    pub headers: Value,
    pub body: Value,
    /// Which script round answered (0-based), if any.
    pub round: Option<usize>,
    /// "completed", "client_disconnected" or "in_progress".
    pub outcome: String,
    /// The client's address: the same port on two requests means a reused connection.
    #[serde(default)]
    pub peer: Option<String>,
}

struct Shared {
    script: Script,
    next: Mutex<usize>,
    log: Mutex<Vec<Recorded>>,
    /// Bodies of `POST /v1/embeddings` requests (kept apart, so chat request indices stay).
    embedding_log: Mutex<Vec<Value>>,
    release: Notify,
    released: Mutex<bool>,
    record_file: Option<std::path::PathBuf>,
    received: std::sync::atomic::AtomicU64,
    open: std::sync::atomic::AtomicI64,
}

/// A running mock upstream.
#[derive(Clone)]
pub struct MockUpstream {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl MockUpstream {
    /// Serves `script` on `listener` in the background.
    pub fn start(script: Script, listener: TcpListener) -> std::io::Result<MockUpstream> {
        MockUpstream::start_recording(script, listener, None)
    }

    /// Like [`MockUpstream::start`], also writing the record to `record_file` after each request.
    pub fn start_recording(
        script: Script,
        listener: TcpListener,
        record_file: Option<std::path::PathBuf>,
    ) -> std::io::Result<MockUpstream> {
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script,
            next: Mutex::new(0),
            log: Mutex::new(Vec::new()),
            embedding_log: Mutex::new(Vec::new()),
            release: Notify::new(),
            released: Mutex::new(false),
            record_file,
            received: Default::default(),
            open: Default::default(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/chat/completions", post(chat))
            .route("/v1/completions", post(completions))
            .route("/completions", post(completions))
            .route("/v1/embeddings", post(embeddings))
            .route("/embeddings", post(embeddings))
            .route("/v1/models", get(models))
            .route("/models", get(models))
            .route("/api/version", get(ollama_version))
            .route("/api/show", post(ollama_show))
            .route("/api/tags", get(ollama_tags))
            .route("/api/chat", post(ollama_chat))
            .route("/_mock/requests", get(requests))
            .route("/_mock/release", post(release))
            .route("/_mock/stats", get(stats))
            .with_state(Arc::clone(&shared));
        tokio::spawn(async move {
            let listener =
                axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
                    let _ = tcp.set_nodelay(true);
                });
            let _ = axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await;
        });
        Ok(MockUpstream { addr, shared })
    }

    /// The base URL to give toolpilot (`http://ADDR/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Everything received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .log
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }

    /// The bodies of the embeddings requests received so far.
    pub fn embedding_requests(&self) -> Vec<Value> {
        self.shared
            .embedding_log
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }

    /// Lets held streams continue.
    pub fn release(&self) {
        release_all(&self.shared);
    }
}

fn release_all(shared: &Shared) {
    if let Ok(mut r) = shared.released.lock() {
        *r = true;
    }
    shared.release.notify_waiters();
}

/// Parses a script file's text, with an error that says what is wrong.
pub fn parse_script(text: &str) -> Result<Script, String> {
    serde_json::from_str(text).map_err(|e| format!("the mock script is not valid: {e}"))
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let ids = shared
        .script
        .models
        .clone()
        .unwrap_or_else(|| vec!["mock-model".into()]);
    let data: Vec<Value> = ids
        .iter()
        .map(|id| {
            let mut m = json!({"id": id, "object": "model", "created": 0, "owned_by": "mock"});
            if let Some(n) = shared.script.context_length {
                m["max_model_len"] = json!(n);
            }
            m
        })
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

fn not_ollama() -> Response {
    (
        StatusCode::NOT_FOUND,
        "404 page not found (this mock is not scripted as Ollama)",
    )
        .into_response()
}

async fn ollama_version(State(shared): State<Arc<Shared>>) -> Response {
    if !shared.script.ollama {
        return not_ollama();
    }
    axum::Json(json!({"version": "0.0.0-mock"})).into_response()
}

async fn ollama_tags(State(shared): State<Arc<Shared>>) -> Response {
    if !shared.script.ollama {
        return not_ollama();
    }
    let ids = shared
        .script
        .models
        .clone()
        .unwrap_or_else(|| vec!["mock-model".into()]);
    let models: Vec<Value> = ids
        .iter()
        .map(|id| json!({"name": id, "model": id}))
        .collect();
    axum::Json(json!({"models": models})).into_response()
}

async fn ollama_show(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    if !shared.script.ollama {
        return not_ollama();
    }
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut info = json!({"general.architecture": "llama"});
    if let Some(n) = shared.script.context_length {
        info["llama.context_length"] = json!(n);
    }
    axum::Json(json!({"model_info": info, "details": {"family": "llama"},
                      "model": v.get("model").cloned().unwrap_or(Value::Null)}))
    .into_response()
}

/// `POST /api/chat`: the next round as Ollama streams it (one JSON object per line).
async fn ollama_chat(
    State(shared): State<Arc<Shared>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !shared.script.ollama {
        return not_ollama();
    }
    let (record_index, round_index, body_json) = begin(&shared, peer, &uri, &headers, &body);
    set_outcome(&shared, record_index, "completed");
    let Some(ri) = round_index else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": "mock-upstream: the script has no more rounds"})),
        )
            .into_response();
    };
    let mut round = shared.script.rounds[ri].clone();
    if round.usage.is_none() {
        round.usage = Some(usage_for(body.len(), &round));
    }
    let model = body_json
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_string();
    if let Some(status) = round.status {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let msg = round
            .error
            .unwrap_or_else(|| format!("mock error {status}"));
        return (code, axum::Json(json!({"error": msg}))).into_response();
    }
    let line = |message: Value, done: bool| {
        json!({"model": model, "created_at": "2026-01-01T00:00:00Z", "message": message,
               "done": done})
    };
    let mut lines: Vec<Value> = Vec::new();
    let size = round.chunk_size.unwrap_or(8);
    if let Some(r) = &round.reasoning {
        for p in split_chars(r, size) {
            lines.push(line(
                json!({"role": "assistant", "content": "", "thinking": p}),
                false,
            ));
        }
    }
    if let Some(t) = &round.text {
        for p in split_chars(t, size) {
            lines.push(line(json!({"role": "assistant", "content": p}), false));
        }
    }
    let calls: Vec<Value> = round
        .tool_calls
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let args = match &c.arguments {
                Value::String(s) => serde_json::from_str(s).unwrap_or(json!({})),
                Value::Null => json!({}),
                other => other.clone(),
            };
            json!({"function": {"name": c.name, "arguments": args}})
        })
        .collect();
    if !calls.is_empty() {
        lines.push(line(
            json!({"role": "assistant", "content": "", "tool_calls": calls}),
            false,
        ));
    }
    let usage = default_usage(&round);
    let mut last = line(json!({"role": "assistant", "content": ""}), true);
    last["done_reason"] = json!(round.finish_reason.clone().unwrap_or_else(|| "stop".into()));
    last["prompt_eval_count"] = usage["prompt_tokens"].clone();
    last["eval_count"] = usage["completion_tokens"].clone();
    lines.push(last);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    ([(header::CONTENT_TYPE, "application/x-ndjson")], text).into_response()
}

/// Records a request and picks the round that answers it: (record index, round index, body).
fn begin(
    shared: &Shared,
    peer: SocketAddr,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> (usize, Option<usize>, Value) {
    shared
        .received
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let record = shared.script.record;
    // Benchmarks do not record: nothing is kept per request, and only what decides the answer
    // (`stream`, `model`) is read, without building the whole body.
    let body_json: Value = if record {
        serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    } else {
        #[derive(Deserialize)]
        struct Deciding<'a> {
            stream: Option<bool>,
            #[serde(borrow)]
            model: Option<std::borrow::Cow<'a, str>>,
        }
        match serde_json::from_slice::<Deciding>(body) {
            Ok(d) => serde_json::json!({"stream": d.stream, "model": d.model}),
            Err(_) => Value::Null,
        }
    };
    let round_index = {
        let Ok(mut next) = shared.next.lock() else {
            return (usize::MAX, None, body_json);
        };
        let n = *next;
        *next += 1;
        if n < shared.script.rounds.len() {
            Some(n)
        } else if shared.script.cycle && !shared.script.rounds.is_empty() {
            Some(n % shared.script.rounds.len())
        } else if shared.script.repeat_last && !shared.script.rounds.is_empty() {
            Some(shared.script.rounds.len() - 1)
        } else {
            None
        }
    };
    if !record {
        return (usize::MAX, round_index, body_json);
    }
    let header_json: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                Value::from(v.to_str().unwrap_or("").to_string()),
            )
        })
        .collect();
    let Ok(mut log) = shared.log.lock() else {
        return (usize::MAX, round_index, body_json);
    };
    log.push(Recorded {
        path: uri.path().to_string(),
        headers: Value::Object(header_json),
        body: body_json.clone(),
        round: round_index,
        outcome: "in_progress".into(),
        peer: Some(peer.to_string()),
    });
    let i = log.len() - 1;
    drop(log);
    save_record(shared);
    (i, round_index, body_json)
}

/// A deterministic vector for `text`: the script's rule, else a hashed bag of its words.
pub fn mock_embedding(rules: &[EmbeddingRule], text: &str) -> Vec<f32> {
    if let Some(r) = rules.iter().find(|r| text.contains(&r.contains)) {
        return r.vector.clone();
    }
    let mut v = vec![0.0f32; 16];
    for w in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        // FNV-1a of the lower-cased word.
        let mut h: u32 = 0x811c_9dc5;
        for b in w.to_lowercase().bytes() {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
        v[(h % 16) as usize] += 1.0;
    }
    v
}

async fn embeddings(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {"message": "the body is not JSON", "type": "invalid_request_error"}})),
        )
            .into_response();
    };
    let inputs: Vec<String> = match &req["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().to_string())
            .collect(),
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": {"message": "`input` must be a string or a list of strings", "type": "invalid_request_error"}})),
            )
                .into_response();
        }
    };
    if shared.script.record
        && let Ok(mut log) = shared.embedding_log.lock()
    {
        log.push(req.clone());
    }
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"object": "embedding", "index": i,
                   "embedding": mock_embedding(&shared.script.embeddings, t)})
        })
        .collect();
    axum::Json(
        json!({"object": "list", "data": data, "model": req["model"],
                      "usage": {"prompt_tokens": 0, "total_tokens": 0}}),
    )
    .into_response()
}

async fn requests(State(shared): State<Arc<Shared>>) -> Response {
    let log = shared.log.lock().map(|l| l.clone()).unwrap_or_default();
    axum::Json(log).into_response()
}

/// Counters that do not need recording: requests received, responses still streaming.
async fn stats(State(shared): State<Arc<Shared>>) -> Response {
    use std::sync::atomic::Ordering;
    axum::Json(json!({
        "received": shared.received.load(Ordering::Relaxed),
        "open": shared.open.load(Ordering::Relaxed),
    }))
    .into_response()
}

async fn release(State(shared): State<Arc<Shared>>) -> Response {
    release_all(&shared);
    StatusCode::NO_CONTENT.into_response()
}

fn save_record(shared: &Shared) {
    let Some(path) = &shared.record_file else {
        return;
    };
    let log = shared.log.lock().map(|l| l.clone()).unwrap_or_default();
    if let Ok(text) = serde_json::to_string_pretty(&log) {
        let _ = std::fs::write(path, text);
    }
}

fn set_outcome(shared: &Shared, i: usize, outcome: &str) {
    if i == usize::MAX {
        return;
    }
    if let Ok(mut log) = shared.log.lock()
        && let Some(r) = log.get_mut(i)
    {
        r.outcome = outcome.to_string();
    }
    save_record(shared);
}

/// `POST /v1/completions` (the legacy text completion, what autocomplete sends): the next
/// round's `text` as a `text_completion`, streamed in `chunk_size` pieces when the request
/// asks for a stream; a round with `status` is that error. Recorded like chat requests.
async fn completions(
    State(shared): State<Arc<Shared>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (record_index, round_index, body_json) = begin(&shared, peer, &uri, &headers, &body);
    set_outcome(&shared, record_index, "completed");
    let Some(round) = round_index.map(|i| shared.script.rounds[i].clone()) else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(
                json!({"error": {"message": "mock-upstream: the script has no round left",
                                        "type": "mock_script_exhausted"}}),
            ),
        )
            .into_response();
    };
    if let Some(status) = round.status {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let msg = round
            .error
            .unwrap_or_else(|| format!("mock error {status}"));
        return (
            code,
            axum::Json(json!({"error": {"message": msg, "type": "mock_error", "code": status}})),
        )
            .into_response();
    }
    let model = body_json["model"]
        .as_str()
        .unwrap_or("mock-model")
        .to_string();
    let text = round.text.clone().unwrap_or_default();
    let choice = |text: &str, finish: Option<&str>| {
        json!({"id": "cmpl-mock", "object": "text_completion", "created": 0, "model": model,
               "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}]})
    };
    if body_json["stream"] != json!(true) {
        let mut v = choice(&text, Some("stop"));
        v["usage"] = default_usage(&round);
        return axum::Json(v).into_response();
    }
    let mut out = String::new();
    for piece in split_chars(&text, round.chunk_size.unwrap_or(usize::MAX).max(1)) {
        out.push_str(&format!("data: {}\n\n", choice(&piece, None)));
    }
    out.push_str(&format!("data: {}\n\n", choice("", Some("stop"))));
    out.push_str("data: [DONE]\n\n");
    ([(header::CONTENT_TYPE, "text/event-stream")], out).into_response()
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (record_index, round_index, body_json) = begin(&shared, peer, &uri, &headers, &body);
    let Some(ri) = round_index else {
        set_outcome(&shared, record_index, "completed");
        let msg = format!(
            "mock-upstream: the script has no round {} (it has {})",
            shared.received.load(std::sync::atomic::Ordering::Relaxed),
            shared.script.rounds.len()
        );
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": {"message": msg, "type": "mock_script_exhausted"}})),
        )
            .into_response();
    };
    let mut round = shared.script.rounds[ri].clone();
    if round.usage.is_none() {
        round.usage = Some(usage_for(body.len(), &round));
    }
    if round.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(round.delay_ms)).await;
    }
    let model = body_json
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_string();
    shared
        .open
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);

    if let Some(status) = round.status {
        set_outcome(&shared, record_index, "completed");
        shared
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let msg = round
            .error
            .clone()
            .unwrap_or_else(|| format!("mock error {status}"));
        let mut resp = (
            code,
            axum::Json(json!({"error": {"message": msg, "type": "mock_error", "code": status}})),
        )
            .into_response();
        if let Some(ra) = round.retry_after
            && let Ok(v) = axum::http::HeaderValue::from_str(&format!("{ra}"))
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return resp;
    }

    // As real servers do: a request without `stream: true` gets one JSON completion.
    if round.json || (body_json["stream"] != json!(true) && !round.stream_only()) {
        set_outcome(&shared, record_index, "completed");
        shared
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        return (
            [(header::CONTENT_TYPE, "application/json")],
            json_completion(&round, &model).to_string(),
        )
            .into_response();
    }

    let pieces = sse_pieces(&round, &model);
    let guard = OutcomeGuard {
        shared: Arc::clone(&shared),
        index: record_index,
        done: false,
    };
    let state = (pieces.into_iter(), 0usize, guard, round, shared);
    let stream = futures_util::stream::unfold(
        state,
        |(mut it, sent, mut guard, round, shared)| async move {
            if let Some(limit) = round.hold_after
                && sent == limit
            {
                let released = shared.released.lock().map(|r| *r).unwrap_or(true);
                if !released {
                    let notified = shared.release.notified();
                    let released = shared.released.lock().map(|r| *r).unwrap_or(true);
                    if !released {
                        notified.await;
                    }
                }
            }
            if round.truncate_after == Some(sent) {
                guard.finish("completed");
                return None;
            }
            let Some(piece) = it.next() else {
                guard.finish("completed");
                return None;
            };
            if sent > 0 && round.chunk_delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(round.chunk_delay_ms)).await;
            }
            Some((
                Ok::<Bytes, std::convert::Infallible>(Bytes::from(piece)),
                (it, sent + 1, guard, round, shared),
            ))
        },
    );
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/event-stream"),
    );
    resp
}

/// Marks a recorded request `client_disconnected` if its stream is dropped before the end.
struct OutcomeGuard {
    shared: Arc<Shared>,
    index: usize,
    done: bool,
}

impl OutcomeGuard {
    fn finish(&mut self, outcome: &str) {
        if !self.done {
            self.done = true;
            self.shared
                .open
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            set_outcome(&self.shared, self.index, outcome);
        }
    }
}

impl Drop for OutcomeGuard {
    fn drop(&mut self) {
        self.finish("client_disconnected");
    }
}

fn chunk(model: &str, delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
           "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn args_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn call_id(call: &ScriptCall, i: usize, quirks: &Quirks) -> String {
    if quirks.empty_ids {
        return String::new();
    }
    call.id.clone().unwrap_or_else(|| format!("call_mock_{i}"))
}

/// Usage as a real server would count it, roughly: a token per four bytes of the request and
/// of the answer (so that what toolpilot learns from usage is plausible).
fn usage_for(request_bytes: usize, round: &ScriptRound) -> Value {
    let prompt = (request_bytes / 4).max(1);
    let answer = round.text.as_deref().map_or(0, str::len)
        + round.reasoning.as_deref().map_or(0, str::len)
        + round
            .tool_calls
            .iter()
            .flatten()
            .map(|c| c.name.len() + args_string(&c.arguments).len())
            .sum::<usize>();
    let completion = (answer / 4).max(1);
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
           "total_tokens": prompt + completion})
}

fn default_usage(round: &ScriptRound) -> Value {
    round
        .usage
        .clone()
        .unwrap_or_else(|| json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}))
}

/// The body pieces of a streamed round.
pub fn sse_pieces(round: &ScriptRound, model: &str) -> Vec<String> {
    let q = &round.quirks;
    let eol = if q.crlf { "\r\n" } else { "\n" };
    let wrap = |v: &Value| format!("data: {v}{eol}{eol}");
    if let Some(raw) = &round.raw {
        return raw.clone();
    }
    let mut chunks: Vec<Value> = Vec::new();
    if q.empty_first_chunk {
        chunks.push(
            json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk",
            "created": 0, "model": model, "choices": []}),
        );
    }
    chunks.push(chunk(
        model,
        json!({"role": "assistant", "content": ""}),
        None,
    ));
    if let Some(r) = &round.reasoning {
        for p in split_chars(r, round.chunk_size.unwrap_or(8)) {
            chunks.push(chunk(model, json!({"reasoning_content": p}), None));
        }
    }
    if let Some(t) = &round.text {
        for p in split_chars(t, round.chunk_size.unwrap_or(8)) {
            chunks.push(chunk(model, json!({"content": p}), None));
        }
    }
    let calls = round.tool_calls.clone().unwrap_or_default();
    for (i, call) in calls.iter().enumerate() {
        let index = match q.index.as_deref() {
            Some("missing") => None,
            Some("zero") => Some(0),
            Some("from_one") => Some(i + 1),
            _ => Some(i),
        };
        let id = call_id(call, i, q);
        let mut first = json!({"id": id, "type": "function",
            "function": {"name": call.name, "arguments": ""}});
        if let Some(ix) = index {
            first["index"] = json!(ix);
        }
        if q.arguments_object {
            first["function"]["arguments"] = if call.arguments.is_null() {
                json!({})
            } else {
                call.arguments.clone()
            };
            chunks.push(chunk(model, json!({"tool_calls": [first]}), None));
            continue;
        }
        chunks.push(chunk(model, json!({"tool_calls": [first]}), None));
        let args = args_string(&call.arguments);
        let parts = q.split_arguments.unwrap_or(2).max(1);
        let size = args.chars().count().div_ceil(parts).max(1);
        for p in split_chars(&args, size) {
            let mut d = json!({"function": {"arguments": p}});
            if let Some(ix) = index {
                d["index"] = json!(ix);
            }
            if q.id_every_delta {
                d["id"] = json!(id);
                d["type"] = json!("function");
                d["function"]["name"] = json!(call.name);
            }
            chunks.push(chunk(model, json!({"tool_calls": [d]}), None));
        }
    }
    let finish = round.finish_reason.clone().unwrap_or_else(|| {
        if calls.is_empty() {
            "stop".into()
        } else {
            "tool_calls".into()
        }
    });
    chunks.push(chunk(model, json!({}), Some(&finish)));
    if !q.no_usage {
        chunks.push(
            json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk",
            "created": 0, "model": model, "choices": [], "usage": default_usage(round)}),
        );
    }
    let mut pieces: Vec<String> = Vec::new();
    for c in &chunks {
        if let Some(ea) = &round.error_after
            && pieces.len() == ea.chunks
        {
            pieces.push(wrap(
                &json!({"error": {"message": ea.message, "type": "server_error"}}),
            ));
            return pieces;
        }
        if q.comments {
            pieces.push(format!(": mock comment{eol}{eol}"));
        }
        pieces.push(wrap(c));
    }
    if !q.no_done {
        pieces.push(format!("data: [DONE]{eol}{eol}"));
    }
    pieces
}

fn json_completion(round: &ScriptRound, model: &str) -> Value {
    let calls: Vec<Value> = round
        .tool_calls
        .clone()
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"id": call_id(c, i, &round.quirks), "type": "function",
                   "function": {"name": c.name, "arguments": args_string(&c.arguments)}})
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": round.text.clone()});
    if let Some(r) = &round.reasoning {
        message["reasoning_content"] = json!(r);
    }
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls.clone());
    }
    let finish = round.finish_reason.clone().unwrap_or_else(|| {
        if calls.is_empty() {
            "stop".into()
        } else {
            "tool_calls".into()
        }
    });
    json!({"id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": model,
           "choices": [{"index": 0, "message": message, "finish_reason": finish}],
           "usage": default_usage(round)})
}

fn split_chars(s: &str, size: usize) -> Vec<String> {
    let size = size.max(1);
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Runs the mock as a program: serves until Ctrl-C.
pub async fn run_cli(
    script_path: &std::path::Path,
    bind: SocketAddr,
    record: Option<std::path::PathBuf>,
) -> Result<(), String> {
    let text = std::fs::read_to_string(script_path)
        .map_err(|e| format!("cannot read the script {}: {e}", script_path.display()))?;
    let script = parse_script(&text)?;
    let listener = TcpListener::bind(bind)
        .await
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    let n = script.rounds.len();
    let mock =
        MockUpstream::start_recording(script, listener, record).map_err(|e| e.to_string())?;
    println!(
        "mock-upstream: {} rounds, listening on {}",
        n,
        mock.base_url()
    );
    eprintln!(
        "requests are recorded at http://{}/_mock/requests",
        mock.addr
    );
    let _ = tokio::signal::ctrl_c().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::accumulate::Accumulator;
    use crate::upstream::sse::SseDecoder;

    fn replay(round: &ScriptRound) -> crate::upstream::accumulate::Round {
        let mut dec = SseDecoder::new();
        let mut acc = Accumulator::new();
        let mut out = vec![];
        for p in sse_pieces(round, "m") {
            dec.push(p.as_bytes());
            while let Some(ev) = dec.next_event() {
                acc.push_data(ev.event.as_deref(), &ev.data, &mut out)
                    .unwrap();
            }
        }
        while let Some(ev) = dec.finish() {
            acc.push_data(ev.event.as_deref(), &ev.data, &mut out)
                .unwrap();
        }
        acc.finish().unwrap()
    }

    #[test]
    fn every_quirk_round_trips_through_the_accumulator() {
        let base: ScriptRound = serde_json::from_value(json!({
            "text": "hello there",
            "tool_calls": [{"name": "ls", "arguments": {"dirPath": "src"}},
                           {"name": "read_file", "arguments": {"filepath": "a.rs"}}]
        }))
        .unwrap();
        let quirk_sets = [
            json!({}),
            json!({"index": "missing"}),
            json!({"index": "zero"}),
            json!({"index": "from_one"}),
            json!({"id_every_delta": true}),
            json!({"empty_ids": true}),
            json!({"arguments_object": true}),
            json!({"split_arguments": 7, "no_done": true, "no_usage": true}),
            json!({"empty_first_chunk": true, "comments": true, "crlf": true}),
        ];
        for q in quirk_sets {
            let mut r = base.clone();
            r.quirks = serde_json::from_value(q.clone()).unwrap();
            let got = replay(&r);
            assert_eq!(got.content, "hello there", "{q}");
            let names: Vec<&str> = got.tool_calls.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, ["ls", "read_file"], "{q}");
            assert_eq!(got.tool_calls[0].arguments, r#"{"dirPath":"src"}"#, "{q}");
            assert_eq!(got.tool_calls[1].arguments, r#"{"filepath":"a.rs"}"#, "{q}");
            assert_ne!(got.tool_calls[0].id, got.tool_calls[1].id, "{q}");
        }
    }

    #[test]
    fn scripts_with_unknown_keys_are_rejected() {
        let e = parse_script(r#"{"rounds":[{"txt":"x"}]}"#).unwrap_err();
        assert!(e.contains("unknown field `txt`"), "{e}");
    }
}
