//! Starting a run from a request, for chat completions and the Responses API alike: the
//! headers that shape it ([`RunHeaders`]) and the one [`respond`] that starts it and answers
//! with its events in the request's protocol.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::stream::{EventSource, Wire, collect_response, sse_response};
use crate::agent::RunOptions;
use crate::config::Progress;
use crate::error::ApiError;
use crate::openai::ChatRequest;

/// The header that names the file open in the client's editor (for
/// `read_currently_open_file`), when the body's `toolpilot.current_file` does not.
pub const CURRENT_FILE_HEADER: &str = "x-toolpilot-current-file";

/// The header that asks for a run that goes on without its client (re-attach with
/// `GET /v1/runs/{id}/attach`).
pub const DETACH_HEADER: &str = "x-toolpilot-detach";

/// The header that names built-in tools to offer besides the client's own (comma-separated;
/// `none` for none), instead of `server.augment`.
pub const AUGMENT_HEADER: &str = "x-toolpilot-augment";

/// The header that asks for a plain completion (`true`), as a model named with
/// `server.plain_prefix` does.
pub const PLAIN_HEADER: &str = "x-toolpilot-plain";

/// What a request's headers say about its run.
pub struct RunHeaders {
    /// `x-toolpilot-current-file`, when set and not blank.
    pub current_file: Option<String>,
    /// `x-toolpilot-detach`, else `server.detach`.
    pub detach: bool,
    /// `x-toolpilot-augment`, when sent.
    pub augment: Option<Vec<String>>,
    /// `x-toolpilot-plain: true`.
    pub plain: bool,
}

/// A yes/no header: `None` when absent, an error naming `what` it means when neither.
fn switch(
    headers: &axum::http::HeaderMap,
    name: &str,
    what: &str,
) -> Result<Option<bool>, ApiError> {
    match headers.get(name).map(|v| v.to_str().map(str::trim)) {
        None => Ok(None),
        Some(Ok("1" | "true" | "yes")) => Ok(Some(true)),
        Some(Ok("0" | "false" | "no")) => Ok(Some(false)),
        Some(_) => Err(ApiError::invalid(
            name,
            format!("the {name} header must be \"true\" ({what}) or \"false\""),
        )),
    }
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
        let detach = switch(
            headers,
            DETACH_HEADER,
            "the run goes on without its client and can be re-attached with GET \
             /v1/runs/{id}/attach",
        )?
        .unwrap_or(state.server.detach);
        let plain = switch(
            headers,
            PLAIN_HEADER,
            "the request goes to the upstream as it is, without toolpilot's tools, system \
             message or loop",
        )?
        .unwrap_or(false);
        let augment = match headers.get(AUGMENT_HEADER) {
            None => None,
            Some(v) => {
                let text = v.to_str().map_err(|_| {
                    ApiError::invalid(
                        AUGMENT_HEADER,
                        format!("the {AUGMENT_HEADER} header is not text"),
                    )
                })?;
                let names: Vec<String> = text
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty() && *n != "none")
                    .map(str::to_string)
                    .collect();
                Some(
                    crate::config::augment_list(&format!("the {AUGMENT_HEADER} header"), names)
                        .map_err(|e| ApiError::invalid(AUGMENT_HEADER, e.to_string()))?,
                )
            }
        };
        Ok(RunHeaders {
            current_file,
            detach,
            augment,
            plain,
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
    let mut plain = headers.plain;
    let prefix = state.server.plain_prefix.as_str();
    if let Some(model) = req.model.as_deref()
        && let Some(rest) = model.strip_prefix(prefix)
    {
        req.model = Some(rest.to_string());
        plain = true;
    }
    if headers.detach
        && let Err(why) = state.engine.detached.room()
    {
        return ApiError::new(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            why,
        )
        .with_code("too_many_detached_runs")
        .into_response();
    }
    let stream = req.stream;
    let progress_shown = matches!(state.server.progress, Progress::Reasoning | Progress::Text);
    let handle = state.engine.start(
        req,
        RunOptions {
            run_id: run_id.to_string(),
            live: stream,
            approvals_reachable: true,
            approvals_visible: stream && progress_shown,
            augment: headers.augment,
            plain,
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
