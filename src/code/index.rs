//! The codebase index: a tantivy (BM25) index of the workspace's chunks, in the state
//! directory, built in the background on first use and kept current from then on.
//!
//! A walk goes through the workspace with the search tools' walk (ignore files, hidden files,
//! sensitive files and `tools.search_exclude` are skipped), compares each file's size and
//! modification time with the manifest, confirms a change with a content hash, and re-indexes
//! only files whose content changed (deleted files are removed). The first build commits every
//! few thousand files, so a large repository answers with part of it early.
//!
//! After the first build the index is kept current from file-system notifications
//! (`watch`): the folders they name are looked at again, debounced, on the index thread, so a
//! query waits for nothing when nothing changed. When notifications are off
//! (`codebase.watch = false`), unavailable, lapse (the system's queue overflowed), or the
//! workspace has more folders than watches may be used for, a query walks as described above
//! instead (and a lapse is repaired by one walk). Searches use the last committed state, so
//! they answer while the index changes; a query waits a bounded time (`codebase.wait_secs`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tantivy::collector::{Count, TopDocs};
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
    Value,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use super::chunks::chunks;
use super::watch::{self, Batch, GiveUp, Msg, Seq, Watches};
use super::words::CodeTokenizer;
pub use crate::config::CodebaseConfig;
use crate::workspace::Workspace;
use crate::workspace::walk::{self, Visibility};

/// Bumped when the schema or the chunking changes: an index of another version is rebuilt.
const VERSION: u32 = 4;
/// Changed files between intermediate commits of a long build.
const COMMIT_EVERY: usize = 2_000;
/// How long a query waits for its barrier (see [`watch::Seq::barrier`]); it comes in well
/// under a millisecond unless the machine stalls.
const BARRIER_WAIT: Duration = Duration::from_secs(1);
/// The index thread closes its writer (after tantivy's merges) when nothing changed for this
/// long: another process may then write the index (`toolpilot run` on the same workspace).
const WRITER_IDLE: Duration = Duration::from_secs(10);
/// The manifest holds a path, a hash and a few numbers per file: this is millions of files.
const MAX_MANIFEST_BYTES: u64 = 256 << 20;

/// What the manifest remembers of an indexed file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct FileMeta {
    size: u64,
    mtime_ns: u128,
    hash: String,
    chunks: usize,
    /// Binary or unreadable: remembered so an unchanged one is not read again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    skipped: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    version: u32,
    files: BTreeMap<String, FileMeta>,
}

/// What the last refresh did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefreshStats {
    /// Files whose content was (re-)indexed.
    pub indexed: usize,
    /// Files whose size and modification time were unchanged (not read).
    pub unchanged: usize,
    /// Files whose time changed but whose content hash did not (read, not re-indexed).
    pub same_content: usize,
    pub removed: usize,
    /// Skipped: too large, binary or unreadable.
    pub skipped: usize,
    /// The folders an update from notifications looked at; 0 for a walk of everything.
    pub folders: usize,
    pub duration: Duration,
}

/// How the index learns about changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Watching {
    /// Not yet: notifications start with the first build.
    #[default]
    NotStarted,
    /// From file-system notifications, with one watch per folder.
    Active { folders: usize },
    /// Not from notifications (why): every query walks the workspace.
    Off(String),
}

/// The index's state, as a query reports it.
#[derive(Debug, Clone, Default)]
pub struct Status {
    pub files: usize,
    pub chunks: usize,
    /// A build or refresh is running now.
    pub refreshing: bool,
    /// The first complete build has finished.
    pub built: bool,
    pub last: Option<RefreshStats>,
    /// Why the last refresh failed.
    pub error: Option<String>,
    pub watching: Watching,
    /// Walks of the whole workspace so far (the first build included).
    pub walks: u64,
    /// Updates from notifications so far, and the files they re-indexed and removed.
    pub updates: u64,
    pub updated_files: u64,
    pub removed_files: u64,
    /// Queries that found the index current and waited for nothing.
    pub instant_queries: u64,
    /// Notifications received (also those that could not matter).
    pub events: u64,
}

/// One ranked chunk.
#[derive(Debug, Clone)]
pub struct Hit {
    pub path: String,
    pub start: usize,
    pub end: usize,
    pub symbols: Vec<String>,
    pub text: String,
    pub score: f32,
    /// Words of the query found in the chunk's symbols, path or text.
    pub matched: Vec<String>,
    /// The chunk's symbols that contain query words.
    pub matched_symbols: Vec<String>,
    pub in_path: bool,
}

#[derive(Clone, Copy)]
struct Fields {
    path: Field,
    path_words: Field,
    symbols: Field,
    body: Field,
    start: Field,
    end: Field,
}

struct Open {
    index: Index,
    reader: IndexReader,
    fields: Fields,
}

#[derive(Default)]
struct Inner {
    open: Option<Arc<Open>>,
    manifest: Option<Manifest>,
    status: Status,
}

/// The index of one workspace. One per engine; cheap until first used.
pub struct CodeIndex {
    dir: PathBuf,
    ws: Arc<Workspace>,
    pub config: CodebaseConfig,
    inner: Mutex<Inner>,
    /// A build, walk or update is running on the index thread.
    running: AtomicBool,
    /// What the index thread has finished; queries wait on it.
    progress: tokio::sync::watch::Sender<Progress>,
    /// Events numbered by the notification handler (see [`watch::Seq`]).
    seq: Arc<Seq>,
    /// Walks asked for by queries; a walk covers the requests made before it started.
    walk_requests: AtomicU64,
    /// Notifications are active, the first build is done and no walk is pending: a query
    /// needs only the changes already reported, and waits for nothing when there are none.
    live: AtomicBool,
    /// The index thread's queue, once it runs.
    worker: Mutex<Option<SyncSender<Msg>>>,
}

/// What the index thread has done so far.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    /// Passes (walks and updates) finished.
    passes: u64,
    /// Events applied: every event numbered up to this is in the index.
    applied: u64,
    /// Walk requests covered by the last finished walk.
    walked: u64,
}

/// Where a pass looks.
enum Scope {
    /// Everything: a walk of the whole workspace.
    All,
    /// The entries of these folders (relative, `""` is the root), which notifications said
    /// changed; new folders found there are walked whole.
    Folders(BTreeSet<String>),
}

/// The index thread's own state.
#[derive(Default)]
struct Keeper {
    /// The watches, while notifications are used.
    watches: Option<Watches>,
    /// Kept between updates, so tantivy's merges of the small segments updates make can run;
    /// closed after [`WRITER_IDLE`] without a change.
    writer: Option<IndexWriter<TantivyDocument>>,
    /// The index thread saves the manifest after it has told waiting queries the index is
    /// current (it is: the index is committed); a benchmark's refresh saves it at once.
    defer_manifest: bool,
    /// The manifest changed and is not saved yet.
    manifest_unsaved: bool,
}

fn analyzer() -> TextAnalyzer {
    TextAnalyzer::from(CodeTokenizer)
}

/// The analysed words of `text` (as the index stores them), without repeats.
pub fn analyse(text: &str) -> Vec<String> {
    let mut a = analyzer();
    let mut s = a.token_stream(text);
    let mut out: Vec<String> = Vec::new();
    while let Some(t) = s.next() {
        if !out.contains(&t.text) {
            out.push(t.text.clone());
        }
    }
    out
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let words = |stored: bool| {
        let o = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("code")
                .set_index_option(IndexRecordOption::WithFreqs),
        );
        if stored { o.set_stored() } else { o }
    };
    let fields = Fields {
        path: b.add_text_field("path", STRING | STORED),
        path_words: b.add_text_field("path_words", words(false)),
        symbols: b.add_text_field("symbols", words(true)),
        body: b.add_text_field("body", words(true)),
        start: b.add_u64_field("start", STORED | INDEXED),
        end: b.add_u64_field("end", STORED),
    };
    (b.build(), fields)
}

fn io_err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl CodeIndex {
    /// The index of `ws`, kept in `dir` (created on first use).
    pub fn new(dir: PathBuf, ws: Arc<Workspace>, config: CodebaseConfig) -> CodeIndex {
        let (progress, _) = tokio::sync::watch::channel(Progress::default());
        let watching = if config.watch {
            Watching::NotStarted
        } else {
            Watching::Off("turned off (codebase.watch = false)".into())
        };
        CodeIndex {
            dir,
            ws,
            config,
            inner: Mutex::new(Inner {
                status: Status {
                    watching,
                    ..Status::default()
                },
                ..Inner::default()
            }),
            running: AtomicBool::new(false),
            progress,
            seq: Arc::default(),
            walk_requests: AtomicU64::new(0),
            live: AtomicBool::new(false),
            worker: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn status(&self) -> Status {
        let mut s = self.lock().status.clone();
        s.refreshing = self.running.load(Ordering::SeqCst);
        s.events = self.seq.received.load(Ordering::Relaxed);
        s
    }

    /// Brings the index up to date for a query, waiting at most `wait`.
    ///
    /// With notifications active and the first build done, only the changes already reported
    /// are applied (at once, without the debounce), and when there are none the query waits
    /// for nothing. Otherwise it waits for the running build or walk, or asks for a walk and
    /// waits for it (the fallback: no notifications, or they lapsed).
    pub async fn catch_up(self: &Arc<Self>, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        let mut rx = self.progress.subscribe();
        let mut waited_for_pass = false;
        loop {
            if self.live.load(Ordering::SeqCst) {
                // Changes made before this query may not have been reported yet.
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                self.seq.barrier(left.min(BARRIER_WAIT)).await;
                let target = self.seq.counted.load(Ordering::SeqCst);
                if rx.borrow().applied >= target {
                    if !waited_for_pass {
                        self.lock().status.instant_queries += 1;
                    }
                    return;
                }
                if !self.send(Msg::Flush) {
                    return;
                }
                let _ =
                    tokio::time::timeout_at(deadline, rx.wait_for(|p| p.applied >= target)).await;
                return;
            }
            if waited_for_pass {
                return;
            }
            let seen = rx.borrow_and_update().passes;
            if self.running.load(Ordering::SeqCst) {
                // The first build or a walk is running: what it finds is what this query gets.
                waited_for_pass = true;
                if tokio::time::timeout_at(deadline, rx.wait_for(|p| p.passes > seen))
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
            let want = self.walk_requests.fetch_add(1, Ordering::SeqCst) + 1;
            if !self.send(Msg::Walk) {
                return;
            }
            let _ = tokio::time::timeout_at(deadline, rx.wait_for(|p| p.walked >= want)).await;
            return;
        }
    }

    /// Sends `msg` to the index thread, starting the thread on first use. `false` if it
    /// cannot run. A full queue drops the message: the thread is busy and looks at the
    /// pending requests after its pass anyway.
    fn send(self: &Arc<Self>, msg: Msg) -> bool {
        let mut worker = self.worker.lock().unwrap_or_else(|e| e.into_inner());
        if worker.is_none() {
            let (tx, rx) = std::sync::mpsc::sync_channel(watch::QUEUE);
            let weak = Arc::downgrade(self);
            let for_watches = tx.clone();
            let spawned = std::thread::Builder::new()
                .name("toolpilot-index".into())
                .spawn(move || keep(weak, rx, for_watches));
            if let Err(e) = spawned {
                let e = format!("cannot start the index thread: {e}");
                tracing::warn!(error = %e, "codebase index");
                self.lock().status.error = Some(e);
                return false;
            }
            *worker = Some(tx);
        }
        match worker.as_ref().map(|tx| tx.try_send(msg)) {
            Some(Ok(())) | Some(Err(TrySendError::Full(_))) => true,
            Some(Err(TrySendError::Disconnected(_))) | None => false,
        }
    }

    /// One pass of the index thread: a walk (the first build, a walk a query asked for,
    /// lapsed notifications) or an update of the folders notifications named.
    fn pass(&self, keeper: &mut Keeper, batch: Batch, for_watches: &SyncSender<Msg>) {
        self.running.store(true, Ordering::SeqCst);
        let built = self.lock().status.built;
        let walk = batch.needs_walk() || !built || keeper.watches.is_none();
        // Everything numbered or asked for before the walk starts is covered by it.
        let counted = self.seq.counted.load(Ordering::SeqCst);
        let requests = self.walk_requests.load(Ordering::SeqCst);
        if let Some(why) = &batch.lost {
            tracing::warn!(reason = %why, "codebase index: file notifications lapsed; walking the workspace");
        }
        if walk && keeper.watches.is_none() && self.config.watch {
            self.start_watching(keeper, for_watches);
        }
        let result = if walk {
            self.run(keeper, Scope::All).map(Some)
        } else if batch.dirs.is_empty() {
            Ok(None)
        } else {
            self.run(keeper, Scope::Folders(batch.dirs)).map(Some)
        };
        let live;
        {
            let mut inner = self.lock();
            let s = &mut inner.status;
            match result {
                Ok(Some(stats)) => {
                    if stats.folders == 0 {
                        s.walks += 1;
                        tracing::info!(
                            indexed = stats.indexed,
                            unchanged = stats.unchanged,
                            removed = stats.removed,
                            ms = stats.duration.as_millis() as u64,
                            "codebase index walked"
                        );
                    } else {
                        s.updates += 1;
                        s.updated_files += stats.indexed as u64;
                        s.removed_files += stats.removed as u64;
                        tracing::debug!(
                            folders = stats.folders,
                            indexed = stats.indexed,
                            removed = stats.removed,
                            ms = stats.duration.as_millis() as u64,
                            "codebase index updated"
                        );
                    }
                    s.built = true;
                    s.last = Some(stats);
                    s.error = None;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "codebase index refresh failed");
                    s.error = Some(e);
                }
            }
            if let Some(w) = &keeper.watches {
                s.watching = Watching::Active { folders: w.len() };
            }
            live = keeper.watches.is_some() && s.built;
        }
        self.live.store(live, Ordering::SeqCst);
        self.running.store(false, Ordering::SeqCst);
        self.progress.send_modify(|p| {
            p.passes += 1;
            p.applied = p.applied.max(batch.upto);
            if walk {
                p.applied = p.applied.max(counted);
                p.walked = p.walked.max(requests);
            }
        });
        if std::mem::take(&mut keeper.manifest_unsaved) {
            // Out of the lock while it is written (tens of ms for a large tree); nothing but
            // this thread uses it.
            let manifest = self.lock().manifest.take();
            if let Some(m) = manifest {
                let saved = self.save_manifest(&m);
                self.lock().manifest = Some(m);
                if let Err(e) = saved {
                    tracing::warn!(error = %e, "codebase index");
                    self.lock().status.error = Some(e);
                }
            }
        }
    }

    /// Starts the notification backend before a walk (which adds the watches), or records why
    /// there are none.
    fn start_watching(&self, keeper: &mut Keeper, for_watches: &SyncSender<Msg>) {
        if matches!(self.lock().status.watching, Watching::Off(_)) {
            return;
        }
        // The index's own folder, when it lies inside the workspace, must not wake it up.
        let skip = Some(self.dir.clone()).filter(|d| d.starts_with(self.ws.root()));
        match Watches::start(
            self.ws.root(),
            skip,
            self.barrier_dir(),
            watch::budget(self.config.max_watches),
            for_watches.clone(),
            Arc::clone(&self.seq),
        ) {
            Ok(w) => keeper.watches = Some(w),
            Err(e) => self.give_up(keeper, e),
        }
    }

    /// The private folder of [`Seq::barrier`]: beside the index, not in it (tantivy's files
    /// change on every commit).
    fn barrier_dir(&self) -> PathBuf {
        let mut name = self.dir.file_name().unwrap_or_default().to_os_string();
        name.push("-barrier");
        self.dir.with_file_name(name)
    }

    /// Notifications are not (or no longer) used: every query walks from now on.
    fn give_up(&self, keeper: &mut Keeper, why: String) {
        // Dropping the watcher removes every watch, leaving them to other programs.
        keeper.watches = None;
        if let Ok(mut d) = self.seq.barrier_dir.lock() {
            *d = None;
        }
        tracing::warn!(
            reason = %why,
            "codebase index: no file notifications; each codebase query walks the workspace"
        );
        self.live.store(false, Ordering::SeqCst);
        self.lock().status.watching = Watching::Off(why);
    }

    /// Opens (or creates) the index on disk; an index of another version is deleted first.
    fn open(&self) -> Result<Arc<Open>, String> {
        if let Some(o) = &self.lock().open {
            return Ok(Arc::clone(o));
        }
        let manifest_path = self.dir.join("manifest.json");
        // A manifest that cannot be read (or is larger than any real one) is a damaged index:
        // it is rebuilt.
        let manifest: Option<Manifest> = crate::bounded::read_file(
            &manifest_path,
            MAX_MANIFEST_BYTES,
            crate::bounded::Links::Refuse,
        )
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
        let mut manifest = manifest.filter(|m| m.version == VERSION);
        if manifest.is_none() {
            // No manifest, or another version: start from an empty folder.
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        let (index, fields) = match self.open_index() {
            Ok(i) => i,
            Err(e) if manifest.is_some() => {
                // A damaged index is rebuilt rather than failing every query.
                tracing::warn!(error = %e, "the codebase index cannot be opened; rebuilding it");
                manifest = None;
                let _ = std::fs::remove_dir_all(&self.dir);
                self.open_index()?
            }
            Err(e) => return Err(e),
        };
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| io_err("cannot read the index", e))?;
        let open = Arc::new(Open {
            index,
            reader,
            fields,
        });
        let mut inner = self.lock();
        let m = manifest.unwrap_or(Manifest {
            version: VERSION,
            files: BTreeMap::new(),
        });
        inner.status.files = m.files.values().filter(|f| !f.skipped).count();
        inner.status.chunks = m.files.values().map(|f| f.chunks).sum();
        inner.status.built = !m.files.is_empty();
        inner.manifest = Some(m);
        inner.open = Some(Arc::clone(&open));
        Ok(open)
    }

    fn open_index(&self) -> Result<(Index, Fields), String> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| io_err(&format!("cannot create {}", self.dir.display()), e))?;
        let (schema, fields) = schema();
        let directory = tantivy::directory::MmapDirectory::open(&self.dir)
            .map_err(|e| io_err("cannot open the index folder", e))?;
        let index = Index::open_or_create(directory, schema)
            .map_err(|e| io_err("cannot open the index", e))?;
        index.tokenizers().register("code", analyzer());
        Ok((index, fields))
    }

    /// One walk of the whole workspace, on the calling thread (a benchmark, before any query
    /// has started the index thread; it would hold the index's writer).
    pub fn refresh(&self) -> Result<RefreshStats, String> {
        self.run(&mut Keeper::default(), Scope::All)
    }

    fn run(&self, keeper: &mut Keeper, scope: Scope) -> Result<RefreshStats, String> {
        let started = Instant::now();
        let open = self.open()?;
        let mut manifest = self.lock().manifest.take().unwrap_or(Manifest {
            version: VERSION,
            files: BTreeMap::new(),
        });
        let result = self.refresh_with(&open, &mut manifest, keeper, scope, started);
        {
            let mut inner = self.lock();
            inner.status.files = manifest.files.values().filter(|f| !f.skipped).count();
            inner.status.chunks = manifest.files.values().map(|f| f.chunks).sum();
            inner.manifest = Some(manifest);
        }
        result
    }

    fn refresh_with(
        &self,
        open: &Open,
        manifest: &mut Manifest,
        keeper: &mut Keeper,
        scope: Scope,
        started: Instant,
    ) -> Result<RefreshStats, String> {
        let ws = &self.ws;
        // 1. Look: which files changed by size or time, and which are gone.
        let mut scan = Scan::default();
        match scope {
            Scope::All => self.scan_all(manifest, keeper, &mut scan)?,
            Scope::Folders(dirs) => {
                scan.stats.folders = dirs.len();
                if !self.scan_folders(manifest, keeper, &dirs, &mut scan)? {
                    // Watching stopped on the way: what it did not look at needs a walk.
                    scan = Scan::default();
                    self.scan_all(manifest, keeper, &mut scan)?;
                }
            }
        }
        let scan_at = started.elapsed();
        let Scan {
            mut stats,
            todo,
            gone,
        } = scan;
        // 2. Read, hash, parse and chunk the changed files on every core; 3. index them here.
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, 4)
            .min(todo.len().max(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Prepared)>(256);
        let max = self.config.max_file_bytes;
        let mut changed = false;
        let writer = &mut keeper.writer;
        let result = std::thread::scope(|scope| -> Result<(), String> {
            for _ in 0..workers {
                let tx = tx.clone();
                let (todo, next) = (&todo, &next);
                scope.spawn(move || {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(t) = todo.get(i) else { break };
                        if tx.send((i, prepare(ws, t, max))).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            let mut pending = 0usize;
            let mut saved_at = Instant::now();
            for (i, prepared) in rx {
                let t = &todo[i];
                let (hash, pieces) = match prepared {
                    Prepared::Skip => {
                        stats.skipped += 1;
                        if manifest.files.get(&t.rel).is_some_and(|m| !m.skipped) {
                            let w = self.writer(open, writer)?;
                            w.delete_term(Term::from_field_text(open.fields.path, &t.rel));
                            changed = true;
                        }
                        manifest.files.insert(
                            t.rel.clone(),
                            FileMeta {
                                size: t.size,
                                mtime_ns: t.mtime_ns,
                                hash: String::new(),
                                chunks: 0,
                                skipped: true,
                            },
                        );
                        continue;
                    }
                    Prepared::Same => {
                        if let Some(old) = manifest.files.get_mut(&t.rel) {
                            old.size = t.size;
                            old.mtime_ns = t.mtime_ns;
                        }
                        stats.same_content += 1;
                        continue;
                    }
                    Prepared::Chunks(hash, pieces) => (hash, pieces),
                };
                let w = self.writer(open, writer)?;
                self.index_file(open, w, &t.rel, &pieces)?;
                changed = true;
                manifest.files.insert(
                    t.rel.clone(),
                    FileMeta {
                        size: t.size,
                        mtime_ns: t.mtime_ns,
                        hash,
                        chunks: pieces.len(),
                        skipped: false,
                    },
                );
                stats.indexed += 1;
                pending += 1;
                if pending >= COMMIT_EVERY
                    || (pending > 0 && saved_at.elapsed() > Duration::from_secs(10))
                {
                    // Long builds become searchable part by part.
                    w.commit()
                        .map_err(|e| io_err("committing the index failed", e))?;
                    self.save_manifest(manifest)?;
                    let _ = open.reader.reload();
                    let mut inner = self.lock();
                    inner.status.files = manifest.files.values().filter(|f| !f.skipped).count();
                    inner.status.chunks = manifest.files.values().map(|f| f.chunks).sum();
                    pending = 0;
                    saved_at = Instant::now();
                }
            }
            Ok(())
        });
        result?;
        // 4. Files that are gone (deleted, now ignored, now too large or binary).
        for rel in &gone {
            let w = self.writer(open, writer)?;
            w.delete_term(Term::from_field_text(open.fields.path, rel));
            changed = true;
            if manifest.files.remove(rel).is_some_and(|m| !m.skipped) {
                stats.removed += 1;
            }
        }
        let indexed_at = started.elapsed();
        if changed {
            if let Some(w) = writer.as_mut() {
                w.commit()
                    .map_err(|e| io_err("committing the index failed", e))?;
            }
            // Searchable from here on.
            open.reader
                .reload()
                .map_err(|e| io_err("cannot reload the index", e))?;
        }
        let committed_at = started.elapsed();
        // The manifest is saved with every commit: an index ahead of its manifest could keep
        // the chunks of a file whose content went back to what the manifest remembers.
        if changed || stats.same_content > 0 || !self.dir.join("manifest.json").exists() {
            if keeper.defer_manifest {
                keeper.manifest_unsaved = true;
            } else {
                self.save_manifest(manifest)?;
            }
        }
        stats.duration = started.elapsed();
        tracing::debug!(
            scan_ms = scan_at.as_secs_f64() * 1e3,
            index_ms = (indexed_at - scan_at).as_secs_f64() * 1e3,
            commit_ms = (committed_at - indexed_at).as_secs_f64() * 1e3,
            manifest_ms = (stats.duration - committed_at).as_secs_f64() * 1e3,
            "codebase index pass"
        );
        Ok(stats)
    }

    /// Walks the whole workspace: every file is looked at, every folder watched (while
    /// notifications are used), watches of folders that are gone are removed.
    fn scan_all(
        &self,
        manifest: &Manifest,
        keeper: &mut Keeper,
        scan: &mut Scan,
    ) -> Result<(), String> {
        let mut seen = HashSet::new();
        let mut folders = HashSet::new();
        self.scan_tree("", None, manifest, keeper, scan, &mut seen, &mut folders)?;
        scan.gone.extend(
            manifest
                .files
                .keys()
                .filter(|k| !seen.contains(*k))
                .cloned(),
        );
        if let Some(w) = keeper.watches.as_mut() {
            w.retain_under("", &folders);
        }
        Ok(())
    }

    /// Looks again at the entries of the folders notifications named. New folders found there
    /// are walked whole (and watched); folders that are gone take their files with them.
    /// `false` if watching stopped on the way (then a walk must follow).
    fn scan_folders(
        &self,
        manifest: &Manifest,
        keeper: &mut Keeper,
        dirs: &BTreeSet<String>,
        scan: &mut Scan,
    ) -> Result<bool, String> {
        let mut gone_dirs: Vec<&str> = Vec::new();
        let mut new_dirs: Vec<String> = Vec::new();
        for d in dirs {
            // Sorted, so a folder comes after its parent: below a gone folder, all is gone.
            if gone_dirs.iter().any(|g| within(d, g)) {
                continue;
            }
            let Some(watches) = keeper.watches.as_mut() else {
                return Ok(false);
            };
            let is_dir = std::fs::symlink_metadata(self.ws.root().join(d))
                .is_ok_and(|m| m.file_type().is_dir());
            if !is_dir {
                // Deleted, moved away, or replaced by a link (never followed).
                scan.gone.extend(under_map(&manifest.files, d).cloned());
                watches.remove_tree(d);
                gone_dirs.push(d);
                continue;
            }
            if !watches.contains(d) {
                // Not a folder the walk yields (events of the root's parent, or a folder
                // dropped since): nothing of it is indexed.
                continue;
            }
            let mut seen = HashSet::new();
            let mut folders = HashSet::new();
            self.scan_tree(d, Some(1), manifest, keeper, scan, &mut seen, &mut folders)?;
            folders.remove(d.as_str());
            let Some(watches) = keeper.watches.as_mut() else {
                return Ok(false);
            };
            new_dirs.extend(folders.iter().filter(|f| !watches.contains(f)).cloned());
            for entry in entries(&manifest.files, d) {
                match entry {
                    Entry::File(k) if !seen.contains(k) => scan.gone.push(k.clone()),
                    Entry::Folder(f) if !folders.contains(f) => {
                        scan.gone.extend(under_map(&manifest.files, f).cloned());
                    }
                    _ => {}
                }
            }
            for c in watches.children(d) {
                if !folders.contains(&c) {
                    watches.remove_tree(&c);
                }
            }
        }
        for n in new_dirs {
            let mut seen = HashSet::new();
            let mut folders = HashSet::new();
            self.scan_tree(&n, None, manifest, keeper, scan, &mut seen, &mut folders)?;
            if keeper.watches.is_none() {
                return Ok(false);
            }
            scan.gone.extend(
                under_map(&manifest.files, &n)
                    .filter(|k| !seen.contains(*k))
                    .cloned(),
            );
        }
        Ok(true)
    }

    /// Walks from the folder `start` (relative) down to `depth` levels (all: `None`) with the
    /// search walk's rules: files into `scan` (and `seen`), folders into `folders` and, while
    /// notifications are used, watched before their entries are read.
    #[allow(clippy::too_many_arguments)]
    fn scan_tree(
        &self,
        start: &str,
        depth: Option<usize>,
        manifest: &Manifest,
        keeper: &mut Keeper,
        scan: &mut Scan,
        seen: &mut HashSet<String>,
        folders: &mut HashSet<String>,
    ) -> Result<(), String> {
        let ws = &self.ws;
        let Some(start_path) = ws.walked(&ws.root().join(start)) else {
            return Ok(());
        };
        let mut b = walk::builder(ws, &start_path, &self.config.exclude, Visibility::Search)?;
        b.max_depth(depth);
        for entry in b.build().flatten() {
            let Some(file_type) = entry.file_type() else {
                continue;
            };
            let Some(rel_path) = ws.rel_of(entry.path()) else {
                continue;
            };
            if file_type.is_dir() {
                let rel = rel_path.to_string_lossy().into_owned();
                // The walk yields a folder before it reads its entries, so a change made
                // while it is read is either in the listing or in an event (or both). Folders
                // at the depth limit are not read here, so not watched either: that they are
                // not is how an update recognises a new folder.
                let read = depth.is_none_or(|d| entry.depth() < d);
                if let Some(w) = keeper.watches.as_mut().filter(|_| read)
                    && let Err(GiveUp(why)) = w.add(&rel)
                {
                    self.give_up(keeper, why);
                }
                folders.insert(rel);
                continue;
            }
            if !file_type.is_file() {
                continue;
            }
            let rel = rel_path.to_string_lossy().into_owned();
            let stats = &mut scan.stats;
            let Ok(meta) = entry.metadata() else {
                stats.skipped += 1;
                continue;
            };
            if meta.len() > self.config.max_file_bytes {
                stats.skipped += 1;
                continue;
            }
            let mtime_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            let old = manifest.files.get(&rel);
            if let Some(o) = old.filter(|o| o.size == meta.len() && o.mtime_ns == mtime_ns) {
                if o.skipped {
                    stats.skipped += 1;
                } else {
                    stats.unchanged += 1;
                }
                seen.insert(rel);
                continue;
            }
            scan.todo.push(Todo {
                old_hash: old.filter(|o| !o.skipped).map(|o| o.hash.clone()),
                rel_path: rel_path.to_path_buf(),
                rel: rel.clone(),
                size: meta.len(),
                mtime_ns,
            });
            seen.insert(rel);
        }
        Ok(())
    }
    /// The writer of this refresh, opened on first need.
    fn writer<'w>(
        &self,
        open: &Open,
        writer: &'w mut Option<IndexWriter<TantivyDocument>>,
    ) -> Result<&'w mut IndexWriter<TantivyDocument>, String> {
        if writer.is_none() {
            *writer = Some(open.index.writer_with_num_threads(1, 64_000_000).map_err(|e| {
                io_err(
                    "cannot write the index (is another toolpilot using this state directory?)",
                    e,
                )
            })?);
        }
        writer
            .as_mut()
            .ok_or_else(|| "the index writer is gone".to_string())
    }

    /// Replaces a file's chunks.
    fn index_file(
        &self,
        open: &Open,
        w: &mut IndexWriter<TantivyDocument>,
        rel: &str,
        pieces: &[super::chunks::Chunk],
    ) -> Result<(), String> {
        let f = open.fields;
        w.delete_term(Term::from_field_text(f.path, rel));
        let path_words = rel.replace(['/', '.', '\\'], " ");
        for c in pieces {
            let mut doc = TantivyDocument::default();
            doc.add_text(f.path, rel);
            doc.add_text(f.path_words, &path_words);
            doc.add_text(f.symbols, c.symbols.join("\n"));
            doc.add_text(f.body, &c.text);
            doc.add_u64(f.start, c.start as u64);
            doc.add_u64(f.end, c.end as u64);
            w.add_document(doc)
                .map_err(|e| io_err("indexing failed", e))?;
        }
        Ok(())
    }

    fn save_manifest(&self, m: &Manifest) -> Result<(), String> {
        let bytes = serde_json::to_vec(m).map_err(|e| io_err("manifest", e))?;
        crate::private_file::write(&self.dir.join("manifest.json"), &bytes)
            .map_err(|e| io_err("cannot save the index manifest", e))
    }

    /// The best chunks for `query`: BM25 over symbols (×3), path words (×2) and text, at most
    /// `candidates` hits, at most two per file. `None` when nothing has been indexed yet.
    /// Also returns how many chunks matched at all.
    pub fn search(
        &self,
        query: &str,
        candidates: usize,
    ) -> Result<Option<(Vec<Hit>, usize)>, String> {
        let open = match self.lock().open.clone() {
            Some(o) => o,
            None => return Ok(None),
        };
        let terms = analyse(query);
        if terms.is_empty() {
            return Ok(Some((Vec::new(), 0)));
        }
        let mut shown: Vec<(String, Vec<String>)> = Vec::new();
        for (w, _, _) in super::words::words(query) {
            let forms = analyse(&w);
            if !forms.is_empty() && !shown.iter().any(|(x, _)| *x == w) {
                shown.push((w, forms));
            }
        }
        let f = open.fields;
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for (field, boost) in [(f.symbols, 3.0f32), (f.path_words, 2.0), (f.body, 1.0)] {
            for t in &terms {
                let q = TermQuery::new(
                    Term::from_field_text(field, t),
                    IndexRecordOption::WithFreqs,
                );
                clauses.push((Occur::Should, Box::new(BoostQuery::new(Box::new(q), boost))));
            }
        }
        let query = BooleanQuery::new(clauses);
        let searcher = open.reader.searcher();
        if searcher.num_docs() == 0 {
            return Ok(if self.lock().status.built {
                Some((Vec::new(), 0))
            } else {
                None
            });
        }
        let (top, total) = searcher
            .search(&query, &(TopDocs::with_limit(candidates * 3 + 10), Count))
            .map_err(|e| io_err("search failed", e))?;
        let mut all = Vec::new();
        for (score, addr) in top {
            let doc: TantivyDocument = searcher
                .doc(addr)
                .map_err(|e| io_err("reading a result failed", e))?;
            let text_of = |field: Field| {
                doc.get_first(field)
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            };
            let path = text_of(f.path);
            let symbols_text = text_of(f.symbols);
            let body = text_of(f.body);
            let sym_words = analyse(&symbols_text);
            let path_words = analyse(&path.replace(['/', '.'], " "));
            let body_words = analyse(&body);
            let has = |t: &String| {
                sym_words.contains(t) || path_words.contains(t) || body_words.contains(t)
            };
            // Lucene's classic coordination factor: a chunk that has more of the query's
            // words ranks above one that repeats fewer of them in less text.
            let coord = terms.iter().filter(|t| has(t)).count() as f32 / terms.len() as f32;
            // The query's own words (not their stems) are what the model is shown.
            let matched: Vec<String> = shown
                .iter()
                .filter(|(_, forms)| forms.iter().any(has))
                .map(|(w, _)| w.clone())
                .collect();
            all.push(Hit {
                matched_symbols: symbols_text
                    .lines()
                    .filter(|sym| analyse(sym).iter().any(|w| terms.contains(w)))
                    .map(str::to_string)
                    .collect(),
                in_path: terms.iter().any(|t| path_words.contains(t)),
                path,
                start: doc.get_first(f.start).and_then(|v| v.as_u64()).unwrap_or(1) as usize,
                end: doc.get_first(f.end).and_then(|v| v.as_u64()).unwrap_or(1) as usize,
                symbols: symbols_text.lines().map(str::to_string).collect(),
                text: body,
                score: score * coord,
                matched,
            });
        }
        // Ties broken by path and line, so equal scores always come out in one order.
        all.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.path.cmp(&b.path))
                .then_with(|| a.start.cmp(&b.start))
        });
        let mut per_file: HashMap<String, usize> = HashMap::new();
        let mut hits = Vec::new();
        for h in all {
            let n = per_file.entry(h.path.clone()).or_default();
            if *n >= 2 {
                continue;
            }
            *n += 1;
            hits.push(h);
            if hits.len() >= candidates {
                break;
            }
        }
        Ok(Some((hits, total)))
    }
}

impl Drop for CodeIndex {
    fn drop(&mut self) {
        // The index thread holds only a weak reference; this wakes it to stop (a full queue
        // wakes it anyway, and it stops when it finds the index gone).
        let worker = self.worker.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = worker.take() {
            let _ = tx.try_send(Msg::Stop);
        }
    }
}

/// The index thread: gathers events and requests, waits out the debounce, runs passes. It
/// owns the watches and the index writer; it ends when the index is dropped.
fn keep(index: Weak<CodeIndex>, rx: Receiver<Msg>, for_watches: SyncSender<Msg>) {
    let mut keeper = Keeper {
        defer_manifest: true,
        ..Keeper::default()
    };
    let mut batch = Batch::default();
    loop {
        let first = match batch.wait(Instant::now()) {
            // Idle with the writer open: let its merges finish and release it after a while,
            // so the index's lock is held only while the workspace changes.
            None if keeper.writer.is_some() => match rx.recv_timeout(WRITER_IDLE) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(w) = keeper.writer.take()
                        && let Err(e) = w.wait_merging_threads()
                    {
                        tracing::warn!(error = %e, "codebase index: merging segments failed");
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => return,
            },
            Some(d) if d.is_zero() => None,
            Some(d) => match rx.recv_timeout(d) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            },
        };
        let Some(me) = index.upgrade() else {
            return;
        };
        for msg in first
            .into_iter()
            .chain(std::iter::from_fn(|| rx.try_recv().ok()))
        {
            match msg {
                Msg::Event(ev, n) => {
                    if keeper.watches.is_some() {
                        batch.event(me.ws.root(), &ev, n);
                    } else {
                        batch.upto = batch.upto.max(n);
                    }
                }
                Msg::Lost(why, n) => {
                    batch.upto = batch.upto.max(n);
                    if keeper.watches.is_some() {
                        batch.lapse(why);
                    }
                }
                Msg::Walk => batch.walk = true,
                Msg::Flush => batch.flush = true,
                Msg::Stop => return,
            }
        }
        if me.seq.dropped.swap(false, Ordering::SeqCst) && keeper.watches.is_some() {
            batch.lapse("more changes came at once than the index's queue holds".into());
        }
        if me.walk_requests.load(Ordering::SeqCst) > me.progress.borrow().walked {
            batch.walk = true;
        }
        if batch.needs_walk() {
            // Until the walk is done, queries wait for it rather than trust the events.
            me.live.store(false, Ordering::SeqCst);
        }
        if batch.due(Instant::now()) {
            me.pass(&mut keeper, std::mem::take(&mut batch), &for_watches);
        }
    }
}

/// What the first step of a pass found.
#[derive(Default)]
struct Scan {
    stats: RefreshStats,
    /// Files whose size or time changed, or that are new.
    todo: Vec<Todo>,
    /// Indexed files that are gone.
    gone: Vec<String>,
}

/// Whether the relative path `p` is the folder `dir` or lies below it.
fn within(p: &str, dir: &str) -> bool {
    dir.is_empty()
        || p == dir
        || (p.len() > dir.len() && p.starts_with(dir) && p.as_bytes()[dir.len()] == b'/')
}

/// An entry of a folder, as the manifest knows it.
enum Entry<'a> {
    /// A file directly in the folder (its key).
    File(&'a String),
    /// A folder with indexed files somewhere below it (its path).
    Folder(&'a str),
}

/// The manifest's entries directly in the folder `rel`: each file, and each subfolder once
/// (skipped over with one lookup: an update of the root of a large tree must not go through
/// every file of it).
fn entries<'a, V>(
    files: &'a BTreeMap<String, V>,
    rel: &str,
) -> impl Iterator<Item = Entry<'a>> + use<'a, V> {
    use std::ops::Bound;
    let prefix = if rel.is_empty() {
        String::new()
    } else {
        format!("{rel}/")
    };
    let mut from: Bound<String> = Bound::Included(prefix.clone());
    std::iter::from_fn(move || {
        let (key, _) = files
            .range::<str, _>((from.as_ref().map(String::as_str), Bound::Unbounded))
            .next()?;
        let rest = key.strip_prefix(prefix.as_str())?;
        match rest.find('/') {
            None => {
                from = Bound::Excluded(key.clone());
                Some(Entry::File(key))
            }
            Some(i) => {
                let folder = &key[..prefix.len() + i];
                // '0' follows '/': the first key after everything below `folder/`.
                from = Bound::Included(format!("{folder}0"));
                Some(Entry::Folder(folder))
            }
        }
    })
}

/// The manifest's files below the folder `rel`.
fn under_map<'a, V>(
    files: &'a BTreeMap<String, V>,
    rel: &str,
) -> impl Iterator<Item = &'a String> + use<'a, V> {
    let prefix = if rel.is_empty() {
        String::new()
    } else {
        format!("{rel}/")
    };
    files
        .range::<str, _>((
            std::ops::Bound::Included(prefix.as_str()),
            std::ops::Bound::Unbounded,
        ))
        .map(|(k, _)| k)
        .take_while(move |k| k.starts_with(&prefix))
}

/// A file whose size or time changed since the last refresh.
struct Todo {
    rel: String,
    rel_path: PathBuf,
    size: u64,
    mtime_ns: u128,
    old_hash: Option<String>,
}

/// What a worker made of a changed file.
enum Prepared {
    /// Binary or unreadable.
    Skip,
    /// The content hash did not change.
    Same,
    /// The new hash and chunks.
    Chunks(String, Vec<super::chunks::Chunk>),
}

fn prepare(ws: &Workspace, t: &Todo, max: u64) -> Prepared {
    let Some(text) = read_text(ws, &t.rel_path, max) else {
        return Prepared::Skip;
    };
    let hash = crate::checkpoint::sha1(text.as_bytes());
    if t.old_hash.as_deref() == Some(hash.as_str()) {
        return Prepared::Same;
    }
    let pieces = chunks(&t.rel_path, &text);
    Prepared::Chunks(hash, pieces)
}

/// A walked file's text (beneath the root), or `None` for binary or unreadable files.
fn read_text(ws: &Workspace, rel: &Path, max: u64) -> Option<String> {
    let f = ws.open_walked(rel).ok()?;
    let mut buf = Vec::new();
    f.take(max + 1).read_to_end(&mut buf).ok()?;
    if buf.len() as u64 > max || buf[..buf.len().min(8192)].contains(&0) {
        return None;
    }
    let text = String::from_utf8_lossy(&buf).replace("\r\n", "\n");
    Some(text)
}

/// The snippet shown for a hit: its lines, at most `max_lines`, with line numbers.
pub fn render_snippet(hit: &Hit, max_lines: usize) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = hit.text.lines().collect();
    let width = (hit.end).to_string().len();
    for (i, l) in lines.iter().take(max_lines).enumerate() {
        let l = if l.len() > 240 {
            &l[..crate::text::floor_char_boundary(l, 240)]
        } else {
            l
        };
        out.push_str(&format!("{:>width$}| {l}\n", hit.start + i));
    }
    if lines.len() > max_lines {
        out.push_str(&format!(
            "{:>width$}| … ({} more lines: read_file_range {} {}-{})\n",
            "",
            lines.len() - max_lines,
            hit.path,
            hit.start + max_lines,
            hit.end
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::Flag;

    /// An index of a workspace with one file, built by a first query (notifications on).
    async fn built() -> (tempfile::TempDir, Arc<CodeIndex>) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.rs"), "fn alpha() {}\n").unwrap();
        let ws = Arc::new(Workspace::open(&root, &[]).unwrap());
        let index = Arc::new(CodeIndex::new(
            tmp.path().join("state/index"),
            ws,
            CodebaseConfig::default(),
        ));
        index.catch_up(Duration::from_secs(30)).await;
        let s = index.status();
        assert!(s.built && s.walks == 1, "{s:?}");
        assert_eq!(s.watching, Watching::Active { folders: 2 });
        (tmp, index)
    }

    /// Queues a message as the notification handler would: numbered first.
    fn inject(index: &Arc<CodeIndex>, msg: impl FnOnce(u64) -> Msg) {
        let n = index.seq.counted.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(index.send(msg(n)));
    }

    #[test]
    fn the_entries_of_a_folder_skip_over_subfolders() {
        let files: BTreeMap<String, ()> = [
            "a.rs",
            "b/c.rs",
            "b/d/e.rs",
            "b/f.rs",
            "b0.rs",
            "b/d0/g.rs",
            "z/y.rs",
        ]
        .into_iter()
        .map(|k| (k.to_string(), ()))
        .collect();
        let list = |rel: &str| -> Vec<String> {
            entries(&files, rel)
                .map(|e| match e {
                    Entry::File(k) => k.clone(),
                    Entry::Folder(f) => format!("{f}/"),
                })
                .collect()
        };
        assert_eq!(list(""), ["a.rs", "b/", "b0.rs", "z/"]);
        assert_eq!(list("b"), ["b/c.rs", "b/d/", "b/d0/", "b/f.rs"]);
        assert_eq!(list("b/d"), ["b/d/e.rs"]);
        assert!(list("q").is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lapsed_notifications_are_repaired_by_one_walk() {
        let (_tmp, index) = built().await;
        // The system's queue overflowed: events were lost, so the next query waits for a walk.
        inject(&index, |n| {
            Msg::Event(
                notify::Event::new(notify::EventKind::Other).set_flag(Flag::Rescan),
                n,
            )
        });
        index.catch_up(Duration::from_secs(30)).await;
        let s = index.status();
        assert_eq!(s.walks, 2, "{s:?}");
        assert_eq!(s.last.as_ref().map(|l| l.folders), Some(0), "{s:?}");
        assert_eq!(s.watching, Watching::Active { folders: 2 });
        // The backend reported an error: the same.
        inject(&index, |n| Msg::Lost("read failed".into(), n));
        index.catch_up(Duration::from_secs(30)).await;
        assert_eq!(index.status().walks, 3);
        // The index's own queue was full: the event that did not fit is repaired the same way.
        index.seq.counted.fetch_add(1, Ordering::SeqCst);
        index.seq.dropped.store(true, Ordering::SeqCst);
        index.catch_up(Duration::from_secs(30)).await;
        assert_eq!(index.status().walks, 4);
        // And then nothing is pending: a query waits for nothing.
        let before = index.status().instant_queries;
        index.catch_up(Duration::from_secs(30)).await;
        let s = index.status();
        assert_eq!((s.walks, s.instant_queries), (4, before + 1), "{s:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_query_right_after_a_change_finds_it() {
        let (tmp, index) = built().await;
        let found = |q: &str| index.search(q, 8).unwrap().map_or(0, |(h, _)| h.len());
        for round in 0..20u8 {
            // Written and queried at once: the barrier, not luck, orders the two.
            let word = format!("zqx{}", (b'a' + round) as char);
            std::fs::write(
                tmp.path().join("ws/src/a.rs"),
                format!("fn {word}_probe() {{}}\n"),
            )
            .unwrap();
            index.catch_up(Duration::from_secs(30)).await;
            assert_eq!(found(&word), 1, "round {round}: {:?}", index.status());
        }
        assert_eq!(index.status().walks, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_changed_ignore_file_means_one_walk() {
        let (tmp, index) = built().await;
        std::fs::write(tmp.path().join("ws/.gitignore"), "src/\n").unwrap();
        index.catch_up(Duration::from_secs(30)).await;
        let s = index.status();
        // One walk, or two when the file's events came in two parts around the debounce.
        assert!(s.walks >= 2 && s.files == 0, "{s:?}");
        // The ignored folder is no longer watched either.
        assert_eq!(s.watching, Watching::Active { folders: 1 });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn moved_folders_stay_watched_under_their_new_name() {
        let (tmp, index) = built().await;
        let ws = tmp.path().join("ws");
        let paths = |q: &str| -> Vec<String> {
            index
                .search(q, 8)
                .unwrap()
                .map(|(h, _)| h.into_iter().map(|h| h.path).collect())
                .unwrap_or_default()
        };
        std::fs::create_dir_all(ws.join("lib/m")).unwrap();
        std::fs::write(ws.join("lib/m/x.rs"), "fn zqxfirst() {}\n").unwrap();
        index.catch_up(Duration::from_secs(30)).await;
        assert_eq!(paths("zqxfirst"), ["lib/m/x.rs"]);
        // Into a folder that sorts after the old parent, then back before it, then within one.
        for (from, to, word) in [
            ("lib/m", "src/m", "zqxsecond"),
            ("src/m", "lib/n", "zqxthird"),
            ("lib/n", "lib/o", "zqxfourth"),
        ] {
            std::fs::rename(ws.join(from), ws.join(to)).unwrap();
            index.catch_up(Duration::from_secs(30)).await;
            assert_eq!(paths("zqxfirst"), [format!("{to}/x.rs")], "{from} -> {to}");
            // The moved folder's own watch still reports changes in it.
            std::fs::write(ws.join(to).join("x.rs"), format!("fn {word}() {{}}\n")).unwrap();
            index.catch_up(Duration::from_secs(30)).await;
            assert_eq!(paths(word), [format!("{to}/x.rs")], "{from} -> {to}");
            std::fs::write(ws.join(to).join("x.rs"), "fn zqxfirst() {}\n").unwrap();
        }
        assert_eq!(index.status().walks, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_replaced_by_a_link_takes_its_files_out() {
        let (tmp, index) = built().await;
        let root = tmp.path().join("ws");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.rs"), "fn beyond() {}\n").unwrap();
        std::fs::remove_dir_all(root.join("src")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("src")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while index.status().removed_files < 1 {
            assert!(Instant::now() < deadline, "{:?}", index.status());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        index.catch_up(Duration::from_secs(30)).await;
        let found = |q: &str| index.search(q, 8).unwrap().map_or(0, |(h, _)| h.len());
        assert_eq!((found("alpha"), found("beyond")), (0, 0));
        let s = index.status();
        assert_eq!(s.walks, 1, "{s:?}");
        assert_eq!(s.watching, Watching::Active { folders: 1 });
    }
}
