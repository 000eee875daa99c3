//! Every `code` an error body can carry, the one list, and the one error body.
//!
//! The API's error bodies, the rules' refusals ([`crate::ThreadError::code`]) and the Durable
//! Streams protocol's (upper case, as the protocol names them) are all an [`ErrorCode`], so a
//! code that is not listed here cannot be sent. Every error body, whichever layer answers (the
//! HTTP/1 framing, a route, the Durable Streams protocol), is an [`ErrorBody`] built by
//! [`ErrorBody::new`]. The OpenAPI document's `ErrorDetail.code` is an `enum` of
//! [`ErrorCode::ALL`], and `docs/protocol.md` ("Errors") explains them.

/// Declares the codes once: the enum, its strings and the list of all of them.
macro_rules! error_codes {
    ($($variant:ident = $code:literal,)*) => {
        /// A stable, machine-readable error code. The Durable Streams protocol's own codes
        /// (upper case) are the variants named `Ds…`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($variant,)*
        }

        impl ErrorCode {
            /// Every code, sorted by its string.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as error bodies carry it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)*
                }
            }
        }
    };
}

error_codes! {
    DsAlreadyClaimed = "ALREADY_CLAIMED",
    DsFenced = "FENCED",
    DsInvalidOffset = "INVALID_OFFSET",
    DsInvalidRequest = "INVALID_REQUEST",
    DsNothingToWake = "NOTHING_TO_WAKE",
    DsNoPendingWork = "NO_PENDING_WORK",
    DsSubscriptionAlreadyExists = "SUBSCRIPTION_ALREADY_EXISTS",
    DsSubscriptionExists = "SUBSCRIPTION_EXISTS",
    DsTokenExpired = "TOKEN_EXPIRED",
    DsTokenInvalid = "TOKEN_INVALID",
    DsWebhookUrlRejected = "WEBHOOK_URL_REJECTED",
    AdminOnly = "admin_only",
    AgentCompleted = "agent_completed",
    BadRequest = "bad_request",
    ConfirmationNotFound = "confirmation_not_found",
    ContentTypeMismatch = "content_type_mismatch",
    ContentTypeRequired = "content_type_required",
    DuplicateAgent = "duplicate_agent",
    DuplicateConfirmation = "duplicate_confirmation",
    DuplicateEdge = "duplicate_edge",
    DuplicateNode = "duplicate_node",
    DuplicateRun = "duplicate_run",
    DuplicateToolCall = "duplicate_tool_call",
    DuplicateWrite = "duplicate_write",
    EmptyAttachment = "empty_attachment",
    EmptyBatch = "empty_batch",
    EmptyBody = "empty_body",
    EmptyJsonArray = "empty_json_array",
    EmptyMessage = "empty_message",
    EmptyOffset = "empty_offset",
    EmptyPrompt = "empty_prompt",
    FinishNotFromOrchestrator = "finish_not_from_orchestrator",
    Forbidden = "forbidden",
    ForkOffsetBeyondSource = "fork_offset_beyond_source",
    ForkPointInsideRun = "fork_point_inside_run",
    ForkPointNotFound = "fork_point_not_found",
    ForkSourceGone = "fork_source_gone",
    ForkSourceNotFound = "fork_source_not_found",
    HistoryErased = "history_erased",
    IdempotencyKeyInUse = "idempotency_key_in_use",
    IdempotencyKeyReused = "idempotency_key_reused",
    IncompleteProducerHeaders = "incomplete_producer_headers",
    IngestOnly = "ingest_only",
    Internal = "internal",
    InternalEvent = "internal_event",
    Invalid = "invalid",
    InvalidAuthorization = "invalid_authorization",
    InvalidBefore = "invalid_before",
    InvalidBody = "invalid_body",
    InvalidCursor = "invalid_cursor",
    InvalidEpochSeq = "invalid_epoch_seq",
    InvalidEvent = "invalid_event",
    InvalidExpiresAt = "invalid_expires_at",
    InvalidForkOffset = "invalid_fork_offset",
    InvalidForkPoint = "invalid_fork_point",
    InvalidForkSubOffset = "invalid_fork_sub_offset",
    InvalidIdempotencyKey = "invalid_idempotency_key",
    InvalidJson = "invalid_json",
    InvalidLive = "invalid_live",
    InvalidMessage = "invalid_message",
    InvalidName = "invalid_name",
    InvalidOffset = "invalid_offset",
    InvalidPath = "invalid_path",
    InvalidProducerEpoch = "invalid_producer_epoch",
    InvalidProducerId = "invalid_producer_id",
    InvalidProducerSeq = "invalid_producer_seq",
    InvalidQuery = "invalid_query",
    InvalidRunId = "invalid_run_id",
    InvalidScope = "invalid_scope",
    InvalidSession = "invalid_session",
    InvalidSignature = "invalid_signature",
    InvalidStreamPath = "invalid_stream_path",
    InvalidThreadId = "invalid_thread_id",
    InvalidTicket = "invalid_ticket",
    InvalidTime = "invalid_time",
    InvalidTitle = "invalid_title",
    InvalidToken = "invalid_token",
    InvalidTtl = "invalid_ttl",
    InvalidWorkflowId = "invalid_workflow_id",
    MalformedJson = "malformed_json",
    MissingCredentials = "missing_credentials",
    MissingMessage = "missing_message",
    MultipleOffsets = "multiple_offsets",
    NoUserMessage = "no_user_message",
    NodeNotFound = "node_not_found",
    NotFound = "not_found",
    OffsetErased = "offset_erased",
    OffsetRequired = "offset_required",
    OrchestratorCannotComplete = "orchestrator_cannot_complete",
    PathOutsideUserPrefix = "path_outside_user_prefix",
    PayloadTooLarge = "payload_too_large",
    ProducerSequenceGap = "producer_sequence_gap",
    RateLimited = "rate_limited",
    ReadOnly = "read_only",
    RequestBodyTimeout = "request_body_timeout",
    RequestHeaderFieldsTooLarge = "request_header_fields_too_large",
    RequestTimeout = "request_timeout",
    RunActive = "run_active",
    RunFinished = "run_finished",
    RunNotLive = "run_not_live",
    SessionExpired = "session_expired",
    SessionRevoked = "session_revoked",
    StaleProducerEpoch = "stale_producer_epoch",
    StreamAlreadyClosed = "stream_already_closed",
    StreamClosed = "stream_closed",
    StreamConfigMismatch = "stream_config_mismatch",
    StreamExists = "stream_exists",
    StreamGone = "stream_gone",
    StreamSeqConflict = "stream_seq_conflict",
    SubAgentCannotSpawn = "sub_agent_cannot_spawn",
    SubOffsetWithoutFork = "sub_offset_without_fork",
    TaskNotFound = "task_not_found",
    ThreadDeleted = "thread_deleted",
    ThreadExists = "thread_exists",
    ThreadNotFound = "thread_not_found",
    ThreadNotGranted = "thread_not_granted",
    TicketExpired = "ticket_expired",
    TicketUsed = "ticket_used",
    TooManyConnections = "too_many_connections",
    TooManyRuns = "too_many_runs",
    TooManyStreams = "too_many_streams",
    ToolCallNotOpen = "tool_call_not_open",
    TtlAndExpiry = "ttl_and_expiry",
    Unavailable = "unavailable",
    UnknownAgent = "unknown_agent",
    UnknownBucket = "unknown_bucket",
    UnknownParent = "unknown_parent",
    UnsupportedAttachmentType = "unsupported_attachment_type",
    UnsupportedMediaType = "unsupported_media_type",
    UrlExpired = "url_expired",
    WorkflowExists = "workflow_exists",
    WorkflowNotFound = "workflow_not_found",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

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
    /// A stable code naming the rule or the failure: one of the `enum`, e.g. `run_active`,
    /// `invalid_cursor`, `not_found`, `payload_too_large`, `rate_limited`, `unavailable`.
    pub code: String,
    /// Durable Streams `ALREADY_CLAIMED` only: the worker holding the wake.
    #[serde(
        default,
        rename = "current_holder",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false)]
    pub current_holder: Option<String>,
    /// 5xx only: a fresh UUID v7 the server logged the cause under; quote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error_id: Option<String>,
    /// Durable Streams `ALREADY_CLAIMED` only: the current wake's generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub generation: Option<u64>,
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

impl ErrorBody {
    /// The body for `code` and `message`; the optional fields are set on [`ErrorBody::error`].
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: code.as_str().to_string(),
                current_holder: None,
                error_id: None,
                generation: None,
                limit: None,
                message: message.into(),
                value: None,
            },
        }
    }

    /// The body as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an error body serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_has_its_code_and_message_and_only_the_fields_set() {
        let mut body = ErrorBody::new(ErrorCode::DsAlreadyClaimed, "claimed");
        assert_eq!(
            body.to_json(),
            r#"{"error":{"code":"ALREADY_CLAIMED","message":"claimed"}}"#
        );
        body.error.current_holder = Some("w1".into());
        body.error.generation = Some(2);
        assert_eq!(
            body.to_json(),
            r#"{"error":{"code":"ALREADY_CLAIMED","current_holder":"w1","generation":2,"message":"claimed"}}"#
        );
    }

    #[test]
    fn codes_are_unique_sorted_and_of_one_case() {
        let all: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(all, sorted, "ErrorCode::ALL is sorted and has no duplicate");
        for code in all {
            let lower = code.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            let upper = code.chars().all(|c| c.is_ascii_uppercase() || c == '_');
            assert!(
                lower || upper,
                "{code}: snake_case, or the protocol's UPPER_CASE"
            );
        }
    }
}
