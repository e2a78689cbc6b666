//! The real clients, as they ship, against toolpilot and the mock upstream: the Codex CLI
//! (`codex exec`, the Responses API; also with toolpilot as its MCP server), the Continue CLI
//! (`cn -p`), the OpenAI Node SDK, the OpenAI Python SDK (chat and Responses) and
//! langchain-openai. `.ci/run` installs them at the versions pinned in
//! `tests/clients/package.json` and `tests/clients/requirements.txt` and sets
//! TOOLPILOT_REQUIRE_CLIENTS=1; without that, a missing client skips its test.
//!
//! Each runs both round trips: a call toolpilot runs (`read_file`, offered beside the client's
//! own tools by `server.augment`), and a call of the client's own tool that the client runs and
//! answers. With TOOLPILOT_CLIENT_SHAPES=DIR, each test also writes the shape of what its client
//! sent (`tests/clients/update-pins` compares them across versions).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

const CLIENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");

/// What the client's own tool reads, and toolpilot's `read_file` reads.
const CLIENT_FILE: &str = "the client ran this\n";
const SERVER_FILE: &str = "hello from the workspace\n";

/// A client program under `tests/clients/node_modules`, if installed.
fn installed(rel: &str) -> Option<PathBuf> {
    let p = Path::new(CLIENTS).join("node_modules").join(rel);
    if p.exists() {
        return Some(p);
    }
    missing(&format!("{} (npm ci --prefix tests/clients)", p.display()));
    None
}

fn missing(what: &str) {
    if std::env::var("TOOLPILOT_REQUIRE_CLIENTS").is_ok_and(|v| v == "1") {
        panic!(
            "the real-client tests are required (TOOLPILOT_REQUIRE_CLIENTS=1) but {what} is missing"
        );
    }
    eprintln!("skipping: {what} is missing (see .ci/run)");
}

/// The Python interpreter with `openai` and `langchain_openai`, if any.
fn python() -> Option<String> {
    let py = std::env::var("TOOLPILOT_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&py)
        .args(["-c", "import openai, langchain_openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        missing(&format!("a Python with openai and langchain-openai ({py})"));
        return None;
    }
    Some(py)
}

/// The mock model's script for one conversation: `read_file` (run by toolpilot), then the
/// client's tool, then the answer.
fn round_trip(client_tool: &str, args: Value, answer: &str) -> Vec<Value> {
    vec![
        json!({"tool_calls": [{"id": "srv_1", "name": "read_file",
                               "arguments": {"filepath": "hello.txt"}}]}),
        json!({"tool_calls": [{"id": "cli_1", "name": client_tool, "arguments": args}]}),
        json!({"text": answer, "chunk_size": 5}),
    ]
}

async fn server(rounds: Vec<Value>, config: &str) -> TestServer {
    TestServer::builder()
        .file("hello.txt", SERVER_FILE)
        .file("client.txt", CLIENT_FILE)
        .script(json!({"models": ["mock-model"], "rounds": rounds}))
        .config(&format!("[server]\naugment = [\"read_file\"]\n{config}"))
        .start()
        .await
}

/// Checks the conversation `n` (three upstream requests from `first`): toolpilot ran
/// `read_file` and the model saw its result, and the client's answer to its own call reached
/// the model, containing `client_said`.
fn check_round_trips(s: &TestServer, first: usize, client_said: &str) {
    let reqs = s.requests();
    assert!(reqs.len() >= first + 3, "{} upstream requests", reqs.len());
    check_conversation_invariants(&reqs);
    let offered: Vec<&str> = reqs[first].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"read_file"), "{offered:?}");
    assert_eq!(tool_result(&reqs[first + 1], "srv_1"), SERVER_FILE);
    let answered = tool_result(&reqs[first + 2], "cli_1");
    assert!(answered.contains(client_said), "{answered:?}");
}

/// Writes what the client sent toolpilot, reduced to its shape, when TOOLPILOT_CLIENT_SHAPES
/// names a folder (for `tests/clients/update-pins`).
fn record_shape(name: &str, rec: &tempfile::TempDir) {
    let Ok(dir) = std::env::var("TOOLPILOT_CLIENT_SHAPES") else {
        return;
    };
    let sent: Vec<Value> = std::fs::read_to_string(rec.path().join("inbound.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let shape = toolpilot::server::record::shape_of_requests(&sent);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        Path::new(&dir).join(format!("{name}.json")),
        serde_json::to_string_pretty(&shape).unwrap() + "\n",
    )
    .unwrap();
}

/// The configuration that records what clients send into `rec`, for [`record_shape`].
fn recording(rec: &tempfile::TempDir) -> String {
    if std::env::var("TOOLPILOT_CLIENT_SHAPES").is_ok() {
        format!(
            "record_requests = {:?}\n",
            rec.path().join("inbound.jsonl").display().to_string()
        )
    } else {
        String::new()
    }
}

async fn run(mut cmd: tokio::process::Command, what: &str) -> (String, String) {
    cmd.stdin(std::process::Stdio::null()).kill_on_drop(true);
    // A bound on a hung client, not a timing assumption: every answer comes from the mock.
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within 180 s"))
        .unwrap_or_else(|e| panic!("{what} could not be started: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// `codex exec --json` with `prompt`, in the workspace, with its own `CODEX_HOME` (which holds
/// the config pointing it at toolpilot) and home folder, and no OpenAI key or URL from this
/// environment; its stdout (the JSON events).
async fn codex_exec(codex: &Path, s: &TestServer, codex_home: &Path, prompt: &str) -> String {
    let mut cmd = tokio::process::Command::new(codex);
    cmd.args([
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--sandbox",
        "danger-full-access",
        prompt,
    ])
    .current_dir(&s.ws)
    .env("CODEX_HOME", codex_home)
    .env("HOME", home(s, "home"))
    .env("NO_PROXY", "127.0.0.1")
    .env_remove("OPENAI_API_KEY")
    .env_remove("OPENAI_BASE_URL");
    run(cmd, "codex exec").await.0
}

/// A folder for a client's own files (its home, its configuration), in the test server's
/// temporary folder, so nothing outlives the test.
/// `cn -p --auto` (Continue's CLI, headless) with `prompt`, in the workspace, with
/// `config_yaml` as its configuration and its own home folder, telemetry off; its stdout.
async fn cn_print(cn: &Path, s: &TestServer, config_yaml: &str, prompt: &str) -> String {
    let home_dir = home(s, "home");
    let config = home_dir.join("config.yaml");
    std::fs::write(&config, config_yaml).unwrap();
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(cn)
        .args(["-p", "--auto", "--config"])
        .arg(&config)
        .arg(prompt)
        .current_dir(&s.ws)
        .env("HOME", &home_dir)
        .env("CONTINUE_GLOBAL_DIR", home_dir.join(".continue"))
        .env("CONTINUE_CLI_ENABLE_TELEMETRY", "0")
        .env("CONTINUE_METRICS_ENABLED", "0")
        .env("NO_PROXY", "127.0.0.1");
    run(cmd, "cn -p").await.0
}

fn home(s: &TestServer, name: &str) -> PathBuf {
    let p = s.dir.path().join(name);
    std::fs::create_dir_all(&p).unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_runs_a_server_tool_its_own_tool_and_a_namespaced_tool() {
    let Some(codex) = installed(".bin/codex") else {
        return;
    };
    let mut rounds = round_trip("exec_command", json!({"cmd": "cat client.txt"}), "");
    rounds.pop();
    // Codex 0.169 declares its sub-agent tools in a `namespace`: a call of one goes back with
    // its namespace, and Codex's own handler answers it (here: no such agent).
    rounds.push(
        json!({"tool_calls": [{"id": "ns_1", "name": "multi_agent_v1__wait_agent",
                                       "arguments": {"targets": ["nobody"], "timeout_ms": 1000}}]}),
    );
    rounds.push(json!({"text": "Codex is done.", "chunk_size": 5}));
    let rec = tempfile::tempdir().unwrap();
    let s = server(rounds, &recording(&rec)).await;
    let codex_home = home(&s, "codex-home");
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"mock-model\"\nmodel_provider = \"toolpilot\"\n\
             [model_providers.toolpilot]\nname = \"toolpilot\"\nbase_url = {:?}\n\
             wire_api = \"responses\"\n",
            s.url("/v1")
        ),
    )
    .unwrap();
    let stdout = codex_exec(&codex, &s, &codex_home, "What do the files say?").await;
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let items: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "item.completed")
        .map(|e| &e["item"])
        .collect();
    let ran = items
        .iter()
        .find(|i| i["type"] == "command_execution")
        .unwrap_or_else(|| panic!("Codex ran no command: {stdout}"));
    assert_eq!(ran["aggregated_output"], CLIENT_FILE, "{ran}");
    assert!(
        items
            .iter()
            .any(|i| i["type"] == "agent_message" && i["text"] == "Codex is done."),
        "{stdout}"
    );
    check_round_trips(&s, 0, CLIENT_FILE.trim());
    let reqs = s.requests();
    let answered = tool_result(&reqs[3], "ns_1");
    assert!(answered.contains("nobody"), "{answered:?}");
    record_shape("codex", &rec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_cli_runs_a_server_tool_and_its_own_tool() {
    let Some(cn) = installed("@continuedev/cli/dist/cn.js") else {
        return;
    };
    let rec = tempfile::tempdir().unwrap();
    let s = server(
        round_trip("Bash", json!({"command": "cat client.txt"}), "cn is done."),
        &recording(&rec),
    )
    .await;
    let config = format!(
        "name: toolpilot\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: toolpilot\n    \
         provider: openai\n    model: mock-model\n    apiBase: {}\n    apiKey: unused\n    \
         roles: [chat]\n    capabilities: [tool_use]\n",
        s.url("/v1")
    );
    let stdout = cn_print(&cn, &s, &config, "What do the files say?").await;
    assert_eq!(stdout.trim(), "cn is done.");
    check_round_trips(&s, 0, CLIENT_FILE.trim());
    record_shape("continue-cli", &rec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_node_sdk_runs_both_round_trips_in_chat_and_responses() {
    let Some(_) = installed("openai/package.json") else {
        return;
    };
    let args = json!({"city": "Paris"});
    let mut rounds = round_trip("lookup_weather", args.clone(), "chat: sunny");
    rounds.extend(round_trip("lookup_weather", args, "responses: sunny"));
    let rec = tempfile::tempdir().unwrap();
    let s = server(rounds, &recording(&rec)).await;
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(Path::new(CLIENTS).join("node_sdk.mjs"))
        .arg(s.url("/v1"))
        .env("NO_PROXY", "127.0.0.1");
    let (stdout, _) = run(cmd, "the Node SDK script").await;
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    eprintln!("openai (Node) {}", v["version"]);
    assert_eq!(
        v["chat"],
        json!({"answer": "chat: sunny", "ran": ["sunny in Paris"], "finish": "stop"})
    );
    assert_eq!(
        v["responses"],
        json!({"answer": "responses: sunny", "ran": ["sunny in Paris"], "status": "completed"})
    );
    check_round_trips(&s, 0, "sunny in Paris");
    check_round_trips(&s, 3, "sunny in Paris");
    record_shape("openai-node", &rec);
}

/// Runs `tests/clients/py_clients.py MODE` against a fresh server; checks both round trips.
async fn python_client(mode: &str) -> Option<Value> {
    let py = python()?;
    let rec = tempfile::tempdir().unwrap();
    let answer = format!("{mode}: sunny");
    let s = server(
        round_trip("lookup_weather", json!({"city": "Paris"}), &answer),
        &recording(&rec),
    )
    .await;
    let mut cmd = tokio::process::Command::new(py);
    cmd.arg(Path::new(CLIENTS).join("py_clients.py"))
        .args([mode, &s.url("/v1")])
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("OPENAI_API_KEY");
    let (stdout, _) = run(cmd, &format!("py_clients.py {mode}")).await;
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    eprintln!("{mode}: {}", v["version"]);
    assert_eq!(v["answer"], answer.as_str(), "{v}");
    assert_eq!(v["ran"], json!(["sunny in Paris"]));
    check_round_trips(&s, 0, "sunny in Paris");
    record_shape(&format!("python-{mode}"), &rec);
    Some(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_runs_both_round_trips_in_chat() {
    if let Some(v) = python_client("chat").await {
        assert_eq!(v["finish"], "stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_runs_both_round_trips_in_responses() {
    if let Some(v) = python_client("responses").await {
        assert_eq!(v["status"], "completed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langchain_openai_runs_both_round_trips() {
    python_client("langchain").await;
}

/// Codex configured with toolpilot as its MCP server (`[mcp_servers.toolpilot] url = …/mcp`)
/// and its model behind toolpilot's Responses endpoint: the model calls toolpilot's tools
/// through Codex's MCP client (`mcp__toolpilot__…`), and they really run in the workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_uses_toolpilot_as_its_mcp_server() {
    codex_with_toolpilot_mcp(|s| format!("url = {:?}\n", s.url("/mcp"))).await;
}

/// The same with `toolpilot mcp` as a process Codex starts (`command`, `args`), over the test
/// server's configuration and state folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_uses_toolpilot_mcp_on_stdio() {
    codex_with_toolpilot_mcp(|s| {
        let args = [
            "mcp".to_string(),
            "--workspace".into(),
            s.ws.display().to_string(),
            "--config".into(),
            s.dir.path().join("toolpilot.toml").display().to_string(),
            "--state-dir".into(),
            s.dir.path().join("state").display().to_string(),
        ];
        format!(
            "command = {:?}\nargs = {}\n",
            env!("CARGO_BIN_EXE_toolpilot"),
            serde_json::to_string(&args).unwrap()
        )
    })
    .await;
}

/// Codex with `[mcp_servers.toolpilot]` set to `server(s)`: a read, an allowed write and a
/// denied read through toolpilot's MCP tools.
async fn codex_with_toolpilot_mcp(server: impl Fn(&TestServer) -> String) {
    let Some(codex) = installed(".bin/codex") else {
        return;
    };
    let rounds = vec![
        json!({"tool_calls": [{"id": "mcp_1", "name": "mcp__toolpilot__read_file",
                               "arguments": {"filepath": "hello.txt"}}]}),
        json!({"tool_calls": [{"id": "mcp_2", "name": "mcp__toolpilot__create_new_file",
                               "arguments": {"filepath": "from-codex.txt",
                                             "contents": "written through MCP\n"}}]}),
        json!({"tool_calls": [{"id": "mcp_3", "name": "mcp__toolpilot__read_file",
                               "arguments": {"filepath": "drafts/plan.txt"}}]}),
        json!({"text": "Codex is done.", "chunk_size": 5}),
    ];
    let s = TestServer::builder()
        .file("hello.txt", SERVER_FILE)
        .file("drafts/plan.txt", "secret plan\n")
        .script(json!({"models": ["mock-model"], "rounds": rounds}))
        .config(
            "[policy]\nallow = [\"create_new_file(from-codex.txt)\"]\n\
             deny = [\"read_file(drafts/**)\"]\n",
        )
        .start()
        .await;
    let codex_home = home(&s, "codex-home");
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"mock-model\"\nmodel_provider = \"toolpilot\"\n\
             [model_providers.toolpilot]\nname = \"toolpilot\"\nbase_url = {:?}\n\
             wire_api = \"responses\"\n\
             [mcp_servers.toolpilot]\n{}",
            s.url("/v1"),
            server(&s)
        ),
    )
    .unwrap();
    let stdout = codex_exec(
        &codex,
        &s,
        &codex_home,
        "Use toolpilot to read hello.txt and write from-codex.txt.",
    )
    .await;
    let reqs = s.requests();
    check_conversation_invariants(&reqs);
    // Codex listed toolpilot's tools over MCP and offered them to its model.
    let offered: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    for name in [
        "mcp__toolpilot__read_file",
        "mcp__toolpilot__run_terminal_command",
    ] {
        assert!(offered.contains(&name), "{offered:?}");
    }
    assert!(
        reqs.len() >= 4,
        "{} upstream requests: {stdout}",
        reqs.len()
    );
    // The read ran in toolpilot and its result went back through Codex to the model.
    let read = tool_result(&reqs[1], "mcp_1");
    assert!(read.contains(SERVER_FILE.trim()), "{read:?}\n{stdout}");
    // The write really happened, under the policy's allow rule.
    assert_eq!(
        std::fs::read_to_string(s.ws.join("from-codex.txt")).unwrap(),
        "written through MCP\n",
        "{stdout}"
    );
    // A denied call reached the model as an error that says why, and read nothing.
    let denied = tool_result(&reqs[3], "mcp_3");
    assert!(denied.contains("permission policy refuses"), "{denied:?}");
    assert!(!denied.contains("secret plan"), "{denied:?}");
    let completed: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "item.completed")
        .map(|e| e["item"].clone())
        .collect();
    assert!(
        completed
            .iter()
            .any(|i| i["type"] == "mcp_tool_call" && i["server"] == "toolpilot"),
        "{stdout}"
    );
    assert!(
        completed
            .iter()
            .any(|i| i["type"] == "agent_message" && i["text"] == "Codex is done."),
        "{stdout}"
    );
}

/// The Continue CLI with toolpilot as its MCP server (`mcpServers: type: streamable-http`).
/// `cn` offers the MCP tools under their own names, which are toolpilot's built-in names: its
/// model is a plain one (`plain/…`: toolpilot runs nothing in the chat loop), so every call
/// goes back to `cn`, which makes it over MCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_cli_uses_toolpilot_as_its_mcp_server() {
    let Some(cn) = installed("@continuedev/cli/dist/cn.js") else {
        return;
    };
    let rounds = vec![
        json!({"tool_calls": [{"id": "mcp_1", "name": "read_file",
                               "arguments": {"filepath": "hello.txt"}}]}),
        json!({"tool_calls": [{"id": "mcp_2", "name": "create_new_file",
                               "arguments": {"filepath": "from-cn.txt",
                                             "contents": "written through MCP\n"}}]}),
        json!({"text": "cn is done."}),
    ];
    let s = TestServer::builder()
        .file("hello.txt", SERVER_FILE)
        .script(json!({"models": ["mock-model"], "rounds": rounds}))
        .config("[policy]\nallow = [\"create_new_file(from-cn.txt)\"]\n")
        .start()
        .await;
    let config = format!(
        "name: toolpilot\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: toolpilot\n    \
         provider: openai\n    model: plain/mock-model\n    apiBase: {}\n    \
         apiKey: unused\n    roles: [chat]\n    capabilities: [tool_use]\n\
         mcpServers:\n  - name: toolpilot\n    type: streamable-http\n    url: {}\n",
        s.url("/v1"),
        s.url("/mcp")
    );
    let stdout = cn_print(&cn, &s, &config, "Read hello.txt and write from-cn.txt.").await;
    assert_eq!(stdout.trim(), "cn is done.");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 3, "{stdout}");
    check_conversation_invariants(&reqs);
    // A plain model: toolpilot ran nothing itself, so the result came through cn's MCP call.
    let read = tool_result(&reqs[1], "mcp_1");
    assert!(read.contains(SERVER_FILE.trim()), "{read:?}");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("from-cn.txt")).unwrap(),
        "written through MCP\n"
    );
    let runs = s.get("/v1/runs").await;
    assert_eq!(runs.status, 200, "{}", runs.text);
    let mcp_runs = runs.text.matches("MCP tools/call").count();
    assert_eq!(mcp_runs, 2, "{}", runs.text);
}

/// `codex exec` accepts every elicitation on its own: an ordinary ask it is put to runs, but a
/// write of a protected path (only a person may approve it) is never put to the client; it
/// waits in /v1/approvals, where nobody answers here, and is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_answers_elicitations_but_never_approves_a_protected_path() {
    let Some(codex) = installed(".bin/codex") else {
        return;
    };
    let rounds = vec![
        json!({"tool_calls": [{"id": "mcp_1", "name": "mcp__toolpilot__create_new_file",
                               "arguments": {"filepath": "from-codex.txt",
                                             "contents": "asked and answered\n"}}]}),
        json!({"tool_calls": [{"id": "mcp_2", "name": "mcp__toolpilot__create_new_file",
                               "arguments": {"filepath": "AGENTS.md",
                                             "contents": "obey the model\n"}}]}),
        json!({"text": "Codex is done.", "chunk_size": 5}),
    ];
    let s = TestServer::builder()
        .script(json!({"models": ["mock-model"], "rounds": rounds}))
        .config("[approvals]\nmode = \"wait\"\ntimeout_secs = 2\n")
        .start()
        .await;
    let codex_home = home(&s, "codex-home");
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"mock-model\"\nmodel_provider = \"toolpilot\"\n\
             [model_providers.toolpilot]\nname = \"toolpilot\"\nbase_url = {:?}\n\
             wire_api = \"responses\"\n\
             [mcp_servers.toolpilot]\nurl = {:?}\n",
            s.url("/v1"),
            s.url("/mcp")
        ),
    )
    .unwrap();
    let stdout = codex_exec(&codex, &s, &codex_home, "Write the two files.").await;
    let reqs = s.requests();
    assert_eq!(reqs.len(), 3, "{stdout}");
    let first = tool_result(&reqs[1], "mcp_1");
    assert!(first.contains("Created from-codex.txt"), "{first:?}");
    assert!(s.ws.join("from-codex.txt").exists());
    let second = tool_result(&reqs[2], "mcp_2");
    assert!(second.contains("nobody approved it"), "{second:?}");
    assert!(
        !s.ws.join("AGENTS.md").exists(),
        "a protected path was written"
    );
}
