//! `Engine`: everything the runs of a server share, and how a run is started.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::detach;
use super::handoff::Handoffs;
use super::offer::Offer;
use super::pause::PauseStore;
use super::run::{Run, RunError};
use super::{RunEvent, RunHandle, RunOptions};
use crate::approvals::Approvals;
use crate::checkpoint::Store;
use crate::checkpoint::tree::Shadow;
use crate::config::Config;
use crate::error::ApiError;
use crate::openai::ChatRequest;
use crate::policy::Policy;
use crate::runs::Runs;
use crate::terminal::Terminal;
use crate::tools::{Registry, ToolEnv};
use crate::upstream::demo;
use crate::upstream::route::Upstreams;
use crate::workspace::Workspace;

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
    pub pauses: Arc<PauseStore>,
    /// Runs that go on without their client (`x-toolpilot-detach`).
    pub detached: detach::Detached,
    /// What is offered to the model when the client sends no `tools`, for the rules and
    /// skills snapshot it was built from (by fingerprint): rebuilt only when they change.
    default_offer: std::sync::Mutex<((u64, u64), Offer)>,
    /// The system message, rules and skills.
    pub prompt: Arc<crate::prompt::Prompt>,
    /// The codebase index (built on first use).
    pub code: Arc<crate::code::index::CodeIndex>,
    tools_config: Arc<crate::config::ToolsConfig>,
    /// Pages and search for the web tools.
    pub web: Arc<crate::web::Web>,
    /// Redacts secrets from every tool result.
    pub redactor: Arc<crate::redact::Redactor>,
    /// Cancelled when the server's shutdown grace period ends: every run still going ends
    /// with an error (see [`Engine::stop_runs`]).
    stopping: CancellationToken,
    /// The runs not yet ended (attached or detached), to know when a shutdown may finish.
    live: Arc<Live>,
}

/// A count of the runs in flight, and a wake-up when it drops to zero.
#[derive(Default)]
struct Live {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

/// Held by a run while it is in flight (also by a tool call from an MCP client, so that a
/// shutdown gives it the same grace period).
pub struct LiveRun(Arc<Live>);

impl Drop for LiveRun {
    fn drop(&mut self) {
        if self
            .0
            .count
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
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
        let shadow = Shadow::new(
            checkpoints.dir(),
            workspace.root(),
            config.terminal.snapshot_timeout,
        );
        let web = Arc::new(crate::web::Web::new(&config.web)?);
        let redactor = Arc::new(crate::redact::Redactor::new(&config.secrets));
        let mut registry = Registry::new(policy, policy_config);
        if config.mcp.servers.is_empty() {
            registry.set_unavailable(
                "mcp_tool_search",
                "mcp_tool_search was not run: no MCP servers are configured ([mcp.servers.NAME])"
                    .into(),
            );
        } else {
            registry.set_mcp(Arc::new(crate::mcp::Mcp::new(
                &config.mcp,
                Arc::clone(&terminal),
                workspace.root().to_path_buf(),
            )));
        }
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
            (snapshot.fingerprint, u64::MAX),
            Offer::default(&registry, &config, &snapshot),
        ));
        let pauses = PauseStore::new(checkpoints.dir(), config.approvals.pause_expiry);
        pauses.sweep();
        Ok(Engine {
            detached: detach::Detached::default(),
            pauses: Arc::new(pauses),
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
            stopping: CancellationToken::new(),
            live: Arc::default(),
        })
    }

    /// Ends every run in flight (and any started from now on) with an error that says the
    /// server is shutting down: their futures are dropped, which stops their tools and kills
    /// their commands' process trees, and their clients get the error (an `error` event, a
    /// `response.failed`, or a 503).
    pub fn stop_runs(&self) {
        self.stopping.cancel();
    }

    /// How many runs are in flight (attached to a client or detached).
    pub fn live_runs(&self) -> usize {
        self.live.count.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until no run is in flight.
    pub async fn runs_finished(&self) {
        loop {
            let idle = self.live.idle.notified();
            if self.live_runs() == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Counts something in flight as a run until the returned value is dropped.
    pub fn live_run(&self) -> LiveRun {
        self.live
            .count
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        LiveRun(Arc::clone(&self.live))
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
        let live = self.live_run();
        let stopping = self.stopping.clone();
        let driver = async move {
            let _live = live;
            let run = Run {
                engine: &engine,
                opts: &opts,
                tx: &tx,
                cancel: &token,
                started,
            };
            let result = tokio::select! {
                r = run.run(req) => r,
                // The shutdown's grace period is over: the run's future is dropped here.
                _ = stopping.cancelled() => Err(RunError::Api(shutting_down())),
            };
            match result {
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
            checkpoint: self.checkpoints.run(run_id, prompt),
            seen: Arc::default(),
            apply: None,
            terminal: Arc::clone(&self.terminal),
            shadow: self.shadow.for_run(cancel.clone()),
            cancel,
            run_id: run_id.to_string(),
            web: Arc::clone(&self.web),
            redactor: Arc::clone(&self.redactor),
            hops: self
                .registry
                .hop_gate(Arc::clone(&self.workspace), self.config.agent.approve_asks),
            prompt: Arc::clone(&self.prompt),
            code: Arc::clone(&self.code),
            embedder: None,
            mcp: self.registry.mcp().cloned(),
        }
    }

    /// Cancelled when the shutdown's grace period is over (see [`Engine::stop_runs`]).
    pub fn stopping(&self) -> CancellationToken {
        self.stopping.clone()
    }

    /// The built-in tools offered to a model when its client declares none (every enabled
    /// built-in, or `agent.default_tools`), as OpenAI function specs with the descriptions
    /// the model gets: what MCP clients are offered (`server::mcp`).
    pub async fn default_tool_specs(&self) -> Vec<Value> {
        let offer = self.default_offer(self.prompt.refresh().await.as_ref());
        offer
            .specs
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Whether the built-in `name` is in that set.
    pub async fn offers_by_default(&self, name: &str) -> bool {
        self.default_offer(self.prompt.refresh().await.as_ref())
            .server
            .contains(name)
    }

    /// The default offer for a rules and skills snapshot (cached while they do not change).
    pub(super) fn default_offer(&self, snapshot: &crate::prompt::Snapshot) -> Offer {
        let mut cached = self.default_offer.lock().unwrap_or_else(|e| e.into_inner());
        // MCP tool lists change too (a start, a restart, `list_changed`).
        let key = (
            snapshot.fingerprint,
            self.registry.mcp().map_or(0, |m| m.generation()),
        );
        if cached.0 != key {
            *cached = (key, Offer::default(&self.registry, &self.config, snapshot));
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

/// The text of the last user message (for the checkpoint record).
pub(super) fn last_user_text(messages: &[Value]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| crate::text::content_text(m.get("content"), " "))
        .unwrap_or_default()
}

/// The error of a run ended by the server's shutdown.
fn shutting_down() -> ApiError {
    ApiError::shutting_down(
        "the server is shutting down: this run was still going when its grace period \
         (server.shutdown_grace_secs) ended, so it was stopped and its commands killed; \
         what it did so far stays done. Send the request again when the server is back",
    )
}
