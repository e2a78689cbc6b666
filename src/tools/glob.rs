//! `file_glob_search`: workspace files whose path matches a glob.
//!
//! Semantics of ripgrep's `--iglob`: case-insensitive; a pattern without `/` matches the file
//! name at any depth, one with `/` matches the path from the workspace root (`**` crosses
//! folders, `*` does not). The walk runs in parallel, each thread collecting its own matches
//! (a name is matched where the walk has it; only a match is copied, and only a match is
//! checked against the sensitive-file patterns, folders being pruned by the walk); the output
//! is sorted, capped at `tools.glob_max_results`, and says how many matches were left out.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use globset::{GlobBuilder, GlobMatcher};
use ignore::{ParallelVisitor, ParallelVisitorBuilder, WalkState};
use serde_json::json;

use super::args::Args;
use super::{Invocation, Tool, ToolEnv, ToolError, blocking};
use crate::policy::Target;
use crate::text::{count, group};
use crate::workspace::walk::{self, Visibility};

pub struct FileGlobSearch;

impl Tool for FileGlobSearch {
    fn name(&self) -> &'static str {
        "file_glob_search"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/file_glob_search.md")
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type":"object","required":["pattern"],"properties":{
            "pattern":{"type":"string","description":"Glob pattern for file paths, e.g. **/*.rs or src/**/mod.rs"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let pattern = args.string("pattern")?;
        let matcher = PathGlob::new(&pattern)?;
        let env = env.clone();
        Ok(Invocation {
            targets: vec![Target::Pattern(pattern.clone())],
            job: blocking(move || {
                let found = find_files(&env, &matcher)?;
                Ok(render(&found, &pattern, env.config.glob_max_results))
            }),
        })
    }
}

/// A compiled `--iglob`-style pattern.
pub struct PathGlob {
    matcher: GlobMatcher,
    /// No `/` in the pattern: match the file name only.
    basename: bool,
}

impl PathGlob {
    pub fn new(pattern: &str) -> Result<PathGlob, ToolError> {
        let p = pattern.trim();
        let p = p.strip_prefix("./").unwrap_or(p);
        let p = p.strip_prefix('/').unwrap_or(p);
        let basename = !p.contains('/');
        let glob = GlobBuilder::new(p)
            .case_insensitive(true)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| {
                ToolError::InvalidArguments(format!(
                    "`pattern` {pattern:?} is not a valid glob: {e}. Examples: **/*.rs, src/**/*.ts, Cargo.toml"
                ))
            })?;
        Ok(PathGlob {
            matcher: glob.compile_matcher(),
            basename,
        })
    }

    pub fn is_match(&self, rel: &str) -> bool {
        if self.basename {
            let name = rel.rsplit('/').next().unwrap_or(rel);
            self.matcher.is_match(name)
        } else {
            self.matcher.is_match(rel)
        }
    }
}

/// All matching files, sorted, and whether the walk stopped early.
pub struct Found {
    pub paths: Vec<String>,
    pub partial: bool,
}

pub fn find_files(env: &ToolEnv, glob: &PathGlob) -> Result<Found, ToolError> {
    let ws = &env.workspace;
    let b = walk::builder(
        ws,
        &ws.root_path(),
        &env.config.search_exclude,
        Visibility::SearchCallerChecksFiles,
    )
    .map_err(ToolError::Failed)?;
    let all = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + env.config.search_timeout;
    b.build_parallel().visit(&mut Collectors {
        env,
        glob,
        all: &all,
        stop: &stop,
        deadline,
    });
    if env.cancel.is_cancelled() {
        return Err(ToolError::Failed("cancelled".into()));
    }
    let parts: Vec<Vec<String>> = all.into_inner().unwrap_or_default();
    let mut paths = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    for p in parts {
        paths.extend(p);
    }
    paths.sort_unstable();
    Ok(Found {
        paths,
        partial: stop.load(Ordering::Relaxed),
    })
}

/// Makes one [`Collector`] per walker thread.
struct Collectors<'a> {
    env: &'a ToolEnv,
    glob: &'a PathGlob,
    /// Each collector's matches, handed over when its thread is done.
    all: &'a Mutex<Vec<Vec<String>>>,
    stop: &'a AtomicBool,
    deadline: Instant,
}

impl<'a> ParallelVisitorBuilder<'a> for Collectors<'a> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 'a> {
        Box::new(Collector {
            env: self.env,
            glob: self.glob,
            all: self.all,
            stop: self.stop,
            deadline: self.deadline,
            found: Vec::new(),
        })
    }
}

/// One walker thread's matches: kept apart (no lock per match) until the thread ends.
struct Collector<'a> {
    env: &'a ToolEnv,
    glob: &'a PathGlob,
    all: &'a Mutex<Vec<Vec<String>>>,
    stop: &'a AtomicBool,
    deadline: Instant,
    found: Vec<String>,
}

impl ParallelVisitor for Collector<'_> {
    fn visit(&mut self, entry: Result<ignore::DirEntry, ignore::Error>) -> WalkState {
        let Ok(entry) = entry else {
            return WalkState::Continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            if self.env.cancel.is_cancelled() || Instant::now() > self.deadline {
                self.stop.store(true, Ordering::Relaxed);
                return WalkState::Quit;
            }
            return WalkState::Continue;
        }
        // Only a match costs an allocation: the name (or the path below the root) is matched
        // where the walk has it.
        let rel = if self.glob.basename {
            if !self.glob.matcher.is_match(Path::new(entry.file_name())) {
                return WalkState::Continue;
            }
            self.env.workspace.rel_of(entry.path())
        } else {
            self.env
                .workspace
                .rel_of(entry.path())
                .filter(|rel| self.glob.matcher.is_match(rel))
        };
        // The walk left the sensitive-file check of files to this visitor: only matches pay.
        if let Some(rel) = rel.filter(|r| !walk::is_sensitive_file(&self.env.workspace, r)) {
            self.found.push(rel.to_string_lossy().into_owned());
        }
        WalkState::Continue
    }
}

impl Drop for Collector<'_> {
    fn drop(&mut self) {
        if let Ok(mut all) = self.all.lock() {
            all.push(std::mem::take(&mut self.found));
        }
    }
}

fn render(found: &Found, pattern: &str, max: usize) -> String {
    if found.paths.is_empty() {
        return format!(
            "No files match the glob {pattern:?}. Matching is case-insensitive; a pattern without \
             / matches file names at any depth (e.g. *.rs), one with / matches from the workspace \
             root (e.g. src/**/*.rs). Ignored, hidden and security-sensitive files are not included."
        );
    }
    let shown = found.paths.get(..max).unwrap_or(&found.paths);
    let mut out = shown.join("\n");
    if found.paths.len() > max {
        out.push_str(&format!(
            "\n[{} not shown (capped at {max}, {} in all). Use a more \
             specific pattern, for example one limited to a folder.]",
            count((found.paths.len() - max) as u64, "more matching file"),
            group(found.paths.len() as u64)
        ));
    }
    if found.partial {
        out.push_str("\n[the search stopped at its time limit; the list may be incomplete]");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_follow_iglob_semantics() {
        let g = |p: &str, path: &str| PathGlob::new(p).unwrap().is_match(path);
        assert!(g("*.rs", "src/deep/a.rs"));
        assert!(g("*.RS", "a.rs"));
        assert!(g("src/*.rs", "src/a.rs"));
        assert!(!g("src/*.rs", "src/x/a.rs"));
        assert!(g("src/**/*.rs", "src/x/y/a.rs"));
        assert!(g("**/*.rs", "a.rs"));
        assert!(g("./src/*.rs", "src/a.rs"));
        assert!(g("Cargo.toml", "crates/x/Cargo.toml"));
        assert!(g("CARGO.toml", "crates/x/cargo.TOML"));
        assert!(g("[A-C]*.rs", "src/b.rs"));
        assert!(!g("[!a-c]*.rs", "src/B.rs"));
        assert!(g("src/**/Mod.rs", "SRC/x/mod.RS"));
        assert!(!g("*.rs", "a.rs.bak"));
        assert!(g("*.rs", "src/Ünïcode.RS"));
        assert!(PathGlob::new("a[").is_err());
    }
}
