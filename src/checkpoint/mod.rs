//! Checkpoints: what each run changed in the workspace, and undo.
//!
//! Before a run first changes a file, the file's prior state (bytes and mode, or its absence)
//! is saved in the state directory; after every change the resulting content's hash is
//! recorded. Undo restores the prior states exactly (bytes, permissions; created files and
//! folders removed) and refuses when a file no longer has the content the run left, unless
//! forced. Nothing here touches the workspace's own `.git`. Layout, per workspace:
//!
//! ```text
//! <state>/workspaces/<name>-<hash>/runs/<run id>/run.json     the manifest
//! <state>/workspaces/<name>-<hash>/runs/<run id>/blobs/<sha1>  prior contents
//! ```

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::bounded::Links;
use crate::workspace::{Workspace, WorkspacePath};

/// The largest file content kept for undo. A command that changes a larger file is told that
/// undo will leave it alone; the edit tools never write files this large.
pub const MAX_BLOB_BYTES: u64 = 64 << 20;

/// The largest run record (`run.json`) read back: a run that changed this many files is not
/// one undo can restore anyway.
const MAX_RECORD_BYTES: u64 = 64 << 20;

pub mod tree;

/// The checkpoints of one workspace.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// A saved prior content.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Blob {
    pub sha1: String,
    pub mode: u32,
}

/// What a run did to one file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileEntry {
    /// The file before the run's first change (`None`: it did not exist).
    pub before: Option<Blob>,
    /// The content hash the run left (`None`: the run deleted it).
    pub after: Option<String>,
}

/// A run's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub run_id: String,
    /// Seconds since the epoch.
    pub created: u64,
    /// The request's last user message, shortened.
    pub prompt: String,
    pub files: BTreeMap<String, FileEntry>,
    /// Folders the run created, outermost first.
    #[serde(default)]
    pub dirs_created: Vec<String>,
    /// When it was undone.
    #[serde(default)]
    pub undone: Option<u64>,
}

/// One line of `toolpilot runs`.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub run_id: String,
    pub created: u64,
    pub prompt: String,
    pub files: Vec<String>,
    pub undone: bool,
}

/// What an undo did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct UndoReport {
    pub run_id: String,
    pub restored: Vec<String>,
    pub removed: Vec<String>,
    pub dirs_removed: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    #[error("there is no run {0:?} with recorded changes in this workspace (see `toolpilot runs`)")]
    NotFound(String),
    #[error("run {run_id} was already undone")]
    AlreadyUndone { run_id: String },
    #[error(
        "run {run_id} was not undone: {} changed after the run ({}). Undo with force to \
         overwrite them anyway (`toolpilot undo --force {run_id}`, or {{\"force\": true}})",
        if .files.len() == 1 { "this file" } else { "these files" },
        .files.join("; ")
    )]
    Conflict { run_id: String, files: Vec<String> },
    #[error("undo of run {run_id} failed: {message}")]
    Failed { run_id: String, message: String },
}

/// The git blob id of some content.
pub fn sha1(bytes: &[u8]) -> String {
    let mut h = sha1_smol::Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    h.digest().to_string()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Writes `bytes` to `path` atomically, for the owner only: checkpoints hold the prior
/// contents of the workspace's files.
fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    crate::private_file::write(path, bytes)
}

#[cfg(unix)]
fn mode_of(p: &std::fs::Permissions) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(p) & 0o7777
}

#[cfg(unix)]
fn permissions(mode: u32) -> std::fs::Permissions {
    std::os::unix::fs::PermissionsExt::from_mode(mode)
}

impl Store {
    /// The store of `workspace_root` under `state_dir`.
    pub fn new(state_dir: &Path, workspace_root: &Path) -> Store {
        let name: String = workspace_root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "root".into())
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let hash = sha1(workspace_root.to_string_lossy().as_bytes());
        Store {
            dir: state_dir
                .join("workspaces")
                .join(format!("{name}-{}", &hash[..12])),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn run_dir(&self, run_id: &str) -> PathBuf {
        self.dir.join("runs").join(run_id)
    }

    /// The recorder of one run. Nothing is written until the run changes a file.
    pub fn run(&self, run_id: &str, prompt: &str) -> Arc<RunCheckpoint> {
        Arc::new(RunCheckpoint {
            dir: self.run_dir(run_id),
            manifest: Mutex::new(Manifest {
                run_id: run_id.to_string(),
                created: now(),
                prompt: crate::text::preview(prompt.trim(), 200),
                files: BTreeMap::new(),
                dirs_created: Vec::new(),
                undone: None,
            }),
        })
    }

    pub fn load(&self, run_id: &str) -> Result<Manifest, UndoError> {
        if !valid_run_id(run_id) {
            return Err(UndoError::NotFound(run_id.to_string()));
        }
        let path = self.run_dir(run_id).join("run.json");
        let text = match crate::bounded::read_file_string(&path, MAX_RECORD_BYTES, Links::Refuse) {
            Ok(text) => text,
            Err(e) if e.is_not_found() => return Err(UndoError::NotFound(run_id.to_string())),
            Err(e) => {
                return Err(UndoError::Failed {
                    run_id: run_id.to_string(),
                    message: format!("its record {} cannot be read: {e}", path.display()),
                });
            }
        };
        serde_json::from_str(&text).map_err(|e| UndoError::Failed {
            run_id: run_id.to_string(),
            message: format!("its record is damaged: {e}"),
        })
    }

    /// Runs with recorded changes, newest first.
    pub fn list(&self) -> Vec<RunSummary> {
        let Ok(entries) = std::fs::read_dir(self.dir.join("runs")) else {
            return Vec::new();
        };
        let mut runs: Vec<RunSummary> = entries
            .flatten()
            .filter_map(|e| self.load(&e.file_name().to_string_lossy()).ok())
            .map(|m| RunSummary {
                run_id: m.run_id,
                created: m.created,
                prompt: m.prompt,
                files: m.files.keys().cloned().collect(),
                undone: m.undone.is_some(),
            })
            .collect();
        runs.sort_by(|a, b| b.created.cmp(&a.created).then(b.run_id.cmp(&a.run_id)));
        runs
    }

    /// Restores the workspace files a run changed to their state before the run.
    pub fn undo(&self, ws: &Workspace, run_id: &str, force: bool) -> Result<UndoReport, UndoError> {
        let mut m = self.load(run_id)?;
        if m.undone.is_some() {
            return Err(UndoError::AlreadyUndone {
                run_id: run_id.to_string(),
            });
        }
        let failed = |message: String| UndoError::Failed {
            run_id: run_id.to_string(),
            message,
        };
        // Resolve every path first, and hold their locks for the whole undo.
        let mut paths = Vec::new();
        for rel in m.files.keys() {
            let p = ws
                .recorded(rel)
                .map_err(|e| failed(format!("{rel}: {e}")))?;
            paths.push(p);
        }
        for p in &paths {
            if let Some(link) = ws.linked_ancestor(p) {
                return Err(failed(format!(
                    "{}: the folder {link} on its way is now a symbolic link, and undo does not \
                     write through links (one may have been planted to redirect the write). \
                     Replace the link with the folder, then undo again",
                    p.display()
                )));
            }
        }
        let locks: Vec<_> = paths.iter().map(|p| ws.lock(p)).collect();
        let _guards: Vec<_> = locks
            .iter()
            .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()))
            .collect();

        let current = |p: &WorkspacePath| -> Result<Option<String>, UndoError> {
            if ws.version(p).is_none() {
                return Ok(None);
            }
            let snap = ws
                .read_for_edit(p, &p.display())
                .map_err(|e| failed(e.to_string()))?;
            Ok(Some(sha1(&snap.bytes)))
        };
        let mut conflicts = Vec::new();
        for (p, entry) in paths.iter().zip(m.files.values()) {
            let now = current(p)?;
            if now != entry.after {
                let how = match (&entry.after, &now) {
                    (Some(_), None) => "deleted since",
                    (None, Some(_)) => "created again since",
                    _ => "edited since",
                };
                conflicts.push(format!("{} ({how})", p.display()));
            }
        }
        if !conflicts.is_empty() && !force {
            return Err(UndoError::Conflict {
                run_id: run_id.to_string(),
                files: conflicts,
            });
        }

        let mut report = UndoReport {
            run_id: run_id.to_string(),
            restored: Vec::new(),
            removed: Vec::new(),
            dirs_removed: Vec::new(),
        };
        let blobs = self.run_dir(run_id).join("blobs");
        for (p, entry) in paths.iter().zip(m.files.values()) {
            match &entry.before {
                Some(blob) if blob.mode & 0o170000 == 0o120000 => {
                    // A symbolic link (recorded from a tree snapshot): its content is the target.
                    let target = read_blob(&blobs, &blob.sha1)
                        .map_err(|e| failed(format!("the saved copy of {}: {e}", p.display())))?;
                    if ws.version(p).is_some() || ws.is_symlink(p) {
                        ws.remove_file(p).map_err(|e| failed(e.to_string()))?;
                    }
                    ws.symlink(p, &String::from_utf8_lossy(&target))
                        .map_err(|e| failed(format!("{}: {e}", p.display())))?;
                    report.restored.push(p.display());
                }
                Some(blob) => {
                    let bytes = read_blob(&blobs, &blob.sha1)
                        .map_err(|e| failed(format!("the saved copy of {}: {e}", p.display())))?;
                    let perms = permissions(if blob.mode > 0o7777 {
                        blob.mode & 0o777
                    } else {
                        blob.mode
                    });
                    if ws.version(p).is_some() {
                        ws.replace_file(p, &bytes, Some(&perms))
                            .map_err(|e| failed(e.to_string()))?;
                    } else {
                        ws.create_file(p, &bytes)
                            .map_err(|e| failed(format!("{}: {e}", p.display())))?;
                        ws.replace_file(p, &bytes, Some(&perms))
                            .map_err(|e| failed(e.to_string()))?;
                    }
                    report.restored.push(p.display());
                }
                None => {
                    if ws.version(p).is_some() {
                        ws.remove_file(p).map_err(|e| failed(e.to_string()))?;
                        report.removed.push(p.display());
                    }
                }
            }
        }
        for d in m.dirs_created.iter().rev() {
            if let Ok(p) = ws.recorded(d)
                && ws.remove_dir_if_empty(&p)
            {
                report.dirs_removed.push(p.display());
            }
        }
        m.undone = Some(now());
        let text = serde_json::to_vec_pretty(&m).map_err(|e| failed(e.to_string()))?;
        write_atomic(&self.run_dir(run_id).join("run.json"), &text)
            .map_err(|e| failed(format!("cannot update the run record: {e}")))?;
        Ok(report)
    }
}

/// A file's saved content, at most [`MAX_BLOB_BYTES`] (no larger one is ever saved).
fn read_blob(blobs: &Path, sha1: &str) -> Result<Vec<u8>, String> {
    crate::bounded::read_file(&blobs.join(sha1), MAX_BLOB_BYTES, Links::Refuse).map_err(|e| {
        if e.is_not_found() {
            "it is missing".to_string()
        } else {
            format!("it cannot be read: {e}")
        }
    })
}

/// Records one run's changes as they happen.
#[derive(Debug)]
pub struct RunCheckpoint {
    dir: PathBuf,
    manifest: Mutex<Manifest>,
}

impl RunCheckpoint {
    pub fn run_id(&self) -> String {
        self.lock().run_id.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Manifest> {
        self.manifest.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn save(&self, m: &Manifest) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let text = serde_json::to_vec_pretty(m).map_err(io::Error::other)?;
        write_atomic(&self.dir.join("run.json"), &text)
    }

    /// Saves a file's state before the run first changes it (later calls keep the first).
    /// `before`: the current bytes and permissions, or `None` if the file does not exist.
    pub fn before_change(
        &self,
        path: &WorkspacePath,
        before: Option<(&[u8], &std::fs::Permissions)>,
    ) -> io::Result<()> {
        let mut m = self.lock();
        let key = path.display();
        if m.files.contains_key(&key) {
            return Ok(());
        }
        let blob = match before {
            Some((bytes, perms)) => {
                let id = sha1(bytes);
                let blobs = self.dir.join("blobs");
                std::fs::create_dir_all(&blobs)?;
                let file = blobs.join(&id);
                if !file.exists() {
                    write_atomic(&file, bytes)?;
                }
                Some(Blob {
                    sha1: id,
                    mode: mode_of(perms),
                })
            }
            None => None,
        };
        let after = blob.as_ref().map(|b| b.sha1.clone());
        m.files.insert(
            key,
            FileEntry {
                before: blob,
                after,
            },
        );
        self.save(&m)
    }

    /// Records a change found by comparing tree snapshots: the prior content and git mode
    /// (kept only if the run had not touched the file yet) and the blob id it left.
    pub fn tree_change(
        &self,
        path: &str,
        before: Option<(&[u8], u32)>,
        after: Option<&str>,
    ) -> io::Result<()> {
        let mut m = self.lock();
        if !m.files.contains_key(path) {
            let blob = match before {
                Some((bytes, mode)) => {
                    let id = sha1(bytes);
                    let blobs = self.dir.join("blobs");
                    std::fs::create_dir_all(&blobs)?;
                    let file = blobs.join(&id);
                    if !file.exists() {
                        write_atomic(&file, bytes)?;
                    }
                    Some(Blob { sha1: id, mode })
                }
                None => None,
            };
            m.files.insert(
                path.to_string(),
                FileEntry {
                    before: blob,
                    after: None,
                },
            );
        }
        if let Some(e) = m.files.get_mut(path) {
            e.after = after.map(str::to_string);
        }
        self.save(&m)
    }

    /// Whether the run has recorded this path already.
    pub fn records(&self, path: &str) -> bool {
        self.lock().files.contains_key(path)
    }

    /// Whether the run has changed anything yet.
    pub fn is_empty(&self) -> bool {
        self.lock().files.is_empty()
    }

    /// Records what the run left in a file (`None`: deleted).
    pub fn after_change(&self, path: &WorkspacePath, after: Option<&[u8]>) -> io::Result<()> {
        let mut m = self.lock();
        if let Some(e) = m.files.get_mut(&path.display()) {
            e.after = after.map(sha1);
        }
        self.save(&m)
    }

    /// Records folders the run created.
    pub fn created_dirs(&self, dirs: &[WorkspacePath]) -> io::Result<()> {
        if dirs.is_empty() {
            return Ok(());
        }
        let mut m = self.lock();
        for d in dirs {
            m.dirs_created.push(d.display());
        }
        self.save(&m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_ids_are_git_compatible() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(sha1(b"hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
    }

    #[test]
    fn undo_never_writes_through_a_folder_that_became_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/a.rs"), "OUTSIDE\n").unwrap();
        std::fs::write(root.join("src/a.rs"), "old a\n").unwrap();
        let ws = Workspace::open(&root, &[]).unwrap();
        let store = Store::new(&tmp.path().join("state"), ws.root());
        let cp = store.run("r1", "x");
        let a = ws.resolve("src/a.rs").unwrap();
        let snap = ws.read_for_edit(&a, "src/a.rs").unwrap();
        cp.before_change(&a, Some((&snap.bytes, &snap.permissions)))
            .unwrap();
        cp.after_change(&a, Some(b"old a\n")).unwrap();
        // The folder is swapped for a link to a folder of the same shape elsewhere (inside the
        // workspace it would still redirect the write).
        std::fs::rename(root.join("src"), root.join("src-moved")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside"), root.join("src")).unwrap();
        let e = store.undo(&ws, "r1", true).unwrap_err().to_string();
        assert!(
            e.contains("the folder src on its way is now a symbolic link"),
            "{e}"
        );
        std::fs::remove_file(root.join("src")).unwrap();
        std::os::unix::fs::symlink("src-moved", root.join("src")).unwrap();
        assert!(store.undo(&ws, "r1", true).is_err());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("outside/a.rs")).unwrap(),
            "OUTSIDE\n"
        );
    }

    #[test]
    fn a_run_is_recorded_and_undone_exactly() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.rs"), "old a\n").unwrap();
        let ws = Workspace::open(&root, &[]).unwrap();
        let store = Store::new(&tmp.path().join("state"), ws.root());
        let cp = store.run("r1", "change things");
        // Edit a.rs, create b/c.rs.
        let a = ws.resolve("src/a.rs").unwrap();
        let snap = ws.read_for_edit(&a, "src/a.rs").unwrap();
        cp.before_change(&a, Some((&snap.bytes, &snap.permissions)))
            .unwrap();
        ws.replace_file(&a, b"new a\n", Some(&snap.permissions))
            .unwrap();
        cp.after_change(&a, Some(b"new a\n")).unwrap();
        let c = ws.resolve("b/c.rs").unwrap();
        cp.before_change(&c, None).unwrap();
        let (dirs, _) = ws.create_file(&c, b"c\n").unwrap();
        cp.created_dirs(&dirs).unwrap();
        cp.after_change(&c, Some(b"c\n")).unwrap();

        let runs = store.list();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].files, ["b/c.rs", "src/a.rs"]);
        assert_eq!(runs[0].prompt, "change things");

        // A later change blocks the undo unless forced.
        std::fs::write(root.join("src/a.rs"), "someone else\n").unwrap();
        let e = store.undo(&ws, "r1", false).unwrap_err().to_string();
        assert!(e.contains("src/a.rs (edited since)"), "{e}");
        assert_eq!(std::fs::read_to_string(root.join("b/c.rs")).unwrap(), "c\n");
        let report = store.undo(&ws, "r1", true).unwrap();
        assert_eq!(report.restored, ["src/a.rs"]);
        assert_eq!(report.removed, ["b/c.rs"]);
        assert_eq!(report.dirs_removed, ["b"]);
        assert_eq!(
            std::fs::read_to_string(root.join("src/a.rs")).unwrap(),
            "old a\n"
        );
        assert!(!root.join("b").exists());
        assert!(matches!(
            store.undo(&ws, "r1", false),
            Err(UndoError::AlreadyUndone { .. })
        ));
        assert!(matches!(
            store.undo(&ws, "../x", false),
            Err(UndoError::NotFound(_))
        ));
    }
}
