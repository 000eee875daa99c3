//! Runs: `POST /instance-ai/chat/:threadId`, `.../cancel`, and `POST /instance-ai/confirm/:requestId`.
//! Each is one append through the log; the agent runtime sees cancels and answers on the log.

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::ErrorCode;
use threadstream_domain::{StoredEvent, ThreadCommand};

use crate::access::authorize_thread;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller, RunTrace};
use crate::idempotency::{self, KeyedJson};
use crate::ids::new_id;
use crate::runs::start_run_keyed;
use crate::ApiContext;

#[derive(Deserialize, utoipa::ToSchema)]
pub struct ChatBody {
    message: String,
    #[serde(default, rename = "messageGroupId")]
    message_group_id: Option<String>,
}

/// Starts a run; with an `Idempotency-Key`, once (see [`crate::idempotency`]).
#[utoipa::path(
    post,
    operation_id = "chatChat",
    path = "/instance-ai/chat/{thread_id}",
    tag = "n8n",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)"), ("Idempotency-Key" = Option<String>, Header, description = "Executes the request once for the window: a retry with the same key and request gets the first answer (docs/protocol.md, Idempotency-Key)"), crate::extract::RunTraceHeaders),
    request_body(content = ChatBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The run started; the thread is created if new", body = crate::openapi::RunStarted),
        (status = 400, description = "A malformed thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "A run is live or waiting on a confirmation (`run_active`), or the Idempotency-Key is in use (`idempotency_key_in_use`)", body = crate::error::ErrorBody),
        (status = 400, description = "Malformed JSON, thread id or Idempotency-Key", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Well-formed JSON of the wrong shape (`invalid_body`)", body = crate::error::ErrorBody),
        (status = 422, description = "Wrong shape (`invalid_body`) or an Idempotency-Key reused with another request (`idempotency_key_reused`)", body = crate::error::ErrorBody)
    )
)]
pub async fn chat(
    State(ctx): State<ApiContext>,
    caller: Caller,
    trace: RunTrace,
    Path(thread_id): Path<String>,
    KeyedJson { body, key }: KeyedJson<ChatBody>,
) -> Result<Json<Value>, ApiError> {
    authorize_thread(&ctx, &caller, &thread_id).await?;
    let run_id = new_id("run");
    let answer = {
        let run_id = run_id.clone();
        move |_: &[StoredEvent]| json!({ "runId": run_id })
    };
    let answer = idempotency::once(&ctx, &caller, key, answer, |key| {
        start_run_keyed(
            &ctx,
            &caller,
            &trace,
            &thread_id,
            &run_id,
            body.message,
            body.message_group_id,
            key,
            threadstream_agent::Runner::Builtin,
        )
    })
    .await?;
    Ok(Json(answer))
}

#[utoipa::path(
    post,
    operation_id = "chatCancel",
    path = "/instance-ai/chat/{thread_id}/cancel",
    tag = "n8n",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)")),
    responses(
        (status = 200, description = "Cancelled; idempotent, a no-op when no run is live", body = crate::openapi::Ok),
        (status = 400, description = "A malformed thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn cancel(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    authorize_thread(&ctx, &caller, &thread_id).await?;
    ctx.log
        .append(
            &thread_id,
            vec![ThreadCommand::Cancel {
                by: caller.user_id,
                reason: "user_cancelled".into(),
            }],
        )
        .await?;
    Ok(Json(json!({ "ok": true })))
}

/// `{kind: "approval", approved, userInput?}`, the older flat `{approved}`, or another kind
/// (`text`, `questions`, `plan-review`, …) carrying `userInput` / `answers`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmBody {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    approved: Option<bool>,
    #[serde(default)]
    user_input: Option<String>,
    #[serde(default)]
    answers: Option<Value>,
}

#[utoipa::path(
    post,
    operation_id = "chatConfirm",
    path = "/instance-ai/confirm/{request_id}",
    tag = "n8n",
    params(("request_id" = String, Path, description = "The `requestId` of a `confirmation-request` event")),
    request_body(content = ConfirmBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The answer is stored", body = crate::openapi::Ok),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown, already answered, or another user's request (`not_found`, `confirmation_not_found`)", body = crate::error::ErrorBody),
        (status = 400, description = "Malformed JSON (`malformed_json`) or not `Content-Type: application/json` (`unsupported_media_type`)", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Well-formed JSON of the wrong shape (`invalid_body`)", body = crate::error::ErrorBody)
    )
)]
pub async fn confirm(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(request_id): Path<String>,
    ApiJson(body): ApiJson<ConfirmBody>,
) -> Result<Json<Value>, ApiError> {
    let approved = match (body.kind.as_deref(), body.approved) {
        (_, Some(a)) => a,
        (None | Some("approval"), None) => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidBody,
                "missing field `approved`",
            ))
        }
        // Answers to text, questions and plan review are an approval unless said otherwise.
        (Some(_), None) => true,
    };
    let not_found = || {
        ApiError::NotFound(format!(
            "confirmation request '{request_id}' is unknown or already answered"
        ))
    };
    let thread_id = ctx
        .log
        .confirmation_thread(&request_id)
        .await?
        .ok_or_else(not_found)?;
    authorize_thread(&ctx, &caller, &thread_id)
        .await
        .map_err(|_| not_found())?;
    ctx.log
        .append(
            &thread_id,
            vec![ThreadCommand::AnswerConfirmation {
                request_id: request_id.clone(),
                approved,
                user_input: body.user_input,
                answers: body.answers,
                by: caller.user_id,
            }],
        )
        .await?;
    Ok(Json(json!({ "ok": true })))
}
