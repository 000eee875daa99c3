//! The HTTP routes, one module per resource, and the checks every thread route shares.

pub mod agui;
pub mod analytics;
pub mod chat;
pub mod events;
pub mod export;
pub mod items;
pub mod smith;
pub mod tasks;
pub mod threads;
pub mod workflows;

use axum::routing::{get, patch, post};
use axum::Router;

use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

pub fn router(ctx: ApiContext) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(serde_json::json!({"ok": true})) }),
        )
        .route("/instance-ai/chat/{thread_id}", post(chat::chat))
        .route("/api/v1/agent/runs", post(agui::start))
        .route("/api/v1/agent/runs/{thread_id}/events", get(agui::events))
        .route("/api/v1/agent/history", get(agui::history))
        .route("/api/flows/{kind}/actions/{action}", post(items::action))
        .route(
            "/api/flows/{kind}/requests/{request_id}/stream",
            get(items::stream),
        )
        .route("/smith", post(smith::prompt_new))
        .route(
            "/smith/{workflow_id}",
            post(smith::prompt).delete(smith::clear),
        )
        .route("/instance-ai/chat/{thread_id}/cancel", post(chat::cancel))
        .route(
            "/instance-ai/chat/{thread_id}/tasks/{task_id}/cancel",
            post(tasks::cancel),
        )
        .route(
            "/instance-ai/chat/{thread_id}/tasks/{task_id}/correct",
            post(tasks::correct),
        )
        .route("/instance-ai/workflows", get(workflows::list))
        .route("/instance-ai/workflows/{workflow_id}", get(workflows::get))
        .route("/instance-ai/confirm/{request_id}", post(chat::confirm))
        .route("/instance-ai/events/{thread_id}", get(events::stream))
        .route(
            "/instance-ai/threads",
            get(threads::list).post(threads::create),
        )
        .route(
            "/instance-ai/threads/{thread_id}",
            patch(threads::rename).delete(threads::delete),
        )
        .route(
            "/instance-ai/threads/{thread_id}/messages",
            get(threads::messages),
        )
        .route(
            "/instance-ai/threads/{thread_id}/status",
            get(threads::status),
        )
        .route(
            "/instance-ai/threads/{thread_id}/events",
            post(events::ingest),
        )
        .route(
            "/instance-ai/threads/{thread_id}/export",
            get(export::thread),
        )
        .route("/instance-ai/analytics/runs", get(analytics::runs))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .with_state(ctx)
}

/// A new id for things the protocol gives no format of its own: `prefix_<uuid v7>`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

pub fn check_thread_id(thread_id: &str) -> Result<(), ApiError> {
    threadstream_domain::validate_thread_id(thread_id)
        .map_err(|m| ApiError::bad_request("invalid_thread_id", m))
}

/// The one access check of every thread route: the id is well-formed, and a thread that exists
/// belongs to the caller (another user's thread is indistinguishable from a missing one).
pub async fn authorize_thread(
    ctx: &ApiContext,
    caller: &Caller,
    thread_id: &str,
) -> Result<(), ApiError> {
    check_thread_id(thread_id)?;
    match ctx.log.thread_owner(thread_id).await? {
        Some(owner) if owner != caller.user_id => Err(ApiError::NotFound(format!(
            "thread '{thread_id}' not found"
        ))),
        _ => Ok(()),
    }
}
