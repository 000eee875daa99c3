//! A thread as a JSON-mode Durable Stream: `/v1/threads/:threadId` (`GET` catch-up, long-poll
//! and SSE, `HEAD`, `PUT` to create, `POST` to append events, idempotent producers included).
//! Reads and creation are the engine's (`threadstream_durable_streams::thread`, which says
//! what a message is); these routes check the caller first.
//!
//! Appends go through the `Thread` aggregate like ingest, with ingest's limits and run leases;
//! a refused event is a 409 naming the rule, and nothing of that request is stored.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see crate::durable)

use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use threadstream_domain::durable_stream::{format_offset, normalize_content_type, StreamRefusal};
use threadstream_domain::ErrorCode;
use threadstream_domain::{AgentEvent, StoredEvent, ThreadCommand, ThreadError};
use threadstream_store::StoreError;

use threadstream_durable_streams::protocol::*;
use threadstream_durable_streams::thread::{self, CONTENT_TYPE};

use crate::access::{authorize_thread, authorize_thread_read};
use crate::durable::{answer, read_body, sse_slot};
use crate::error::ApiError;
use crate::extract::Caller;
use crate::runs::ingest_leases;
use crate::sse::erased::erased_before;
use crate::ApiContext;

/// `GET /v1/threads/:threadId`: the thread's n8n events, catch-up, long-poll or SSE.
#[utoipa::path(
    get,
    operation_id = "threadStreamsRead",
    path = "/v1/threads/{thread_id}",
    tag = "durable-streams",
    params(("thread_id" = String, Path, description = "The thread id"), ("offset" = Option<String>, Query, description = "`-1` (the start), `now`, or an offset the server gave"), ("live" = Option<String>, Query, description = "`long-poll` or `sse`; absent: catch-up"), ("cursor" = Option<String>, Query, description = "The last `Stream-Cursor` (long-poll, SSE)"), ("If-None-Match" = Option<String>, Header, description = "An ETag of an earlier read (304)")),
    responses(
        (status = 200, description = "The thread's n8n events (each message an `N8nEvent`): the messages after `offset` as a JSON array, or with `live=sse` an SSE stream of `data` and `control` events", headers(("Stream-Next-Offset" = String, description = "The offset after the last message"), ("ETag" = String, description = "The read's entity tag"), ("Stream-Up-To-Date" = String, description = "`true` at the stream's end"), ("Stream-Closed" = String, description = "`true` once closed"), ("Stream-Cursor" = String, description = "Long-poll and SSE cache-busting cursor")), content((crate::openapi::JsonMessages = "application/json"), (String = "text/event-stream"))),
        crate::openapi::DurableReadAnswers
    )
)]
pub async fn read(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
    req: Request,
) -> Response {
    if let Err(e) = authorize_thread_read(&ctx, &caller, &thread_id).await {
        return e.into_response();
    }
    // An offset before what is retained (erased history): 410 Gone.
    let offset = read_query(req.uri().query())
        .ok()
        .and_then(|q| q.offset)
        .and_then(|o| threadstream_domain::durable_stream::parse_offset(&o));
    if let Some(offset) = offset {
        match erased_before(&ctx, &thread_id, offset).await {
            Ok(Some(erased)) => return erased.durable_gone(),
            Ok(None) => {}
            Err(e) => return e.into_response(),
        }
    }
    let (query, headers) = (req.uri().query(), req.headers());
    let slot = sse_slot(&ctx.limits, &caller);
    answer(thread::read(&ctx.durable, &thread_id, query, headers, slot).await)
}

/// `HEAD /v1/threads/:threadId`.
#[utoipa::path(
    head,
    operation_id = "threadStreamsHead",
    path = "/v1/threads/{thread_id}",
    tag = "durable-streams",
    params(("thread_id" = String, Path, description = "The thread id")),
    responses(
        (status = 200, description = "`Stream-Next-Offset`: the thread's last event id", headers(("Stream-Next-Offset" = String, description = "The offset after the last message"), ("ETag" = String, description = "The read's entity tag"), ("Stream-Up-To-Date" = String, description = "`true` at the stream's end"), ("Stream-Closed" = String, description = "`true` once closed"), ("Stream-Cursor" = String, description = "Long-poll and SSE cache-busting cursor"))),
        (status = 400, description = "A malformed thread id", body = crate::error::ErrorBody),
        (status = 403, description = "An ingest-only token (`ingest_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "Another user's thread", body = crate::error::ErrorBody),
        (status = 410, description = "The thread is deleted", body = crate::error::ErrorBody)
    )
)]
pub async fn head(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
) -> Response {
    if let Err(e) = authorize_thread_read(&ctx, &caller, &thread_id).await {
        return e.into_response();
    }
    answer(thread::head(&ctx.durable, &thread_id).await)
}

/// `PUT /v1/threads/:threadId`: creates the thread (201), or finds it (200).
#[utoipa::path(
    put,
    operation_id = "threadStreamsCreate",
    path = "/v1/threads/{thread_id}",
    tag = "durable-streams",
    params(("thread_id" = String, Path, description = "The thread id"), ("Content-Type" = Option<String>, Header, description = "`application/json` if sent")),
    responses(
        (status = 201, description = "The thread is created", headers(("Stream-Next-Offset" = String, description = "The offset at its end"))),
        (status = 200, description = "The thread exists", headers(("Stream-Next-Offset" = String, description = "The offset at its end"))),
        (status = 400, description = "A malformed thread id", body = crate::error::ErrorBody),
        (status = 403, description = "An ingest-only token, or an admin on another user's thread (`read_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "Another user's thread", body = crate::error::ErrorBody),
        (status = 409, description = "Not JSON (`content_type_mismatch`), or the thread is deleted", body = crate::error::ErrorBody)
    )
)]
pub async fn create(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
    req: Request,
) -> Response {
    if let Err(e) = authorize_thread(&ctx, &caller, &thread_id).await {
        return e.into_response();
    }
    let created = thread::create(&ctx.durable, &caller.user_id, &thread_id, req.headers());
    answer(created.await)
}

/// `POST /v1/threads/:threadId`: appends one event (a JSON object) or several (an array), as
/// ingest does; with producer headers, exactly once.
#[utoipa::path(
    post,
    operation_id = "threadStreamsAppend",
    path = "/v1/threads/{thread_id}",
    tag = "durable-streams",
    params(("thread_id" = String, Path, description = "The thread id"), ("Content-Type" = Option<String>, Header, description = "Must be the stream's"), ("Stream-Seq" = Option<String>, Header, description = "Writer coordination: must increase"), ("Stream-Closed" = Option<String>, Header, description = "`true`: close the stream (after this body, if any)"), ("Producer-Id" = Option<String>, Header, description = "Idempotent producer"), ("Producer-Epoch" = Option<String>, Header, description = "Idempotent producer epoch"), ("Producer-Seq" = Option<String>, Header, description = "Idempotent producer sequence number")),
    request_body(content = Object, content_type = "application/json", description = "One n8n event envelope (`N8nEvent`) or an array of them"),
    responses(
        (status = 204, description = "Appended (or a duplicate of a stored producer write: nothing stored)", headers(("Stream-Next-Offset" = String, description = "The offset after this append"), ("Producer-Epoch" = String, description = "The producer's epoch"), ("Producer-Seq" = String, description = "The producer's highest stored sequence number"))),
        (status = 200, description = "Appended, with producer headers", headers(("Stream-Next-Offset" = String, description = "The offset after this append"))),
        (status = 400, description = "Malformed headers or body (`invalid_json`, `empty_body`, `empty_array`, …)", body = crate::error::ErrorBody),
        (status = 403, description = "A fenced producer epoch (`stale_epoch`, with `Producer-Epoch`), an ingest-only token, or an admin on another user's stream (`read_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such stream, or another user's", body = crate::error::ErrorBody),
        (status = 409, description = "An event breaks a rule of the thread (`run_active`, `tool_call_not_open`, …: `error.code` names it), or a producer sequence gap", body = crate::error::ErrorBody),
        (status = 410, description = "Deleted", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes`", body = crate::error::ErrorBody),
        (status = 422, description = "An invalid event (`invalid_event`, `internal_event`)", body = crate::error::ErrorBody)
    )
)]
pub async fn append(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
    req: Request,
) -> Response {
    match append_inner(&ctx, &caller, &thread_id, req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn append_inner(
    ctx: &ApiContext,
    caller: &Caller,
    thread_id: &str,
    req: Request,
) -> Result<Response, Response> {
    let ise = |e: ApiError| e.into_response();
    authorize_thread(ctx, caller, thread_id)
        .await
        .map_err(ise)?;
    let headers = req.headers().clone();
    let producer = producer_of(&headers)?;
    let Some(ct) = header_str(&headers, header::CONTENT_TYPE.as_str()) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            ErrorCode::ContentTypeRequired,
            "Content-Type: application/json is required on an append",
        ));
    };
    if normalize_content_type(ct) != CONTENT_TYPE {
        return Err(refuse(
            StatusCode::CONFLICT,
            ErrorCode::ContentTypeMismatch,
            "a thread is a JSON-mode stream: application/json",
        ));
    }
    let body = read_body(ctx.config.max_body_bytes, req.into_body())
        .await
        .map_err(ise)?;
    let value: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    let items = match value {
        serde_json::Value::Array(items) => items,
        one => vec![one],
    };
    if items.is_empty() {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            ErrorCode::EmptyJsonArray,
            "an empty JSON array appends nothing: empty arrays are not allowed",
        ));
    }
    ctx.limits
        .check_ingest(items.iter().map(|v| v.to_string().len()))
        .map_err(ise)?;
    let end = ctx
        .durable
        .streams
        .thread_end(&ctx.log, thread_id)
        .await
        .map_err(|e| ise(e.into()))?;
    if !end.exists || end.deleted {
        return Err(refuse(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("thread '{thread_id}' not found (create it with PUT first)"),
        ));
    }
    let mut commands = Vec::with_capacity(items.len() + 1);
    if let Some(p) = &producer {
        commands.push(ThreadCommand::Produce(p.clone()));
    }
    for (i, item) in items.into_iter().enumerate() {
        let event: AgentEvent = serde_json::from_value(item).map_err(|e| {
            refuse(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidEvent,
                format!("message {i}: {e}"),
            )
        })?;
        commands.push(ThreadCommand::Record(event));
    }
    let leases = ingest_leases(ctx, thread_id, &commands).await;
    let appended = ctx.log.append(thread_id, commands).await;
    if let Some(leases) = leases {
        leases.settle(appended.as_deref().ok()).await;
    }
    let stored = match appended {
        Ok(stored) => stored,
        Err(StoreError::Rule(ThreadError::Stream(StreamRefusal::Duplicate {
            last_seq, ..
        }))) => {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            if let Some(p) = &producer {
                set_header(&mut resp, PRODUCER_EPOCH, p.epoch);
            }
            set_header(&mut resp, PRODUCER_SEQ, last_seq);
            return Ok(resp);
        }
        Err(StoreError::Rule(ThreadError::Stream(r))) => {
            return Err(stream_refusal(r, producer.as_ref()))
        }
        Err(StoreError::Rule(rule)) => {
            return Err(refuse(StatusCode::CONFLICT, rule.code(), rule.to_string()))
        }
        Err(e) => return Err(ApiError::from(e).into_response()),
    };
    let offset = stored
        .iter()
        .rev()
        .find(|e| e.is_n8n())
        .or(stored.last())
        .map_or(end.last_id, |e: &StoredEvent| e.id);
    let mut resp = if producer.is_some() {
        StatusCode::OK.into_response()
    } else {
        StatusCode::NO_CONTENT.into_response()
    };
    set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
    if let Some(p) = &producer {
        set_header(&mut resp, PRODUCER_EPOCH, p.epoch);
        set_header(&mut resp, PRODUCER_SEQ, p.seq);
    }
    Ok(resp)
}

/// `OPTIONS`: the CORS preflight (the protocol layer adds the CORS headers).
#[utoipa::path(
    options,
    operation_id = "threadStreamsOptions",
    path = "/v1/threads/{thread_id}",
    tag = "durable-streams",
    params(("thread_id" = String, Path, description = "The thread id")),
    responses(
        (status = 204, description = "CORS preflight")
    )
)]
pub async fn options() -> StatusCode {
    StatusCode::NO_CONTENT
}
