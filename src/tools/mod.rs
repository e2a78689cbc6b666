//! The built-in tools: what each one takes, does and returns.
//!
//! A tool turns the model's arguments into an [`Invocation`] in [`Tool::prepare`] (argument
//! checks and path resolution happen there, so the policy sees the resolved targets), and the
//! invocation's future does the work. Tools never decide permissions: [`registry::Registry`]
//! asks the policy between `prepare` and running the future, and is the only place that does.

// Slicing a string or a slice at an unchecked index panics on input someone else chose (a
// path of multi-byte characters, a short line): use `get`, `split_at_checked`, iterators or
// the char-boundary helpers of `text` instead.
#![cfg_attr(not(test), deny(clippy::string_slice, clippy::indexing_slicing))]

pub mod args;
pub mod codebase;
pub mod diff;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod ls;
pub mod mcp_search;
pub mod read;
pub mod registry;
pub mod rules;
pub mod subdir;
pub mod terminal;
pub mod web;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::ToolsConfig;
use crate::policy::{Access, Target};
use crate::workspace::{Workspace, WorkspacePath};

use crate::text::floor_char_boundary;
pub use registry::Registry;

/// The policy targets of acting on `path`: the path as named and, when it goes through
/// in-workspace symlinks, the file it really is (so a link to `.env` is treated like `.env`).
pub fn path_targets(ws: &Workspace, path: &WorkspacePath, access: Access) -> Vec<Target> {
    let mut targets = vec![Target::Path {
        path: path.clone(),
        access,
    }];
    if let Some(real) = ws.real_path(path) {
        targets.push(Target::Path { path: real, access });
    }
    targets
}

/// A tool call that passed argument checks and is ready to run once the policy allows it.
pub struct Invocation {
    pub targets: Vec<Target>,
    pub job: Job,
}

/// The work of one tool call. Dropping it before it is polled runs nothing.
pub type Job = Pin<Box<dyn Future<Output = Result<String, ToolError>> + Send>>;

/// Everything a tool may use while it runs. One per run, shared by its tool calls.
#[derive(Clone)]
pub struct ToolEnv {
    pub workspace: Arc<Workspace>,
    pub config: Arc<ToolsConfig>,
    /// The file open in the client's editor, if the client said.
    pub current_file: Option<String>,
    /// Cancelled when the run ends early (client gone); long tools stop at the next check.
    pub cancel: CancellationToken,
    /// Records the prior state of every file the run changes (for undo).
    pub checkpoint: Arc<crate::checkpoint::RunCheckpoint>,
    /// File versions this run has seen, to refuse edits based on stale reads.
    pub seen: Arc<edit::SeenFiles>,
    /// The upstream model, for `edit_existing_file` changes that cannot be placed
    /// deterministically (`tools.llm_apply`).
    pub apply: Option<Arc<dyn edit::ApplyModel>>,
    /// Commands: configuration, sandbox, background jobs.
    pub terminal: Arc<crate::terminal::Terminal>,
    /// Whole-tree snapshots around commands (for the checkpoint).
    pub shadow: crate::checkpoint::tree::Shadow,
    /// The run's id (background jobs carry it).
    pub run_id: String,
    /// Pages and search: the only way a tool reaches the network.
    pub web: Arc<crate::web::Web>,
    /// The server's secrets and well-known secret shapes: every result passes it, and the
    /// web tools refuse arguments that carry a secret.
    pub redactor: Arc<crate::redact::Redactor>,
    /// The policy, for redirect hops of a running `fetch_url_content`.
    pub hops: registry::HopGate,
    /// Rules and skills (`request_rule`, `read_skill`; `create_rule_block` refreshes them).
    pub prompt: Arc<crate::prompt::Prompt>,
    /// The codebase index (`codebase`).
    pub code: Arc<crate::code::index::CodeIndex>,
    /// Embeddings for re-ranking `codebase` results (the upstream, when configured).
    pub embedder: Option<Arc<dyn crate::code::Embedder>>,
    /// The MCP servers (`mcp_tool_search` searches their tools).
    pub mcp: Option<Arc<crate::mcp::Mcp>>,
}

impl ToolEnv {
    /// Notes that the run has seen `path` (as opened, with metadata `meta`).
    pub fn saw(&self, path: &WorkspacePath, meta: &std::fs::Metadata) {
        let real = self
            .workspace
            .real_path(path)
            .unwrap_or_else(|| path.clone());
        self.seen
            .record(&real, crate::workspace::write::Version::of(meta));
    }
}

/// How a tool call failed. Both variants reach the model as a tool message; the loop goes on.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments are wrong; the model should fix them and call again.
    #[error("{0}")]
    InvalidArguments(String),
    /// The tool ran (or tried to) and failed; the text says what to try.
    #[error("{0}")]
    Failed(String),
}

/// A built-in tool.
pub trait Tool: Send + Sync {
    fn name(&self) -> &'static str;
    /// The description the model sees.
    fn description(&self) -> &'static str;
    /// A description generated from the workspace's rules and skills (`request_rule`,
    /// `read_skill`), used instead of [`Tool::description`] when toolpilot offers the tool.
    fn dynamic_description(&self, _snapshot: &crate::prompt::Snapshot) -> Option<String> {
        None
    }
    /// The JSON schema of the arguments (names and types exactly as in Continue).
    fn parameters(&self) -> serde_json::Value;
    /// Read-only tools may run concurrently with each other within a round.
    fn read_only(&self) -> bool;
    /// Checks the arguments and resolves paths; returns the targets and the work to do.
    fn prepare(&self, args: &args::Args, env: &ToolEnv) -> Result<Invocation, ToolError>;
    /// How long a call may run before it is abandoned and the model told
    /// (`tools.call_timeout_secs`, unless the tool has a longer limit of its own).
    fn deadline(&self, env: &ToolEnv) -> std::time::Duration {
        env.config.call_timeout
    }
}

/// The spec sent upstream for a tool, in the OpenAI shape.
pub fn spec_json(tool: &dyn Tool) -> serde_json::Value {
    serde_json::json!({
        "type": "function",
        "function": {
            "name": tool.name(),
            "description": tool.description(),
            "parameters": tool.parameters(),
        }
    })
}

/// The spec sent upstream for a tool, with its generated description when it has one.
pub fn spec_json_for(tool: &dyn Tool, snapshot: &crate::prompt::Snapshot) -> serde_json::Value {
    let mut spec = spec_json(tool);
    if let Some(d) = tool.dynamic_description(snapshot)
        && let Some(f) = spec.get_mut("function").and_then(|f| f.as_object_mut())
    {
        f.insert("description".into(), serde_json::Value::String(d));
    }
    spec
}

/// Runs blocking file work off the async threads.
pub fn blocking<F>(f: F) -> Job
where
    F: FnOnce() -> Result<String, ToolError> + Send + 'static,
{
    Box::pin(async move {
        match tokio::task::spawn_blocking(f).await {
            Ok(r) => r,
            Err(e) => Err(ToolError::Failed(format!(
                "the tool stopped unexpectedly: {e}"
            ))),
        }
    })
}

/// Cuts `text` to at most `budget` bytes at a line boundary where possible, and says what was
/// cut and how to get the rest. Returns the text unchanged when it fits.
pub fn fit_budget(text: String, budget: usize, how_to_get_more: &str) -> String {
    if text.len() <= budget {
        return text;
    }
    let mut cut = floor_char_boundary(&text, budget);
    if let Some(nl) = text.get(..cut).and_then(|t| t.rfind('\n'))
        && nl > budget / 2
    {
        cut = nl + 1;
    }
    let head = text.get(..cut).unwrap_or_default();
    let shown_lines = head.lines().count();
    let total_lines = text.lines().count();
    let mut out = head.to_string();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "[output cut: showing {} of {} bytes ({shown_lines} of {total_lines} lines). {how_to_get_more}]",
        cut,
        text.len()
    ));
    out
}

/// All built-in tools toolpilot executes itself, in the order they are offered.
pub fn builtin_tools() -> Vec<Box<dyn Tool>> {
    vec![
        Box::new(read::ReadFile),
        Box::new(read::ReadFileRange),
        Box::new(read::ReadCurrentlyOpenFile),
        Box::new(ls::Ls),
        Box::new(glob::FileGlobSearch),
        Box::new(grep::GrepSearch),
        Box::new(diff::ViewDiff),
        Box::new(subdir::ViewSubdirectory),
        Box::new(edit::CreateNewFile),
        Box::new(edit::EditExistingFile),
        Box::new(edit::SingleFindAndReplace),
        Box::new(edit::MultiEdit),
        Box::new(edit::SearchAndReplaceInFile),
        Box::new(terminal::RunTerminalCommand),
        Box::new(terminal::CheckBackgroundJob),
        Box::new(terminal::StopBackgroundJob),
        Box::new(web::FetchUrlContent),
        Box::new(web::SearchWeb),
        Box::new(rules::CreateRuleBlock),
        Box::new(rules::RequestRule),
        Box::new(rules::ReadSkill),
        Box::new(codebase::Codebase),
        Box::new(codebase::ViewRepoMap),
        Box::new(mcp_search::McpToolSearch),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_budget_cuts_at_a_line_and_says_so() {
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let out = fit_budget(text.clone(), 100, "Narrow the request.");
        assert!(out.starts_with("line 1\nline 2\n"));
        assert!(out.contains("[output cut: showing"), "{out}");
        assert!(out.contains("of 100 lines). Narrow the request.]"), "{out}");
        assert_eq!(fit_budget("short".into(), 100, "x"), "short");
        // Never splits a multi-byte character.
        let s = "é".repeat(100);
        let out = fit_budget(s, 51, "x");
        assert!(out.starts_with(&"é".repeat(25)));
    }
}
