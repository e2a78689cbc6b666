//! Configuration: defaults < TOML file < environment (`TOOLPILOT_*`) < command-line flags.
//!
//! The file is parsed into `ConfigFile` (every field optional, unknown keys rejected), the
//! environment is merged into the same tree (`TOOLPILOT_AGENT__MAX_ROUNDS=10` sets
//! `agent.max_rounds`), flags override last, and [`Config::resolve`] turns the result into a
//! validated [`Config`] with no `Option`s left where a default exists. Every error names the
//! key (or variable) and says what is accepted. `config.example.toml` documents every key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::policy::Level;

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
    pub prompt: crate::prompt::PromptConfig,
    /// The codebase index (`[codebase]`).
    pub codebase: crate::code::index::CodebaseConfig,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub bind: SocketAddr,
    /// Required `Authorization: Bearer` token, read from the variable `bearer_token_env`.
    pub bearer_token: Option<String>,
    /// The variable the token was read from (for messages).
    pub bearer_token_env: String,
    /// The token the approvals, runs and jobs endpoints require (`x-toolpilot-admin-token`),
    /// also on loopback: from `admin_token_env` when set, else generated for this start.
    pub admin_token: AdminToken,
    /// Extra `Host` names accepted besides loopback names (for a non-loopback bind).
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed to call the API (none by default).
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    /// Longest silence on a stream before a keep-alive comment is sent.
    pub keepalive: Duration,
    /// Where streamed responses show server-side tool activity.
    pub progress: Progress,
    /// Runs go on when their client disconnects, and can be re-attached by id (a request's
    /// `x-toolpilot-detach` header overrides this).
    pub detach: bool,
}

/// The admin token and where it came from.
#[derive(Clone)]
pub struct AdminToken {
    value: String,
    /// The variable named by `server.admin_token_env` (also when it is not set, for messages).
    pub env: String,
    /// The value came from that variable (else it was generated at start-up).
    pub from_env: bool,
}

impl std::fmt::Debug for AdminToken {
    /// Never the value (configurations are logged in debug output).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken")
            .field("env", &self.env)
            .field("from_env", &self.from_env)
            .finish_non_exhaustive()
    }
}

impl AdminToken {
    /// The shortest token accepted from the environment.
    pub const MIN_LEN: usize = 16;

    /// The token from `var`'s value, or 256 random bits (hex) when it is not set.
    fn resolve(var: String, value: Option<String>) -> Result<AdminToken, ConfigError> {
        if let Some(v) = value {
            let v = v.trim().to_string();
            if v.len() < Self::MIN_LEN || !v.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(err(format!(
                    "server.admin_token_env: ${var} must be at least {} printable characters \
                     without spaces (for example the output of `openssl rand -hex 32`), or unset \
                     so that toolpilot generates a token at each start",
                    Self::MIN_LEN
                )));
            }
            return Ok(AdminToken {
                value: v,
                env: var,
                from_env: true,
            });
        }
        let mut bytes = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).map_err(
            |_| err("cannot generate the admin token: the system's random source failed"),
        )?;
        Ok(AdminToken {
            value: bytes.iter().map(|b| format!("{b:02x}")).collect(),
            env: var,
            from_env: false,
        })
    }

    /// A token with a known value (tests and embedders).
    pub fn fixed(value: &str) -> AdminToken {
        AdminToken {
            value: value.to_string(),
            env: "TOOLPILOT_ADMIN_TOKEN".into(),
            from_env: true,
        }
    }

    pub fn value(&self) -> &str {
        &self.value
    }

    /// Whether `presented` is the token (in constant time).
    pub fn matches(&self, presented: &str) -> bool {
        let (a, b) = (presented.trim().as_bytes(), self.value.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// "default" for `[upstream]`, else the key of `[upstreams.NAME]`.
    pub name: String,
    /// Base URL ending in a slash, e.g. `http://127.0.0.1:11434/v1/`.
    pub base_url: url::Url,
    /// Model names (globs) this upstream serves; empty: any model not served elsewhere.
    pub models: Vec<String>,
    /// The model every request to this upstream names, whatever was asked (named upstreams).
    pub model: Option<String>,
    /// Tokens the model can take, prompt and answer together (`None`: asked of the upstream).
    pub context_window: Option<u64>,
    /// How tools reach the model: native `tools`, or described in the system message.
    pub tool_mode: ToolMode,
    /// What kind of server it is (decides the wire protocol and where model info is found).
    pub kind: UpstreamKind,
    /// Upstreams tried, in order, when this one cannot be reached or answers 5xx.
    pub fallback: Vec<String>,
    pub api_key: Option<String>,
    /// The variable the key came from, for messages (never the key itself).
    pub api_key_source: Option<String>,
    pub headers: Vec<(String, String)>,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub total_timeout: Duration,
    pub max_retries: u32,
    pub retry_base: Duration,
    pub retry_max_wait: Duration,
    /// Ask the upstream for a usage chunk (`stream_options.include_usage`).
    pub request_usage: bool,
    pub max_response_bytes: usize,
}

/// How the model is told about tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolMode {
    /// The request's `tools` field; calls come back as `tool_calls`.
    Native,
    /// Tools are described in the system message; calls are read from the answer's text and
    /// results go back as user messages (for servers without native tool calling).
    Text,
}

/// The kind of server behind an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamKind {
    /// Ask the server once (Ollama answers `GET /api/version`); otherwise OpenAI-compatible.
    Auto,
    /// OpenAI-compatible `/chat/completions` (OpenAI, vLLM, llama.cpp, LM Studio, OpenRouter…).
    OpenAi,
    /// Ollama's own `/api/chat`, which takes the context size per request (`num_ctx`).
    Ollama,
}

/// What an alias stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    pub model: String,
    /// The upstream to use; `None`: routed by `model` like a requested name.
    pub upstream: Option<String>,
}

/// Where a stream shows what toolpilot does between the model's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// `reasoning_content` deltas: clients show them as the model's thinking.
    Reasoning,
    /// Visible lines in the answer's text.
    Text,
    /// SSE comment lines (`: toolpilot: …`), which clients ignore.
    Comments,
    /// Nothing.
    None,
}

/// What happens to a call whose policy is `ask` (unless `--yes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalMode {
    /// The run waits for an approval over HTTP (`/v1/approvals`) or in the console, up to
    /// `timeout`; then the call is denied and the model told why.
    Wait,
    /// The run stops before the call and answers with what waits and how to reply; the next
    /// message ("approve", "deny …") resumes it exactly there.
    Pause,
    /// The call is refused at once; the model is told it needs approval.
    Deny,
}

#[derive(Debug, Clone)]
pub struct ApprovalsConfig {
    pub mode: ApprovalMode,
    pub timeout: Duration,
    /// Hand calls that need approval to a client that declared the same tool.
    pub handoff: bool,
    /// How long, and how many bytes of, conversations handed to a client are kept to restore
    /// the rounds it did not see.
    pub handoff_max_age: Duration,
    pub handoff_max_bytes: usize,
    /// How long a paused run can be resumed.
    pub pause_expiry: Duration,
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Model sent upstream regardless of the client's `model` (`--model`).
    pub model: Option<String>,
    pub max_rounds: u32,
    /// `--yes`: approve every `ask`.
    pub approve_asks: bool,
    /// Tools offered when the client sends no `tools`; `None` = every enabled built-in.
    pub default_tools: Option<Vec<String>>,
    pub detect_repeats: bool,
}

#[derive(Debug, Clone)]
pub struct ToolsConfig {
    /// Most bytes of one tool result the model sees.
    pub output_budget: usize,
    pub grep_max_results: usize,
    pub grep_context_lines: usize,
    pub grep_max_per_file: usize,
    pub glob_max_results: usize,
    pub ls_max_entries: usize,
    pub diff_max_lines: usize,
    pub search_exclude: Vec<String>,
    pub search_timeout: Duration,
    pub git_timeout: Duration,
    /// Files larger than this are skipped by grep (like minified bundles and dumps).
    pub grep_max_file_bytes: u64,
    /// When `edit_existing_file` cannot place the changes deterministically, ask the
    /// upstream model to apply them (its output is verified before anything is written).
    pub llm_apply: bool,
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

#[derive(Debug, Clone)]
pub struct TerminalConfig {
    pub shell: String,
    pub timeout: Duration,
    pub idle_timeout: Duration,
    pub head_bytes: usize,
    pub tail_bytes: usize,
    /// Run commands under Landlock when the kernel supports it.
    pub sandbox: bool,
    /// Allow TCP connections and listening sockets.
    pub network: bool,
    /// Extra folders commands may write.
    pub writable: Vec<PathBuf>,
    /// Files and folders commands may not read (absolute, `~/` expanded; the state folder is
    /// always the last entry). Missing ones are ignored.
    pub deny_read: Vec<PathBuf>,
    /// Workspace-relative files and folders commands may not change (read-only in the
    /// command's mount namespace, where the kernel allows one).
    pub readonly: Vec<PathBuf>,
    /// Use at most this Landlock ABI (not configurable: tests use it to see how an older
    /// kernel behaves).
    pub max_landlock_abi: Option<u8>,
    /// Use no namespaces even where the kernel offers them (not configurable: tests use it to
    /// see how a machine without them behaves).
    pub no_namespaces: bool,
    /// Environment variables (glob patterns) never passed to commands.
    pub scrub_env: Vec<String>,
    pub max_jobs: usize,
    pub job_timeout: Duration,
    /// The toolpilot executable that supervises commands (`__sandbox`).
    pub helper: PathBuf,
    /// Snapshot the workspace around commands, so their changes can be undone.
    pub checkpoint: bool,
}

/// `[web]`: how `fetch_url_content` reaches the web, and `[web.search]`.
#[derive(Debug, Clone)]
pub struct WebConfig {
    /// Hosts (`intranet.example.com`, `*.corp.example`) and address ranges (`127.0.0.1`,
    /// `10.0.0.0/8`, `fd00::/8`) the address guard lets through although they are private.
    pub allow: Vec<String>,
    pub connect_timeout: Duration,
    /// The whole fetch: every redirect, the download and nothing more.
    pub timeout: Duration,
    /// Largest body read, counted after decompression while it streams in.
    pub max_download_bytes: usize,
    /// Characters of a page shown per call; `offset` reads on.
    pub page_chars: usize,
    /// `None`: no search provider, `search_web` is not offered.
    pub search: Option<SearchConfig>,
}

/// A web search provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchProvider {
    /// A SearXNG instance (JSON API, `GET {url}/search?q=…&format=json`).
    Searxng,
    /// Brave Search API (`X-Subscription-Token`).
    Brave,
    /// Tavily (`Authorization: Bearer`).
    Tavily,
}

impl SearchProvider {
    pub fn label(self) -> &'static str {
        match self {
            SearchProvider::Searxng => "SearXNG",
            SearchProvider::Brave => "Brave Search",
            SearchProvider::Tavily => "Tavily",
        }
    }
}

/// `[web.search]`.
#[derive(Debug, Clone)]
pub struct SearchConfig {
    pub provider: SearchProvider,
    /// SearXNG: the instance's base URL. Brave, Tavily: the API endpoint.
    pub url: url::Url,
    /// The variable holding the API key (hosted providers), and its value if set.
    pub api_key_env: Option<String>,
    pub api_key: Option<String>,
    pub max_results: usize,
    pub timeout: Duration,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            allow: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
            max_download_bytes: 5 * 1024 * 1024,
            page_chars: 20_000,
            search: None,
        }
    }
}

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

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            output_budget: 50_000,
            grep_max_results: 100,
            grep_context_lines: 2,
            grep_max_per_file: 100,
            glob_max_results: 200,
            ls_max_entries: 200,
            diff_max_lines: 5_000,
            search_exclude: vec!["node_modules/".into(), "__pycache__/".into()],
            search_timeout: Duration::from_secs(30),
            git_timeout: Duration::from_secs(30),
            grep_max_file_bytes: 20 * 1024 * 1024,
            llm_apply: true,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    workspace: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    server: Option<ServerFile>,
    upstream: Option<UpstreamFile>,
    upstreams: Option<BTreeMap<String, UpstreamFile>>,
    aliases: Option<BTreeMap<String, AliasFile>>,
    agent: Option<AgentFile>,
    tools: Option<ToolsFile>,
    policy: Option<PolicyFile>,
    terminal: Option<TerminalFile>,
    approvals: Option<ApprovalsFile>,
    sensitive_files: Option<Vec<String>>,
    web: Option<WebFile>,
    prompt: Option<PromptFile>,
    codebase: Option<CodebaseFile>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct WebFile {
    allow: Option<Vec<String>>,
    connect_timeout_secs: Option<f64>,
    timeout_secs: Option<f64>,
    max_download_bytes: Option<usize>,
    page_chars: Option<usize>,
    search: Option<SearchFile>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PromptFile {
    system_message: Option<bool>,
    extra: Option<String>,
    listing_entries: Option<usize>,
    global_dir: Option<PathBuf>,
    agents_md: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SearchFile {
    provider: Option<String>,
    url: Option<String>,
    api_key_env: Option<String>,
    max_results: Option<usize>,
    timeout_secs: Option<f64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CodebaseFile {
    max_results: Option<usize>,
    max_file_bytes: Option<u64>,
    wait_secs: Option<f64>,
    embeddings_model: Option<String>,
    rerank_candidates: Option<usize>,
    watch: Option<bool>,
    max_watches: Option<usize>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ApprovalsFile {
    mode: Option<String>,
    timeout_secs: Option<f64>,
    handoff: Option<bool>,
    handoff_max_age_secs: Option<f64>,
    handoff_max_bytes: Option<usize>,
    pause_expiry_secs: Option<f64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TerminalFile {
    shell: Option<String>,
    timeout_secs: Option<f64>,
    idle_timeout_secs: Option<f64>,
    head_bytes: Option<usize>,
    tail_bytes: Option<usize>,
    sandbox: Option<bool>,
    network: Option<bool>,
    writable: Option<Vec<PathBuf>>,
    deny_read: Option<Vec<String>>,
    readonly: Option<Vec<PathBuf>>,
    scrub_env: Option<Vec<String>>,
    max_jobs: Option<usize>,
    job_timeout_secs: Option<f64>,
    helper: Option<PathBuf>,
    checkpoint: Option<bool>,
    default_rules: Option<bool>,
    unsandboxed: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ServerFile {
    bind: Option<String>,
    bearer_token_env: Option<String>,
    admin_token_env: Option<String>,
    allowed_hosts: Option<Vec<String>>,
    allowed_origins: Option<Vec<String>>,
    max_body_bytes: Option<usize>,
    keepalive_secs: Option<f64>,
    progress: Option<String>,
    detach: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UpstreamFile {
    url: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    connect_timeout_secs: Option<f64>,
    first_byte_timeout_secs: Option<f64>,
    idle_timeout_secs: Option<f64>,
    total_timeout_secs: Option<f64>,
    max_retries: Option<u32>,
    retry_base_ms: Option<u64>,
    retry_max_wait_secs: Option<f64>,
    request_usage: Option<bool>,
    max_response_bytes: Option<usize>,
    models: Option<Vec<String>>,
    context_window: Option<u64>,
    tool_mode: Option<String>,
    kind: Option<String>,
    fallback: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum AliasFile {
    Model(String),
    Target {
        model: String,
        upstream: Option<String>,
    },
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AgentFile {
    max_rounds: Option<u32>,
    approve_asks: Option<bool>,
    default_tools: Option<Vec<String>>,
    detect_repeats: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ToolsFile {
    output_budget: Option<usize>,
    grep_max_results: Option<usize>,
    grep_context_lines: Option<usize>,
    grep_max_per_file: Option<usize>,
    grep_max_file_bytes: Option<u64>,
    glob_max_results: Option<usize>,
    ls_max_entries: Option<usize>,
    diff_max_lines: Option<usize>,
    search_exclude: Option<Vec<String>>,
    search_timeout_secs: Option<f64>,
    git_timeout_secs: Option<f64>,
    llm_apply: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    tools: Option<BTreeMap<String, String>>,
    allow: Option<Vec<String>>,
    ask: Option<Vec<String>>,
    deny: Option<Vec<String>>,
    protected: Option<Vec<String>>,
    commands: Option<Vec<CommandRuleConfig>>,
    command_writes: Option<String>,
}

/// A configuration error, naming the key or variable at fault.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

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
        let from_env = merge_env(&mut table, env)?;
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
        config.secrets = collect_secrets(&config, env);
        Ok(config)
    }

    /// The environment variables that hold the server's own secrets: the upstream API key,
    /// the bearer token and the search API key (commands never get them; tool output never
    /// shows their values).
    pub fn secret_var_names(&self) -> Vec<String> {
        let mut names = vec![
            "OPENAI_API_KEY".to_string(),
            "TOOLPILOT_UPSTREAM_API_KEY".to_string(),
            self.server.bearer_token_env.clone(),
            self.server.admin_token.env.clone(),
        ];
        for src in self
            .upstreams
            .iter()
            .filter_map(|u| u.api_key_source.clone())
        {
            names.push(src);
        }
        if let Some(env) = self.web.search.as_ref().and_then(|s| s.api_key_env.clone()) {
            names.push(env);
        }
        names.sort();
        names.dedup();
        names
    }

    fn resolve(
        file: ConfigFile,
        args: &CommonArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let workspace = args
            .workspace
            .clone()
            .or(file.workspace)
            .unwrap_or_else(|| PathBuf::from("."));
        let state_dir = match args.state_dir.clone().or(file.state_dir) {
            Some(d) => d,
            None => match (env("XDG_STATE_HOME"), env("HOME")) {
                (Some(x), _) => PathBuf::from(x).join("toolpilot"),
                (None, Some(h)) => PathBuf::from(h).join(".local/state/toolpilot"),
                (None, None) => {
                    return Err(err(
                        "state_dir: neither XDG_STATE_HOME nor HOME is set; pass --state-dir DIR",
                    ));
                }
            },
        };

        let s = file.server.unwrap_or_default();
        let bind_text = s.bind.unwrap_or_else(|| "127.0.0.1:7979".into());
        let bind: SocketAddr = bind_text.parse().map_err(|_| {
            err(format!(
                "server.bind: {bind_text:?} is not an address; use IP:PORT such as 127.0.0.1:7979"
            ))
        })?;
        let bearer_token_env = s
            .bearer_token_env
            .unwrap_or_else(|| "TOOLPILOT_BEARER_TOKEN".into());
        let admin_token_env = s
            .admin_token_env
            .unwrap_or_else(|| "TOOLPILOT_ADMIN_TOKEN".into());
        let admin_value = env(&admin_token_env);
        let server = ServerConfig {
            bind,
            bearer_token: env(&bearer_token_env),
            bearer_token_env,
            admin_token: AdminToken::resolve(admin_token_env, admin_value)?,
            allowed_hosts: s.allowed_hosts.unwrap_or_default(),
            allowed_origins: s.allowed_origins.unwrap_or_default(),
            max_body_bytes: positive("server.max_body_bytes", s.max_body_bytes, 16 * 1024 * 1024)?,
            keepalive: secs("server.keepalive_secs", s.keepalive_secs, 5.0)?,
            progress: match s.progress.as_deref() {
                None | Some("comments") => Progress::Comments,
                Some("reasoning") => Progress::Reasoning,
                Some("text") => Progress::Text,
                Some("none") => Progress::None,
                Some(other) => {
                    return Err(err(format!(
                        "server.progress: {other:?} is not one of \"reasoning\", \"text\", \"comments\", \"none\""
                    )));
                }
            },
            detach: s.detach.unwrap_or(false),
        };

        let u = file.upstream.unwrap_or_default();
        let mut upstreams = Vec::new();
        // Validated even without a URL, so a typo is caught before it matters.
        let default = resolve_upstream("upstream", "default", &u, &UpstreamFile::default(), env)?;
        if let Some(text) = args.upstream.clone().or(u.url.clone()) {
            upstreams.push(UpstreamConfig {
                base_url: base_url("upstream.url", &text)?,
                // `[upstream] model` is the global `--model`.
                model: None,
                ..default
            });
        }
        for (name, f) in file.upstreams.unwrap_or_default() {
            let key = format!("upstreams.{name}");
            if name == "default" || name.is_empty() || name.contains(['/', ' ']) {
                return Err(err(format!(
                    "{key}: {name:?} cannot name an upstream (\"default\" is [upstream]; use \
                     letters, digits, - and _)"
                )));
            }
            let Some(url) = f.url.clone() else {
                return Err(err(format!(
                    "{key}.url is missing: every named upstream needs its base URL, such as \
                     http://127.0.0.1:8000/v1"
                )));
            };
            let mut c = resolve_upstream(&key, &name, &f, &u, env)?;
            c.base_url = base_url(&format!("{key}.url"), &url)?;
            upstreams.push(c);
        }
        let names: Vec<String> = upstreams.iter().map(|c| c.name.clone()).collect();
        for c in &upstreams {
            let key = if c.name == "default" {
                "upstream".to_string()
            } else {
                format!("upstreams.{}", c.name)
            };
            for f in &c.fallback {
                if !names.contains(f) || *f == c.name {
                    return Err(err(format!(
                        "{key}.fallback: {f:?} is not another configured upstream; configured: {}",
                        names.join(", ")
                    )));
                }
            }
            for m in &c.models {
                globset::Glob::new(m).map_err(|e| {
                    err(format!(
                        "{key}.models: {m:?} is not a model name or glob: {e}"
                    ))
                })?;
            }
        }
        let catch_all: Vec<&str> = upstreams
            .iter()
            .filter(|c| c.models.is_empty())
            .map(|c| c.name.as_str())
            .collect();
        if catch_all.len() > 1 {
            return Err(err(format!(
                "upstreams: {} all serve any model (no `models` list); give all but one of them \
                 a `models` list so each request has one place to go",
                catch_all.join(", ")
            )));
        }
        let mut aliases = BTreeMap::new();
        for (alias, a) in file.aliases.unwrap_or_default() {
            let target = match a {
                AliasFile::Model(model) => Alias {
                    model,
                    upstream: None,
                },
                AliasFile::Target { model, upstream } => Alias { model, upstream },
            };
            if let Some(up) = &target.upstream {
                if !names.contains(up) {
                    return Err(err(format!(
                        "aliases.{alias}.upstream: {up:?} is not a configured upstream; \
                         configured: {}",
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    )));
                }
            }
            if target.model.trim().is_empty() {
                return Err(err(format!("aliases.{alias}: the model name is empty")));
            }
            aliases.insert(alias, target);
        }

        let a = file.agent.unwrap_or_default();
        let tool_names = crate::policy::known_tool_names();
        if let Some(list) = &a.default_tools {
            for name in list {
                if !tool_names.contains(&name.as_str()) {
                    return Err(err(format!(
                        "agent.default_tools: {name:?} is not a built-in tool; known tools: {}",
                        tool_names.join(", ")
                    )));
                }
            }
        }
        let agent = AgentConfig {
            model: args.model.clone().or(u.model),
            max_rounds: match a.max_rounds {
                Some(0) => return Err(err("agent.max_rounds must be at least 1")),
                Some(n) => n,
                None => 25,
            },
            approve_asks: args.yes || a.approve_asks.unwrap_or(false),
            default_tools: a.default_tools,
            detect_repeats: a.detect_repeats.unwrap_or(true),
        };

        let t = file.tools.unwrap_or_default();
        let d = ToolsConfig::default();
        let tools = ToolsConfig {
            output_budget: positive("tools.output_budget", t.output_budget, d.output_budget)?,
            grep_max_results: positive(
                "tools.grep_max_results",
                t.grep_max_results,
                d.grep_max_results,
            )?,
            grep_context_lines: t.grep_context_lines.unwrap_or(d.grep_context_lines),
            grep_max_per_file: positive(
                "tools.grep_max_per_file",
                t.grep_max_per_file,
                d.grep_max_per_file,
            )?,
            grep_max_file_bytes: t.grep_max_file_bytes.unwrap_or(d.grep_max_file_bytes),
            glob_max_results: positive(
                "tools.glob_max_results",
                t.glob_max_results,
                d.glob_max_results,
            )?,
            ls_max_entries: positive("tools.ls_max_entries", t.ls_max_entries, d.ls_max_entries)?,
            diff_max_lines: positive("tools.diff_max_lines", t.diff_max_lines, d.diff_max_lines)?,
            search_exclude: t.search_exclude.unwrap_or(d.search_exclude),
            search_timeout: secs("tools.search_timeout_secs", t.search_timeout_secs, 30.0)?,
            git_timeout: secs("tools.git_timeout_secs", t.git_timeout_secs, 30.0)?,
            llm_apply: t.llm_apply.unwrap_or(d.llm_apply),
        };
        for g in &tools.search_exclude {
            globset::Glob::new(g.trim_end_matches('/'))
                .map_err(|e| err(format!("tools.search_exclude: {g:?} is not a glob: {e}")))?;
        }

        let p = file.policy.unwrap_or_default();
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
        let tf = file.terminal.unwrap_or_default();
        let unsandboxed = match tf.unsandboxed.as_deref() {
            None => Level::Ask,
            Some(v) => Level::parse(v).ok_or_else(|| {
                err(format!(
                    "terminal.unsandboxed: {v:?} is not a policy; use allow, ask or deny"
                ))
            })?,
        };
        let helper = match tf.helper {
            Some(h) => h,
            None => std::env::current_exe().map_err(|e| {
                err(format!(
                    "terminal.helper: cannot find this executable ({e}); set the path to toolpilot"
                ))
            })?,
        };
        let terminal = TerminalConfig {
            shell: tf.shell.unwrap_or_else(|| "sh".into()),
            timeout: secs("terminal.timeout_secs", tf.timeout_secs, 120.0)?,
            idle_timeout: secs("terminal.idle_timeout_secs", tf.idle_timeout_secs, 90.0)?,
            head_bytes: positive("terminal.head_bytes", tf.head_bytes, 8_000)?,
            tail_bytes: positive("terminal.tail_bytes", tf.tail_bytes, 16_000)?,
            sandbox: tf.sandbox.unwrap_or(true),
            network: tf.network.unwrap_or(false),
            writable: tf.writable.unwrap_or_default(),
            deny_read: deny_read(tf.deny_read, env("HOME"), &state_dir)?,
            readonly: readonly(tf.readonly.unwrap_or_default())?,
            max_landlock_abi: None,
            no_namespaces: false,
            scrub_env: tf.scrub_env.unwrap_or_else(|| {
                [
                    "*_API_KEY",
                    "*_APIKEY",
                    "*_TOKEN",
                    "*_SECRET",
                    "*_SECRET_*",
                    "*PASSWORD*",
                    "*_PASSWD",
                    "*_CREDENTIALS",
                    "AWS_ACCESS_KEY_ID",
                    "GOOGLE_APPLICATION_CREDENTIALS",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect()
            }),
            max_jobs: positive("terminal.max_jobs", tf.max_jobs, 4)?,
            job_timeout: secs("terminal.job_timeout_secs", tf.job_timeout_secs, 3600.0)?,
            helper,
            checkpoint: tf.checkpoint.unwrap_or(true),
        };
        let policy = PolicyConfig {
            tools: levels,
            allow: p.allow.unwrap_or_default(),
            ask: p.ask.unwrap_or_default(),
            deny: p.deny.unwrap_or_default(),
            protected: p.protected.unwrap_or_else(|| {
                crate::policy::DEFAULT_PROTECTED
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            }),
            commands: p.commands.unwrap_or_default(),
            command_defaults: tf.default_rules.unwrap_or(true),
            command_writes: match p.command_writes.as_deref() {
                None | Some("ask") => crate::policy::command::WritesSwitch::Ask,
                Some("allow") => crate::policy::command::WritesSwitch::Allow,
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
        };
        // Rules are parsed here so that a bad rule stops start-up with its key named.
        crate::policy::Policy::new(&policy).map_err(err)?;

        let sensitive_files = file.sensitive_files.unwrap_or_else(|| {
            crate::workspace::DEFAULT_SENSITIVE
                .iter()
                .map(|s| s.to_string())
                .collect()
        });

        let ap = file.approvals.unwrap_or_default();
        let approvals = ApprovalsConfig {
            mode: match ap.mode.as_deref() {
                None | Some("wait") => ApprovalMode::Wait,
                Some("deny") => ApprovalMode::Deny,
                Some("pause") => ApprovalMode::Pause,
                Some(other) => {
                    return Err(err(format!(
                        "approvals.mode: {other:?} is not one of \"wait\", \"pause\", \"deny\""
                    )));
                }
            },
            timeout: secs("approvals.timeout_secs", ap.timeout_secs, 120.0)?,
            handoff: ap.handoff.unwrap_or(true),
            handoff_max_age: secs(
                "approvals.handoff_max_age_secs",
                ap.handoff_max_age_secs,
                3600.0,
            )?,
            handoff_max_bytes: positive(
                "approvals.handoff_max_bytes",
                ap.handoff_max_bytes,
                64 << 20,
            )?,
            pause_expiry: secs("approvals.pause_expiry_secs", ap.pause_expiry_secs, 3600.0)?,
        };
        let web = resolve_web(file.web.unwrap_or_default(), env)?;
        let pf = file.prompt.unwrap_or_default();
        let pd = crate::prompt::PromptConfig::default();
        let global_dir = match pf.global_dir {
            Some(d) => {
                let text = d.to_string_lossy();
                match (text.strip_prefix("~/"), env("HOME")) {
                    (Some(rest), Some(home)) => Some(PathBuf::from(home).join(rest)),
                    (Some(_), None) => {
                        return Err(err(
                            "prompt.global_dir: starts with ~/ but HOME is not set; give an absolute path",
                        ));
                    }
                    (None, _) => Some(d),
                }
            }
            None => env("HOME").map(|h| PathBuf::from(h).join(".continue")),
        };
        let prompt = crate::prompt::PromptConfig {
            system_message: pf.system_message.unwrap_or(pd.system_message),
            extra: pf.extra.filter(|e| !e.trim().is_empty()),
            listing_entries: pf.listing_entries.unwrap_or(pd.listing_entries),
            global_dir,
            agents_md: pf.agents_md.unwrap_or(pd.agents_md),
        };
        let cf = file.codebase.unwrap_or_default();
        let cd = crate::code::index::CodebaseConfig::default();
        let codebase = crate::code::index::CodebaseConfig {
            max_results: positive("codebase.max_results", cf.max_results, cd.max_results)?,
            max_file_bytes: match cf.max_file_bytes {
                Some(0) => return Err(err("codebase.max_file_bytes must be greater than 0")),
                Some(n) => n,
                None => cd.max_file_bytes,
            },
            wait: secs("codebase.wait_secs", cf.wait_secs, cd.wait.as_secs_f64())?,
            embeddings_model: cf.embeddings_model.filter(|m| !m.trim().is_empty()),
            rerank_candidates: positive(
                "codebase.rerank_candidates",
                cf.rerank_candidates,
                cd.rerank_candidates,
            )?,
            exclude: tools.search_exclude.clone(),
            watch: cf.watch.unwrap_or(cd.watch),
            max_watches: cf.max_watches.unwrap_or(cd.max_watches),
        };
        Ok(Config {
            prompt,
            codebase,
            workspace,
            state_dir,
            server,
            upstreams,
            aliases,
            agent,
            tools,
            policy,
            terminal,
            approvals,
            sensitive_files,
            web,
            secrets: Vec::new(),
        })
    }
}

/// One upstream's settings: its own keys, else those of `[upstream]` (`inherit`), else the
/// defaults. The URL is set by the caller.
fn resolve_upstream(
    key: &str,
    name: &str,
    u: &UpstreamFile,
    inherit: &UpstreamFile,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<UpstreamConfig, ConfigError> {
    let k = |field: &str| format!("{key}.{field}");
    let connect_timeout = secs(
        &k("connect_timeout_secs"),
        u.connect_timeout_secs.or(inherit.connect_timeout_secs),
        10.0,
    )?;
    let first_byte_timeout = secs(
        &k("first_byte_timeout_secs"),
        u.first_byte_timeout_secs
            .or(inherit.first_byte_timeout_secs),
        300.0,
    )?;
    let idle_timeout = secs(
        &k("idle_timeout_secs"),
        u.idle_timeout_secs.or(inherit.idle_timeout_secs),
        120.0,
    )?;
    let total_timeout = secs(
        &k("total_timeout_secs"),
        u.total_timeout_secs.or(inherit.total_timeout_secs),
        1800.0,
    )?;
    let retry_max_wait = secs(
        &k("retry_max_wait_secs"),
        u.retry_max_wait_secs.or(inherit.retry_max_wait_secs),
        30.0,
    )?;
    let max_response_bytes = positive(
        &k("max_response_bytes"),
        u.max_response_bytes.or(inherit.max_response_bytes),
        64 * 1024 * 1024,
    )?;
    let is_default = name == "default";
    // The default upstream falls back to the usual variables; a named one uses only its own.
    let (api_key, api_key_source) = match &u.api_key_env {
        Some(var) => match env(var) {
            Some(k) => (Some(k), Some(var.clone())),
            None => (None, None),
        },
        None if is_default => match env("TOOLPILOT_UPSTREAM_API_KEY") {
            Some(k) => (Some(k), Some("TOOLPILOT_UPSTREAM_API_KEY".to_string())),
            None => match env("OPENAI_API_KEY") {
                Some(k) => (Some(k), Some("OPENAI_API_KEY".to_string())),
                None => (None, None),
            },
        },
        None => (None, None),
    };
    let tool_mode = match u.tool_mode.as_deref() {
        None | Some("native") => ToolMode::Native,
        Some("text") => ToolMode::Text,
        Some(other) => {
            return Err(err(format!(
                "{}: {other:?} is not one of \"native\", \"text\"",
                k("tool_mode")
            )));
        }
    };
    let kind = match u.kind.as_deref() {
        None | Some("auto") => UpstreamKind::Auto,
        Some("openai") => UpstreamKind::OpenAi,
        Some("ollama") => UpstreamKind::Ollama,
        Some(other) => {
            return Err(err(format!(
                "{}: {other:?} is not one of \"auto\", \"openai\", \"ollama\" (vLLM, \
                 llama.cpp, LM Studio and OpenRouter are \"openai\")",
                k("kind")
            )));
        }
    };
    if u.context_window == Some(0) {
        return Err(err(format!(
            "{} must be greater than 0",
            k("context_window")
        )));
    }
    let mut headers: Vec<(String, String)> = inherit
        .headers
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    if !is_default {
        for (hk, hv) in u.headers.clone().unwrap_or_default() {
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case(&hk));
            headers.push((hk, hv));
        }
    }
    Ok(UpstreamConfig {
        name: name.to_string(),
        // Replaced by the caller.
        base_url: url::Url::parse("http://127.0.0.1/").map_err(|e| err(e.to_string()))?,
        models: u.models.clone().unwrap_or_default(),
        model: u.model.clone().filter(|m| !m.trim().is_empty()),
        context_window: u.context_window,
        tool_mode,
        kind,
        fallback: u.fallback.clone().unwrap_or_default(),
        api_key,
        api_key_source,
        headers,
        connect_timeout,
        first_byte_timeout,
        idle_timeout,
        total_timeout,
        max_retries: u.max_retries.or(inherit.max_retries).unwrap_or(3),
        retry_base: Duration::from_millis(u.retry_base_ms.or(inherit.retry_base_ms).unwrap_or(250)),
        retry_max_wait,
        request_usage: u.request_usage.or(inherit.request_usage).unwrap_or(true),
        max_response_bytes,
    })
}

/// A base URL: http(s), ending in a slash so paths join below it.
fn base_url(key: &str, text: &str) -> Result<url::Url, ConfigError> {
    let mut base = url::Url::parse(text.trim()).map_err(|e| {
        err(format!(
            "{key}: {text:?} is not a URL ({e}); use a base URL such as http://127.0.0.1:11434/v1"
        ))
    })?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(err(format!(
            "{key}: {text:?} must be an http:// or https:// URL"
        )));
    }
    if !base.path().ends_with('/') {
        let p = format!("{}/", base.path());
        base.set_path(&p);
    }
    Ok(base)
}

/// Values shorter than this are not treated as secrets: redacting `1` or `true` everywhere
/// would destroy output and protect nothing.
const MIN_SECRET_LEN: usize = 8;

/// The `(variable, value)` pairs of `env` that are secrets: the named secret variables and
/// every variable matching `terminal.scrub_env`. Longest values first, so a secret that
/// contains another is replaced whole.
fn collect_secrets(config: &Config, env: &[(String, String)]) -> Vec<(String, String)> {
    let named = config.secret_var_names();
    let mut out: Vec<(String, String)> = env
        .iter()
        .filter(|(k, v)| {
            v.trim().len() >= MIN_SECRET_LEN
                && (named.contains(k)
                    || config
                        .terminal
                        .scrub_env
                        .iter()
                        .any(|p| crate::terminal::glob_match(p, k)))
        })
        .map(|(k, v)| (k.clone(), v.trim().to_string()))
        .collect();
    // A generated admin token is in no variable, and is a secret all the same.
    let admin = &config.server.admin_token;
    if !admin.from_env {
        out.push((admin.env.clone(), admin.value().to_string()));
    }
    out.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    out.dedup_by(|a, b| a.1 == b.1);
    out
}

/// `[web]` and `[web.search]`.
fn resolve_web(w: WebFile, env: &dyn Fn(&str) -> Option<String>) -> Result<WebConfig, ConfigError> {
    let d = WebConfig::default();
    let allow = w.allow.unwrap_or_default();
    for (i, entry) in allow.iter().enumerate() {
        crate::web::guard::AllowEntry::parse(entry)
            .map_err(|e| err(format!("web.allow[{i}] {entry:?}: {e}")))?;
    }
    let search = match w.search {
        None => None,
        Some(sf) => resolve_search(sf, env)?,
    };
    Ok(WebConfig {
        allow,
        connect_timeout: secs("web.connect_timeout_secs", w.connect_timeout_secs, 10.0)?,
        timeout: secs("web.timeout_secs", w.timeout_secs, 30.0)?,
        max_download_bytes: positive(
            "web.max_download_bytes",
            w.max_download_bytes,
            d.max_download_bytes,
        )?,
        page_chars: match w.page_chars {
            Some(n) if n < 1000 => {
                return Err(err(format!(
                    "web.page_chars must be at least 1000 characters, got {n}"
                )));
            }
            Some(n) => n,
            None => d.page_chars,
        },
        search,
    })
}

fn resolve_search(
    sf: SearchFile,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<SearchConfig>, ConfigError> {
    let timeout = secs("web.search.timeout_secs", sf.timeout_secs, 15.0)?;
    let max_results = match sf.max_results {
        Some(0) => return Err(err("web.search.max_results must be between 1 and 20")),
        Some(n) if n > 20 => {
            return Err(err(format!(
                "web.search.max_results must be between 1 and 20, got {n}"
            )));
        }
        Some(n) => n,
        None => 5,
    };
    let provider = match sf.provider.as_deref().map(str::trim) {
        None | Some("") | Some("none") => {
            if sf.url.is_some() || sf.api_key_env.is_some() {
                return Err(err(
                    "web.search.provider: set it to \"searxng\", \"brave\" or \"tavily\" \
                     (url and api_key_env are set, but no provider)",
                ));
            }
            return Ok(None);
        }
        Some("searxng") => SearchProvider::Searxng,
        Some("brave") => SearchProvider::Brave,
        Some("tavily") => SearchProvider::Tavily,
        Some(other) => {
            return Err(err(format!(
                "web.search.provider: {other:?} is not one of \"searxng\", \"brave\", \"tavily\" \
                 (or \"none\")"
            )));
        }
    };
    let default_url = match provider {
        SearchProvider::Searxng => None,
        SearchProvider::Brave => Some("https://api.search.brave.com/res/v1/web/search"),
        SearchProvider::Tavily => Some("https://api.tavily.com/search"),
    };
    let url_text = match (sf.url, default_url) {
        (Some(u), _) => u,
        (None, Some(d)) => d.to_string(),
        (None, None) => {
            return Err(err(
                "web.search.url: the searxng provider needs the base URL of your SearXNG \
                 instance, e.g. url = \"http://127.0.0.1:8888\"",
            ));
        }
    };
    let url = url::Url::parse(url_text.trim()).map_err(|e| {
        err(format!(
            "web.search.url: {url_text:?} is not a URL ({e}); use for example \
             http://127.0.0.1:8888"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(err(format!(
            "web.search.url: {url_text:?} must be an http:// or https:// URL"
        )));
    }
    let api_key_env = match provider {
        SearchProvider::Searxng => sf.api_key_env,
        SearchProvider::Brave => Some(sf.api_key_env.unwrap_or_else(|| "BRAVE_API_KEY".into())),
        SearchProvider::Tavily => Some(sf.api_key_env.unwrap_or_else(|| "TAVILY_API_KEY".into())),
    };
    let api_key = api_key_env.as_deref().and_then(env);
    Ok(Some(SearchConfig {
        provider,
        url,
        api_key_env,
        api_key,
        max_results,
        timeout,
    }))
}

/// The home folder's credential stores: what `terminal.deny_read` is when not set.
pub const DEFAULT_DENY_READ: &[&str] = &[
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.oci",
    "~/.kube",
    "~/.docker",
    "~/.config/containers/auth.json",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/git/credentials",
    "~/.config/gh",
    "~/.config/hub",
    "~/.config/glab-cli",
    "~/.npmrc",
    "~/.pypirc",
    "~/.gem/credentials",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.config/op",
    "~/.vault-token",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.config/doctl",
    "~/.config/rclone",
    "~/.s3cfg",
    "~/.boto",
    "~/.pgpass",
    "~/.my.cnf",
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
];

/// `terminal.deny_read` resolved: `~/` expanded, every entry absolute, the state folder last.
/// Without `HOME`, the default entries (all under `~`) are left out; a configured `~/` entry is
/// an error.
fn deny_read(
    configured: Option<Vec<String>>,
    home: Option<String>,
    state_dir: &Path,
) -> Result<Vec<PathBuf>, ConfigError> {
    let defaults = configured.is_none();
    let entries =
        configured.unwrap_or_else(|| DEFAULT_DENY_READ.iter().map(|s| s.to_string()).collect());
    let mut out = Vec::new();
    for e in entries {
        let path = match (e.strip_prefix("~/"), &home) {
            (Some(rest), Some(h)) => PathBuf::from(h).join(rest),
            (Some(_), None) if defaults => continue,
            (Some(_), None) => {
                return Err(err(format!(
                    "terminal.deny_read: {e:?} starts with ~/ but HOME is not set; \
                     write the absolute path"
                )));
            }
            (None, _) => PathBuf::from(&e),
        };
        if !path.is_absolute() {
            return Err(err(format!(
                "terminal.deny_read: {e:?} is not an absolute path; write /… or ~/…"
            )));
        }
        if path.parent().is_none() {
            return Err(err(
                "terminal.deny_read: \"/\" would hide every file; name the folders to hide",
            ));
        }
        out.push(path);
    }
    let state = std::path::absolute(state_dir).map_err(|e| {
        err(format!(
            "state_dir: cannot make {} absolute ({e})",
            state_dir.display()
        ))
    })?;
    out.push(state);
    Ok(out)
}

/// `terminal.readonly`: paths relative to the workspace, never leaving it.
fn readonly(paths: Vec<PathBuf>) -> Result<Vec<PathBuf>, ConfigError> {
    use std::path::Component;
    for p in &paths {
        let ok = !p.as_os_str().is_empty()
            && p.components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !ok {
            return Err(err(format!(
                "terminal.readonly: {:?} must be a path inside the workspace, relative to its \
                 root (such as .git or .vscode/tasks.json), without ..",
                p.display().to_string()
            )));
        }
    }
    Ok(paths)
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

/// Variables that look like `TOOLPILOT_<SECTION>__<KEY>` but belong to flags or secrets.
const RESERVED_ENV: &[&str] = &[
    "TOOLPILOT_WORKSPACE",
    "TOOLPILOT_CONFIG",
    "TOOLPILOT_UPSTREAM",
    "TOOLPILOT_MODEL",
    "TOOLPILOT_YES",
    "TOOLPILOT_BIND",
    "TOOLPILOT_LOG",
    "TOOLPILOT_UPSTREAM_API_KEY",
    "TOOLPILOT_BEARER_TOKEN",
];

/// Merges `TOOLPILOT_SECTION__KEY=value` variables into the config tree. A value is read as
/// TOML (`10`, `true`, `["a","b"]`) and otherwise taken as a string.
/// Returns the dotted key each variable set, with the variable's name, for error messages.
fn merge_env(
    table: &mut toml::Table,
    env: &[(String, String)],
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut set = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("TOOLPILOT_") else {
            continue;
        };
        if RESERVED_ENV.contains(&name.as_str()) || !rest.contains("__") {
            continue;
        }
        let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
        if path.iter().any(String::is_empty) {
            return Err(err(format!(
                "{name}: expected TOOLPILOT_<SECTION>__<KEY>, e.g. TOOLPILOT_AGENT__MAX_ROUNDS"
            )));
        }
        let parsed = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.clone()));
        set.push((path.join("."), name.clone()));
        let mut cur = &mut *table;
        for (i, key) in path.iter().enumerate() {
            if i + 1 == path.len() {
                cur.insert(key.clone(), parsed.clone());
            } else {
                let entry = cur
                    .entry(key.clone())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                cur = match entry {
                    toml::Value::Table(t) => t,
                    _ => {
                        return Err(err(format!(
                            "{name}: `{}` is not a section",
                            path[..=i].join(".")
                        )));
                    }
                };
            }
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(toml_text: &str, env: &[(&str, &str)], args: CommonArgs) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, toml_text).unwrap();
        let args = CommonArgs {
            config: Some(path),
            ..args
        };
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.push(("HOME".into(), "/home/test".into()));
        Config::load_from(&args, &env).map_err(|e| e.0)
    }

    #[test]
    fn a_config_file_larger_than_any_real_one_is_refused_before_it_is_read() {
        let big = format!("# {}\n", "x".repeat(5 << 20));
        let e = load(&big, &[], CommonArgs::default()).unwrap_err();
        assert!(e.contains("is larger than 4,194,304 bytes"), "{e}");
    }

    #[test]
    fn layers_file_then_env_then_flags() {
        let c = load(
            "[agent]\nmax_rounds = 7\n[upstream]\nurl = \"http://127.0.0.1:1/v1\"\nmodel = \"file\"\n",
            &[("TOOLPILOT_AGENT__MAX_ROUNDS", "9"), ("TOOLPILOT_UPSTREAM_API_KEY", "sk-x")],
            CommonArgs {
                model: Some("flag".into()),
                ..CommonArgs::default()
            },
        )
        .unwrap();
        assert_eq!(c.agent.max_rounds, 9);
        assert_eq!(c.agent.model.as_deref(), Some("flag"));
        let u = c.upstreams.into_iter().next().unwrap();
        assert_eq!(u.base_url.as_str(), "http://127.0.0.1:1/v1/");
        assert_eq!(u.api_key.as_deref(), Some("sk-x"));
        assert_eq!(
            u.api_key_source.as_deref(),
            Some("TOOLPILOT_UPSTREAM_API_KEY")
        );
    }

    #[test]
    fn the_example_config_loads_and_documents_every_key() {
        let example = include_str!("../config.example.toml");
        let c = load(example, &[], CommonArgs::default()).unwrap();
        assert_eq!(c.agent.max_rounds, 25);
        assert_eq!(
            c.sensitive_files.len(),
            crate::workspace::DEFAULT_SENSITIVE.len()
        );
        // The example's protected paths are the defaults, so a copied example protects as much.
        assert_eq!(
            c.policy.protected,
            crate::policy::DEFAULT_PROTECTED
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        );
        // The example's deny_read is the default list (plus the state folder).
        let defaults = load("", &[], CommonArgs::default()).unwrap();
        assert_eq!(c.terminal.deny_read, defaults.terminal.deny_read);
        // Every key of every section, including the commented-out ones.
        let keys = [
            "workspace",
            "sensitive_files",
            "bind",
            "bearer_token_env",
            "admin_token_env",
            "allowed_hosts",
            "allowed_origins",
            "max_body_bytes",
            "keepalive_secs",
            "progress",
            "detach",
            "models",
            "context_window",
            "tool_mode",
            "kind",
            "fallback",
            "mode",
            "timeout_secs",
            "handoff",
            "handoff_max_age_secs",
            "handoff_max_bytes",
            "pause_expiry_secs",
            "url",
            "model",
            "api_key_env",
            "headers",
            "connect_timeout_secs",
            "first_byte_timeout_secs",
            "idle_timeout_secs",
            "total_timeout_secs",
            "max_retries",
            "retry_base_ms",
            "retry_max_wait_secs",
            "request_usage",
            "max_response_bytes",
            "max_rounds",
            "approve_asks",
            "default_tools",
            "detect_repeats",
            "output_budget",
            "grep_max_results",
            "grep_context_lines",
            "grep_max_per_file",
            "grep_max_file_bytes",
            "glob_max_results",
            "ls_max_entries",
            "diff_max_lines",
            "search_exclude",
            "search_timeout_secs",
            "git_timeout_secs",
            "command_writes",
            "deny",
            "ask",
            "allow",
            "max_download_bytes",
            "page_chars",
            "provider",
            "max_results",
            "system_message",
            "extra",
            "listing_entries",
            "global_dir",
            "agents_md",
            "max_file_bytes",
            "wait_secs",
            "embeddings_model",
            "rerank_candidates",
            "deny_read",
            "readonly",
        ];
        for key in keys {
            assert!(
                example
                    .lines()
                    .any(|l| l.trim_start_matches("# ").starts_with(&format!("{key} ="))),
                "config.example.toml does not document `{key}`"
            );
        }
        for section in [
            "[server]",
            "[upstream]",
            "[upstreams.",
            "[aliases]",
            "[agent]",
            "[tools]",
            "[policy]",
            "[policy.tools]",
            "[approvals]",
            "[web]",
            "[web.search]",
            "[prompt]",
            "[codebase]",
        ] {
            assert!(example.contains(section), "{section}");
        }
    }

    #[test]
    fn command_writes_is_ask_or_allow() {
        let c = load(
            "[policy]\ncommand_writes = \"allow\"\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap();
        assert_eq!(
            c.policy.command_writes,
            crate::policy::command::WritesSwitch::Allow
        );
        let c = load("", &[], CommonArgs::default()).unwrap();
        assert_eq!(
            c.policy.command_writes,
            crate::policy::command::WritesSwitch::Ask
        );
        let e = load(
            "[policy]\ncommand_writes = \"yes\"\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(
            e.contains("policy.command_writes: \"yes\" is not a choice"),
            "{e}"
        );
        let e = load(
            "[policy]\ncommand_write = \"allow\"\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(e.contains("unknown field `command_write`"), "{e}");
    }

    #[test]
    fn web_keys_are_validated_and_named() {
        let bad = |toml: &str| load(toml, &[], CommonArgs::default()).unwrap_err();
        let e = bad("[web]\nallow = [\"127.0.0.1\", \"10.0.0.0/33\"]\n");
        assert!(
            e.contains("web.allow[1] \"10.0.0.0/33\": not a valid address range"),
            "{e}"
        );
        let e = bad("[web]\nallow = [\"http://x/\"]\n");
        assert!(e.contains("web.allow[0]"), "{e}");
        let e = bad("[web]\ntimeout_secs = 0\n");
        assert!(e.contains("web.timeout_secs must be a positive"), "{e}");
        let e = bad("[web]\npage_chars = 10\n");
        assert!(e.contains("web.page_chars must be at least 1000"), "{e}");
        let e = bad("[web.search]\nprovider = \"google\"\n");
        assert!(
            e.contains("web.search.provider: \"google\" is not one of"),
            "{e}"
        );
        let e = bad("[web.search]\nprovider = \"searxng\"\n");
        assert!(
            e.contains("web.search.url: the searxng provider needs"),
            "{e}"
        );
        let e = bad("[web.search]\nprovider = \"brave\"\nurl = \"ftp://x\"\n");
        assert!(
            e.contains("web.search.url: \"ftp://x\" must be an http"),
            "{e}"
        );
        let e = bad("[web.search]\nprovider = \"brave\"\nmax_results = 50\n");
        assert!(
            e.contains("web.search.max_results must be between 1 and 20"),
            "{e}"
        );
        let e = bad("[web.search]\nurl = \"http://127.0.0.1:8888\"\n");
        assert!(e.contains("web.search.provider: set it"), "{e}");
        let e = bad("[web]\nallowed = []\n");
        assert!(e.contains("web.allowed: unknown field"), "{e}");

        let c = load(
            "[web.search]\nprovider = \"brave\"\n",
            &[("BRAVE_API_KEY", "brave-key-123456")],
            CommonArgs::default(),
        )
        .unwrap();
        let s = c.web.search.clone().unwrap();
        assert_eq!(s.provider, SearchProvider::Brave);
        assert_eq!(
            s.url.as_str(),
            "https://api.search.brave.com/res/v1/web/search"
        );
        assert_eq!(s.api_key.as_deref(), Some("brave-key-123456"));
        assert!(c.secret_var_names().contains(&"BRAVE_API_KEY".to_string()));
    }

    #[test]
    fn secrets_are_the_named_and_the_scrubbed_variables() {
        let c = load(
            "[web.search]\nprovider = \"tavily\"\napi_key_env = \"SEARCH_KEY\"\n",
            &[
                ("SEARCH_KEY", "tvly-0123456789abcdef"),
                ("MY_SERVICE_TOKEN", "service-token-value"),
                ("DB_PASSWORD", "hunter2hunter2"),
                ("SHORT_TOKEN", "abc"),
                ("PATH", "/usr/bin:/bin:/usr/local/bin"),
                ("TOOLPILOT_UPSTREAM_API_KEY", "sk-upstream-0123456789"),
            ],
            CommonArgs::default(),
        )
        .unwrap();
        let names: Vec<&str> = c.secrets.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                // The admin token generated for this start (64 hex digits, the longest).
                "TOOLPILOT_ADMIN_TOKEN",
                "TOOLPILOT_UPSTREAM_API_KEY",
                "SEARCH_KEY",
                "MY_SERVICE_TOKEN",
                "DB_PASSWORD"
            ]
        );
    }

    #[test]
    fn commands_are_denied_credentials_and_the_state_folder() {
        let state = CommonArgs {
            state_dir: Some("/var/tp".into()),
            ..CommonArgs::default()
        };
        let c = load("", &[], state.clone()).unwrap();
        let d = &c.terminal.deny_read;
        assert!(d.contains(&PathBuf::from("/home/test/.ssh")), "{d:?}");
        assert!(d.contains(&PathBuf::from("/home/test/.aws")), "{d:?}");
        assert_eq!(d.last(), Some(&PathBuf::from("/var/tp")));
        assert_eq!(d.len(), DEFAULT_DENY_READ.len() + 1);
        // Configured: the list replaces the defaults; the state folder is always added.
        let c = load(
            "[terminal]\ndeny_read = [\"~/.secret\", \"/etc/app/key\"]\n",
            &[],
            state.clone(),
        )
        .unwrap();
        assert_eq!(
            c.terminal.deny_read,
            [
                PathBuf::from("/home/test/.secret"),
                "/etc/app/key".into(),
                "/var/tp".into()
            ]
        );
        for (toml_text, message) in [
            (
                "deny_read = [\"notes\"]",
                "\"notes\" is not an absolute path",
            ),
            ("deny_read = [\"/\"]", "would hide every file"),
            (
                "readonly = [\"../x\"]",
                "must be a path inside the workspace",
            ),
            (
                "readonly = [\"/abs\"]",
                "must be a path inside the workspace",
            ),
        ] {
            let e = load(&format!("[terminal]\n{toml_text}\n"), &[], state.clone()).unwrap_err();
            assert!(e.contains(message), "{toml_text}: {e}");
        }
        let c = load(
            "[terminal]\nreadonly = [\".git\", \".vscode/tasks.json\"]\n",
            &[],
            state,
        )
        .unwrap();
        assert_eq!(
            c.terminal.readonly,
            [PathBuf::from(".git"), ".vscode/tasks.json".into()]
        );
    }

    #[test]
    fn the_admin_token_is_generated_unless_its_variable_is_set() {
        let a = load("", &[], CommonArgs::default()).unwrap();
        let b = load("", &[], CommonArgs::default()).unwrap();
        let (ta, tb) = (&a.server.admin_token, &b.server.admin_token);
        assert!(!ta.from_env && ta.value().len() == 64 && ta.value() != tb.value());
        assert!(ta.matches(ta.value()) && !ta.matches(tb.value()) && !ta.matches(""));
        assert!(
            !format!("{:?}", a.server).contains(ta.value()),
            "Debug shows the token"
        );
        let c = load(
            "[server]\nadmin_token_env = \"MY_ADMIN\"\n",
            &[("MY_ADMIN", "chosen-admin-token-1")],
            CommonArgs::default(),
        )
        .unwrap();
        let t = &c.server.admin_token;
        assert!(t.from_env && t.value() == "chosen-admin-token-1" && t.env == "MY_ADMIN");
        assert!(c.secret_var_names().contains(&"MY_ADMIN".to_string()));
        assert!(
            c.secrets
                .iter()
                .any(|(k, v)| k == "MY_ADMIN" && v == t.value())
        );
        let e = load(
            "",
            &[("TOOLPILOT_ADMIN_TOKEN", "short")],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(
            e.contains("$TOOLPILOT_ADMIN_TOKEN must be at least 16 printable characters"),
            "{e}"
        );
        let e = load(
            "",
            &[("TOOLPILOT_ADMIN_TOKEN", "has a space in it, sadly")],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(e.contains("without spaces"), "{e}");
    }

    #[test]
    fn errors_name_the_key() {
        let e = load("[agent]\nmax_roundz = 7\n", &[], CommonArgs::default()).unwrap_err();
        assert!(
            e.contains("agent.max_roundz: unknown field `max_roundz`"),
            "{e}"
        );
        let e = load(
            "[server]\nbind = \"localhost\"\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(e.contains("server.bind"), "{e}");
        let e = load(
            "[policy.tools]\nread_file = \"maybe\"\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(
            e.contains("policy.tools.read_file: \"maybe\" is not a policy"),
            "{e}"
        );
        let e = load(
            "[policy.tools]\nread_fil = \"allow\"\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(e.contains("no built-in tool named \"read_fil\""), "{e}");
        let e = load(
            "[upstream]\ntotal_timeout_secs = -1\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(
            e.contains("upstream.total_timeout_secs must be a positive"),
            "{e}"
        );
        let e = load("", &[("TOOLPILOT_AGENT__NOPE", "1")], CommonArgs::default()).unwrap_err();
        assert!(
            e.contains("TOOLPILOT_AGENT__NOPE (agent.nope): unknown field `nope`"),
            "{e}"
        );
        let e = load(
            "",
            &[("TOOLPILOT_AGENT__MAX_ROUNDS", "zero")],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(
            e.contains("TOOLPILOT_AGENT__MAX_ROUNDS (agent.max_rounds): invalid type"),
            "{e}"
        );
        let e = load(
            "[tools]\nls_max_entries = \"many\"\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(e.contains(": tools.ls_max_entries: invalid type"), "{e}");
        let e = load(
            "[policy]\ndeny = [\"read_file(\"]\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(e.contains("policy.deny"), "{e}");
        let e = load("[codebase]\nwait_secs = 0\n", &[], CommonArgs::default()).unwrap_err();
        assert!(e.contains("codebase.wait_secs must be a positive"), "{e}");
        let e = load(
            "[prompt]\nsystem_mesage = true\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap_err();
        assert!(e.contains("prompt.system_mesage: unknown field"), "{e}");
        let c = load(
            "[prompt]\nglobal_dir = \"~/rules-home\"\n",
            &[],
            CommonArgs::default(),
        )
        .unwrap();
        assert_eq!(
            c.prompt.global_dir.as_deref(),
            Some(std::path::Path::new("/home/test/rules-home"))
        );
    }
}
