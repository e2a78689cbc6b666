//! File-system notifications for the codebase index: one non-recursive watch per folder the
//! search walk yields (so ignored, hidden and sensitive folders cost no watch and send no
//! events), events turned into the folders whose entries changed, and the debounce that
//! groups them into one update.
//!
//! This module only says *what* changed; `index` decides what that means for the index. It
//! never follows a link: watches are added only for folders a walk found (walks do not follow
//! links), and an event only names a folder to look at again, which `index` does with the same
//! walk rules.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, EventKindMask, RecursiveMode, WatchPathConfig, Watcher};

use crate::workspace::rel_under;
use crate::workspace::walk::CONTINUE_IGNORE;

/// Quiet time after the last event before an update runs.
pub const QUIET: Duration = Duration::from_millis(100);
/// The longest an event waits for its update while events keep coming.
pub const MAX_DELAY: Duration = Duration::from_millis(400);
/// Messages queued for the index thread (events and requests). A burst beyond this is
/// counted as lost and repaired by one walk, so memory stays bounded whatever happens on disk.
pub const QUEUE: usize = 8_192;
/// Changed folders remembered for one update; more than this is cheaper as one walk.
pub const MAX_DIRTY: usize = 2_048;
/// The watch budget when `codebase.max_watches` is 0: half of the user's inotify watches (the
/// other half is left to editors and other tools), at most this many.
pub const AUTO_MAX_WATCHES: usize = 65_536;

/// A message for the index thread.
pub enum Msg {
    /// A file-system event, numbered by the handler.
    Event(notify::Event, u64),
    /// The notifications lapsed (their queue overflowed, or the backend failed): numbered.
    Lost(String, u64),
    /// A query asks for a walk (no notifications, or the first build).
    Walk,
    /// A query waits for the pending changes: apply them now.
    Flush,
    /// The index is gone.
    Stop,
}

/// Shared between the notification handler, the index thread and queries.
pub struct Seq {
    /// Events numbered so far (the handler numbers each one before queueing it).
    pub counted: AtomicU64,
    /// Everything the backend delivered, also what the handler dropped.
    pub received: AtomicU64,
    /// An event could not be queued: the next update must be a walk.
    pub dropped: AtomicBool,
    /// The folder whose events are barriers, once it is watched (see [`Seq::barrier`]).
    pub barrier_dir: std::sync::Mutex<Option<PathBuf>>,
    /// The last barrier number handed out.
    pub barrier_next: AtomicU64,
    /// The highest barrier whose event the handler has seen.
    pub barrier_seen: tokio::sync::watch::Sender<u64>,
}

impl Default for Seq {
    fn default() -> Seq {
        Seq {
            counted: AtomicU64::new(0),
            received: AtomicU64::new(0),
            dropped: AtomicBool::new(false),
            barrier_dir: std::sync::Mutex::new(None),
            barrier_next: AtomicU64::new(0),
            barrier_seen: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Seq {
    /// Waits until every change made before this call has been numbered by the handler
    /// (`false` if that cannot be known: no barrier folder, or it timed out).
    ///
    /// An inotify instance has one queue, in the order things happened, so the event of a
    /// file this creates in the barrier folder comes after the events of every change made
    /// before: once the handler has seen it, `counted` covers them. (A write that returned
    /// has queued its event, but the backend's thread may not have read it yet.) Costs a
    /// create, an unlink and a wake-up of that thread: a fraction of a millisecond.
    pub async fn barrier(&self, timeout: Duration) -> bool {
        let dir = match self.barrier_dir.lock() {
            Ok(d) => d.clone(),
            Err(e) => e.into_inner().clone(),
        };
        let Some(dir) = dir else {
            return false;
        };
        let mut rx = self.barrier_seen.subscribe();
        let n = self.barrier_next.fetch_add(1, Ordering::SeqCst) + 1;
        let file = dir.join(n.to_string());
        if std::fs::File::create(&file).is_err() {
            return false;
        }
        let _ = std::fs::remove_file(&file);
        tokio::time::timeout(timeout, rx.wait_for(|seen| *seen >= n))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// The watches of one workspace, kept by the index thread.
pub struct Watches {
    watcher: notify::RecommendedWatcher,
    root: PathBuf,
    /// Watched folders, relative to the root (`""` is the root).
    dirs: BTreeSet<String>,
    /// At most this many folders are watched.
    budget: usize,
}

/// Why watching had to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveUp(pub String);

impl Watches {
    /// Starts the notification backend. Events go to `tx`, numbered through `seq`; events
    /// about `skip` (the index's own folder, when it lies inside the workspace) are dropped.
    ///
    /// `barrier` is a private folder (in the state directory) for [`Seq::barrier`]: created
    /// and watched here; without it queries cannot be sure that changes just made have been
    /// reported.
    pub fn start(
        root: &Path,
        skip: Option<PathBuf>,
        barrier: PathBuf,
        budget: usize,
        tx: SyncSender<Msg>,
        seq: Arc<Seq>,
    ) -> Result<Watches, String> {
        let shared = Arc::clone(&seq);
        let barrier_dir = barrier.clone();
        let handler = move |res: notify::Result<notify::Event>| {
            seq.received.fetch_add(1, Ordering::Relaxed);
            let msg = match res {
                Ok(ev) => {
                    if let Some(p) = ev.paths.first().filter(|p| p.starts_with(&barrier_dir)) {
                        if let EventKind::Create(_) = ev.kind {
                            let n = p
                                .file_name()
                                .and_then(|n| n.to_str())
                                .and_then(|n| n.parse::<u64>().ok());
                            if let Some(n) = n {
                                seq.barrier_seen.send_if_modified(|seen| {
                                    let newer = n > *seen;
                                    *seen = (*seen).max(n);
                                    newer
                                });
                            }
                        }
                        return;
                    }
                    if !relevant(&ev, skip.as_deref()) {
                        return;
                    }
                    let n = seq.counted.fetch_add(1, Ordering::SeqCst) + 1;
                    Msg::Event(ev, n)
                }
                Err(e) => {
                    let n = seq.counted.fetch_add(1, Ordering::SeqCst) + 1;
                    Msg::Lost(e.to_string(), n)
                }
            };
            if tx.try_send(msg).is_err() {
                seq.dropped.store(true, Ordering::SeqCst);
            }
        };
        // Changes only: opens and closes are what every search (and the index itself) causes,
        // and with them in the mask a full-tree grep got ~60% slower while the index
        // watched (notify 8 could not leave them out; 9 filters them in the kernel).
        let config = notify::Config::default()
            .with_event_kinds(EventKindMask::CORE)
            .with_follow_symlinks(false);
        let mut watcher = notify::RecommendedWatcher::new(handler, config)
            .map_err(|e| format!("file notifications are unavailable: {e}"))?;
        let how =
            WatchPathConfig::new(RecursiveMode::NonRecursive).with_dereference_symlinks(false);
        let watched = std::fs::create_dir_all(&barrier)
            .map_err(notify::Error::io)
            .and_then(|()| watcher.watch_with(&barrier, how));
        match watched {
            Ok(()) => {
                if let Ok(mut d) = shared.barrier_dir.lock() {
                    *d = Some(barrier);
                }
            }
            Err(e) => tracing::warn!(
                folder = %barrier.display(),
                error = %e,
                "codebase index: no barrier folder; a query may miss a change made a moment before it"
            ),
        }
        Ok(Watches {
            watcher,
            root: root.to_path_buf(),
            dirs: BTreeSet::new(),
            budget,
        })
    }

    pub fn len(&self) -> usize {
        self.dirs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    pub fn contains(&self, rel: &str) -> bool {
        self.dirs.contains(rel)
    }

    /// Watches the folder `rel` (no-op when it is watched). A folder that vanished meanwhile
    /// is skipped (its parent's event says so); running out of watches is a [`GiveUp`].
    pub fn add(&mut self, rel: &str) -> Result<(), GiveUp> {
        if self.dirs.contains(rel) {
            return Ok(());
        }
        if self.dirs.len() >= self.budget {
            return Err(GiveUp(format!(
                "the workspace has more than {} folders to watch (codebase.max_watches)",
                self.budget
            )));
        }
        let abs = if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        };
        // A folder swapped for a link since the walk saw it is not followed.
        let how =
            WatchPathConfig::new(RecursiveMode::NonRecursive).with_dereference_symlinks(false);
        match self.watcher.watch_with(&abs, how) {
            Ok(()) => {
                self.dirs.insert(rel.to_string());
                Ok(())
            }
            Err(e) => match e.kind {
                notify::ErrorKind::MaxFilesWatch => Err(GiveUp(format!(
                    "the system's limit on watches (fs.inotify.max_user_watches) was reached \
                     after {} folders",
                    self.dirs.len()
                ))),
                notify::ErrorKind::PathNotFound => Ok(()),
                notify::ErrorKind::Io(ref io) if io.kind() == std::io::ErrorKind::NotFound => {
                    Ok(())
                }
                // A folder that cannot be watched (no permission) cannot be listed either.
                _ => {
                    tracing::debug!(folder = rel, error = %e, "cannot watch a folder");
                    Ok(())
                }
            },
        }
    }

    /// Stops watching `rel` and every watched folder below it.
    pub fn remove_tree(&mut self, rel: &str) {
        let below: Vec<String> = under(&self.dirs, rel).cloned().collect();
        for d in below.iter().map(String::as_str).chain([rel]) {
            if self.dirs.remove(d) {
                let _ = self.watcher.unwatch(&self.root.join(d));
            }
        }
    }

    /// Watched folders directly below `rel`.
    pub fn children(&self, rel: &str) -> Vec<String> {
        under(&self.dirs, rel)
            .filter(|d| !d[prefix_len(rel)..].contains('/'))
            .cloned()
            .collect()
    }

    /// Stops watching every folder at or below `rel` that `keep` does not hold.
    pub fn retain_under(&mut self, rel: &str, keep: &std::collections::HashSet<String>) {
        let drop: Vec<String> = under(&self.dirs, rel)
            .chain(self.dirs.get(rel))
            .filter(|d| !keep.contains(*d))
            .cloned()
            .collect();
        for d in drop {
            self.dirs.remove(&d);
            let _ = self.watcher.unwatch(&self.root.join(&d));
        }
    }
}

/// The length of the key prefix of the entries below `rel` (`"a/b"` → `"a/b/"`).
pub fn prefix_len(rel: &str) -> usize {
    if rel.is_empty() { 0 } else { rel.len() + 1 }
}

/// The entries of a sorted set of relative paths strictly below the folder `rel`.
pub fn under<'a>(
    set: &'a BTreeSet<String>,
    rel: &str,
) -> impl Iterator<Item = &'a String> + use<'a> {
    let prefix = if rel.is_empty() {
        String::new()
    } else {
        format!("{rel}/")
    };
    set.range::<str, _>((
        std::ops::Bound::Included(prefix.as_str()),
        std::ops::Bound::Unbounded,
    ))
    .take_while(move |k| k.starts_with(&prefix))
    // The root's own entry (`""`) is not below it.
    .filter(|k| !k.is_empty())
}

/// Whether an event can matter to the index. Reads (opens, closes without writing; the
/// kernel does not send them, this is for backends that do) are dropped first; so are events
/// about hidden names (never indexed), except ignore files, and about the index's own folder.
fn relevant(ev: &notify::Event, skip: Option<&Path>) -> bool {
    if ev.need_rescan() {
        return true;
    }
    if let EventKind::Access(a) = ev.kind
        && a != AccessKind::Close(AccessMode::Write)
    {
        return false;
    }
    ev.paths.iter().any(|p| {
        if skip.is_some_and(|s| p.starts_with(s)) {
            return false;
        }
        match p.file_name().and_then(|n| n.to_str()) {
            Some(n) if n.starts_with('.') => is_ignore_file(n),
            _ => true,
        }
    })
}

fn is_ignore_file(name: &str) -> bool {
    matches!(name, ".gitignore" | ".ignore") || name == CONTINUE_IGNORE
}

/// What the index thread has gathered since its last update.
#[derive(Default)]
pub struct Batch {
    /// Folders whose entries changed (relative; `""` is the root).
    pub dirs: BTreeSet<String>,
    /// A walk is needed now (asked for, or the notifications lapsed).
    pub walk: bool,
    /// An ignore file changed: a walk is needed, after the debounce like any change (saving
    /// a file is often several events).
    pub ignore_changed: bool,
    /// Why the notifications lapsed, for the log.
    pub lost: Option<String>,
    /// A query waits.
    pub flush: bool,
    /// The highest event number taken.
    pub upto: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Batch {
    /// Takes an event: the folders it names (the parents of its paths) become dirty.
    pub fn event(&mut self, root: &Path, ev: &notify::Event, n: u64) {
        self.upto = self.upto.max(n);
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
        if ev.need_rescan() {
            self.lapse("the system's event queue overflowed".into());
            return;
        }
        if let EventKind::Access(a) = ev.kind
            && a != AccessKind::Close(AccessMode::Write)
        {
            return;
        }
        for p in &ev.paths {
            let Some(rel) = rel_under(root, p) else {
                continue;
            };
            let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if is_ignore_file(name) {
                // What is ignored may have changed anywhere below.
                self.ignore_changed = true;
                continue;
            }
            let parent = rel
                .parent()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            self.dirs.insert(parent);
        }
        if self.dirs.len() > MAX_DIRTY {
            self.walk = true;
        }
    }

    /// Whether the update must be a walk.
    pub fn needs_walk(&self) -> bool {
        self.walk || self.ignore_changed
    }

    /// The notifications lapsed: only a walk can tell what changed.
    pub fn lapse(&mut self, why: String) {
        self.walk = true;
        self.lost.get_or_insert(why);
    }

    /// Whether the update should run now.
    pub fn due(&self, now: Instant) -> bool {
        if self.walk || self.flush {
            return true;
        }
        match (self.first, self.last) {
            (Some(f), Some(l)) => now >= l + QUIET || now >= f + MAX_DELAY,
            _ => false,
        }
    }

    /// How long to wait for more before the update is due (`None`: nothing pending).
    pub fn wait(&self, now: Instant) -> Option<Duration> {
        if self.walk || self.flush {
            return Some(Duration::ZERO);
        }
        let (f, l) = (self.first?, self.last?);
        Some(
            (l + QUIET)
                .min(f + MAX_DELAY)
                .saturating_duration_since(now),
        )
    }
}

/// The watch budget for `configured` (0: automatic).
pub fn budget(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .map_or(AUTO_MAX_WATCHES, |n| (n / 2).clamp(1, AUTO_MAX_WATCHES))
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, Flag, ModifyKind, RemoveKind};

    fn ev(kind: EventKind, paths: &[&str]) -> notify::Event {
        let mut e = notify::Event::new(kind);
        for p in paths {
            e = e.add_path(PathBuf::from(p));
        }
        e
    }

    #[test]
    fn events_name_the_folders_whose_entries_changed() {
        let root = Path::new("/ws");
        let mut b = Batch::default();
        b.event(
            root,
            &ev(EventKind::Create(CreateKind::File), &["/ws/src/a.rs"]),
            1,
        );
        b.event(
            root,
            &ev(EventKind::Remove(RemoveKind::Folder), &["/ws/old"]),
            2,
        );
        b.event(
            root,
            &ev(
                EventKind::Modify(ModifyKind::Any),
                &["/ws/src/x/b.rs", "/elsewhere/c.rs"],
            ),
            3,
        );
        assert_eq!(
            b.dirs.iter().map(String::as_str).collect::<Vec<_>>(),
            ["", "src", "src/x"]
        );
        assert!(!b.walk);
        assert_eq!(b.upto, 3);
        assert!(!b.due(Instant::now()));
        assert!(b.due(Instant::now() + MAX_DELAY));
    }

    #[test]
    fn an_ignore_file_or_a_lapse_means_a_walk() {
        let root = Path::new("/ws");
        let mut b = Batch::default();
        b.event(
            root,
            &ev(EventKind::Modify(ModifyKind::Any), &["/ws/src/.gitignore"]),
            1,
        );
        assert!(b.needs_walk() && !b.walk && !b.due(Instant::now()));
        assert!(b.due(Instant::now() + MAX_DELAY));
        let mut b = Batch::default();
        b.event(
            root,
            &notify::Event::new(EventKind::Other).set_flag(Flag::Rescan),
            1,
        );
        assert!(b.walk && b.lost.is_some());
    }

    #[test]
    fn reads_hidden_names_and_the_index_folder_are_not_events() {
        let skip = Some(Path::new("/ws/state"));
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        let close_read = EventKind::Access(AccessKind::Close(AccessMode::Read));
        let close_write = EventKind::Access(AccessKind::Close(AccessMode::Write));
        let create = EventKind::Create(CreateKind::File);
        assert!(!relevant(&ev(open, &["/ws/a.rs"]), skip));
        assert!(!relevant(&ev(close_read, &["/ws/a.rs"]), skip));
        assert!(relevant(&ev(close_write, &["/ws/a.rs"]), skip));
        assert!(!relevant(&ev(create, &["/ws/.a.rs.swp"]), skip));
        assert!(relevant(&ev(create, &["/ws/.gitignore"]), skip));
        assert!(!relevant(&ev(create, &["/ws/state/index/x"]), skip));
        // A rename from a hidden temporary name to a real one matters.
        assert!(relevant(
            &ev(
                EventKind::Modify(ModifyKind::Any),
                &["/ws/.a.rs.tmp", "/ws/a.rs"]
            ),
            skip
        ));
    }

    #[test]
    fn entries_below_a_folder() {
        let set: BTreeSet<String> = ["a", "a/b", "a/b/c", "ab", "b"].map(String::from).into();
        let got = |rel: &str| under(&set, rel).cloned().collect::<Vec<_>>();
        assert_eq!(got("a"), ["a/b", "a/b/c"]);
        assert_eq!(got(""), ["a", "a/b", "a/b/c", "ab", "b"]);
        let with_root: BTreeSet<String> = ["", "a"].map(String::from).into();
        assert_eq!(under(&with_root, "").collect::<Vec<_>>(), ["a"]);
        assert!(got("b").is_empty());
    }
}
