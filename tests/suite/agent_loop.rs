//! The loop and the protocol: tool rounds, streaming, passthrough, usage, client tools.

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_model_runs_a_real_tool_loop_on_the_workspace() {
    let s = TestServer::builder()
        .demo()
        .model(None)
        .file("README.md", "# Widget Factory\n\nMakes widgets.\n")
        .file("src/main.rs", "fn main() {}\n")
        .start()
        .await;
    let r = s
        .chat(json!({"messages": [{"role": "user", "content": "what is this?"}]}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let content = r.body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.starts_with("[toolpilot demo model]"), "{content}");
    assert!(
        content.contains("2 top-level entries (README.md, src/)"),
        "{content}"
    );
    assert!(content.contains("> # Widget Factory"), "{content}");
    assert_eq!(r.body["model"], "toolpilot-demo");

    let st = s
        .chat_stream(json!({"messages": [{"role": "user", "content": "what is this?"}]}))
        .await;
    assert!(st.content().contains("> Makes widgets."), "{}", st.raw);
    assert!(
        st.comments.iter().any(|c| c.contains("running ls")),
        "{:?}",
        st.comments
    );
    assert!(
        st.comments.iter().any(|c| c.contains("read_file ok")),
        "{:?}",
        st.comments
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_results_go_back_to_the_model_as_tool_messages() {
    let s = TestServer::builder()
        .file("notes.txt", "the answer is 42\n")
        .script(json!({"rounds": [
            {"text": "Let me look.", "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "notes.txt"}}]},
            {"text": "It says 42."}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("what does notes.txt say?")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["choices"][0]["message"]["content"],
        "Let me look.\n\nIt says 42."
    );
    assert_eq!(r.body["choices"][0]["finish_reason"], "stop");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 2);
    check_conversation_invariants(&reqs);
    let second = &reqs[1].body["messages"];
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(second[1]["tool_calls"][0]["id"], "c1");
    assert_eq!(second[1]["tool_calls"][0]["function"]["name"], "read_file");
    assert_eq!(tool_result(&reqs[1], "c1"), "the answer is 42\n");
    // The client did not stream, so neither does the upstream (one answer per round, which
    // the upstream produces faster); usage comes in that answer.
    assert_eq!(reqs[0].body["stream"], false);
    assert!(reqs[0].body.get("stream_options").is_none());
    assert_eq!(
        r.body["usage"]["total_tokens"].as_u64().map(|n| n > 0),
        Some(true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_client_gets_a_streamed_upstream_and_always_stream_forces_one() {
    let script = json!({"rounds": [
        {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "a.txt"}}]},
        {"text": "done"},
        {"tool_calls": [{"id": "c2", "name": "read_file", "arguments": {"filepath": "a.txt"}}]},
        {"text": "done again"}
    ]});
    let s = TestServer::builder()
        .file("a.txt", "x\n")
        .script(script.clone())
        .start()
        .await;
    let r = s.chat_stream(ask("go")).await;
    assert_eq!(r.content(), "done");
    for req in s.requests() {
        assert_eq!(req.body["stream"], true);
        assert_eq!(req.body["stream_options"]["include_usage"], true);
    }
    let s = TestServer::builder()
        .config("[upstream]\nalways_stream = true\n")
        .file("a.txt", "x\n")
        .script(script)
        .start()
        .await;
    let r = s.chat(ask("go")).await;
    assert_eq!(r.body["choices"][0]["message"]["content"], "done");
    for req in s.requests() {
        assert_eq!(req.body["stream"], true);
    }
}

/// Benchmarks run the mock without recording; it must still answer a stream to a request that
/// asks for one, or every streamed figure would measure a JSON answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_follows_stream_also_when_it_does_not_record() {
    let mock = extra_mock(
        json!({"record": false, "repeat_last": true, "rounds": [{"text": "Hello there"}]}),
    )
    .await;
    let c = client();
    for (stream, kind, marker) in [
        (true, "text/event-stream", "data: [DONE]"),
        (false, "application/json", "\"chat.completion\""),
    ] {
        let r = c
            .post(format!("{}/chat/completions", mock.base_url()))
            .json(&json!({"model": "m", "stream": stream,
                          "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        let body = r.text().await.unwrap();
        assert!(ct.starts_with(kind), "stream={stream}: {ct}");
        assert!(body.contains(marker), "stream={stream}: {body}");
        assert!(body.contains("Hello"), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_is_correct_sse_with_summed_usage() {
    let s = TestServer::builder()
        .file("a.txt", "alpha\n")
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "a.txt"}}],
             "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}},
            {"text": "The file says alpha.", "chunk_size": 3,
             "usage": {"prompt_tokens": 150, "completion_tokens": 7, "total_tokens": 157}}
        ]}))
        .start()
        .await;
    let mut req = ask("read a.txt");
    req["stream_options"] = json!({"include_usage": true});
    let st = s.chat_stream(req).await;
    assert_eq!(st.status, 200);
    assert_eq!(st.headers["content-type"], "text/event-stream");
    assert!(st.headers.contains_key("x-toolpilot-run-id"));
    assert!(st.done && st.done_last, "{}", st.raw);
    // First delta carries the role.
    assert_eq!(st.chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(st.content(), "The file says alpha.");
    // Content arrives in the upstream's pieces, not as one block.
    let pieces = st
        .chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count();
    assert!(pieces >= 7, "{pieces} content chunks");
    assert_eq!(st.finish_reason().as_deref(), Some("stop"));
    // The usage chunk comes last, with empty choices, summed over both rounds.
    let last = st.chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 250, "completion_tokens": 17, "total_tokens": 267})
    );
    // Every chunk has the same id and the chat.completion.chunk object type.
    let id = &st.chunks[0]["id"];
    assert!(
        st.chunks
            .iter()
            .all(|c| &c["id"] == id && c["object"] == "chat.completion.chunk")
    );

    // Without include_usage there is no usage chunk.
    let s2 = TestServer::builder()
        .script(json!({"rounds": [{"text": "hi"}]}))
        .start()
        .await;
    let st = s2.chat_stream(ask("hi")).await;
    assert!(
        st.chunks.iter().all(|c| c.get("usage").is_none()),
        "{}",
        st.raw
    );
    assert_eq!(st.content(), "hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_reaches_the_client_before_the_upstream_finishes() {
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "first part, then the rest", "chunk_size": 5, "hold_after": 3}]}))
        .start()
        .await;
    let mut resp = s.open_stream(ask("hi")).await;
    // The mock has sent the role chunk and two content pieces and now waits to be released:
    // those pieces must already be readable here.
    let mut seen = String::new();
    while !seen.contains("\"first\"") || !seen.contains("\" part\"") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), resp.chunk())
            .await
            .expect("content was buffered instead of streamed")
            .unwrap()
            .expect("stream ended early");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!seen.contains("[DONE]"));
    assert_eq!(s.requests()[0].outcome, "in_progress");
    s.mock().release();
    let mut rest = String::new();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        rest.push_str(&String::from_utf8_lossy(&chunk));
    }
    let all = parse_sse(200, Default::default(), seen + &rest);
    assert_eq!(all.content(), "first part, then the rest");
    assert!(all.done_last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_request_fields_are_forwarded_unchanged() {
    let s = TestServer::builder()
        .model(None)
        .script(json!({"rounds": [{"text": "ok"}]}))
        .start()
        .await;
    let r = s
        .chat(json!({
            "model": "client-model",
            "messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"}],
            "temperature": 0.25, "top_p": 0.9, "seed": 7, "max_tokens": 321,
            "stop": ["\n\n"], "response_format": {"type": "text"},
            "metadata": {"custom": [1, 2, {"deep": true}]}, "user": "u-1"
        }))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["model"], "client-model");
    let got = &s.requests()[0].body;
    assert_eq!(got["model"], "client-model");
    for (k, v) in [
        ("temperature", json!(0.25)),
        ("top_p", json!(0.9)),
        ("seed", json!(7)),
        ("max_tokens", json!(321)),
        ("stop", json!(["\n\n"])),
        ("response_format", json!({"type": "text"})),
        ("metadata", json!({"custom": [1, 2, {"deep": true}]})),
        ("user", json!("u-1")),
    ] {
        assert_eq!(got[k], v, "field {k}");
    }
    assert_eq!(got["messages"][1]["name"], "ann");
    assert_eq!(got["messages"][1]["content"][0]["text"], "hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_override_and_missing_model() {
    let s = TestServer::builder()
        .model(Some("forced-model"))
        .script(json!({"rounds": [{"text": "ok"}]}))
        .start()
        .await;
    let r = s
        .chat(json!({"model": "asked", "messages": [{"role": "user", "content": "x"}]}))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(s.requests()[0].body["model"], "forced-model");
    assert_eq!(r.body["model"], "asked");

    let s = TestServer::builder()
        .model(None)
        .script(json!({"rounds": [{"text": "ok"}]}))
        .start()
        .await;
    let r = s
        .chat(json!({"messages": [{"role": "user", "content": "x"}]}))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"]["param"], "model");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--model")
    );
    assert!(s.requests().is_empty());
}

fn client_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "read_file", "description": "read",
            "parameters": {"type": "object", "properties": {"filepath": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "deploy", "description": "the client's own tool",
            "parameters": {"type": "object", "properties": {"env": {"type": "string"}}}}}
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tools_are_handed_back_non_streamed() {
    let s = TestServer::builder()
        .file("a.txt", "A")
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"filepath": "a.txt"}}]},
            {"text": "Deploying.", "tool_calls": [{"id": "d1", "name": "deploy", "arguments": {"env": "prod"}}]}
        ]}))
        .start()
        .await;
    let mut req = ask("deploy it");
    req["tools"] = client_tools();
    req["tool_choice"] = json!("auto");
    let r = s.chat(req).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let choice = &r.body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["tool_calls"][0]["id"], "d1");
    assert_eq!(
        choice["message"]["tool_calls"][0]["function"]["name"],
        "deploy"
    );
    assert_eq!(
        choice["message"]["tool_calls"][0]["function"]["arguments"],
        r#"{"env":"prod"}"#
    );
    assert_eq!(choice["message"]["content"], "Deploying.");
    // read_file ran on the server; the client's specs went upstream unchanged.
    let reqs = s.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(tool_result(&reqs[1], "r1"), "A");
    assert_eq!(reqs[0].body["tools"], client_tools());
    assert_eq!(reqs[0].body["tool_choice"], "auto");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tools_stream_as_continue_expects() {
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"text": "Two calls.", "tool_calls": [
                {"id": "d1", "name": "deploy", "arguments": {"env": "a"}},
                {"id": "d2", "name": "deploy", "arguments": {"env": "b"}}]}
        ]}))
        .start()
        .await;
    let mut req = ask("deploy");
    req["tools"] = client_tools();
    req["stream_options"] = json!({"include_usage": true});
    let st = s.chat_stream(req).await;
    assert_eq!(st.finish_reason().as_deref(), Some("tool_calls"));
    let tool_deltas: Vec<&Value> = st
        .chunks
        .iter()
        .filter_map(|c| c["choices"].get(0)?["delta"].get("tool_calls"))
        .collect();
    assert_eq!(tool_deltas.len(), 2, "{}", st.raw);
    for (i, d) in tool_deltas.iter().enumerate() {
        // Each call whole, with its id in the first (only) delta, one after another.
        assert_eq!(d[0]["index"], i);
        assert_eq!(d[0]["id"], format!("d{}", i + 1));
        assert_eq!(d[0]["type"], "function");
        assert_eq!(d[0]["function"]["name"], "deploy");
    }
    // Text and tool calls never share a delta.
    for c in &st.chunks {
        if let Some(d) = c["choices"].get(0).map(|ch| &ch["delta"]) {
            assert!(
                !(d.get("content").is_some() && d.get("tool_calls").is_some()),
                "{d}"
            );
        }
    }
    assert_eq!(st.content(), "Two calls.");
    assert!(st.chunks.last().unwrap().get("usage").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_client_tools_the_default_set_is_offered() {
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "ok"}]}))
        .config("[policy.tools]\ngrep_search = \"disabled\"\n")
        .start()
        .await;
    s.chat(ask("x")).await;
    let names: Vec<String> = s.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&"read_file".to_string()));
    assert!(names.contains(&"ls".to_string()));
    assert!(names.contains(&"view_diff".to_string()));
    assert!(
        !names.contains(&"grep_search".to_string()),
        "disabled tools are never offered: {names:?}"
    );
    // The body (sent in parts around the shared tool specs) has an exact length, not chunks.
    let headers = &s.requests()[0].headers;
    let sent = serde_json::to_vec(&s.requests()[0].body).unwrap().len();
    let declared: usize = headers["content-length"].as_str().unwrap().parse().unwrap();
    assert!(declared >= sent, "content-length {declared} < body {sent}");
    assert!(headers.get("transfer-encoding").is_none(), "{headers}");
    // A disabled tool declared by the client is not offered either.
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "ok"}]}))
        .config("[policy.tools]\nread_file = \"deny\"\n")
        .start()
        .await;
    let mut req = ask("x");
    req["tools"] = client_tools();
    s.chat(req).await;
    let tools = s.requests()[0].body["tools"].as_array().unwrap().clone();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["function"]["name"], "deploy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_calls_in_one_round_all_run_and_keep_their_order() {
    let s = TestServer::builder()
        .file("a.txt", "A")
        .file("b.txt", "B")
        .file("c.txt", "C")
        .script(json!({"rounds": [
            {"tool_calls": [
                {"id": "1", "name": "read_file", "arguments": {"filepath": "a.txt"}},
                {"id": "2", "name": "read_file", "arguments": {"filepath": "b.txt"}},
                {"id": "3", "name": "ls", "arguments": {}},
                {"id": "4", "name": "read_file", "arguments": {"filepath": "c.txt"}}]},
            {"text": "done"}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("read all")).await;
    assert_eq!(r.status, 200);
    let reqs = s.requests();
    check_conversation_invariants(&reqs);
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let tool_ids: Vec<&str> = msgs
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(tool_ids, ["1", "2", "3", "4"]);
    assert_eq!(tool_result(&reqs[1], "2"), "B");
    assert_eq!(tool_result(&reqs[1], "3"), "a.txt\nb.txt\nc.txt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_arguments_and_unknown_tools_become_tool_messages() {
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"tool_calls": [
                {"id": "bad", "name": "read_file", "arguments": "{\"filepath\": "},
                {"id": "unknown", "name": "delete_everything", "arguments": {}},
                {"id": "missing", "name": "read_file", "arguments": {}}]},
            {"text": "ok"}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_eq!(r.status, 200);
    let reqs = s.requests();
    let bad = tool_result(&reqs[1], "bad");
    assert!(
        bad.starts_with("read_file was not run: the arguments are not valid JSON"),
        "{bad}"
    );
    assert!(bad.contains("You sent: {\"filepath\":"), "{bad}");
    let unknown = tool_result(&reqs[1], "unknown");
    assert!(
        unknown.contains("There is no tool named \"delete_everything\""),
        "{unknown}"
    );
    assert!(unknown.contains("read_file"), "{unknown}");
    let missing = tool_result(&reqs[1], "missing");
    assert!(missing.contains("`filepath` is required"), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_repeated_calls_are_detected() {
    let s = TestServer::builder()
        .file("a.txt", "A")
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "1", "name": "read_file", "arguments": {"filepath": "a.txt"}}]},
            {"tool_calls": [{"id": "2", "name": "read_file", "arguments": "{ \"filepath\" : \"a.txt\" }"}]},
            {"text": "ok"}
        ]}))
        .start()
        .await;
    s.chat(ask("x")).await;
    let reqs = s.requests();
    assert_eq!(reqs.len(), 3);
    let again = tool_result(&reqs[2], "2");
    assert!(
        again
            .starts_with("You already called read_file with exactly these arguments (tool call 1)"),
        "{again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_rounds_ends_with_a_final_answer_without_tools() {
    let s = TestServer::builder()
        .config("[agent]\nmax_rounds = 2\n")
        .script(json!({"repeat_last": false, "rounds": [
            {"tool_calls": [{"id": "1", "name": "ls", "arguments": {}}]},
            {"tool_calls": [{"id": "2", "name": "ls", "arguments": {"dirPath": "."}}]},
            {"text": "Here is what I found."}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["choices"][0]["message"]["content"],
        "Here is what I found."
    );
    let reqs = s.requests();
    assert_eq!(reqs.len(), 3);
    assert!(
        reqs[2].body.get("tools").is_none(),
        "the final round offers no tools"
    );
    assert!(tool_result(&reqs[2], "2").contains("this was the last tool round allowed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_is_streamed_apart_from_the_answer() {
    let s = TestServer::builder()
        .script(json!({"repeat_last": true, "rounds": [{"reasoning": "thinking hard", "text": "answer"}]}))
        .start()
        .await;
    let st = s.chat_stream(ask("x")).await;
    let reasoning: String = st
        .chunks
        .iter()
        .filter_map(|c| c["choices"].get(0)?["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "thinking hard");
    assert_eq!(st.content(), "answer");
    let r = s.chat(ask("x")).await;
    assert_eq!(r.body["choices"][0]["message"]["content"], "answer");
    assert_eq!(
        r.body["choices"][0]["message"]["reasoning_content"],
        "thinking hard"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quirky_upstreams_still_drive_the_loop() {
    for quirks in [
        json!({"index": "missing", "no_done": true}),
        json!({"index": "from_one", "id_every_delta": true}),
        json!({"empty_ids": true, "arguments_object": true, "crlf": true}),
        json!({"index": "zero", "split_arguments": 9, "comments": true, "empty_first_chunk": true}),
    ] {
        let s = TestServer::builder()
            .file("a.txt", "A")
            .file("b.txt", "B")
            .script(json!({"rounds": [
                {"tool_calls": [
                    {"name": "read_file", "arguments": {"filepath": "a.txt"}},
                    {"name": "read_file", "arguments": {"filepath": "b.txt"}}],
                 "finish_reason": "stop", "quirks": quirks},
                {"text": "done", "quirks": quirks}
            ]}))
            .start()
            .await;
        let r = s.chat(ask("x")).await;
        assert_eq!(r.status, 200, "{quirks}: {}", r.text);
        assert_eq!(
            r.body["choices"][0]["message"]["content"], "done",
            "{quirks}"
        );
        let reqs = s.requests();
        check_conversation_invariants(&reqs);
        let results: Vec<&str> = reqs[1].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(results, ["A", "B"], "{quirks}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streaming_upstreams_are_understood() {
    let s = TestServer::builder()
        .file("a.txt", "A")
        .script(json!({"rounds": [
            {"json": true, "tool_calls": [{"id": "1", "name": "read_file", "arguments": {"filepath": "a.txt"}}]},
            {"json": true, "text": "It is A."}
        ]}))
        .start()
        .await;
    let st = s.chat_stream(ask("x")).await;
    assert_eq!(st.content(), "It is A.");
    assert_eq!(tool_result(&s.requests()[1], "1"), "A");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_left_in_the_text_are_run_and_never_shown() {
    let s = TestServer::builder()
        .file("a.txt", "A")
        .script(json!({"rounds": [
            {"text": "I'll read it.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"filepath\": \"a.txt\"}}\n</tool_call>", "chunk_size": 5},
            {"text": "```tool\nTOOL_NAME: ls\nBEGIN_ARG: dirPath\n.\nEND_ARG\n```", "chunk_size": 7},
            {"text": "It says A."}
        ]}))
        .start()
        .await;
    let st = s.chat_stream(ask("x")).await;
    assert_eq!(st.content(), "I'll read it.\n\nIt says A.");
    assert!(
        !st.raw.contains("tool_call") && !st.raw.contains("TOOL_NAME"),
        "{}",
        st.raw
    );
    let reqs = s.requests();
    assert_eq!(reqs.len(), 3);
    check_conversation_invariants(&reqs);
    let assistant = &reqs[1].body["messages"][1];
    assert_eq!(assistant["content"], "I'll read it.\n");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "read_file");
    let id = assistant["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(tool_result(&reqs[1], id), "A");
    let ls_id = reqs[2].body["messages"][3]["tool_calls"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(tool_result(&reqs[2], &ls_id), "a.txt");
}

/// Continue's delta merging (gui/src/redux/slices/sessionSlice.ts, as described in the
/// reference): text wins over tool calls in a delta; a delta with an id starts or updates that
/// call; one without an id extends the most recent call; arguments are appended only while
/// the accumulated string is not yet valid JSON.
fn continue_merge(chunks: &[Value]) -> (String, Vec<(String, String, String)>) {
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for c in chunks {
        let Some(delta) = c["choices"].get(0).map(|ch| &ch["delta"]) else {
            continue;
        };
        if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            text.push_str(t);
            continue;
        }
        let Some(tcs) = delta["tool_calls"].as_array() else {
            continue;
        };
        for tc in tcs {
            let id = tc["id"].as_str().unwrap_or("");
            let slot = if !id.is_empty() {
                match calls.iter().position(|(i, _, _)| i == id) {
                    Some(p) => p,
                    None => {
                        calls.push((id.to_string(), String::new(), String::new()));
                        calls.len() - 1
                    }
                }
            } else {
                calls.len() - 1
            };
            let call = &mut calls[slot];
            if let Some(n) = tc["function"]["name"].as_str() {
                if n.starts_with(call.1.as_str()) {
                    call.1 = n.to_string();
                } else if !call.1.starts_with(n) {
                    call.1.push_str(n);
                }
            }
            if let Some(a) = tc["function"]["arguments"].as_str()
                && serde_json::from_str::<Value>(&call.2).is_err()
            {
                call.2.push_str(a);
            }
        }
    }
    (text, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continue_agent_mode_request_end_to_end() {
    // The tools Continue sends in agent mode for a local model, plus one MCP tool.
    let names = [
        "read_file",
        "create_new_file",
        "run_terminal_command",
        "file_glob_search",
        "view_diff",
        "read_currently_open_file",
        "ls",
        "fetch_url_content",
        "search_web",
        "edit_existing_file",
        "single_find_and_replace",
        "grep_search",
        "mcp_jira_search",
    ];
    let tools: Vec<Value> = names
        .iter()
        .map(|n| json!({"type": "function", "function": {"name": n, "description": format!("Continue's {n}"),
            "parameters": {"type": "object", "properties": {}}}}))
        .collect();
    let s = TestServer::builder()
        .model(None)
        .file("src/lib.rs", "pub fn add(a: i32, b: i32) -> i32 { a - b }\n")
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "g1", "name": "grep_search", "arguments": {"query": "fn add"}}]},
            {"text": "Found the bug.", "tool_calls": [{"id": "e1", "name": "edit_existing_file",
                "arguments": {"filepath": "src/lib.rs", "changes": "pub fn add(a: i32, b: i32) -> i32 { a + b }"}}],
             "quirks": {"split_arguments": 6}}
        ]}))
        .start()
        .await;
    let req = json!({
        "model": "qwen2.5-coder", "max_tokens": 4096, "stream": true,
        "stream_options": {"include_usage": true}, "parallel_tool_calls": false,
        "messages": [{"role": "system", "content": "<important_rules>agent mode</important_rules>"},
                     {"role": "user", "content": "fix add()"}],
        "tools": tools,
    });
    let st = s.chat_stream(req).await;
    assert_eq!(st.status, 200);
    let (text, calls) = continue_merge(&st.chunks);
    assert_eq!(text, "Found the bug.");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "e1");
    assert_eq!(calls[0].1, "edit_existing_file");
    let args: Value = serde_json::from_str(&calls[0].2).unwrap();
    assert_eq!(args["filepath"], "src/lib.rs");
    assert_eq!(st.finish_reason().as_deref(), Some("tool_calls"));
    assert!(st.chunks.last().unwrap()["usage"].is_object());
    // grep ran here; the request went upstream with Continue's own fields and tools.
    let reqs = s.requests();
    let grep = tool_result(&reqs[1], "g1");
    assert!(
        grep.contains("1:pub fn add(a: i32, b: i32) -> i32 { a - b }"),
        "{grep}"
    );
    assert_eq!(reqs[0].body["parallel_tool_calls"], false);
    assert_eq!(reqs[0].body["max_tokens"], 4096);
    assert_eq!(reqs[0].body["model"], "qwen2.5-coder");
    assert_eq!(reqs[0].body["tools"].as_array().unwrap().len(), names.len());
    // The file is untouched: edits are Continue's to apply.
    assert_eq!(
        std::fs::read_to_string(s.path("src/lib.rs")).unwrap(),
        "pub fn add(a: i32, b: i32) -> i32 { a - b }\n"
    );
}
