//! The API's one error type: every failure becomes an HTTP status and
//! `{"error": {"code", "message"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use threadstream_domain::{RuleClass, ThreadError};
use threadstream_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed input: a bad cursor, a bad id, JSON that does not parse (400).
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// Well-formed input that cannot be accepted (422).
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    #[error("{0}")]
    NotFound(String),
    /// The caller may not see this (403); roles arrive with authentication.
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    /// The request conflicts with what exists (409).
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// A rule of the Thread aggregate was broken; nothing was stored.
    #[error(transparent)]
    Rule(ThreadError),
    /// The store failed or the service is shutting down (503); nothing was stored.
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code,
            message: message.into(),
        }
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::Unprocessable {
            code,
            message: message.into(),
        }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::Unprocessable { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, code),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Forbidden { code, .. } => (StatusCode::FORBIDDEN, code),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::PayloadTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
            ApiError::Rule(e) => (
                match e.class() {
                    RuleClass::Conflict => StatusCode::CONFLICT,
                    RuleClass::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
                    RuleClass::NotFound => StatusCode::NOT_FOUND,
                },
                e.code(),
            ),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Rule(rule) => ApiError::Rule(rule),
            StoreError::Unavailable(m) => ApiError::Unavailable(m),
            StoreError::Closed => ApiError::Unavailable("the service is shutting down".into()),
            StoreError::Corrupt(e) => ApiError::Internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let body = json!({"error": {"code": code, "message": self.to_string()}});
        (status, Json(body)).into_response()
    }
}
