//! `[codebase]`: the code index and its re-ranking.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, err, positive, secs};

/// `[codebase]` configuration.
#[derive(Debug, Clone)]
pub struct CodebaseConfig {
    /// Snippets returned per query.
    pub max_results: usize,
    /// Files larger than this are not indexed.
    pub max_file_bytes: u64,
    /// How long a query waits for a running build or refresh.
    pub wait: Duration,
    /// Model for `/v1/embeddings` re-ranking (none: BM25 only).
    pub embeddings_model: Option<String>,
    /// BM25 candidates re-ranked with embeddings.
    pub rerank_candidates: usize,
    /// Globs skipped in addition to the walk's rules (`tools.search_exclude`).
    pub exclude: Vec<String>,
    /// Keep the index current from file-system notifications (else every query walks).
    pub watch: bool,
    /// At most this many folders are watched (one watch each); 0: half of the system's
    /// `fs.inotify.max_user_watches`, at most 65,536. A workspace with more folders falls
    /// back to walking on every query.
    pub max_watches: usize,
}

impl Default for CodebaseConfig {
    fn default() -> Self {
        CodebaseConfig {
            max_results: 8,
            max_file_bytes: 1024 * 1024,
            wait: Duration::from_secs(3),
            embeddings_model: None,
            rerank_candidates: 30,
            exclude: Vec::new(),
            watch: true,
            max_watches: 0,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct CodebaseFile {
    pub(super) max_results: Option<usize>,
    pub(super) max_file_bytes: Option<u64>,
    pub(super) wait_secs: Option<f64>,
    pub(super) embeddings_model: Option<String>,
    pub(super) rerank_candidates: Option<usize>,
    pub(super) watch: Option<bool>,
    pub(super) max_watches: Option<usize>,
}

/// `exclude` is `tools.search_exclude`, which the index honours too.
pub(super) fn resolve(cf: CodebaseFile, exclude: &[String]) -> Result<CodebaseConfig, ConfigError> {
    let cd = CodebaseConfig::default();
    Ok(CodebaseConfig {
        max_results: positive("codebase.max_results", cf.max_results, cd.max_results)?,
        max_file_bytes: match cf.max_file_bytes {
            Some(0) => return Err(err("codebase.max_file_bytes must be greater than 0")),
            Some(n) => n,
            None => cd.max_file_bytes,
        },
        wait: secs("codebase.wait_secs", cf.wait_secs, cd.wait.as_secs_f64())?,
        embeddings_model: cf.embeddings_model.filter(|m| !m.trim().is_empty()),
        rerank_candidates: positive(
            "codebase.rerank_candidates",
            cf.rerank_candidates,
            cd.rerank_candidates,
        )?,
        exclude: exclude.to_vec(),
        watch: cf.watch.unwrap_or(cd.watch),
        max_watches: cf.max_watches.unwrap_or(cd.max_watches),
    })
}
