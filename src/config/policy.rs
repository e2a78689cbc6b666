//! `[policy]` (and the policy keys of `[terminal]`): tool levels, rules, protected paths.
//!
//! The rules stay text here; `policy::Policy::new` compiles them and names the key of a bad
//! one.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::terminal::TerminalFile;
use super::{ConfigError, err};
use crate::policy::command::WritesSwitch;
use crate::policy::{DEFAULT_PROTECTED, Level, known_tool_names};

#[derive(Debug, Clone, Default)]
pub struct PolicyConfig {
    /// Per-tool base policy overrides.
    pub tools: BTreeMap<String, Level>,
    pub allow: Vec<String>,
    pub ask: Vec<String>,
    pub deny: Vec<String>,
    /// Globs of paths that are not written without approval.
    pub protected: Vec<String>,
    /// Command rules with examples.
    pub commands: Vec<CommandRuleConfig>,
    /// Use the built-in command rules.
    pub command_defaults: bool,
    /// `policy.command_writes`: whether commands that write files inside the workspace (not
    /// protected paths) run without approval.
    pub command_writes: crate::policy::command::WritesSwitch,
    /// What an otherwise allowed command becomes without a sandbox.
    pub unsandboxed: Level,
    /// Allow rules from "always allow" answers (not from the config file). They rank above
    /// `ask` rules and protected paths, since the user approved exactly these calls; `deny`
    /// and sensitive files still win.
    pub approved: Vec<String>,
}

/// A command rule with examples (`[[policy.commands]]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandRuleConfig {
    /// allow, ask or deny
    pub decision: String,
    /// A glob over one command's words, e.g. `make lint*`.
    pub pattern: String,
    /// Commands the pattern must match (checked at start-up).
    #[serde(default)]
    pub examples: Vec<String>,
    /// Commands it must not match.
    #[serde(default)]
    pub not_examples: Vec<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct PolicyFile {
    pub(super) tools: Option<BTreeMap<String, String>>,
    pub(super) allow: Option<Vec<String>>,
    pub(super) ask: Option<Vec<String>>,
    pub(super) deny: Option<Vec<String>>,
    pub(super) protected: Option<Vec<String>>,
    pub(super) commands: Option<Vec<CommandRuleConfig>>,
    pub(super) command_writes: Option<String>,
}

/// `t` holds `terminal.unsandboxed` and `terminal.default_rules`, which are policy.
pub(super) fn resolve(p: PolicyFile, t: &TerminalFile) -> Result<PolicyConfig, ConfigError> {
    let tool_names = known_tool_names();
    let mut levels = BTreeMap::new();
    for (tool, level) in p.tools.unwrap_or_default() {
        if !tool_names.contains(&tool.as_str()) {
            return Err(err(format!(
                "policy.tools.{tool}: there is no built-in tool named {tool:?}; known tools: {}",
                tool_names.join(", ")
            )));
        }
        let parsed = Level::parse(&level).ok_or_else(|| {
            err(format!(
                "policy.tools.{tool}: {level:?} is not a policy; use allow, ask or deny \
                 (or allowedWithoutPermission, allowedWithPermission, disabled)"
            ))
        })?;
        levels.insert(tool, parsed);
    }
    let unsandboxed = match t.unsandboxed.as_deref() {
        None => Level::Ask,
        Some(v) => Level::parse(v).ok_or_else(|| {
            err(format!(
                "terminal.unsandboxed: {v:?} is not a policy; use allow, ask or deny"
            ))
        })?,
    };
    Ok(PolicyConfig {
        tools: levels,
        allow: p.allow.unwrap_or_default(),
        ask: p.ask.unwrap_or_default(),
        deny: p.deny.unwrap_or_default(),
        protected: p
            .protected
            .unwrap_or_else(|| DEFAULT_PROTECTED.iter().map(|s| s.to_string()).collect()),
        commands: p.commands.unwrap_or_default(),
        command_defaults: t.default_rules.unwrap_or(true),
        command_writes: match p.command_writes.as_deref() {
            None | Some("ask") => WritesSwitch::Ask,
            Some("allow") => WritesSwitch::Allow,
            Some(v) => {
                return Err(err(format!(
                    "policy.command_writes: {v:?} is not a choice; use \"ask\" (commands \
                     that write files need approval) or \"allow\" (they run when every \
                     file they write is inside the workspace and not protected)"
                )));
            }
        },
        unsandboxed,
        approved: Vec::new(),
    })
}
