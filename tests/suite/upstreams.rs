//! Several upstreams: routing by model name and alias, fallback, `/v1/models`; context
//! management (pruning to the window, overflow retry, Ollama's context size).

use serde_json::{Value, json};

use crate::support::*;

fn with_tools(mut body: Value, names: &[&str]) -> Value {
    // A small tool offer keeps the request size predictable in context tests.
    let tools: Vec<Value> = names
        .iter()
        .map(|n| {
            json!({"type": "function", "function": {"name": n, "description": "x",
            "parameters": {"type": "object", "properties": {"filepath": {"type": "string"}}}}})
        })
        .collect();
    body["tools"] = Value::Array(tools);
    body
}

fn ask_model(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_are_routed_by_name_glob_and_alias() {
    let b = extra_mock(json!({"rounds": [{"text": "from b"}], "repeat_last": true,
                              "models": ["beta", "gamma-1", "other"]}))
    .await;
    let config = format!(
        "[upstreams.b]\nurl = \"{}\"\nmodels = [\"beta\", \"gamma-*\"]\n\
         [aliases]\nfast = \"beta\"\npinned = {{ model = \"x-model\", upstream = \"b\" }}\n",
        b.base_url()
    );
    let s = TestServer::builder()
        .model(None)
        .config(&config)
        .script(
            json!({"rounds": [{"text": "from default"}], "repeat_last": true,
                       "models": ["mock-model"]}),
        )
        .start()
        .await;
    for (asked, answer, sent) in [
        ("mock-model", "from default", "mock-model"),
        ("anything-else", "from default", "anything-else"),
        ("beta", "from b", "beta"),
        ("gamma-7", "from b", "gamma-7"),
        ("fast", "from b", "beta"),
        ("pinned", "from b", "x-model"),
    ] {
        let r = s.chat(ask_model(asked)).await;
        assert_eq!(r.status, 200, "{asked}: {}", r.text);
        assert_eq!(
            r.body["choices"][0]["message"]["content"], answer,
            "{asked}"
        );
        // The client sees the name it asked for.
        assert_eq!(r.body["model"], asked);
        let last = if answer == "from b" {
            b.requests().pop().unwrap()
        } else {
            s.requests().pop().unwrap()
        };
        assert_eq!(last.body["model"], sent, "{asked}");
    }
    let list = s.get("/v1/models").await;
    assert_eq!(list.status, 200, "{}", list.text);
    let ids: Vec<(&str, &str)> = list.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m["owned_by"].as_str().unwrap()))
        .collect();
    for want in [
        ("fast", "toolpilot"),
        ("pinned", "toolpilot"),
        ("beta", "b"),
        ("gamma-1", "b"),
        ("mock-model", "default"),
    ] {
        assert!(ids.contains(&want), "{want:?} not in {ids:?}");
    }
    // `other` is in b's list but would be routed to the default upstream: not b's to list.
    assert!(!ids.contains(&("other", "b")), "{ids:?}");
    assert_eq!(list.body["data"][0]["alias_of"], "beta");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_no_upstream_serves_is_a_404_that_lists_what_is_routable() {
    let s = TestServer::builder()
        .model(None)
        .config(
            "[upstream]\nmodels = [\"only-this\", \"fam-*\"]\n[aliases]\nshort = \"only-this\"\n",
        )
        .script(json!({"rounds": [{"text": "ok"}]}))
        .start()
        .await;
    let r = s.chat(ask_model("gpt-9")).await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(r.body["error"]["code"], "model_not_found");
    assert_eq!(r.body["error"]["param"], "model");
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("\"gpt-9\"") && msg.contains("short, only-this, fam-*"),
        "{msg}"
    );
    assert!(s.requests().is_empty());
    assert_eq!(s.chat(ask_model("fam-2")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_upstream_configs_are_refused_with_the_key() {
    for (toml, want) in [
        (
            "[upstreams.x]\nmodels = [\"a\"]\n",
            "upstreams.x.url is missing",
        ),
        (
            "[upstreams.x]\nurl = \"http://127.0.0.1:1/v1\"\nmodels = [\"a\"]\nfallback = [\"nope\"]\n",
            "upstreams.x.fallback: \"nope\" is not another configured upstream",
        ),
        (
            "[upstreams.x]\nurl = \"http://127.0.0.1:1/v1\"\n",
            "all serve any model",
        ),
        (
            "[upstreams.x]\nurl = \"http://127.0.0.1:1/v1\"\nmodels = [\"a\"]\ntool_mode = \"smoke\"\n",
            "upstreams.x.tool_mode: \"smoke\" is not one of",
        ),
        (
            "[aliases]\nq = { model = \"m\", upstream = \"ghost\" }\n",
            "aliases.q.upstream: \"ghost\" is not a configured upstream",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, toml).unwrap();
        let args = toolpilot::config::CommonArgs {
            config: Some(path),
            upstream: Some("http://127.0.0.1:9/v1".into()),
            state_dir: Some(dir.path().join("state")),
            ..Default::default()
        };
        let e = toolpilot::config::Config::load_from(&args, &[]).unwrap_err();
        assert!(e.to_string().contains(want), "{toml}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_upstream_falls_back_without_waiting_for_retries() {
    let dead = dead_address().await;
    let config = format!(
        "[upstream]\nmax_retries = 5\nretry_base_ms = 2000\n\
         [upstreams.primary]\nurl = \"{dead}\"\nmodels = [\"mock-model\"]\nfallback = [\"default\"]\n"
    );
    let s = TestServer::builder()
        .config(&config)
        .script(json!({"rounds": [{"text": "the spare answers"}]}))
        .start()
        .await;
    let started = std::time::Instant::now();
    let r = s.chat(ask("hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["choices"][0]["message"]["content"],
        "the spare answers"
    );
    // Five retries at 2 s would take far longer: a refused connection falls back at once.
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
    let id = r.headers["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    let run = s.get(&format!("/v1/runs/{id}")).await;
    let ev = run.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "fallback")
        .cloned()
        .expect("a fallback event");
    assert_eq!(ev["from"], "primary");
    assert_eq!(ev["to"], "default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_upstream_is_retried_then_falls_back_and_4xx_does_not() {
    let flaky = extra_mock(json!({"rounds": [
        {"status": 503, "error": "overloaded"},
        {"status": 503, "error": "overloaded"},
        {"status": 401, "error": "bad key"}
    ]}))
    .await;
    let config = format!(
        "[upstream]\nmax_retries = 1\n\
         [upstreams.flaky]\nurl = \"{}\"\nmodels = [\"mock-model\"]\nfallback = [\"default\"]\n",
        flaky.base_url()
    );
    let s = TestServer::builder()
        .config(&config)
        .script(json!({"rounds": [{"text": "spare"}]}))
        .start()
        .await;
    let r = s.chat(ask("hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["choices"][0]["message"]["content"], "spare");
    assert_eq!(flaky.requests().len(), 2, "one try and one retry");
    // A client error is not the upstream being down: no fallback, the error is returned.
    let r = s.chat(ask("again")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert!(r.text.contains("bad key"), "{}", r.text);
    assert_eq!(s.requests().len(), 1);
}

fn big(n: usize, c: char) -> String {
    let line: String = std::iter::repeat_n(c, 79).collect::<String>() + "\n";
    line.repeat(n / 80)
}

/// Four rounds each reading a 4,000-byte file (about 1,150 tokens) under a 4,000-token
/// window: the oldest results give way, the latest two stay whole.
async fn pruning_scenario(config: &str, script_extra: Value) {
    let mut script = json!({"rounds": [
        {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"filepath": "f1.txt"}}]},
        {"tool_calls": [{"id": "r2", "name": "read_file", "arguments": {"filepath": "f2.txt"}}]},
        {"tool_calls": [{"id": "r3", "name": "read_file", "arguments": {"filepath": "f3.txt"}}]},
        {"tool_calls": [{"id": "r4", "name": "read_file", "arguments": {"filepath": "f4.txt"}}]},
        {"text": "read them all"}
    ]});
    for (k, v) in script_extra.as_object().unwrap() {
        script[k] = v.clone();
    }
    let s = TestServer::builder()
        .config(config)
        .file("f1.txt", big(4000, '1'))
        .file("f2.txt", big(4000, '2'))
        .file("f3.txt", big(4000, '3'))
        .file("f4.txt", big(4000, '4'))
        .script(script)
        .start()
        .await;
    let r = s
        .chat(with_tools(ask("read the four files"), &["read_file"]))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["choices"][0]["message"]["content"], "read them all");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 5);
    check_conversation_invariants(&reqs);
    let removed = |req: usize, id: &str| {
        tool_result(&reqs[req], id)
            .starts_with("[toolpilot: this tool result (4000 bytes) was removed")
    };
    // Request 2 (after two reads) fits whole.
    assert!(!removed(2, "r1") && !removed(2, "r2"));
    // Request 4 (after four reads): the first two went, the latest two are whole.
    assert!(removed(4, "r1") && removed(4, "r2"), "{:#?}", reqs[4].body);
    assert!(!removed(4, "r3") && !removed(4, "r4"));
    assert_eq!(tool_result(&reqs[4], "r4"), big(4000, '4'));
    // The first user message is kept.
    assert_eq!(
        reqs[4].body["messages"][0]["content"],
        "read the four files"
    );
    let id = r.headers["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    let run = s.get(&format!("/v1/runs/{id}")).await;
    let pruned: Vec<&Value> = run.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "context_pruned")
        .collect();
    assert!(!pruned.is_empty(), "{}", run.text);
    assert!(
        pruned
            .iter()
            .all(|e| e["tokens_after"].as_u64() <= e["limit"].as_u64())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_tool_results_give_way_to_a_configured_window() {
    pruning_scenario("[upstream]\ncontext_window = 4000\n", json!({})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_is_read_from_the_upstreams_model_list() {
    // vLLM publishes `max_model_len` in GET /v1/models.
    pruning_scenario(
        "",
        json!({"context_length": 4000, "models": ["mock-model"]}),
    )
    .await;
}

fn long_history() -> Value {
    let mut messages = vec![json!({"role": "user", "content": "look around"})];
    for i in 0..4 {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("h{i}"), "type": "function",
             "function": {"name": "read_file", "arguments": "{\"filepath\":\"x\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("h{i}"),
                             "content": big(6000, char::from(b'a' + i as u8))}));
    }
    messages.push(json!({"role": "user", "content": "so?"}));
    with_tools(
        json!({"model": "mock-model", "messages": messages}),
        &["read_file"],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_length_error_prunes_and_retries_once() {
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"status": 400, "error": "This model's maximum context length is 8192 tokens. However, you requested 9100 tokens (9000 in the messages, 100 in the completion)."},
            {"text": "it fits now"}
        ]}))
        .start()
        .await;
    let r = s.chat(long_history()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["choices"][0]["message"]["content"], "it fits now");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 2);
    check_conversation_invariants(&reqs);
    let size = |i: usize| reqs[i].body["messages"].to_string().len();
    assert!(size(1) < size(0), "{} then {}", size(0), size(1));
    assert!(
        tool_result(&reqs[1], "h0").starts_with("[toolpilot: this tool result"),
        "{}",
        tool_result(&reqs[1], "h0")
    );
    assert_eq!(tool_result(&reqs[1], "h3"), big(6000, 'd'));
    // Learned: the next request from the same client is pruned before it is sent.
    let s2 = s.chat(long_history()).await;
    assert_eq!(s2.status, 502, "the script is over: {}", s2.text);
    let reqs = s.requests();
    assert!(tool_result(&reqs[2], "h0").starts_with("[toolpilot: this tool result"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_context_error_is_returned_to_the_client() {
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"status": 400, "error": "prompt is too long"},
            {"status": 400, "error": "prompt is too long"},
            {"text": "never"}
        ]}))
        .start()
        .await;
    let r = s.chat(long_history()).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("prompt is too long"), "{}", r.text);
    assert_eq!(s.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_gets_the_context_size_each_request_needs() {
    let s = TestServer::builder()
        .file("big.txt", big(30_000, 'z'))
        .script(json!({"ollama": true, "context_length": 65536, "rounds": [
            {"text": "Reading.", "tool_calls": [{"name": "read_file", "arguments": {"filepath": "big.txt"}}]},
            {"text": "It is all z.", "usage": {"prompt_tokens": 9000, "completion_tokens": 5, "total_tokens": 9005}}
        ]}))
        .start()
        .await;
    let st = s.chat_stream(ask("what is in big.txt?")).await;
    assert_eq!(st.content(), "Reading.\n\nIt is all z.");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.path == "/api/chat"), "{reqs:#?}");
    let ctx = |i: usize| reqs[i].body["options"]["num_ctx"].as_u64().unwrap();
    assert!(ctx(0).is_power_of_two() && ctx(0) >= 4096, "{}", ctx(0));
    // The 30 KB result needs more room: the second request asks for it.
    assert!(
        ctx(1) > ctx(0) && ctx(1) <= 65536,
        "{} then {}",
        ctx(0),
        ctx(1)
    );
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let call = &msgs[1]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "read_file");
    assert_eq!(call["arguments"], json!({"filepath": "big.txt"}));
    assert_eq!(msgs[2]["role"], "tool");
    assert_eq!(msgs[2]["tool_name"], "read_file");
    assert_eq!(msgs[2]["content"], big(30_000, 'z'));
}
