//! The tool registry and the one choke point where tool calls are run.
//!
//! [`Registry::dispatch`] parses the arguments, lets the tool prepare (argument checks, path
//! resolution), asks the policy, and only then runs the tool. Whatever happens, the result is
//! text for a `role: tool` message: a failing, refused or malformed call never fails the
//! request. Every decision is logged with the rule that made it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::args::Args;
use super::{Tool, ToolEnv, ToolError, builtin_tools, fit_budget};
use crate::openai::ToolCall;
use crate::policy::{Decision, Level, Policy};

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
    policy: Policy,
}

impl Registry {
    pub fn new(policy: Policy) -> Registry {
        let tools = builtin_tools();
        let index = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name(), i))
            .collect();
        Registry {
            tools,
            index,
            policy,
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
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
        self.get(name).is_some() && self.policy.level(name) != Level::Disabled
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
            self.policy
                .decide(&call.name, &invocation.targets, &env.workspace),
        )
    }

    /// Runs one call of a built-in tool through the policy. Never fails: every problem
    /// becomes text the model can act on.
    pub async fn dispatch(&self, call: &ToolCall, env: &ToolEnv, approve_asks: bool) -> Outcome {
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
            .policy
            .decide(name, &invocation.targets, &env.workspace);
        let approved_by_flag = matches!(decision, Decision::Ask { .. }) && approve_asks;
        tracing::info!(
            tool = name,
            call_id = %call.id,
            decision = decision.label(),
            reason = decision.reason(),
            approved_by_flag,
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
            Decision::Ask { reason } if !approve_asks => {
                return done(
                    format!(
                        "{name} was not run: it needs the user's approval ({reason}), and nobody \
                         can approve it in this session (the server runs without --yes). \
                         Continue without it, or tell the user what you wanted to do so they \
                         can allow it."
                    ),
                    Status::NeedsApproval,
                );
            }
            Decision::Ask { .. } | Decision::Allow { .. } => {}
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
