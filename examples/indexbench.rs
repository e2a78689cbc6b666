//! Benchmark of the codebase index: cold build time, a refresh with nothing changed, query
//! latency over a fixed set of natural-language and identifier queries, the round trip of a
//! `codebase` tool call (what a model waits for), and how soon a changed file is searchable.
//!
//! ```sh
//! cargo run --release --example indexbench -- DIR      # a large source tree
//! cargo run --release --example indexbench -- --quick  # the small fixture (CI)
//! ```
//!
//! Without DIR it indexes the pinned benchmark tree (`target/bench-tree/registry/src`, from
//! `bench/fetch-tree`) when present, else Cargo's registry sources (`$CARGO_HOME/registry/src`).
//! The index goes to a temporary state directory. The tree is only read, except for one probe
//! file (`toolpilot-indexbench-probe-PID.rs` at its root) that the change measurements create,
//! rewrite and delete.
//!
//! `TOOLPILOT_CODEBASE__WATCH=false` measures the walk-per-query fallback; `--state DIR` keeps
//! the index in DIR between runs; `RUST_LOG=toolpilot::code=debug` logs each pass's phases.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolpilot::code::index::CodeIndex;
use toolpilot::workspace::{DEFAULT_SENSITIVE, Workspace};

// The server's allocator, so the numbers are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// How long the change measurements wait before calling a change not found.
const CHANGE_DEADLINE: Duration = Duration::from_secs(5);

fn main() -> Result<(), String> {
    // RUST_LOG=toolpilot=debug shows each pass of the index with its phases.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let scratch = std::env::temp_dir().join(format!("toolpilot-indexbench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let _cleanup = Cleanup(vec![scratch.clone()]);
    // `--state DIR` keeps the index there between runs (the "cold build" is then a walk).
    let state = match args.iter().position(|a| a == "--state") {
        Some(i) => PathBuf::from(args.get(i + 1).ok_or("--state needs a directory")?),
        None => scratch.join("state"),
    };
    let state_arg = args
        .iter()
        .position(|a| a == "--state")
        .and_then(|i| args.get(i + 1));
    let tree = match args
        .iter()
        .find(|a| !a.starts_with("--") && Some(*a) != state_arg)
    {
        Some(d) => PathBuf::from(d),
        None if quick => {
            // A copy, so the probe file never lands in the repository.
            let fixture =
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/retrieval");
            let copy = scratch.join("retrieval");
            copy_tree(&fixture, &copy)?;
            copy
        }
        None => default_tree()?,
    };
    let tree = std::fs::canonicalize(&tree).map_err(|e| format!("{}: {e}", tree.display()))?;
    let iterations = if quick { 2 } else { 20 };
    // The engine the server would run (default configuration: the same walk rules, exclude list
    // and index settings), so tool calls go through the registry as a model's do.
    let cli = toolpilot::config::CommonArgs {
        workspace: Some(tree.clone()),
        state_dir: Some(state.clone()),
        ..Default::default()
    };
    let mut env: Vec<(String, String)> = vec![("HOME".into(), "/nonexistent".into())];
    env.extend(std::env::vars().filter(|(k, _)| k.starts_with("TOOLPILOT_CODEBASE__")));
    let cfg = toolpilot::config::Config::load_from(&cli, &env).map_err(|e| e.to_string())?;
    let engine = Arc::new(toolpilot::agent::Engine::new(cfg)?);
    let index: Arc<CodeIndex> = Arc::clone(&engine.code);
    println!("tree: {}", tree.display());

    let t = Instant::now();
    let cold = index.refresh()?;
    let build = t.elapsed();
    let status = index.status();
    let bytes = dir_size(&state);
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
    println!(
        "search only: {} queries ({} queries x {iterations}), {}; {} without results",
        times.len(),
        QUERIES.len(),
        percentiles(&mut times),
        empty
    );

    // What a model waits for: a `codebase` tool call through the registry (argument parsing,
    // policy, bringing the index up to date, the search, the rendered result, redaction).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let tool = |name: &str, args: serde_json::Value| run_tool(&engine, &rt, name, args);
    let call = |query: &str| tool("codebase", json!({ "query": query }));
    // The first call starts whatever keeps the index current (and catches up with the tree).
    let t = Instant::now();
    call("warm up");
    println!(
        "first codebase call: {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let rounds = if quick { 1 } else { 4 };
    let mut times = Vec::new();
    for _ in 0..rounds {
        for q in QUERIES {
            let t = Instant::now();
            let out = call(q);
            times.push(t.elapsed());
            if out.starts_with("Failed") {
                return Err(out);
            }
        }
    }
    println!(
        "codebase call round trip, nothing changed: {} calls, {}",
        times.len(),
        percentiles(&mut times)
    );

    // A full-tree grep reads every file: none of it may reach the index (the kernel does not
    // send reads, with the event kinds the index asks for).
    let (walks, events) = (index.status().walks, index.status().events);
    tool("grep_search", json!({"query": "xq7zzv_no_such_token"}));
    println!(
        "a full grep_search while the index watches: {} notifications, {} walks",
        index.status().events - events,
        index.status().walks - walks
    );

    // A changed file: created, then rewritten, then deleted. A probe file at the tree's root,
    // with words no real code has.
    let probe_name = format!("toolpilot-indexbench-probe-{}.rs", std::process::id());
    let probe = tree.join(&probe_name);
    let _probe_cleanup = Cleanup(vec![probe.clone()]);
    let found_by_search = |word: &str| -> bool {
        index
            .search(word, 8)
            .ok()
            .flatten()
            .is_some_and(|(hits, _)| hits.iter().any(|h| h.path == probe_name))
    };
    // 1. Created: how long a codebase call that follows at once takes, and whether it finds it.
    write(&probe, "fn zqxalphaprobe() {}\n")?;
    let t = Instant::now();
    let out = call("zqxalphaprobe");
    println!(
        "new file, a codebase call right after the write: {:.0} ms, {}",
        t.elapsed().as_secs_f64() * 1e3,
        if out.contains(&probe_name) {
            "found"
        } else {
            "NOT found"
        }
    );
    // 2. Rewritten: how long until a search finds the new word with no call in between.
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    write(&probe, "fn zqxbetaprobe() {}\n")?;
    println!(
        "changed file, searchable without a call after: {}",
        wait_until(t, || found_by_search("zqxbetaprobe"))
    );
    // 3. Deleted: how long until a search no longer finds it (first made sure the index has
    // the file, through a call, where nothing indexed the rewrite by itself).
    if !found_by_search("zqxbetaprobe") {
        call("zqxbetaprobe");
    }
    let t = Instant::now();
    std::fs::remove_file(&probe).map_err(|e| e.to_string())?;
    println!(
        "deleted file, gone from searches after: {}",
        wait_until(t, || !found_by_search("zqxbetaprobe"))
    );
    let s = index.status();
    println!("index status at the end: {s:?}");
    drop(engine);

    // What the watches cost other programs that read the tree (the kernel looks at the
    // watches of a folder on every open and read in it, even for events nobody asked for): a
    // full ripgrep scan with no watches, then with an index watching the tree, in turns.
    if let Some(times) = watch_cost(&tree, &state, &rt, if quick { 1 } else { 5 })? {
        println!("{times}");
    }
    Ok(())
}

/// One tool call through the engine's registry, as a model's call runs.
fn run_tool(
    engine: &toolpilot::agent::Engine,
    rt: &tokio::runtime::Runtime,
    name: &str,
    args: serde_json::Value,
) -> String {
    let env = engine.tool_env("bench", "", tokio_util::sync::CancellationToken::new());
    let c = toolpilot::openai::ToolCall {
        id: "b".into(),
        name: name.into(),
        arguments: args.to_string(),
        kind: None,
    };
    rt.block_on(
        engine
            .registry
            .dispatch(&c, &env, &toolpilot::tools::registry::ApproveAll),
    )
    .content
}

/// `rg` over `tree` with and without an index watching it, `cycles` times each in turn;
/// `None` without `rg` or without notifications.
fn watch_cost(
    tree: &Path,
    state: &Path,
    rt: &tokio::runtime::Runtime,
    cycles: usize,
) -> Result<Option<String>, String> {
    let rg = || -> Option<Duration> {
        let t = Instant::now();
        let ok = std::process::Command::new("rg")
            .args(["-c", "xq7zzv_no_such_token", "--no-config", "."])
            .current_dir(tree)
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok();
        ok.then(|| t.elapsed())
    };
    if rg().is_none() {
        return Ok(None);
    }
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..cycles {
        wait_for_no_watches();
        without.push(rg().unwrap_or_default());
        let cli = toolpilot::config::CommonArgs {
            workspace: Some(tree.to_path_buf()),
            state_dir: Some(state.to_path_buf()),
            ..Default::default()
        };
        let cfg =
            toolpilot::config::Config::load_from(&cli, &[("HOME".into(), "/nonexistent".into())])
                .map_err(|e| e.to_string())?;
        let engine = toolpilot::agent::Engine::new(cfg)?;
        run_tool(&engine, rt, "codebase", json!({"query": "warm up"}));
        if !matches!(
            engine.code.status().watching,
            toolpilot::code::index::Watching::Active { .. }
        ) {
            return Ok(None);
        }
        with.push(rg().unwrap_or_default());
    }
    let mid = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    };
    let (a, b) = (mid(&mut without), mid(&mut with));
    Ok(Some(format!(
        "rg full scan of the tree, median of {cycles} in turns: {a:.0} ms without watches, {b:.0} ms with the index watching ({:+.0}%)",
        (b / a - 1.0) * 100.0
    )))
}

/// Waits (at most 10 s) until no inotify instance of this process has a watch: a dropped
/// index releases its watches from its own thread.
fn wait_for_no_watches() {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let watches: usize = std::fs::read_dir("/proc/self/fdinfo")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                    .map(|s| s.lines().filter(|l| l.starts_with("inotify wd:")).count())
                    .sum()
            })
            .unwrap_or(0);
        if watches == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How long until `done` holds, polled every 2 ms, or that it did not within the deadline.
fn wait_until(t: Instant, mut done: impl FnMut() -> bool) -> String {
    while t.elapsed() < CHANGE_DEADLINE {
        if done() {
            return format!("{:.0} ms", t.elapsed().as_secs_f64() * 1e3);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    format!("not within {} s", CHANGE_DEADLINE.as_secs())
}

fn write(p: &Path, text: &str) -> Result<(), String> {
    std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display()))
}

fn percentiles(times: &mut [Duration]) -> String {
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        pct(1.0).as_secs_f64() * 1e3
    )
}

/// Removes its paths when dropped (the state directory, the probe file), also on an error.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            if p.is_dir() {
                let _ = std::fs::remove_dir_all(p);
            } else {
                let _ = std::fs::remove_file(p);
            }
        }
    }
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

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for e in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let e = e.map_err(|e| e.to_string())?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().map_err(|e| e.to_string())?.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| format!("{}: {e}", src.display()))?;
        }
    }
    Ok(())
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
