//! AG-UI: `POST /api/v1/agent/runs` starts a run, and
//! `GET /api/v1/agent/runs/{thread_id}/events` streams the thread as AG-UI events
//! ([`threadstream_projections::render::agui`]) off the same cursor over the log as the n8n
//! stream. A `Last-Event-ID` resumes: the renderer is folded over the events up to it and the
//! stream starts with its join prelude. `GET /api/v1/agent/history` is the day-paged
//! history snapshot.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::ErrorCode;
use threadstream_domain::StoredEvent;
use threadstream_projections::history_day::{history_day, is_day};
use threadstream_projections::render::agui::AgUiRenderer;

use crate::access::{authorize_thread, authorize_thread_read};
use crate::error::ApiError;
use crate::extract::{ApiQuery, Caller, RunTrace};
use crate::idempotency::{self, KeyedJson};
use crate::ids::new_id;
use crate::runs::start_run_keyed;
use crate::sse::erased::erased_before;
use crate::sse::{cursor_from, frames, read_range, sse_response, CursorQuery, SseRender};
use crate::threads::caller_threads;
use crate::ApiContext;
use threadstream_agent::agui::ClientInput;
use threadstream_agent::Runner;

/// The longest run or thread id taken from a client.
const MAX_ID_CHARS: usize = threadstream_domain::MAX_THREAD_ID_CHARS;

/// The AG-UI renderer as an SSE renderer; with `until_run`, the stream ends after that run's
/// `run-finish` (the response to `POST /runs`).
struct AgUiSse {
    renderer: AgUiRenderer,
    until_run: Option<String>,
}

impl SseRender for AgUiSse {
    fn render(&mut self, event: &StoredEvent, out: &mut String) -> bool {
        for f in self.renderer.render(event) {
            f.write_sse(out);
        }
        !(event.event_type == "run-finish" && self.until_run.as_deref() == Some(&event.run_id))
    }
}

/// The renderer folded over the thread's events up to `cursor`, and the join prelude a
/// client resuming there gets (SSE text; empty when no run is open).
async fn renderer_at(
    ctx: &ApiContext,
    thread_id: &str,
    cursor: i64,
    echo_user_messages: bool,
) -> Result<(AgUiRenderer, String), ApiError> {
    let mut renderer = AgUiRenderer::new(thread_id, echo_user_messages);
    if cursor == 0 {
        return Ok((renderer, String::new()));
    }
    let history = read_range(&ctx.log, thread_id, 0, cursor).await?;
    for e in &history {
        renderer.render(e);
    }
    let ts = history.last().map(|e| e.ts).unwrap_or(0);
    let prelude = threadstream_projections::render::to_sse(&renderer.join_prelude(cursor, ts));
    Ok((renderer, prelude))
}

#[utoipa::path(
    get,
    operation_id = "aguiEvents",
    path = "/api/v1/agent/runs/{thread_id}/events",
    tag = "ag-ui",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)"), ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (wins over `lastEventId`)"), ("lastEventId" = Option<String>, Query, description = "Resume after this event id; 0 or absent: the whole history")),
    responses(
        (status = 200, description = "The thread as AG-UI events, live; resumed with a join prelude", content_type = "text/event-stream", body = String),
        (status = 400, description = "A malformed cursor (`invalid_cursor`) or thread id", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn events(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
    ApiQuery(query): ApiQuery<CursorQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize_thread_read(&ctx, &caller, &thread_id).await?;
    let cursor = cursor_from(&headers, &query)?;
    let slot = ctx
        .limits
        .sse_slot(&caller.user_id, crate::metrics::AG_UI)?;
    if let Some(erased) = erased_before(&ctx, &thread_id, cursor).await? {
        // A cursor into erased history: `RUN_ERROR` ends the stream (docs/protocol.md).
        drop(slot);
        return Ok(sse_response(Body::from(erased.agui_frame(&thread_id))));
    }
    let (renderer, prelude) = renderer_at(&ctx, &thread_id, cursor, true).await?;
    let render = AgUiSse {
        renderer,
        until_run: None,
    };
    Ok(sse_response(Body::from_stream(frames(
        &ctx, &caller, slot, thread_id, cursor, prelude, render,
    ))))
}

/// AG-UI's `RunAgentInput` (threadId, runId, messages, tools, state, context, forwardedProps),
/// or the simpler `{threadId?, message}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunBody {
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Value>>,
    /// The built-in agent has its own tools, state and context and does not use these; an
    /// upstream agent (`/agui/agents/{name}/run`) gets them as sent.
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    state: Option<Value>,
    #[serde(default)]
    context: Option<Vec<Value>>,
    #[serde(default)]
    forwarded_props: Option<Value>,
}

/// The text of an AG-UI message's `content`: a string, or the text parts of a part list.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

impl RunBody {
    /// The message to run: `message`, else the last `user` message of `messages`. Every user
    /// message's `content` must be a string or a list of parts (AG-UI's `UserMessage`, else 422
    /// `invalid_message`) with text that is not blank (else 422 `empty_message`), as the
    /// document says (`RunBody`).
    fn user_message(&self) -> Result<String, ApiError> {
        if let Some(m) = &self.message {
            return Ok(m.clone());
        }
        let messages = self.messages.as_deref().unwrap_or_default();
        let mut last = None;
        for m in messages.iter().filter(|m| m["role"] == "user") {
            let text = content_text(&m["content"]).ok_or_else(|| {
                ApiError::unprocessable(
                    ErrorCode::InvalidMessage,
                    "a user message's `content` must be a string or a list of parts",
                )
            })?;
            if text.trim().is_empty() {
                return Err(ApiError::unprocessable(
                    ErrorCode::EmptyMessage,
                    "a user message's `content` has no text",
                ));
            }
            last = Some(text);
        }
        last.ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::NoUserMessage,
                "the body needs `message`, or `messages` with a message of role `user`",
            )
        })
    }
}

fn check_client_id(what: &str, id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.chars().count() > MAX_ID_CHARS || id.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidRunId,
            format!("{what} must be 1 to {MAX_ID_CHARS} characters without control characters"),
        ));
    }
    Ok(())
}

/// A started run, as [`start`] answers it (and stores it as an idempotency key's answer): the
/// stream of a retry starts where the first one's did.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Started {
    thread_id: String,
    run_id: String,
    /// Just before the run's first event.
    cursor: i64,
}

/// Starts a run. With `Accept: text/event-stream` (AG-UI's `HttpAgent`) the answer is the
/// run's AG-UI stream, ending after its `RUN_FINISHED` / `RUN_ERROR`; otherwise
/// `{threadId, runId}` and the client reads `GET …/events`. With an `Idempotency-Key`, the run
/// is started once (see [`crate::idempotency`]); a retry gets its ids, or its stream from the
/// start.
#[utoipa::path(
    post,
    operation_id = "aguiStart",
    path = "/api/v1/agent/runs",
    tag = "ag-ui",
    params(("Idempotency-Key" = Option<String>, Header, description = "Executes the request once for the window: a retry with the same key and request gets the first answer (docs/protocol.md, Idempotency-Key)"), ("Accept" = Option<String>, Header, description = "`text/event-stream` for the run's AG-UI stream"), crate::extract::RunTraceHeaders),
    request_body(content = RunBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The run started: its AG-UI stream (closed after `RUN_FINISHED`/`RUN_ERROR`) with `Accept: text/event-stream`, else its ids", content((crate::openapi::AgUiStarted = "application/json"), (String = "text/event-stream"))),
        (status = 400, description = "Malformed JSON, thread id, run id (`invalid_run_id`) or Idempotency-Key", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "A run is live (`run_active`), or the Idempotency-Key is in use", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Wrong shape (`invalid_body`), no user message (`no_user_message`, `invalid_message`), or a reused Idempotency-Key", body = crate::error::ErrorBody)
    )
)]
pub async fn start(
    State(ctx): State<ApiContext>,
    caller: Caller,
    trace: RunTrace,
    headers: HeaderMap,
    KeyedJson { body, key }: KeyedJson<RunBody>,
) -> Result<Response, ApiError> {
    start_with(ctx, caller, trace, headers, body, key, None).await
}

/// Runs the upstream AG-UI agent `name` (`--agui-agent NAME=URL`) on a thread, as [`start`]
/// runs the built-in agent: the run's start is stored, the upstream gets the thread's whole
/// conversation from the log (the client may send only its new message) with the client's
/// tools, state, context and forwarded properties, and every event it streams is stored as it
/// arrives and served on every protocol. The answer is the run's AG-UI stream off the log.
#[utoipa::path(
    post,
    operation_id = "aguiAgentRun",
    path = "/agui/agents/{name}/run",
    tag = "ag-ui",
    params(("name" = String, Path, description = "The agent's name (`--agui-agent NAME=URL`)"), ("Idempotency-Key" = Option<String>, Header, description = "Executes the request once for the window: a retry with the same key and request gets the first answer (docs/protocol.md, Idempotency-Key)"), ("Accept" = Option<String>, Header, description = "`text/event-stream` for the run's AG-UI stream"), crate::extract::RunTraceHeaders),
    request_body(content = RunBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The run started: its AG-UI stream (closed after `RUN_FINISHED`/`RUN_ERROR`) with `Accept: text/event-stream`, else its ids", content((crate::openapi::AgUiStarted = "application/json"), (String = "text/event-stream"))),
        (status = 400, description = "Malformed JSON, thread id, run id (`invalid_run_id`) or Idempotency-Key", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "No agent of that name is configured, or the thread is another user's (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "A run is live (`run_active`), or the Idempotency-Key is in use", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Wrong shape (`invalid_body`), no user message (`no_user_message`, `invalid_message`), or a reused Idempotency-Key", body = crate::error::ErrorBody)
    )
)]
pub async fn agent_run(
    State(ctx): State<ApiContext>,
    caller: Caller,
    trace: RunTrace,
    Path(name): Path<String>,
    headers: HeaderMap,
    KeyedJson { body, key }: KeyedJson<RunBody>,
) -> Result<Response, ApiError> {
    // The agent is looked up after the thread's access is checked (in `start_with`): another
    // user's thread is a 404 whatever the name.
    start_with(ctx, caller, trace, headers, body, key, Some(name)).await
}

/// [`start`] and [`agent_run`]: the built-in agent, or the upstream agent `upstream`.
async fn start_with(
    ctx: ApiContext,
    caller: Caller,
    trace: RunTrace,
    headers: HeaderMap,
    body: RunBody,
    key: Option<idempotency::RequestKey>,
    upstream: Option<String>,
) -> Result<Response, ApiError> {
    let thread_id = body.thread_id.clone().unwrap_or_else(|| new_id("thread"));
    authorize_thread(&ctx, &caller, &thread_id).await?;
    let run_id = match &body.run_id {
        Some(id) => {
            check_client_id("runId", id)?;
            id.clone()
        }
        None => new_id("run"),
    };
    let message = body.user_message()?;
    let runner = match upstream {
        None => Runner::Builtin,
        Some(name) => {
            let input = ClientInput {
                tools: body.tools.clone().unwrap_or_default(),
                state: body.state.clone().unwrap_or(json!({})),
                context: body.context.clone().unwrap_or_default(),
                forwarded_props: body.forwarded_props.clone().unwrap_or(json!({})),
            };
            let run = ctx.runtime.upstream_run(&name, input).ok_or_else(|| {
                ApiError::NotFound(format!("no AG-UI agent named '{name}' is configured"))
            })?;
            Runner::Upstream(Box::new(run))
        }
    };
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    // The stream's slot before the run: no run is started whose stream would be refused.
    let slot = match wants_stream {
        true => Some(
            ctx.limits
                .sse_slot(&caller.user_id, crate::metrics::AG_UI)?,
        ),
        false => None,
    };
    let answer = {
        let (thread_id, run_id) = (thread_id.clone(), run_id.clone());
        move |stored: &[StoredEvent]| {
            let cursor = stored.first().map(|e| e.id - 1).unwrap_or(0);
            json!({"threadId": thread_id, "runId": run_id, "cursor": cursor})
        }
    };
    let answer = idempotency::once(&ctx, &caller, key, answer, |key| {
        start_run_keyed(
            &ctx, &caller, &trace, &thread_id, &run_id, message, None, key, runner,
        )
    })
    .await?;
    // A retry's answer is the first execution's: its ids, not the ones made above.
    let Started {
        thread_id,
        run_id,
        cursor,
    } = serde_json::from_value(answer).map_err(|e| ApiError::Internal(e.into()))?;
    let Some(slot) = slot else {
        return Ok(Json(json!({"threadId": thread_id, "runId": run_id})).into_response());
    };
    // The client sent the user's message itself: it is not echoed back.
    let (renderer, prelude) = renderer_at(&ctx, &thread_id, cursor, false).await?;
    let render = AgUiSse {
        renderer,
        until_run: Some(run_id),
    };
    Ok(sse_response(Body::from_stream(frames(
        &ctx, &caller, slot, thread_id, cursor, prelude, render,
    ))))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct HistoryQuery {
    thread_id: Option<String>,
    before: Option<String>,
}

/// `GET /api/v1/agent/history?threadId&before=YYYY-MM-DD`: one day of a thread's conversation
/// (without `threadId`: the caller's latest thread) as a `STATE_SNAPSHOT`.
#[utoipa::path(
    get,
    operation_id = "aguiHistory",
    path = "/api/v1/agent/history",
    tag = "ag-ui",
    params(HistoryQuery),
    responses(
        (status = 200, description = "The latest day with messages before `before`", body = crate::openapi::HistorySnapshot),
        (status = 400, description = "`before` is not YYYY-MM-DD (`invalid_before`), or a malformed thread id", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn history(
    State(ctx): State<ApiContext>,
    caller: Caller,
    ApiQuery(query): ApiQuery<HistoryQuery>,
) -> Result<Json<Value>, ApiError> {
    if let Some(b) = &query.before {
        if !is_day(b) {
            return Err(ApiError::bad_request(
                ErrorCode::InvalidBefore,
                format!("before must be a day as YYYY-MM-DD, got {b:?}"),
            ));
        }
    }
    let thread_id = match query.thread_id {
        Some(t) => {
            authorize_thread_read(&ctx, &caller, &t).await?;
            Some(t)
        }
        None => caller_threads(&ctx, &caller)
            .await?
            .first()
            .and_then(|t| t["id"].as_str().map(str::to_string)),
    };
    let events = match &thread_id {
        Some(t) => read_range(&ctx.log, t, 0, i64::MAX).await?,
        None => Vec::new(),
    };
    Ok(Json(history_day(
        thread_id.as_deref(),
        &events,
        query.before.as_deref(),
    )))
}
