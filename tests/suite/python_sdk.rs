//! The official `openai` Python SDK as the client (`.ci/run` installs it in a virtual
//! environment and sets TOOLPILOT_TEST_PYTHON and TOOLPILOT_REQUIRE_PYTHON_SDK=1).

use serde_json::{Value, json};

use crate::support::*;

/// The Python interpreter that has `openai`, if any.
pub fn python_with_sdk() -> Option<String> {
    python_with("openai", "openai Python SDK")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_works_stream_and_non_stream() {
    let Some(py) = python_with_sdk() else { return };
    let read = json!({"tool_calls": [{"name": "read_file", "arguments": {"filepath": "a.txt"}}],
                      "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}});
    let answer = json!({"text": "a.txt says hello from the SDK test", "chunk_size": 4,
                        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}});
    let s = TestServer::builder()
        .file("a.txt", "hello from the SDK test\n")
        .script(json!({"models": ["mock-model"], "rounds": [
            read, answer,                                   // 1. non-stream
            read, answer,                                   // 2. stream
            {"text": "Deploying.", "tool_calls": [{"id": "d1", "name": "deploy", "arguments": {"env": "prod"}}]},  // 3
            {"tool_calls": [{"id": "d2", "name": "deploy", "arguments": {"env": "dev"}}]},                       // 4
            {"text": "so far so good", "chunk_size": 4, "error_after": {"chunks": 3, "message": "GPU on fire"}}, // 6
            {"text": "raw works"}                           // 7
        ]}))
        .config("[upstream]\nmax_retries = 0\n")
        .start()
        .await;
    let base = s.url("/v1");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/sdk_client.py");
    let out = tokio::process::Command::new(&py)
        .arg(script)
        .arg(&base)
        .env("NO_PROXY", "127.0.0.1")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "the SDK script failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("openai SDK {}", v["sdk_version"]);
    assert_eq!(
        v["nonstream"]["content"],
        "a.txt says hello from the SDK test"
    );
    assert_eq!(v["nonstream"]["finish"], "stop");
    assert_eq!(v["nonstream"]["total_tokens"], 18);
    assert_eq!(v["nonstream"]["object"], "chat.completion");
    assert_eq!(v["stream"]["content"], "a.txt says hello from the SDK test");
    assert_eq!(v["stream"]["finish"], "stop");
    assert_eq!(v["stream"]["total_tokens"], 18);
    assert_eq!(v["stream"]["roles"], json!(["assistant"]));
    assert!(v["stream"]["pieces"].as_u64().unwrap() > 5);
    assert_eq!(v["client_tool"]["finish"], "tool_calls");
    assert_eq!(
        v["client_tool"]["calls"],
        json!([{"id": "d1", "name": "deploy", "arguments": "{\"env\":\"prod\"}"}])
    );
    assert_eq!(
        v["client_tool_nonstream"],
        json!({"id": "d2", "name": "deploy", "arguments": {"env": "dev"}, "finish": "tool_calls"})
    );
    assert_eq!(v["bad_request"]["status"], 400);
    assert!(
        v["bad_request"]["message"]
            .as_str()
            .unwrap()
            .contains("`messages` is empty")
    );
    assert!(
        v["stream_error"]["message"]
            .as_str()
            .unwrap()
            .contains("GPU on fire"),
        "{}",
        v["stream_error"]
    );
    assert!(v["run_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(v["raw_content"], "raw works");
    assert_eq!(v["models"], json!(["mock-model"]));
    // The tool really ran for both SDK conversations.
    let reqs = s.requests();
    check_conversation_invariants(&reqs);
    assert_eq!(
        tool_result(&reqs[1], "call_mock_0"),
        "hello from the SDK test\n"
    );
}
