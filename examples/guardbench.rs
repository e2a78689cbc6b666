//! Benchmark of the protected-path guard around a command: the scan before it
//! (`Guard::capture`) and the check after it (`Guard::finish`, nothing changed), on a tree.
//!
//! ```sh
//! cargo run --release --example guardbench -- DIR      # a large tree (only read)
//! cargo run --release --example guardbench -- --quick  # this repository, 2 rounds (CI)
//! ```
//!
//! Without DIR it scans the pinned benchmark tree (`target/bench-tree/registry/src`) when
//! present, else this repository (with its `target/`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use toolpilot::policy::{DEFAULT_PROTECTED, Protected};
use toolpilot::terminal::guard::Guard;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let pinned = here.join("target/bench-tree/registry/src");
    let tree = match args.iter().find(|a| !a.starts_with("--")) {
        Some(d) => PathBuf::from(d),
        None if !quick && pinned.is_dir() => pinned,
        None => here,
    };
    let rounds = if quick { 2 } else { 15 };
    let protected = Protected::new(
        &DEFAULT_PROTECTED
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    )?;
    let entries = walkdir_count(&tree);
    let mut capture = Vec::new();
    let mut finish = Vec::new();
    let mut found = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        let g = Guard::capture(&tree, &protected).map_err(|e| e.to_string())?;
        capture.push(t.elapsed());
        found = g.len();
        let t = Instant::now();
        let quarantine = std::env::temp_dir().join("toolpilot-guardbench-quarantine");
        let report = g.finish(&protected, &[], &quarantine);
        finish.push(t.elapsed());
        if !report.removed.is_empty() || !report.restored.is_empty() {
            return Err(format!(
                "the tree changed while it was measured: {report:?}"
            ));
        }
    }
    capture.sort();
    finish.sort();
    println!(
        "guard on {} ({entries} entries, {found} protected), {rounds} rounds",
        tree.display()
    );
    for (name, v) in [
        ("capture (scan before)", &capture),
        ("finish (scan + compare after)", &finish),
    ] {
        println!(
            "  {name:<30} p50 {:>8.2} ms   p90 {:>8.2} ms",
            percentile(v, 0.5).as_secs_f64() * 1e3,
            percentile(v, 0.9).as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// How many entries the tree has (links not followed), for the report.
fn walkdir_count(dir: &std::path::Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            n += 1;
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    n
}
