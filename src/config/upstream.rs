//! `[upstream]`, `[upstreams.NAME]` and `[aliases]`: the model servers and the names that
//! route to them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Env, err, positive, secs};

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
    /// Ask the upstream for a stream even when the client does not stream (`false`, the
    /// default: a client that does not stream gets a non-streamed upstream answer, which the
    /// upstream produces faster).
    pub always_stream: bool,
    pub max_response_bytes: usize,
    /// Send the model's `reasoning_content` back with its assistant messages in the rounds of
    /// a run (thinking models that call tools, such as DeepSeek's, require it); off: it is
    /// only shown to the client.
    pub send_reasoning: bool,
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

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct UpstreamFile {
    pub(super) url: Option<String>,
    pub(super) model: Option<String>,
    pub(super) api_key_env: Option<String>,
    pub(super) headers: Option<BTreeMap<String, String>>,
    pub(super) connect_timeout_secs: Option<f64>,
    pub(super) first_byte_timeout_secs: Option<f64>,
    pub(super) idle_timeout_secs: Option<f64>,
    pub(super) total_timeout_secs: Option<f64>,
    pub(super) max_retries: Option<u32>,
    pub(super) retry_base_ms: Option<u64>,
    pub(super) retry_max_wait_secs: Option<f64>,
    pub(super) request_usage: Option<bool>,
    pub(super) always_stream: Option<bool>,
    pub(super) max_response_bytes: Option<usize>,
    pub(super) models: Option<Vec<String>>,
    pub(super) context_window: Option<u64>,
    pub(super) tool_mode: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) fallback: Option<Vec<String>>,
    pub(super) send_reasoning: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum AliasFile {
    Model(String),
    Target {
        model: String,
        upstream: Option<String>,
    },
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
        20.0,
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
        always_stream: u.always_stream.or(inherit.always_stream).unwrap_or(false),
        max_response_bytes,
        send_reasoning: u.send_reasoning.or(inherit.send_reasoning).unwrap_or(false),
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

/// The upstreams, `[upstream]` (when it has a URL, from the file or `--upstream`) first, and
/// the aliases, checked against each other.
pub(super) fn resolve(
    u: &UpstreamFile,
    url_flag: Option<String>,
    named: BTreeMap<String, UpstreamFile>,
    alias_files: BTreeMap<String, AliasFile>,
    env: &Env<'_>,
) -> Result<(Vec<UpstreamConfig>, BTreeMap<String, Alias>), ConfigError> {
    let mut upstreams = Vec::new();
    // Validated even without a URL, so a typo is caught before it matters.
    let default = resolve_upstream("upstream", "default", u, &UpstreamFile::default(), env)?;
    if let Some(text) = url_flag.or(u.url.clone()) {
        upstreams.push(UpstreamConfig {
            base_url: base_url("upstream.url", &text)?,
            // `[upstream] model` is the global `--model`.
            model: None,
            ..default
        });
    }
    for (name, f) in named {
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
        let mut c = resolve_upstream(&key, &name, &f, u, env)?;
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
    let aliases = aliases(alias_files, &names)?;
    Ok((upstreams, aliases))
}

/// `[aliases]`: each names a model, and maybe one of the configured upstreams (`names`).
fn aliases(
    files: BTreeMap<String, AliasFile>,
    names: &[String],
) -> Result<BTreeMap<String, Alias>, ConfigError> {
    let mut aliases = BTreeMap::new();
    for (alias, a) in files {
        let target = match a {
            AliasFile::Model(model) => Alias {
                model,
                upstream: None,
            },
            AliasFile::Target { model, upstream } => Alias { model, upstream },
        };
        if let Some(up) = &target.upstream
            && !names.contains(up)
        {
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
        if target.model.trim().is_empty() {
            return Err(err(format!("aliases.{alias}: the model name is empty")));
        }
        aliases.insert(alias, target);
    }
    Ok(aliases)
}
