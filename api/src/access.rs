//! Who may do what to a thread: the access checks every route that acts on or reads a thread
//! shares, whatever protocol it speaks.

use crate::auth::Role;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;
use threadstream_domain::ErrorCode;

pub fn check_thread_id(thread_id: &str) -> Result<(), ApiError> {
    threadstream_domain::validate_thread_id(thread_id)
        .map_err(|m| ApiError::bad_request(ErrorCode::InvalidThreadId, m))
}

/// The access check of every route that acts on a thread (chat, cancel, confirm, tasks,
/// ingest, rename, delete): the id is well-formed, and a thread that exists belongs to the
/// caller — another user's thread is indistinguishable from a missing one (404), and an admin
/// may read it ([`authorize_thread_read`]) but not act on it. An ingest-only caller may act
/// only on the threads its token grants (403 otherwise).
pub async fn authorize_thread(
    ctx: &ApiContext,
    caller: &Caller,
    thread_id: &str,
) -> Result<(), ApiError> {
    authorize(ctx, caller, thread_id, false).await
}

/// The access check of every route that reads a thread (messages, status, streams, export,
/// history): as [`authorize_thread`], but an admin may read any user's thread (audit).
pub async fn authorize_thread_read(
    ctx: &ApiContext,
    caller: &Caller,
    thread_id: &str,
) -> Result<(), ApiError> {
    authorize(ctx, caller, thread_id, true).await
}

async fn authorize(
    ctx: &ApiContext,
    caller: &Caller,
    thread_id: &str,
    read: bool,
) -> Result<(), ApiError> {
    check_thread_id(thread_id)?;
    if let Role::Ingest { threads } = &caller.role {
        if read {
            return Err(ApiError::Forbidden {
                code: ErrorCode::IngestOnly,
                message: "an ingest-only token cannot read threads".into(),
            });
        }
        if !threads.contains(thread_id) {
            return Err(ApiError::Forbidden {
                code: ErrorCode::ThreadNotGranted,
                message: format!("this ingest token is not granted thread '{thread_id}'"),
            });
        }
    }
    match ctx.log.thread_owner(thread_id).await? {
        Some(owner) if owner != caller.user_id => {
            if caller.is_admin() {
                if read {
                    return Ok(());
                }
                return Err(ApiError::Forbidden {
                    code: ErrorCode::ReadOnly,
                    message: format!(
                        "thread '{thread_id}' belongs to another user: an admin may read it, not act on it"
                    ),
                });
            }
            Err(ApiError::NotFound(format!(
                "thread '{thread_id}' not found"
            )))
        }
        _ => Ok(()),
    }
}

/// An erased thread (removed by `threadstream erase`, the admin route or retention, and not
/// created again since) is gone: its read routes answer 404 `not_found`.
pub async fn refuse_erased(ctx: &ApiContext, thread_id: &str) -> Result<(), ApiError> {
    if ctx.log.thread_owner(thread_id).await?.is_none()
        && ctx.log.erased_stream(thread_id).await?.is_some()
    {
        return Err(ApiError::NotFound(format!(
            "thread '{thread_id}' not found"
        )));
    }
    Ok(())
}

/// The caller may use Durable Streams and their subscriptions (ingest-only tokens may not).
pub fn durable_streams_user(caller: &Caller) -> Result<(), ApiError> {
    if let Role::Ingest { .. } = caller.role {
        return Err(ApiError::Forbidden {
            code: ErrorCode::IngestOnly,
            message: "an ingest-only token cannot use Durable Streams".into(),
        });
    }
    Ok(())
}
