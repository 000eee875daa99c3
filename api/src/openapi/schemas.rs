//! Response bodies documented for handlers that build them as JSON values (the schemas only:
//! the handlers' answers are checked against them by the black-box OpenAPI tests).

use serde::Serialize;
use utoipa::ToSchema;

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

/// The answers of a Durable Streams read, a stream's or a thread's, other than its 200: the
/// one list both read routes document.
#[derive(utoipa::IntoResponses)]
pub enum DurableReadAnswers {
    #[response(
        status = 204,
        description = "Long-poll: nothing new within `--stream-long-poll-secs`",
        headers(
            ("Stream-Next-Offset" = String, description = "The offset to poll from"),
            ("Stream-Cursor" = String, description = "The cursor for the next poll")
        )
    )]
    NothingNew,
    #[response(status = 304, description = "Not modified since `If-None-Match`")]
    NotModified,
    #[response(
        status = 400,
        description = "A malformed offset, `live` or cursor (`invalid_offset`, …), or path"
    )]
    BadRequest(crate::error::ErrorBody),
    #[response(status = 403, description = "An ingest-only token (`ingest_only`)")]
    IngestOnly(crate::error::ErrorBody),
    #[response(
        status = 404,
        description = "No such stream, or another user's (`not_found`)"
    )]
    NotFound(crate::error::ErrorBody),
    #[response(
        status = 410,
        description = "Deleted (`stream_gone`), or an offset into erased history (`offset_erased`)"
    )]
    Gone(crate::error::ErrorBody),
}
