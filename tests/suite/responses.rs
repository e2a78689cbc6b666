//! `POST /v1/responses`: the Responses API over the same loop, against the mock upstream.
//! What the upstream receives (the mapped chat request) is checked as closely as what the
//! client gets.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::support::*;

/// A parsed Responses event stream.
struct Events {
    status: u16,
    headers: reqwest::header::HeaderMap,
    /// `(event line, data)`, in order.
    events: Vec<(String, Value)>,
    comments: Vec<String>,
    raw: String,
}

impl Events {
    fn types(&self) -> Vec<&str> {
        self.events.iter().map(|(t, _)| t.as_str()).collect()
    }

    fn of(&self, kind: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|(t, _)| t == kind)
            .map(|(_, d)| d)
            .collect()
    }

    /// The answer's text, from the deltas.
    fn text(&self) -> String {
        self.of("response.output_text.delta")
            .iter()
            .map(|d| d["delta"].as_str().unwrap())
            .collect()
    }

    /// The last event's response object.
    fn last_response(&self) -> &Value {
        &self.events.last().expect("no events").1["response"]
    }
}

fn parse_events(status: u16, headers: reqwest::header::HeaderMap, raw: String) -> Events {
    let mut events = Vec::new();
    let mut comments = Vec::new();
    for block in raw.split("\n\n") {
        let block = block.trim_matches('\n');
        if block.is_empty() {
            continue;
        }
        if let Some(c) = block.strip_prefix(": ") {
            comments.push(c.to_string());
            continue;
        }
        let (ev, data) = block
            .split_once('\n')
            .unwrap_or_else(|| panic!("an SSE block without data: {block:?}"));
        let ev = ev
            .strip_prefix("event: ")
            .unwrap_or_else(|| panic!("no event line: {block:?}"));
        let data: Value = serde_json::from_str(
            data.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("no data line: {block:?}")),
        )
        .unwrap_or_else(|e| panic!("bad data in {block:?}: {e}"));
        assert_eq!(data["type"], ev, "event line and type differ: {block}");
        events.push((ev.to_string(), data));
    }
    Events {
        status,
        headers,
        events,
        comments,
        raw,
    }
}

/// The invariants a client's stream accumulator relies on: sequence numbers count from 0;
/// every item is added before its deltas and finished once, in output order, one at a time;
/// deltas name the open item by index and id; the text of each done event is the sum of its
/// deltas; the final response's output is the finished items.
fn check_stream(ev: &Events) {
    let types = ev.types();
    assert_eq!(types[0], "response.created", "{types:?}");
    assert_eq!(types[1], "response.in_progress", "{types:?}");
    let id = ev.events[0].1["response"]["id"].clone();
    let mut open: Option<(u64, String)> = None;
    let mut done_items: Vec<Value> = Vec::new();
    let mut text: HashMap<u64, String> = HashMap::new();
    for (n, (t, d)) in ev.events.iter().enumerate() {
        assert_eq!(d["sequence_number"], n as u64, "{t}");
        match t.as_str() {
            "response.created" | "response.in_progress" => {
                assert_eq!(d["response"]["status"], "in_progress");
                assert_eq!(d["response"]["id"], id);
            }
            "response.output_item.added" => {
                assert!(open.is_none(), "item added while another is open: {d}");
                let index = d["output_index"].as_u64().unwrap();
                assert_eq!(index, done_items.len() as u64, "{d}");
                open = Some((index, d["item"]["id"].as_str().unwrap().to_string()));
            }
            "response.output_item.done" => {
                let (index, item_id) = open.take().expect("done without added");
                assert_eq!(d["output_index"], index);
                assert_eq!(d["item"]["id"], item_id.as_str());
                if let Some(t) = text.get(&index) {
                    let item = &d["item"];
                    let full = match item["type"].as_str() {
                        Some("message") => &item["content"][0]["text"],
                        Some("reasoning") => &item["summary"][0]["text"],
                        other => panic!("text deltas for a {other:?} item"),
                    };
                    assert_eq!(full, t.as_str(), "deltas and done differ");
                }
                done_items.push(d["item"].clone());
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                assert!(open.is_none(), "response ended with an open item");
                assert_eq!(n, ev.events.len() - 1, "events after the end");
                assert_eq!(d["response"]["id"], id);
                assert_eq!(d["response"]["output"], Value::Array(done_items.clone()));
            }
            _ => {
                let (index, item_id) = open.as_ref().expect("an item event outside an item");
                assert_eq!(d["output_index"], *index, "{t}: {d}");
                assert_eq!(d["item_id"], item_id.as_str(), "{t}: {d}");
                if t.ends_with("text.delta") {
                    text.entry(*index)
                        .or_default()
                        .push_str(d["delta"].as_str().unwrap());
                }
            }
        }
    }
    let last = *types.last().unwrap();
    assert!(
        matches!(
            last,
            "response.completed" | "response.incomplete" | "response.failed"
        ),
        "{last}"
    );
    assert!(
        !ev.raw.contains("[DONE]"),
        "a Responses stream has no [DONE]"
    );
}

async fn create(s: &TestServer, body: Value) -> Reply {
    s.post_raw("/v1/responses", body.to_string()).await
}

async fn create_stream(s: &TestServer, mut body: Value) -> Events {
    body["stream"] = json!(true);
    let r = s
        .client
        .post(s.url("/v1/responses"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let raw = r.text().await.unwrap();
    if status != 200 {
        // An error before the stream started: a JSON body.
        return Events {
            status,
            headers,
            events: Vec::new(),
            comments: Vec::new(),
            raw,
        };
    }
    parse_events(status, headers, raw)
}

/// The text of every output message item of a response object.
fn output_text(resp: &Value) -> String {
    resp["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap().iter())
        .filter_map(|p| p["text"].as_str())
        .collect()
}

fn read_then_answer() -> Value {
    json!({"rounds": [
        {"text": "Let me look.", "tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"filepath": "a.txt"}}],
         "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}},
        {"text": "It says alpha.", "chunk_size": 3,
         "usage": {"prompt_tokens": 150, "completion_tokens": 7, "total_tokens": 157}}
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streamed_response_runs_server_tools_over_the_mapped_request() {
    let s = TestServer::builder()
        .file("a.txt", "alpha\n")
        .script(read_then_answer())
        .start()
        .await;
    let r = create(
        &s,
        json!({
            "model": "mock-model",
            "instructions": "Answer briefly.",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "What does a.txt say?"}]}],
            "temperature": 0.2, "max_output_tokens": 300, "metadata": {"ticket": "T-1"},
            "text": {"format": {"type": "json_object"}}, "reasoning": {"effort": "low"},
            "store": true, "include": ["reasoning.encrypted_content"], "user": "ann"
        }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let b = &r.body;
    let run_id = r.headers["x-toolpilot-run-id"].to_str().unwrap();
    assert_eq!(b["id"], format!("resp_{run_id}"));
    assert_eq!(b["object"], "response");
    assert_eq!(b["status"], "completed");
    assert_eq!(b["model"], "mock-model");
    assert_eq!(b["instructions"], "Answer briefly.");
    assert_eq!(b["metadata"], json!({"ticket": "T-1"}));
    assert_eq!(b["max_output_tokens"], 300);
    assert_eq!(b["output"].as_array().unwrap().len(), 1, "{b}");
    let msg = &b["output"][0];
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["role"], "assistant");
    assert_eq!(msg["status"], "completed");
    assert_eq!(
        msg["content"][0],
        json!({"type": "output_text", "text": "Let me look.\n\nIt says alpha.",
               "annotations": [], "logprobs": []})
    );
    // Usage is summed over both rounds, in the Responses shape.
    assert_eq!(
        b["usage"],
        json!({"input_tokens": 250, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": 17, "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": 267})
    );

    let reqs = s.requests();
    assert_eq!(reqs.len(), 2);
    check_conversation_invariants(&reqs);
    let first = &reqs[0].body;
    assert_eq!(
        first["messages"],
        json!([{"role": "system", "content": "Answer briefly."},
               {"role": "user", "content": "What does a.txt say?"}])
    );
    // No tools in the request: toolpilot's own set, in chat form.
    let tools = first["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["type"] == "function" && t["function"]["name"] == "read_file"),
        "{tools:?}"
    );
    assert_eq!(first["temperature"], json!(0.2));
    assert_eq!(first["max_tokens"], 300);
    assert_eq!(first["response_format"], json!({"type": "json_object"}));
    assert_eq!(first["reasoning_effort"], "low");
    assert_eq!(first["user"], "ann");
    for absent in [
        "metadata",
        "store",
        "include",
        "input",
        "instructions",
        "text",
        "reasoning",
        "max_output_tokens",
    ] {
        assert!(
            first.get(absent).is_none(),
            "{absent} was forwarded: {first}"
        );
    }
    assert_eq!(tool_result(&reqs[1], "r1"), "alpha\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_response_is_a_consistent_event_sequence() {
    let s = TestServer::builder()
        .file("a.txt", "alpha\n")
        .script(read_then_answer())
        .start()
        .await;
    let ev = create_stream(
        &s,
        json!({"model": "mock-model", "input": "What does a.txt say?"}),
    )
    .await;
    assert_eq!(ev.status, 200, "{}", ev.raw);
    assert_eq!(ev.headers["content-type"], "text/event-stream");
    assert!(ev.headers.contains_key("x-toolpilot-run-id"));
    check_stream(&ev);
    // One message item across both rounds (progress went to comments).
    assert_eq!(
        ev.types()[2..6],
        [
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
        ]
    );
    assert_eq!(ev.text(), "Let me look.\n\nIt says alpha.");
    // The answer arrives in the upstream's pieces.
    assert!(ev.of("response.output_text.delta").len() >= 6, "{}", ev.raw);
    assert_eq!(ev.of("response.output_item.added").len(), 1);
    let done = ev.last_response();
    assert_eq!(ev.types().last(), Some(&"response.completed"));
    assert_eq!(done["status"], "completed");
    assert_eq!(output_text(done), "Let me look.\n\nIt says alpha.");
    assert_eq!(done["usage"]["total_tokens"], 267);
    assert!(
        ev.comments
            .iter()
            .any(|c| c.contains("toolpilot: running read_file")),
        "{:?}",
        ev.comments
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_model_reasoning_become_reasoning_items() {
    let s = TestServer::builder()
        .config("[server]\nprogress = \"reasoning\"\n")
        .file("a.txt", "alpha\n")
        .script(json!({"rounds": [
            {"reasoning": "I should read a.txt.", "text": "Let me look.",
             "tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"filepath": "a.txt"}}]},
            {"text": "It says alpha."},
            {"reasoning": "Easy.", "text": "Hi."}
        ]}))
        .start()
        .await;
    let ev = create_stream(&s, json!({"model": "mock-model", "input": "read a.txt"})).await;
    assert_eq!(ev.status, 200, "{}", ev.raw);
    check_stream(&ev);
    let items: Vec<&Value> = ev
        .of("response.output_item.done")
        .iter()
        .map(|d| &d["item"])
        .collect();
    let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    // The model's reasoning, its first words, toolpilot's progress, the answer.
    assert_eq!(kinds, ["reasoning", "message", "reasoning", "message"]);
    assert_eq!(items[0]["summary"][0]["text"], "I should read a.txt.");
    let progress = items[2]["summary"][0]["text"].as_str().unwrap();
    assert!(
        progress.starts_with(
            "toolpilot: running read_file {\"filepath\":\"a.txt\"}\ntoolpilot: read_file ok in "
        ),
        "{progress}"
    );
    assert_eq!(ev.text(), "Let me look.\n\nIt says alpha.");
    assert!(ev.comments.iter().all(|c| !c.contains("toolpilot:")));

    // Non-streamed, the model's reasoning is an item too.
    let r = create(&s, json!({"model": "mock-model", "input": "hello"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let out = &r.body["output"];
    assert_eq!(out[0]["type"], "reasoning");
    assert_eq!(
        out[0]["summary"][0],
        json!({"type": "summary_text", "text": "Easy."})
    );
    assert_eq!(out[1]["content"][0]["text"], "Hi.");
}

fn deploy_tools() -> Value {
    json!([
        {"type": "function", "name": "deploy", "description": "deploy the app",
         "parameters": {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]}},
        {"type": "function", "name": "read_file", "description": "read a file",
         "parameters": {"type": "object", "properties": {"filepath": {"type": "string"}}}}
    ])
}

fn deploy_script() -> Value {
    json!({"rounds": [
        {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"filepath": "a.txt"}}]},
        {"text": "Deploying.", "tool_calls": [{"id": "d1", "name": "deploy", "arguments": {"env": "prod"}}]},
        {"text": "Deployed to prod."}
    ]})
}

/// The upstream's view of the continuation: the server-side round the client never saw is
/// back, then the client's call and its output.
fn check_continuation(reqs: &[toolpilot::mock::Recorded]) {
    assert_eq!(reqs.len(), 3);
    check_conversation_invariants(reqs);
    let m = reqs[2].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "tool"],
        "{m:#?}"
    );
    assert_eq!(m[2]["tool_calls"][0]["id"], "r1");
    assert_eq!(m[3]["content"], "alpha\n");
    assert_eq!(m[4]["content"], "Deploying.");
    assert_eq!(m[4]["tool_calls"][0]["id"], "d1");
    assert_eq!(
        m[5],
        json!({"role": "tool", "tool_call_id": "d1", "content": "deployed: build 7"})
    );
    // The client's tools in chat form, on every request.
    assert_eq!(
        reqs[2].body["tools"][0],
        json!({"type": "function", "function": {"name": "deploy", "description": "deploy the app",
               "parameters": {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]}}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tools_come_back_as_function_calls_and_their_outputs_continue_the_run() {
    let s = TestServer::builder()
        .file("a.txt", "alpha\n")
        .script(deploy_script())
        .start()
        .await;
    let input = json!([{"role": "user", "content": "Read a.txt, then deploy."}]);
    let r = create(
        &s,
        json!({"model": "mock-model", "instructions": "You deploy.", "input": input,
               "tools": deploy_tools(), "store": false}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let out = r.body["output"].as_array().unwrap();
    assert_eq!(out.len(), 2, "{}", r.body);
    assert_eq!(out[0]["type"], "message");
    assert_eq!(output_text(&r.body), "Deploying.");
    assert_eq!(out[1]["type"], "function_call");
    assert_eq!(out[1]["call_id"], "d1");
    assert_eq!(out[1]["name"], "deploy");
    assert_eq!(out[1]["arguments"], "{\"env\":\"prod\"}");
    assert_eq!(out[1]["status"], "completed");
    assert!(out[1]["id"].as_str().unwrap().starts_with("fc_"));
    assert_eq!(r.body["status"], "completed");

    // A stateless client (store: false) sends the whole conversation back, its output items
    // included, plus the call's output.
    let mut items = input.as_array().unwrap().clone();
    items.extend(out.iter().cloned());
    items.push(
        json!({"type": "function_call_output", "call_id": "d1", "output": "deployed: build 7"}),
    );
    let r = create(
        &s,
        json!({"model": "mock-model", "instructions": "You deploy.", "input": items,
               "tools": deploy_tools(), "store": false}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(output_text(&r.body), "Deployed to prod.");
    check_continuation(&s.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_function_calls_and_a_continuation_by_previous_response_id() {
    let s = TestServer::builder()
        .file("a.txt", "alpha\n")
        .script(deploy_script())
        .start()
        .await;
    let ev = create_stream(
        &s,
        json!({"model": "mock-model", "instructions": "You deploy.",
               "input": "Read a.txt, then deploy.", "tools": deploy_tools()}),
    )
    .await;
    assert_eq!(ev.status, 200, "{}", ev.raw);
    check_stream(&ev);
    let call = &ev.of("response.output_item.done")[1]["item"];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["call_id"], "d1");
    let args = ev.of("response.function_call_arguments.done");
    assert_eq!(args[0]["arguments"], "{\"env\":\"prod\"}");
    assert_eq!(args[0]["name"], "deploy");
    let id = ev.last_response()["id"].as_str().unwrap().to_string();

    // The SDK's pattern: only the new items, and the previous response's id.
    let r = create(
        &s,
        json!({"model": "mock-model", "instructions": "You deploy.", "previous_response_id": id,
               "input": [{"type": "function_call_output", "call_id": "d1", "output": "deployed: build 7"}],
               "tools": deploy_tools()}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["previous_response_id"], id.as_str());
    assert_eq!(output_text(&r.body), "Deployed to prod.");
    check_continuation(&s.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_response_id_carries_the_conversation_but_not_the_instructions() {
    let s = TestServer::builder()
        .script(
            json!({"rounds": [{"text": "Hello Ann."}, {"text": "You are Ann."}, {"text": "x"}]}),
        )
        .start()
        .await;
    let r1 = create(
        &s,
        json!({"model": "mock-model", "instructions": "Be warm.", "input": "I am Ann."}),
    )
    .await;
    assert_eq!(r1.status, 200, "{}", r1.text);
    let r2 = create(
        &s,
        json!({"model": "mock-model", "instructions": "Be terse.", "input": "Who am I?",
               "previous_response_id": r1.body["id"]}),
    )
    .await;
    assert_eq!(r2.status, 200, "{}", r2.text);
    assert_eq!(output_text(&r2.body), "You are Ann.");
    assert_eq!(
        s.requests()[1].body["messages"],
        json!([{"role": "system", "content": "Be terse."},
               {"role": "user", "content": "I am Ann."},
               {"role": "assistant", "content": "Hello Ann."},
               {"role": "user", "content": "Who am I?"}])
    );
    // A chain: the third request sees both earlier turns.
    let r3 = create(
        &s,
        json!({"model": "mock-model", "input": "Thanks.", "previous_response_id": r2.body["id"]}),
    )
    .await;
    assert_eq!(r3.status, 200, "{}", r3.text);
    assert_eq!(
        s.requests()[2].body["messages"].as_array().unwrap().len(),
        5
    );

    // Unknown ids, and responses made with store: false, cannot be continued.
    let bad = create(
        &s,
        json!({"model": "mock-model", "input": "x", "previous_response_id": "resp_nope"}),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert_eq!(bad.body["error"]["param"], "previous_response_id");
    assert_eq!(bad.body["error"]["code"], "previous_response_not_found");
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "ok"}]}))
        .start()
        .await;
    let unstored = create(
        &s,
        json!({"model": "mock-model", "input": "x", "store": false}),
    )
    .await;
    assert_eq!(unstored.status, 200);
    let bad = create(
        &s,
        json!({"model": "mock-model", "input": "y", "previous_response_id": unstored.body["id"]}),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert_eq!(
        s.requests().len(),
        1,
        "a refused request reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_openai_shaped_errors_naming_the_param() {
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "never"}]}))
        .start()
        .await;
    for (body, param, words) in [
        ("{not json", Value::Null, "not valid JSON"),
        ("[1]", Value::Null, "must be a JSON object"),
        (r#"{"model":"m"}"#, json!("input"), "`input` is required"),
        (
            r#"{"input":{"role":"user"}}"#,
            json!("input"),
            "must be a string or an array",
        ),
        (
            r#"{"input":[{"type":"mystery"}]}"#,
            json!("input[0].type"),
            "\"mystery\"",
        ),
        (
            r#"{"input":[{"type":"function_call_output","output":"x"}]}"#,
            json!("input[0].call_id"),
            "has no `call_id`",
        ),
        (
            r#"{"input":[{"type":"function_call_output","call_id":"c","output":"x"}]}"#,
            json!("input[0].call_id"),
            "no call with that id",
        ),
        (
            r#"{"input":"x","tools":"all"}"#,
            json!("tools"),
            "`tools` must be an array",
        ),
        (
            r#"{"input":"x","tool_choice":5}"#,
            json!("tool_choice"),
            "tool_choice must be",
        ),
        (
            r#"{"input":"x","stream":1}"#,
            json!("stream"),
            "`stream` must be true or false",
        ),
        (
            r#"{"input":[{"type":"item_reference","id":"msg_1"}]}"#,
            json!("input[0]"),
            "item_reference",
        ),
        (
            r#"{"input":"x","conversation":"c1"}"#,
            json!("conversation"),
            "not supported",
        ),
    ] {
        let r = s.post_raw("/v1/responses", body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        let e = &r.body["error"];
        assert_eq!(e["type"], "invalid_request_error", "{body}");
        assert_eq!(e["param"], param, "{body}: {}", r.text);
        assert!(
            e["message"].as_str().unwrap().contains(words),
            "{body}: {}",
            e["message"]
        );
    }
    assert!(s.requests().is_empty());
    let r = s.get("/v1/responses").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.headers["allow"], "POST");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_failing_mid_stream_ends_with_response_failed() {
    let s = TestServer::builder()
        .config("[upstream]\nmax_retries = 0\n")
        .script(json!({"rounds": [
            {"text": "so far so good", "chunk_size": 4, "error_after": {"chunks": 3, "message": "GPU on fire"}},
            {"status": 500, "error": "down"}
        ]}))
        .start()
        .await;
    let ev = create_stream(&s, json!({"model": "mock-model", "input": "hi"})).await;
    assert_eq!(ev.status, 200, "{}", ev.raw);
    check_stream(&ev);
    assert_eq!(ev.types().last(), Some(&"response.failed"));
    let failed = ev.last_response();
    assert_eq!(failed["status"], "failed");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("GPU on fire"),
        "{failed}"
    );
    // What was said is there, marked incomplete.
    assert_eq!(failed["output"][0]["status"], "incomplete");
    let said = ev.text();
    assert!(
        !said.is_empty() && "so far so good".starts_with(&said) && said.len() < 14,
        "{said:?}"
    );

    // Failing before anything was sent: a real HTTP error.
    let ev = create_stream(&s, json!({"model": "mock-model", "input": "hi"})).await;
    assert_eq!(ev.status, 502, "{}", ev.raw);
    let body: Value = serde_json::from_str(&ev.raw).unwrap();
    assert!(
        body["error"]["message"].as_str().unwrap().contains("down"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hitting_the_token_limit_makes_the_response_incomplete() {
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"text": "cut sho", "finish_reason": "length"},
            {"text": "cut sho", "finish_reason": "length"}
        ]}))
        .start()
        .await;
    let r = create(
        &s,
        json!({"model": "mock-model", "input": "write a lot", "max_output_tokens": 3}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["status"], "incomplete");
    assert_eq!(
        r.body["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(r.body["output"][0]["status"], "incomplete");
    let ev = create_stream(
        &s,
        json!({"model": "mock-model", "input": "write a lot", "max_output_tokens": 3}),
    )
    .await;
    check_stream(&ev);
    assert_eq!(ev.types().last(), Some(&"response.incomplete"));
    assert_eq!(
        ev.last_response()["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(s.requests()[0].body["max_tokens"], 3);
}

/// A request in the shape the Codex CLI sends (instructions, developer and environment
/// messages, its function tools, the free-form `apply_patch`, `web_search`, `store: false`,
/// `include`, `reasoning`, `prompt_cache_key`, `text.verbosity`), written from its documented
/// shape: the patch call goes back as a `custom_tool_call`, and Codex's next request (its
/// recorded output items plus the tool's output) continues the conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_cli_turn_round_trips() {
    let fixture: Value =
        serde_json::from_str(include_str!("../fixtures/codex_responses_request.json")).unwrap();
    let patch = "*** Begin Patch\n*** Update File: README.md\n@@\n-teh project\n+the project\n*** End Patch\n";
    let s = TestServer::builder()
        .model(None)
        .script(json!({"rounds": [
            {"reasoning": "The README has a typo.", "text": "I'll fix it.",
             "tool_calls": [{"id": "call_p1", "name": "apply_patch", "arguments": {"input": patch}}],
             "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240}},
            {"text": "Fixed the typo in README.md."}
        ]}))
        .start()
        .await;
    let send = |body: Value| {
        let s = &s;
        async move {
            let r = s
                .client
                .post(s.url("/v1/responses"))
                .header("content-type", "application/json")
                .header("openai-beta", "responses=experimental")
                .header("originator", "codex_cli_rs")
                .header("session_id", "0199f3c2-6a1e-7d40-9b1e-2f8c4d5e6a7b")
                .header("accept", "text/event-stream")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            parse_events(status, headers, r.text().await.unwrap())
        }
    };
    let ev = send(fixture.clone()).await;
    assert_eq!(ev.status, 200, "{}", ev.raw);
    check_stream(&ev);
    // What Codex reads: output_item.done items, deltas, and response.completed with an id.
    let items: Vec<Value> = ev
        .of("response.output_item.done")
        .iter()
        .map(|d| d["item"].clone())
        .collect();
    let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["reasoning", "message", "custom_tool_call"]);
    assert_eq!(items[2]["name"], "apply_patch");
    assert_eq!(items[2]["call_id"], "call_p1");
    assert_eq!(items[2]["input"], patch);
    assert_eq!(
        ev.of("response.custom_tool_call_input.done")[0]["input"],
        patch
    );
    let done = ev.last_response();
    assert!(done["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(done["usage"]["input_tokens"], 1200);
    assert_eq!(done["usage"]["output_tokens"], 40);

    let first = &s.requests()[0].body;
    assert_eq!(first["model"], "qwen2.5-coder");
    let m = first["messages"].as_array().unwrap();
    assert_eq!(m[0]["role"], "system");
    assert!(
        m[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You are a coding agent")
    );
    assert_eq!(m[1]["role"], "system"); // developer
    assert!(
        m[1]["content"]
            .as_str()
            .unwrap()
            .contains("<permissions instructions>")
    );
    assert!(
        m[2]["content"]
            .as_str()
            .unwrap()
            .contains("<environment_context>")
    );
    assert_eq!(
        m[3],
        json!({"role": "user", "content": "Fix the typo in README.md"})
    );
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shell", "update_plan", "apply_patch", "view_image"]);
    let apply = &first["tools"][2]["function"];
    assert_eq!(apply["parameters"]["required"], json!(["input"]));
    assert!(
        apply["description"]
            .as_str()
            .unwrap()
            .contains("*** Begin Patch")
    );
    assert_eq!(first["parallel_tool_calls"], false);
    assert_eq!(first["tool_choice"], "auto");
    assert_eq!(first["reasoning_effort"], "medium");
    assert_eq!(first["verbosity"], "medium");
    assert_eq!(first["prompt_cache_key"], fixture["prompt_cache_key"]);
    for absent in [
        "store",
        "include",
        "reasoning",
        "text",
        "instructions",
        "input",
    ] {
        assert!(first.get(absent).is_none(), "{absent} was forwarded");
    }

    // Codex's next request: the same input, the items it recorded, the tool's output.
    let mut next = fixture.clone();
    let input = next["input"].as_array_mut().unwrap();
    input.extend(items.iter().cloned());
    input.push(
        json!({"type": "custom_tool_call_output", "call_id": "call_p1",
                      "output": "Success. Updated the following files:\nM README.md\n"}),
    );
    let ev = send(next).await;
    assert_eq!(ev.status, 200, "{}", ev.raw);
    check_stream(&ev);
    assert_eq!(ev.text(), "Fixed the typo in README.md.");
    let reqs = s.requests();
    check_conversation_invariants(&reqs);
    let m = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(m.len(), 6, "{m:#?}");
    assert_eq!(m[4]["role"], "assistant");
    assert_eq!(m[4]["content"], "I'll fix it.");
    assert_eq!(
        m[4]["tool_calls"][0]["function"],
        json!({"name": "apply_patch", "arguments": json!({"input": patch}).to_string()})
    );
    assert_eq!(m[5]["tool_call_id"], "call_p1");
    assert!(m[5]["content"].as_str().unwrap().starts_with("Success."));
}

/// The official `openai` Python SDK's Responses client: `create` (stream and not), the
/// `responses.stream()` helper (which checks the stream's indexes and ids as it accumulates),
/// a function call continued with `previous_response_id`, typed errors, a failed stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_responses_client_works() {
    let Some(py) = crate::suite::python_sdk::python_with_sdk() else {
        return;
    };
    let read = json!({"text": "Looking.", "tool_calls": [{"name": "read_file", "arguments": {"filepath": "a.txt"}}],
                      "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}});
    let answer = json!({"text": "a.txt says hello from the SDK test", "chunk_size": 4,
                        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}});
    let s = TestServer::builder()
        .file("a.txt", "hello from the SDK test\n")
        .script(json!({"models": ["mock-model"], "rounds": [
            read, answer,                                   // 1. non-stream
            read, answer,                                   // 2. create(stream=True)
            read, answer,                                   // 3. the stream helper
            {"text": "Deploying.", "tool_calls": [{"id": "d1", "name": "deploy", "arguments": {"env": "prod"}}]}, // 4.
            {"text": "Deployed to prod."},
            {"tool_calls": [{"id": "d2", "name": "deploy", "arguments": {"env": "dev"}}]},                      // 5.
            {"text": "so far so good", "chunk_size": 4, "error_after": {"chunks": 3, "message": "GPU on fire"}} // 7.
        ]}))
        .config("[upstream]\nmax_retries = 0\n")
        .start()
        .await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/sdk_responses.py");
    let out = tokio::process::Command::new(&py)
        .arg(script)
        .arg(s.url("/v1"))
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
    let answer_text = "Looking.\n\na.txt says hello from the SDK test";

    let n = &v["nonstream"];
    assert_eq!(n["object"], "response");
    assert_eq!(n["status"], "completed");
    assert!(n["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(n["output_text"], answer_text);
    assert_eq!(n["output_types"], json!(["message"]));
    assert_eq!(n["input_tokens"], 14);
    assert_eq!(n["output_tokens"], 4);
    assert_eq!(n["total_tokens"], 18);
    assert_eq!(n["cached_tokens"], 0);
    assert_eq!(n["instructions"], "Answer briefly.");

    let st = &v["stream"];
    let types: Vec<&str> = st["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let deltas = types
        .iter()
        .filter(|t| **t == "response.output_text.delta")
        .count();
    assert!(deltas >= 5, "{types:?}");
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(types, expected);
    let seqs: Vec<u64> = st["sequence_numbers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..types.len() as u64).collect::<Vec<_>>());
    assert_eq!(st["text"], answer_text);
    assert_eq!(st["final_text"], answer_text);
    assert_eq!(st["total_tokens"], 18);

    let h = &v["helper"];
    assert_eq!(h["output_text"], answer_text);
    assert_eq!(h["status"], "completed");
    assert_eq!(h["last_snapshot"], answer_text);
    assert!(h["snapshots"].as_u64().unwrap() >= 5);

    let f = &v["function_call"];
    assert_eq!(f["text_before"], "Deploying.");
    assert_eq!(f["name"], "deploy");
    assert_eq!(f["call_id"], "d1");
    assert_eq!(f["arguments"], json!({"env": "prod"}));
    assert_eq!(f["status"], "completed");
    assert_eq!(f["follow_text"], "Deployed to prod.");
    assert_eq!(f["follow_previous"], true);

    let sf = &v["stream_function_call"];
    assert_eq!(sf["name"], "deploy");
    assert_eq!(sf["arguments"], json!({"env": "dev"}));
    assert_eq!(sf["arg_snapshots"], json!(["{\"env\":\"dev\"}"]));

    assert_eq!(v["bad_request"]["status"], 400);
    assert_eq!(v["bad_request"]["param"], "input[0].type");
    assert!(
        v["bad_request"]["message"]
            .as_str()
            .unwrap()
            .contains("\"mystery\""),
        "{}",
        v["bad_request"]
    );
    assert_eq!(v["stream_failed"]["status"], "failed");
    assert!(
        v["stream_failed"]["message"]
            .as_str()
            .unwrap()
            .contains("GPU on fire"),
        "{}",
        v["stream_failed"]
    );

    // Every conversation reached the upstream well-formed, and the tool really ran.
    let reqs = s.requests();
    check_conversation_invariants(&reqs);
    assert_eq!(
        tool_result(&reqs[1], "call_mock_0"),
        "hello from the SDK test\n"
    );
    // The continuation carried the call and its output.
    assert_eq!(tool_result(&reqs[7], "d1"), "deployed to prod");
}

/// `x-toolpilot-detach` works on this endpoint too: the run goes on after its client leaves,
/// and re-attaching gives its answer (in the chat-completions form).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_response_outlives_its_client() {
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "first part, then the rest", "chunk_size": 5, "hold_after": 3}]}))
        .start()
        .await;
    let mut resp = s
        .client
        .post(s.url("/v1/responses"))
        .header("x-toolpilot-detach", "true")
        .body(json!({"model": "mock-model", "input": "go", "stream": true}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let id = resp.headers()["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    let mut seen = String::new();
    while !seen.contains("response.output_text.delta") {
        let chunk = resp.chunk().await.unwrap().expect("ended early");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(resp);
    s.mock().release();
    let whole = s.get(&format!("/v1/runs/{id}/attach?stream=false")).await;
    assert_eq!(whole.status, 200, "{}", whole.text);
    assert_eq!(
        whole.body["choices"][0]["message"]["content"],
        "first part, then the rest"
    );
    assert_eq!(
        s.get(&format!("/v1/runs/{id}")).await.body["run"]["status"],
        "done"
    );
}
