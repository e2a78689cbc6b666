//! The command sandbox: Landlock detection, and the small supervisor process every command
//! runs under (`toolpilot __sandbox … -- SHELL -c COMMAND`).
//!
//! The supervisor starts a new session (so the command has no controlling terminal and cannot
//! wait on a prompt), becomes a child subreaper (so every descendant, even one that detaches,
//! stays its child), restricts itself with Landlock (reads everywhere, writes only to the
//! workspace, a private temporary folder and a cache folder; TCP connect and bind denied unless
//! network is allowed; no signals to processes outside the sandbox), then runs the shell in a
//! process group of its own. When the shell ends, or toolpilot sends SIGTERM (the client went
//! away, a timeout), it terminates the group and every remaining descendant and reaps them, so
//! no process and no zombie outlives a command. If Landlock cannot be enforced as requested,
//! the command does not run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use rustix::process::{Pid, Signal, WaitOptions};

/// What the kernel offers, detected at start-up.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SandboxStatus {
    /// Landlock can be enforced.
    pub available: bool,
    /// The highest Landlock ABI version the kernel supports (known to this build).
    pub landlock_abi: Option<u8>,
    /// TCP connect/bind can be restricted (ABI 4 and later).
    pub network_restrictable: bool,
    pub detail: String,
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
/// restricts only the calling thread, and the thread ends at once).
pub fn detect() -> SandboxStatus {
    let probe = std::thread::spawn(|| {
        let abi = ABI::V1;
        Ruleset::default()
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.create())
            .and_then(|r| r.add_rules(path_beneath_rules(["/"], AccessFs::from_all(abi))))
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
    match version {
        Some(n) if n >= 1 => {
            let n = n.min(u8::MAX as i32) as u8;
            SandboxStatus {
                available: true,
                landlock_abi: Some(n),
                network_restrictable: n >= 4,
                detail: format!("Landlock ABI {n}"),
            }
        }
        _ => SandboxStatus {
            available: false,
            landlock_abi: None,
            network_restrictable: false,
            detail:
                "Landlock is not available in this kernel (not built in, or not enabled at boot)"
                    .into(),
        },
    }
}

/// What the supervisor is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// Enforce Landlock with this ABI (`None`: run without a sandbox).
    pub landlock_abi: Option<u8>,
    pub writable: Vec<PathBuf>,
    pub network: bool,
    /// The open-file soft limit the command gets (the user's own, from before toolpilot
    /// raised its limit for serving many connections).
    pub nofile: Option<u64>,
    /// The program and its arguments (the shell, `-c`, the command).
    pub argv: Vec<String>,
}

impl Spec {
    /// The supervisor's command-line arguments (after the executable).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec!["__sandbox".to_string()];
        if let Some(abi) = self.landlock_abi {
            a.push("--landlock".into());
            a.push(abi.to_string());
        }
        for w in &self.writable {
            a.push("--write".into());
            a.push(w.to_string_lossy().into_owned());
        }
        if self.network {
            a.push("--network".into());
        }
        if let Some(n) = self.nofile {
            a.push("--nofile".into());
            a.push(n.to_string());
        }
        a.push("--".into());
        a.extend(self.argv.iter().cloned());
        a
    }

    fn from_args(args: &[String]) -> Result<Spec, String> {
        let mut spec = Spec::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--landlock" => {
                    let v = it.next().ok_or("--landlock needs an ABI version")?;
                    spec.landlock_abi = Some(v.parse().map_err(|_| "bad ABI version")?);
                }
                "--write" => spec
                    .writable
                    .push(PathBuf::from(it.next().ok_or("--write needs a path")?)),
                "--network" => spec.network = true,
                "--nofile" => {
                    let v = it.next().ok_or("--nofile needs a number")?;
                    spec.nofile = Some(v.parse().map_err(|_| "bad --nofile value")?);
                }
                "--" => {
                    spec.argv = it.cloned().collect();
                    break;
                }
                other => return Err(format!("unknown option {other}")),
            }
        }
        if spec.argv.is_empty() {
            return Err("no command after --".into());
        }
        Ok(spec)
    }
}

/// The crate's ABI for a kernel version (a newer kernel gets the newest ABI this build knows).
fn abi_of(n: u8) -> ABI {
    ABIS.iter()
        .find(|(_, k)| *k <= n)
        .map_or(ABI::V1, |(a, _)| *a)
}

/// Restricts the current process (and everything it starts).
fn restrict(spec: &Spec, n: u8) -> Result<(), String> {
    let abi = abi_of(n);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| e.to_string())?;
    if !spec.network && n >= 4 {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(|e| e.to_string())?;
    }
    if n >= 6 {
        ruleset = ruleset.scope(Scope::Signal).map_err(|e| e.to_string())?;
    }
    let devices = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
        "/dev/pts",
        "/dev/shm",
    ];
    let status = ruleset
        .create()
        .map_err(|e| e.to_string())?
        .set_compatibility(CompatLevel::BestEffort)
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
        .map_err(|e| e.to_string())?
        .add_rules(path_beneath_rules(devices, AccessFs::from_all(abi)))
        .map_err(|e| e.to_string())?
        .add_rules(path_beneath_rules(&spec.writable, AccessFs::from_all(abi)))
        .map_err(|e| e.to_string())?
        .restrict_self()
        .map_err(|e| e.to_string())?;
    match status.ruleset {
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(()),
        RulesetStatus::NotEnforced => Err("the kernel did not enforce the Landlock ruleset".into()),
    }
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

/// Kills the shell's group and every remaining descendant, and reaps them all.
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

/// The supervisor's `main`.
pub fn supervise(args: &[String]) -> ExitCode {
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
    if let Some(n) = spec.landlock_abi {
        if let Err(e) = restrict(&spec, n) {
            eprintln!("toolpilot sandbox: cannot enforce Landlock ({e}); the command was not run");
            return ExitCode::from(126);
        }
    }
    if let Some(n) = spec.nofile {
        let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let _ = rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(n),
                maximum: lim.maximum,
            },
        );
    }
    let mut cmd = std::process::Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..]);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("toolpilot sandbox: cannot start {}: {e}", spec.argv[0]);
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
            network: true,
            nofile: Some(1024),
            argv: vec!["sh".into(), "-c".into(), "echo --write x".into()],
        };
        let args = spec.to_args();
        let back = Spec::from_args(&args[1..]).unwrap();
        assert_eq!(back.landlock_abi, Some(6));
        assert_eq!(back.writable, spec.writable);
        assert!(back.network);
        assert_eq!(back.nofile, Some(1024));
        assert_eq!(back.argv, spec.argv);
        assert!(Spec::from_args(&["--bogus".into()]).is_err());
        assert!(Spec::from_args(&["--".into()]).is_err());
    }
}
