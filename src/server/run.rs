//! Starting a run from a request, for chat completions and the Responses API alike: the
//! headers that shape it ([`RunHeaders`]) and the one [`respond`] that starts it and answers
//! with its events in the request's protocol.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::stream::{EventSource, Wire, collect_response, sse_response};
use crate::agent::RunOptions;
use crate::error::ApiError;
use crate::openai::ChatRequest;

/// The header that names the file open in the client's editor (for
/// `read_currently_open_file`), when the body's `toolpilot.current_file` does not.
pub const CURRENT_FILE_HEADER: &str = "x-toolpilot-current-file";

/// The header that asks for a run that goes on without its client (re-attach with
/// `GET /v1/runs/{id}/attach`).
pub const DETACH_HEADER: &str = "x-toolpilot-detach";

/// What a request's headers say about its run.
pub struct RunHeaders {
    /// `x-toolpilot-current-file`, when set and not blank.
    pub current_file: Option<String>,
    /// `x-toolpilot-detach`, else `server.detach`.
    pub detach: bool,
}

impl FromRequestParts<AppState> for RunHeaders {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let headers = &parts.headers;
        let current_file = headers
            .get(CURRENT_FILE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .filter(|s| !s.trim().is_empty());
        let detach = match headers
            .get(DETACH_HEADER)
            .map(|v| v.to_str().map(str::trim))
        {
            None => state.server.detach,
            Some(Ok("1" | "true" | "yes")) => true,
            Some(Ok("0" | "false" | "no")) => false,
            Some(_) => {
                return Err(ApiError::invalid(
                    DETACH_HEADER,
                    format!(
                        "the {DETACH_HEADER} header must be \"true\" (the run goes on without \
                         its client and can be re-attached with GET /v1/runs/{{id}}/attach) or \
                         \"false\""
                    ),
                ));
            }
        };
        Ok(RunHeaders {
            current_file,
            detach,
        })
    }
}

/// Starts the run of `req` (its open file from the header when the body named none) and
/// answers with its events as `wire` writes them: streamed or in one body, as the request
/// asked; from a detached run's replay when the headers asked for one.
pub async fn respond<W: Wire>(
    state: &AppState,
    run_id: &str,
    mut req: ChatRequest,
    headers: RunHeaders,
    wire: W,
) -> Response {
    if req.current_file.is_none() {
        req.current_file = headers.current_file;
    }
    if headers.detach {
        if let Err(why) = state.engine.detached.room() {
            return ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                why,
            )
            .with_code("too_many_detached_runs")
            .into_response();
        }
    }
    let stream = req.stream;
    let handle = state.engine.start(
        req,
        RunOptions {
            run_id: run_id.to_string(),
            live: stream,
            approvals_reachable: true,
        },
    );
    if headers.detach {
        let reader = state.engine.detached.spawn(handle);
        answer(state, reader, wire, stream).await
    } else {
        answer(state, handle, wire, stream).await
    }
}

/// The events of `source` as `wire` writes them: an event stream, or one body.
pub async fn answer<S: EventSource, W: Wire>(
    state: &AppState,
    source: S,
    wire: W,
    stream: bool,
) -> Response {
    if stream {
        sse_response(source, wire, state.server.keepalive, state.server.progress).await
    } else {
        collect_response(source, wire).await
    }
}
