//! Runs: `POST /instance-ai/chat/:threadId`, `.../cancel`, and `POST /instance-ai/confirm/:requestId`.
//! Each is one append through the log; the agent runtime sees cancels and answers on the log.

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::{StoredEvent, ThreadCommand};

use crate::access::authorize_thread;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller};
use crate::idempotency::{self, KeyedJson};
use crate::ids::new_id;
use crate::runs::start_run_keyed;
use crate::ApiContext;

#[derive(Deserialize)]
pub struct ChatBody {
    message: String,
    #[serde(default, rename = "messageGroupId")]
    message_group_id: Option<String>,
}

/// Starts a run; with an `Idempotency-Key`, once (see [`crate::idempotency`]).
pub async fn chat(
    State(ctx): State<ApiContext>,
    caller: Caller,
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
            &thread_id,
            &run_id,
            body.message,
            body.message_group_id,
            key,
        )
    })
    .await?;
    Ok(Json(answer))
}

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
#[derive(Deserialize)]
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
                "invalid_body",
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
