//! One MCP server: its supervisor (start, list, refresh, restart with backoff) and its calls.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest,
    Implementation, ProtocolVersion, ServerResult, SubscriptionFilter,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, Peer, PeerRequestOptions,
    RoleClient, RunningService, ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Map, Value, json};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;

use super::{Context, McpTool, Slot, names, result};
use crate::config::{McpServerConfig, McpTransport};

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Being started (connect, handshake, first tool list).
    Starting,
    /// Connected; its tools are offered.
    Ready,
    /// It could not start or it died; the next start waits for the backoff.
    Down,
    /// toolpilot is shutting down.
    Stopped,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::Down => "down",
            Phase::Stopped => "stopped",
        }
    }
}

/// The longest wait between two starts of a server that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A server that stayed up this long starts again with the shortest backoff.
const STABLE: Duration = Duration::from_secs(60);
/// Lines of a stdio server's stderr kept for error messages.
const STDERR_LINES: usize = 20;

pub(super) struct Server {
    pub(super) config: McpServerConfig,
    cx: Context,
    state: Mutex<State>,
    /// `true` once the first start has ended, ready or not (what [`super::Mcp::ready`] waits
    /// for).
    settled: tokio::sync::watch::Sender<bool>,
    /// Woken by `notifications/tools/list_changed`.
    refresh: Arc<Notify>,
}

struct State {
    phase: Phase,
    /// Why the server is down, or what it is doing; never holds configured values.
    detail: String,
    restarts: u32,
    peer: Option<Peer<RoleClient>>,
    tools: Arc<Vec<Arc<McpTool>>>,
}

impl Server {
    pub(super) fn new(config: McpServerConfig, cx: Context) -> Server {
        Server {
            config,
            cx,
            state: Mutex::new(State {
                phase: Phase::Starting,
                detail: "not started yet".into(),
                restarts: 0,
                peer: None,
                tools: Arc::default(),
            }),
            settled: tokio::sync::watch::Sender::new(false),
            refresh: Arc::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn tools(&self) -> Arc<Vec<Arc<McpTool>>> {
        Arc::clone(&self.state().tools)
    }

    pub(super) fn phase(&self) -> (Phase, String, u32) {
        let s = self.state();
        (s.phase, s.detail.clone(), s.restarts)
    }

    pub(super) async fn first_start_done(&self) {
        let mut rx = self.settled.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    fn set_phase(&self, phase: Phase, detail: String) {
        let mut s = self.state();
        s.phase = phase;
        s.detail = detail;
        if phase != Phase::Ready {
            s.peer = None;
        }
    }

    /// Replaces the tool list with what the server listed (filtered and named).
    fn set_tools(&self, listed: Vec<rmcp::model::Tool>) {
        let c = &self.config;
        let kept: Vec<rmcp::model::Tool> = listed
            .into_iter()
            .filter(|t| {
                let name = t.name.as_ref();
                c.enabled_tools
                    .as_ref()
                    .is_none_or(|only| only.iter().any(|n| n == name))
                    && !c.disabled_tools.iter().any(|n| n == name)
            })
            .collect();
        let server_names: Vec<String> = kept.iter().map(|t| t.name.to_string()).collect();
        let offered = names::offered_names(&c.name, &server_names);
        let tools: Vec<Arc<McpTool>> = kept
            .iter()
            .zip(offered)
            .map(|(t, (tool, name))| {
                let description = match (&t.description, &t.title) {
                    (Some(d), _) => d.to_string(),
                    (None, Some(title)) => title.clone(),
                    (None, None) => format!("The {tool} tool of the MCP server {}.", c.name),
                };
                let mut schema = Value::Object((*t.input_schema).clone());
                if schema.get("type").is_none()
                    && let Some(o) = schema.as_object_mut()
                {
                    o.insert("type".into(), json!("object"));
                }
                Arc::new(McpTool {
                    spec: json!({
                        "type": "function",
                        "function": {
                            "name": name,
                            "description": description,
                            "parameters": schema,
                        }
                    }),
                    name,
                    server: c.name.clone(),
                    tool,
                })
            })
            .collect();
        tracing::info!(server = %c.name, tools = tools.len(), "MCP tools listed");
        self.state().tools = Arc::new(tools);
        self.cx.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Calls a tool of this server (see [`super::Mcp::call`]).
    pub(super) async fn call(&self, tool: &str, arguments: Value) -> Result<String, String> {
        let name = &self.config.name;
        let peer = {
            let s = self.state();
            match &s.peer {
                Some(p) => p.clone(),
                None => {
                    return Err(format!(
                        "the MCP server {name} is not running now ({}: {}). Try again in a \
                         while, or do without it",
                        s.phase.label(),
                        s.detail
                    ));
                }
            }
        };
        let arguments = match arguments {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            other => {
                return Err(format!(
                    "the arguments must be a JSON object, not {}",
                    crate::text::preview(&other.to_string(), 80)
                ));
            }
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(tool.to_string()).with_arguments(arguments),
        ));
        let c = &self.config;
        let options = PeerRequestOptions::with_timeout(c.call_timeout)
            .reset_timeout_on_progress()
            .with_max_total_timeout(c.call_max);
        let answer = match peer.send_request_with_option(request, options).await {
            Ok(handle) => {
                // A run that ends (its client gone, its deadline, the shutdown) drops this
                // future: the server is told to stop the call.
                let mut cancel = CancelOnDrop(Some((peer.clone(), handle.id.clone())));
                let answer = handle.await_response().await;
                cancel.0 = None;
                answer
            }
            Err(e) => Err(e),
        };
        match answer {
            Ok(ServerResult::CallToolResult(r)) => {
                let value = serde_json::to_value(&r).unwrap_or(Value::Null);
                let (text, is_error) = result::render(&value);
                if is_error {
                    Err(format!("the tool reported an error: {text}"))
                } else {
                    Ok(text)
                }
            }
            Ok(_) => Err(format!(
                "the MCP server {name} answered with something other than a tool result \
                 (toolpilot does not drive task or input-required rounds)"
            )),
            Err(ServiceError::Timeout { timeout }) if timeout >= c.call_max => Err(format!(
                "the MCP server {name} did not finish within {} s (mcp.servers.{name}.\
                 call_max_secs); the call was cancelled. Try a smaller request",
                timeout.as_secs_f64()
            )),
            Err(ServiceError::Timeout { timeout }) => Err(format!(
                "the MCP server {name} sent neither an answer nor progress for {} s \
                 (mcp.servers.{name}.call_timeout_secs); the call was cancelled. Try a smaller \
                 request, or tell the user the server is not answering",
                timeout.as_secs_f64()
            )),
            Err(ServiceError::TransportClosed) | Err(ServiceError::TransportSend(_)) => {
                Err(match c.transport {
                    McpTransport::Stdio { .. } => format!(
                        "the MCP server {name} closed the connection during the call (it may \
                         have crashed); it is being restarted. Whatever the call did may be \
                         incomplete"
                    ),
                    McpTransport::Http { .. } => format!(
                        "the MCP server {name} could not be reached, or the connection broke \
                         during the call. Whatever the call did may be incomplete; try again \
                         later, or tell the user the server is not answering"
                    ),
                })
            }
            Err(ServiceError::McpError(e)) => Err(format!(
                "the MCP server {name} refused the call: {}",
                e.message
            )),
            Err(e) => Err(format!("the call to the MCP server {name} failed: {e}")),
        }
    }
}

/// Sends `notifications/cancelled` for a call whose caller went away before its answer.
struct CancelOnDrop(Option<(Peer<RoleClient>, rmcp::model::RequestId)>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some((peer, id)) = self.0.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some("the toolpilot run that made the call ended".into()),
                    ))
                    .await;
            });
        }
    }
}

/// The handler the SDK calls for what the server sends on its own.
struct Handler {
    refresh: Arc<Notify>,
}

impl rmcp::ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.refresh.notify_one();
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolpilot", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A live connection, and the child process behind it (stdio).
struct Connection {
    running: RunningService<RoleClient, Handler>,
    child: Option<Child>,
}

struct Child {
    process: tokio::process::Child,
    stderr: Slot<VecDeque<String>>,
    /// The process group the server leads (its pid), kept after the leader is reaped.
    group: Option<rustix::process::Pid>,
    ended: bool,
}

impl Child {
    /// Ends the server's process group (TERM, then KILL after a moment, and KILL for whatever
    /// is left of the group, such as the node process `npx` started), reaps the leader, and
    /// says how it ended.
    async fn end(mut self) -> String {
        use std::os::unix::process::ExitStatusExt as _;
        let status = match self.process.try_wait() {
            Ok(Some(status)) => Some(status),
            _ => {
                self.signal(rustix::process::Signal::TERM);
                match tokio::time::timeout(Duration::from_secs(2), self.process.wait()).await {
                    // A server whose output has just ended is often exiting on its own when
                    // the signal comes: an exit code is its own ending, not the signal's.
                    Ok(Ok(status)) if status.signal().is_none() => Some(status),
                    Ok(_) => None,
                    Err(_) => {
                        self.signal(rustix::process::Signal::KILL);
                        let _ = self.process.wait().await;
                        None
                    }
                }
            }
        };
        self.signal(rustix::process::Signal::KILL);
        self.ended = true;
        let tail = stderr_tail(&self.stderr);
        match status {
            Some(s) => format!("the process exited ({s}){tail}"),
            None => format!("the process was stopped{tail}"),
        }
    }

    fn signal(&self, sig: rustix::process::Signal) {
        if let Some(pid) = self.group {
            let _ = rustix::process::kill_process_group(pid, sig);
        }
    }
}

impl Drop for Child {
    /// A start abandoned half-way (its timeout) leaves no process behind.
    fn drop(&mut self) {
        if !self.ended {
            self.signal(rustix::process::Signal::KILL);
        }
    }
}

fn stderr_tail(lines: &Slot<VecDeque<String>>) -> String {
    let lines = lines.lock().unwrap_or_else(|e| e.into_inner());
    if lines.is_empty() {
        String::new()
    } else {
        format!(
            "; its last words on stderr: {}",
            lines.iter().cloned().collect::<Vec<_>>().join(" | ")
        )
    }
}

/// Runs a server for as long as toolpilot does: start, serve, and after a failure start again
/// with a doubling backoff.
pub(super) async fn supervise(s: Arc<Server>) {
    let name = s.config.name.clone();
    let mut backoff = Duration::from_secs(1);
    loop {
        s.set_phase(Phase::Starting, "starting".into());
        let started = Instant::now();
        let stderr: Slot<VecDeque<String>> = Arc::default();
        let attempt = tokio::select! {
            r = tokio::time::timeout(s.config.startup_timeout, connect(&s, &stderr)) => r,
            _ = s.cx.stop.cancelled() => break,
        };
        let why = match attempt {
            Err(_) => format!(
                "it did not start within {} s (mcp.servers.{name}.startup_timeout_secs){}",
                s.config.startup_timeout.as_secs_f64(),
                stderr_tail(&stderr)
            ),
            Ok(Err(e)) => e,
            Ok(Ok(conn)) => {
                let why = serve(&s, conn).await;
                if started.elapsed() >= STABLE {
                    backoff = Duration::from_secs(1);
                }
                why
            }
        };
        if s.cx.stop.is_cancelled() {
            break;
        }
        tracing::warn!(server = %name, error = %why, retry_in_secs = backoff.as_secs(), "MCP server down");
        s.state().restarts += 1;
        s.set_phase(
            Phase::Down,
            format!("{why}; next start in {} s", backoff.as_secs()),
        );
        // Whoever waits for the first start sees why it failed.
        s.settled.send_replace(true);
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = s.cx.stop.cancelled() => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    s.set_phase(Phase::Stopped, "toolpilot is shutting down".into());
    s.settled.send_replace(true);
}

/// Connects (starting the process for stdio) and lists the tools.
async fn connect(s: &Server, stderr: &Slot<VecDeque<String>>) -> Result<Connection, String> {
    let handler = Handler {
        refresh: Arc::clone(&s.refresh),
    };
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::LATEST],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    };
    let (running, child) = match &s.config.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut child = spawn(s, command, args, env, cwd.as_ref(), stderr)?;
            let (Some(stdout), Some(stdin)) =
                (child.process.stdout.take(), child.process.stdin.take())
            else {
                let _ = child.end().await;
                return Err("its standard input and output could not be connected".into());
            };
            match handler
                .serve_with_lifecycle((stdout, stdin), lifecycle)
                .await
            {
                Ok(r) => (r, Some(child)),
                Err(e) => {
                    let how = child.end().await;
                    return Err(format!("the MCP handshake failed: {e} ({how})"));
                }
            }
        }
        McpTransport::Http { url, headers } => {
            let client = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
            for (k, v) in headers {
                if let (Ok(k), Ok(v)) = (
                    reqwest::header::HeaderName::from_bytes(k.as_bytes()),
                    reqwest::header::HeaderValue::from_str(v),
                ) {
                    config.custom_headers.insert(k, v);
                }
            }
            let transport = StreamableHttpClientTransport::with_client(client, config);
            let r = handler
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| format!("cannot connect to {url}: {e}"))?;
            (r, None)
        }
    };
    let listed = running.peer().list_all_tools().await;
    match listed {
        Ok(tools) => {
            s.set_tools(tools);
            Ok(Connection { running, child })
        }
        Err(e) => {
            let _ = running.cancel().await;
            let how = match child {
                Some(c) => format!(" ({})", c.end().await),
                None => String::new(),
            };
            Err(format!("it did not list its tools: {e}{how}"))
        }
    }
}

/// Starts a stdio server's process: the environment commands get (secrets scrubbed) plus the
/// server's `env`, in its own process group, killed when dropped.
fn spawn(
    s: &Server,
    command: &str,
    args: &[String],
    env: &[(String, String)],
    cwd: Option<&PathBuf>,
    stderr: &Slot<VecDeque<String>>,
) -> Result<Child, String> {
    let name = &s.config.name;
    // The host's temporary folder, not a private one deep in the state folder as commands
    // get: browsers put sockets there, whose paths may not be longer than 107 bytes.
    let tmp = std::env::temp_dir();
    let dir = match cwd {
        Some(d) if d.is_absolute() => d.clone(),
        Some(d) => s.cx.workspace.join(d),
        None => s.cx.workspace.clone(),
    };
    let env_all: Vec<(String, String)> =
        s.cx.terminal
            .environment(&tmp)
            .into_iter()
            .chain(env.iter().cloned())
            .collect();
    // Found before anything starts, so that a missing program is named as such, sandbox or
    // not (under the sandbox it would only be a failed start of the second stage).
    let path = env_all
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    if !program_exists(command, path, &dir) {
        return Err(format!(
            "cannot start {command:?}: no such program (mcp.servers.{name}.command; is it \
             installed and on PATH?)"
        ));
    }
    let sandboxed = s.config.sandbox && s.cx.terminal.sandboxed();
    let mut cmd = if sandboxed {
        // The commands' supervisor: its own session, Landlock for the server and everything
        // it starts, the whole tree ended with it.
        let mut writable = vec![s.cx.workspace.clone(), tmp.clone()];
        if let Some(home) = env_all
            .iter()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
        {
            // Where npx, npm, pip and browsers keep their caches.
            writable.push(home.join(".npm"));
            writable.push(home.join(".cache"));
        }
        writable.extend(s.config.writable.iter().cloned());
        let spec = crate::terminal::sandbox::Spec {
            landlock_abi: s.cx.terminal.sandbox.landlock_abi,
            writable,
            readonly: Vec::new(),
            deny_read: s.cx.terminal.config.deny_read.clone(),
            network: s.config.network,
            unshare: crate::terminal::sandbox::Namespaces::default(),
            nofile: crate::process::original_nofile(),
            report: None,
            argv: std::iter::once(command.to_string())
                .chain(args.iter().cloned())
                .collect(),
        };
        let mut cmd = tokio::process::Command::new(&s.cx.terminal.config.helper);
        cmd.args(spec.to_args());
        cmd
    } else {
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(args).process_group(0);
        cmd
    };
    cmd.env_clear()
        .envs(env_all)
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut process = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound && dir.is_dir() {
            format!(
                "cannot start {command:?}: no such program (mcp.servers.{name}.command; is it \
                 installed and on PATH?)"
            )
        } else if !dir.is_dir() {
            format!(
                "cannot start {command:?}: its working folder {} does not exist \
                 (mcp.servers.{name}.cwd)",
                dir.display()
            )
        } else {
            format!("cannot start {command:?}: {e} (mcp.servers.{name}.command)")
        }
    })?;
    if let Some(err) = process.stderr.take() {
        let lines = Arc::clone(stderr);
        let server = name.clone();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(err).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                tracing::debug!(server = %server, "MCP server stderr: {line}");
                let mut l = lines.lock().unwrap_or_else(|e| e.into_inner());
                if l.len() == STDERR_LINES {
                    l.pop_front();
                }
                l.push_back(crate::text::preview(&line, 300));
            }
        });
    }
    let group = process
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw);
    Ok(Child {
        process,
        stderr: Arc::clone(stderr),
        group,
        ended: false,
    })
}

/// Whether `command` names an executable file: a path (relative to `dir`), or a name found
/// on `path`.
fn program_exists(command: &str, path: Option<&str>, dir: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        return runnable(&dir.join(command));
    }
    path.unwrap_or("/usr/local/bin:/usr/bin:/bin")
        .split(':')
        .filter(|d| !d.is_empty())
        .any(|d| runnable(&std::path::Path::new(d).join(command)))
}

/// Serves a live connection until it ends (or toolpilot stops): marks the server ready,
/// refreshes the tool list when the server says it changed. Returns why it ended.
async fn serve(s: &Server, conn: Connection) -> String {
    let Connection { running, child } = conn;
    let peer = running.peer().clone();
    // A server on the session-less revision sends list changes on a listen stream. It is
    // opened, and acknowledged, before the server is marked ready: a change made by the first
    // call (a tool that adds a tool) must not go out before anyone listens.
    let modern = peer
        .peer_info()
        .is_some_and(|i| i.protocol_version == ProtocolVersion::V_2026_07_28);
    let subscription = if modern {
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        match tokio::time::timeout(s.config.call_timeout, peer.listen(filter)).await {
            Ok(Ok(sub)) => Some(sub),
            Ok(Err(e)) => {
                tracing::warn!(server = %s.config.name, error = %e, "MCP server refused to send tool list changes; its list is read once");
                None
            }
            Err(_) => {
                tracing::warn!(server = %s.config.name, "MCP server did not acknowledge the subscription to tool list changes; its list is read once");
                None
            }
        }
    } else {
        None
    };
    {
        let mut st = s.state();
        st.phase = Phase::Ready;
        st.detail = format!(
            "connected{}",
            peer.peer_info()
                .map(|i| format!(" (protocol {})", i.protocol_version))
                .unwrap_or_default()
        );
        st.peer = Some(peer.clone());
    }
    s.settled.send_replace(true);
    tracing::info!(server = %s.config.name, "MCP server ready");
    let listener = subscription.map(|mut sub| {
        let refresh = Arc::clone(&s.refresh);
        tokio::spawn(async move {
            while let Ok(Some(_)) = sub.next().await {
                refresh.notify_one();
            }
        })
    });
    let token = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let ended = loop {
        tokio::select! {
            _ = s.cx.stop.cancelled() => {
                token.cancel();
                let _ = waiting.await;
                break "toolpilot is shutting down".to_string();
            }
            _ = s.refresh.notified() => {
                match tokio::time::timeout(s.config.call_timeout, peer.list_all_tools()).await {
                    Ok(Ok(tools)) => s.set_tools(tools),
                    Ok(Err(e)) => tracing::warn!(server = %s.config.name, error = %e, "MCP tool list refresh failed"),
                    Err(_) => tracing::warn!(server = %s.config.name, "MCP tool list refresh timed out"),
                }
            }
            _ = &mut waiting => break "the connection closed".to_string(),
        }
    };
    if let Some(l) = listener {
        l.abort();
    }
    s.set_phase(Phase::Down, ended.clone());
    match child {
        Some(c) => format!("{ended}: {}", c.end().await),
        None => ended,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server process as `spawn` starts one (leading its own process group), once `script`
    /// has printed `ready`.
    async fn child(script: &str) -> Child {
        use tokio::io::AsyncBufReadExt as _;
        let mut process = tokio::process::Command::new("sh")
            .args(["-c", script])
            .process_group(0)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let out = process.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(out).lines();
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("ready"));
        let group = process
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32));
        Child {
            process,
            stderr: Arc::default(),
            group,
            ended: false,
        }
    }

    #[tokio::test]
    async fn a_server_exiting_on_its_own_as_it_is_ended_is_reported_with_its_status() {
        // Still running when `end` looks, then exits with its own code while the TERM it gets
        // is ignored: what ended it was the server, not the signal.
        let c = child("trap '' TERM; echo ready; sleep 0.3; exit 3").await;
        let said = c.end().await;
        assert!(said.contains("exited (exit status: 3)"), "{said}");
    }

    #[tokio::test]
    async fn a_server_ended_by_the_signal_was_stopped() {
        let c = child("echo ready; sleep 30").await;
        let said = c.end().await;
        assert!(said.starts_with("the process was stopped"), "{said}");
    }
}
