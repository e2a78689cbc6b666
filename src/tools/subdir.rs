//! `view_subdirectory`: every file below a workspace directory, with workspace-relative paths.
//!
//! Continue renders this as a repo map without signatures; here it is the file list (the same
//! walk rules as the search tools), paths relative to the workspace root so each line can be
//! passed to `read_file` as it is.

use std::time::Instant;

use serde_json::json;

use super::args::Args;
use super::read::resolve;
use super::{Invocation, Tool, ToolEnv, ToolError, blocking};
use crate::policy::{Access, Target};
use crate::text::group;
use crate::workspace::walk::{self, Visibility};

pub struct ViewSubdirectory;

impl Tool for ViewSubdirectory {
    fn name(&self) -> &'static str {
        "view_subdirectory"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/view_subdirectory.md")
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type":"object","required":["directory_path"],"properties":{
            "directory_path":{"type":"string","description":"The directory to view, relative to the root of the workspace"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let raw = args.string("directory_path")?;
        let path = resolve(&env.workspace, &raw)?;
        let env = env.clone();
        Ok(Invocation {
            targets: vec![Target::Path {
                path: path.clone(),
                access: Access::List,
            }],
            job: blocking(move || {
                let ws = &env.workspace;
                if let Some(kind) = ws.special_kind(&path) {
                    return Err(ToolError::Failed(format!(
                        "\"{raw}\" is {kind}, not a directory; there is nothing to list in it."
                    )));
                }
                if ws.open_dir(&path, &raw).is_err() || !ws.is_dir(&path) {
                    return Err(ToolError::Failed(format!(
                        "Directory path \"{raw}\" does not exist or is not accessible (paths are \
                         relative to the workspace root)."
                    )));
                }
                let mut b =
                    walk::builder(ws, &path, &env.config.search_exclude, Visibility::Search)
                        .map_err(ToolError::Failed)?;
                b.sort_by_file_name(|a, b| a.cmp(b));
                let max = env.config.ls_max_entries;
                let deadline = Instant::now() + env.config.search_timeout;
                let mut files = Vec::new();
                let mut total = 0usize;
                for entry in b.build().flatten() {
                    if !entry.file_type().is_some_and(|t| t.is_file()) {
                        continue;
                    }
                    total += 1;
                    if files.len() < max {
                        files.push(walk::rel_display(ws, entry.path()));
                    }
                    if total.is_multiple_of(256)
                        && (Instant::now() > deadline || env.cancel.is_cancelled())
                    {
                        break;
                    }
                }
                if files.is_empty() {
                    return Ok(format!(
                        "{} contains no files (ignored and hidden files are not listed)",
                        path.display()
                    ));
                }
                let mut out = format!(
                    "Files in {}/ ({} in all):\n",
                    path.display(),
                    group(total as u64)
                );
                out.push_str(&files.join("\n"));
                if total > files.len() {
                    out.push_str(&format!(
                        "\n[{} more files not shown (capped at {max}). View a deeper subdirectory to see them.]",
                        group((total - files.len()) as u64)
                    ));
                }
                Ok(out)
            }),
        })
    }
}
