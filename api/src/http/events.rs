//! `GET /instance-ai/events/:threadId` (the n8n SSE stream, served by `crate::sse`) and
//! `POST /instance-ai/threads/:threadId/events` (ingest for agents that run elsewhere).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::ErrorCode;
use threadstream_domain::{AgentEvent, StoredEvent, ThreadCommand};

use crate::access::{authorize_thread, authorize_thread_read};
use crate::error::ApiError;
use crate::extract::{ApiQuery, Caller};
use crate::idempotency::{self, KeyedJson};
use crate::runs::ingest_leases;
use crate::sse::erased::erased_before;
use crate::sse::{cursor_from, frames, sse_response, CursorQuery, SseRender};
use crate::ApiContext;

#[utoipa::path(
    get,
    operation_id = "eventsStream",
    path = crate::extract::TICKET_STREAM_ROUTE,
    tag = "n8n",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)"), ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (wins over `lastEventId`)"), ("lastEventId" = Option<String>, Query, description = "Resume after this event id; 0 or absent: the whole history"), ("ticket" = Option<String>, Query, description = "A stream ticket, for browsers' `EventSource`")),
    responses(
        (status = 200, description = "The thread's n8n events, replayed from the cursor then live; `id:` is the event's log id, `: ping` every 15 s", content_type = "text/event-stream", body = String),
        (status = 400, description = "A malformed cursor (`invalid_cursor`) or thread id", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn stream(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
    ApiQuery(query): ApiQuery<CursorQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize_thread_read(&ctx, &caller, &thread_id).await?;
    let mut cursor = cursor_from(&headers, &query)?;
    let slot = ctx.limits.sse_slot(&caller.user_id, crate::metrics::N8N)?;
    // A cursor into erased history: the signal first, then the thread from the tombstone on.
    let prelude = match erased_before(&ctx, &thread_id, cursor).await? {
        Some(erased) => {
            cursor = erased.tombstone_id;
            erased.n8n_frame(&thread_id)
        }
        None => String::new(),
    };
    Ok(sse_response(Body::from_stream(frames(
        &ctx, &caller, slot, thread_id, cursor, prelude, N8nRender,
    ))))
}

/// The n8n rendering: the 15 wire types as stored, `id:` = the event id.
struct N8nRender;

impl SseRender for N8nRender {
    fn render(&mut self, e: &StoredEvent, out: &mut String) -> bool {
        if e.is_n8n() {
            e.write_n8n_frame(out);
        }
        true
    }

    fn is_n8n(&self) -> bool {
        true
    }
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestBody {
    /// Kept as sent, so each event's size is known without serializing it again. Each is an
    /// n8n event envelope (`N8nEvent`; `ts` is ignored: the log sets it).
    #[schema(value_type = Vec<Object>)]
    events: Vec<Box<serde_json::value::RawValue>>,
}

/// Appends events produced by an agent running elsewhere, through the same writer and rules as
/// the built-in runtime. All or nothing: one broken rule and nothing of the request is stored.
/// With an `Idempotency-Key`, stored once (see [`crate::idempotency`]).
#[utoipa::path(
    post,
    operation_id = "eventsIngest",
    path = crate::extract::INGEST_ROUTE,
    tag = "ingest",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)"), ("Idempotency-Key" = Option<String>, Header, description = "Executes the request once for the window: a retry with the same key and request gets the first answer (docs/protocol.md, Idempotency-Key)")),
    request_body(content = IngestBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The events are stored, all or nothing", body = crate::openapi::IngestAnswer),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's (`not_found`)", body = crate::error::ErrorBody),
        (status = 400, description = "Malformed JSON, thread id or Idempotency-Key", body = crate::error::ErrorBody),
        (status = 409, description = "An event breaks a rule of the thread (`run_active`, `tool_call_not_open`, `unknown_agent`, …) or the Idempotency-Key is in use", body = crate::error::ErrorBody),
        (status = 413, description = "The body, an event or the batch is too large (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "An invalid event (`invalid_event`, `internal_event`, `empty_batch`, `invalid_body`, a rule that can never hold) or a reused Idempotency-Key", body = crate::error::ErrorBody)
    )
)]
pub async fn ingest(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
    KeyedJson { body, key }: KeyedJson<IngestBody>,
) -> Result<Json<Value>, ApiError> {
    authorize_thread(&ctx, &caller, &thread_id).await?;
    if body.events.is_empty() {
        return Err(ApiError::unprocessable(
            ErrorCode::EmptyBatch,
            "events must not be empty",
        ));
    }
    ctx.limits
        .check_ingest(body.events.iter().map(|e| e.get().len()))?;
    let mut commands = Vec::with_capacity(body.events.len() + 1);
    commands.push(ThreadCommand::Create {
        owner: caller.user_id.clone(),
        title: None,
    });
    for (i, raw) in body.events.into_iter().enumerate() {
        let event: AgentEvent = serde_json::from_str(raw.get()).map_err(|e| {
            ApiError::unprocessable(ErrorCode::InvalidEvent, format!("events[{i}]: {e}"))
        })?;
        commands.push(ThreadCommand::Record(event));
    }
    let answer = |stored: &[StoredEvent]| {
        let ids: Vec<i64> = stored.iter().filter(|e| e.is_n8n()).map(|e| e.id).collect();
        json!({ "ids": ids })
    };
    let leases = ingest_leases(&ctx, &thread_id, &commands).await;
    let answer = idempotency::once(&ctx, &caller, key, answer, |key| async {
        let stored = match key {
            Some(key) => ctx.log.append_keyed(&thread_id, commands, key).await,
            None => ctx.log.append(&thread_id, commands).await,
        };
        if let Some(leases) = leases {
            leases.settle(stored.as_deref().ok()).await;
        }
        Ok(stored?)
    })
    .await?;
    Ok(Json(answer))
}
