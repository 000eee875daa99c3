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
    /// Missing or invalid credentials (401, with `WWW-Authenticate: Bearer`).
    #[error("{message}")]
    Unauthorized { code: &'static str, message: String },
    /// The caller's role may not do this (403).
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    /// The request conflicts with what exists (409).
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// A configured size or count limit of one request was passed (413); the body names the
    /// limit (`limit`, as in `docs/operations.md`) and its value.
    #[error("{message}")]
    TooLarge {
        limit: &'static str,
        value: u64,
        message: String,
    },
    /// A rate or concurrency limit was reached (429); `retry_after` (seconds) becomes a
    /// `Retry-After` header.
    #[error("{message}")]
    TooMany {
        code: &'static str,
        limit: &'static str,
        value: u64,
        message: String,
        retry_after: Option<u64>,
    },
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

    pub fn too_large(limit: &'static str, value: usize, message: impl Into<String>) -> Self {
        ApiError::TooLarge {
            limit,
            value: value as u64,
            message: message.into(),
        }
    }

    /// 413 for a chat message (or correction) over `max_message_bytes`.
    pub fn message_too_large(limit: usize, len: usize) -> Self {
        ApiError::too_large(
            "max_message_bytes",
            limit,
            format!("the message is {len} bytes; at most {limit} are accepted"),
        )
    }

    /// 503 `shutting_down`: the service is stopping and takes no new work.
    pub fn shutting_down() -> Self {
        ApiError::Unavailable("the service is shutting down; retry on another instance".into())
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
            ApiError::Unauthorized { code, .. } => (StatusCode::UNAUTHORIZED, code),
            ApiError::Forbidden { code, .. } => (StatusCode::FORBIDDEN, code),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::PayloadTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
            ApiError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::TooMany { code, .. } => (StatusCode::TOO_MANY_REQUESTS, code),
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
        let mut body = json!({"error": {"code": code, "message": self.to_string()}});
        let named = match &self {
            ApiError::PayloadTooLarge { limit } => Some(("max_body_bytes", *limit as u64)),
            ApiError::TooLarge { limit, value, .. } | ApiError::TooMany { limit, value, .. } => {
                Some((*limit, *value))
            }
            _ => None,
        };
        if let Some((limit, value)) = named {
            body["error"]["limit"] = json!(limit);
            body["error"]["value"] = json!(value);
        }
        let mut resp = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            // RFC 6750: say which scheme to use, and whether a credential was sent but bad.
            let challenge = if code == "missing_credentials" {
                "Bearer realm=\"threadstream\"".to_string()
            } else {
                format!("Bearer realm=\"threadstream\", error=\"invalid_token\", error_description=\"{code}\"")
            };
            if let Ok(v) = axum::http::HeaderValue::from_str(&challenge) {
                resp.headers_mut()
                    .insert(axum::http::header::WWW_AUTHENTICATE, v);
            }
        }
        if let ApiError::TooMany {
            retry_after: Some(secs),
            ..
        } = self
        {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}
