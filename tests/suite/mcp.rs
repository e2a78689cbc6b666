//! toolpilot as an MCP server: the official Rust SDK's client (`rmcp`) on `/mcp`, at the
//! current revision (2026-07-28, `server/discover`, no session) and at an older one with
//! `initialize` (2025-06-18, a session); the tools it lists are the model's, calls run under
//! the policy, asks wait in `/v1/approvals` (and become elicitations when the client supports
//! them), and the guard is the API's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceError};
use serde_json::{Value, json};

use crate::support::*;

/// Which protocol revision the client speaks.
#[derive(Clone, Copy, Debug)]
enum Revision {
    /// 2026-07-28: `server/discover`, per-request metadata, no session.
    Current,
    /// 2025-06-18: `initialize`, a session (`Mcp-Session-Id`).
    Initialize,
}

const BOTH: [Revision; 2] = [Revision::Current, Revision::Initialize];

/// The test's MCP client: optionally declares elicitation and answers every question with
/// `answer`, counting them.
#[derive(Clone)]
struct Client {
    revision: Revision,
    answer: Option<ElicitationAction>,
    asked: Arc<AtomicUsize>,
    questions: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Client {
    fn new(revision: Revision) -> Client {
        Client {
            revision,
            answer: None,
            asked: Arc::default(),
            questions: Arc::default(),
        }
    }

    fn answering(mut self, action: ElicitationAction) -> Client {
        self.answer = Some(action);
        self
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let caps = match self.answer {
            Some(_) => ClientCapabilities::builder().enable_elicitation().build(),
            None => ClientCapabilities::default(),
        };
        let mut cfg = ClientConfig::new(caps, Implementation::new("toolpilot-mcp-test", "1.0"));
        if let Revision::Initialize = self.revision {
            cfg.protocol_version = ProtocolVersion::V_2025_06_18;
        }
        cfg
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.questions.lock().unwrap().push(message.clone());
        }
        Ok(ElicitResult::new(
            self.answer.clone().unwrap_or(ElicitationAction::Decline),
        ))
    }
}

type Session = RunningService<RoleClient, Client>;

fn transport(
    s: &TestServer,
    bearer: Option<&str>,
) -> StreamableHttpClientTransport<reqwest::Client> {
    let mut cfg = StreamableHttpClientTransportConfig::with_uri(s.url("/mcp"));
    if let Some(t) = bearer {
        cfg = cfg.auth_header(t);
    }
    StreamableHttpClientTransport::with_client(client(), cfg)
}

fn lifecycle(revision: Revision) -> ClientLifecycleMode {
    match revision {
        Revision::Current => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
        Revision::Initialize => ClientLifecycleMode::Initialize,
    }
}

async fn connect_as(s: &TestServer, c: Client) -> Session {
    let revision = c.revision;
    let session = c
        .serve_with_lifecycle(transport(s, None), lifecycle(revision))
        .await
        .unwrap_or_else(|e| panic!("{revision:?}: the MCP client could not connect: {e}"));
    let agreed = session
        .peer()
        .peer_info()
        .map(|i| i.protocol_version.clone());
    let want = match revision {
        Revision::Current => ProtocolVersion::V_2026_07_28,
        Revision::Initialize => ProtocolVersion::V_2025_06_18,
    };
    if let Some(v) = agreed {
        assert_eq!(v, want, "{revision:?}: negotiated another revision");
    }
    session
}

async fn connect(s: &TestServer, revision: Revision) -> Session {
    connect_as(s, Client::new(revision)).await
}

fn params(name: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_string());
    p.arguments = args.as_object().cloned();
    p
}

async fn call(session: &Session, name: &str, args: Value) -> CallToolResult {
    session
        .call_tool(params(name, args))
        .await
        .unwrap_or_else(|e| panic!("tools/call {name} failed at the protocol level: {e}"))
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_error(r: &CallToolResult) -> bool {
    r.is_error == Some(true)
}

fn run_id(r: &CallToolResult) -> String {
    r.meta
        .as_ref()
        .and_then(|m| m.get("toolpilot/run_id"))
        .and_then(Value::as_str)
        .expect("the result names its run in _meta")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_listed_are_the_ones_the_model_is_offered_with_the_same_schemas() {
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "hi"}]}))
        .start()
        .await;
    // What the model gets when the client declares no tools.
    let r = s.chat(ask("hello")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let offered: Vec<Value> = s.requests()[0].body["tools"].as_array().unwrap().clone();
    assert!(offered.len() > 10, "{offered:?}");
    for revision in BOTH {
        let session = connect(&s, revision).await;
        let tools = session.list_all_tools().await.unwrap();
        assert_eq!(tools.len(), offered.len(), "{revision:?}");
        for (tool, spec) in tools.iter().zip(&offered) {
            let f = &spec["function"];
            assert_eq!(tool.name, f["name"].as_str().unwrap(), "{revision:?}");
            assert_eq!(
                tool.description.as_deref(),
                f["description"].as_str(),
                "{revision:?}: {}",
                tool.name
            );
            assert_eq!(
                Value::Object((*tool.input_schema).clone()),
                f["parameters"],
                "{revision:?}: {}",
                tool.name
            );
            let name_ok = !tool.name.is_empty()
                && tool.name.len() <= 64
                && tool
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            assert!(name_ok, "{} is not a portable tool name", tool.name);
        }
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        for expected in [
            "read_file",
            "grep_search",
            "single_find_and_replace",
            "run_terminal_command",
        ] {
            assert!(names.contains(&expected), "{revision:?}: {names:?}");
        }
        // Disabled tools are not offered to either.
        assert!(!names.contains(&"create_rule_block"), "{names:?}");
        let read = tools.iter().find(|t| t.name == "read_file").unwrap();
        assert_eq!(
            read.annotations.as_ref().and_then(|a| a.read_only_hint),
            Some(true)
        );
        session.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_grep_search_and_an_edit_run_and_the_edit_can_be_undone() {
    let s = TestServer::builder()
        .config("[policy]\nallow = [\"single_find_and_replace(src/**)\"]\n")
        .file("src/lib.rs", "pub fn answer() -> u32 {\n    41\n}\n")
        .file("notes.md", "nothing here\n")
        .start()
        .await;
    for revision in BOTH {
        let session = connect(&s, revision).await;
        let r = call(&session, "read_file", json!({"filepath": "src/lib.rs"})).await;
        assert!(!is_error(&r), "{revision:?}: {}", text(&r));
        assert!(text(&r).contains("pub fn answer"), "{}", text(&r));
        let read_id = run_id(&r);

        let r = call(&session, "grep_search", json!({"query": "fn answer"})).await;
        assert!(!is_error(&r), "{}", text(&r));
        assert!(text(&r).contains("src/lib.rs"), "{}", text(&r));
        assert!(!text(&r).contains("notes.md"), "{}", text(&r));

        let r = call(
            &session,
            "single_find_and_replace",
            json!({"filepath": "src/lib.rs", "old_string": "41", "new_string": "42"}),
        )
        .await;
        assert!(!is_error(&r), "{revision:?}: {}", text(&r));
        assert_eq!(
            std::fs::read_to_string(s.path("src/lib.rs")).unwrap(),
            "pub fn answer() -> u32 {\n    42\n}\n"
        );
        // The call is a run of its own: listed, and undone like a model's.
        let id = run_id(&r);
        assert_ne!(id, read_id, "{revision:?}: two calls share a run");
        let listed = s.get(&format!("/v1/runs/{id}")).await;
        assert_eq!(listed.status, 200, "{}", listed.text);
        let undo = s.post_raw(&format!("/v1/runs/{id}/undo"), "").await;
        assert_eq!(undo.status, 200, "{}", undo.text);
        assert_eq!(
            std::fs::read_to_string(s.path("src/lib.rs")).unwrap(),
            "pub fn answer() -> u32 {\n    41\n}\n",
            "{revision:?}: undo did not restore the file"
        );
        session.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_command_runs_under_the_command_policy() {
    let s = TestServer::builder()
        .config("[policy]\ndeny = [\"run_terminal_command(rm *)\"]\n")
        .file("data.txt", "one\ntwo\nthree\n")
        .start()
        .await;
    for revision in BOTH {
        let session = connect(&s, revision).await;
        // Reads only: the command policy allows it without asking.
        let r = call(
            &session,
            "run_terminal_command",
            json!({"command": "wc -l data.txt"}),
        )
        .await;
        assert!(!is_error(&r), "{revision:?}: {}", text(&r));
        assert!(text(&r).contains('3'), "{}", text(&r));
        // A denied part refuses the whole line, with the rule.
        let r = call(
            &session,
            "run_terminal_command",
            json!({"command": "echo x && rm data.txt"}),
        )
        .await;
        assert!(is_error(&r), "{}", text(&r));
        assert!(text(&r).contains("policy"), "{}", text(&r));
        assert!(s.path("data.txt").exists());
        session.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_deny_is_an_error_result_with_the_reason() {
    let s = TestServer::builder()
        .config("[policy]\ndeny = [\"read_file(drafts/**)\"]\n")
        .file("drafts/plan.txt", "the plan\n")
        .start()
        .await;
    for revision in BOTH {
        let session = connect(&s, revision).await;
        let r = call(
            &session,
            "read_file",
            json!({"filepath": "drafts/plan.txt"}),
        )
        .await;
        assert!(is_error(&r), "{revision:?}: {}", text(&r));
        let t = text(&r);
        assert!(t.contains("permission policy refuses"), "{t}");
        assert!(t.contains("read_file(drafts/**)"), "{t}");
        assert!(!t.contains("the plan"), "{t}");
        // Bad arguments are the tool's own message, also as an error result.
        let r = call(&session, "read_file", json!({})).await;
        assert!(is_error(&r), "{}", text(&r));
        assert!(text(&r).contains("filepath"), "{}", text(&r));
        session.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_or_disabled_tool_is_a_json_rpc_error_that_says_what_is_served() {
    let s = TestServer::builder()
        .config("[policy.tools]\nls = \"disabled\"\n")
        .start()
        .await;
    for revision in BOTH {
        let session = connect(&s, revision).await;
        for (name, says) in [
            ("no_such_tool", "no tool named \"no_such_tool\""),
            ("ls", "disabled by the policy"),
        ] {
            match session.call_tool(params(name, json!({}))).await {
                Err(ServiceError::McpError(e)) => {
                    assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
                    assert!(e.message.contains(says), "{}", e.message);
                    assert!(e.message.contains("read_file"), "{}", e.message);
                }
                other => panic!("{revision:?}: {name}: expected a JSON-RPC error, got {other:?}"),
            }
        }
        session.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_redacted_and_cut_to_the_output_budget() {
    let secret = "sk-mcp-test-0123456789abcdefghij";
    let long: String = (0..4000).map(|i| format!("line {i}\n")).collect();
    let s = TestServer::builder()
        .config("[tools]\noutput_budget = 4000\n")
        .env("TOOLPILOT_UPSTREAM_API_KEY", secret)
        .file("leak.txt", format!("key = {secret}\n"))
        .file("long.txt", &long)
        .start()
        .await;
    let session = connect(&s, Revision::Current).await;
    let r = call(&session, "read_file", json!({"filepath": "leak.txt"})).await;
    assert!(!text(&r).contains(secret), "{}", text(&r));
    assert!(text(&r).contains("key = "), "{}", text(&r));
    let r = call(&session, "read_file", json!({"filepath": "long.txt"})).await;
    let t = text(&r);
    assert!(t.len() < 4400, "{} bytes", t.len());
    assert!(t.contains("line 0\n"), "{t}");
    assert!(!t.contains("line 3999"), "{t}");
    session.cancel().await.unwrap();
}

const ASK_CREATE: &str = "[approvals]\nmode = \"wait\"\ntimeout_secs = 60\n";

/// Waits until one call is listed in `/v1/approvals` and returns it.
async fn the_pending_call(s: &TestServer) -> Value {
    for _ in 0..400 {
        let r = s.get("/v1/approvals").await;
        assert_eq!(r.status, 200, "{}", r.text);
        if let [one] = r.body["data"].as_array().unwrap().as_slice() {
            return one.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("no MCP call ever waited in /v1/approvals");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_waits_in_v1_approvals_and_runs_when_approved_or_says_it_was_denied() {
    let s = TestServer::builder().config(ASK_CREATE).start().await;
    for (i, revision) in BOTH.into_iter().enumerate() {
        for decision in ["approve", "deny"] {
            let file = format!("new-{i}-{decision}.txt");
            let session = connect(&s, revision).await;
            let args = json!({"filepath": file, "contents": "made over MCP\n"});
            let pending_call =
                tokio::spawn(async move { call(&session, "create_new_file", args).await });
            let pending = the_pending_call(&s).await;
            assert_eq!(pending["tool"], "create_new_file");
            assert!(pending["arguments"].as_str().unwrap().contains(&file));
            assert!(!s.path(&file).exists(), "it ran before it was approved");
            let id = pending["id"].as_str().unwrap();
            let body = match decision {
                "approve" => json!({"decision": "approve"}),
                _ => json!({"decision": "deny", "reason": "not now"}),
            };
            let r = s
                .post_raw(&format!("/v1/approvals/{id}"), body.to_string())
                .await;
            assert_eq!(r.status, 200, "{}", r.text);
            let result = pending_call.await.unwrap();
            if decision == "approve" {
                assert!(!is_error(&result), "{revision:?}: {}", text(&result));
                assert_eq!(
                    std::fs::read_to_string(s.path(&file)).unwrap(),
                    "made over MCP\n"
                );
            } else {
                assert!(is_error(&result), "{}", text(&result));
                assert!(text(&result).contains("denied"), "{}", text(&result));
                assert!(text(&result).contains("not now"), "{}", text(&result));
                assert!(!s.path(&file).exists());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_is_refused_at_once_with_approvals_mode_deny() {
    let s = TestServer::builder().start().await;
    let session = connect(&s, Revision::Current).await;
    let r = call(
        &session,
        "create_new_file",
        json!({"filepath": "x.txt", "contents": "x"}),
    )
    .await;
    assert!(is_error(&r), "{}", text(&r));
    assert!(text(&r).contains("approval"), "{}", text(&r));
    assert!(!s.path("x.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_becomes_an_elicitation_when_the_client_declares_them() {
    let s = TestServer::builder().config(ASK_CREATE).start().await;
    for (i, revision) in BOTH.into_iter().enumerate() {
        for action in [ElicitationAction::Accept, ElicitationAction::Decline] {
            let file = format!("elicited-{i}-{action:?}.txt");
            let client = Client::new(revision).answering(action.clone());
            let asked = Arc::clone(&client.asked);
            let questions = Arc::clone(&client.questions);
            let session = connect_as(&s, client).await;
            let r = call(
                &session,
                "create_new_file",
                json!({"filepath": file, "contents": "yes\n"}),
            )
            .await;
            assert_eq!(asked.load(Ordering::SeqCst), 1, "{revision:?} {action:?}");
            let q = questions.lock().unwrap().join("\n");
            assert!(q.contains("create_new_file"), "{q}");
            assert!(q.contains(&file), "{q}");
            match action {
                ElicitationAction::Accept => {
                    assert!(!is_error(&r), "{revision:?}: {}", text(&r));
                    assert!(s.path(&file).exists());
                }
                _ => {
                    assert!(is_error(&r), "{}", text(&r));
                    assert!(text(&r).contains("denied"), "{}", text(&r));
                    assert!(!s.path(&file).exists());
                }
            }
            // Answered: nothing is left waiting in /v1/approvals.
            let listed = s.get("/v1/approvals").await;
            assert_eq!(listed.body["data"], json!([]), "{}", listed.text);
            session.cancel().await.unwrap();
        }
    }
}

/// A raw JSON-RPC POST to `/mcp` with the given extra headers.
async fn raw_post(s: &TestServer, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = client()
        .post(s.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string(),
        );
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_protects_mcp_like_every_endpoint() {
    let s = TestServer::builder().start().await;
    let r = raw_post(&s, &[]).await;
    assert_eq!(r.status(), 200);
    let r = raw_post(&s, &[("origin", "https://evil.example")]).await;
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "origin_not_allowed", "{body}");
    let r = raw_post(&s, &[("host", "evil.example:7979")]).await;
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");

    let token = "mcp-bearer-token-0123456789";
    let s = TestServer::builder()
        .env("TOOLPILOT_BEARER_TOKEN", token)
        .start()
        .await;
    let r = raw_post(&s, &[]).await;
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bearer token"),
        "{body}"
    );
    let r = raw_post(&s, &[("authorization", "Bearer wrong")]).await;
    assert_eq!(r.status(), 401);
    // The SDK's client without the token cannot connect; with it, it works.
    let refused = Client::new(Revision::Current)
        .serve_with_lifecycle(transport(&s, None), lifecycle(Revision::Current))
        .await;
    assert!(refused.is_err(), "connected without the bearer token");
    let session = Client::new(Revision::Current)
        .serve_with_lifecycle(transport(&s, Some(token)), lifecycle(Revision::Current))
        .await
        .unwrap();
    let tools = session.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "read_file"));
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_can_be_turned_off() {
    let s = TestServer::builder()
        .config("[server]\nmcp = false\n")
        .start()
        .await;
    let r = raw_post(&s, &[]).await;
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("server.mcp"),
        "{body}"
    );
}

/// `toolpilot mcp` over a temporary workspace: the real binary, its stdio piped.
struct StdioServer {
    child: tokio::process::Child,
    dir: tempfile::TempDir,
}

impl StdioServer {
    fn start(config: &str, files: &[(&str, &str)], log: &str) -> StdioServer {
        StdioServer::start_with(config, files, log, &[])
    }

    fn start_with(config: &str, files: &[(&str, &str)], log: &str, flags: &[&str]) -> StdioServer {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        for (path, contents) in files {
            let p = ws.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, contents).unwrap();
        }
        std::fs::create_dir_all(&ws).unwrap();
        let cfg = dir.path().join("toolpilot.toml");
        std::fs::write(&cfg, config).unwrap();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolpilot"))
            .arg("mcp")
            .arg("--workspace")
            .arg(&ws)
            .arg("--config")
            .arg(&cfg)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(flags)
            .env("TOOLPILOT_LOG", log)
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        StdioServer { child, dir }
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join("ws").join(rel)
    }

    /// The SDK's client on the process's stdout and stdin.
    async fn connect(&mut self, c: Client) -> Session {
        let stdout = self.child.stdout.take().unwrap();
        let stdin = self.child.stdin.take().unwrap();
        let revision = c.revision;
        c.serve_with_lifecycle((stdout, stdin), lifecycle(revision))
            .await
            .unwrap_or_else(|e| panic!("{revision:?}: cannot talk to toolpilot mcp: {e}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolpilot_mcp_on_stdio_serves_the_tools_to_the_sdk_client() {
    let config = "[policy]\nallow = [\"single_find_and_replace(src/**)\"]\n";
    let files = [("src/lib.rs", "const N: u32 = 1;\n")];
    for revision in BOTH {
        let mut server = StdioServer::start(config, &files, "warn");
        let session = server.connect(Client::new(revision)).await;
        let tools = session.list_all_tools().await.unwrap();
        assert!(
            tools.iter().any(|t| t.name == "grep_search"),
            "{revision:?}"
        );
        let r = call(&session, "grep_search", json!({"query": "const N"})).await;
        assert!(!is_error(&r), "{revision:?}: {}", text(&r));
        assert!(text(&r).contains("src/lib.rs"), "{}", text(&r));
        let r = call(
            &session,
            "single_find_and_replace",
            json!({"filepath": "src/lib.rs", "old_string": "= 1", "new_string": "= 2"}),
        )
        .await;
        assert!(!is_error(&r), "{revision:?}: {}", text(&r));
        assert_eq!(
            std::fs::read_to_string(server.path("src/lib.rs")).unwrap(),
            "const N: u32 = 2;\n"
        );
        // Nobody can approve over stdio without elicitation: refused at once, saying how.
        let r = call(
            &session,
            "create_new_file",
            json!({"filepath": "new.txt", "contents": "x"}),
        )
        .await;
        assert!(is_error(&r), "{}", text(&r));
        assert!(text(&r).contains("--yes"), "{}", text(&r));
        assert!(!server.path("new.txt").exists());
        session.cancel().await.unwrap();
        // The client closing stdin ends the process cleanly.
        let status = tokio::time::timeout(std::time::Duration::from_secs(60), server.child.wait())
            .await
            .expect("toolpilot mcp did not exit after its client left")
            .unwrap();
        assert!(status.success(), "{status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolpilot_mcp_on_stdio_asks_through_elicitation() {
    for revision in BOTH {
        for action in [ElicitationAction::Accept, ElicitationAction::Decline] {
            let mut server = StdioServer::start("", &[], "warn");
            let client = Client::new(revision).answering(action.clone());
            let asked = Arc::clone(&client.asked);
            let session = server.connect(client).await;
            let r = call(
                &session,
                "create_new_file",
                json!({"filepath": "asked.txt", "contents": "ok\n"}),
            )
            .await;
            assert_eq!(asked.load(Ordering::SeqCst), 1, "{revision:?} {action:?}");
            let accepted = action == ElicitationAction::Accept;
            assert_eq!(is_error(&r), !accepted, "{revision:?}: {}", text(&r));
            assert_eq!(server.path("asked.txt").exists(), accepted);
            session.cancel().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolpilot_mcp_writes_only_json_rpc_to_stdout_and_its_log_to_stderr() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut server = StdioServer::start("", &[("a.txt", "alpha\n")], "debug");
    let mut stdin = server.child.stdin.take().unwrap();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "read_file", "arguments": {"filepath": "a.txt"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
               "params": {"name": "run_terminal_command", "arguments": {"command": "echo to-the-result"}}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
               "params": {"name": "nope", "arguments": {}}}),
        // Not JSON, not a message, a request whose params cannot be read, and an unknown
        // notification (ignored): each of the first three gets an error that says why.
        json!("not json at all"),
        json!({"hello": "there"}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": 5}}),
        json!({"jsonrpc": "2.0", "method": "$/someEditorThing"}),
    ];
    let stdout = server.child.stdout.take().unwrap();
    let mut stderr = server.child.stderr.take().unwrap();
    let read_err = tokio::spawn(async move {
        let mut err = String::new();
        stderr.read_to_string(&mut err).await.unwrap();
        err
    });
    for l in &lines {
        let line = match l {
            Value::String(raw) => raw.clone(),
            other => other.to_string(),
        };
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    stdin.flush().await.unwrap();
    // Every line of stdout until the requests are answered, then stdin closes.
    let mut reader = tokio::io::BufReader::new(stdout);
    let mut out = String::new();
    let all_answered = |out: &str| {
        out.matches("\"id\":null").count() >= 2
            && (1..=6).all(|id| {
                out.lines()
                    .any(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["id"] == json!(id)))
            })
    };
    let answered = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        use tokio::io::AsyncBufReadExt;
        while !all_answered(&out) {
            let mut line = String::new();
            if reader.read_line(&mut line).await.unwrap() == 0 {
                break;
            }
            out.push_str(&line);
        }
    })
    .await;
    let seen: Vec<String> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["id"].to_string())
        .collect();
    assert!(
        answered.is_ok(),
        "toolpilot mcp did not answer every request (answered: {seen:?})"
    );
    drop(stdin);
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), server.child.wait())
        .await
        .expect("toolpilot mcp did not exit after stdin closed")
        .unwrap();
    reader.read_to_string(&mut out).await.unwrap();
    let err = read_err.await.unwrap();
    assert!(status.success(), "{status}\n{err}");
    let mut ids = Vec::new();
    for line in out.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!("stdout carries something that is not JSON ({e}): {line:?}")
        });
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
        ids.push(v["id"].clone());
    }
    for id in 1..=6 {
        assert!(
            ids.contains(&json!(id)),
            "no answer to request {id}: {out}\n{err}"
        );
    }
    let errors: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("error").is_some())
        .collect();
    // Answers are written as they are ready, not in the order of the requests.
    let code_of = |id: Value| {
        let mut codes = errors
            .iter()
            .filter(|e| e["id"] == id)
            .map(|e| e["error"]["code"].as_i64().unwrap())
            .collect::<Vec<_>>();
        codes.sort_unstable();
        codes
    };
    assert_eq!(code_of(Value::Null), vec![-32700, -32600], "{out}");
    assert_eq!(code_of(json!(6)), vec![-32602], "{out}");
    assert!(out.contains("not JSON"), "{out}");
    assert!(out.contains("alpha"), "{out}");
    assert!(out.contains("to-the-result"), "{out}");
    // The log went to stderr (debug level asked for), none of it to stdout.
    assert!(err.contains("serving MCP on stdio"), "{err}");
    assert!(err.contains("policy decision"), "{err}");
    assert!(!out.contains("policy decision"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_path_is_never_put_to_the_client_and_elicitation_can_be_turned_off() {
    for (config, file) in [
        // Only a person may approve writing a protected path: not the client's elicitation.
        (ASK_CREATE.to_string(), "AGENTS.md"),
        // server.mcp_elicitation = false: asks wait only in /v1/approvals.
        (
            format!("{ASK_CREATE}[server]\nmcp_elicitation = false\n"),
            "plain.txt",
        ),
    ] {
        let s = TestServer::builder().config(&config).start().await;
        for revision in BOTH {
            let client = Client::new(revision).answering(ElicitationAction::Accept);
            let asked = Arc::clone(&client.asked);
            let session = connect_as(&s, client).await;
            let args = json!({"filepath": file, "contents": "x\n"});
            let pending_call =
                tokio::spawn(async move { call(&session, "create_new_file", args).await });
            let pending = the_pending_call(&s).await;
            let id = pending["id"].as_str().unwrap();
            let r = s
                .post_raw(
                    &format!("/v1/approvals/{id}"),
                    json!({"decision": "deny"}).to_string(),
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.text);
            let result = pending_call.await.unwrap();
            assert!(is_error(&result), "{}", text(&result));
            assert_eq!(asked.load(Ordering::SeqCst), 0, "{revision:?} {file}");
            assert!(!s.path(file).exists());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_a_protected_path_is_refused_even_with_elicitation() {
    let mut server = StdioServer::start("", &[], "warn");
    let client = Client::new(Revision::Current).answering(ElicitationAction::Accept);
    let asked = Arc::clone(&client.asked);
    let session = server.connect(client).await;
    let r = call(
        &session,
        "create_new_file",
        json!({"filepath": "AGENTS.md", "contents": "x\n"}),
    )
    .await;
    assert!(is_error(&r), "{}", text(&r));
    assert!(
        text(&r).contains("only a person can approve"),
        "{}",
        text(&r)
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    assert!(!server.path("AGENTS.md").exists());
    session.cancel().await.unwrap();
}

/// A raw POST of `body` to `/mcp` with the 2026-07-28 headers (`method` in `Mcp-Method`).
async fn raw_rpc(s: &TestServer, method: &str, body: &str) -> (u16, Value) {
    let r = client()
        .post(s.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("not a JSON-RPC answer ({e}): {status} {text:?}"));
    (status, v)
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {},
           "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_errors_are_json_rpc_errors_that_say_what_is_wrong() {
    let s = TestServer::builder().file("a.txt", "alpha\n").start().await;
    let (status, v) = raw_rpc(&s, "tools/list", "this is not json").await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["code"], -32700, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("not JSON"),
        "{v}"
    );
    assert_eq!(v["id"], Value::Null);

    let (status, v) = raw_rpc(&s, "tools/list", r#"{"hello": 1}"#).await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"jsonrpc\": \"2.0\""),
        "{v}"
    );

    let no_name = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                         "params": {"_meta": meta(), "arguments": {}}});
    let (status, v) = raw_rpc(&s, "tools/call", &no_name.to_string()).await;
    assert_eq!(status, 400);
    assert_eq!(v["id"], 7);
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("params.name"),
        "{v}"
    );

    let bogus = json!({"jsonrpc": "2.0", "id": 8, "method": "bogus/method",
                       "params": {"_meta": meta()}});
    let (_, v) = raw_rpc(&s, "bogus/method", &bogus.to_string()).await;
    assert_eq!(v["error"]["code"], -32601, "{v}");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("bogus/method") && m.contains("tools/call"),
        "{v}"
    );

    // A well-formed call still goes through.
    let read = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"_meta": meta(), "name": "read_file",
                                 "arguments": {"filepath": "a.txt"}}});
    let r = client()
        .post(s.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "read_file")
        .body(read.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let run_id = r
        .headers()
        .get("x-toolpilot-run-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let text = r.text().await.unwrap();
    assert!(text.contains("alpha"), "{text}");
    // Over HTTP the call's run is the request's: the header names it, like the result.
    assert!(text.contains(&run_id), "{run_id} {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_withdraws_its_waiting_call() {
    let s = TestServer::builder().config(ASK_CREATE).start().await;
    for revision in BOTH {
        let session = connect(&s, revision).await;
        let waiting = tokio::spawn(async move {
            call(
                &session,
                "create_new_file",
                json!({"filepath": "never.txt", "contents": "x"}),
            )
            .await
        });
        let pending = the_pending_call(&s).await;
        assert_eq!(pending["tool"], "create_new_file");
        // The client goes away: its session and connections are dropped.
        waiting.abort();
        let _ = waiting.await;
        // Without a session at once; in a session (the older revisions) when rmcp ends it,
        // after letting in-flight responses drain for up to 5 s: wait far longer than that.
        let mut gone = false;
        for _ in 0..600 {
            if s.get("/v1/approvals").await.body["data"] == json!([]) {
                gone = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(
            gone,
            "{revision:?}: the call still waits after its client left"
        );
        assert!(!s.path("never.txt").exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_run_over_mcp_is_confined_by_the_sandbox() {
    // --yes: the writes below are asks the policy lets through, so the sandbox is what stops
    // the one that leaves the workspace.
    let s = TestServer::builder().yes().start().await;
    if lacks(
        s.get("/healthz").await.body["sandbox"]["landlock"]["available"] == true,
        Needs::Landlock(1),
    ) {
        return;
    }
    for revision in BOTH {
        let session = connect(&s, revision).await;
        let r = call(
            &session,
            "run_terminal_command",
            json!({"command": "touch ../escaped.txt; echo status=$?"}),
        )
        .await;
        let t = text(&r);
        assert!(t.contains("Permission denied"), "{revision:?}: {t}");
        assert!(!s.dir.path().join("escaped.txt").exists());
        let r = call(
            &session,
            "run_terminal_command",
            json!({"command": "echo inside > inside.txt && cat inside.txt"}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert!(text(&r).contains("inside"), "{}", text(&r));
        session.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_required_call_waits_for_a_good_retry_or_an_answer_in_v1_approvals() {
    use rmcp::model::CallToolResponse;
    let s = TestServer::builder().config(ASK_CREATE).start().await;
    let client = Client::new(Revision::Current).answering(ElicitationAction::Accept);
    let session = connect_as(&s, client).await;
    let first = params(
        "create_new_file",
        json!({"filepath": "retried.txt", "contents": "after the retry\n"}),
    );
    let Ok(CallToolResponse::InputRequired(asked)) = session.call_tool_once(first.clone()).await
    else {
        panic!("a 2026-07-28 client with elicitation gets input_required");
    };
    let state = asked.request_state.clone().expect("a request state");
    let question = serde_json::to_value(&asked.input_requests).unwrap();
    assert!(
        question.to_string().contains("create_new_file"),
        "{question}"
    );
    // The same call also waits in /v1/approvals.
    let pending = the_pending_call(&s).await;
    assert_eq!(pending["tool"], "create_new_file");

    let retry = |tool: &str, state: &str, answer: Value| {
        let mut p = params(tool, json!({"filepath": "retried.txt", "contents": "x"}));
        p.request_state = Some(state.to_string());
        p.input_responses = answer.as_object().map(|o| o.clone().into_iter().collect());
        p
    };
    let bad = [
        // Not an elicitation result.
        retry(
            "create_new_file",
            &state,
            json!({"toolpilot_approval": {"action": 5}}),
        ),
        // Another tool's retry, and a state nobody issued.
        retry(
            "read_file",
            &state,
            json!({"toolpilot_approval": {"action": "accept"}}),
        ),
        retry(
            "create_new_file",
            "0123",
            json!({"toolpilot_approval": {"action": "accept"}}),
        ),
    ];
    for p in bad {
        match session.call_tool_once(p).await {
            Err(ServiceError::McpError(e)) => {
                assert_eq!(
                    e.code,
                    rmcp::model::ErrorCode::INVALID_PARAMS,
                    "{}",
                    e.message
                )
            }
            other => panic!("a bad retry must be a JSON-RPC error: {other:?}"),
        }
    }
    assert!(!s.path("retried.txt").exists());
    // The call still waits; answered in /v1/approvals, the retry without an answer gets the
    // call's result.
    let id = the_pending_call(&s).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s
        .post_raw(
            &format!("/v1/approvals/{id}"),
            json!({"decision": "approve"}).to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let done = session
        .call_tool_once(retry("create_new_file", &state, json!(null)))
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("the retry gets the call's result");
    };
    assert!(!is_error(&result), "{}", text(&result));
    assert_eq!(
        std::fs::read_to_string(s.path("retried.txt")).unwrap(),
        "after the retry\n"
    );
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_bounded_and_the_current_revision_needs_none() {
    let s = TestServer::builder().start().await;
    let max = toolpilot::server::mcp::MAX_SESSIONS;
    let http = client();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    for i in 0..max {
        let r = http
            .post(s.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "session {i}");
        assert!(r.headers().contains_key("mcp-session-id"));
    }
    let r = raw_post(&s, &[]).await;
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many MCP sessions"),
        "{v}"
    );
    // A 2026-07-28 client has no session: it still works.
    let session = connect(&s, Revision::Current).await;
    assert!(!session.list_all_tools().await.unwrap().is_empty());
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolpilot_mcp_yes_approves_asks_but_not_protected_paths() {
    let mut server = StdioServer::start_with("", &[], "warn", &["--yes"]);
    let session = server.connect(Client::new(Revision::Current)).await;
    let r = call(
        &session,
        "create_new_file",
        json!({"filepath": "yes.txt", "contents": "ok\n"}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert!(server.path("yes.txt").exists());
    let r = call(
        &session,
        "create_new_file",
        json!({"filepath": "AGENTS.md", "contents": "x\n"}),
    )
    .await;
    assert!(is_error(&r), "{}", text(&r));
    assert!(!server.path("AGENTS.md").exists());
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolpilot_mcp_without_a_client_says_what_it_is_for() {
    let mut server = StdioServer::start("", &[], "warn");
    drop(server.child.stdin.take());
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        server.child.wait_with_output(),
    )
    .await
    .expect("toolpilot mcp did not exit when stdin closed")
    .unwrap();
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no MCP session was opened on stdin"), "{err}");
    assert!(err.contains("stdio MCP server"), "{err}");
}
