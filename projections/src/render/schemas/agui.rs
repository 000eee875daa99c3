//! The AG-UI 1.0 events [`crate::render::agui`] sends, as the `@ag-ui/core` `EventSchemas` of
//! each type describe them: the fields it requires, and the optional ones we send. Objects stay
//! open to other keys, as AG-UI's are (`looseObject`). Every event also carries the envelope
//! [`super::agui_event`] adds: `timestamp`, `threadId` and `runId` (but `MESSAGES_SNAPSHOT`,
//! which is conversation-wide) and, on a sub-agent's work, `subagentRunId`.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// One AG-UI event, by `type`.
#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(dead_code)] // a description of the wire, never built
pub enum AgUiEventBody {
    /// Opens a run (a stored `run-start`, or a continuation run of background work).
    RunStarted {},
    /// Closes a run that did not fail.
    RunFinished {
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false, inline)]
        outcome: Option<RunOutcome>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        usage: Option<Vec<AgUiTokenUsage>>,
    },
    /// Ends a run that failed: `message` is the run's last error, `code` its reason.
    RunError {
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        code: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        usage: Option<Vec<AgUiTokenUsage>>,
    },
    /// Opens a streamed text message (a user's message, or an agent's text).
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    TextMessageStart {
        message_id: String,
        #[schema(inline)]
        role: TextRole,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    TextMessageContent { message_id: String, delta: String },
    /// Closes a text message; `workerAgentOutput` is the agent's answer as n8n's agents report
    /// it.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    TextMessageEnd {
        message_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        worker_agent_output: Option<WorkerAgentOutput>,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ReasoningStart { message_id: String },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ReasoningMessageStart {
        message_id: String,
        #[schema(inline)]
        role: ReasoningRole,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ReasoningMessageContent { message_id: String, delta: String },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ReasoningMessageEnd { message_id: String },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ReasoningEnd { message_id: String },
    /// A tool call's step, named `{toolName}#{toolCallId}`.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    StepStarted { step_name: String },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    StepFinished { step_name: String },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
    },
    /// The whole arguments, as one JSON text.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ToolCallArgs { tool_call_id: String, delta: String },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ToolCallEnd { tool_call_id: String },
    /// A tool's result (or error) as text; `toolAgentOutput` has it structured.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false, inline)]
        role: Option<ToolRole>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        tool_agent_output: Option<ToolAgentOutput>,
    },
    /// The thread's state: `{tasks?, status?, title?}`.
    StateSnapshot {
        #[schema(value_type = Object)]
        snapshot: Value,
    },
    /// The settled messages, for a client joining mid-run.
    MessagesSnapshot { messages: Vec<AgUiMessage> },
    /// `threadstream.confirmation-request`, `threadstream.filesystem-request`,
    /// `threadstream.tasks-update` or `threadstream.error`, with the n8n payload as `value`.
    Custom {
        name: String,
        #[schema(value_type = Object)]
        value: Value,
    },
    /// A sub-agent began (or resumed); `subagentRunId` is its agent id, `name` its role.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    SubagentStarted {
        subagent_run_id: String,
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        description: Option<String>,
    },
    /// A sub-agent completed (`outcome.type` `success`, with its `result`), or is suspended at
    /// the end of its run (`suspended`).
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    SubagentFinished {
        subagent_run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        result: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false, inline)]
        outcome: Option<SubagentOutcome>,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    SubagentError {
        subagent_run_id: String,
        message: String,
    },
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TextRole {
    User,
    Assistant,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningRole {
    Reasoning,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolRole {
    Tool,
}

/// `RUN_FINISHED.outcome`: we send it only for a cancelled run (absent means success).
#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RunOutcome {
    Success {},
    Cancelled {},
}

#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SubagentOutcome {
    Success {},
    Suspended {},
}

/// Token counts of one model over the run (from the stored `llm-usage` events).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgUiTokenUsage {
    pub model: String,
    #[schema(minimum = 0)]
    pub input_tokens: u64,
    #[schema(minimum = 0)]
    pub output_tokens: u64,
    #[schema(minimum = 0)]
    pub total_tokens: u64,
}

#[derive(Serialize, ToSchema)]
pub struct WorkerAgentOutput {
    /// `success`, `partial` (cancelled) or `failed`.
    pub status: String,
    pub answer: String,
}

#[derive(Serialize, ToSchema)]
pub struct ToolAgentOutput {
    pub tool_name: String,
    pub tool_call_id: String,
    #[schema(value_type = Object)]
    pub tool_call_args: Value,
    /// `success` or `failure`.
    pub status: String,
    /// The first 200 characters of `content`.
    pub result_summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    pub error: Option<Value>,
}

/// One message of `MESSAGES_SNAPSHOT`, by `role`.
#[derive(Serialize, ToSchema)]
#[serde(tag = "role", rename_all = "lowercase")]
#[allow(dead_code)] // a description of the wire, never built
pub enum AgUiMessage {
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    User {
        id: String,
        content: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    Assistant {
        id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        content: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        tool_calls: Option<Vec<AgUiToolCall>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    Tool {
        id: String,
        tool_call_id: String,
        content: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        error: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    Reasoning {
        id: String,
        content: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        subagent_run_id: Option<String>,
    },
}

#[derive(Serialize, ToSchema)]
pub struct AgUiToolCall {
    pub id: String,
    #[serde(rename = "type")]
    #[schema(inline)]
    pub call_type: FunctionType,
    pub function: AgUiFunctionCall,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FunctionType {
    Function,
}

#[derive(Serialize, ToSchema)]
pub struct AgUiFunctionCall {
    pub name: String,
    /// The arguments as one JSON text.
    pub arguments: String,
}
