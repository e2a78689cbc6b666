//! Benchmark of the codebase index: cold build time, a refresh with nothing changed, and
//! query latency over a fixed set of natural-language and identifier queries.
//!
//! ```sh
//! cargo run --release --example indexbench -- DIR      # a large source tree
//! cargo run --release --example indexbench -- --quick  # the small fixture (CI)
//! ```
//!
//! Without DIR it indexes the pinned benchmark tree (`target/bench-tree/registry/src`, from
//! `bench/fetch-tree`) when present, else Cargo's registry sources (`$CARGO_HOME/registry/src`).
//! The index goes to a temporary state directory; the tree is only read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolpilot::code::index::{CodeIndex, CodebaseConfig};

// The server's allocator, so the numbers are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use toolpilot::workspace::{DEFAULT_SENSITIVE, Workspace};

/// Queries of both kinds, about code any large Rust tree has.
const QUERIES: &[&str] = &[
    "parse a configuration file",
    "retry with exponential backoff",
    "read a file into a string",
    "HashMap",
    "serialize to json",
    "connection pool timeout",
    "fn from_str",
    "unsafe impl Send",
    "utf8 decoding error",
    "spawn a thread and join it",
    "TcpListener bind",
    "base64 encode",
    "parse command line arguments",
    "Iterator::next",
    "lock a mutex",
    "compute sha256 hash",
];

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let tree = match args.iter().find(|a| !a.starts_with("--")) {
        Some(d) => PathBuf::from(d),
        None if quick => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/retrieval"),
        None => default_tree()?,
    };
    let iterations = if quick { 2 } else { 20 };
    let ws = Workspace::open(
        &tree,
        &DEFAULT_SENSITIVE
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    )
    .map_err(|e| format!("cannot open {}: {e}", tree.display()))?;
    let state = std::env::temp_dir().join(format!("toolpilot-indexbench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let config = CodebaseConfig {
        exclude: vec!["node_modules/".into(), "__pycache__/".into()],
        ..CodebaseConfig::default()
    };
    let index = Arc::new(CodeIndex::new(state.join("index"), Arc::new(ws), config));
    println!("tree: {}", tree.display());

    let t = Instant::now();
    let cold = index.refresh()?;
    let build = t.elapsed();
    let status = index.status();
    let bytes = dir_size(&state.join("index"));
    println!(
        "cold build: {:.2} s for {} files indexed ({} skipped: too large or binary), {} chunks; index {:.1} MB on disk",
        build.as_secs_f64(),
        cold.indexed,
        cold.skipped,
        status.chunks,
        bytes as f64 / 1e6
    );
    let (files, source_bytes) = source_size(&tree);
    println!(
        "tree walked: {files} files of at most 1 MB, {:.1} MB",
        source_bytes as f64 / 1e6
    );

    let t = Instant::now();
    let again = index.refresh()?;
    println!(
        "refresh, nothing changed: {:.0} ms ({} unchanged, {} re-indexed)",
        t.elapsed().as_secs_f64() * 1e3,
        again.unchanged,
        again.indexed
    );

    let mut times: Vec<Duration> = Vec::new();
    let mut empty = 0;
    for _ in 0..iterations {
        for q in QUERIES {
            let t = Instant::now();
            let hits = index.search(q, 8)?.map(|(h, _)| h).unwrap_or_default();
            times.push(t.elapsed());
            if hits.is_empty() {
                empty += 1;
            }
        }
    }
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    println!(
        "queries: {} ({} queries x {iterations}), p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {} without results",
        times.len(),
        QUERIES.len(),
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        pct(1.0).as_secs_f64() * 1e3,
        empty
    );
    let _ = std::fs::remove_dir_all(&state);
    Ok(())
}

fn default_tree() -> Result<PathBuf, String> {
    let pinned = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-tree/registry/src");
    if pinned.is_dir() {
        return Ok(pinned);
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("pass a directory: neither CARGO_HOME nor HOME is set")?;
    let src = home.join("registry/src");
    if src.is_dir() {
        Ok(src)
    } else {
        Err(format!(
            "{} does not exist; pass a directory to index",
            src.display()
        ))
    }
}

fn dir_size(p: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => total += dir_size(&e.path()),
                Ok(_) => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                Err(_) => {}
            }
        }
    }
    total
}

/// Files and bytes the index's walk sees (same walk rules, files up to 1 MB; binary files are
/// counted here but not indexed).
fn source_size(tree: &Path) -> (usize, u64) {
    let ws = match Workspace::open(
        tree,
        &DEFAULT_SENSITIVE
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    ) {
        Ok(w) => w,
        Err(_) => return (0, 0),
    };
    let Ok(b) = toolpilot::workspace::walk::builder(
        &ws,
        &ws.root_path(),
        &["node_modules/".into(), "__pycache__/".into()],
        toolpilot::workspace::walk::Visibility::Search,
    ) else {
        return (0, 0);
    };
    let sizes: Vec<u64> = b
        .build()
        .flatten()
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .filter(|&n| n <= 1024 * 1024)
        .collect();
    (sizes.len(), sizes.iter().sum())
}
