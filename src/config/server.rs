//! `[server]`: the address, the tokens, what a browser may call, streams.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Env, err, positive, secs};

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
    /// Built-in tools offered (and run here) besides the client's own, to clients that declare
    /// their own tool set (Codex, `cn`); a request's `x-toolpilot-augment` header overrides it.
    pub augment: Vec<String>,
    /// A model name starting with this (`plain/qwen2.5-coder`) asks for a plain completion:
    /// the request reaches the upstream as it is, without toolpilot's tools, system message or
    /// loop (Continue's apply, edit and autocomplete roles).
    pub plain_prefix: String,
    /// Where to append what clients send (one JSON line per request), for debugging a client:
    /// the file holds whole conversations.
    pub record_requests: Option<std::path::PathBuf>,
    /// On SIGTERM or SIGINT: how long runs in flight may go on before they are ended with an
    /// error (no new connection is accepted meanwhile; a second signal exits at once).
    pub shutdown_grace: Duration,
    /// Serve the built-in tools to MCP clients at `/mcp` (streamable HTTP), under the same
    /// guard and policy as the rest of the API.
    pub mcp: bool,
    /// Put an MCP call's `ask` to the MCP client too (elicitation), when it declared them. The
    /// client's answer approves like `--yes` (never what only a person may approve).
    pub mcp_elicitation: bool,
    /// Threads that accept and serve connections, each with its own event loop and its own
    /// upstream connections, so that a request is read, sent upstream and answered by one
    /// thread. At least 1 (`workers = 0` in the file means one per CPU core).
    pub workers: usize,
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

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ServerFile {
    pub(super) bind: Option<String>,
    pub(super) bearer_token_env: Option<String>,
    pub(super) admin_token_env: Option<String>,
    pub(super) allowed_hosts: Option<Vec<String>>,
    pub(super) allowed_origins: Option<Vec<String>>,
    pub(super) max_body_bytes: Option<usize>,
    pub(super) keepalive_secs: Option<f64>,
    pub(super) progress: Option<String>,
    pub(super) detach: Option<bool>,
    pub(super) augment: Option<Vec<String>>,
    pub(super) plain_prefix: Option<String>,
    pub(super) record_requests: Option<std::path::PathBuf>,
    pub(super) shutdown_grace_secs: Option<f64>,
    pub(super) mcp: Option<bool>,
    pub(super) mcp_elicitation: Option<bool>,
    pub(super) workers: Option<usize>,
}

/// The most worker threads `server.workers` accepts.
pub const MAX_WORKERS: usize = 256;

/// `server.workers`: 0 or unset is one per CPU core the process may use.
fn workers(n: Option<usize>) -> Result<usize, ConfigError> {
    match n {
        Some(n) if n > MAX_WORKERS => Err(err(format!(
            "server.workers: {n} is more than {MAX_WORKERS}; one thread per CPU core (0, the \
             default) serves best"
        ))),
        Some(n) if n > 0 => Ok(n),
        _ => Ok(std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_WORKERS)),
    }
}

pub(super) fn resolve(s: ServerFile, env: &Env<'_>) -> Result<ServerConfig, ConfigError> {
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
    Ok(ServerConfig {
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
        augment: augment_list("server.augment", s.augment.unwrap_or_default())?,
        plain_prefix: match s.plain_prefix {
            Some(p) if p.trim().is_empty() => {
                return Err(err(
                    "server.plain_prefix must not be empty: every model name would start with it",
                ));
            }
            Some(p) => p,
            None => "plain/".into(),
        },
        record_requests: s.record_requests,
        shutdown_grace: secs("server.shutdown_grace_secs", s.shutdown_grace_secs, 10.0)?,
        mcp: s.mcp.unwrap_or(true),
        mcp_elicitation: s.mcp_elicitation.unwrap_or(true),
        workers: workers(s.workers)?,
    })
}

/// A list of built-in tool names to offer besides a client's own (`server.augment`, the
/// `x-toolpilot-augment` header): each must be a built-in tool; `where_` names the source.
pub fn augment_list(where_: &str, names: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let known = super::known_tool_names();
    for name in &names {
        if !known.contains(&name.as_str()) {
            return Err(err(format!(
                "{where_}: {name:?} is not a built-in tool; known tools: {}",
                known.join(", ")
            )));
        }
    }
    Ok(names)
}
