//! Tool calls written as text, from recorded-style streams of real servers
//! (`tests/fixtures/textcalls/*.sse`), and the text tool mode for upstreams without native
//! tool calling.

use serde_json::{Value, json};

use crate::support::*;

/// A fixture: its file, the text the client should see of its round, and the calls in it.
struct Fixture {
    file: &'static str,
    visible: &'static str,
    calls: &'static [(&'static str, &'static str)],
}

const FIXTURES: &[Fixture] = &[
    Fixture {
        file: "llamacpp_hermes.sse",
        visible: "I'll read it.\n",
        calls: &[("read_file", r#"{"filepath":"a.txt"}"#)],
    },
    Fixture {
        file: "vllm_qwen_two_calls.sse",
        visible: "",
        calls: &[("read_file", r#"{"filepath":"a.txt"}"#), ("ls", "{}")],
    },
    Fixture {
        file: "ollama_fenced_json.sse",
        visible: "Let me check the file.\n\n",
        calls: &[("read_file", r#"{"filepath":"a.txt"}"#)],
    },
    Fixture {
        file: "lmstudio_continue_tool_block.sse",
        visible: "Reading it now.\n",
        calls: &[("read_file", r#"{"filepath":"a.txt"}"#)],
    },
    Fixture {
        file: "bare_json_answer.sse",
        visible: "",
        calls: &[("read_file", r#"{"filepath":"a.txt"}"#)],
    },
    Fixture {
        file: "hermes_unclosed_at_end.sse",
        visible: "Checking.\n",
        calls: &[("read_file", r#"{"filepath":"a.txt"}"#)],
    },
];

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/textcalls/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fixture as the events it was sent in.
fn pieces(sse: &str) -> Vec<String> {
    sse.split_inclusive("\n\n").map(str::to_string).collect()
}

/// The answer text a fixture carries, for a non-streamed upstream reply.
fn text_of(sse: &str) -> String {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

/// What the client should see: the round's visible text, then the final answer.
fn expected(f: &Fixture) -> String {
    let vis = f.visible;
    if vis.is_empty() {
        "a.txt says hi".to_string()
    } else if vis.ends_with("\n\n") {
        format!("{vis}a.txt says hi")
    } else {
        format!("{vis}\na.txt says hi")
    }
}

fn check_calls(f: &Fixture, s: &TestServer, how: &str) {
    let reqs = s.requests();
    assert_eq!(reqs.len(), 2, "{} {how}", f.file);
    check_conversation_invariants(&reqs);
    let assistant = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap()
        .clone();
    let calls = assistant["tool_calls"].as_array().unwrap();
    let got: Vec<(String, String)> = calls
        .iter()
        .map(|c| {
            let args: Value =
                serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
            (
                c["function"]["name"].as_str().unwrap().to_string(),
                args.to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = f
        .calls
        .iter()
        .map(|(n, a)| (n.to_string(), a.to_string()))
        .collect();
    assert_eq!(got, want, "{} {how}", f.file);
    let id = calls[0]["id"].as_str().unwrap();
    assert_eq!(tool_result(&reqs[1], id), "hi\n", "{} {how}", f.file);
}

async fn server(first: Value) -> TestServer {
    TestServer::builder()
        .file("a.txt", "hi\n")
        .script(json!({"rounds": [first, {"text": "a.txt says hi"}]}))
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_text_calls_run_streamed_and_not_and_never_reach_the_client() {
    for f in FIXTURES {
        let sse = fixture(f.file);
        // The upstream streams the fixture; the client streams too.
        let s = server(json!({"raw": pieces(&sse)})).await;
        let st = s.chat_stream(ask("what is in a.txt?")).await;
        assert_eq!(st.content(), expected(f), "{} (stream)", f.file);
        for marker in ["tool_call", "TOOL_NAME", "```json", "\"arguments\""] {
            assert!(
                !st.raw.contains(marker),
                "{}: {marker} leaked: {}",
                f.file,
                st.raw
            );
        }
        check_calls(f, &s, "stream");

        // The client asks for one JSON completion.
        let s = server(json!({"raw": pieces(&sse)})).await;
        let r = s.chat(ask("what is in a.txt?")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.body["choices"][0]["message"]["content"],
            expected(f),
            "{} (non-stream)",
            f.file
        );
        check_calls(f, &s, "non-stream");

        // The upstream ignores `stream` and answers with one JSON body.
        let s = server(json!({"json": true, "text": text_of(&sse)})).await;
        let st = s.chat_stream(ask("what is in a.txt?")).await;
        assert_eq!(st.content(), expected(f), "{} (JSON upstream)", f.file);
        check_calls(f, &s, "JSON upstream");
    }
}

const TEXT_MODE: &str = "[upstream]\ntool_mode = \"text\"\n";

fn text_round() -> Value {
    json!({"text": "Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"filepath\": \"a.txt\"}}\n</tool_call>", "chunk_size": 6})
}

fn check_text_mode_requests(s: &TestServer) {
    let reqs = s.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert!(r.body.get("tools").is_none(), "{:#}", r.body);
        assert!(r.body.get("tool_choice").is_none());
        for m in r.body["messages"].as_array().unwrap() {
            assert_ne!(m["role"], "tool", "{m}");
            assert!(m.get("tool_calls").is_none(), "{m}");
        }
    }
    let sys = reqs[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(
        sys.contains("# Tools") && sys.contains("## read_file"),
        "{sys}"
    );
    assert!(
        sys.contains("<tool_call>\n{\"name\": \"TOOL_NAME\""),
        "{sys}"
    );
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let n = msgs.len();
    assert_eq!(msgs[n - 2]["role"], "assistant");
    assert_eq!(
        msgs[n - 2]["content"],
        "Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"filepath\":\"a.txt\"}}\n</tool_call>"
    );
    assert_eq!(msgs[n - 1]["role"], "user");
    assert_eq!(
        msgs[n - 1]["content"],
        "<tool_response name=\"read_file\">\nhi\n\n</tool_response>"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_tool_mode_describes_the_tools_and_sends_results_as_text() {
    let s = TestServer::builder()
        .config(TEXT_MODE)
        .file("a.txt", "hi\n")
        .script(json!({"rounds": [text_round(), {"text": "a.txt says hi"}]}))
        .start()
        .await;
    let r = s.chat(ask("what is in a.txt?")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["choices"][0]["message"]["content"],
        "Let me look.\n\na.txt says hi"
    );
    check_text_mode_requests(&s);

    let s = TestServer::builder()
        .config(TEXT_MODE)
        .file("a.txt", "hi\n")
        .script(json!({"rounds": [text_round(), {"text": "a.txt says hi"}]}))
        .start()
        .await;
    let st = s.chat_stream(ask("what is in a.txt?")).await;
    assert_eq!(st.content(), "Let me look.\n\na.txt says hi");
    assert!(!st.raw.contains("tool_call"), "{}", st.raw);
    check_text_mode_requests(&s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_tool_mode_hands_client_tools_back_and_reads_their_results() {
    let s = TestServer::builder()
        .config(TEXT_MODE)
        .script(json!({"rounds": [
            {"text": "<tool_call>\n{\"name\": \"deploy\", \"arguments\": {\"env\": \"dev\"}}\n</tool_call>"},
            {"text": "deployed"}
        ]}))
        .start()
        .await;
    let tools = json!([{"type": "function", "function": {"name": "deploy", "description": "Deploy.",
        "parameters": {"type": "object", "properties": {"env": {"type": "string"}}}}}]);
    let mut body = ask("deploy to dev");
    body["tools"] = tools.clone();
    let r = s.chat(body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["choices"][0]["finish_reason"], "tool_calls");
    let call = r.body["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "deploy");
    assert_eq!(call["function"]["arguments"], "{\"env\":\"dev\"}");
    let sys = s.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(sys.contains("## deploy\nDeploy."), "{sys}");
    // The client runs it and sends the result back in the native shape.
    let follow = json!({"model": "mock-model", "tools": tools, "messages": [
        {"role": "user", "content": "deploy to dev"},
        {"role": "assistant", "content": null, "tool_calls": [call.clone()]},
        {"role": "tool", "tool_call_id": call["id"], "content": "ok: dev is live"}
    ]});
    let r = s.chat(follow).await;
    assert_eq!(r.body["choices"][0]["message"]["content"], "deployed");
    let msgs = s.requests()[1].body["messages"].clone();
    let last = msgs.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last,
        json!({"role": "user", "content": "<tool_response name=\"deploy\">\nok: dev is live\n</tool_response>"})
    );
}
