//! What every route shares, added to the document once by [`Shared`]: the error answers (401
//! with its `WWW-Authenticate` challenge, 429 with `Retry-After`, 500, 503), the security
//! schemes (bearer token or JWT, session cookie, stream ticket) and the SSE event schemas.

use threadstream_projections::render;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};
use utoipa::Modify;

/// Routes with no credentials: no 401 answer.
const PUBLIC: &[&str] = &[
    "/healthz",
    "/readyz",
    "/openapi.json",
    "/",
    "/assets/{file}",
    "/api-docs",
];

/// The SSE routes and the schema of each `data:` of theirs.
const SSE_EVENTS: &[(&str, &str)] = &[
    ("/instance-ai/events/{thread_id}", "N8nEvent"),
    ("/api/v1/agent/runs/{thread_id}/events", "AgUiEvent"),
    ("/api/v1/agent/runs", "AgUiEvent"),
    (
        "/api/flows/{kind}/requests/{request_id}/stream",
        "ItemsEvent",
    ),
    ("/smith", "WorkflowBuilderFrame"),
    ("/smith/{workflow_id}", "WorkflowBuilderFrame"),
    ("/v1/stream/{path}", "DurableStreamControl"),
    ("/v1/threads/{thread_id}", "DurableStreamControl"),
    ("/api/chat", "UiMessageChunk"),
    ("/api/chat/{thread_id}/stream", "UiMessageChunk"),
];

pub(super) struct Shared;

fn error_response(description: &str) -> utoipa::openapi::response::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

fn string_header(description: &str) -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(SchemaType::Type(Type::String)))
        .description(Some(description))
        .build()
}

fn string_prop(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .description(Some(description))
}

/// The n8n envelope of one wire type: `{type, runId, agentId, payload, userId?, responseId?, ts?}`.
fn n8n_envelope(event_type: &str, payload: RefOr<Schema>) -> Schema {
    ObjectBuilder::new()
        .title(Some(event_type))
        .property(
            "type",
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::String))
                .enum_values(Some([event_type])),
        )
        .required("type")
        .property("runId", string_prop("The run"))
        .required("runId")
        .property("agentId", string_prop("The agent that produced the event"))
        .required("agentId")
        .property("payload", payload)
        .required("payload")
        .property("userId", string_prop("The user whose action this was"))
        .property(
            "responseId",
            string_prop("The model response it belongs to"),
        )
        .property(
            "ts",
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::Integer))
                .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                    utoipa::openapi::KnownFormat::Int64,
                )))
                .description(Some("Epoch ms the log stored the event at")),
        )
        .additional_properties(Some(
            utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
        ))
        .into()
}

/// Adds a named schema; the same name twice must be the same schema (two types of one name
/// would otherwise shadow each other silently).
fn add_schema(
    schemas: &mut std::collections::BTreeMap<String, RefOr<Schema>>,
    name: String,
    schema: RefOr<Schema>,
) {
    if let Some(existing) = schemas.get(&name) {
        assert!(
            serde_json::to_value(existing).ok() == serde_json::to_value(&schema).ok(),
            "two different schemas are named {name}"
        );
    }
    schemas.insert(name, schema);
}

impl Modify for Shared {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);

        // Security: a bearer token or JWT, the session cookie (browsers), and on the n8n event
        // stream a one-use `?ticket=`. Without configured tokens every route is open, so no
        // credential is also a way in (`{}`).
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token of `--tokens-file`, or a JWT (`--jwt-secret`). Without \
                         configured credentials every route is open.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                crate::auth::SESSION_COOKIE,
                "The HttpOnly session cookie of `POST /instance-ai/session`",
            ))),
        );
        components.add_security_scheme(
            "ticket",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "ticket",
                "A stream ticket of `POST /instance-ai/events/{thread_id}/ticket`: opens that \
                 thread's n8n stream once, within 60 s",
            ))),
        );
        doc.security = Some(vec![
            utoipa::openapi::security::SecurityRequirement::new("bearer", Vec::<String>::new()),
            utoipa::openapi::security::SecurityRequirement::new("session", Vec::<String>::new()),
            utoipa::openapi::security::SecurityRequirement::default(),
        ]);

        // The error answers every route shares.
        let unauthorized = ResponseBuilder::from(error_response(
            "Missing or invalid credentials (`missing_credentials`, `invalid_token`, \
             `session_expired`, …); only when credentials are configured",
        ))
        .header(
            "WWW-Authenticate",
            string_header(
                "RFC 6750 challenge: `Bearer realm=\"threadstream\"`, with \
                 `error=\"invalid_token\"` when a credential was sent but refused",
            ),
        )
        .build();
        let too_many = ResponseBuilder::from(error_response(
            "A rate or concurrency limit was reached (`rate_limited`, `too_many_streams`, \
             `too_many_runs`); `error.limit` names it",
        ))
        .header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(SchemaType::Type(Type::Integer)))
                .description(Some("Seconds to wait before retrying"))
                .build(),
        )
        .build();
        components
            .responses
            .insert("Unauthorized".into(), unauthorized.into());
        components
            .responses
            .insert("TooManyRequests".into(), too_many.into());
        components.responses.insert(
            "Internal".into(),
            error_response("The server's own failure (`internal`), with an `errorId` to quote")
                .into(),
        );
        components.responses.insert(
            "Unavailable".into(),
            error_response(
                "The store is unavailable, or the service refuses new work (`unavailable`), \
                 with an `errorId`",
            )
            .into(),
        );

        // The SSE event schemas.
        let mut n8n = OneOfBuilder::new().description(Some(
            "One `data:` of the n8n stream: the envelope of one of the 15 wire types of \
             `@n8n/api-types` `instanceAiEventSchema`; `id:` is the event's log id",
        ));
        for (event_type, (name, schema, nested)) in
            threadstream_domain::event::n8n_payload_schemas()
        {
            for (n, s) in nested {
                components.schemas.entry(n).or_insert(s);
            }
            components.schemas.entry(name.clone()).or_insert(schema);
            n8n = n8n.item(n8n_envelope(
                event_type,
                RefOr::Ref(Ref::from_schema_name(name)),
            ));
        }
        components
            .schemas
            .insert("N8nEvent".into(), RefOr::T(n8n.into()));
        // AG-UI, items and workflow-builder: derived from the renderers' event types.
        for (name, schema) in [
            render::schemas::agui_event(),
            render::schemas::items_event(),
            render::schemas::workflow_builder_frame(),
        ]
        .into_iter()
        .flatten()
        {
            add_schema(&mut components.schemas, name, schema);
        }
        components.schemas.insert(
            "UiMessageChunk".into(),
            RefOr::T(
                ObjectBuilder::new()
                    .title(Some("UiMessageChunk"))
                    .description(Some(
                        "One chunk of the AI SDK's UI message stream (npm `ai`, its \
                         `uiMessageChunkSchema`): `start`, `start-step`, `text-start` / \
                         `-delta` / `-end`, `reasoning-start` / `-delta` / `-end`, \
                         `tool-input-available`, `tool-output-available`, `tool-output-error`, \
                         `tool-output-denied`, `tool-approval-request`, `tool-approval-response`, \
                         `data-agent`, `data-tasks`, `data-confirmation`, `error`, `abort`, \
                         `finish-step`, `finish` (docs/protocol.md, \"The AI SDK's chat \
                         protocol\"). The stream's last `data:` is the text `[DONE]`, not JSON.",
                    ))
                    .property(
                        "type",
                        string_prop("The chunk's kind (`data-*` for a data part)"),
                    )
                    .required("type")
                    .into(),
            ),
        );
        components.schemas.insert(
            "DurableStreamControl".into(),
            RefOr::T(
                ObjectBuilder::new()
                    .title(Some("DurableStreamControl"))
                    .description(Some(
                        "With `live=sse`, each `event: data` (the messages, as JSON or \
                         base64) is followed by an `event: control` with this body",
                    ))
                    .property("streamNextOffset", string_prop("The offset to resume from"))
                    .required("streamNextOffset")
                    .property("streamCursor", string_prop("The cache-busting cursor"))
                    .property(
                        "upToDate",
                        ObjectBuilder::new().schema_type(SchemaType::Type(Type::Boolean)),
                    )
                    .property(
                        "streamClosed",
                        ObjectBuilder::new().schema_type(SchemaType::Type(Type::Boolean)),
                    )
                    .into(),
            ),
        );
        for (path, item) in doc.paths.paths.iter_mut() {
            let public = PUBLIC.contains(&path.as_str());
            let sse = SSE_EVENTS.iter().find(|(p, _)| p == path).map(|(_, s)| *s);
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.options,
                &mut item.head,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                // The handlers' doc comments are written for this code base; the document's
                // reader gets the path as the title and the comment without its rustdoc links.
                op.summary = None;
                if let Some(d) = op.description.as_mut() {
                    *d = d.replace("[`", "`").replace("`]", "`");
                }
                let responses = &mut op.responses.responses;
                if !public {
                    responses
                        .entry("401".into())
                        .or_insert_with(|| Ref::from_response_name("Unauthorized").into());
                }
                responses
                    .entry("429".into())
                    .or_insert_with(|| Ref::from_response_name("TooManyRequests").into());
                responses
                    .entry("500".into())
                    .or_insert_with(|| Ref::from_response_name("Internal").into());
                responses
                    .entry("503".into())
                    .or_insert_with(|| Ref::from_response_name("Unavailable").into());
                if let Some(event) = sse {
                    // An SSE answer's media type refers to the schema of its `data:` lines.
                    for resp in responses.values_mut() {
                        let RefOr::T(resp) = resp else { continue };
                        if let Some(content) = resp.content.get_mut("text/event-stream") {
                            content.schema = Some(
                                ObjectBuilder::new()
                                    .schema_type(SchemaType::Type(Type::String))
                                    .description(Some(format!(
                                        "Server-sent events; each `data:` is a JSON \
                                         `{event}` (#/components/schemas/{event})"
                                    )))
                                    .into(),
                            );
                            content
                                .extensions
                                .get_or_insert_with(Default::default)
                                .insert(
                                    "x-sse-data".into(),
                                    serde_json::json!({
                                        "$ref": format!("#/components/schemas/{event}")
                                    }),
                                );
                        }
                    }
                }
                if path == "/instance-ai/events/{thread_id}" {
                    let mut security = doc.security.clone().unwrap_or_default();
                    security.insert(
                        2,
                        utoipa::openapi::security::SecurityRequirement::new(
                            "ticket",
                            Vec::<String>::new(),
                        ),
                    );
                    op.security = Some(security);
                }
            }
        }
    }
}
