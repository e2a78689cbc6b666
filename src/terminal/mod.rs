//! Everything `run_terminal_command` needs: the command rules, the sandbox, execution,
//! background jobs, the environment commands get, and the protection of git hooks and config.
//!
//! Only the supervisor (`sandbox.rs`) and `exec.rs` start processes. The command language
//! the policy judges lines with lives in `policy::command`.

pub mod exec;
pub mod jobs;
pub mod sandbox;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::TerminalConfig;

/// Shared terminal state of a server: configuration, sandbox status, background jobs.
pub struct Terminal {
    pub config: TerminalConfig,
    pub sandbox: sandbox::SandboxStatus,
    pub jobs: jobs::Jobs,
    /// Environment variable names never passed to commands (secrets).
    scrub: Vec<String>,
    /// Folder for private temporary folders and the command cache.
    state: PathBuf,
}

impl Terminal {
    pub fn new(config: TerminalConfig, secret_vars: Vec<String>, state: PathBuf) -> Terminal {
        let sandbox = if config.sandbox {
            sandbox::detect()
        } else {
            sandbox::SandboxStatus {
                available: false,
                landlock_abi: None,
                network_restrictable: false,
                detail: "the sandbox is turned off (terminal.sandbox = false)".into(),
            }
        };
        let mut scrub = config.scrub_env.clone();
        scrub.extend(secret_vars);
        Terminal {
            jobs: jobs::Jobs::new(config.max_jobs),
            config,
            sandbox,
            scrub,
            state,
        }
    }

    /// Whether commands run sandboxed.
    pub fn sandboxed(&self) -> bool {
        self.sandbox.available
    }

    /// A one-line description for results and logs.
    pub fn describe(&self) -> String {
        if self.sandbox.available {
            format!(
                "sandbox: {}, writes limited to the workspace, network {}",
                self.sandbox.detail,
                if self.config.network {
                    "allowed"
                } else if self.sandbox.network_restrictable {
                    "off"
                } else {
                    "not restricted (kernel too old)"
                }
            )
        } else {
            format!("no sandbox: {}", self.sandbox.detail)
        }
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

    /// A fresh private temporary folder for one command.
    pub fn temp_dir(&self) -> std::io::Result<PathBuf> {
        let dir = self
            .state
            .join("tmp")
            .join(format!("cmd-{:016x}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir)?;
        std::fs::create_dir_all(self.cache_dir())?;
        Ok(dir)
    }

    /// The supervisor request for `command` in `workspace`.
    pub fn request(&self, command: &str, workspace: &Path, tmp: &Path) -> exec::Request {
        let mut writable = vec![workspace.to_path_buf(), tmp.to_path_buf(), self.cache_dir()];
        writable.extend(self.config.writable.iter().cloned());
        exec::Request {
            helper: self.config.helper.clone(),
            spec: sandbox::Spec {
                landlock_abi: self.sandbox.landlock_abi,
                writable,
                network: self.config.network,
                nofile: crate::original_nofile(),
                argv: vec![self.config.shell.clone(), "-c".into(), command.into()],
            },
            cwd: workspace.to_path_buf(),
            env: self.environment(tmp),
            timeout: self.config.timeout,
            idle_timeout: self.config.idle_timeout,
            head_bytes: self.config.head_bytes,
            tail_bytes: self.config.tail_bytes,
        }
    }
}

/// `*` matches any run of characters; everything else literally (for variable names).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let mut rest = name;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(p) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            match rest.find(p) {
                Some(k) => rest = &rest[k + p.len()..],
                None => return false,
            }
        }
    }
    true
}

/// The contents of `.git/hooks` and `.git/config`, to put back if a command changes them.
/// Landlock cannot exclude a subfolder from a writable tree, so these stay read-only by being
/// restored after every command (and the change is reported).
#[derive(Debug, Default)]
pub struct GitGuard {
    files: BTreeMap<PathBuf, Option<Vec<u8>>>,
    hooks: PathBuf,
}

const MAX_GUARDED: usize = 256;

impl GitGuard {
    pub fn capture(workspace: &Path) -> GitGuard {
        let git = workspace.join(".git");
        let hooks = git.join("hooks");
        let mut files = BTreeMap::new();
        files.insert(git.join("config"), std::fs::read(git.join("config")).ok());
        if let Ok(dir) = std::fs::read_dir(&hooks) {
            for e in dir.flatten().take(MAX_GUARDED) {
                let p = e.path();
                if p.is_file() {
                    files.insert(p.clone(), std::fs::read(&p).ok());
                }
            }
        }
        GitGuard { files, hooks }
    }

    /// Puts back anything a command changed; returns what it had changed.
    pub fn restore(&self, workspace: &Path) -> Vec<String> {
        let mut changed = Vec::new();
        let rel = |p: &Path| {
            p.strip_prefix(workspace)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned()
        };
        for (path, before) in &self.files {
            let now = std::fs::read(path).ok();
            if &now != before {
                changed.push(rel(path));
                match before {
                    Some(bytes) => {
                        let _ = std::fs::write(path, bytes);
                    }
                    None => {
                        let _ = std::fs::remove_file(path);
                    }
                }
            }
        }
        if let Ok(dir) = std::fs::read_dir(&self.hooks) {
            for e in dir.flatten().take(MAX_GUARDED) {
                let p = e.path();
                if !self.files.contains_key(&p) {
                    changed.push(rel(&p));
                    if p.is_dir() {
                        let _ = std::fs::remove_dir_all(&p);
                    } else {
                        let _ = std::fs::remove_file(&p);
                    }
                }
            }
        }
        changed
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_globs() {
        assert!(glob_match("*_API_KEY", "OPENAI_API_KEY"));
        assert!(glob_match("*PASSWORD*", "DB_PASSWORD_X"));
        assert!(glob_match("AWS_SESSION_TOKEN", "AWS_SESSION_TOKEN"));
        assert!(!glob_match("*_TOKEN", "TOKENS"));
        assert!(!glob_match("*_API_KEY", "PATH"));
    }

    #[test]
    fn git_guard_restores_hooks_and_config() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(ws.join(".git/hooks/pre-commit.sample"), "sample").unwrap();
        let g = GitGuard::capture(ws);
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = /tmp\n").unwrap();
        std::fs::write(ws.join(".git/hooks/pre-commit"), "evil").unwrap();
        let changed = g.restore(ws);
        assert_eq!(changed, [".git/config", ".git/hooks/pre-commit"]);
        assert_eq!(
            std::fs::read_to_string(ws.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert!(!ws.join(".git/hooks/pre-commit").exists());
        assert!(g.restore(ws).is_empty());
    }
}
