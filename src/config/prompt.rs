//! `[prompt]`: toolpilot's system message, rules and skills.

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, Env, err};

/// `[prompt]` configuration.
#[derive(Debug, Clone)]
pub struct PromptConfig {
    /// Add toolpilot's system message (environment, rules, when to stop).
    pub system_message: bool,
    /// Extra text appended to it.
    pub extra: Option<String>,
    /// Entries of the top-level listing shown.
    pub listing_entries: usize,
    /// The global folder holding `rules/` and `skills/` (`~/.continue` by default).
    pub global_dir: Option<PathBuf>,
    /// Read `AGENTS.md` at the workspace root as an always-applied rule.
    pub agents_md: bool,
}

impl Default for PromptConfig {
    fn default() -> Self {
        PromptConfig {
            system_message: true,
            extra: None,
            listing_entries: 40,
            global_dir: None,
            agents_md: true,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct PromptFile {
    pub(super) system_message: Option<bool>,
    pub(super) extra: Option<String>,
    pub(super) listing_entries: Option<usize>,
    pub(super) global_dir: Option<PathBuf>,
    pub(super) agents_md: Option<bool>,
}

pub(super) fn resolve(pf: PromptFile, env: &Env<'_>) -> Result<PromptConfig, ConfigError> {
    let pd = PromptConfig::default();
    let global_dir = match pf.global_dir {
        Some(d) => {
            let text = d.to_string_lossy();
            match (text.strip_prefix("~/"), env("HOME")) {
                (Some(rest), Some(home)) => Some(PathBuf::from(home).join(rest)),
                (Some(_), None) => {
                    return Err(err(
                        "prompt.global_dir: starts with ~/ but HOME is not set; give an absolute path",
                    ));
                }
                (None, _) => Some(d),
            }
        }
        None => env("HOME").map(|h| PathBuf::from(h).join(".continue")),
    };
    Ok(PromptConfig {
        system_message: pf.system_message.unwrap_or(pd.system_message),
        extra: pf.extra.filter(|e| !e.trim().is_empty()),
        listing_entries: pf.listing_entries.unwrap_or(pd.listing_entries),
        global_dir,
        agents_md: pf.agents_md.unwrap_or(pd.agents_md),
    })
}
