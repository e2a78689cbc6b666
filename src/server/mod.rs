//! The HTTP surface: routes, the security guard, and serving with graceful shutdown.
//!
//! Every response passes through [`run_id_layer`] (it carries `x-toolpilot-run-id`) and
//! [`guard`] (loopback `Host` names only, no cross-origin browser requests unless allowed,
//! the bearer token when one is configured). The endpoints that show or change other runs'
//! state (approvals, runs, jobs, undo) also need the admin token ([`admin_guard`]), which
//! commands cannot read. Panics become an OpenAI-shaped 500. Only this module and `error.rs`
//! know axum.

mod console;
pub mod mcp;
pub mod record;
pub mod responses;
pub mod routes;
pub mod run;
pub mod sse;
pub mod stream;
pub mod workers;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;

use crate::agent::Engine;
use crate::config::ServerConfig;
use crate::error::ApiError;

pub const RUN_ID_HEADER: &str = "x-toolpilot-run-id";
/// The header that carries the admin token.
pub const ADMIN_TOKEN_HEADER: &str = "x-toolpilot-admin-token";
/// The file in the workspace's state folder that holds a generated admin token (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// Shared by all handlers.
#[derive(Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    pub server: Arc<ServerConfig>,
}

impl AppState {
    /// Appends what a client sent to `server.record_requests`, when set.
    pub fn record(&self, route: &str, headers: &HeaderMap, body: &[u8]) {
        if let Some(path) = &self.server.record_requests {
            record::append(path, route, headers, body);
        }
    }
}

/// The id of the request's run, set by [`run_id_layer`].
#[derive(Clone, Debug)]
pub struct RunId(pub String);

/// A new run id: time-ordered, unique enough for one machine.
pub fn new_run_id() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    format!("{ms:011x}{:08x}", fastrand::u32(..))
}

pub fn router(state: AppState) -> Router {
    let limit = state.server.max_body_bytes;
    // Approvals, other runs' prompts and events, cancel, undo and jobs: whoever can call these
    // can approve a waiting call or read what others asked, so they need the admin token, also
    // on loopback (a command's background job is a local process too).
    let admin = Router::new()
        .route("/v1/approvals", get(routes::approvals))
        .route("/v1/approvals/{id}", post(routes::answer_approval))
        .route("/v1/runs", get(routes::runs))
        .route("/v1/runs/{id}", get(routes::run))
        .route("/v1/runs/{id}/events", get(routes::run_events))
        .route("/v1/runs/{id}/attach", get(routes::attach))
        .route("/v1/runs/{id}/cancel", post(routes::cancel))
        .route("/v1/runs/{id}/undo", post(routes::undo))
        .route("/v1/jobs", get(routes::jobs))
        .route_layer(middleware::from_fn_with_state(state.clone(), admin_guard));
    Router::new()
        .route("/v1/chat/completions", post(routes::chat_completions))
        .route("/chat/completions", post(routes::chat_completions))
        .route("/v1/completions", post(routes::completions))
        .route("/completions", post(routes::completions))
        .route("/v1/embeddings", post(routes::embeddings))
        .route("/embeddings", post(routes::embeddings))
        .route("/v1/responses", post(responses::create))
        .route("/responses", post(responses::create))
        .route("/v1/models", get(routes::models))
        .route("/models", get(routes::models))
        .route("/healthz", get(routes::healthz))
        .route("/", get(console::page))
        .route("/console.js", get(console::script))
        .route("/console.css", get(console::style))
        .route("/favicon.ico", get(console::no_icon))
        // Aggregate counters only (no prompt, argument, path or id), and Prometheus scrapers
        // rarely send custom headers: the bearer token (when configured) is enough.
        .route("/metrics", get(routes::metrics))
        .route("/v1/policy/check", post(routes::policy_check))
        .merge(admin)
        .merge(mcp_routes(&state))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::Extension(Arc::new(responses::Store::default())))
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ))
        .layer(middleware::from_fn(run_id_layer))
        .with_state(state)
}

/// `/mcp`: the built-in tools for MCP clients (streamable HTTP), or a 404 that says how to turn
/// it on. The guard in front of it is the one every route has; rmcp's own Host and Origin
/// checks are off because they would only repeat it with other lists.
fn mcp_routes(state: &AppState) -> Router<AppState> {
    if !state.server.mcp {
        return Router::new().route(
            mcp::PATH,
            axum::routing::any(|| async {
                ApiError::not_found(
                    "MCP is off on this server (server.mcp = false): set server.mcp = true to \
                     serve the built-in tools to MCP clients at /mcp",
                )
            }),
        );
    }
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let engine = Arc::clone(&state.engine);
    let tools = mcp::McpTools::new(engine, true);
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(state.server.max_body_bytes)
        .with_sse_keep_alive(Some(state.server.keepalive))
        .with_cancellation_token(state.engine.stopping().child_token());
    let sessions = Arc::new(LocalSessionManager::default());
    let service =
        StreamableHttpService::new(move || Ok(tools.clone()), Arc::clone(&sessions), config);
    let limit = state.server.max_body_bytes;
    Router::new()
        .route_service(mcp::PATH, service)
        .route_layer(middleware::from_fn(move |req, next| {
            mcp::protocol_errors(limit, Arc::clone(&sessions), req, next)
        }))
}

/// Checks that a bind address is safe for the configuration.
pub fn check_bind(server: &ServerConfig) -> Result<(), String> {
    if !server.bind.ip().is_loopback() && server.bearer_token.is_none() {
        return Err(format!(
            "refusing to listen on {} without a bearer token: anyone who can reach that \
             address could run tools in your workspace. Set {} (server.bearer_token_env) to a \
             secret token, or bind a loopback address such as 127.0.0.1:7979",
            server.bind, server.bearer_token_env
        ));
    }
    Ok(())
}

/// Where a generated admin token is saved: the workspace's state folder (never the workspace,
/// whose files commands can read).
pub fn admin_token_path(engine: &Engine) -> std::path::PathBuf {
    engine.checkpoints.dir().join(ADMIN_TOKEN_FILE)
}

/// Saves a generated admin token for the person's scripts, readable by its owner only. A
/// token from the environment is not written, and a file left by an earlier start is removed.
pub fn save_admin_token(state: &AppState) -> std::io::Result<()> {
    let path = admin_token_path(&state.engine);
    let token = &state.server.admin_token;
    if token.from_env {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    crate::private_file::write(&path, format!("{}\n", token.value()).as_bytes())
}

/// The console's address with the admin token in its fragment (a fragment is never sent to a
/// server, so it stays out of access logs and `Referer` headers).
pub fn console_url(addr: SocketAddr, token: &str) -> String {
    let token = percent_encoding::utf8_percent_encode(token, percent_encoding::NON_ALPHANUMERIC);
    format!("http://{addr}/#admin={token}")
}

/// Serves until `shutdown` resolves, then finishes in-flight requests. The serving threads
/// end when this returns (see [`start`] to keep them while cleaning up).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    start(listener, state)?.run_until(shutdown).await
}

/// Starts serving on `server.workers` threads ([`workers`]) and logs the console's address.
pub fn start(listener: TcpListener, state: AppState) -> std::io::Result<workers::Workers> {
    let addr = listener.local_addr()?;
    let token = &state.server.admin_token;
    if token.from_env {
        tracing::info!(
            "console: http://{addr}/#admin=<the value of ${}> (approvals and runs need the admin \
             token)",
            token.env
        );
        if let Err(e) = save_admin_token(&state) {
            tracing::warn!(error = %e, "cannot remove the admin token file of an earlier start");
        }
    } else {
        let saved = match save_admin_token(&state) {
            Ok(()) => format!(
                "also saved in {}, readable by you only",
                admin_token_path(&state.engine).display()
            ),
            Err(e) => format!(
                "it could not be saved in {} ({e})",
                admin_token_path(&state.engine).display()
            ),
        };
        tracing::info!(
            "console: {} (the admin token in it is new at each start and is what approvals and \
             runs need; {saved})",
            console_url(addr, token.value())
        );
    }
    let connections = workers::Connections::new(state.server.workers);
    let app = router(state).layer(axum::Extension(connections.clone()));
    workers::Workers::start(listener, app, connections)
}

async fn run_id_layer(mut req: Request, next: Next) -> Response {
    let id = new_run_id();
    req.extensions_mut().insert(RunId(id.clone()));
    let mut resp = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(RUN_ID_HEADER, v);
    }
    resp
}

fn panic_response(_err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::internal(
        "internal error: the request failed unexpectedly; details are in the server log",
    )
    .into_response()
}

/// Loopback names that are always accepted in `Host`.
fn is_loopback_host(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "[::1]" | "::1")
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `example.com:80` → `example.com`; `[::1]:7979` → `[::1]`.
fn host_name(value: &str) -> &str {
    if value.starts_with('[') {
        return match value.find(']') {
            Some(end) => &value[..=end],
            None => value,
        };
    }
    match value.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => value,
    }
}

async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let cfg = &state.server;
    let headers = req.headers();
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or("").to_ascii_lowercase();
        let name = host_name(&host);
        let bind_ip = cfg.bind.ip().to_string();
        let ok = is_loopback_host(name)
            || name == bind_ip
            || cfg
                .allowed_hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(name));
        if !ok {
            return ApiError::forbidden(format!(
                "Host {host:?} is not allowed: toolpilot answers only requests addressed to a \
                 loopback name (localhost, 127.0.0.1, [::1]), which protects it from DNS \
                 rebinding. Add the name to server.allowed_hosts to allow it"
            ))
            .with_code("host_not_allowed")
            .into_response();
        }
    }
    let origin = headers
        .get(header::ORIGIN)
        .map(|o| o.to_str().unwrap_or("").to_string());
    // The console's own requests carry its origin, which is this server's: `http://` + the
    // Host that passed the check above (a page elsewhere, even on another loopback port, has
    // another origin).
    let same_origin = origin.as_deref().is_some_and(|o| {
        headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .is_some_and(|h| o.eq_ignore_ascii_case(&format!("http://{h}")))
    });
    let origin = origin.filter(|_| !same_origin);
    if let Some(origin) = &origin {
        if !cfg.allowed_origins.iter().any(|o| o == origin) {
            return ApiError::forbidden(format!(
                "cross-origin requests are not allowed (Origin {origin:?}): a web page must not \
                 be able to drive tools in your workspace. Add the origin to \
                 server.allowed_origins if you trust it"
            ))
            .with_code("origin_not_allowed")
            .into_response();
        }
        if req.method() == Method::OPTIONS {
            return cors(StatusCode::NO_CONTENT.into_response(), origin);
        }
    }
    // The console's files are static and hold no data: they load without the token (the page
    // then sends it, from its URL fragment, with every API call).
    let static_console = req.method() == Method::GET
        && matches!(
            req.uri().path(),
            "/" | "/console.js" | "/console.css" | "/favicon.ico"
        );
    if let Some(token) = &cfg.bearer_token {
        // The admin token opens everything the bearer token does (the console sends only it).
        let admin = admin_matches(req.headers(), cfg);
        if !static_console && !admin && !bearer_matches(req.headers(), token) {
            return ApiError::unauthorized(format!(
                "missing or wrong bearer token: send `Authorization: Bearer <token>` with the \
                 token from {}",
                cfg.bearer_token_env
            ))
            .into_response();
        }
    }
    let resp = next.run(req).await;
    match &origin {
        Some(o) => cors(resp, o),
        None => resp,
    }
}

/// Whether the request carries the admin token.
fn admin_matches(headers: &HeaderMap, cfg: &ServerConfig) -> bool {
    headers
        .get(ADMIN_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| cfg.admin_token.matches(v))
}

/// The admin token for approvals, runs, jobs and undo: 401 without it, with where it is.
async fn admin_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let cfg = &state.server;
    if admin_matches(req.headers(), cfg) {
        return next.run(req).await;
    }
    let what = if req.headers().contains_key(ADMIN_TOKEN_HEADER) {
        "the admin token in the `x-toolpilot-admin-token` header is wrong"
    } else {
        "this endpoint needs toolpilot's admin token in the `x-toolpilot-admin-token` header"
    };
    let token = &cfg.admin_token;
    let source = if token.from_env {
        format!(
            "the token is the value of ${} (server.admin_token_env)",
            token.env
        )
    } else {
        format!(
            "the token is new at each start of the server: the serve log shows it in the \
             console's address (http://…/#admin=TOKEN), and it is saved in {}, readable by the \
             person who started toolpilot only. Set ${} to choose it",
            admin_token_path(&state.engine).display(),
            token.env
        )
    };
    ApiError::unauthorized(format!(
        "{what} (approvals, runs, jobs and undo are for the person using toolpilot, not for \
         other local programs); {source}"
    ))
    .with_code("invalid_admin_token")
    .into_response()
}

fn cors(mut resp: Response, origin: &str) -> Response {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(
            "authorization, content-type, x-toolpilot-admin-token, x-toolpilot-current-file, \
             x-toolpilot-detach, mcp-protocol-version, mcp-session-id, mcp-method, mcp-name, \
             last-event-id",
        ),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("x-toolpilot-run-id, mcp-session-id"),
    );
    resp
}

/// Constant-time comparison of the presented bearer token.
fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(presented) = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
    else {
        return false;
    };
    let (a, b) = (presented.trim().as_bytes(), token.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        assert_eq!(host_name("localhost:7979"), "localhost");
        assert_eq!(host_name("[::1]:7979"), "[::1]");
        assert_eq!(host_name("example.com"), "example.com");
        assert!(is_loopback_host("127.0.0.2"));
        assert!(is_loopback_host("app.localhost"));
        assert!(!is_loopback_host("127.0.0.1.evil.com"));
        assert!(!is_loopback_host("evil.com"));
    }

    #[test]
    fn bearer_comparison() {
        let mut h = HeaderMap::new();
        assert!(!bearer_matches(&h, "s3cret"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret"),
        );
        assert!(bearer_matches(&h, "s3cret"));
        assert!(!bearer_matches(&h, "s3cre"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic s3cret"),
        );
        assert!(!bearer_matches(&h, "s3cret"));
    }
}
