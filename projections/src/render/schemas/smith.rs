//! The frames [`crate::render::smith`] sends, by `type`: data-only, no envelope.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// One workflow-builder frame, by `type`.
#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(dead_code)] // a description of the wire, never built
pub enum WorkflowBuilderFrame {
    /// The run began.
    StreamStart {},
    /// A piece of the orchestrator's text.
    Token { content: String },
    /// A tool call, with its arguments as one JSON text.
    ToolCall {
        name: String,
        arguments: String,
        call_id: String,
    },
    /// A tool's result (`{error}` when it failed).
    ToolResult {
        /// Any JSON: the tool's result.
        output: Value,
        call_id: String,
    },
    /// The workflow after a tool result: all its nodes and edges.
    WorkflowState {
        workflow_nodes: Vec<WorkflowStateNode>,
        workflow_edges: Vec<WorkflowStateEdge>,
    },
    /// Something the builder should know: a failed tool, a confirmation waited for, a
    /// cancelled run.
    Warning { message: String },
    /// The run failed; the stream ends (no `stream_end` after it).
    Error { message: String },
    /// The run ended; the stream ends.
    StreamEnd {},
}

#[derive(Serialize, ToSchema)]
pub struct WorkflowStateNode {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub node_type: String,
    pub trigger: bool,
    #[schema(value_type = Object)]
    pub parameters: Value,
    #[schema(value_type = Object)]
    pub output: Value,
    /// As the workflow has it (`[x, y]`).
    pub position: Value,
}

#[derive(Serialize, ToSchema)]
pub struct WorkflowStateEdge {
    /// `edge-{src}-{dst}`.
    pub id: String,
    pub src: String,
    pub dst: String,
}
