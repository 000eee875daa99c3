//! Credentials for browsers, whose `EventSource` cannot send an `Authorization` header:
//! `POST /instance-ai/session` turns a bearer token or JWT into an HttpOnly session cookie,
//! `DELETE /instance-ai/session` removes it, and `POST /instance-ai/events/:threadId/ticket`
//! issues a stream ticket that opens that thread's stream once within 60 s. The values are
//! signed by [`crate::auth::Authenticator`]; no long-lived secret ever goes into a URL.

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use threadstream_domain::ErrorCode;

use crate::access::authorize_thread_read;
use crate::auth::Credential;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

fn with_cookie(status: StatusCode, cookie: String) -> Result<Response, ApiError> {
    let mut resp = status.into_response();
    let v = HeaderValue::from_str(&cookie).map_err(|e| ApiError::Internal(e.into()))?;
    resp.headers_mut().insert(header::SET_COOKIE, v);
    Ok(resp)
}

/// 204 and `Set-Cookie: threadstream_session=…; HttpOnly; SameSite=Strict; Path=/`. Only a
/// bearer credential opens a session (a session cannot extend itself past its expiry).
#[utoipa::path(
    post,
    operation_id = "sessionOpen",
    path = "/instance-ai/session",
    tag = "session",
    responses(
        (status = 204, description = "The session cookie is set", headers(("Set-Cookie" = String, description = "`threadstream_session=…; HttpOnly; SameSite=Strict; Path=/`")))
    )
)]
pub async fn open(State(ctx): State<ApiContext>, caller: Caller) -> Result<Response, ApiError> {
    if matches!(caller.credential, Credential::Session | Credential::Ticket) {
        return Err(ApiError::Unauthorized {
            code: ErrorCode::MissingCredentials,
            message: "open a session with `Authorization: Bearer <token or JWT>`".into(),
        });
    }
    let cookie = ctx.auth.session_cookie(&caller.identity())?;
    with_cookie(StatusCode::NO_CONTENT, cookie)
}

/// 204 and a `Set-Cookie` that removes the session cookie. Needs no credentials: signing out
/// of an expired session must work.
#[utoipa::path(
    delete,
    operation_id = "sessionClose",
    path = "/instance-ai/session",
    tag = "session",
    responses(
        (status = 204, description = "The session cookie is removed", headers(("Set-Cookie" = String, description = "An expired `threadstream_session`")))
    ),
    security(())
)]
pub async fn close(State(ctx): State<ApiContext>) -> Result<Response, ApiError> {
    with_cookie(StatusCode::NO_CONTENT, ctx.auth.clear_cookie())
}

/// `{ticket, expiresAt}` (epoch ms): `GET /instance-ai/events/:threadId?ticket=…` accepts it
/// once, before then, for this thread and caller only. Issued to whoever may read the thread.
#[utoipa::path(
    post,
    operation_id = "sessionTicket",
    path = "/instance-ai/events/{thread_id}/ticket",
    tag = "session",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)")),
    responses(
        (status = 200, description = "A ticket for the thread's stream", body = crate::openapi::Ticket),
        (status = 400, description = "A malformed thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is another user's (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn ticket(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    authorize_thread_read(&ctx, &caller, &thread_id).await?;
    let (ticket, expires_at) = ctx.auth.issue_ticket(&caller.identity(), &thread_id)?;
    Ok(Json(json!({"ticket": ticket, "expiresAt": expires_at})))
}
