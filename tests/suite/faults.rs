//! Every fault ends honestly (issue 17): hostile paths, broken upstream streams, long rate
//! limits, loops, malformed calls. Each test drives the real server over HTTP.

use serde_json::{Value, json};

use crate::support::*;

/// The ways an upstream stream breaks after part of the answer was sent, with the status a
/// non-streamed request gets and words of the error.
fn broken_streams() -> Vec<(&'static str, Value, u16, &'static str)> {
    let text_chunk = |t: &str| {
        format!(
            "data: {}\n\n",
            json!({"id": "x", "object": "chat.completion.chunk", "model": "mock-model",
                   "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": null}]})
        )
    };
    vec![
        (
            "cut without finish_reason or [DONE]",
            json!({"text": "partial answer", "chunk_size": 4, "truncate_after": 3}),
            502,
            "without a finish_reason or [DONE]",
        ),
        (
            "a line of invalid JSON",
            json!({"raw": [text_chunk("partial "), "data: {\"choices\": [{\"delta\": \n\n",
                           text_chunk("more"), "data: [DONE]\n\n"]}),
            502,
            "not JSON",
        ),
        (
            "a stall longer than the idle timeout",
            json!({"text": "partial answer", "chunk_size": 4, "hold_after": 3}),
            504,
            "did not send the next part of its answer within 2 s",
        ),
        (
            "an error object mid-stream",
            json!({"text": "partial answer", "chunk_size": 4,
                   "error_after": {"chunks": 3, "message": "GPU on fire"}}),
            502,
            "GPU on fire",
        ),
    ]
}

/// A server whose upstream answers `round` every time, without retries. The idle timeout is
/// 2 s for the stall (which holds until released) and a minute for the other shapes, so a slow
/// machine never turns one shape into another.
async fn broken_server(round: &Value) -> TestServer {
    let idle = if round.get("hold_after").is_some() {
        2
    } else {
        60
    };
    TestServer::builder()
        .config(&format!(
            "[upstream]\nmax_retries = 0\nidle_timeout_secs = {idle}\n"
        ))
        .script(json!({"repeat_last": true, "rounds": [round]}))
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_chat_stream_ends_with_an_error_event_and_no_done() {
    for (shape, round, status, words) in broken_streams() {
        let s = broken_server(&round).await;
        let st = s.chat_stream(ask("x")).await;
        assert_eq!(st.status, 200, "{shape}");
        assert!(
            st.content().starts_with("partial"),
            "{shape}: the partial text reached the client first: {}",
            st.raw
        );
        let err = st
            .error_message()
            .unwrap_or_else(|| panic!("{shape}: no error event in {}", st.raw));
        assert!(err.contains(words), "{shape}: {err}");
        let last = st.chunks.last().unwrap();
        assert!(
            last["error"]["type"].is_string() && last["error"].get("code").is_some(),
            "{shape}: the error event is in OpenAI's shape: {last}"
        );
        assert!(
            !st.done,
            "{shape}: a broken stream ended with [DONE]: {}",
            st.raw
        );
        assert!(st.finish_reason().is_none(), "{shape}: {}", st.raw);
        assert_eq!(
            s.requests().len(),
            1,
            "{shape}: retried after text was sent"
        );
        s.mock().release();

        // Not streamed: nothing reached the client, so the failure is the response status.
        let s = broken_server(&round).await;
        let r = s.chat(ask("x")).await;
        assert_eq!(r.status, status, "{shape}: {}", r.text);
        assert!(
            r.body["error"]["message"].as_str().unwrap().contains(words),
            "{shape}: {}",
            r.text
        );
        s.mock().release();
    }
}

/// `(event, data)` of a Responses event stream.
fn responses_events(raw: &str) -> Vec<(String, Value)> {
    raw.split("\n\n")
        .map(|b| b.trim_matches('\n'))
        .filter(|b| !b.is_empty() && !b.starts_with(':'))
        .map(|b| {
            let (ev, data) = b.split_once('\n').unwrap();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            (ev.strip_prefix("event: ").unwrap().to_string(), data)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_responses_stream_ends_with_response_failed() {
    for (shape, round, status, words) in broken_streams() {
        let s = broken_server(&round).await;
        let r = s
            .client
            .post(s.url("/v1/responses"))
            .body(json!({"model": "mock-model", "input": "x", "stream": true}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{shape}");
        let raw = r.text().await.unwrap();
        let events = responses_events(&raw);
        let text: String = events
            .iter()
            .filter(|(t, _)| t == "response.output_text.delta")
            .map(|(_, d)| d["delta"].as_str().unwrap())
            .collect();
        assert!(text.starts_with("partial"), "{shape}: {raw}");
        let (last, data) = events.last().unwrap();
        assert_eq!(last, "response.failed", "{shape}: {raw}");
        assert_eq!(data["response"]["status"], "failed", "{shape}");
        let message = data["response"]["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{shape}: {message}");
        assert!(
            !events.iter().any(|(t, _)| t == "response.completed"),
            "{shape}: {raw}"
        );
        s.mock().release();

        let s = broken_server(&round).await;
        let r = s
            .client
            .post(s.url("/v1/responses"))
            .body(json!({"model": "mock-model", "input": "x"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{shape}");
        let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        assert!(
            body["error"]["message"].as_str().unwrap().contains(words),
            "{shape}: {body}"
        );
        s.mock().release();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_longer_than_the_maximum_wait_is_passed_on_at_once() {
    let s = TestServer::builder()
        .config("[upstream]\nmax_retries = 3\nretry_max_wait_secs = 20\n")
        .script(json!({"repeat_last": true, "rounds": [
            {"status": 429, "error": "quota exceeded for this hour", "retry_after": 3600}
        ]}))
        .start()
        .await;
    let started = std::time::Instant::now();
    let r = s.chat(ask("x")).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.headers["retry-after"], "3600");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("quota exceeded for this hour") && message.contains("3600 s"),
        "{message}"
    );
    assert_eq!(r.body["error"]["code"], "upstream_rate_limited");
    assert_eq!(
        s.requests().len(),
        1,
        "a 3600 s wait was not waited or retried"
    );
    // Generous: the point is that nothing waited anywhere near the hour (or the 20 s cap).
    assert!(started.elapsed() < std::time::Duration::from_secs(15));

    // Streamed, the same answer: the status, before any event.
    let r = s.open_stream(ask("x")).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "3600");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_third_identical_call_in_a_row_ends_the_run_saying_what_repeated() {
    let same = json!({"tool_calls": [{"name": "read_file", "arguments": {"filepath": "a.txt"}}]});
    let s = TestServer::builder()
        .file("a.txt", "A\n")
        .script(json!({"repeat_last": true, "rounds": [same]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let text = r.body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        text.contains("repeating itself")
            && text.contains(
                "read_file with the same arguments ({\"filepath\":\"a.txt\"}) 3 times in a row"
            ),
        "{text}"
    );
    assert_eq!(r.body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        s.requests().len(),
        3,
        "the run went on after the third call"
    );

    // The same failure three times, with other calls between.
    let s = TestServer::builder()
        .file("a.txt", "A\n")
        .script(json!({"rounds": [
            {"tool_calls": [{"name": "read_file", "arguments": {"filepath": "nope-1.txt"}}]},
            {"tool_calls": [{"name": "ls", "arguments": {}}]},
            {"tool_calls": [{"name": "read_file", "arguments": {"filepath": "nope-1.txt"}}]},
            {"tool_calls": [{"name": "ls", "arguments": {"dirPath": "."}}]},
            {"tool_calls": [{"name": "read_file", "arguments": {"filepath": "nope-1.txt"}}]},
            {"text": "never reached"}
        ]}))
        .config("[agent]\ndetect_repeats = false\n")
        .start()
        .await;
    let st = s.chat_stream(ask("x")).await;
    assert!(st.done, "{}", st.raw);
    let text = st.content();
    assert!(
        text.contains("read_file failed the same way 3 times") && text.contains("does not exist"),
        "{text}"
    );
    assert_eq!(s.requests().len(), 5);

    // Configurable: off, the model goes on until it stops by itself.
    let s = TestServer::builder()
        .file("a.txt", "A\n")
        .config("[agent]\nrepeat_limit = 0\n")
        .script(json!({"rounds": [same, same, same, same, {"text": "fine"}]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_eq!(r.body["choices"][0]["message"]["content"], "fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_of_full_width_dots_and_slashes_is_an_ordinary_missing_file() {
    // `．．／．．／etc／passwd`: three bytes per character, so byte 7 (the length of `file://`)
    // is inside a character; this used to panic a worker thread.
    let path = "．．／．．／．．／etc／passwd";
    let (s, out) = run_calls(
        TestServer::builder(),
        &[
            ("read_file", json!({"filepath": path})),
            ("ls", json!({"dirPath": "．／"})),
            ("file_glob_search", json!({"pattern": "**／*"})),
            ("read_file", json!({"filepath": "fílé://x"})),
        ],
    )
    .await;
    assert!(out[0].contains("does not exist"), "{}", out[0]);
    assert!(out[1].contains("not found"), "{}", out[1]);
    assert!(!out[3].contains("panic"), "{}", out[3]);
    // The server is still there.
    assert_eq!(s.get("/healthz").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_required_arguments_and_odd_call_types_get_the_tools_own_error() {
    let (s, out) = run_calls(
        TestServer::builder(),
        &[
            ("create_new_file", json!({"filepath": "new.txt"})),
            (
                "read_file_range",
                json!({"filepath": "a.txt", "startLine": 1}),
            ),
            ("single_find_and_replace", json!({"filepath": "a.txt"})),
        ],
    )
    .await;
    assert!(
        out[0].starts_with(
            "create_new_file was not run because its arguments are invalid: `contents` is required"
        ),
        "{}",
        out[0]
    );
    assert!(!s.path("new.txt").exists(), "an empty file was created");
    assert!(out[1].contains("`endLine` is required"), "{}", out[1]);
    assert!(
        out[2].starts_with("single_find_and_replace was not run because its arguments are invalid")
            && out[2].contains("old_string"),
        "{}",
        out[2]
    );

    // A call whose type is not `function` is answered, not dropped.
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "x", "object": "chat.completion.chunk", "model": "mock-model",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let custom = chunk(
        json!({"tool_calls": [{"index": 0, "id": "odd1", "type": "custom",
                               "custom": {"name": "read_file", "input": "a.txt"}}]}),
        Value::Null,
    );
    let s = TestServer::builder()
        .file("a.txt", "A\n")
        .script(json!({"rounds": [
            {"raw": [custom, chunk(json!({}), json!("tool_calls")), "data: [DONE]\n\n"]},
            {"text": "ok"}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = s.requests();
    check_conversation_invariants(&reqs);
    let out = tool_result(&reqs[1], "odd1");
    assert!(
        out.starts_with("read_file was not run: the call has type \"custom\""),
        "{out}"
    );
}

/// The official `openai` Python SDK on each broken stream: a streamed chat completion raises
/// `APIError`, the Responses stream helper raises (no `response.completed`), and the
/// non-streamed requests raise the status errors 502 / 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_raises_on_every_broken_stream() {
    let Some(py) = crate::suite::python_sdk::python_with_sdk() else {
        return;
    };
    let shapes = broken_streams();
    let rounds: Vec<Value> = shapes
        .iter()
        .flat_map(|(_, round, _, _)| std::iter::repeat_n(round.clone(), 4))
        .collect();
    let s = TestServer::builder()
        .config("[upstream]\nmax_retries = 0\nidle_timeout_secs = 2\n")
        .script(json!({"rounds": rounds}))
        .start()
        .await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/sdk_broken.py");
    let out = tokio::process::Command::new(&py)
        .arg(script)
        .arg(s.url("/v1"))
        .arg(shapes.len().to_string())
        .env("NO_PROXY", "127.0.0.1")
        .output()
        .await
        .unwrap();
    s.mock().release();
    assert!(
        out.status.success(),
        "the SDK script failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for ((shape, _, status, words), got) in shapes.iter().zip(v.as_array().unwrap()) {
        let stream = &got["chat_stream"];
        assert_eq!(stream["class"], "APIError", "{shape}: {got}");
        assert!(
            stream["message"].as_str().unwrap().contains(words),
            "{shape}: {got}"
        );
        assert!(
            got["chat_stream_text"]
                .as_str()
                .unwrap()
                .starts_with("partial"),
            "{shape}: {got}"
        );
        assert_eq!(got["chat"]["status"], *status, "{shape}: {got}");
        assert_eq!(
            got["responses_stream"]["class"], "RuntimeError",
            "{shape}: {got}"
        );
        assert_eq!(
            got["responses_stream_last_event"], "response.failed",
            "{shape}: {got}"
        );
        assert_eq!(got["responses"]["status"], *status, "{shape}: {got}");
    }
}

fn mkfifo(path: &std::path::Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

/// A FIFO, a socket and (where the test may create one) a device that never ends, in the
/// workspace, and every tool that opens or walks files pointed at them: each says what the
/// thing is, and none blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_pipes_sockets_and_devices_are_named_and_never_block_a_tool() {
    let builder = TestServer::builder()
        .file("a.txt", "hello\n")
        .file(
            ".continue/rules/real.md",
            "---\nname: real\ndescription: how to answer\nalwaysApply: false\n---\nBe brief.\n",
        )
        .config("[policy]\nallow = [\"create_new_file\", \"single_find_and_replace\"]\n");
    // The server is started over the directory the special files are in: rules and skills
    // are read at the start of every run.
    let s = builder
        .script(calls_script(&[("ls", json!({}))]))
        .start()
        .await;
    let ws = s.ws.clone();
    std::fs::create_dir_all(ws.join(".continue/skills/odd")).unwrap();
    mkfifo(&ws.join("pipe"));
    mkfifo(&ws.join(".continue/rules/pipe.md"));
    mkfifo(&ws.join(".continue/skills/odd/SKILL.md"));
    let _socket = std::os::unix::net::UnixListener::bind(ws.join("sock")).unwrap();
    // /dev/zero's numbers: a read never ends. Creating a device needs CAP_MKNOD.
    let device = std::process::Command::new("mknod")
        .arg(ws.join("zero"))
        .args(["c", "1", "5"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !device {
        eprintln!(
            "cannot create a device node here (needs CAP_MKNOD): the device cases are left out"
        );
    }
    assert!(
        std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(&ws)
            .status()
            .unwrap()
            .success()
    );
    let dir = std::sync::Arc::clone(&s.dir);
    drop(s);

    let mut calls = vec![
        ("read_file", json!({"filepath": "pipe"})),
        ("read_file", json!({"filepath": "sock"})),
        (
            "read_file_range",
            json!({"filepath": "pipe", "startLine": 1, "endLine": 2}),
        ),
        ("grep_search", json!({"query": "hello"})),
        ("file_glob_search", json!({"pattern": "*"})),
        ("ls", json!({"dirPath": "."})),
        ("ls", json!({"dirPath": "pipe"})),
        ("view_subdirectory", json!({"directory_path": "sock"})),
        ("view_repo_map", json!({})),
        ("codebase", json!({"query": "hello"})),
        ("view_diff", json!({})),
        ("request_rule", json!({"name": "pipe"})),
        ("read_skill", json!({"skillName": "odd"})),
        (
            "create_new_file",
            json!({"filepath": "pipe", "contents": "x"}),
        ),
        (
            "single_find_and_replace",
            json!({"filepath": "pipe", "old_string": "a", "new_string": "b"}),
        ),
    ];
    if device {
        calls.push(("read_file", json!({"filepath": "zero"})));
        calls.push(("grep_search", json!({"query": "never-there"})));
    }
    let s = TestServer::builder()
        .reuse_dir(dir)
        .yes()
        .config("[policy.tools]\nrequest_rule = \"allow\"\n")
        .script(calls_script(&calls))
        .start()
        .await;
    let r = tokio::time::timeout(std::time::Duration::from_secs(60), s.chat(ask("go")))
        .await
        .expect("a tool blocked on a special file");
    assert_eq!(r.status, 200, "{}", r.text);
    let out = collected(&s, calls.len());
    let fifo = "is a named pipe (FIFO), not a regular file";
    assert!(out[0].contains(fifo), "{}", out[0]);
    assert!(
        out[1].contains("is a socket, not a regular file"),
        "{}",
        out[1]
    );
    assert!(out[2].contains(fifo), "{}", out[2]);
    assert!(out[3].contains("a.txt"), "{}", out[3]);
    assert!(
        out[4].contains("a.txt") && !out[4].contains("pipe"),
        "{}",
        out[4]
    );
    assert!(
        out[5].contains("pipe  [a named pipe (FIFO)]") && out[5].contains("sock  [a socket]"),
        "{}",
        out[5]
    );
    assert!(
        out[6].contains("is a named pipe (FIFO), not a directory"),
        "{}",
        out[6]
    );
    assert!(
        out[7].contains("is a socket, not a directory"),
        "{}",
        out[7]
    );
    assert!(out[8].contains("a.txt"), "{}", out[8]);
    assert!(!out[9].contains("failed"), "{}", out[9]);
    assert!(!out[10].contains("failed"), "{}", out[10]);
    assert!(
        out[11].contains(".continue/rules/pipe.md was skipped: it is a named pipe (FIFO)"),
        "{}",
        out[11]
    );
    assert!(
        out[12].contains(".continue/skills/odd/SKILL.md was skipped: it is a named pipe (FIFO)"),
        "{}",
        out[12]
    );
    assert!(
        out[13].contains("already exists and is a named pipe (FIFO)"),
        "{}",
        out[13]
    );
    assert!(out[14].contains(fifo), "{}", out[14]);
    if device {
        assert!(
            out[15].contains("is a character device, not a regular file"),
            "{}",
            out[15]
        );
        assert!(out[16].contains("No matches"), "{}", out[16]);
    }
}

/// A call still running at its deadline is abandoned and the model told; the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_past_its_deadline_is_abandoned_and_reported() {
    // A web server that accepts and never answers (its own timeout, 30 s, is far away).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/slow", silent.local_addr().unwrap());
    let s = TestServer::builder()
        .config(
            "[policy]\nallow = [\"fetch_url_content\"]\n[web]\nallow = [\"127.0.0.1\"]\n\
             [tools]\ncall_timeout_secs = 0.5\n",
        )
        .script(one_call("fetch_url_content", json!({"url": url})))
        .start()
        .await;
    let out = run_tool(&s, "fetch_url_content").await;
    assert!(
        out.starts_with("fetch_url_content failed: it did not finish within its deadline of 0.5 s"),
        "{out}"
    );
    drop(silent);
}

/// Detached runs go on without a client: at most 32 at once, then a new one is refused with
/// a 429 that says how to make room; when one ends, another may start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_runs_in_flight_are_bounded() {
    let s = TestServer::builder()
        .config("[server]\ndetach = true\n")
        .script(json!({"repeat_last": true, "rounds": [
            {"text": "held answer", "chunk_size": 4, "hold_after": 3}
        ]}))
        .start()
        .await;
    let max = toolpilot::agent::detach::MAX_RUNNING;
    let mut open = Vec::new();
    for _ in 0..max {
        let mut r = s.open_stream(ask("x")).await;
        assert_eq!(r.status(), 200);
        // Its first text came: the run is going (held by the mock).
        r.chunk().await.unwrap().unwrap();
        open.push(r);
    }
    drop(open);
    let r = s.chat(ask("x")).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.body["error"]["code"], "too_many_detached_runs");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("POST /v1/runs/{id}/cancel"),
        "{}",
        r.text
    );
    s.mock().release();
    let ok = eventually_async(|| async {
        let r = s.chat(ask("x")).await;
        r.status == 200
    })
    .await;
    assert!(ok, "no detached run could start after the others ended");
}
