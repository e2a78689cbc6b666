//! The upstream behind interfaces the tools define: `ApplyModel` (edits applied by the model)
//! and `Embedder` (`codebase` re-ranking). Tools make no HTTP calls; these do, for them.

use std::time::Duration;

use crate::tools::edit::ApplyModel;
use crate::upstream::accumulate::Accumulator;
use crate::upstream::route::Route;
use crate::upstream::{Hints, RequestBody};

/// Applies `edit_existing_file` changes with the upstream model (an "apply" round).
pub(super) struct UpstreamApply {
    pub(super) route: Route,
}

pub(super) const APPLY_PROMPT: &str = "You apply code edits. You are given a file and changes to it in which \
placeholder comments (such as `// ... existing code ...`) stand for unchanged code. Output the \
complete new file: the original with the changes applied, every unchanged line kept exactly as it \
is, no placeholder comments left. Output only the file, in one fenced code block, and nothing else.";

impl ApplyModel for UpstreamApply {
    fn timeout(&self) -> Duration {
        self.route
            .endpoint
            .cfg
            .as_ref()
            .map_or(Duration::from_secs(1800), |c| c.total_timeout)
    }

    fn apply(
        &self,
        path: String,
        original: String,
        changes: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send>> {
        let route = self.route.clone();
        let model = route.model.clone();
        Box::pin(async move {
            let body = serde_json::json!({
                "model": model,
                "stream": true,
                "temperature": 0,
                "messages": [
                    {"role": "system", "content": APPLY_PROMPT},
                    {"role": "user", "content": format!(
                        "File: {path}\n\n```\n{original}```\n\nChanges:\n\n```\n{changes}```")},
                ],
            });
            let mut stream = route
                .endpoint
                .upstream
                .start(RequestBody::from(body.to_string()), Hints::default())
                .await
                .map_err(|e| e.to_string())?;
            let mut acc = Accumulator::new();
            let mut pieces = Vec::new();
            while let Some((event, data)) = stream.next_data().await.map_err(|e| e.to_string())? {
                acc.push_data(event.as_deref(), &data, &mut pieces)
                    .map_err(|e| e.to_string())?;
                pieces.clear();
                if acc.is_done() {
                    stream.finish(Duration::from_millis(200)).await;
                    break;
                }
            }
            let round = acc.finish().map_err(|e| e.to_string())?;
            Ok(code_block(&round.content))
        })
    }
}

/// Embeddings for `codebase` re-ranking, from the upstream's `/v1/embeddings`.
pub(super) struct UpstreamEmbed {
    pub(super) route: Route,
}

impl crate::code::Embedder for UpstreamEmbed {
    fn embed(&self, inputs: Vec<String>) -> crate::code::Embedding {
        let route = self.route.clone();
        Box::pin(async move {
            route
                .endpoint
                .upstream
                .embeddings(&route.model, &inputs)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// The content of the outermost fenced block of `text`, or all of it.
pub(super) fn code_block(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let first = lines.iter().position(|l| l.trim_start().starts_with("```"));
    let last = lines.iter().rposition(|l| l.trim() == "```");
    match (first, last) {
        (Some(a), Some(b)) if b > a => {
            let mut s = lines[a + 1..b].join("\n");
            s.push('\n');
            s
        }
        _ => text.to_string(),
    }
}
