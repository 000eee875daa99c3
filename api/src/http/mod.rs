//! The HTTP routes, one module per resource. What they share lives outside `http`
//! (`crate::access`, `crate::runs`, `crate::sse`, `crate::threads`), so no route module imports
//! another.

pub mod admin;
pub mod agui;
pub mod ai_chat;
pub mod analytics;
pub mod attachments;
pub mod change_feed;
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

use std::sync::OnceLock;

use axum::{Extension, Router};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;
use crate::ApiContext;

/// Every route, each registered once with its OpenAPI operation (its handler's
/// `#[utoipa::path]`): the router ([`router`]), the document ([`document_json`]) and the
/// auth test's table (`tests/blackbox/auth.rs` reads the served document) all come from this
/// one list. Every route but `/healthz` and `/readyz` takes a
/// [`Caller`](crate::extract::Caller), so needs credentials when authentication is configured;
/// the document marks the public ones `security: [{}]`.
pub fn routes() -> OpenApiRouter<ApiContext> {
    // The Durable Streams routes answer with the protocol's headers (CORS, `nosniff`, …).
    let durable_streams = OpenApiRouter::new()
        .routes(routes!(
            streams::read,
            streams::head,
            streams::create,
            streams::append,
            streams::delete,
            streams::options
        ))
        .routes(routes!(
            thread_streams::read,
            thread_streams::head,
            thread_streams::create,
            thread_streams::append,
            thread_streams::options
        ))
        .layer(axum::middleware::from_fn(
            threadstream_durable_streams::protocol::protocol_headers,
        ));
    OpenApiRouter::with_openapi(crate::openapi::base())
        .routes(routes!(health::health))
        .routes(routes!(health::ready))
        .routes(routes!(crate::openapi::openapi_json))
        .routes(routes!(web::index))
        .routes(routes!(web::asset))
        .routes(routes!(web::api_docs))
        .routes(routes!(chat::chat))
        .routes(routes!(chat::cancel))
        .routes(routes!(chat::confirm))
        .routes(routes!(tasks::cancel))
        .routes(routes!(tasks::correct))
        .routes(routes!(agui::start))
        .routes(routes!(agui::agent_run))
        .routes(routes!(agui::events))
        .routes(routes!(agui::history))
        .routes(routes!(attachments::upload))
        .routes(routes!(attachments::signed_url))
        .routes(routes!(attachments::object))
        .routes(routes!(ai_chat::chat))
        .routes(routes!(ai_chat::resume))
        .routes(routes!(items::action))
        .routes(routes!(items::stream))
        .routes(routes!(smith::prompt_new))
        .routes(routes!(smith::prompt, smith::clear))
        .routes(routes!(workflows::list))
        .routes(routes!(workflows::get))
        .routes(routes!(mcp::servers))
        .routes(routes!(metrics::metrics))
        .routes(routes!(admin::erase_route))
        .routes(routes!(admin::export_route))
        .routes(routes!(change_feed::status))
        .routes(routes!(events::stream))
        .routes(routes!(events::ingest))
        .routes(routes!(session::ticket))
        .routes(routes!(session::open, session::close))
        .routes(routes!(threads::list, threads::create))
        .routes(routes!(threads::rename, threads::delete))
        .routes(routes!(threads::messages))
        .routes(routes!(threads::status))
        .routes(routes!(threads::fork))
        .routes(routes!(export::thread))
        .routes(routes!(analytics::runs))
        .routes(routes!(analytics::summary))
        // The protocol's reserved control routes, before the streams' catch-all.
        .routes(routes!(subscriptions::jwks))
        .routes(routes!(
            subscriptions::get,
            subscriptions::put,
            subscriptions::delete
        ))
        .routes(routes!(subscriptions::add_streams))
        .routes(routes!(subscriptions::remove_stream))
        .routes(routes!(subscriptions::callback))
        .routes(routes!(subscriptions::claim))
        .routes(routes!(subscriptions::ack))
        .routes(routes!(subscriptions::release))
        .merge(durable_streams)
}

/// The service: [`routes`], a JSON 404 for anything else, and the per-user rate limit.
pub fn router(ctx: ApiContext) -> Router {
    let (router, _) = routes().split_for_parts();
    router
        .layer(Extension(crate::openapi::ServedDocument(document_json())))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            crate::limits::rate_limit,
        ))
        .with_state(ctx)
}

/// The OpenAPI document of [`routes`], built once (`crate::openapi::finish`): what
/// `GET /openapi.json` serves and `docs/openapi.json` holds.
pub fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| crate::openapi::finish(routes().split_for_parts().1))
}
