//! MCP servers consumed end to end: the real HTTP server, the mock upstream's model calling
//! `mcp__SERVER__TOOL`, and real MCP servers behind it: `tests/mcp/test_server.py` (the
//! official Python SDK, over stdio and streamable HTTP) and the published
//! `@modelcontextprotocol/server-everything` (Node). `.ci/run` installs both (the Python SDK
//! from tests/clients/requirements.txt, the Node server from tests/clients/package.json) and
//! sets TOOLPILOT_REQUIRE_PYTHON_SDK=1 and TOOLPILOT_REQUIRE_CLIENTS=1; without them a missing
//! one skips its test, saying so.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

const TEST_SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/test_server.py");
const CLIENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");

/// The Python interpreter that has the official `mcp` SDK, if any.
fn python_with_mcp() -> Option<String> {
    python_with("mcp.server.mcpserver, uvicorn", "mcp Python SDK")
}

/// `[mcp.servers.t]`: the test server over stdio, plus `extra` lines for that table.
fn stdio_server(py: &str, extra: &str) -> String {
    format!(
        "[mcp.servers.t]\ncommand = {py:?}\nargs = [{TEST_SERVER:?}, \"stdio\"]\n\
         startup_timeout_secs = 60\n{extra}\n"
    )
}

/// The names of the tools offered in a recorded upstream request.
fn offered(req: &toolpilot::mock::Recorded) -> Vec<String> {
    req.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

/// The `mcp_servers` entry of `/healthz` for a server.
async fn health(s: &TestServer, name: &str) -> Value {
    let r = s.get("/healthz").await;
    let v: Value = serde_json::from_str(&r.text).unwrap();
    v["mcp_servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Waits (up to `secs`, wide for a loaded machine) until `path` exists.
async fn wait_for_file(path: &Path, secs: u64) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    path.exists()
}

/// Waits (up to `secs`) until the server's `/healthz` entry satisfies `cond`.
async fn wait_health(
    s: &TestServer,
    name: &str,
    secs: u64,
    cond: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let h = health(s, name).await;
        if cond(&h) || std::time::Instant::now() > deadline {
            return h;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_are_offered_and_called_under_the_policy() {
    let Some(py) = python_with_mcp() else { return };
    // No --yes and approvals.mode = "deny": what the policy asks about is refused.
    let (s, results) = run_calls(
        TestServer::builder().config(&format!(
            "{}\n[policy]\nallow = [\"mcp__t__echo\"]\ndeny = [\"mcp__t__cr*\"]\n",
            stdio_server(&py, "")
        )),
        &[
            ("mcp__t__echo", json!({"text": "hi there"})),
            ("mcp__t__add", json!({"a": 2, "b": 3})),
            ("mcp__t__crash", json!({})),
            ("mcp__t__echo", json!({})),
            ("mcp__t__nothing", json!({})),
        ],
    )
    .await;
    assert_eq!(results[0], "echo: hi there");
    assert!(
        results[1].contains("needs the user's approval")
            && results[1].contains("mcp.servers.t.policy = allowedWithPermission"),
        "the default is ask: {}",
        results[1]
    );
    assert!(
        results[2].contains("refuses this call (denied by policy.deny[0] `mcp__t__cr*`)"),
        "{}",
        results[2]
    );
    assert!(
        results[3].contains("`text` is required (mcp__t__echo takes `text`)"),
        "{}",
        results[3]
    );
    assert!(
        results[4].starts_with("There is no tool named \"mcp__t__nothing\""),
        "{}",
        results[4]
    );
    // Offered with the server's description and schema, beside the built-ins.
    let first = &s.requests()[0];
    let names = offered(first);
    assert!(names.contains(&"read_file".to_string()), "{names:?}");
    for t in [
        "mcp__t__echo",
        "mcp__t__add",
        "mcp__t__picture",
        "mcp__t__slow",
    ] {
        assert!(names.contains(&t.to_string()), "{t} not in {names:?}");
    }
    let echo = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__t__echo")
        .unwrap();
    assert_eq!(
        echo["function"]["description"],
        "Echoes the text back, prefixed with 'echo: '."
    );
    assert_eq!(echo["function"]["parameters"]["required"], json!(["text"]));
    assert_eq!(
        echo["function"]["parameters"]["properties"]["text"]["type"],
        "string"
    );
    let h = health(&s, "t").await;
    assert_eq!(h["state"], "ready", "{h}");
    assert_eq!(h["transport"], "stdio");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_policy_and_a_client_declaring_the_same_name() {
    let Some(py) = python_with_mcp() else { return };
    // The server's tools are allowed as a whole; one is disabled by the policy and one by the
    // server's `disabled_tools`: neither is offered, and a call of either is an unknown tool.
    let s = TestServer::builder()
        .config(&format!(
            "{}\n[policy.tools]\nmcp__t__fail = \"deny\"\n",
            stdio_server(&py, "policy = \"allow\"\ndisabled_tools = [\"crash\"]")
        ))
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "mcp__t__add", "arguments": {"a": 40, "b": 2}},
                            {"id": "c2", "name": "mcp__t__fail", "arguments": {"message": "x"}}]},
            {"text": "done"},
            {"tool_calls": [{"id": "k1", "name": "mcp__t__echo", "arguments": {"text": "x"}}]},
        ]}))
        .start()
        .await;
    let r = s.chat(ask("go")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = s.requests();
    assert!(
        tool_result(&reqs[1], "c1").contains("\"sum\": 42"),
        "{}",
        tool_result(&reqs[1], "c1")
    );
    assert!(
        tool_result(&reqs[1], "c2").starts_with("There is no tool named \"mcp__t__fail\""),
        "{}",
        tool_result(&reqs[1], "c2")
    );
    let names = offered(&reqs[0]);
    assert!(!names.contains(&"mcp__t__crash".to_string()), "{names:?}");
    assert!(!names.contains(&"mcp__t__fail".to_string()), "{names:?}");
    // A client that declares mcp__t__echo itself keeps it: the call goes back to the client.
    let mut body = ask("go");
    body["tools"] = json!([{"type": "function", "function": {"name": "mcp__t__echo",
        "description": "the client's own", "parameters": {"type": "object"}}}]);
    let r = s.chat(body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v: Value = serde_json::from_str(&r.text).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "mcp__t__echo"
    );
    let last = s.requests().pop().unwrap();
    let echo: Vec<&Value> = last.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["function"]["name"] == "mcp__t__echo")
        .collect();
    assert_eq!(echo.len(), 1, "offered once");
    assert_eq!(echo[0]["function"]["description"], "the client's own");
    assert!(offered(&last).contains(&"mcp__t__add".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_image_and_error_results_become_text_for_the_model() {
    let Some(py) = python_with_mcp() else { return };
    let (_s, results) = run_calls(
        TestServer::builder().yes().config(&stdio_server(&py, "")),
        &[
            ("mcp__t__add", json!({"a": 2, "b": 3})),
            ("mcp__t__fail", json!({"message": "boom"})),
            ("mcp__t__picture", json!({})),
        ],
    )
    .await;
    assert!(results[0].contains("5"), "{}", results[0]);
    assert!(
        results[1].starts_with("mcp__t__fail failed: the tool reported an error: ")
            && results[1].contains("failed on purpose: boom"),
        "{}",
        results[1]
    );
    assert!(results[2].contains("a one-pixel picture"), "{}", results[2]);
    assert!(
        results[2].contains("[image: image/png, 66 bytes"),
        "{}",
        results[2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_times_out_without_progress_and_at_its_maximum_and_progress_keeps_it_alive() {
    let Some(py) = python_with_mcp() else { return };
    // A 3 s idle timeout and a 12 s maximum: a 6 s call that reports progress every 0.3 s
    // finishes; one that reports nothing is cancelled at 3 s; one that reports progress for
    // ever is cancelled at 12 s (the wide margins are for a loaded CI machine).
    let (_s, results) = run_calls(
        TestServer::builder().yes().config(&stdio_server(
            &py,
            "call_timeout_secs = 3\ncall_max_secs = 12",
        )),
        &[
            ("mcp__t__slow", json!({"seconds": 6, "every": 0.3})),
            ("mcp__t__slow", json!({"seconds": 60})),
            ("mcp__t__echo", json!({"text": "still here"})),
            ("mcp__t__slow", json!({"seconds": 60, "every": 0.3})),
        ],
    )
    .await;
    assert_eq!(results[0], "slept 6.0 s");
    assert!(
        results[1].contains("sent neither an answer nor progress for 3 s")
            && results[1].contains("call_timeout_secs"),
        "{}",
        results[1]
    );
    // The server is still up for the next call.
    assert_eq!(results[2], "echo: still here");
    assert!(
        results[3].contains("did not finish within 12 s (mcp.servers.t.call_max_secs)"),
        "{}",
        results[3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_call_is_reported_and_restarted() {
    let Some(py) = python_with_mcp() else { return };
    let s = TestServer::builder()
        .yes()
        .config(&stdio_server(&py, ""))
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "mcp__t__crash", "arguments": {}}]},
            {"text": "done"},
            {"tool_calls": [{"id": "c2", "name": "mcp__t__echo", "arguments": {"text": "back"}}]},
            {"text": "done again"},
        ]}))
        .start()
        .await;
    let r = s.chat(ask("go")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let crash = tool_result(&s.requests()[1], "c1");
    assert!(
        crash.contains("closed the connection during the call (it may have crashed)"),
        "{crash}"
    );
    // Restarted after a backoff of a second: ready again, one restart counted.
    let h = wait_health(&s, "t", 60, |h| h["state"] == "ready" && h["restarts"] == 1).await;
    assert_eq!(h["state"], "ready", "{h}");
    assert_eq!(h["restarts"], 1, "{h}");
    let r = s.chat(ask("again")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(tool_result(&s.requests()[3], "c2"), "echo: back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_list_is_refreshed_when_the_server_says_it_changed() {
    let Some(py) = python_with_mcp() else { return };
    let s = TestServer::builder()
        .yes()
        .config(&stdio_server(&py, ""))
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "mcp__t__add_tool", "arguments": {"name": "late"}}]},
            {"text": "done"},
            {"tool_calls": [{"id": "c2", "name": "mcp__t__late", "arguments": {"text": "x"}}]},
            {"text": "done again"},
        ]}))
        .start()
        .await;
    let r = s.chat(ask("go")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(tool_result(&s.requests()[1], "c1"), "added late");
    assert!(!offered(&s.requests()[0]).contains(&"mcp__t__late".to_string()));
    let h = wait_health(&s, "t", 30, |h| {
        h["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "mcp__t__late"))
    })
    .await;
    assert!(
        h.to_string().contains("mcp__t__late"),
        "never refreshed: {h}"
    );
    let r = s.chat(ask("again")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = s.requests();
    assert!(offered(&reqs[2]).contains(&"mcp__t__late".to_string()));
    assert_eq!(tool_result(&reqs[3], "c2"), "late: x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_servers_get_the_command_environment_their_env_and_the_workspace() {
    let Some(py) = python_with_mcp() else { return };
    let (s, results) = run_calls(
        TestServer::builder()
            .yes()
            .env("MCP_SHORT", "hey")
            .env("MCP_LONG_SECRET", "a-long-secret-value-1234")
            .config(&stdio_server(
                &py,
                "env = { GREETING = \"${MCP_SHORT}, you\", TOKEN = \"${MCP_LONG_SECRET}\" }",
            )),
        &[
            ("mcp__t__env", json!({"name": "GREETING"})),
            ("mcp__t__env", json!({"name": "TOKEN"})),
            ("mcp__t__env", json!({"name": "NO_COLOR"})),
            ("mcp__t__cwd", json!({})),
        ],
    )
    .await;
    assert_eq!(results[0], "hey, you");
    // A value from a variable the config names is a secret: never shown to the model.
    assert_eq!(results[1], "[redacted: value of $MCP_LONG_SECRET]");
    // The environment of commands (settings that keep tools from prompting or colouring).
    assert_eq!(results[2], "1");
    assert_eq!(
        Path::new(&results[3]).canonicalize().unwrap(),
        s.ws.canonicalize().unwrap()
    );
}

/// The test server on streamable HTTP, killed when dropped.
struct HttpServer {
    child: std::process::Child,
    port: u16,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn http_server(py: &str, dir: &Path) -> HttpServer {
    http_server_on(py, dir, 0).await
}

/// The HTTP test server on `port` (0: any free one).
async fn http_server_on(py: &str, dir: &Path, port: u16) -> HttpServer {
    let port_file = dir.join(format!("mcp-port-{port}"));
    let _ = std::fs::remove_file(&port_file);
    let child = std::process::Command::new(py)
        .args([TEST_SERVER, "http"])
        .arg(&port_file)
        .arg(port.to_string())
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut server = HttpServer { child, port: 0 };
    for _ in 0..1200 {
        if let Ok(p) = std::fs::read_to_string(&port_file) {
            server.port = p.trim().parse().unwrap();
            return server;
        }
        assert!(
            server.child.try_wait().unwrap().is_none(),
            "the HTTP test server exited"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the HTTP test server did not start within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_is_consumed_with_its_headers() {
    let Some(py) = python_with_mcp() else { return };
    let dir = tempfile::tempdir().unwrap();
    let http = http_server(&py, dir.path()).await;
    let (s, results) = run_calls(
        TestServer::builder()
            .yes()
            .env("MCP_HEADER_VALUE", "header-secret-5678")
            .config(&format!(
                "[mcp.servers.web]\nurl = \"http://127.0.0.1:{}/mcp\"\n\
                 headers = {{ X-Test-Token = \"${{MCP_HEADER_VALUE}}\", X-Plain = \"plain\" }}\n",
                http.port
            )),
        &[
            ("mcp__web__echo", json!({"text": "over http"})),
            ("mcp__web__header", json!({"name": "x-plain"})),
            ("mcp__web__header", json!({"name": "x-test-token"})),
            ("mcp__web__picture", json!({})),
        ],
    )
    .await;
    assert_eq!(results[0], "echo: over http");
    assert_eq!(results[1], "plain");
    assert_eq!(results[2], "[redacted: value of $MCP_HEADER_VALUE]");
    assert!(results[3].contains("[image: image/png"), "{}", results[3]);
    let h = health(&s, "web").await;
    assert_eq!(h["transport"], "http");
    assert_eq!(h["state"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_named_and_the_run_goes_on() {
    let (_s, results) = run_calls(
        TestServer::builder().yes().config(
            "[mcp.servers.gone]\ncommand = \"/nonexistent/mcp-server\"\nstartup_timeout_secs = 5\n",
        ),
        &[
            ("mcp__gone__anything", json!({})),
            ("ls", json!({"dirPath": "."})),
        ],
    )
    .await;
    assert!(
        results[0].starts_with("There is no tool named \"mcp__gone__anything\""),
        "{}",
        results[0]
    );
    assert!(!results[1].contains("failed"), "{}", results[1]);
    let s = _s;
    let h = health(&s, "gone").await;
    assert!(
        h["detail"]
            .as_str()
            .unwrap()
            .contains("cannot start \"/nonexistent/mcp-server\": no such program"),
        "{h}"
    );
}

/// `@modelcontextprotocol/server-everything`, the reference servers' test server, as
/// installed by `npm ci --prefix tests/clients`.
fn server_everything() -> Option<String> {
    let p = Path::new(CLIENTS)
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if p.exists() {
        return Some(p.display().to_string());
    }
    if std::env::var("TOOLPILOT_REQUIRE_CLIENTS").is_ok_and(|v| v == "1") {
        panic!(
            "{} is required (TOOLPILOT_REQUIRE_CLIENTS=1) but missing",
            p.display()
        );
    }
    eprintln!(
        "skipping: {} is missing (npm ci --prefix tests/clients)",
        p.display()
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_everything_server_works_end_to_end() {
    let Some(script) = server_everything() else {
        return;
    };
    let (s, results) = run_calls(
        TestServer::builder().config(&format!(
            "[mcp.servers.everything]\ncommand = \"node\"\nargs = [{script:?}, \"stdio\"]\n\
             startup_timeout_secs = 60\n[policy]\nallow = [\"mcp__everything__*\"]\n\
             deny = [\"mcp__everything__get-env\"]\n"
        )),
        &[
            (
                "mcp__everything__echo",
                json!({"message": "hello everything"}),
            ),
            ("mcp__everything__get-sum", json!({"a": 20, "b": 22})),
            ("mcp__everything__get-env", json!({})),
            ("mcp__everything__get-tiny-image", json!({})),
        ],
    )
    .await;
    assert!(results[0].contains("hello everything"), "{}", results[0]);
    assert!(results[1].contains("42"), "{}", results[1]);
    assert!(
        results[2].contains("denied by policy.deny[0]"),
        "{}",
        results[2]
    );
    assert!(results[3].contains("[image: image/png"), "{}", results[3]);
    let h = health(&s, "everything").await;
    assert_eq!(h["state"], "ready", "{h}");
    assert!(h["tools"].as_array().unwrap().len() > 5, "{h}");
}

/// Node with `@playwright/mcp` under tests/clients and Debian's Chromium, if present.
fn playwright_mcp() -> Option<(String, String)> {
    let cli = Path::new(CLIENTS).join("node_modules/@playwright/mcp/cli.js");
    let chromium =
        std::env::var("TOOLPILOT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let ok = cli.exists()
        && Path::new(&chromium).exists()
        && std::process::Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if ok {
        return Some((cli.display().to_string(), chromium));
    }
    if std::env::var("TOOLPILOT_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
        panic!(
            "the Playwright MCP test is required (TOOLPILOT_REQUIRE_BROWSER=1) but node, \
             {chromium} or {} is missing",
            cli.display()
        );
    }
    eprintln!("skipping: no Chromium or @playwright/mcp (see .ci/run)");
    None
}

/// A page on loopback with a text box and a button that greets whoever is typed in.
const GREETER: &str = "<!doctype html><html><head><title>Greeter</title></head><body>\
<h1>Greeter</h1><label for=\"name\">Name</label><input id=\"name\">\
<button id=\"greet\" onclick=\"document.getElementById('out').textContent = \
'Hello, ' + document.getElementById('name').value + '!'\">Greet</button>\
<p id=\"out\">nobody greeted yet</p></body></html>";

/// Serves [`GREETER`] to every request on a loopback port, for as long as the test runs.
async fn serve_greeter() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = sock.read(&mut buf).await;
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{GREETER}",
                    GREETER.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    port
}

/// The README's browser recipe, as written there.
fn browser_recipe(cli: &str, chromium: &str) -> String {
    format!(
        "[mcp.servers.browser]\ncommand = \"node\"\nargs = [{cli:?}, \"--headless\", \
         \"--browser\", \"chromium\", \"--executable-path\", {chromium:?}, \"--isolated\", \
         \"--no-sandbox\"]\nstartup_timeout_secs = 120\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_drives_headless_chromium_through_the_playwright_mcp_server() {
    let Some((cli, chromium)) = playwright_mcp() else {
        return;
    };
    let port = serve_greeter().await;
    let url = format!("http://127.0.0.1:{port}/");
    // The browser's tools ask by default; the test allows the four it uses, as a user would
    // for a trusted local page, and leaves the rest asking (refused here: nobody approves).
    let (s, results) = run_calls(
        TestServer::builder().config(&format!(
            "{}\n[policy]\nallow = [\"mcp__browser__browser_navigate\", \
             \"mcp__browser__browser_type\", \"mcp__browser__browser_click\", \
             \"mcp__browser__browser_snapshot\"]\n",
            browser_recipe(&cli, &chromium)
        )),
        &[
            ("mcp__browser__browser_navigate", json!({"url": url})),
            (
                "mcp__browser__browser_type",
                json!({"element": "Name box", "target": "#name", "text": "toolpilot"}),
            ),
            (
                "mcp__browser__browser_click",
                json!({"element": "Greet button", "target": "#greet"}),
            ),
            ("mcp__browser__browser_snapshot", json!({})),
            (
                "mcp__browser__browser_evaluate",
                json!({"function": "() => document.title"}),
            ),
        ],
    )
    .await;
    assert!(results[0].contains("Greeter"), "navigate: {}", results[0]);
    assert!(!results[1].contains("failed"), "type: {}", results[1]);
    assert!(!results[2].contains("failed"), "click: {}", results[2]);
    assert!(
        results[3].contains("Hello, toolpilot!"),
        "snapshot: {}",
        results[3]
    );
    assert!(
        results[4].contains("needs the user's approval")
            && results[4].contains("mcp.servers.browser.policy = allowedWithPermission"),
        "{}",
        results[4]
    );
    let h = health(&s, "browser").await;
    assert_eq!(h["policy"], "allowedWithPermission");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_tools_are_offered_through_one_search_tool() {
    let Some(py) = python_with_mcp() else { return };
    let s = TestServer::builder()
        .config(&format!(
            "{}\n[mcp]\nmax_offered_tools = 3\n[policy]\nallow = [\"mcp__t__echo\"]\n",
            stdio_server(&py, "")
        ))
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "mcp_tool_search", "arguments": {"query": "echoes text back"}}]},
            {"tool_calls": [{"id": "c2", "name": "mcp__t__echo", "arguments": {"text": "found you"}}]},
            {"text": "done"},
        ]}))
        .start()
        .await;
    let r = s.chat(ask("go")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = s.requests();
    let names = offered(&reqs[0]);
    assert!(names.contains(&"mcp_tool_search".to_string()), "{names:?}");
    assert!(names.contains(&"read_file".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("mcp__")), "{names:?}");
    let found = tool_result(&reqs[1], "c1");
    assert!(found.contains("\"name\": \"mcp__t__echo\""), "{found}");
    assert!(
        found.contains("\"required\": [\n"),
        "the schema comes along: {found}"
    );
    assert!(
        found.starts_with("1 of ") || found.contains(" matching MCP tools"),
        "{found}"
    );
    assert_eq!(tool_result(&reqs[2], "c2"), "echo: found you");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolpilot_tools_lists_the_servers_state_and_tools_with_their_policy() {
    let Some(py) = python_with_mcp() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}\n[mcp.servers.gone]\ncommand = \"/nonexistent/server\"\n\
             [policy]\nallow = [\"mcp__t__e*\"]\n",
            stdio_server(&py, "")
        ),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolpilot"))
        .arg("tools")
        .arg("--config")
        .arg(&cfg)
        .arg("--workspace")
        .arg(dir.path().join("ws"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("t (stdio): ready, connected"), "{text}");
    assert!(
        text.contains("gone (stdio): down, cannot start \"/nonexistent/server\": no such program"),
        "{text}"
    );
    let line = |tool: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(tool))
            .unwrap_or_else(|| panic!("no line for {tool} in\n{text}"))
            .to_string()
    };
    assert!(
        line("mcp__t__add").contains("allowedWithPermission"),
        "{text}"
    );
    assert!(line("mcp__t__add").contains("mcp server"), "{text}");
    assert!(
        text.contains("rule: policy.allow[0] `mcp__t__e*`"),
        "{text}"
    );
}

/// A new folder outside every place a sandboxed stdio server may write by default (the
/// temporary folder, `~/.npm`, `~/.cache`): in the checkout, unless the checkout is itself in
/// the temporary folder (a CI clone into /tmp), else in the home folder or /var/tmp.
fn outside_default_grants() -> tempfile::TempDir {
    let canon = |p: std::path::PathBuf| p.canonicalize().unwrap_or(p);
    let tmp = canon(std::env::temp_dir());
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let granted: Vec<std::path::PathBuf> = std::iter::once(tmp)
        .chain(
            home.iter()
                .flat_map(|h| [canon(h.join(".npm")), canon(h.join(".cache"))]),
        )
        .collect();
    let candidates = std::iter::once(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .chain(home.clone())
        .chain(std::iter::once(std::path::PathBuf::from("/var/tmp")));
    for c in candidates.map(canon) {
        if granted.iter().any(|g| c.starts_with(g)) {
            continue;
        }
        if let Ok(d) = tempfile::tempdir_in(&c) {
            return d;
        }
    }
    panic!("no writable folder outside the temporary folder, ~/.npm and ~/.cache for this test")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_servers_run_in_the_landlock_sandbox_with_their_grants() {
    let Some(py) = python_with_mcp() else { return };
    let granted = tempfile::tempdir().unwrap();
    let elsewhere = outside_default_grants();
    // Outside every folder the server may write (a denied folder inside a writable one, such
    // as the temporary folder, stays readable: Landlock grants add up).
    let hidden = outside_default_grants();
    std::fs::write(hidden.path().join("secret.txt"), "hidden").unwrap();
    let s = TestServer::builder()
        .yes()
        .config(&format!(
            "[terminal]\ndeny_read = [{:?}]\n{}\n[mcp.servers.free]\ncommand = {py:?}\nargs = [{TEST_SERVER:?}, \"stdio\"]\n\
             sandbox = false\n",
            hidden.path(),
            stdio_server(&py, &format!("writable = [{:?}]", granted.path()))
        ))
        .script(calls_script(&[
            ("mcp__t__write", json!({"path": "@WS@/inside.txt", "text": "in"})),
            ("mcp__t__write", json!({"path": elsewhere.path().join("out.txt"), "text": "out"})),
            ("mcp__t__write", json!({"path": granted.path().join("granted.txt"), "text": "ok"})),
            ("mcp__t__read", json!({"path": hidden.path().join("secret.txt")})),
            ("mcp__free__write", json!({"path": elsewhere.path().join("free.txt"), "text": "free"})),
        ]))
        .start()
        .await;
    let results = send_and_collect(&s, ask("go"), 5).await;
    if lacks(
        s.get("/healthz").await.body["sandbox"]["landlock"]["available"] == true,
        Needs::Landlock(1),
    ) {
        return;
    }
    assert!(results[0].starts_with("wrote "), "{}", results[0]);
    assert!(
        results[1].contains("cannot write") && results[1].contains("Permission denied"),
        "{}",
        results[1]
    );
    assert!(!elsewhere.path().join("out.txt").exists());
    assert!(results[2].starts_with("wrote "), "{}", results[2]);
    assert!(
        results[3].contains("cannot read") && results[3].contains("Permission denied"),
        "terminal.deny_read holds for MCP servers too: {}",
        results[3]
    );
    // `sandbox = false`: the same write goes through.
    assert!(results[4].starts_with("wrote "), "{}", results[4]);
    assert!(elsewhere.path().join("free.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_cancels_the_call_on_the_server() {
    let Some(py) = python_with_mcp() else { return };
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("cancelled");
    let s = TestServer::builder()
        .yes()
        .config(&stdio_server(&py, ""))
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "mcp__t__slow",
                             "arguments": {"seconds": 120, "marker": marker}}]},
            {"text": "never"},
        ]}))
        .start()
        .await;
    let stream = s.open_stream(ask("go")).await;
    let started = marker.with_extension("started");
    assert!(
        wait_for_file(&started, 60).await,
        "the slow call never started"
    );
    drop(stream);
    assert!(
        wait_for_file(&marker, 60).await,
        "the server was not told to cancel the call"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolpilot_run_starts_its_servers_for_the_run_and_stops_them_after() {
    let Some(py) = python_with_mcp() else { return };
    let mock = extra_mock(json!({"rounds": [
        {"tool_calls": [{"id": "c1", "name": "mcp__t__echo", "arguments": {"text": "via run"}},
                        {"id": "c2", "name": "mcp__t__pid", "arguments": {}}]},
        {"text": "all done"},
    ]}))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, stdio_server(&py, "")).unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolpilot"))
        .args(["run", "go", "--yes", "--model", "mock-model", "--upstream"])
        .arg(mock.base_url())
        .arg("--config")
        .arg(&cfg)
        .arg("--workspace")
        .arg(dir.path().join("ws"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env_remove("TOOLPILOT_CONFIG")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("all done"), "{stdout}");
    assert!(stderr.contains("mcp__t__echo: ok"), "{stderr}");
    let reqs = mock.requests();
    assert_eq!(tool_result(&reqs[1], "c1"), "echo: via run");
    let pid = tool_result(&reqs[1], "c2");
    // The server ended with the run.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the MCP server (pid {pid}) outlived `toolpilot run`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_at_start_is_reported_with_its_stderr_and_secrets_redacted() {
    let s = TestServer::builder()
        .env("MCP_LEAKED", "leaked-secret-0042")
        .config(
            "[mcp.servers.leaky]\ncommand = \"sh\"\n\
             args = [\"-c\", \"echo starting with token=$TOKEN >&2; exit 3\"]\n\
             env = { TOKEN = \"${MCP_LEAKED}\" }\n",
        )
        .script(json!({"rounds": [{"text": "hello"}]}))
        .start()
        .await;
    let r = s.chat(ask("go")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let h = health(&s, "leaky").await;
    let detail = h["detail"].as_str().unwrap_or_default();
    assert_eq!(h["state"], "down", "{h}");
    assert!(detail.contains("exit status: 3"), "{detail}");
    assert!(
        detail.contains("starting with token=[redacted: value of $MCP_LEAKED]"),
        "{detail}"
    );
    assert!(!h.to_string().contains("leaked-secret-0042"), "{h}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_that_goes_away_fails_calls_clearly_and_serves_again_when_back() {
    let Some(py) = python_with_mcp() else { return };
    let dir = tempfile::tempdir().unwrap();
    let first = http_server(&py, dir.path()).await;
    let port = first.port;
    let s = TestServer::builder()
        .yes()
        .config(&format!(
            "[mcp.servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
        ))
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "a", "name": "mcp__web__echo", "arguments": {"text": "one"}}]},
            {"text": "done"},
            {"tool_calls": [{"id": "b", "name": "mcp__web__echo", "arguments": {"text": "two"}}]},
            {"text": "done"},
            {"tool_calls": [{"id": "c", "name": "mcp__web__echo", "arguments": {"text": "three"}}]},
            {"text": "done"},
        ]}))
        .start()
        .await;
    assert_eq!(s.chat(ask("1")).await.status, 200);
    assert_eq!(tool_result(&s.requests()[1], "a"), "echo: one");
    drop(first);
    assert_eq!(s.chat(ask("2")).await.status, 200);
    let gone = tool_result(&s.requests()[3], "b");
    assert!(
        gone.starts_with("mcp__web__echo failed: the MCP server web could not be reached"),
        "{gone}"
    );
    // Back on the same port: the next call goes through (the session-less revision needs no
    // new handshake; an older server's expired session is renewed by the SDK).
    let _second = http_server_on(&py, dir.path(), port).await;
    assert_eq!(s.chat(ask("3")).await.status, 200);
    assert_eq!(tool_result(&s.requests()[5], "c"), "echo: three");
}
