//! `mcp_tool_search`: the MCP servers' tools found by words, when there are too many to offer
//! one by one (`mcp.max_offered_tools`). The model gets their names, descriptions and input
//! schemas, and calls the one it needs by name (the offer accepts every MCP tool's name).

use serde_json::{Value, json};

use super::args::Args;
use super::{Invocation, Tool, ToolEnv, ToolError};
use crate::mcp::McpTool;
use crate::policy::Target;

pub struct McpToolSearch;

/// The most tools one search returns.
const MAX_LIMIT: i64 = 20;

impl Tool for McpToolSearch {
    fn name(&self) -> &'static str {
        "mcp_tool_search"
    }

    fn description(&self) -> &'static str {
        include_str!("descriptions/mcp_tool_search.md")
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words describing what the tool should do, or part of its name"},
                "limit": {"type": "integer", "description": "How many tools to return at most (default 5, at most 20)"}
            },
            "required": ["query"]
        })
    }

    fn read_only(&self) -> bool {
        true
    }

    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let query = args.string("query")?;
        let limit = match args.get("limit") {
            None => 5,
            Some(_) => args.integer("limit")?,
        };
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ToolError::InvalidArguments(format!(
                "`limit` must be between 1 and {MAX_LIMIT}, got {limit}"
            )));
        }
        let tools = env.mcp.as_ref().map(|m| m.tools()).unwrap_or_default();
        Ok(Invocation {
            targets: vec![Target::Pattern(query.clone())],
            job: Box::pin(async move { Ok(search(&tools, &query, limit as usize)) }),
        })
    }
}

/// The tools that match the most words of `query` (in names three times as much as in
/// descriptions), best first, with their schemas.
pub fn search(tools: &[std::sync::Arc<McpTool>], query: &str, limit: usize) -> String {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, &McpTool)> = tools
        .iter()
        .map(|t| {
            let name = t.name.to_lowercase();
            let description = t
                .spec
                .pointer("/function/description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_lowercase();
            let score = words
                .iter()
                .map(|w| {
                    3 * usize::from(name.contains(w.as_str()))
                        + usize::from(description.contains(w.as_str()))
                })
                .sum();
            (score, t.as_ref())
        })
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    if scored.is_empty() {
        let mut servers: Vec<&str> = tools.iter().map(|t| t.server.as_str()).collect();
        servers.dedup();
        return format!(
            "No MCP tool matches {query:?} ({} tools of the servers {} searched). Try other \
             words, such as a verb and an object (\"list files\", \"create issue\").",
            tools.len(),
            servers.join(", ")
        );
    }
    let shown: Vec<Value> = scored
        .iter()
        .take(limit)
        .map(|(_, t)| {
            json!({
                "name": t.name,
                "description": t.spec.pointer("/function/description"),
                "parameters": t.spec.pointer("/function/parameters"),
            })
        })
        .collect();
    format!(
        "{} of {} matching MCP tools (call one by its name, with arguments that follow its \
         parameters):\n{}",
        shown.len(),
        scored.len(),
        serde_json::to_string_pretty(&shown).unwrap_or_default()
    )
}
