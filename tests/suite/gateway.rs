//! What gateway users ask for: reasoning kept for thinking models, prompt-cache markers and
//! `parallel_tool_calls` passed through, a per-run token budget, toolpilot's tools offered
//! beside a client's own (`x-toolpilot-augment`), and approvals that never wait unseen.

use serde_json::{Value, json};

use crate::support::*;

fn read_then_answer() -> Value {
    json!({"rounds": [
        {"reasoning": "I should read a.txt first.",
         "tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"filepath": "a.txt"}}],
         "usage": {"prompt_tokens": 900, "completion_tokens": 100, "total_tokens": 1000}},
        {"text": "a.txt says hi"}
    ]})
}

#[tokio::test]
async fn reasoning_goes_back_upstream_only_where_the_upstream_wants_it() {
    for (config, kept) in [("", false), ("[upstream]\nsend_reasoning = true\n", true)] {
        let s = TestServer::builder()
            .file("a.txt", "hi\n")
            .config(config)
            .script(read_then_answer())
            .start()
            .await;
        let r = s.chat(ask("what does a.txt say?")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let reqs = s.requests();
        let said = &reqs[1].body["messages"][1];
        assert_eq!(said["role"], "assistant");
        assert_eq!(
            said.get("reasoning_content").is_some(),
            kept,
            "{config:?}: {said}"
        );
        if kept {
            assert_eq!(said["reasoning_content"], "I should read a.txt first.");
        }
    }
}

#[tokio::test]
async fn cache_control_and_parallel_tool_calls_pass_through_untouched() {
    let s = TestServer::builder()
        .file("a.txt", "hi\n")
        .script(read_then_answer())
        .start()
        .await;
    let mut body = ask("what does a.txt say?");
    body["messages"] = json!([
        {"role": "system", "content": [{"type": "text", "text": "You are terse.",
                                         "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": [{"type": "text", "text": "what does a.txt say?",
                                       "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}
    ]);
    body["parallel_tool_calls"] = json!(false);
    let r = s.chat(body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    for req in s.requests() {
        assert_eq!(req.body["parallel_tool_calls"], json!(false));
        assert_eq!(req.body["messages"][0], body["messages"][0]);
        assert_eq!(req.body["messages"][1], body["messages"][1]);
    }
}

#[tokio::test]
async fn a_run_over_its_token_budget_ends_with_an_answer_that_says_so() {
    let s = TestServer::builder()
        .file("a.txt", "hi\n")
        .config("[agent]\nmax_tokens_per_run = 500\n")
        .script(read_then_answer())
        .start()
        .await;
    let r = s.chat(ask("what does a.txt say?")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let text = r.body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        text.contains("used 1,000 tokens") && text.contains("max_tokens_per_run = 500"),
        "{text}"
    );
    assert_eq!(r.body["choices"][0]["finish_reason"], "length");
    // The tool ran; the second round was never sent.
    assert_eq!(s.requests().len(), 1);
}

#[tokio::test]
async fn the_augment_header_offers_built_ins_beside_the_clients_tools() {
    let s = TestServer::builder()
        .file("a.txt", "hi\n")
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"filepath": "a.txt"}}]},
            {"text": "a.txt says hi"},
        ]}))
        .start()
        .await;
    let mut body = ask("what does a.txt say?");
    body["tools"] = json!([{"type": "function", "function": {"name": "Bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]);
    let post = |header: &'static str| {
        s.client
            .post(s.url("/v1/chat/completions"))
            .header("x-toolpilot-augment", header)
            .body(body.to_string())
            .send()
    };
    let bad = post("read_file, teleport").await.unwrap();
    assert_eq!(bad.status(), 400);
    let err: Value = serde_json::from_str(&bad.text().await.unwrap()).unwrap();
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(msg.contains("\"teleport\" is not a built-in tool"), "{msg}");
    let ok = post("read_file").await.unwrap();
    assert_eq!(ok.status(), 200);
    let reqs = s.requests();
    let names: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Bash", "read_file"]);
    assert_eq!(tool_result(&reqs[1], "r1"), "hi\n");
}

fn needs_approval() -> Value {
    json!({"rounds": [
        {"tool_calls": [{"id": "w1", "name": "create_new_file",
                         "arguments": {"filepath": "notes.md", "contents": "x\n"}}]},
        {"text": "Noted."}
    ]})
}

#[tokio::test]
async fn with_nobody_watching_a_call_that_needs_approval_is_asked_in_the_answer_at_once() {
    // approvals.mode = "auto" (the default): a plain non-streamed client sees the question in
    // the answer instead of a request that holds for minutes.
    let s = TestServer::builder()
        .config("[approvals]\ntimeout_secs = 600\n")
        .script(needs_approval())
        .start()
        .await;
    let r = s.chat(ask("note it")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let text = r.body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.contains("needs your approval"), "{text}");
    assert!(text.contains("create_new_file"), "{text}");
    assert!(!s.path("notes.md").exists());
}

#[tokio::test]
async fn someone_following_the_approvals_makes_a_run_wait_for_them() {
    let s = TestServer::builder()
        .config("[approvals]\ntimeout_secs = 600\n")
        .script(needs_approval())
        .start()
        .await;
    // The console (or a script) is following /v1/approvals.
    assert_eq!(s.get("/v1/approvals").await.status, 200);
    let chat = s.client_clone();
    let run = tokio::spawn(async move { chat.chat(ask("note it")).await });
    let mut id = None;
    for _ in 0..200 {
        let list = s.get("/v1/approvals").await.body;
        id = list["data"][0]["id"].as_str().map(str::to_string);
        if id.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let answer = s
        .post_raw(
            &format!("/v1/approvals/{}", id.unwrap()),
            json!({"decision": "approve"}).to_string(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let r = run.await.unwrap();
    assert_eq!(r.body["choices"][0]["message"]["content"], "Noted.");
    assert!(s.path("notes.md").exists());
}
