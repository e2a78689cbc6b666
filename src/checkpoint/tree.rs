//! Whole-tree snapshots for commands: a shadow git repository in the state directory.
//!
//! A command can change any file, so before and after it the workspace is recorded as a git
//! tree in a repository of toolpilot's own (`<state>/workspaces/<id>/shadow.git`, with its own
//! index): `git add -A` re-hashes only files whose stat data changed, so repeated snapshots of
//! a large tree are cheap, and the workspace's `.gitignore` files are honoured (ignored files
//! are not snapshotted). The workspace's own `.git` is never read or written. git runs with an
//! empty environment and no system or global configuration, so no filter, hook or fsmonitor
//! can run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// One path that differs between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    /// `(mode, blob id)` before; `None` if the file did not exist.
    pub before: Option<(u32, String)>,
    /// `(mode, blob id)` after; `None` if the file was deleted.
    pub after: Option<(u32, String)>,
}

/// Most git prints here (a tree diff of half a million files); more is refused.
const MAX_GIT_OUTPUT: u64 = 64 << 20;

/// Why a blob was not read.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("it is {} bytes, more than the {} kept for undo", crate::text::group(*size), crate::text::group(*cap))]
    TooLarge { size: u64, cap: u64 },
    #[error("{0}")]
    Git(String),
}

/// The shadow repository of one workspace.
#[derive(Debug, Clone)]
pub struct Shadow {
    git_dir: PathBuf,
    work_tree: PathBuf,
    /// The longest one git call may take; past it git is killed.
    timeout: Duration,
    /// Cancelled when the run that asks for snapshots ends: git is killed then too.
    cancel: Option<CancellationToken>,
}

impl Shadow {
    pub fn new(store_dir: &Path, work_tree: &Path, timeout: Duration) -> Shadow {
        Shadow {
            git_dir: store_dir.join("shadow.git"),
            work_tree: work_tree.to_path_buf(),
            timeout,
            cancel: None,
        }
    }

    /// The same repository, for a run: its git calls stop when `cancel` is cancelled.
    pub fn for_run(&self, cancel: CancellationToken) -> Shadow {
        Shadow {
            cancel: Some(cancel),
            ..self.clone()
        }
    }

    fn git(&self) -> Command {
        let mut c = Command::new("git");
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.work_tree)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "toolpilot")
            .env("GIT_AUTHOR_EMAIL", "toolpilot@localhost")
            .env("GIT_COMMITTER_NAME", "toolpilot")
            .env("GIT_COMMITTER_EMAIL", "toolpilot@localhost")
            .current_dir(&self.work_tree)
            .args([
                "-c",
                "core.fsmonitor=false",
                "-c",
                "core.autocrlf=false",
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.quotepath=false",
            ]);
        c
    }

    fn run(&self, args: &[&str]) -> Result<Vec<u8>, String> {
        self.run_capped(args, MAX_GIT_OUTPUT)
    }

    /// Runs git and returns its output, refusing more than `cap` bytes of it (the workspace
    /// decides how much `diff-tree` or `cat-file` print): past the cap git is stopped. So it
    /// is past the timeout, or when the run is cancelled.
    fn run_capped(&self, args: &[&str], cap: u64) -> Result<Vec<u8>, String> {
        use std::process::Stdio;
        let what = args.first().unwrap_or(&"");
        if self.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            return Err(format!("git {what} was not run: the run was cancelled"));
        }
        let mut child = self
            .git()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run git: {e}"))?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err("cannot run git: its output is not connected".into());
        };
        let pid = child.id();
        let stopped = AtomicU8::new(RUNNING);
        let (out, err) = std::thread::scope(|s| {
            // The watchdog: git is killed at the deadline or when the run is cancelled. It
            // only signals before git is reaped (`done` is sent first), so the pid is git's.
            let (done, finished) = mpsc::channel::<()>();
            let stopped = &stopped;
            s.spawn(move || watch(pid, finished, self.timeout, self.cancel.as_ref(), stopped));
            // Both pipes at once, or git could block on a full one while we read the other.
            let err = s.spawn(move || crate::bounded::read_to_end(stderr, 64 * 1024));
            let out = crate::bounded::read_to_end(stdout, cap);
            if out.is_err() {
                let _ = child.kill();
            }
            let err = err.join().ok().and_then(Result::ok).unwrap_or_default();
            drop(done);
            (out, err)
        });
        let status = child.wait().map_err(|e| format!("git {what}: {e}"))?;
        match stopped.load(Ordering::Acquire) {
            TIMED_OUT => {
                return Err(format!(
                    "git {what} did not finish within {} s (terminal.snapshot_timeout_secs) and \
                     was stopped",
                    self.timeout.as_secs_f64()
                ));
            }
            CANCELLED => return Err(format!("git {what} was stopped: the run was cancelled")),
            _ => {}
        }
        let out = match out {
            Ok(out) => out,
            Err(crate::bounded::CappedError::TooLarge { .. }) => {
                return Err(format!(
                    "git {what} printed more than {} bytes (too many changes to record)",
                    crate::text::group(cap)
                ));
            }
            Err(e) => return Err(format!("reading the output of git {what} failed: {e}")),
        };
        if !status.success() {
            return Err(format!(
                "git {what} failed: {}",
                String::from_utf8_lossy(&err).trim()
            ));
        }
        Ok(out)
    }

    fn ensure(&self) -> Result<(), String> {
        if self.git_dir.join("HEAD").exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.git_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.git_dir.display()))?;
        self.run(&["init", "--quiet"])?;
        // Keep the shadow repository small and inert.
        for (k, v) in [
            ("gc.auto", "0"),
            ("core.fileMode", "true"),
            ("core.symlinks", "true"),
        ] {
            self.run(&["config", k, v])?;
        }
        Ok(())
    }

    /// Records the current workspace (minus ignored files) as a tree; returns its id.
    pub fn snapshot(&self) -> Result<String, String> {
        self.ensure()?;
        self.run(&["add", "--all"])?;
        let tree = self.run(&["write-tree"])?;
        Ok(String::from_utf8_lossy(&tree).trim().to_string())
    }

    /// The files that differ between two snapshots.
    pub fn changes(&self, a: &str, b: &str) -> Result<Vec<Change>, String> {
        if a == b {
            return Ok(Vec::new());
        }
        let out = self.run(&["diff-tree", "-r", "-z", "--no-renames", "--raw", a, b])?;
        // Records: ":<mode a> <mode b> <sha a> <sha b> <status>\0<path>\0"
        let mut changes = Vec::new();
        let mut it = out.split(|&c| c == 0).filter(|s| !s.is_empty());
        while let (Some(meta), Some(path)) = (it.next(), it.next()) {
            let meta = String::from_utf8_lossy(meta);
            let f: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
            if f.len() < 5 {
                continue;
            }
            let mode = |m: &str| u32::from_str_radix(m, 8).unwrap_or(0);
            let side = |m: &str, sha: &str| (mode(m) != 0).then(|| (mode(m), sha.to_string()));
            changes.push(Change {
                path: String::from_utf8_lossy(path).into_owned(),
                before: side(f[0], f[2]),
                after: side(f[1], f[3]),
            });
        }
        Ok(changes)
    }

    /// The content of a blob, if it is at most `cap` bytes (its size is asked first).
    pub fn blob(&self, id: &str, cap: u64) -> Result<Vec<u8>, BlobError> {
        let size = self.run(&["cat-file", "-s", id]).map_err(BlobError::Git)?;
        let size: u64 = String::from_utf8_lossy(&size)
            .trim()
            .parse()
            .map_err(|_| BlobError::Git(format!("git cat-file -s {id} gave no size")))?;
        if size > cap {
            return Err(BlobError::TooLarge { size, cap });
        }
        self.run_capped(&["cat-file", "blob", id], cap)
            .map_err(BlobError::Git)
    }
}

const RUNNING: u8 = 0;
const TIMED_OUT: u8 = 1;
const CANCELLED: u8 = 2;

/// Kills git (`pid`) when `timeout` passes or `cancel` fires before `finished` is closed;
/// says which in `stopped`.
fn watch(
    pid: u32,
    finished: mpsc::Receiver<()>,
    timeout: Duration,
    cancel: Option<&CancellationToken>,
    stopped: &AtomicU8,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let now = Instant::now();
        // Without a token to watch, one wait to the deadline; with one, a look every 50 ms.
        let step = match cancel {
            Some(_) => Duration::from_millis(50),
            None => deadline.saturating_duration_since(now),
        };
        match finished.recv_timeout(step.min(deadline.saturating_duration_since(now))) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let why = if Instant::now() >= deadline {
            TIMED_OUT
        } else if cancel.is_some_and(|c| c.is_cancelled()) {
            CANCELLED
        } else {
            continue;
        };
        stopped.store(why, Ordering::Release);
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_see_creations_edits_and_deletions_but_not_ignored_files() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/a.rs"), "a\n").unwrap();
        std::fs::write(ws.join("gone.txt"), "bye\n").unwrap();
        std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
        let shadow = Shadow::new(&tmp.path().join("state"), &ws, Duration::from_secs(60));
        let before = shadow.snapshot().unwrap();
        std::fs::write(ws.join("src/a.rs"), "A\n").unwrap();
        std::fs::remove_file(ws.join("gone.txt")).unwrap();
        std::fs::write(ws.join("new.txt"), "hi\n").unwrap();
        std::fs::create_dir_all(ws.join("target")).unwrap();
        std::fs::write(ws.join("target/big.o"), "ignored").unwrap();
        let after = shadow.snapshot().unwrap();
        let mut ch = shadow.changes(&before, &after).unwrap();
        ch.sort_by(|a, b| a.path.cmp(&b.path));
        let paths: Vec<&str> = ch.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["gone.txt", "new.txt", "src/a.rs"]);
        assert!(ch[0].after.is_none() && ch[1].before.is_none());
        assert_eq!(
            shadow
                .blob(&ch[0].before.as_ref().unwrap().1, 1024)
                .unwrap(),
            b"bye\n"
        );
        assert_eq!(
            ch[2].after.as_ref().unwrap().1,
            crate::checkpoint::sha1(b"A\n")
        );
        // The workspace has no .git of its own after all this.
        assert!(!ws.join(".git").exists());
    }

    /// The watchdog kills what outlives its deadline, or its run, and says which.
    #[test]
    fn a_git_call_past_its_deadline_or_its_run_is_killed() {
        use std::os::unix::process::ExitStatusExt;
        for (timeout, cancel, expected) in [
            (Duration::from_millis(100), None, TIMED_OUT),
            (
                Duration::from_secs(600),
                Some(CancellationToken::new()),
                CANCELLED,
            ),
        ] {
            let mut child = Command::new("sleep").arg("600").spawn().unwrap();
            if let Some(c) = &cancel {
                c.cancel();
            }
            let (_done, finished) = mpsc::channel::<()>();
            let stopped = AtomicU8::new(RUNNING);
            watch(child.id(), finished, timeout, cancel.as_ref(), &stopped);
            assert_eq!(child.wait().unwrap().signal(), Some(9));
            assert_eq!(stopped.load(Ordering::Acquire), expected);
        }
        // A run already cancelled starts no git at all.
        let tmp = tempfile::tempdir().unwrap();
        let token = CancellationToken::new();
        token.cancel();
        let shadow = Shadow::new(tmp.path(), tmp.path(), Duration::from_secs(60)).for_run(token);
        let e = shadow.snapshot().unwrap_err();
        assert!(e.contains("the run was cancelled"), "{e}");
    }
}
