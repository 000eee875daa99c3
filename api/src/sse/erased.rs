//! What a reader is told when its cursor points into history an erasure removed
//! (docs/protocol.md, "Erased history"): resuming after an id at or below the highest id erased
//! from the thread would otherwise look like a quiet stream, or like a gap it could resume
//! across. Each protocol says it its own way; all of them point the reader past the tombstone.

use threadstream_domain::ErrorCode;
use threadstream_domain::StoredEvent;

use crate::error::ApiError;
use crate::ApiContext;

/// The history a cursor points into was erased.
#[derive(Debug, Clone, Copy)]
pub struct ErasedHistory {
    /// The `erased` tombstone's id: every event of the thread still there is above it.
    pub tombstone_id: i64,
    /// The highest id erased from the thread.
    pub through: i64,
}

/// The `message` every signal carries.
pub const MESSAGE_PREFIX: &str = "history-erased";

impl ErasedHistory {
    fn message(&self) -> String {
        format!(
            "{MESSAGE_PREFIX}: this thread's events through id {} were erased (tombstone {}); \
             what follows is the thread as it is now",
            self.through, self.tombstone_id
        )
    }

    /// The n8n stream's signal: a `status` event (one of the 15 types, valid for the pinned
    /// schemas; n8n's reducer finds no agent `""` and changes nothing), `id:` the tombstone's,
    /// so the client's `Last-Event-ID` moves past the removed history and the stream goes on.
    pub fn n8n_frame(&self, thread_id: &str) -> String {
        let event = StoredEvent {
            id: self.tombstone_id,
            thread_id: thread_id.to_string(),
            seq: 0,
            run_id: String::new(),
            agent_id: String::new(),
            event_type: "status".into(),
            payload: serde_json::json!({ "message": self.message() }).to_string(),
            ts: threadstream_domain::clock::now_ms(),
            response_id: None,
            user_id: None,
        };
        let mut out = String::new();
        event.write_n8n_frame(&mut out);
        out
    }

    /// AG-UI's signal: `RUN_ERROR` with `code: "history_erased"`, `id:` the tombstone's; the
    /// stream ends there (an AG-UI stream has nothing after a `RUN_ERROR`), and the client
    /// reconnects from the tombstone's id (or afresh) to read the thread as it is.
    pub fn agui_frame(&self, thread_id: &str) -> String {
        let frame = serde_json::json!({
            "type": "RUN_ERROR",
            "threadId": thread_id,
            // No run: the history, not a run, is what failed.
            "runId": "",
            "message": self.message(),
            "code": ErrorCode::HistoryErased.as_str(),
            "timestamp": threadstream_domain::clock::now_ms(),
        });
        format!("id: {}\ndata: {frame}\n\n", self.tombstone_id)
    }

    /// The items protocol's signal: its terminal `request.failed`, with the protocol's error
    /// shape `{message, code, details}` (`code: "history_erased"`); the stream ends there, as
    /// after any terminal event. A request is one run, so when its run was erased every cursor
    /// into it points into erased history: the frame is numbered `after + 1`, right after the
    /// client's cursor.
    pub fn items_frame(&self, request_id: &str, after: u64) -> String {
        let sequence = after + 1;
        let frame = serde_json::json!({
            "stream": "request",
            "type": "request.failed",
            "requestId": request_id,
            "sequence_number": sequence,
            "ts": threadstream_domain::clock::now_ms(),
            "status": "failed",
            "error": {
                "message": self.message(),
                "code": ErrorCode::HistoryErased.as_str(),
                "details": {"tombstoneId": self.tombstone_id, "erasedThrough": self.through},
            },
        });
        format!("id: {request_id}:{sequence}\nevent: request.failed\ndata: {frame}\n\n")
    }

    /// The Durable Streams answer: 410 Gone for an offset before what is retained.
    pub fn durable_gone(&self) -> axum::response::Response {
        threadstream_durable_streams::protocol::refuse(
            axum::http::StatusCode::GONE,
            ErrorCode::OffsetErased,
            format!(
                "{}; read from offset {}_0 or -1",
                self.message(),
                self.tombstone_id
            ),
        )
    }
}

/// Whether resuming `thread_id` after `cursor` points into erased history.
pub async fn erased_before(
    ctx: &ApiContext,
    thread_id: &str,
    cursor: i64,
) -> Result<Option<ErasedHistory>, ApiError> {
    if cursor <= 0 {
        return Ok(None);
    }
    Ok(ctx
        .log
        .erased_stream(thread_id)
        .await?
        .filter(|(_, through)| cursor <= *through)
        .map(|(tombstone_id, through)| ErasedHistory {
            tombstone_id,
            through,
        }))
}

/// Whether `thread_id` was erased (its events up to some id are gone): what a request whose
/// run is not in the thread's history is told ([`ErasedHistory::items_frame`]).
pub async fn erased_thread(
    ctx: &ApiContext,
    thread_id: &str,
) -> Result<Option<ErasedHistory>, ApiError> {
    Ok(ctx
        .log
        .erased_stream(thread_id)
        .await?
        .map(|(tombstone_id, through)| ErasedHistory {
            tombstone_id,
            through,
        }))
}
