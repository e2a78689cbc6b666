//! The server's secrets: the variables it reads keys and tokens from, and every variable
//! `terminal.scrub_env` names. Tool output never shows their values.

use super::Config;
use crate::text::glob_match;

impl Config {
    /// The environment variables that hold the server's own secrets: the upstream API key,
    /// the bearer token, the search API key and the variables MCP servers' `env` and `headers`
    /// name (commands never get them; tool output never
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
        for server in &self.mcp.servers {
            names.extend(server.vars.iter().cloned());
        }
        names.sort();
        names.dedup();
        names
    }
}

/// Values shorter than this are not treated as secrets: redacting `1` or `true` everywhere
/// would destroy output and protect nothing.
const MIN_SECRET_LEN: usize = 8;

/// The `(variable, value)` pairs of `env` that are secrets: the named secret variables and
/// every variable matching `terminal.scrub_env`. Longest values first, so a secret that
/// contains another is replaced whole.
pub(super) fn collect(config: &Config, env: &[(String, String)]) -> Vec<(String, String)> {
    let named = config.secret_var_names();
    let mut out: Vec<(String, String)> = env
        .iter()
        .filter(|(k, v)| {
            v.trim().len() >= MIN_SECRET_LEN
                && (named.contains(k) || config.terminal.scrub_env.iter().any(|p| glob_match(p, k)))
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
