//! The command language of the policy: what `run_terminal_command` may run without asking.
//!
//! A command line is split into the simple commands it runs ([`parse`]); each part is judged
//! by what it does with the arguments it actually has ([`rules`]): wrappers (`env`, `timeout`,
//! `xargs`, …) are looked through, and the commands of the built-in allow list are modelled
//! with their dangerous options and scripts (`sed`, `awk`, `git`, `find`, `rg`, `tar`, …,
//! one file per family). Every verdict carries a [`Class`] that says truthfully what kind of
//! thing the part does; paths named in arguments are checked through a [`PathJudge`] (reading a
//! sensitive file, writing a protected path).

mod archive;
mod awk;
mod files;
mod git;
mod models;
pub mod parse;
pub mod rules;
mod scan;
mod search;
mod sed;
mod wrappers;

pub use parse::{ParseError, Part, Word, parse};
pub use rules::{Assessment, CommandPolicy, PartVerdict, UserRule, WritesSwitch};

/// Every command a line could run, as the policy sees it: each part's words and, looking
/// through its wrappers, each wrapped command; with the command lines that `sh -c`, `eval` and
/// `flock -c` run, and the substitutions bash evaluates inside array subscripts (`test -v
/// 'a[$(cmd)]'`). For comparing with what a shell runs (the differential test).
pub fn invocations(line: &str) -> Result<Vec<Vec<Word>>, ParseError> {
    let mut out = Vec::new();
    collect(line, 0, &mut out)?;
    Ok(out)
}

fn collect(line: &str, depth: usize, out: &mut Vec<Vec<Word>>) -> Result<(), ParseError> {
    let parts = parse(line)?;
    let nested = |text: &str, out: &mut Vec<Vec<Word>>| {
        if depth < 4 {
            // A script that does not parse runs nothing the policy allows anyway.
            let _ = collect(text, depth + 1, out);
        }
    };
    for p in &parts {
        let u = wrappers::unwrap(&p.words);
        out.extend(u.layers.iter().cloned());
        if let Some(script) = &u.script {
            nested(script, out);
        }
        for w in &p.words {
            // `a[$(cmd)]`: bash runs cmd when a builtin evaluates the subscript.
            if let Some(k) = w.text.find("[$(")
                && let Some(end) = w.text[k..].rfind(")]")
            {
                nested(&w.text[k + 3..k + end], out);
            }
        }
        let Some(inner) = u.inner else { continue };
        let inv = models::Inv {
            words: inner,
            open_tail: false,
        };
        if models::SHELLS.contains(&inv.name()) {
            if let Some(script) = rules::shell_script(&inv) {
                nested(&script, out);
            }
        } else if inv.name() == "eval" {
            let joined: Vec<&str> = inv.args().iter().map(|w| w.text.as_str()).collect();
            nested(&joined.join(" "), out);
        }
    }
    Ok(())
}

/// How the policy sees the paths named in a command's arguments. Commands run in the workspace
/// root; words are as written (`~/x`, `../y`, `$HOME/z`, `/abs/p`).
pub trait PathJudge {
    /// The sensitive-file pattern a path argument matches (`.env`, `~/.ssh/id_rsa`,
    /// `/home/me/.aws/credentials`), if any.
    fn sensitive(&self, word: &str) -> Option<String>;
    /// The protected-path pattern a path argument matches (`.git/config`,
    /// `.vscode/tasks.json`), if any.
    fn protected(&self, word: &str) -> Option<String>;
    /// Whether the path stays inside the workspace (commands run in the workspace root).
    fn inside(&self, word: &str) -> bool;
}

/// A judge that finds nothing sensitive or protected and takes every plain relative path as
/// inside (for callers without a workspace, and tests).
pub struct NoPaths;

impl PathJudge for NoPaths {
    fn sensitive(&self, _: &str) -> Option<String> {
        None
    }
    fn protected(&self, _: &str) -> Option<String> {
        None
    }
    fn inside(&self, word: &str) -> bool {
        plainly_relative(word)
    }
}

/// A relative path that names no parent, home or variable: `src/a.rs`, `./out`, `.`.
pub fn plainly_relative(word: &str) -> bool {
    !word.is_empty()
        && !word.starts_with('/')
        && !word.starts_with('~')
        && !word.contains('$')
        && !word.contains('`')
        && !word.split('/').any(|c| c == "..")
}

/// A verdict, from most to least permissive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    Allow,
    Ask,
    /// An ask only a person may answer: `--yes` does not approve it (reading a secret, writing
    /// a protected path). Its label is still "ask".
    AskPerson,
    Deny,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask | Verdict::AskPerson => "ask",
            Verdict::Deny => "deny",
        }
    }

    /// Whether only a person may approve it (not `--yes`).
    pub fn person_only(self) -> bool {
        self == Verdict::AskPerson
    }

    /// `allow`, `ask`, `ask-person` or `deny` (the form of the policy table).
    pub fn parse(s: &str) -> Option<Verdict> {
        match s {
            "allow" => Some(Verdict::Allow),
            "ask" => Some(Verdict::Ask),
            "ask-person" | "ask_person" => Some(Verdict::AskPerson),
            "deny" => Some(Verdict::Deny),
            _ => None,
        }
    }
}

impl serde::Serialize for Verdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.label())
    }
}

/// What kind of thing a command does: the class every verdict names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Reads, lists, searches, prints: nothing written, nothing run.
    ReadOnly,
    /// Builds, checks or tests the project (runs the project's own code and tools).
    Build,
    /// Creates or changes files (`touch`, `cp`, `tee`, `sort -o`, `> file`, archive extraction).
    Writes,
    /// Deletes files (`rm`, `find -delete`).
    Deletes,
    /// Runs another program or code given in its arguments (`sed e`, `rg --pre`, `find -exec`,
    /// interpreters, `xargs`).
    Executes,
    /// Reaches the network.
    Network,
    /// Installs or removes packages.
    Install,
    /// Changes the repository: commits, branches, tags, configuration, history.
    GitState,
    /// Reads a sensitive file (only a person may approve).
    Secrets,
    /// Writes a protected path (only a person may approve).
    Protected,
    /// Privilege escalation (`sudo`).
    Privilege,
    /// Wipes disks, the system or the home folder.
    Destructive,
    /// Changes the machine: processes, services, the clock, the host name, kernel modules.
    System,
    /// Sets variables that change which programs or libraries run (`PATH`, `LD_PRELOAD`,
    /// `GIT_*`, `PAGER`…).
    EnvVars,
    /// Outside what toolpilot's parser reads.
    Unparsed,
    /// No rule knows it (or toolpilot cannot tell what it does with these arguments).
    Unknown,
    /// Decided by a rule of the configuration (or an "always allow" answer).
    UserRule,
    /// A fork bomb.
    ForkBomb,
    /// `run_terminal_command` is disabled or denied by a bare rule.
    Disabled,
    /// Would be allowed, but commands cannot be sandboxed here (`policy.unsandboxed`).
    Unsandboxed,
}

impl Class {
    pub fn label(self) -> &'static str {
        match self {
            Class::ReadOnly => "read_only",
            Class::Build => "build",
            Class::Writes => "writes",
            Class::Deletes => "deletes",
            Class::Executes => "executes",
            Class::Network => "network",
            Class::Install => "install",
            Class::GitState => "git_state",
            Class::Secrets => "secrets",
            Class::Protected => "protected",
            Class::Privilege => "privilege",
            Class::Destructive => "destructive",
            Class::System => "system",
            Class::EnvVars => "env_vars",
            Class::Unparsed => "unparsed",
            Class::Unknown => "unknown",
            Class::UserRule => "user_rule",
            Class::ForkBomb => "fork_bomb",
            Class::Disabled => "disabled",
            Class::Unsandboxed => "unsandboxed",
        }
    }

    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.iter().copied().find(|c| c.label() == s)
    }

    pub const ALL: &'static [Class] = &[
        Class::ReadOnly,
        Class::Build,
        Class::Writes,
        Class::Deletes,
        Class::Executes,
        Class::Network,
        Class::Install,
        Class::GitState,
        Class::Secrets,
        Class::Protected,
        Class::Privilege,
        Class::Destructive,
        Class::System,
        Class::EnvVars,
        Class::Unparsed,
        Class::Unknown,
        Class::UserRule,
        Class::ForkBomb,
        Class::Disabled,
        Class::Unsandboxed,
    ];

    /// Which of two findings with the same verdict is shown: the more serious kind.
    fn rank(self) -> u8 {
        match self {
            Class::ForkBomb => 20,
            Class::Privilege => 19,
            Class::Destructive => 18,
            Class::Secrets => 17,
            Class::Protected => 16,
            Class::Executes => 15,
            Class::Network => 14,
            Class::Install => 13,
            Class::System => 12,
            Class::EnvVars => 11,
            Class::Deletes => 10,
            Class::GitState => 9,
            Class::Writes => 8,
            Class::Unparsed => 7,
            Class::Unknown => 6,
            Class::UserRule => 5,
            Class::Disabled => 4,
            Class::Unsandboxed => 3,
            Class::Build => 2,
            Class::ReadOnly => 1,
        }
    }
}
