//! `[agent]`: the model, the round limit, `--yes`, the default tool set.

use serde::Deserialize;

use super::{ConfigError, err, known_tool_names};

#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Model sent upstream regardless of the client's `model` (`--model`).
    pub model: Option<String>,
    pub max_rounds: u32,
    /// `--yes`: approve every `ask`.
    pub approve_asks: bool,
    /// Tools offered when the client sends no `tools`; `None` = every enabled built-in.
    pub default_tools: Option<Vec<String>>,
    pub detect_repeats: bool,
    /// The most tokens (prompt and completion, summed over its rounds as the upstream reports
    /// them) a run may use; past it the run ends with an answer that says so.
    pub max_tokens_per_run: Option<u64>,
    /// The run ends when the model makes the same call (name and arguments) this many times
    /// in a row, or the same call fails the same way this many times; 0 turns it off.
    pub repeat_limit: u32,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentFile {
    pub(super) max_rounds: Option<u32>,
    pub(super) approve_asks: Option<bool>,
    pub(super) default_tools: Option<Vec<String>>,
    pub(super) detect_repeats: Option<bool>,
    pub(super) max_tokens_per_run: Option<u64>,
    pub(super) repeat_limit: Option<u32>,
}

/// `model` is `--model`, else `[upstream] model`; `yes` is `--yes`.
pub(super) fn resolve(
    a: AgentFile,
    model: Option<String>,
    yes: bool,
) -> Result<AgentConfig, ConfigError> {
    let tool_names = known_tool_names();
    if let Some(list) = &a.default_tools {
        for name in list {
            if !tool_names.contains(&name.as_str()) {
                return Err(err(format!(
                    "agent.default_tools: {name:?} is not a built-in tool; known tools: {}",
                    tool_names.join(", ")
                )));
            }
        }
    }
    Ok(AgentConfig {
        model,
        max_rounds: match a.max_rounds {
            Some(0) => return Err(err("agent.max_rounds must be at least 1")),
            Some(n) => n,
            None => 25,
        },
        approve_asks: yes || a.approve_asks.unwrap_or(false),
        default_tools: a.default_tools,
        detect_repeats: a.detect_repeats.unwrap_or(true),
        max_tokens_per_run: match a.max_tokens_per_run {
            Some(0) => {
                return Err(err(
                    "agent.max_tokens_per_run must be at least 1 (leave it out for no budget)",
                ));
            }
            n => n,
        },
        repeat_limit: match a.repeat_limit {
            Some(1) => {
                return Err(err(
                    "agent.repeat_limit must be 0 (off) or at least 2: with 1 every call would \
                     end the run",
                ));
            }
            Some(n) => n,
            None => 3,
        },
    })
}
