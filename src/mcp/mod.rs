//! The MCP servers toolpilot consumes (`[mcp.servers.NAME]`): started, watched, restarted,
//! and their tools listed and called, with the official SDK (`rmcp`).
//!
//! [`Mcp`] owns one supervisor task per server (`server.rs`): start (a child process on
//! stdio, or streamable HTTP) within the start-up timeout, list the tools, keep the list
//! fresh on `notifications/tools/list_changed`, and when the server dies or cannot start,
//! try again with a doubling backoff. The tools are offered as `mcp__SERVER__TOOL`
//! (`names.rs`); a call's result becomes text (`result.rs`). Nothing here decides whether a
//! call may run: `tools::registry::dispatch` asks the policy first, as for a built-in tool.

pub mod names;
pub mod result;
mod server;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::McpConfig;
use crate::terminal::Terminal;

pub use server::Phase;

/// One tool of an MCP server, as offered to the model.
#[derive(Debug)]
pub struct McpTool {
    /// The offered name (`mcp__SERVER__TOOL`, within 64 characters).
    pub name: String,
    /// The server's name in the config.
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    /// The spec sent upstream: the server's description and input schema.
    pub spec: Value,
}

/// The MCP servers of an engine.
pub struct Mcp {
    servers: Vec<Arc<server::Server>>,
    started: AtomicBool,
    /// Cancelled by [`Mcp::stop`] (or when the `Mcp` is dropped): every supervisor stops its
    /// server and ends.
    stop: CancellationToken,
    _stop_on_drop: tokio_util::sync::DropGuard,
    /// Bumped whenever a server's tool list changes, so cached offers know to rebuild.
    generation: Arc<AtomicU64>,
    /// How many MCP tools may be offered one by one (`mcp.max_offered_tools`).
    pub max_offered_tools: usize,
}

/// What a supervisor needs from the rest of the server.
#[derive(Clone)]
pub(crate) struct Context {
    pub(crate) terminal: Arc<Terminal>,
    pub(crate) workspace: PathBuf,
    pub(crate) generation: Arc<AtomicU64>,
    pub(crate) stop: CancellationToken,
}

impl Mcp {
    /// The configured servers, not started yet.
    pub fn new(config: &McpConfig, terminal: Arc<Terminal>, workspace: PathBuf) -> Mcp {
        let stop = CancellationToken::new();
        let generation = Arc::new(AtomicU64::new(0));
        let cx = Context {
            terminal,
            workspace,
            generation: Arc::clone(&generation),
            stop: stop.clone(),
        };
        Mcp {
            servers: config
                .servers
                .iter()
                .map(|s| Arc::new(server::Server::new(s.clone(), cx.clone())))
                .collect(),
            started: AtomicBool::new(false),
            _stop_on_drop: stop.clone().drop_guard(),
            stop,
            generation,
            max_offered_tools: config.max_offered_tools,
        }
    }

    /// Whether any server is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Starts every server's supervisor (once; later calls do nothing). Needs a Tokio runtime.
    pub fn start(&self) {
        if self.servers.is_empty() || self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        for s in &self.servers {
            tokio::spawn(server::supervise(Arc::clone(s)));
        }
    }

    /// Starts the servers if need be and waits until each has finished its first start
    /// (ready or failed; each within its start-up timeout).
    pub async fn ready(&self) {
        self.start();
        for s in &self.servers {
            s.first_start_done().await;
        }
    }

    /// Stops every server (the shutdown) and waits, at most `grace`, until their processes
    /// have ended.
    pub async fn shutdown(&self, grace: Duration) {
        self.stop.cancel();
        if !self.started.load(Ordering::Acquire) {
            return;
        }
        let deadline = tokio::time::Instant::now() + grace;
        while self.servers.iter().any(|s| s.phase().0 != Phase::Stopped)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Changes whenever a tool list changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Every tool of every server, in config order (the last list each server gave).
    pub fn tools(&self) -> Vec<Arc<McpTool>> {
        self.servers
            .iter()
            .flat_map(|s| s.tools().iter().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// The tool offered under `name`.
    pub fn tool(&self, name: &str) -> Option<Arc<McpTool>> {
        if !name.starts_with("mcp__") {
            return None;
        }
        self.servers
            .iter()
            .find_map(|s| s.tools().iter().find(|t| t.name == name).cloned())
    }

    /// Whether `name` has the shape of a tool of a configured server (whether or not the
    /// server lists it now).
    pub fn owns_name(&self, name: &str) -> Option<&str> {
        self.servers
            .iter()
            .find(|s| name.starts_with(&names::prefix(&s.config.name)))
            .map(|s| s.config.name.as_str())
    }

    /// How long a call of `tool` may take at all (`call_max_secs`), for the registry's
    /// deadline; the idle timeout, reset by progress, is applied inside.
    pub fn deadline(&self, tool: &McpTool) -> Duration {
        self.server(&tool.server)
            .map(|s| s.config.call_max + Duration::from_secs(5))
            .unwrap_or(Duration::from_secs(60))
    }

    fn server(&self, name: &str) -> Option<&Arc<server::Server>> {
        self.servers.iter().find(|s| s.config.name == name)
    }

    /// Calls `tool` with `arguments` (a JSON object). `Ok` is the result's text; `Err` says
    /// what went wrong (the server's `isError` text, a timeout, a server that is down or died
    /// during the call), written for the model.
    pub async fn call(&self, tool: &McpTool, arguments: Value) -> Result<String, String> {
        let Some(server) = self.server(&tool.server) else {
            return Err(format!("the MCP server {} is not configured", tool.server));
        };
        server.call(&tool.tool, arguments).await
    }

    /// Every server with its transport, state, restarts and tools (`/healthz`,
    /// `toolpilot tools`).
    pub fn status(&self) -> Value {
        Value::Array(
            self.servers
                .iter()
                .map(|s| {
                    let (phase, detail, restarts) = s.phase();
                    let tools: Vec<Value> = s
                        .tools()
                        .iter()
                        .map(|t| json!({"name": t.name, "tool": t.tool}))
                        .collect();
                    json!({
                        "name": s.config.name,
                        "transport": s.config.transport.label(),
                        "state": phase.label(),
                        "detail": detail,
                        "restarts": restarts,
                        "policy": s.config.policy.as_continue(),
                        "tools": tools,
                    })
                })
                .collect(),
        )
    }
}

/// A shared string slot (a server's last stderr lines, its last error).
pub(crate) type Slot<T> = Arc<Mutex<T>>;
