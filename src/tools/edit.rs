//! The edit tools: `create_new_file`, `edit_existing_file`, `single_find_and_replace`,
//! `multi_edit` and `search_and_replace_in_file`.
//!
//! Every edit follows one path ([`edit_file`]): lock the file, read it beneath the root,
//! refuse it if it changed since this run last saw it (a stale read), decode it keeping its
//! line endings, BOM and final newline, compute the new text (all-or-nothing), record the
//! prior state in the run's checkpoint, write it atomically with the same permissions, and
//! return a numbered unified diff of what changed. Nothing is written when any step fails.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::args::Args;
use super::{Invocation, Tool, ToolEnv, ToolError, blocking, path_targets};
use crate::edit::outline::Syntax;
use crate::edit::place::{self, Outcome};
use crate::edit::textfile::{TextFile, normalize_input};
use crate::edit::{blocks, lazy, matching, render, udiff};
use crate::policy::Access;
use crate::workspace::write::{CreateError, Version};
use crate::workspace::{PathError, WorkspacePath};

pub struct CreateNewFile;
pub struct EditExistingFile;
pub struct SingleFindAndReplace;
pub struct MultiEdit;
pub struct SearchAndReplaceInFile;

/// The versions of files this run has read or written, to detect edits based on stale reads.
#[derive(Debug, Default)]
pub struct SeenFiles {
    versions: Mutex<HashMap<PathBuf, Version>>,
}

impl SeenFiles {
    pub fn record(&self, p: &WorkspacePath, v: Version) {
        if let Ok(mut m) = self.versions.lock() {
            m.insert(p.rel().to_path_buf(), v);
        }
    }

    fn get(&self, p: &WorkspacePath) -> Option<Version> {
        self.versions.lock().ok()?.get(p.rel()).copied()
    }
}

/// Applies an edit with the upstream model when the deterministic paths cannot. Implemented
/// by the agent (tools make no HTTP calls themselves).
pub trait ApplyModel: Send + Sync {
    /// The longest an apply may take (the upstream's own total timeout): it extends the
    /// deadline of `edit_existing_file`.
    fn timeout(&self) -> std::time::Duration;
    fn apply(
        &self,
        path: String,
        original: String,
        changes: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send>>;
}

/// The real file behind `path` (edits write there, not over a symlink).
fn real(env: &ToolEnv, path: &WorkspacePath) -> WorkspacePath {
    env.workspace
        .real_path(path)
        .unwrap_or_else(|| path.clone())
}

fn missing(raw: &str) -> ToolError {
    ToolError::Failed(format!(
        "\"{raw}\" does not exist. Create it with create_new_file, or check the path (it is \
         relative to the workspace root; find files with file_glob_search)."
    ))
}

fn path_error(raw: &str, e: PathError) -> ToolError {
    match e {
        PathError::NotFound { .. } => missing(raw),
        other => ToolError::Failed(other.to_string()),
    }
}

/// A computed edit: the new text, a one-line account of it, and what became of each part of
/// the request (one line each, listed under the headline).
struct Change {
    text: String,
    headline: String,
    details: Vec<String>,
}

/// Computes an edit from the file's current text (`\n` line endings).
type Compute = Box<dyn FnOnce(&str) -> Result<Change, ToolError> + Send>;

/// The shared read-check-compute-record-write path of every edit of an existing file.
fn edit_file(
    env: &ToolEnv,
    path: &WorkspacePath,
    raw: &str,
    compute: impl FnOnce(&str) -> Result<Change, ToolError>,
) -> Result<String, ToolError> {
    let ws = &env.workspace;
    let target = real(env, path);
    let lock = ws.lock(&target);
    let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
    let snap = ws
        .read_for_edit(&target, raw)
        .map_err(|e| path_error(raw, e))?;
    if let Some(seen) = env.seen.get(&target)
        && seen != snap.version
    {
        return Err(ToolError::Failed(format!(
            "{} changed since this conversation last read or wrote it (now {} bytes). Read \
                 it again and base the edit on its current content.",
            target.display(),
            snap.version.len
        )));
    }
    let file = TextFile::decode(&snap.bytes)
        .map_err(|why| ToolError::Failed(format!("{} was not changed: {why}", target.display())))?;
    let change = compute(&file.text)?;
    let new_bytes = TextFile::encode(file.format, &change.text, snap.bytes.is_empty());
    if new_bytes == snap.bytes {
        return Err(ToolError::Failed(format!(
            "the edit leaves {} exactly as it was; nothing was written. Check that the \
             replacement differs from the current text.",
            target.display()
        )));
    }
    let cp = &env.checkpoint;
    cp.before_change(&target, Some((&snap.bytes, &snap.permissions)))
        .map_err(|e| checkpoint_error(&e))?;
    let version = ws
        .replace_file(&target, &new_bytes, Some(&snap.permissions))
        .map_err(|e| ToolError::Failed(format!("writing {} failed: {e}", target.display())))?;
    if let Err(e) = cp.after_change(&target, Some(&new_bytes)) {
        tracing::warn!(error = %e, "cannot record the checkpoint after an edit");
    }
    env.seen.record(&target, version);
    let mut out = format!("Edited {}: {}", target.display(), change.headline);
    let mut kept = Vec::new();
    if file.format.crlf {
        kept.push("CRLF line endings");
    }
    if file.format.bom {
        kept.push("the byte-order mark");
    }
    if !kept.is_empty() {
        out.push_str(&format!(" (kept {}).", kept.join(" and ")));
    }
    out.push('\n');
    // A long account (a rewrite of hundreds of items) must leave room for the diff.
    const MAX_DETAILS: usize = 40;
    let n = change.details.len();
    for (i, d) in change.details.iter().enumerate() {
        if n > MAX_DETAILS && (30..n - 5).contains(&i) {
            if i == 30 {
                out.push_str(&format!("- … {} more (see the diff)\n", n - 35));
            }
            continue;
        }
        out.push_str("- ");
        out.push_str(d);
        out.push('\n');
    }
    let new_text = TextFile::decode(&new_bytes)
        .map(|f| f.text)
        .unwrap_or(change.text);
    let budget = env
        .config
        .output_budget
        .saturating_sub(out.len() + 256)
        .max(1024);
    let (diff, _) = render::diff(&target.display(), &file.text, &new_text, budget);
    out.push_str(&diff);
    Ok(out)
}

fn checkpoint_error(e: &std::io::Error) -> ToolError {
    ToolError::Failed(format!(
        "cannot save a checkpoint before editing (state directory: {e}); nothing was written"
    ))
}

fn occurrences(n: usize) -> String {
    if n == 1 {
        "1 occurrence".into()
    } else {
        format!("{n} occurrences")
    }
}

fn lines_list(lines: &[usize]) -> String {
    match lines {
        [one] => format!("line {one}"),
        many => format!(
            "lines {}",
            many.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl Tool for CreateNewFile {
    fn name(&self) -> &'static str {
        "create_new_file"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/create_new_file.md")
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["filepath","contents"],"properties":{
            "filepath":{"type":"string","description":"The path of the new file, relative to the root of the workspace"},
            "contents":{"type":"string","description":"The contents of the new file"}}})
    }
    fn read_only(&self) -> bool {
        false
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let raw = args.string("filepath")?;
        let contents = match args.get("contents") {
            Some(Value::String(s)) => s.clone(),
            // The registry refuses a call without it; an empty file is `"contents": ""`.
            None => {
                return Err(ToolError::InvalidArguments(
                    "`contents` is required: the whole text of the new file (\"\" for an \
                     empty file)"
                        .into(),
                ));
            }
            // A model that wrote JSON file contents as an object.
            Some(other) => serde_json::to_string_pretty(other).unwrap_or_default(),
        };
        let path = super::read::resolve(&env.workspace, &raw)?;
        if path.is_root() {
            return Err(ToolError::InvalidArguments(
                "`filepath` must name a file, not the workspace root".into(),
            ));
        }
        let env = env.clone();
        Ok(Invocation {
            targets: path_targets(&env.workspace, &path, Access::Write),
            job: blocking(move || create(&env, &path, &raw, &contents)),
        })
    }
}

pub(crate) fn create(
    env: &ToolEnv,
    path: &WorkspacePath,
    raw: &str,
    contents: &str,
) -> Result<String, ToolError> {
    let ws = &env.workspace;
    let lock = ws.lock(path);
    let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
    let exists = || {
        ToolError::Failed(format!(
            "File {raw} already exists; nothing was written. Use edit_existing_file, \
             single_find_and_replace or multi_edit to change it."
        ))
    };
    if let Some(kind) = ws.special_kind(path) {
        return Err(ToolError::Failed(format!(
            "{raw} already exists and is {kind}, not a regular file; nothing was written. \
             Choose another path."
        )));
    }
    if ws.version(path).is_some() || ws.is_dir(path) {
        return Err(exists());
    }
    env.checkpoint
        .before_change(path, None)
        .map_err(|e| checkpoint_error(&e))?;
    let (dirs, version) = match ws.create_file(path, contents.as_bytes()) {
        Ok(r) => r,
        Err(CreateError::Exists) => return Err(exists()),
        Err(e) => {
            return Err(ToolError::Failed(format!(
                "creating {} failed: {e}",
                path.display()
            )));
        }
    };
    if let Err(e) = env
        .checkpoint
        .created_dirs(&dirs)
        .and_then(|()| env.checkpoint.after_change(path, Some(contents.as_bytes())))
    {
        tracing::warn!(error = %e, "cannot record the checkpoint after creating a file");
    }
    env.seen.record(path, version);
    let lines = contents.lines().count();
    let mut out = format!(
        "Created {} ({} {}, {} bytes){}.\n",
        path.display(),
        lines,
        if lines == 1 { "line" } else { "lines" },
        contents.len(),
        if dirs.is_empty() {
            String::new()
        } else {
            format!(
                ", with the new folder{} {}",
                if dirs.len() == 1 { "" } else { "s" },
                dirs.iter()
                    .map(WorkspacePath::display)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    let budget = env
        .config
        .output_budget
        .saturating_sub(out.len() + 256)
        .max(1024);
    let (diff, _) = render::diff(&path.display(), "", contents, budget);
    out.push_str(&diff);
    Ok(out)
}

fn required_string(args: &Args, name: &str, prefix: &str) -> Result<String, ToolError> {
    match args.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(ToolError::InvalidArguments(format!(
            "{prefix}string {name} is required"
        ))),
    }
}

/// Validates one find/replace edit as the reference does.
fn edit_spec(args: &Args, index: Option<usize>) -> Result<(String, String, bool), ToolError> {
    let prefix = index
        .map(|i| format!("edit at index {i}: "))
        .unwrap_or_default();
    let old = required_string(args, "old_string", &prefix)?;
    let new = required_string(args, "new_string", &prefix)?;
    if old == new {
        return Err(ToolError::InvalidArguments(format!(
            "{prefix}old_string and new_string must be different"
        )));
    }
    let replace_all = match args.get("replace_all") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(_) => {
            return Err(ToolError::InvalidArguments(format!(
                "{prefix}replace_all must be a valid boolean"
            )));
        }
    };
    if index.is_some_and(|i| i > 0) && old.is_empty() {
        return Err(ToolError::InvalidArguments(format!(
            "Edit at index {}: old_string cannot be empty. Only the first edit may use an empty \
             old_string (to insert at the top of the file).",
            index.unwrap_or(0)
        )));
    }
    Ok((normalize_input(&old), normalize_input(&new), replace_all))
}

fn prepare_edit(args: &Args, env: &ToolEnv, compute: Compute) -> Result<Invocation, ToolError> {
    let raw = args.string("filepath")?;
    let path = super::read::resolve(&env.workspace, raw.trim_start_matches("./"))?;
    let env = env.clone();
    Ok(Invocation {
        targets: path_targets(&env.workspace, &path, Access::Edit),
        job: blocking(move || edit_file(&env, &path, &raw, compute)),
    })
}

impl Tool for SingleFindAndReplace {
    fn name(&self) -> &'static str {
        "single_find_and_replace"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/single_find_and_replace.md")
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["filepath","old_string","new_string"],"properties":{
            "filepath":{"type":"string","description":"The path of the file, relative to the root of the workspace"},
            "old_string":{"type":"string","description":"The text to replace: copy it from the file, with enough surrounding lines to be unique"},
            "new_string":{"type":"string","description":"The text to replace it with (must differ from old_string)"},
            "replace_all":{"type":"boolean","description":"Replace every occurrence of old_string (default false)"}}})
    }
    fn read_only(&self) -> bool {
        false
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        prepare_edit(args, env, find_replace_compute(args)?)
    }
}

impl Tool for MultiEdit {
    fn name(&self) -> &'static str {
        "multi_edit"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/multi_edit.md")
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["filepath","edits"],"properties":{
            "filepath":{"type":"string","description":"The path of the file, relative to the root of the workspace"},
            "edits":{"type":"array","description":"Edits applied in order, each to the result of the previous one; all or nothing","items":{"type":"object","required":["old_string","new_string"],"properties":{
                "old_string":{"type":"string"},"new_string":{"type":"string"},"replace_all":{"type":"boolean"}}}}}})
    }
    fn read_only(&self) -> bool {
        false
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        prepare_edit(args, env, multi_edit_compute(args)?)
    }
}

impl Tool for SearchAndReplaceInFile {
    fn name(&self) -> &'static str {
        "search_and_replace_in_file"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/search_and_replace_in_file.md")
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["filepath","diffs"],"properties":{
            "filepath":{"type":"string","description":"The path of the file, relative to the root of the workspace"},
            "diffs":{"type":"array","items":{"type":"string"},"description":"SEARCH/REPLACE blocks: ------- SEARCH / exact lines / ======= / new lines / +++++++ REPLACE"}}})
    }
    fn read_only(&self) -> bool {
        false
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        prepare_edit(args, env, blocks_compute(args)?)
    }
}

impl Tool for EditExistingFile {
    fn name(&self) -> &'static str {
        "edit_existing_file"
    }
    fn deadline(&self, env: &ToolEnv) -> std::time::Duration {
        // An edit the model applies waits for an upstream round.
        env.config.call_timeout + env.apply.as_ref().map(|a| a.timeout()).unwrap_or_default()
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/edit_existing_file.md")
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["filepath","changes"],"properties":{
            "filepath":{"type":"string","description":"The path of the file to edit, relative to the root of the workspace"},
            "changes":{"type":"string","description":"The changed code with placeholder comments such as // ... existing code ... for unchanged parts, or a unified diff, or the whole new file"}}})
    }
    fn read_only(&self) -> bool {
        false
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let (Some(raw), Some(changes)) = (args.opt_string("filepath")?, args.get("changes")) else {
            return Err(ToolError::InvalidArguments(
                "`filepath` and `changes` arguments are required to edit an existing file.".into(),
            ));
        };
        let changes = match changes {
            Value::String(s) => unfence(&normalize_input(s)),
            other => serde_json::to_string_pretty(other).unwrap_or_default(),
        };
        let path = super::read::resolve(&env.workspace, raw.trim_start_matches("./"))?;
        let env = env.clone();
        let targets = path_targets(&env.workspace, &path, Access::Edit);
        let job = Box::pin(async move { edit_existing(env, path, raw, changes).await });
        Ok(Invocation { targets, job })
    }
}

fn find_replace_compute(args: &Args) -> Result<Compute, ToolError> {
    let (old, new, all) = edit_spec(args, None)?;
    Ok(Box::new(move |text: &str| {
        let r = matching::replace(text, &old, &new, all).map_err(ToolError::Failed)?;
        Ok(Change {
            headline: format!(
                "replaced {} at {} ({}).",
                occurrences(r.lines.len()),
                lines_list(&r.lines),
                r.rung.describe()
            ),
            text: r.text,
            details: Vec::new(),
        })
    }))
}

fn multi_edit_compute(args: &Args) -> Result<Compute, ToolError> {
    let edits = match args.get("edits") {
        Some(Value::Array(a)) => a.clone(),
        _ => {
            return Err(ToolError::InvalidArguments(
                "edits array is required".into(),
            ));
        }
    };
    if edits.is_empty() {
        return Err(ToolError::InvalidArguments(
            "edits array must contain at least one edit".into(),
        ));
    }
    let mut specs = Vec::new();
    for (i, e) in edits.iter().enumerate() {
        let Value::Object(map) = e else {
            return Err(ToolError::InvalidArguments(format!(
                "edit at index {i}: each edit must be an object with old_string and new_string"
            )));
        };
        specs.push(edit_spec(&Args::from_map(map.clone()), Some(i))?);
    }
    Ok(Box::new(move |text: &str| {
        let mut cur = text.to_string();
        let mut parts = Vec::new();
        for (i, (old, new, all)) in specs.iter().enumerate() {
            let r = matching::replace(&cur, old, new, *all).map_err(|e| {
                ToolError::Failed(format!(
                    "edit at index {i}: {e} No edit was applied (multi_edit is all or nothing)."
                ))
            })?;
            parts.push(format!(
                "edit {i}: {} at {} ({})",
                occurrences(r.lines.len()),
                lines_list(&r.lines),
                r.rung.describe()
            ));
            cur = r.text;
        }
        Ok(Change {
            headline: format!("applied {} edits: {}.", specs.len(), parts.join("; ")),
            text: cur,
            details: Vec::new(),
        })
    }))
}

fn blocks_compute(args: &Args) -> Result<Compute, ToolError> {
    let diffs: Vec<String> = match args.get("diffs") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|d| {
                d.as_str().map(normalize_input).ok_or_else(|| {
                    ToolError::InvalidArguments("every entry of diffs must be a string".into())
                })
            })
            .collect::<Result<_, _>>()?,
        Some(Value::String(s)) => vec![normalize_input(s)],
        _ => {
            return Err(ToolError::InvalidArguments(
                "diffs is required: an array of strings holding SEARCH/REPLACE blocks".into(),
            ));
        }
    };
    let mut all = Vec::new();
    let mut skipped = Vec::new();
    for (i, d) in diffs.iter().enumerate() {
        let parsed = blocks::parse(d, i).map_err(ToolError::InvalidArguments)?;
        all.extend(parsed.blocks);
        skipped.extend(parsed.skipped);
    }
    Ok(Box::new(move |text: &str| {
        let mut cur = text.to_string();
        let mut parts = Vec::new();
        for (n, b) in all.iter().enumerate() {
            let r = matching::replace(&cur, &b.search, &b.replace, false).map_err(|e| {
                ToolError::Failed(format!(
                    "block {}: {e} No block was applied (all or nothing).",
                    n + 1
                ))
            })?;
            parts.push(format!(
                "block {} at {} ({})",
                n + 1,
                lines_list(&r.lines),
                r.rung.describe()
            ));
            cur = r.text;
        }
        let skip = match skipped.len() {
            0 => String::new(),
            1 => " (1 unfinished block was skipped)".to_string(),
            n => format!(" ({n} unfinished blocks were skipped)"),
        };
        Ok(Change {
            headline: format!(
                "applied {} block{}{skip}: {}.",
                all.len(),
                if all.len() == 1 { "" } else { "s" },
                parts.join("; ")
            ),
            text: cur,
            details: skipped,
        })
    }))
}

/// How `edit_existing_file` turns `changes` into the new text.
enum Plan {
    Done(Change),
    /// The deterministic paths could not place the changes; `why` says what failed.
    NeedsModel {
        why: String,
        original: String,
    },
}

fn plan(path: &str, text: &str, changes: &str) -> Result<Plan, ToolError> {
    if changes.trim().is_empty() {
        return Err(ToolError::Failed(
            "`changes` is empty, so there is nothing to place; nothing was written. Send the \
             changed code, with placeholder comments such as `// ... existing code ...` for the \
             unchanged parts; to delete code, use single_find_and_replace with an empty \
             new_string."
                .into(),
        ));
    }
    if text.is_empty() {
        return Ok(Plan::Done(Change {
            text: changes.to_string(),
            headline: "the file was empty; wrote the changes as its content.".into(),
            details: Vec::new(),
        }));
    }
    if udiff::looks_like_unified_diff(changes) {
        return udiff::apply(text, changes)
            .map(|t| {
                Plan::Done(Change {
                    text: t,
                    headline: "applied the unified diff.".into(),
                    details: Vec::new(),
                })
            })
            .map_err(|e| ToolError::Failed(format!("the unified diff does not apply: {e}")));
    }
    let placeholders = lazy::has_placeholders(changes);
    // Why the syntax tree could not place `changes`, and where it could go.
    let mut undecided: Option<(String, Vec<String>)> = None;
    if let Some(syntax) = Syntax::of(Path::new(path)) {
        match place::place(syntax, text, changes) {
            Outcome::Placed(p) => {
                return Ok(Plan::Done(Change {
                    text: p.text,
                    headline: format!("placed `changes` by the {} syntax tree:", syntax.name()),
                    details: p.report,
                }));
            }
            Outcome::Unmatched {
                changes: items,
                file,
            } if !placeholders => {
                return whole_file(text, changes, Some((&items, &file)));
            }
            Outcome::Unmatched { changes: items, .. } => {
                let why = if items.is_empty() {
                    "`changes` holds no code besides placeholders".to_string()
                } else {
                    format!(
                        "none of the items in `changes` ({}) is in the file",
                        listed(&items)
                    )
                };
                undecided = Some((why, Vec::new()));
            }
            Outcome::Undecided { why, candidates } if !candidates.is_empty() => {
                // Several places fit equally: ask rather than guess.
                return Ok(Plan::NeedsModel {
                    why: with_candidates(&why, &candidates),
                    original: text.to_string(),
                });
            }
            Outcome::Undecided { why, .. } | Outcome::NoTree(why) => {
                undecided = Some((why, Vec::new()));
            }
        }
    }
    if !placeholders && undecided.is_none() {
        return whole_file(text, changes, None);
    }
    // Line anchoring: the placeholders, or (without any) `changes` as one part of the file.
    let anchored = if placeholders {
        lazy::expand(text, changes)
    } else {
        lazy::expand(
            text,
            &format!("// ... existing code ...\n{changes}\n// ... existing code ...\n"),
        )
        .map(|mut x| {
            // The placeholders were ours, not the model's.
            x.kept.clear();
            x
        })
    };
    match anchored {
        Ok(x) => {
            let headline = match &undecided {
                Some((why, _)) => {
                    format!("placed `changes` line by line (the syntax tree could not: {why}).")
                }
                None => "expanded the placeholders from the file.".to_string(),
            };
            Ok(Plan::Done(Change {
                text: x.text,
                headline,
                details: x.kept.into_iter().chain(x.notes).collect(),
            }))
        }
        Err(why) => Ok(Plan::NeedsModel {
            why: match &undecided {
                Some((tree, c)) => {
                    format!(
                        "{why} (The syntax tree could not place it either: {})",
                        with_candidates(tree, c)
                    )
                }
                None => why,
            },
            original: text.to_string(),
        }),
    }
}

/// Item names for a message: the first eight, and how many more.
fn listed(items: &[String]) -> String {
    let mut parts: Vec<&str> = items.iter().take(8).map(String::as_str).collect();
    let more = format!("and {} more", items.len().saturating_sub(8));
    if items.len() > 8 {
        parts.push(&more);
    }
    parts.join(", ")
}

fn with_candidates(why: &str, candidates: &[String]) -> String {
    if candidates.is_empty() {
        format!("{why}.")
    } else {
        format!(
            "{why}: {}. Include more of the unchanged code around the change (the enclosing \
             item's first line), so that only one of them fits.",
            candidates.join(", ")
        )
    }
}

/// `changes` without placeholders as the whole new file, unless that would lose code: most
/// of a sizeable file, or (when none of its items is in the file) most of a file of several
/// items.
fn whole_file(
    text: &str,
    changes: &str,
    unmatched: Option<(&[String], &[String])>,
) -> Result<Plan, ToolError> {
    if let Some(why) = lazy::suspicious_rewrite(text, changes) {
        return Err(ToolError::Failed(format!(
            "not written: `changes` has no placeholder comments, so {why}"
        )));
    }
    let lines = |s: &str| s.lines().filter(|l| !l.trim().is_empty()).count();
    if let Some((items, file)) = unmatched
        && file.len() >= 2
        && lines(changes) * 2 < lines(text)
    {
        let none = if items.is_empty() {
            "`changes` holds none of the file's items".to_string()
        } else {
            format!(
                "none of the items in `changes` ({}) is in the file",
                listed(items)
            )
        };
        return Err(ToolError::Failed(format!(
            "not written: {none} (whose items are {}), and `changes` is less than half as long \
             as the file, so it is neither an edit of the file's items nor evidently the whole \
             new file. To add code, send it together with the unchanged item it goes next to, \
             or with placeholder comments such as `// ... existing code ...` (in the file's \
             comment syntax) for the rest of the file; to replace the file, send all of the new \
             file.",
            listed(file)
        )));
    }
    Ok(Plan::Done(Change {
        text: changes.to_string(),
        headline: "replaced the whole file (the changes had no placeholders).".into(),
        details: Vec::new(),
    }))
}

async fn edit_existing(
    env: ToolEnv,
    path: WorkspacePath,
    raw: String,
    changes: String,
) -> Result<String, ToolError> {
    // Deterministic first: unified diff, placeholders, or a whole-file replacement.
    let first = {
        let (env, path, raw, changes) = (env.clone(), path.clone(), raw.clone(), changes.clone());
        let outcome: Arc<Mutex<Option<(String, String)>>> = Arc::default();
        let slot = Arc::clone(&outcome);
        let res = blocking(move || {
            edit_file(&env, &path, &raw, |text| {
                match plan(&raw, text, &changes)? {
                    Plan::Done(c) => Ok(c),
                    Plan::NeedsModel { why, original } => {
                        if let Ok(mut s) = slot.lock() {
                            *s = Some((why.clone(), original));
                        }
                        Err(ToolError::Failed(why))
                    }
                }
            })
        })
        .await;
        let needs = outcome.lock().ok().and_then(|mut s| s.take());
        match (res, needs) {
            (Ok(out), _) => return Ok(out),
            (Err(e), None) => return Err(e),
            (Err(_), Some(n)) => n,
        }
    };
    let (why, original) = first;
    let Some(model) = env.apply.clone() else {
        return Err(ToolError::Failed(format!(
            "the changes could not be placed in the file: {why} Nothing was written. Use \
             single_find_and_replace with text copied exactly from the file, or send the \
             changes with more unchanged lines around them."
        )));
    };
    tracing::info!(file = %path.display(), reason = %why, "asking the model to apply an edit");
    let output = model
        .apply(path.display(), original.clone(), changes.clone())
        .await
        .map_err(|e| {
            ToolError::Failed(format!(
                "the changes could not be placed in the file ({why}), and the apply model \
                 failed: {e}. Nothing was written; use single_find_and_replace."
            ))
        })?;
    verify_apply(&original, &changes, &output).map_err(|e| {
        ToolError::Failed(format!(
            "the changes could not be placed in the file ({why}); the apply model's result was \
             rejected: {e}. Nothing was written; use single_find_and_replace."
        ))
    })?;
    blocking(move || {
        edit_file(&env, &path, &raw, |text| {
            if text != original {
                return Err(ToolError::Failed(
                    "the file changed while the edit was being applied; read it again".into(),
                ));
            }
            Ok(Change {
                text: output,
                details: Vec::new(),
                headline: format!(
                    "the placeholders could not be expanded deterministically ({why}); the model \
                     applied the changes and the result was verified."
                ),
            })
        })
    })
    .await
}

/// The deterministic edit a tool call makes to a file's bytes, without touching the disk:
/// the same argument checks, matching and format handling as a real call (the apply model
/// is not used). Returns the new bytes and the one-line account. Used by the edit corpus.
pub fn transform(tool: &str, args: &Args, original: &[u8]) -> Result<(Vec<u8>, String), String> {
    let compute: Compute = match tool {
        "single_find_and_replace" => find_replace_compute(args),
        "multi_edit" => multi_edit_compute(args),
        "search_and_replace_in_file" => blocks_compute(args),
        "edit_existing_file" => {
            let changes = match args.get("changes") {
                Some(Value::String(s)) => unfence(&normalize_input(s)),
                _ => return Err("`changes` is required".into()),
            };
            let path = args
                .opt_string("filepath")
                .ok()
                .flatten()
                .unwrap_or_default();
            Ok(
                Box::new(move |text: &str| match plan(&path, text, &changes)? {
                    Plan::Done(c) => Ok(c),
                    Plan::NeedsModel { why, .. } => Err(ToolError::Failed(why)),
                }) as Compute,
            )
        }
        other => return Err(format!("{other} is not an edit tool")),
    }
    .map_err(|e| e.to_string())?;
    let file = TextFile::decode(original)?;
    let change = compute(&file.text).map_err(|e| e.to_string())?;
    Ok((
        TextFile::encode(file.format, &change.text, original.is_empty()),
        change.headline,
    ))
}

/// Checks an apply model's output before it is written: every concrete line of `changes`
/// is there, no placeholder comment was left in, and most of the file is still there.
pub fn verify_apply(original: &str, changes: &str, output: &str) -> Result<(), String> {
    if output.trim().is_empty() {
        return Err("it is empty".into());
    }
    let out_lines: std::collections::HashSet<&str> = output.lines().map(str::trim).collect();
    for line in changes.lines() {
        let t = line.trim();
        if t.is_empty() || lazy::is_placeholder_line(line) {
            continue;
        }
        if !out_lines.contains(t) {
            return Err(format!(
                "the line `{}` of the changes is missing",
                crate::text::preview(t, 80)
            ));
        }
    }
    let orig_placeholders: std::collections::HashSet<&str> = original
        .lines()
        .filter(|l| lazy::is_placeholder_line(l))
        .map(str::trim)
        .collect();
    if let Some(l) = output
        .lines()
        .find(|l| lazy::is_placeholder_line(l) && !orig_placeholders.contains(l.trim()))
    {
        return Err(format!("it still contains the placeholder `{}`", l.trim()));
    }
    if let Some(why) = lazy::suspicious_rewrite(original, output) {
        return Err(why);
    }
    Ok(())
}

/// Removes a code fence wrapped around the whole of `changes` (models add one despite the
/// instructions).
fn unfence(s: &str) -> String {
    let t = s.trim();
    if let Some(rest) = t.strip_prefix("```") {
        let split = rest.split_once('\n');
        if let (Some((info, after)), true) = (split, rest.ends_with("```"))
            && !info.contains('`')
        {
            let body = after.strip_suffix("```").unwrap_or(after);
            if !body.contains("\n```") {
                return body.strip_suffix('\n').unwrap_or(body).to_string() + "\n";
            }
        }
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfences_a_wrapped_change() {
        assert_eq!(unfence("```rust\nfn a() {}\n```"), "fn a() {}\n");
        assert_eq!(unfence("```\nx\n```\n"), "x\n");
        assert_eq!(unfence("fn a() {}\n"), "fn a() {}\n");
        let two = "```a\nx\n```\ntext\n```b\ny\n```";
        assert_eq!(unfence(two), two);
    }

    #[test]
    fn apply_output_is_verified() {
        let original = "fn a() {\n    1\n}\n\nfn b() {\n    2\n}\n";
        let changes = "// ... existing code ...\nfn b() {\n    3\n}\n";
        assert!(
            verify_apply(
                original,
                changes,
                "fn a() {\n    1\n}\n\nfn b() {\n    3\n}\n"
            )
            .is_ok()
        );
        assert!(
            verify_apply(
                original,
                changes,
                "fn b() {\n    3\n}\n// ... existing code ...\n"
            )
            .unwrap_err()
            .contains("placeholder")
        );
        assert!(
            verify_apply(original, changes, "fn a() {}\n")
                .unwrap_err()
                .contains("missing")
        );
        assert!(
            verify_apply(original, changes, "")
                .unwrap_err()
                .contains("empty")
        );
    }
}
