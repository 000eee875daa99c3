//! Background tasks of a thread's live run: `POST /instance-ai/chat/:threadId/tasks/:taskId/cancel`
//! and `…/correct`. Each is one append (`task-cancel-requested`, `task-correction`); the run
//! that executes the task reads it from the log. A task that is unknown or no longer running is
//! a 404 `task_not_found`. The running tasks are listed by `GET /threads/:threadId/status`.

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::ThreadCommand;

use crate::access::authorize_thread;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller};
use crate::ApiContext;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorrectBody {
    message: String,
}

pub async fn correct(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path((thread_id, task_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<CorrectBody>,
) -> Result<Json<Value>, ApiError> {
    authorize_thread(&ctx, &caller, &thread_id).await?;
    if body.message.trim().is_empty() {
        return Err(ApiError::unprocessable(
            "empty_message",
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
