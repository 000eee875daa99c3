//! The workflows a thread has, folded from its own log.
//!
//! There is no workflow store yet (an event-sourced one comes later). Until then a thread's
//! workflows are fully derived: every thread starts with the same two [`samples`], and the
//! stored `tool-result`s of its `create-workflow` and `delete-workflow` calls add and remove
//! workflows on top. Nothing is kept in memory between calls.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use threadstream_domain::event::{ToolCall, ToolResult};
use threadstream_domain::StoredEvent;
use threadstream_store::{EventLog, StoreError};

pub const CREATE: &str = "create-workflow";
pub const DELETE: &str = "delete-workflow";

const PAGE: i64 = 5_000;

/// One node of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    #[serde(rename = "type")]
    pub node_type: String,
}

/// A workflow as the tools show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    pub id: String,
    pub name: String,
    pub active: bool,
    pub nodes: Vec<Node>,
}

impl Workflow {
    /// The short form `list-workflows` returns.
    pub fn summary(&self) -> Value {
        json!({"id": self.id, "name": self.name, "active": self.active, "nodeCount": self.nodes.len()})
    }
}

fn node(name: &str, node_type: &str) -> Node {
    Node {
        name: name.into(),
        node_type: node_type.into(),
    }
}

/// The workflows every thread starts with (deterministic).
pub fn samples() -> Vec<Workflow> {
    vec![
        Workflow {
            id: "wf-sample-1".into(),
            name: "Weather to Slack".into(),
            active: true,
            nodes: vec![
                node("Schedule Trigger", "n8n-nodes-base.scheduleTrigger"),
                node("HTTP Request", "n8n-nodes-base.httpRequest"),
                node("Slack", "n8n-nodes-base.slack"),
            ],
        },
        Workflow {
            id: "wf-sample-2".into(),
            name: "Old cleanup job".into(),
            active: false,
            nodes: vec![
                node("Cron", "n8n-nodes-base.cron"),
                node("Postgres", "n8n-nodes-base.postgres"),
            ],
        },
    ]
}

/// Folds events (in log order) into the workflow list, starting from [`samples`].
#[derive(Debug, Clone)]
pub struct WorkflowFold {
    workflows: Vec<Workflow>,
    /// Open create/delete calls: tool call id → tool name.
    calls: HashMap<String, String>,
}

impl Default for WorkflowFold {
    fn default() -> Self {
        WorkflowFold {
            workflows: samples(),
            calls: HashMap::new(),
        }
    }
}

impl WorkflowFold {
    pub fn apply(&mut self, row: &StoredEvent) {
        match row.event_type.as_str() {
            "tool-call" => {
                let Ok(call) = serde_json::from_str::<ToolCall>(&row.payload) else {
                    return;
                };
                if call.tool_name == CREATE || call.tool_name == DELETE {
                    self.calls.insert(call.tool_call_id, call.tool_name);
                }
            }
            "tool-error" => {
                if let Ok(v) = serde_json::from_str::<Value>(&row.payload) {
                    if let Some(id) = v.get("toolCallId").and_then(Value::as_str) {
                        self.calls.remove(id);
                    }
                }
            }
            "tool-result" => {
                let Ok(result) = serde_json::from_str::<ToolResult>(&row.payload) else {
                    return;
                };
                let Some(tool) = self.calls.remove(&result.tool_call_id) else {
                    return;
                };
                if tool == CREATE {
                    if let Ok(wf) = serde_json::from_value::<Workflow>(result.result) {
                        self.workflows.retain(|w| w.id != wf.id);
                        self.workflows.push(wf);
                    }
                } else if let Some(id) = result.result.get("deleted").and_then(Value::as_str) {
                    self.workflows.retain(|w| w.id != id);
                }
            }
            _ => {}
        }
    }

    pub fn into_workflows(self) -> Vec<Workflow> {
        self.workflows
    }
}

/// The thread's workflows as of now, read from the log.
pub async fn load(log: &EventLog, thread_id: &str) -> Result<Vec<Workflow>, StoreError> {
    let mut fold = WorkflowFold::default();
    let mut after = 0;
    loop {
        let page = log.read_thread(thread_id, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for row in &page {
            fold.apply(row);
        }
        if (page.len() as i64) < PAGE {
            break;
        }
    }
    Ok(fold.into_workflows())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, event_type: &str, payload: Value) -> StoredEvent {
        StoredEvent {
            id,
            thread_id: "t".into(),
            seq: id,
            run_id: "r".into(),
            agent_id: "a".into(),
            event_type: event_type.into(),
            payload: payload.to_string(),
            ts: 0,
            response_id: None,
            user_id: None,
        }
    }

    #[test]
    fn folds_creates_and_deletes_from_results_only() {
        let mut f = WorkflowFold::default();
        f.apply(&row(
            1,
            "tool-call",
            json!({"toolCallId":"tc1","toolName":CREATE,"args":{"name":"A"}}),
        ));
        f.apply(&row(
            2,
            "tool-result",
            json!({"toolCallId":"tc1","result":{"id":"wf-a","name":"A","active":false,"nodes":[]}}),
        ));
        // A delete that failed changes nothing.
        f.apply(&row(
            3,
            "tool-call",
            json!({"toolCallId":"tc2","toolName":DELETE,"args":{"workflowId":"wf-sample-1"}}),
        ));
        f.apply(&row(
            4,
            "tool-error",
            json!({"toolCallId":"tc2","error":"denied"}),
        ));
        f.apply(&row(
            5,
            "tool-call",
            json!({"toolCallId":"tc3","toolName":DELETE,"args":{"workflowId":"wf-sample-2"}}),
        ));
        f.apply(&row(
            6,
            "tool-result",
            json!({"toolCallId":"tc3","result":{"deleted":"wf-sample-2"}}),
        ));
        let ids: Vec<String> = f.into_workflows().into_iter().map(|w| w.id).collect();
        assert_eq!(ids, vec!["wf-sample-1", "wf-a"]);
    }
}
