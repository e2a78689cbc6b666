//! The second stage of a command (`toolpilot __sandbox-exec SPEC -- SHELL -c COMMAND`): the
//! process that confines itself and then becomes the shell, and the start-up probe that finds
//! out which namespaces commands can get (`toolpilot __sandbox-probe DIR`).
//!
//! In order, before the command's first instruction runs:
//!
//! 1. a session of its own (`setsid`): the command is its session and process-group leader;
//! 2. the namespaces of the spec, in one `unshare`: a user namespace that maps the same user
//!    and group (only when toolpilot lacks CAP_SYS_ADMIN), a mount namespace with private
//!    propagation, a network namespace whose only interface is a loopback that is down. If the
//!    kernel refuses, the command runs without them and the report says so;
//! 3. each protected path bound onto itself and remounted read-only, opened with
//!    `O_PATH|O_NOFOLLOW` and mounted through `/proc/self/fd/N`, so a path that is (or was
//!    swapped for) a symbolic link is never followed; such a path is skipped and reported;
//! 4. the [`Report`] written, for toolpilot;
//! 5. Landlock: reads of everything but the denied paths (`reads.rs`), writes to the writable
//!    folders, TCP only if allowed, signals and abstract Unix sockets scoped to the command's
//!    own domain (ABI 6+). Landlock also forbids mounting and unmounting from then on, so the
//!    command cannot undo step 3 even as root;
//! 6. the open-file limit, the parent-death signal (the command dies with its supervisor),
//!    then `exec`.
//!
//! Everything here runs in a freshly started, single-threaded process: that is what makes the
//! `unshare` below sound, and it is why this is a second stage rather than a `pre_exec` hook.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatVfsMountFlags, StatxFlags};
use rustix::io::Errno;
use rustix::mount::{MountFlags, MountPropagationFlags};

use super::reads;
use super::sandbox::{Namespaces, Report, Spec, abi_of};

/// The hidden subcommand of the second stage.
pub const EXEC_ARG: &str = "__sandbox-exec";
/// The hidden subcommand of the namespace probe.
pub const PROBE_ARG: &str = "__sandbox-probe";

/// Devices every command may use (read and write).
const DEVICES: [&str; 8] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/pts",
    "/dev/shm",
];

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("toolpilot sandbox: {message}");
    ExitCode::from(code)
}

/// The second stage's `main`.
pub fn run(args: &[OsString]) -> ExitCode {
    let spec = match Spec::from_args(args) {
        Ok(s) => s,
        Err(e) => return fail(125, &e),
    };
    let supervisor = rustix::process::getppid();
    // Its own session: the command is no longer in the supervisor's session or group, and
    // the supervisor can end it by its process group.
    if let Err(e) = rustix::process::setsid() {
        return fail(
            126,
            &format!("cannot start a session ({e}); the command was not run"),
        );
    }
    let mut report = Report {
        pid: std::process::id(),
        ..Report::default()
    };
    let entered = match enter(spec.unshare) {
        Ok(ns) => ns,
        Err(Entry::NotEntered(e)) => {
            report.degraded.push(format!(
                "the {} namespaces could not be created ({e})",
                spec.unshare.names()
            ));
            Namespaces::default()
        }
        Err(Entry::Broken(e)) => {
            return fail(
                126,
                &format!("cannot set up the user namespace ({e}); the command was not run"),
            );
        }
    };
    if entered.network {
        report.netns = netns_inode();
    }
    protect(&spec.readonly, entered.mount, &mut report);
    let plan = spec
        .landlock_abi
        .map(|_| reads::plan(&spec.deny_read, &spec.writable));
    if let Some(p) = &plan {
        report.not_denied = p
            .not_denied
            .iter()
            .map(|(d, why)| (d.display().to_string(), why.clone()))
            .collect();
        report.crowded = p.crowded.iter().map(|c| c.display().to_string()).collect();
    }
    if let Some(path) = &spec.report
        && let Ok(text) = serde_json::to_string(&report)
    {
        let _ = std::fs::write(path, text);
    }
    if let (Some(n), Some(plan)) = (spec.landlock_abi, &plan)
        && let Err(e) = restrict(&spec, n, plan)
    {
        return fail(
            126,
            &format!("cannot enforce Landlock ({e}); the command was not run"),
        );
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
    // The command dies with its supervisor (a parent-death signal survives `exec`; it is set
    // last because changing credentials, as `unshare` and Landlock do, may clear it).
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    if rustix::process::getppid() != supervisor {
        return fail(125, "the supervisor has gone; the command was not run");
    }
    let err = std::process::Command::new(&spec.argv[0])
        .args(&spec.argv[1..])
        .exec();
    fail(127, &format!("cannot start {}: {err}", spec.argv[0]))
}

/// Why namespaces were not entered.
enum Entry {
    /// Nothing changed: the command can run without them.
    NotEntered(Errno),
    /// The process is in a user namespace it could not finish setting up: it must not run.
    Broken(String),
}

/// `unshare` for the user, mount and network namespaces, and nothing else.
///
/// rustix deprecates its safe `unshare` because `CLONE_FILES` (and `CLONE_FS`) unshare state
/// that other threads may hold references into, which safe code cannot rule out. Only
/// `CLONE_NEWUSER`, `CLONE_NEWNS` and `CLONE_NEWNET` are ever passed here: they change which
/// namespaces the calling process belongs to and invalidate no file descriptor or memory. The
/// callers are single-threaded processes started for this purpose (the kernel refuses
/// `CLONE_NEWUSER` and `CLONE_NEWNS` in a process with threads anyway).
#[allow(deprecated)]
fn unshare(ns: Namespaces) -> Result<(), Errno> {
    use rustix::thread::UnshareFlags;
    let mut flags = UnshareFlags::empty();
    if ns.user {
        flags |= UnshareFlags::NEWUSER;
    }
    if ns.mount {
        flags |= UnshareFlags::NEWNS;
    }
    if ns.network {
        flags |= UnshareFlags::NEWNET;
    }
    rustix::thread::unshare(flags)
}

/// Enters the namespaces; in a user namespace, maps the same user and group.
fn enter(ns: Namespaces) -> Result<Namespaces, Entry> {
    if !ns.any() {
        return Ok(ns);
    }
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    unshare(ns).map_err(Entry::NotEntered)?;
    if ns.user {
        map_ids(uid, gid).map_err(Entry::Broken)?;
    }
    Ok(ns)
}

/// In a fresh user namespace: the same user and group inside as outside (nobody else is
/// mapped), and no `setgroups` (required before an unprivileged process may map a group).
fn map_ids(uid: u32, gid: u32) -> Result<(), String> {
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text).map_err(|e| format!("{file}: {e}"))
    };
    write("setgroups", "deny".to_string())?;
    write("uid_map", format!("{uid} {uid} 1\n"))?;
    write("gid_map", format!("{gid} {gid} 1\n"))
}

/// The inode of this process's network namespace (what identifies it in `/proc/*/ns/net`).
fn netns_inode() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino())
}

/// Makes the protected paths read-only (parents first); what is skipped goes in the report.
fn protect(paths: &[PathBuf], mount_ns: bool, report: &mut Report) {
    if paths.is_empty() {
        return;
    }
    let skip_all = |report: &mut Report, why: &str| {
        for p in paths {
            report
                .skipped
                .push((p.display().to_string(), why.to_string()));
        }
    };
    if !mount_ns {
        skip_all(report, "the command has no mount namespace");
        return;
    }
    // Without private propagation, the bind mounts could show up in the parent namespace.
    if let Err(e) = rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    ) {
        skip_all(
            report,
            &format!("mount propagation could not be made private ({e})"),
        );
        return;
    }
    let mut sorted: Vec<&PathBuf> = paths.iter().collect();
    sorted.sort();
    sorted.dedup();
    for p in sorted {
        match make_readonly(p) {
            Ok(()) => report.readonly.push(p.display().to_string()),
            Err(why) => report.skipped.push((p.display().to_string(), why)),
        }
    }
}

/// The identity of an opened path: type, device, inode, and the mount it is on.
struct Found {
    kind: FileType,
    dev: (u32, u32),
    ino: u64,
    mnt: u64,
}

fn found(fd: &OwnedFd) -> Result<Found, Errno> {
    let st = rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH,
        StatxFlags::TYPE | StatxFlags::INO | StatxFlags::MNT_ID,
    )?;
    Ok(Found {
        kind: FileType::from_raw_mode(st.stx_mode.into()),
        dev: (st.stx_dev_major, st.stx_dev_minor),
        ino: st.stx_ino,
        mnt: st.stx_mnt_id,
    })
}

/// Opens `path` itself: a link is opened as the link, never followed.
fn open_nofollow(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn fd_link(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Binds `path` onto itself and makes the new mount read-only. `Err` says why it was not done.
fn make_readonly(path: &Path) -> Result<(), String> {
    let fd = match open_nofollow(path) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR) => return Err("it does not exist".to_string()),
        Err(e) => return Err(format!("it cannot be opened ({e})")),
    };
    let below = found(&fd).map_err(|e| format!("it cannot be examined ({e})"))?;
    if below.kind == FileType::Symlink {
        return Err("it is a symbolic link".to_string());
    }
    // O_NOFOLLOW covers the last component only: a link on the way shows in where the
    // descriptor really is.
    if std::fs::read_link(fd_link(&fd)).ok().as_deref() != Some(path) {
        return Err("it is reached through a symbolic link".to_string());
    }
    rustix::mount::mount_bind(fd_link(&fd), fd_link(&fd))
        .map_err(|e| format!("it could not be bound ({e})"))?;
    // The descriptor still names the file under the new mount; the remount must reach the new
    // mount, so open the path again and check it is the same file, now on another mount.
    let top = open_nofollow(path).map_err(|e| format!("it changed while being protected ({e})"))?;
    let above = found(&top).map_err(|e| format!("it cannot be examined ({e})"))?;
    if above.kind == FileType::Symlink
        || above.dev != below.dev
        || above.ino != below.ino
        || above.mnt == below.mnt
        || std::fs::read_link(fd_link(&top)).ok().as_deref() != Some(path)
    {
        return Err("it changed while being protected".to_string());
    }
    // A remount must keep the flags the mount has (nosuid, nodev, …): in a user namespace the
    // kernel refuses to drop flags the parent namespace set.
    let have = rustix::fs::fstatvfs(&top)
        .map_err(|e| format!("it cannot be examined ({e})"))?
        .f_flag;
    let mut flags = MountFlags::BIND | MountFlags::RDONLY;
    for (vfs, mount) in [
        (StatVfsMountFlags::NOSUID, MountFlags::NOSUID),
        (StatVfsMountFlags::NODEV, MountFlags::NODEV),
        (StatVfsMountFlags::NOEXEC, MountFlags::NOEXEC),
        (StatVfsMountFlags::NOATIME, MountFlags::NOATIME),
        (StatVfsMountFlags::NODIRATIME, MountFlags::NODIRATIME),
        (StatVfsMountFlags::RELATIME, MountFlags::RELATIME),
        (StatVfsMountFlags::SYNCHRONOUS, MountFlags::SYNCHRONOUS),
    ] {
        if have.contains(vfs) {
            flags |= mount;
        }
    }
    rustix::mount::mount_remount(fd_link(&top), flags, "")
        .map_err(|e| format!("it could not be made read-only ({e})"))?;
    let now = rustix::fs::fstatvfs(&top)
        .map_err(|e| format!("it cannot be examined ({e})"))?
        .f_flag;
    if !now.contains(StatVfsMountFlags::RDONLY) {
        return Err("the kernel did not make it read-only".to_string());
    }
    Ok(())
}

/// Restricts the current process (and everything it starts) with Landlock.
fn restrict(spec: &Spec, n: u8, plan: &reads::Plan) -> Result<(), String> {
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
        ruleset = ruleset
            .scope(Scope::Signal | Scope::AbstractUnixSocket)
            .map_err(|e| e.to_string())?;
    }
    let read = AccessFs::from_read(abi);
    let mut created = ruleset
        .create()
        .map_err(|e| e.to_string())?
        .set_compatibility(CompatLevel::BestEffort);
    // Reads: opened without following links (a link gets no grant; its target has its own).
    for path in &plan.read {
        let Ok(fd) = open_nofollow(path) else {
            continue; // gone since it was listed
        };
        let access = match found(&fd).map(|f| f.kind) {
            Ok(FileType::Symlink) => continue,
            Ok(FileType::Directory) => read,
            _ => read & AccessFs::from_file(abi),
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| e.to_string())?;
    }
    for path in &plan.list {
        let Ok(fd) = open_nofollow(path) else {
            continue;
        };
        if !matches!(found(&fd).map(|f| f.kind), Ok(FileType::Directory)) {
            continue;
        }
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::ReadDir))
            .map_err(|e| e.to_string())?;
    }
    let status = created
        .add_rules(path_beneath_rules(DEVICES, AccessFs::from_all(abi)))
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

/// What the namespace probe found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    pub user: bool,
    pub mount: bool,
    pub network: bool,
    pub detail: String,
}

/// Runs the probe (`helper __sandbox-probe DIR`, DIR a fresh folder under `scratch`) and reads
/// its answer. Never fails: what cannot be found out is not available.
pub fn probe_from(helper: &Path, scratch: &Path) -> Probe {
    let nothing = |detail: String| Probe {
        detail,
        ..Probe::default()
    };
    let dir = scratch.join(format!("probe-{:016x}", fastrand::u64(..)));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return nothing(format!(
            "namespaces not probed: cannot create {} ({e})",
            dir.display()
        ));
    }
    let child = std::process::Command::new(helper)
        .arg(PROBE_ARG)
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    let result = match child {
        Ok(mut child) => {
            // The probe takes milliseconds; a stuck one must not hold up the start.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
            let mut out = String::new();
            if let Some(mut stdout) = child.stdout.take() {
                use std::io::Read;
                let _ = stdout.read_to_string(&mut out);
            }
            serde_json::from_str(out.trim()).unwrap_or_else(|_| {
                nothing(format!(
                    "the namespace probe ({} {PROBE_ARG}) gave no answer",
                    helper.display()
                ))
            })
        }
        Err(e) => nothing(format!(
            "the namespace probe could not start {} ({e})",
            helper.display()
        )),
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The probe's `main`: tries the namespaces the way a command would and prints a [`Probe`].
pub fn probe(args: &[OsString]) -> ExitCode {
    let Some(dir) = args.first().map(PathBuf::from) else {
        return fail(125, "the probe needs a folder");
    };
    let answer = probe_in(&dir);
    match serde_json::to_string(&answer) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(_) => ExitCode::from(1),
    }
}

fn probe_in(dir: &Path) -> Probe {
    let all = |user| Namespaces {
        user,
        mount: true,
        network: true,
    };
    // With CAP_SYS_ADMIN (root) no user namespace is needed; without it, one is. A refused
    // `unshare` changes nothing, so the next way can be tried in the same process.
    let mut tried = Vec::new();
    let mut entered = None;
    for ns in [
        all(false),
        all(true),
        Namespaces {
            user: true,
            mount: false,
            network: true,
        },
        Namespaces {
            user: true,
            mount: true,
            network: false,
        },
    ] {
        match enter(ns) {
            Ok(ns) => {
                entered = Some(ns);
                break;
            }
            Err(Entry::NotEntered(e)) => tried.push(format!("{}: {e}", ns.names())),
            Err(Entry::Broken(e)) => {
                return Probe {
                    detail: format!("a user namespace was created but could not be set up: {e}"),
                    ..Probe::default()
                };
            }
        }
    }
    let Some(ns) = entered else {
        return Probe {
            detail: format!(
                "no namespaces: the kernel refused them ({}); unprivileged user namespaces \
                 may be disabled or restricted (AppArmor)",
                tried.join("; ")
            ),
            ..Probe::default()
        };
    };
    let mut notes = Vec::new();
    let mount = ns.mount && {
        let mut report = Report::default();
        protect(&[dir.to_path_buf()], true, &mut report);
        let refused = std::fs::write(dir.join("probe"), "x")
            .is_err_and(|e| e.raw_os_error() == Some(Errno::ROFS.raw_os_error()));
        if let Some((_, why)) = report.skipped.first() {
            notes.push(format!("a read-only bind mount failed: {why}"));
        } else if !refused {
            notes.push("a read-only bind mount did not refuse writes".to_string());
        }
        report.skipped.is_empty() && refused
    };
    let network = ns.network && {
        // The loopback of a new network namespace is down: even 127.0.0.1 is unreachable.
        let sent = std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.send_to(b"x", "127.0.0.1:9"))
            .is_ok();
        if sent {
            notes.push("a new network namespace still sent a UDP datagram".to_string());
        }
        !sent
    };
    let mut detail = format!(
        "{} namespaces{}",
        Namespaces {
            user: ns.user,
            mount,
            network
        }
        .names(),
        if ns.user {
            " (in an unprivileged user namespace)"
        } else {
            ""
        }
    );
    if !notes.is_empty() {
        detail.push_str(&format!("; {}", notes.join("; ")));
    }
    // Refusals matter when they cost something (a refused privileged attempt before a user
    // namespace that has everything is simply the unprivileged case).
    let complete = mount && network;
    if !complete && !tried.is_empty() {
        detail.push_str(&format!("; refused: {}", tried.join("; ")));
    }
    Probe {
        user: ns.user,
        mount,
        network,
        detail,
    }
}
