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
use super::{Target, Tool, ToolEnv, ToolError, builtin_tools, fit_budget};
use crate::config::PolicyConfig;
use crate::openai::ToolCall;
use crate::policy::{Decision, Level, Policy};

/// How a call the policy asks about was resolved.
#[derive(Debug, Clone)]
pub enum Approval {
    /// Run it; the text says who approved (for the log).
    Approved(String),
    /// Do not run it: the tool message for the model, and how the call ended.
    Refused(String, Status),
}

/// Resolves calls whose policy decision is `ask` (see `agent` for the approvers a run uses).
pub trait Approver: Send + Sync {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        reason: &'a str,
        targets: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>>;
}

/// Approves everything (`--yes`).
pub struct ApproveAll;

impl Approver for ApproveAll {
    fn approve<'a>(
        &'a self,
        _: &'a ToolCall,
        _: &'a str,
        _: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        Box::pin(std::future::ready(Approval::Approved("--yes".into())))
    }
}

/// Nobody can approve: every ask is refused with a message that says so.
pub struct NoApprover;

impl Approver for NoApprover {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        reason: &'a str,
        _: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
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
    policy: RwLock<Arc<Policy>>,
    /// What `policy` was compiled from, to add rules at run time.
    policy_config: Mutex<PolicyConfig>,
}

impl Registry {
    pub fn new(policy: Policy, policy_config: PolicyConfig) -> Registry {
        let tools = builtin_tools();
        let index = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name(), i))
            .collect();
        Registry {
            tools,
            index,
            policy: RwLock::new(Arc::new(policy)),
            policy_config: Mutex::new(policy_config),
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
        self.index.get(name).map(|&i| self.tools[i].as_ref())
    }

    /// All executable tools, in offering order.
    pub fn tools(&self) -> impl Iterator<Item = &dyn Tool> {
        self.tools.iter().map(|t| t.as_ref())
    }

    /// Whether toolpilot executes `name` and the policy has not disabled it.
    pub fn is_enabled(&self, name: &str) -> bool {
        self.get(name).is_some() && self.policy().level(name) != Level::Disabled
    }

    /// Whether the named tool is read-only (unknown names are not).
    pub fn read_only(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| t.read_only())
    }

    /// What the policy would decide for a call, without running it (`None` when the call is
    /// malformed: dispatching it will explain why).
    pub fn preflight(&self, call: &ToolCall, env: &ToolEnv) -> Option<Decision> {
        let tool = self.get(&call.name)?;
        let args = Args::parse(&call.arguments).ok()?;
        let invocation = tool.prepare(&args, env).ok()?;
        Some(
            self.policy()
                .decide(&call.name, &invocation.targets, &env.workspace),
        )
    }

    /// When the policy asks about a call: the reason, and the rules that would allow such
    /// calls ("always").
    pub fn ask_of(&self, call: &ToolCall, env: &ToolEnv) -> Option<(String, Vec<String>)> {
        let tool = self.get(&call.name)?;
        let args = Args::parse(&call.arguments).ok()?;
        let invocation = tool.prepare(&args, env).ok()?;
        match self
            .policy()
            .decide(&call.name, &invocation.targets, &env.workspace)
        {
            Decision::Ask { reason } => Some((
                reason,
                crate::approvals::rules_for(&call.name, &invocation.targets),
            )),
            _ => None,
        }
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
        let done = |content: String, status: Status| Outcome {
            content,
            status,
            duration: started.elapsed(),
        };
        let name = call.name.as_str();
        let Some(tool) = self.get(name) else {
            return done(
                format!("{name} was not run: there is no built-in tool with that name."),
                Status::Error,
            );
        };
        let args = match Args::parse(&call.arguments) {
            Ok(a) => a,
            Err(msg) => {
                return done(format!("{name} was not run: {msg}"), Status::Error);
            }
        };
        let invocation = match tool.prepare(&args, env) {
            Ok(inv) => inv,
            Err(ToolError::InvalidArguments(msg)) => {
                return done(
                    format!("{name} was not run because its arguments are invalid: {msg}"),
                    Status::Error,
                );
            }
            Err(ToolError::Failed(msg)) => {
                return done(format!("{name} failed: {msg}"), Status::Error);
            }
        };
        let decision = self
            .policy()
            .decide(name, &invocation.targets, &env.workspace);
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
            Decision::Ask { reason } => {
                match approver.approve(call, &reason, &invocation.targets).await {
                    Approval::Approved(by) => {
                        tracing::info!(tool = name, call_id = %call.id, by = %by, "approved");
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
            r = invocation.job => r,
            _ = env.cancel.cancelled() => Err(ToolError::Failed("cancelled".into())),
        };
        match result {
            Ok(text) => {
                let text = if text.is_empty() {
                    "(no output)".to_string()
                } else {
                    text
                };
                done(
                    fit_budget(
                        text,
                        env.config.output_budget,
                        "Ask for less at a time (a narrower path, pattern or line range).",
                    ),
                    Status::Ok,
                )
            }
            Err(ToolError::InvalidArguments(msg)) => done(
                format!("{name} was not run because its arguments are invalid: {msg}"),
                Status::Error,
            ),
            Err(ToolError::Failed(msg)) => done(format!("{name} failed: {msg}"), Status::Error),
        }
    }
}
