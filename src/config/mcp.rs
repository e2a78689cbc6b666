//! `[mcp]`: the MCP servers whose tools toolpilot offers the model (`[mcp.servers.NAME]`).
//!
//! A server is a command (stdio) or a URL (streamable HTTP). Values of `env` and `headers` may
//! name the server's environment variables as `${VAR}`; they are expanded here, a missing
//! variable is an error naming the key, and the variables named become secrets (redacted from
//! every tool result, never passed to commands). Starting and calling the servers is
//! `mcp`'s business.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Env, Level, err, secs};

/// The `[mcp]` section, resolved.
#[derive(Debug, Clone, Default)]
pub struct McpConfig {
    /// By name, in name order.
    pub servers: Vec<McpServerConfig>,
    /// When more MCP tools than this would be offered, they are offered through one search
    /// tool (`mcp_tool_search`) instead of one by one.
    pub max_offered_tools: usize,
}

/// One `[mcp.servers.NAME]`.
#[derive(Debug, Clone)]
pub struct McpServerConfig {
    /// The name in the config, and in every tool name (`mcp__NAME__TOOL`).
    pub name: String,
    pub transport: McpTransport,
    /// The base policy of the server's tools (`ask` unless the server says otherwise);
    /// `policy.allow` / `ask` / `deny` rules naming `mcp__NAME__*` or one tool rank above it.
    pub policy: Level,
    /// How long a start may take (connect and the handshake); `npx` fetching a package on
    /// first use takes a while, hence the long default.
    pub startup_timeout: Duration,
    /// How long a call may go without an answer or a progress notification.
    pub call_timeout: Duration,
    /// How long a call may take at all, progress or not.
    pub call_max: Duration,
    /// Only these tools (by the server's names); `None`: all.
    pub enabled_tools: Option<Vec<String>>,
    /// Never these tools (by the server's names).
    pub disabled_tools: Vec<String>,
    /// The environment variables its `env` or `headers` name (`${VAR}`): secrets.
    pub vars: Vec<String>,
    /// A stdio server runs under the commands' Landlock sandbox where the kernel has it:
    /// writes only to the workspace, the temporary folder, the package caches and
    /// `writable`; reads everything but `terminal.deny_read` (and the state folder).
    pub sandbox: bool,
    /// More folders it may write (absolute, `~/` expanded).
    pub writable: Vec<PathBuf>,
    /// Whether it may open network connections (Landlock TCP rules, ABI 4+).
    pub network: bool,
}

/// How toolpilot reaches a server.
#[derive(Debug, Clone)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on its standard input and output.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Added to the scrubbed environment commands get, already expanded (secret values:
        /// never logged).
        env: Vec<(String, String)>,
        /// The working folder (default: the workspace).
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        /// Already expanded (secret values: never logged).
        headers: Vec<(String, String)>,
    },
}

impl McpTransport {
    pub fn label(&self) -> &'static str {
        match self {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct McpFile {
    pub(super) servers: Option<BTreeMap<String, McpServerFile>>,
    pub(super) max_offered_tools: Option<usize>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct McpServerFile {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    policy: Option<String>,
    enabled: Option<bool>,
    startup_timeout_secs: Option<f64>,
    call_timeout_secs: Option<f64>,
    call_max_secs: Option<f64>,
    enabled_tools: Option<Vec<String>>,
    disabled_tools: Option<Vec<String>>,
    sandbox: Option<bool>,
    writable: Option<Vec<String>>,
    network: Option<bool>,
}

/// Server names become part of tool names, which upstreams limit to `[a-zA-Z0-9_-]{1,64}`;
/// `__` separates the parts, so a name may not contain it.
const MAX_SERVER_NAME: usize = 32;

pub(super) fn resolve(f: McpFile, env: &Env<'_>) -> Result<McpConfig, ConfigError> {
    let mut servers = Vec::new();
    for (name, s) in f.servers.unwrap_or_default() {
        let key = format!("mcp.servers.{name}");
        let valid = !name.is_empty()
            && name.len() <= MAX_SERVER_NAME
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && !name.contains("__");
        if !valid {
            return Err(err(format!(
                "{key}: a server name is 1 to {MAX_SERVER_NAME} letters, digits, `-` or `_` \
                 (no `__`), since it becomes part of tool names (mcp__{name}__TOOL)"
            )));
        }
        if s.enabled == Some(false) {
            continue;
        }
        let vars: Vec<String> = s
            .env
            .iter()
            .chain(s.headers.iter())
            .flat_map(|m| m.values())
            .flat_map(|v| referenced_vars(v))
            .collect();
        let transport = match (s.command, s.url) {
            (Some(_), Some(_)) => {
                return Err(err(format!(
                    "{key}: set either `command` (a stdio server) or `url` (streamable HTTP), \
                     not both"
                )));
            }
            (None, None) => {
                return Err(err(format!(
                    "{key}: set `command` (a stdio server, with `args`, `env`, `cwd`) or `url` \
                     (streamable HTTP, with `headers`)"
                )));
            }
            (Some(command), None) => {
                if s.headers.is_some() {
                    return Err(err(format!(
                        "{key}.headers: headers are for `url` servers; a stdio server takes \
                         `env`"
                    )));
                }
                if command.trim().is_empty() {
                    return Err(err(format!("{key}.command: empty")));
                }
                let mut vars = Vec::new();
                for (k, v) in s.env.unwrap_or_default() {
                    vars.push((k.clone(), expand(&format!("{key}.env.{k}"), &v, env)?));
                }
                McpTransport::Stdio {
                    command,
                    args: s.args.unwrap_or_default(),
                    env: vars,
                    cwd: s.cwd,
                }
            }
            (None, Some(url)) => {
                for (field, set) in [
                    ("args", s.args.is_some()),
                    ("env", s.env.is_some()),
                    ("cwd", s.cwd.is_some()),
                    ("sandbox", s.sandbox.is_some()),
                    ("writable", s.writable.is_some()),
                    ("network", s.network.is_some()),
                ] {
                    if set {
                        return Err(err(format!(
                            "{key}.{field}: `{field}` is for `command` servers; a `url` server \
                             takes `headers`"
                        )));
                    }
                }
                let parsed = url::Url::parse(&url)
                    .map_err(|e| err(format!("{key}.url: {url:?} is not a URL: {e}")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(err(format!(
                        "{key}.url: {url:?} is not an http:// or https:// URL"
                    )));
                }
                let mut headers = Vec::new();
                for (k, v) in s.headers.unwrap_or_default() {
                    let field = format!("{key}.headers.{k}");
                    let value = expand(&field, &v, env)?;
                    if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                        return Err(err(format!("{field}: {k:?} is not a header name")));
                    }
                    if reqwest::header::HeaderValue::from_str(&value).is_err() {
                        return Err(err(format!(
                            "{field}: the value is not a valid header value (control \
                             characters or non-ASCII text)"
                        )));
                    }
                    headers.push((k, value));
                }
                McpTransport::Http { url, headers }
            }
        };
        let policy = match s.policy.as_deref() {
            None => Level::Ask,
            Some(p) => Level::parse(p).ok_or_else(|| {
                err(format!(
                    "{key}.policy: {p:?} is not a policy; use allow, ask or deny"
                ))
            })?,
        };
        let call_timeout = secs(
            &format!("{key}.call_timeout_secs"),
            s.call_timeout_secs,
            120.0,
        )?;
        let call_max = secs(&format!("{key}.call_max_secs"), s.call_max_secs, 1800.0)?;
        if call_max < call_timeout {
            return Err(err(format!(
                "{key}.call_max_secs ({} s) is shorter than call_timeout_secs ({} s)",
                call_max.as_secs_f64(),
                call_timeout.as_secs_f64()
            )));
        }
        let mut writable = Vec::new();
        for w in s.writable.unwrap_or_default() {
            writable.push(grant_path(&format!("{key}.writable"), &w, env)?);
        }
        servers.push(McpServerConfig {
            sandbox: s.sandbox.unwrap_or(true),
            writable,
            network: s.network.unwrap_or(true),
            name: name.clone(),
            transport,
            policy,
            startup_timeout: secs(
                &format!("{key}.startup_timeout_secs"),
                s.startup_timeout_secs,
                120.0,
            )?,
            call_timeout,
            call_max,
            enabled_tools: s.enabled_tools,
            disabled_tools: s.disabled_tools.unwrap_or_default(),
            vars,
        });
    }
    Ok(McpConfig {
        servers,
        max_offered_tools: f.max_offered_tools.unwrap_or(64),
    })
}

/// A folder a server may write: absolute, or `~/…` under HOME.
fn grant_path(key: &str, raw: &str, env: &Env<'_>) -> Result<PathBuf, ConfigError> {
    if let Some(rest) = raw.strip_prefix("~/") {
        let home = env("HOME")
            .ok_or_else(|| err(format!("{key}: {raw:?} starts with ~/ but HOME is not set")))?;
        return Ok(PathBuf::from(home).join(rest));
    }
    let p = PathBuf::from(raw);
    if !p.is_absolute() {
        return Err(err(format!(
            "{key}: {raw:?} is not an absolute path; write /… or ~/…"
        )));
    }
    Ok(p)
}

/// `${VAR}` in `value` replaced by the variable's value; `$$` is a `$`. A variable that is
/// not set (or empty) is an error naming the key, never silently empty.
fn expand(key: &str, value: &str, env: &Env<'_>) -> Result<String, ConfigError> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(rest.get(..at).unwrap_or_default());
        let after = rest.get(at + 1..).unwrap_or_default();
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else {
                return Err(err(format!(
                    "{key}: `${{` without a closing `}}`; write ${{VAR}} (or $$ for a `$`)"
                )));
            };
            let var = body.get(..end).unwrap_or_default();
            if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(err(format!(
                    "{key}: ${{{var}}} does not name an environment variable"
                )));
            }
            let Some(v) = env(var) else {
                return Err(err(format!(
                    "{key}: the environment variable {var} is not set (the value names it as \
                     ${{{var}}})"
                )));
            };
            out.push_str(&v);
            rest = body.get(end + 1..).unwrap_or_default();
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The variables `${VAR}` in the values name (for the server's secrets).
pub fn referenced_vars(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        let body = rest.get(at + 2..).unwrap_or_default();
        let Some(end) = body.find('}') else { break };
        if !rest.get(..at).unwrap_or_default().ends_with('$') {
            out.push(body.get(..end).unwrap_or_default().to_string());
        }
        rest = body.get(end + 1..).unwrap_or_default();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret-value".into()),
            _ => None,
        }
    }

    #[test]
    fn variables_are_expanded_and_a_missing_one_is_named() {
        let e: &Env<'_> = &env;
        assert_eq!(
            expand("k", "Bearer ${TOKEN}", e)
                .map_err(|e| e.0)
                .as_deref(),
            Ok("Bearer s3cret-value")
        );
        assert_eq!(
            expand("k", "$$5 and $x", e).map_err(|e| e.0).as_deref(),
            Ok("$5 and $x")
        );
        let missing = expand("mcp.servers.gh.env.GH", "${NOPE}", e)
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert!(
            missing.contains("mcp.servers.gh.env.GH") && missing.contains("NOPE is not set"),
            "{missing}"
        );
        assert!(expand("k", "${A", e).is_err());
        assert_eq!(referenced_vars("a ${X} $${Y} ${Z}"), vec!["X", "Z"]);
    }
}
