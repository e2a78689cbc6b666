//! Running one command under the supervisor, bounded in time and output.
//!
//! stdout and stderr are read as they come and kept in arrival order, capped with the head and
//! the tail kept. A wall-clock timeout, an idle-output timeout and cancellation all end the
//! command the same way: SIGTERM to the supervisor, which terminates and reaps the whole tree
//! within a fraction of a second (SIGKILL follows if it does not). Dropping a running
//! [`Running`] does the same, so a client that goes away never leaves a process behind.
//!
//! A supervisor that dies by a signal nobody here sent was killed by the command (possible
//! only where Landlock has no signal scope) or by someone else; then what is left of the
//! command is found in `/proc` and killed ([`sweep`]), and the result says so.

use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::sandbox::{Report, Spec};

/// How to run a command.
#[derive(Debug, Clone)]
pub struct Request {
    /// The toolpilot executable that provides `__sandbox`.
    pub helper: PathBuf,
    pub spec: Spec,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    /// The command's private temporary folder (its `TMPDIR`, which marks its processes).
    pub tmp: PathBuf,
    pub timeout: Duration,
    pub idle_timeout: Duration,
    pub head_bytes: usize,
    pub tail_bytes: usize,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    TimedOut,
    Idle,
    Cancelled,
    Stopped,
    /// The supervisor died by a signal toolpilot did not send; `leftovers` processes of the
    /// command were found afterwards and killed.
    SupervisorKilled {
        signal: i32,
        leftovers: usize,
    },
}

/// Output kept within bounds: the first `head` bytes and the last `tail` bytes.
#[derive(Debug)]
pub struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    pub total: u64,
    pub last_output: Instant,
}

impl Capture {
    pub fn new(head_cap: usize, tail_cap: usize) -> Capture {
        Capture {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap,
            total: 0,
            last_output: Instant::now(),
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        self.last_output = Instant::now();
        let room = self.head_cap.saturating_sub(self.head.len());
        let (h, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(h);
        for &b in rest {
            if self.tail.len() == self.tail_cap {
                self.tail.pop_front();
            }
            self.tail.push_back(b);
        }
    }

    /// The kept output as text: ANSI escapes removed, what was cut said in the middle.
    pub fn render(&self) -> String {
        let kept = self.head.len() as u64 + self.tail.len() as u64;
        let head = clean(&self.head);
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if kept >= self.total {
            return head + &clean(&tail);
        }
        let omitted = self.total - kept;
        format!(
            "{}\n[... {} bytes of output omitted: showing the first {} and the last {} bytes. \
             Narrow the output (grep, head, tail, a quieter flag) to see the middle ...]\n{}",
            head.trim_end_matches('\n'),
            crate::text::group(omitted),
            crate::text::group(self.head.len() as u64),
            crate::text::group(self.tail.len() as u64),
            clean(&tail).trim_start_matches('\n'),
        )
    }
}

/// Removes carriage-return redraws and ANSI escapes, decodes lossily.
fn clean(bytes: &[u8]) -> String {
    // Progress bars redraw a line with \r: keep what each line ended as.
    let lines: Vec<&[u8]> = bytes
        .split(|&b| b == b'\n')
        .map(|l| {
            l.rsplit(|&b| b == b'\r')
                .find(|s| !s.is_empty())
                .unwrap_or(&[])
        })
        .collect();
    let joined = lines.join(&b'\n');
    String::from_utf8_lossy(&strip_ansi_escapes::strip(&joined)).into_owned()
}

/// A started command.
pub struct Running {
    child: Child,
    pid: u32,
    /// What identifies the command's processes if the supervisor is gone.
    marks: Marks,
    pub capture: Arc<Mutex<Capture>>,
    pub started: Instant,
    readers: Vec<tokio::task::JoinHandle<()>>,
    done: bool,
}

fn terminate(pid: u32) {
    if let Some(p) = Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, Signal::TERM);
    }
}

fn kill(pid: u32) {
    if let Some(p) = Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, Signal::KILL);
    }
}

/// What tells a command's processes apart once its supervisor is gone.
#[derive(Debug, Clone)]
pub struct Marks {
    /// The sandbox report (the command's session id and network namespace).
    report: Option<PathBuf>,
    /// `TMPDIR=…` as it appears in the environment of every process of the command.
    tmpdir: Vec<u8>,
}

impl Marks {
    fn new(req: &Request) -> Marks {
        let mut tmpdir = b"TMPDIR=".to_vec();
        tmpdir.extend_from_slice(req.tmp.as_os_str().as_encoded_bytes());
        Marks {
            report: req.spec.report.clone(),
            tmpdir,
        }
    }

    /// Whether process `pid` belongs to the command: in its session, in its own network
    /// namespace, or started with its `TMPDIR`. Zombies and other users' processes do not
    /// count.
    fn owns(&self, pid: u32, report: Option<&Report>, uid: u32) -> bool {
        use std::os::unix::fs::MetadataExt;
        let dir = format!("/proc/{pid}");
        if std::fs::metadata(&dir).ok().map(|m| m.uid()) != Some(uid) {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("{dir}/stat")) else {
            return false;
        };
        // pid (comm) state ppid pgrp session …
        let Some(fields) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        let fields: Vec<&str> = fields.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            return false;
        }
        if let Some(r) = report {
            if fields.get(3).and_then(|s| s.parse::<u32>().ok()) == Some(r.pid) {
                return true;
            }
            if let Some(ns) = r.netns
                && std::fs::metadata(format!("{dir}/ns/net")).is_ok_and(|m| m.ino() == ns)
            {
                return true;
            }
        }
        std::fs::read(format!("{dir}/environ")).is_ok_and(|env| {
            env.split(|&b| b == 0)
                .any(|var| var == self.tmpdir.as_slice())
        })
    }
}

/// Kills every remaining process of a command whose supervisor is gone; returns how many
/// there were. Repeats until a pass finds none (a process may fork while others die).
pub fn sweep(marks: &Marks) -> usize {
    let report = marks.report.as_deref().and_then(Report::read);
    let uid = rustix::process::geteuid().as_raw();
    let me = std::process::id();
    let mut killed = std::collections::BTreeSet::new();
    for _ in 0..100 {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            break;
        };
        let found: Vec<u32> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&p| p != me && marks.owns(p, report.as_ref(), uid))
            .collect();
        if found.is_empty() {
            break;
        }
        for p in found {
            kill(p);
            killed.insert(p);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    killed.len()
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.done {
            // The supervisor cleans up the whole tree on SIGTERM; if it were stuck, make sure.
            terminate(self.pid);
            let pid = self.pid;
            let marks = self.marks.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(2));
                if std::fs::metadata(format!("/proc/{pid}")).is_ok() {
                    let state =
                        std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                    if !state.contains(") Z") {
                        kill(pid);
                        std::thread::sleep(Duration::from_millis(50));
                        sweep(&marks);
                    }
                }
            });
        }
    }
}

/// Starts a command; its output is collected in the background.
pub fn start(req: &Request) -> std::io::Result<Running> {
    let mut cmd = Command::new(&req.helper);
    cmd.args(req.spec.to_args())
        .current_dir(&req.cwd)
        .env_clear()
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let pid = child.id().unwrap_or(0);
    let capture = Arc::new(Mutex::new(Capture::new(req.head_bytes, req.tail_bytes)));
    let mut readers = Vec::new();
    let out = child.stdout.take();
    let err = child.stderr.take();
    for pipe in [out.map(Pipe::Out), err.map(Pipe::Err)]
        .into_iter()
        .flatten()
    {
        let cap = Arc::clone(&capture);
        readers.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            let mut pipe = pipe;
            loop {
                let n = match &mut pipe {
                    Pipe::Out(p) => p.read(&mut buf).await,
                    Pipe::Err(p) => p.read(&mut buf).await,
                };
                match n {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if let Ok(mut c) = cap.lock() {
                            c.push(&buf[..n]);
                        }
                    }
                }
            }
        }));
    }
    Ok(Running {
        child,
        pid,
        marks: Marks::new(req),
        capture,
        started: Instant::now(),
        readers,
        done: false,
    })
}

enum Pipe {
    Out(tokio::process::ChildStdout),
    Err(tokio::process::ChildStderr),
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the sandbox's second stage reported (after the command has started).
    pub fn report(&self) -> Option<Report> {
        self.marks.report.as_deref().and_then(Report::read)
    }

    /// Whether the process has ended (without waiting).
    pub fn try_finished(&mut self) -> Option<i32> {
        match self.child.try_wait() {
            Ok(Some(s)) => {
                self.done = true;
                Some(s.code().unwrap_or(128 + 15))
            }
            _ => None,
        }
    }

    /// Kills what is left of the command after its supervisor died (off the async threads).
    async fn sweep(&self) -> usize {
        let marks = self.marks.clone();
        tokio::task::spawn_blocking(move || sweep(&marks))
            .await
            .unwrap_or(0)
    }

    /// Waits for the end, enforcing the timeouts and cancellation.
    pub async fn wait(
        &mut self,
        timeout: Duration,
        idle: Duration,
        cancel: &CancellationToken,
    ) -> Ended {
        let deadline = self.started + timeout;
        loop {
            let last = self
                .capture
                .lock()
                .map(|c| c.last_output)
                .unwrap_or_else(|_| Instant::now());
            let idle_at = last.max(self.started) + idle;
            let next = deadline.min(idle_at);
            tokio::select! {
                status = self.child.wait() => {
                    self.done = true;
                    // A supervisor never dies by a signal of its own: it was killed.
                    let killed = status.as_ref().ok().and_then(|s| s.signal());
                    let leftovers = match killed {
                        Some(_) => self.sweep().await,
                        None => 0,
                    };
                    // Let the readers drain what the tree wrote before it ended.
                    for r in self.readers.drain(..) {
                        let _ = tokio::time::timeout(Duration::from_secs(2), r).await;
                    }
                    if let Some(signal) = killed {
                        return Ended::SupervisorKilled { signal, leftovers };
                    }
                    let code = status.ok().and_then(|s| s.code()).unwrap_or(128 + 15);
                    return Ended::Exited(code);
                }
                _ = tokio::time::sleep_until(next.into()) => {
                    let now = Instant::now();
                    if now >= deadline {
                        self.stop().await;
                        return Ended::TimedOut;
                    }
                    let last = self.capture.lock().map(|c| c.last_output).unwrap_or(now);
                    if now >= last.max(self.started) + idle {
                        self.stop().await;
                        return Ended::Idle;
                    }
                }
                _ = cancel.cancelled() => {
                    self.stop().await;
                    return Ended::Cancelled;
                }
            }
        }
    }

    /// Stops the command and its whole tree: SIGTERM to the supervisor, SIGKILL after 2 s
    /// (and then whatever the supervisor could not clean up is found and killed).
    pub async fn stop(&mut self) {
        if self.done {
            return;
        }
        terminate(self.pid);
        let ended = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
        // Killed before it could clean up: by the command (no signal scope), or stuck.
        let lost = match ended {
            Ok(Ok(status)) => status.signal().is_some_and(|s| s != Signal::TERM.as_raw()),
            Ok(Err(_)) => false,
            Err(_) => {
                kill(self.pid);
                let _ = self.child.wait().await;
                true
            }
        };
        if lost {
            self.sweep().await;
        }
        self.done = true;
        for r in self.readers.drain(..) {
            let _ = tokio::time::timeout(Duration::from_millis(500), r).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_head_and_tail() {
        let mut c = Capture::new(10, 10);
        c.push(b"0123456789abcdefghijklmnopqrstuvwxyz");
        let r = c.render();
        assert!(
            r.starts_with("0123456789\n[... 16 bytes of output omitted"),
            "{r}"
        );
        assert!(r.ends_with("\nqrstuvwxyz"), "{r}");
        let mut c = Capture::new(10, 10);
        c.push(b"short");
        assert_eq!(c.render(), "short");
    }

    #[test]
    fn ansi_and_redraws_are_cleaned() {
        assert_eq!(clean(b"\x1b[31mred\x1b[0m ok\n"), "red ok\n");
        assert_eq!(clean(b"10%\r50%\r100%\ndone"), "100%\ndone");
    }
}
