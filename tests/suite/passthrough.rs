//! Requests that are not agent requests: `POST /v1/completions` and `/v1/embeddings` passed
//! through to the routed upstream, and chat requests for a `plain/` model (Continue's apply
//! and edit roles) sent upstream unchanged, in the shapes Continue sends for each role.

use serde_json::{Value, json};

use crate::support::*;

/// Continue's autocomplete on an `openai` provider: a fill-in-the-middle prompt, streamed, to
/// `{apiBase}/completions` (the openai adapter's `completionStream`).
fn autocomplete_body(model: &str) -> Value {
    json!({"model": model, "prompt": "def add(a, b):\n    ", "suffix": "\n\nprint(add(1, 2))\n",
           "max_tokens": 256, "temperature": 0.01, "stop": ["\n\n", "```", "\ndef "],
           "stream": true})
}

/// Continue's edit role: one user message with the code to rewrite and the instruction, no
/// tools, streamed.
fn edit_body(model: &str) -> Value {
    json!({"model": model, "stream": true, "max_tokens": 4096, "temperature": 0,
           "messages": [{"role": "user", "content":
               "```python\ndef add(a, b):\n    return a + b\n```\n\nRewrite the code above to \
                satisfy this request: \"add a docstring\". Output only a code block with the \
                rewritten code:"}]})
}

/// Continue's apply role: the original file and the suggested change, answer only code, with
/// a predicted output where the provider takes one.
fn apply_body(model: &str) -> Value {
    json!({"model": model, "stream": true, "max_tokens": 4096,
           "prediction": {"type": "content", "content": "def add(a, b):\n    return a + b\n"},
           "messages": [
               {"role": "system", "content": "You apply code changes. Output only the whole file."},
               {"role": "user", "content": "ORIGINAL:\n```python\ndef add(a, b):\n    return a + b\n```\n\
                   CHANGE:\n```python\ndef add(a, b):\n    \"\"\"Sum.\"\"\"\n    ...\n```"}]})
}

fn sse_texts(raw: &str) -> Vec<Value> {
    raw.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn completions_pass_through_streamed_and_not_with_the_model_routed() {
    let s = TestServer::builder()
        .model(None)
        .config("[aliases]\ncoder = \"served-model\"\n")
        .script(json!({"rounds": [
            {"text": "return a + b", "chunk_size": 4},
            {"text": "return a + b"},
        ]}))
        .start()
        .await;
    let streamed = s
        .post_raw(
            "/v1/completions",
            autocomplete_body("plain/coder").to_string(),
        )
        .await;
    assert_eq!(streamed.status, 200, "{}", streamed.text);
    assert!(
        streamed.headers[reqwest::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let chunks = sse_texts(&streamed.text);
    let text: String = chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "return a + b");
    assert!(streamed.text.ends_with("data: [DONE]\n\n"));
    assert!(streamed.headers.contains_key("x-toolpilot-run-id"));
    let mut plain = autocomplete_body("coder");
    plain["stream"] = json!(false);
    let one = s.post_raw("/completions", plain.to_string()).await;
    assert_eq!(one.status, 200, "{}", one.text);
    assert_eq!(one.body["object"], "text_completion");
    assert_eq!(one.body["choices"][0]["text"], "return a + b");
    // The body went upstream as the client sent it, the model routed (alias, prefix off).
    let reqs = s.requests();
    assert_eq!(reqs[0].path, "/v1/completions");
    let mut want = autocomplete_body("served-model");
    assert_eq!(reqs[0].body, want);
    want["stream"] = json!(false);
    assert_eq!(reqs[1].body, want);
}

#[tokio::test]
async fn passed_through_failures_are_retried_and_keep_the_openai_error_shape() {
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"status": 503, "error": "warming up"},
            {"text": "ok"},
            {"status": 400, "error": "prompt is too long for this model"},
        ]}))
        .start()
        .await;
    let mut body = autocomplete_body("mock-model");
    body["stream"] = json!(false);
    let r = s.post_raw("/v1/completions", body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["choices"][0]["text"], "ok");
    let r = s.post_raw("/v1/completions", body.to_string()).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("prompt is too long"),
        "{}",
        r.text
    );
    let r = s.post_raw("/v1/completions", "[1]").await;
    assert_eq!(r.status, 400);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`prompt`")
    );
}

#[tokio::test]
async fn embeddings_pass_through_to_the_upstream() {
    let s = TestServer::builder()
        .script(json!({"rounds": [], "embeddings": [{"contains": "apple", "vector": [1.0, 0.0]}]}))
        .start()
        .await;
    let r = s
        .post_raw(
            "/v1/embeddings",
            json!({"model": "mock-model", "input": ["an apple a day"]}).to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["data"][0]["embedding"], json!([1.0, 0.0]));
    assert_eq!(
        s.mock().embedding_requests()[0]["input"],
        json!(["an apple a day"])
    );
}

#[tokio::test]
async fn continue_edit_and_apply_requests_for_a_plain_model_reach_the_upstream_unchanged() {
    let s = TestServer::builder()
        .file("notes.md", "notes\n")
        .config("[prompt]\nsystem_message = true\n")
        .script(json!({"rounds": [
            {"text": "```python\ndef add(a, b):\n    \"\"\"Sum.\"\"\"\n    return a + b\n```"},
            {"text": "def add(a, b):\n    \"\"\"Sum.\"\"\"\n    return a + b\n"},
            // The same request without the prefix is an agent request: toolpilot's tools.
            {"text": "agent answer"},
        ]}))
        .start()
        .await;
    let edit = s.chat_stream(edit_body("plain/mock-model")).await;
    assert_eq!(edit.status, 200);
    assert!(edit.content().starts_with("```python\ndef add"));
    let apply = s.chat_stream(apply_body("plain/mock-model")).await;
    assert_eq!(
        apply.content(),
        "def add(a, b):\n    \"\"\"Sum.\"\"\"\n    return a + b\n"
    );
    let agent = s.chat_stream(edit_body("mock-model")).await;
    assert_eq!(agent.content(), "agent answer");
    let reqs = s.requests();
    for (i, sent) in [edit_body("mock-model"), apply_body("mock-model")]
        .into_iter()
        .enumerate()
    {
        let got = &reqs[i].body;
        assert_eq!(got["messages"], sent["messages"], "request {i}");
        assert!(got.get("tools").is_none(), "request {i}: {got}");
        for key in ["max_tokens", "temperature", "prediction"] {
            assert_eq!(got.get(key), sent.get(key), "request {i}: {key}");
        }
    }
    assert!(
        reqs[2].body["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    assert_eq!(reqs[2].body["messages"][0]["role"], "system");
}

#[tokio::test]
async fn the_plain_header_does_what_the_prefix_does() {
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "plain"}]}))
        .start()
        .await;
    let r = s
        .client
        .post(s.url("/v1/chat/completions"))
        .header("x-toolpilot-plain", "true")
        .body(ask("hi").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(s.requests()[0].body.get("tools").is_none());
    let bad = s
        .client
        .post(s.url("/v1/chat/completions"))
        .header("x-toolpilot-plain", "maybe")
        .body(ask("hi").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}
