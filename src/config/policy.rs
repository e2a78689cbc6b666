//! `[policy]` (and the policy keys of `[terminal]`): tool levels, rules, protected paths.
//!
//! The rules stay text here: `policy::Policy::new` compiles them and names the key of a bad
//! one (`policy.deny[0] "read_file(": …`). Whoever turns a `Config` into a running policy
//! (`Engine::new`, the binary's commands) reports that error, so a bad rule still stops
//! start-up with its key named, and config needs nothing from `policy`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::terminal::TerminalFile;
use super::{ConfigError, err};

/// A tool's base policy, in Continue's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// `allowedWithoutPermission`
    Allow,
    /// `allowedWithPermission`
    Ask,
    /// `disabled`: never offered to the model, calls refused.
    Disabled,
}

impl Default for Level {
    /// Unknown means ask.
    fn default() -> Self {
        Level::Ask
    }
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "allowedWithoutPermission" | "allow" => Some(Level::Allow),
            "allowedWithPermission" | "ask" => Some(Level::Ask),
            "disabled" | "deny" => Some(Level::Disabled),
            _ => None,
        }
    }

    /// Continue's name for the level.
    pub fn as_continue(self) -> &'static str {
        match self {
            Level::Allow => "allowedWithoutPermission",
            Level::Ask => "allowedWithPermission",
            Level::Disabled => "disabled",
        }
    }
}

/// Every tool name of Continue's reference, with its default policy and whether it is
/// read-only. The single source of the defaults.
pub const REFERENCE_TOOLS: &[(&str, Level)] = &[
    ("read_file", Level::Allow),
    ("read_file_range", Level::Allow),
    ("read_currently_open_file", Level::Ask),
    ("create_new_file", Level::Ask),
    ("edit_existing_file", Level::Ask),
    ("single_find_and_replace", Level::Ask),
    ("multi_edit", Level::Ask),
    ("search_and_replace_in_file", Level::Ask),
    ("grep_search", Level::Allow),
    ("file_glob_search", Level::Allow),
    ("search_web", Level::Allow),
    ("view_diff", Level::Allow),
    ("ls", Level::Allow),
    ("create_rule_block", Level::Disabled),
    ("request_rule", Level::Disabled),
    ("fetch_url_content", Level::Ask),
    ("codebase", Level::Ask),
    ("run_terminal_command", Level::Ask),
    ("read_skill", Level::Ask),
    ("view_repo_map", Level::Ask),
    ("view_subdirectory", Level::Ask),
    // toolpilot's own additions, for background jobs of run_terminal_command.
    ("check_background_job", Level::Allow),
    ("stop_background_job", Level::Allow),
    // Finds MCP servers' tools when there are too many to offer (it only reads their list).
    ("mcp_tool_search", Level::Allow),
];

pub fn known_tool_names() -> Vec<&'static str> {
    REFERENCE_TOOLS.iter().map(|(n, _)| *n).collect()
}

/// `policy.command_writes`: whether commands that write files inside the workspace run
/// without approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WritesSwitch {
    #[default]
    Ask,
    Allow,
}

/// Paths inside the workspace that are not written without a person's approval. Patterns
/// with `/` are matched against the whole workspace-relative path (`**/` makes them apply
/// in every subfolder, where a nested repository or a tool opened on a subfolder reads them
/// too); patterns without `/` match a file name anywhere. Configurable as `policy.protected`.
pub const DEFAULT_PROTECTED: &[&str] = &[
    // git: a repository's control files run programs (hooks, fsmonitor, filters, pagers).
    "**/.git",
    "**/.git/**",
    ".gitattributes",
    ".gitmodules",
    ".lfsconfig",
    "**/.husky/**",
    ".huskyrc",
    ".pre-commit-config.yaml",
    "lefthook.yml",
    ".lefthook.yml",
    // CI definitions run on the next push.
    "**/.github/workflows/**",
    "**/.github/actions/**",
    ".gitlab-ci.yml",
    // Editors and IDEs: tasks, launch configurations and settings that run programs.
    "**/.vscode/**",
    "**/.idea/**",
    "**/.zed/**",
    "**/.devcontainer/**",
    "*.code-workspace",
    ".editorconfig",
    // Agents: their settings, hooks, MCP servers, permissions, ignore lists and instructions.
    "**/.continue/**",
    ".continueignore",
    "**/.claude/**",
    ".mcp.json",
    "**/.cursor/**",
    ".cursorignore",
    ".cursorrules",
    "**/.codex/**",
    "**/.gemini/**",
    "**/.roo/**",
    "**/.kiro/**",
    "**/.windsurf/**",
    "**/.amazonq/**",
    ".aider.conf.yml",
    ".windsurfrules",
    ".clinerules",
    "AGENTS.md",
    "CLAUDE.md",
    "GEMINI.md",
    "**/.github/copilot-instructions.md",
    // Package managers and shells: settings that name programs to run.
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    "**/.cargo/config",
    "**/.cargo/config.toml",
    "mise.toml",
    ".mise.toml",
    ".env*",
    ".envrc",
];

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
    pub command_writes: WritesSwitch,
    /// What an otherwise allowed command becomes without a sandbox.
    pub unsandboxed: Level,
    /// Base levels of tools by name prefix (`mcp__NAME__` → the server's `policy`), below
    /// `tools`.
    pub tool_prefixes: Vec<(String, Level)>,
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
        if !tool_names.contains(&tool.as_str()) && !tool.starts_with("mcp__") {
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
        tool_prefixes: Vec::new(),
        approved: Vec::new(),
    })
}
