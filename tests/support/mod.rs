//! Test harness: a real toolpilot server on a loopback port, over a temporary workspace,
//! talking to the in-repo mock upstream.
//!
//! `TestServer::builder().file("src/a.rs", "…").script(json!({...})).start().await` gives a
//! running server; `chat(json!)` posts a request; `mock.requests()` shows what the upstream
//! received. Nothing here touches the network beyond 127.0.0.1.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpListener;
use toolpilot::agent::Engine;
use toolpilot::config::{CommonArgs, Config};
use toolpilot::mock::{MockUpstream, Recorded, Script};
use toolpilot::server::{self, AppState};

/// A change to the loaded configuration (see [`Builder::tweak`]).
type Tweak = dyn FnOnce(&mut Config) + Send;

pub struct Builder {
    files: Vec<(String, Vec<u8>)>,
    script: Option<Value>,
    config: String,
    env: Vec<(String, String)>,
    yes: bool,
    model: Option<String>,
    no_upstream: bool,
    reuse: Option<Arc<tempfile::TempDir>>,
    tweak: Option<Box<Tweak>>,
}

pub struct TestServer {
    pub addr: std::net::SocketAddr,
    /// The server's admin token; `client` sends it with every request.
    pub admin_token: String,
    pub mock: Option<MockUpstream>,
    pub ws: PathBuf,
    pub dir: Arc<tempfile::TempDir>,
    pub client: reqwest::Client,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestServer {
    pub fn builder() -> Builder {
        Builder {
            files: Vec::new(),
            script: None,
            config: String::new(),
            env: Vec::new(),
            yes: false,
            model: Some("mock-model".into()),
            no_upstream: false,
            reuse: None,
            tweak: None,
        }
    }
}

impl Builder {
    pub fn file(mut self, path: &str, contents: impl AsRef<[u8]>) -> Self {
        self.files
            .push((path.to_string(), contents.as_ref().to_vec()));
        self
    }

    /// The mock upstream's script (`{"rounds": [...]}`). `@WS@` and `@TOP@` in its strings
    /// become the workspace and its parent temporary directory.
    pub fn script(mut self, script: Value) -> Self {
        self.script = Some(script);
        self
    }

    /// Extra TOML configuration.
    pub fn config(mut self, toml: &str) -> Self {
        self.config.push_str(toml);
        self.config.push('\n');
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn yes(mut self) -> Self {
        self.yes = true;
        self
    }

    pub fn model(mut self, model: Option<&str>) -> Self {
        self.model = model.map(str::to_string);
        self
    }

    /// Start over the directory of an earlier server (same workspace path, same state
    /// directory), as a restart would.
    pub fn reuse_dir(mut self, dir: Arc<tempfile::TempDir>) -> Self {
        self.reuse = Some(dir);
        self
    }

    /// Changes the loaded configuration before the server starts (for settings no file can
    /// make, such as `terminal.max_landlock_abi`).
    pub fn tweak(mut self, f: impl FnOnce(&mut Config) + Send + 'static) -> Self {
        self.tweak = Some(Box::new(f));
        self
    }

    /// Use the built-in demo model.
    pub fn demo(mut self) -> Self {
        self.no_upstream = true;
        self
    }

    pub async fn start(self) -> TestServer {
        let dir = match self.reuse.clone() {
            Some(d) => d,
            None => Arc::new(tempfile::tempdir().unwrap()),
        };
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        for (path, contents) in &self.files {
            let p = ws.join(path);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).unwrap();
            }
            std::fs::write(&p, contents).unwrap();
        }
        let mock = if self.no_upstream {
            None
        } else {
            let script: Script = match &self.script {
                Some(s) => {
                    serde_json::from_value(placeholders(s.clone(), &ws, dir.path())).unwrap()
                }
                None => Script::default(),
            };
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            Some(MockUpstream::start(script, l).unwrap())
        };
        // Fast retries and timeouts keep fault tests quick; tests may override them.
        let mut toml = format!(
            "[upstream]\nretry_base_ms = 10\nretry_max_wait_secs = 2\nmax_retries = 2\n[tools]\nllm_apply = false\n[terminal]\nhelper = {:?}\n\n",
            env!("CARGO_BIN_EXE_toolpilot")
        );
        toml.push_str(&self.config);
        if !self.config.contains("[approvals]") {
            // Tests that are not about approvals get the immediate refusal rather than a wait
            // nobody answers; the approval tests configure their own section.
            toml.push_str("\n[approvals]\nmode = \"deny\"\n");
        }
        if !self.config.contains("[prompt]") {
            // Tests that are not about toolpilot's system message get none, so what they
            // assert about message positions holds; the prompt tests configure `[prompt]`.
            toml.push_str("\n[prompt]\nsystem_message = false\n");
        }
        let cfg_path = dir.path().join("toolpilot.toml");
        std::fs::write(&cfg_path, merge_upstream_section(&toml)).unwrap();
        let args = CommonArgs {
            workspace: Some(ws.clone()),
            config: Some(cfg_path),
            upstream: mock.as_ref().map(|m| m.base_url()),
            model: self.model.clone(),
            yes: self.yes,
            state_dir: Some(dir.path().join("state")),
        };
        let mut config = Config::load_from(&args, &self.env).unwrap();
        if let Some(f) = self.tweak {
            f(&mut config);
        }
        let admin_token = config.server.admin_token.value().to_string();
        let engine = Arc::new(Engine::new(config.clone()).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = AppState {
            engine,
            server: Arc::new(config.server.clone()),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = server::serve(listener, state, async {
                let _ = rx.await;
            })
            .await;
        });
        TestServer {
            addr,
            mock,
            ws,
            dir,
            client: admin_client(&admin_token),
            admin_token,
            shutdown: Some(tx),
        }
    }
}

/// Replaces `@WS@` (the workspace) and `@TOP@` (the temporary directory that holds it) in
/// every string of a script, so a script can name absolute paths that only exist at start.
fn placeholders(v: Value, ws: &Path, top: &Path) -> Value {
    match v {
        Value::String(s) => Value::String(
            s.replace("@WS@", &ws.display().to_string())
                .replace("@TOP@", &top.display().to_string()),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(|x| placeholders(x, ws, top)).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, x)| (k, placeholders(x, ws, top)))
                .collect(),
        ),
        other => other,
    }
}

/// The harness defaults overlaid with the test's own TOML (tables merged key by key).
fn merge_upstream_section(toml_text: &str) -> String {
    fn overlay(base: &mut toml::Table, top: toml::Table) {
        for (k, v) in top {
            match (base.get_mut(&k), v) {
                (Some(toml::Value::Table(b)), toml::Value::Table(t)) => overlay(b, t),
                (_, v) => {
                    base.insert(k, v);
                }
            }
        }
    }
    let (defaults, rest) = toml_text.split_once("\n\n").unwrap_or((toml_text, ""));
    let mut base: toml::Table = defaults.parse().unwrap();
    let top: toml::Table = rest.parse().unwrap();
    overlay(&mut base, top);
    toml::to_string(&base).unwrap()
}

/// A second handle on a server, for requests made from another task.
pub struct Remote {
    client: reqwest::Client,
    addr: std::net::SocketAddr,
}

impl Remote {
    pub async fn chat(&self, body: Value) -> Reply {
        let r = self
            .client
            .post(format!("http://{}/v1/chat/completions", self.addr))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        to_reply(r).await
    }
}

impl TestServer {
    pub fn client_clone(&self) -> Remote {
        Remote {
            client: self.client.clone(),
            addr: self.addr,
        }
    }
}

/// Like [`eventually`], for conditions that need to await.
pub async fn eventually_async<F, Fut>(mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// An HTTP client for tests (loopback only: never through a proxy).
pub fn client() -> reqwest::Client {
    toolpilot::process::install_crypto_provider();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// An HTTP client that sends the admin token with every request (what the console and a
/// person's scripts do).
pub fn admin_client(token: &str) -> reqwest::Client {
    toolpilot::process::install_crypto_provider();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        toolpilot::server::ADMIN_TOKEN_HEADER,
        reqwest::header::HeaderValue::from_str(token).unwrap(),
    );
    reqwest::Client::builder()
        .no_proxy()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// A parsed response.
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

/// A parsed event stream.
pub struct StreamReply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    /// `data:` payloads parsed as JSON (`[DONE]` excluded).
    pub chunks: Vec<Value>,
    pub comments: Vec<String>,
    pub done: bool,
    /// `[DONE]` was the last thing in the stream.
    pub done_last: bool,
    pub raw: String,
}

impl StreamReply {
    /// All `delta.content` concatenated.
    pub fn content(&self) -> String {
        self.chunks
            .iter()
            .filter_map(|c| c["choices"].get(0)?["delta"]["content"].as_str())
            .collect()
    }

    /// The message of the in-stream error event, if there is one.
    pub fn error_message(&self) -> Option<String> {
        self.chunks
            .iter()
            .find_map(|c| c.get("error")?["message"].as_str().map(str::to_string))
    }

    pub fn finish_reason(&self) -> Option<String> {
        self.chunks.iter().rev().find_map(|c| {
            c["choices"]
                .get(0)?
                .get("finish_reason")?
                .as_str()
                .map(str::to_string)
        })
    }
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The console's address with the admin token in its fragment, as the serve log shows it.
    pub fn console_url(&self) -> String {
        toolpilot::server::console_url(self.addr, &self.admin_token)
    }

    pub fn mock(&self) -> &MockUpstream {
        self.mock.as_ref().unwrap()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.mock().requests()
    }

    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> Reply {
        let r = self
            .client
            .post(self.url(path))
            .body(body)
            .send()
            .await
            .unwrap();
        to_reply(r).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        let r = self.client.get(self.url(path)).send().await.unwrap();
        to_reply(r).await
    }

    /// A non-streamed chat request.
    pub async fn chat(&self, body: Value) -> Reply {
        self.post_raw("/v1/chat/completions", body.to_string())
            .await
    }

    /// A streamed chat request, read to the end.
    pub async fn chat_stream(&self, mut body: Value) -> StreamReply {
        body["stream"] = json!(true);
        let r = self
            .client
            .post(self.url("/v1/chat/completions"))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let raw = r.text().await.unwrap();
        parse_sse(status, headers, raw)
    }

    /// Starts a streamed chat request and returns the response unread.
    pub async fn open_stream(&self, mut body: Value) -> reqwest::Response {
        body["stream"] = json!(true);
        self.client
            .post(self.url("/v1/chat/completions"))
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    /// The workspace path of a file.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.ws.join(rel)
    }
}

pub async fn to_reply(r: reqwest::Response) -> Reply {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
        text,
    }
}

pub fn parse_sse(status: u16, headers: reqwest::header::HeaderMap, raw: String) -> StreamReply {
    let mut chunks = Vec::new();
    let mut comments = Vec::new();
    let mut done = false;
    for block in raw.split("\n\n") {
        let block = block.trim_matches('\n');
        if block.is_empty() {
            continue;
        }
        if let Some(c) = block.strip_prefix(": ") {
            comments.push(c.to_string());
        } else if let Some(d) = block.strip_prefix("data: ") {
            if d == "[DONE]" {
                done = true;
            } else {
                chunks.push(
                    serde_json::from_str(d).unwrap_or_else(|e| panic!("bad chunk {d:?}: {e}")),
                );
            }
        } else {
            panic!("unexpected SSE block {block:?}");
        }
    }
    let done_last = raw.trim_end().ends_with("data: [DONE]");
    StreamReply {
        status,
        headers,
        chunks,
        comments,
        done,
        done_last,
        raw,
    }
}

/// A user message request.
pub fn ask(text: &str) -> Value {
    json!({"model": "mock-model", "messages": [{"role": "user", "content": text}]})
}

/// A script in which the model calls one tool, then answers "done".
pub fn one_call(name: &str, args: Value) -> Value {
    json!({"rounds": [
        {"tool_calls": [{"id": "call_1", "name": name, "arguments": args}]},
        {"text": "done"}
    ]})
}

/// The content of the tool message answering `call_id` in a recorded upstream request.
pub fn tool_result(req: &Recorded, call_id: &str) -> String {
    let msgs = req.body["messages"].as_array().expect("messages");
    msgs.iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no tool result for {call_id} in {msgs:#?}"))
        .to_string()
}

/// Every tool message in every recorded request answers an earlier assistant tool call, and
/// every assistant tool call is answered (the invariant of the conversation we build).
pub fn check_conversation_invariants(requests: &[Recorded]) {
    for (n, req) in requests.iter().enumerate() {
        let Some(msgs) = req.body["messages"].as_array() else {
            continue;
        };
        let mut open: Vec<String> = Vec::new();
        for m in msgs {
            match m["role"].as_str() {
                Some("assistant") => {
                    assert!(
                        open.is_empty(),
                        "request {n}: unanswered tool calls {open:?} before an assistant message"
                    );
                    if let Some(calls) = m["tool_calls"].as_array() {
                        for c in calls {
                            open.push(c["id"].as_str().unwrap().to_string());
                        }
                    }
                }
                Some("tool") => {
                    let id = m["tool_call_id"].as_str().unwrap();
                    let pos = open.iter().position(|o| o == id);
                    assert!(
                        pos.is_some(),
                        "request {n}: tool message for unknown call {id}"
                    );
                    open.remove(pos.unwrap());
                }
                _ => {}
            }
        }
        assert!(
            open.is_empty(),
            "request {n}: tool calls {open:?} were never answered"
        );
    }
}

/// Runs one tool call through the server (the mock model calls it) and returns the tool
/// message the model got back.
pub async fn run_tool(server: &TestServer, _name: &str) -> String {
    let r = server.chat(ask("go")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = server.requests();
    assert!(
        reqs.len() >= 2,
        "the model was not called a second time: {reqs:#?}"
    );
    check_conversation_invariants(&reqs);
    tool_result(&reqs[1], "call_1")
}

/// Builds a server whose model calls `name(args)` once, over the given files.
pub async fn tool_server(name: &str, args: Value, files: &[(&str, &str)]) -> TestServer {
    let mut b = TestServer::builder().script(one_call(name, args));
    for (p, c) in files {
        b = b.file(p, c);
    }
    b.start().await
}

/// Waits (up to 10 s) until `cond` holds; for effects that complete asynchronously.
pub async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

pub fn write(path: &Path, contents: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(path, contents).unwrap();
}

/// A script in which the model calls several tools in one round (ids `c1`, `c2`, … in
/// order), then answers "done".
pub fn calls_script(calls: &[(&str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| json!({"id": format!("c{}", i + 1), "name": name, "arguments": args}))
        .collect();
    json!({"rounds": [{"tool_calls": calls}, {"text": "done"}]})
}

/// Starts `builder` with a model that calls every `(tool, args)` in one round, sends one
/// request and returns the server and the tool messages the model got back, in call order.
pub async fn run_calls(builder: Builder, calls: &[(&str, Value)]) -> (TestServer, Vec<String>) {
    let server = builder.script(calls_script(calls)).start().await;
    let results = send_and_collect(&server, ask("go"), calls.len()).await;
    (server, results)
}

/// Sends `body` to a server whose script is a `calls_script` of `n` calls and returns the
/// tool messages for `c1`..`cn`.
pub async fn send_and_collect(server: &TestServer, body: Value, n: usize) -> Vec<String> {
    let r = server.chat(body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    collected(server, n)
}

/// The tool messages for `c1`..`cn` in the second upstream request.
pub fn collected(server: &TestServer, n: usize) -> Vec<String> {
    let reqs = server.requests();
    assert!(
        reqs.len() >= 2,
        "the model was not called a second time: {reqs:#?}"
    );
    check_conversation_invariants(&reqs);
    (1..=n)
        .map(|i| tool_result(&reqs[1], &format!("c{i}")))
        .collect()
}

/// Every tool message the upstream received, in every request.
pub fn all_tool_messages(server: &TestServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .flat_map(|r| {
            r.body["messages"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Another mock upstream beside the server's own (for routing and fallback tests).
pub async fn extra_mock(script: Value) -> MockUpstream {
    let script: Script = serde_json::from_value(script).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    MockUpstream::start(script, l).unwrap()
}

/// A loopback address nothing listens on.
pub async fn dead_address() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}/v1")
}

/// A sandbox feature a test needs from the kernel.
#[derive(Debug, Clone, Copy)]
pub enum Needs {
    /// Landlock at this ABI or later (6 brings the signal and abstract-socket scopes).
    Landlock(u32),
    /// A namespace toolpilot can give a command: `"mount"`, `"network"`, or `"user"` (an
    /// unprivileged server's user namespace).
    Namespace(&'static str),
}

/// Whether a test must stop because this machine lacks what it needs (`have` is false); it
/// says so on stderr. Where the machine is known to have it, the test fails instead of
/// stopping, so the sandbox tests cannot be skipped silently: `.ci/run` sets
/// `TOOLPILOT_REQUIRE_LANDLOCK` to the kernel's Landlock ABI (`1` requires any) and
/// `TOOLPILOT_REQUIRE_NAMESPACES` to the namespaces a command can get (`mount,network,user`).
#[track_caller]
pub fn lacks(have: bool, needs: Needs) -> bool {
    if have {
        return false;
    }
    let required = match needs {
        Needs::Landlock(abi) => std::env::var("TOOLPILOT_REQUIRE_LANDLOCK")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .is_some_and(|have| have >= abi),
        Needs::Namespace(name) => std::env::var("TOOLPILOT_REQUIRE_NAMESPACES")
            .is_ok_and(|v| v.split(',').any(|n| n.trim() == name)),
    };
    if required {
        panic!(
            "this test needs {needs:?}, which toolpilot did not find, although \
             TOOLPILOT_REQUIRE_LANDLOCK / TOOLPILOT_REQUIRE_NAMESPACES say this machine has it"
        );
    }
    eprintln!("skipping: this machine lacks {needs:?}");
    true
}

/// The Python interpreter (`TOOLPILOT_TEST_PYTHON`, else `python3`) that can run `import
/// {imports}`, if any; `what` names the package in the messages. Where `.ci/run` installed the
/// packages (`TOOLPILOT_REQUIRE_PYTHON_SDK=1`) a missing one fails the test instead of skipping it.
pub fn python_with(imports: &str, what: &str) -> Option<String> {
    let py = std::env::var("TOOLPILOT_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&py)
        .args(["-c", &format!("import {imports}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    if std::env::var("TOOLPILOT_REQUIRE_PYTHON_SDK").is_ok_and(|v| v == "1") {
        panic!(
            "the {what} is required (TOOLPILOT_REQUIRE_PYTHON_SDK=1) but `{py} -c 'import {imports}'` fails"
        );
    }
    eprintln!("skipping: no Python with the {what} (set TOOLPILOT_TEST_PYTHON; .ci/run does)");
    None
}
