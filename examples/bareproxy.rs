//! The bare forwarder: the least a proxy in front of a model can do with the same stack as
//! toolpilot (axum, hyper, reqwest, tokio's multi-threaded runtime, mimalloc). It reads the
//! request, parses and re-serialises its JSON, sends it to the upstream over a pooled
//! connection, and streams the answer back as it arrives, chunk for chunk. No tools, no run,
//! no record.
//!
//! The load harness runs it beside toolpilot against the same mock, so that what toolpilot
//! adds can be split into what any such proxy pays on this machine (two more hops through
//! the kernel and a process) and what toolpilot's own work costs.
//!
//! With a third argument, a file holding a JSON array of tool specs, it also adds that array as
//! the request's `tools` when the request has none, spliced into the serialised body as
//! toolpilot splices its own (serialised once, shared): a forwarder that sends the upstream the
//! same bytes toolpilot sends, so the upstream's cost of reading them is on both sides.
//!
//! `bareproxy BIND UPSTREAM-BASE-URL [TOOLS.json]`; prints `listening on http://ADDR/v1` on
//! stderr.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::Response;
use axum::routing::post;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone)]
struct Upstream {
    client: reqwest::Client,
    chat_url: reqwest::Url,
    /// The `tools` array to add, serialised.
    tools: Option<Bytes>,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(bind), Some(base)) = (args.next(), args.next()) else {
        eprintln!("usage: bareproxy BIND UPSTREAM-BASE-URL [TOOLS.json]");
        std::process::exit(2);
    };
    let tools = args.next().map(|path| {
        let text = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        let specs: Vec<serde_json::Value> = serde_json::from_slice(&text)
            .unwrap_or_else(|e| panic!("{path} is not a JSON array of tool specs: {e}"));
        Bytes::from(serde_json::to_vec(&specs).unwrap())
    });
    toolpilot::process::install_crypto_provider();
    let up = Upstream {
        client: reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .build()
            .unwrap(),
        chat_url: format!("{}/chat/completions", base.trim_end_matches('/'))
            .parse()
            .unwrap(),
        tools,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let app = Router::new()
            .route("/v1/chat/completions", post(forward))
            .with_state(up);
        let listener = tokio::net::TcpListener::bind(&bind).await.unwrap();
        eprintln!("listening on http://{}/v1", listener.local_addr().unwrap());
        let listener =
            axum::serve::ListenerExt::tap_io(listener, |t: &mut tokio::net::TcpStream| {
                let _ = t.set_nodelay(true);
            });
        axum::serve(listener, app).await.unwrap();
    });
}

async fn forward(State(up): State<Upstream>, body: Bytes) -> Response {
    let fail = |code: StatusCode, e: String| {
        Response::builder()
            .status(code)
            .body(Body::from(e))
            .unwrap()
    };
    let request: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return fail(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let sent = up
        .client
        .post(up.chat_url.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .body(body_for(&request, up.tools.as_ref()))
        .send()
        .await;
    let r = match sent {
        Ok(r) => r,
        Err(e) => return fail(StatusCode::BAD_GATEWAY, e.to_string()),
    };
    let mut out = Response::builder().status(r.status());
    if let Some(ct) = r.headers().get(header::CONTENT_TYPE) {
        out = out.header(header::CONTENT_TYPE, ct);
    }
    out.body(Body::from_stream(r.bytes_stream())).unwrap()
}

/// The request serialised, with `tools` spliced in after the last field when there are tools
/// to add and the request has none.
fn body_for(request: &serde_json::Value, tools: Option<&Bytes>) -> Vec<u8> {
    let mut out = serde_json::to_vec(request).unwrap();
    if let Some(specs) = tools
        && request.get("tools").is_none()
        && out.last() == Some(&b'}')
    {
        out.pop();
        if out.len() > 1 {
            out.push(b',');
        }
        out.extend_from_slice(b"\"tools\":");
        out.extend_from_slice(specs);
        out.push(b'}');
    }
    out
}
