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

/// The largest frame made by coalescing events.
const MAX_FRAME: usize = 32 * 1024;
/// Scheduler turns a frame waits, in a row, for another event that is on its way.
const COALESCE_TURNS: u32 = 8;

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
    /// A frame made before the response headers went out (sent first).
    ready: Option<Bytes>,
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

    /// Adds what is ready to `out`, for one write; returns true when the stream is complete.
    ///
    /// An upstream's events often arrive together (one read holds several SSE events), but
    /// its HTTP client hands them over one body chunk at a time from its own task. So when
    /// nothing is waiting, this gives the scheduler a turn (which lets that task hand over
    /// the next chunk) and looks again, up to `turns` turns in a row without an event (the
    /// run may read several chunks, the end of the upstream's stream among them, before its
    /// next event). Each turn costs microseconds; each write saved costs the kernel a loopback
    /// send and the client a wake-up. Nothing waits for data that has not arrived.
    async fn coalesce(&mut self, out: &mut BytesMut, turns: u32) -> bool {
        let mut idle_turns = 0;
        while out.len() < MAX_FRAME {
            match self.source.try_recv() {
                Some(ev) => {
                    idle_turns = 0;
                    if self.encode(ev, out) {
                        return true;
                    }
                }
                None if idle_turns < turns => {
                    idle_turns += 1;
                    tokio::task::yield_now().await;
                }
                None => break,
            }
        }
        false
    }

    async fn next_bytes(&mut self) -> Option<Bytes> {
        if let Some(ready) = self.ready.take() {
            return Some(ready);
        }
        if self.finished {
            return None;
        }
        let mut out = BytesMut::new();
        // The first frame leaves with what is ready at once: the first text is what a person
        // waits for. Later frames take turns to gather what is on its way.
        let turns = if self.started { COALESCE_TURNS } else { 0 };
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
        self.finished = self.coalesce(&mut out, turns).await;
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
    let mut outbound = Outbound {
        source,
        wire,
        keepalive,
        progress,
        at_line_start: true,
        after_progress: false,
        pending: first,
        ready: None,
        started: false,
        finished: false,
    };
    // With the first event in hand, make the first frame now: what is ready with it goes out
    // in the same write as the response headers (hyper writes the headers on their own when
    // the body is not ready the moment it asks).
    if outbound.pending.is_some() {
        outbound.ready = outbound.next_bytes().await;
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures_util::StreamExt;
    use tokio::sync::{Notify, mpsc};

    use super::*;

    /// Events from a channel a test fills, as a run's events reach a response.
    struct Channel(mpsc::Receiver<RunEvent>);

    impl EventSource for Channel {
        async fn recv(&mut self) -> Option<RunEvent> {
            self.0.recv().await
        }
        fn try_recv(&mut self) -> Option<RunEvent> {
            self.0.try_recv().ok()
        }
    }

    /// Writes events as short tags, so a test reads which frame carried what.
    struct Tags;

    impl Wire for Tags {
        fn open(&mut self, out: &mut BytesMut) {
            out.extend_from_slice(b"open;");
        }
        fn text(&mut self, out: &mut BytesMut, text: &str) {
            out.extend_from_slice(format!("{text};").as_bytes());
        }
        fn reasoning(&mut self, _out: &mut BytesMut, _text: &str) {}
        fn other(&mut self, out: &mut BytesMut, ev: RunEvent) -> bool {
            out.extend_from_slice(b"done;");
            matches!(ev, RunEvent::Done { .. })
        }
        fn fail(&mut self, out: &mut BytesMut, _error: &ApiError) {
            out.extend_from_slice(b"failed;");
        }
        fn collect(&mut self, _ev: RunEvent) -> Option<Response> {
            None
        }
    }

    fn done() -> RunEvent {
        RunEvent::Done {
            finish_reason: "stop".into(),
            usage: Default::default(),
            model: "m".into(),
            rounds: 1,
        }
    }

    fn text(t: &str) -> RunEvent {
        RunEvent::Content(t.into())
    }

    /// The event stream of a run whose events come from `rx`.
    async fn respond(rx: mpsc::Receiver<RunEvent>) -> Response {
        sse_response(
            Channel(rx),
            Tags,
            Duration::from_secs(30),
            Progress::Comments,
        )
        .await
    }

    async fn frames_of(response: Response, mut each: impl FnMut(usize)) -> Vec<String> {
        let mut body = response.into_body().into_data_stream();
        let mut frames = Vec::new();
        while let Some(frame) = body.next().await {
            frames.push(String::from_utf8(frame.unwrap().to_vec()).unwrap());
            each(frames.len());
        }
        frames
    }

    /// An upstream's burst reaches the response one event per scheduler turn (its HTTP
    /// client hands over one chunk at a time). The first frame leaves with what is ready at
    /// once; the rest of the burst goes out as one frame, not one write per event.
    #[tokio::test]
    async fn a_burst_goes_out_in_two_writes_the_first_text_without_waiting() {
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            for ev in [text("a"), text("b"), text("c"), text("d"), done()] {
                tx.send(ev).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let response = respond(rx).await;
        let frames = frames_of(response, |_| {}).await;
        assert_eq!(frames, ["open;a;", "b;c;d;done;"]);
    }

    /// Coalescing never waits for an event that has not arrived: with the run waiting on
    /// something else (a tool, an approval), what is there is written at once.
    #[tokio::test]
    async fn a_frame_never_waits_for_an_event_that_has_not_arrived() {
        let (tx, rx) = mpsc::channel(16);
        let go = Arc::new(Notify::new());
        let go2 = Arc::clone(&go);
        tokio::spawn(async move {
            tx.send(text("a")).await.unwrap();
            tokio::task::yield_now().await;
            tx.send(text("b")).await.unwrap();
            // The run now waits: nothing more comes until the test has seen "b".
            go2.notified().await;
            tx.send(text("c")).await.unwrap();
            tx.send(done()).await.unwrap();
        });
        let response = respond(rx).await;
        let frames = frames_of(response, |n| {
            if n == 2 {
                go.notify_one();
            }
        })
        .await;
        assert_eq!(frames, ["open;a;", "b;", "c;done;"]);
    }
}
