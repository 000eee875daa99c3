//! The events of workflow streams (internal: stored in the log, never on the n8n stream), and
//! the values they carry: nodes, edges and node patches. The rules that produce them are the
//! `Workflow` aggregate's (`domain/src/workflow.rs`).

use serde::{Deserialize, Serialize};

use super::JsonObject;

/// One node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub node_type: String,
    /// Starts the workflow.
    #[serde(default)]
    pub trigger: bool,
    #[serde(default)]
    pub parameters: JsonObject,
    /// `[x, y]` on the canvas, in whole pixels (integers survive a JSON round trip through
    /// JavaScript unchanged; `250.0` would come back as `250`).
    #[serde(default)]
    pub position: [i64; 2],
}

/// An edge: the output of `from` feeds `to` (node ids).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    pub from: String,
    pub to: String,
}

/// What may change in a node (absent fields stay).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePatch {
    pub node_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<JsonObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<[i64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowCreated {
    pub workflow_id: String,
    pub name: String,
    #[serde(default)]
    pub active: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeAdded {
    pub node: Node,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRemoved {
    pub node_id: String,
}
