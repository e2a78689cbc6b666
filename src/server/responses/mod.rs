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

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use serde_json::Value;

pub use self::store::Store;
use super::routes::{DETACH_HEADER, body_error};
use super::stream::{EventSource, Wire, run_ended_early, sse_response};
use super::{AppState, CURRENT_FILE_HEADER, RunId};
use crate::agent::{RunEvent, RunOptions};
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
        Err(e) => return ApiError::from(e).into_response(),
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
            return ApiError::from(e).into_response();
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
        sse_response(
            source,
            ResponsesWire { enc, keep },
            state.server.keepalive,
            state.server.progress,
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

/// Responses API events.
struct ResponsesWire {
    enc: Encoder,
    keep: Option<Keep>,
}

impl Wire for ResponsesWire {
    fn open(&mut self, out: &mut BytesMut) {
        self.enc.created(out);
    }

    fn text(&mut self, out: &mut BytesMut, text: &str) {
        self.enc.text(out, text);
    }

    fn reasoning(&mut self, out: &mut BytesMut, text: &str) {
        self.enc.reasoning(out, text);
    }

    fn other(&mut self, out: &mut BytesMut, ev: RunEvent) -> bool {
        match ev {
            RunEvent::ClientToolCalls(calls) => {
                self.enc.calls(out, &calls);
                false
            }
            RunEvent::Done {
                finish_reason,
                usage,
                ..
            } => {
                self.enc.finish(out, &finish_reason, &usage);
                if let Some(keep) = self.keep.take() {
                    keep.save(&self.enc);
                }
                true
            }
            RunEvent::Failed(e) => {
                self.enc.fail(out, &e);
                true
            }
            _ => false,
        }
    }

    fn fail(&mut self, out: &mut BytesMut, error: &ApiError) {
        self.enc.fail(out, error);
    }
}
