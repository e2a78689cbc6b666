//! The codebase index: a tantivy (BM25) index of the workspace's chunks, in the state
//! directory, built in the background on first use and refreshed incrementally.
//!
//! A refresh walks the workspace with the search tools' walk (ignore files, hidden files,
//! sensitive files and `tools.search_exclude` are skipped), compares each file's size and
//! modification time with the manifest, confirms a change with a content hash, and re-indexes
//! only files whose content changed (deleted files are removed). Searches use the last
//! committed state, so they answer while a refresh runs; a search waits a bounded time
//! (`codebase.wait_secs`) for a running refresh before answering. The first build commits every
//! few thousand files, so a large repository answers with part of it early.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
use super::words::CodeTokenizer;
pub use crate::config::CodebaseConfig;
use crate::workspace::Workspace;
use crate::workspace::walk::{self, Visibility};

/// Bumped when the schema or the chunking changes: an index of another version is rebuilt.
const VERSION: u32 = 4;
/// Changed files between intermediate commits of a long build.
const COMMIT_EVERY: usize = 2_000;
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
    pub duration: Duration,
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
    running: AtomicBool,
    /// Counts finished refreshes; queries wait on it.
    finished: tokio::sync::watch::Sender<u64>,
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
        let (finished, _) = tokio::sync::watch::channel(0);
        CodeIndex {
            dir,
            ws,
            config,
            inner: Mutex::default(),
            running: AtomicBool::new(false),
            finished,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn status(&self) -> Status {
        let mut s = self.lock().status.clone();
        s.refreshing = self.running.load(Ordering::SeqCst);
        s
    }

    /// Starts a refresh in the background unless one is running. Returns whether it started.
    pub fn start_refresh(self: &Arc<Self>) -> bool {
        if self
            .running
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return false;
        }
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("toolpilot-index".into())
            .spawn(move || {
                let result = me.refresh();
                {
                    let mut inner = me.lock();
                    match result {
                        Ok(stats) => {
                            tracing::info!(
                                indexed = stats.indexed,
                                unchanged = stats.unchanged,
                                removed = stats.removed,
                                ms = stats.duration.as_millis() as u64,
                                "codebase index refreshed"
                            );
                            inner.status.built = true;
                            inner.status.last = Some(stats);
                            inner.status.error = None;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "codebase index refresh failed");
                            inner.status.error = Some(e);
                        }
                    }
                }
                me.running.store(false, Ordering::SeqCst);
                me.finished.send_modify(|n| *n += 1);
            });
        if spawned.is_err() {
            self.running.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Refreshes (starting one if none runs) and waits up to `wait` for it to finish.
    pub async fn refresh_and_wait(self: &Arc<Self>, wait: Duration) {
        let mut rx = self.finished.subscribe();
        let seen = *rx.borrow_and_update();
        self.start_refresh();
        let _ = tokio::time::timeout(wait, async {
            while *rx.borrow() == seen {
                if rx.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
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

    /// One incremental refresh, on the calling thread (the index thread, or a benchmark).
    /// Do not call it while a background refresh may run.
    pub fn refresh(&self) -> Result<RefreshStats, String> {
        let started = Instant::now();
        let open = self.open()?;
        let mut manifest = self.lock().manifest.take().unwrap_or(Manifest {
            version: VERSION,
            files: BTreeMap::new(),
        });
        let result = self.refresh_with(&open, &mut manifest, started);
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
        started: Instant,
    ) -> Result<RefreshStats, String> {
        let ws = &self.ws;
        let mut stats = RefreshStats::default();
        // 1. Walk: what exists now, and which files changed by size or time.
        let b = walk::builder(
            ws,
            &ws.root_path(),
            &self.config.exclude,
            Visibility::Search,
        )?;
        let mut seen: HashSet<String> = HashSet::new();
        let mut todo: Vec<Todo> = Vec::new();
        for entry in b.build().flatten() {
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let Some(rel_path) = ws.rel_of(entry.path()) else {
                continue;
            };
            let rel = rel_path.to_string_lossy().into_owned();
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
            todo.push(Todo {
                old_hash: old.filter(|o| !o.skipped).map(|o| o.hash.clone()),
                rel_path: rel_path.to_path_buf(),
                rel,
                size: meta.len(),
                mtime_ns,
            });
        }
        // 2. Read, hash, parse and chunk the changed files on every core; 3. index them here.
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, 4);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Prepared)>(256);
        let max = self.config.max_file_bytes;
        let mut writer: Option<IndexWriter<TantivyDocument>> = None;
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
                        seen.insert(t.rel.clone());
                        if manifest.files.get(&t.rel).is_some_and(|m| !m.skipped) {
                            let w = self.writer(open, &mut writer)?;
                            w.delete_term(Term::from_field_text(open.fields.path, &t.rel));
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
                        seen.insert(t.rel.clone());
                        continue;
                    }
                    Prepared::Chunks(hash, pieces) => (hash, pieces),
                };
                seen.insert(t.rel.clone());
                let w = self.writer(open, &mut writer)?;
                self.index_file(open, w, &t.rel, &pieces)?;
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
        let gone: Vec<String> = manifest
            .files
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for rel in &gone {
            let w = self.writer(open, &mut writer)?;
            w.delete_term(Term::from_field_text(open.fields.path, rel));
            if manifest.files.remove(rel).is_some_and(|m| !m.skipped) {
                stats.removed += 1;
            }
        }
        if let Some(mut w) = writer {
            w.commit()
                .map_err(|e| io_err("committing the index failed", e))?;
        }
        if stats.indexed + stats.removed + stats.same_content > 0
            || !self.dir.join("manifest.json").exists()
        {
            self.save_manifest(manifest)?;
        }
        open.reader
            .reload()
            .map_err(|e| io_err("cannot reload the index", e))?;
        stats.duration = started.elapsed();
        Ok(stats)
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
