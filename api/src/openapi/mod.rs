//! The OpenAPI 3.1 document of every route, generated from the code: each handler carries a
//! `#[utoipa::path]`, request and response types derive their schemas (`utoipa::ToSchema`), and
//! the n8n event schemas come from the domain's payload types. Served at `GET /openapi.json`
//! and committed as `docs/openapi.json` (`tests/blackbox/openapi.rs` checks they are equal and
//! that a pinned validator accepts the document). The router and the document come from one
//! list of routes (`crate::http::routes`), so no route can be served undocumented; this module
//! does not import `http`: the routes hand it their document ([`finish`]).
//!
//! One module per job: `schemas` (the response bodies the handlers do not own), `components`
//! (what every route shares, added once by `Shared`: the error answers, the security schemes,
//! the SSE event schemas) and `constraints` (what the server checks that derived schemas cannot
//! say, written into the JSON); the document itself and its route are here.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use utoipa::{Modify, OpenApi};

use crate::error::ErrorBody;

mod components;
mod constraints;
mod durable;
mod schemas;

use components::Shared;
pub use schemas::*;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "threadstream",
        description = "An event-sourced backend for AI-agent conversations: n8n Instance AI's \
            streaming protocol, AG-UI, items, workflow-builder and Durable Streams on one log. \
            docs/protocol.md describes every route in prose.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(ErrorBody)),
    tags(
        (name = "n8n", description = "n8n Instance AI: chat, confirmations, the SSE stream, threads"),
        (name = "ingest", description = "Events of agents that run elsewhere"),
        (name = "tasks", description = "Background tasks of a live run"),
        (name = "session", description = "Browser credentials: session cookie and stream tickets"),
        (name = "ag-ui", description = "The log as AG-UI 1.0"),
        (name = "attachments", description = "Uploads and signed URLs"),
        (name = "items", description = "The request-scoped items stream"),
        (name = "ai-sdk", description = "The AI SDK's chat endpoints (`useChat`): UI message streams, resumable"),
        (name = "workflow-builder", description = "The workflow-builder stream"),
        (name = "workflows", description = "Workflows the agent built"),
        (name = "mcp", description = "MCP servers whose tools the agent is offered"),
        (name = "export", description = "A thread's stored events"),
        (name = "analytics", description = "Runs, tokens and durations"),
        (name = "durable-streams", description = "The Durable Streams protocol, on the same log"),
        (name = "service", description = "Liveness, readiness, metrics, this document, the web page"),
    )
)]
pub struct ApiDoc;

/// The document's parts that are not routes (info, tags, the error body): what
/// `crate::http::routes` registers its operations into.
pub fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as served and as `docs/openapi.json` holds it, from what the routes registered
/// into [`base`]: axum's catch-all `{*path}` becomes OpenAPI's `{path}`, then what every route
/// shares ([`Shared`]) and the constraints of [`constraints::constrain`], as pretty JSON (keys
/// sorted) with a final newline. `crate::http::document_json` builds it once from the routes;
/// this module takes the routes' document as an argument so it need not know them.
pub fn finish(mut doc: utoipa::openapi::OpenApi) -> String {
    let paths = std::mem::take(&mut doc.paths.paths);
    doc.paths.paths = paths
        .into_iter()
        .map(|(path, item)| (path.replace("{*", "{"), item))
        .collect();
    Shared.modify(&mut doc);
    let mut doc = serde_json::to_value(&doc).expect("the document serializes");
    constraints::constrain(&mut doc);
    let mut s = serde_json::to_string_pretty(&doc).expect("the document serializes");
    s.push('\n');
    s
}

/// The finished document, handed to [`openapi_json`] by the router as an extension.
#[derive(Clone, Copy)]
pub struct ServedDocument(pub &'static str);

/// `GET /openapi.json`: this document.
#[utoipa::path(
    get,
    operation_id = "openapi",
    path = "/openapi.json",
    tag = "service",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object))
)]
pub async fn openapi_json(
    Extension(ServedDocument(document)): Extension<ServedDocument>,
) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        document,
    )
        .into_response()
}
