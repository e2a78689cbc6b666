//! What a tool call acts on, as the policy sees it: the policy's input.
//!
//! Tools build them in `prepare`, with paths already resolved to [`WorkspacePath`]s, and
//! `Policy::decide` judges them.

use crate::workspace::WorkspacePath;

/// What a tool call acts on, as the policy sees it.
#[derive(Debug, Clone)]
pub enum Target {
    /// A file or directory in the workspace, and what the tool does with it.
    Path { path: WorkspacePath, access: Access },
    /// A search pattern (grep query, glob).
    Pattern(String),
    /// A command line for `run_terminal_command`, and whether it would run sandboxed.
    Command { line: String, sandboxed: bool },
    /// A web address (`fetch_url_content`): the whole URL and its host, lower-case.
    Url { url: String, host: String },
}

/// What a tool does with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Names only (ls, view_subdirectory).
    List,
    /// Reads the content.
    Read,
    /// Creates the file without reading anything.
    Write,
    /// Reads and rewrites the content.
    Edit,
}

impl Access {
    pub fn reads(self) -> bool {
        matches!(self, Access::Read | Access::Edit)
    }

    pub fn writes(self) -> bool {
        matches!(self, Access::Write | Access::Edit)
    }
}
