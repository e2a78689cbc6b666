//! Requests passed through to an upstream as they are: `POST /v1/completions` and
//! `POST /v1/embeddings` (Continue's autocomplete and its embeddings). No tools and no loop:
//! the body goes to the same path of the upstream's base URL with the upstream's key, and the
//! answer comes back as the upstream wrote it (its status, content type and bytes, streamed).
//! A failure status becomes an [`UpstreamError`] here, like every other upstream status.

use std::time::Duration;

use bytes::Bytes;

use super::{BodyStream, HttpUpstream, Upstream, UpstreamError, read_capped, status_message};

/// A successful upstream answer, not read yet.
pub struct Forwarded {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: BodyStream,
    /// The longest silence between two pieces of the body (`upstream.idle_timeout_secs`).
    pub idle: Duration,
}

impl Upstream {
    /// `POST {base_url}{path}` with `body`, for the endpoints toolpilot passes through.
    pub async fn forward(&self, path: &str, body: Bytes) -> Result<Forwarded, UpstreamError> {
        match self {
            Upstream::Http(h) => h.forward(path, body).await,
            Upstream::Demo => Err(UpstreamError::Body(format!(
                "the built-in demo model has no /{path}; configure an upstream (--upstream URL)"
            ))),
        }
    }
}

impl HttpUpstream {
    async fn forward(&self, path: &str, body: Bytes) -> Result<Forwarded, UpstreamError> {
        let url = self
            .cfg
            .base_url
            .join(path)
            .map_err(|e| UpstreamError::Body(format!("upstream.url: {e}")))?;
        let send = self
            .request(reqwest::Method::POST, &url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "text/event-stream, application/json",
            )
            .body(body)
            .send();
        let wait = self.cfg.first_byte_timeout.min(self.cfg.total_timeout);
        let response = match tokio::time::timeout(wait, send).await {
            Err(_) => {
                return Err(UpstreamError::Timeout {
                    phase: "start answering",
                    secs: wait.as_secs_f64(),
                });
            }
            Ok(Err(e)) => return Err(self.connect_error(&e)),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = super::retry_after(response.headers());
            let body = read_capped(response, 64 * 1024, self.cfg.idle_timeout).await;
            return Err(UpstreamError::Status {
                status: status.as_u16(),
                message: status_message(status.as_u16(), &body),
                retry_after,
            });
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(Forwarded {
            status: status.as_u16(),
            content_type,
            body: Box::pin(response.bytes_stream()),
            idle: self.cfg.idle_timeout,
        })
    }
}
