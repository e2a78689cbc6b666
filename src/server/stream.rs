//! A run's events as a server-sent-event stream, for any wire protocol.
//!
//! Chat completions and the Responses API differ only in how they write text, reasoning and
//! the end of a run ([`Wire`]). Everything else is shared here: waiting for the first event
//! so an early error gets a real HTTP status, keep-alive comments while tools run, progress
//! lines in the configured channel, and coalescing what is already waiting into one write.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;

use super::sse::{ChunkEncoder, KEEPALIVE};
use crate::agent::detach::ReplayReader;
use crate::agent::{RunEvent, RunHandle};
use crate::config::Progress;
use crate::error::ApiError;

/// Where a response reads its run's events: the run itself, or a detached run's replay.
pub trait EventSource: Send + 'static {
    fn recv(&mut self) -> impl std::future::Future<Output = Option<RunEvent>> + Send;
    fn try_recv(&mut self) -> Option<RunEvent>;
}

impl EventSource for RunHandle {
    fn recv(&mut self) -> impl std::future::Future<Output = Option<RunEvent>> + Send {
        RunHandle::recv(self)
    }
    fn try_recv(&mut self) -> Option<RunEvent> {
        RunHandle::try_recv(self)
    }
}

impl EventSource for ReplayReader {
    fn recv(&mut self) -> impl std::future::Future<Output = Option<RunEvent>> + Send {
        ReplayReader::recv(self)
    }
    fn try_recv(&mut self) -> Option<RunEvent> {
        ReplayReader::try_recv(self)
    }
}

/// How one protocol writes a run.
pub trait Wire: Send + 'static {
    /// What opens the stream (the role chunk, `response.created`).
    fn open(&mut self, out: &mut BytesMut);
    fn text(&mut self, out: &mut BytesMut, text: &str);
    fn reasoning(&mut self, out: &mut BytesMut, text: &str);
    /// Calls handed to the client, the end, a failure. Returns true when the stream is
    /// complete.
    fn other(&mut self, out: &mut BytesMut, ev: RunEvent) -> bool;
    /// Ends the stream with `error` (the run stopped without saying how).
    fn fail(&mut self, out: &mut BytesMut, error: &ApiError);
    /// Takes one event of a run answered in one body (not streamed); the response once the
    /// run has ended.
    fn collect(&mut self, ev: RunEvent) -> Option<Response>;
}

/// The run's events from `source`, collected by `wire` into one response.
pub async fn collect_response<S: EventSource, W: Wire>(mut source: S, mut wire: W) -> Response {
    while let Some(ev) = source.recv().await {
        if let Some(response) = wire.collect(ev) {
            return response;
        }
    }
    run_ended_early().into_response()
}

pub fn run_ended_early() -> ApiError {
    ApiError::internal("the run ended unexpectedly; details are in the server log")
}

/// The progress line shown for an event about server-side activity (tools, approvals).
pub fn progress_line(ev: &RunEvent) -> Option<String> {
    Some(match ev {
        RunEvent::ToolStarted {
            name, arguments, ..
        } => format!("running {name} {}", crate::text::preview(arguments, 160)),
        RunEvent::ToolFinished {
            name,
            status,
            duration,
            ..
        } => format!("{name} {} in {} ms", status.label(), duration.as_millis()),
        RunEvent::ApprovalPending(p) => format!(
            "waiting for approval: {} {} ({}). Approve in the console (the address with \
             #admin= in the serve log), or with POST /v1/approvals/{} \
             {{\"decision\":\"approve\"}} (or \"deny\") and the admin token in the \
             x-toolpilot-admin-token header; denied automatically after {} s",
            p.tool,
            crate::text::preview(&p.arguments, 160),
            p.reason,
            p.id,
            p.expires_at.saturating_sub(p.created_at)
        ),
        RunEvent::ApprovalResolved { id, tool, outcome } => {
            format!("approval {id} for {tool}: {outcome}")
        }
        _ => return None,
    })
}

/// State of one outbound event stream.
struct Outbound<S, W> {
    source: S,
    wire: W,
    keepalive: Duration,
    progress: Progress,
    /// Whether the text sent so far ends a line (progress lines in the text start on their
    /// own line).
    at_line_start: bool,
    /// The last text sent was a progress line (which already ends with a blank line).
    after_progress: bool,
    pending: Option<RunEvent>,
    started: bool,
    finished: bool,
}

impl<S: EventSource, W: Wire> Outbound<S, W> {
    /// Shows one line of server-side activity in the configured channel.
    fn progress(&mut self, out: &mut BytesMut, line: &str) {
        match self.progress {
            Progress::Comments => ChunkEncoder::comment(out, &format!("toolpilot: {line}")),
            Progress::Reasoning => self.wire.reasoning(out, &format!("toolpilot: {line}\n")),
            Progress::Text => {
                let sep = if self.at_line_start { "" } else { "\n\n" };
                self.wire
                    .text(out, &format!("{sep}> toolpilot: {line}\n\n"));
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
                    self.wire.text(out, t);
                }
                false
            }
            RunEvent::Reasoning(t) => {
                self.wire.reasoning(out, &t);
                false
            }
            ev @ (RunEvent::ToolStarted { .. }
            | RunEvent::ToolFinished { .. }
            | RunEvent::ApprovalPending(_)
            | RunEvent::ApprovalResolved { .. }) => {
                if let Some(line) = progress_line(&ev) {
                    self.progress(out, &line);
                }
                false
            }
            ev => self.wire.other(out, ev),
        }
    }

    async fn next_bytes(&mut self) -> Option<Bytes> {
        if self.finished {
            return None;
        }
        let mut out = BytesMut::new();
        if !self.started {
            self.started = true;
            self.wire.open(&mut out);
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
            self.wire.fail(&mut out, &run_ended_early());
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

/// The run's events from `source`, written by `wire` as an event stream.
pub async fn sse_response<S: EventSource, W: Wire>(
    mut source: S,
    wire: W,
    keepalive: Duration,
    progress: Progress,
) -> Response {
    // Wait briefly for the run's first event, so that an error before anything happened gets
    // a real HTTP status. A slow upstream (a local model reading a long prompt) must not keep
    // the client without response headers for long, though: after one keep-alive interval the
    // stream starts anyway and later errors arrive in the stream.
    let first = match tokio::time::timeout(keepalive, source.recv()).await {
        Ok(None) => return run_ended_early().into_response(),
        Ok(Some(RunEvent::Failed(e))) => return e.into_response(),
        Ok(Some(ev)) => Some(ev),
        Err(_) => None,
    };
    let outbound = Outbound {
        source,
        wire,
        keepalive,
        progress,
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
