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
        code: &'static str,
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

/// Every `code` an error body can carry, the one list: the document's `ErrorDetail.code` is an
/// `enum` of it (`crate::openapi`), `docs/protocol.md` ("Errors") explains them, and
/// `every_code_the_source_constructs_is_listed` fails when the source of `api`, `domain` or the
/// binary constructs a code this list does not have. The Durable Streams subscription codes are
/// the protocol's, upper case. Sorted.
pub const ERROR_CODES: &[&str] = &[
    "ALREADY_CLAIMED",
    "FENCED",
    "INVALID_OFFSET",
    "INVALID_REQUEST",
    "NOTHING_TO_WAKE",
    "NO_PENDING_WORK",
    "SUBSCRIPTION_ALREADY_EXISTS",
    "SUBSCRIPTION_EXISTS",
    "TOKEN_EXPIRED",
    "TOKEN_INVALID",
    "WEBHOOK_URL_REJECTED",
    "admin_only",
    "agent_completed",
    "bad_request",
    "confirmation_not_found",
    "content_type_mismatch",
    "content_type_required",
    "duplicate_agent",
    "duplicate_confirmation",
    "duplicate_edge",
    "duplicate_node",
    "duplicate_run",
    "duplicate_tool_call",
    "duplicate_write",
    "empty_attachment",
    "empty_batch",
    "empty_body",
    "empty_json_array",
    "empty_message",
    "empty_offset",
    "empty_prompt",
    "finish_not_from_orchestrator",
    "forbidden",
    "fork_offset_beyond_source",
    "fork_point_inside_run",
    "fork_point_not_found",
    "fork_source_gone",
    "fork_source_not_found",
    "history_erased",
    "idempotency_key_in_use",
    "idempotency_key_reused",
    "incomplete_producer_headers",
    "ingest_only",
    "internal",
    "internal_event",
    "invalid",
    "invalid_authorization",
    "invalid_before",
    "invalid_body",
    "invalid_cursor",
    "invalid_epoch_seq",
    "invalid_event",
    "invalid_expires_at",
    "invalid_fork_offset",
    "invalid_fork_point",
    "invalid_fork_sub_offset",
    "invalid_idempotency_key",
    "invalid_json",
    "invalid_live",
    "invalid_message",
    "invalid_name",
    "invalid_offset",
    "invalid_path",
    "invalid_producer_epoch",
    "invalid_producer_id",
    "invalid_producer_seq",
    "invalid_query",
    "invalid_run_id",
    "invalid_scope",
    "invalid_session",
    "invalid_signature",
    "invalid_stream_path",
    "invalid_thread_id",
    "invalid_ticket",
    "invalid_time",
    "invalid_title",
    "invalid_token",
    "invalid_ttl",
    "invalid_workflow_id",
    "malformed_json",
    "missing_credentials",
    "missing_message",
    "multiple_offsets",
    "no_user_message",
    "node_not_found",
    "not_found",
    "offset_erased",
    "offset_required",
    "orchestrator_cannot_complete",
    "path_outside_user_prefix",
    "payload_too_large",
    "producer_sequence_gap",
    "rate_limited",
    "read_only",
    "request_body_timeout",
    "request_header_fields_too_large",
    "request_timeout",
    "run_active",
    "run_finished",
    "run_not_live",
    "session_expired",
    "session_revoked",
    "stale_producer_epoch",
    "stream_already_closed",
    "stream_closed",
    "stream_config_mismatch",
    "stream_exists",
    "stream_gone",
    "stream_seq_conflict",
    "sub_agent_cannot_spawn",
    "sub_offset_without_fork",
    "task_not_found",
    "thread_deleted",
    "thread_exists",
    "thread_not_found",
    "thread_not_granted",
    "ticket_expired",
    "ticket_used",
    "too_many_connections",
    "too_many_runs",
    "too_many_streams",
    "tool_call_not_open",
    "ttl_and_expiry",
    "unavailable",
    "unknown_agent",
    "unknown_bucket",
    "unknown_parent",
    "unsupported_attachment_type",
    "unsupported_media_type",
    "url_expired",
    "workflow_exists",
    "workflow_not_found",
    "wrong_stream",
];

/// The one error body of every route: `{"error": {"code", "message", …}}`.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[schema(example = json!({"error": {"code": "run_active", "message": "thread 't1' has a live run"}}))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong. Fields are in alphabetical order, as the body has always been serialized.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    /// A stable code naming the rule or the failure: one of the `enum` (`ERROR_CODES` in
    /// `api/src/error.rs`), e.g. `run_active`, `invalid_cursor`, `not_found`, `payload_too_large`,
    /// `rate_limited`, `unavailable`.
    pub code: String,
    /// 5xx only: a fresh UUID v7 the server logged the cause under; quote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error_id: Option<String>,
    /// 413 and 429: the limit that was passed (its name in `docs/operations.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub limit: Option<String>,
    /// For the client to read (4xx); a generic message with the error id (5xx).
    pub message: String,
    /// 413 and 429: the limit's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub value: Option<u64>,
}

/// What a 503 for a failed store says to the client (then the error id).
const STORE_UNAVAILABLE: &str = "the store is unavailable; retry later";

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
            ApiError::KeyAnswered => (StatusCode::CONFLICT, "idempotency_key_in_use"),
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
            ApiError::Unavailable(_) | ApiError::StoreUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
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
            e @ StoreError::Corrupt(_) => ApiError::Internal(Box::new(e)),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let mut detail = ErrorDetail {
            code: code.to_string(),
            error_id: None,
            limit: None,
            message: self.to_string(),
            value: None,
        };
        if status.is_server_error() {
            // The one place a failed request is logged: the whole `source()` chain goes to the
            // log under an id the client can quote; the body has a generic message and the id.
            let error_id = uuid::Uuid::now_v7().to_string();
            tracing::error!(
                error_id = %error_id,
                status = status.as_u16(),
                code,
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
        let body = ErrorBody { error: detail };
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The codes the source constructs, found where a code is written: `code: "…"`, a JSON
    /// body's `"code": "…"` (raw strings included), the first string argument of
    /// `bad_request(`, `unprocessable(`, `refuse(`, `bad(`, `invalid_request(` and
    /// `unauthorized(`, and the arms
    /// of every `fn code(`.
    fn constructed_codes(src: &str) -> Vec<String> {
        fn literal_at(s: &str) -> Option<String> {
            let s = s.trim_start();
            // `refuse(StatusCode::X, "code", …)`: the code is the second argument.
            let s = match s.split_once(',') {
                Some((status, rest)) if status.contains("StatusCode::") => rest.trim_start(),
                _ => s,
            };
            let s = s.strip_prefix("\\\"").or_else(|| s.strip_prefix('"'))?;
            let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
            (end > 0 && s[end..].starts_with(['"', '\\'])).then(|| s[..end].to_string())
        }
        let mut found = Vec::new();
        for marker in [
            "code: ",
            "\"code\": ",
            "\"code\":",
            "\\\"code\\\":",
            "bad_request(",
            "unprocessable(",
            "refuse(",
            "bad(",
            "invalid_request(",
            "unauthorized(",
        ] {
            for (at, _) in src.match_indices(marker) {
                found.extend(literal_at(&src[at + marker.len()..]));
            }
        }
        for (at, _) in src.match_indices("fn code(") {
            let body = &src[at..];
            let body = &body[..body.find("\n    }").unwrap_or(body.len())];
            for (arm, _) in body.match_indices("=> ") {
                found.extend(literal_at(&body[arm + 3..]));
            }
        }
        found
    }

    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn every_code_the_source_constructs_is_listed() {
        assert!(
            ERROR_CODES.windows(2).all(|w| w[0] < w[1]),
            "ERROR_CODES is sorted, without repeats"
        );
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        for dir in ["api/src", "domain/src", "src"] {
            rust_files(&root.join(dir), &mut files);
        }
        let mut seen = std::collections::BTreeSet::new();
        for file in &files {
            let src = std::fs::read_to_string(file).unwrap();
            // The server's code, not its unit tests (this one names codes the list lacks).
            let src = src.split("\n#[cfg(test)]\nmod ").next().unwrap();
            for code in constructed_codes(src) {
                assert!(
                    ERROR_CODES.contains(&code.as_str()),
                    "{} constructs the error code {code:?}, which ERROR_CODES does not list",
                    file.display()
                );
                seen.insert(code);
            }
        }
        // The scan finds codes of every kind of construction: a test that finds nothing proves
        // nothing.
        for code in [
            "invalid_cursor",
            "run_active",
            "thread_deleted",
            "stream_exists",
            "ALREADY_CLAIMED",
            "too_many_connections",
            "invalid_signature",
            "history_erased",
        ] {
            assert!(seen.contains(code), "the scan missed {code}: {seen:?}");
        }
        // What the list has beyond the scan is constructed where the scan does not look: the
        // codes `ApiError::status_and_code` gives its fixed variants.
        let unseen: Vec<_> = ERROR_CODES.iter().filter(|c| !seen.contains(**c)).collect();
        assert_eq!(
            unseen,
            [&"internal", &"payload_too_large", &"unavailable"],
            "listed but not found by the scan: construct them, or drop them from ERROR_CODES"
        );
        // And a code the list does not have is found.
        let unlisted = format!("ApiError::{}(\"no_such_code\", m)", "bad_request");
        assert_eq!(constructed_codes(&unlisted), ["no_such_code"]);
    }

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
        let (status, body) = sent(ApiError::bad_request("invalid_cursor", "bad cursor")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            body,
            json!({"error": {"code": "invalid_cursor", "message": "bad cursor"}})
        );
    }
}
