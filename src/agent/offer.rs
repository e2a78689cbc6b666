//! `Offer`: which tool names the model is offered, which of them run here and which belong
//! to the client.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::Engine;
use crate::config::Config;
use crate::openai::{ChatRequest, tool_spec_name};
use crate::tools::{Registry, spec_json_for};

/// Which tool names the model is offered, and who executes them.
#[derive(Clone)]
pub(super) struct Offer {
    /// The `tools` array sent upstream, serialised once (per engine for the default set, per
    /// run otherwise) and shared by every request body (`None`: no tools).
    pub(super) specs: Option<Bytes>,
    /// Executed here.
    pub(super) server: Arc<HashSet<String>>,
    /// Passed back to the client.
    pub(super) client: Arc<HashSet<String>>,
    /// Both (what a tool call written as text may name).
    pub(super) names: Arc<HashSet<String>>,
}

impl Offer {
    pub(super) fn finish(
        server: HashSet<String>,
        client: HashSet<String>,
        specs: Option<Bytes>,
    ) -> Offer {
        let names = server.iter().chain(client.iter()).cloned().collect();
        Offer {
            specs,
            server: Arc::new(server),
            client: Arc::new(client),
            names: Arc::new(names),
        }
    }

    /// A plain completion: whatever tools the client declared are its own, none run here.
    pub(super) fn plain(req: &ChatRequest) -> Offer {
        let tools = req.tools.as_deref().unwrap_or_default();
        let client = tools
            .iter()
            .filter_map(tool_spec_name)
            .map(str::to_string)
            .collect();
        Offer::finish(
            HashSet::new(),
            client,
            raw_specs(&tools.iter().collect::<Vec<_>>()),
        )
    }

    /// The offer for a request: toolpilot's own set when it declares no tools; else the
    /// built-ins it declares run here, the rest are the client's, and the built-ins named in
    /// `augment` (`server.augment`, or the request's header) join them, run here.
    pub(super) fn new(
        engine: &Engine,
        req: &ChatRequest,
        snapshot: &crate::prompt::Snapshot,
        augment: &[String],
    ) -> Offer {
        let reg = &engine.registry;
        let Some(tools) = &req.tools else {
            // No tools in the request: toolpilot's own set, prepared once per engine (and
            // again only when the rules or skills its descriptions list change).
            return engine.default_offer(snapshot);
        };
        let mut specs: Vec<&Value> = Vec::new();
        let (mut server, mut client) = (HashSet::new(), HashSet::new());
        for spec in tools {
            let Some(name) = tool_spec_name(spec) else {
                specs.push(spec);
                continue;
            };
            // The IDE knows its open file; without one in the request, let it answer.
            let client_knows_better =
                name == "read_currently_open_file" && req.current_file.is_none();
            // A built-in that cannot run here (search_web without a provider) stays the
            // client's, which may well run it.
            let unavailable_here = reg.unavailable(name).is_some();
            if reg.get(name).is_some() && !client_knows_better && !unavailable_here {
                if reg.is_enabled(name) {
                    server.insert(name.to_string());
                    specs.push(spec);
                } else if reg.policy().level_source(name) == "default" {
                    // Disabled only by Continue's default (create_rule_block, request_rule):
                    // the client declaring it means its user enabled it there, so it stays
                    // the client's tool.
                    client.insert(name.to_string());
                    specs.push(spec);
                }
            } else {
                client.insert(name.to_string());
                specs.push(spec);
            }
        }
        let mut added = Vec::new();
        // The MCP servers' tools join every run's tools, except a name the client declares
        // itself: that stays the client's.
        add_mcp(reg, snapshot, &mut server, &client, &mut added);
        for name in augment {
            if server.contains(name) || client.contains(name) || !reg.is_enabled(name) {
                continue;
            }
            if let Some(tool) = reg.get(name).filter(|_| reg.unavailable(name).is_none()) {
                server.insert(name.clone());
                added.push(spec_json_for(tool, snapshot));
            }
        }
        specs.extend(added.iter());
        Offer::finish(server, client, raw_specs(&specs))
    }

    /// toolpilot's own set: every enabled built-in, or `agent.default_tools`.
    pub(super) fn default(
        reg: &Registry,
        config: &Config,
        snapshot: &crate::prompt::Snapshot,
    ) -> Offer {
        let wanted = config.agent.default_tools.as_ref();
        let mut server = HashSet::new();
        let mut specs = Vec::new();
        for tool in reg.tools() {
            let name = tool.name();
            // Offered with the MCP tools when there are too many of them (`add_mcp`).
            if name == SEARCH {
                continue;
            }
            if wanted.is_some_and(|w| !w.iter().any(|n| n == name)) {
                continue;
            }
            if reg.is_enabled(name) {
                server.insert(name.to_string());
                specs.push(spec_json_for(tool, snapshot));
            }
        }
        add_mcp(reg, snapshot, &mut server, &HashSet::new(), &mut specs);
        Offer::finish(
            server,
            HashSet::new(),
            raw_specs(&specs.iter().collect::<Vec<_>>()),
        )
    }
}

/// The tool that finds MCP tools when there are too many to offer.
const SEARCH: &str = "mcp_tool_search";

/// Adds the MCP tools the policy does not disable and the client does not declare itself:
/// their specs, or, when there are more than `mcp.max_offered_tools`, only their names (so
/// calls of them run here) and `mcp_tool_search`, which gives the model the schemas of the
/// ones it looks for.
fn add_mcp(
    reg: &Registry,
    snapshot: &crate::prompt::Snapshot,
    server: &mut HashSet<String>,
    client: &HashSet<String>,
    specs: &mut Vec<Value>,
) {
    let Some(mcp) = reg.mcp() else {
        return;
    };
    let policy = reg.policy();
    let tools: Vec<Arc<crate::mcp::McpTool>> = mcp
        .tools()
        .into_iter()
        .filter(|t| policy.level(&t.name) != crate::policy::Level::Disabled)
        .filter(|t| !client.contains(&t.name) && !server.contains(&t.name))
        .collect();
    let by_search = tools.len() > mcp.max_offered_tools;
    for t in &tools {
        server.insert(t.name.clone());
        if !by_search {
            specs.push(t.spec.clone());
        }
    }
    if by_search
        && reg.is_enabled(SEARCH)
        && !client.contains(SEARCH)
        && server.insert(SEARCH.to_string())
        && let Some(search) = reg.get(SEARCH)
    {
        specs.push(spec_json_for(search, snapshot));
    }
}

/// The `tools` array, serialised once.
pub(super) fn raw_specs(specs: &[&Value]) -> Option<Bytes> {
    if specs.is_empty() {
        return None;
    }
    serde_json::to_vec(specs).ok().map(Bytes::from)
}

pub(super) fn unknown_tool_message(name: &str, offer: &Offer) -> String {
    let mut names: Vec<&str> = offer
        .server
        .iter()
        .chain(offer.client.iter())
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    format!(
        "There is no tool named {name:?} in this conversation, so nothing was run. The tools \
         you can call are: {}.",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )
}
