//! The tool registry and the one choke point where tool calls are run.
//!
//! [`Registry::dispatch`] parses the arguments, lets the tool prepare (argument checks, path
//! resolution), asks the policy, and only then runs the tool. Whatever happens, the result is
//! text for a `role: tool` message: a failing, refused or malformed call never fails the
//! request. Every decision is logged with the rule that made it.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::args::Args;
use super::{Tool, ToolEnv, ToolError, builtin_tools, fit_budget};
use crate::config::PolicyConfig;
use crate::openai::ToolCall;
use crate::policy::Target;
use crate::policy::{Decision, Level, Policy};

/// Who let a call run. Commands that only the policy or `--yes` let run keep protected paths
/// read-only; a person's answer lifts that for the call they approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The policy allows it (rules, defaults, saved "always allow" answers).
    Policy,
    /// `--yes` approved an `ask`.
    Yes,
    /// A person answered this very call.
    Person,
}

tokio::task_local! {
    static GRANT: Grant;
}

/// How the call now running was let through (inside a tool's job; [`Grant::Policy`] outside).
pub fn current_grant() -> Grant {
    GRANT.try_with(|g| *g).unwrap_or(Grant::Policy)
}

/// How a call the policy asks about was resolved.
#[derive(Debug, Clone)]
pub enum Approval {
    /// Run it; the text says who approved (for the log).
    Approved(String, Grant),
    /// Do not run it: the tool message for the model, and how the call ended.
    Refused(String, Status),
}

/// Resolves calls whose policy decision is `ask` (see `agent` for the approvers a run uses).
pub trait Approver: Send + Sync {
    /// `ask` is the policy's reason and whether only a person may approve.
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        ask: &'a Ask,
        targets: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>>;
}

/// Why a call needs approval, as the approver gets it.
#[derive(Debug, Clone)]
pub struct Ask {
    pub reason: String,
    /// `--yes` does not approve it (a protected path, a secret read by a command).
    pub person_only: bool,
}

/// The refusal `--yes` gives a call that only a person may approve (the policy's reason
/// already says why, and that `--yes` does not approve it).
pub fn person_only_refusal(call: &ToolCall, reason: &str) -> Approval {
    Approval::Refused(
        format!(
            "{} was not run: {reason}. A person can approve the call in the console or through \
             /v1/approvals, or allow it with a rule that names the path or the command \
             (policy.allow). Continue without it, or tell the user what you wanted to do and \
             why.",
            call.name
        ),
        Status::NeedsApproval,
    )
}

/// Approves every ordinary `ask` (`--yes`); refuses the ones only a person may approve.
pub struct ApproveAll;

impl Approver for ApproveAll {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        ask: &'a Ask,
        _: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        Box::pin(std::future::ready(if ask.person_only {
            person_only_refusal(call, &ask.reason)
        } else {
            Approval::Approved("--yes".into(), Grant::Yes)
        }))
    }
}

/// Nobody can approve: every ask is refused with a message that says so.
pub struct NoApprover;

impl Approver for NoApprover {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        ask: &'a Ask,
        _: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        let reason = &ask.reason;
        Box::pin(std::future::ready(Approval::Refused(
            format!(
                "{} was not run: it needs the user's approval ({reason}), and nobody can \
                 approve it in this session (the server runs without --yes and with \
                 approvals.mode = \"deny\"). Continue without it, or tell the user what you \
                 wanted to do so they can allow it.",
                call.name
            ),
            Status::NeedsApproval,
        )))
    }
}

/// How a dispatched call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// The tool ran and failed, or its arguments were wrong.
    Error,
    /// The policy refused it.
    Denied,
    /// The policy asks for approval and nobody could give it.
    NeedsApproval,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Denied => "denied",
            Status::NeedsApproval => "needs approval",
        }
    }
}

/// The result of one tool call, ready to become a tool message.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub content: String,
    pub status: Status,
    pub duration: Duration,
}

pub struct Registry {
    tools: Vec<Box<dyn Tool>>,
    index: HashMap<&'static str, usize>,
    /// Each tool's required arguments, from its schema (by the tool's index).
    required: Vec<Vec<String>>,
    /// Shared with the [`HopGate`]s of running calls, so new rules apply to them at once.
    policy: Arc<RwLock<Arc<Policy>>>,
    /// What `policy` was compiled from, to add rules at run time.
    policy_config: Mutex<PolicyConfig>,
    /// Tools that exist but cannot run with this configuration, and why (`search_web` without
    /// a provider). They are not offered; a call gets the reason.
    unavailable: HashMap<&'static str, String>,
    /// The MCP servers whose tools run here too (`mcp__SERVER__TOOL`), through the same
    /// policy, approvals, deadline, redaction and budget as the built-ins.
    mcp: Option<Arc<crate::mcp::Mcp>>,
}

/// The policy's verdict on a redirect hop of a call that is already running
/// (`fetch_url_content`): the same decision `dispatch` makes, asked again for the new target.
/// Lives here so that the registry stays the only caller of `Policy::decide`.
#[derive(Clone)]
pub struct HopGate {
    policy: Arc<RwLock<Arc<Policy>>>,
    workspace: Arc<crate::workspace::Workspace>,
    /// `--yes`: an `ask` is approved.
    approve_asks: bool,
}

impl HopGate {
    /// Whether `tool` may go on to `target` (reached by a redirect from `from_host`). `deny`
    /// stops it; `ask` stops it unless asks are approved (`--yes`) or the hop stays on the
    /// host that was approved; the error says what to do instead.
    pub fn check(&self, tool: &str, from_host: &str, target: &Target) -> Result<(), String> {
        let policy = match self.policy.read() {
            Ok(p) => Arc::clone(&p),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        };
        let decision = policy.decide(tool, std::slice::from_ref(target), &self.workspace);
        tracing::info!(
            tool,
            decision = decision.label(),
            reason = decision.reason(),
            "policy decision on a redirect"
        );
        let same_host = matches!(target, Target::Url { host, .. } if host == from_host);
        match decision {
            Decision::Allow { .. } => Ok(()),
            Decision::Ask {
                person_only: false, ..
            } if self.approve_asks || same_host => Ok(()),
            Decision::Ask { reason, .. } => Err(format!(
                "it is on another host, which needs its own approval ({reason}). To read it, \
                 call {tool} with that URL"
            )),
            Decision::Deny { reason } => Err(format!(
                "the permission policy refuses it ({reason}). Do not try to reach it another way"
            )),
        }
    }
}

impl Registry {
    pub fn new(policy: Policy, policy_config: PolicyConfig) -> Registry {
        let tools = builtin_tools();
        let index = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name(), i))
            .collect();
        let required = tools
            .iter()
            .map(|t| {
                t.parameters()
                    .get("required")
                    .and_then(|r| r.as_array())
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str().map(str::to_string))
                    .collect()
            })
            .collect();
        Registry {
            tools,
            index,
            required,
            policy: Arc::new(RwLock::new(Arc::new(policy))),
            policy_config: Mutex::new(policy_config),
            unavailable: HashMap::new(),
            mcp: None,
        }
    }

    /// Adds the tools of MCP servers.
    pub fn set_mcp(&mut self, mcp: Arc<crate::mcp::Mcp>) {
        self.mcp = Some(mcp);
    }

    /// The MCP servers, when any are configured.
    pub fn mcp(&self) -> Option<&Arc<crate::mcp::Mcp>> {
        self.mcp.as_ref().filter(|m| !m.is_empty())
    }

    /// The MCP tool offered under `name`, if its server lists it now.
    pub fn mcp_tool(&self, name: &str) -> Option<Arc<crate::mcp::McpTool>> {
        self.mcp.as_ref()?.tool(name)
    }

    /// Marks a tool as unavailable with this configuration: it is not offered, and a call
    /// gets `reason`.
    pub fn set_unavailable(&mut self, name: &str, reason: String) {
        if let Some(tool) = self.get(name) {
            self.unavailable.insert(tool.name(), reason);
        }
    }

    /// Why a built-in tool cannot run here, if it cannot.
    pub fn unavailable(&self, name: &str) -> Option<&str> {
        self.unavailable.get(name).map(String::as_str)
    }

    /// The gate running calls use to check redirect hops against the policy in force.
    pub fn hop_gate(
        &self,
        workspace: Arc<crate::workspace::Workspace>,
        approve_asks: bool,
    ) -> HopGate {
        HopGate {
            policy: Arc::clone(&self.policy),
            workspace,
            approve_asks,
        }
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<Policy> {
        match self.policy.read() {
            Ok(p) => Arc::clone(&p),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Adds allow rules to the policy in force (from "always allow" answers). A rule that does
    /// not compile is an error and changes nothing.
    pub fn allow(&self, rules: &[String]) -> Result<(), String> {
        let mut cfg = self
            .policy_config
            .lock()
            .map_err(|_| "the policy is unavailable".to_string())?;
        let mut next = cfg.clone();
        for r in rules {
            if !next.approved.contains(r) {
                next.approved.push(r.clone());
            }
        }
        let compiled = Policy::new(&next)?;
        *cfg = next;
        if let Ok(mut p) = self.policy.write() {
            *p = Arc::new(compiled);
        }
        Ok(())
    }

    /// The tool toolpilot executes under this name, if any.
    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        let i = *self.index.get(name)?;
        self.tools.get(i).map(|t| t.as_ref())
    }

    /// All executable tools, in offering order.
    pub fn tools(&self) -> impl Iterator<Item = &dyn Tool> {
        self.tools.iter().map(|t| t.as_ref())
    }

    /// Whether toolpilot executes `name`, can with this configuration, and the policy has
    /// not disabled it.
    pub fn is_enabled(&self, name: &str) -> bool {
        (self.get(name).is_some() || self.mcp_tool(name).is_some())
            && !self.unavailable.contains_key(name)
            && self.policy().level(name) != Level::Disabled
    }

    /// Whether the named tool is read-only (unknown names are not).
    pub fn read_only(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| t.read_only())
    }

    /// The tool's own checks (its messages say best what it needs), then the arguments its
    /// schema requires: a call without one is refused here, whatever the tool would have made
    /// of it (an empty file for `create_new_file` without `contents`).
    fn prepare(
        &self,
        tool: &dyn Tool,
        args: &Args,
        env: &ToolEnv,
    ) -> Result<super::Invocation, ToolError> {
        let invocation = tool.prepare(args, env)?;
        let required = self
            .index
            .get(tool.name())
            .and_then(|&i| self.required.get(i));
        let missing: Vec<&str> = required
            .into_iter()
            .flatten()
            .filter(|n| args.get(n).is_none())
            .map(String::as_str)
            .collect();
        if let Some(first) = missing.first() {
            let all = required.map(|r| r.join("`, `")).unwrap_or_default();
            return Err(ToolError::InvalidArguments(if missing.len() == 1 {
                format!("`{first}` is required ({} takes `{all}`)", tool.name())
            } else {
                format!(
                    "`{}` are required ({} takes `{all}`)",
                    missing.join("`, `"),
                    tool.name()
                )
            }));
        }
        Ok(invocation)
    }

    /// What the policy would decide for a call, without running it (`None` when the call is
    /// malformed: dispatching it will explain why).
    pub fn preflight(&self, call: &ToolCall, env: &ToolEnv) -> Option<Decision> {
        let (invocation, _) = self.prepare_call(call, env).ok()?;
        Some(
            self.policy()
                .decide(&call.name, &invocation.targets, &env.workspace),
        )
    }

    /// When the policy asks about a call: the reason, whether only a person may approve it,
    /// and the rules that would allow such calls ("always").
    pub fn ask_of(&self, call: &ToolCall, env: &ToolEnv) -> Option<(String, bool, Vec<String>)> {
        let (invocation, _) = self.prepare_call(call, env).ok()?;
        match self
            .policy()
            .decide(&call.name, &invocation.targets, &env.workspace)
        {
            Decision::Ask {
                reason,
                person_only,
            } => Some((
                reason,
                person_only,
                crate::approvals::rules_for(&call.name, &invocation.targets),
            )),
            _ => None,
        }
    }

    /// A call made ready to run: the built-in's or the MCP tool's invocation and its deadline,
    /// or the tool message that says why it cannot run.
    fn prepare_call(
        &self,
        call: &ToolCall,
        env: &ToolEnv,
    ) -> Result<(super::Invocation, Duration), (String, Status)> {
        let name = call.name.as_str();
        let tool = match self.get(name) {
            Some(t) => t,
            None => return self.prepare_mcp(call),
        };
        if let Some(why) = self.unavailable(name) {
            return Err((why.to_string(), Status::Error));
        }
        let args = Args::parse(&call.arguments)
            .map_err(|msg| (format!("{name} was not run: {msg}"), Status::Error))?;
        match self.prepare(tool, &args, env) {
            Ok(inv) => Ok((inv, tool.deadline(env))),
            Err(ToolError::InvalidArguments(msg)) => Err((
                format!("{name} was not run because its arguments are invalid: {msg}"),
                Status::Error,
            )),
            Err(ToolError::Failed(msg)) => Err((format!("{name} failed: {msg}"), Status::Error)),
        }
    }

    /// An MCP tool's call: the arguments object and the schema's required names checked here,
    /// the rest is the server's. No targets: rules name MCP tools, not what they act on.
    fn prepare_mcp(
        &self,
        call: &ToolCall,
    ) -> Result<(super::Invocation, Duration), (String, Status)> {
        let name = call.name.as_str();
        let mcp = self.mcp.as_ref();
        let Some((mcp, tool)) = mcp.and_then(|m| m.tool(name).map(|t| (Arc::clone(m), t))) else {
            let why = match mcp.and_then(|m| m.owns_name(name)) {
                Some(server) => format!(
                    "{name} was not run: the MCP server {server} does not list a tool by that \
                     name now (it may be restarting, or its tools changed). Call only the tools \
                     you are offered"
                ),
                None => format!("{name} was not run: there is no built-in tool with that name."),
            };
            return Err((why, Status::Error));
        };
        let args = Args::parse(&call.arguments)
            .map_err(|msg| (format!("{name} was not run: {msg}"), Status::Error))?;
        let required: Vec<&str> = tool
            .spec
            .pointer("/function/parameters/required")
            .and_then(|r| r.as_array())
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect();
        let missing: Vec<&str> = required
            .iter()
            .copied()
            .filter(|n| args.get(n).is_none())
            .collect();
        if !missing.is_empty() {
            return Err((
                format!(
                    "{name} was not run because its arguments are invalid: `{}` {} required \
                     ({name} takes `{}`)",
                    missing.join("`, `"),
                    if missing.len() == 1 { "is" } else { "are" },
                    required.join("`, `")
                ),
                Status::Error,
            ));
        }
        let deadline = mcp.deadline(&tool);
        let value = args.to_value();
        let job: super::Job =
            Box::pin(async move { mcp.call(&tool, value).await.map_err(ToolError::Failed) });
        Ok((
            super::Invocation {
                targets: Vec::new(),
                job,
            },
            deadline,
        ))
    }

    /// Runs one call of a built-in tool through the policy. Never fails: every problem
    /// becomes text the model can act on.
    pub async fn dispatch(
        &self,
        call: &ToolCall,
        env: &ToolEnv,
        approver: &dyn Approver,
    ) -> Outcome {
        let started = Instant::now();
        let name = call.name.as_str();
        // Every text this returns passes the redactor: tool results, and error texts that may
        // quote what a tool saw. Results are redacted before the budget cut, so a cut never
        // splits a secret into pieces the redactor no longer recognises.
        let redact = |text: String| match env.redactor.redact(&text) {
            std::borrow::Cow::Borrowed(_) => text,
            std::borrow::Cow::Owned(clean) => {
                tracing::info!(tool = name, call_id = %call.id, "secrets redacted from a tool result");
                clean
            }
        };
        let done = |content: String, status: Status| Outcome {
            content: redact(content),
            status,
            duration: started.elapsed(),
        };
        let (invocation, deadline) = match self.prepare_call(call, env) {
            Ok(ready) => ready,
            Err((text, status)) => return done(text, status),
        };
        let decision = self
            .policy()
            .decide(name, &invocation.targets, &env.workspace);
        let mut grant = Grant::Policy;
        tracing::info!(
            tool = name,
            call_id = %call.id,
            decision = decision.label(),
            reason = decision.reason(),
            "policy decision"
        );
        match decision {
            Decision::Deny { reason } => {
                return done(
                    format!(
                        "{name} was not run: the permission policy refuses this call ({reason}). \
                         Do not retry it; do without it or tell the user what you needed."
                    ),
                    Status::Denied,
                );
            }
            Decision::Ask {
                reason,
                person_only,
            } => {
                let ask = Ask {
                    reason,
                    person_only,
                };
                match approver.approve(call, &ask, &invocation.targets).await {
                    Approval::Approved(by, g) => {
                        tracing::info!(tool = name, call_id = %call.id, by = %by, "approved");
                        grant = g;
                    }
                    Approval::Refused(text, status) => {
                        tracing::info!(tool = name, call_id = %call.id, status = status.label(), "not approved");
                        return done(text, status);
                    }
                }
            }
            Decision::Allow { .. } => {}
        }
        let result = tokio::select! {
            r = tokio::time::timeout(deadline, GRANT.scope(grant, invocation.job)) => match r {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(tool = name, call_id = %call.id, secs = deadline.as_secs_f64(), "a tool call hit its deadline");
                    Err(ToolError::Failed(format!(
                        "it did not finish within its deadline of {} s and was abandoned; \
                         whatever it was doing may be incomplete. Try a narrower call, or tell \
                         the user what you were waiting for.",
                        deadline.as_secs_f64(),
                    )))
                }
            },
            _ = env.cancel.cancelled() => Err(ToolError::Failed("cancelled".into())),
        };
        match result {
            Ok(text) => {
                let text = if text.is_empty() {
                    "(no output)".to_string()
                } else {
                    text
                };
                Outcome {
                    content: fit_budget(
                        redact(text),
                        env.config.output_budget,
                        "Ask for less at a time (a narrower path, pattern or line range).",
                    ),
                    status: Status::Ok,
                    duration: started.elapsed(),
                }
            }
            Err(ToolError::InvalidArguments(msg)) => done(
                format!("{name} was not run because its arguments are invalid: {msg}"),
                Status::Error,
            ),
            Err(ToolError::Failed(msg)) => done(format!("{name} failed: {msg}"), Status::Error),
        }
    }
}
