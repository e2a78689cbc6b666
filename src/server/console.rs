//! The console: a small web page served by toolpilot itself (`GET /`), its files embedded in
//! the binary. It only uses the public API (`/v1/runs`, `/v1/runs/{id}/events`,
//! `/v1/approvals`, `/healthz`), with the admin token it reads from its address's fragment
//! (`/#admin=…`, as the serve log prints it) in the `x-toolpilot-admin-token` header (the live
//! timeline is read with `fetch`, which can send it, not `EventSource`); it renders everything
//! as text, and is locked down with a strict Content-Security-Policy (own scripts and styles
//! only, no framing, no other origins).

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const HTML: &str = include_str!("console/index.html");
const JS: &str = include_str!("console/console.js");
const CSS: &str = include_str!("console/console.css");

fn file(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

pub async fn page() -> Response {
    file(HTML, "text/html; charset=utf-8")
}

pub async fn script() -> Response {
    file(JS, "text/javascript; charset=utf-8")
}

pub async fn style() -> Response {
    file(CSS, "text/css; charset=utf-8")
}

/// Browsers ask for it; there is none.
pub async fn no_icon() -> Response {
    axum::http::StatusCode::NO_CONTENT.into_response()
}
