//! Everything `run_terminal_command` needs: the command rules, the sandbox, execution,
//! background jobs, the environment commands get, and the protected paths around commands
//! (`guard`).
//!
//! Only the supervisor (`sandbox.rs`, `confine.rs`) and `exec.rs` start processes. The
//! command language the policy judges lines with lives in `policy::command`.

pub mod confine;
pub mod exec;
pub mod guard;
pub mod jobs;
pub mod reads;
pub mod sandbox;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::TerminalConfig;
use crate::text::glob_match;

/// Shared terminal state of a server: configuration, sandbox status, background jobs.
pub struct Terminal {
    pub config: TerminalConfig,
    pub sandbox: sandbox::SandboxStatus,
    pub jobs: jobs::Jobs,
    /// Environment variable names never passed to commands (secrets).
    scrub: Vec<String>,
    /// Folder for private temporary folders and the command cache.
    state: PathBuf,
    /// What commands a person did not approve may not create or change.
    pub protected: crate::policy::Protected,
}

impl Terminal {
    pub fn new(
        config: TerminalConfig,
        secret_vars: Vec<String>,
        state: PathBuf,
        protected: crate::policy::Protected,
    ) -> Terminal {
        let mut sandbox = if config.sandbox {
            let scratch = state.join("tmp");
            let _ = std::fs::create_dir_all(&scratch);
            sandbox::detect_with_namespaces(&config.helper, &scratch)
        } else {
            sandbox::SandboxStatus::off("the sandbox is turned off (terminal.sandbox = false)")
        };
        if let Some(max) = config.max_landlock_abi {
            sandbox = sandbox.cap_abi(max);
        }
        if config.no_namespaces {
            sandbox.mount_namespace = false;
            sandbox.network_namespace = false;
            sandbox.user_namespace = false;
            sandbox.namespace_detail = "namespaces are not used (a test setting)".into();
        }
        let mut scrub = config.scrub_env.clone();
        scrub.extend(secret_vars);
        Terminal {
            jobs: jobs::Jobs::new(config.max_jobs),
            config,
            sandbox,
            scrub,
            state,
            protected,
        }
    }

    /// Whether commands run sandboxed.
    pub fn sandboxed(&self) -> bool {
        self.sandbox.available
    }

    /// Whether protected paths given to [`Terminal::request`] are read-only for the command by
    /// construction (a mount namespace); if not, they are not passed to it at all, and the
    /// caller has to detect and restore changes.
    pub fn readonly_by_construction(&self) -> bool {
        self.sandbox.available && self.sandbox.mount_namespace
    }

    /// Whether a command without network gets a network namespace of its own.
    fn isolates_network(&self) -> bool {
        self.sandbox.available && !self.config.network && self.sandbox.network_namespace
    }

    /// A one-line description for results and logs: what commands can reach.
    pub fn describe(&self) -> String {
        let s = &self.sandbox;
        if !s.available {
            return format!("no sandbox: {}", s.detail);
        }
        let network = if self.config.network {
            "network allowed"
        } else if self.isolates_network() {
            "network off (no TCP, UDP or DNS)"
        } else if s.network_restrictable {
            "TCP off, but UDP and DNS are not blocked (no network namespace)"
        } else {
            "network not restricted (kernel too old)"
        };
        let signals = if s.signal_scope {
            "cannot signal toolpilot"
        } else {
            "can signal the user's processes (Landlock ABI below 6)"
        };
        let protected = if s.mount_namespace {
            "protected paths read-only"
        } else {
            "protected paths restored afterwards (no mount namespace)"
        };
        format!(
            "sandbox: {}, writes limited to the workspace, secrets unreadable, {network}, \
             {signals}, {protected}",
            s.detail
        )
    }

    fn is_secret(&self, name: &str) -> bool {
        name.starts_with("TOOLPILOT_") || self.scrub.iter().any(|pattern| glob_match(pattern, name))
    }

    /// The environment a command gets: the server's, minus secrets, plus settings that keep
    /// tools from waiting on prompts or pagers and from colouring their output.
    pub fn environment(&self, tmp: &Path) -> Vec<(String, String)> {
        let mut env: BTreeMap<String, String> = std::env::vars()
            .filter(|(k, _)| !self.is_secret(k))
            .collect();
        for (k, v) in [
            ("CI", "1"),
            ("GIT_TERMINAL_PROMPT", "0"),
            ("GIT_ASKPASS", "/bin/false"),
            ("SSH_ASKPASS", "/bin/false"),
            ("DEBIAN_FRONTEND", "noninteractive"),
            ("PAGER", "cat"),
            ("GIT_PAGER", "cat"),
            ("MANPAGER", "cat"),
            ("SYSTEMD_PAGER", ""),
            ("NO_COLOR", "1"),
            ("CLICOLOR", "0"),
            ("TERM", "dumb"),
            ("PIP_NO_INPUT", "1"),
            ("NPM_CONFIG_YES", "true"),
        ] {
            env.insert(k.into(), v.into());
        }
        env.remove("FORCE_COLOR");
        env.remove("CLICOLOR_FORCE");
        env.insert("TMPDIR".into(), tmp.to_string_lossy().into_owned());
        env.insert(
            "XDG_CACHE_HOME".into(),
            self.cache_dir().to_string_lossy().into_owned(),
        );
        env.into_iter().collect()
    }

    fn cache_dir(&self) -> PathBuf {
        self.state.join("cache")
    }

    /// Where the protected-path guard keeps what it takes away after one command (created only
    /// when something is put there; in the state folder, which commands cannot reach).
    pub fn quarantine_dir(&self, run_id: &str) -> PathBuf {
        self.state
            .join("quarantine")
            .join(format!("{run_id}-{:08x}", fastrand::u32(..)))
    }

    /// The paths a command's sandbox report says were read-only, relative to the workspace.
    pub fn bound_paths(report: Option<&sandbox::Report>, workspace: &Path) -> Vec<PathBuf> {
        let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
        report
            .map(|r| {
                r.readonly
                    .iter()
                    .filter_map(|p| Path::new(p).strip_prefix(&root).ok().map(Path::to_path_buf))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The sandbox report of a command whose temporary folder is `tmp` (read before the folder
    /// is removed).
    pub fn read_report(tmp: &Path) -> Option<sandbox::Report> {
        sandbox::Report::read(&report_path(tmp))
    }

    /// A fresh private temporary folder for one command. Remove it with
    /// [`Terminal::remove_temp_dir`] when the command is over.
    pub fn temp_dir(&self) -> std::io::Result<PathBuf> {
        let dir = self
            .state
            .join("tmp")
            .join(format!("cmd-{:016x}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir)?;
        std::fs::create_dir_all(self.cache_dir())?;
        Ok(dir)
    }

    /// Removes a command's temporary folder and its sandbox report.
    pub fn remove_temp_dir(tmp: &Path) {
        let _ = std::fs::remove_dir_all(tmp);
        let _ = std::fs::remove_file(report_path(tmp));
    }

    /// What the read restrictions cannot do here, for the log and `/healthz`: denied paths
    /// that stay readable, and crowded folders on the way to a denied path.
    pub fn read_warnings(&self, workspace: &Path) -> Vec<String> {
        if !self.sandboxed() {
            return Vec::new();
        }
        let mut writable = vec![workspace.to_path_buf(), self.cache_dir()];
        writable.extend(self.config.writable.iter().cloned());
        let plan = reads::plan(&self.config.deny_read, &writable);
        let mut out: Vec<String> = plan
            .not_denied
            .iter()
            .map(|(p, why)| format!("{} stays readable: {why}", p.display()))
            .collect();
        for c in &plan.crowded {
            out.push(format!(
                "{} has more than {} entries: commands can read only the way through it",
                c.display(),
                reads::MAX_ENTRIES
            ));
        }
        out
    }

    /// The workspace's `terminal.readonly` paths that exist, absolute.
    pub fn configured_readonly(&self, workspace: &Path) -> Vec<PathBuf> {
        self.config
            .readonly
            .iter()
            .map(|r| workspace.join(r))
            .filter(|p| p.symlink_metadata().is_ok())
            .collect()
    }

    /// The supervisor request for `command` in `workspace`. `readonly` are absolute paths of
    /// existing files and folders inside the workspace that the command may not change
    /// (protected paths): they are made read-only in the command's mount namespace when
    /// [`Terminal::readonly_by_construction`], and ignored otherwise.
    pub fn request(
        &self,
        command: &str,
        workspace: &Path,
        tmp: &Path,
        readonly: &[PathBuf],
    ) -> exec::Request {
        let mut writable = vec![workspace.to_path_buf(), tmp.to_path_buf(), self.cache_dir()];
        writable.extend(self.config.writable.iter().cloned());
        let readonly = if self.readonly_by_construction() {
            canonical_inside(workspace, readonly)
        } else {
            Vec::new()
        };
        let unshare = sandbox::Namespaces {
            mount: !readonly.is_empty(),
            network: self.isolates_network(),
            user: false,
        };
        let unshare = sandbox::Namespaces {
            user: unshare.any() && self.sandbox.user_namespace,
            ..unshare
        };
        exec::Request {
            helper: self.config.helper.clone(),
            spec: sandbox::Spec {
                landlock_abi: self.sandbox.landlock_abi,
                writable,
                readonly,
                deny_read: self.config.deny_read.clone(),
                network: self.config.network,
                unshare,
                nofile: crate::process::original_nofile(),
                report: Some(report_path(tmp)),
                argv: vec![self.config.shell.clone(), "-c".into(), command.into()],
            },
            cwd: workspace.to_path_buf(),
            env: self.environment(tmp),
            tmp: tmp.to_path_buf(),
            timeout: self.config.timeout,
            idle_timeout: self.config.idle_timeout,
            head_bytes: self.config.head_bytes,
            tail_bytes: self.config.tail_bytes,
        }
    }
}

/// Where the second stage reports on a command: beside its temporary folder, where the
/// command can neither write (Landlock) nor read (the state folder is denied).
fn report_path(tmp: &Path) -> PathBuf {
    tmp.with_extension("report")
}

/// `paths` (inside `workspace`) rewritten under the workspace's canonical path, which is how
/// the second stage checks that no link was on the way. Paths outside are dropped.
fn canonical_inside(workspace: &Path, paths: &[PathBuf]) -> Vec<PathBuf> {
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    paths
        .iter()
        .filter_map(|p| {
            let rel = p
                .strip_prefix(workspace)
                .or_else(|_| p.strip_prefix(&root))
                .ok()?;
            Some(root.join(rel))
        })
        .collect()
}

/// What a command's sandbox report says the model should know, as result lines (none when all
/// went as asked).
pub fn report_notes(report: &sandbox::Report, workspace: &Path) -> Vec<String> {
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let rel = |p: &str| {
        Path::new(p)
            .strip_prefix(&root)
            .map(|r| r.display().to_string())
            .unwrap_or_else(|_| p.to_string())
    };
    let mut notes = Vec::new();
    for d in &report.degraded {
        notes.push(format!("[Sandbox: {d}; the command ran without them.]"));
    }
    if !report.skipped.is_empty() {
        let list: Vec<String> = report
            .skipped
            .iter()
            .map(|(p, why)| format!("{} ({why})", rel(p)))
            .collect();
        notes.push(format!(
            "[Sandbox: not made read-only for this command: {}.]",
            list.join(", ")
        ));
    }
    notes
}

/// Seconds, for messages.
pub fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.0} s")
    }
}
