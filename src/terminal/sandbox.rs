//! The command sandbox: what the kernel offers (detected at start-up), what one command gets
//! ([`Spec`]), and the supervisor every command runs under
//! (`toolpilot __sandbox … -- SHELL -c COMMAND`).
//!
//! A command is two processes of this executable before it is the shell:
//!
//! - the **supervisor** (this file) starts a new session, becomes a child subreaper (so every
//!   descendant, even one that detaches with `setsid` or double-forks, stays its child) and
//!   stays *outside* the sandbox. It starts the second stage and, when the command ends or
//!   toolpilot sends SIGTERM (the client went away, a timeout), terminates and reaps every
//!   remaining descendant, so no process and no zombie outlives a command.
//! - the **command** (`confine.rs`, `toolpilot __sandbox-exec …`) enters a session of its own,
//!   the namespaces the spec asks for (mount: protected paths read-only; network: no packets
//!   leave, UDP and DNS included; user: to do both without privileges), restricts itself with
//!   Landlock (reads everywhere but the denied paths, writes only to the writable folders, no
//!   TCP unless allowed, no signals or abstract sockets outside its own domain) and becomes
//!   the shell with `exec`.
//!
//! With Landlock's signal scope (ABI 6+) the command cannot signal the supervisor or
//! toolpilot. Without it, a command can kill its supervisor; toolpilot notices a supervisor
//! that died by a signal and kills what is left of the command (`exec.rs`), from the
//! [`Report`] the second stage leaves. If Landlock cannot be enforced as requested, the
//! command does not run; a namespace that cannot be created is done without, and said so.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use landlock::{ABI, Access, AccessFs, LandlockStatus, Ruleset, RulesetAttr, RulesetCreatedAttr};
use rustix::process::{Pid, Signal, WaitOptions};

/// The hidden subcommand of the supervisor.
pub const SUPERVISOR_ARG: &str = "__sandbox";

/// What the kernel offers, detected at start-up.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SandboxStatus {
    /// Landlock can be enforced.
    pub available: bool,
    /// The highest Landlock ABI version the kernel supports (known to this build).
    pub landlock_abi: Option<u8>,
    /// TCP connect/bind can be restricted (ABI 4 and later).
    pub network_restrictable: bool,
    /// Commands cannot signal processes outside their own sandbox, so neither their
    /// supervisor nor toolpilot (ABI 6 and later; abstract Unix sockets are scoped too).
    pub signal_scope: bool,
    /// Protected paths can be made read-only in a private mount namespace.
    pub mount_namespace: bool,
    /// A command without network can get a network namespace of its own (only a loopback
    /// that is down): no TCP, no UDP, no DNS.
    pub network_namespace: bool,
    /// The namespaces need a user namespace (toolpilot lacks CAP_SYS_ADMIN).
    pub user_namespace: bool,
    pub detail: String,
    /// What the namespace probe found, or why there are none.
    pub namespace_detail: String,
}

impl SandboxStatus {
    /// No sandbox, for the reason given.
    pub fn off(detail: &str) -> SandboxStatus {
        SandboxStatus {
            available: false,
            landlock_abi: None,
            network_restrictable: false,
            signal_scope: false,
            mount_namespace: false,
            network_namespace: false,
            user_namespace: false,
            detail: detail.to_string(),
            namespace_detail: "no namespaces: the sandbox is off".to_string(),
        }
    }

    /// Uses at most Landlock ABI `max` (to see how an older kernel behaves).
    pub fn cap_abi(mut self, max: u8) -> SandboxStatus {
        if let Some(n) = self.landlock_abi {
            let n = n.min(max);
            self.landlock_abi = Some(n);
            self.network_restrictable = n >= 4;
            self.signal_scope = n >= 6;
            self.detail = format!("Landlock ABI {n} (capped)");
        }
        self
    }
}

const ABIS: &[(ABI, u8)] = &[
    (ABI::V9, 9),
    (ABI::V8, 8),
    (ABI::V7, 7),
    (ABI::V6, 6),
    (ABI::V5, 5),
    (ABI::V4, 4),
    (ABI::V3, 3),
    (ABI::V2, 2),
    (ABI::V1, 1),
];

/// Asks the kernel which Landlock ABI it runs, by restricting a throwaway thread (Landlock
/// restricts only the calling thread, and the thread ends at once). Namespaces are not probed
/// (see [`detect_with_namespaces`]).
pub fn detect() -> SandboxStatus {
    let probe = std::thread::spawn(|| {
        let abi = ABI::V1;
        Ruleset::default()
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.create())
            .and_then(|r| r.add_rules(landlock::path_beneath_rules(["/"], AccessFs::from_all(abi))))
            .and_then(|r| r.restrict_self())
            .map(|status| status.landlock)
    })
    .join();
    let version = match probe {
        Ok(Ok(LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        })) => Some(kernel_abi.unwrap_or(effective_abi as i32)),
        _ => None,
    };
    let mut status = SandboxStatus::off(
        "Landlock is not available in this kernel (not built in, or not enabled at boot)",
    );
    status.namespace_detail = "namespaces not probed".to_string();
    if let Some(n) = version.filter(|n| *n >= 1) {
        let n = n.min(u8::MAX as i32) as u8;
        status.available = true;
        status.landlock_abi = Some(n);
        status.network_restrictable = n >= 4;
        status.signal_scope = n >= 6;
        status.detail = format!("Landlock ABI {n}");
    }
    status
}

/// [`detect`], plus which namespaces commands can get: a probe process (`helper
/// __sandbox-probe`) tries them the way a command would, in `scratch` (a folder it may create
/// a test folder in). Namespaces change the process that makes them, and a user namespace
/// cannot be made by a process with threads, hence the separate process.
pub fn detect_with_namespaces(helper: &Path, scratch: &Path) -> SandboxStatus {
    let mut status = detect();
    let found = super::confine::probe_from(helper, scratch);
    status.mount_namespace = found.mount;
    status.network_namespace = found.network;
    status.user_namespace = found.user;
    status.namespace_detail = found.detail;
    status
}

/// Which namespaces a command is to enter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Namespaces {
    /// A user namespace mapping the same user and group (to make the others unprivileged).
    pub user: bool,
    /// A private mount namespace (for read-only protected paths).
    pub mount: bool,
    /// A network namespace with only a loopback that is down.
    pub network: bool,
}

impl Namespaces {
    pub fn any(self) -> bool {
        self.user || self.mount || self.network
    }

    fn to_arg(self) -> String {
        let mut v = Vec::new();
        for (on, name) in [
            (self.user, "user"),
            (self.mount, "mount"),
            (self.network, "network"),
        ] {
            if on {
                v.push(name);
            }
        }
        v.join(",")
    }

    fn from_arg(s: &str) -> Result<Namespaces, String> {
        let mut ns = Namespaces::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            match part {
                "user" => ns.user = true,
                "mount" => ns.mount = true,
                "network" => ns.network = true,
                other => return Err(format!("unknown namespace {other}")),
            }
        }
        Ok(ns)
    }

    /// The names, for messages (`mount and network`).
    pub fn names(self) -> String {
        let mut v = Vec::new();
        for (on, name) in [
            (self.user, "user"),
            (self.mount, "mount"),
            (self.network, "network"),
        ] {
            if on {
                v.push(name);
            }
        }
        match v.as_slice() {
            [] => "no".to_string(),
            [one] => one.to_string(),
            [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
        }
    }
}

/// What the supervisor is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// Enforce Landlock with this ABI (`None`: run without a sandbox).
    pub landlock_abi: Option<u8>,
    pub writable: Vec<PathBuf>,
    /// Existing files and folders (absolute, canonical) made read-only in the command's mount
    /// namespace; one that is missing or is a link when the command starts is skipped and
    /// reported. Needs `unshare.mount`.
    pub readonly: Vec<PathBuf>,
    /// Paths the command may not read (Landlock; see `reads.rs`).
    pub deny_read: Vec<PathBuf>,
    pub network: bool,
    /// The namespaces to enter.
    pub unshare: Namespaces,
    /// The open-file soft limit the command gets (the user's own, from before toolpilot
    /// raised its limit for serving many connections).
    pub nofile: Option<u64>,
    /// Where the second stage writes its [`Report`] (a place the command cannot write).
    pub report: Option<PathBuf>,
    /// The program and its arguments (the shell, `-c`, the command).
    pub argv: Vec<String>,
}

impl Spec {
    /// The supervisor's command-line arguments (after the executable).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![SUPERVISOR_ARG.into()];
        let mut flag = |name: &str, value: &OsStr| {
            a.push(name.into());
            a.push(value.to_os_string());
        };
        if let Some(abi) = self.landlock_abi {
            flag("--landlock", OsStr::new(&abi.to_string()));
        }
        for w in &self.writable {
            flag("--write", w.as_os_str());
        }
        for r in &self.readonly {
            flag("--readonly", r.as_os_str());
        }
        for d in &self.deny_read {
            flag("--deny-read", d.as_os_str());
        }
        if self.unshare.any() {
            flag("--unshare", OsStr::new(&self.unshare.to_arg()));
        }
        if let Some(n) = self.nofile {
            flag("--nofile", OsStr::new(&n.to_string()));
        }
        if let Some(r) = &self.report {
            flag("--report", r.as_os_str());
        }
        if self.network {
            a.push("--network".into());
        }
        a.push("--".into());
        a.extend(self.argv.iter().map(OsString::from));
        a
    }

    /// Parses what [`Spec::to_args`] wrote (without the subcommand).
    pub fn from_args(args: &[OsString]) -> Result<Spec, String> {
        let mut spec = Spec::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |what: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{} needs {what}", a.to_string_lossy()))
            };
            let text = |v: OsString| v.to_string_lossy().into_owned();
            match a.to_str() {
                Some("--landlock") => {
                    let v = text(value("an ABI version")?);
                    spec.landlock_abi = Some(v.parse().map_err(|_| "bad ABI version")?);
                }
                Some("--write") => spec.writable.push(value("a path")?.into()),
                Some("--readonly") => spec.readonly.push(value("a path")?.into()),
                Some("--deny-read") => spec.deny_read.push(value("a path")?.into()),
                Some("--unshare") => {
                    spec.unshare = Namespaces::from_arg(&text(value("namespaces")?))?;
                }
                Some("--nofile") => {
                    let v = text(value("a number")?);
                    spec.nofile = Some(v.parse().map_err(|_| "bad --nofile value")?);
                }
                Some("--report") => spec.report = Some(value("a path")?.into()),
                Some("--network") => spec.network = true,
                Some("--") => {
                    spec.argv = it.map(|s| s.to_string_lossy().into_owned()).collect();
                    break;
                }
                _ => return Err(format!("unknown option {}", a.to_string_lossy())),
            }
        }
        if spec.argv.is_empty() {
            return Err("no command after --".into());
        }
        Ok(spec)
    }
}

/// What the second stage did, written (as JSON) before it becomes the command, to the file
/// named by `--report`; toolpilot reads it to tell the model and to clean up after a killed
/// supervisor.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// The command's process id, which is also its session id.
    pub pid: u32,
    /// The inode of the command's own network namespace, if it has one.
    pub netns: Option<u64>,
    /// Protected paths made read-only.
    pub readonly: Vec<String>,
    /// Protected paths left writable, and why (missing, a link, …).
    pub skipped: Vec<(String, String)>,
    /// Denied paths that stay readable, and why.
    pub not_denied: Vec<(String, String)>,
    /// Crowded folders on the way to a denied path: only the way through is readable.
    pub crowded: Vec<String>,
    /// Namespaces the command runs without although they were asked for, and why.
    pub degraded: Vec<String>,
}

impl Report {
    pub fn read(path: &Path) -> Option<Report> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// The crate's ABI for a kernel version (a newer kernel gets the newest ABI this build knows).
pub(super) fn abi_of(n: u8) -> ABI {
    ABIS.iter()
        .find(|(_, k)| *k <= n)
        .map_or(ABI::V1, |(a, _)| *a)
}

/// Parent pid of a process, from /proc.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The children of the current process (orphans land here: we are a subreaper).
fn children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| parent_of(p) == Some(me))
        .collect()
}

fn signal_pid(pid: u32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

fn signal_group(pgid: u32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

/// Reaps every exited child; returns the exit code of `main` if it was among them.
fn reap(main: u32, main_status: &mut Option<i32>) {
    while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
        if pid.as_raw_nonzero().get() as u32 == main {
            *main_status = Some(if let Some(code) = status.exit_status() {
                code
            } else if let Some(sig) = status.terminating_signal() {
                128 + sig
            } else {
                1
            });
        }
    }
}

/// Kills the command's session (its process group: the command is its session leader) and
/// every remaining descendant, and reaps them all.
fn clean_up(main: u32, main_status: &mut Option<i32>, grace: Duration) {
    signal_group(main, Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        reap(main, main_status);
        if children().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Whatever is left (including processes that left the group): kill, repeat until none.
    for _ in 0..200 {
        signal_group(main, Signal::KILL);
        let kids = children();
        if kids.is_empty() {
            reap(main, main_status);
            return;
        }
        for k in kids {
            signal_group(k, Signal::KILL);
            signal_pid(k, Signal::KILL);
        }
        std::thread::sleep(Duration::from_millis(5));
        reap(main, main_status);
    }
}

/// Starts the second stage: this same executable (through `/proc/self/exe`, which still works
/// if the file was replaced by an upgrade meanwhile) with the same arguments.
fn start_command(args: &[OsString]) -> std::io::Result<std::process::Child> {
    let stage = |exe: &Path| {
        std::process::Command::new(exe)
            .arg(super::confine::EXEC_ARG)
            .args(args)
            .spawn()
    };
    match stage(Path::new("/proc/self/exe")) {
        Ok(c) => Ok(c),
        Err(first) => match std::env::current_exe() {
            Ok(exe) => stage(&exe),
            Err(_) => Err(first),
        },
    }
}

/// The supervisor's `main`.
pub fn supervise(args: &[OsString]) -> ExitCode {
    let spec = match Spec::from_args(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("toolpilot sandbox: {e}");
            return ExitCode::from(125);
        }
    };
    // No controlling terminal: nothing can wait on a terminal prompt.
    let _ = rustix::process::setsid();
    // Every orphaned descendant becomes our child, so none escapes clean-up.
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&stop));
    }
    // If toolpilot dies, clean up as if asked to stop.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::TERM));
    let child = match start_command(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "toolpilot sandbox: cannot start {} under the sandbox: {e}",
                spec.argv[0]
            );
            return ExitCode::from(127);
        }
    };
    let main = child.id();
    // The std handle is not used to wait: `reap` collects it with everything else.
    drop(child);
    let mut status: Option<i32> = None;
    loop {
        reap(main, &mut status);
        if status.is_some() {
            clean_up(main, &mut status, Duration::from_millis(200));
            break;
        }
        if stop.load(Ordering::Relaxed) {
            clean_up(main, &mut status, Duration::from_millis(300));
            return ExitCode::from(143);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    ExitCode::from(status.unwrap_or(1).clamp(0, 255) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_round_trips_through_arguments() {
        let spec = Spec {
            landlock_abi: Some(6),
            writable: vec!["/w".into(), "/t".into()],
            readonly: vec!["/w/.git".into()],
            deny_read: vec!["/home/me/.ssh".into(), "/state".into()],
            network: true,
            unshare: Namespaces {
                user: true,
                mount: true,
                network: false,
            },
            nofile: Some(1024),
            report: Some("/state/tmp/cmd-1.report".into()),
            argv: vec!["sh".into(), "-c".into(), "echo --write x".into()],
        };
        let args = spec.to_args();
        let back = Spec::from_args(&args[1..]).unwrap();
        assert_eq!(back.landlock_abi, Some(6));
        assert_eq!(back.writable, spec.writable);
        assert_eq!(back.readonly, spec.readonly);
        assert_eq!(back.deny_read, spec.deny_read);
        assert_eq!(back.unshare, spec.unshare);
        assert!(back.network);
        assert_eq!(back.nofile, Some(1024));
        assert_eq!(back.report, spec.report);
        assert_eq!(back.argv, spec.argv);
        assert!(Spec::from_args(&["--bogus".into()]).is_err());
        assert!(Spec::from_args(&["--".into()]).is_err());
        assert!(Spec::from_args(&["--unshare".into(), "pid".into()]).is_err());
    }

    #[test]
    fn paths_that_are_not_utf8_survive_the_arguments() {
        use std::os::unix::ffi::OsStrExt;
        let odd = PathBuf::from(OsStr::from_bytes(b"/w/\xff.git"));
        let spec = Spec {
            readonly: vec![odd.clone()],
            argv: vec!["true".into()],
            ..Spec::default()
        };
        let back = Spec::from_args(&spec.to_args()[1..]).unwrap();
        assert_eq!(back.readonly, [odd]);
    }

    #[test]
    fn namespace_names_read_well() {
        let ns = |user, mount, network| Namespaces {
            user,
            mount,
            network,
        };
        assert_eq!(ns(false, false, false).names(), "no");
        assert_eq!(ns(false, true, false).names(), "mount");
        assert_eq!(ns(true, true, true).names(), "user, mount and network");
    }
}
