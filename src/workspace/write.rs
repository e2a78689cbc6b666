//! Writing beneath the workspace root, atomically.
//!
//! A replacement is written to a temporary file in the same directory, flushed to disk,
//! given the original's permissions, and renamed over the target (then the directory is
//! flushed), so a reader sees the old file or the new one, never half of either. A new file is
//! linked into place only if the name is still free, so creating never overwrites. Every path
//! is opened beneath the root (cap-std), like reads. Edits of one file are serialised by
//! [`Workspace::lock`].

use std::fs::Permissions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use cap_std::fs::{Dir, OpenOptions};

use super::{PathError, Workspace, WorkspacePath};

/// Largest file the edit tools rewrite.
pub const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;

/// What a file looked like when it was read: length and modification time. An edit whose
/// file no longer has the version the model last saw is refused as stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    pub len: u64,
    pub modified_ns: u128,
}

impl Version {
    fn of_cap(meta: &cap_std::fs::Metadata) -> Version {
        Version {
            len: meta.len(),
            modified_ns: meta
                .modified()
                .ok()
                .and_then(|t| t.into_std().duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos()),
        }
    }

    pub fn of(meta: &std::fs::Metadata) -> Version {
        Version {
            len: meta.len(),
            modified_ns: meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos()),
        }
    }
}

/// A file read for editing.
#[derive(Debug)]
pub struct Snapshot {
    pub bytes: Vec<u8>,
    pub permissions: Permissions,
    pub version: Version,
}

/// Why a new file could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("already exists")]
    Exists,
    #[error("{0}")]
    Path(#[from] PathError),
    #[error("{0}")]
    Io(#[from] io::Error),
}

fn split(p: &WorkspacePath) -> Result<(&Path, &std::ffi::OsStr), io::Error> {
    let name = p
        .rel()
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name"))?;
    let parent = p.rel().parent().unwrap_or(Path::new(""));
    Ok((parent, name))
}

fn temp_name(name: &std::ffi::OsStr) -> String {
    format!(
        ".{}.toolpilot-{:08x}.tmp",
        name.to_string_lossy(),
        fastrand::u32(..)
    )
}

/// Flushes a directory's entries (the rename) to disk; best effort.
fn sync_dir(dir: &Dir) {
    if let Ok(d) = dir.try_clone() {
        let _ = d.into_std_file().sync_all();
    }
}

/// Per-file locks kept before the idle ones are dropped.
const MAX_IDLE_LOCKS: usize = 1024;

impl Workspace {
    /// The lock that serialises edits of one file (by its path in the workspace). The table
    /// keeps only locks someone holds once it is large: the model names the paths, and a
    /// long-running server must not remember every one it ever edited.
    pub fn lock(&self, p: &WorkspacePath) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if locks.len() >= MAX_IDLE_LOCKS && !locks.contains_key(p.rel()) {
            // Only the table holds an idle lock; a held one has another `Arc`.
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        Arc::clone(locks.entry(p.rel().to_path_buf()).or_default())
    }

    /// How many per-file locks the table holds now.
    pub fn locks_held(&self) -> usize {
        self.locks.lock().map_or(0, |l| l.len())
    }

    fn parent_dir(&self, parent: &Path, raw: &str) -> Result<Dir, PathError> {
        if parent.as_os_str().is_empty() {
            return self.dir.try_clone().map_err(|e| self.io_error(raw, e));
        }
        self.dir.open_dir(parent).map_err(|e| self.io_error(raw, e))
    }

    /// The current version of a file, if it exists.
    pub fn version(&self, p: &WorkspacePath) -> Option<Version> {
        self.dir
            .metadata(p.rel())
            .ok()
            .filter(|m| m.is_file())
            .map(|m| Version::of_cap(&m))
    }

    /// Reads a whole file for editing.
    pub fn read_for_edit(&self, p: &WorkspacePath, raw: &str) -> Result<Snapshot, PathError> {
        let mut file = self.open_file(p, raw)?;
        let meta = file.metadata().map_err(|e| self.io_error(raw, e))?;
        if meta.len() > MAX_EDIT_BYTES {
            return Err(PathError::Unusable {
                raw: raw.to_string(),
                reason: format!(
                    "the file is {} bytes; the edit tools change files up to {MAX_EDIT_BYTES} bytes",
                    meta.len()
                ),
            });
        }
        // The file may grow between the size check and the read (a command appending to it):
        // the read stops at the limit all the same.
        let bytes =
            crate::bounded::read_to_end(&mut file, MAX_EDIT_BYTES).map_err(|e| match e {
                crate::bounded::CappedError::Io(e) => self.io_error(raw, e),
                other => PathError::Unusable {
                    raw: raw.to_string(),
                    reason: format!(
                        "{other}; the edit tools change files up to {MAX_EDIT_BYTES} bytes"
                    ),
                },
            })?;
        Ok(Snapshot {
            bytes,
            permissions: meta.permissions(),
            version: Version::of(&meta),
        })
    }

    /// Replaces an existing file atomically, keeping `permissions`.
    pub fn replace_file(
        &self,
        p: &WorkspacePath,
        bytes: &[u8],
        permissions: Option<&Permissions>,
    ) -> Result<Version, PathError> {
        let raw = p.display();
        let (parent, name) = split(p).map_err(|e| self.io_error(&raw, e))?;
        let dir = self.parent_dir(parent, &raw)?;
        let tmp = temp_name(name);
        let result = (|| -> io::Result<Version> {
            let mut f = dir.open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
            f.write_all(bytes)?;
            if let Some(perms) = permissions {
                f.set_permissions(cap_std::fs::Permissions::from_std(perms.clone()))?;
            }
            f.sync_all()?;
            drop(f);
            dir.rename(&tmp, &dir, name)?;
            sync_dir(&dir);
            let meta = dir.metadata(name)?;
            Ok(Version::of_cap(&meta))
        })();
        if result.is_err() {
            let _ = dir.remove_file(&tmp);
        }
        result.map_err(|e| self.io_error(&raw, e))
    }

    /// Creates a new file (and its missing parent folders) without ever overwriting: the
    /// content is written to a temporary file and linked into place only if the name is free.
    /// Returns the folders it created, outermost first.
    pub fn create_file(
        &self,
        p: &WorkspacePath,
        bytes: &[u8],
    ) -> Result<(Vec<WorkspacePath>, Version), CreateError> {
        let raw = p.display();
        let (parent, name) = split(p)?;
        let mut created = Vec::new();
        let mut cur = PathBuf::new();
        for c in parent.components() {
            cur.push(c);
            match self.dir.metadata(&cur) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(PathError::NotDirectory {
                        raw: cur.display().to_string(),
                    }
                    .into());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.dir
                        .create_dir(&cur)
                        .map_err(|e| self.io_error(&raw, e))?;
                    created.push(WorkspacePath { rel: cur.clone() });
                }
                Err(e) => return Err(self.io_error(&raw, e).into()),
            }
        }
        let dir = self.parent_dir(parent, &raw)?;
        let tmp = temp_name(name);
        let result = (|| -> Result<Version, CreateError> {
            let mut f = dir.open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
            f.write_all(bytes)?;
            f.sync_all()?;
            drop(f);
            match dir.hard_link(&tmp, &dir, name) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(CreateError::Exists);
                }
                Err(e) => return Err(e.into()),
            }
            sync_dir(&dir);
            let meta = dir.metadata(name)?;
            Ok(Version::of_cap(&meta))
        })();
        let _ = dir.remove_file(&tmp);
        match result {
            Ok(v) => Ok((created, v)),
            Err(e) => {
                for d in created.iter().rev() {
                    let _ = self.dir.remove_dir(d.rel());
                }
                Err(e)
            }
        }
    }

    /// Removes a file (not a folder).
    pub fn remove_file(&self, p: &WorkspacePath) -> Result<(), PathError> {
        let raw = p.display();
        self.dir
            .remove_file(p.rel())
            .map_err(|e| self.io_error(&raw, e))
    }

    /// Whether the path itself is a symbolic link.
    pub fn is_symlink(&self, p: &WorkspacePath) -> bool {
        self.dir
            .symlink_metadata(p.rel())
            .is_ok_and(|m| m.file_type().is_symlink())
    }

    /// Creates a symbolic link at `p` pointing to `target` (as stored in a checkpoint).
    pub fn symlink(&self, p: &WorkspacePath, target: &str) -> Result<(), PathError> {
        let raw = p.display();
        let (parent, name) = split(p).map_err(|e| self.io_error(&raw, e))?;
        let dir = self.parent_dir(parent, &raw)?;
        dir.symlink(target, name)
            .map_err(|e| self.io_error(&raw, e))
    }

    /// Removes a folder if it is empty; true if it was removed.
    pub fn remove_dir_if_empty(&self, p: &WorkspacePath) -> bool {
        !p.is_root() && self.dir.remove_dir(p.rel()).is_ok()
    }

    /// The first folder on the way to `p` (not `p` itself) that is a symbolic link, if any.
    /// Host-side restores (undo) refuse to write through one: it may have been planted to
    /// redirect the write.
    pub fn linked_ancestor(&self, p: &WorkspacePath) -> Option<String> {
        let mut cur = PathBuf::new();
        let parent = p.rel().parent()?;
        for c in parent.components() {
            cur.push(c);
            if self
                .dir
                .symlink_metadata(&cur)
                .is_ok_and(|m| m.file_type().is_symlink())
            {
                return Some(cur.display().to_string());
            }
        }
        None
    }

    /// Makes a [`WorkspacePath`] from a path recorded earlier by toolpilot itself (a
    /// checkpoint). It is checked like any other path.
    pub fn recorded(&self, rel: &str) -> Result<WorkspacePath, PathError> {
        self.resolve(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("ws")).unwrap();
        let ws = Workspace::open(&tmp.path().join("ws"), &[]).unwrap();
        (tmp, ws)
    }

    #[test]
    fn replace_is_atomic_and_keeps_permissions() {
        let (_t, ws) = ws();
        let path = ws.root().join("run.sh");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, Permissions::from_mode(0o751)).unwrap();
        let p = ws.resolve("run.sh").unwrap();
        let snap = ws.read_for_edit(&p, "run.sh").unwrap();
        ws.replace_file(&p, b"new", Some(&snap.permissions))
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o751);
        // No temporary files are left behind.
        let names: Vec<_> = std::fs::read_dir(ws.root())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["run.sh"]);
    }

    #[test]
    fn create_makes_folders_and_never_overwrites() {
        let (_t, ws) = ws();
        let p = ws.resolve("a/b/c.txt").unwrap();
        let (created, _) = ws.create_file(&p, b"hi").unwrap();
        let shown: Vec<String> = created.iter().map(WorkspacePath::display).collect();
        assert_eq!(shown, ["a", "a/b"]);
        assert_eq!(std::fs::read(ws.root().join("a/b/c.txt")).unwrap(), b"hi");
        assert!(matches!(
            ws.create_file(&p, b"other"),
            Err(CreateError::Exists)
        ));
        assert_eq!(std::fs::read(ws.root().join("a/b/c.txt")).unwrap(), b"hi");
        let names: Vec<_> = std::fs::read_dir(ws.root().join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["c.txt"]);
    }

    #[test]
    fn writes_never_follow_links_out() {
        let (t, ws) = ws();
        std::fs::create_dir(t.path().join("outside")).unwrap();
        std::os::unix::fs::symlink(t.path().join("outside"), ws.root().join("out")).unwrap();
        let p = ws.resolve("out/x.txt").unwrap();
        let e = ws.create_file(&p, b"x").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!t.path().join("outside/x.txt").exists());
    }

    #[test]
    fn the_lock_table_keeps_only_held_locks_once_it_is_large() {
        let (_tmp, ws) = ws();
        let held = ws.lock(&ws.resolve("held.txt").unwrap());
        for i in 0..3 * MAX_IDLE_LOCKS {
            let _ = ws.lock(&ws.resolve(&format!("f{i}.txt")).unwrap());
        }
        assert!(ws.locks_held() <= MAX_IDLE_LOCKS, "{}", ws.locks_held());
        // The held lock is the same one: an edit that holds it still excludes others.
        assert!(Arc::ptr_eq(
            &held,
            &ws.lock(&ws.resolve("held.txt").unwrap())
        ));
    }
}
