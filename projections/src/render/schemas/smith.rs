//! The frames [`crate::render::smith`] sends, by `type`: data-only, no envelope. The renderer
//! builds these and writes them (keys sorted, [`crate::render::wire`]).

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// One workflow-builder frame, by `type`.
#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkflowBuilderFrame<'a> {
    /// The run began.
    StreamStart {},
    /// A piece of the orchestrator's text.
    Token { content: &'a str },
    /// A tool call, with its arguments as one JSON text.
    ToolCall {
        name: &'a str,
        arguments: String,
        call_id: &'a str,
    },
    /// A tool's result (`{error}` when it failed).
    ToolResult {
        /// Any JSON: the tool's result.
        #[schema(value_type = Value)]
        output: ToolOutput<'a>,
        call_id: &'a str,
    },
    /// The workflow after a tool result: all its nodes and edges.
    WorkflowState {
        workflow_nodes: Vec<WorkflowStateNode<'a>>,
        workflow_edges: Vec<WorkflowStateEdge<'a>>,
    },
    /// Something the builder should know: a failed tool, a confirmation waited for, a
    /// cancelled run.
    Warning { message: String },
    /// The run failed; the stream ends (no `stream_end` after it).
    Error { message: &'a str },
    /// The run ended; the stream ends.
    StreamEnd {},
}

/// A tool's result as sent: the result, or `{error}` for a failed call.
#[derive(Serialize)]
#[serde(untagged)]
pub enum ToolOutput<'a> {
    Result(&'a Value),
    Failed { error: &'a str },
}

#[derive(Serialize, ToSchema)]
pub struct WorkflowStateNode<'a> {
    #[schema(value_type = String)]
    pub id: &'a Value,
    #[schema(value_type = String)]
    pub name: &'a Value,
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    pub node_type: &'a Value,
    pub trigger: bool,
    #[schema(value_type = Object)]
    pub parameters: &'a Value,
    #[schema(value_type = Object)]
    pub output: Empty,
    /// As the workflow has it (`[x, y]`).
    #[schema(value_type = Value)]
    pub position: &'a Value,
}

/// `{}`.
#[derive(Serialize)]
pub struct Empty {}

#[derive(Serialize, ToSchema)]
pub struct WorkflowStateEdge<'a> {
    /// `edge-{src}-{dst}`.
    pub id: String,
    pub src: &'a str,
    pub dst: &'a str,
}
