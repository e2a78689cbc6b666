//! Runs as recorded: `GET /v1/runs`, a run's events (and following them live), `/metrics`, and
//! `toolpilot runs` on the command line.

use serde_json::{Value, json};

use crate::support::*;

fn loop_script() -> Value {
    json!({"rounds": [
        {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "a.txt"}}],
         "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}},
        {"text": "It says hi.", "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}}
    ]})
}

async fn server(config: &str, script: Value) -> TestServer {
    TestServer::builder()
        .config(config)
        .file("a.txt", "hi\n")
        .file("src/gen/out.rs", "// generated\n")
        .script(script)
        .start()
        .await
}

fn run_id(r: &Reply) -> String {
    r.headers["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string()
}

fn types(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_listed_with_its_events() {
    let s = server("", loop_script()).await;
    let r = s.chat(ask("what does a.txt say?")).await;
    let id = run_id(&r);
    let list = s.get("/v1/runs").await;
    let first = &list.body["data"][0];
    assert_eq!(first["id"], id.as_str());
    assert_eq!(first["status"], "done");
    assert_eq!(first["rounds"], 2);
    assert_eq!(first["tool_calls"], 1);
    assert_eq!(first["prompt_tokens"], 30);
    assert_eq!(first["completion_tokens"], 6);
    assert_eq!(first["prompt"], "what does a.txt say?");
    assert!(first["ended_ms"].as_u64().unwrap() >= first["started_ms"].as_u64().unwrap());

    let one = s.get(&format!("/v1/runs/{id}")).await;
    assert_eq!(one.status, 200, "{}", one.text);
    assert_eq!(
        types(&one.body["events"]),
        ["request", "round", "tool_started", "tool", "round", "done"]
    );
    let ev = one.body["events"].as_array().unwrap();
    assert_eq!(ev[1]["tool_calls"], json!(["read_file"]));
    assert_eq!(ev[2]["arguments"], "{\"filepath\":\"a.txt\"}");
    assert_eq!(ev[3]["status"], "ok");
    assert_eq!(ev[3]["result_bytes"], 3);
    assert_eq!(ev[5]["usage"]["total_tokens"], 36);

    let missing = s.get("/v1/runs/nope").await;
    assert_eq!(missing.status, 404);
    assert!(
        missing.text.contains("there is no run with the id"),
        "{}",
        missing.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_rounds_tools_and_errors() {
    let script = json!({"rounds": [
        {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "a.txt"}},
                        {"id": "c2", "name": "read_file", "arguments": {"filepath": "missing.txt"}}]},
        {"text": "ok"},
        {"status": 500, "error": "backend exploded"}
    ]});
    let s = server("[upstream]\nmax_retries = 0\n", script).await;
    let ok = s.chat_stream(ask("one")).await;
    assert!(ok.done_last);
    let failed = s.chat(ask("two")).await;
    assert_eq!(failed.status, 502);
    let m = s.get("/metrics").await;
    assert_eq!(m.status, 200);
    assert!(
        m.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    for line in [
        "toolpilot_requests_total{stream=\"false\"} 1",
        "toolpilot_requests_total{stream=\"true\"} 1",
        "toolpilot_runs_total{outcome=\"done\"} 1",
        "toolpilot_runs_total{outcome=\"failed\"} 1",
        "toolpilot_upstream_rounds_total 2",
        "toolpilot_upstream_errors_total{kind=\"http_500\"} 1",
        "toolpilot_tool_calls_total{tool=\"read_file\",status=\"ok\"} 1",
        "toolpilot_tool_calls_total{tool=\"read_file\",status=\"error\"} 1",
        "toolpilot_tool_duration_seconds_count 2",
        "toolpilot_run_duration_seconds_count 2",
        "toolpilot_pending_approvals 0",
    ] {
        assert!(
            m.text.lines().any(|l| l == line),
            "missing {line:?} in\n{}",
            m.text
        );
    }
    let runs = s.get("/v1/runs").await;
    let newest = &runs.body["data"][0];
    assert_eq!(newest["status"], "failed");
    assert!(
        newest["error"]
            .as_str()
            .unwrap()
            .contains("backend exploded"),
        "{newest}"
    );
}

/// Following a run by id while it runs: the events so far, then live ones, then the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_run_can_be_followed_by_id() {
    let s = server(
        "[policy]\nask = [\"read_file(src/gen/**)\"]\n[approvals]\nmode = \"wait\"\ntimeout_secs = 30\n",
        json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "src/gen/out.rs"}}]},
            {"text": "done"}
        ]}),
    )
    .await;
    let chat = s.open_stream(ask("read the generated file")).await;
    let id = chat.headers()["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    let mut follow = s
        .client
        .get(s.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(follow.status(), 200);
    let mut seen = String::new();
    while !seen.contains("\"outcome\":\"waiting\"") {
        let chunk = follow.chunk().await.unwrap().expect("ended early");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.starts_with("data: {"), "{seen}");
    assert!(seen.contains("\"type\":\"request\""));
    let pending = s.get("/v1/approvals").await.body["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    s.post_raw(
        &format!("/v1/approvals/{pending}"),
        json!({"decision": "approve"}).to_string(),
    )
    .await;
    let rest = follow.text().await.unwrap();
    assert!(rest.contains("\"outcome\":\"approved\""), "{rest}");
    assert!(rest.contains("\"type\":\"done\""), "{rest}");
    assert!(rest.ends_with("event: end\ndata: {}\n\n"), "{rest}");
    drop(chat);
    // A finished run replays its events and ends.
    let again = s
        .client
        .get(s.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(again.contains("\"type\":\"done\"") && again.ends_with("event: end\ndata: {}\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_marks_the_run_cancelled() {
    let s = server(
        "[policy]\nask = [\"read_file(src/gen/**)\"]\n[approvals]\nmode = \"wait\"\ntimeout_secs = 30\n",
        json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "src/gen/out.rs"}}]},
            {"text": "done"}
        ]}),
    )
    .await;
    let chat = s.open_stream(ask("x")).await;
    let id = chat.headers()["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        eventually_async(|| async {
            !s.get("/v1/approvals").await.body["data"]
                .as_array()
                .unwrap()
                .is_empty()
        })
        .await
    );
    drop(chat);
    assert!(
        eventually_async(|| async {
            s.get(&format!("/v1/runs/{id}")).await.body["run"]["status"] == "cancelled"
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_lists_and_shows_recorded_runs() {
    let s = server("", loop_script()).await;
    let id = run_id(&s.chat(ask("what does a.txt say?")).await);
    let bin = env!("CARGO_BIN_EXE_toolpilot");
    let state = s.dir.path().join("state");
    let cli = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(args)
            .arg("--workspace")
            .arg(&s.ws)
            .arg("--state-dir")
            .arg(&state)
            .env_remove("TOOLPILOT_CONFIG")
            .output()
            .unwrap()
    };
    // The recorder writes off the request path: wait for the run's end to reach the file.
    assert!(
        eventually(|| {
            let out = cli(&["runs", "--json"]);
            String::from_utf8_lossy(&out.stdout).contains("\"status\": \"done\"")
        })
        .await
    );
    let out = cli(&["runs"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains("done") && row.contains("what does a.txt say?"),
        "{row}"
    );

    let out = cli(&["runs", "show", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("run {id}  done")), "{text}");
    assert!(text.contains("read_file ok in"), "{text}");
    assert!(text.contains("round 2:"), "{text}");

    let out = cli(&["runs", "show", "nope"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no run \"nope\" is recorded"));
}

const WAITING: &str = "[policy]\nask = [\"read_file(src/gen/**)\"]\n[approvals]\nmode = \"wait\"\ntimeout_secs = 30\n";

fn text_then_ask() -> Value {
    json!({"rounds": [
        {"text": "Working on it.", "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "src/gen/out.rs"}}]},
        {"text": "done"}
    ], "repeat_last": false})
}

async fn open_detached(s: &TestServer) -> (reqwest::Response, String) {
    let r = s
        .client
        .post(s.url("/v1/chat/completions"))
        .header("x-toolpilot-detach", "true")
        .body(json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "read it"}]}).to_string())
        .send()
        .await
        .unwrap();
    let id = r.headers()["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    (r, id)
}

async fn wait_for_approval(s: &TestServer) -> String {
    for _ in 0..200 {
        if let Some(id) = s.get("/v1/approvals").await.body["data"][0]["id"].as_str() {
            return id.to_string();
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("nothing waited for approval");
}

/// A detached run goes on after its client leaves; re-attaching replays the whole answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_run_outlives_its_client_and_can_be_re_attached() {
    let s = server(WAITING, text_then_ask()).await;
    let (mut first, id) = open_detached(&s).await;
    let mut seen = String::new();
    while !seen.contains("waiting for approval") {
        let chunk = first.chunk().await.unwrap().expect("ended early");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(first);
    // The client is gone, the run is not: its call still waits and can be approved.
    let approval = wait_for_approval(&s).await;
    let r = s
        .post_raw(
            &format!("/v1/approvals/{approval}"),
            json!({"decision": "approve"}).to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let again = s
        .client
        .get(s.url(&format!("/v1/runs/{id}/attach")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    let reply = parse_sse(200, again.headers().clone(), again.text().await.unwrap());
    assert!(reply.done_last);
    assert_eq!(reply.content(), "Working on it.\n\ndone");
    assert_eq!(tool_result(&s.requests()[1], "c1"), "// generated\n");
    // Also as one completion, after the end.
    let whole = s.get(&format!("/v1/runs/{id}/attach?stream=false")).await;
    assert_eq!(
        whole.body["choices"][0]["message"]["content"],
        "Working on it.\n\ndone"
    );
    assert_eq!(
        s.get(&format!("/v1/runs/{id}")).await.body["run"]["status"],
        "done"
    );

    let nope = s.get("/v1/runs/nope/attach").await;
    assert_eq!(nope.status, 404);
    assert!(
        nope.text.contains("only runs started with the header"),
        "{}",
        nope.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_run_can_be_cancelled() {
    let s = server(WAITING, text_then_ask()).await;
    let (first, id) = open_detached(&s).await;
    drop(first);
    wait_for_approval(&s).await;
    let attached = s
        .client
        .get(s.url(&format!("/v1/runs/{id}/attach")))
        .send()
        .await
        .unwrap();
    let r = s.post_raw(&format!("/v1/runs/{id}/cancel"), "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reply = parse_sse(
        200,
        attached.headers().clone(),
        attached.text().await.unwrap(),
    );
    assert!(
        reply
            .error_message()
            .unwrap_or_default()
            .contains("the run was cancelled"),
        "{}",
        reply.raw
    );
    assert!(
        eventually_async(|| async {
            s.get(&format!("/v1/runs/{id}")).await.body["run"]["status"] == "cancelled"
                && s.get("/v1/approvals").await.body["data"] == json!([])
        })
        .await
    );
    assert_eq!(
        s.post_raw(&format!("/v1/runs/{id}/cancel"), "")
            .await
            .status,
        404
    );
}

/// With `server.detach = true` every run outlives its client, unless the request says
/// `x-toolpilot-detach: false`; a value that is neither is refused before anything runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detaching_is_a_server_default_a_request_can_turn_off() {
    let config = format!("[server]\ndetach = true\n{WAITING}");
    // Two runs ask for the same call: the rounds of `text_then_ask`, twice.
    let mut script = text_then_ask();
    let rounds = script["rounds"].as_array().unwrap().clone();
    script["rounds"].as_array_mut().unwrap().extend(rounds);
    let s = server(&config, script).await;
    let body =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "read it"}]})
            .to_string();
    // No header: detached by the config.
    let first = s
        .client
        .post(s.url("/v1/chat/completions"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    let id = first.headers()["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    drop(first);
    let approval = wait_for_approval(&s).await;
    let r = s
        .post_raw(
            &format!("/v1/approvals/{approval}"),
            json!({"decision": "approve"}).to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let whole = s.get(&format!("/v1/runs/{id}/attach?stream=false")).await;
    assert_eq!(
        whole.body["choices"][0]["message"]["content"],
        "Working on it.\n\ndone"
    );

    // A bad header value: 400 naming the header, and no run started.
    let runs_before = s.get("/v1/runs").await.body["data"]
        .as_array()
        .unwrap()
        .len();
    let bad = s
        .client
        .post(s.url("/v1/chat/completions"))
        .header("x-toolpilot-detach", "maybe")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let err: Value = serde_json::from_str(&bad.text().await.unwrap()).unwrap();
    assert_eq!(err["error"]["param"], "x-toolpilot-detach");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("must be \"true\""),
        "{err}"
    );
    assert_eq!(
        s.get("/v1/runs").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        runs_before
    );

    // `false` opts out: the run belongs to its connection and ends with it.
    let attached = s
        .client
        .post(s.url("/v1/chat/completions"))
        .header("x-toolpilot-detach", "false")
        .body(body)
        .send()
        .await
        .unwrap();
    let id2 = attached.headers()["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    wait_for_approval(&s).await;
    drop(attached);
    assert!(
        eventually_async(|| async {
            s.get(&format!("/v1/runs/{id2}")).await.body["run"]["status"] == "cancelled"
        })
        .await
    );
    assert_eq!(s.get(&format!("/v1/runs/{id2}/attach")).await.status, 404);
}
