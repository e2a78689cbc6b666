//! toolpilot's built-in tools for MCP clients: `POST/GET /mcp` (streamable HTTP, mounted by
//! [`super::router`] behind the same guard as the rest of the API) and `toolpilot mcp` (stdio).
//!
//! [`McpTools`] is an `rmcp` server handler. `tools/list` is the set a model is offered when its
//! client declares no tools (same names, descriptions and schemas); `tools/call` goes through
//! [`Registry::dispatch`](crate::tools::Registry::dispatch) like a model's call: policy,
//! approvals, deadline, redaction, output budget, checkpoint. Each call is a run of its own
//! (in `/v1/runs`, undone with `POST /v1/runs/{id}/undo`; over HTTP its id is the response's
//! `x-toolpilot-run-id`). What a tool says (failed, refused, not approved) is a result with
//! `isError`; a name toolpilot does not serve is a JSON-RPC error.
//!
//! An `ask` waits in `/v1/approvals` and the console (HTTP only) and is also put to the person
//! as an elicitation when the client declared form elicitation: as a server request for the
//! revisions with `initialize` (a session), as an `input_required` result (SEP-2322) for
//! 2026-07-28. Whichever answer comes first decides; `approvals.timeout_secs` bounds the wait.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, Implementation,
    InputRequest, InputRequiredResult, ListToolsResult, MetaObject, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::agent::Engine;
use crate::approvals::Verdict;
use crate::config::ApprovalMode;
use crate::openai::ToolCall;
use crate::policy::Target;
use crate::tools::registry::{Approval, Approver, Ask, Grant, Outcome, Status};

/// Where `/mcp` is served.
pub const PATH: &str = "/mcp";

/// The key of the approval question in an `input_required` result (SEP-2322).
const APPROVAL_INPUT: &str = "toolpilot_approval";

/// At most this many sessions (revisions with `initialize`) are open at once; each ends when
/// its client closes it or after rmcp's idle keep-alive (5 minutes).
pub const MAX_SESSIONS: usize = 256;

/// At most this many calls wait for an `input_required` retry at once; the oldest goes first.
const MAX_WAITING_RETRIES: usize = 64;

/// The MCP server handler: toolpilot's built-in tools, run under the policy.
#[derive(Clone)]
pub struct McpTools {
    engine: Arc<Engine>,
    /// Over HTTP: an ask also waits in `/v1/approvals` and the console. Over stdio nobody can
    /// reach those, so only an elicitation (or `--yes`, or a rule) can approve.
    approvals_api: bool,
    /// Calls paused on an `input_required` answer (2026-07-28 elicitation), by request state.
    retries: Arc<Retries>,
}

impl McpTools {
    /// `approvals_api`: whether a person can answer asks through `/v1/approvals` (the HTTP
    /// server) besides elicitation.
    pub fn new(engine: Arc<Engine>, approvals_api: bool) -> McpTools {
        McpTools {
            engine,
            approvals_api,
            retries: Arc::default(),
        }
    }

    /// The tools an MCP client is offered: the model's default set, as MCP tools.
    pub async fn tools(&self) -> Vec<Tool> {
        self.engine
            .default_tool_specs()
            .await
            .iter()
            .filter_map(|spec| self.mcp_tool(spec))
            .collect()
    }

    /// One OpenAI function spec as an MCP tool (the read-only ones say so in their hints).
    fn mcp_tool(&self, spec: &Value) -> Option<Tool> {
        let f = spec.get("function")?;
        let name = f.get("name")?.as_str()?.to_string();
        let description = f
            .get("description")
            .and_then(Value::as_str)
            .map(|d| Cow::Owned(d.to_string()));
        let schema = f.get("parameters")?.as_object()?.clone();
        let read_only = self.engine.registry.read_only(&name);
        let annotations = ToolAnnotations::new()
            .read_only(read_only)
            .destructive(!read_only)
            .open_world(matches!(
                name.as_str(),
                "fetch_url_content" | "search_web" | "run_terminal_command"
            ));
        Some(Tool::new_with_raw(name, description, Arc::new(schema)).with_annotations(annotations))
    }

    /// Why a name cannot be called (a JSON-RPC error: the request names no tool served here).
    async fn unknown_tool(&self, name: &str) -> ErrorData {
        let served: Vec<String> = self
            .tools()
            .await
            .into_iter()
            .map(|t| t.name.into_owned())
            .collect();
        let why = if self.engine.registry.get(name).is_some() {
            match self.engine.registry.unavailable(name) {
                Some(why) => format!("the built-in tool {name:?} is not available here: {why}"),
                None => format!(
                    "the built-in tool {name:?} is not offered: it is disabled by the policy \
                     (policy level `disabled`) or left out by agent.default_tools"
                ),
            }
        } else {
            format!("toolpilot has no tool named {name:?}")
        };
        ErrorData::invalid_params(
            format!(
                "{why}. The tools served here are: {} (tools/list gives their schemas)",
                served.join(", ")
            ),
            Some(json!({"tool": name})),
        )
    }

    /// Runs one call through the registry, as a run of its own.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        // A retry after `input_required`: the answer goes to the waiting call.
        if let Some(state) = &request.request_state {
            return self.resume(&name, state, request.input_responses).await;
        }
        if !self.engine.offers_by_default(&name).await {
            return Err(self.unknown_tool(&name).await);
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default()).to_string();
        // Over HTTP the run is the request's (`x-toolpilot-run-id`); over stdio a new one.
        let run_id = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<super::RunId>())
            .map(|r| r.0.clone())
            .unwrap_or_else(super::new_run_id);
        let tool_name = name.clone();
        let call = ToolCall {
            id: format!("mcp-{run_id}"),
            name,
            arguments,
            kind: None,
        };
        let elicit = self.elicitation(&context);
        let (asked_tx, asked_rx) = oneshot::channel();
        let mrtr = matches!(elicit, Elicit::InputRequired);
        let job = Job {
            engine: Arc::clone(&self.engine),
            approvals_api: self.approvals_api,
            run_id: run_id.clone(),
            call,
            elicit,
            asked: Mutex::new(Some(asked_tx)),
            // The request's token ends the call when its client goes away; a call that may
            // outlive its first request (`input_required`) has its own.
            cancel: if mrtr {
                tokio_util::sync::CancellationToken::new()
            } else {
                context.ct.clone()
            },
        };
        if !mrtr {
            return Ok(CallToolResponse::Complete(result_of(
                job.run().await,
                &run_id,
            )));
        }
        // 2026-07-28 with elicitation: the call runs in its own task; if it comes to ask a
        // person, the client gets `input_required` now and the call waits for the retry.
        let mut task = tokio::spawn(async move { job.run().await });
        tokio::select! {
            done = &mut task => Ok(CallToolResponse::Complete(result_of(joined(done), &run_id))),
            Ok(asked) = asked_rx => {
                let token = retry_token();
                let question = asked.question.clone();
                self.retries.insert(token.clone(), Waiting {
                    tool: tool_name,
                    task,
                    answer: Some(asked.answer),
                    run_id: run_id.clone(),
                    since: Instant::now(),
                    timeout: self.engine.config.approvals.timeout,
                });
                let mut inputs = std::collections::BTreeMap::new();
                inputs.insert(
                    APPROVAL_INPUT.to_string(),
                    InputRequest::Elicitation(ElicitRequest::new(question)),
                );
                Ok(CallToolResponse::InputRequired(
                    InputRequiredResult::new(Some(inputs), Some(token)),
                ))
            }
        }
    }

    /// The retry of a call that returned `input_required`: the person's answer (or none) goes
    /// to the waiting call, whose result is the answer to this request.
    async fn resume(
        &self,
        name: &str,
        state: &str,
        responses: Option<rmcp::model::InputResponses>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The answer is read first: a malformed retry leaves the call waiting for a good one.
        let verdict = match responses.as_ref().and_then(|r| r.get(APPROVAL_INPUT)) {
            Some(v) => match serde_json::from_value::<ElicitResult>(v.clone()) {
                Ok(r) => Some(verdict_of(&r)),
                Err(e) => {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "inputResponses.{APPROVAL_INPUT} is not an elicitation result \
                             ({e}); send the user's answer to the question, as \
                             {{\"action\": \"accept\" | \"decline\" | \"cancel\"}}"
                        ),
                        None,
                    ));
                }
            },
            None => None,
        };
        let Some(waiting) = self.retries.take(state, name) else {
            return Err(ErrorData::invalid_params(
                format!(
                    "no call of {name} waits for this requestState: it was answered, timed out \
                     (approvals.timeout_secs), belongs to another tool, or the server \
                     restarted. Call the tool again"
                ),
                None,
            ));
        };
        if let (Some(v), Some(tx)) = (verdict, waiting.answer) {
            let _ = tx.send(v);
        }
        let run_id = waiting.run_id;
        Ok(CallToolResponse::Complete(result_of(
            joined(waiting.task.await),
            &run_id,
        )))
    }

    /// How this request's client can be asked to approve a call.
    fn elicitation(&self, context: &RequestContext<RoleServer>) -> Elicit {
        if !self.engine.config.server.mcp_elicitation {
            return Elicit::No;
        }
        let form = context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.form.is_some() || e.url.is_none());
        if !form {
            return Elicit::No;
        }
        match context.protocol_version() {
            Some(v) if !v.has_initialize() => Elicit::InputRequired,
            _ => Elicit::Request(context.peer.clone()),
        }
    }
}

impl ServerHandler for McpTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("toolpilot", env!("CARGO_PKG_VERSION"))
                    .with_title("toolpilot workspace tools"),
            )
            // Short: some clients (Codex) repeat it before every tool's description.
            .with_instructions(
                "Workspace tools under toolpilot's permission policy: a refused call's result \
                 says why.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools().await))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context).await
    }
}

/// A call's outcome as a tool result (`isError` unless it ran and succeeded); `_meta` carries
/// the run id (for undo) and how the call ended.
fn result_of(outcome: Outcome, run_id: &str) -> CallToolResult {
    let content = vec![ContentBlock::text(outcome.content)];
    let mut result = if outcome.status == Status::Ok {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    let mut meta = MetaObject::default();
    meta.insert("toolpilot/run_id".into(), json!(run_id));
    meta.insert("toolpilot/status".into(), json!(outcome.status.label()));
    result.meta = Some(meta);
    result
}

/// A `requestState` for a call waiting for its retry: 128 random bits, so that no other client
/// can answer it by guessing.
fn retry_token() -> String {
    let mut bytes = [0u8; 16];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).is_err() {
        // The system's random source failed: still unique, if guessable.
        return format!("{}-{}", super::new_run_id(), fastrand::u64(..));
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The outcome of a call's task (one that panicked says so).
fn joined(r: Result<Outcome, tokio::task::JoinError>) -> Outcome {
    r.unwrap_or_else(|e| Outcome {
        content: format!("the tool call stopped unexpectedly: {e}"),
        status: Status::Error,
        duration: Duration::ZERO,
    })
}

/// How a person can be asked through the MCP client.
enum Elicit {
    /// The client did not declare (form) elicitation.
    No,
    /// A server request in the client's session (revisions with `initialize`).
    Request(rmcp::Peer<RoleServer>),
    /// An `input_required` result and a retry (2026-07-28, SEP-2322).
    InputRequired,
}

/// An ask that goes to the client as `input_required`: the question, and where its answer
/// goes.
struct Asked {
    question: ElicitRequestParams,
    answer: oneshot::Sender<Verdict>,
}

/// A call waiting for the retry that carries the person's answer.
struct Waiting {
    tool: String,
    task: tokio::task::JoinHandle<Outcome>,
    answer: Option<oneshot::Sender<Verdict>>,
    run_id: String,
    since: Instant,
    timeout: Duration,
}

/// The calls waiting for a retry, bounded in number and age.
#[derive(Default)]
struct Retries(Mutex<HashMap<String, Waiting>>);

impl Retries {
    fn insert(&self, token: String, waiting: Waiting) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // A client that never retries leaves its entry behind: once the approval has timed
        // out the call has ended and the entry goes; a call still running an hour after that
        // (a long command) is stopped.
        map.retain(|_, w| {
            let age = w.since.elapsed();
            if age > w.timeout + Duration::from_secs(3600) {
                w.task.abort();
                return false;
            }
            age < w.timeout + Duration::from_secs(60) || !w.task.is_finished()
        });
        while map.len() >= MAX_WAITING_RETRIES {
            let Some(oldest) = map
                .iter()
                .min_by_key(|(_, w)| w.since)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(w) = map.remove(&oldest) {
                w.task.abort();
            }
        }
        map.insert(token, waiting);
    }

    /// The call waiting under `token`, if it is a call of `tool`.
    fn take(&self, token: &str, tool: &str) -> Option<Waiting> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(token)?.tool != tool {
            return None;
        }
        map.remove(token)
    }
}

/// One MCP tool call, with what its approver needs.
struct Job {
    engine: Arc<Engine>,
    approvals_api: bool,
    run_id: String,
    call: ToolCall,
    elicit: Elicit,
    /// Taken by the first ask that goes out as `input_required`.
    asked: Mutex<Option<oneshot::Sender<Asked>>>,
    cancel: tokio_util::sync::CancellationToken,
}

impl Job {
    /// Dispatches the call as a run: recorded in `/v1/runs`, counted for the shutdown, ended
    /// with the server's grace period.
    async fn run(self) -> Outcome {
        let engine = Arc::clone(&self.engine);
        let _live = engine.live_run();
        let started = Instant::now();
        let call = &self.call;
        let prompt = format!("MCP tools/call {}", call.name);
        engine.runs.begin(&self.run_id, "mcp", &prompt, false, 0);
        engine.runs.event(
            &self.run_id,
            "tool_started",
            json!({"call": call.id, "tool": call.name,
                   "arguments": crate::text::preview(&call.arguments, 500)}),
        );
        let env = engine.tool_env(&self.run_id, &prompt, self.cancel.clone());
        let stopping = engine.stopping();
        let outcome = tokio::select! {
            o = engine.registry.dispatch(call, &env, &self) => o,
            // The client went away or sent `notifications/cancelled`: the call is dropped
            // wherever it was (a wait for approval is withdrawn, a command's tree killed).
            _ = self.cancel.cancelled() => Outcome {
                content: format!("{} was cancelled by the MCP client", call.name),
                status: Status::Error,
                duration: started.elapsed(),
            },
            _ = stopping.cancelled() => Outcome {
                content: format!(
                    "{} was stopped: the server is shutting down and its grace period \
                     (server.shutdown_grace_secs) ended. Call it again when the server is back",
                    call.name
                ),
                status: Status::Error,
                duration: started.elapsed(),
            },
        };
        engine.runs.tool(
            &self.run_id,
            &call.name,
            outcome.status.label(),
            outcome.duration,
            json!({"call": call.id, "tool": call.name, "status": outcome.status.label(),
                   "ms": outcome.duration.as_millis() as u64,
                   "result_bytes": outcome.content.len(),
                   "result": crate::text::preview(&outcome.content, 300)}),
        );
        engine.runs.end(
            &self.run_id,
            "done",
            started.elapsed(),
            json!({"via": "mcp", "ms": started.elapsed().as_millis() as u64}),
        );
        outcome
    }

    /// Waits for an answer: `/v1/approvals` (over HTTP), the client's elicitation (`elicit`),
    /// or both; `None` when nobody answered within the timeout. The flag says whether the
    /// answer came from the client.
    async fn answer(&self, ask: &Ask, targets: &[Target], elicit: bool) -> Option<(Verdict, bool)> {
        let engine = &self.engine;
        let timeout = engine.config.approvals.timeout;
        let name = &self.call.name;
        let ticket = self.approvals_api.then(|| {
            engine.approvals.ask(
                &self.run_id,
                name,
                &self.call.arguments,
                &ask.reason,
                crate::approvals::rules_for(name, targets),
                timeout,
            )
        });
        if let Some(t) = &ticket {
            tracing::info!(tool = %name, approval = %t.info.id, "an MCP call waits for approval");
            engine.runs.event(
                &self.run_id,
                "approval",
                json!({"approval": t.info.id, "tool": name, "outcome": "waiting",
                       "reason": ask.reason}),
            );
        }
        let question = self.question(ask);
        let elicited: Pin<Box<dyn Future<Output = Option<Verdict>> + Send + '_>> = match &self
            .elicit
        {
            _ if !elicit => Box::pin(std::future::pending()),
            Elicit::No => Box::pin(std::future::pending()),
            Elicit::Request(peer) => Box::pin(async move {
                match peer
                    .create_elicitation_with_timeout(question, Some(timeout))
                    .await
                {
                    Ok(r) => Some(verdict_of(&r)),
                    Err(e) => {
                        tracing::info!(error = %e, "the MCP client did not answer the elicitation");
                        std::future::pending().await
                    }
                }
            }),
            Elicit::InputRequired => {
                let (tx, rx) = oneshot::channel();
                let sent = self
                    .asked
                    .lock()
                    .ok()
                    .and_then(|mut a| a.take())
                    .map(|asked| {
                        asked
                            .send(Asked {
                                question,
                                answer: tx,
                            })
                            .is_ok()
                    });
                Box::pin(async move {
                    match sent {
                        Some(true) => match rx.await {
                            Ok(v) => Some(v),
                            Err(_) => std::future::pending().await,
                        },
                        _ => std::future::pending().await,
                    }
                })
            }
        };
        let by_api = async move {
            match ticket {
                Some(t) => t.wait(timeout).await,
                None => std::future::pending().await,
            }
        };
        let verdict = tokio::select! {
            v = by_api => v.map(|v| (v, false)),
            v = elicited => v.map(|v| (v, true)),
            _ = tokio::time::sleep(timeout) => None,
        };
        engine.runs.event(
            &self.run_id,
            "approval",
            json!({"tool": name, "outcome": match &verdict {
                Some((Verdict::Approve { .. }, _)) => "approved",
                Some((Verdict::Deny { .. }, _)) => "denied",
                None => "timed out",
            }, "by": match &verdict {
                Some((_, true)) => "the MCP client",
                Some((_, false)) => "the user",
                None => "nobody",
            }}),
        );
        verdict
    }

    /// The elicitation that asks the person about this call.
    fn question(&self, ask: &Ask) -> ElicitRequestParams {
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: format!(
                "toolpilot: allow {} ({})?\nArguments: {}\nAccept runs it once; decline refuses \
                 it.",
                self.call.name,
                ask.reason,
                crate::text::preview(&self.call.arguments, 400)
            ),
            requested_schema: ElicitationSchema::new(Default::default()),
        }
    }
}

/// What an elicitation answer means for the call.
fn verdict_of(r: &ElicitResult) -> Verdict {
    match r.action {
        ElicitationAction::Accept => Verdict::Approve { always: false },
        ElicitationAction::Decline => Verdict::Deny { reason: None },
        // Cancel (the question dismissed) and whatever later revisions add.
        _ => Verdict::Deny {
            reason: Some("dismissed the question".into()),
        },
    }
}

impl Approver for Job {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        ask: &'a Ask,
        targets: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        Box::pin(async move {
            let cfg = &self.engine.config;
            let name = &call.name;
            let reason = &ask.reason;
            if cfg.agent.approve_asks && !ask.person_only {
                return Approval::Approved("--yes".into(), Grant::Yes);
            }
            // The client's answer is not known to be a person's (a client may answer on its
            // own, as `codex exec` does): it never approves what only a person may.
            let elicits = !matches!(self.elicit, Elicit::No) && !ask.person_only;
            if cfg.approvals.mode == ApprovalMode::Deny && !elicits {
                return Approval::Refused(
                    format!(
                        "{name} was not run: it needs the user's approval ({reason}), and this \
                         server refuses such calls at once (approvals.mode = \"deny\"). Do \
                         without it, or tell the user what you wanted to do so they can allow \
                         it with a rule."
                    ),
                    Status::NeedsApproval,
                );
            }
            if !self.approvals_api && !elicits {
                let why = if ask.person_only {
                    "only a person can approve it, in the console or through /v1/approvals of \
                     `toolpilot serve`, and `toolpilot mcp` (stdio) has neither. The user can \
                     allow it with a rule that names the path or command (policy.allow), or \
                     use MCP over HTTP (/mcp), where asks wait in the console."
                } else {
                    "nobody can give it here: this MCP client did not declare elicitation and \
                     `toolpilot mcp` (stdio) has no approval API. The user can start it with \
                     --yes or allow the call with a rule (policy.allow); or use MCP over HTTP \
                     (/mcp), where asks wait in the console."
                };
                return Approval::Refused(
                    format!(
                        "{name} was not run: it needs the user's approval ({reason}), and {why}"
                    ),
                    Status::NeedsApproval,
                );
            }
            match self.answer(ask, targets, elicits).await {
                // An answer from the client counts like `--yes`: commands keep protected paths
                // read-only; only an answer in the console or /v1/approvals lifts that.
                Some((Verdict::Approve { .. }, true)) => {
                    Approval::Approved("the MCP client (elicitation)".into(), Grant::Yes)
                }
                Some((Verdict::Approve { always }, false)) => Approval::Approved(
                    if always {
                        "the user (always)".into()
                    } else {
                        "the user".into()
                    },
                    Grant::Person,
                ),
                Some((Verdict::Deny { reason: why }, _)) => Approval::Refused(
                    format!(
                        "{name} was not run: the user denied it{}. Do not retry it; do without \
                         it, or ask the user how to proceed.",
                        why.map(|w| format!(" (\"{w}\")")).unwrap_or_default()
                    ),
                    Status::Denied,
                ),
                None => Approval::Refused(
                    format!(
                        "{name} was not run: it needs the user's approval ({reason}), and nobody \
                         approved it within {} s (approvals.timeout_secs). Do without it, or \
                         tell the user what you wanted to do so they can allow it.",
                        cfg.approvals.timeout.as_secs_f64()
                    ),
                    Status::NeedsApproval,
                ),
            }
        })
    }
}

/// In front of rmcp's HTTP service: a POST body that is not one JSON-RPC message gets a
/// JSON-RPC error that says what `/mcp` takes (rmcp answers such bodies with a bare 415), a
/// `tools/call` without a tool name is `invalid_params` (rmcp would call it an unknown
/// method), and rmcp's terse "method not found" names what is served.
pub async fn protocol_errors(
    limit: usize,
    sessions: Arc<LocalSessionManager>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{Method, StatusCode};
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                Value::Null,
                -32600,
                format!(
                    "Invalid Request: the body is larger than server.max_body_bytes ({limit} \
                     bytes) or was cut off"
                ),
            );
        }
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32700,
                format!(
                    "Parse error: the body is not JSON ({e}). POST /mcp takes one JSON-RPC 2.0 \
                     message, as MCP's streamable HTTP transport sends it"
                ),
            );
        }
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    let is_response = message.get("result").is_some() || message.get("error").is_some();
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0")
        || (method.is_none() && !is_response)
    {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            -32600,
            "Invalid Request: POST /mcp takes one JSON-RPC 2.0 message: an object with \
             \"jsonrpc\": \"2.0\" and either a \"method\" (a request or a notification) or a \
             \"result\" or \"error\" (a response); batches are not accepted"
                .into(),
        );
    }
    if method.as_deref() == Some("initialize") {
        let open = sessions.sessions.read().await.len();
        if open >= MAX_SESSIONS {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                -32603,
                format!(
                    "too many MCP sessions are open ({open}, the limit is {MAX_SESSIONS}): a \
                     session ends when its client closes it (DELETE /mcp) or after 5 minutes \
                     without use. Protocol revision 2026-07-28 needs no session"
                ),
            );
        }
    }
    if let Some((code, text)) = unusable_request(&message) {
        return rpc_error(StatusCode::BAD_REQUEST, id, code, text);
    }
    let resp = next
        .run(axum::extract::Request::from_parts(
            parts,
            axum::body::Body::from(bytes),
        ))
        .await;
    match method {
        Some(m) if resp.status().is_client_error() => name_unknown_method(resp, &m).await,
        _ => resp,
    }
}

/// rmcp's "method not found" error says only the method: say what is served.
async fn name_unknown_method(
    resp: axum::response::Response,
    method: &str,
) -> axum::response::Response {
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return axum::response::Response::from_parts(parts, axum::body::Body::empty());
    };
    let mut v: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => {
            return axum::response::Response::from_parts(parts, axum::body::Body::from(bytes));
        }
    };
    if reword_method_not_found(&mut v, method) {
        let mut parts = parts;
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        return axum::response::Response::from_parts(parts, axum::body::Body::from(v.to_string()));
    }
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// The error a request rmcp would misread gets instead: a `tools/call` without a usable
/// tool name or arguments (rmcp would call it an unknown method).
fn unusable_request(message: &Value) -> Option<(i64, String)> {
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let params = message.get("params");
    let name_ok = params
        .and_then(|p| p.get("name"))
        .is_some_and(Value::is_string);
    let args_ok = params
        .and_then(|p| p.get("arguments"))
        .is_none_or(|a| a.is_object() || a.is_null());
    (!name_ok || !args_ok).then(|| {
        (
            -32602,
            "Invalid params: tools/call takes params.name, the tool's name as a string \
             (tools/list gives the names and schemas), and params.arguments, an object"
                .to_string(),
        )
    })
}

/// rmcp's "method not found" says only the method: say what is served. Whether it was one.
fn reword_method_not_found(v: &mut Value, method: &str) -> bool {
    if v["error"]["code"] != json!(-32601) {
        return false;
    }
    v["error"]["message"] = json!(format!(
        "Method not found: toolpilot's MCP server does not answer {method:?}; it answers \
         server/discover, initialize, ping, tools/list and tools/call"
    ));
    true
}

/// A JSON-RPC error as the whole HTTP response.
fn rpc_error(
    status: axum::http::StatusCode,
    id: Value,
    code: i64,
    message: String,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            .to_string(),
    )
        .into_response()
}

/// `toolpilot mcp`'s transport: JSON-RPC messages, one a line, on stdin and stdout. Unlike the
/// SDK's line transport, which drops a line it cannot read, a line that is not JSON gets a
/// parse error (`-32700`) and a request it cannot read an `invalid_request` or
/// `invalid_params` error that says why, so the client learns what went wrong; notifications
/// it does not know are ignored, as the protocol asks. Lines longer than `max_line` bytes are
/// refused and skipped.
pub struct StdioLines<R, W> {
    lines: tokio_util::codec::FramedRead<R, tokio_util::codec::LinesCodec>,
    out: Arc<tokio::sync::Mutex<W>>,
    max_line: usize,
}

impl<R, W> StdioLines<R, W>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(input: R, output: W, max_line: usize) -> StdioLines<R, W> {
        StdioLines {
            lines: tokio_util::codec::FramedRead::new(
                input,
                tokio_util::codec::LinesCodec::new_with_max_length(max_line),
            ),
            out: Arc::new(tokio::sync::Mutex::new(output)),
            max_line,
        }
    }

    /// Writes one line (a message, or an error for a line that could not be read).
    fn write(
        out: &Arc<tokio::sync::Mutex<W>>,
        line: String,
    ) -> impl Future<Output = std::io::Result<()>> + Send + 'static {
        let out = Arc::clone(out);
        async move {
            use tokio::io::AsyncWriteExt;
            // One write of the whole line: a message and its newline never come apart.
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            let mut w = out.lock().await;
            w.write_all(&bytes).await?;
            w.flush().await
        }
    }

    /// Writes an error for a line that could not be read, without waiting: `receive` must stay
    /// cancel-safe (rmcp polls it in a `select!` and drops it when another branch wins), so
    /// after a line is taken from the reader nothing in it awaits.
    fn answer(&self, error: Value) {
        let write = Self::write(&self.out, error.to_string());
        tokio::spawn(async move {
            if let Err(e) = write.await {
                tracing::warn!(error = %e, "cannot write to stdout");
            }
        });
    }

    /// The error a line that is not a message gets, if any (`None`: skip it silently).
    fn unreadable(value: Option<&Value>, e: &serde_json::Error) -> Option<Value> {
        let error = |id: Value, code: i64, message: String| json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        let v = match value {
            Some(v) => v,
            None => {
                return Some(error(
                    Value::Null,
                    -32700,
                    format!(
                        "Parse error: a line on stdin is not JSON ({e}); `toolpilot mcp` reads \
                         one JSON-RPC 2.0 message a line"
                    ),
                ));
            }
        };
        let id = v.get("id").cloned();
        match (v.get("method").and_then(Value::as_str), id) {
            // A notification nobody can answer: ignored, as unknown notifications are.
            (Some(_), None) => None,
            (Some(method), Some(id)) => Some(error(
                id,
                -32602,
                format!("Invalid params for {method}: {e}"),
            )),
            (None, id) => Some(error(
                id.unwrap_or(Value::Null),
                -32600,
                format!(
                    "Invalid Request: not a JSON-RPC 2.0 message ({e}); send an object with \
                     \"jsonrpc\": \"2.0\" and a \"method\", or a response with \"result\" or \
                     \"error\""
                ),
            )),
        }
    }
}

impl<R, W> rmcp::transport::Transport<RoleServer> for StdioLines<R, W>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let line = serde_json::to_value(&item).map(|mut v| {
            if let Some(method) = v["error"]["message"].as_str().map(str::to_string) {
                reword_method_not_found(&mut v, &method);
            }
            v.to_string()
        });
        let write = line.map(|l| Self::write(&self.out, l));
        async move {
            match write {
                Ok(w) => w.await,
                Err(e) => Err(std::io::Error::other(e)),
            }
        }
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleServer>> {
        use futures_util::StreamExt;
        use tokio_util::codec::LinesCodecError;
        loop {
            let line = match self.lines.next().await? {
                Ok(line) => line,
                Err(LinesCodecError::MaxLineLengthExceeded) => {
                    let refused = json!({"jsonrpc": "2.0", "id": null, "error": {
                    "code": -32600,
                    "message": format!(
                        "Invalid Request: a line on stdin is longer than {} bytes \
                         (server.max_body_bytes); it was skipped",
                        self.max_line
                    )}});
                    self.answer(refused);
                    continue;
                }
                Err(LinesCodecError::Io(e)) => {
                    tracing::warn!(error = %e, "reading stdin failed: the MCP session ends");
                    return None;
                }
            };
            let line = line.trim_start_matches('\u{feff}').trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            let error = match serde_json::from_str::<Value>(line) {
                Err(e) => Self::unreadable(None, &e),
                Ok(v) => match unusable_request(&v) {
                    Some((code, text)) => Some(json!({"jsonrpc": "2.0",
                        "id": v.get("id").cloned().unwrap_or(Value::Null),
                        "error": {"code": code, "message": text}})),
                    None => match serde_json::from_value(v.clone()) {
                        Ok(message) => return Some(message),
                        Err(e) => Self::unreadable(Some(&v), &e),
                    },
                },
            };
            if let Some(error) = error {
                self.answer(error);
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        use tokio::io::AsyncWriteExt;
        self.out.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(tool: &str, since: Instant) -> Waiting {
        Waiting {
            tool: tool.into(),
            task: tokio::spawn(std::future::pending()),
            answer: None,
            run_id: "r".into(),
            since,
            timeout: Duration::from_secs(120),
        }
    }

    #[tokio::test]
    async fn waiting_retries_are_bounded_and_taken_only_for_their_tool() {
        let retries = Retries::default();
        let start = Instant::now();
        for i in 0..MAX_WAITING_RETRIES + 3 {
            retries.insert(
                format!("t{i}"),
                waiting("create_new_file", start + Duration::from_millis(i as u64)),
            );
        }
        let len = retries.0.lock().unwrap().len();
        assert_eq!(len, MAX_WAITING_RETRIES);
        // The oldest went first.
        for i in 0..3 {
            assert!(retries.take(&format!("t{i}"), "create_new_file").is_none());
        }
        let last = format!("t{}", MAX_WAITING_RETRIES + 2);
        assert!(
            retries.take(&last, "read_file").is_none(),
            "another tool's retry"
        );
        let w = retries
            .take(&last, "create_new_file")
            .expect("still waiting");
        assert_eq!(w.tool, "create_new_file");
        assert!(
            retries.take(&last, "create_new_file").is_none(),
            "taken once"
        );
    }

    #[test]
    fn retry_tokens_are_128_random_bits() {
        let a = retry_token();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, retry_token());
    }
}
