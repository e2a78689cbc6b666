//! toolpilot: a local OpenAI-compatible server that runs the model's workspace tools.
//!
//! # Layout
//!
//! A request enters through [`server`] (HTTP) or the `run` command (no HTTP), becomes a
//! validated [`openai::ChatRequest`], and is handed to [`agent::Engine::run`]. The engine
//! talks to the model through [`upstream`] (an OpenAI-compatible HTTP server or the built-in
//! demo model), executes the model's built-in tool calls through [`tools::Registry`] after
//! [`policy::Policy`] has decided on them, and emits [`agent::RunEvent`]s that the caller turns
//! into SSE, a JSON response or terminal output. Paths only reach tools as
//! [`workspace::WorkspacePath`]s. Tools reach the network only through [`web`], which vets
//! every address, and every tool result passes [`redact`]. [`mock`] is the scripted upstream
//! used by tests, demos and benchmarks. See `ARCHITECTURE.md` for the invariants.

pub mod agent;
pub mod approvals;
pub mod bounded;
pub mod checkpoint;
pub mod code;
pub mod config;
pub mod edit;
pub mod error;
pub mod mock;
pub mod openai;
pub mod policy;
pub mod private_file;
pub mod prompt;
pub mod redact;
pub mod runs;
pub mod server;
pub mod terminal;
pub mod text;
pub mod tools;
pub mod upstream;
pub mod web;
pub mod workspace;

/// Installs the process-wide TLS crypto provider (ring) that reqwest uses for https
/// upstreams. Safe to call more than once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

static ORIGINAL_NOFILE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Raises the open-file soft limit to the hard limit, so a busy server can hold many
/// connections. The old soft limit is remembered: commands get it back (`original_nofile`).
pub fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    let Some(current) = lim.current else {
        return; // unlimited already
    };
    if lim.maximum.is_some_and(|max| max > current)
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            },
        )
        .is_ok()
    {
        let _ = ORIGINAL_NOFILE.set(current);
    }
}

/// The open-file soft limit from before `raise_fd_limit`, if it was raised.
pub fn original_nofile() -> Option<u64> {
    ORIGINAL_NOFILE.get().copied()
}
