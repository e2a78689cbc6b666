//! Section 7: toolpilot beside the proxies people put in front of a model, LiteLLM's proxy and
//! Portkey's gateway, and beside the bare forwarder (the floor of any proxy here), against the
//! same upstream in one run: first the in-repo mock, then, with `--python`, a Python upstream on
//! vLLM's server stack that sends the same bytes (`bench/pymock.py`). `bench/peers` installs
//! the peers and that Python at pinned versions outside the repository and passes their paths.
//!
//! Every target answers the same 3.2 KB agent-style request. Latency is measured sequentially
//! and interleaved (each round asks every target once, in a rotating order), so a slow moment of
//! the machine hits all of them; a target's added latency is the median of its paired
//! differences with the mock in the same round. Throughput is 64 keep-alive clients for a
//! fixed time per target, one target at a time.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::wire;
use crate::{
    Opts, agent_body, client, ms, pct, spawn_bare, spawn_bare_with, spawn_mock, spawn_toolpilot,
};

/// Where the peers' programs are (`--litellm`, `--portkey`).
pub struct PeerPaths {
    pub litellm: Option<PathBuf>,
    pub portkey: Option<PathBuf>,
    /// A Python with uvicorn, uvloop and httptools, for the Python upstream (`bench/pymock.py`).
    pub python: Option<PathBuf>,
}

/// One thing requests are sent to.
pub struct Target {
    pub name: String,
    /// The base URL, ending in `/v1`.
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// LiteLLM or Portkey: a proxy toolpilot is compared with.
    pub peer: bool,
    pub _child: Option<Child>,
}

impl Target {
    /// A server the harness started itself and reaches without extra headers.
    pub fn plain(name: &str, url: &str) -> Target {
        Target {
            name: name.into(),
            url: url.into(),
            headers: Vec::new(),
            peer: false,
            _child: None,
        }
    }
}

/// The proxy's master key for the run (it listens on loopback only, for this run only).
const LITELLM_KEY: &str = "sk-7d1c4e9a2b8f6053c1e7a9d4b2f80c6e5a3d1b9f7c2e4a6d8b0f1c3e5a7d9b2f";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until `target` answers a chat completion (LiteLLM takes seconds to import itself);
/// the last failure when it never does.
async fn wait_ready(c: &reqwest::Client, t: &Target, body: &Value) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = String::new();
    while Instant::now() < deadline {
        let mut req = c
            .post(format!("{}/chat/completions", t.url))
            .body(body.to_string())
            .header("content-type", "application/json");
        for (k, v) in &t.headers {
            req = req.header(k, v);
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => return Ok(()),
            // Started and answering, but refusing the request: waiting will not change that.
            Ok(r) => {
                return Err(format!(
                    "HTTP {}: {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                ));
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("no answer within 120 s: {last}"))
}

fn version_of(bin: &Path, fallback: &str) -> String {
    // `bench/peers` installs into folders named `NAME-VERSION`.
    bin.ancestors()
        .filter_map(|p| p.file_name()?.to_str())
        .find_map(|n| {
            let (_, v) = n.split_once('-')?;
            v.starts_with(|c: char| c.is_ascii_digit())
                .then(|| v.to_string())
        })
        .unwrap_or_else(|| fallback.to_string())
}

async fn spawn_litellm(dir: &Path, bin: &Path, mock: &str) -> Target {
    let port = free_port();
    let cfg = dir.join("litellm.yaml");
    std::fs::write(
        &cfg,
        format!(
            "model_list:\n  - model_name: mock-model\n    litellm_params:\n      model: openai/mock-model\n      api_base: {mock}\n      api_key: sk-bench\n"
        ),
    )
    .unwrap();
    let child = Command::new(bin)
        .arg("--config")
        .arg(&cfg)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--num_workers", "1", "--telemetry", "False"])
        // LiteLLM refuses to start without a master key (or with a weak one).
        .env("LITELLM_MASTER_KEY", LITELLM_KEY)
        .env("LITELLM_LOG", "ERROR")
        .env("LITELLM_TELEMETRY", "False")
        .env("NO_PROXY", "*")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    Target {
        name: format!("LiteLLM {}", version_of(bin, "?")),
        url: format!("http://127.0.0.1:{port}/v1"),
        headers: vec![("authorization".into(), format!("Bearer {LITELLM_KEY}"))],
        peer: true,
        _child: Some(child),
    }
}

async fn spawn_portkey(script: &Path, mock: &str) -> Target {
    let port = free_port();
    let child = Command::new("node")
        .arg(script)
        .arg(format!("--port={port}"))
        .arg("--headless")
        .env("NODE_ENV", "production")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start node {}: {e}", script.display()));
    Target {
        name: format!("Portkey {}", version_of(script, "?")),
        url: format!("http://127.0.0.1:{port}/v1"),
        headers: vec![
            ("authorization".into(), "Bearer sk-bench".into()),
            ("x-portkey-provider".into(), "openai".into()),
            ("x-portkey-custom-host".into(), mock.to_string()),
        ],
        peer: true,
        _child: Some(child),
    }
}

/// One request; (total time, time to the first byte of text).
async fn timed(c: &reqwest::Client, t: &Target, body: &str, stream: bool) -> (Duration, Duration) {
    let start = Instant::now();
    let mut req = c
        .post(format!("{}/chat/completions", t.url))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (k, v) in &t.headers {
        req = req.header(k, v);
    }
    let mut resp = req.send().await.unwrap();
    assert!(
        resp.status().is_success(),
        "{}: HTTP {}",
        t.name,
        resp.status()
    );
    let mut first = None;
    while let Some(chunk) = resp.chunk().await.unwrap() {
        let has_text = chunk
            .windows(12)
            .any(|w| &w[..11] == b"\"content\":\"" && w[11] != b'"');
        if first.is_none() && (has_text || !stream) {
            first = Some(start.elapsed());
        }
    }
    (start.elapsed(), first.unwrap_or_else(|| start.elapsed()))
}

struct Lat {
    median: Duration,
    added: Option<f64>,
}

/// Interleaved sequential latency of every target; index 0 is the mock.
async fn latency(c: &reqwest::Client, targets: &[&Target], body: &Value, n: usize) -> Vec<Lat> {
    let stream = body["stream"].as_bool().unwrap_or(false);
    let text = body.to_string();
    for _ in 0..(n / 10).max(5) {
        for t in targets {
            timed(c, t, &text, stream).await;
        }
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); targets.len()];
    let mut diffs: Vec<Vec<f64>> = vec![Vec::with_capacity(n); targets.len()];
    for i in 0..n {
        let mut round = vec![Duration::ZERO; targets.len()];
        for k in 0..targets.len() {
            let j = (i + k) % targets.len();
            let (total, first) = timed(c, targets[j], &text, stream).await;
            round[j] = if stream { first } else { total };
        }
        for (j, x) in round.iter().enumerate() {
            samples[j].push(*x);
            diffs[j].push(x.as_secs_f64() - round[0].as_secs_f64());
        }
    }
    samples
        .iter_mut()
        .zip(diffs.iter_mut())
        .enumerate()
        .map(|(j, (s, d))| {
            d.sort_by(f64::total_cmp);
            Lat {
                median: pct(s, 0.5),
                added: (j > 0).then(|| d[d.len() / 2]),
            }
        })
        .collect()
}

pub struct Load {
    /// Requests completed while the clock ran.
    pub served: usize,
    pub rps: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub errors: u64,
}

/// `clients` keep-alive connections sending `body` back to back for `secs` seconds (opened
/// and warmed up before the clock starts).
pub async fn load(t: &Target, body: &Value, clients: usize, secs: u64) -> Load {
    let stream = body["stream"].as_bool().unwrap_or(false);
    let addr = t
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let path = format!(
        "{}/chat/completions",
        t.url
            .trim_start_matches("http://")
            .trim_start_matches(&addr)
    );
    let req: Arc<[u8]> = wire::post(&addr, &path, &body.to_string(), &t.headers).into();
    let must: &'static [u8] = if stream { b"[DONE]" } else { b"Hello" };
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut conns = Vec::new();
    for _ in 0..clients {
        let mut conn = wire::Conn::new(&addr);
        if conn.exchange(&req, must).await.is_err() {
            errors.fetch_add(1, Ordering::Relaxed);
        }
        conns.push(conn);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for mut conn in conns {
        let (req, stop, errors) = (Arc::clone(&req), Arc::clone(&stop), Arc::clone(&errors));
        let name = t.name.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                match conn.exchange(&req, must).await {
                    Ok(()) => lat.push(t.elapsed()),
                    Err(e) => {
                        if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("{name}: {e}");
                        }
                        // A peer that refuses at once must not turn this into a busy loop.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            lat
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed().as_secs_f64();
    Load {
        served: all.len(),
        rps: all.len() as f64 / elapsed,
        p50: pct(&mut all, 0.5),
        p99: pct(&mut all, 0.99),
        errors: errors.load(Ordering::Relaxed),
    }
}

/// Starts `bench/pymock.py` on `python`, answering with the bytes `mock` gives for the agent
/// body, streamed and not.
async fn spawn_pymock(dir: &Path, python: &Path, mock: &str) -> Target {
    let c = client();
    for (stream, file) in [(false, "pymock-whole.json"), (true, "pymock-stream.sse")] {
        let body = c
            .post(format!("{mock}/chat/completions"))
            .header("content-type", "application/json")
            .body(agent_body(stream).to_string())
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        std::fs::write(dir.join(file), &body).unwrap();
    }
    let port = free_port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/pymock.py");
    let child = Command::new(python)
        .arg(&script)
        .arg(port.to_string())
        .arg(dir.join("pymock-whole.json"))
        .arg(dir.join("pymock-stream.sse"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
    let t = Target {
        name: "the Python upstream directly".into(),
        url: format!("http://127.0.0.1:{port}/v1"),
        headers: Vec::new(),
        peer: false,
        _child: Some(child),
    };
    if let Err(e) = wait_ready(&c, &t, &agent_body(false)).await {
        panic!("the Python upstream did not answer: {e}");
    }
    t
}

/// The `tools` array toolpilot sends upstream with the agent body, as a recording mock saw it,
/// written to a file for the bare forwarder to add.
struct CapturedTools {
    path: PathBuf,
    count: usize,
    bytes: usize,
}

async fn captured_tools(dir: &Path, ws: &Path) -> CapturedTools {
    let mock = spawn_mock(
        dir,
        "capture",
        json!({"record": true, "repeat_last": true, "rounds": [{"text": "Hello"}]}),
    )
    .await;
    let tp = spawn_toolpilot(dir, &mock.url, ws, &[]).await;
    let c = client();
    let sent = c
        .post(format!("{}/chat/completions", tp.url))
        .header("content-type", "application/json")
        .body(agent_body(false).to_string())
        .send()
        .await
        .unwrap();
    assert!(sent.status().is_success(), "HTTP {}", sent.status());
    let base = mock.url.trim_end_matches('/').trim_end_matches("/v1");
    let log: Value = c
        .get(format!("{base}/_mock/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tools = &log
        .as_array()
        .and_then(|l| l.last())
        .expect("a recorded request")["body"]["tools"];
    let count = tools
        .as_array()
        .unwrap_or_else(|| panic!("toolpilot sent no tools upstream: {log}"))
        .len();
    let text = serde_json::to_vec(tools).unwrap();
    let path = dir.join("toolpilot-tools.json");
    std::fs::write(&path, &text).unwrap();
    CapturedTools {
        path,
        count,
        bytes: text.len(),
    }
}

pub async fn peers(o: &Opts, dir: &Path, ws: &Path, paths: &PeerPaths) {
    println!("\n## 7. Beside LiteLLM and Portkey (one run, the same upstream)\n");
    let mock = spawn_mock(
        dir,
        "peers",
        json!({"record": false, "repeat_last": true, "rounds": [{"text": "Hello there, streaming world"}]}),
    )
    .await;
    let captured = captured_tools(dir, ws).await;
    println!(
        "toolpilot adds its tools to the request it sends upstream ({} of them, {:.1} KB); \
         \"bare + tools\" is the bare forwarder adding the same bytes, so that the upstream's \
         cost of reading them is on both sides and \"toolpilot − (bare + tools)\" is toolpilot's \
         own work.\n",
        captured.count,
        captured.bytes as f64 / 1024.0
    );
    let tools = &captured.path;
    println!("### In front of the in-repo mock (Rust, answers from memory)\n");
    let direct = Target::plain("the mock directly", &mock.url);
    against(o, dir, ws, paths, direct, tools).await;
    if let Some(python) = &paths.python {
        println!(
            "### In front of a Python upstream (uvicorn with uvloop and httptools, the server stack of vLLM's OpenAI server; `bench/pymock.py`, the same answer bytes)\n"
        );
        let py = spawn_pymock(dir, python, &mock.url).await;
        against(o, dir, ws, paths, py, tools).await;
    }
}

/// Every proxy in front of `upstream`, measured in one run against it.
async fn against(
    o: &Opts,
    dir: &Path,
    ws: &Path,
    paths: &PeerPaths,
    upstream: Target,
    tools: &Path,
) {
    let up = upstream.url.clone();
    let tp = spawn_toolpilot(dir, &up, ws, &[]).await;
    let bare = spawn_bare(&up).await;
    let bare_tools = spawn_bare_with(&up, Some(tools)).await;
    // The order the summary lines below rely on: the upstream, toolpilot, the two forwarders,
    // then the peers.
    const TOOLPILOT: usize = 1;
    const BARE_TOOLS: usize = 3;
    let mut targets = vec![
        upstream,
        Target::plain("toolpilot", &tp.url),
        Target::plain("bare forwarder", &bare.url),
        Target::plain("bare + tools", &bare_tools.url),
    ];
    if let Some(bin) = &paths.litellm {
        targets.push(spawn_litellm(dir, bin, &up).await);
    }
    if let Some(script) = &paths.portkey {
        targets.push(spawn_portkey(script, &up).await);
    }
    let c = client();
    let nonstream = agent_body(false);
    let stream = agent_body(true);
    // A peer that refuses a mode is reported with its error, not measured in that mode.
    let mut refused: Vec<[Option<String>; 2]> = Vec::new();
    for t in &targets {
        let a = wait_ready(&c, t, &nonstream).await.err();
        let b = wait_ready(&c, t, &stream).await.err();
        for (mode, e) in [("non-stream", &a), ("stream", &b)] {
            if let Some(e) = e {
                eprintln!("{} refuses every {mode} request: {e}", t.name);
            }
        }
        refused.push([a, b]);
    }
    println!(
        "Request: the {:.1} KB agent body of section 1, to every target.\n",
        nonstream.to_string().len() as f64 / 1024.0
    );
    let n = if o.quick { 10 } else { 1000 };
    let secs = if o.quick { 1 } else { 10 };
    let clients = if o.quick { 4 } else { 64 };
    let mut lat = Vec::new();
    let mut loads = Vec::new();
    for (mode, body) in [(0, &nonstream), (1, &stream)] {
        let ok: Vec<usize> = (0..targets.len())
            .filter(|&j| refused[j][mode].is_none())
            .collect();
        let subset: Vec<&Target> = ok.iter().map(|&j| &targets[j]).collect();
        let measured = latency(&c, &subset, body, n).await;
        let mut row: Vec<Option<Lat>> = (0..targets.len()).map(|_| None).collect();
        for (j, l) in ok.iter().zip(measured) {
            row[*j] = Some(l);
        }
        lat.push(row);
        let mut row = Vec::new();
        for (j, t) in targets.iter().enumerate() {
            row.push(if refused[j][mode].is_none() {
                Some(load(t, body, clients, secs).await)
            } else {
                None
            });
        }
        loads.push(row);
    }
    let header: Vec<&str> = targets.iter().skip(1).map(|t| t.name.as_str()).collect();
    let refusal = |j: usize, mode: usize| -> String {
        let e = refused[j][mode].as_deref().unwrap_or("");
        let short: String = e.chars().take(60).collect();
        format!("fails: {short}")
    };
    let table = |title: &str, rows: &[(String, Vec<String>)]| {
        println!("{title}\n");
        println!("| | {} |", header.join(" | "));
        println!("|---|{}", "---|".repeat(header.len()));
        for (name, cells) in rows {
            println!("| {name} | {} |", cells.join(" | "));
        }
        println!();
    };
    let mock_lat = |mode: usize| {
        lat[mode][0]
            .as_ref()
            .map_or(f64::NAN, |l| l.median.as_secs_f64())
    };
    let added_ms = |mode: usize| -> Vec<String> {
        (1..targets.len())
            .map(|j| match &lat[mode][j] {
                Some(l) => format!("+{:.2} ms", l.added.unwrap_or(f64::NAN) * 1000.0),
                None => refusal(j, mode),
            })
            .collect()
    };
    let thr = |mode: usize| -> Vec<String> {
        (1..targets.len())
            .map(|j| match &loads[mode][j] {
                Some(x) => {
                    let err = if x.errors > 0 {
                        format!(", {} errors", x.errors)
                    } else {
                        String::new()
                    };
                    format!("{:.0} req/s, p99 {} ms{err}", x.rps, ms(x.p99))
                }
                None => refusal(j, mode),
            })
            .collect()
    };
    table(
        "Measured:",
        &[
            ("added latency, non-stream (median)".into(), added_ms(0)),
            ("added time to first token (median)".into(), added_ms(1)),
            (format!("{clients} clients, non-stream"), thr(0)),
            (format!("{clients} clients, stream"), thr(1)),
        ],
    );
    let rps = |mode: usize, j: usize| loads[mode][j].as_ref().map_or(f64::NAN, |x| x.rps);
    println!(
        "The upstream alone: non-stream {:.3} ms median, time to first token {:.3} ms; {clients} clients: {:.0} req/s non-stream, {:.0} req/s stream.\n",
        mock_lat(0) * 1000.0,
        mock_lat(1) * 1000.0,
        rps(0, 0),
        rps(1, 0),
    );
    let ratio_lat = |mode: usize| -> Vec<String> {
        (1..targets.len())
            .map(|j| match &lat[mode][j] {
                Some(l) => format!("{:.3}×", l.added.unwrap_or(f64::NAN) / mock_lat(mode)),
                None => "-".into(),
            })
            .collect()
    };
    let ratio_thr = |mode: usize| -> Vec<String> {
        (1..targets.len())
            .map(|j| match &loads[mode][j] {
                Some(x) => format!("{:.2}×", x.rps / rps(mode, 0)),
                None => "-".into(),
            })
            .collect()
    };
    table(
        "As ratios of the upstream in the same run (what survives a change of machine):",
        &[
            (
                "added latency, non-stream ÷ the upstream's own".into(),
                ratio_lat(0),
            ),
            (
                "added time to first token ÷ the upstream's own".into(),
                ratio_lat(1),
            ),
            (
                format!("{clients} clients, non-stream ÷ the upstream's"),
                ratio_thr(0),
            ),
            (
                format!("{clients} clients, stream ÷ the upstream's"),
                ratio_thr(1),
            ),
        ],
    );
    for j in (2..targets.len()).filter(|&j| targets[j].peer) {
        let lead = |mode: usize| match (&lat[mode][j], &lat[mode][1]) {
            (Some(p), Some(t)) => format!(
                "{:.0}×",
                p.added.unwrap_or(f64::NAN) / t.added.unwrap_or(f64::NAN).max(1e-6)
            ),
            _ => "-".into(),
        };
        let lead_thr = |mode: usize| match (&loads[mode][j], &loads[mode][1]) {
            (Some(p), Some(t)) => format!("{:.1}×", t.rps / p.rps.max(1e-9)),
            _ => "-".into(),
        };
        println!(
            "- toolpilot against {}: added latency {} smaller non-stream, {} on time to first token; throughput {} (non-stream), {} (stream)",
            targets[j].name,
            lead(0),
            lead(1),
            lead_thr(0),
            lead_thr(1),
        );
    }
    let beyond = |mode: usize| match (&lat[mode][TOOLPILOT], &lat[mode][BARE_TOOLS]) {
        (Some(t), Some(b)) => format!(
            "{:+.3} ms",
            (t.added.unwrap_or(f64::NAN) - b.added.unwrap_or(f64::NAN)) * 1000.0
        ),
        _ => "-".into(),
    };
    let share = |mode: usize| match (&loads[mode][TOOLPILOT], &loads[mode][BARE_TOOLS]) {
        (Some(t), Some(b)) => format!("{:.2}×", t.rps / b.rps.max(1e-9)),
        _ => "-".into(),
    };
    println!(
        "- toolpilot beyond the bare forwarder sending the same tools (difference of the added medians): {} non-stream, {} on time to first token; its throughput {} (non-stream) and {} (stream) of that forwarder's\n",
        beyond(0),
        beyond(1),
        share(0),
        share(1),
    );
}
