//! Confines paths to the workspace root.
//!
//! Every path a model or client sends goes through [`Workspace::resolve`], which turns the
//! accepted spellings (relative, absolute inside the root, `~/…`, `file://…`) into a
//! [`WorkspacePath`]: a normalised path relative to the root that contains no `..`. Files are
//! then opened *beneath* the root with a capability handle (`cap-std`, which uses Linux's
//! `openat2(RESOLVE_BENEATH)`), so a symlink that points outside, or a directory swapped for
//! one between a check and an open, is refused by the kernel rather than by a string test.
//! Nothing here decides *whether* an access is allowed; that is `policy`'s job.

// Slicing a string or a slice at an unchecked index panics on input someone else chose (a
// path of multi-byte characters, a short line): use `get`, `split_at_checked`, iterators or
// the char-boundary helpers of `text` instead.
#![cfg_attr(not(test), deny(clippy::string_slice, clippy::indexing_slicing))]

pub mod names;
pub mod nofollow;
pub mod walk;
pub mod write;

use std::fs::File;
use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

pub use crate::config::DEFAULT_SENSITIVE;

/// Longest path argument accepted, in bytes (Linux's PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest single path component, in bytes (NAME_MAX).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// The workspace: its canonical root, a capability handle on it, and the sensitive-file list.
pub struct Workspace {
    root: PathBuf,
    /// The root as it was given (absolute), when that differs from the canonical one (a
    /// symlinked folder such as macOS's /tmp): absolute paths may use either spelling.
    alias: Option<PathBuf>,
    dir: Dir,
    home: Option<PathBuf>,
    sensitive: Gitignore,
    /// The literal names of the sensitive patterns, for reading 8.3 short names.
    sensitive_names: Vec<String>,
    /// One lock per edited file (see `write.rs`).
    locks:
        std::sync::Mutex<std::collections::HashMap<PathBuf, std::sync::Arc<std::sync::Mutex<()>>>>,
}

/// A path inside the workspace, relative to the root, normalised (no `.`, no `..`).
/// Only [`Workspace::resolve`] creates one. The empty path is the root itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkspacePath {
    rel: PathBuf,
}

impl WorkspacePath {
    pub fn rel(&self) -> &Path {
        &self.rel
    }

    pub fn is_root(&self) -> bool {
        self.rel.as_os_str().is_empty()
    }

    /// The path as shown to the model: relative, `/`-separated, `.` for the root.
    pub fn display(&self) -> String {
        if self.is_root() {
            ".".to_string()
        } else {
            self.rel.to_string_lossy().into_owned()
        }
    }

    /// A child of this path (the name must be a single normal component, as from `read_dir`).
    pub fn join_entry(&self, name: &str) -> Option<WorkspacePath> {
        let mut comps = Path::new(name).components();
        match (comps.next(), comps.next()) {
            (Some(Component::Normal(_)), None) => Some(WorkspacePath {
                rel: self.rel.join(name),
            }),
            _ => None,
        }
    }
}

/// Why a path was refused or could not be opened. The messages are written for the model.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error(
        "path \"{raw}\" is outside the workspace ({root}); tools can only reach files under the \
         workspace root. Use a path relative to the root, such as \"src/main.rs\""
    )]
    Outside { raw: String, root: String },
    #[error(
        "path \"{raw}\" leads outside the workspace through a symbolic link; tools can only reach \
         files under the workspace root ({root})"
    )]
    SymlinkEscape { raw: String, root: String },
    #[error("path contains a NUL byte; send the path as plain text")]
    Nul,
    #[error("path is too long ({len} bytes; the limit is {limit} bytes)")]
    TooLong { len: usize, limit: usize },
    #[error("path is empty; pass a file path relative to the workspace root")]
    Empty,
    #[error("\"{raw}\" is not a usable path: {reason}")]
    Unusable { raw: String, reason: String },
    #[error("\"{raw}\" does not exist in the workspace")]
    NotFound { raw: String },
    #[error("\"{raw}\" is a directory, not a file; use ls to list it")]
    IsDirectory { raw: String },
    #[error("\"{raw}\" is a file, not a directory")]
    NotDirectory { raw: String },
    #[error(
        "\"{raw}\" is {kind}, not a regular file; only regular files are read or written, so \
         nothing was done with it"
    )]
    NotRegular { raw: String, kind: &'static str },
    #[error("cannot open \"{raw}\": {source}")]
    Io { raw: String, source: io::Error },
}

impl Workspace {
    /// Opens the workspace at `root` (which must be an existing directory).
    pub fn open(root: &Path, sensitive_patterns: &[String]) -> io::Result<Workspace> {
        let given = std::path::absolute(root)?;
        let root = std::fs::canonicalize(root)?;
        let alias = Some(normalize_absolute(&given)).filter(|g| *g != root);
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("workspace {} is not a directory", root.display()),
            ));
        }
        let dir = Dir::open_ambient_dir(&root, ambient_authority())?;
        let mut builder = GitignoreBuilder::new("");
        builder
            .case_insensitive(true)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let mut sensitive_names: Vec<String> = Vec::new();
        for p in sensitive_patterns {
            for n in names::literal_names(p.trim_end_matches('/')) {
                if !sensitive_names.contains(&n) {
                    sensitive_names.push(n);
                }
            }
            builder.add_line(None, p).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("bad sensitive-file pattern {p:?}: {e}"),
                )
            })?;
        }
        let sensitive = builder
            .build()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Ok(Workspace {
            root,
            alias,
            dir,
            home,
            sensitive,
            sensitive_names,
            locks: Default::default(),
        })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The root's folder name, for messages.
    pub fn name(&self) -> String {
        self.root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.root.display().to_string())
    }

    /// The [`WorkspacePath`] of an entry found by a walk of this workspace (walks never
    /// follow symlinks and only yield paths under the root). `None` if `abs` is not below
    /// the root or contains `..`.
    pub fn walked(&self, abs: &Path) -> Option<WorkspacePath> {
        let rel = self.rel_of(abs)?;
        rel.components()
            .all(|c| matches!(c, Component::Normal(_)))
            .then(|| WorkspacePath {
                rel: rel.to_path_buf(),
            })
    }

    /// The part of `abs` below the root (see [`rel_under`]).
    pub fn rel_of<'a>(&self, abs: &'a Path) -> Option<&'a Path> {
        rel_under(&self.root, abs)
    }

    pub fn root_path(&self) -> WorkspacePath {
        WorkspacePath {
            rel: PathBuf::new(),
        }
    }

    /// Turns a path argument into a [`WorkspacePath`], refusing anything outside the root.
    ///
    /// This is lexical; symlinks are checked when the path is opened (see [`Workspace::open_file`]).
    pub fn resolve(&self, raw: &str) -> Result<WorkspacePath, PathError> {
        if raw.contains('\0') {
            return Err(PathError::Nul);
        }
        if raw.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong {
                len: raw.len(),
                limit: MAX_PATH_BYTES,
            });
        }
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(PathError::Empty);
        }
        let path: PathBuf = if let Some(rest) = strip_prefix_ci(trimmed, "file://") {
            file_uri_path(trimmed, rest)?
        } else if trimmed == "~" || trimmed.starts_with("~/") {
            let home = self.home.as_ref().ok_or_else(|| PathError::Unusable {
                raw: raw.to_string(),
                reason: "`~` cannot be expanded because HOME is not set".into(),
            })?;
            home.join(trimmed.trim_start_matches('~').trim_start_matches('/'))
        } else if trimmed.starts_with('~') {
            return Err(PathError::Unusable {
                raw: raw.to_string(),
                reason: "only `~/` (the current user's home) is expanded".into(),
            });
        } else {
            PathBuf::from(trimmed)
        };

        let rel = if path.is_absolute() {
            let normal = normalize_absolute(&path);
            let under = normal.strip_prefix(&self.root).ok().or_else(|| {
                self.alias
                    .as_ref()
                    .and_then(|a| normal.strip_prefix(a).ok())
            });
            match under {
                Some(r) => r.to_path_buf(),
                None => return Err(self.outside(raw)),
            }
        } else {
            normalize_relative(&path).ok_or_else(|| self.outside(raw))?
        };
        for c in rel.components() {
            if c.as_os_str().len() > MAX_COMPONENT_BYTES {
                return Err(PathError::TooLong {
                    len: c.as_os_str().len(),
                    limit: MAX_COMPONENT_BYTES,
                });
            }
        }
        Ok(WorkspacePath { rel })
    }

    fn outside(&self, raw: &str) -> PathError {
        PathError::Outside {
            raw: raw.to_string(),
            root: self.root.display().to_string(),
        }
    }

    fn io_error(&self, raw: &str, e: io::Error) -> PathError {
        if is_escape_error(&e) {
            return PathError::SymlinkEscape {
                raw: raw.to_string(),
                root: self.root.display().to_string(),
            };
        }
        match e.kind() {
            io::ErrorKind::NotFound => PathError::NotFound {
                raw: raw.to_string(),
            },
            io::ErrorKind::NotADirectory => PathError::NotDirectory {
                raw: raw.to_string(),
            },
            io::ErrorKind::IsADirectory => PathError::IsDirectory {
                raw: raw.to_string(),
            },
            _ => PathError::Io {
                raw: raw.to_string(),
                source: e,
            },
        }
    }

    /// Opens a regular file beneath the root. Symlinks are followed only while they stay
    /// inside the workspace.
    pub fn open_file(&self, p: &WorkspacePath, raw: &str) -> Result<File, PathError> {
        if p.is_root() {
            return Err(PathError::IsDirectory {
                raw: raw.to_string(),
            });
        }
        let file = self
            .dir
            .open_with(&p.rel, &read_nonblocking())
            .map_err(|e| match self.special_kind(p) {
                // A socket cannot be opened at all (ENXIO): say what it is, not the errno.
                Some(kind) if !is_escape_error(&e) => PathError::NotRegular {
                    raw: raw.to_string(),
                    kind,
                },
                _ => self.io_error(raw, e),
            })?
            .into_std();
        let meta = file.metadata().map_err(|e| self.io_error(raw, e))?;
        if meta.is_dir() {
            return Err(PathError::IsDirectory {
                raw: raw.to_string(),
            });
        }
        if !meta.is_file() {
            return Err(PathError::NotRegular {
                raw: raw.to_string(),
                kind: crate::bounded::file_kind(meta.file_type()),
            });
        }
        Ok(file)
    }

    /// What `p` is when it exists and is neither a regular file nor a folder ("a named pipe
    /// (FIFO)", "a socket", …), for messages; links inside the workspace are followed. Only
    /// looks (no open), so it never blocks.
    pub fn special_kind(&self, p: &WorkspacePath) -> Option<&'static str> {
        if p.is_root() {
            return None;
        }
        let t = self.dir.metadata(&p.rel).ok()?.file_type();
        if t.is_file() || t.is_dir() {
            return None;
        }
        use cap_std::fs::FileTypeExt;
        Some(if t.is_fifo() {
            "a named pipe (FIFO)"
        } else if t.is_socket() {
            "a socket"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else {
            "a special file"
        })
    }

    /// Opens a file a walk found, by its root-relative path, for reading: without blocking,
    /// confined beneath the root (a path swapped for a link meanwhile is refused), and checked
    /// on the handle to be a regular file (one swapped for a FIFO or a device meanwhile is
    /// refused, with what it is).
    pub fn open_walked(&self, rel: &Path) -> io::Result<File> {
        let file = self.dir.open_with(rel, &read_nonblocking())?.into_std();
        let kind = file.metadata()?.file_type();
        if !kind.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "it is {}, not a regular file",
                    crate::bounded::file_kind(kind)
                ),
            ));
        }
        Ok(file)
    }

    /// Opens a directory beneath the root.
    pub fn open_dir(&self, p: &WorkspacePath, raw: &str) -> Result<Dir, PathError> {
        if p.is_root() {
            return self.dir.try_clone().map_err(|e| self.io_error(raw, e));
        }
        self.dir.open_dir(&p.rel).map_err(|e| self.io_error(raw, e))
    }

    /// Where `p` really is when it goes through symbolic links (`link` → `.env`, or
    /// `docs/v/tasks.json` where `docs/v` → `.vscode`): the policy must judge that path too, or
    /// a link would be a way around the sensitive-file list, deny rules and protected paths.
    /// Every link along the path is resolved, also when the path does not exist yet (the
    /// deepest existing ancestor is resolved and the rest appended, as a write would create
    /// it). `None` when no link is involved, or the path leads outside (opening it is refused
    /// anyway).
    pub fn real_path(&self, p: &WorkspacePath) -> Option<WorkspacePath> {
        if p.is_root() {
            return None;
        }
        let mut pending: std::collections::VecDeque<std::ffi::OsString> = p
            .rel
            .components()
            .map(|c| c.as_os_str().to_os_string())
            .collect();
        let mut cur = self.root.clone();
        let mut links = 0;
        while let Some(name) = pending.pop_front() {
            if name == ".." {
                cur.pop();
                continue;
            }
            if name == "." {
                continue;
            }
            let next = cur.join(&name);
            match std::fs::symlink_metadata(&next) {
                Ok(m) if m.file_type().is_symlink() => {
                    links += 1;
                    if links > 40 {
                        return None;
                    }
                    let target = std::fs::read_link(&next).ok()?;
                    if target.is_absolute() {
                        cur = PathBuf::from("/");
                    }
                    for c in target.components().rev() {
                        match c {
                            Component::Normal(n) => pending.push_front(n.to_os_string()),
                            Component::ParentDir => pending.push_front("..".into()),
                            _ => {}
                        }
                    }
                }
                _ => cur.push(&name),
            }
        }
        if links == 0 {
            return None;
        }
        let rel = cur.strip_prefix(&self.root).ok()?;
        (rel != p.rel && !rel.as_os_str().is_empty()).then(|| WorkspacePath {
            rel: rel.to_path_buf(),
        })
    }

    /// Reads a regular file beneath the root without following any symbolic link on the way
    /// (for host-side reads of files a command could have replaced: rules, skills).
    pub fn read_nofollow(&self, rel: &Path, limit: u64) -> Result<Vec<u8>, nofollow::ReadError> {
        nofollow::read_beneath(&self.dir, rel, limit)
    }

    /// Regular files below a folder of the workspace (workspace-relative, sorted), following
    /// no symbolic link; with whether some were left out past `max`, and the named pipes,
    /// sockets and devices found there (not opened).
    pub fn files_below_nofollow(
        &self,
        rel: &Path,
        max_depth: usize,
        max: usize,
    ) -> io::Result<nofollow::Below> {
        nofollow::files_below(&self.dir, rel, max_depth, max)
    }

    /// Whether the path exists and is a directory (following in-workspace symlinks).
    pub fn is_dir(&self, p: &WorkspacePath) -> bool {
        p.is_root() || self.dir.metadata(&p.rel).is_ok_and(|m| m.is_dir())
    }

    /// The sensitive-file pattern that matches this path, if any. Names are compared folded
    /// (case, HFS+-ignored code points, NTFS trailing dots and 8.3 names: see [`names`]).
    pub fn sensitive_match(&self, p: &WorkspacePath, is_dir: bool) -> Option<String> {
        self.sensitive_rel(&p.rel, is_dir)
    }

    /// Like [`Workspace::sensitive_match`] for any relative path: one inside the workspace, or
    /// the path of a file outside it taken from `/` (a command's argument; the patterns without
    /// a `/` in the middle match at any depth there too).
    pub fn sensitive_rel(&self, rel: &Path, is_dir: bool) -> Option<String> {
        let folded = names::fold_path(rel, &self.sensitive_names);
        if folded.as_os_str().is_empty() {
            return None;
        }
        match self.sensitive.matched_path_or_any_parents(&folded, is_dir) {
            ignore::Match::Ignore(glob) => Some(glob.original().to_string()),
            _ => None,
        }
    }

    /// The user's home folder (`HOME`), for `~` in paths.
    pub fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }

    /// The root as it was given, when it differs from the canonical one.
    pub fn alias(&self) -> Option<&Path> {
        self.alias.as_deref()
    }

    /// Like [`Workspace::sensitive_match`] for a relative path found by a walk.
    pub fn is_sensitive_rel(&self, rel: &Path, is_dir: bool) -> bool {
        self.sensitive
            .matched_path_or_any_parents(rel, is_dir)
            .is_ignore()
    }
}

/// The part of `abs` below `root`: a byte-prefix test, for the hot paths of walks (whose paths
/// are the root joined with names). `Path::strip_prefix` compares component by component,
/// which showed up at several percent of a full-tree search.
pub fn rel_under<'a>(root: &Path, abs: &'a Path) -> Option<&'a Path> {
    use std::os::unix::ffi::OsStrExt;
    let (abs, root) = (abs.as_os_str().as_bytes(), root.as_os_str().as_bytes());
    let rest = abs.strip_prefix(root)?;
    let rest = match rest.first() {
        None => rest,
        Some(b'/') => rest.get(1..).unwrap_or_default(),
        // The root is `/` itself; otherwise the match stopped mid-name (`/ws` vs `/wsx`).
        Some(_) if root.ends_with(b"/") => rest,
        Some(_) => return None,
    };
    Some(Path::new(std::ffi::OsStr::from_bytes(rest)))
}

/// cap-std reports a resolution that would leave the root (including via a symlink) as
/// `PermissionDenied` with this message.
fn is_escape_error(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
        && e.to_string()
            .contains("a path led outside of the filesystem")
}

/// `s` without `prefix`, compared ignoring ASCII case. `get` rather than slicing: the byte
/// where the prefix would end may fall inside a character (`．．／…`, full-width dots and
/// slashes of three bytes each), and slicing there panics.
fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        s.get(prefix.len()..)
    } else {
        None
    }
}

fn file_uri_path(raw: &str, rest: &str) -> Result<PathBuf, PathError> {
    // file:///abs/path or file://localhost/abs/path; anything else names another host.
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return Err(PathError::Unusable {
            raw: raw.to_string(),
            reason:
                "a file:// URI must name a local absolute path, like file:///home/me/project/a.rs"
                    .into(),
        });
    }
    let url = url::Url::parse(&format!("file://{rest}")).map_err(|e| PathError::Unusable {
        raw: raw.to_string(),
        reason: format!("not a valid file URI ({e})"),
    })?;
    let path = url.to_file_path().map_err(|()| PathError::Unusable {
        raw: raw.to_string(),
        reason: "not a valid file URI".into(),
    })?;
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(PathError::Nul);
    }
    Ok(path)
}

/// Removes `.` and applies `..` lexically to an absolute path.
fn normalize_absolute(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Removes `.` and applies `..` lexically; `None` if the path climbs above its start.
fn normalize_relative(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Read-only, and an open never waits: a FIFO put where a file was (by a command, between
/// a check and the open) would otherwise block the open until something writes to it.
/// `O_NONBLOCK` does not change reads of a regular file, and only regular files are read.
fn read_nonblocking() -> cap_std::fs::OpenOptions {
    use cap_std::fs::OpenOptionsExt;
    let mut o = cap_std::fs::OpenOptions::new();
    o.read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn fixture() -> (tempfile::TempDir, Workspace) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(root.join("src/inner")).unwrap();
        std::fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(tmp.path().join("secret.txt"), "outside").unwrap();
        symlink(tmp.path().join("secret.txt"), root.join("link-out")).unwrap();
        symlink(tmp.path(), root.join("dir-out")).unwrap();
        symlink("src/a.rs", root.join("link-in")).unwrap();
        let sensitive: Vec<String> = DEFAULT_SENSITIVE.iter().map(|s| s.to_string()).collect();
        let ws = Workspace::open(&root, &sensitive).unwrap();
        (tmp, ws)
    }

    #[test]
    fn rel_of_strips_the_root_by_bytes() {
        let (_tmp, ws) = fixture();
        let root = ws.root().to_path_buf();
        assert_eq!(
            ws.rel_of(&root.join("src/a.rs")),
            Some(Path::new("src/a.rs"))
        );
        assert_eq!(ws.rel_of(&root), Some(Path::new("")));
        let sibling = format!("{}x/a.rs", root.display());
        assert_eq!(ws.rel_of(Path::new(&sibling)), None);
        assert_eq!(ws.rel_of(Path::new("/elsewhere/a.rs")), None);
    }

    #[track_caller]
    fn check(ws: &Workspace, raw: &str, expected: Result<&str, &str>) {
        let got = ws
            .resolve(raw)
            .map(|p| p.display())
            .map_err(|e| e.to_string());
        match (&got, expected) {
            (Ok(g), Ok(e)) => assert_eq!(g, e),
            (Err(g), Err(e)) => assert!(g.contains(e), "error {g:?} does not contain {e:?}"),
            _ => panic!("resolve({raw:?}) = {got:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn resolve_accepts_every_spelling_inside_and_refuses_escapes() {
        let (_tmp, ws) = fixture();
        let root = ws.root().display().to_string();
        check(&ws, "src/a.rs", Ok("src/a.rs"));
        check(&ws, "./src/../src/a.rs", Ok("src/a.rs"));
        check(&ws, ".", Ok("."));
        check(&ws, &format!("{root}/src/a.rs"), Ok("src/a.rs"));
        check(&ws, &format!("file://{root}/src/a.rs"), Ok("src/a.rs"));
        check(&ws, &format!("file://{}/src/a%2Ers", root), Ok("src/a.rs"));
        check(&ws, "../secret.txt", Err("is outside the workspace"));
        check(&ws, "src/../../secret.txt", Err("is outside the workspace"));
        check(&ws, "/etc/passwd", Err("is outside the workspace"));
        check(
            &ws,
            &format!("{root}/../secret.txt"),
            Err("is outside the workspace"),
        );
        check(&ws, "file:///etc/passwd", Err("is outside the workspace"));
        check(
            &ws,
            "file://otherhost/etc/passwd",
            Err("must name a local absolute path"),
        );
        check(&ws, "~/x", Err("is outside the workspace"));
        check(&ws, "~root/x", Err("only `~/`"));
        check(&ws, "a\0b", Err("NUL byte"));
        check(&ws, &"a/".repeat(3000), Err("too long"));
        check(&ws, &"x".repeat(300), Err("too long"));
        check(&ws, "  ", Err("path is empty"));
        // Full-width dots and slashes: three bytes each, so byte 7 (the length of
        // `file://`) falls inside a character. They are ordinary name characters.
        check(&ws, "．．／．．／etc", Ok("．．／．．／etc"));
        check(&ws, "fil\u{e9}://x", Ok("fil\u{e9}:/x"));
    }

    #[test]
    fn open_refuses_symlinks_that_leave_the_root() {
        let (_tmp, ws) = fixture();
        let open = |raw: &str| {
            let p = ws.resolve(raw).unwrap();
            ws.open_file(&p, raw).map(|_| ()).map_err(|e| e.to_string())
        };
        assert_eq!(open("link-in"), Ok(()));
        assert!(
            open("link-out")
                .unwrap_err()
                .contains("through a symbolic link")
        );
        assert!(
            open("dir-out/secret.txt")
                .unwrap_err()
                .contains("through a symbolic link")
        );
        assert!(open("src").unwrap_err().contains("is a directory"));
        assert!(open("nope.rs").unwrap_err().contains("does not exist"));
        let real = |raw: &str| ws.real_path(&ws.resolve(raw).unwrap()).map(|p| p.display());
        assert_eq!(real("link-in").as_deref(), Some("src/a.rs"));
        assert_eq!(real("src/a.rs"), None);
        assert_eq!(real("link-out"), None);
        assert_eq!(real("nope.rs"), None);
        // A path that does not exist yet is judged where a write would put it.
        std::fs::create_dir_all(ws.root().join(".vscode")).unwrap();
        symlink("../.vscode", ws.root().join("src/v")).unwrap();
        assert_eq!(
            real("src/v/tasks.json").as_deref(),
            Some(".vscode/tasks.json")
        );
        assert_eq!(
            real("src/v/new/x.json").as_deref(),
            Some(".vscode/new/x.json")
        );
        symlink(ws.root().join(".vscode"), ws.root().join("abs-v")).unwrap();
        assert_eq!(
            real("abs-v/tasks.json").as_deref(),
            Some(".vscode/tasks.json")
        );
        symlink("loop2", ws.root().join("loop1")).unwrap();
        symlink("loop1", ws.root().join("loop2")).unwrap();
        assert_eq!(real("loop1/x"), None);
        let p = ws.resolve("dir-out").unwrap();
        assert!(
            ws.open_dir(&p, "dir-out")
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
    }

    #[test]
    fn absolute_paths_may_use_a_symlinked_spelling_of_the_root() {
        let (tmp, ws) = fixture();
        symlink(ws.root(), tmp.path().join("alias")).unwrap();
        let via = Workspace::open(&tmp.path().join("alias"), &[]).unwrap();
        assert_eq!(via.root(), ws.root());
        let raw = format!("{}/alias/src/a.rs", tmp.path().display());
        assert_eq!(via.resolve(&raw).unwrap().display(), "src/a.rs");
        let canonical = format!("{}/src/a.rs", ws.root().display());
        assert_eq!(via.resolve(&canonical).unwrap().display(), "src/a.rs");
        let outside = format!("{}/alias/../secret.txt", tmp.path().display());
        assert!(via.resolve(&outside).is_err());
    }

    #[test]
    fn sensitive_files_match_continues_list() {
        let (_tmp, ws) = fixture();
        let m = |raw: &str| ws.sensitive_match(&ws.resolve(raw).unwrap(), false);
        assert_eq!(m(".env").as_deref(), Some(".env*"));
        assert_eq!(m("deploy/prod.env").as_deref(), Some("*.env"));
        assert_eq!(m("keys/server.txt").as_deref(), Some("keys/"));
        assert!(m("a/.ssh/id_rsa").is_some());
        assert!(m(".ENV").is_some());
        assert!(m(".e\u{200c}nv").is_some());
        assert!(m("SSH~1/id_rsa").is_some());
        assert!(m("Keys/a.txt").is_some());
        assert_eq!(m("src/main.rs"), None);
    }
}
