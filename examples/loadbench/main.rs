//! The load harness: starts the mock upstream and toolpilot as processes and measures, in one
//! run so that machine noise cancels out in the ratios:
//!
//! 1. added latency versus calling the mock directly (sequential, interleaved), median and p99,
//!    for a small body, a 3 KB agent-style body and time to first token of a stream;
//! 2. throughput and latency with many concurrent streaming clients;
//! 3. a 5-round tool loop end to end;
//! 4. `grep_search` and `file_glob_search` against ripgrep on a large tree, results compared;
//! 5. resident memory idle and with many open streams;
//! 6. workspace snapshots (the checkpoint of commands) on the large tree;
//! 7. with `--only peers`: LiteLLM and Portkey's gateway beside toolpilot and the bare forwarder,
//!    in front of the mock and of a Python upstream (`bench/peers`).
//!
//! `cargo build --release && cargo run --release --example loadbench -- --tree DIR`
//! (`bench/run` does both). `--quick` runs tiny counts (CI: it checks the harness still works;
//! nothing here asserts a timing).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod peers;
mod wire;

// The server's allocator: the search section runs toolpilot's tools in this process, so their
// allocations should cost what they cost in the server.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

struct Opts {
    quick: bool,
    tree: Option<PathBuf>,
    only: Option<String>,
    peers: peers::PeerPaths,
}

struct Proc {
    _child: Child,
    url: String,
    pid: u32,
}

fn toolpilot_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/examples/loadbench → target/<profile>/toolpilot
    let bin = exe.parent().unwrap().parent().unwrap().join("toolpilot");
    if !bin.exists() {
        eprintln!(
            "{} is missing: build it first (cargo build --release, or cargo build for --quick)",
            bin.display()
        );
        std::process::exit(2);
    }
    bin
}

async fn read_url(
    lines: &mut tokio::io::Lines<BufReader<impl tokio::io::AsyncRead + Unpin>>,
) -> String {
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(i) = line.find("http://") {
            let url = line[i..].split_whitespace().next().unwrap();
            return url.trim_end_matches([')', ',']).to_string();
        }
    }
    panic!("the process ended before printing its address");
}

/// Where a server prints the line with its address.
#[derive(Clone, Copy)]
enum Says {
    Stdout,
    Stderr,
}

/// Starts a server and reads its address from the stream it prints it on; that stream is then
/// drained so the server never blocks on a full pipe, and the other one is dropped.
async fn start(mut cmd: Command, says: Says) -> Proc {
    let (out, err) = match says {
        Says::Stdout => (Stdio::piped(), Stdio::null()),
        Says::Stderr => (Stdio::null(), Stdio::piped()),
    };
    let mut child = cmd
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output: Box<dyn tokio::io::AsyncRead + Unpin + Send> = match says {
        Says::Stdout => Box::new(child.stdout.take().unwrap()),
        Says::Stderr => Box::new(child.stderr.take().unwrap()),
    };
    let mut lines = BufReader::new(output).lines();
    let url = read_url(&mut lines).await;
    let pid = child.id().unwrap();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Proc {
        _child: child,
        url,
        pid,
    }
}

async fn spawn_mock(dir: &Path, name: &str, script: Value) -> Proc {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, script.to_string()).unwrap();
    let mut cmd = Command::new(toolpilot_bin());
    cmd.args(["mock-upstream", "--bind", "127.0.0.1:0", "--script"])
        .arg(&path)
        .env("TOOLPILOT_LOG", "error");
    start(cmd, Says::Stdout).await
}

async fn spawn_toolpilot(dir: &Path, upstream: &str, ws: &Path, extra: &[&str]) -> Proc {
    spawn_toolpilot_env(dir, upstream, ws, extra, &[]).await
}

/// The bare forwarder (`examples/bareproxy.rs`) in front of `upstream`: the floor any proxy
/// built like toolpilot pays on this machine.
async fn spawn_bare(upstream: &str) -> Proc {
    spawn_bare_with(upstream, None).await
}

/// [`spawn_bare`], adding the tool specs in `tools` (a JSON array) to every request, as
/// toolpilot adds its own.
async fn spawn_bare_with(upstream: &str, tools: Option<&Path>) -> Proc {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().join("bareproxy");
    if !bin.exists() {
        eprintln!(
            "{} is missing: build the examples first (cargo build --release --examples)",
            bin.display()
        );
        std::process::exit(2);
    }
    let mut cmd = Command::new(bin);
    cmd.args(["127.0.0.1:0", upstream]);
    if let Some(t) = tools {
        cmd.arg(t);
    }
    start(cmd, Says::Stderr).await
}

/// [`spawn_toolpilot`] with extra environment variables (configuration keys).
async fn spawn_toolpilot_env(
    dir: &Path,
    upstream: &str,
    ws: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Proc {
    let mut cmd = Command::new(toolpilot_bin());
    cmd.args([
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--model",
        "mock-model",
        "--upstream",
        upstream,
        "--workspace",
    ])
    .arg(ws)
    .arg("--state-dir")
    .arg(dir.join("state"))
    .args(extra)
    .envs(env.iter().copied())
    .env("TOOLPILOT_LOG", "info");
    start(cmd, Says::Stderr).await
}

fn client() -> reqwest::Client {
    toolpilot::process::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(2048)
        .tcp_nodelay(true)
        .build()
        .unwrap()
}

/// One request; returns (total time, time to first content byte).
async fn request(c: &reqwest::Client, url: &str, body: &Value) -> (Duration, Duration) {
    let t = Instant::now();
    let mut resp = c
        .post(format!("{url}/chat/completions"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "HTTP {}", resp.status());
    let mut first = None;
    while let Some(chunk) = resp.chunk().await.unwrap() {
        // The first chunk that carries text (`"content":"` followed by something).
        let has_text = chunk
            .windows(12)
            .any(|w| &w[..11] == b"\"content\":\"" && w[11] != b'"');
        if first.is_none() && (has_text || !body["stream"].as_bool().unwrap_or(false)) {
            first = Some(t.elapsed());
        }
    }
    (t.elapsed(), first.unwrap_or_else(|| t.elapsed()))
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// CPU time (user + system) a process has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_secs_f64(ticks as f64 / 100.0)
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn agent_body(stream: bool) -> Value {
    let system = "You are a coding assistant working in the user's repository. Use the tools to read files before editing them. ".repeat(12);
    json!({
        "model": "mock-model", "stream": stream, "max_tokens": 4096,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Where is the configuration loaded, and how are errors reported?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "grep_search", "arguments": "{\"query\":\"fn load\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "src/config.rs\n245:    pub fn load(args: &CommonArgs) -> Result<Config, ConfigError> {\n".repeat(6)},
            {"role": "user", "content": "And the tests?"}
        ]
    })
}

async fn latency(o: &Opts, dir: &Path, ws: &Path) {
    println!("\n## 1. Added latency (sequential, interleaved)\n");
    // A plain round: the mock answers a request without `stream: true` with one JSON
    // completion and a streamed one with SSE, as real servers do.
    let mock = spawn_mock(
        dir,
        "latency",
        json!({"record": false, "repeat_last": true, "rounds": [{"text": "Hello there"}]}),
    )
    .await;
    let tp = spawn_toolpilot(dir, &mock.url, ws, &[]).await;
    // The same with `upstream.always_stream`: every upstream round streamed (how toolpilot
    // worked before non-streaming clients got non-streamed upstream rounds).
    let tp_stream = spawn_toolpilot_env(
        dir,
        &mock.url,
        ws,
        &[],
        &[("TOOLPILOT_UPSTREAM__ALWAYS_STREAM", "true")],
    )
    .await;
    let c = client();
    let n = if o.quick { 20 } else { 5000 };
    let small = json!({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]});
    let big = agent_body(false);
    let mut stream_small = small.clone();
    stream_small["stream"] = json!(true);
    let mut stream_notools = stream_small.clone();
    stream_notools["tools"] = json!([]);
    let bare = spawn_bare(&mock.url).await;
    println!(
        "Each round sends the request to the mock directly, through the bare forwarder \
         (`examples/bareproxy.rs`: the same HTTP stack with no work of its own) and through \
         toolpilot, in a rotating order. \"Added\" is the median of the per-round differences \
         with the direct request; \"beyond bare\" is the median of toolpilot minus the bare \
         forwarder, what toolpilot's own work costs.\n"
    );
    println!(
        "| case | direct median | bare forwarder added | toolpilot added | toolpilot beyond bare | direct p99 | toolpilot p99 | added p99 (p99 − direct p99) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, body, ttft, via) in [
        ("non-stream, small body", &small, false, &tp),
        ("non-stream, 3 KB agent body", &big, false, &tp),
        (
            "non-stream, small body, upstream.always_stream",
            &small,
            false,
            &tp_stream,
        ),
        (
            "non-stream, 3 KB agent body, upstream.always_stream",
            &big,
            false,
            &tp_stream,
        ),
        ("stream, time to first token", &stream_small, true, &tp),
        (
            "stream, time to first token, tools: []",
            &stream_notools,
            true,
            &tp,
        ),
    ] {
        let urls = [&mock.url, &bare.url, &via.url];
        // Warm-up: connections, caches.
        for _ in 0..(n / 10).max(5) {
            for u in urls {
                request(&c, u, body).await;
            }
        }
        // Per target, one time per round. Paired differences: each round measures all three,
        // so slow moments of the machine hit every side of a pair.
        let mut t: [Vec<Duration>; 3] = std::array::from_fn(|_| Vec::with_capacity(n));
        for i in 0..n {
            for k in 0..3 {
                let j = (i + k) % 3;
                let (total, first) = request(&c, urls[j], body).await;
                t[j].push(if ttft { first } else { total });
            }
        }
        let median_diff = |a: &[Duration], b: &[Duration]| {
            let mut d: Vec<f64> = a
                .iter()
                .zip(b)
                .map(|(x, y)| x.as_secs_f64() - y.as_secs_f64())
                .collect();
            d.sort_by(f64::total_cmp);
            d[d.len() / 2] * 1000.0
        };
        let bare_added = median_diff(&t[1], &t[0]);
        let added = median_diff(&t[2], &t[0]);
        let beyond = median_diff(&t[2], &t[1]);
        let [d, _, v] = &mut t;
        let dm = pct(d, 0.5);
        let (d99, v99) = (pct(d, 0.99), pct(v, 0.99));
        println!(
            "| {name} | {} ms | {bare_added:.3} ms | **{added:.3} ms** | **{beyond:.3} ms** | {} ms | {} ms | {} ms |",
            ms(dm),
            ms(d99),
            ms(v99),
            ms(v99.saturating_sub(d99))
        );
    }
}

async fn throughput(o: &Opts, dir: &Path, ws: &Path) {
    println!("\n## 2. Throughput with concurrent streaming clients\n");
    let mock = spawn_mock(dir, "throughput", json!({"record": false, "repeat_last": true, "rounds": [{"text": "Hello there, streaming world", "chunk_size": 8}]})).await;
    let tp = spawn_toolpilot(dir, &mock.url, ws, &[]).await;
    let bare = spawn_bare(&mock.url).await;
    let body = json!({"model": "mock-model", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    println!(
        "| clients | target | requests/s | ÷ the mock's | p50 | p99 | errors | its CPU per request |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let levels: &[usize] = if o.quick { &[4] } else { &[64, 512] };
    for &clients in levels {
        let mut mock_rps = 0.0;
        for (label, p) in [
            ("mock directly", &mock),
            ("bare forwarder", &bare),
            ("via toolpilot", &tp),
        ] {
            let secs = if o.quick { 1 } else { 10 };
            let cpu0 = cpu_time(p.pid);
            // The CPU of the warm-up (one request per connection) is in the figure too.
            let l = peers::load(&peers::Target::plain(label, &p.url), &body, clients, secs).await;
            let cpu = cpu_time(p.pid).saturating_sub(cpu0);
            let per = if l.served > 0 {
                format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / l.served as f64)
            } else {
                "-".into()
            };
            if label == "mock directly" {
                mock_rps = l.rps;
            }
            println!(
                "| {clients} | {label} | **{:.0}** | {:.2} × | {} ms | {} ms | {} | {per} |",
                l.rps,
                l.rps / mock_rps.max(1.0),
                ms(l.p50),
                ms(l.p99),
                l.errors
            );
        }
    }
}

async fn tool_loop(o: &Opts, dir: &Path, ws: &Path) {
    println!("\n## 3. A 5-round tool loop end to end\n");
    let call = |name: &str, args: Value| json!({"tool_calls": [{"name": name, "arguments": args}]});
    let script = json!({"record": false, "cycle": true, "rounds": [
        call("ls", json!({"dirPath": "src"})),
        call("read_file", json!({"filepath": "Cargo.toml"})),
        call("grep_search", json!({"query": "fn main"})),
        call("file_glob_search", json!({"pattern": "**/*.rs"})),
        call("read_file", json!({"filepath": "README.md"})),
        {"text": "Done: the answer."}
    ]});
    let mock = spawn_mock(dir, "loop", script).await;
    let tp = spawn_toolpilot(dir, &mock.url, ws, &[]).await;
    let c = client();
    let body =
        json!({"model": "mock-model", "messages": [{"role": "user", "content": "look around"}]});
    let n = if o.quick { 3 } else { 300 };
    request(&c, &tp.url, &body).await;
    let t = Instant::now();
    let mut lat = Vec::new();
    for _ in 0..n {
        lat.push(request(&c, &tp.url, &body).await.0);
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    println!("| runs | runs/s (sequential) | p50 per run | p99 per run |");
    println!("|---|---|---|---|");
    println!(
        "| {n} | **{rate:.0}** | {} ms | {} ms |",
        ms(pct(&mut lat, 0.5)),
        ms(pct(&mut lat, 0.99))
    );
    println!(
        "\n(each run: 6 upstream rounds, 5 tool calls: ls, read_file, grep_search over the workspace, file_glob_search, read_file; workspace: {})",
        ws.display()
    );
}

fn rg() -> Option<String> {
    let out = std::process::Command::new("rg")
        .arg("--version")
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    })
}

/// ripgrep flags that do the same work as toolpilot's walk and search. toolpilot matches the
/// sensitive-file patterns on folded names (`Certificates/` is `certificates/`), so the
/// exclude globs are case-insensitive here too.
fn rg_common(args: &mut Vec<String>) {
    args.extend(["--no-require-git", "--no-config", "--glob-case-insensitive"].map(String::from));
    for g in toolpilot::workspace::DEFAULT_SENSITIVE
        .iter()
        .chain(["node_modules/", "__pycache__/"].iter())
    {
        args.push("-g".into());
        args.push(format!("!{g}"));
    }
}

fn count_files(tree: &Path) -> usize {
    ignore::WalkBuilder::new(tree)
        .hidden(false)
        .ignore(false)
        .git_ignore(false)
        .parents(false)
        .build()
        .flatten()
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .count()
}

async fn search(o: &Opts, dir: &Path, tree: &Path) {
    println!("\n## 4. grep_search and file_glob_search against ripgrep\n");
    let rg_version = rg();
    println!(
        "Tree: {} ({} files). ripgrep: {}.\n",
        tree.display(),
        count_files(tree),
        rg_version
            .as_deref()
            .unwrap_or("not installed (cargo install ripgrep)")
    );
    let args = toolpilot::config::CommonArgs {
        workspace: Some(tree.to_path_buf()),
        state_dir: Some(dir.join("state-search")),
        ..Default::default()
    };
    let cfg =
        toolpilot::config::Config::load_from(&args, &[("HOME".into(), "/nonexistent".into())])
            .unwrap();
    let engine = toolpilot::agent::Engine::new(cfg).unwrap();
    let env = engine.tool_env("bench", "", tokio_util::sync::CancellationToken::new());
    let runs = if o.quick { 1 } else { 11 };
    let rt = tokio::runtime::Handle::current();
    let ours = |name: &str, a: Value| -> String {
        let c = toolpilot::openai::ToolCall {
            id: "b".into(),
            name: name.into(),
            arguments: a.to_string(),
            kind: None,
        };
        rt.block_on(
            engine
                .registry
                .dispatch(&c, &env, &toolpilot::tools::registry::ApproveAll),
        )
        .content
    };
    let run_rg = |args: &[String]| -> String {
        let out = std::process::Command::new("rg")
            .args(args)
            .current_dir(tree)
            .output()
            .expect("run rg");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    println!(
        "Each row: {runs} interleaved pairs (toolpilot, then ripgrep), after one warm-up of each; \
         the ratio is the median of the per-pair ratios.\n"
    );
    println!(
        "| search | toolpilot median | ripgrep median | ratio | toolpilot result | ripgrep result | equal |"
    );
    println!("|---|---|---|---|---|---|---|");
    let row = |label: String, t: Timing, ours_res: String, rg_res: Option<String>| {
        println!(
            "| {label} | {} ms | {} | {} | {ours_res} | {} | {} |",
            ms(t.ours),
            t.rg.map_or("-".into(), |d| format!("{} ms", ms(d))),
            t.ratio.map_or("-".into(), |r| format!("**{r:.2}**")),
            rg_res.as_deref().unwrap_or("-"),
            rg_res
                .as_ref()
                .map_or("-", |r| if *r == ours_res { "yes" } else { "**NO**" }),
        );
        if rg_res.is_some_and(|r| r != ours_res) {
            eprintln!("{label}: results differ");
        }
    };
    for (label, query) in [
        ("full scan, no match", "xq7zzv_no_such_token"),
        ("full scan, rare match", "unsafe impl Send for"),
    ] {
        // grep_search skips files over 20 MB; file_glob_search lists every size.
        let mut rg_args: Vec<String> =
            ["-i", "-n", "-C", "2", "-m", "100", "--max-filesize", "20M"]
                .map(String::from)
                .to_vec();
        rg_common(&mut rg_args);
        rg_args.extend(["-e".to_string(), query.to_string(), ".".to_string()]);
        let mut out = String::new();
        let t = tokio::task::block_in_place(|| {
            time_pairs(
                runs,
                || out = ours("grep_search", json!({"query": query})),
                rg_version.is_some().then_some(|| {
                    run_rg(&rg_args);
                }),
            )
        });
        let (lines, files) = parse_grep_summary(&out);
        let rg_res = rg_version.as_ref().map(|_| {
            // Matching lines and files (-C output would mix in context lines).
            let mut a: Vec<String> = ["-i", "-m", "100", "--count", "--max-filesize", "20M"]
                .map(String::from)
                .to_vec();
            rg_common(&mut a);
            a.extend(["-e".to_string(), query.to_string(), ".".to_string()]);
            let text = run_rg(&a);
            let lines: usize = text
                .lines()
                .filter_map(|l| l.rsplit(':').next()?.parse::<usize>().ok())
                .sum();
            format!("{lines} lines in {} files", text.lines().count())
        });
        row(
            format!("{label} (`{query}`)"),
            t,
            format!("{lines} lines in {files} files"),
            rg_res,
        );
    }
    for (label, pattern) in [
        ("glob `*.rs` (most files match)", "*.rs"),
        ("glob `Cargo.toml` (a name)", "Cargo.toml"),
        ("glob `**/src/**/*.rs` (a path)", "**/src/**/*.rs"),
    ] {
        let mut rg_args: Vec<String> = ["--files", "--iglob", pattern].map(String::from).to_vec();
        rg_common(&mut rg_args);
        let mut out = String::new();
        let mut rg_out = String::new();
        let t = tokio::task::block_in_place(|| {
            time_pairs(
                runs,
                || out = ours("file_glob_search", json!({ "pattern": pattern })),
                rg_version.is_some().then_some(|| rg_out = run_rg(&rg_args)),
            )
        });
        row(
            label.into(),
            t,
            format!("{} files", parse_glob_total(&out)),
            rg_version
                .as_ref()
                .map(|_| format!("{} files", rg_out.lines().count())),
        );
    }
}

struct Timing {
    ours: Duration,
    rg: Option<Duration>,
    ratio: Option<f64>,
}

/// Times `ours` and `theirs` alternately, `n` pairs after one warm-up of each (which also fills
/// the page cache), so slow phases of a noisy machine hit both sides.
fn time_pairs(n: usize, mut ours: impl FnMut(), mut theirs: Option<impl FnMut()>) -> Timing {
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed()
    };
    ours();
    if let Some(f) = theirs.as_mut() {
        f();
    }
    let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let x = time(&mut ours);
        a.push(x);
        if let Some(f) = theirs.as_mut() {
            let y = time(f);
            b.push(y);
            r.push(x.as_secs_f64() / y.as_secs_f64());
        }
    }
    r.sort_by(f64::total_cmp);
    Timing {
        ours: pct(&mut a, 0.5),
        rg: (!b.is_empty()).then(|| pct(&mut b, 0.5)),
        ratio: r.get(r.len() / 2).copied(),
    }
}

fn parse_grep_summary(out: &str) -> (usize, usize) {
    if out.starts_with("No matches found") {
        return (0, 0);
    }
    let nums: Vec<usize> = out
        .lines()
        .rev()
        .find(|l| l.starts_with('['))
        .unwrap_or("")
        .split(|c: char| !c.is_ascii_digit() && c != ',')
        .filter_map(|w| w.replace(',', "").parse().ok())
        .collect();
    match nums.as_slice() {
        [lines, files] => (*lines, *files),
        [_shown, total, files, ..] => (*total, *files),
        _ => (0, 0),
    }
}

fn parse_glob_total(out: &str) -> usize {
    if let Some(l) = out.lines().find(|l| l.contains(" in all)")) {
        let i = l.find(", ").map_or(0, |i| i + 2);
        return l[i..]
            .split_whitespace()
            .next()
            .unwrap_or("0")
            .replace(',', "")
            .parse()
            .unwrap_or(0);
    }
    if out.starts_with("No files match") {
        return 0;
    }
    out.lines().filter(|l| !l.starts_with('[')).count()
}

async fn memory(o: &Opts, dir: &Path, ws: &Path) {
    println!("\n## 5. Memory\n");
    let streams = if o.quick { 20 } else { 1000 };
    let mock = spawn_mock(dir, "memory", json!({"record": false, "repeat_last": true, "rounds": [{"text": "held open", "hold_after": 2}]})).await;
    let tp = spawn_toolpilot(dir, &mock.url, ws, &[]).await;
    let c = client();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_before = rss_kb(tp.pid);
    let quick = json!({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}], "stream": true});
    let mut handles = Vec::new();
    for _ in 0..streams {
        let (c, url, body) = (c.clone(), tp.url.clone(), quick.clone());
        handles.push(tokio::spawn(async move {
            let mut r = c
                .post(format!("{url}/chat/completions"))
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            while let Ok(Some(_)) = r.chunk().await {}
        }));
    }
    // Wait until every stream is open at the upstream.
    let stats = format!("{}/../_mock/stats", mock.url);
    let stats = stats.replace("/v1/../", "/");
    let t = Instant::now();
    loop {
        let s: Value =
            serde_json::from_slice(&c.get(&stats).send().await.unwrap().bytes().await.unwrap())
                .unwrap();
        if s["open"].as_u64().unwrap_or(0) >= streams as u64
            || t.elapsed() > Duration::from_secs(60)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded = rss_kb(tp.pid);
    let release = stats.replace("/_mock/stats", "/_mock/release");
    c.post(&release).send().await.unwrap();
    for h in handles {
        let _ = h.await;
    }
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| resident size idle (after start) | **{:.1} MB** |",
        idle_before as f64 / 1024.0
    );
    println!(
        "| resident size with {streams} open streams | {:.1} MB |",
        loaded as f64 / 1024.0
    );
    println!(
        "| per open stream | **{:.1} KB** |",
        (loaded.saturating_sub(idle_before)) as f64 / streams as f64
    );
    println!(
        "| mock upstream (separate process) | {:.1} MB |",
        rss_kb(mock.pid) as f64 / 1024.0
    );
}

fn snapshots(tree: &Path, dir: &Path) {
    println!("\n## 6. Workspace snapshots (checkpoints of commands)\n");
    let shadow = toolpilot::checkpoint::tree::Shadow::new(
        &dir.join("snap"),
        tree,
        std::time::Duration::from_secs(3600),
    );
    let t = Instant::now();
    let a = shadow.snapshot().unwrap();
    let first = t.elapsed();
    let t = Instant::now();
    let b = shadow.snapshot().unwrap();
    let unchanged = t.elapsed();
    assert_eq!(a, b);
    println!("| snapshot | time |");
    println!("|---|---|");
    println!("| first (hashes every file) | {} ms |", ms(first));
    println!(
        "| next, nothing changed (what a command pays) | **{} ms** |",
        ms(unchanged)
    );
    println!("\nTree: {} ({} files).", tree.display(), count_files(tree));
}

fn main() {
    let mut o = Opts {
        quick: false,
        tree: None,
        only: None,
        peers: peers::PeerPaths {
            litellm: None,
            portkey: None,
            python: None,
        },
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--tree" => o.tree = args.next().map(PathBuf::from),
            "--only" => o.only = args.next(),
            "--litellm" => o.peers.litellm = args.next().map(PathBuf::from),
            "--portkey" => o.peers.portkey = args.next().map(PathBuf::from),
            "--python" => o.peers.python = args.next().map(PathBuf::from),
            other => {
                eprintln!(
                    "usage: loadbench [--quick] [--tree DIR] [--only latency|throughput|loop|search|memory|snapshot|peers] [--litellm BIN] [--portkey START-SERVER.JS] [--python PYTHON-WITH-UVICORN] (unknown {other})"
                );
                std::process::exit(2);
            }
        }
    }
    // Many sockets at once.
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ws = std::env::current_dir().unwrap();
    let tree = o.tree.clone().unwrap_or_else(|| ws.clone());
    let tree = std::fs::canonicalize(&tree).unwrap_or_else(|e| {
        eprintln!("loadbench: the tree {} cannot be used: {e}", tree.display());
        std::process::exit(2);
    });
    let want = |n: &str| o.only.as_deref().is_none_or(|x| x == n);
    println!(
        "# toolpilot load harness ({})",
        if o.quick {
            "quick mode: tiny counts, numbers are not meaningful"
        } else {
            "full run"
        }
    );
    println!(
        "\nMachine: {} cores, {}.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("model name"))
            .unwrap_or("")
            .replace("model name\t: ", "")
    );
    rt.block_on(async {
        if want("latency") {
            latency(&o, dir.path(), &ws).await;
        }
        if want("throughput") {
            throughput(&o, dir.path(), &ws).await;
        }
        if want("loop") {
            tool_loop(&o, dir.path(), &ws).await;
        }
        if want("search") {
            search(&o, dir.path(), &tree).await;
        }
        if want("memory") {
            memory(&o, dir.path(), &ws).await;
        }
        // Only when asked for: the peers are installed by `bench/peers`, outside the repository.
        if o.only.as_deref() == Some("peers") {
            peers::peers(&o, dir.path(), &ws, &o.peers).await;
        }
    });
    if want("snapshot") {
        snapshots(&tree, dir.path());
    }
}
