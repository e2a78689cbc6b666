//! `[tools]`: output budget, search and listing limits, timeouts.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, err, positive, secs};

#[derive(Debug, Clone)]
pub struct ToolsConfig {
    /// Most bytes of one tool result the model sees.
    pub output_budget: usize,
    pub grep_max_results: usize,
    pub grep_context_lines: usize,
    pub grep_max_per_file: usize,
    pub glob_max_results: usize,
    pub ls_max_entries: usize,
    pub diff_max_lines: usize,
    pub search_exclude: Vec<String>,
    pub search_timeout: Duration,
    pub git_timeout: Duration,
    /// The deadline of one tool call (a command's is its own time limit plus this; an edit
    /// the model applies adds the upstream's total timeout). A call still running then is
    /// abandoned and the model is told.
    pub call_timeout: Duration,
    /// Files larger than this are skipped by grep (like minified bundles and dumps).
    pub grep_max_file_bytes: u64,
    /// When `edit_existing_file` cannot place the changes deterministically, ask the
    /// upstream model to apply them (its output is verified before anything is written).
    pub llm_apply: bool,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            output_budget: 50_000,
            grep_max_results: 100,
            grep_context_lines: 2,
            grep_max_per_file: 100,
            glob_max_results: 200,
            ls_max_entries: 200,
            diff_max_lines: 5_000,
            search_exclude: vec!["node_modules/".into(), "__pycache__/".into()],
            search_timeout: Duration::from_secs(30),
            git_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(120),
            grep_max_file_bytes: 20 * 1024 * 1024,
            llm_apply: true,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ToolsFile {
    pub(super) output_budget: Option<usize>,
    pub(super) grep_max_results: Option<usize>,
    pub(super) grep_context_lines: Option<usize>,
    pub(super) grep_max_per_file: Option<usize>,
    pub(super) grep_max_file_bytes: Option<u64>,
    pub(super) glob_max_results: Option<usize>,
    pub(super) ls_max_entries: Option<usize>,
    pub(super) diff_max_lines: Option<usize>,
    pub(super) search_exclude: Option<Vec<String>>,
    pub(super) search_timeout_secs: Option<f64>,
    pub(super) git_timeout_secs: Option<f64>,
    pub(super) call_timeout_secs: Option<f64>,
    pub(super) llm_apply: Option<bool>,
}

pub(super) fn resolve(t: ToolsFile) -> Result<ToolsConfig, ConfigError> {
    let d = ToolsConfig::default();
    let tools = ToolsConfig {
        output_budget: positive("tools.output_budget", t.output_budget, d.output_budget)?,
        grep_max_results: positive(
            "tools.grep_max_results",
            t.grep_max_results,
            d.grep_max_results,
        )?,
        grep_context_lines: t.grep_context_lines.unwrap_or(d.grep_context_lines),
        grep_max_per_file: positive(
            "tools.grep_max_per_file",
            t.grep_max_per_file,
            d.grep_max_per_file,
        )?,
        grep_max_file_bytes: t.grep_max_file_bytes.unwrap_or(d.grep_max_file_bytes),
        glob_max_results: positive(
            "tools.glob_max_results",
            t.glob_max_results,
            d.glob_max_results,
        )?,
        ls_max_entries: positive("tools.ls_max_entries", t.ls_max_entries, d.ls_max_entries)?,
        diff_max_lines: positive("tools.diff_max_lines", t.diff_max_lines, d.diff_max_lines)?,
        search_exclude: t.search_exclude.unwrap_or(d.search_exclude),
        search_timeout: secs("tools.search_timeout_secs", t.search_timeout_secs, 30.0)?,
        git_timeout: secs("tools.git_timeout_secs", t.git_timeout_secs, 30.0)?,
        call_timeout: secs("tools.call_timeout_secs", t.call_timeout_secs, 120.0)?,
        llm_apply: t.llm_apply.unwrap_or(d.llm_apply),
    };
    for g in &tools.search_exclude {
        globset::Glob::new(g.trim_end_matches('/'))
            .map_err(|e| err(format!("tools.search_exclude: {g:?} is not a glob: {e}")))?;
    }
    Ok(tools)
}
