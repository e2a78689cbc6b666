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
//! `bareproxy BIND UPSTREAM-BASE-URL`; prints `listening on http://ADDR/v1` on stderr.

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
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(bind), Some(base)) = (args.next(), args.next()) else {
        eprintln!("usage: bareproxy BIND UPSTREAM-BASE-URL");
        std::process::exit(2);
    };
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
        .body(serde_json::to_vec(&request).unwrap())
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
