//! Web search through a configured provider: a self-hosted SearXNG (JSON API), Brave Search
//! or Tavily.
//!
//! The provider's URL is the administrator's configuration, not the model's input, so it is
//! not subject to the address guard (a SearXNG on 127.0.0.1 is the usual setup). The API key
//! comes from the environment, goes only into the provider's request header, and is never
//! logged. Results are plain data for the model: title, URL, snippet.

use std::time::Duration;

use serde_json::Value;

use crate::config::{SearchConfig, SearchProvider};

/// Largest provider answer read.
const MAX_RESPONSE_BYTES: usize = 2 * 1024 * 1024;

/// One result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

/// A configured provider.
pub struct Searcher {
    pub config: SearchConfig,
    client: reqwest::Client,
}

impl Searcher {
    /// The provider, or why it cannot be used (a hosted provider without its key).
    pub fn new(config: &SearchConfig) -> Result<Searcher, String> {
        if config.provider != SearchProvider::Searxng && config.api_key.is_none() {
            return Err(format!(
                "search_web is not available: web.search.provider = \"{}\" needs an API key in \
                 the environment variable {}, which is not set on the toolpilot server. The \
                 administrator can set it and restart toolpilot.",
                provider_key(config.provider),
                config.api_key_env.as_deref().unwrap_or("(none)")
            ));
        }
        crate::process::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .timeout(config.timeout)
            .user_agent(concat!("toolpilot/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the search client: {e}"))?;
        Ok(Searcher {
            config: config.clone(),
            client,
        })
    }

    pub fn label(&self) -> &'static str {
        self.config.provider.label()
    }

    /// Runs one query. Errors are text for the model.
    pub async fn search(&self, query: &str) -> Result<Vec<Hit>, String> {
        let c = &self.config;
        let n = c.max_results;
        let request = match c.provider {
            SearchProvider::Searxng => {
                let mut url = c.url.clone();
                let path = format!("{}/search", url.path().trim_end_matches('/'));
                url.set_path(&path);
                url.query_pairs_mut()
                    .append_pair("q", query)
                    .append_pair("format", "json");
                let mut r = self.client.get(url);
                if let Some(key) = &c.api_key {
                    r = r.bearer_auth(key);
                }
                r
            }
            SearchProvider::Brave => self
                .client
                .get({
                    let mut url = c.url.clone();
                    url.query_pairs_mut()
                        .append_pair("q", query)
                        .append_pair("count", &n.to_string());
                    url
                })
                .header(
                    "X-Subscription-Token",
                    c.api_key.clone().unwrap_or_default(),
                )
                .header(reqwest::header::ACCEPT, "application/json"),
            SearchProvider::Tavily => self
                .client
                .post(c.url.clone())
                .bearer_auth(c.api_key.clone().unwrap_or_default())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(serde_json::json!({"query": query, "max_results": n}).to_string()),
        };
        let label = self.label();
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                format!(
                    "the search provider ({label}) did not answer within {} \
                     (web.search.timeout_secs); try again later",
                    super::fetch::human_duration(c.timeout)
                )
            } else {
                format!(
                    "could not reach the search provider ({label}) at {}: {}. The provider may \
                     be down; try again later or do without search",
                    c.url.origin().ascii_serialization(),
                    crate::text::error_chain(&e)
                )
            }
        })?;
        let status = response.status();
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            format!(
                "reading the answer of {label} failed: {}",
                crate::text::error_chain(&e)
            )
        })? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(format!(
                    "the answer of the search provider ({label}) is larger than 2 MiB; it was \
                     not read"
                ));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(self.status_error(status));
        }
        let json: Value = serde_json::from_slice(&body).map_err(|e| {
            format!(
                "the answer of the search provider ({label}) is not the JSON expected ({e}; it \
                 starts with {:?}). {}",
                crate::text::preview(&String::from_utf8_lossy(&body), 80),
                if c.provider == SearchProvider::Searxng {
                    "SearXNG answers JSON only when `json` is listed in search.formats of its \
                     settings.yml"
                } else {
                    "The provider may have changed its API; try again later"
                }
            )
        })?;
        let (list, title, url, snippet) = match c.provider {
            SearchProvider::Searxng | SearchProvider::Tavily => {
                (json.get("results"), "title", "url", "content")
            }
            SearchProvider::Brave => (
                json.get("web").and_then(|w| w.get("results")),
                "title",
                "url",
                "description",
            ),
        };
        let Some(list) = list else {
            // Brave answers without `web` when nothing was found.
            if c.provider == SearchProvider::Brave && json.get("type").is_some() {
                return Ok(Vec::new());
            }
            return Err(format!(
                "the answer of the search provider ({label}) has no result list (expected {}); \
                 it may have changed its API",
                match c.provider {
                    SearchProvider::Brave => "web.results",
                    _ => "results",
                }
            ));
        };
        let Some(items) = list.as_array() else {
            return Err(format!(
                "the answer of the search provider ({label}) has a result list that is not a list"
            ));
        };
        let text = |v: &Value, key: &str| {
            v.get(key)
                .and_then(Value::as_str)
                .map(clean)
                .unwrap_or_default()
        };
        Ok(items
            .iter()
            .map(|item| Hit {
                title: text(item, title),
                url: text(item, url),
                snippet: text(item, snippet),
            })
            .filter(|h| !h.url.is_empty())
            .take(n)
            .collect())
    }

    fn status_error(&self, status: reqwest::StatusCode) -> String {
        let label = self.label();
        let code = format!(
            "HTTP {} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or_default()
        );
        let key = self.config.api_key_env.as_deref().unwrap_or("the API key");
        match status.as_u16() {
            401 | 403 if self.config.provider == SearchProvider::Searxng => format!(
                "the search provider ({label}) refused the request ({code}). SearXNG answers 403 \
                 when the JSON format is not enabled (`json` in search.formats of its \
                 settings.yml). Tell the user; search is unavailable until it is fixed"
            ),
            401 | 403 => format!(
                "the search provider ({label}) refused the API key ({code}): check the key in \
                 {key}. Tell the user; search is unavailable until it is fixed"
            ),
            429 => format!(
                "the search provider ({label}) is rate-limiting ({code}): too many searches or \
                 the plan's quota is used up. Wait before searching again, or do without search"
            ),
            400..=499 => format!(
                "the search provider ({label}) rejected the query ({code}); try simpler words"
            ),
            _ => format!(
                "the search provider ({label}) failed ({code}); try again later or do without \
                 search"
            ),
        }
    }
}

fn provider_key(p: SearchProvider) -> &'static str {
    match p {
        SearchProvider::Searxng => "searxng",
        SearchProvider::Brave => "brave",
        SearchProvider::Tavily => "tavily",
    }
}

/// Whitespace collapsed, HTML tags that some providers put in snippets (`<strong>`) removed.
fn clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            _ => out.push(c),
        }
    }
    let out = out
        .replace("&amp;", "&")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The results as the model sees them: a short numbered list.
pub fn render(query: &str, provider: &str, hits: &[Hit], snippet_chars: usize) -> String {
    if hits.is_empty() {
        return format!("No web results for \"{query}\" ({provider}). Try other or fewer words.");
    }
    let mut out = format!(
        "Web results for \"{query}\" ({provider}, {} result{}):\n",
        hits.len(),
        if hits.len() == 1 { "" } else { "s" }
    );
    for (i, h) in hits.iter().enumerate() {
        let title = if h.title.is_empty() {
            "(no title)"
        } else {
            &h.title
        };
        out.push_str(&format!("\n{}. {title}\n   {}\n", i + 1, h.url));
        if !h.snippet.is_empty() {
            let snippet: String = if h.snippet.chars().count() > snippet_chars {
                let cut: String = h.snippet.chars().take(snippet_chars).collect();
                format!("{}…", cut.trim_end())
            } else {
                h.snippet.clone()
            };
            out.push_str(&format!("   {snippet}\n"));
        }
    }
    out.push_str("\nRead a result in full with fetch_url_content.");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_cleaned() {
        assert_eq!(
            clean("  The <strong>Rust</strong>\n  book &amp; more  "),
            "The Rust book & more"
        );
    }

    #[test]
    fn results_render_as_a_short_list() {
        let hits = vec![
            Hit {
                title: "A".into(),
                url: "https://a.example/".into(),
                snippet: "x".repeat(10),
            },
            Hit {
                title: String::new(),
                url: "https://b.example/".into(),
                snippet: String::new(),
            },
        ];
        assert_eq!(
            render("q", "SearXNG", &hits, 5),
            "Web results for \"q\" (SearXNG, 2 results):\n\n1. A\n   https://a.example/\n   \
             xxxxx…\n\n2. (no title)\n   https://b.example/\n\nRead a result in full with \
             fetch_url_content."
        );
        assert_eq!(
            render("q", "Brave Search", &[], 5),
            "No web results for \"q\" (Brave Search). Try other or fewer words."
        );
    }
}
