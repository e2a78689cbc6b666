//! toolpilot: a local OpenAI-compatible server that runs the model's workspace tools.
//!
//! # Layout
//!
//! A request enters through [`server`] (HTTP) or the `run` command (no HTTP), becomes a
//! validated [`openai::ChatRequest`], and is handed to [`agent::Engine::start`]. The engine
//! talks to the model through [`upstream`] (an OpenAI-compatible HTTP server or the built-in
//! demo model), executes the model's built-in tool calls through [`tools::Registry`] after
//! [`policy::Policy`] has decided on them, and emits [`agent::RunEvent`]s that the caller turns
//! into SSE, a JSON response or terminal output. Paths only reach tools as
//! [`workspace::WorkspacePath`]s. Tools reach the network only through [`web`], which vets
//! every address, and every tool result passes [`redact`]. [`mock`] is the scripted upstream
//! used by tests, demos and benchmarks. See `ARCHITECTURE.md` for the layers the modules
//! form (a module uses only lower ones; `tests/suite/architecture.rs` checks it) and the
//! invariants.

pub mod agent;
pub mod approvals;
pub mod bounded;
pub mod checkpoint;
pub mod code;
pub mod config;
pub mod edit;
pub mod error;
pub mod mcp;
pub mod mock;
pub mod openai;
pub mod policy;
pub mod private_file;
pub mod process;
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
