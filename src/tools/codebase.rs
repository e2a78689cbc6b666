//! `codebase` (ranked snippets from the workspace index) and `view_repo_map` (files with the
//! signatures of their symbols).
//!
//! Like Continue, a failure of the search is reported as the tool's text
//! (`Failed to search codebase: …`), not as an error.

use std::time::Instant;

use serde_json::{Value, json};

use super::args::Args;
use super::{Invocation, Tool, ToolEnv, ToolError, blocking};
use crate::code::index::{Watching, render_snippet};
use crate::code::symbols::{self, Lang, MAX_PARSE_BYTES};
use crate::code::{embed_text, rerank};
use crate::policy::{Access, Target};
use crate::text::group;
use crate::workspace::walk::{self, Visibility};

pub struct Codebase;
pub struct ViewRepoMap;

/// Lines of one snippet shown.
const SNIPPET_LINES: usize = 30;

impl Tool for Codebase {
    fn name(&self) -> &'static str {
        "codebase"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/codebase.md")
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["query"],"properties":{
            "query":{"type":"string","description":"What to look for: a natural-language description of the code, or identifiers"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let query = args.string("query")?;
        let env = env.clone();
        Ok(Invocation {
            targets: vec![Target::Pattern(query.clone())],
            job: Box::pin(async move { Ok(search(&env, &query).await) }),
        })
    }
}

async fn search(env: &ToolEnv, query: &str) -> String {
    let idx = std::sync::Arc::clone(&env.code);
    idx.catch_up(idx.config.wait).await;
    let cfg = &idx.config;
    let embed = env
        .embedder
        .clone()
        .filter(|_| cfg.embeddings_model.is_some());
    let candidates = if embed.is_some() {
        cfg.rerank_candidates.max(cfg.max_results)
    } else {
        cfg.max_results
    };
    let started = Instant::now();
    let (idx2, q) = (std::sync::Arc::clone(&idx), query.to_string());
    let found = match tokio::task::spawn_blocking(move || idx2.search(&q, candidates)).await {
        Ok(r) => r,
        Err(e) => Err(e.to_string()),
    };
    let status = idx.status();
    let (mut hits, total) = match found {
        Err(e) => return format!("Failed to search codebase: {e}"),
        Ok(None) => {
            if let Some(e) = &status.error {
                return format!("Failed to search codebase: {e}");
            }
            return format!(
                "The codebase index is still being built ({} files so far); nothing can be \
                 searched yet. Try again in a moment, or use grep_search and file_glob_search \
                 meanwhile.",
                group(status.files as u64)
            );
        }
        Ok(Some(r)) => r,
    };
    let mut note = String::new();
    if let Some(embedder) = embed.filter(|_| hits.len() > 1) {
        let mut inputs = vec![query.to_string()];
        inputs.extend(hits.iter().map(embed_text));
        match embedder.embed(inputs).await {
            Ok(v) if v.len() == hits.len() + 1 => {
                rerank(&mut hits, &v);
                note = format!(
                    " Re-ranked with embeddings ({}).",
                    cfg.embeddings_model.as_deref().unwrap_or_default()
                );
            }
            Ok(v) => {
                note = format!(
                    " (Embeddings were not used: the upstream returned {} vectors for {} texts.)",
                    v.len(),
                    hits.len() + 1
                );
            }
            Err(e) => note = format!(" (Embeddings were not used: {e}.)"),
        }
    }
    hits.truncate(cfg.max_results);
    let ms = started.elapsed().as_millis();
    let mut out = String::new();
    if hits.is_empty() {
        out.push_str(&format!(
            "No relevant code found for \"{query}\". Try other words (names of functions or \
             types, or what the code does), or grep_search for exact text.\n"
        ));
    } else {
        out.push_str(&format!(
            "{} for \"{query}\" (best first; {} matching chunks in all, {ms} ms).{note}\n",
            if hits.len() == 1 {
                "1 snippet".to_string()
            } else {
                format!("{} snippets", hits.len())
            },
            group(total as u64),
        ));
        for h in &hits {
            let mut why = Vec::new();
            if !h.matched_symbols.is_empty() {
                let names: Vec<&str> = h
                    .matched_symbols
                    .iter()
                    .map(String::as_str)
                    .take(4)
                    .collect();
                why.push(format!(
                    "{} {}",
                    if names.len() == 1 {
                        "symbol"
                    } else {
                        "symbols"
                    },
                    names.join(", ")
                ));
            }
            if h.in_path {
                why.push("file name".to_string());
            }
            let reason = format!(
                "matched {}{}",
                h.matched.join(", "),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" (in {})", why.join("; "))
                }
            );
            out.push_str(&format!("\n{}:{}-{} — {reason}\n", h.path, h.start, h.end));
            out.push_str(&render_snippet(h, SNIPPET_LINES));
        }
    }
    out.push_str(&index_note(&status));
    out
}

/// One line on the index's state, for the end of a result.
fn index_note(s: &crate::code::index::Status) -> String {
    let mut out = format!(
        "\n[index: {} files, {} chunks",
        group(s.files as u64),
        group(s.chunks as u64)
    );
    match &s.watching {
        Watching::Active { .. } => out.push_str("; kept current from file notifications"),
        Watching::Off(why) => out.push_str(&format!(
            "; every query re-checks the files (no file notifications: {why})"
        )),
        Watching::NotStarted => {}
    }
    if let Some(l) = &s.last {
        let what = match l.folders {
            0 => "last refresh".to_string(),
            1 => "last update (1 changed folder)".to_string(),
            n => format!("last update ({n} changed folders)"),
        };
        out.push_str(&format!(
            "; {what}: {} re-indexed, {} unchanged, {} same content, {} removed in {} ms",
            l.indexed,
            l.unchanged,
            l.same_content,
            l.removed,
            l.duration.as_millis()
        ));
    }
    if s.refreshing {
        out.push_str(if s.built {
            "; a refresh is running, so the newest changes may be missing"
        } else {
            "; the first build is still running, so results are partial"
        });
    }
    out.push(']');
    out
}

impl Tool for ViewRepoMap {
    fn name(&self) -> &'static str {
        "view_repo_map"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/view_repo_map.md")
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","properties":{}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, _args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let env = env.clone();
        let root = env.workspace.root_path();
        Ok(Invocation {
            targets: vec![Target::Path {
                path: root,
                access: Access::List,
            }],
            job: blocking(move || repo_map(&env)),
        })
    }
}

/// Every file (search-walk rules), with the signatures of its symbols while they fit in 80%
/// of the output budget, then paths only, then a note.
fn repo_map(env: &ToolEnv) -> Result<String, ToolError> {
    let ws = &env.workspace;
    let mut b = walk::builder(
        ws,
        &ws.root_path(),
        &env.config.search_exclude,
        Visibility::Search,
    )
    .map_err(ToolError::Failed)?;
    b.sort_by_file_name(|a, b| a.cmp(b));
    let budget = env.config.output_budget.saturating_sub(400);
    let sig_budget = budget * 4 / 5;
    let deadline = Instant::now() + env.config.search_timeout;
    let mut body = String::new();
    let (mut files, mut with_sigs, mut shown, mut paths_only) = (0usize, 0usize, 0usize, false);
    for entry in b.build().flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        files += 1;
        if files % 64 == 0 && (Instant::now() > deadline || env.cancel.is_cancelled()) {
            break;
        }
        if body.len() >= budget {
            continue; // still counting
        }
        let rel = walk::rel_display(ws, entry.path());
        let mut block = String::new();
        if !paths_only && let Some(lang) = Lang::of(entry.path()) {
            let text = ws
                .rel_of(entry.path())
                .and_then(|r| ws.open_walked(r).ok())
                .and_then(|f| {
                    use std::io::Read;
                    let mut s = String::new();
                    f.take(MAX_PARSE_BYTES as u64).read_to_string(&mut s).ok()?;
                    Some(s)
                });
            let syms = text.map(|t| symbols::symbols(lang, &t)).unwrap_or_default();
            if !syms.is_empty() {
                block.push_str(&format!("{rel}:\n"));
                for s in &syms {
                    block.push_str(&format!("{}{}\n", "  ".repeat(s.depth + 1), s.signature));
                }
            }
        }
        if block.is_empty() {
            block = format!("{rel}\n");
        } else if body.len() + block.len() > sig_budget {
            paths_only = true;
            block = format!("{rel}\n");
        } else {
            with_sigs += 1;
        }
        if body.len() + block.len() > budget {
            continue;
        }
        body.push_str(&block);
        shown += 1;
    }
    if files == 0 {
        return Ok(
            "The workspace has no files to map (ignored and hidden files are not listed).".into(),
        );
    }
    let mut out = format!(
        "Repository map of {} ({} files; the signatures of top-level functions, types and \
         methods are shown for Rust, Python, TypeScript/JavaScript, Go, Java and C/C++):\n\n",
        ws.name(),
        group(files as u64)
    );
    out.push_str(&body);
    if paths_only || shown < files {
        out.push_str(&format!(
            "[map cut to fit the output budget: signatures shown for {with_sigs} files, {} of {} \
             files listed. For the rest, list a folder with view_subdirectory \
             {{\"directory_path\": \"…\"}} and read the files you need with read_file.]",
            group(shown as u64),
            group(files as u64)
        ));
    }
    Ok(out)
}
