//! The OpenAPI 3.1 document of every route, generated from the code: each handler carries a
//! `#[utoipa::path]`, request and response types derive their schemas (`utoipa::ToSchema`), and
//! the n8n event schemas come from the domain's payload types. Served at `GET /openapi.json`
//! and committed as `docs/openapi.json` (`tests/blackbox/openapi.rs` checks they are equal and
//! that a pinned validator accepts the document). The router and the document come from one
//! list of routes (`crate::http::routes`), so no route can be served undocumented.
//!
//! One module per job: `schemas` (the response bodies the handlers do not own), `components`
//! (what every route shares, added once by `Shared`: the error answers, the security schemes,
//! the SSE event schemas) and `constraints` (what the server checks that derived schemas cannot
//! say, written into the JSON); the document itself and its route are here.

use std::sync::OnceLock;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use utoipa::{Modify, OpenApi};

use crate::error::ErrorBody;
use crate::http;

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
/// [`http::routes`] registers its operations into.
pub fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document, built once from the routes the server serves ([`http::routes`]), then what
/// every route shares ([`Shared`]). axum's catch-all `{*path}` is OpenAPI's `{path}`.
pub fn document() -> &'static utoipa::openapi::OpenApi {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(|| {
        let (_, mut doc) = http::routes().split_for_parts();
        let paths = std::mem::take(&mut doc.paths.paths);
        doc.paths.paths = paths
            .into_iter()
            .map(|(path, item)| (path.replace("{*", "{"), item))
            .collect();
        Shared.modify(&mut doc);
        doc
    })
}

/// The document as `docs/openapi.json` holds it: pretty JSON (keys sorted) and a final newline,
/// with the constraints of [`constraints::constrain`].
pub fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        let mut doc = serde_json::to_value(document()).expect("the document serializes");
        constraints::constrain(&mut doc);
        let mut s = serde_json::to_string_pretty(&doc).expect("the document serializes");
        s.push('\n');
        s
    })
}

/// `GET /openapi.json`: this document.
#[utoipa::path(
    get,
    operation_id = "openapi",
    path = "/openapi.json",
    tag = "service",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object))
)]
pub async fn openapi_json() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        document_json(),
    )
        .into_response()
}
