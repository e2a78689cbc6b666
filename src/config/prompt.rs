//! `[prompt]`: toolpilot's system message, rules and skills.

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, Env, err};
use crate::prompt::PromptConfig;

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
