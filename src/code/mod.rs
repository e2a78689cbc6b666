//! Understanding the workspace's code: symbols from a real parser (`symbols`), chunks that
//! follow code structure (`chunks`), identifier-aware words (`words`), the BM25 index
//! (`index`) kept current from file-system notifications (`watch`), optional re-ranking with
//! embeddings, and the repository map.
//!
//! Nothing here makes HTTP calls: embeddings come through [`Embedder`], which the agent
//! implements with the upstream's `/v1/embeddings`.

pub mod chunks;
pub mod index;
pub mod symbols;
pub mod watch;
pub mod words;

use std::future::Future;
use std::pin::Pin;

use index::Hit;

/// The vectors of some texts, in order, or why there are none.
pub type Embedding = Pin<Box<dyn Future<Output = Result<Vec<Vec<f32>>, String>> + Send>>;

/// Turns texts into vectors (the upstream's `/v1/embeddings`). Implemented in `agent`.
pub trait Embedder: Send + Sync {
    fn embed(&self, inputs: Vec<String>) -> Embedding;
}

/// Cosine similarity (0 for a zero vector or different lengths).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// Re-orders BM25 hits by a blend of their normalised BM25 score (30%) and the cosine
/// similarity of their embedding to the query's (70%). `vectors[0]` is the query's, then one
/// per hit in order. Returns the similarities, in the new order.
pub fn rerank(hits: &mut Vec<Hit>, vectors: &[Vec<f32>]) -> Vec<f32> {
    let Some((q, rest)) = vectors.split_first() else {
        return Vec::new();
    };
    let max = hits
        .iter()
        .map(|h| h.score)
        .fold(f32::MIN, f32::max)
        .max(1e-6);
    let mut scored: Vec<(f32, f32, Hit)> = hits
        .drain(..)
        .zip(rest)
        .map(|(h, v)| {
            let sim = cosine(q, v);
            (0.3 * h.score / max + 0.7 * sim, sim, h)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let sims = scored.iter().map(|s| s.1).collect();
    hits.extend(scored.into_iter().map(|s| s.2));
    sims
}

/// The text embedded for a hit: its path, symbols and the start of its text.
pub fn embed_text(hit: &Hit) -> String {
    let body: String = hit.text.chars().take(2000).collect();
    format!("{}\n{}\n{}", hit.path, hit.symbols.join(" "), body)
}
