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

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::Instrument;

use crate::approvals::{Approvals, Verdict};
use crate::checkpoint::Store;
use crate::checkpoint::tree::Shadow;
use crate::config::ApprovalMode;
use crate::config::Config;
use crate::config::ToolMode;
use crate::error::ApiError;
use crate::openai::{
    ChatRequest, ToolCall, Usage, assistant_message, tool_message, tool_spec_name,
};
use crate::policy::Policy;
use crate::policy::Target;
use crate::runs::Runs;
use crate::terminal::Terminal;
use crate::tools::edit::ApplyModel;
use crate::tools::registry::{
    Approval, Approver, Ask, Grant, NoApprover, Outcome, Status, person_only_refusal,
};
use crate::tools::{Registry, ToolEnv, spec_json_for};
use crate::upstream::accumulate::{Accumulator, Piece, Round};
use crate::upstream::route::{Route, Upstreams};
use crate::upstream::{Hints, RequestBody, UpstreamError, demo};
use crate::workspace::Workspace;

pub mod context;
pub mod detach;
mod handoff;
pub mod pause;
mod textmode;
pub use handoff::Handoffs;
use pause::{PauseStore, Paused, Reply};

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
}

/// A running conversation, driven by whoever waits for its events. Dropping it cancels the
/// run.
pub struct RunHandle {
    events: mpsc::Receiver<RunEvent>,
    /// The run itself; `None` once it has finished (its remaining events are still queued).
    driver: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    span: tracing::Span,
    engine: Arc<Engine>,
    started: Instant,
    pub run_id: String,
    _cancel: DropGuard,
}

impl RunHandle {
    /// The next event, or `None` after the last one. Makes the run progress while waiting.
    pub async fn recv(&mut self) -> Option<RunEvent> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// An event that is ready without waiting: the run is polled once, so whatever it can
    /// produce right now (say, the rest of an upstream read) is collected.
    pub fn try_recv(&mut self) -> Option<RunEvent> {
        let waker = std::task::Waker::noop();
        match self.poll_recv(&mut Context::from_waker(waker)) {
            Poll::Ready(ev) => ev,
            // The run registered a no-op waker; the owner's next `recv` polls it again with
            // a real one before waiting.
            Poll::Pending => None,
        }
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<RunEvent>> {
        loop {
            if let Poll::Ready(ev) = self.events.poll_recv(cx) {
                return Poll::Ready(ev);
            }
            let Some(driver) = self.driver.as_mut() else {
                // Finished: the sender is gone, so the channel has answered `None` above.
                return Poll::Pending;
            };
            match driver.as_mut().poll(cx) {
                // Its last events are queued; read them on the next turn.
                Poll::Ready(()) => self.driver = None,
                Poll::Pending => {
                    // Polling may have queued events (the channel does not wake its own
                    // receiver's current poll), so look once more before waiting.
                    return match self.events.poll_recv(cx) {
                        Poll::Ready(ev) => Poll::Ready(ev),
                        Poll::Pending => Poll::Pending,
                    };
                }
            }
        }
    }
}

impl Drop for RunHandle {
    fn drop(&mut self) {
        if self.driver.take().is_some() {
            self.span
                .in_scope(|| tracing::info!("run cancelled: the client went away"));
            self.engine.runs.end(
                &self.run_id,
                "cancelled",
                self.started.elapsed(),
                json!({"reason": "the client went away"}),
            );
        }
    }
}

/// Everything a run needs, shared by all runs of a server.
pub struct Engine {
    pub config: Config,
    /// The upstreams and how requested models are routed to them.
    pub upstreams: Upstreams,
    pub registry: Registry,
    pub workspace: Arc<Workspace>,
    /// Where each run's changes are recorded, for undo.
    pub checkpoints: Store,
    /// Commands: sandbox, jobs, environment.
    pub terminal: Arc<Terminal>,
    /// Whole-tree snapshots of the workspace around commands.
    pub shadow: Shadow,
    /// Calls waiting for approval, and the rules "always allow" saved.
    pub approvals: Arc<Approvals>,
    /// Conversations handed to clients, to restore the rounds they did not see.
    pub handoffs: Handoffs,
    /// What every run did (events, file, metrics).
    pub runs: Runs,
    /// Runs paused for an in-band approval.
    pub pauses: PauseStore,
    /// Runs that go on without their client (`x-toolpilot-detach`).
    pub detached: detach::Detached,
    /// What is offered to the model when the client sends no `tools`, for the rules and
    /// skills snapshot it was built from (by fingerprint): rebuilt only when they change.
    default_offer: std::sync::Mutex<(u64, Offer)>,
    /// The system message, rules and skills.
    pub prompt: Arc<crate::prompt::Prompt>,
    /// The codebase index (built on first use).
    pub code: Arc<crate::code::index::CodeIndex>,
    tools_config: Arc<crate::config::ToolsConfig>,
    /// Pages and search for the web tools.
    pub web: Arc<crate::web::Web>,
    /// Redacts secrets from every tool result.
    pub redactor: Arc<crate::redact::Redactor>,
}

impl Engine {
    pub fn new(config: Config) -> Result<Engine, String> {
        let workspace =
            Workspace::open(&config.workspace, &config.sensitive_files).map_err(|e| {
                format!(
                    "cannot open the workspace {}: {e}",
                    config.workspace.display()
                )
            })?;
        let upstreams = Upstreams::from_config(&config)?;
        let checkpoints = Store::new(&config.state_dir, workspace.root());
        let approvals = Arc::new(Approvals::new(checkpoints.dir()));
        // The configured rules alone first: a bad one is reported with its key, as written.
        let mut policy = Policy::new(&config.policy)?;
        let mut policy_config = config.policy.clone();
        policy_config.approved = approvals.saved_rules()?;
        if !policy_config.approved.is_empty() {
            policy = Policy::new(&policy_config).map_err(|e| {
                format!(
                    "{e} (policy.approved rules come from {}; remove the bad line there)",
                    approvals.rules_file().display()
                )
            })?;
        }
        let terminal = Arc::new(Terminal::new(
            config.terminal.clone(),
            config.secret_var_names(),
            checkpoints.dir().to_path_buf(),
            policy.protected_paths().clone(),
        ));
        let shadow = Shadow::new(checkpoints.dir(), workspace.root());
        let web = Arc::new(crate::web::Web::new(&config.web)?);
        let redactor = Arc::new(crate::redact::Redactor::new(&config.secrets));
        let mut registry = Registry::new(policy, policy_config);
        if let Some(why) = web.search_unavailable() {
            if config.web.search.is_some() {
                tracing::warn!("{why}");
            }
            registry.set_unavailable("search_web", why.to_string());
        }
        let workspace = Arc::new(workspace);
        let prompt = Arc::new(crate::prompt::Prompt::new(
            Arc::clone(&workspace),
            config.prompt.clone(),
        ));
        let code = Arc::new(crate::code::index::CodeIndex::new(
            checkpoints.dir().join("index"),
            Arc::clone(&workspace),
            config.codebase.clone(),
        ));
        let snapshot = prompt.snapshot();
        let default_offer = std::sync::Mutex::new((
            snapshot.fingerprint,
            Offer::default(&registry, &config, &snapshot),
        ));
        let pauses = PauseStore::new(checkpoints.dir(), config.approvals.pause_expiry);
        pauses.sweep();
        Ok(Engine {
            detached: detach::Detached::default(),
            pauses,
            runs: Runs::new(checkpoints.dir(), true),
            handoffs: Handoffs::new(
                config.approvals.handoff_max_age,
                config.approvals.handoff_max_bytes,
            ),
            approvals,
            default_offer,
            prompt,
            code,
            terminal,
            shadow,
            checkpoints,
            tools_config: Arc::new(config.tools.clone()),
            web,
            redactor,
            registry,
            workspace,
            upstreams,
            config,
        })
    }

    /// Starts a run in the background.
    pub fn start(self: &Arc<Self>, req: ChatRequest, opts: RunOptions) -> RunHandle {
        let (tx, rx) = mpsc::channel(256);
        let cancel = CancellationToken::new();
        let engine = Arc::clone(self);
        let token = cancel.clone();
        let run_id = opts.run_id.clone();
        let span = tracing::info_span!("run", run_id = %run_id);
        let started = Instant::now();
        self.runs.begin(
            &run_id,
            &self.shown_model(&req),
            &last_user_text(&req.messages),
            opts.live,
            req.messages.len(),
        );
        let driver = async move {
            let run = Run {
                engine: &engine,
                opts: &opts,
                tx: &tx,
                cancel: &token,
                started,
            };
            match run.run(req).await {
                Ok(()) => {}
                Err(RunError::ClientGone) => {
                    engine.runs.end(
                        &opts.run_id,
                        "cancelled",
                        started.elapsed(),
                        json!({"reason": "the client went away"}),
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e.message(), "run failed");
                    let api = e.into_api();
                    engine.runs.end(
                        &opts.run_id,
                        "failed",
                        started.elapsed(),
                        json!({"message": api.message}),
                    );
                    let _ = tx.send(RunEvent::Failed(api)).await;
                }
            }
        }
        .instrument(span.clone());
        RunHandle {
            events: rx,
            driver: Some(Box::pin(driver)),
            span,
            engine: Arc::clone(self),
            started,
            run_id,
            _cancel: cancel.drop_guard(),
        }
    }

    /// The environment tools of one run get (also used to call tools directly, e.g. from
    /// benchmarks). `prompt` is recorded with the run's checkpoint.
    pub fn tool_env(&self, run_id: &str, prompt: &str, cancel: CancellationToken) -> ToolEnv {
        ToolEnv {
            workspace: Arc::clone(&self.workspace),
            config: Arc::clone(&self.tools_config),
            current_file: None,
            cancel,
            checkpoint: self.checkpoints.run(run_id, prompt),
            seen: Arc::default(),
            apply: None,
            terminal: Arc::clone(&self.terminal),
            shadow: self.shadow.clone(),
            run_id: run_id.to_string(),
            web: Arc::clone(&self.web),
            redactor: Arc::clone(&self.redactor),
            hops: self
                .registry
                .hop_gate(Arc::clone(&self.workspace), self.config.agent.approve_asks),
            prompt: Arc::clone(&self.prompt),
            code: Arc::clone(&self.code),
            embedder: None,
        }
    }

    /// The default offer for a rules and skills snapshot (cached while they do not change).
    fn default_offer(&self, snapshot: &crate::prompt::Snapshot) -> Offer {
        let mut cached = self.default_offer.lock().unwrap_or_else(|e| e.into_inner());
        if cached.0 != snapshot.fingerprint {
            *cached = (
                snapshot.fingerprint,
                Offer::default(&self.registry, &self.config, snapshot),
            );
        }
        cached.1.clone()
    }

    /// The model name reported to the client: what it asked for, else what is used.
    pub fn shown_model(&self, req: &ChatRequest) -> String {
        req.model
            .clone()
            .or_else(|| self.config.agent.model.clone())
            .unwrap_or_else(|| {
                if self.upstreams.is_demo() {
                    demo::MODEL.to_string()
                } else {
                    "unknown".to_string()
                }
            })
    }

    /// The model list for `GET /v1/models`: what can be routed.
    pub async fn models(&self) -> Result<Value, ApiError> {
        match self.upstreams.models().await {
            Ok(v) => Ok(v),
            Err(e) => match &self.config.agent.model {
                // The upstream has no list (or failed): show the configured model.
                Some(m) => {
                    tracing::warn!(error = %e, "upstream GET /models failed; listing the configured model");
                    Ok(serde_json::json!({"object": "list", "data": [
                        {"id": m, "object": "model", "created": 0, "owned_by": "upstream"}]}))
                }
                None => Err(ApiError::from(&e)),
            },
        }
    }
}

#[derive(Debug)]
enum RunError {
    /// The event receiver is gone: nobody is listening, stop quietly.
    ClientGone,
    Api(ApiError),
}

impl RunError {
    fn message(&self) -> String {
        match self {
            RunError::ClientGone => "client gone".into(),
            RunError::Api(e) => e.to_string(),
        }
    }
    fn into_api(self) -> ApiError {
        match self {
            RunError::ClientGone => ApiError::internal("client gone"),
            RunError::Api(e) => e,
        }
    }
}

/// Which tool names the model is offered, and who executes them.
#[derive(Clone)]
struct Offer {
    /// The `tools` array sent upstream, serialised once (per engine for the default set, per
    /// run otherwise) and shared by every request body (`None`: no tools).
    specs: Option<Bytes>,
    /// Executed here.
    server: Arc<HashSet<String>>,
    /// Passed back to the client.
    client: Arc<HashSet<String>>,
    /// Both (what a tool call written as text may name).
    names: Arc<HashSet<String>>,
}

impl Offer {
    fn finish(server: HashSet<String>, client: HashSet<String>, specs: Option<Bytes>) -> Offer {
        let names = server.iter().chain(client.iter()).cloned().collect();
        Offer {
            specs,
            server: Arc::new(server),
            client: Arc::new(client),
            names: Arc::new(names),
        }
    }

    fn new(engine: &Engine, req: &ChatRequest, snapshot: &crate::prompt::Snapshot) -> Offer {
        let reg = &engine.registry;
        let Some(tools) = &req.tools else {
            // No tools in the request: toolpilot's own set, prepared once per engine (and
            // again only when the rules or skills its descriptions list change).
            return engine.default_offer(snapshot);
        };
        let mut specs: Vec<&Value> = Vec::new();
        let (mut server, mut client) = (HashSet::new(), HashSet::new());
        for spec in tools {
            let Some(name) = tool_spec_name(spec) else {
                specs.push(spec);
                continue;
            };
            // The IDE knows its open file; without one in the request, let it answer.
            let client_knows_better =
                name == "read_currently_open_file" && req.current_file.is_none();
            // A built-in that cannot run here (search_web without a provider) stays the
            // client's, which may well run it.
            let unavailable_here = reg.unavailable(name).is_some();
            if reg.get(name).is_some() && !client_knows_better && !unavailable_here {
                if reg.is_enabled(name) {
                    server.insert(name.to_string());
                    specs.push(spec);
                } else if reg.policy().level_source(name) == "default" {
                    // Disabled only by Continue's default (create_rule_block, request_rule):
                    // the client declaring it means its user enabled it there, so it stays
                    // the client's tool.
                    client.insert(name.to_string());
                    specs.push(spec);
                }
            } else {
                client.insert(name.to_string());
                specs.push(spec);
            }
        }
        Offer::finish(server, client, raw_specs(&specs))
    }

    /// toolpilot's own set: every enabled built-in, or `agent.default_tools`.
    fn default(reg: &Registry, config: &Config, snapshot: &crate::prompt::Snapshot) -> Offer {
        let wanted = config.agent.default_tools.as_ref();
        let mut server = HashSet::new();
        let mut specs = Vec::new();
        for tool in reg.tools() {
            let name = tool.name();
            if wanted.is_some_and(|w| !w.iter().any(|n| n == name)) {
                continue;
            }
            if reg.is_enabled(name) {
                server.insert(name.to_string());
                specs.push(spec_json_for(tool, snapshot));
            }
        }
        Offer::finish(
            server,
            HashSet::new(),
            raw_specs(&specs.iter().collect::<Vec<_>>()),
        )
    }
}

/// The `tools` array, serialised once.
fn raw_specs(specs: &[&Value]) -> Option<Bytes> {
    if specs.is_empty() {
        return None;
    }
    serde_json::to_vec(specs).ok().map(Bytes::from)
}

struct Run<'a> {
    engine: &'a Engine,
    opts: &'a RunOptions,
    tx: &'a mpsc::Sender<RunEvent>,
    cancel: &'a CancellationToken,
    started: Instant,
}

/// The end of the text sent so far, to separate the text of consecutive rounds.
#[derive(Default)]
struct TextTail {
    sent_any: bool,
    newlines_at_end: usize,
}

impl TextTail {
    fn separator(&self) -> &'static str {
        if !self.sent_any {
            ""
        } else {
            match self.newlines_at_end {
                0 => "\n\n",
                1 => "\n",
                _ => "",
            }
        }
    }
    fn note(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.sent_any = true;
        let trailing = text.len() - text.trim_end_matches('\n').len();
        if trailing == text.len() {
            self.newlines_at_end += trailing;
        } else {
            self.newlines_at_end = trailing;
        }
    }
}

impl Run<'_> {
    async fn send(&self, ev: RunEvent) -> Result<(), RunError> {
        self.record(&ev);
        self.tx.send(ev).await.map_err(|_| RunError::ClientGone)
    }

    /// Records what the client is told, as run events.
    fn record(&self, ev: &RunEvent) {
        let runs = &self.engine.runs;
        let id = &self.opts.run_id;
        match ev {
            RunEvent::ToolStarted {
                id: call,
                name,
                arguments,
            } => runs.event(
                id,
                "tool_started",
                json!({"call": call, "tool": name,
                       "arguments": crate::text::preview(arguments, 500)}),
            ),
            RunEvent::ToolFinished {
                id: call,
                name,
                status,
                duration,
                result_bytes,
                preview,
            } => runs.tool(
                id,
                name,
                status.label(),
                *duration,
                json!({"call": call, "tool": name, "status": status.label(),
                       "ms": duration.as_millis() as u64, "result_bytes": result_bytes,
                       "result": preview}),
            ),
            RunEvent::ClientToolCalls(calls) => runs.event(
                id,
                "handed_to_client",
                json!({"calls": calls.iter().map(|c| json!({"call": c.id, "tool": c.name})).collect::<Vec<_>>()}),
            ),
            RunEvent::Done {
                finish_reason,
                usage,
                rounds,
                ..
            } => runs.end(
                id,
                "done",
                self.started.elapsed(),
                json!({"finish_reason": finish_reason, "rounds": rounds,
                       "usage": usage, "ms": self.started.elapsed().as_millis() as u64}),
            ),
            RunEvent::Content(_)
            | RunEvent::Reasoning(_)
            | RunEvent::ApprovalPending(_)
            | RunEvent::ApprovalResolved { .. }
            | RunEvent::Failed(_) => {}
        }
    }

    async fn run(&self, req: ChatRequest) -> Result<(), RunError> {
        let engine = self.engine;
        let requested = engine
            .config
            .agent
            .model
            .clone()
            .or_else(|| req.model.clone());
        let mut route = engine
            .upstreams
            .route(requested.as_deref())
            .map_err(|e| RunError::Api(e.into()))?;
        let shown_model = engine.shown_model(&req);
        if engine.upstreams.is_demo() {
            tracing::warn!("no upstream configured: the built-in demo model answers this run");
        }
        let snapshot = engine.prompt.snapshot();
        let offer = Offer::new(engine, &req, &snapshot);
        let apply: Option<Arc<dyn ApplyModel>> =
            (engine.config.tools.llm_apply && !engine.upstreams.is_demo()).then(|| {
                Arc::new(UpstreamApply {
                    route: route.clone(),
                }) as Arc<dyn ApplyModel>
            });
        let mut env = engine.tool_env(
            &self.opts.run_id,
            &last_user_text(&req.messages),
            self.cancel.clone(),
        );
        env.current_file = req.current_file.clone();
        env.apply = apply;
        // The embeddings model is routed like any model name (it may live on another upstream).
        if let (Some(m), false) = (
            &engine.config.codebase.embeddings_model,
            engine.upstreams.is_demo(),
        ) {
            match engine.upstreams.route(Some(m)) {
                Ok(route) => env.embedder = Some(Arc::new(UpstreamEmbed { route })),
                Err(e) => tracing::warn!(
                    model = %m,
                    error = %e,
                    "codebase.embeddings_model is not routable; results are not re-ranked"
                ),
            }
        }
        // toolpilot's system message, recomputed per round (rules that start to apply join it).
        let mut run_prompt = crate::prompt::RunPrompt::new(
            snapshot,
            &engine.prompt.config,
            offer.server.contains("request_rule"),
        );
        let max_rounds = engine.config.agent.max_rounds;
        // A client sending the results of tool calls handed to it: put back the rounds it
        // did not see.
        let mut messages = engine
            .handoffs
            .restore(&req.messages)
            .unwrap_or_else(|| req.messages.clone());
        let mut usage = Usage::default();
        let mut tail = TextTail::default();
        let mut seen: HashMap<(String, String), String> = HashMap::new();
        let mut round_no = 0u32;
        let origin = route.clone();
        let mut tried = vec![route.endpoint.name.clone()];
        let mut ctx = ContextState::new(&req);
        // The user answering a paused run: continue it where it stopped.
        let mut resume: Option<(Paused, Reply)> = None;
        match engine.pauses.take_for(&req.messages) {
            None => {}
            Some(Ok((paused, reply))) => {
                tracing::info!(pause = %paused.id, reply = ?reply, "resuming a paused run");
                messages = paused.messages.clone();
                usage = paused.usage;
                round_no = paused.round_no;
                resume = Some((paused, reply));
            }
            Some(Err(why)) => {
                self.send(RunEvent::Content(format!(
                    "toolpilot: {why}; nothing was run. Send your request again to continue."
                )))
                .await?;
                return self
                    .send(RunEvent::Done {
                        finish_reason: "stop".into(),
                        usage,
                        model: shown_model,
                        rounds: 0,
                    })
                    .await;
            }
        }
        loop {
            if let Some((paused, reply)) = resume.take() {
                self.resume(&paused, reply, &offer, &env, &mut seen, &mut messages)
                    .await?;
            }
            round_no += 1;
            let tools_allowed = round_no <= max_rounds;
            let names = if tools_allowed {
                Arc::clone(&offer.names)
            } else {
                Arc::default()
            };
            let round_started = Instant::now();
            let mut overflowed = false;
            let round = loop {
                let prepared = self
                    .prepare_round(
                        &req,
                        &route,
                        &mut messages,
                        offer.specs.as_ref().filter(|_| tools_allowed),
                        &mut ctx,
                        &mut run_prompt,
                    )
                    .await;
                let fallback_ready = !engine.upstreams.fallbacks(&route).is_empty();
                match self
                    .round_with_retries(&prepared, &names, &mut tail, &route, fallback_ready)
                    .await
                {
                    Ok(round) => {
                        if let Some(u) = &round.usage {
                            ctx.est.calibrate(prepared.estimate, u.prompt_tokens);
                        }
                        break round;
                    }
                    Err(RoundFailure::Overflow(e)) if !overflowed => {
                        overflowed = true;
                        let msg = e.to_string();
                        let learned = crate::upstream::overflow::window_in_message(&msg);
                        if let Some(w) = learned {
                            route.endpoint.learn_window(&route.model, w);
                        }
                        ctx.est.distrust();
                        ctx.limit = Some(match learned {
                            Some(w) => w.saturating_sub(ctx.reserve(w)),
                            None => prepared.estimate * 6 / 10,
                        });
                        tracing::warn!(error = %msg, limit = ?ctx.limit, "the request did not fit the model's context; pruning and retrying once");
                        engine.runs.event(
                            &self.opts.run_id,
                            "context_overflow",
                            json!({"message": msg, "estimate": prepared.estimate, "limit": ctx.limit}),
                        );
                    }
                    Err(RoundFailure::Overflow(e)) => {
                        return Err(RunError::Api(ApiError::from(&e)));
                    }
                    Err(RoundFailure::Unavailable(e)) => {
                        let next = engine
                            .upstreams
                            .fallbacks(&origin)
                            .into_iter()
                            .chain(engine.upstreams.fallbacks(&route))
                            .find(|r| !tried.contains(&r.endpoint.name));
                        let Some(next) = next else {
                            return Err(RunError::Api(ApiError::from(&e)));
                        };
                        tracing::warn!(error = %e, from = %route.endpoint.name, to = %next.endpoint.name, "upstream unavailable; falling back");
                        engine.runs.event(
                            &self.opts.run_id,
                            "fallback",
                            json!({"from": route.endpoint.name, "to": next.endpoint.name,
                                   "model": next.model, "error": e.to_string()}),
                        );
                        tried.push(next.endpoint.name.clone());
                        route = next;
                    }
                    Err(RoundFailure::Fatal(e)) => return Err(e),
                }
            };
            engine.runs.round(
                &self.opts.run_id,
                json!({
                    "n": round_no,
                    "ms": round_started.elapsed().as_millis() as u64,
                    "usage": round.usage,
                    "finish_reason": round.finish_reason,
                    "content_chars": round.content.chars().count(),
                    "tool_calls": round.tool_calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
                }),
                round_started.elapsed(),
            );
            if let Some(u) = &round.usage {
                usage.add(u);
            }
            if !self.opts.live {
                if !round.reasoning.is_empty() {
                    self.send(RunEvent::Reasoning(round.reasoning.clone()))
                        .await?;
                }
                if !round.content.is_empty() {
                    let sep = tail.separator();
                    let text = format!("{sep}{}", round.content);
                    tail.note(&text);
                    self.send(RunEvent::Content(text)).await?;
                }
            }
            if round.tool_calls.is_empty() || !tools_allowed {
                if !round.tool_calls.is_empty() {
                    tracing::warn!(
                        "the model called tools after the last allowed round; ignoring them"
                    );
                }
                let finish_reason = match round.finish_reason.as_deref() {
                    Some("length") => "length",
                    Some("content_filter") => "content_filter",
                    _ => "stop",
                }
                .to_string();
                return self
                    .send(RunEvent::Done {
                        finish_reason,
                        usage,
                        model: shown_model,
                        rounds: round_no,
                    })
                    .await;
            }

            messages.push(assistant_message(&round.content, &round.tool_calls));
            let mut client_calls = Vec::new();
            let mut server_calls = Vec::new();
            let yes = engine.config.agent.approve_asks;
            for call in &round.tool_calls {
                // A call that needs approval, of a tool the client declared itself (Continue's
                // edit tools): the client asks its user and runs it. Under --yes only the calls
                // that --yes cannot approve go to the client's user.
                let hand_off = offer.server.contains(&call.name)
                    && req.tools.is_some()
                    && engine.config.approvals.handoff
                    && matches!(
                        engine.registry.preflight(call, &env),
                        Some(crate::policy::Decision::Ask { person_only, .. }) if person_only || !yes
                    );
                if hand_off {
                    tracing::info!(tool = %call.name, "needs approval; handed to the client that declared it");
                    client_calls.push(call.clone());
                } else if offer.server.contains(&call.name) {
                    server_calls.push(call.clone());
                } else if offer.client.contains(&call.name) {
                    client_calls.push(call.clone());
                } else {
                    server_calls.push(call.clone());
                }
            }
            // In-band approval: stop before this round's calls and ask the user.
            if client_calls.is_empty()
                && engine.config.approvals.mode == ApprovalMode::Pause
                && self.opts.approvals_reachable
            {
                let asks: Vec<pause::Ask> = server_calls
                    .iter()
                    .filter(|c| offer.server.contains(&c.name))
                    .filter_map(|c| {
                        let (reason, person_only, rules) = engine.registry.ask_of(c, &env)?;
                        if yes && !person_only {
                            return None; // --yes approves it when the round runs
                        }
                        Some(pause::Ask {
                            call_id: c.id.clone(),
                            tool: c.name.clone(),
                            arguments: c.arguments.clone(),
                            reason,
                            rules,
                        })
                    })
                    .collect();
                if !asks.is_empty() {
                    let saved = engine.pauses.save(Paused {
                        id: String::new(),
                        run_id: self.opts.run_id.clone(),
                        created_at: 0,
                        expires_at: 0,
                        // The client's messages: the request that answers sends them again.
                        conversation: pause::conversation_id(&req.messages),
                        question: String::new(),
                        messages: messages.clone(),
                        calls: server_calls.clone(),
                        asks,
                        usage,
                        round_no,
                    });
                    let (saved, question) = saved.map_err(|e| {
                        RunError::Api(ApiError::internal(format!(
                            "a call needs approval, but the run could not be paused (saving its \
                             state failed: {e})"
                        )))
                    })?;
                    engine.runs.event(
                        &self.opts.run_id,
                        "paused",
                        json!({"pause": saved.id, "calls": saved.asks.iter().map(|a| &a.tool).collect::<Vec<_>>()}),
                    );
                    let text = format!("{}{question}", tail.separator());
                    tail.note(&text);
                    self.send(RunEvent::Content(text)).await?;
                    return self
                        .send(RunEvent::Done {
                            finish_reason: "stop".into(),
                            usage,
                            model: shown_model,
                            rounds: round_no,
                        })
                        .await;
                }
            }
            let results = self
                .run_tools(&server_calls, &offer, &env, &mut seen)
                .await?;
            let last_round_with_tools = round_no == max_rounds;
            let n = results.len();
            for (i, (call, mut content)) in server_calls.iter().zip(results).enumerate() {
                if last_round_with_tools && i + 1 == n && client_calls.is_empty() {
                    content.push_str(&format!(
                        "\n\n[toolpilot: this was the last tool round allowed for this request \
                         (agent.max_rounds = {max_rounds}). Answer now with what you have; \
                         further tool calls will not run.]"
                    ));
                }
                messages.push(tool_message(&call.id, content));
            }
            if !client_calls.is_empty() {
                let ids: Vec<String> = client_calls.iter().map(|c| c.id.clone()).collect();
                engine.handoffs.park(req.messages.len(), &messages, &ids);
                self.send(RunEvent::ClientToolCalls(client_calls)).await?;
                return self
                    .send(RunEvent::Done {
                        finish_reason: "tool_calls".into(),
                        usage,
                        model: shown_model,
                        rounds: round_no,
                    })
                    .await;
            }
        }
    }

    /// Runs the calls of a paused round as the user answered, and appends their results.
    async fn resume(
        &self,
        paused: &Paused,
        reply: Reply,
        offer: &Offer,
        env: &ToolEnv,
        seen: &mut HashMap<(String, String), String>,
        messages: &mut Vec<Value>,
    ) -> Result<(), RunError> {
        let engine = self.engine;
        if reply == (Reply::Approve { always: true }) {
            let rules: Vec<String> = paused.asks.iter().flat_map(|a| a.rules.clone()).collect();
            let saved = engine
                .approvals
                .save_rules(&rules)
                .and_then(|()| engine.registry.allow(&rules));
            match saved {
                Ok(()) => tracing::info!(?rules, "allow rules added by an in-band approval"),
                Err(e) => tracing::warn!(error = %e, "could not save the always-allow rules"),
            }
        }
        engine.runs.event(
            &self.opts.run_id,
            "resumed",
            json!({"pause": paused.id, "from_run": paused.run_id, "reply": format!("{reply:?}")}),
        );
        let preset = Preset(reply.clone());
        let results = self
            .run_tools_with(&paused.calls, offer, env, seen, &preset)
            .await?;
        for (call, content) in paused.calls.iter().zip(results) {
            messages.push(tool_message(&call.id, content));
        }
        if let Reply::Other(text) = reply {
            messages.push(json!({"role": "user", "content": text}));
        }
        Ok(())
    }

    /// The request for one round: the conversation fitted to the model's context window,
    /// in the upstream's tool mode, with the context size it needs.
    async fn prepare_round(
        &self,
        req: &ChatRequest,
        route: &Route,
        messages: &mut Vec<Value>,
        specs: Option<&Bytes>,
        ctx: &mut ContextState,
        run_prompt: &mut crate::prompt::RunPrompt,
    ) -> Prepared {
        let text_mode = route.endpoint.tool_mode() == ToolMode::Text;
        let tools_prompt = match (text_mode, specs) {
            (true, Some(bytes)) => {
                let list: Vec<Value> = serde_json::from_slice(bytes).unwrap_or_default();
                Some(textmode::tools_prompt(&list))
            }
            _ => None,
        };
        let tools_bytes = match (&tools_prompt, specs) {
            (Some(p), _) => p.len(),
            (None, Some(b)) => b.len(),
            (None, None) => 0,
        };
        // toolpilot's system message (rules, workspace) goes into this request only, never
        // into the conversation the run keeps.
        let block = run_prompt.block(&self.engine.workspace, messages);
        let block_bytes = block.map_or(0, str::len);
        let window = route.endpoint.context_window(&route.model).await;
        let limit = match (window, ctx.limit) {
            (Some(w), Some(l)) => Some(w.saturating_sub(ctx.reserve(w)).min(l)),
            (Some(w), None) => Some(w.saturating_sub(ctx.reserve(w))),
            (None, l) => l,
        };
        if let Some(limit) = limit {
            let extra = ctx.est.tokens(tools_bytes + block_bytes);
            if let Some(p) = context::fit(messages, limit, extra, &ctx.est) {
                tracing::warn!(
                    results = p.results,
                    messages = p.messages,
                    cut = p.cut,
                    before = p.before,
                    after = p.after,
                    limit,
                    "conversation pruned to fit the context window"
                );
                self.engine.runs.event(
                    &self.opts.run_id,
                    "context_pruned",
                    json!({"results_removed": p.results, "messages_removed": p.messages,
                           "results_cut": p.cut, "tokens_before": p.before,
                           "tokens_after": p.after, "limit": limit}),
                );
            }
        }
        let spliced = crate::prompt::splice_system(messages, block);
        let wire: std::borrow::Cow<[Value]> = if text_mode {
            std::borrow::Cow::Owned(textmode::to_text(
                messages,
                tools_prompt.as_deref().unwrap_or(""),
            ))
        } else {
            std::borrow::Cow::Borrowed(messages.as_slice())
        };
        let estimate = ctx.est.request(&wire, tools_bytes);
        // Ollama loads the model with the context size asked for: ask for what the request
        // needs, in steps (a new size reloads the model), never less than before in this run.
        if let Some(w) = window {
            let needed = (estimate + ctx.reserve(w))
                .max(4096)
                .next_power_of_two()
                .min(w);
            ctx.num_ctx = Some(ctx.num_ctx.unwrap_or(0).max(needed));
        }
        let request_usage = route.endpoint.cfg.as_ref().is_none_or(|u| u.request_usage);
        let body = build_body(
            req,
            &route.model,
            &wire,
            if text_mode { None } else { specs },
            request_usage,
        );
        drop(wire);
        crate::prompt::unsplice_system(messages, spliced);
        Prepared {
            body,
            estimate,
            hints: Hints {
                num_ctx: ctx.num_ctx,
            },
        }
    }

    /// One round, retried with backoff on retryable failures as long as nothing of the
    /// failed attempt was forwarded to the client. An upstream that cannot be reached (or
    /// answers 5xx) is `Unavailable` once its retries are spent, at once for connection
    /// errors when a fallback is configured; a request the model's context cannot hold is
    /// `Overflow`. Both are for the caller, which can change the request or the upstream.
    async fn round_with_retries(
        &self,
        prepared: &Prepared,
        tool_names: &Arc<HashSet<String>>,
        tail: &mut TextTail,
        route: &Route,
        fallback_ready: bool,
    ) -> Result<Round, RoundFailure> {
        let retry = route
            .endpoint
            .cfg
            .as_ref()
            .map(|u| (u.max_retries, u.retry_base, u.retry_max_wait));
        let (max_retries, base, cap) = retry.unwrap_or((0, Duration::ZERO, Duration::ZERO));
        let mut attempt = 0u32;
        loop {
            let mut forwarded = false;
            match self
                .one_round(prepared, tool_names, tail, &mut forwarded, route)
                .await
            {
                Ok(round) => return Ok(round),
                Err(RoundError::ClientGone) => {
                    return Err(RoundFailure::Fatal(RunError::ClientGone));
                }
                Err(RoundError::Upstream(e)) => {
                    self.engine
                        .runs
                        .upstream_error(&self.opts.run_id, &e.kind(), &e.to_string());
                    if !forwarded && e.is_context_overflow() {
                        return Err(RoundFailure::Overflow(e));
                    }
                    let unavailable = !forwarded && e.is_unavailable();
                    let skip_retries = fallback_ready && matches!(e, UpstreamError::Connect { .. });
                    if e.retryable() && !forwarded && attempt < max_retries && !skip_retries {
                        let wait = backoff(attempt, e.retry_after(), base, cap);
                        tracing::warn!(error = %e, attempt = attempt + 1, wait_ms = wait.as_millis() as u64, "upstream round failed; retrying");
                        attempt += 1;
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    tracing::warn!(error = %e, attempts = attempt + 1, upstream = %route.endpoint.name, "upstream round failed");
                    if unavailable {
                        return Err(RoundFailure::Unavailable(e));
                    }
                    return Err(RoundFailure::Fatal(RunError::Api(ApiError::from(&e))));
                }
            }
        }
    }

    async fn one_round(
        &self,
        prepared: &Prepared,
        tool_names: &Arc<HashSet<String>>,
        tail: &mut TextTail,
        forwarded: &mut bool,
        route: &Route,
    ) -> Result<Round, RoundError> {
        let mut stream = route
            .endpoint
            .upstream
            .start(prepared.body.clone(), prepared.hints)
            .await?;
        let mut acc = Accumulator::with_tool_names(Arc::clone(tool_names));
        let mut pieces = Vec::new();
        let mut first_text = true;
        let mut ended = false;
        loop {
            match stream.next_data().await? {
                Some((event, data)) => acc.push_data(event.as_deref(), &data, &mut pieces)?,
                None => ended = true,
            }
            // Some servers keep the connection open after [DONE]; do not wait for it to close.
            if ended || acc.is_done() {
                acc.flush(&mut pieces);
            }
            if self.opts.live {
                for p in pieces.drain(..) {
                    let ev = match p {
                        Piece::Content(mut t) => {
                            if first_text {
                                first_text = false;
                                t.insert_str(0, tail.separator());
                            }
                            tail.note(&t);
                            RunEvent::Content(t)
                        }
                        Piece::Reasoning(t) => RunEvent::Reasoning(t),
                    };
                    *forwarded = true;
                    self.tx.send(ev).await.map_err(|_| RoundError::ClientGone)?;
                }
            } else {
                pieces.clear();
            }
            if ended || acc.is_done() {
                break;
            }
        }
        if !ended {
            stream.finish(Duration::from_millis(200)).await;
        }
        Ok(acc.finish()?)
    }

    /// Runs the server-side calls of one round. Consecutive read-only calls run concurrently;
    /// results keep the model's order.
    async fn run_tools(
        &self,
        calls: &[ToolCall],
        offer: &Offer,
        env: &ToolEnv,
        seen: &mut HashMap<(String, String), String>,
    ) -> Result<Vec<String>, RunError> {
        let approver = RunApprover {
            engine: self.engine,
            run_id: &self.opts.run_id,
            tx: self.tx,
            reachable: self.opts.approvals_reachable,
        };
        self.run_tools_with(calls, offer, env, seen, &approver)
            .await
    }

    async fn run_tools_with(
        &self,
        calls: &[ToolCall],
        offer: &Offer,
        env: &ToolEnv,
        seen: &mut HashMap<(String, String), String>,
        approver: &dyn Approver,
    ) -> Result<Vec<String>, RunError> {
        let reg = &self.engine.registry;
        let detect = self.engine.config.agent.detect_repeats;
        let mut results: Vec<Option<String>> = vec![None; calls.len()];
        let mut i = 0;
        while i < calls.len() {
            // A batch: one non-read-only call, or a run of read-only ones.
            let mut j = i + 1;
            if reg.read_only(&calls[i].name) {
                while j < calls.len() && reg.read_only(&calls[j].name) {
                    j += 1;
                }
            }
            let mut batch = Vec::new();
            for (k, call) in calls.iter().enumerate().take(j).skip(i) {
                if !offer.server.contains(&call.name) {
                    results[k] = Some(match reg.unavailable(&call.name) {
                        Some(why) => why.to_string(),
                        None => unknown_tool_message(&call.name, offer),
                    });
                    continue;
                }
                let key = (call.name.clone(), canonical_args(&call.arguments));
                if detect {
                    if let Some(earlier) = seen.get(&key) {
                        tracing::info!(tool = %call.name, "repeated identical tool call; not running it again");
                        results[k] = Some(format!(
                            "You already called {} with exactly these arguments (tool call {earlier}) \
                             and nothing has changed since, so the result is the same as that one \
                             above. Use it, or try something different.",
                            call.name
                        ));
                        continue;
                    }
                    seen.insert(key, call.id.clone());
                }
                batch.push(k);
            }
            for &k in &batch {
                let c = &calls[k];
                self.send(RunEvent::ToolStarted {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .await?;
            }
            let outcomes: Vec<Outcome> = join_all(
                batch
                    .iter()
                    .map(|&k| reg.dispatch(&calls[k], env, approver)),
            )
            .await;
            for (&k, outcome) in batch.iter().zip(outcomes) {
                let c = &calls[k];
                tracing::info!(tool = %c.name, status = outcome.status.label(), ms = outcome.duration.as_millis() as u64, bytes = outcome.content.len(), "tool call finished");
                self.send(RunEvent::ToolFinished {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    status: outcome.status,
                    duration: outcome.duration,
                    result_bytes: outcome.content.len(),
                    preview: if reg.read_only(&c.name) {
                        String::new()
                    } else {
                        crate::text::preview(&outcome.content, 2000)
                    },
                })
                .await?;
                results[k] = Some(outcome.content);
            }
            if !reg.read_only(&calls[i].name) && offer.server.contains(&calls[i].name) {
                // The workspace may have changed: earlier results are no longer current.
                seen.clear();
            }
            i = j;
        }
        Ok(results.into_iter().map(Option::unwrap_or_default).collect())
    }
}

/// The user's in-band answer, applied to the calls of a resumed round.
struct Preset(Reply);

impl Approver for Preset {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        _: &'a Ask,
        _: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        let name = &call.name;
        let a = match &self.0 {
            Reply::Approve { .. } => {
                Approval::Approved("the user, in the chat".into(), Grant::Person)
            }
            Reply::Deny { reason } => Approval::Refused(
                format!(
                    "{name} was not run: the user denied it{}. Do not retry it; do without it, \
                     or ask the user how to proceed.",
                    reason
                        .as_ref()
                        .map(|w| format!(" (\"{w}\")"))
                        .unwrap_or_default()
                ),
                Status::Denied,
            ),
            Reply::Other(_) => Approval::Refused(
                format!(
                    "{name} was not run: the user did not approve it and wrote something else \
                     instead (their message follows). Do what they ask now."
                ),
                Status::Denied,
            ),
        };
        Box::pin(std::future::ready(a))
    }
}

/// How one run resolves calls the policy asks about: `--yes`, else the configured mode, and
/// whether anyone can answer at all.
struct RunApprover<'r> {
    engine: &'r Engine,
    run_id: &'r str,
    tx: &'r mpsc::Sender<RunEvent>,
    reachable: bool,
}

impl Approver for RunApprover<'_> {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        ask: &'a Ask,
        targets: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        Box::pin(async move {
            let cfg = &self.engine.config;
            let name = &call.name;
            let reason = ask.reason.as_str();
            if cfg.agent.approve_asks && !ask.person_only {
                return Approval::Approved("--yes".into(), Grant::Yes);
            }
            let nobody = matches!(cfg.approvals.mode, ApprovalMode::Deny | ApprovalMode::Pause)
                || !self.reachable;
            if ask.person_only && nobody {
                return person_only_refusal(call, reason);
            }
            if matches!(cfg.approvals.mode, ApprovalMode::Deny | ApprovalMode::Pause) {
                // (Pause stops runs before such calls; one that still gets here is refused.)
                return NoApprover.approve(call, ask, targets).await;
            }
            if !self.reachable {
                return Approval::Refused(
                    format!(
                        "{name} was not run: it needs the user's approval ({reason}), and nobody \
                         can approve it here (`toolpilot run` has no approval API; the user can \
                         rerun with --yes or add an allow rule). Continue without it, or tell \
                         the user what you wanted to do."
                    ),
                    Status::NeedsApproval,
                );
            }
            let timeout = cfg.approvals.timeout;
            let ticket = self.engine.approvals.ask(
                self.run_id,
                name,
                &call.arguments,
                reason,
                crate::approvals::rules_for(name, targets),
                timeout,
            );
            let id = ticket.info.id.clone();
            tracing::info!(tool = %name, approval = %id, "waiting for approval");
            self.engine.runs.event(
                self.run_id,
                "approval",
                json!({"approval": id, "tool": name, "outcome": "waiting", "reason": reason}),
            );
            if self
                .tx
                .send(RunEvent::ApprovalPending(ticket.info.clone()))
                .await
                .is_err()
            {
                return Approval::Refused("the client went away".into(), Status::Error);
            }
            let (outcome, approval) = match ticket.wait(timeout).await {
                Some(Verdict::Approve { always }) => (
                    "approved",
                    Approval::Approved(
                        if always {
                            "the user (always)".into()
                        } else {
                            "the user".into()
                        },
                        Grant::Person,
                    ),
                ),
                Some(Verdict::Deny { reason: why }) => (
                    "denied",
                    Approval::Refused(
                        format!(
                            "{name} was not run: the user denied it{}. Do not retry it; do \
                             without it, or ask the user how to proceed.",
                            why.map(|w| format!(" (\"{w}\")")).unwrap_or_default()
                        ),
                        Status::Denied,
                    ),
                ),
                None => (
                    "timed out",
                    Approval::Refused(
                        format!(
                            "{name} was not run: it needs the user's approval ({reason}), and \
                             nobody approved it within {} s (approvals.timeout_secs). Continue \
                             without it, or tell the user what you wanted to do so they can \
                             allow it.",
                            timeout.as_secs_f64()
                        ),
                        Status::NeedsApproval,
                    ),
                ),
            };
            tracing::info!(tool = %name, approval = %id, outcome, "approval answered");
            self.engine.runs.event(
                self.run_id,
                "approval",
                json!({"approval": id, "tool": name, "outcome": outcome}),
            );
            let _ = self
                .tx
                .send(RunEvent::ApprovalResolved {
                    id,
                    tool: name.clone(),
                    outcome,
                })
                .await;
            approval
        })
    }
}

/// The text of the last user message (for the checkpoint record).
fn last_user_text(messages: &[Value]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| crate::text::content_text(m.get("content"), " "))
        .unwrap_or_default()
}

/// Applies `edit_existing_file` changes with the upstream model (an "apply" round).
struct UpstreamApply {
    route: Route,
}

const APPLY_PROMPT: &str = "You apply code edits. You are given a file and changes to it in which \
placeholder comments (such as `// ... existing code ...`) stand for unchanged code. Output the \
complete new file: the original with the changes applied, every unchanged line kept exactly as it \
is, no placeholder comments left. Output only the file, in one fenced code block, and nothing else.";

impl ApplyModel for UpstreamApply {
    fn apply(
        &self,
        path: String,
        original: String,
        changes: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send>> {
        let route = self.route.clone();
        let model = route.model.clone();
        Box::pin(async move {
            let body = serde_json::json!({
                "model": model,
                "stream": true,
                "temperature": 0,
                "messages": [
                    {"role": "system", "content": APPLY_PROMPT},
                    {"role": "user", "content": format!(
                        "File: {path}\n\n```\n{original}```\n\nChanges:\n\n```\n{changes}```")},
                ],
            });
            let mut stream = route
                .endpoint
                .upstream
                .start(RequestBody::from(body.to_string()), Hints::default())
                .await
                .map_err(|e| e.to_string())?;
            let mut acc = Accumulator::new();
            let mut pieces = Vec::new();
            while let Some((event, data)) = stream.next_data().await.map_err(|e| e.to_string())? {
                acc.push_data(event.as_deref(), &data, &mut pieces)
                    .map_err(|e| e.to_string())?;
                pieces.clear();
                if acc.is_done() {
                    stream.finish(Duration::from_millis(200)).await;
                    break;
                }
            }
            let round = acc.finish().map_err(|e| e.to_string())?;
            Ok(code_block(&round.content))
        })
    }
}

/// Embeddings for `codebase` re-ranking, from the upstream's `/v1/embeddings`.
struct UpstreamEmbed {
    route: Route,
}

impl crate::code::Embedder for UpstreamEmbed {
    fn embed(&self, inputs: Vec<String>) -> crate::code::Embedding {
        let route = self.route.clone();
        Box::pin(async move {
            route
                .endpoint
                .upstream
                .embeddings(&route.model, &inputs)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// The content of the outermost fenced block of `text`, or all of it.
fn code_block(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let first = lines.iter().position(|l| l.trim_start().starts_with("```"));
    let last = lines.iter().rposition(|l| l.trim() == "```");
    match (first, last) {
        (Some(a), Some(b)) if b > a => {
            let mut s = lines[a + 1..b].join("\n");
            s.push('\n');
            s
        }
        _ => text.to_string(),
    }
}

/// Why a round could not be had from the current upstream.
#[derive(Debug)]
enum RoundFailure {
    /// The request does not fit the model's context window.
    Overflow(UpstreamError),
    /// The upstream cannot be reached or answers 5xx (a fallback may help).
    Unavailable(UpstreamError),
    Fatal(RunError),
}

/// One round's request, ready to send.
struct Prepared {
    body: RequestBody,
    /// Estimated prompt tokens (calibrated with the usage the upstream reports).
    estimate: u64,
    hints: Hints,
}

/// What a run knows about its context budget.
struct ContextState {
    est: context::Estimator,
    /// Tokens the client asked to leave for the answer.
    max_answer: Option<u64>,
    /// A limit learned from an overflow.
    limit: Option<u64>,
    /// The context size asked of Ollama so far.
    num_ctx: Option<u64>,
}

impl ContextState {
    fn new(req: &ChatRequest) -> ContextState {
        let max_answer = ["max_completion_tokens", "max_tokens"]
            .iter()
            .find_map(|k| req.extra.get(*k).and_then(Value::as_u64));
        ContextState {
            est: context::Estimator::default(),
            max_answer,
            limit: None,
            num_ctx: None,
        }
    }

    /// Tokens kept free for the answer in a window of `w`.
    fn reserve(&self, w: u64) -> u64 {
        self.max_answer.unwrap_or(4096).min(w / 4)
    }
}

#[derive(Debug)]
enum RoundError {
    ClientGone,
    Upstream(UpstreamError),
}

impl From<UpstreamError> for RoundError {
    fn from(e: UpstreamError) -> Self {
        RoundError::Upstream(e)
    }
}

fn unknown_tool_message(name: &str, offer: &Offer) -> String {
    let mut names: Vec<&str> = offer
        .server
        .iter()
        .chain(offer.client.iter())
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    format!(
        "There is no tool named {name:?} in this conversation, so nothing was run. The tools \
         you can call are: {}.",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )
}

fn canonical_args(raw: &str) -> String {
    crate::tools::args::Args::parse(raw)
        .map(|a| a.canonical())
        .unwrap_or_else(|_| raw.trim().to_string())
}

/// Exponential backoff with full jitter, or the server's `Retry-After`, capped.
fn backoff(attempt: u32, retry_after: Option<Duration>, base: Duration, cap: Duration) -> Duration {
    if let Some(ra) = retry_after {
        return ra.min(cap);
    }
    let exp = base.saturating_mul(1u32 << attempt.min(16));
    let exp = exp.min(cap);
    // Between half and all of the exponential step.
    let jitter = 0.5 + fastrand::f64() * 0.5;
    exp.mul_f64(jitter)
}

/// The upstream request for one round, serialised: the client's fields, our model, the
/// conversation so far and the offered tools (none on the final round). Written directly from
/// borrowed parts; the tool specs are shared, not copied (see [`RequestBody`]).
pub fn build_body(
    req: &ChatRequest,
    model: &str,
    messages: &[Value],
    tools: Option<&Bytes>,
    request_usage: bool,
) -> RequestBody {
    use serde::ser::{SerializeMap, Serializer};
    let mut out = Vec::with_capacity(1024);
    let mut ser = serde_json::Serializer::new(&mut out);
    let write = (|| -> Result<(), serde_json::Error> {
        let mut m = ser.serialize_map(None)?;
        for (k, v) in &req.extra {
            // Without tools, tool settings would be rejected by some servers.
            if tools.is_none() && matches!(k.as_str(), "tool_choice" | "parallel_tool_calls") {
                continue;
            }
            m.serialize_entry(k, v)?;
        }
        m.serialize_entry("model", model)?;
        m.serialize_entry("messages", messages)?;
        m.serialize_entry("stream", &true)?;
        if request_usage {
            m.serialize_entry(
                "stream_options",
                &serde_json::json!({"include_usage": true}),
            )?;
        }
        m.end()
    })();
    if let Err(e) = write {
        tracing::error!(error = %e, "cannot serialise the upstream request");
    }
    match tools {
        // `{…}` becomes `{…,"tools":` + the shared specs + `}`; the map always has `model`.
        Some(specs) if out.last() == Some(&b'}') => {
            out.pop();
            out.extend_from_slice(b",\"tools\":");
            RequestBody::from_parts(vec![
                Bytes::from(out),
                specs.clone(),
                Bytes::from_static(b"}"),
            ])
        }
        _ => RequestBody::from(Bytes::from(out)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_of_rounds_is_separated_by_a_blank_line() {
        let mut t = TextTail::default();
        assert_eq!(t.separator(), "");
        t.note("Looking");
        assert_eq!(t.separator(), "\n\n");
        t.note("\n");
        assert_eq!(t.separator(), "\n");
        t.note("\n");
        assert_eq!(t.separator(), "");
        t.note("x\n");
        assert_eq!(t.separator(), "\n");
    }

    #[test]
    fn backoff_honours_retry_after_and_caps() {
        let cap = Duration::from_secs(5);
        assert_eq!(
            backoff(
                0,
                Some(Duration::from_secs(2)),
                Duration::from_millis(100),
                cap
            ),
            Duration::from_secs(2)
        );
        assert_eq!(
            backoff(
                0,
                Some(Duration::from_secs(60)),
                Duration::from_millis(100),
                cap
            ),
            cap
        );
        for attempt in 0..5 {
            let d = backoff(attempt, None, Duration::from_millis(100), cap);
            let full = Duration::from_millis(100 * (1 << attempt)).min(cap);
            assert!(d >= full / 2 && d <= full, "{attempt}: {d:?}");
        }
    }
}
