//! Requests toolpilot passes through without a run: `POST /v1/completions` and
//! `POST /v1/embeddings`. They are routed like chat requests (`--model`, aliases, globs,
//! fallbacks), retried like a round (connection errors, 429, 5xx, with the upstream's
//! backoff), and fail with the same errors; nothing else is done to them.

use bytes::Bytes;
use serde_json::{Map, Value};

use super::Engine;
use super::round::backoff;
use crate::error::ApiError;
use crate::upstream::UpstreamError;
use crate::upstream::forward::Forwarded;

impl Engine {
    /// Sends `body` to `path` of the upstream its `model` routes to, its model name replaced
    /// by the routed one; on an unavailable upstream, to the fallbacks in turn.
    pub async fn forward(
        &self,
        path: &str,
        mut body: Map<String, Value>,
    ) -> Result<Forwarded, ApiError> {
        let requested = self.config.agent.model.clone().or_else(|| {
            body.get("model")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        let first = self.upstreams.route(requested.as_deref())?;
        let mut routes = vec![first.clone()];
        routes.extend(self.upstreams.fallbacks(&first));
        let mut unavailable: Option<UpstreamError> = None;
        for route in routes {
            body.insert("model".into(), Value::from(route.model.as_str()));
            let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
            let (max_retries, base, cap) = route
                .endpoint
                .cfg
                .as_ref()
                .map_or((0, Default::default(), Default::default()), |c| {
                    (c.max_retries, c.retry_base, c.retry_max_wait)
                });
            let mut attempt = 0;
            loop {
                match route.endpoint.upstream.forward(path, bytes.clone()).await {
                    Ok(f) => return Ok(f),
                    Err(e) if e.retryable() && attempt < max_retries => {
                        let wait = backoff(attempt, e.retry_after(), base, cap);
                        tracing::warn!(error = %e, attempt, ?wait, path, "retrying a passed-through request");
                        tokio::time::sleep(wait).await;
                        attempt += 1;
                    }
                    Err(e) if e.is_unavailable() => {
                        tracing::warn!(error = %e, upstream = %route.endpoint.name, path, "upstream unavailable; trying the next fallback");
                        unavailable = Some(e);
                        break;
                    }
                    Err(e) => return Err(ApiError::from(&e)),
                }
            }
        }
        Err(unavailable.map_or_else(
            || ApiError::internal("no upstream to pass the request to"),
            |e| ApiError::from(&e),
        ))
    }
}
