//! The error a client sees: always OpenAI-shaped, with a fitting HTTP status.
//!
//! `ApiError` is the only type that turns into an HTTP error response. Other modules have
//! their own error types (`openai::RequestError`, `upstream::UpstreamError`,
//! `upstream::route::RouteError`) and say nothing about HTTP; the statuses they get are
//! decided here, in their `From` conversions. Internal details are logged, not returned.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::openai::RequestError;
use crate::upstream::UpstreamError;
use crate::upstream::route::RouteError;

/// An error in the OpenAI shape: `{"error":{"message","type","param","code"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `upstream_error`, …
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Whole seconds for a `Retry-After` header (a rate limit passed on).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// A 400 about one request field.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }

    pub fn with_param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
            .with_code("unknown_url")
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "authentication_error", message)
            .with_code("invalid_api_key")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::FORBIDDEN, "permission_error", message)
    }

    /// A run that was stopped on request.
    pub fn cancelled(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::CONFLICT, "invalid_request_error", message)
            .with_code("run_cancelled")
    }

    /// A run ended by the server's shutdown: 503.
    pub fn shutting_down(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
            .with_code("server_shutting_down")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The JSON body, also used for in-stream error events.
    pub fn body(&self) -> serde_json::Value {
        #[derive(Serialize)]
        struct Inner<'a> {
            message: &'a str,
            #[serde(rename = "type")]
            kind: &'a str,
            param: Option<&'a str>,
            code: Option<&'a str>,
        }
        serde_json::json!({
            "error": Inner {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            }
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.status.as_u16())
    }
}

impl std::error::Error for ApiError {}

/// A request body that is not a valid request: 400, naming the field.
impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: e.message,
            kind: "invalid_request_error",
            param: e.param,
            code: e.code,
            retry_after: None,
        }
    }
}

/// The upstream's failure as the client sees it: the upstream's message, with 429, 502 or
/// 504 (or the upstream's own 400, 404, 413 or 422, for a request it rejected).
impl From<&UpstreamError> for ApiError {
    fn from(e: &UpstreamError) -> ApiError {
        let message = e.to_string();
        match e {
            UpstreamError::Status {
                status: 429,
                retry_after,
                ..
            } => {
                // Rounded up: a client that waits what it is told is not refused again.
                let secs = retry_after.map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
                let message = match secs {
                    Some(n) => format!("{message} (the upstream asks to retry after {n} s)"),
                    None => message,
                };
                ApiError {
                    retry_after: secs,
                    ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
                        .with_code("upstream_rate_limited")
                }
            }
            UpstreamError::Status { status, .. } if matches!(*status, 400 | 404 | 413 | 422) => {
                let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY);
                ApiError::new(code, "invalid_request_error", message)
                    .with_code("upstream_rejected_request")
            }
            UpstreamError::Timeout { .. } => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, "upstream_error", message)
                    .with_code("upstream_timeout")
            }
            _ => ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", message)
                .with_code("upstream_error"),
        }
    }
}

/// A model no upstream serves: 400 without a name, 404 for an unknown one.
impl From<RouteError> for ApiError {
    fn from(e: RouteError) -> ApiError {
        let message = e.to_string();
        match e {
            RouteError::NoModel => ApiError::invalid("model", message),
            RouteError::Unknown { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
                    .with_param("model")
                    .with_code("model_not_found")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        let mut response = (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(secs),
            );
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_errors_are_400s_that_name_the_field() {
        let e = ApiError::from(RequestError::invalid(
            "stream",
            "`stream` must be true or false",
        ));
        assert_eq!(
            e,
            ApiError::invalid("stream", "`stream` must be true or false")
        );
        let e = ApiError::from(RequestError::invalid_json("not JSON"));
        assert_eq!(
            (e.status, e.param, e.code),
            (StatusCode::BAD_REQUEST, None, Some("invalid_json"))
        );
    }

    #[test]
    fn upstream_and_route_errors_get_their_statuses() {
        let status = |status: u16| {
            ApiError::from(&UpstreamError::Status {
                status,
                message: "x".into(),
                retry_after: None,
            })
            .status
            .as_u16()
        };
        assert_eq!(
            [
                status(429),
                status(400),
                status(422),
                status(401),
                status(503)
            ],
            [429, 400, 422, 502, 502]
        );
        let timeout = UpstreamError::Timeout {
            phase: "send its first byte",
            secs: 1.0,
        };
        assert_eq!(ApiError::from(&timeout).status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            ApiError::from(RouteError::NoModel).status,
            StatusCode::BAD_REQUEST
        );
        let unknown = ApiError::from(RouteError::Unknown {
            requested: "m".into(),
            routable: vec![],
        });
        assert_eq!(
            (unknown.status, unknown.code),
            (StatusCode::NOT_FOUND, Some("model_not_found"))
        );
    }

    #[test]
    fn body_has_openai_shape() {
        let e = ApiError::invalid("messages", "`messages` is required");
        assert_eq!(
            e.body(),
            serde_json::json!({"error": {"message": "`messages` is required",
                "type": "invalid_request_error", "param": "messages", "code": null}})
        );
    }
}
