//! The items protocol: `POST /api/flows/{kind}/actions/{action}` starts a run and
//! answers 202 `{requestId}`; `GET /api/flows/{kind}/requests/{request_id}/stream` streams it
//! ([`threadstream_projections::render::items`]) off the same cursor over the log as the other
//! protocols, resumable with `?starting_after=N` or `Last-Event-ID: {requestId}:{N}`, and
//! closes after the request's terminal event.
//!
//! A request is one run of one thread; its id is `{threadId}~{runId}` (opaque to clients), so
//! any instance can serve its stream from the log alone.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use threadstream_domain::ErrorCode;
use threadstream_domain::StoredEvent;
use threadstream_projections::render::items::ItemsRenderer;

use crate::access::{authorize_thread, authorize_thread_read};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiQuery, Caller, RunTrace};
use crate::ids::new_id;
use crate::runs::start_run;
use crate::sse::erased::erased_thread;
use crate::sse::{frames, read_range, sse_response, SseRender};
use crate::ApiContext;

/// Separates the thread id from the run id in a request id (run ids never contain it).
const REQUEST_SEP: char = '~';

/// `{message}` (or `{input: {message}}`), with `sessionId` naming the conversation (a thread)
/// to continue; without it every request gets a thread of its own.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionBody {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    input: Option<ActionInput>,
    #[serde(default)]
    session_id: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct ActionInput {
    message: String,
}

fn check_name(what: &str, v: &str) -> Result<(), ApiError> {
    let ok = !v.is_empty()
        && v.len() <= 64
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            ErrorCode::InvalidName,
            format!("{what} must be 1 to 64 characters of [A-Za-z0-9._-], got {v:?}"),
        ))
    }
}

#[utoipa::path(
    post,
    operation_id = "itemsAction",
    path = "/api/flows/{kind}/actions/{action}",
    tag = "items",
    params(("kind" = String, Path, description = "1 to 64 of `[A-Za-z0-9._-]`"), ("action" = String, Path, description = "1 to 64 of `[A-Za-z0-9._-]`"), crate::extract::RunTraceHeaders),
    request_body(content = ActionBody, content_type = "application/json"),
    responses(
        (status = 202, description = "The request started", body = crate::openapi::RequestAccepted),
        (status = 400, description = "Malformed JSON, name (`invalid_name`) or session id", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The session has a live run (`run_active`)", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Wrong shape (`invalid_body`) or no message (`missing_message`)", body = crate::error::ErrorBody)
    )
)]
pub async fn action(
    State(ctx): State<ApiContext>,
    caller: Caller,
    trace: RunTrace,
    Path((kind, action)): Path<(String, String)>,
    ApiJson(body): ApiJson<ActionBody>,
) -> Result<Response, ApiError> {
    check_name("kind", &kind)?;
    check_name("action", &action)?;
    let message = body
        .message
        .or(body.input.map(|i| i.message))
        .ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::MissingMessage,
                "the body needs `message` or `input.message`",
            )
        })?;
    let thread_id = body
        .session_id
        .unwrap_or_else(|| new_id(&format!("flow-{kind}")));
    authorize_thread(&ctx, &caller, &thread_id).await?;
    let run_id = new_id("run");
    start_run(&ctx, &caller, &trace, &thread_id, &run_id, message, None).await?;
    let request_id = format!("{thread_id}{REQUEST_SEP}{run_id}");
    Ok((StatusCode::ACCEPTED, Json(json!({"requestId": request_id}))).into_response())
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    starting_after: Option<String>,
    unfiltered: Option<String>,
}

fn bad_cursor(e: threadstream_domain::cursor::CursorError) -> ApiError {
    ApiError::bad_request(ErrorCode::InvalidCursor, e.to_string())
}

/// Where to resume: `?starting_after=N` wins; else `Last-Event-ID: {requestId}:{N}` when it
/// names this request (another request's id is ignored, as the items protocol says); else 0.
fn starting_after(
    headers: &HeaderMap,
    query: &StreamQuery,
    request_id: &str,
) -> Result<u64, ApiError> {
    use threadstream_domain::cursor::{item_event_id, sequence};
    let query = query.starting_after.as_deref().unwrap_or("");
    if let Some(n) = sequence(query.as_bytes()).map_err(bad_cursor)? {
        return Ok(n);
    }
    let Some(h) = headers.get("last-event-id") else {
        return Ok(0);
    };
    Ok(item_event_id(h.as_bytes(), request_id)
        .map_err(bad_cursor)?
        .unwrap_or(0))
}

/// The items renderer as an SSE renderer: frames after `after` only, and the end of the stream
/// after the request's terminal event.
struct ItemsSse {
    renderer: ItemsRenderer,
    after: u64,
}

impl SseRender for ItemsSse {
    fn render(&mut self, event: &StoredEvent, out: &mut String) -> bool {
        for (seq, frame) in self.renderer.render(event) {
            if seq > self.after {
                frame.write_sse(out);
            }
        }
        !self.renderer.finished()
    }
}

#[utoipa::path(
    get,
    operation_id = "itemsStream",
    path = "/api/flows/{kind}/requests/{request_id}/stream",
    tag = "items",
    params(("kind" = String, Path, description = "The flow kind"), ("request_id" = String, Path, description = "The `requestId` of the action"), StreamQuery, ("Last-Event-ID" = Option<String>, Header, description = "`{requestId}:{N}` resumes after sequence number N")),
    responses(
        (status = 200, description = "The request's items events; closed after `request.completed`/`failed`/`aborted`. A request of an erased thread that is no longer there gets one `request.failed` with `error.code: \"history_erased\"`", content_type = "text/event-stream", body = String),
        (status = 400, description = "A malformed cursor (`invalid_cursor`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown request (of a thread never erased), or another user's (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn stream(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path((kind, request_id)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<StreamQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    check_name("kind", &kind)?;
    let not_found = || ApiError::NotFound(format!("request '{request_id}' not found"));
    let (thread_id, run_id) = request_id.rsplit_once(REQUEST_SEP).ok_or_else(not_found)?;
    authorize_thread_read(&ctx, &caller, thread_id)
        .await
        .map_err(|_| not_found())?;
    let after = starting_after(&headers, &query, &request_id)?;
    let slot = ctx
        .limits
        .sse_slot(&caller.user_id, crate::metrics::ITEMS)?;
    let unfiltered = matches!(query.unfiltered.as_deref(), Some("1" | "true"));
    // The request's first event: the stream renders the request from there.
    let history = read_range(&ctx.log, thread_id, 0, i64::MAX).await?;
    let Some(first) = history.iter().find(|e| e.run_id == run_id) else {
        // Not there: if the thread was erased, the request may have been one of its runs;
        // the reader is told so in the protocol's own way rather than with a bare 404.
        return match erased_thread(&ctx, thread_id).await? {
            Some(erased) => Ok(sse_response(Body::from(
                erased.items_frame(&request_id, after),
            ))),
            None => Err(not_found()),
        };
    };
    let render = ItemsSse {
        renderer: ItemsRenderer::new(&request_id, run_id, unfiltered),
        after,
    };
    Ok(sse_response(Body::from_stream(frames(
        &ctx,
        &caller,
        slot,
        thread_id.to_string(),
        first.id - 1,
        String::new(),
        render,
    ))))
}
