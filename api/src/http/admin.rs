//! `POST /instance-ai/admin/erase`: an admin erases a thread (with its forks) or every stream
//! of a user, for real (docs/operations.md, "Erasure and retention").

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use threadstream_domain::event::erasure::{ErasureReason, ErasureScope};
use threadstream_domain::ErrorCode;
use threadstream_store::{ErasureRequest, NotErased};

use crate::access::check_thread_id;
use crate::erasure::{erase, ErasureAnswer};
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller};
use crate::ApiContext;

/// Exactly one of the two.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EraseBody {
    /// Erase this thread and every fork of it.
    #[serde(default)]
    thread_id: Option<String>,
    /// Erase every thread and Durable Stream this user owns, and the user's attachments and
    /// idempotency records.
    #[serde(default)]
    user_id: Option<String>,
}

#[utoipa::path(
    post,
    operation_id = "adminErase",
    path = "/instance-ai/admin/erase",
    tag = "service",
    request_body(content = EraseBody, content_type = "application/json", description = "Exactly one of `threadId` and `userId`"),
    responses(
        (status = 200, description = "Erased: the rows are gone and an `erased` tombstone records it (`alreadyErased`: the thread or user was erased before; leftovers were removed. A user with only attachments or idempotency records gets `tombstoneId: null`)", body = ErasureAnswer),
        (status = 400, description = "Malformed JSON (`malformed_json`) or thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "Not an admin (`admin_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "Nothing of that thread or user is stored (`not_found`)", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Neither or both of `threadId` and `userId`, a blank user id, or the wrong shape (`invalid_scope`, `invalid_body`)", body = crate::error::ErrorBody)
    )
)]
pub async fn erase_route(
    State(ctx): State<ApiContext>,
    caller: Caller,
    ApiJson(body): ApiJson<EraseBody>,
) -> Result<Json<ErasureAnswer>, ApiError> {
    if ctx.auth.enabled() && !caller.is_admin() {
        return Err(ApiError::Forbidden {
            code: ErrorCode::AdminOnly,
            message: "only an admin may erase".into(),
        });
    }
    let scope = match (body.thread_id, body.user_id) {
        (Some(thread), None) => {
            check_thread_id(&thread)?;
            ErasureScope {
                thread_id: Some(thread),
                ..Default::default()
            }
        }
        (None, Some(user)) if !user.trim().is_empty() => ErasureScope {
            user_id: Some(user),
            ..Default::default()
        },
        _ => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidScope,
                "give exactly one of threadId and userId (not blank)",
            ))
        }
    };
    let what = match (&scope.thread_id, &scope.user_id) {
        (Some(t), _) => format!("thread '{t}'"),
        (_, Some(u)) => format!("user '{u}'"),
        _ => unreachable!("one is set"),
    };
    let request = ErasureRequest {
        scope,
        requested_by: caller.user_id.clone(),
        reason: ErasureReason::Request,
    };
    match erase(&ctx.log, ctx.attachments.store(), request).await? {
        Ok(answer) => {
            tracing::info!(
                by = %caller.user_id,
                events = answer.events_erased,
                tombstone = ?answer.tombstone_id,
                "erased {what}"
            );
            Ok(Json(answer))
        }
        Err(NotErased::NothingFound | NotErased::Busy) => {
            Err(ApiError::NotFound(format!("nothing of {what} is stored")))
        }
    }
}
