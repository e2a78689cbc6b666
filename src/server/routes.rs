//! The handlers: chat completions (streamed and not), models, health, and the fallbacks.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use serde_json::json;

use super::run::{DETACH_HEADER, RunHeaders, answer, respond};
use super::sse::{ChunkEncoder, KEEPALIVE};
use super::stream::Wire;
use super::{AppState, RunId};
use crate::agent::RunEvent;
use crate::error::ApiError;
use crate::openai::{ChatRequest, ToolCall};

pub async fn chat_completions(
    State(state): State<AppState>,
    Extension(RunId(run_id)): Extension<RunId>,
    raw_headers: HeaderMap,
    headers: Result<RunHeaders, ApiError>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(rejection) => return body_error(&rejection, state.server.max_body_bytes),
    };
    state.record("/v1/chat/completions", &raw_headers, &body);
    let req = match ChatRequest::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let headers = match headers {
        Ok(h) => h,
        Err(e) => return e.into_response(),
    };
    let model = state.engine.shown_model(&req);
    let wire = ChatWire::new(ChunkEncoder::new(&run_id, &model), req.include_usage);
    respond(&state, &run_id, req, headers, wire).await
}

/// `POST /v1/completions`: a plain (fill-in-the-middle, autocomplete) completion, passed
/// through to the routed upstream as it is, streamed or not.
pub async fn completions(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    pass_through(
        &state,
        "completions",
        "`model` and `prompt`",
        &headers,
        body,
    )
    .await
}

/// `POST /v1/embeddings`: passed through to the routed upstream as it is.
pub async fn embeddings(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    pass_through(&state, "embeddings", "`model` and `input`", &headers, body).await
}

/// A request for `path` of the upstream, without a run: its model routed (a
/// `server.plain_prefix` on it is taken off, since such a request is plain anyway), retried
/// and failing like a run's rounds, the answer streamed back as the upstream wrote it.
async fn pass_through(
    state: &AppState,
    path: &str,
    fields: &str,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(rejection) => return body_error(&rejection, state.server.max_body_bytes),
    };
    state.record(&format!("/v1/{path}"), headers, &body);
    let mut map = match crate::openai::json_object(&body, fields) {
        Ok(m) => m,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let plain = map
        .get("model")
        .and_then(serde_json::Value::as_str)
        .and_then(|m| m.strip_prefix(state.server.plain_prefix.as_str()))
        .map(str::to_string);
    if let Some(model) = plain {
        map.insert("model".into(), model.into());
    }
    let forwarded = match state.engine.forward(path, map).await {
        Ok(f) => f,
        Err(e) => return e.into_response(),
    };
    let idle = forwarded.idle;
    // Each piece must come within the upstream's idle timeout; a silent upstream ends the
    // body (the status was sent already).
    let pieces = futures_util::stream::unfold(forwarded.body, move |mut body| async move {
        match tokio::time::timeout(idle, futures_util::StreamExt::next(&mut body)).await {
            Ok(Some(piece)) => Some((piece, body)),
            Ok(None) => None,
            Err(_) => {
                tracing::warn!(?idle, "a passed-through answer went silent; ending it");
                None
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(pieces));
    *resp.status_mut() = StatusCode::from_u16(forwarded.status).unwrap_or(StatusCode::OK);
    if let Some(ct) = forwarded
        .content_type
        .and_then(|ct| HeaderValue::from_str(&ct).ok())
    {
        resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    resp
}

/// `GET /v1/runs/{id}/attach[?stream=false]`: the answer of a detached run, from its start
/// (what was already said is replayed), as a chat-completion stream, or as one completion
/// when `stream=false` (waits for the end).
pub async fn attach(
    State(state): State<AppState>,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    let Some(reader) = state.engine.detached.attach(&id) else {
        return ApiError::not_found(format!(
            "no detached run {id:?} to attach to: only runs started with the header \
             `{DETACH_HEADER}: true` go on without their client (and finished ones are kept \
             for 10 minutes); GET /v1/runs/{id} has the record of any run"
        ))
        .into_response();
    };
    let summary = state.engine.runs.list().into_iter().find(|r| r.id == id);
    let model = summary.map(|s| s.model).unwrap_or_default();
    let stream = q.get("stream").is_none_or(|v| v != "false");
    let wire = ChatWire::new(ChunkEncoder::new(&id, &model), true);
    answer(&state, reader, wire, stream).await
}

/// `POST /v1/runs/{id}/cancel`: stops a detached run (and kills its commands).
pub async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    if state.engine.detached.cancel(&id) {
        axum::Json(serde_json::json!({"id": id, "cancelled": true})).into_response()
    } else {
        ApiError::not_found(format!(
            "no detached run {id:?} is running (runs attached to a client are cancelled by \
             closing the connection)"
        ))
        .into_response()
    }
}

pub(crate) fn body_error(rejection: &BytesRejection, limit: usize) -> Response {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!(
                "the request body is larger than the limit of {limit} bytes \
                 (server.max_body_bytes)"
            ),
        )
        .with_code("request_too_large")
        .into_response();
    }
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        format!("cannot read the request body: {}", rejection.body_text()),
    )
    .into_response()
}

/// A run as chat completions: chunks when streamed, one completion otherwise.
struct ChatWire {
    enc: ChunkEncoder,
    include_usage: bool,
    /// What a completion answered in one body says, collected as it arrives.
    content: String,
    reasoning: String,
    calls: Vec<ToolCall>,
}

impl ChatWire {
    fn new(enc: ChunkEncoder, include_usage: bool) -> ChatWire {
        ChatWire {
            enc,
            include_usage,
            content: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
        }
    }
}

impl Wire for ChatWire {
    fn open(&mut self, out: &mut BytesMut) {
        self.enc.role(out);
    }

    fn text(&mut self, out: &mut BytesMut, text: &str) {
        self.enc.content(out, text);
    }

    fn reasoning(&mut self, out: &mut BytesMut, text: &str) {
        self.enc.reasoning(out, text);
    }

    fn other(&mut self, out: &mut BytesMut, ev: RunEvent) -> bool {
        match ev {
            RunEvent::ClientToolCalls(calls) => {
                for (i, call) in calls.iter().enumerate() {
                    self.enc.tool_call(out, i, call);
                }
                false
            }
            RunEvent::Done {
                finish_reason,
                usage,
                ..
            } => {
                self.enc.finish(out, &finish_reason);
                if self.include_usage {
                    self.enc.usage(out, &usage);
                }
                ChunkEncoder::done(out);
                true
            }
            RunEvent::Failed(e) => {
                self.fail(out, &e);
                true
            }
            _ => false,
        }
    }

    /// An `error` event in OpenAI's shape and no `[DONE]`: a client (and the official SDKs,
    /// which raise on it) can tell a broken answer from a complete one.
    fn fail(&mut self, out: &mut BytesMut, error: &ApiError) {
        ChunkEncoder::error(out, &error.body());
    }

    fn collect(&mut self, ev: RunEvent) -> Option<Response> {
        match ev {
            RunEvent::Content(t) => self.content.push_str(&t),
            RunEvent::Reasoning(t) => self.reasoning.push_str(&t),
            RunEvent::ClientToolCalls(c) => self.calls = c,
            RunEvent::ToolStarted { .. }
            | RunEvent::ToolFinished { .. }
            | RunEvent::ApprovalPending(_)
            | RunEvent::ApprovalResolved { .. } => {}
            RunEvent::Done {
                finish_reason,
                usage,
                ..
            } => {
                let body = self.enc.completion(
                    &self.content,
                    &self.reasoning,
                    &self.calls,
                    &finish_reason,
                    &usage,
                );
                return Some(([(header::CONTENT_TYPE, "application/json")], body).into_response());
            }
            RunEvent::Failed(e) => return Some(e.into_response()),
        }
        None
    }
}

pub async fn models(State(state): State<AppState>) -> Response {
    match state.engine.models().await {
        Ok(v) => ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn healthz(State(state): State<AppState>) -> Response {
    let engine = &state.engine;
    let tools: Vec<&str> = engine
        .registry
        .tools()
        .map(|t| t.name())
        .filter(|n| engine.registry.is_enabled(n))
        .collect();
    let body = json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "workspace": engine.workspace.root().display().to_string(),
        "upstream": engine.upstreams.describe(),
        "demo_model": engine.upstreams.is_demo(),
        "server_tools": tools,
        "codebase": codebase_health(&engine.code.status()),
        // A server's last stderr lines may quote a secret it was given.
        "mcp_servers": engine.registry.mcp().map_or(json!([]), |m| {
            let text = m.status().to_string();
            serde_json::from_str(&engine.redactor.redact(&text)).unwrap_or(json!([]))
        }),
        "sandbox": {
            "landlock": engine.terminal.sandbox,
            "commands": engine.terminal.describe(),
            "unsandboxed_commands": engine.config.policy.unsandboxed.as_continue(),
            "deny_read": engine.terminal.config.deny_read,
            "warnings": engine.terminal.read_warnings(engine.workspace.root()),
        },
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The codebase index in `/healthz`: how it learns about changes (and why not from
/// notifications), and what it has done.
fn codebase_health(s: &crate::code::index::Status) -> serde_json::Value {
    use crate::code::index::Watching;
    let (notifications, folders, reason) = match &s.watching {
        Watching::NotStarted => ("not started", 0, None),
        Watching::Active { folders } => ("active", *folders, None),
        Watching::Off(why) => ("off", 0, Some(why.as_str())),
    };
    json!({
        "notifications": notifications,
        "reason": reason,
        "folders_watched": folders,
        "built": s.built,
        "refreshing": s.refreshing,
        "files": s.files,
        "walks": s.walks,
        "updates": s.updates,
        "updated_files": s.updated_files,
        "removed_files": s.removed_files,
        "instant_queries": s.instant_queries,
        "events": s.events,
        "error": s.error,
    })
}

/// `GET /v1/jobs`: background jobs of `run_terminal_command`.
pub async fn jobs(State(state): State<AppState>) -> Response {
    let list = state.engine.terminal.jobs.list();
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({"object": "list", "data": list}).to_string(),
    )
        .into_response()
}

/// `POST /v1/policy/check` with `{"command": "…"}`: what the policy would decide, and why.
pub async fn policy_check(State(state): State<AppState>, body: Bytes) -> Response {
    let v: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("the request body is not valid JSON: {e}"),
            )
            .into_response();
        }
    };
    let Some(command) = v.get("command").and_then(serde_json::Value::as_str) else {
        return ApiError::invalid(
            "command",
            "`command` is required: the command line to check",
        )
        .into_response();
    };
    let engine = &state.engine;
    let policy = engine.registry.policy();
    let judge = crate::policy::WorkspaceJudge::new(&engine.workspace, &policy);
    let (decision, a) = policy.decide_command(
        "run_terminal_command",
        command,
        engine.terminal.sandboxed(),
        &judge,
    );
    let approved = matches!(decision, crate::policy::Decision::Ask { .. })
        && !decision.person_only()
        && engine.config.agent.approve_asks;
    let body = json!({
        "command": command,
        "decision": decision.label(),
        "person_only": decision.person_only(),
        "class": a.class,
        "reason": decision.reason(),
        "approved_by_yes": approved,
        "sandboxed": engine.terminal.sandboxed(),
        "parts": a.parts,
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `POST /v1/runs/{id}/undo` with an optional body `{"force": true}`.
pub async fn undo(
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    body: Bytes,
) -> Response {
    let force = if body.iter().all(u8::is_ascii_whitespace) {
        false
    } else {
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v) => match v.get("force") {
                None | Some(serde_json::Value::Null) => false,
                Some(serde_json::Value::Bool(b)) => *b,
                Some(_) => {
                    return ApiError::invalid("force", "`force` must be true or false")
                        .into_response();
                }
            },
            Err(e) => {
                return ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    format!("the request body is not valid JSON: {e}"),
                )
                .into_response();
            }
        }
    };
    let engine = std::sync::Arc::clone(&state.engine);
    let result = tokio::task::spawn_blocking(move || {
        engine.checkpoints.undo(&engine.workspace, &run_id, force)
    })
    .await;
    use crate::checkpoint::UndoError;
    match result {
        Ok(Ok(report)) => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_string(&report).unwrap_or_default(),
        )
            .into_response(),
        Ok(Err(e @ UndoError::NotFound(_))) => ApiError::not_found(e.to_string()).into_response(),
        Ok(Err(e @ (UndoError::Conflict { .. } | UndoError::AlreadyUndone { .. }))) => {
            ApiError::new(StatusCode::CONFLICT, "invalid_request_error", e.to_string())
                .with_code("undo_conflict")
                .into_response()
        }
        Ok(Err(e)) => ApiError::internal(e.to_string()).into_response(),
        Err(e) => ApiError::internal(format!("undo stopped unexpectedly: {e}")).into_response(),
    }
}

pub async fn not_found(method: Method, uri: Uri) -> Response {
    ApiError::not_found(format!(
        "unknown endpoint {method} {}: toolpilot serves POST /v1/chat/completions, \
         POST /v1/responses, POST /v1/completions, POST /v1/embeddings, GET /v1/models and \
         GET /healthz",
        uri.path()
    ))
    .into_response()
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let allowed = if uri.path().ends_with("chat/completions") || uri.path().ends_with("/responses")
    {
        "POST"
    } else {
        "GET"
    };
    let mut resp = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!("{method} is not allowed on {}; use {allowed}", uri.path()),
    )
    .with_code("method_not_allowed")
    .into_response();
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allowed));
    resp
}

/// `GET /v1/approvals`: the tool calls waiting for approval now, oldest first.
pub async fn approvals(State(state): State<AppState>) -> Response {
    // Someone follows the approvals: runs that need one may wait for it (`auto` mode).
    state.engine.approvals.followed();
    let list = state.engine.approvals.list();
    axum::Json(serde_json::json!({"object": "list", "data": list})).into_response()
}

/// `POST /v1/approvals/{id}` with `{"decision": "approve" | "deny", "always": bool,
/// "reason": "…"}`: answers a waiting call. `always` (with approve) also adds allow rules, in
/// force at once and saved for the next start.
pub async fn answer_approval(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        decision: String,
        #[serde(default)]
        always: bool,
        #[serde(default)]
        reason: Option<String>,
    }
    let answer: Answer = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!(
                    "the body must be JSON like {{\"decision\": \"approve\"}} or \
                     {{\"decision\": \"deny\", \"reason\": \"…\"}} (optional \"always\": true \
                     with approve): {e}"
                ),
            )
            .into_response();
        }
    };
    use crate::approvals::{AnswerError, Verdict};
    let verdict = match answer.decision.as_str() {
        "approve" | "allow" => Verdict::Approve {
            always: answer.always,
        },
        "deny" | "reject" if answer.always => {
            return ApiError::invalid(
                "always",
                "\"always\" only goes with approve (to deny such calls for good, add a \
                 policy.deny rule to the config)",
            )
            .into_response();
        }
        "deny" | "reject" => Verdict::Deny {
            reason: answer.reason.filter(|r| !r.trim().is_empty()),
        },
        other => {
            return ApiError::invalid(
                "decision",
                format!("decision {other:?} is not \"approve\" or \"deny\""),
            )
            .into_response();
        }
    };
    let always = matches!(verdict, Verdict::Approve { always: true });
    let engine = &state.engine;
    // "Always" writes the rules file: on a blocking thread.
    let approvals = std::sync::Arc::clone(&engine.approvals);
    let answered = tokio::task::spawn_blocking(move || approvals.answer(&id, verdict)).await;
    let answered = match answered {
        Ok(a) => a,
        Err(e) => {
            return ApiError::internal(format!("answering the approval failed: {e}"))
                .into_response();
        }
    };
    match answered {
        Ok(info) => {
            let mut rules_added = Vec::new();
            if always {
                match engine.registry.allow(&info.rules) {
                    Ok(()) => rules_added = info.rules.clone(),
                    Err(e) => {
                        tracing::warn!(error = %e, "an always-allow rule did not compile");
                        return ApiError::internal(format!(
                            "the call was approved, but its allow rule could not be added: {e}"
                        ))
                        .into_response();
                    }
                }
                tracing::info!(rules = ?rules_added, "allow rules added by an approval");
            }
            axum::Json(serde_json::json!({
                "id": info.id,
                "run_id": info.run_id,
                "tool": info.tool,
                "decision": answer.decision,
                "rules_added": rules_added,
                "rules_file": (!rules_added.is_empty())
                    .then(|| engine.approvals.rules_file().display().to_string()),
            }))
            .into_response()
        }
        Err(e @ AnswerError::NotFound(_)) => ApiError::not_found(e.to_string()).into_response(),
        Err(e @ AnswerError::SaveRule { .. }) => ApiError::internal(e.to_string()).into_response(),
    }
}

/// `GET /v1/runs`: the runs since the server started (the last 200), newest first.
pub async fn runs(State(state): State<AppState>) -> Response {
    axum::Json(serde_json::json!({"object": "list", "data": state.engine.runs.list()}))
        .into_response()
}

fn unknown_run(id: &str) -> Response {
    ApiError::not_found(format!(
        "there is no run with the id {id:?} (GET /v1/runs lists the recent ones; the id is in \
         each response's x-toolpilot-run-id header)"
    ))
    .into_response()
}

/// `GET /v1/runs/{id}`: a run's summary and its events (also runs from before a restart).
pub async fn run(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let engine = std::sync::Arc::clone(&state.engine);
    let found = {
        let id = id.clone();
        tokio::task::spawn_blocking(move || engine.runs.get_json(&id))
            .await
            .ok()
            .flatten()
    };
    match found {
        Some(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        None => unknown_run(&id),
    }
}

/// `GET /v1/runs/{id}/events`: the run's events as SSE (`data: {…}` each), first those so far,
/// then live ones as they happen, then `event: end` when the run has ended. A client that
/// lost its chat stream can follow its run here.
pub async fn run_events(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let Some((past, rx)) = state.engine.runs.follow(&id) else {
        return unknown_run(&id);
    };
    struct Follow {
        past: std::collections::VecDeque<Bytes>,
        rx: tokio::sync::broadcast::Receiver<Bytes>,
        keepalive: Duration,
        ended: bool,
        finished: bool,
    }
    let state = Follow {
        past: past.into(),
        rx,
        keepalive: state.server.keepalive,
        ended: false,
        finished: false,
    };
    let frame = |ev: &Bytes, f: &mut Follow| {
        f.ended |= crate::runs::is_end(ev);
        let mut b = BytesMut::with_capacity(ev.len() + 8);
        b.extend_from_slice(b"data: ");
        b.extend_from_slice(ev);
        b.extend_from_slice(b"\n\n");
        b.freeze()
    };
    let stream = futures_util::stream::unfold(state, move |mut f| async move {
        use tokio::sync::broadcast::error::RecvError;
        if f.finished {
            return None;
        }
        let bytes = if let Some(ev) = f.past.pop_front() {
            frame(&ev, &mut f)
        } else if f.ended {
            f.finished = true;
            Bytes::from_static(b"event: end\ndata: {}\n\n")
        } else {
            match tokio::time::timeout(f.keepalive, f.rx.recv()).await {
                Err(_) => Bytes::from_static(KEEPALIVE),
                Ok(Ok(ev)) => frame(&ev, &mut f),
                Ok(Err(RecvError::Lagged(n))) => {
                    Bytes::from(format!(": {n} events were skipped (too slow a reader)\n\n"))
                }
                Ok(Err(RecvError::Closed)) => {
                    f.finished = true;
                    Bytes::from_static(b"event: end\ndata: {}\n\n")
                }
            }
        };
        Some((Ok::<Bytes, Infallible>(bytes), f))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(
    State(state): State<AppState>,
    connections: Option<axum::Extension<super::workers::Connections>>,
) -> Response {
    use std::fmt::Write as _;
    let engine = &state.engine;
    let mut text = engine.runs.prometheus(engine.approvals.list().len());
    if let Some(axum::Extension(c)) = connections {
        text.push_str(
            "# HELP toolpilot_connections Open client connections, by the thread serving them \
             (server.workers).\n# TYPE toolpilot_connections gauge\n",
        );
        for (i, n) in c.counts().iter().enumerate() {
            let _ = writeln!(text, "toolpilot_connections{{worker=\"{i}\"}} {n}");
        }
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
