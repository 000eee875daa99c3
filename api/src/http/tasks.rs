//! Background tasks of a thread's live run: `POST /instance-ai/chat/:threadId/tasks/:taskId/cancel`
//! and `…/correct`. Each is one append (`task-cancel-requested`, `task-correction`); the run
//! that executes the task reads it from the log. A task that is unknown or no longer running is
//! a 404 `task_not_found`. The running tasks are listed by `GET /threads/:threadId/status`.

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::ErrorCode;
use threadstream_domain::ThreadCommand;

use crate::access::authorize_thread;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller};
use crate::ApiContext;

#[utoipa::path(
    post,
    operation_id = "tasksCancel",
    path = "/instance-ai/chat/{thread_id}/tasks/{task_id}/cancel",
    tag = "tasks",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)"), ("task_id" = String, Path, description = "The background task")),
    responses(
        (status = 200, description = "The task is being cancelled", body = crate::openapi::Ok),
        (status = 400, description = "A malformed thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's, or the task is unknown or not running (`task_not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn cancel(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path((thread_id, task_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    authorize_thread(&ctx, &caller, &thread_id).await?;
    ctx.log
        .append(
            &thread_id,
            vec![ThreadCommand::CancelTask {
                task_id,
                by: caller.user_id,
            }],
        )
        .await?;
    Ok(Json(json!({ "ok": true })))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CorrectBody {
    message: String,
}

#[utoipa::path(
    post,
    operation_id = "tasksCorrect",
    path = "/instance-ai/chat/{thread_id}/tasks/{task_id}/correct",
    tag = "tasks",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)"), ("task_id" = String, Path, description = "The background task")),
    request_body(content = CorrectBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The correction reaches the task before its next model call", body = crate::openapi::Ok),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's, or the task is unknown or not running (`task_not_found`)", body = crate::error::ErrorBody),
        (status = 400, description = "Malformed JSON or thread id", body = crate::error::ErrorBody),
        (status = 413, description = "The body or message is too large (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Wrong shape (`invalid_body`) or an empty message (`empty_message`)", body = crate::error::ErrorBody)
    )
)]
pub async fn correct(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path((thread_id, task_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<CorrectBody>,
) -> Result<Json<Value>, ApiError> {
    authorize_thread(&ctx, &caller, &thread_id).await?;
    if body.message.trim().is_empty() {
        return Err(ApiError::unprocessable(
            ErrorCode::EmptyMessage,
            "message must not be empty",
        ));
    }
    if body.message.len() > ctx.config.max_message_bytes {
        return Err(ApiError::message_too_large(
            ctx.config.max_message_bytes,
            body.message.len(),
        ));
    }
    ctx.log
        .append(
            &thread_id,
            vec![ThreadCommand::CorrectTask {
                task_id,
                message: body.message,
                by: caller.user_id,
            }],
        )
        .await?;
    Ok(Json(json!({ "ok": true })))
}
