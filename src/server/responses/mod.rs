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
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use serde_json::Value;

pub use self::store::Store;
use super::routes::body_error;
use super::run::{RunHeaders, respond};
use super::stream::Wire;
use super::{AppState, RunId};
use crate::agent::RunEvent;
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
    raw_headers: axum::http::HeaderMap,
    headers: Result<RunHeaders, ApiError>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(rejection) => return body_error(&rejection, state.server.max_body_bytes),
    };
    state.record("/v1/responses", &raw_headers, &body);
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
    let headers = match headers {
        Ok(h) => h,
        Err(e) => return e.into_response(),
    };
    let keep = req.store.then(|| Keep {
        store,
        conversation: req.conversation().to_vec(),
    });
    let ResponsesRequest {
        chat, echo, kinds, ..
    } = req;
    let model = state.engine.shown_model(&chat);
    let enc = Encoder::new(&run_id, &model, &echo, kinds, chat.stream);
    respond(&state, &run_id, chat, headers, ResponsesWire { enc, keep }).await
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

    fn collect(&mut self, ev: RunEvent) -> Option<Response> {
        // Nothing is written without `emit`; the encoder only collects the output.
        let mut none = BytesMut::new();
        match ev {
            RunEvent::Content(t) => self.enc.text(&mut none, &t),
            RunEvent::Reasoning(t) => self.enc.reasoning(&mut none, &t),
            RunEvent::ClientToolCalls(calls) => self.enc.calls(&mut none, &calls),
            RunEvent::Done {
                finish_reason,
                usage,
                ..
            } => {
                let body = self.enc.finish(&mut none, &finish_reason, &usage);
                if let Some(keep) = self.keep.take() {
                    keep.save(&self.enc);
                }
                return Some(([(header::CONTENT_TYPE, "application/json")], body).into_response());
            }
            RunEvent::Failed(e) => return Some(e.into_response()),
            // Server-side activity (tools, approvals): a non-streamed answer shows no
            // progress, as for chat completions.
            _ => {}
        }
        None
    }
}
