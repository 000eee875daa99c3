//! The HTTP routes, one module per resource. What they share lives outside `http`
//! (`crate::access`, `crate::runs`, `crate::sse`, `crate::threads`), so no route module imports
//! another.

pub mod admin;
pub mod agui;
pub mod analytics;
pub mod attachments;
pub mod chat;
pub mod events;
pub mod export;
pub mod health;
pub mod items;
pub mod mcp;
pub mod metrics;
pub mod session;
pub mod smith;
pub mod streams;
pub mod subscriptions;
pub mod tasks;
pub mod thread_streams;
pub mod threads;
pub mod web;
pub mod workflows;

use axum::routing::{delete, get, patch, post};
use axum::Router;

use crate::error::ApiError;
use crate::extract::{INGEST_ROUTE, TICKET_STREAM_ROUTE};
use crate::ApiContext;

/// Every route but `/healthz` and `/readyz` takes a [`Caller`](crate::extract::Caller), so needs credentials when authentication is
/// configured; `tests/blackbox/auth.rs` checks each one for two users and fails on a route it does not
/// know.
pub fn router(ctx: ApiContext) -> Router {
    Router::new()
        .route("/healthz", get(health::health))
        .route("/readyz", get(health::ready))
        .route("/openapi.json", get(crate::openapi::openapi_json))
        .route("/", get(web::index))
        .route("/assets/{file}", get(web::asset))
        .route("/api-docs", get(web::api_docs))
        .route("/instance-ai/chat/{thread_id}", post(chat::chat))
        .route("/api/v1/agent/runs", post(agui::start))
        .route("/api/v1/agent/runs/{thread_id}/events", get(agui::events))
        .route("/api/v1/agent/history", get(agui::history))
        .route("/api/v1/agent/attachments", post(attachments::upload))
        .route(
            "/api/v1/agent/attachments/signed-url",
            get(attachments::signed_url),
        )
        .route("/api/v1/agent/attachments/object", get(attachments::object))
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
        .route("/instance-ai/mcp/servers", get(mcp::servers))
        .route("/metrics", get(metrics::metrics))
        .route("/instance-ai/admin/erase", post(admin::erase_route))
        .route("/instance-ai/confirm/{request_id}", post(chat::confirm))
        .route(TICKET_STREAM_ROUTE, get(events::stream))
        .route(
            "/instance-ai/events/{thread_id}/ticket",
            post(session::ticket),
        )
        .route(
            "/instance-ai/session",
            post(session::open).delete(session::close),
        )
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
        .route("/instance-ai/threads/{thread_id}/fork", post(threads::fork))
        .route(INGEST_ROUTE, post(events::ingest))
        .route(
            "/instance-ai/threads/{thread_id}/export",
            get(export::thread),
        )
        .route("/instance-ai/analytics/runs", get(analytics::runs))
        .route("/instance-ai/analytics/summary", get(analytics::summary))
        // The protocol's reserved control routes, before the streams' catch-all.
        .route("/v1/stream/__ds/jwks.json", get(subscriptions::jwks))
        .route(
            "/v1/stream/__ds/subscriptions/{id}",
            get(subscriptions::get)
                .put(subscriptions::put)
                .delete(subscriptions::delete),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/streams",
            post(subscriptions::add_streams),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/streams/{*path}",
            delete(subscriptions::remove_stream),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/callback",
            post(subscriptions::callback),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/claim",
            post(subscriptions::claim),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/ack",
            post(subscriptions::ack),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/release",
            post(subscriptions::release),
        )
        .route(
            "/v1/stream/{*path}",
            get(streams::read)
                .head(streams::head)
                .put(streams::create)
                .post(streams::append)
                .delete(streams::delete)
                .options(streams::options)
                .layer(axum::middleware::from_fn(
                    crate::durable::protocol::protocol_headers,
                )),
        )
        .route(
            "/v1/threads/{thread_id}",
            get(thread_streams::read)
                .head(thread_streams::head)
                .put(thread_streams::create)
                .post(thread_streams::append)
                .options(thread_streams::options)
                .layer(axum::middleware::from_fn(
                    crate::durable::protocol::protocol_headers,
                )),
        )
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            crate::limits::rate_limit,
        ))
        .with_state(ctx)
}
