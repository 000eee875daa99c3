//! Agent events, wire-exact with `@n8n/api-types` 1.25.0 (`instanceAiEventSchema`), plus the
//! internal events the log needs and the n8n stream does not carry.
//!
//! An [`AgentEvent`] is the envelope `{type, runId, agentId, payload, userId?, responseId?, ts?}`;
//! its [`EventBody`] is the `type` + `payload` pair. Optional fields are omitted when absent,
//! never serialized as `null`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::DecodeError;

pub mod durable_stream;
pub mod erasure;
pub mod subscription;
pub mod workflow;

/// A JSON object, as the schema's `z.record(z.unknown())`.
pub type JsonObject = Map<String, Value>;

/// One agent event: the envelope every stored event has.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEvent {
    pub run_id: String,
    pub agent_id: String,
    pub body: EventBody,
    pub user_id: Option<String>,
    pub response_id: Option<String>,
    /// Epoch milliseconds. Filled in by the log when the event is stored.
    pub ts: Option<i64>,
}

impl AgentEvent {
    pub fn new(run_id: impl Into<String>, agent_id: impl Into<String>, body: EventBody) -> Self {
        AgentEvent {
            run_id: run_id.into(),
            agent_id: agent_id.into(),
            body,
            user_id: None,
            response_id: None,
            ts: None,
        }
    }

    pub fn with_user(mut self, user_id: impl Into<String>) -> Self {
        self.user_id = Some(user_id.into());
        self
    }

    pub fn with_response(mut self, response_id: impl Into<String>) -> Self {
        self.response_id = Some(response_id.into());
        self
    }

    /// Decodes an event from its stored or posted parts; the error names the problem.
    pub fn from_parts(
        event_type: &str,
        run_id: String,
        agent_id: String,
        payload: Value,
    ) -> Result<Self, DecodeError> {
        Ok(AgentEvent::new(
            run_id,
            agent_id,
            EventBody::from_parts(event_type, payload)?,
        ))
    }
}

impl Serialize for AgentEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("type", self.body.event_type())?;
        m.serialize_entry("runId", &self.run_id)?;
        m.serialize_entry("agentId", &self.agent_id)?;
        m.serialize_entry("payload", &self.body.payload_value())?;
        if let Some(u) = &self.user_id {
            m.serialize_entry("userId", u)?;
        }
        if let Some(r) = &self.response_id {
            m.serialize_entry("responseId", r)?;
        }
        if let Some(ts) = &self.ts {
            m.serialize_entry("ts", ts)?;
        }
        m.end()
    }
}

/// The envelope as posted by a client, before the payload is checked against its type.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEnvelope {
    #[serde(rename = "type")]
    event_type: String,
    run_id: String,
    agent_id: String,
    #[serde(default)]
    payload: Option<Value>,
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    response_id: Option<String>,
    #[serde(default, deserialize_with = "crate::integers::optional_i64")]
    ts: Option<i64>,
}

impl<'de> Deserialize<'de> for AgentEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawEnvelope::deserialize(d)?;
        let mut payload = raw.payload.unwrap_or(Value::Object(Map::new()));
        crate::integers::normalize(&mut payload);
        let body =
            EventBody::from_parts(&raw.event_type, payload).map_err(serde::de::Error::custom)?;
        Ok(AgentEvent {
            run_id: raw.run_id,
            agent_id: raw.agent_id,
            body,
            user_id: raw.user_id,
            response_id: raw.response_id,
            ts: raw.ts,
        })
    }
}

macro_rules! event_bodies {
    ($( $variant:ident($payload:ty) = $name:literal, wire = $wire:literal; )*) => {
        /// The `type` and `payload` of an event.
        #[derive(Debug, Clone, PartialEq)]
        pub enum EventBody {
            $( $variant($payload), )*
        }

        impl EventBody {
            /// Every event type the log stores, n8n's first.
            pub const TYPES: &'static [&'static str] = &[$( $name, )*];

            /// The wire `type` string.
            pub fn event_type(&self) -> &'static str {
                match self { $( EventBody::$variant(_) => $name, )* }
            }

            /// Whether the n8n stream carries this event (the 15 types of n8n's protocol); the
            /// others are internal to the log and filtered out of the n8n rendering.
            pub fn is_n8n(&self) -> bool {
                match self { $( EventBody::$variant(_) => $wire, )* }
            }

            /// The payload as a JSON value.
            pub fn payload_value(&self) -> Value {
                let v = match self {
                    $( EventBody::$variant(p) => serde_json::to_value(p), )*
                };
                v.expect("payloads serialize")
            }

            /// The payload serialized to JSON text.
            pub fn payload_json(&self) -> String {
                let v = match self {
                    $( EventBody::$variant(p) => serde_json::to_string(p), )*
                };
                v.expect("payloads serialize")
            }

            /// Decodes `payload` as the payload of `event_type`; the error names the type and
            /// the field that is wrong.
            pub fn from_parts(event_type: &str, payload: Value) -> Result<Self, DecodeError> {
                match event_type {
                    $( $name => serde_json::from_value::<$payload>(payload)
                        .map(EventBody::$variant)
                        .map_err(|e| DecodeError::Payload { event_type: $name.to_string(), message: e.to_string() }), )*
                    other => Err(DecodeError::UnknownType(other.to_string())),
                }
            }

            /// Decodes from the payload's JSON text, as stored.
            pub fn from_json(event_type: &str, payload: &str) -> Result<Self, DecodeError> {
                match event_type {
                    $( $name => serde_json::from_str::<$payload>(payload)
                        .map(EventBody::$variant)
                        .map_err(|e| DecodeError::Payload { event_type: $name.to_string(), message: e.to_string() }), )*
                    other => Err(DecodeError::UnknownType(other.to_string())),
                }
            }
        }

        /// Whether `event_type` names one of the 15 n8n wire types.
        pub fn is_n8n_type(event_type: &str) -> bool {
            match event_type {
                $( $name => $wire, )*
                _ => false,
            }
        }
    };
}

event_bodies! {
    RunStart(RunStart) = "run-start", wire = true;
    RunFinish(RunFinish) = "run-finish", wire = true;
    AgentSpawned(AgentSpawned) = "agent-spawned", wire = true;
    AgentCompleted(AgentCompleted) = "agent-completed", wire = true;
    TextDelta(TextDelta) = "text-delta", wire = true;
    ReasoningDelta(TextDelta) = "reasoning-delta", wire = true;
    ToolCall(ToolCall) = "tool-call", wire = true;
    ToolResult(ToolResult) = "tool-result", wire = true;
    ToolError(ToolError) = "tool-error", wire = true;
    ConfirmationRequest(Box<ConfirmationRequest>) = "confirmation-request", wire = true;
    TasksUpdate(TasksUpdate) = "tasks-update", wire = true;
    FilesystemRequest(FilesystemRequest) = "filesystem-request", wire = true;
    ThreadTitleUpdated(ThreadTitle) = "thread-title-updated", wire = true;
    Status(Status) = "status", wire = true;
    Error(ErrorPayload) = "error", wire = true;
    UserMessage(UserMessage) = "user-message", wire = false;
    ConfirmationAnswered(ConfirmationAnswered) = "confirmation-answered", wire = false;
    CancelRequested(CancelRequested) = "cancel-requested", wire = false;
    ThreadCreated(ThreadCreated) = "thread-created", wire = false;
    ThreadRenamed(ThreadTitle) = "thread-renamed", wire = false;
    ThreadDeleted(Empty) = "thread-deleted", wire = false;
    ConversationSummary(ConversationSummary) = "conversation-summary", wire = false;
    ChatForked(ChatForked) = "chat-forked", wire = false;
    TaskCancelRequested(TaskRef) = "task-cancel-requested", wire = false;
    TaskCorrection(TaskCorrection) = "task-correction", wire = false;
    WorkflowCreated(workflow::WorkflowCreated) = "workflow-created", wire = false;
    WorkflowNodeAdded(workflow::NodeAdded) = "workflow-node-added", wire = false;
    WorkflowNodesConnected(workflow::Edge) = "workflow-nodes-connected", wire = false;
    WorkflowNodeUpdated(workflow::NodePatch) = "workflow-node-updated", wire = false;
    WorkflowNodeRemoved(workflow::NodeRemoved) = "workflow-node-removed", wire = false;
    WorkflowDeleted(Empty) = "workflow-deleted", wire = false;
    LlmUsage(LlmUsage) = "llm-usage", wire = false;
    AguiEvent(AguiEvent) = "agui-event", wire = false;
    StreamCreated(Box<durable_stream::StreamCreated>) = "stream-created", wire = false;
    StreamAppended(durable_stream::StreamAppended) = "stream-appended", wire = false;
    StreamClosed(durable_stream::StreamClosed) = "stream-closed", wire = false;
    StreamDeleted(Empty) = "stream-deleted", wire = false;
    StreamForkAdded(durable_stream::StreamForkAdded) = "stream-fork-added", wire = false;
    StreamForkReleased(durable_stream::StreamForkRef) = "stream-fork-released", wire = false;
    ProducerWrite(durable_stream::ProducerStamp) = "producer-write", wire = false;
    Erased(Box<erasure::Erased>) = "erased", wire = false;
    SubscriptionCreated(Box<subscription::SubscriptionCreated>) = "subscription-created", wire = false;
    SubscriptionDeleted(subscription::SubscriptionRef) = "subscription-deleted", wire = false;
    SubscriptionLinked(subscription::SubscriptionLinked) = "subscription-linked", wire = false;
    SubscriptionUnlinked(subscription::SubscriptionUnlinked) = "subscription-unlinked", wire = false;
    SubscriptionWoken(subscription::SubscriptionWoken) = "subscription-woken", wire = false;
    SubscriptionClaimed(subscription::SubscriptionClaimed) = "subscription-claimed", wire = false;
    SubscriptionAcked(subscription::SubscriptionAcked) = "subscription-acked", wire = false;
    SubscriptionReleased(subscription::SubscriptionReleased) = "subscription-released", wire = false;
    SubscriptionsRestored(Box<subscription::SubscriptionsRestored>) = "subscriptions-restored", wire = false;
}

/// One OpenAPI schema with the schemas it refers to: `(name, schema, nested)`.
pub type NamedSchema = (
    String,
    utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
    Vec<(
        String,
        utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
    )>,
);

fn named<T: utoipa::ToSchema>() -> NamedSchema {
    let mut nested = Vec::new();
    T::schemas(&mut nested);
    (T::name().into_owned(), T::schema(), nested)
}

/// The payload schema of each of the 15 n8n wire types, derived from the payload types above,
/// for the OpenAPI document (`GET /openapi.json`). A test checks the list names every wire type.
pub fn n8n_payload_schemas() -> Vec<(&'static str, NamedSchema)> {
    vec![
        ("run-start", named::<RunStart>()),
        ("run-finish", named::<RunFinish>()),
        ("agent-spawned", named::<AgentSpawned>()),
        ("agent-completed", named::<AgentCompleted>()),
        ("text-delta", named::<TextDelta>()),
        ("reasoning-delta", named::<TextDelta>()),
        ("tool-call", named::<ToolCall>()),
        ("tool-result", named::<ToolResult>()),
        ("tool-error", named::<ToolError>()),
        ("confirmation-request", named::<ConfirmationRequest>()),
        ("tasks-update", named::<TasksUpdate>()),
        ("filesystem-request", named::<FilesystemRequest>()),
        ("thread-title-updated", named::<ThreadTitle>()),
        ("status", named::<Status>()),
        ("error", named::<ErrorPayload>()),
    ]
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStart {
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_group_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Completed,
    Cancelled,
    Error,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Error => "error",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunFinish {
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_workflow_ids: Option<Vec<String>>,
}

/// Agent kinds both published schemas accept: 1.25.0 also had `delegate`, which 1.41.0 dropped,
/// so we neither send nor ingest it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AgentKind {
    Builder,
    DataTable,
    Planner,
    EvalSetup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ResourceType {
    Workflow,
    DataTable,
    Credential,
    Other,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TargetResource {
    #[serde(rename = "type")]
    pub resource_type: ResourceType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpawned {
    pub parent_id: String,
    pub role: String,
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<AgentKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtitle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_resource: Option<TargetResource>,
}

impl AgentSpawned {
    /// A sub-agent of `parent_id` with `role` and `tools`, without the optional fields of
    /// n8n's agent cards (`kind`, `title`, `subtitle`, `goal`, `targetResource`).
    pub fn new(
        parent_id: impl Into<String>,
        role: impl Into<String>,
        tools: Vec<String>,
        task_id: Option<String>,
    ) -> Self {
        AgentSpawned {
            parent_id: parent_id.into(),
            role: role.into(),
            tools,
            task_id,
            kind: None,
            title: None,
            subtitle: None,
            goal: None,
            target_resource: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCompleted {
    pub role: String,
    pub result: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Payload of `text-delta` and `reasoning-delta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TextDelta {
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub tool_call_id: String,
    pub tool_name: String,
    #[schema(value_type = Object)]
    pub args: JsonObject,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    pub tool_call_id: String,
    /// Any JSON; `null` when the tool returned nothing.
    #[serde(default)]
    pub result: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolError {
    pub tool_call_id: String,
    pub error: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Destructive,
    Warning,
    Info,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InputType {
    Approval,
    Text,
    Questions,
    PlanReview,
    ResourceDecision,
    Continue,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum QuestionType {
    Single,
    Multi,
    Text,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
pub struct Question {
    pub id: String,
    pub question: String,
    #[serde(rename = "type")]
    pub question_type: QuestionType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<String>>,
}

// The variants are named as the published schema names them (the real client parses these).
// The doc line below is also what the model reads about `status` in the `plan` tool's schema.
/// How far the task has got.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Todo,
    InProgress,
    Done,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
pub struct TaskItem {
    pub id: String,
    pub description: String,
    pub status: TaskStatus,
}

/// `{tasks: [...]}`: the published schema nests the list one level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
pub struct TaskList {
    pub tasks: Vec<TaskItem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedTask {
    pub id: String,
    pub title: String,
    pub kind: String,
    pub spec: String,
    pub deps: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DomainAccess {
    pub url: String,
    pub host: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebSearch {
    pub query: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CredentialFlowStage {
    Generic,
    Finalize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CredentialFlow {
    pub stage: CredentialFlowStage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmationRequest {
    pub request_id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    #[schema(value_type = Object)]
    pub args: JsonObject,
    pub severity: Severity,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_type: Option<InputType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questions: Option<Vec<Question>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intro_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_items: Option<Vec<PlannedTask>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_access: Option<DomainAccess>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_search: Option<WebSearch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_flow: Option<CredentialFlow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    /// Kept as JSON: n8n-specific credential set-up cards we store and forward but never build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_requests: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_requests: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_decision: Option<Value>,
}

impl ConfirmationRequest {
    /// A plain approve/deny request.
    pub fn approval(
        request_id: impl Into<String>,
        tool_call_id: impl Into<String>,
        tool_name: impl Into<String>,
        args: JsonObject,
        severity: Severity,
        message: impl Into<String>,
    ) -> Self {
        ConfirmationRequest {
            request_id: request_id.into(),
            tool_call_id: tool_call_id.into(),
            tool_name: tool_name.into(),
            args,
            severity,
            message: message.into(),
            input_thread_id: None,
            input_type: None,
            questions: None,
            intro_message: None,
            tasks: None,
            plan_items: None,
            domain_access: None,
            web_search: None,
            credential_flow: None,
            project_id: None,
            workflow_id: None,
            credential_requests: None,
            setup_requests: None,
            resource_decision: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TasksUpdate {
    pub tasks: TaskList,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_items: Option<Vec<PlannedTask>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct McpToolCall {
    pub name: String,
    #[schema(value_type = Object)]
    pub arguments: JsonObject,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilesystemRequest {
    pub request_id: String,
    pub tool_call: McpToolCall,
}

/// Payload of `thread-title-updated` and the internal `thread-renamed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ThreadTitle {
    pub title: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Status {
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorPayload {
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>)]
    pub status_code: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub technical_details: Option<String>,
}

// ---- internal events: stored in the log, not on the n8n stream ----

/// The user's chat message that starts a run (stored together with its `run-start`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserMessage {
    pub message_id: String,
    pub text: String,
}

/// An answer to a `confirmation-request`; the answering user is the envelope's `userId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmationAnswered {
    pub request_id: String,
    pub approved: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_input: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelRequested {
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadCreated {
    pub owner: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Set when the thread is a fork: its history is the source's up to an event, read through
    /// (never copied), then its own events. Absent in logs written before forks existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_of: Option<ForkOf>,
}

/// What a fork reads through: the events of `thread_id` (itself read through, when a fork)
/// with id at most `through_event_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkOf {
    pub thread_id: String,
    pub through_event_id: i64,
}

/// An LLM-written summary of a thread's earlier runs; it replaces them in the model's context
/// from the run it was written in on. Written by the agent runtime, never on the n8n stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationSummary {
    pub summary: String,
    /// The id of the last event the summary covers.
    pub covered_through_id: i64,
}

/// `chat-forked`, on the thread whose id is an AI SDK chat id (`/api/chat`): the chat goes on in
/// `thread_id`, a fork made by `regenerate-message` (the SDK keeps its chat id, a fork is a new
/// thread). The last one is the chat's current thread; the thread's own history is unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatForked {
    pub thread_id: String,
}

/// A background task to cancel (`POST /chat/:threadId/tasks/:taskId/cancel`); attributed to the
/// task's agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRef {
    pub task_id: String,
}

/// A user's correction for a running background task (`POST …/tasks/:taskId/correct`); the task
/// sees it before its next model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCorrection {
    pub task_id: String,
    pub message: String,
}

/// The tokens one model call used, as the provider reported them; attributed to the agent that
/// made the call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmUsage {
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The provider's kind (`demo`, `openai`, `anthropic`); absent in events stored before it
    /// was recorded. With the two timings below it lets a call's `chat` span be rebuilt from
    /// the log (`threadstream traces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Epoch milliseconds when the call started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// Milliseconds from the call's start to its first streamed chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_chunk_ms: Option<i64>,
}

/// An event of an upstream AG-UI agent (`--agui-agent`) that has no event of its own here: its
/// `RUN_STARTED`, state snapshots and deltas, message snapshots, custom, raw and activity events,
/// and any type this server does not know, kept as the upstream sent it. The AG-UI rendering
/// sends the state, custom, raw and activity events on to its clients; the other protocols
/// have nothing to show for them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AguiEvent {
    /// The upstream agent's name (`--agui-agent NAME=URL`).
    pub agent: String,
    /// The AG-UI event as received (`type` and its fields).
    pub event: JsonObject,
}

/// An empty payload `{}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Empty {}

#[cfg(test)]
mod tests;
