//! `Run`: one conversation's loop, from the request to `Done` or `Failed`.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::adapters::{UpstreamApply, UpstreamEmbed};
use super::approvers::{Preset, RunApprover};
use super::engine::last_user_text;
use super::offer::{Offer, unknown_tool_message};
use super::pause::{self, Paused, Reply};
use super::repeats::Repeats;
use super::round::{ContextState, RoundFailure};
use super::{Engine, RunEvent, RunOptions};
use crate::config::ApprovalMode;
use crate::error::ApiError;
use crate::openai::{ChatRequest, ToolCall, Usage, assistant_message, tool_message};
use crate::tools::ToolEnv;
use crate::tools::edit::ApplyModel;
use crate::tools::registry::{Approver, Outcome, Status};
use crate::upstream::UpstreamError;
use crate::upstream::accumulate::Round;
use crate::upstream::route::Route;

pub(super) struct Run<'a> {
    pub(super) engine: &'a Engine,
    pub(super) opts: &'a RunOptions,
    pub(super) tx: &'a mpsc::Sender<RunEvent>,
    pub(super) cancel: &'a CancellationToken,
    pub(super) started: Instant,
}

/// What a run carries from turn to turn.
pub(super) struct State {
    /// The request as the client sent it.
    req: ChatRequest,
    /// The model name the client is told.
    shown_model: String,
    /// The upstream the run uses now, the one it started on, and those it has tried.
    route: Route,
    origin: Route,
    tried: Vec<String>,
    offer: Offer,
    env: ToolEnv,
    run_prompt: crate::prompt::RunPrompt,
    /// The conversation the run keeps (native shape, without toolpilot's system message).
    messages: Vec<Value>,
    usage: Usage,
    /// Rounds sent so far (the rounds of a paused run count).
    round_no: u32,
    tail: TextTail,
    /// Identical calls and failures: the pointer to an earlier result, the loop guard.
    repeats: Repeats,
    ctx: ContextState,
}

/// The end of the text sent so far, to separate the text of consecutive rounds.
#[derive(Default)]
pub(super) struct TextTail {
    pub(super) sent_any: bool,
    pub(super) newlines_at_end: usize,
}

impl TextTail {
    pub(super) fn separator(&self) -> &'static str {
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
    pub(super) fn note(&mut self, text: &str) {
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

#[derive(Debug)]
pub(super) enum RunError {
    /// The event receiver is gone: nobody is listening, stop quietly.
    ClientGone,
    Api(ApiError),
}

impl RunError {
    pub(super) fn message(&self) -> String {
        match self {
            RunError::ClientGone => "client gone".into(),
            RunError::Api(e) => e.to_string(),
        }
    }
    pub(super) fn into_api(self) -> ApiError {
        match self {
            RunError::ClientGone => ApiError::internal("client gone"),
            RunError::Api(e) => e,
        }
    }
}

impl Run<'_> {
    pub(super) async fn send(&self, ev: RunEvent) -> Result<(), RunError> {
        self.record(&ev);
        self.tx.send(ev).await.map_err(|_| RunError::ClientGone)
    }

    /// Records what the client is told, as run events.
    pub(super) fn record(&self, ev: &RunEvent) {
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

    /// The run: set up, continue a paused run if this request answers one, then one turn
    /// after another until a turn ends the run; `Done` says how.
    pub(super) async fn run(&self, req: ChatRequest) -> Result<(), RunError> {
        // Rules and skills are files: refreshed on a blocking thread.
        let snapshot = self.engine.prompt.refresh().await;
        // The MCP servers' first start (at most their start-up timeouts), so that their tools
        // are in the offer; later starts never hold a run up.
        if !self.opts.plain
            && let Some(mcp) = self.engine.registry.mcp()
        {
            mcp.ready().await;
        }
        let mut st = self.setup(req, snapshot)?;
        let resumed = if self.opts.plain {
            None
        } else {
            self.resume(&mut st).await?
        };
        let finish_reason = match resumed {
            Some(reason) => reason,
            None => loop {
                if let Some(reason) = self.turn(&mut st).await? {
                    break reason;
                }
            },
        };
        self.send(RunEvent::Done {
            finish_reason: finish_reason.to_string(),
            usage: st.usage,
            model: st.shown_model,
            rounds: st.round_no,
        })
        .await
    }

    /// What the run decides before its first round: the upstream (route), the tools offered,
    /// the tools' environment, the system message, and the conversation (a client sending the
    /// results of calls handed to it gets the rounds it did not see put back).
    fn setup(
        &self,
        req: ChatRequest,
        snapshot: Arc<crate::prompt::Snapshot>,
    ) -> Result<State, RunError> {
        let engine = self.engine;
        let requested = engine
            .config
            .agent
            .model
            .clone()
            .or_else(|| req.model.clone());
        let route = engine
            .upstreams
            .route(requested.as_deref())
            .map_err(|e| RunError::Api(e.into()))?;
        if engine.upstreams.is_demo() {
            tracing::warn!("no upstream configured: the built-in demo model answers this run");
        }
        let plain = self.opts.plain;
        let offer = if plain {
            Offer::plain(&req)
        } else {
            let augment = self
                .opts
                .augment
                .as_deref()
                .unwrap_or(&engine.config.server.augment);
            Offer::new(engine, &req, &snapshot, augment)
        };
        let env = self.tool_env(&req, &route);
        // toolpilot's system message, recomputed per round (rules that start to apply join it);
        // none for a plain completion.
        let mut prompt_config = engine.prompt.config.clone();
        prompt_config.system_message &= !plain;
        let run_prompt = crate::prompt::RunPrompt::new(
            snapshot,
            &prompt_config,
            offer.server.contains("request_rule"),
        );
        let messages = if plain {
            req.messages.clone()
        } else {
            engine
                .handoffs
                .restore(&req.messages)
                .unwrap_or_else(|| req.messages.clone())
        };
        Ok(State {
            shown_model: engine.shown_model(&req),
            ctx: ContextState::new(&req),
            tried: vec![route.endpoint.name.clone()],
            origin: route.clone(),
            route,
            offer,
            env,
            run_prompt,
            messages,
            usage: Usage::default(),
            round_no: 0,
            tail: TextTail::default(),
            repeats: Repeats::default(),
            req,
        })
    }

    /// The tools' environment for this run: the client's open file, the upstream to apply
    /// edits with (`tools.llm_apply`) and to embed with (`codebase.embeddings_model`, routed
    /// like any model name; it may live on another upstream).
    fn tool_env(&self, req: &ChatRequest, route: &Route) -> ToolEnv {
        let engine = self.engine;
        let demo = engine.upstreams.is_demo();
        let mut env = engine.tool_env(
            &self.opts.run_id,
            &last_user_text(&req.messages),
            self.cancel.clone(),
        );
        env.current_file = req.current_file.clone();
        env.apply = (engine.config.tools.llm_apply && !demo).then(|| {
            Arc::new(UpstreamApply {
                route: route.clone(),
            }) as Arc<dyn ApplyModel>
        });
        if let (Some(m), false) = (&engine.config.codebase.embeddings_model, demo) {
            match engine.upstreams.route(Some(m)) {
                Ok(route) => env.embedder = Some(Arc::new(UpstreamEmbed { route })),
                Err(e) => tracing::warn!(
                    model = %m,
                    error = %e,
                    "codebase.embeddings_model is not routable; results are not re-ranked"
                ),
            }
        }
        env
    }

    /// The user answering a paused run: it continues where it stopped (the paused round's
    /// calls run as the user answered). `Some("stop")` when the pause cannot be resumed: the
    /// run says why and ends.
    async fn resume(&self, st: &mut State) -> Result<Option<&'static str>, RunError> {
        let engine = self.engine;
        // Reading and removing a saved pause is file work: on a blocking thread, and only
        // when the conversation carries a pause's marker.
        let found = if pause::answers_a_pause(&st.req.messages) {
            let store = Arc::clone(&engine.pauses);
            let messages = st.req.messages.clone();
            tokio::task::spawn_blocking(move || store.take_for(&messages))
                .await
                .unwrap_or_else(|e| Some(Err(format!("reading the paused run failed: {e}"))))
        } else {
            None
        };
        let (paused, reply) = match found {
            None => return Ok(None),
            Some(Ok(pause)) => pause,
            Some(Err(why)) => {
                self.send(RunEvent::Content(format!(
                    "toolpilot: {why}; nothing was run. Send your request again to continue."
                )))
                .await?;
                return Ok(Some("stop"));
            }
        };
        tracing::info!(pause = %paused.id, reply = ?reply, "resuming a paused run");
        st.messages = paused.messages.clone();
        st.usage = paused.usage;
        st.round_no = paused.round_no;
        if reply == (Reply::Approve { always: true }) {
            let rules: Vec<String> = paused.asks.iter().flat_map(|a| a.rules.clone()).collect();
            let approvals = Arc::clone(&engine.approvals);
            let to_save = rules.clone();
            let saved = tokio::task::spawn_blocking(move || approvals.save_rules(&to_save))
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
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
            .run_tools_with(&paused.calls, &st.offer, &st.env, &mut st.repeats, &preset)
            .await?;
        for (call, content) in paused.calls.iter().zip(results) {
            st.messages.push(tool_message(&call.id, content));
        }
        if let Reply::Other(text) = reply {
            st.messages.push(json!({"role": "user", "content": text}));
        }
        self.guard(st).await
    }

    /// One turn: the model's answer, then its calls. `Some(finish_reason)` when the run ends
    /// here: the model called no tool (or no tool may run any more), the run paused for an
    /// approval, or calls went to the client.
    async fn turn(&self, st: &mut State) -> Result<Option<&'static str>, RunError> {
        if let Some(reason) = self.over_budget(st).await? {
            return Ok(Some(reason));
        }
        st.round_no += 1;
        let tools_allowed = st.round_no <= self.engine.config.agent.max_rounds;
        let round = self.answer(st, tools_allowed).await?;
        if round.tool_calls.is_empty() || !tools_allowed {
            if !round.tool_calls.is_empty() {
                tracing::warn!(
                    "the model called tools after the last allowed round; ignoring them"
                );
            }
            return Ok(Some(match round.finish_reason.as_deref() {
                Some("length") => "length",
                Some("content_filter") => "content_filter",
                _ => "stop",
            }));
        }
        let mut said = assistant_message(&round.content, &round.tool_calls);
        // Thinking models that call tools want their reasoning back in the rounds that follow.
        let send_reasoning = st
            .route
            .endpoint
            .cfg
            .as_ref()
            .is_some_and(|c| c.send_reasoning);
        if send_reasoning && !round.reasoning.is_empty() {
            said["reasoning_content"] = Value::from(round.reasoning.as_str());
        }
        st.messages.push(said);
        let (server_calls, client_calls) = self.partition(st, &round.tool_calls);
        if client_calls.is_empty() && self.pause(st, &server_calls).await? {
            return Ok(Some("stop"));
        }
        self.run_calls(st, &server_calls, client_calls.is_empty())
            .await?;
        if client_calls.is_empty() {
            return self.guard(st).await;
        }
        let ids: Vec<String> = client_calls.iter().map(|c| c.id.clone()).collect();
        self.engine
            .handoffs
            .park(st.req.messages.len(), &st.messages, &ids);
        self.send(RunEvent::ClientToolCalls(client_calls)).await?;
        Ok(Some("tool_calls"))
    }

    /// `agent.max_tokens_per_run`: before a round after the first, a run whose rounds have
    /// used up the budget (as the upstream reported their usage) ends with an answer that
    /// says so, rather than sending another round.
    async fn over_budget(&self, st: &mut State) -> Result<Option<&'static str>, RunError> {
        let Some(budget) = self.engine.config.agent.max_tokens_per_run else {
            return Ok(None);
        };
        let used = st.usage.total_tokens;
        if st.round_no == 0 || used < budget {
            return Ok(None);
        }
        tracing::warn!(used, budget, "the run used up its token budget; ending it");
        self.engine.runs.event(
            &self.opts.run_id,
            "budget",
            json!({"used": used, "budget": budget, "rounds": st.round_no}),
        );
        let text = format!(
            "{}toolpilot: this run stopped after {} round{} because it used {} tokens, its \
             budget (agent.max_tokens_per_run = {}). The tool results so far are in the \
             conversation; ask again to continue.",
            st.tail.separator(),
            st.round_no,
            if st.round_no == 1 { "" } else { "s" },
            crate::text::group(used),
            crate::text::group(budget),
        );
        st.tail.note(&text);
        self.send(RunEvent::Content(text)).await?;
        Ok(Some("length"))
    }

    /// The model's answer for this turn: the conversation fitted to the context window and
    /// sent, retried, moved to a fallback upstream when this one is unavailable, and sent once
    /// more, pruned harder, when it overflowed the model's context. Recorded, its usage
    /// counted and, for a client that is not streamed to, its text sent.
    async fn answer(&self, st: &mut State, tools_allowed: bool) -> Result<Round, RunError> {
        let names = if tools_allowed {
            Arc::clone(&st.offer.names)
        } else {
            Arc::default()
        };
        let specs = st.offer.specs.clone().filter(|_| tools_allowed);
        let started = Instant::now();
        let mut overflowed = false;
        let round = loop {
            let prepared = self
                .prepare_round(
                    &st.req,
                    &st.route,
                    &mut st.messages,
                    specs.as_ref(),
                    &mut st.ctx,
                    &mut st.run_prompt,
                )
                .await;
            let fallback_ready = !self.engine.upstreams.fallbacks(&st.route).is_empty();
            match self
                .round_with_retries(&prepared, &names, &mut st.tail, &st.route, fallback_ready)
                .await
            {
                Ok(round) => {
                    if let Some(u) = &round.usage {
                        st.ctx.est.calibrate(prepared.estimate, u.prompt_tokens);
                    }
                    break round;
                }
                Err(RoundFailure::Overflow(e)) if !overflowed => {
                    overflowed = true;
                    self.after_overflow(st, &e, prepared.estimate);
                }
                Err(RoundFailure::Overflow(e)) => return Err(RunError::Api(ApiError::from(&e))),
                Err(RoundFailure::Unavailable(e)) => self.fall_back(st, e)?,
                Err(RoundFailure::Fatal(e)) => return Err(e),
            }
        };
        self.engine.runs.round(
            &self.opts.run_id,
            json!({
                "n": st.round_no,
                "ms": started.elapsed().as_millis() as u64,
                "usage": round.usage,
                "finish_reason": round.finish_reason,
                "content_chars": round.content.chars().count(),
                "tool_calls": round.tool_calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            }),
            started.elapsed(),
        );
        if let Some(u) = &round.usage {
            st.usage.add(u);
        }
        if !self.opts.live {
            if !round.reasoning.is_empty() {
                self.send(RunEvent::Reasoning(round.reasoning.clone()))
                    .await?;
            }
            if !round.content.is_empty() {
                let text = format!("{}{}", st.tail.separator(), round.content);
                st.tail.note(&text);
                self.send(RunEvent::Content(text)).await?;
            }
        }
        Ok(round)
    }

    /// The request did not fit: the context limit becomes the window the error names (less
    /// the answer's reserve), else 60 % of what was estimated, and the estimate is no longer
    /// trusted.
    fn after_overflow(&self, st: &mut State, e: &UpstreamError, estimate: u64) {
        let msg = e.to_string();
        let learned = crate::upstream::overflow::window_in_message(&msg);
        if let Some(w) = learned {
            st.route.endpoint.learn_window(&st.route.model, w);
        }
        let ctx = &mut st.ctx;
        ctx.est.distrust();
        ctx.limit = Some(match learned {
            Some(w) => w.saturating_sub(ctx.reserve(w)),
            None => estimate * 6 / 10,
        });
        tracing::warn!(error = %msg, limit = ?ctx.limit, "the request did not fit the model's context; pruning and retrying once");
        self.engine.runs.event(
            &self.opts.run_id,
            "context_overflow",
            json!({"message": msg, "estimate": estimate, "limit": ctx.limit}),
        );
    }

    /// The upstream is unavailable: the run moves to the next fallback not tried yet (those
    /// of the upstream it started on first, then those of the current one), or fails with
    /// the error.
    fn fall_back(&self, st: &mut State, e: UpstreamError) -> Result<(), RunError> {
        let upstreams = &self.engine.upstreams;
        let next = upstreams
            .fallbacks(&st.origin)
            .into_iter()
            .chain(upstreams.fallbacks(&st.route))
            .find(|r| !st.tried.contains(&r.endpoint.name));
        let Some(next) = next else {
            return Err(RunError::Api(ApiError::from(&e)));
        };
        tracing::warn!(error = %e, from = %st.route.endpoint.name, to = %next.endpoint.name, "upstream unavailable; falling back");
        self.engine.runs.event(
            &self.opts.run_id,
            "fallback",
            json!({"from": st.route.endpoint.name, "to": next.endpoint.name,
                   "model": next.model, "error": e.to_string()}),
        );
        st.tried.push(next.endpoint.name.clone());
        st.route = next;
        Ok(())
    }

    /// The calls that run here and those that go to the client: its own tools, and calls
    /// that need approval of a tool the client declared itself (Continue's edit tools), which
    /// the client asks its user about and runs. Under --yes only the calls that --yes cannot
    /// approve go to the client's user.
    fn partition(&self, st: &State, calls: &[ToolCall]) -> (Vec<ToolCall>, Vec<ToolCall>) {
        let engine = self.engine;
        let yes = engine.config.agent.approve_asks;
        let (mut server_calls, mut client_calls) = (Vec::new(), Vec::new());
        for call in calls {
            if call.kind.is_some() {
                // Not a function call: answered here with what went wrong.
                server_calls.push(call.clone());
                continue;
            }
            let hand_off = st.offer.server.contains(&call.name)
                && st.req.tools.is_some()
                && engine.config.approvals.handoff
                && matches!(
                    engine.registry.preflight(call, &st.env),
                    Some(crate::policy::Decision::Ask { person_only, .. }) if person_only || !yes
                );
            if hand_off {
                tracing::info!(tool = %call.name, "needs approval; handed to the client that declared it");
                client_calls.push(call.clone());
            } else if st.offer.server.contains(&call.name) {
                server_calls.push(call.clone());
            } else if st.offer.client.contains(&call.name) {
                client_calls.push(call.clone());
            } else {
                server_calls.push(call.clone());
            }
        }
        (server_calls, client_calls)
    }

    /// In-band approval (`approvals.mode = "pause"`): when a call of this round needs one,
    /// the run is saved before the round's calls and the user is asked in the answer; their
    /// next message resumes it. Whether the run paused.
    async fn pause(&self, st: &mut State, calls: &[ToolCall]) -> Result<bool, RunError> {
        let engine = self.engine;
        if !self.opts.approvals_reachable {
            return Ok(false);
        }
        match engine.config.approvals.mode {
            ApprovalMode::Pause => {}
            // Wait only where someone sees what waits; nobody does: ask in the answer.
            ApprovalMode::Auto if !self.approvals_seen() => {}
            ApprovalMode::Auto | ApprovalMode::Wait | ApprovalMode::Deny => return Ok(false),
        }
        let yes = engine.config.agent.approve_asks;
        let asks: Vec<pause::Ask> = calls
            .iter()
            .filter(|c| st.offer.server.contains(&c.name) && c.kind.is_none())
            .filter_map(|c| {
                let (reason, person_only, rules) = engine.registry.ask_of(c, &st.env)?;
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
        if asks.is_empty() {
            return Ok(false);
        }
        let store = Arc::clone(&engine.pauses);
        let paused = Paused {
            id: String::new(),
            run_id: self.opts.run_id.clone(),
            created_at: 0,
            expires_at: 0,
            // The client's messages: the request that answers sends them again.
            conversation: pause::conversation_id(&st.req.messages),
            question: String::new(),
            messages: st.messages.clone(),
            calls: calls.to_vec(),
            asks,
            usage: st.usage,
            round_no: st.round_no,
        };
        // Written and synced to disk: on a blocking thread.
        let saved = tokio::task::spawn_blocking(move || store.save(paused))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        let (saved, question) = saved.map_err(|e| {
            RunError::Api(ApiError::internal(format!(
                "a call needs approval, but the run could not be paused (saving its state \
                 failed: {e})"
            )))
        })?;
        engine.runs.event(
            &self.opts.run_id,
            "paused",
            json!({"pause": saved.id, "calls": saved.asks.iter().map(|a| &a.tool).collect::<Vec<_>>()}),
        );
        let text = format!("{}{question}", st.tail.separator());
        st.tail.note(&text);
        self.send(RunEvent::Content(text)).await?;
        Ok(true)
    }

    /// Whether someone can see a call that waits for approval: the client shows the stream's
    /// progress, or someone follows `/v1/approvals` (the console does, every second).
    fn approvals_seen(&self) -> bool {
        self.opts.approvals_visible
            || self
                .engine
                .approvals
                .followed_within(crate::approvals::FOLLOWING)
    }

    /// Runs the server-side calls and appends their results. When no call goes to the client
    /// in the last round that may call tools, its last result says so.
    async fn run_calls(
        &self,
        st: &mut State,
        calls: &[ToolCall],
        only_server: bool,
    ) -> Result<(), RunError> {
        let results = self
            .run_tools(calls, &st.offer, &st.env, &mut st.repeats)
            .await?;
        let max_rounds = self.engine.config.agent.max_rounds;
        let last_round_with_tools = st.round_no == max_rounds;
        let n = results.len();
        for (i, (call, mut content)) in calls.iter().zip(results).enumerate() {
            if last_round_with_tools && i + 1 == n && only_server {
                content.push_str(&format!(
                    "\n\n[toolpilot: this was the last tool round allowed for this request \
                     (agent.max_rounds = {max_rounds}). Answer now with what you have; \
                     further tool calls will not run.]"
                ));
            }
            st.messages.push(tool_message(&call.id, content));
        }
        Ok(())
    }

    /// Runs the server-side calls of one round. Consecutive read-only calls run concurrently;
    /// results keep the model's order.
    pub(super) async fn run_tools(
        &self,
        calls: &[ToolCall],
        offer: &Offer,
        env: &ToolEnv,
        repeats: &mut Repeats,
    ) -> Result<Vec<String>, RunError> {
        let approver = RunApprover {
            engine: self.engine,
            run_id: &self.opts.run_id,
            tx: self.tx,
            reachable: self.opts.approvals_reachable,
            seen: self.approvals_seen(),
        };
        self.run_tools_with(calls, offer, env, repeats, &approver)
            .await
    }

    pub(super) async fn run_tools_with(
        &self,
        calls: &[ToolCall],
        offer: &Offer,
        env: &ToolEnv,
        repeats: &mut Repeats,
        approver: &dyn Approver,
    ) -> Result<Vec<String>, RunError> {
        let reg = &self.engine.registry;
        let detect = self.engine.config.agent.detect_repeats;
        let mut results: Vec<Option<String>> = vec![None; calls.len()];
        let mut statuses = vec![Status::Ok; calls.len()];
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
                if let Some(kind) = &call.kind {
                    results[k] = Some(odd_type_message(call, kind));
                    statuses[k] = Status::Error;
                    continue;
                }
                if !offer.server.contains(&call.name) {
                    results[k] = Some(match reg.unavailable(&call.name) {
                        Some(why) => why.to_string(),
                        None => unknown_tool_message(&call.name, offer),
                    });
                    statuses[k] = Status::Error;
                    continue;
                }
                let key = (call.name.clone(), canonical_args(&call.arguments));
                if detect {
                    if let Some(earlier) = repeats.seen.get(&key) {
                        tracing::info!(tool = %call.name, "repeated identical tool call; not running it again");
                        results[k] = Some(format!(
                            "You already called {} with exactly these arguments (tool call {earlier}) \
                             and nothing has changed since, so the result is the same as that one \
                             above. Use it, or try something different.",
                            call.name
                        ));
                        continue;
                    }
                    repeats.seen.insert(key, call.id.clone());
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
                statuses[k] = outcome.status;
                results[k] = Some(outcome.content);
            }
            if !reg.read_only(&calls[i].name) && offer.server.contains(&calls[i].name) {
                // The workspace may have changed: earlier results are no longer current.
                repeats.seen.clear();
            }
            i = j;
        }
        let results: Vec<String> = results.into_iter().map(Option::unwrap_or_default).collect();
        let limit = self.engine.config.agent.repeat_limit;
        for ((call, content), status) in calls.iter().zip(&results).zip(statuses) {
            repeats.note(
                limit,
                &call.name,
                &canonical_args(&call.arguments),
                content,
                status,
            );
        }
        Ok(results)
    }

    /// The loop guard: a run that repeats itself ends here, with an answer that says what
    /// repeated (`Some("stop")`); otherwise it goes on.
    async fn guard(&self, st: &mut State) -> Result<Option<&'static str>, RunError> {
        let Some(verdict) = st.repeats.verdict() else {
            return Ok(None);
        };
        tracing::warn!(reason = %verdict, "the loop guard ended a run");
        self.engine
            .runs
            .event(&self.opts.run_id, "loop_guard", json!({"message": verdict}));
        let text = format!("{}{verdict}", st.tail.separator());
        st.tail.note(&text);
        self.send(RunEvent::Content(text)).await?;
        Ok(Some("stop"))
    }
}

/// The tool message for a call whose `type` is not `function`.
fn odd_type_message(call: &ToolCall, kind: &str) -> String {
    format!(
        "{} was not run: the call has type {kind:?}, and tools are only run when called as \
         functions (\"type\": \"function\", with the arguments as a JSON object in \
         `function.arguments`). Call {} again that way.",
        call.name, call.name
    )
}

pub(super) fn canonical_args(raw: &str) -> String {
    crate::tools::args::Args::parse(raw)
        .map(|a| a.canonical())
        .unwrap_or_else(|_| raw.trim().to_string())
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
}
