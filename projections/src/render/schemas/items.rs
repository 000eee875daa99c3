//! The events [`crate::render::items`] sends, by `type`. Every event also carries the envelope
//! [`super::items_event`] adds: `stream` (`"request"`), `requestId`, `sequence_number` and `ts`.
//! Objects stay open to other keys (clients ignore what they do not know).

use serde::Serialize;
use serde_json::Value;
use threadstream_domain::event::{ConfirmationRequest, TaskItem};
use utoipa::ToSchema;

/// One items event, by `type`.
#[derive(Serialize, ToSchema)]
#[serde(tag = "type")]
#[allow(dead_code)] // a description of the wire, never built
pub enum ItemsEventBody {
    /// An item begins (`status` `in_progress`, or `completed` for one that is whole at once).
    #[serde(rename = "item.added")]
    ItemAdded { item: Item },
    /// An item changed: `patch` holds the fields that changed (a tool's `status` and `output`
    /// or `error`, a trace's `modelUsage`).
    #[serde(rename = "item.updated")]
    ItemUpdated {
        id: String,
        #[schema(value_type = Object)]
        patch: Value,
    },
    /// An item is final.
    #[serde(rename = "item.done")]
    ItemDone { item: Item },
    /// A message's or reasoning's content part begins (empty).
    #[serde(rename = "content.added", rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ContentAdded {
        item_id: String,
        #[schema(minimum = 0)]
        content_index: u32,
        part: ItemsContentPart,
    },
    #[serde(rename = "content.delta", rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ContentDelta {
        item_id: String,
        #[schema(minimum = 0)]
        content_index: u32,
        delta: ItemsTextDelta,
    },
    /// A content part is whole.
    #[serde(rename = "content.done", rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ContentDone {
        item_id: String,
        #[schema(minimum = 0)]
        content_index: u32,
        part: ItemsContentPart,
    },
    /// The request's run completed; the stream ends.
    #[serde(rename = "request.completed")]
    RequestCompleted {
        #[schema(inline)]
        status: CompletedStatus,
    },
    /// The run was cancelled; the stream ends.
    #[serde(rename = "request.aborted")]
    RequestAborted {
        #[schema(inline)]
        status: AbortedStatus,
        reason: String,
    },
    /// The run failed; the stream ends.
    #[serde(rename = "request.failed")]
    RequestFailed {
        #[schema(inline)]
        status: FailedStatus,
        error: ItemsError,
    },
}

/// One item, by `type`, with the fields every item has: `id`, `status`, `requestId`,
/// `itemIndex`, `ts` and, for a sub-agent's, `agentName` (its role).
#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(dead_code)] // a description of the wire, never built
pub enum Item {
    /// A user's input, or an assistant's text (`output_text` parts).
    Message {
        #[serde(flatten)]
        common: ItemCommon,
        #[schema(inline)]
        role: MessageRole,
        content: Vec<ItemsContentPart>,
    },
    /// An agent's reasoning (`reasoning_text` parts).
    Reasoning {
        #[serde(flatten)]
        common: ItemCommon,
        content: Vec<ItemsContentPart>,
    },
    /// A tool call; its result (`output`, `outputText`) or `error` arrives by `item.updated`.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ToolOutput {
        #[serde(flatten)]
        common: ItemCommon,
        block_name: String,
        tool_call: ItemToolCall,
    },
    /// A confirmation the run waits for (the n8n `confirmation-request` payload); `approved`
    /// once answered.
    ConfirmationRequest {
        #[serde(flatten)]
        common: ItemCommon,
        request: Box<ConfirmationRequest>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        approved: Option<bool>,
    },
    /// The run's task list.
    TaskList {
        #[serde(flatten)]
        common: ItemCommon,
        tasks: Vec<TaskItem>,
    },
    /// One agent's timing and model usage (`?unfiltered=1` only).
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    BlockTrace {
        #[serde(flatten)]
        common: ItemCommon,
        block_name: String,
        block_kind: String,
        started_at: i64,
    },
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ItemCommon {
    /// `item_{type}_{itemIndex}`.
    pub id: String,
    #[schema(inline)]
    pub status: ItemStatus,
    pub request_id: String,
    #[schema(minimum = 0)]
    pub item_index: u64,
    pub ts: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub agent_name: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    InProgress,
    Completed,
    Failed,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    User,
    Assistant,
}

/// `{type: input_text | output_text | reasoning_text, text}`.
#[derive(Serialize, ToSchema)]
pub struct ItemsContentPart {
    #[serde(rename = "type")]
    #[schema(inline)]
    pub part_type: ItemsContentPartType,
    pub text: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemsContentPartType {
    InputText,
    OutputText,
    ReasoningText,
}

#[derive(Serialize, ToSchema)]
pub struct ItemsTextDelta {
    pub text: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ItemToolCall {
    pub call_id: String,
    pub name: String,
    pub alias: String,
    /// The arguments as one JSON text.
    pub arguments: String,
    /// The agent that called it: `orchestrator` or a sub-agent's role.
    pub generator_block: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CompletedStatus {
    Completed,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AbortedStatus {
    Aborted,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailedStatus {
    Failed,
}

#[derive(Serialize, ToSchema)]
pub struct ItemsError {
    pub message: String,
}
