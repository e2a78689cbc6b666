//! One round: the request built (context fit, tool mode, context size), sent with retries,
//! and the answer accumulated while its text is forwarded.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::run::{Run, RunError, TextTail};
use super::{RunEvent, context, textmode};
use crate::config::ToolMode;
use crate::error::ApiError;
use crate::openai::ChatRequest;
use crate::upstream::accumulate::{Accumulator, Piece, Round};
use crate::upstream::route::Route;
use crate::upstream::{Hints, RequestBody, UpstreamError};

impl Run<'_> {
    /// The request for one round: the conversation fitted to the model's context window,
    /// in the upstream's tool mode, with the context size it needs.
    pub(super) async fn prepare_round(
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
        let block = self.system_block(run_prompt, messages).await;
        let block = block.as_deref();
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
        let cfg = route.endpoint.cfg.as_ref();
        let request_usage = cfg.is_none_or(|u| u.request_usage);
        // Nothing of a round reaches a client that does not stream before the round ends, so
        // the upstream is asked for one answer, which it produces faster than a stream.
        let stream = self.opts.live || cfg.is_none_or(|u| u.always_stream);
        let body = build_body(
            req,
            &route.model,
            &wire,
            if text_mode { None } else { specs },
            request_usage,
            stream,
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

    /// toolpilot's system message for this round. Auto-attached rules look at the files the
    /// run touched (their metadata, and the text a regex rule matches): that is done on a
    /// blocking thread, with copies of the run's prompt state and conversation.
    async fn system_block(
        &self,
        run_prompt: &mut crate::prompt::RunPrompt,
        messages: &[Value],
    ) -> Option<String> {
        let ws = &self.engine.workspace;
        if !run_prompt.reads_files() {
            return run_prompt.block(ws, messages).map(str::to_string);
        }
        let mut rp = run_prompt.clone();
        let ws = Arc::clone(ws);
        let conversation = messages.to_vec();
        let work = tokio::task::spawn_blocking(move || {
            let block = rp.block(&ws, &conversation).map(str::to_string);
            (rp, block)
        });
        match work.await {
            Ok((rp, block)) => {
                *run_prompt = rp;
                block
            }
            Err(_) => run_prompt
                .block(&self.engine.workspace, messages)
                .map(str::to_string),
        }
    }

    /// One round, retried with backoff on retryable failures as long as nothing of the
    /// failed attempt was forwarded to the client. An upstream that cannot be reached (or
    /// answers 5xx) is `Unavailable` once its retries are spent, at once for connection
    /// errors when a fallback is configured; a request the model's context cannot hold is
    /// `Overflow`. Both are for the caller, which can change the request or the upstream.
    pub(super) async fn round_with_retries(
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
                    // A server that asks for a longer wait than we would hold the client for
                    // gets its answer passed on (429 with `Retry-After`) rather than waited out.
                    let too_long = e.retry_after().is_some_and(|ra| ra > cap);
                    if too_long {
                        tracing::warn!(error = %e, retry_after = ?e.retry_after(), max_wait = ?cap, "the upstream asks for a longer wait than upstream.retry_max_wait_secs; passing its answer on");
                    }
                    if e.retryable()
                        && !forwarded
                        && attempt < max_retries
                        && !skip_retries
                        && !too_long
                    {
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

    pub(super) async fn one_round(
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
}

/// Why a round could not be had from the current upstream.
#[derive(Debug)]
pub(super) enum RoundFailure {
    /// The request does not fit the model's context window.
    Overflow(UpstreamError),
    /// The upstream cannot be reached or answers 5xx (a fallback may help).
    Unavailable(UpstreamError),
    Fatal(RunError),
}

/// One round's request, ready to send.
pub(super) struct Prepared {
    pub(super) body: RequestBody,
    /// Estimated prompt tokens (calibrated with the usage the upstream reports).
    pub(super) estimate: u64,
    pub(super) hints: Hints,
}

/// What a run knows about its context budget.
pub(super) struct ContextState {
    pub(super) est: context::Estimator,
    /// Tokens the client asked to leave for the answer.
    pub(super) max_answer: Option<u64>,
    /// A limit learned from an overflow.
    pub(super) limit: Option<u64>,
    /// The context size asked of Ollama so far.
    pub(super) num_ctx: Option<u64>,
}

impl ContextState {
    pub(super) fn new(req: &ChatRequest) -> ContextState {
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
    pub(super) fn reserve(&self, w: u64) -> u64 {
        self.max_answer.unwrap_or(4096).min(w / 4)
    }
}

#[derive(Debug)]
pub(super) enum RoundError {
    ClientGone,
    Upstream(UpstreamError),
}

impl From<UpstreamError> for RoundError {
    fn from(e: UpstreamError) -> Self {
        RoundError::Upstream(e)
    }
}

/// Exponential backoff with full jitter, or the server's `Retry-After`, capped (the caller
/// does not wait at all for a `Retry-After` beyond the cap).
pub(super) fn backoff(
    attempt: u32,
    retry_after: Option<Duration>,
    base: Duration,
    cap: Duration,
) -> Duration {
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
    stream: bool,
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
        m.serialize_entry("stream", &stream)?;
        if stream && request_usage {
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
