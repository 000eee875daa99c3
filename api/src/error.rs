//! The API's one error type: every failure becomes an HTTP status and
//! `{"error": {"code", "message"}}`.
//!
//! A 4xx message is written for the client. A 5xx is the server's own failure: its cause (SQL,
//! paths, the driver's words) stays in the log, written once here with a fresh error id, and
//! the client gets a generic message and that id (`errorId`) to quote. `docs/protocol.md`
//! ("Errors") describes the contract.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use threadstream_domain::{ErrorCode, RuleClass, ThreadError};
use threadstream_durable_streams::DurableError;
use threadstream_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed input: a bad cursor, a bad id, JSON that does not parse (400).
    #[error("{message}")]
    BadRequest { code: ErrorCode, message: String },
    /// Well-formed input that cannot be accepted (422).
    #[error("{message}")]
    Unprocessable { code: ErrorCode, message: String },
    #[error("{0}")]
    NotFound(String),
    /// Missing or invalid credentials (401, with `WWW-Authenticate: Bearer`).
    #[error("{message}")]
    Unauthorized { code: ErrorCode, message: String },
    /// The caller's role may not do this (403).
    #[error("{message}")]
    Forbidden { code: ErrorCode, message: String },
    /// The request conflicts with what exists (409).
    #[error("{message}")]
    Conflict { code: ErrorCode, message: String },
    /// The request's idempotency key was answered meanwhile by another execution of it;
    /// nothing was stored. `crate::idempotency` answers with that answer instead.
    #[error("a request with this Idempotency-Key was answered meanwhile; retry it")]
    KeyAnswered,
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
        code: ErrorCode,
        limit: &'static str,
        value: u64,
        message: String,
        retry_after: Option<u64>,
    },
    /// A rule of the Thread aggregate was broken; nothing was stored.
    #[error(transparent)]
    Rule(ThreadError),
    /// The service refuses new work for a reason the client may read (503): it is shutting
    /// down, or a table of this instance is full. The message is sent as is.
    #[error("{0}")]
    Unavailable(String),
    /// The store failed (503); nothing was stored. The client reads only [`STORE_UNAVAILABLE`].
    #[error("the store is unavailable")]
    StoreUnavailable(#[source] StoreError),
    /// A failure of the server's own (500); the client reads only "internal error".
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
}

pub use threadstream_domain::error_code::{ErrorBody, ErrorDetail};

/// What a 503 for a failed store says to the client (then the error id).
const STORE_UNAVAILABLE: &str = "the store is unavailable; retry later";

impl ApiError {
    pub fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
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

    pub fn unprocessable(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError::Unprocessable {
            code,
            message: message.into(),
        }
    }

    fn status_and_code(&self) -> (StatusCode, ErrorCode) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, *code),
            ApiError::Unprocessable { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, *code),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            ApiError::Unauthorized { code, .. } => (StatusCode::UNAUTHORIZED, *code),
            ApiError::Forbidden { code, .. } => (StatusCode::FORBIDDEN, *code),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, *code),
            ApiError::KeyAnswered => (StatusCode::CONFLICT, ErrorCode::IdempotencyKeyInUse),
            ApiError::PayloadTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge)
            }
            ApiError::TooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge)
            }
            ApiError::TooMany { code, .. } => (StatusCode::TOO_MANY_REQUESTS, *code),
            ApiError::Rule(e) => (
                match e.class() {
                    RuleClass::Conflict => StatusCode::CONFLICT,
                    RuleClass::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
                    RuleClass::NotFound => StatusCode::NOT_FOUND,
                },
                e.code(),
            ),
            ApiError::Unavailable(_) | ApiError::StoreUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable)
            }
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Rule(rule) => ApiError::Rule(rule),
            e @ StoreError::Unavailable { .. } => ApiError::StoreUnavailable(e),
            StoreError::Closed => ApiError::Unavailable("the service is shutting down".into()),
            StoreError::KeyAnswered => ApiError::KeyAnswered,
            e @ (StoreError::Corrupt(_) | StoreError::WrongKind { .. }) => {
                ApiError::Internal(Box::new(e))
            }
        }
    }
}

/// Durable Streams' errors (what its protocol does not phrase itself) answer as every other
/// route's: a refused rule, a failed store, malformed input, a caller who may not act.
impl From<DurableError> for ApiError {
    fn from(e: DurableError) -> Self {
        match e {
            DurableError::Refused(rule) => ApiError::Rule(rule),
            DurableError::Store(e) => ApiError::from(e),
            DurableError::BadRequest { code, message } => ApiError::BadRequest { code, message },
            DurableError::NotFound(message) => ApiError::NotFound(message),
            DurableError::Forbidden { code, message } => ApiError::Forbidden { code, message },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let mut body = ErrorBody::new(code, self.to_string());
        let detail = &mut body.error;
        if status.is_server_error() {
            // The one place a failed request is logged: the whole `source()` chain goes to the
            // log under an id the client can quote; the body has a generic message and the id.
            let error_id = uuid::Uuid::now_v7().to_string();
            tracing::error!(
                error_id = %error_id,
                status = status.as_u16(),
                code = code.as_str(),
                error = &self as &dyn std::error::Error,
                "request failed"
            );
            match &self {
                ApiError::StoreUnavailable(_) => {
                    detail.message = format!("{STORE_UNAVAILABLE}; reference {error_id}");
                }
                ApiError::Internal(_) => {
                    detail.message = format!("internal error; reference {error_id}");
                }
                _meant_for_the_client => {}
            }
            detail.error_id = Some(error_id);
        }
        let named = match &self {
            ApiError::PayloadTooLarge { limit } => Some(("max_body_bytes", *limit as u64)),
            ApiError::TooLarge { limit, value, .. } | ApiError::TooMany { limit, value, .. } => {
                Some((*limit, *value))
            }
            _ => None,
        };
        if let Some((limit, value)) = named {
            detail.limit = Some(limit.to_string());
            detail.value = Some(value);
        }
        let mut resp = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            // RFC 6750: say which scheme to use, and whether a credential was sent but bad.
            let challenge = if code == ErrorCode::MissingCredentials {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn sent(e: ApiError) -> (StatusCode, serde_json::Value) {
        let resp = e.into_response();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        (status, serde_json::from_slice(&bytes).expect("JSON body"))
    }

    /// The error id of a 5xx body, checked to be a UUID.
    fn error_id(body: &serde_json::Value) -> String {
        let id = body["error"]["errorId"].as_str().expect("errorId");
        uuid::Uuid::parse_str(id).expect("errorId is a UUID");
        id.to_string()
    }

    #[tokio::test]
    async fn a_store_failure_is_a_generic_503_with_an_id_and_keeps_its_cause() {
        let cause = std::io::Error::other("disk I/O error at /var/lib/ts/threadstream.db");
        let e = ApiError::from(StoreError::unavailable("cannot write /var/lib/ts", cause));
        // The cause stays reachable for the log.
        let first: &(dyn std::error::Error + 'static) = &e;
        let chain = std::iter::successors(Some(first), |e| std::error::Error::source(*e))
            .map(|e| e.to_string())
            .collect::<Vec<_>>();
        assert_eq!(
            chain,
            [
                "the store is unavailable",
                "store unavailable: cannot write /var/lib/ts",
                "disk I/O error at /var/lib/ts/threadstream.db"
            ]
        );
        let (status, body) = sent(e).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let id = error_id(&body);
        assert_eq!(
            body,
            json!({"error": {"code": "unavailable", "errorId": id,
                "message": format!("the store is unavailable; retry later; reference {id}")}})
        );
    }

    #[tokio::test]
    async fn an_internal_failure_is_a_generic_500_with_a_fresh_id() {
        let corrupt = || {
            ApiError::from(StoreError::Corrupt(
                threadstream_domain::DecodeError::Payload {
                    event_type: "text-delta".into(),
                    message: "missing field `text` at line 1 column 2".into(),
                },
            ))
        };
        let (status, body) = sent(corrupt()).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        let id = error_id(&body);
        assert_eq!(
            body,
            json!({"error": {"code": "internal", "errorId": id,
                "message": format!("internal error; reference {id}")}})
        );
        let (_, again) = sent(corrupt()).await;
        assert_ne!(error_id(&again), id, "every failure gets its own id");
    }

    #[tokio::test]
    async fn messages_meant_for_the_client_are_kept() {
        let (status, body) = sent(ApiError::shutting_down()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], "unavailable");
        assert_eq!(
            body["error"]["message"],
            "the service is shutting down; retry on another instance"
        );
        error_id(&body);
        let (status, body) = sent(ApiError::bad_request(
            ErrorCode::InvalidCursor,
            "bad cursor",
        ))
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            body,
            json!({"error": {"code": "invalid_cursor", "message": "bad cursor"}})
        );
    }
}
