//! The error a client sees: always OpenAI-shaped, with a fitting HTTP status.
//!
//! `ApiError` is the only type that turns into an HTTP error response. Other modules have
//! their own error enums and convert into this one at the edge; internal details are logged,
//! not returned.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error in the OpenAI shape: `{"error":{"message","type","param","code"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `upstream_error`, …
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        let mut response = (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
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
    fn body_has_openai_shape() {
        let e = ApiError::invalid("messages", "`messages` is required");
        assert_eq!(
            e.body(),
            serde_json::json!({"error": {"message": "`messages` is required",
                "type": "invalid_request_error", "param": "messages", "code": null}})
        );
    }
}
