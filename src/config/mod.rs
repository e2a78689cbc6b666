//! Configuration: defaults < TOML file < environment (`TOOLPILOT_*`) < command-line flags.
//!
//! The file is parsed into `ConfigFile` (every field optional, unknown keys rejected), the
//! environment is merged into the same tree (`TOOLPILOT_AGENT__MAX_ROUNDS=10` sets
//! `agent.max_rounds`), flags override last, and [`Config::resolve`] turns the result into a
//! validated [`Config`] with no `Option`s left where a default exists: each section resolves
//! itself in its own file (`server.rs` for `[server]`, …). Every error names the key (or
//! variable) and says what is accepted. `config.example.toml` documents every key.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

mod agent;
mod approvals;
mod codebase;
mod env;
mod mcp;
mod policy;
mod prompt;
mod secrets;
mod server;
mod terminal;
mod tools;
mod upstream;
mod web;
mod workspace;

pub use agent::AgentConfig;
pub use approvals::{ApprovalMode, ApprovalsConfig};
pub use codebase::CodebaseConfig;
pub use mcp::{McpConfig, McpServerConfig, McpTransport};
pub use policy::{
    CommandRuleConfig, DEFAULT_PROTECTED, Level, PolicyConfig, REFERENCE_TOOLS, WritesSwitch,
    known_tool_names,
};
pub use prompt::PromptConfig;
pub use server::{AdminToken, Progress, ServerConfig, augment_list};
pub use terminal::{DEFAULT_DENY_READ, TerminalConfig};
pub use tools::ToolsConfig;
pub use upstream::{Alias, ToolMode, UpstreamConfig, UpstreamKind};
pub use web::{AllowEntry, SearchConfig, SearchProvider, WebConfig};
pub use workspace::DEFAULT_SENSITIVE;

/// Flags shared by `serve`, `run` and `tools`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CommonArgs {
    /// The workspace the tools work on
    #[arg(long, env = "TOOLPILOT_WORKSPACE", value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// A TOML configuration file (see config.example.toml)
    #[arg(long, env = "TOOLPILOT_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// OpenAI-compatible base URL of the model server, e.g. http://127.0.0.1:11434/v1
    #[arg(long, env = "TOOLPILOT_UPSTREAM", value_name = "URL")]
    pub upstream: Option<String>,
    /// Model name sent upstream (overrides the client's `model`)
    #[arg(long, env = "TOOLPILOT_MODEL", value_name = "NAME")]
    pub model: Option<String>,
    /// Approve every tool call whose policy is `ask` (never overrides `deny`)
    #[arg(long, env = "TOOLPILOT_YES")]
    pub yes: bool,
    /// Where checkpoints and other state are kept (default $XDG_STATE_HOME/toolpilot)
    #[arg(long, env = "TOOLPILOT_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub workspace: PathBuf,
    /// The state directory (checkpoints); per-workspace folders live below it.
    pub state_dir: PathBuf,
    pub server: ServerConfig,
    /// The upstreams, the default one (`[upstream]`, named "default") first. Empty: the
    /// built-in demo model answers.
    pub upstreams: Vec<UpstreamConfig>,
    /// Model names that stand for another model (and maybe a given upstream).
    pub aliases: BTreeMap<String, Alias>,
    pub agent: AgentConfig,
    pub tools: ToolsConfig,
    pub policy: PolicyConfig,
    pub terminal: TerminalConfig,
    pub approvals: ApprovalsConfig,
    /// Gitignore-style patterns of files tools refuse to read (Continue's list by default).
    pub sensitive_files: Vec<String>,
    /// `fetch_url_content` and `search_web`.
    pub web: WebConfig,
    /// The server's secrets, `(variable, value)`: values of the variables named as secrets
    /// (upstream key, bearer token, search key) and of every variable matching
    /// `terminal.scrub_env`. Tool output never shows them, and no URL or query may carry them.
    pub secrets: Vec<(String, String)>,
    /// The system message, rules and skills (`[prompt]`).
    pub prompt: PromptConfig,
    /// The codebase index (`[codebase]`).
    pub codebase: CodebaseConfig,
    /// The MCP servers whose tools are offered (`[mcp]`).
    pub mcp: McpConfig,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    workspace: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    server: Option<server::ServerFile>,
    upstream: Option<upstream::UpstreamFile>,
    upstreams: Option<BTreeMap<String, upstream::UpstreamFile>>,
    aliases: Option<BTreeMap<String, upstream::AliasFile>>,
    agent: Option<agent::AgentFile>,
    tools: Option<tools::ToolsFile>,
    policy: Option<policy::PolicyFile>,
    terminal: Option<terminal::TerminalFile>,
    approvals: Option<approvals::ApprovalsFile>,
    sensitive_files: Option<Vec<String>>,
    web: Option<web::WebFile>,
    prompt: Option<prompt::PromptFile>,
    codebase: Option<codebase::CodebaseFile>,
    mcp: Option<mcp::McpFile>,
}

/// A configuration error, naming the key or variable at fault.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Looks up an environment variable (empty counts as unset).
type Env<'a> = dyn Fn(&str) -> Option<String> + 'a;

fn err(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// A configuration file is a few kilobytes; more is a mistake (a log or a binary named by
/// --config), refused before it is read.
const MAX_CONFIG_BYTES: u64 = 4 << 20;

impl Config {
    /// Loads the configuration for the current process: the file named by `--config`
    /// (or `TOOLPILOT_CONFIG`), the process environment, then the flags.
    pub fn load(args: &CommonArgs) -> Result<Config, ConfigError> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        Config::load_from(args, &env)
    }

    /// Like [`Config::load`] with an explicit environment (for tests).
    pub fn load_from(args: &CommonArgs, env: &[(String, String)]) -> Result<Config, ConfigError> {
        let mut table = match &args.config {
            Some(path) => {
                let text = crate::bounded::read_file_string(
                    path,
                    MAX_CONFIG_BYTES,
                    crate::bounded::Links::Follow,
                )
                .map_err(|e| err(format!("cannot read config file {}: {e}", path.display())))?;
                text.parse::<toml::Table>()
                    .map_err(|e| err(format!("config file {}: {e}", path.display())))?
            }
            None => toml::Table::new(),
        };
        let from_env = env::merge(&mut table, env)?;
        let file: ConfigFile = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let key = e.path().to_string();
                let place = match from_env
                    .iter()
                    .find(|(path, _)| key.starts_with(path.as_str()))
                {
                    Some((_, var)) => format!("{var} ({key})"),
                    None => match &args.config {
                        Some(p) if key != "." => format!("config file {}: {key}", p.display()),
                        Some(p) => format!("config file {}", p.display()),
                        None => key,
                    },
                };
                err(format!("{place}: {}", e.inner().message().trim()))
            })?;
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        let mut config = Config::resolve(file, args, &lookup)?;
        config.secrets = secrets::collect(&config, env);
        Ok(config)
    }

    fn resolve(file: ConfigFile, args: &CommonArgs, env: &Env<'_>) -> Result<Config, ConfigError> {
        let workspace = args
            .workspace
            .clone()
            .or(file.workspace)
            .unwrap_or_else(|| PathBuf::from("."));
        let state_dir = workspace::state_dir(args.state_dir.clone().or(file.state_dir), env)?;
        let server = server::resolve(file.server.unwrap_or_default(), env)?;
        let u = file.upstream.unwrap_or_default();
        let (upstreams, aliases) = upstream::resolve(
            &u,
            args.upstream.clone(),
            file.upstreams.unwrap_or_default(),
            file.aliases.unwrap_or_default(),
            env,
        )?;
        let model = args.model.clone().or(u.model);
        let agent = agent::resolve(file.agent.unwrap_or_default(), model, args.yes)?;
        let tools = tools::resolve(file.tools.unwrap_or_default())?;
        let tf = file.terminal.unwrap_or_default();
        let mcp = mcp::resolve(file.mcp.unwrap_or_default(), env)?;
        let mut policy = policy::resolve(file.policy.unwrap_or_default(), &tf)?;
        policy.tool_prefixes = mcp
            .servers
            .iter()
            .map(|s| (format!("mcp__{}__", s.name), s.policy))
            .collect();
        let terminal = terminal::resolve(tf, env, &state_dir)?;
        let sensitive_files = file
            .sensitive_files
            .unwrap_or_else(|| DEFAULT_SENSITIVE.iter().map(|s| s.to_string()).collect());
        Ok(Config {
            approvals: approvals::resolve(file.approvals.unwrap_or_default())?,
            web: web::resolve(file.web.unwrap_or_default(), env)?,
            prompt: prompt::resolve(file.prompt.unwrap_or_default(), env)?,
            codebase: codebase::resolve(file.codebase.unwrap_or_default(), &tools.search_exclude)?,
            workspace,
            state_dir,
            server,
            upstreams,
            aliases,
            agent,
            tools,
            policy,
            terminal,
            sensitive_files,
            secrets: Vec::new(),
            mcp,
        })
    }
}

fn positive(key: &str, v: Option<usize>, default: usize) -> Result<usize, ConfigError> {
    match v {
        Some(0) => Err(err(format!("{key} must be greater than 0"))),
        Some(n) => Ok(n),
        None => Ok(default),
    }
}

fn secs(key: &str, v: Option<f64>, default: f64) -> Result<Duration, ConfigError> {
    let s = v.unwrap_or(default);
    if !(s.is_finite() && s > 0.0 && s < 1e9) {
        return Err(err(format!(
            "{key} must be a positive number of seconds, got {s}"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

#[cfg(test)]
mod tests;
