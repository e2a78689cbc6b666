//! `[web]` and `[web.search]`: how `fetch_url_content` reaches the web, and the search
//! provider.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use serde::Deserialize;

use super::{ConfigError, Env, err, positive, secs};

/// One `web.allow` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowEntry {
    /// An address or range: any host resolving into it may be reached.
    Range(IpNet),
    /// A host name: exactly this host.
    Host(String),
    /// `*.example.com`: every subdomain of `example.com` (not `example.com` itself).
    Subdomains(String),
}

impl AllowEntry {
    /// Parses `10.0.0.0/8`, `127.0.0.1`, `::1`, `wiki.corp.example` or `*.corp.example`.
    pub fn parse(text: &str) -> Result<AllowEntry, String> {
        let t = text.trim().to_ascii_lowercase();
        if t.is_empty() {
            return Err("an entry is empty".into());
        }
        if let Ok(net) = t.parse::<IpNet>() {
            return Ok(AllowEntry::Range(net.trunc()));
        }
        let bare = t.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(AllowEntry::Range(IpNet::from(ip)));
        }
        if t.contains('/') {
            return Err("not a valid address range; write it like 10.0.0.0/8 or fd00::/8".into());
        }
        let (wild, name) = match t.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, t.as_str()),
        };
        let name = name.trim_end_matches('.');
        let valid = !name.is_empty()
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        if !valid {
            return Err(
                "not a host name or address; use a name like wiki.corp.example, *.corp.example, \
                 an address like 127.0.0.1 or a range like 10.0.0.0/8"
                    .into(),
            );
        }
        Ok(if wild {
            AllowEntry::Subdomains(name.to_string())
        } else {
            AllowEntry::Host(name.to_string())
        })
    }
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

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct WebFile {
    pub(super) allow: Option<Vec<String>>,
    pub(super) connect_timeout_secs: Option<f64>,
    pub(super) timeout_secs: Option<f64>,
    pub(super) max_download_bytes: Option<usize>,
    pub(super) page_chars: Option<usize>,
    pub(super) search: Option<SearchFile>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchFile {
    pub(super) provider: Option<String>,
    pub(super) url: Option<String>,
    pub(super) api_key_env: Option<String>,
    pub(super) max_results: Option<usize>,
    pub(super) timeout_secs: Option<f64>,
}

/// `[web]` and `[web.search]`.
pub(super) fn resolve(w: WebFile, env: &Env<'_>) -> Result<WebConfig, ConfigError> {
    let d = WebConfig::default();
    let allow = w.allow.unwrap_or_default();
    for (i, entry) in allow.iter().enumerate() {
        AllowEntry::parse(entry).map_err(|e| err(format!("web.allow[{i}] {entry:?}: {e}")))?;
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

fn resolve_search(sf: SearchFile, env: &Env<'_>) -> Result<Option<SearchConfig>, ConfigError> {
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
