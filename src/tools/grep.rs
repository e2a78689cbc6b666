//! `grep_search`: a regular-expression search over the workspace, in process.
//!
//! ripgrep's own crates do the work: `ignore` walks the tree in parallel with the shared walk
//! rules, `grep-regex` compiles the case-insensitive pattern and `grep-searcher` searches each
//! file (opened beneath the workspace root) with two lines of context and binary detection.
//! Unlike Continue's output, every line carries its number (`12:` for a match, `11-` for
//! context) so the model can go on with `read_file_range`. Results are sorted by path and
//! deterministic: while the parallel walk runs, only the files that can still be among the
//! first `grep_max_results` matches (in path order) are kept, so memory stays bounded even
//! for a query that matches everywhere.

use std::collections::BTreeMap;
use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::WalkState;
use serde_json::json;

use super::args::Args;
use super::{Invocation, Tool, ToolEnv, ToolError, blocking};
use crate::policy::Target;
use crate::text::{count, group};
use crate::workspace::walk::{self, Visibility};

pub struct GrepSearch;

/// Longest line shown; longer lines (minified code, data) are cut with a note.
const MAX_LINE_CHARS: usize = 300;

impl Tool for GrepSearch {
    fn name(&self) -> &'static str {
        "grep_search"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/grep_search.md")
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type":"object","required":["query"],"properties":{
            "query":{"type":"string","description":"The regular expression to search for (ripgrep syntax, case-insensitive)"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let query = args.string("query")?;
        let matcher = compile(&query)?;
        let env = env.clone();
        Ok(Invocation {
            targets: vec![Target::Pattern(query.clone())],
            job: blocking(move || {
                let found = search(&env, &matcher)?;
                Ok(render(&found, &query, env.config.grep_max_results))
            }),
        })
    }
}

/// Applies Continue's two query rewrites, then compiles a case-insensitive line matcher.
pub fn compile(query: &str) -> Result<RegexMatcher, ToolError> {
    let q = query
        .replace("\\\\\\", "\\\\")
        .replace('\t', "\\t")
        .replace('\r', "\\r")
        .replace('\n', "\\n");
    RegexMatcherBuilder::new()
        .case_insensitive(true)
        .line_terminator(Some(b'\n'))
        .build(&q)
        .map_err(|e| {
            ToolError::InvalidArguments(format!(
                "the query {query:?} is not a valid regular expression: {}. To search for text \
                 that contains ( ) [ ] {{ }} . * + ? ^ $ | or \\, escape those characters with \\.",
                e.to_string().trim()
            ))
        })
}

/// One line of a file's results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Match(u64, String),
    Context(u64, String),
    Break,
}

#[derive(Debug, Default)]
pub struct FileHits {
    pub lines: Vec<Line>,
    pub matches: usize,
}

/// The outcome of a search.
#[derive(Debug, Default)]
pub struct Found {
    /// The first files in path order, enough to hold the first `max_results` matches.
    pub files: BTreeMap<String, FileHits>,
    pub total_matches: usize,
    pub total_files: usize,
    /// Files that could not be read (permissions, races); searching went on.
    pub errors: usize,
    pub partial: bool,
}

struct Shared {
    found: Found,
    /// Matches held in `found.files`.
    kept: usize,
}

pub fn search(env: &ToolEnv, matcher: &RegexMatcher) -> Result<Found, ToolError> {
    let ws = &env.workspace;
    let cfg = &env.config;
    let wb = walk::builder(ws, &ws.root_path(), &cfg.search_exclude, Visibility::Search)
        .map_err(ToolError::Failed)?;
    // The size limit is checked on the open file (`fstat`), not by the walker: its check
    // stats the absolute path, and walking those extra path components for every file cost
    // about a tenth of a full scan's kernel time.
    let max_file_bytes = cfg.grep_max_file_bytes;
    let max_results = cfg.grep_max_results;
    let shared = Mutex::new(Shared {
        found: Found::default(),
        kept: 0,
    });
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + cfg.search_timeout;
    let context = cfg.grep_context_lines;
    let per_file = cfg.grep_max_per_file;

    wb.build_parallel().run(|| {
        let mut searcher = SearcherBuilder::new()
            .line_number(true)
            .before_context(context)
            .after_context(context)
            .binary_detection(BinaryDetection::quit(b'\0'))
            // The size check below happens before the search: a file that grows meanwhile
            // (or one long line) cannot make the line buffer larger than a file may be.
            .heap_limit(Some(
                usize::try_from(max_file_bytes)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1 << 20),
            ))
            .build();
        let matcher = matcher.clone();
        let shared = &shared;
        let stop = &stop;
        Box::new(move |entry| {
            if stop.load(Ordering::Relaxed) {
                return WalkState::Quit;
            }
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                if env.cancel.is_cancelled() || Instant::now() > deadline {
                    stop.store(true, Ordering::Relaxed);
                    return WalkState::Quit;
                }
                return WalkState::Continue;
            }
            let Some(rel) = ws.rel_of(entry.path()) else {
                return WalkState::Continue;
            };
            let file = match ws.open_walked(rel) {
                Ok(f) => f,
                Err(_) => {
                    if let Ok(mut s) = shared.lock() {
                        s.found.errors += 1;
                    }
                    return WalkState::Continue;
                }
            };
            if file.metadata().is_ok_and(|m| m.len() > max_file_bytes) {
                return WalkState::Continue;
            }
            let mut sink = FileSink {
                hits: FileHits::default(),
                max: per_file,
                binary: false,
            };
            if searcher.search_file(&matcher, &file, &mut sink).is_err() {
                if let Ok(mut s) = shared.lock() {
                    s.found.errors += 1;
                }
                return WalkState::Continue;
            }
            if sink.binary || sink.hits.matches == 0 {
                return WalkState::Continue;
            }
            if let Ok(mut s) = shared.lock() {
                s.found.total_matches += sink.hits.matches;
                s.found.total_files += 1;
                keep(
                    &mut s,
                    walk::rel_display(ws, entry.path()),
                    sink.hits,
                    max_results,
                );
            }
            WalkState::Continue
        })
    });
    if env.cancel.is_cancelled() {
        return Err(ToolError::Failed("cancelled".into()));
    }
    let mut shared = shared
        .into_inner()
        .map_err(|_| ToolError::Failed("the search stopped unexpectedly".into()))?;
    shared.found.partial = stop.load(Ordering::Relaxed);
    Ok(shared.found)
}

/// Inserts a file's hits, then drops files at the end (in path order) that can no longer be
/// among the first `max_results` matches.
fn keep(s: &mut Shared, path: String, hits: FileHits, max_results: usize) {
    s.kept += hits.matches;
    s.found.files.insert(path, hits);
    while s.found.files.len() > 1 {
        let Some((_, last)) = s.found.files.last_key_value() else {
            break;
        };
        if s.kept - last.matches >= max_results {
            s.kept -= last.matches;
            s.found.files.pop_last();
        } else {
            break;
        }
    }
}

struct FileSink {
    hits: FileHits,
    max: usize,
    binary: bool,
}

fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let s = String::from_utf8_lossy(bytes);
    let count = s.chars().count();
    if count <= MAX_LINE_CHARS {
        return s.into_owned();
    }
    let head: String = s.chars().take(MAX_LINE_CHARS).collect();
    format!(
        "{head} …[line cut: {} more characters]",
        count - MAX_LINE_CHARS
    )
}

impl Sink for FileSink {
    type Error = io::Error;

    fn matched(&mut self, _s: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let first = mat.line_number().unwrap_or(0);
        for (i, line) in mat.lines().enumerate() {
            self.hits
                .lines
                .push(Line::Match(first + i as u64, line_text(line)));
        }
        self.hits.matches += 1;
        Ok(self.hits.matches < self.max)
    }

    fn context(&mut self, _s: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, io::Error> {
        let n = ctx.line_number().unwrap_or(0);
        self.hits
            .lines
            .push(Line::Context(n, line_text(ctx.bytes())));
        Ok(true)
    }

    fn context_break(&mut self, _s: &Searcher) -> Result<bool, io::Error> {
        self.hits.lines.push(Line::Break);
        Ok(true)
    }

    fn binary_data(&mut self, _s: &Searcher, _offset: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// Formats the results: a heading per file, numbered lines, `--` between groups.
pub fn render(found: &Found, query: &str, max_results: usize) -> String {
    if found.total_matches == 0 {
        let mut s = format!(
            "No matches found for the regular expression {query:?} (case-insensitive). Ignored, \
             hidden, binary and security-sensitive files are not searched."
        );
        if found.partial {
            s.push_str(" The search stopped at its time limit, so some files were not searched.");
        }
        return s;
    }
    let mut out = String::new();
    let mut shown = 0usize;
    'files: for (path, hits) in &found.files {
        if shown >= max_results {
            break;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(path);
        out.push('\n');
        let mut done = false;
        for line in &hits.lines {
            match line {
                Line::Match(n, text) => {
                    if done {
                        break;
                    }
                    out.push_str(&format!("{n}:{text}\n"));
                    shown += 1;
                    if shown >= max_results {
                        done = true;
                    }
                }
                Line::Context(n, text) => out.push_str(&format!("{n}-{text}\n")),
                Line::Break => {
                    if done {
                        continue 'files;
                    }
                    out.push_str("--\n");
                }
            }
        }
    }
    if shown < found.total_matches {
        out.push_str(&format!(
            "[showing the first {} of {} matching lines in {} (capped at {max_results}); \
             refine the query or search for something more specific to see the rest]",
            group(shown as u64),
            group(found.total_matches as u64),
            count(found.total_files as u64, "file"),
        ));
    } else {
        out.push_str(&format!(
            "[{} in {}]",
            count(found.total_matches as u64, "matching line"),
            count(found.total_files as u64, "file")
        ));
    }
    if found.partial {
        out.push_str("\n[the search stopped at its time limit; some files were not searched]");
    }
    if found.errors > 0 {
        out.push_str(&format!(
            "\n[{} files could not be read and were skipped]",
            found.errors
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(n: usize) -> FileHits {
        FileHits {
            lines: (1..=n as u64)
                .map(|i| Line::Match(i, format!("m{i}")))
                .collect(),
            matches: n,
        }
    }

    #[test]
    fn keeps_only_files_that_can_be_shown() {
        let mut s = Shared {
            found: Found::default(),
            kept: 0,
        };
        keep(&mut s, "d".into(), hits(3), 5);
        keep(&mut s, "c".into(), hits(3), 5);
        assert_eq!(s.found.files.keys().collect::<Vec<_>>(), ["c", "d"]);
        keep(&mut s, "a".into(), hits(5), 5);
        assert_eq!(s.found.files.keys().collect::<Vec<_>>(), ["a"]);
        keep(&mut s, "b".into(), hits(1), 5);
        assert_eq!(s.found.files.keys().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn renders_numbered_lines_and_caps() {
        let mut found = Found::default();
        found.files.insert(
            "src/a.rs".into(),
            FileHits {
                lines: vec![
                    Line::Context(1, "fn a() {".into()),
                    Line::Match(2, "    foo();".into()),
                    Line::Break,
                    Line::Match(9, "foo".into()),
                ],
                matches: 2,
            },
        );
        found.files.insert("src/b.rs".into(), hits(3));
        found.total_matches = 5;
        found.total_files = 2;
        assert_eq!(
            render(&found, "foo", 100),
            "src/a.rs\n1-fn a() {\n2:    foo();\n--\n9:foo\n\nsrc/b.rs\n1:m1\n2:m2\n3:m3\n\
             [5 matching lines in 2 files]"
        );
        let capped = render(&found, "foo", 3);
        assert!(capped.ends_with(
            "src/b.rs\n1:m1\n[showing the first 3 of 5 matching lines in 2 files (capped at 3); \
             refine the query or search for something more specific to see the rest]"
        ), "{capped}");
    }

    #[test]
    fn explains_bad_regexes_and_cuts_long_lines() {
        let e = compile("foo(").unwrap_err().to_string();
        assert!(
            e.contains("is not a valid regular expression") && e.contains("escape"),
            "{e}"
        );
        let long = "x".repeat(400);
        assert!(line_text(long.as_bytes()).ends_with("…[line cut: 100 more characters]"));
    }
}
