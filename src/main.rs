//! The `toolpilot` binary: parses the command line, sets up logging and configuration, and
//! hands over to the library (`serve`, `mcp`, `run`, `tools`, `mock-upstream`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use serde_json::json;
use toolpilot::agent::{Engine, RunEvent, RunOptions};
use toolpilot::config::{CommonArgs, Config};
use toolpilot::openai::ChatRequest;
use toolpilot::server::{self, AppState};

#[derive(Parser)]
#[command(
    name = "toolpilot",
    version,
    about = "A local OpenAI-compatible server that runs the model's workspace tools under a permission policy"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum PolicyAction {
    /// Check one command line: `toolpilot policy check "cargo test && git push"`
    Check {
        #[command(flatten)]
        common: CommonArgs,
        /// The command line
        command: String,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Serve the OpenAI chat-completions API over the workspace
    Serve {
        #[command(flatten)]
        common: CommonArgs,
        /// Address to listen on (default 127.0.0.1:7979)
        #[arg(long, env = "TOOLPILOT_BIND", value_name = "ADDR")]
        bind: Option<SocketAddr>,
    },
    /// Serve the built-in tools to an MCP client over stdin and stdout (for clients that launch
    /// their MCP servers as processes); stdout carries only JSON-RPC, the log goes to stderr
    Mcp {
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Run one conversation without HTTP and print the answer
    Run {
        #[command(flatten)]
        common: CommonArgs,
        /// The question or task
        prompt: String,
    },
    /// List every built-in tool with its effective policy
    Tools {
        #[command(flatten)]
        common: CommonArgs,
    },
    /// List the recorded runs of the workspace, newest first; `runs show ID` shows one
    Runs {
        #[command(flatten)]
        common: CommonArgs,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
        /// `show ID`: one run's events
        #[arg(num_args = 0..=2, value_name = "show ID")]
        what: Vec<String>,
    },
    /// Restore the files a run changed to their state before the run
    Undo {
        #[command(flatten)]
        common: CommonArgs,
        /// The run id (the x-toolpilot-run-id header, or from `toolpilot runs`)
        run_id: String,
        /// Restore even files that changed after the run
        #[arg(long)]
        force: bool,
    },
    /// Say what the policy decides for a command line, and why
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Serve a scripted OpenAI-compatible model (for tests, demos and benchmarks)
    MockUpstream {
        /// The JSON script of rounds
        #[arg(long, value_name = "FILE")]
        script: PathBuf,
        #[arg(long, default_value = "127.0.0.1:7980", value_name = "ADDR")]
        bind: SocketAddr,
        /// Also write the received requests to this file after each request
        #[arg(long, value_name = "FILE")]
        record: Option<PathBuf>,
    },
}

fn init_logging(default: &str) {
    let filter = std::env::var("TOOLPILOT_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| default.to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// mimalloc: allocation is a large part of a proxy's work (per-chunk parsing, buffers), and
/// it is markedly faster than the system allocator under many concurrent streams.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // The command sandbox re-executes toolpilot: `__sandbox … -- CMD` is the supervisor,
    // `__sandbox-exec` the command's second stage, `__sandbox-probe` the start-up probe.
    // Their arguments are paths, which need not be UTF-8.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(stage) = args.get(1).and_then(|a| a.to_str()) {
        use toolpilot::terminal::{confine, sandbox};
        match stage {
            sandbox::SUPERVISOR_ARG => return sandbox::supervise(&args[2..]),
            confine::EXEC_ARG => return confine::run(&args[2..]),
            confine::PROBE_ARG => return confine::probe(&args[2..]),
            _ => {}
        }
    }
    let cli = Cli::parse();
    toolpilot::process::install_crypto_provider();
    toolpilot::process::raise_fd_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolpilot: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve { common, bind } => {
                init_logging("info");
                serve(common, bind).await
            }
            Command::Mcp { common } => {
                init_logging("warn");
                mcp(common).await
            }
            Command::Run { common, prompt } => {
                init_logging("warn");
                run(common, prompt).await
            }
            Command::Tools { common } => tools(common).await,
            Command::Runs { common, json, what } => match what.as_slice() {
                [] => runs(common, json),
                [show, id] if show == "show" => run_show(common, id, json),
                _ => Err(format!(
                    "`toolpilot runs {}` is not understood: use `toolpilot runs` to list the runs \
                     or `toolpilot runs show ID` to show one",
                    what.join(" ")
                )),
            },
            Command::Policy {
                action:
                    PolicyAction::Check {
                        common,
                        command,
                        json,
                    },
            } => policy_check(common, &command, json),
            Command::Undo {
                common,
                run_id,
                force,
            } => undo(common, &run_id, force),
            Command::MockUpstream {
                script,
                bind,
                record,
            } => {
                init_logging("info");
                toolpilot::mock::run_cli(&script, bind, record).await
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolpilot: {e}");
            ExitCode::FAILURE
        }
    }
}

fn load(common: &CommonArgs) -> Result<Config, String> {
    let config = Config::load(common).map_err(|e| e.to_string())?;
    // The rules are compiled here too, so that a bad one stops every command (also those
    // that use no policy) with its key named.
    toolpilot::policy::Policy::new(&config.policy)?;
    Ok(config)
}

async fn serve(common: CommonArgs, bind: Option<SocketAddr>) -> Result<(), String> {
    let mut config = load(&common)?;
    if let Some(b) = bind {
        config.server.bind = b;
    }
    server::check_bind(&config.server)?;
    // Other processes of the same user, commands included, cannot read this process's memory
    // or /proc files (its environment holds the upstream key and maybe the admin token; its
    // memory the admin token). Commands get the normal setting back when they are executed.
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!(error = %e, "cannot make the server's memory unreadable to other processes");
    }
    let engine = Arc::new(Engine::new(config.clone())?);
    // MCP servers start now, in the background; the first run waits for their first start.
    if let Some(mcp) = engine.registry.mcp() {
        mcp.start();
    }
    let listener = tokio::net::TcpListener::bind(config.server.bind)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.server.bind))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(
        "toolpilot {} listening on http://{addr}/v1 (workspace {}, upstream {})",
        env!("CARGO_PKG_VERSION"),
        engine.workspace.root().display(),
        engine.upstreams.describe()
    );
    if engine.upstreams.is_demo() {
        tracing::warn!(
            "NO UPSTREAM CONFIGURED: the built-in demo model answers every request. Pass \
             --upstream URL --model NAME to use a real model."
        );
    }
    for u in &config.upstreams {
        match &u.api_key_source {
            Some(var) => tracing::info!(upstream = %u.name, "upstream API key from ${var}"),
            None if u.name == "default" => tracing::info!(
                "no upstream API key set (TOOLPILOT_UPSTREAM_API_KEY or OPENAI_API_KEY)"
            ),
            None => {
                tracing::info!(upstream = %u.name, "no API key for this upstream (api_key_env)")
            }
        }
    }
    if config.agent.approve_asks {
        tracing::warn!("--yes: tool calls whose policy is `ask` run without approval");
    }
    let engine_terminal = Arc::clone(&engine.terminal);
    let engine_runs = Arc::clone(&engine);
    let state = AppState {
        engine,
        server: Arc::new(config.server.clone()),
    };
    tracing::info!("commands: {}", engine_terminal.describe());
    if engine_terminal.sandboxed() {
        tracing::info!(
            "command namespaces: {}",
            engine_terminal.sandbox.namespace_detail
        );
        for w in engine_terminal.read_warnings(&config.workspace) {
            tracing::warn!("commands: {w}");
        }
    }
    let mut signals =
        Signals::new().map_err(|e| format!("cannot listen for SIGTERM and SIGINT: {e}"))?;
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let grace = config.server.shutdown_grace;
    let watched = Arc::clone(&engine_runs);
    tokio::spawn(async move {
        signals.next().await;
        tracing::info!(
            runs = watched.live_runs(),
            "shutting down: no new connections are accepted; the runs in flight have {} s to \
             finish (server.shutdown_grace_secs). A second signal exits at once",
            grace.as_secs_f64()
        );
        let _ = first_tx.send(());
        tokio::select! {
            _ = watched.runs_finished() => {}
            _ = tokio::time::sleep(grace) => {
                tracing::warn!(
                    runs = watched.live_runs(),
                    "the shutdown grace period is over: ending the runs still going"
                );
                watched.stop_runs();
            }
            _ = signals.next() => exit_now(&watched),
        }
        // Every run has ended and told its client; a client that does not read the end of its
        // response does not keep the server up for more than a moment.
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {
                let _ = done_tx.send(());
            }
            _ = signals.next() => exit_now(&watched),
        }
    });
    let mut workers =
        server::start(listener, state).map_err(|e| format!("cannot start serving: {e}"))?;
    let result = tokio::select! {
        r = workers.run_until(async {
            let _ = first_rx.await;
        }) => r,
        Ok(()) = done_rx => {
            tracing::warn!("closing the connections of clients that did not read their answer");
            Ok(())
        }
    };
    // Background jobs die with the server, and so do the MCP servers it started.
    engine_terminal.jobs.shutdown().await;
    if let Some(mcp) = engine_runs.registry.mcp() {
        mcp.shutdown(std::time::Duration::from_secs(5)).await;
    }
    // The serving threads ran the jobs' supervisors until now; what is left on them ends here.
    drop(workers);
    // The run recorder writes periodically: write the last events now. (Paused runs are
    // written, synced, when they pause.)
    engine_runs.runs.flush();
    tracing::info!("stopped");
    result.map_err(|e| format!("server error: {e}"))
}

/// `toolpilot mcp`: the built-in tools over stdio, until the client closes stdin or a signal
/// comes. Asks are approved by an elicitation when the client supports them (or `--yes`, or a
/// rule); there is no approval API here.
async fn mcp(common: CommonArgs) -> Result<(), String> {
    use rmcp::ServiceExt;
    let config = load(&common)?;
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!(error = %e, "cannot make the server's memory unreadable to other processes");
    }
    let engine = Arc::new(Engine::new(config)?);
    tracing::info!(
        "toolpilot {} serving MCP on stdio (workspace {}; commands: {})",
        env!("CARGO_PKG_VERSION"),
        engine.workspace.root().display(),
        engine.terminal.describe()
    );
    let tools = server::mcp::McpTools::new(Arc::clone(&engine), false);
    let mut signals =
        Signals::new().map_err(|e| format!("cannot listen for SIGTERM and SIGINT: {e}"))?;
    let result = tokio::select! {
        r = async {
            let transport = server::mcp::StdioLines::new(
                tokio::io::stdin(),
                tokio::io::stdout(),
                engine.config.server.max_body_bytes,
            );
            let service = tools.serve(transport).await.map_err(|e| {
                format!(
                    "no MCP session was opened on stdin ({e}): `toolpilot mcp` speaks MCP \
                     (JSON-RPC, one message a line) with the client that starts it; configure \
                     it as a stdio MCP server in that client, or use /mcp of `toolpilot serve`"
                )
            })?;
            service
                .waiting()
                .await
                .map(|_| ())
                .map_err(|e| format!("the MCP session ended with an error: {e}"))
        } => r,
        _ = signals.next() => {
            tracing::info!("signal received: stopping");
            engine.stop_runs();
            Ok(())
        }
    };
    engine.terminal.jobs.shutdown().await;
    engine.runs.flush();
    result
}

/// The MCP servers of `toolpilot tools`: each started once (within its start-up timeout), its
/// state, and its tools with their policy.
async fn mcp_tools(config: &Config, policy: &toolpilot::policy::Policy) -> Result<(), String> {
    let engine = Engine::new(config.clone())?;
    let Some(mcp) = engine.registry.mcp() else {
        return Ok(());
    };
    mcp.ready().await;
    println!("\nMCP servers ([mcp.servers.NAME]; tools offered as mcp__SERVER__TOOL):");
    for server in mcp.status().as_array().into_iter().flatten() {
        let text = |k: &str| {
            server
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        println!(
            "{} ({}): {}, {}",
            text("name"),
            text("transport"),
            text("state"),
            text("detail")
        );
        for tool in server
            .get("tools")
            .and_then(|t| t.as_array())
            .into_iter()
            .flatten()
        {
            let name = tool.get("name").and_then(|v| v.as_str()).unwrap_or("");
            let level = policy_with_servers(policy, name);
            println!("  {:<40} {:<26} {}", name, level.0.as_continue(), level.1);
            for rule in policy.rules_for(name) {
                println!("  {:<40}   rule: {rule}", "");
            }
        }
    }
    mcp.shutdown(std::time::Duration::from_secs(5)).await;
    Ok(())
}

/// A tool's level and where it comes from, for the listing.
fn policy_with_servers(
    policy: &toolpilot::policy::Policy,
    name: &str,
) -> (toolpilot::policy::Level, &'static str) {
    (policy.level(name), policy.level_source(name))
}

/// SIGTERM and SIGINT, as one stream of "stop" requests.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// The second signal: the run records are written and the process exits now. The commands'
/// supervisors get SIGTERM from the kernel when it does (their parent-death signal) and end
/// their process trees.
fn exit_now(engine: &Engine) -> ! {
    tracing::warn!(
        runs = engine.live_runs(),
        "second signal: exiting now without waiting for the runs in flight"
    );
    engine.runs.flush();
    std::process::exit(130)
}

async fn run(common: CommonArgs, prompt: String) -> Result<(), String> {
    let config = load(&common)?;
    let engine = Arc::new(Engine::new(config)?);
    let result = run_with(&engine, prompt).await;
    // MCP servers start with the run's first round (lazily) and end with it.
    if let Some(mcp) = engine.registry.mcp() {
        mcp.shutdown(std::time::Duration::from_secs(5)).await;
    }
    result
}

async fn run_with(engine: &Arc<Engine>, prompt: String) -> Result<(), String> {
    if engine.upstreams.is_demo() {
        eprintln!(
            "toolpilot: no upstream configured; the built-in demo model answers (use --upstream URL --model NAME)"
        );
    }
    let mut body = serde_json::Map::new();
    body.insert(
        "messages".into(),
        json!([{"role": "user", "content": prompt}]),
    );
    let req = ChatRequest::from_map(body).map_err(|e| e.message)?;
    let run_id = server::new_run_id();
    let mut handle = engine.start(
        req,
        // No server, so nobody can answer an approval: asks are refused at once.
        RunOptions::new(run_id.clone(), true),
    );
    let mut stdout = std::io::stdout();
    let mut ended_with_newline = true;
    while let Some(ev) = handle.recv().await {
        match ev {
            RunEvent::Content(t) => {
                let _ = stdout.write_all(t.as_bytes());
                let _ = stdout.flush();
                ended_with_newline = t.ends_with('\n');
            }
            RunEvent::Reasoning(_) => {}
            RunEvent::ToolStarted {
                name, arguments, ..
            } => {
                eprintln!("→ {name} {}", toolpilot::text::preview(&arguments, 120));
            }
            RunEvent::ToolFinished {
                name,
                status,
                duration,
                result_bytes,
                ..
            } => {
                eprintln!(
                    "  {name}: {} in {} ms ({result_bytes} bytes)",
                    status.label(),
                    duration.as_millis()
                );
            }
            // Not sent here: with no server, approvals are refused without waiting.
            RunEvent::ApprovalPending(_) | RunEvent::ApprovalResolved { .. } => {}
            RunEvent::ClientToolCalls(calls) => {
                for c in calls {
                    eprintln!("(the model called {} which toolpilot does not run)", c.name);
                }
            }
            RunEvent::Done {
                finish_reason,
                usage,
                rounds,
                ..
            } => {
                if !ended_with_newline {
                    let _ = stdout.write_all(b"\n");
                }
                let _ = stdout.flush();
                eprintln!(
                    "[run {run_id}: {rounds} rounds, {} tokens, finish_reason {finish_reason}]",
                    usage.total_tokens
                );
                return Ok(());
            }
            RunEvent::Failed(e) => return Err(e.message),
        }
    }
    Err("the run ended unexpectedly".into())
}

fn checkpoints(
    common: &CommonArgs,
) -> Result<
    (
        Config,
        toolpilot::workspace::Workspace,
        toolpilot::checkpoint::Store,
    ),
    String,
> {
    let config = load(common)?;
    let ws = toolpilot::workspace::Workspace::open(&config.workspace, &config.sensitive_files)
        .map_err(|e| {
            format!(
                "cannot open the workspace {}: {e}",
                config.workspace.display()
            )
        })?;
    let store = toolpilot::checkpoint::Store::new(&config.state_dir, ws.root());
    Ok((config, ws, store))
}

fn policy_check(common: CommonArgs, command: &str, json: bool) -> Result<(), String> {
    let config = load(&common)?;
    let policy = toolpilot::policy::Policy::new(&config.policy)?;
    let sandbox = if config.terminal.sandbox {
        toolpilot::terminal::sandbox::detect()
    } else {
        toolpilot::terminal::sandbox::SandboxStatus::off("turned off")
    };
    let ws = toolpilot::workspace::Workspace::open(&config.workspace, &config.sensitive_files)
        .map_err(|e| {
            format!(
                "cannot open the workspace {}: {e}",
                config.workspace.display()
            )
        })?;
    let judge = toolpilot::policy::WorkspaceJudge::new(&ws, &policy);
    let (decision, a) =
        policy.decide_command("run_terminal_command", command, sandbox.available, &judge);
    let approved = matches!(decision, toolpilot::policy::Decision::Ask { .. })
        && !decision.person_only()
        && config.agent.approve_asks;
    if json {
        let v = json!({"command": command, "decision": decision.label(),
            "person_only": decision.person_only(), "class": a.class,
            "reason": decision.reason(), "approved_by_yes": approved, "sandbox": sandbox,
            "parts": a.parts});
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    let person = if decision.person_only() {
        " (a person must approve; --yes does not)"
    } else {
        ""
    };
    println!(
        "{} [{}]{person}: {}",
        decision.label(),
        a.class.label(),
        decision.reason()
    );
    for p in &a.parts {
        println!(
            "  {:<5} {:<11} {}  ({})",
            p.verdict.label(),
            p.class.label(),
            p.command,
            p.reason
        );
    }
    println!("sandbox: {}", sandbox.detail);
    if approved {
        println!("--yes is set: this command would run without asking");
    }
    Ok(())
}

/// One row of `toolpilot runs`: the recorded run, with what it changed (from checkpoints).
#[derive(serde::Serialize)]
struct RunRow {
    #[serde(flatten)]
    summary: toolpilot::runs::Summary,
    files_changed: usize,
    undone: bool,
}

fn when(ms: u64) -> String {
    let t = httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms));
    t.get(5..25).unwrap_or(&t).to_string()
}

fn runs(common: CommonArgs, json: bool) -> Result<(), String> {
    let (_, ws, store) = checkpoints(&common)?;
    let recorded = toolpilot::runs::read_file_runs(&store.dir().join("runs.jsonl"), None);
    let mut rows: Vec<RunRow> = recorded
        .into_values()
        .map(|(summary, _)| RunRow {
            summary,
            files_changed: 0,
            undone: false,
        })
        .collect();
    for c in store.list() {
        match rows.iter_mut().find(|r| r.summary.id == c.run_id) {
            Some(r) => {
                r.files_changed = c.files.len();
                r.undone = c.undone;
            }
            // Changed files before runs were recorded.
            None => rows.push(RunRow {
                summary: toolpilot::runs::Summary {
                    id: c.run_id.clone(),
                    status: "done".into(),
                    started_ms: c.created * 1000,
                    prompt: c.prompt.clone(),
                    ..Default::default()
                },
                files_changed: c.files.len(),
                undone: c.undone,
            }),
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.summary.started_ms));
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return Ok(());
    }
    if rows.is_empty() {
        println!("No run recorded in {} yet.", ws.root().display());
        return Ok(());
    }
    println!(
        "{:<22} {:<20} {:<10} {:>6} {:>5} {:>5}  prompt",
        "run", "started (UTC)", "status", "rounds", "tools", "files"
    );
    for r in rows {
        let s = &r.summary;
        println!(
            "{:<22} {:<20} {:<10} {:>6} {:>5} {:>5}  {}",
            s.id,
            when(s.started_ms),
            if r.undone { "undone" } else { &s.status },
            s.rounds,
            s.tool_calls,
            r.files_changed,
            toolpilot::text::preview(&s.prompt.replace('\n', " "), 60)
        );
    }
    Ok(())
}

fn run_show(common: CommonArgs, id: &str, json: bool) -> Result<(), String> {
    let (_, _, store) = checkpoints(&common)?;
    let mut found = toolpilot::runs::read_file_runs(&store.dir().join("runs.jsonl"), Some(id));
    let Some((summary, events)) = found.remove(id) else {
        return Err(format!(
            "no run {id:?} is recorded for this workspace (`toolpilot runs` lists them)"
        ));
    };
    if json {
        println!("{}", serde_json::json!({"run": summary, "events": events}));
        return Ok(());
    }
    println!(
        "run {}  {}  model {}  {} rounds, {} tool calls, {} + {} tokens",
        summary.id,
        summary.status,
        summary.model,
        summary.rounds,
        summary.tool_calls,
        summary.prompt_tokens,
        summary.completion_tokens
    );
    println!("prompt: {}", summary.prompt);
    let t0 = events.first().and_then(|e| e["t"].as_u64()).unwrap_or(0);
    for e in &events {
        let at = e["t"].as_u64().unwrap_or(t0).saturating_sub(t0);
        let what = match e["type"].as_str().unwrap_or("") {
            "request" => format!(
                "request ({} messages, stream {})",
                e["messages"], e["stream"]
            ),
            "round" => format!(
                "round {}: {} ms, finish {}, tool calls {}",
                e["n"], e["ms"], e["finish_reason"], e["tool_calls"]
            ),
            "tool_started" => format!(
                "  {} {}",
                e["tool"].as_str().unwrap_or(""),
                e["arguments"].as_str().unwrap_or("")
            ),
            "tool" => format!(
                "  {} {} in {} ms ({} bytes)",
                e["tool"].as_str().unwrap_or(""),
                e["status"].as_str().unwrap_or(""),
                e["ms"],
                e["result_bytes"]
            ),
            "approval" => format!(
                "  approval {} for {}: {}",
                e["approval"].as_str().unwrap_or(""),
                e["tool"].as_str().unwrap_or(""),
                e["outcome"].as_str().unwrap_or("")
            ),
            other => format!("{other} {}", {
                let mut rest = e.clone();
                if let Some(o) = rest.as_object_mut() {
                    for k in ["run", "t", "type"] {
                        o.remove(k);
                    }
                }
                rest
            }),
        };
        println!("{:>8} ms  {what}", at);
    }
    Ok(())
}

fn undo(common: CommonArgs, run_id: &str, force: bool) -> Result<(), String> {
    let (_, ws, store) = checkpoints(&common)?;
    let report = store.undo(&ws, run_id, force).map_err(|e| e.to_string())?;
    for f in &report.restored {
        println!("restored {f}");
    }
    for f in &report.removed {
        println!("removed  {f}");
    }
    for d in &report.dirs_removed {
        println!("removed  {d}/");
    }
    println!("run {run_id} undone");
    Ok(())
}

async fn tools(common: CommonArgs) -> Result<(), String> {
    let config = load(&common)?;
    let policy = toolpilot::policy::Policy::new(&config.policy)?;
    let mut registry = toolpilot::tools::Registry::new(policy.clone(), config.policy.clone());
    let web = toolpilot::web::Web::new(&config.web)?;
    if let Some(why) = web.search_unavailable() {
        registry.set_unavailable("search_web", why.to_string());
    }
    if config.mcp.servers.is_empty() {
        registry.set_unavailable("mcp_tool_search", "no MCP servers".into());
    }
    println!(
        "{:<28} {:<26} {:<8} {:<10} notes",
        "tool", "policy", "source", "runs in"
    );
    for (name, _) in toolpilot::policy::REFERENCE_TOOLS {
        let level = policy.level(name);
        let (runs_in, note) = match registry.get(name) {
            Some(_) if *name == "mcp_tool_search" && registry.unavailable(name).is_some() => (
                "-",
                "offered only when the MCP servers ([mcp.servers.NAME]) have more tools than \
                 mcp.max_offered_tools"
                    .to_string(),
            ),
            Some(_) if registry.unavailable(name).is_some() => (
                "client",
                "not available here (no search provider, or its API key is not set; see \
                 [web.search]): passed back to clients that declare it"
                    .to_string(),
            ),
            Some(t) if t.read_only() => ("toolpilot", "read-only".to_string()),
            Some(_) => ("toolpilot", String::new()),
            None => (
                "client",
                "not executed server-side yet: passed back to clients that declare it".to_string(),
            ),
        };
        let note = if level == toolpilot::policy::Level::Disabled {
            format!("disabled: never offered to the model; {note}")
        } else {
            note
        };
        println!(
            "{:<28} {:<26} {:<8} {:<10} {}",
            name,
            level.as_continue(),
            policy.level_source(name),
            runs_in,
            note
        );
        for rule in policy.rules_for(name) {
            println!("{:<28}   rule: {rule}", "");
        }
    }
    println!(
        "\nprotected paths (writing them needs approval, policy.protected): {}",
        policy.protected().join(" ")
    );
    if !config.mcp.servers.is_empty() {
        mcp_tools(&config, &policy).await?;
    }
    if config.agent.approve_asks {
        println!("\n--yes is set: `allowedWithPermission` calls run without asking.");
    } else {
        println!(
            "\n`allowedWithPermission` calls need approval; without --yes the model is told so and the call does not run."
        );
    }
    Ok(())
}
