//! `ls`: the entries of a workspace directory, optionally recursive.
//!
//! Like Continue: folders end with `/`, `.gitignore`/`.continueignore` apply, hidden entries
//! are shown (but `.git` is never descended), at most `tools.ls_max_entries` entries. Better:
//! sorted output, and a truncation note that says how many entries were left out.

use std::time::Instant;

use serde_json::json;

use super::args::Args;
use super::read::resolve;
use super::{Invocation, Tool, ToolEnv, ToolError, blocking};
use crate::policy::{Access, Target};
use crate::text::group;
use crate::workspace::walk::{self, Visibility};
use crate::workspace::{PathError, WorkspacePath};

pub struct Ls;

/// Stop counting entries past this many (the count is only for the truncation note).
const MAX_COUNT: usize = 100_000;

impl Tool for Ls {
    fn name(&self) -> &'static str {
        "ls"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/ls.md")
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type":"object","properties":{
            "dirPath":{"type":"string","description":"The directory to list, relative to the root of the workspace (default: the root)"},
            "recursive":{"type":"boolean","description":"List everything below the directory, not just its direct entries (default false)"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let raw = args
            .opt_string("dirPath")?
            .unwrap_or_else(|| ".".into())
            .replace('\\', "/");
        let recursive = args.opt_bool("recursive")?.unwrap_or(false);
        let path = resolve(&env.workspace, &raw)?;
        let env = env.clone();
        Ok(Invocation {
            targets: vec![Target::Path {
                path: path.clone(),
                access: Access::List,
            }],
            job: blocking(move || list(&env, &path, &raw, recursive)),
        })
    }
}

/// Lists `path`: one entry per line, relative to it, folders ending in `/`.
pub(crate) fn list(
    env: &ToolEnv,
    path: &WorkspacePath,
    raw: &str,
    recursive: bool,
) -> Result<String, ToolError> {
    let ws = &env.workspace;
    // Opening beneath the root refuses symlinks that lead out, and checks it is a directory.
    ws.open_dir(path, raw).map_err(|e| match e {
        PathError::NotFound { .. } => ToolError::Failed(format!(
            "Directory \"{raw}\" not found. Paths are relative to the workspace root; list the \
             root with ls to see what exists."
        )),
        PathError::NotDirectory { .. } => match ws.special_kind(path) {
            Some(kind) => ToolError::Failed(format!(
                "\"{raw}\" is {kind}, not a directory or a regular file; there is nothing to \
                 list or read in it."
            )),
            None => ToolError::Failed(format!(
                "\"{raw}\" is a file, not a directory; read it with read_file."
            )),
        },
        other => ToolError::Failed(other.to_string()),
    })?;
    let max = env.config.ls_max_entries;
    let mut b = walk::builder(ws, path, &[], Visibility::Listing).map_err(ToolError::Failed)?;
    b.sort_by_file_name(|a, b| a.cmp(b));
    if !recursive {
        b.max_depth(Some(1));
    }
    let base = ws.root().join(path.rel());
    let deadline = Instant::now() + env.config.search_timeout;
    let mut shown = Vec::new();
    let mut total = 0usize;
    let mut timed_out = false;
    for entry in b.build() {
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 {
            continue;
        }
        total += 1;
        if shown.len() < max {
            let rel = entry.path().strip_prefix(&base).unwrap_or(entry.path());
            let mut s = rel.to_string_lossy().into_owned();
            match entry.file_type() {
                Some(t) if t.is_dir() => s.push('/'),
                // Named pipes, sockets and devices are marked: reading them gives nothing.
                Some(t) if !t.is_file() && !t.is_symlink() => {
                    s.push_str(&format!("  [{}]", crate::bounded::file_kind(t)));
                }
                _ => {}
            }
            shown.push(s);
        }
        if total >= MAX_COUNT || (total.is_multiple_of(256) && Instant::now() > deadline) {
            timed_out = total < MAX_COUNT;
            break;
        }
        if total.is_multiple_of(256) && env.cancel.is_cancelled() {
            return Err(ToolError::Failed("cancelled".into()));
        }
    }
    if shown.is_empty() {
        return Ok(format!("No files or folders found in {}", path.display()));
    }
    let mut out = shown.join("\n");
    if total > shown.len() {
        let more = total - shown.len();
        let counted = if total >= MAX_COUNT || timed_out {
            format!("at least {} more entries", group(more as u64))
        } else {
            format!("{} more entries", group(more as u64))
        };
        out.push_str(&format!(
            "\n[{counted} not shown (the listing is capped at {max}). {}]",
            if recursive {
                "List a subdirectory, use a non-recursive listing, or find files with file_glob_search."
            } else {
                "Find specific files with file_glob_search."
            }
        ));
    }
    Ok(out)
}
