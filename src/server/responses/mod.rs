//! `POST /v1/responses`: the Responses API, served by the same loop as chat completions.
//!
//! The body becomes a [`ResponsesRequest`] (a chat request plus what the response repeats),
//! `previous_response_id` is resolved from the [`Store`], and the run starts with
//! `Engine::start` exactly as for chat completions (run id header, guard, detach header).
//! Its events become output items ([`encode::Encoder`]): streamed as Responses SSE events, with
//! keep-alive comments while tools run and server-side progress in the configured channel
//! (reasoning → a reasoning item, text → the answer's text, comments → SSE comments), or
//! returned as one response object.

pub mod encode;
pub mod store;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use serde_json::Value;

pub use self::store::Store;
use super::routes::{DETACH_HEADER, EventSource, body_error, progress_line, run_ended_early};
use super::sse::{ChunkEncoder, KEEPALIVE};
use super::{AppState, CURRENT_FILE_HEADER, RunId};
use crate::agent::{RunEvent, RunOptions};
use crate::config::Progress;
use crate::error::ApiError;
use crate::openai::assistant_message;
use crate::openai::responses::ResponsesRequest;
use encode::Encoder;

/// Where a finished response leaves its conversation (for `previous_response_id`).
struct Keep {
    store: Arc<Store>,
    /// The conversation the response answered, as the client sees it.
    conversation: Vec<Value>,
}

impl Keep {
    fn save(self, enc: &Encoder) {
        let (text, calls) = enc.answer();
        let mut messages = self.conversation;
        messages.push(assistant_message(text, calls));
        self.store.put(enc.id(), messages);
    }
}

pub async fn create(
    State(state): State<AppState>,
    Extension(RunId(run_id)): Extension<RunId>,
    Extension(store): Extension<Arc<Store>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(rejection) => return body_error(&rejection, state.server.max_body_bytes),
    };
    let mut req = match ResponsesRequest::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if let Some(prev) = req.previous_response_id.clone() {
        let Some(prior) = store.get(&prev) else {
            return ApiError::invalid(
                "previous_response_id",
                format!(
                    "previous response {prev:?} is not known here: toolpilot keeps the \
                     conversations of its last {} responses in memory (not across restarts, not \
                     those made with `store: false`); send the whole conversation in `input` \
                     instead",
                    store::MAX_ENTRIES
                ),
            )
            .with_code("previous_response_not_found")
            .into_response();
        };
        if let Err(e) = req.with_prior(&prior) {
            return e.into_response();
        }
    }
    if req.chat.current_file.is_none() {
        req.chat.current_file = headers
            .get(CURRENT_FILE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .filter(|s| !s.trim().is_empty());
    }
    let detach = match headers
        .get(DETACH_HEADER)
        .map(|v| v.to_str().map(str::trim))
    {
        None => state.server.detach,
        Some(Ok("1" | "true" | "yes")) => true,
        Some(Ok("0" | "false" | "no")) => false,
        Some(_) => {
            return ApiError::invalid(
                DETACH_HEADER,
                format!("the {DETACH_HEADER} header must be \"true\" or \"false\""),
            )
            .into_response();
        }
    };
    let keep = req.store.then(|| Keep {
        store,
        conversation: req.conversation().to_vec(),
    });
    let ResponsesRequest {
        chat, echo, kinds, ..
    } = req;
    let stream = chat.stream;
    let model = state.engine.shown_model(&chat);
    let enc = Encoder::new(&run_id, &model, &echo, kinds, stream);
    let handle = state.engine.start(
        chat,
        RunOptions {
            run_id: run_id.clone(),
            live: stream,
            approvals_reachable: true,
        },
    );
    if detach {
        let reader = state.engine.detached.spawn(handle);
        respond(&state, reader, enc, stream, keep).await
    } else {
        respond(&state, handle, enc, stream, keep).await
    }
}

async fn respond<S: EventSource>(
    state: &AppState,
    source: S,
    enc: Encoder,
    stream: bool,
    keep: Option<Keep>,
) -> Response {
    if stream {
        stream_response(
            source,
            enc,
            state.server.keepalive,
            state.server.progress,
            keep,
        )
        .await
    } else {
        collect_response(source, enc, keep).await
    }
}

async fn collect_response<S: EventSource>(
    mut source: S,
    mut enc: Encoder,
    keep: Option<Keep>,
) -> Response {
    // Nothing is written without `emit`; the encoder only collects the output.
    let mut none = BytesMut::new();
    while let Some(ev) = source.recv().await {
        match ev {
            RunEvent::Content(t) => enc.text(&mut none, &t),
            RunEvent::Reasoning(t) => enc.reasoning(&mut none, &t),
            RunEvent::ClientToolCalls(calls) => enc.calls(&mut none, &calls),
            RunEvent::Done {
                finish_reason,
                usage,
                ..
            } => {
                let body = enc.finish(&mut none, &finish_reason, &usage);
                if let Some(keep) = keep {
                    keep.save(&enc);
                }
                return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
            }
            RunEvent::Failed(e) => return e.into_response(),
            // Server-side activity (tools, approvals): a non-streamed answer shows no
            // progress, as for chat completions.
            _ => {}
        }
    }
    run_ended_early().into_response()
}

/// State of one outbound Responses event stream.
struct Outbound<S> {
    source: S,
    enc: Encoder,
    keepalive: Duration,
    progress: Progress,
    keep: Option<Keep>,
    /// Whether the text sent so far ends a line (progress lines in the text start on their
    /// own line).
    at_line_start: bool,
    /// The last text sent was a progress line (which already ends with a blank line).
    after_progress: bool,
    pending: Option<RunEvent>,
    started: bool,
    finished: bool,
}

impl<S: EventSource> Outbound<S> {
    /// Shows one line of server-side activity in the configured channel.
    fn progress(&mut self, out: &mut BytesMut, line: &str) {
        match self.progress {
            Progress::Comments => ChunkEncoder::comment(out, &format!("toolpilot: {line}")),
            Progress::Reasoning => self.enc.reasoning(out, &format!("toolpilot: {line}\n")),
            Progress::Text => {
                let sep = if self.at_line_start { "" } else { "\n\n" };
                self.enc.text(out, &format!("{sep}> toolpilot: {line}\n\n"));
                self.at_line_start = true;
                self.after_progress = true;
            }
            Progress::None => {}
        }
    }

    /// Encodes one event; returns true when the stream is complete.
    fn encode(&mut self, ev: RunEvent, out: &mut BytesMut) -> bool {
        match ev {
            RunEvent::Content(t) => {
                // After a progress line, the blank line is already there.
                let t = if self.after_progress {
                    t.trim_start_matches('\n')
                } else {
                    &t
                };
                if !t.is_empty() {
                    self.at_line_start = t.ends_with('\n');
                    self.after_progress = false;
                    self.enc.text(out, t);
                }
            }
            RunEvent::Reasoning(t) => self.enc.reasoning(out, &t),
            RunEvent::ClientToolCalls(calls) => self.enc.calls(out, &calls),
            RunEvent::Done {
                finish_reason,
                usage,
                ..
            } => {
                self.enc.finish(out, &finish_reason, &usage);
                if let Some(keep) = self.keep.take() {
                    keep.save(&self.enc);
                }
                return true;
            }
            RunEvent::Failed(e) => {
                self.enc.fail(out, &e);
                return true;
            }
            ev => {
                if let Some(line) = progress_line(&ev) {
                    self.progress(out, &line);
                }
            }
        }
        false
    }

    async fn next_bytes(&mut self) -> Option<Bytes> {
        if self.finished {
            return None;
        }
        let mut out = BytesMut::new();
        if !self.started {
            self.started = true;
            self.enc.created(&mut out);
        }
        let first = match self.pending.take() {
            Some(ev) => Some(ev),
            None if !out.is_empty() => match self.source.try_recv() {
                Some(ev) => Some(ev),
                None => return Some(out.freeze()),
            },
            None => match tokio::time::timeout(self.keepalive, self.source.recv()).await {
                Err(_) => return Some(Bytes::from_static(KEEPALIVE)),
                Ok(ev) => ev,
            },
        };
        let Some(ev) = first else {
            self.finished = true;
            self.enc.fail(&mut out, &run_ended_early());
            return Some(out.freeze());
        };
        if self.encode(ev, &mut out) {
            self.finished = true;
            return Some(out.freeze());
        }
        // Coalesce what is already waiting into one write.
        while out.len() < 32 * 1024 {
            match self.source.try_recv() {
                Some(ev) => {
                    if self.encode(ev, &mut out) {
                        self.finished = true;
                        break;
                    }
                }
                None => break,
            }
        }
        Some(out.freeze())
    }
}

async fn stream_response<S: EventSource>(
    mut source: S,
    enc: Encoder,
    keepalive: Duration,
    progress: Progress,
    keep: Option<Keep>,
) -> Response {
    // As for chat completions: an error before anything happened gets a real HTTP status,
    // but a slow upstream does not keep the client without headers for more than one
    // keep-alive interval.
    let first = match tokio::time::timeout(keepalive, source.recv()).await {
        Ok(None) => return run_ended_early().into_response(),
        Ok(Some(RunEvent::Failed(e))) => return e.into_response(),
        Ok(Some(ev)) => Some(ev),
        Err(_) => None,
    };
    let outbound = Outbound {
        source,
        enc,
        keepalive,
        progress,
        keep,
        at_line_start: true,
        after_progress: false,
        pending: first,
        started: false,
        finished: false,
    };
    let stream = futures_util::stream::unfold(outbound, |mut o| async move {
        o.next_bytes()
            .await
            .map(|b| (Ok::<Bytes, Infallible>(b), o))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}
