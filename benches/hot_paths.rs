//! Micro benchmarks of the per-request hot paths: SSE decoding and delta accumulation, the
//! outbound chunk encoding, request rewriting (tool injection), policy decisions, path
//! resolution and command-line assessment, secret redaction of tool output, and HTML to
//! Markdown. Run with `cargo bench --bench hot_paths`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use toolpilot::config::PolicyConfig;
use toolpilot::openai::ChatRequest;
use toolpilot::policy::Policy;
use toolpilot::policy::{Access, Target};
use toolpilot::server::sse::ChunkEncoder;
use toolpilot::upstream::accumulate::Accumulator;
use toolpilot::upstream::sse::SseDecoder;
use toolpilot::workspace::Workspace;

/// A realistic streamed answer: 200 content deltas, then a tool call in 20 pieces.
fn stream() -> String {
    let mut s = String::new();
    let chunk = |delta: serde_json::Value| {
        format!(
            "data: {}\n\n",
            json!({"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"m",
                   "choices":[{"index":0,"delta":delta,"finish_reason":null}]})
        )
    };
    s.push_str(&chunk(json!({"role":"assistant","content":""})));
    for i in 0..200 {
        s.push_str(&chunk(json!({"content": format!("token{i} ")})));
    }
    s.push_str(&chunk(json!({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_file","arguments":""}}]})));
    for _ in 0..20 {
        s.push_str(&chunk(
            json!({"tool_calls":[{"index":0,"function":{"arguments":"{\"fi"}}]}),
        ));
    }
    s.push_str(
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":220}}\n\n",
    );
    s.push_str("data: [DONE]\n\n");
    s
}

fn sse(c: &mut Criterion) {
    let s = stream();
    let bytes = s.as_bytes();
    let mut g = c.benchmark_group("upstream");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("sse_decode_and_accumulate_222_chunks", |b| {
        b.iter(|| {
            let mut dec = SseDecoder::new();
            let mut acc = Accumulator::new();
            let mut pieces = Vec::new();
            // Network-sized reads.
            for part in bytes.chunks(1400) {
                dec.push(part);
                while let Some(ev) = dec.next_event() {
                    acc.push_data(ev.event.as_deref(), &ev.data, &mut pieces)
                        .unwrap();
                    pieces.clear();
                }
            }
            black_box(acc.finish().unwrap_err_or_round());
        })
    });
    g.finish();
}

trait ErrOrRound {
    fn unwrap_err_or_round(self) -> usize;
}

impl<E> ErrOrRound for Result<toolpilot::upstream::accumulate::Round, E> {
    fn unwrap_err_or_round(self) -> usize {
        self.map(|r| r.content.len()).unwrap_or(0)
    }
}

fn encode(c: &mut Criterion) {
    let enc = ChunkEncoder::new("19a2b3c4d5e6f708", "qwen2.5-coder");
    c.bench_function("server/encode_content_chunk", |b| {
        b.iter(|| {
            let mut out = bytes::BytesMut::with_capacity(256);
            enc.content(&mut out, black_box("Hello, \"world\"\n"));
            black_box(out);
        })
    });
    let usage = toolpilot::openai::Usage {
        prompt_tokens: 4146,
        completion_tokens: 2,
        total_tokens: 4148,
    };
    c.bench_function("server/encode_completion_body", |b| {
        b.iter(|| black_box(enc.completion(black_box("Hello there"), "", &[], "stop", &usage)))
    });
    encode_responses(c);
}

/// A non-streamed answer with text only, as the upstream sends it: read it whole (the
/// accumulator), then finish the round.
fn non_streamed(c: &mut Criterion) {
    let body = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, here is the answer you asked for."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":4146,"completion_tokens":12,"total_tokens":4158}}"#;
    c.bench_function("upstream/accumulate_non_streamed_text_answer", |b| {
        b.iter(|| {
            let mut acc = Accumulator::new();
            let mut pieces = Vec::new();
            acc.push_data(None, black_box(body), &mut pieces).unwrap();
            black_box(pieces);
            black_box(acc.finish().unwrap());
        })
    });
}

fn encode_responses(c: &mut Criterion) {
    use toolpilot::server::responses::encode::Encoder;
    let fixture = include_str!("../tests/fixtures/codex_responses_request.json");
    let req =
        toolpilot::openai::responses::ResponsesRequest::from_slice(fixture.as_bytes()).unwrap();
    let open = || {
        let mut enc = Encoder::new(
            "19a2b3c4d5e6f708",
            "qwen2.5-coder",
            &req.echo,
            req.kinds.clone(),
            true,
        );
        let mut out = bytes::BytesMut::new();
        enc.created(&mut out);
        enc.text(&mut out, "Hello");
        enc
    };
    c.bench_function("server/encode_responses_text_delta", |b| {
        b.iter_batched_ref(
            open,
            |enc| {
                let mut out = bytes::BytesMut::with_capacity(256);
                enc.text(&mut out, black_box("Hello, \"world\"\n"));
                black_box(out);
            },
            criterion::BatchSize::SmallInput,
        )
    });
    c.bench_function("request/map_codex_responses_request", |b| {
        b.iter(|| {
            black_box(
                toolpilot::openai::responses::ResponsesRequest::from_slice(black_box(
                    fixture.as_bytes(),
                ))
                .unwrap(),
            )
        })
    });
}

fn agent_body() -> Vec<u8> {
    let system = "You are a coding assistant. ".repeat(40);
    json!({
        "model": "qwen2.5-coder",
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": 4096,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Where is the configuration loaded, and how are errors reported?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "grep_search", "arguments": "{\"query\":\"fn load\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "src/config.rs\n245:    pub fn load(args: &CommonArgs) -> Result<Config, ConfigError> {\n".repeat(8)},
            {"role": "user", "content": "And the tests?"}
        ]
    })
    .to_string()
    .into_bytes()
}

fn rewrite(c: &mut Criterion) {
    let body = agent_body();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = toolpilot::config::Config::load_from(
        &toolpilot::config::CommonArgs {
            workspace: Some(tmp.path().to_path_buf()),
            state_dir: Some(tmp.path().join("state")),
            ..Default::default()
        },
        &[],
    )
    .unwrap();
    let engine = toolpilot::agent::Engine::new(cfg).unwrap();
    let specs: Vec<serde_json::Value> = engine
        .registry
        .tools()
        .map(toolpilot::tools::spec_json)
        .collect();
    let specs = bytes::Bytes::from(serde_json::to_vec(&specs).unwrap());
    let mut g = c.benchmark_group("request");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("parse_validate_3kb_agent_body", |b| {
        b.iter(|| black_box(ChatRequest::from_slice(black_box(&body)).unwrap()))
    });
    let req = ChatRequest::from_slice(&body).unwrap();
    g.bench_function("rewrite_with_tool_injection_and_serialize", |b| {
        b.iter(|| {
            black_box(toolpilot::agent::build_body(
                &req,
                "m",
                &req.messages,
                Some(&specs),
                true,
                true,
            ));
        })
    });
    g.finish();
}

fn policy(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("src")).unwrap();
    let sens: Vec<String> = toolpilot::workspace::DEFAULT_SENSITIVE
        .iter()
        .map(|s| s.to_string())
        .collect();
    let ws = Workspace::open(tmp.path(), &sens).unwrap();
    let p = Policy::new(&PolicyConfig {
        allow: vec![
            "read_file(src/**)".into(),
            "run_terminal_command(make lint*)".into(),
        ],
        deny: vec!["read_file(**/secret*)".into()],
        protected: toolpilot::policy::DEFAULT_PROTECTED
            .iter()
            .map(|s| s.to_string())
            .collect(),
        command_defaults: true,
        ..Default::default()
    })
    .unwrap();
    let path = ws.resolve("src/agent/mod.rs").unwrap();
    let targets = vec![Target::Path {
        path,
        access: Access::Read,
    }];
    c.bench_function("policy/decide_read_file", |b| {
        b.iter(|| black_box(p.decide("read_file", black_box(&targets), &ws)))
    });
    c.bench_function("policy/decide_command_line", |b| {
        b.iter(|| {
            black_box(p.decide_command(
                "run_terminal_command",
                black_box("cargo test --all 2>&1 | tail -20 && git status"),
                true,
                &toolpilot::policy::WorkspaceJudge::new(&ws, &p),
            ))
        })
    });
    let root = ws.root().display().to_string();
    let abs = format!("{root}/src/./lib.rs");
    c.bench_function("workspace/resolve_relative", |b| {
        b.iter(|| black_box(ws.resolve(black_box("./src/../src/tools/grep.rs")).unwrap()))
    });
    c.bench_function("workspace/resolve_absolute", |b| {
        b.iter(|| black_box(ws.resolve(black_box(&abs)).unwrap()))
    });
}

/// A long agent conversation: 100 tool rounds of 20 KB results (about 2 MB, 570k tokens).
fn long_conversation() -> Vec<serde_json::Value> {
    let mut m = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Refactor the config loader."}),
    ];
    for i in 0..100 {
        let id = format!("c{i}");
        m.push(json!({"role": "assistant", "content": "Reading.", "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{\"filepath\":\"src/config.rs\"}"}}]}));
        m.push(json!({"role": "tool", "tool_call_id": id, "content": "x".repeat(20_000)}));
    }
    m
}

fn context(c: &mut Criterion) {
    use toolpilot::agent::context::{Estimator, fit};
    let convo = long_conversation();
    let est = Estimator::default();
    let mut g = c.benchmark_group("context");
    // Every round with a known window: estimate the request (it fits).
    g.bench_function("estimate_202_messages_2mb", |b| {
        b.iter(|| black_box(est.request(black_box(&convo), 11_000)))
    });
    // A round that must shrink 2 MB to a 128k-token window.
    g.bench_function("fit_202_messages_2mb_into_128k", |b| {
        b.iter_batched(
            || convo.clone(),
            |mut m| black_box(fit(&mut m, 128_000, 4_000, &est)),
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
}

/// 256 KB of source-like tool output (what a large read_file or grep result looks like).
fn tool_output() -> String {
    let block = include_str!("../src/tools/registry.rs");
    let mut s = String::with_capacity(260 * 1024);
    while s.len() < 256 * 1024 {
        s.push_str(block);
    }
    s.truncate(256 * 1024);
    s
}

fn redaction(c: &mut Criterion) {
    // What a server typically knows: the upstream key, a bearer token, a search key and two
    // scrubbed variables.
    let secrets: Vec<(String, String)> = [
        (
            "OPENAI_API_KEY",
            "sk-proj-Zx9YwV8uT7sR6qP5oN4mL3kJ2iH1gF0eD",
        ),
        ("TOOLPILOT_BEARER_TOKEN", "bearer-0123456789abcdef0123"),
        ("BRAVE_API_KEY", "BSAbcdefghijklmnopqrstuvwxyz012"),
        ("DEPLOY_TOKEN", "deploy-token-9876543210"),
        ("DB_PASSWORD", "correct-horse-battery-staple"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let r = toolpilot::redact::Redactor::new(&secrets);
    let clean = tool_output();
    let mut dirty = clean.clone();
    for (i, (_, v)) in secrets.iter().enumerate() {
        dirty.insert_str(i * 40_000, v);
    }
    dirty.insert_str(210_000, "AKIAIOSFODNN7EXAMPLE ");
    let mut g = c.benchmark_group("redact");
    g.throughput(Throughput::Bytes(clean.len() as u64));
    g.bench_function("256kb_tool_output_clean", |b| {
        b.iter(|| black_box(r.redact(black_box(&clean)).len()))
    });
    g.bench_function("256kb_tool_output_6_secrets", |b| {
        b.iter(|| black_box(r.redact(black_box(&dirty)).len()))
    });
    g.finish();
}

/// A 1 MB documentation page: header, navigation, a long article with code and tables,
/// footer, scripts.
fn big_page() -> String {
    let section = r#"<h2>Section</h2><p>The scheduler reads <code>tidewater.toml</code> at start-up and
        from the environment, so a variable always wins. See <a href="../workers/#queues">how
        queues pick workers</a> and <a href="https://other.example/x">elsewhere</a>.</p>
        <pre><code class="language-toml">[scheduler]
interval = "5m"
jitter = "30s"
</code></pre>
        <table><tr><th>Option</th><th>Default</th></tr><tr><td><code>interval</code></td>
        <td>5m</td></tr><tr><td><code>jitter</code></td><td>30s</td></tr></table>
        <ul><li>first point of the list</li><li>second point, with <em>emphasis</em></li></ul>"#;
    let mut s = String::from(
        r#"<!DOCTYPE html><html><head><title>Big page</title><style>body{margin:0}</style>
        <script>var x = 1;</script></head><body><header><nav><a href="/">Home</a>
        <a href="/docs/">Docs</a></nav></header><aside class="sidebar"><ul>"#,
    );
    for i in 0..200 {
        s.push_str(&format!(r#"<li><a href="/docs/p{i}/">Page {i}</a></li>"#));
    }
    s.push_str("</ul></aside><main><article><h1>Big page</h1>");
    while s.len() < 1024 * 1024 - 1000 {
        s.push_str(section);
    }
    s.push_str("</article></main><footer>Copyright</footer></body></html>");
    s
}

fn html(c: &mut Criterion) {
    let page = big_page();
    let url = url::Url::parse("https://docs.example/guide/scheduler/").unwrap();
    let mut g = c.benchmark_group("web");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(page.len() as u64));
    g.bench_function("html_to_markdown_1mb_page", |b| {
        b.iter(|| black_box(toolpilot::web::html::to_markdown(black_box(&page), &url)))
    });
    g.finish();
}

criterion_group!(
    benches,
    sse,
    non_streamed,
    encode,
    rewrite,
    policy,
    context,
    redaction,
    html
);
criterion_main!(benches);
