//! Protected paths around a command: what it may not create or change, found before it runs,
//! checked after it ends.
//!
//! Before a command, [`Guard::capture`] scans the workspace for protected entries (every
//! path `policy.protected` matches, at any depth and in ignored folders too: a nested `.git`,
//! `.vscode/tasks.json`, `.envrc`, …) and keeps the content of the small ones. Commands a person
//! did not approve get the existing ones as read-only mounts where the kernel allows it (see
//! `sandbox`); after the command, [`Guard::finish`] compares, puts back what changed, and
//! removes protected entries the command created. Inside a git directory only its control
//! files are held (config, hooks, info, `commondir`, `gitdir`, every file named `config`):
//! objects, refs and the index are the repository's data, and the bulk folders are not even
//! scanned.
//!
//! Everything here runs outside the sandbox, with the server's rights, on a tree the command
//! could have rigged. So it never follows a symbolic link: the scan reads directories through
//! handles opened with `O_NOFOLLOW`, and every change resolves its parent with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` and acts on the last name with `*at`
//! calls that do not follow it. A link found where a protected file or folder was is removed,
//! never written through.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fd::OwnedFd;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::policy::Protected;
use crate::workspace::nofollow::{Kind, kind_of, open_dir_at, open_parent, read_at, remove_at};

/// The largest protected file whose content is kept (and so can be put back).
const MAX_SAVED_FILE: u64 = 1 << 20;
/// The most content kept for one command.
const MAX_SAVED_TOTAL: usize = 32 << 20;
/// The most directory entries one scan looks at.
const MAX_VISITED: usize = 2_000_000;
/// Folders of a git directory that hold its data, not its control files: not scanned.
const GIT_DATA: &[&str] = &["objects", "logs", "refs", "lfs", "rr-cache", "packed-refs"];
/// A name under a folder that [`Protected`] is asked about, to tell whether the folder itself
/// is a protected container (`.vscode`, `.github/workflows`).
const PROBE: &str = ".toolpilot-probe";

/// What identifies a version of an entry: a write changes its ctime, which no program can
/// set back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mode: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

#[derive(Debug, Clone)]
struct Entry {
    kind: Kind,
    stamp: Stamp,
    /// Must stay as it was (false for what git itself writes inside a git directory).
    held: bool,
    /// The content of a held file, when small enough to keep.
    content: Option<Vec<u8>>,
    /// The target of a link.
    target: Option<Vec<u8>>,
}

/// The protected entries of a workspace at one moment.
#[derive(Debug, Default)]
struct Scan {
    entries: BTreeMap<PathBuf, Entry>,
    /// Why the scan did not see everything, if it did not.
    incomplete: Option<String>,
}

/// What a command did to protected paths, and what was done about it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Created by the command and removed.
    pub removed: Vec<String>,
    /// Changed or deleted by the command and put back.
    pub restored: Vec<String>,
    /// Changed by the command and not put back, with why.
    pub kept: Vec<String>,
    /// Why the check did not cover everything.
    pub incomplete: Option<String>,
    /// Where what was taken away or replaced is kept, if anything was.
    pub quarantine: Option<PathBuf>,
}

impl Report {
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty()
            && self.restored.is_empty()
            && self.kept.is_empty()
            && self.incomplete.is_none()
    }

    /// The note for the model, after the command's output.
    pub fn note(&self) -> String {
        let mut out = String::new();
        let list = |v: &[String]| {
            let shown: Vec<&str> = v.iter().take(20).map(String::as_str).collect();
            let more = v.len().saturating_sub(20);
            if more > 0 {
                format!("{} and {more} more", shown.join(", "))
            } else {
                shown.join(", ")
            }
        };
        if !self.removed.is_empty() || !self.restored.is_empty() {
            let mut did = Vec::new();
            if !self.removed.is_empty() {
                did.push(format!(
                    "removed {} (created by the command)",
                    list(&self.removed)
                ));
            }
            if !self.restored.is_empty() {
                did.push(format!(
                    "restored {} (changed by the command)",
                    list(&self.restored)
                ));
            }
            out.push_str(&format!(
                "\n[Protected paths: toolpilot {}. Commands that a person did not approve may not \
                 create or change protected paths (git control files, hooks, editor and agent \
                 settings: policy.protected), because what they hold runs later outside any \
                 sandbox. If the change is needed, tell the user what to change and why.{}]",
                did.join(" and "),
                self.quarantine
                    .as_ref()
                    .map(|q| format!(
                        " What was taken away or replaced is kept in {} (in case a person made \
                         it meanwhile).",
                        q.display()
                    ))
                    .unwrap_or_default()
            ));
        }
        if !self.kept.is_empty() {
            out.push_str(&format!(
                "\n[Protected paths changed by the command that toolpilot could not put back: {}. \
                 Tell the user.]",
                list(&self.kept)
            ));
        }
        if let Some(why) = &self.incomplete {
            out.push_str(&format!(
                "\n[toolpilot could not check every protected path around this command: {why}]"
            ));
        }
        out
    }
}

/// A prior state of a protected file a person-approved command changed, for the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Workspace-relative path.
    pub path: String,
    /// The content and mode before, `None` if the command created it. A file too large to
    /// keep is not listed.
    pub before: Option<(Vec<u8>, u32)>,
}

/// The protected entries of a workspace before a command.
pub struct Guard {
    root_fd: OwnedFd,
    root: PathBuf,
    before: Scan,
}

fn stamp_of(st: &rfs::Stat) -> Stamp {
    Stamp {
        ino: st.st_ino,
        size: st.st_size as u64,
        mode: st.st_mode,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
    }
}

/// Whether a path inside a git directory is one of its control files (the rest is data git
/// writes as it works). `in_git` is the part below the `.git` folder.
fn is_control(in_git: &[String]) -> bool {
    let Some(name) = in_git.last() else {
        return true; // the `.git` folder or file itself
    };
    matches!(
        name.as_str(),
        "config" | "config.worktree" | "commondir" | "gitdir"
    ) || in_git[..in_git.len() - 1]
        .iter()
        .any(|c| c == "hooks" || c == "info")
        || matches!(in_git[0].as_str(), "hooks" | "info") && in_git.len() == 1
}

struct Walker<'a> {
    protected: &'a Protected,
    scan: Scan,
    visited: usize,
    saved: usize,
}

impl Walker<'_> {
    /// Scans the folder `dir`, at `rel` (whose folded form is `folded`; both are pushed and
    /// popped as the walk goes, so an entry costs no allocation unless it is protected).
    /// `git_at`: how many components of `folded` lead to the nearest `.git` folder, if inside.
    fn dir(
        &mut self,
        dir: OwnedFd,
        rel: &mut PathBuf,
        folded: &mut PathBuf,
        git_at: Option<usize>,
        interesting: bool,
    ) {
        // The stream owns the handle (`read_from` would open the folder a second time).
        let mut entries = match rfs::Dir::new(dir) {
            Ok(d) => d,
            Err(e) => {
                self.scan.incomplete.get_or_insert_with(|| {
                    format!("cannot read the folder {}: {e}", rel.display())
                });
                return;
            }
        };
        let depth = folded.components().count();
        while let Some(next) = entries.read() {
            let Ok(dir) = entries.fd() else {
                break;
            };
            let Ok(entry) = next else {
                self.scan.incomplete.get_or_insert_with(|| {
                    format!("cannot read the folder {} to the end", rel.display())
                });
                break;
            };
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            self.visited += 1;
            if self.visited > MAX_VISITED {
                self.scan.incomplete.get_or_insert_with(|| {
                    format!("the workspace has more than {MAX_VISITED} entries")
                });
                return;
            }
            let kind = match entry.file_type() {
                rfs::FileType::Unknown => match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => kind_of(st.st_mode),
                    Err(_) => continue, // gone meanwhile
                },
                t => kind_of(t.as_raw_mode()),
            };
            let fname = self.protected.fold_component(&name.to_string_lossy());
            let child_git = if fname == ".git" {
                Some(depth + 1)
            } else {
                git_at
            };
            let interesting = interesting || self.protected.is_trigger(&fname);
            folded.push(&fname);
            rel.push(name);
            let mut protected = self.protected.is_protected_folded(folded, interesting);
            if !protected && interesting && kind == Kind::Dir {
                folded.push(PROBE);
                protected = self.protected.is_protected_folded(folded, true);
                folded.pop();
            }
            // The folded names below the nearest `.git` folder, when inside one.
            let in_git = |folded: &Path| -> Option<Vec<String>> {
                child_git.map(|at| {
                    folded
                        .components()
                        .skip(at)
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect()
                })
            };
            if protected {
                self.record(dir, name, rel, kind, in_git(folded));
            }
            let descend = kind == Kind::Dir
                && !in_git(folded).is_some_and(|g| {
                    g.len() == 1 && GIT_DATA.contains(&g[0].as_str())
                        || g.len() >= 3
                            && g[g.len() - 3] == "modules"
                            && GIT_DATA.contains(&g[g.len() - 1].as_str())
                });
            if descend {
                // (The repository's data folders are skipped: nothing protected lives there.)
                match open_dir_at(dir, name) {
                    Ok(sub) => self.dir(sub, rel, folded, child_git, interesting),
                    Err(e)
                        if [Errno::NOENT, Errno::LOOP, Errno::NOTDIR]
                            .iter()
                            .any(|n| e.raw_os_error() == Some(n.raw_os_error())) => {}
                    Err(e) => {
                        self.scan.incomplete.get_or_insert_with(|| {
                            format!("cannot open the folder {}: {e}", rel.display())
                        });
                    }
                }
            }
            folded.pop();
            rel.pop();
        }
    }

    /// Records a protected entry: its version, and the content of a small held file.
    fn record(
        &mut self,
        dir: rustix::fd::BorrowedFd<'_>,
        name: &OsStr,
        rel: &Path,
        kind: Kind,
        in_git: Option<Vec<String>>,
    ) {
        let Ok(st) = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            return; // gone meanwhile
        };
        let kind = if kind_of(st.st_mode) == kind {
            kind
        } else {
            kind_of(st.st_mode)
        };
        let held = match &in_git {
            Some(g) => is_control(g),
            None => true,
        };
        let content = if held && kind == Kind::File {
            let size = st.st_size as u64;
            if size <= MAX_SAVED_FILE && self.saved + size as usize <= MAX_SAVED_TOTAL {
                let c = read_at(dir, name, MAX_SAVED_FILE).ok();
                if let Some(c) = &c {
                    self.saved += c.len();
                }
                c
            } else {
                None
            }
        } else {
            None
        };
        let target = (kind == Kind::Link)
            .then(|| rfs::readlinkat(dir, name, Vec::new()).ok())
            .flatten()
            .map(|c| c.into_bytes());
        self.scan.entries.insert(
            rel.to_path_buf(),
            Entry {
                kind,
                stamp: stamp_of(&st),
                held,
                content,
                target,
            },
        );
    }
}

fn scan(root_fd: &OwnedFd, protected: &Protected) -> Scan {
    let mut w = Walker {
        protected,
        scan: Scan::default(),
        visited: 0,
        saved: 0,
    };
    // A new open of the folder, not a duplicate of the handle: a duplicate shares the read
    // position, and a second scan would start at the end of the listing.
    match open_dir_at(root_fd, std::ffi::OsStr::new(".")) {
        Ok(fd) => w.dir(fd, &mut PathBuf::new(), &mut PathBuf::new(), None, false),
        Err(e) => {
            w.scan.incomplete = Some(format!("cannot read the workspace folder: {e}"));
        }
    }
    w.scan
}

/// Creates the missing folders of `rel` (not `rel` itself), following no link.
fn make_parents(root_fd: &OwnedFd, rel: &Path) -> std::io::Result<()> {
    let Some(parent) = rel.parent() else {
        return Ok(());
    };
    let mut cur = PathBuf::new();
    for c in parent.components() {
        let name = c.as_os_str();
        let dir = open_parent(root_fd, &cur.join(name))?;
        match rfs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        cur.push(name);
    }
    Ok(())
}

/// The folder where entries taken out of the workspace are kept. It is in the state folder,
/// which commands can neither read nor write, so plain paths are used there.
struct Stash<'a> {
    dir: &'a Path,
    used: bool,
}

/// The most bytes copied into the quarantine when an entry cannot simply be moved there (the
/// state folder on another file system).
const MAX_STASH_COPY: u64 = 64 << 20;

impl<'a> Stash<'a> {
    fn new(dir: &'a Path) -> Stash<'a> {
        Stash { dir, used: false }
    }

    fn used(&self) -> bool {
        self.used
    }

    /// Moves the entry at `rel` (beneath `root`, through no link) into the quarantine under
    /// the same relative path; where a move cannot cross file systems, copies what it can and
    /// removes the entry. An error says why the entry was left in place.
    fn take(&mut self, root: &OwnedFd, rel: &Path) -> Result<(), String> {
        let name = rel.file_name().unwrap_or_default();
        let parent = open_parent(root, rel)
            .map_err(|e| format!("cannot open its folder without following a link: {e}"))?;
        let dest = self.dir.join(rel);
        let dest_parent = dest.parent().unwrap_or(self.dir);
        std::fs::create_dir_all(dest_parent)
            .map_err(|e| format!("cannot create {}: {e}", dest_parent.display()))?;
        // A name taken by an earlier entry of the same command gets a suffix.
        let mut dest_name = name.to_os_string();
        let mut n = 1;
        while dest_parent.join(&dest_name).symlink_metadata().is_ok() {
            n += 1;
            dest_name = format!("{}.{n}", name.to_string_lossy()).into();
        }
        let dest_dir = rfs::open(
            dest_parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("cannot open {}: {e}", dest_parent.display()))?;
        match rfs::renameat(&parent, name, &dest_dir, dest_name.as_os_str()) {
            Ok(()) => {
                self.used = true;
                Ok(())
            }
            Err(Errno::XDEV) => {
                let mut budget = MAX_STASH_COPY;
                copy_out(&parent, name, &dest_dir, &dest_name, &mut budget);
                self.used = true;
                remove_at(&parent, name).map_err(|e| format!("cannot remove it: {e}"))
            }
            Err(e) => Err(format!("cannot move it aside: {e}")),
        }
    }
}

/// Copies the entry `name` of `from` into `to` as `as_name`, following no link, within
/// `budget` bytes (what does not fit is left out).
fn copy_out(
    from: &OwnedFd,
    name: &std::ffi::OsStr,
    to: &OwnedFd,
    as_name: &std::ffi::OsStr,
    budget: &mut u64,
) {
    let Ok(st) = rfs::statat(from, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return;
    };
    match kind_of(st.st_mode) {
        Kind::File => {
            let Ok(bytes) = read_at(from, name, *budget) else {
                return;
            };
            *budget -= bytes.len() as u64;
            if let Ok(fd) = rfs::openat(
                to,
                as_name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                let _ = std::io::Write::write_all(&mut std::fs::File::from(fd), &bytes);
            }
        }
        Kind::Link => {
            if let Ok(target) = rfs::readlinkat(from, name, Vec::new()) {
                let _ = rfs::symlinkat(target.as_c_str(), to, as_name);
            }
        }
        Kind::Dir => {
            let (Ok(src), Ok(())) = (
                open_dir_at(from, name),
                rfs::mkdirat(to, as_name, Mode::from_raw_mode(0o700)).map_err(|_| ()),
            ) else {
                return;
            };
            let Ok(dst) = open_dir_at(to, as_name) else {
                return;
            };
            if let Ok(entries) = crate::workspace::nofollow::list_fd(&src) {
                for (n, _) in entries {
                    copy_out(&src, &n, &dst, &n, budget);
                }
            }
        }
        Kind::Other => {}
    }
}

impl Guard {
    /// Scans the workspace at `root` for protected entries.
    pub fn capture(root: &Path, protected: &Protected) -> std::io::Result<Guard> {
        let root_fd = rfs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let before = scan(&root_fd, protected);
        Ok(Guard {
            root_fd,
            root: root.to_path_buf(),
            before,
        })
    }

    /// The existing protected files and folders (the outermost ones), as absolute paths: what
    /// a command a person did not approve gets read-only where the kernel can do that.
    pub fn readonly_paths(&self) -> Vec<PathBuf> {
        let mut outer: Vec<&Path> = Vec::new();
        for (rel, e) in &self.before.entries {
            if !matches!(e.kind, Kind::File | Kind::Dir) {
                continue;
            }
            if outer.last().is_some_and(|last| rel.starts_with(last)) {
                continue;
            }
            outer.push(rel);
        }
        outer.iter().map(|rel| self.root.join(rel)).collect()
    }

    /// How many protected entries the scan found (for the log).
    pub fn len(&self) -> usize {
        self.before.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.before.entries.is_empty()
    }

    /// After a command a person did not approve: puts back every held entry it changed or
    /// deleted, and takes away the protected entries it created. Nothing is destroyed: a
    /// changed version and a created entry are moved into `quarantine` (made when first
    /// needed), since a person may have made them meanwhile. `bound` (workspace-relative) are
    /// the paths the command had read-only: a change there cannot be the command's, so it is
    /// left alone.
    pub fn finish(&self, protected: &Protected, bound: &[PathBuf], quarantine: &Path) -> Report {
        let after = scan(&self.root_fd, protected);
        let mut report = Report {
            incomplete: self
                .before
                .incomplete
                .clone()
                .or_else(|| after.incomplete.clone()),
            ..Report::default()
        };
        let held_by_kernel = |rel: &Path| bound.iter().any(|b| rel.starts_with(b));
        let mut stash = Stash::new(quarantine);
        for (rel, b) in &self.before.entries {
            if !b.held || held_by_kernel(rel) {
                continue;
            }
            let a = after.entries.get(rel);
            if a.is_some_and(|a| a.kind == b.kind && same(a, b)) {
                continue;
            }
            // Before writing anything, look at the entry itself again: the scan may have
            // missed it (a folder it could not read), and nothing is put back unless it really
            // changed.
            if self.unchanged(rel, b) {
                continue;
            }
            let shown = rel.display().to_string();
            // A changed file is kept aside (a folder that is still a folder stays: its entries
            // are looked at one by one).
            let keep_aside = a.is_some_and(|a| !(a.kind == Kind::Dir && b.kind == Kind::Dir));
            if keep_aside && let Err(why) = stash.take(&self.root_fd, rel) {
                report.kept.push(format!("{shown} ({why})"));
                continue;
            }
            match self.put_back(rel, b) {
                Ok(()) => report.restored.push(shown),
                Err(why) => report.kept.push(format!("{shown} ({why})")),
            }
        }
        let mut removed: Vec<&PathBuf> = Vec::new();
        for (rel, a) in &after.entries {
            if self.before.entries.contains_key(rel) || !a.held || held_by_kernel(rel) {
                continue;
            }
            if removed.iter().any(|r| rel.starts_with(r)) {
                continue;
            }
            let shown = rel.display().to_string();
            match stash.take(&self.root_fd, rel) {
                Ok(()) => {
                    removed.push(rel);
                    report.removed.push(shown);
                }
                Err(why) => report.kept.push(format!("{shown} ({why})")),
            }
        }
        report.quarantine = stash.used().then(|| quarantine.to_path_buf());
        report
    }

    /// After a command a person approved: what it changed among the held entries, with their
    /// prior content, for the run's checkpoint (nothing is put back).
    pub fn changes(&self, protected: &Protected) -> Vec<Change> {
        let after = scan(&self.root_fd, protected);
        let mut out = Vec::new();
        for (rel, b) in &self.before.entries {
            if !b.held || b.kind != Kind::File {
                continue;
            }
            let changed = after
                .entries
                .get(rel)
                .is_none_or(|a| a.kind != b.kind || !same(a, b));
            if let (true, Some(content)) = (changed, &b.content) {
                out.push(Change {
                    path: rel.display().to_string(),
                    before: Some((content.clone(), b.stamp.mode & 0o7777)),
                });
            }
        }
        for (rel, a) in &after.entries {
            if a.held && a.kind == Kind::File && !self.before.entries.contains_key(rel) {
                out.push(Change {
                    path: rel.display().to_string(),
                    before: None,
                });
            }
        }
        out
    }

    /// Whether a held entry is still as it was, looked at directly (no link followed).
    fn unchanged(&self, rel: &Path, b: &Entry) -> bool {
        let Ok(dir) = open_parent(&self.root_fd, rel) else {
            return false;
        };
        let name = rel.file_name().unwrap_or_default();
        let Ok(st) = rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            return false;
        };
        let kind = kind_of(st.st_mode);
        if kind != b.kind {
            return false;
        }
        let now = Entry {
            kind,
            stamp: stamp_of(&st),
            held: true,
            content: (kind == Kind::File && b.content.is_some())
                .then(|| read_at(&dir, name, MAX_SAVED_FILE).ok())
                .flatten(),
            target: (kind == Kind::Link)
                .then(|| rfs::readlinkat(&dir, name, Vec::new()).ok())
                .flatten()
                .map(|c| c.into_bytes()),
        };
        same(&now, b)
    }

    /// Puts one held entry back as it was.
    fn put_back(&self, rel: &Path, b: &Entry) -> Result<(), String> {
        let name = rel.file_name().unwrap_or_default();
        make_parents(&self.root_fd, rel)
            .map_err(|e| format!("cannot recreate its folder without following a link: {e}"))?;
        let dir = open_parent(&self.root_fd, rel).map_err(|e| {
            let code = e.raw_os_error();
            if code == Some(Errno::LOOP.raw_os_error()) || code == Some(Errno::XDEV.raw_os_error())
            {
                "a folder on its way is now a symbolic link, which toolpilot does not follow"
                    .to_string()
            } else {
                format!("cannot open its folder: {e}")
            }
        })?;
        let now = rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).ok();
        let now_kind = now.as_ref().map(|st| kind_of(st.st_mode));
        match b.kind {
            Kind::Dir => {
                if now_kind != Some(Kind::Dir) {
                    remove_at(&dir, name)
                        .map_err(|e| format!("cannot remove what replaced it: {e}"))?;
                    rfs::mkdirat(&dir, name, Mode::from_raw_mode(b.stamp.mode & 0o7777))
                        .map_err(|e| format!("cannot recreate it: {e}"))?;
                }
                Ok(())
            }
            Kind::File => {
                let Some(content) = &b.content else {
                    return Err(format!(
                        "it is larger than {} MiB, so toolpilot kept no copy",
                        MAX_SAVED_FILE >> 20
                    ));
                };
                let tmp = format!(
                    ".{}.toolpilot-{:08x}.tmp",
                    name.to_string_lossy(),
                    fastrand::u32(..)
                );
                let fd = rfs::openat(
                    &dir,
                    tmp.as_str(),
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(b.stamp.mode & 0o7777),
                )
                .map_err(|e| format!("cannot write it: {e}"))?;
                let written = (|| -> std::io::Result<()> {
                    let mut off = 0;
                    while off < content.len() {
                        off += rustix::io::write(&fd, &content[off..])?;
                    }
                    rfs::fchmod(&fd, Mode::from_raw_mode(b.stamp.mode & 0o7777))?;
                    Ok(rfs::fsync(&fd)?)
                })();
                drop(fd);
                let done = written.and_then(|()| {
                    if now_kind == Some(Kind::Dir) {
                        remove_at(&dir, name)?;
                    }
                    Ok(rfs::renameat(&dir, tmp.as_str(), &dir, name)?)
                });
                if let Err(e) = done {
                    let _ = rfs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
                    return Err(format!("cannot write it: {e}"));
                }
                Ok(())
            }
            Kind::Link => {
                let Some(target) = &b.target else {
                    return Err("its link target is unknown".into());
                };
                remove_at(&dir, name)
                    .map_err(|e| format!("cannot remove what replaced it: {e}"))?;
                rfs::symlinkat(OsStr::from_bytes(target), &dir, name)
                    .map_err(|e| format!("cannot recreate the link: {e}"))
            }
            Kind::Other => Err("it is not a file, folder or link".into()),
        }
    }
}

/// Whether two scans saw the same version of an entry.
fn same(a: &Entry, b: &Entry) -> bool {
    match b.kind {
        // A folder changes when its entries do; what matters is checked entry by entry.
        Kind::Dir => a.stamp.ino == b.stamp.ino && a.stamp.mode == b.stamp.mode,
        Kind::Link => a.target == b.target,
        // The same version, or (after a put-back, say) the same bytes and mode.
        Kind::File => {
            a.stamp == b.stamp
                || (b.content.is_some() && a.content == b.content && a.stamp.mode == b.stamp.mode)
        }
        Kind::Other => a.stamp == b.stamp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn protected() -> Protected {
        Protected::new(
            &crate::policy::DEFAULT_PROTECTED
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        )
        .unwrap()
    }

    fn repo() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(ws.join(".git/objects/ab")).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(ws.join(".git/hooks/pre-commit.sample"), "sample").unwrap();
        std::fs::write(ws.join(".git/objects/ab/cdef"), "object").unwrap();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(tmp.path().join("canary"), "CANARY").unwrap();
        (tmp, ws)
    }

    #[test]
    fn changed_control_files_are_put_back_and_new_ones_removed() {
        let (tmp, ws) = repo();
        let p = protected();
        let g = Guard::capture(&ws, &p).unwrap();
        let ro = g.readonly_paths();
        assert_eq!(ro, [ws.join(".git")]);
        std::fs::write(
            ws.join(".git/config"),
            "[core]\n\tfsmonitor = touch PWNED\n",
        )
        .unwrap();
        std::fs::write(ws.join(".git/hooks/pre-commit"), "evil").unwrap();
        std::fs::write(ws.join(".git/commondir"), "x\n").unwrap();
        std::fs::create_dir_all(ws.join(".git/x")).unwrap();
        std::fs::write(ws.join(".git/x/config"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/other\n").unwrap();
        std::fs::write(ws.join(".git/objects/ab/new"), "object").unwrap();
        std::fs::create_dir_all(ws.join("sub/.git")).unwrap();
        std::fs::write(ws.join("sub/.git/config"), "evil").unwrap();
        std::fs::create_dir_all(ws.join(".vscode")).unwrap();
        std::fs::write(ws.join(".vscode/tasks.json"), "{}").unwrap();
        std::fs::write(ws.join(".envrc"), "touch x").unwrap();
        std::fs::write(ws.join("src/b.rs"), "ok").unwrap();
        let q = tmp.path().join("quarantine");
        let r = g.finish(&p, &[], &q);
        assert_eq!(r.restored, [".git/config"]);
        assert_eq!(
            r.removed,
            [
                ".envrc",
                ".git/commondir",
                ".git/hooks/pre-commit",
                ".git/x/config",
                ".vscode",
                "sub/.git"
            ]
        );
        assert!(r.kept.is_empty() && r.incomplete.is_none(), "{r:?}");
        assert_eq!(
            std::fs::read_to_string(ws.join(".git/config")).unwrap(),
            "[core]\n"
        );
        for gone in [
            ".git/commondir",
            ".git/hooks/pre-commit",
            ".git/x/config",
            ".vscode",
            "sub/.git",
            ".envrc",
        ] {
            assert!(!ws.join(gone).exists(), "{gone}");
        }
        // The repository's data and the rest of the workspace are left alone.
        assert_eq!(
            std::fs::read_to_string(ws.join(".git/HEAD")).unwrap(),
            "ref: refs/heads/other\n"
        );
        assert!(ws.join(".git/objects/ab/new").exists());
        assert!(ws.join("src/b.rs").exists());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("canary")).unwrap(),
            "CANARY"
        );
        assert!(g.finish(&p, &[], &q).is_empty());
        // Nothing was destroyed: the changed config and the created entries are in the
        // quarantine.
        assert!(
            std::fs::read_to_string(q.join(".git/config"))
                .unwrap()
                .contains("fsmonitor")
        );
        assert_eq!(
            std::fs::read_to_string(q.join(".vscode/tasks.json")).unwrap(),
            "{}"
        );
        assert_eq!(
            std::fs::read_to_string(q.join(".envrc")).unwrap(),
            "touch x"
        );
        assert_eq!(r.quarantine.as_deref(), Some(q.as_path()));
    }

    #[test]
    fn links_planted_where_protected_entries_were_are_removed_not_followed() {
        for shape in ["config", "hooks", "hook-inside", "dotgit"] {
            let (tmp, ws) = repo();
            let outside = tmp.path().join("outside");
            std::fs::create_dir_all(&outside).unwrap();
            std::fs::write(outside.join("keep.txt"), "KEEP").unwrap();
            let p = protected();
            let g = Guard::capture(&ws, &p).unwrap();
            match shape {
                "config" => {
                    std::fs::remove_file(ws.join(".git/config")).unwrap();
                    symlink(tmp.path().join("canary"), ws.join(".git/config")).unwrap();
                }
                "hooks" => {
                    std::fs::remove_dir_all(ws.join(".git/hooks")).unwrap();
                    symlink(&outside, ws.join(".git/hooks")).unwrap();
                }
                "hook-inside" => {
                    symlink(
                        tmp.path().join("canary"),
                        ws.join(".git/hooks/pre-commit.sample.x"),
                    )
                    .unwrap();
                    std::fs::remove_file(ws.join(".git/hooks/pre-commit.sample")).unwrap();
                    symlink(
                        tmp.path().join("canary"),
                        ws.join(".git/hooks/pre-commit.sample"),
                    )
                    .unwrap();
                }
                _ => {
                    std::fs::rename(ws.join(".git"), tmp.path().join("moved-git")).unwrap();
                    symlink(&outside, ws.join(".git")).unwrap();
                }
            }
            let r = g.finish(&p, &[], &tmp.path().join("q"));
            assert_eq!(
                std::fs::read_to_string(tmp.path().join("canary")).unwrap(),
                "CANARY",
                "{shape}"
            );
            assert_eq!(
                std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
                "KEEP",
                "{shape}"
            );
            assert_eq!(
                std::fs::read_dir(&outside).unwrap().count(),
                1,
                "{shape}: {r:?}"
            );
            assert!(
                !std::fs::symlink_metadata(ws.join(".git"))
                    .unwrap()
                    .file_type()
                    .is_symlink(),
                "{shape}"
            );
            assert_eq!(
                std::fs::read_to_string(ws.join(".git/config")).unwrap(),
                "[core]\n",
                "{shape}: {r:?}"
            );
            assert_eq!(
                std::fs::read_to_string(ws.join(".git/hooks/pre-commit.sample")).unwrap(),
                "sample",
                "{shape}: {r:?}"
            );
        }
    }

    #[test]
    fn every_scan_sees_the_whole_tree() {
        let (_tmp, ws) = repo();
        let p = protected();
        let g = Guard::capture(&ws, &p).unwrap();
        for _ in 0..3 {
            let r = g.finish(&p, &[], &_tmp.path().join("q"));
            assert!(r.is_empty(), "{r:?}");
            assert_eq!(scan(&g.root_fd, &p).entries.len(), g.len());
        }
    }

    #[test]
    fn what_the_kernel_held_read_only_is_left_alone() {
        let (tmp, ws) = repo();
        let p = protected();
        let g = Guard::capture(&ws, &p).unwrap();
        // Changed from outside the command's namespace (a person): not the command's doing.
        std::fs::write(ws.join(".git/config"), "[user]\n\tname = me\n").unwrap();
        std::fs::write(ws.join(".git/hooks/pre-push"), "mine").unwrap();
        let r = g.finish(&p, &[PathBuf::from(".git")], &tmp.path().join("q"));
        assert!(r.is_empty(), "{r:?}");
        assert!(ws.join(".git/hooks/pre-push").exists());
        assert!(!tmp.path().join("q").exists());
    }

    #[test]
    fn a_person_approved_command_is_recorded_not_reverted() {
        let (_tmp, ws) = repo();
        let p = protected();
        let g = Guard::capture(&ws, &p).unwrap();
        std::fs::write(ws.join(".git/config"), "[user]\n").unwrap();
        std::fs::write(ws.join(".envrc"), "export A=1").unwrap();
        let mut ch = g.changes(&p);
        ch.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(ch.len(), 2);
        assert_eq!(ch[0].path, ".envrc");
        assert_eq!(ch[0].before, None);
        assert_eq!(ch[1].path, ".git/config");
        assert_eq!(ch[1].before.as_ref().unwrap().0, b"[core]\n");
        assert_eq!(
            std::fs::read_to_string(ws.join(".git/config")).unwrap(),
            "[user]\n"
        );
    }
}
