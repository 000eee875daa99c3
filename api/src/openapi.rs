//! The OpenAPI 3.1 document of every route, generated from the code: each handler carries a
//! `#[utoipa::path]`, request and response types derive their schemas (`utoipa::ToSchema`), and
//! the n8n event schemas come from the domain's payload types. Served at `GET /openapi.json`
//! and committed as `docs/openapi.json` (`tests/blackbox/openapi.rs` checks they are equal,
//! that a pinned validator accepts the document, and that no route of the router is missing).
//!
//! What every route shares is added here once, by [`Shared`]: the error answers (401 with its
//! `WWW-Authenticate` challenge, 429 with `Retry-After`, 500, 503), the security schemes
//! (bearer token or JWT, session cookie, stream ticket) and the SSE event schemas.

use std::sync::OnceLock;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::error::ErrorBody;
use crate::http;

/// `{ok: true}`.
#[derive(Serialize, ToSchema)]
pub struct Ok {
    pub ok: bool,
}

/// `{runId}`: the run started.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStarted {
    pub run_id: String,
}

/// A thread as the thread list shows it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadSummary {
    pub id: String,
    #[schema(nullable = false)]
    pub title: Option<String>,
    pub owner: String,
    /// ISO 8601, UTC, milliseconds.
    #[schema(format = DateTime)]
    pub created_at: String,
    /// ISO 8601, UTC, milliseconds.
    #[schema(format = DateTime)]
    pub updated_at: String,
    pub deleted: bool,
    /// The id of the thread's last event (an SSE cursor).
    pub last_event_id: i64,
    /// On a fork (`POST /instance-ai/threads/{thread_id}/fork`): what it reads through.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub fork_of: Option<ForkOfRef>,
}

/// The thread a fork reads through, and the last of its events the fork holds.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForkOfRef {
    pub thread_id: String,
    pub through_event_id: i64,
}

/// `{threads}`, newest first.
#[derive(Serialize, ToSchema)]
pub struct ThreadListBody {
    pub threads: Vec<ThreadSummary>,
}

/// A thread's message history (n8n's `InstanceAiMessage`s). `nextEventId - 1` is the last event
/// the messages cover: connect the SSE stream with `lastEventId` set to it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadMessages {
    pub thread_id: String,
    /// `InstanceAiMessage` objects of `@n8n/api-types`.
    pub messages: Vec<serde_json::Value>,
    pub next_event_id: i64,
}

/// A thread's status; an unknown thread answers all-false.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStatus {
    pub has_active_run: bool,
    pub is_suspended: bool,
    #[schema(nullable = false)]
    pub run_id: Option<String>,
    /// The running background tasks.
    pub background_tasks: Vec<serde_json::Value>,
}

/// `{ids}`: the ids of the stored n8n events, in order.
#[derive(Serialize, ToSchema)]
pub struct IngestAnswer {
    pub ids: Vec<i64>,
}

/// `{servers}`: the configured MCP servers, in name order.
#[derive(Serialize, ToSchema)]
pub struct McpServerList {
    pub servers: Vec<McpServer>,
}

/// One MCP server as it is now.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServer {
    /// Its key in the `--mcp-config` file; the prefix of its tools' names.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// The command line or URL as written in the file (`${VAR}` placeholders unexpanded).
    pub target: String,
    /// `starting`, `ready` or `restarting` (its tools are offered only when `ready`).
    pub state: String,
    /// Why the last connection failed or ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Connections made after the first.
    pub restarts: u32,
    /// The tools it offers now (none unless `ready`).
    pub tools: Vec<McpTool>,
}

/// A tool of an MCP server as the model is offered it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpTool {
    /// The name the model calls: `<server>__<tool>`.
    pub name: String,
    /// The name the server knows it by.
    pub mcp_name: String,
    pub description: String,
    /// Asks the user before each call (annotated `destructiveHint: true`, or listed in
    /// `destructiveTools`).
    pub destructive: bool,
    /// Its input schema, cleaned for the model providers.
    pub input_schema: serde_json::Value,
}

/// A workflow in short form.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSummary {
    pub id: String,
    pub name: String,
    pub active: bool,
    pub node_count: u64,
    pub updated_at: serde_json::Value,
}

/// `{workflows}`, oldest first.
#[derive(Serialize, ToSchema)]
pub struct WorkflowList {
    pub workflows: Vec<WorkflowSummary>,
}

/// One workflow with its nodes and edges.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Workflow {
    pub id: String,
    pub name: String,
    pub active: bool,
    /// `{id, name, type, trigger, parameters, position}`.
    pub nodes: Vec<serde_json::Value>,
    /// `{from, to}`.
    pub edges: Vec<serde_json::Value>,
    pub created_at: serde_json::Value,
    pub updated_at: serde_json::Value,
}

/// A stream ticket: `GET /instance-ai/events/{thread_id}?ticket=…` accepts it once.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ticket {
    pub ticket: String,
    /// Epoch ms.
    pub expires_at: i64,
}

/// An AG-UI run started without `Accept: text/event-stream`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgUiStarted {
    pub thread_id: String,
    pub run_id: String,
}

/// One day of a thread's conversation as an AG-UI `STATE_SNAPSHOT`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistorySnapshot {
    /// `STATE_SNAPSHOT`.
    #[serde(rename = "type")]
    pub kind: String,
    pub thread_id: Option<String>,
    /// `{scope: "history_day", threadId, day, hasMore, messages}`.
    pub snapshot: serde_json::Value,
}

/// `{requestId}`: the items request started.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestAccepted {
    pub request_id: String,
}

/// A stored attachment.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentStored {
    pub bucket: String,
    pub path: String,
    pub thread_id: String,
    pub file_name: String,
    pub content_type: String,
    pub size: u64,
    pub sha256: String,
}

/// A signed URL of one attachment.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignedUrl {
    pub url: String,
    /// Epoch seconds.
    pub expires_at: i64,
}

/// A JSON-mode stream's messages, in order.
#[derive(Serialize, ToSchema)]
pub struct JsonMessages(pub Vec<serde_json::Value>);

/// The analytics report: `{runs: [...]}`.
#[derive(Serialize, ToSchema)]
pub struct RunsReport {
    pub runs: Vec<serde_json::Value>,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "threadstream",
        description = "An event-sourced backend for AI-agent conversations: n8n Instance AI's \
            streaming protocol, AG-UI, items, workflow-builder and Durable Streams on one log. \
            docs/protocol.md describes every route in prose.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        http::health,
        openapi_json,
        http::web::index,
        http::web::asset,
        http::web::api_docs,
        http::chat::chat,
        http::chat::cancel,
        http::chat::confirm,
        http::tasks::cancel,
        http::tasks::correct,
        http::events::stream,
        http::events::ingest,
        http::session::ticket,
        http::session::open,
        http::session::close,
        http::threads::list,
        http::threads::create,
        http::threads::fork,
        http::threads::rename,
        http::threads::delete,
        http::threads::messages,
        http::threads::status,
        http::export::thread,
        http::analytics::runs,
        http::analytics::summary,
        http::workflows::list,
        http::workflows::get,
        http::mcp::servers,
        http::metrics::metrics,
        http::agui::start,
        http::agui::events,
        http::agui::history,
        http::attachments::upload,
        http::attachments::signed_url,
        http::attachments::object,
        http::items::action,
        http::items::stream,
        http::smith::prompt_new,
        http::smith::prompt,
        http::smith::clear,
        http::streams::read,
        http::streams::head,
        http::streams::create,
        http::streams::append,
        http::streams::delete,
        http::streams::options,
        http::thread_streams::read,
        http::thread_streams::head,
        http::thread_streams::create,
        http::thread_streams::append,
        http::thread_streams::options,
    ),
    components(schemas(ErrorBody)),
    modifiers(&Shared),
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
        (name = "service", description = "Health, metrics, this document, the web page"),
    )
)]
pub struct ApiDoc;

/// The document, built once.
pub fn document() -> &'static utoipa::openapi::OpenApi {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(ApiDoc::openapi)
}

/// The document as `docs/openapi.json` holds it: pretty JSON (keys sorted) and a final newline,
/// with the constraints of [`constrain`].
pub fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        let mut doc = serde_json::to_value(document()).expect("the document serializes");
        constrain(&mut doc);
        let mut s = serde_json::to_string_pretty(&doc).expect("the document serializes");
        s.push('\n');
        s
    })
}

/// Adds what the server checks and the derived schemas cannot say (utoipa's schema model has
/// no `not`, `const` or `contains`): the `ThreadId` schema, [`parameter_schema`] on every
/// parameter it names, and [`body_constraints`].
fn constrain(doc: &mut serde_json::Value) {
    use serde_json::{json, Value};
    let schemas = doc["components"]["schemas"]
        .as_object_mut()
        .expect("components.schemas");
    // A thread id, as `threadstream_domain::validate_thread_id` checks it.
    schemas.insert(
        "ThreadId".into(),
        json!({
            "type": "string",
            "minLength": 1,
            "maxLength": 128,
            "pattern": format!(
                "^(?!{}|{})[^\\u0000-\\u001f\\u007f-\\u009f]*$",
                threadstream_domain::workflow::STREAM_PREFIX,
                threadstream_domain::durable_stream::STREAM_PREFIX
            ),
            "description": "1 to 128 characters, no control characters, not starting with \
                `workflow:` or `stream:` (else 400 `invalid_thread_id`)"
        }),
    );
    for (schema, property, constraint) in body_constraints() {
        let derived = schemas
            .get_mut(schema)
            .unwrap_or_else(|| panic!("body_constraints: no schema {schema}"));
        if property.is_empty() {
            *derived = json!({"allOf": [derived.take(), constraint]});
            continue;
        }
        let field = derived["properties"]
            .get_mut(property)
            .unwrap_or_else(|| panic!("body_constraints: {schema} has no property {property}"));
        // Keep the field's own description.
        let description = field.get("description").cloned();
        *field = constraint;
        if let (Some(d), Some(f)) = (description, field.as_object_mut()) {
            f.entry("description").or_insert(d);
        }
    }
    let paths = doc["paths"].as_object_mut().expect("paths");
    for (path, item) in paths.iter_mut() {
        for (method, op) in item.as_object_mut().expect("a path item") {
            // An SSE answer is a list of events; each `data:` is JSON of the route's event schema.
            for response in op["responses"]
                .as_object_mut()
                .into_iter()
                .flat_map(|r| r.values_mut())
            {
                let Some(sse) = response.pointer_mut("/content/text~1event-stream") else {
                    continue;
                };
                let data = sse["x-sse-data"].clone();
                sse["schema"] = json!({
                    "type": "object",
                    "description": "One server-sent event",
                    "properties": {
                        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data},
                        "event": {"type": "string"},
                        "id": {"type": "string"},
                        "retry": {"type": "integer"}
                    }
                });
            }
            // A HEAD answer has no body, errors included.
            if method == "head" {
                for response in op["responses"]
                    .as_object_mut()
                    .into_iter()
                    .flat_map(|r| r.values_mut())
                {
                    if let Some(r) = response.as_object_mut() {
                        r.remove("content");
                    }
                }
            }
            // An attachment has at least one byte.
            if path == "/api/v1/agent/attachments" && method == "post" {
                let body = &mut op["requestBody"];
                body["required"] = json!(true);
                for (media_type, media) in body["content"].as_object_mut().expect("content") {
                    if media_type != "application/json" {
                        media["schema"] =
                            json!({"type": "string", "format": "binary", "minLength": 1});
                    }
                }
            }
            // A CORS preflight answers any path without looking at it.
            if method == "options" {
                continue;
            }
            let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) else {
                continue;
            };
            for param in params {
                let name = param["name"].as_str().unwrap_or_default().to_string();
                if let Some(schema) = parameter_schema(path, &name) {
                    param["schema"] = schema;
                }
            }
        }
    }
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

/// Routes with no credentials: no 401 answer.
const PUBLIC: &[&str] = &[
    "/healthz",
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
];

/// A string of the characters Rust's `char::is_whitespace` counts (Unicode `White_Space`), for
/// "not blank" patterns that agree with the server's `trim`.
const WHITE_SPACE: &str =
    "\\t\\n\\u000b\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

/// The constraints the server checks of a parameter, by name, written once for every route
/// that has it (the checks: `threadstream_domain::validate_thread_id`, `crate::sse::cursor_from`,
/// `crate::idempotency`, the items names, `audit`'s `parse_time`). `None`: the handler's own
/// `params` say all there is.
fn parameter_schema(path: &str, name: &str) -> Option<serde_json::Value> {
    use serde_json::json;
    Some(match name {
        "thread_id" | "threadId" => json!({"$ref": "#/components/schemas/ThreadId"}),
        // Workflow-builder threads are `smith-{workflow_id}`, a thread id.
        "workflow_id" if path.starts_with("/smith/") => json!({
            "type": "string",
            "minLength": 1,
            "maxLength": 122,
            "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
        }),
        "Idempotency-Key" => json!({
            "type": "string",
            "pattern": "^[!-~]{1,255}$",
            "description": "1 to 255 visible ASCII characters"
        }),
        // The n8n and AG-UI cursors; the items stream's `Last-Event-ID` is `{requestId}:{N}`.
        "lastEventId" => json!({"type": "string", "pattern": "^[0-9]{0,18}$"}),
        "Last-Event-ID" if !path.starts_with("/api/flows/") => {
            json!({"type": "string", "pattern": "^[0-9]{0,18}$"})
        }
        "starting_after" => json!({"type": "string", "pattern": "^[0-9]{0,19}$"}),
        "kind" | "action" => json!({"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}),
        "before" => json!({"type": "string", "format": "date"}),
        "from" | "to" => json!({
            "description": "Epoch milliseconds, YYYY-MM-DD (midnight UTC) or an RFC 3339 timestamp",
            "anyOf": [
                {"type": "string", "pattern": "^[0-9]{1,15}$"},
                {"type": "string", "maxLength": 0, "description": "Empty: absent"},
                {"type": "string", "format": "date"},
                {"type": "string", "format": "date-time"}
            ]
        }),
        "live" => json!({"type": "string", "enum": ["long-poll", "sse"]}),
        _ => return None,
    })
}

/// A pattern for "not blank" that agrees with the server's `trim().is_empty()` checks.
fn not_blank() -> String {
    format!("[^{WHITE_SPACE}]")
}

/// The constraints the server checks of request body fields that their Rust types do not say,
/// by `(schema, property)`, each replacing the derived property schema; property `""` adds a
/// constraint on the whole object (`allOf` with the derived one).
fn body_constraints() -> Vec<(&'static str, &'static str, serde_json::Value)> {
    use serde_json::json;
    let nullable = |v: serde_json::Value| json!({"anyOf": [v, {"type": "null"}]});
    let message = json!({"type": "string", "pattern": not_blank()});
    let title = json!({
        "type": "string", "maxLength": 200, "pattern": not_blank(),
        "description": "1 to 200 characters, not blank"
    });
    let thread_id = json!({"$ref": "#/components/schemas/ThreadId"});
    vec![
        ("ChatBody", "message", message.clone()),
        ("CorrectBody", "message", message.clone()),
        ("ActionBody", "message", nullable(message.clone())),
        ("PromptBody", "prompt", message.clone()),
        ("CreateBody", "title", nullable(title.clone())),
        ("ForkBody", "title", nullable(title.clone())),
        ("RenameBody", "title", title),
        ("CreateBody", "threadId", nullable(thread_id.clone())),
        ("ForkBody", "threadId", nullable(thread_id.clone())),
        ("ActionBody", "sessionId", nullable(thread_id.clone())),
        ("RunBody", "threadId", nullable(thread_id)),
        ("RunBody", "message", nullable(message)),
        (
            "RunBody",
            "runId",
            nullable(
                json!({"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"}),
            ),
        ),
        // Exactly one fork point.
        (
            "ForkBody",
            "",
            json!({"oneOf": [
                {"required": ["throughEventId"], "properties": {"throughEventId": {"type": "integer"}}},
                {"required": ["beforeMessageId"], "properties": {"beforeMessageId": {"type": "string"}}}
            ]}),
        ),
        (
            "IngestBody",
            "events",
            json!({"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/N8nEvent"}}),
        ),
        // `approved`, unless another kind of confirmation than an approval answers.
        (
            "ConfirmBody",
            "",
            json!({"anyOf": [
                {"required": ["approved"], "properties": {"approved": {"type": "boolean"}}},
                {"required": ["kind"], "properties": {"kind": {"type": "string", "not": {"const": "approval"}}}}
            ]}),
        ),
        // `message` or `input.message`.
        (
            "ActionBody",
            "",
            json!({"anyOf": [
                {"required": ["message"], "properties": {"message": {"type": "string"}}},
                {"required": ["input"], "properties": {"input": {"type": "object", "required": ["message"], "properties": {"message": {"type": "string", "pattern": not_blank()}}}}}
            ]}),
        ),
        // `message`, or `messages` with a user message.
        (
            "RunBody",
            "",
            json!({"anyOf": [
                {"required": ["message"], "properties": {"message": {"type": "string"}}},
                {"required": ["messages"], "properties": {"messages": {"type": "array", "contains": {"type": "object", "required": ["role"], "properties": {"role": {"const": "user"}}}}}}
            ]}),
        ),
    ]
}

struct Shared;

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

/// A JSON object with a string `type` (the renderers' frames).
fn typed_frame(title: &str, description: &str) -> Schema {
    ObjectBuilder::new()
        .title(Some(title))
        .description(Some(description))
        .property("type", string_prop("The frame's type"))
        .required("type")
        .into()
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
        components.schemas.insert(
            "AgUiEvent".into(),
            RefOr::T(typed_frame(
                "AgUiEvent",
                "One `data:` of an AG-UI stream: an AG-UI 1.0 event (`RUN_STARTED`, \
                 `TEXT_MESSAGE_CONTENT`, …), checked in CI by `@ag-ui/core` `EventSchemas`; \
                 every event has `threadId`, `runId` and an integer `timestamp`",
            )),
        );
        components.schemas.insert(
            "ItemsEvent".into(),
            RefOr::T(
                ObjectBuilder::from(
                    match typed_frame(
                        "ItemsEvent",
                        "One `data:` of an items stream (`event:` is its `type`): \
                     `{stream: \"request\", type, requestId, sequence_number, ts, …}`",
                    ) {
                        Schema::Object(o) => o,
                        _ => unreachable!("typed_frame is an object"),
                    },
                )
                .property("requestId", string_prop("The request"))
                .required("requestId")
                .property(
                    "sequence_number",
                    ObjectBuilder::new().schema_type(SchemaType::Type(Type::Integer)),
                )
                .required("sequence_number")
                .into(),
            ),
        );
        components.schemas.insert(
            "WorkflowBuilderFrame".into(),
            RefOr::T(typed_frame(
                "WorkflowBuilderFrame",
                "One `data:` of the workflow-builder stream: `stream_start`, `token`, \
                 `tool_call`, `tool_result`, `workflow_state`, `warning`, `error`, `stream_end`",
            )),
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
