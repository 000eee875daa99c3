//! The events [`crate::render::items`] sends, by `type`. Every event also carries the envelope
//! [`super::items_event`] adds: `stream` (`"request"`), `requestId`, `sequence_number` and `ts`.
//! Objects stay open to other keys (clients ignore what they do not know). The renderer builds
//! these and writes them (keys sorted, [`crate::render::wire`]).

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;
use threadstream_domain::event::{ConfirmationRequest, TaskItem};
use utoipa::ToSchema;

/// One items event, by `type`.
#[derive(Serialize, ToSchema)]
#[serde(tag = "type")]
pub enum ItemsEventBody<'a> {
    /// An item begins (`status` `in_progress`, or `completed` for one that is whole at once).
    #[serde(rename = "item.added")]
    ItemAdded {
        #[schema(value_type = Item)]
        item: &'a Item,
    },
    /// An item changed: `patch` holds the fields that changed (a tool's `status` and `output`
    /// or `error`, a trace's `modelUsage`).
    #[serde(rename = "item.updated")]
    ItemUpdated {
        id: &'a str,
        #[schema(value_type = Object)]
        patch: ItemPatch<'a>,
    },
    /// An item is final.
    #[serde(rename = "item.done")]
    ItemDone {
        #[schema(value_type = Item)]
        item: &'a Item,
    },
    /// A message's or reasoning's content part begins (empty).
    #[serde(rename = "content.added", rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ContentAdded {
        item_id: &'a str,
        #[schema(minimum = 0)]
        content_index: u32,
        part: ItemsContentPart<'a>,
    },
    #[serde(rename = "content.delta", rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ContentDelta {
        item_id: &'a str,
        #[schema(minimum = 0)]
        content_index: u32,
        delta: ItemsTextDelta<'a>,
    },
    /// A content part is whole.
    #[serde(rename = "content.done", rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ContentDone {
        item_id: &'a str,
        #[schema(minimum = 0)]
        content_index: u32,
        part: ItemsContentPart<'a>,
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
        reason: &'a str,
    },
    /// The run failed; the stream ends.
    #[serde(rename = "request.failed")]
    RequestFailed {
        #[schema(inline)]
        status: FailedStatus,
        error: ItemsError,
    },
}

impl ItemsEventBody<'_> {
    /// The event's `type` (also its frame's `event:`).
    pub fn kind(&self) -> &'static str {
        match self {
            ItemsEventBody::ItemAdded { .. } => "item.added",
            ItemsEventBody::ItemUpdated { .. } => "item.updated",
            ItemsEventBody::ItemDone { .. } => "item.done",
            ItemsEventBody::ContentAdded { .. } => "content.added",
            ItemsEventBody::ContentDelta { .. } => "content.delta",
            ItemsEventBody::ContentDone { .. } => "content.done",
            ItemsEventBody::RequestCompleted { .. } => "request.completed",
            ItemsEventBody::RequestAborted { .. } => "request.aborted",
            ItemsEventBody::RequestFailed { .. } => "request.failed",
        }
    }
}

/// One items event with the envelope [`super::items_event`] describes.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemsFrame<'a> {
    pub stream: RequestStream,
    #[serde(flatten)]
    pub body: ItemsEventBody<'a>,
    pub request_id: &'a str,
    #[serde(rename = "sequence_number")]
    pub sequence_number: u64,
    pub ts: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestStream {
    Request,
}

/// `item.updated`'s `patch`: the fields of the item that changed.
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ItemPatch<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
    /// A tool's result (any JSON, `null` included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemsError>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_usage: Option<&'a ModelUsage>,
}

/// One item, by `type`, with the fields every item has: `id`, `status`, `requestId`,
/// `itemIndex`, `ts` and, for a sub-agent's, `agentName` (its role).
#[derive(Serialize, ToSchema, Debug, Clone)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    /// A user's input, or an assistant's text (`output_text` parts).
    Message {
        #[serde(flatten)]
        common: ItemCommon,
        #[schema(inline)]
        role: MessageRole,
        content: Vec<ItemsContentPart<'static>>,
    },
    /// An agent's reasoning (`reasoning_text` parts).
    Reasoning {
        #[serde(flatten)]
        common: ItemCommon,
        content: Vec<ItemsContentPart<'static>>,
    },
    /// A tool call; its result (`output`, `outputText`) or `error` arrives by `item.updated`.
    #[serde(rename_all = "camelCase")]
    #[schema(rename_all = "camelCase")]
    ToolOutput {
        #[serde(flatten)]
        common: ItemCommon,
        block_name: String,
        tool_call: ItemToolCall,
        /// The tool's result (any JSON), once it came.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<Value>)]
        output: Option<Value>,
        /// `output` as the text a plain client shows (strings as they are, the rest as JSON).
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        output_text: Option<String>,
        /// Why the call failed.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        error: Option<ItemsError>,
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
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        completed_at: Option<i64>,
        /// `completedAt - startedAt`, ms.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        duration: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        model_usage: Option<ModelUsage>,
        /// The agent's last error.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        error: Option<ItemsError>,
    },
}

impl Item {
    /// The fields every item has.
    pub fn common(&self) -> &ItemCommon {
        match self {
            Item::Message { common, .. }
            | Item::Reasoning { common, .. }
            | Item::ToolOutput { common, .. }
            | Item::ConfirmationRequest { common, .. }
            | Item::TaskList { common, .. }
            | Item::BlockTrace { common, .. } => common,
        }
    }

    pub fn common_mut(&mut self) -> &mut ItemCommon {
        match self {
            Item::Message { common, .. }
            | Item::Reasoning { common, .. }
            | Item::ToolOutput { common, .. }
            | Item::ConfirmationRequest { common, .. }
            | Item::TaskList { common, .. }
            | Item::BlockTrace { common, .. } => common,
        }
    }
}

/// An agent's model usage over the request.
#[derive(Serialize, ToSchema, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct ModelUsage {
    pub model: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

#[derive(Serialize, ToSchema, Debug, Clone)]
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

#[derive(Serialize, ToSchema, Debug, Clone, Copy)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    InProgress,
    Completed,
    Failed,
}

#[derive(Serialize, ToSchema, Debug, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    User,
    Assistant,
}

/// `{type: input_text | output_text | reasoning_text, text}`.
#[derive(Serialize, ToSchema, Debug, Clone)]
pub struct ItemsContentPart<'a> {
    #[serde(rename = "type")]
    #[schema(inline)]
    pub part_type: ItemsContentPartType,
    #[schema(value_type = String)]
    pub text: Cow<'a, str>,
}

#[derive(Serialize, ToSchema, Debug, Clone, Copy)]
#[serde(rename_all = "snake_case")]
pub enum ItemsContentPartType {
    InputText,
    OutputText,
    ReasoningText,
}

#[derive(Serialize, ToSchema)]
pub struct ItemsTextDelta<'a> {
    pub text: &'a str,
}

#[derive(Serialize, ToSchema, Debug, Clone)]
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

#[derive(Serialize, ToSchema, Debug, Clone)]
pub struct ItemsError {
    pub message: String,
}
