//! The one directory-walk configuration shared by `grep_search`, `file_glob_search`,
//! `ls --recursive` and `view_subdirectory`.
//!
//! Rules, in ripgrep's terms: hidden files and folders are skipped, `.gitignore` (also outside
//! a git repository), `.git/info/exclude`, `.ignore` and `.continueignore` are honoured,
//! symlinks are not followed, and the workspace's sensitive files plus the configured
//! `search.exclude` globs are pruned.

use std::path::Path;

use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;

use super::{Workspace, WorkspacePath};

/// The ignore file Continue users already have, honoured like `.gitignore`.
pub const CONTINUE_IGNORE: &str = ".continueignore";

/// How a walk treats hidden files and the exclude list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Search tools: hidden files, excluded globs and sensitive files are skipped.
    Search,
    /// Like `Search`, but only sensitive *folders* are skipped: the caller checks each file it
    /// keeps with [`is_sensitive_file`]. For a caller that matches names first
    /// (`file_glob_search`), that is one check per match instead of one per file.
    SearchCallerChecksFiles,
    /// `ls`: hidden entries are listed (like Continue's `ls`), but `.git` is not descended.
    Listing,
}

/// Whether a file a [`Visibility::SearchCallerChecksFiles`] walk yielded is sensitive (its
/// folders were checked by the walk). `rel` is relative to the root.
pub fn is_sensitive_file(ws: &Workspace, rel: &Path) -> bool {
    ws.sensitive.matched(rel, false).is_ignore()
}

/// Builds a walker rooted at `start` (inside `ws`). `exclude` holds gitignore-style globs.
pub fn builder(
    ws: &Workspace,
    start: &WorkspacePath,
    exclude: &[String],
    visibility: Visibility,
) -> Result<WalkBuilder, String> {
    let start_abs = ws.root().join(start.rel());
    let mut b = WalkBuilder::new(&start_abs);
    let search = visibility != Visibility::Listing;
    b.hidden(search)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .require_git(false)
        .parents(true)
        .follow_links(false)
        .add_custom_ignore_filename(CONTINUE_IGNORE);
    if search && !exclude.is_empty() {
        let mut ob = OverrideBuilder::new(ws.root());
        for g in exclude {
            // In an override set, a `!glob` excludes; plain globs would whitelist.
            ob.add(&format!("!{g}"))
                .map_err(|e| format!("bad search.exclude glob {g:?}: {e}"))?;
        }
        let ov = ob.build().map_err(|e| e.to_string())?;
        b.overrides(ov);
    }
    let root = ws.root().to_path_buf();
    let sensitive = ws.sensitive.clone();
    b.filter_entry(move |entry| {
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        match visibility {
            Visibility::Listing if is_dir && entry.file_name() == ".git" => {
                return entry.depth() == 0;
            }
            Visibility::Listing => return true,
            // The caller checks the files it keeps; a file at the start of the walk has
            // parents above it to check, so it is checked here.
            Visibility::SearchCallerChecksFiles if !is_dir && entry.depth() > 1 => return true,
            _ => {}
        }
        match super::rel_under(&root, entry.path()) {
            // Sensitive directories are pruned here, so below the start of the walk only the
            // entry itself needs checking; above it, its parents too.
            Some(rel) if !rel.as_os_str().is_empty() => {
                let m = if entry.depth() > 1 {
                    sensitive.matched(rel, is_dir)
                } else {
                    sensitive.matched_path_or_any_parents(rel, is_dir)
                };
                !m.is_ignore()
            }
            _ => true,
        }
    });
    Ok(b)
}

/// The workspace-relative, `/`-separated form of a walked path.
pub fn rel_display(ws: &Workspace, path: &Path) -> String {
    ws.rel_of(path)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file a search walk from `start` yields, sorted.
    fn walked(ws: &Workspace, start: &str) -> Vec<String> {
        let start = ws.resolve(start).unwrap();
        let mut v: Vec<String> = builder(ws, &start, &[], Visibility::Search)
            .unwrap()
            .build()
            .flatten()
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .map(|e| rel_display(ws, e.path()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn sensitive_files_are_skipped_at_every_depth_and_from_any_start() {
        let tmp = tempfile::tempdir().unwrap();
        for f in [
            "src/ok.rs",
            "src/x.pem",
            "src/deep/er/y.pem",
            "keys/a/b.txt",
            "private/z/w.txt",
            "nested/keys/c.txt",
        ] {
            let p = tmp.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x\n").unwrap();
        }
        let patterns = ["keys/", "*.pem", "private/**"].map(String::from);
        let ws = Workspace::open(tmp.path(), &patterns).unwrap();
        assert_eq!(walked(&ws, "."), ["src/ok.rs"]);
        assert_eq!(walked(&ws, "src"), ["src/ok.rs"]);
        // A walk that starts inside a sensitive folder still yields nothing from it.
        assert!(walked(&ws, "keys/a").is_empty());
        assert!(walked(&ws, "private/z").is_empty());
        assert!(walked(&ws, "nested").is_empty());
        // Leaving the files to the caller: the folders are still pruned, and the check the
        // caller makes rejects the rest.
        let start = ws.resolve(".").unwrap();
        let mut v: Vec<String> = builder(&ws, &start, &[], Visibility::SearchCallerChecksFiles)
            .unwrap()
            .build()
            .flatten()
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .map(|e| rel_display(&ws, e.path()))
            .collect();
        v.sort();
        assert_eq!(v, ["src/deep/er/y.pem", "src/ok.rs", "src/x.pem"]);
        v.retain(|f| !is_sensitive_file(&ws, Path::new(f)));
        assert_eq!(v, ["src/ok.rs"]);
    }
}
