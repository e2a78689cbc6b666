//! The agent loop: upstream round → tool calls → policy → tools → repeat, until the model
//! answers without calling a server-side tool.
//!
//! [`Engine::start`] creates one run and returns a [`RunHandle`] that yields [`RunEvent`]s in
//! order; the HTTP layer turns them into SSE or a JSON body, the `run` command into terminal
//! output. The run is not a task of its own: the handle drives it while its owner waits for
//! the next event, so a request is served on one task with no cross-thread hand-off (about a
//! third of the added latency of a stream, see BENCHMARKS.md). Dropping the handle cancels the
//! run: the upstream request is dropped (closing its connection) and running tools see the
//! cancellation token.
//!
//! Invariants: a retry only happens when nothing of the failed attempt reached the client;
//! every assistant tool call in the conversation is followed by exactly one tool message; a
//! tool problem never ends the run (it becomes a tool message); the run never sends more than
//! `agent.max_rounds + 1` upstream requests.
//!
//! Files: `engine.rs` (what runs share, `start`), `handle.rs` (`RunHandle`), `run.rs` (the
//! loop and its steps, tool execution), `round.rs` (one round: request, retries, streaming),
//! `offer.rs` (which tools run here, which are the client's), `approvers.rs` (how a run
//! resolves an `ask`), `adapters.rs` (the upstream behind the tools' `ApplyModel` and
//! `Embedder`), `repeats.rs` (identical calls: the pointer to an earlier result, the loop guard),
//! `context.rs`, `textmode.rs`, `pause.rs`, `handoff.rs`, `detach.rs`.

use std::time::Duration;

use crate::error::ApiError;
use crate::openai::{ToolCall, Usage};
use crate::tools::registry::Status;

mod adapters;
mod approvers;
pub mod context;
pub mod detach;
mod engine;
mod forward;
mod handle;
mod handoff;
mod offer;
pub mod pause;
mod repeats;
mod round;
mod run;
mod textmode;

pub use engine::Engine;
pub use handle::RunHandle;
pub use handoff::Handoffs;
pub use round::build_body;

/// What a run reports, in order. The last event is `Done` or `Failed`.
#[derive(Debug, Clone)]
pub enum RunEvent {
    /// Assistant text, as it arrives (non-streaming runs send each round's text whole).
    Content(String),
    /// Reasoning text (`reasoning_content`), kept apart from the answer.
    Reasoning(String),
    /// A server-side tool call is about to run.
    ToolStarted {
        id: String,
        name: String,
        arguments: String,
    },
    /// It finished.
    ToolFinished {
        id: String,
        name: String,
        status: Status,
        duration: Duration,
        result_bytes: usize,
        /// The start of the result of a tool that changes things (an edit's diff, a command's
        /// output), for the run's record; empty for read-only tools, whose results are file
        /// contents that are not kept.
        preview: String,
    },
    /// Calls of the client's own tools, handed back (`finish_reason: "tool_calls"`).
    ClientToolCalls(Vec<ToolCall>),
    /// A call waits for someone's approval.
    ApprovalPending(crate::approvals::PendingInfo),
    /// The wait ended: `outcome` is "approved", "denied" or "timed out".
    ApprovalResolved {
        id: String,
        tool: String,
        outcome: &'static str,
    },
    Done {
        finish_reason: String,
        usage: Usage,
        model: String,
        rounds: u32,
    },
    Failed(ApiError),
}

/// Per-run choices made by the caller.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub run_id: String,
    /// Forward text as it arrives (streaming clients); otherwise a round's text is sent once
    /// the round has completed, which also lets failed attempts be retried at any point.
    pub live: bool,
    /// Whether someone can answer an approval while the run waits (the HTTP server is up);
    /// when not, `approvals.mode = "wait"` refuses at once instead of waiting.
    pub approvals_reachable: bool,
    /// Whether the client shows what waits for approval (a stream whose progress channel it
    /// displays). With `approvals.mode = "auto"`, a run nobody can see pauses instead of
    /// waiting.
    pub approvals_visible: bool,
    /// Built-in tools to offer besides the client's own (`x-toolpilot-augment`); `None`:
    /// `server.augment`.
    pub augment: Option<Vec<String>>,
    /// A plain completion: the request goes upstream as it is, without toolpilot's tools,
    /// system message or loop (the model was named with `server.plain_prefix`).
    pub plain: bool,
}

impl RunOptions {
    /// The options of a run with no one to show anything to (`toolpilot run`, tests).
    pub fn new(run_id: String, live: bool) -> RunOptions {
        RunOptions {
            run_id,
            live,
            approvals_reachable: false,
            approvals_visible: false,
            augment: None,
            plain: false,
        }
    }
}
