//! The only way tools reach the network: fetching pages and searching the web.
//!
//! [`Web`] holds one HTTP client for pages, built so that every address it connects to has
//! been vetted by [`guard`] (a resolver that returns only vetted addresses, no proxies, no
//! automatic redirects), and the configured search provider ([`search`]). `fetch.rs` follows
//! redirects by hand, re-checking each hop, and streams bodies under a size limit;
//! `html.rs` turns HTML into Markdown. Converted pages are kept for a few minutes so that
//! reading a long page part by part fetches it once. Nothing here decides whether a call may
//! run (the policy does, through `tools::registry`), and nothing here knows about tool
//! messages beyond the texts of its errors.

pub mod fetch;
pub mod guard;
pub mod html;
pub mod search;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::WebConfig;

pub use fetch::{Document, FetchError};

/// How long a fetched page is kept for reading its further parts.
const CACHE_TTL: Duration = Duration::from_secs(600);
/// How many pages are kept, and how many bytes in all.
const CACHE_PAGES: usize = 16;
const CACHE_BYTES: usize = 32 * 1024 * 1024;

/// Pages and search, shared by every run of a server.
pub struct Web {
    pub config: WebConfig,
    guard: Arc<guard::Guard>,
    client: reqwest::Client,
    /// The search provider, or why there is none.
    search: Result<search::Searcher, String>,
    cache: Mutex<VecDeque<(String, Instant, Arc<Document>)>>,
}

impl Web {
    pub fn new(config: &WebConfig) -> Result<Web, String> {
        crate::process::install_crypto_provider();
        let guard = Arc::new(guard::Guard::new(&config.allow));
        let client = reqwest::Client::builder()
            // Connect only to addresses the guard vetted: the resolver returns nothing else,
            // and a proxy would connect somewhere else on our behalf.
            .dns_resolver(Arc::new(guard::GuardResolver {
                guard: Arc::clone(&guard),
            }))
            .no_proxy()
            // Every hop is checked by `fetch`, so redirects are never followed automatically.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(2)
            .user_agent(concat!(
                "Mozilla/5.0 (compatible; toolpilot/",
                env!("CARGO_PKG_VERSION"),
                "; fetch_url_content)"
            ))
            .build()
            .map_err(|e| format!("cannot build the web client: {e}"))?;
        let search = match &config.search {
            None => Err(
                "search_web is not available: no search provider is configured. The \
                 administrator can set one in the toolpilot configuration, for example \
                 [web.search] provider = \"searxng\" with url = \"http://127.0.0.1:8888\" (a \
                 self-hosted SearXNG), or provider = \"brave\" or \"tavily\" with the API key in \
                 the environment variable named by api_key_env."
                    .to_string(),
            ),
            Some(s) => search::Searcher::new(s),
        };
        Ok(Web {
            config: config.clone(),
            guard,
            client,
            search,
            cache: Mutex::new(VecDeque::new()),
        })
    }

    /// The address guard (for checks before a call is approved).
    pub fn guard(&self) -> &guard::Guard {
        &self.guard
    }

    /// Why `search_web` cannot run here, if it cannot.
    pub fn search_unavailable(&self) -> Option<&str> {
        self.search.as_ref().err().map(String::as_str)
    }

    /// The search provider, or why there is none.
    pub fn searcher(&self) -> Result<&search::Searcher, &str> {
        self.search.as_ref().map_err(String::as_str)
    }

    /// A page fetched in the last minutes, by the URL it was asked for.
    pub fn cached(&self, url: &str) -> Option<Arc<Document>> {
        let mut cache = self.cache.lock().ok()?;
        cache.retain(|(_, at, _)| at.elapsed() < CACHE_TTL);
        cache
            .iter()
            .find(|(u, _, _)| u == url)
            .map(|(_, _, d)| Arc::clone(d))
    }

    /// Keeps a converted page for reading its further parts.
    pub fn remember(&self, url: &str, doc: Arc<Document>) {
        let Ok(mut cache) = self.cache.lock() else {
            return;
        };
        cache.retain(|(u, at, _)| u != url && at.elapsed() < CACHE_TTL);
        cache.push_back((url.to_string(), Instant::now(), doc));
        let mut bytes: usize = cache.iter().map(|(_, _, d)| d.text.len()).sum();
        while cache.len() > CACHE_PAGES || (bytes > CACHE_BYTES && cache.len() > 1) {
            if let Some((_, _, d)) = cache.pop_front() {
                bytes -= d.text.len();
            }
        }
    }
}
