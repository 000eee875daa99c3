//! The AG-UI 1.0 events [`crate::render::agui`] sends, as the `@ag-ui/core` `EventSchemas` of
//! each type describe them: the fields it requires, and the optional ones we send. Objects stay
//! open to other keys, as AG-UI's are (`looseObject`). Every event also carries the envelope
//! [`super::agui_event`] adds: `timestamp`, `threadId` and `runId` (but `MESSAGES_SNAPSHOT`,
//! which is conversation-wide) and, on a sub-agent's work, `subagentRunId` ([`AgUiFrame`]).
//! The renderer builds these and writes them (keys sorted, [`crate::render::wire`]); the
//! per-token events borrow their text.

use serde::Serialize;
use serde_json::Value;
use threadstream_domain::event::{
    ConfirmationRequest, ErrorPayload, FilesystemRequest, TaskItem, TasksUpdate,
};
use utoipa::ToSchema;

/// One AG-UI event with the envelope [`super::agui_event`] describes.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgUiFrame<'a> {
    #[serde(flatten)]
    pub body: AgUiEventBody<'a>,
    /// On every event but `MESSAGES_SNAPSHOT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<&'a str>,
    /// On every event but `MESSAGES_SNAPSHOT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<&'a str>,
    /// On a sub-agent's work (its agent id); the `SUBAGENT_*` events carry it in their body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<&'a str>,
    pub timestamp: i64,
}

/// One AG-UI event, by `type`.
#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AgUiEventBody<'a> {
    /// Opens a run (a stored `run-start`, or a continuation run of background work).
    RunStarted {},
    /// Closes a run that did not fail.
    RunFinished {
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false, inline)]
        outcome: Option<RunOutcome>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        usage: Option<Vec<AgUiTokenUsage<'a>>>,
    },
    /// Ends a run that failed: `message` is the run's last error, `code` its reason.
    RunError {
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        code: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        usage: Option<Vec<AgUiTokenUsage<'a>>>,
    },
    /// Opens a streamed text message (a user's message, or an agent's text).
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    TextMessageStart {
        message_id: &'a str,
        #[schema(inline)]
        role: TextRole,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    TextMessageContent { message_id: &'a str, delta: &'a str },
    /// Closes a text message; `workerAgentOutput` is the agent's answer as n8n's agents report
    /// it.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    TextMessageEnd {
        message_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        worker_agent_output: Option<WorkerAgentOutput<'a>>,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ReasoningStart { message_id: &'a str },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ReasoningMessageStart {
        message_id: &'a str,
        #[schema(inline)]
        role: ReasoningRole,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ReasoningMessageContent { message_id: &'a str, delta: &'a str },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ReasoningMessageEnd { message_id: &'a str },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ReasoningEnd { message_id: &'a str },
    /// A tool call's step, named `{toolName}#{toolCallId}`.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    StepStarted { step_name: &'a str },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    StepFinished { step_name: &'a str },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ToolCallStart {
        tool_call_id: &'a str,
        tool_call_name: &'a str,
    },
    /// The whole arguments, as one JSON text.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ToolCallArgs {
        tool_call_id: &'a str,
        delta: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ToolCallEnd { tool_call_id: &'a str },
    /// A tool's result (or error) as text; `toolAgentOutput` has it structured.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ToolCallResult {
        message_id: &'a str,
        tool_call_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false, inline)]
        role: Option<ToolRole>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        tool_agent_output: Option<ToolAgentOutput<'a>>,
    },
    /// The thread's state, `{tasks?, status?, title?}` (`AgUiState`); or an upstream AG-UI
    /// agent's state (`--agui-agent`), as it sent it.
    StateSnapshot {
        #[schema(value_type = Object)]
        snapshot: StateValue<'a>,
    },
    /// An upstream AG-UI agent's state change: JSON Patch operations, as it sent them.
    StateDelta {
        #[schema(value_type = Vec<Object>)]
        delta: &'a Value,
    },
    /// An upstream AG-UI agent's raw event, as it sent it.
    Raw {
        #[schema(value_type = Object)]
        event: &'a Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        source: Option<&'a str>,
    },
    /// The settled messages, for a client joining mid-run.
    MessagesSnapshot {
        #[schema(value_type = Vec<AgUiMessage>)]
        messages: Vec<&'a AgUiMessage>,
    },
    /// `threadstream.confirmation-request`, `threadstream.filesystem-request`,
    /// `threadstream.tasks-update` or `threadstream.error`, with the n8n payload as `value`; or
    /// an upstream AG-UI agent's custom event, its name and value as it sent them.
    Custom {
        name: &'a str,
        /// An object for ours; any JSON value for an upstream's (AG-UI's `value: any`).
        #[schema(value_type = Value)]
        value: CustomValue<'a>,
    },
    /// A sub-agent began (or resumed); `subagentRunId` is its agent id, `name` its role.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    SubagentStarted {
        subagent_run_id: &'a str,
        name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        description: Option<&'a str>,
    },
    /// A sub-agent completed (`outcome.type` `success`, with its `result`), or is suspended at
    /// the end of its run (`suspended`).
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    SubagentFinished {
        subagent_run_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        result: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false, inline)]
        outcome: Option<SubagentOutcome>,
    },
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    SubagentError {
        subagent_run_id: &'a str,
        message: &'a str,
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
pub struct AgUiTokenUsage<'a> {
    pub model: &'a str,
    #[schema(minimum = 0)]
    pub input_tokens: u64,
    #[schema(minimum = 0)]
    pub output_tokens: u64,
    #[schema(minimum = 0)]
    pub total_tokens: u64,
}

#[derive(Serialize, ToSchema)]
pub struct WorkerAgentOutput<'a> {
    /// `success`, `partial` (cancelled) or `failed`.
    pub status: &'a str,
    pub answer: &'a str,
}

#[derive(Serialize, ToSchema)]
pub struct ToolAgentOutput<'a> {
    pub tool_name: &'a str,
    pub tool_call_id: &'a str,
    #[schema(value_type = Object)]
    pub tool_call_args: Value,
    /// `success` or `failure`.
    pub status: &'a str,
    /// The first 200 characters of `content`.
    pub result_summary: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<ToolAgentError<'a>>,
}

/// Why a tool call failed: `code` is `tool_error`, `message` the tool's error.
#[derive(Serialize, ToSchema)]
pub struct ToolAgentError<'a> {
    pub code: &'a str,
    pub message: &'a str,
}

/// `STATE_SNAPSHOT.snapshot`: the thread's state, each part once it is known.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct AgUiState {
    /// The last `tasks-update`'s tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub tasks: Option<Vec<TaskItem>>,
    /// The last non-empty `status` message.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub status: Option<String>,
    /// The thread's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub title: Option<String>,
}

/// `STATE_SNAPSHOT.snapshot`: the thread's state, or an upstream agent's.
#[derive(Serialize)]
#[serde(untagged)]
pub enum StateValue<'a> {
    Thread(&'a AgUiState),
    Upstream(&'a Value),
}

/// `CUSTOM.value`: the n8n payload of the event it is named after, as the log stores it.
#[derive(Serialize)]
#[serde(untagged)]
pub enum CustomValue<'a> {
    ConfirmationRequest(&'a ConfirmationRequest),
    FilesystemRequest(&'a FilesystemRequest),
    TasksUpdate(&'a TasksUpdate),
    Error(&'a ErrorPayload),
    /// An upstream AG-UI agent's `CUSTOM` value.
    Upstream(&'a Value),
}

/// One message of `MESSAGES_SNAPSHOT`, by `role`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(tag = "role", rename_all = "lowercase")]
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

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AgUiToolCall {
    pub id: String,
    #[serde(rename = "type")]
    #[schema(inline)]
    pub call_type: FunctionType,
    pub function: AgUiFunctionCall,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FunctionType {
    Function,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AgUiFunctionCall {
    pub name: String,
    /// The arguments as one JSON text.
    pub arguments: String,
}

impl AgUiMessage {
    pub fn id(&self) -> &str {
        match self {
            AgUiMessage::User { id, .. }
            | AgUiMessage::Assistant { id, .. }
            | AgUiMessage::Tool { id, .. }
            | AgUiMessage::Reasoning { id, .. } => id,
        }
    }

    /// Attributes the message to a sub-agent.
    pub fn set_subagent(&mut self, sub: Option<&str>) {
        let (AgUiMessage::User {
            subagent_run_id, ..
        }
        | AgUiMessage::Assistant {
            subagent_run_id, ..
        }
        | AgUiMessage::Tool {
            subagent_run_id, ..
        }
        | AgUiMessage::Reasoning {
            subagent_run_id, ..
        }) = self;
        *subagent_run_id = sub.map(str::to_string);
    }
}
