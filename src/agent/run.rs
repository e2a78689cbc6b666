//! `Run`: one conversation's loop, from the request to `Done` or `Failed`.

use std::collections::HashMap;
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
use super::round::{ContextState, RoundFailure};
use super::{Engine, RunEvent, RunOptions};
use crate::config::ApprovalMode;
use crate::error::ApiError;
use crate::openai::{ChatRequest, ToolCall, Usage, assistant_message, tool_message};
use crate::tools::ToolEnv;
use crate::tools::edit::ApplyModel;
use crate::tools::registry::{Approver, Outcome};

pub(super) struct Run<'a> {
    pub(super) engine: &'a Engine,
    pub(super) opts: &'a RunOptions,
    pub(super) tx: &'a mpsc::Sender<RunEvent>,
    pub(super) cancel: &'a CancellationToken,
    pub(super) started: Instant,
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

    pub(super) async fn run(&self, req: ChatRequest) -> Result<(), RunError> {
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
    pub(super) async fn resume(
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

    /// Runs the server-side calls of one round. Consecutive read-only calls run concurrently;
    /// results keep the model's order.
    pub(super) async fn run_tools(
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

    pub(super) async fn run_tools_with(
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
