//! Every error class: bad requests, the HTTP guard, upstream faults, client disconnects.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

#[track_caller]
fn assert_error(r: &Reply, status: u16, needle: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    let e = &r.body["error"];
    assert!(e.is_object(), "not an OpenAI error body: {}", r.text);
    for key in ["message", "type", "param", "code"] {
        assert!(e.get(key).is_some(), "error body lacks {key}: {}", r.text);
    }
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains(needle), "message {msg:?} lacks {needle:?}");
    assert!(
        r.headers.contains_key("x-toolpilot-run-id"),
        "no run id header"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_specific_errors() {
    let s = TestServer::builder()
        .config("[server]\nmax_body_bytes = 2000\n")
        .start()
        .await;
    let r = s.post_raw("/v1/chat/completions", "{\"messages\": [").await;
    assert_error(&r, 400, "the request body is not valid JSON");
    assert_eq!(r.body["error"]["code"], "invalid_json");
    let r = s.post_raw("/v1/chat/completions", "[]").await;
    assert_error(&r, 400, "must be a JSON object");
    let r = s.chat(json!({"model": "m"})).await;
    assert_error(&r, 400, "`messages` is required");
    assert_eq!(r.body["error"]["param"], "messages");
    let r = s
        .chat(json!({"messages": [{"role": "user", "content": "x"}], "n": 3}))
        .await;
    assert_error(&r, 400, "n = 3 is not supported");
    assert_eq!(r.body["error"]["param"], "n");
    let r = s
        .chat(json!({"messages": [{"role": "wizard", "content": "x"}]}))
        .await;
    assert_error(&r, 400, "\"wizard\" is not a chat role");
    let r = s.post_raw("/v1/chat/completions", "x".repeat(5000)).await;
    assert_error(&r, 413, "larger than the limit of 2000 bytes");
    let r = s.get("/v1/nope").await;
    assert_error(&r, 404, "unknown endpoint GET /v1/nope");
    let r = s.post_raw("/v1/audio/speech", "{}").await;
    assert_error(&r, 404, "toolpilot serves POST /v1/chat/completions");
    let r = s.get("/v1/chat/completions").await;
    assert_error(
        &r,
        405,
        "GET is not allowed on /v1/chat/completions; use POST",
    );
    assert_eq!(r.headers["allow"], "POST");
    // Nothing reached the upstream.
    assert!(s.requests().is_empty());
}

/// Sends raw HTTP/1.1 so that Host and Origin are exactly what the test says.
async fn raw_http(addr: std::net::SocketAddr, request: &str) -> String {
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_rebinding_and_cross_origin_requests_are_refused() {
    let s = TestServer::builder()
        .demo()
        .config("[server]\nallowed_origins = [\"http://trusted.test\"]\n")
        .start()
        .await;
    let resp = raw_http(
        s.addr,
        "GET /healthz HTTP/1.1\r\nHost: attacker.example:7979\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(
        resp.contains("host_not_allowed") && resp.contains("DNS"),
        "{resp}"
    );
    for host in ["localhost:7979", "127.0.0.1", "[::1]:7979"] {
        let resp = raw_http(
            s.addr,
            &format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{host}: {resp}");
    }
    let resp = raw_http(
        s.addr,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(resp.contains("origin_not_allowed"), "{resp}");
    // A configured origin gets CORS headers, including on the preflight.
    let resp = raw_http(
        s.addr,
        "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://trusted.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 204"), "{resp}");
    assert!(
        resp.to_ascii_lowercase()
            .contains("access-control-allow-origin: http://trusted.test"),
        "{resp}"
    );
    let resp = raw_http(
        s.addr,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://trusted.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_is_required_when_configured() {
    let s = TestServer::builder()
        .demo()
        .env("TOOLPILOT_BEARER_TOKEN", "s3cret-token")
        .start()
        .await;
    // (`client()`: no admin token, which also opens every endpoint; see below.)
    let r = to_reply(client().get(s.url("/healthz")).send().await.unwrap()).await;
    assert_error(&r, 401, "missing or wrong bearer token");
    assert_eq!(r.headers["www-authenticate"], "Bearer");
    let r = to_reply(
        client()
            .get(s.url("/healthz"))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 401);
    let r = to_reply(
        client()
            .get(s.url("/healthz"))
            .bearer_auth("s3cret-token")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // The admin token opens what the bearer token does (the console sends only it).
    assert_eq!(s.get("/healthz").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_models() {
    let s = TestServer::builder()
        .script(json!({"rounds": [], "models": ["m-one", "m-two"]}))
        .start()
        .await;
    let r = s.get("/healthz").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["status"], "ok");
    assert_eq!(r.body["demo_model"], false);
    assert!(
        r.body["server_tools"]
            .as_array()
            .unwrap()
            .contains(&json!("grep_search"))
    );
    assert!(r.body.get("sandbox").is_some());
    let r = s.get("/v1/models").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["data"][1]["id"], "m-two");
    // Without /v1, too (some clients are configured without it).
    assert_eq!(s.get("/models").await.status, 200);

    let d = TestServer::builder().demo().start().await;
    assert_eq!(
        d.get("/v1/models").await.body["data"][0]["id"],
        "toolpilot-demo"
    );
}

fn unused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_down_is_a_502_and_models_falls_back_to_the_configured_model() {
    let port = unused_port();
    let dir = tempfile::tempdir().unwrap();
    let args = toolpilot::config::CommonArgs {
        workspace: Some(dir.path().to_path_buf()),
        upstream: Some(format!("http://127.0.0.1:{port}/v1")),
        model: Some("configured".into()),
        state_dir: Some(dir.path().join("state")),
        ..Default::default()
    };
    let cfg = toolpilot::config::Config::load_from(
        &args,
        &[
            ("TOOLPILOT_UPSTREAM__MAX_RETRIES".into(), "1".into()),
            ("TOOLPILOT_UPSTREAM__RETRY_BASE_MS".into(), "1".into()),
        ],
    )
    .unwrap();
    let engine = std::sync::Arc::new(toolpilot::agent::Engine::new(cfg.clone()).unwrap());
    let state = toolpilot::server::AppState {
        engine,
        server: std::sync::Arc::new(cfg.server.clone()),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(toolpilot::server::serve(
        listener,
        state,
        std::future::pending(),
    ));
    let client = client();
    let r = to_reply(
        client
            .post(format!("http://{addr}/v1/chat/completions"))
            .body(ask("x").to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(&r, 502, "cannot connect to the upstream");
    let r = to_reply(
        client
            .get(format!("http://{addr}/v1/models"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["data"][0]["id"], "configured");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_500_is_retried_then_reported_with_its_message() {
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"status": 500, "error": "backend exploded"},
            {"status": 503, "error": "still down"},
            {"status": 500, "error": "backend exploded again"}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_error(
        &r,
        502,
        "the upstream answered HTTP 500: backend exploded again",
    );
    assert_eq!(r.body["error"]["type"], "upstream_error");
    assert_eq!(s.requests().len(), 3, "one try and two retries");

    let s = TestServer::builder()
        .script(json!({"rounds": [{"status": 502, "error": "flaky"}, {"text": "recovered"}]}))
        .start()
        .await;
    let st = s.chat_stream(ask("x")).await;
    assert_eq!(st.status, 200);
    assert_eq!(st.content(), "recovered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_honour_retry_after() {
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"status": 429, "error": "slow down", "retry_after": 1},
            {"text": "ok after waiting"}
        ]}))
        .start()
        .await;
    let t = Instant::now();
    let r = s.chat(ask("x")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["choices"][0]["message"]["content"],
        "ok after waiting"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "Retry-After was not honoured"
    );
    assert_eq!(s.requests().len(), 2);

    let s = TestServer::builder()
        .config("[upstream]\nmax_retries = 1\n")
        .script(json!({"rounds": [
            {"status": 429, "error": "quota exceeded", "retry_after": 0},
            {"status": 429, "error": "quota exceeded", "retry_after": 0}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_error(&r, 429, "quota exceeded");
    assert_eq!(r.body["error"]["code"], "upstream_rate_limited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_client_errors_pass_through() {
    let s = TestServer::builder()
        .script(json!({"rounds": [{"status": 404, "error": "model 'nope' not found"}]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_error(&r, 404, "model 'nope' not found");
    assert_eq!(s.requests().len(), 1, "client errors are not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_upstream_times_out_with_504() {
    let s = TestServer::builder()
        .config("[upstream]\nfirst_byte_timeout_secs = 0.5\n")
        .script(json!({"rounds": [{"text": "too late", "delay_ms": 30000}]}))
        .start()
        .await;
    let t = Instant::now();
    let r = s.chat(ask("x")).await;
    assert_error(&r, 504, "did not start answering within 0.5 s");
    assert_eq!(r.body["error"]["code"], "upstream_timeout");
    assert!(t.elapsed() < Duration::from_secs(20));

    // Silence in the middle of a stream: the idle timeout.
    let s = TestServer::builder()
        .config("[upstream]\nidle_timeout_secs = 0.3\n")
        .script(json!({"rounds": [{"text": "abcdefghij", "chunk_size": 2, "hold_after": 3}]}))
        .start()
        .await;
    let st = s.chat_stream(ask("x")).await;
    assert_eq!(st.status, 200);
    assert_eq!(st.content(), "abcd");
    let err = st.error_message().expect("an error event");
    assert!(err.contains("did not send the next part"), "{err}");
    assert!(
        !st.done,
        "a broken stream must not end with [DONE]: {}",
        st.raw
    );
    s.mock().release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_streams_are_retried_only_if_nothing_was_sent() {
    // Non-streaming client: nothing was sent yet, so the truncated attempt is retried and its
    // partial text is not duplicated.
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"text": "partial answer", "chunk_size": 4, "truncate_after": 3},
            {"text": "complete answer"}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["choices"][0]["message"]["content"],
        "complete answer"
    );
    assert_eq!(s.requests().len(), 2);

    // Streaming client: text already reached the client, so no retry; the stream reports it.
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"text": "partial answer", "chunk_size": 4, "truncate_after": 3},
            {"text": "should never be used"}
        ]}))
        .start()
        .await;
    let st = s.chat_stream(ask("x")).await;
    assert_eq!(st.status, 200);
    assert_eq!(st.content(), "partial ");
    let err = st.error_message().expect("an error event");
    assert!(err.contains("without a finish_reason or [DONE]"), "{err}");
    assert!(
        !st.done,
        "a broken stream must not end with [DONE]: {}",
        st.raw
    );
    assert_eq!(s.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_inside_the_stream_and_garbage() {
    let s = TestServer::builder()
        .config("[upstream]\nmax_retries = 0\n")
        .script(json!({"repeat_last": true, "rounds": [
            {"text": "hello world", "chunk_size": 5, "error_after": {"chunks": 3, "message": "model crashed"}}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_error(
        &r,
        502,
        "the upstream reported an error mid-stream: model crashed",
    );
    let st = s.chat_stream(ask("x")).await;
    assert_eq!(st.content(), "hello worl");
    assert!(st.raw.contains("model crashed"));
    assert!(
        !st.done,
        "a broken stream must not end with [DONE]: {}",
        st.raw
    );

    let s = TestServer::builder()
        .script(json!({"repeat_last": true, "rounds": [{"raw": ["data: this is not json\n\n", "garbage without framing"]}]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_error(&r, 502, "not JSON");
    assert!(r.text.contains("this is not json"), "{}", r.text);
    assert_eq!(s.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_client_that_disconnects_cancels_the_run() {
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "one two three four five", "chunk_size": 4, "hold_after": 2}]}))
        .start()
        .await;
    let mut resp = s.open_stream(ask("x")).await;
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("data:"));
    assert!(
        eventually(|| s
            .requests()
            .first()
            .is_some_and(|r| r.outcome == "in_progress"))
        .await
    );
    drop(resp);
    // toolpilot notices, cancels the run, and drops its upstream request.
    assert!(
        eventually(|| s.requests()[0].outcome == "client_disconnected").await,
        "the upstream request was not cancelled: {:?}",
        s.requests()[0].outcome
    );
    assert_eq!(s.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streaming_client_that_disconnects_cancels_the_run() {
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "one two three four five", "chunk_size": 4, "hold_after": 2}]}))
        .start()
        .await;
    let client = s.client.clone();
    let url = s.url("/v1/chat/completions");
    let task = tokio::spawn(async move {
        let _ = client.post(url).body(ask("x").to_string()).send().await;
    });
    assert!(
        eventually(|| s
            .requests()
            .first()
            .is_some_and(|r| r.outcome == "in_progress"))
        .await
    );
    task.abort();
    assert!(
        eventually(|| s.requests()[0].outcome == "client_disconnected").await,
        "the upstream request was not cancelled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_comments_flow_while_waiting() {
    let s = TestServer::builder()
        .config("[server]\nkeepalive_secs = 0.05\n")
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "1", "name": "ls", "arguments": {}}]},
            {"text": "done", "delay_ms": 400}
        ]}))
        .start()
        .await;
    let st = s.chat_stream(ask("x")).await;
    assert_eq!(st.content(), "done");
    let keepalives = st.comments.iter().filter(|c| *c == "keep-alive").count();
    assert!(keepalives >= 2, "{:?}", st.comments);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_answer_hits_the_total_timeout() {
    let s = TestServer::builder()
        .config("[upstream]\ntotal_timeout_secs = 0.5\n")
        .script(json!({"rounds": [{"text": "a long and slow answer", "chunk_size": 1, "chunk_delay_ms": 100}]}))
        .start()
        .await;
    let r = s.chat(ask("x")).await;
    assert_error(&r, 504, "did not finish its answer within 0.5 s");
    assert_eq!(s.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused() {
    let s = TestServer::builder()
        .file("a.txt", "A")
        .script(json!({"repeat_last": false, "rounds": [
            {"tool_calls": [{"id": "1", "name": "read_file", "arguments": {"filepath": "a.txt"}}]},
            {"text": "one"},
            {"text": "two"}
        ]}))
        .start()
        .await;
    assert_eq!(s.chat(ask("x")).await.status, 200);
    assert_eq!(s.chat_stream(ask("y")).await.content(), "two");
    let peers: Vec<String> = s
        .requests()
        .iter()
        .map(|r| r.peer.clone().unwrap())
        .collect();
    assert_eq!(peers.len(), 3);
    assert!(
        peers.iter().all(|p| p == &peers[0]),
        "new connections were opened: {peers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_first_token_still_gets_headers_and_keep_alives() {
    let s = TestServer::builder()
        .config("[server]\nkeepalive_secs = 0.1\n")
        .script(json!({"rounds": [{"text": "finally", "delay_ms": 600}]}))
        .start()
        .await;
    let mut resp = s.open_stream(ask("x")).await;
    // Headers arrive although the upstream has not answered yet.
    assert_eq!(resp.status(), 200);
    let mut raw = String::new();
    while let Some(c) = resp.chunk().await.unwrap() {
        raw.push_str(&String::from_utf8_lossy(&c));
    }
    let st = parse_sse(200, Default::default(), raw);
    assert_eq!(st.content(), "finally");
    assert!(
        st.comments.iter().any(|c| c == "keep-alive"),
        "{:?}",
        st.comments
    );
    assert!(st.done_last);
}
