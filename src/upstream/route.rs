//! Several upstreams: which one serves a requested model, and where to go when it fails.
//!
//! A requested name is looked up as an alias first (an alias names a model and maybe an
//! upstream), then among the exact names the upstreams list in `models`, then among their
//! globs (in configuration order: `[upstream]` first, then `[upstreams.NAME]` by name), and
//! finally the one upstream without a `models` list takes anything else. With no upstream
//! configured, the built-in demo model answers everything.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Upstream, UpstreamError, demo};
use crate::config::{Alias, Config, ToolMode, UpstreamConfig};

/// Why a requested model has no upstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The request named no model and no upstream sends one of its own.
    #[error(
        "`model` is required: name the upstream model in the request, or start toolpilot with \
         --model NAME"
    )]
    NoModel,
    /// No alias, name, glob or catch-all upstream takes the name.
    #[error(
        "no upstream serves the model {requested:?}. Routable models: {}. (GET /v1/models lists \
         them; add the name to an upstream's `models` or to `[aliases]`.)",
        routable.join(", ")
    )]
    Unknown {
        requested: String,
        routable: Vec<String>,
    },
}

/// One upstream and what is known about it.
pub struct Endpoint {
    pub name: String,
    pub upstream: Upstream,
    /// `None` for the demo model.
    pub cfg: Option<UpstreamConfig>,
    /// Context windows found out so far, by model (`None`: the upstream does not say). The
    /// names come from clients: at most [`MAX_WINDOWS`] are kept.
    windows: Mutex<HashMap<String, Option<u64>>>,
}

/// Most model names whose context window an endpoint remembers (a catch-all upstream is
/// asked about any name a client sends).
const MAX_WINDOWS: usize = 256;
/// Longer names are no model's: their window is neither asked for nor kept.
const MAX_MODEL_NAME: usize = 256;

/// Remembers `model`'s window in `windows`, making room when it is full.
fn remember(windows: &Mutex<HashMap<String, Option<u64>>>, model: &str, window: Option<u64>) {
    let Ok(mut w) = windows.lock() else { return };
    if w.len() >= MAX_WINDOWS && !w.contains_key(model) {
        // Any entry: a forgotten window is only asked for again.
        if let Some(k) = w.keys().next().cloned() {
            w.remove(&k);
        }
    }
    w.insert(model.to_string(), window);
}

impl Endpoint {
    pub fn tool_mode(&self) -> ToolMode {
        self.cfg.as_ref().map_or(ToolMode::Native, |c| c.tool_mode)
    }

    /// The model's context window in tokens: configured, else asked of the upstream once per
    /// model (its model list, llama.cpp's `/props`, LM Studio's or Ollama's model info).
    pub async fn context_window(&self, model: &str) -> Option<u64> {
        if let Some(w) = self.cfg.as_ref().and_then(|c| c.context_window) {
            return Some(w);
        }
        if let Some(known) = self.windows.lock().ok().and_then(|w| w.get(model).copied()) {
            return known;
        }
        if model.len() > MAX_MODEL_NAME {
            return None;
        }
        let found = match &self.upstream {
            Upstream::Http(h) => h.discover_context_window(model).await,
            Upstream::Demo => None,
        };
        match found {
            Some(n) => {
                tracing::info!(upstream = %self.name, model, tokens = n, "context window found")
            }
            None => tracing::info!(
                upstream = %self.name,
                model,
                "the upstream does not say how large the context window is; set context_window \
                 in its config section to let toolpilot keep requests within it"
            ),
        }
        remember(&self.windows, model, found);
        found
    }
}

impl Endpoint {
    /// Remembers a window the upstream named in an error.
    pub fn learn_window(&self, model: &str, tokens: u64) {
        if model.len() <= MAX_MODEL_NAME {
            remember(&self.windows, model, Some(tokens));
        }
    }
}

/// Where one run's rounds go.
#[derive(Clone)]
pub struct Route {
    pub endpoint: Arc<Endpoint>,
    /// The model name sent.
    pub model: String,
    /// The name the client asked for (what a fallback upstream is asked for too).
    pub requested: String,
}

pub struct Upstreams {
    endpoints: Vec<Arc<Endpoint>>,
    aliases: BTreeMap<String, Alias>,
    exact: HashMap<String, usize>,
    globs: Vec<(globset::GlobMatcher, usize)>,
    catch_all: Option<usize>,
}

impl Upstreams {
    pub fn from_config(config: &Config) -> Result<Upstreams, String> {
        let mut endpoints = Vec::new();
        for c in &config.upstreams {
            endpoints.push(Arc::new(Endpoint {
                name: c.name.clone(),
                upstream: Upstream::from_config(Some(c))?,
                cfg: Some(c.clone()),
                windows: Mutex::default(),
            }));
        }
        if endpoints.is_empty() {
            endpoints.push(Arc::new(Endpoint {
                name: "demo".into(),
                upstream: Upstream::Demo,
                cfg: None,
                windows: Mutex::default(),
            }));
        }
        let mut exact = HashMap::new();
        let mut globs = Vec::new();
        let mut catch_all = None;
        for (i, e) in endpoints.iter().enumerate() {
            let models = e.cfg.as_ref().map(|c| c.models.as_slice()).unwrap_or(&[]);
            if models.is_empty() {
                catch_all = Some(i);
            }
            for m in models {
                if m.contains(['*', '?', '[', '{']) {
                    let g = globset::Glob::new(m)
                        .map_err(|err| format!("upstreams.{}.models: {m:?}: {err}", e.name))?;
                    globs.push((g.compile_matcher(), i));
                } else if let Some(&other) = exact.get(m) {
                    let other: &Arc<Endpoint> = &endpoints[other];
                    return Err(format!(
                        "the model {m:?} is listed by two upstreams ({} and {}); list it in one",
                        other.name, e.name
                    ));
                } else {
                    exact.insert(m.clone(), i);
                }
            }
        }
        Ok(Upstreams {
            endpoints,
            aliases: config.aliases.clone(),
            exact,
            globs,
            catch_all,
        })
    }

    pub fn is_demo(&self) -> bool {
        self.endpoints.iter().all(|e| e.upstream.is_demo())
    }

    /// For logs and `/healthz`: each upstream's name and URL.
    pub fn describe(&self) -> String {
        self.endpoints
            .iter()
            .map(|e| match &e.cfg {
                Some(c) if self.endpoints.len() > 1 => format!("{} ({})", c.name, c.base_url),
                Some(c) => c.base_url.to_string(),
                None => e.upstream.describe(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn endpoints(&self) -> &[Arc<Endpoint>] {
        &self.endpoints
    }

    /// The upstream and model name for a requested model.
    pub fn route(&self, requested: Option<&str>) -> Result<Route, RouteError> {
        if self.is_demo() {
            return Ok(Route {
                endpoint: Arc::clone(&self.endpoints[0]),
                model: demo::MODEL.to_string(),
                requested: demo::MODEL.to_string(),
            });
        }
        let Some(requested) = requested.map(str::trim).filter(|m| !m.is_empty()) else {
            // Without a name, an upstream that always sends its own model can still answer.
            if let Some(i) = self.catch_all
                && let Some(m) = self.endpoints[i].cfg.as_ref().and_then(|c| c.model.clone())
            {
                return Ok(self.at(i, &m, &m));
            }
            return Err(RouteError::NoModel);
        };
        let (name, pinned) = match self.aliases.get(requested) {
            Some(a) => (a.model.as_str(), a.upstream.as_deref()),
            None => (requested, None),
        };
        if let Some(up) = pinned
            && let Some(i) = self.endpoints.iter().position(|e| e.name == up)
        {
            return Ok(self.at(i, name, requested));
        }
        if let Some(&i) = self.exact.get(name) {
            return Ok(self.at(i, name, requested));
        }
        if let Some((_, i)) = self.globs.iter().find(|(g, _)| g.is_match(name)) {
            return Ok(self.at(*i, name, requested));
        }
        if let Some(i) = self.catch_all {
            return Ok(self.at(i, name, requested));
        }
        Err(RouteError::Unknown {
            requested: requested.to_string(),
            routable: self.routable_names(),
        })
    }

    fn at(&self, i: usize, model: &str, requested: &str) -> Route {
        let endpoint = Arc::clone(&self.endpoints[i]);
        let model = endpoint
            .cfg
            .as_ref()
            .and_then(|c| c.model.clone())
            .unwrap_or_else(|| model.to_string());
        Route {
            endpoint,
            model,
            requested: requested.to_string(),
        }
    }

    /// Where to go when `route`'s upstream fails: its `fallback` upstreams, in order.
    pub fn fallbacks(&self, route: &Route) -> Vec<Route> {
        let Some(cfg) = &route.endpoint.cfg else {
            return Vec::new();
        };
        cfg.fallback
            .iter()
            .filter_map(|name| self.endpoints.iter().position(|e| &e.name == name))
            .map(|i| {
                // The fallback serves the name the client asked for, through an alias if it
                // is one (unless it always sends its own model).
                let name = match self.aliases.get(&route.requested) {
                    Some(a) => a.model.clone(),
                    None => route.requested.clone(),
                };
                self.at(i, &name, &route.requested)
            })
            .collect()
    }

    /// Names listed in configuration: aliases and exact model names.
    fn routable_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.aliases.keys().cloned().collect();
        let mut exact: Vec<&String> = self.exact.keys().collect();
        exact.sort();
        names.extend(exact.into_iter().cloned());
        for (g, _) in &self.globs {
            names.push(g.glob().glob().to_string());
        }
        if let Some(i) = self.catch_all {
            names.push(format!(
                "any other name (sent to {})",
                self.endpoints[i].name
            ));
        }
        names
    }

    /// `GET /v1/models`: aliases, the configured names, and what the upstreams without a
    /// list of their own report (asked concurrently; one that fails is left out and logged).
    pub async fn models(&self) -> Result<Value, UpstreamError> {
        let mut data: Vec<Value> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut push = |id: &str, owned_by: &str, extra: Option<Value>| {
            if seen.insert(id.to_string()) {
                let mut v =
                    json!({"id": id, "object": "model", "created": 0, "owned_by": owned_by});
                if let (Some(Value::Object(extra)), Value::Object(m)) = (extra, &mut v) {
                    m.extend(extra);
                }
                data.push(v);
            }
        };
        for (alias, a) in &self.aliases {
            let target = match &a.upstream {
                Some(u) => format!("{u}/{}", a.model),
                None => a.model.clone(),
            };
            push(alias, "toolpilot", Some(json!({"alias_of": target})));
        }
        let mut exact: Vec<(&String, &usize)> = self.exact.iter().collect();
        exact.sort();
        for (m, &i) in exact {
            push(m, &self.endpoints[i].name, None);
        }
        // Upstreams that take any name, or names by glob, are asked what they have.
        let asked: Vec<usize> = (0..self.endpoints.len())
            .filter(|i| self.catch_all == Some(*i) || self.globs.iter().any(|(_, g)| g == i))
            .collect();
        let lists = futures_util::future::join_all(asked.iter().map(|&i| async move {
            let e = &self.endpoints[i];
            let r = tokio::time::timeout(Duration::from_secs(15), e.upstream.models()).await;
            (i, e, r)
        }))
        .await;
        let mut failure = None;
        for (_, e, r) in lists {
            match r {
                Ok(Ok(v)) => {
                    for m in v["data"].as_array().into_iter().flatten() {
                        let Some(id) = m.get("id").and_then(Value::as_str) else {
                            continue;
                        };
                        let routed_here = match self.route(Some(id)) {
                            Ok(r) => Arc::ptr_eq(&r.endpoint, e),
                            Err(_) => false,
                        };
                        // Only names that would really be routed here (not to an upstream
                        // that lists them, or to a glob of another one).
                        if routed_here {
                            push(id, &e.name, None);
                        }
                    }
                }
                Ok(Err(err)) => {
                    tracing::warn!(upstream = %e.name, error = %err, "GET /models failed");
                    failure = Some(err);
                }
                Err(_) => {
                    tracing::warn!(upstream = %e.name, "GET /models took longer than 15 s");
                }
            }
        }
        if let (true, Some(f)) = (data.is_empty(), failure) {
            return Err(f);
        }
        Ok(json!({"object": "list", "data": data}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_windows_remembered_are_bounded() {
        let windows = Mutex::default();
        for i in 0..3 * MAX_WINDOWS {
            remember(&windows, &format!("model-{i}"), Some(4096));
        }
        let w = windows.lock().unwrap();
        assert_eq!(w.len(), MAX_WINDOWS);
        assert_eq!(
            w.get(&format!("model-{}", 3 * MAX_WINDOWS - 1)),
            Some(&Some(4096))
        );
    }
}
