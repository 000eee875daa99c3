//! Threads: list, create, rename, delete, and the read models of one thread (message history
//! with `nextEventId`, status).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::ErrorCode;
use threadstream_domain::{
    AgentEvent, EventBody, ForkOf, ThreadCommand, ThreadError, MAX_TITLE_CHARS,
};
use threadstream_projections::{History, Status, ThreadList};

use crate::access::{authorize_thread, authorize_thread_read, check_thread_id, refuse_erased};
use crate::auth::Role;
use crate::background::projector;
use crate::error::ApiError;
use crate::extract::{parse_json, ApiJson, ApiQuery, Caller};
use crate::ids::new_id;
use crate::threads::{delete_thread, threads_where};
use crate::ApiContext;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Every user's threads (admins only).
    #[serde(default)]
    all: bool,
}

/// `GET /instance-ai/threads`: the caller's threads; `?all=true` every user's (admins only,
/// for audit; each thread carries its `owner`).
#[utoipa::path(
    get,
    operation_id = "threadsList",
    path = "/instance-ai/threads",
    tag = "n8n",
    params(ListQuery),
    responses(
        (status = 200, description = "The caller's threads (every user's with `all=true`), newest first", body = crate::openapi::ThreadListBody),
        (status = 400, description = "An unknown or malformed query parameter (`invalid_query`)", body = crate::error::ErrorBody),
        (status = 403, description = "`all=true` by a caller who is not an admin (`admin_only`)", body = crate::error::ErrorBody)
    )
)]
pub async fn list(
    State(ctx): State<ApiContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    if q.all && !caller.is_admin() {
        return Err(ApiError::Forbidden {
            code: ErrorCode::AdminOnly,
            message: "only an admin may list every user's threads (?all=true)".into(),
        });
    }
    let threads = threads_where(&ctx, |t| q.all || t["owner"] == caller.user_id.as_str()).await?;
    Ok(Json(json!({ "threads": threads })))
}

/// A title as sent: at most [`MAX_TITLE_CHARS`] characters and not blank (the document's
/// `title` schemas read the same constant); stored trimmed.
fn checked_title(raw: &str) -> Result<String, ApiError> {
    let title = raw.trim();
    if title.is_empty() || raw.chars().count() > MAX_TITLE_CHARS {
        return Err(ApiError::unprocessable(
            ErrorCode::InvalidTitle,
            format!("title must be 1 to {MAX_TITLE_CHARS} characters and not blank"),
        ));
    }
    Ok(title.to_string())
}

#[derive(Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateBody {
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    title: Option<String>,
}

/// The body is optional: an empty POST creates a thread with a generated id.
#[utoipa::path(
    post,
    operation_id = "threadsCreate",
    path = "/instance-ai/threads",
    tag = "n8n",
    request_body(content = Option<CreateBody>, content_type = "application/json", description = "Optional: an empty body (or `null`) creates a thread with a generated id"),
    responses(
        (status = 201, description = "The thread is created", body = crate::openapi::ThreadSummary),
        (status = 400, description = "Malformed JSON (`malformed_json`) or thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 409, description = "The thread exists (`thread_exists`)", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Well-formed JSON of the wrong shape (`invalid_body`)", body = crate::error::ErrorBody)
    )
)]
pub async fn create(
    State(ctx): State<ApiContext>,
    caller: Caller,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    // No body, or JSON `null` (the document's `oneOf: [null, CreateBody]`).
    let body: CreateBody =
        if std::str::from_utf8(&body).is_ok_and(|b| matches!(b.trim(), "" | "null")) {
            CreateBody::default()
        } else {
            parse_json(&body)?
        };
    let thread_id = body.thread_id.unwrap_or_else(|| new_id("thread"));
    check_thread_id(&thread_id)?;
    let title = body.title.as_deref().map(checked_title).transpose()?;
    let state = ctx.log.thread_state(&thread_id).await?;
    if state.exists || state.deleted {
        return Err(ApiError::Conflict {
            code: ErrorCode::ThreadExists,
            message: format!("thread '{thread_id}' already exists"),
        });
    }
    ctx.log
        .append(
            &thread_id,
            vec![ThreadCommand::Create {
                owner: caller.user_id.clone(),
                title,
            }],
        )
        .await?;
    let (doc, _) =
        projector::view::<ThreadList>(&ctx.log, ctx.log.client_sight(), &thread_id).await?;
    Ok((StatusCode::CREATED, Json(ThreadList::render(&doc))))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkBody {
    /// The last event of the source the fork holds (an event of the source, between runs).
    #[serde(
        default,
        deserialize_with = "threadstream_domain::integers::optional_i64"
    )]
    through_event_id: Option<i64>,
    /// Or: fork just before this user message (its `messageId`), to edit and resend it.
    #[serde(default)]
    before_message_id: Option<String>,
    /// The fork's id; generated when absent.
    #[serde(default)]
    thread_id: Option<String>,
    /// The fork's title; the source's at the fork point when absent.
    #[serde(default)]
    title: Option<String>,
}

#[utoipa::path(
    post,
    operation_id = "threadsFork",
    path = "/instance-ai/threads/{thread_id}/fork",
    tag = "n8n",
    params(("thread_id" = String, Path, description = "The thread to fork")),
    request_body(content = ForkBody, content_type = "application/json", description = "Exactly one of `throughEventId` and `beforeMessageId`"),
    responses(
        (status = 201, description = "The fork is created; its summary carries `forkOf`", body = crate::openapi::ThreadSummary),
        (status = 400, description = "Malformed JSON (`malformed_json`) or thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "An admin or an ingest-only token (`read_only`, `ingest_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such source (`not_found`), or a deleted source (`thread_deleted`)", body = crate::error::ErrorBody),
        (status = 409, description = "The source has no such fork point: not an event or user message of it (`fork_point_not_found`), or a run is live there (`fork_point_inside_run`); or the new thread id is taken (`thread_exists`)", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Neither or both fork points (`invalid_fork_point`), a bad title (`invalid_title`), or the wrong shape (`invalid_body`)", body = crate::error::ErrorBody)
    )
)]
/// `POST /instance-ai/threads/:threadId/fork`: a new thread whose history is the source's up to
/// an event, read through (the source's events are not copied, and the source is unchanged),
/// where the next message starts a new run. Only the source's owner may fork it.
pub async fn fork(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(source_id): Path<String>,
    ApiJson(body): ApiJson<ForkBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if let Role::Ingest { .. } = caller.role {
        // An ingest token appends a remote agent's events; it does not make threads.
        return Err(ApiError::Forbidden {
            code: ErrorCode::IngestOnly,
            message: "an ingest-only token cannot fork threads".into(),
        });
    }
    authorize_thread(&ctx, &caller, &source_id).await?;
    if ctx.log.thread_owner(&source_id).await?.is_none() {
        return Err(ApiError::NotFound(format!(
            "thread '{source_id}' not found"
        )));
    }
    if ctx.log.thread_state(&source_id).await?.deleted {
        return Err(ApiError::Rule(ThreadError::ThreadDeleted));
    }
    let through_event_id = match (body.through_event_id, body.before_message_id) {
        (Some(id), None) => id,
        (None, Some(message_id)) => event_before_message(&ctx, &source_id, &message_id).await?,
        _ => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidForkPoint,
                "give exactly one of throughEventId and beforeMessageId",
            ))
        }
    };
    let thread_id = body.thread_id.unwrap_or_else(|| new_id("thread"));
    check_thread_id(&thread_id)?;
    let title = body.title.as_deref().map(checked_title).transpose()?;
    ctx.log
        .append(
            &thread_id,
            vec![ThreadCommand::Fork {
                owner: caller.user_id.clone(),
                title,
                fork_of: ForkOf {
                    thread_id: source_id,
                    through_event_id,
                },
            }],
        )
        .await?;
    let (doc, _) =
        projector::view::<ThreadList>(&ctx.log, ctx.log.client_sight(), &thread_id).await?;
    Ok((StatusCode::CREATED, Json(ThreadList::render(&doc))))
}

/// The id of the event just before the user message `message_id` of `thread_id` (read
/// through, when the thread is itself a fork).
async fn event_before_message(
    ctx: &ApiContext,
    thread_id: &str,
    message_id: &str,
) -> Result<i64, ApiError> {
    let mut previous = 0;
    loop {
        let page = ctx.log.read_thread(thread_id, previous, 5_000).await?;
        if page.is_empty() {
            return Err(ApiError::Conflict {
                code: ErrorCode::ForkPointNotFound,
                message: format!("no user message '{message_id}' in thread '{thread_id}'"),
            });
        }
        for e in &page {
            if e.event_type == "user-message" {
                if let Ok(AgentEvent {
                    body: EventBody::UserMessage(m),
                    ..
                }) = e.decode()
                {
                    if m.message_id == message_id {
                        return Ok(previous);
                    }
                }
            }
            previous = e.id;
        }
    }
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    title: String,
}

#[utoipa::path(
    patch,
    operation_id = "threadsRename",
    path = "/instance-ai/threads/{thread_id}",
    tag = "n8n",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)")),
    request_body(content = RenameBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The renamed thread", body = crate::openapi::ThreadSummary),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's or unknown (`not_found`, `thread_not_found`), or deleted (`thread_deleted`)", body = crate::error::ErrorBody),
        (status = 400, description = "Malformed JSON or thread id", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Wrong shape (`invalid_body`) or a title that is not 1 to 200 characters (`invalid_title`)", body = crate::error::ErrorBody)
    )
)]
pub async fn rename(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
    ApiJson(body): ApiJson<RenameBody>,
) -> Result<Json<Value>, ApiError> {
    authorize_thread(&ctx, &caller, &thread_id).await?;
    let title = checked_title(&body.title)?;
    ctx.log
        .append(
            &thread_id,
            vec![ThreadCommand::Rename {
                title,
                by: caller.user_id,
            }],
        )
        .await?;
    let (doc, _) =
        projector::view::<ThreadList>(&ctx.log, ctx.log.client_sight(), &thread_id).await?;
    Ok(Json(ThreadList::render(&doc)))
}

#[utoipa::path(
    delete,
    operation_id = "threadsDelete",
    path = "/instance-ai/threads/{thread_id}",
    tag = "n8n",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)")),
    responses(
        (status = 200, description = "The thread is deleted", body = crate::openapi::Ok),
        (status = 400, description = "A malformed thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's or unknown (`not_found`, `thread_not_found`), or deleted already (`thread_deleted`)", body = crate::error::ErrorBody),
        (status = 409, description = "A run is live (`run_active`)", body = crate::error::ErrorBody)
    )
)]
pub async fn delete(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    delete_thread(&ctx, &caller, &thread_id).await?;
    Ok(Json(json!({ "ok": true })))
}

/// `{threadId, messages, nextEventId}`: `nextEventId - 1` is exactly the last event the messages
/// cover, so an SSE cursor set to it neither repeats nor misses anything.
#[utoipa::path(
    get,
    operation_id = "threadsMessages",
    path = "/instance-ai/threads/{thread_id}/messages",
    tag = "n8n",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)")),
    responses(
        (status = 200, description = "The message history and the cursor after it", body = crate::openapi::ThreadMessages),
        (status = 400, description = "A malformed thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's, or was erased (`not_found`), or deleted (`thread_deleted`)", body = crate::error::ErrorBody)
    )
)]
pub async fn messages(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    authorize_thread_read(&ctx, &caller, &thread_id).await?;
    refuse_erased(&ctx, &thread_id).await?;
    // A deleted thread's history is gone for its readers (as an erased one's is).
    if ctx.log.thread_state(&thread_id).await?.deleted {
        return Err(ApiError::Rule(ThreadError::ThreadDeleted));
    }
    let (doc, last_id) =
        projector::view::<History>(&ctx.log, ctx.log.client_sight(), &thread_id).await?;
    Ok(Json(json!({
        "threadId": thread_id,
        "messages": History::render(&doc),
        "nextEventId": last_id + 1,
    })))
}

#[utoipa::path(
    get,
    operation_id = "threadsStatus",
    path = "/instance-ai/threads/{thread_id}/status",
    tag = "n8n",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)")),
    responses(
        (status = 200, description = "The thread's status", body = crate::openapi::ThreadStatus),
        (status = 400, description = "A malformed thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's, or was erased (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn status(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    authorize_thread_read(&ctx, &caller, &thread_id).await?;
    refuse_erased(&ctx, &thread_id).await?;
    let (doc, _) = projector::view::<Status>(&ctx.log, ctx.log.client_sight(), &thread_id).await?;
    Ok(Json(Status::render(&doc)))
}
