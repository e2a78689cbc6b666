//! What every run did: structured events, kept in memory for the recent runs, appended to
//! `runs.jsonl` in the workspace's state folder, and counted for `/metrics`.
//!
//! Events are JSON objects `{"run": ID, "t": unix_ms, "type": …, …}`: `request`, `round`
//! (each upstream round: duration, usage, finish reason, tool calls), `tool` (each call:
//! status, arguments preview, result size, duration), `approval` (waits and answers), and a
//! final `done` or `failed`. A writer task appends them to the file off the request path; the
//! file is rotated to `runs.1.jsonl` past 64 MiB. `toolpilot runs` reads the file.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// Runs kept in memory (with their events) for the API.
const RECENT_RUNS: usize = 200;
/// Events kept in memory per run (the file has them all).
const EVENTS_PER_RUN: usize = 2_000;
const ROTATE_BYTES: u64 = 64 << 20;
/// No event is this long (tool results in events are cut far shorter); a longer line in
/// `runs.jsonl` is skipped when it is read back.
const MAX_EVENT_LINE: usize = 8 << 20;
const WRITE_EVERY: Duration = Duration::from_millis(100);

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One run's summary, as `GET /v1/runs` lists it.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Summary {
    pub id: String,
    /// "running", "done", "failed" or "cancelled".
    pub status: String,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub model: String,
    /// The last user message, shortened.
    pub prompt: String,
    pub rounds: u32,
    pub tool_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub error: Option<String>,
}

struct Live {
    summary: Summary,
    /// Each event serialised once: kept here, written to the file, sent to followers.
    events: Vec<Bytes>,
    /// Live followers (`GET /v1/runs/{id}/events`); created by the first one.
    tx: Option<broadcast::Sender<Bytes>>,
}

/// Prometheus counters and histograms.
#[derive(Default)]
struct Metrics {
    requests: AtomicU64,
    requests_stream: AtomicU64,
    runs: Mutex<BTreeMap<&'static str, u64>>,
    rounds: AtomicU64,
    upstream_errors: Mutex<BTreeMap<String, u64>>,
    tools: Mutex<BTreeMap<(String, &'static str), u64>>,
    run_seconds: Histogram,
    round_seconds: Histogram,
    tool_seconds: Histogram,
}

const BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0,
];

#[derive(Default)]
struct Histogram {
    counts: [AtomicU64; 12],
    count: AtomicU64,
    /// Sum in microseconds.
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        use std::fmt::Write as _;
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{b}\"}} {}",
                self.counts[i].load(Ordering::Relaxed)
            );
        }
        let n = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count {n}");
    }
}

/// The runs of one server.
pub struct Runs {
    recent: Mutex<(HashMap<String, Live>, VecDeque<String>)>,
    /// Events waiting for the writer thread, which takes them every [`WRITE_EVERY`] (no
    /// wake-up per event: that would cost a context switch each).
    unwritten: Option<Arc<Mutex<Vec<Bytes>>>>,
    file: PathBuf,
    metrics: Metrics,
}

impl Runs {
    /// `state_dir` is the workspace's folder in the state directory. With `persist`, a thread
    /// appends the events to the file.
    pub fn new(state_dir: &Path, persist: bool) -> Runs {
        let file = state_dir.join("runs.jsonl");
        let unwritten = persist.then(|| {
            let buf = Arc::new(Mutex::new(Vec::new()));
            let (path, shared) = (file.clone(), Arc::clone(&buf));
            let spawned = std::thread::Builder::new()
                .name("toolpilot-runs".into())
                .spawn(move || write_loop(&path, &shared));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the run recorder; runs are not saved");
            }
            buf
        });
        Runs {
            recent: Mutex::default(),
            unwritten,
            file,
            metrics: Metrics::default(),
        }
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Writes the events not yet written (at shutdown), in one append.
    pub fn flush(&self) {
        let Some(batch) = self
            .unwritten
            .as_ref()
            .and_then(|u| u.lock().ok().map(|mut b| std::mem::take(&mut *b)))
        else {
            return;
        };
        if batch.is_empty() {
            return;
        }
        let mut all = Vec::new();
        for ev in batch {
            all.extend_from_slice(&ev);
            all.push(b'\n');
        }
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.file)
            .and_then(|mut f| f.write_all(&all));
        if let Err(e) = written {
            tracing::warn!(error = %e, "cannot write the last run events");
        }
    }

    /// A new run.
    pub fn begin(&self, id: &str, model: &str, prompt: &str, stream: bool, messages: usize) {
        self.metrics.requests.fetch_add(1, Ordering::Relaxed);
        if stream {
            self.metrics.requests_stream.fetch_add(1, Ordering::Relaxed);
        }
        let prompt: String = prompt.chars().take(200).collect();
        if let Ok(mut r) = self.recent.lock() {
            let (map, order) = &mut *r;
            map.insert(
                id.to_string(),
                Live {
                    summary: Summary {
                        id: id.to_string(),
                        status: "running".into(),
                        started_ms: unix_ms(),
                        model: model.to_string(),
                        prompt: prompt.clone(),
                        ..Summary::default()
                    },
                    events: Vec::new(),
                    tx: None,
                },
            );
            order.push_back(id.to_string());
            while order.len() > RECENT_RUNS {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
        self.event(
            id,
            "request",
            json!({"model": model, "stream": stream, "messages": messages, "prompt": prompt}),
        );
    }

    /// Records one event of a run (`fields` is an object).
    pub fn event(&self, id: &str, kind: &str, fields: Value) {
        let mut ev = json!({"run": id, "t": unix_ms(), "type": kind});
        if let (Some(o), Value::Object(f)) = (ev.as_object_mut(), fields) {
            o.extend(f);
        }
        let bytes = Bytes::from(serde_json::to_vec(&ev).unwrap_or_default());
        if let Ok(mut r) = self.recent.lock()
            && let Some(live) = r.0.get_mut(id)
        {
            apply(&mut live.summary, &ev);
            if live.events.len() < EVENTS_PER_RUN {
                live.events.push(bytes.clone());
            }
            if let Some(tx) = &live.tx {
                let _ = tx.send(bytes.clone());
            }
        }
        if let Some(w) = &self.unwritten
            && let Ok(mut w) = w.lock()
        {
            w.push(bytes);
        }
    }

    pub fn round(&self, id: &str, fields: Value, took: Duration) {
        self.metrics.rounds.fetch_add(1, Ordering::Relaxed);
        self.metrics.round_seconds.observe(took);
        self.event(id, "round", fields);
    }

    pub fn upstream_error(&self, id: &str, kind: &str, message: &str) {
        if let Ok(mut m) = self.metrics.upstream_errors.lock() {
            *m.entry(kind.to_string()).or_default() += 1;
        }
        self.event(
            id,
            "upstream_error",
            json!({"kind": kind, "message": message}),
        );
    }

    pub fn tool(&self, id: &str, tool: &str, status: &'static str, took: Duration, fields: Value) {
        if let Ok(mut m) = self.metrics.tools.lock() {
            *m.entry((tool.to_string(), status)).or_default() += 1;
        }
        self.metrics.tool_seconds.observe(took);
        self.event(id, "tool", fields);
    }

    /// The run ended ("done", "failed" or "cancelled").
    pub fn end(&self, id: &str, outcome: &'static str, took: Duration, fields: Value) {
        let ended = self
            .recent
            .lock()
            .ok()
            .and_then(|r| r.0.get(id).map(|l| l.summary.status != "running"));
        if ended == Some(true) {
            return;
        }
        if let Ok(mut m) = self.metrics.runs.lock() {
            *m.entry(outcome).or_default() += 1;
        }
        self.metrics.run_seconds.observe(took);
        self.event(id, outcome, fields);
    }

    /// Recent runs, newest first.
    pub fn list(&self) -> Vec<Summary> {
        let Ok(r) = self.recent.lock() else {
            return Vec::new();
        };
        r.1.iter()
            .rev()
            .filter_map(|id| r.0.get(id).map(|l| l.summary.clone()))
            .collect()
    }

    /// A run as JSON (`{"run": summary, "events": [...]}`), from memory, else from the file.
    pub fn get_json(&self, id: &str) -> Option<String> {
        let (summary, events) = match self.recent.lock() {
            Ok(r) if r.0.contains_key(id) => {
                let l = &r.0[id];
                (l.summary.clone(), l.events.clone())
            }
            _ => {
                let (s, evs) = read_file_runs(&self.file, Some(id)).remove(id)?;
                let evs = evs
                    .iter()
                    .map(|e| Bytes::from(serde_json::to_vec(e).unwrap_or_default()))
                    .collect();
                (s, evs)
            }
        };
        let mut out = format!(
            "{{\"run\":{},\"events\":[",
            serde_json::to_string(&summary).ok()?
        );
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(std::str::from_utf8(e).ok()?);
        }
        out.push_str("]}");
        Some(out)
    }

    /// The events so far and a receiver for the ones to come (`None` when the run is not in
    /// memory).
    pub fn follow(&self, id: &str) -> Option<(Vec<Bytes>, broadcast::Receiver<Bytes>)> {
        let mut r = self.recent.lock().ok()?;
        let l = r.0.get_mut(id)?;
        let rx = match &l.tx {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = broadcast::channel(256);
                l.tx = Some(tx);
                rx
            }
        };
        Some((l.events.clone(), rx))
    }

    /// `/metrics` in the Prometheus text format.
    pub fn prometheus(&self, pending_approvals: usize) -> String {
        use std::fmt::Write as _;
        let m = &self.metrics;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP toolpilot_requests_total Chat requests received.\n# TYPE toolpilot_requests_total counter\ntoolpilot_requests_total{{stream=\"true\"}} {}\ntoolpilot_requests_total{{stream=\"false\"}} {}",
            m.requests_stream.load(Ordering::Relaxed),
            m.requests.load(Ordering::Relaxed) - m.requests_stream.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP toolpilot_runs_total Runs by how they ended.\n# TYPE toolpilot_runs_total counter"
        );
        if let Ok(runs) = m.runs.lock() {
            for (k, v) in runs.iter() {
                let _ = writeln!(out, "toolpilot_runs_total{{outcome=\"{k}\"}} {v}");
            }
        }
        let _ = writeln!(
            out,
            "# HELP toolpilot_upstream_rounds_total Upstream rounds completed.\n# TYPE toolpilot_upstream_rounds_total counter\ntoolpilot_upstream_rounds_total {}",
            m.rounds.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP toolpilot_upstream_errors_total Upstream rounds that failed, by kind.\n# TYPE toolpilot_upstream_errors_total counter"
        );
        if let Ok(errs) = m.upstream_errors.lock() {
            for (k, v) in errs.iter() {
                let _ = writeln!(
                    out,
                    "toolpilot_upstream_errors_total{{kind=\"{}\"}} {v}",
                    label(k)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP toolpilot_tool_calls_total Tool calls run by the server, by tool and outcome.\n# TYPE toolpilot_tool_calls_total counter"
        );
        if let Ok(tools) = m.tools.lock() {
            for ((t, s), v) in tools.iter() {
                let _ = writeln!(
                    out,
                    "toolpilot_tool_calls_total{{tool=\"{}\",status=\"{s}\"}} {v}",
                    label(t)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP toolpilot_pending_approvals Tool calls waiting for approval now.\n# TYPE toolpilot_pending_approvals gauge\ntoolpilot_pending_approvals {pending_approvals}"
        );
        m.run_seconds.render(
            &mut out,
            "toolpilot_run_duration_seconds",
            "Duration of whole runs.",
        );
        m.round_seconds.render(
            &mut out,
            "toolpilot_upstream_round_duration_seconds",
            "Duration of upstream rounds.",
        );
        m.tool_seconds.render(
            &mut out,
            "toolpilot_tool_duration_seconds",
            "Duration of tool calls.",
        );
        out
    }
}

fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Folds an event into the run's summary.
fn apply(s: &mut Summary, ev: &Value) {
    match ev["type"].as_str() {
        Some("round") => {
            s.rounds += 1;
            s.prompt_tokens += ev["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
            s.completion_tokens += ev["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        }
        Some("tool") => s.tool_calls += 1,
        Some(end @ ("done" | "failed" | "cancelled")) => {
            s.status = end.to_string();
            s.ended_ms = ev["t"].as_u64();
            if end == "failed" {
                s.error = ev["message"].as_str().map(str::to_string);
            }
        }
        Some("request") => {
            s.started_ms = ev["t"].as_u64().unwrap_or(s.started_ms);
            if let Some(m) = ev["model"].as_str() {
                s.model = m.to_string();
            }
            if let Some(p) = ev["prompt"].as_str() {
                s.prompt = p.to_string();
            }
        }
        _ => {}
    }
}

fn write_loop(path: &Path, unwritten: &Arc<Mutex<Vec<Bytes>>>) {
    let open = |p: &Path| {
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
    };
    let mut file = None;
    loop {
        std::thread::sleep(WRITE_EVERY);
        // The server is gone once nobody else holds the buffer: write what is left, stop.
        let last = Arc::strong_count(unwritten) == 1;
        let batch = match unwritten.lock() {
            Ok(mut b) => std::mem::take(&mut *b),
            Err(_) => return,
        };
        if !batch.is_empty() {
            if file.is_none() {
                match open(path) {
                    Ok(f) => file = Some(std::io::BufWriter::with_capacity(256 << 10, f)),
                    Err(e) => {
                        tracing::warn!(error = %e, path = %path.display(), "cannot record runs");
                        return;
                    }
                }
            }
            if let Some(f) = file.as_mut() {
                for ev in &batch {
                    let _ = f.write_all(ev);
                    let _ = f.write_all(b"\n");
                }
                let _ = f.flush();
                if f.get_ref().metadata().is_ok_and(|m| m.len() > ROTATE_BYTES) {
                    let _ = std::fs::rename(path, path.with_extension("1.jsonl"));
                    file = None;
                }
            }
        }
        if last {
            return;
        }
    }
}

/// Runs recorded in the file (and its rotated predecessor), by id: summary and events.
pub fn read_file_runs(path: &Path, only: Option<&str>) -> HashMap<String, (Summary, Vec<Value>)> {
    let mut runs: HashMap<String, (Summary, Vec<Value>)> = HashMap::new();
    for p in [path.with_extension("1.jsonl"), path.to_path_buf()] {
        let Ok(f) = crate::bounded::open_regular(&p, crate::bounded::Links::Refuse) else {
            continue;
        };
        // The file is rotated past ROTATE_BYTES, so more than twice that is not ours to read;
        // a line longer than any event is skipped, never held.
        let mut reader = std::io::BufReader::new(f.take(2 * ROTATE_BYTES));
        let mut buf = Vec::new();
        let rest = crate::bounded::Rest::Skip;
        while let Ok(read) = crate::bounded::read_line(&mut reader, &mut buf, MAX_EVENT_LINE, rest)
        {
            if read.len == 0 {
                break;
            }
            if read.cut {
                continue;
            }
            let Ok(line) = std::str::from_utf8(&buf) else {
                continue;
            };
            if let Some(id) = only
                && !line.contains(id)
            {
                continue;
            }
            let Ok(ev) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let Some(id) = ev["run"].as_str().map(str::to_string) else {
                continue;
            };
            if only.is_some_and(|o| o != id) {
                continue;
            }
            let entry = runs.entry(id.clone()).or_insert_with(|| {
                (
                    Summary {
                        id,
                        // Until its end is read: a run the server did not finish (stopped).
                        status: "unfinished".into(),
                        ..Summary::default()
                    },
                    Vec::new(),
                )
            });
            apply(&mut entry.0, &ev);
            entry.1.push(ev);
        }
    }
    runs
}

/// Whether a serialised event ends its run.
pub fn is_end(ev: &[u8]) -> bool {
    serde_json::from_slice::<Value>(ev)
        .is_ok_and(|v| matches!(v["type"].as_str(), Some("done" | "failed" | "cancelled")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_back_skips_a_line_longer_than_any_event() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("runs.jsonl");
        let good = |run: &str| format!("{{\"run\":\"{run}\",\"type\":\"request\",\"t\":1}}\n");
        let text = format!(
            "{}{{\"run\":\"r2\",\"pad\":\"{}\"}}\n{}",
            good("r1"),
            "x".repeat(MAX_EVENT_LINE + 1),
            good("r3")
        );
        std::fs::write(&path, text).unwrap();
        let mut ids: Vec<String> = read_file_runs(&path, None).into_keys().collect();
        ids.sort();
        assert_eq!(ids, ["r1", "r3"]);
    }
}
