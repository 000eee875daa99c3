//! The workflow-builder stream: one run rendered as data-only frames (no ids, no
//! resume): `stream_start`, `token`, `tool_call`, `tool_result`, `warning`, `workflow_state`,
//! `error` (terminal, no `stream_end` after it), `stream_end`.
//!
//! `workflow_state` (all nodes and edges) follows every tool result once the workflow is known.
//! The renderer stays pure by taking the workflow from the tool results themselves: the
//! workflow tools answer with the whole workflow (`{id, nodes, edges, …}`, or
//! `{workflow: {…}}`). The workflow is the one the stream is for, or — for a new workflow —
//! the first one the run creates.

use std::collections::HashMap;

use serde_json::Value;
use threadstream_domain::event::RunStatus;
use threadstream_domain::{EventBody, StoredEvent};

use super::schemas::smith::{
    Empty, ToolOutput, WorkflowBuilderFrame, WorkflowStateEdge, WorkflowStateNode,
};
use super::{wire, Frame};

/// Renders one run of a workflow-builder conversation.
#[derive(Debug, Clone)]
pub struct SmithRenderer {
    run_id: String,
    /// The workflow the stream is about; `None` until a new one is created.
    workflow_id: Option<String>,
    /// The run's orchestrator: only its text is streamed as tokens.
    orchestrator: Option<String>,
    /// The latest known state of every workflow a tool result showed.
    workflows: HashMap<String, Value>,
    tool_names: HashMap<String, String>,
    errored: bool,
    finished: bool,
}

impl SmithRenderer {
    /// `workflow_id`: the workflow being built (`None` for a new one).
    pub fn new(run_id: &str, workflow_id: Option<&str>) -> Self {
        SmithRenderer {
            run_id: run_id.to_string(),
            workflow_id: workflow_id.map(str::to_string),
            orchestrator: None,
            workflows: HashMap::new(),
            tool_names: HashMap::new(),
            errored: false,
            finished: false,
        }
    }

    /// The workflow the stream is about, once known.
    pub fn workflow_id(&self) -> Option<&str> {
        self.workflow_id.as_deref()
    }

    /// Whether the run's end was rendered (the stream closes).
    pub fn finished(&self) -> bool {
        self.finished
    }

    pub fn render(&mut self, e: &StoredEvent) -> Vec<Frame> {
        if self.finished || e.run_id != self.run_id {
            return Vec::new();
        }
        let Ok(decoded) = e.decode() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let frame = |f: &WorkflowBuilderFrame<'_>| Frame::typed(f);
        match decoded.body {
            EventBody::RunStart(_) => {
                self.orchestrator = Some(e.agent_id.clone());
                out.push(frame(&WorkflowBuilderFrame::StreamStart {}));
            }
            EventBody::TextDelta(d)
                if self.orchestrator.as_deref() == Some(e.agent_id.as_str())
                    && !d.text.is_empty() =>
            {
                out.push(frame(&WorkflowBuilderFrame::Token { content: &d.text }));
            }
            EventBody::ToolCall(c) => {
                self.tool_names
                    .insert(c.tool_call_id.clone(), c.tool_name.clone());
                out.push(frame(&WorkflowBuilderFrame::ToolCall {
                    name: &c.tool_name,
                    arguments: wire::to_string(&c.args),
                    call_id: &c.tool_call_id,
                }));
            }
            EventBody::ToolResult(r) => {
                self.learn(&r.result);
                out.push(frame(&WorkflowBuilderFrame::ToolResult {
                    output: ToolOutput::Result(&r.result),
                    call_id: &r.tool_call_id,
                }));
                out.extend(self.workflow_state());
            }
            EventBody::ToolError(r) => {
                let name = self
                    .tool_names
                    .get(&r.tool_call_id)
                    .map_or("tool", String::as_str);
                out.push(frame(&WorkflowBuilderFrame::ToolResult {
                    output: ToolOutput::Failed { error: &r.error },
                    call_id: &r.tool_call_id,
                }));
                out.push(frame(&WorkflowBuilderFrame::Warning {
                    message: format!("{name} failed: {}", r.error),
                }));
                out.extend(self.workflow_state());
            }
            EventBody::ConfirmationRequest(c) => out.push(frame(&WorkflowBuilderFrame::Warning {
                message: format!(
                    "waiting for confirmation '{}': {} (answer with POST /instance-ai/confirm/{})",
                    c.request_id, c.message, c.request_id
                ),
            })),
            EventBody::Error(err) if !self.errored => {
                self.errored = true;
                out.push(frame(&WorkflowBuilderFrame::Error {
                    message: &err.content,
                }));
            }
            EventBody::RunFinish(f) => {
                self.finished = true;
                match f.status {
                    RunStatus::Completed => out.push(frame(&WorkflowBuilderFrame::StreamEnd {})),
                    RunStatus::Cancelled => {
                        let reason = f.reason.as_deref().unwrap_or("cancelled");
                        out.push(frame(&WorkflowBuilderFrame::Warning {
                            message: format!("run cancelled: {reason}"),
                        }));
                        out.push(frame(&WorkflowBuilderFrame::StreamEnd {}));
                    }
                    RunStatus::Error if !self.errored => {
                        self.errored = true;
                        out.push(frame(&WorkflowBuilderFrame::Error {
                            message: f.reason.as_deref().unwrap_or("the run failed"),
                        }));
                    }
                    RunStatus::Error => {}
                }
            }
            _ => {}
        }
        out
    }

    /// Starts from the workflow's state as of the stream's start (a tool result that shows it
    /// replaces it).
    pub fn know_workflow(&mut self, view: &Value) {
        self.learn(view);
    }

    /// Remembers the workflow a tool result shows, and adopts the first one created when the
    /// stream is for a new workflow.
    fn learn(&mut self, result: &Value) {
        let view = if result.get("nodes").is_some() {
            result
        } else {
            match result.get("workflow") {
                Some(w) => w,
                None => return,
            }
        };
        let (Some(id), Some(_), Some(_)) =
            (view["id"].as_str(), view.get("nodes"), view.get("edges"))
        else {
            return;
        };
        if self.workflow_id.is_none() {
            self.workflow_id = Some(id.to_string());
        }
        self.workflows.insert(id.to_string(), view.clone());
    }

    /// `workflow_state` of the stream's workflow in the workflow-builder stream's shapes.
    fn workflow_state(&self) -> Option<Frame> {
        let view = self.workflows.get(self.workflow_id.as_deref()?)?;
        let empty = Value::Object(Default::default());
        let workflow_nodes = view["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| WorkflowStateNode {
                id: &n["id"],
                name: &n["name"],
                node_type: &n["type"],
                trigger: n["trigger"].as_bool().unwrap_or(false),
                parameters: n.get("parameters").unwrap_or(&empty),
                output: Empty {},
                position: &n["position"],
            })
            .collect();
        let workflow_edges = view["edges"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let (src, dst) = (
                    e["from"].as_str().unwrap_or(""),
                    e["to"].as_str().unwrap_or(""),
                );
                WorkflowStateEdge {
                    id: format!("edge-{src}-{dst}"),
                    src,
                    dst,
                }
            })
            .collect();
        Some(Frame::typed(&WorkflowBuilderFrame::WorkflowState {
            workflow_nodes,
            workflow_edges,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{demo_run, Log};
    use super::*;
    use serde_json::json;

    fn frames(log: &Log, workflow: Option<&str>) -> Vec<Value> {
        let mut r = SmithRenderer::new("r1", workflow);
        log.events
            .iter()
            .flat_map(|e| r.render(e))
            .map(|f| {
                assert!(f.id.is_none() && f.event.is_none(), "data-only frames");
                serde_json::from_str(&f.data).unwrap()
            })
            .collect()
    }

    #[test]
    fn a_new_workflow_run_streams_tokens_tools_and_the_workflow_state() {
        let mut log = Log::new("t1");
        demo_run(&mut log, "r1", "completed");
        // The fixture's create-workflow result is `{id}` only; make it a whole workflow.
        let e = log
            .events
            .iter_mut()
            .find(|e| e.payload.contains("\"wf1\""))
            .unwrap();
        e.payload = json!({"toolCallId": "tc2", "result": {"id": "wf1", "name": "W",
            "nodes": [{"id": "n1", "name": "Start", "type": "manualTrigger", "trigger": true,
                       "parameters": {}, "position": [0, 0]}],
            "edges": [{"from": "n1", "to": "n1"}]}})
        .to_string();
        let f = frames(&log, None);
        assert_eq!(f[0]["type"], "stream_start");
        assert_eq!(f.last().unwrap()["type"], "stream_end");
        let tokens: String = f
            .iter()
            .filter(|v| v["type"] == "token")
            .map(|v| v["content"].as_str().unwrap())
            .collect();
        assert_eq!(
            tokens, "On it.Done",
            "only the orchestrator's text is tokens"
        );
        let call = f
            .iter()
            .find(|v| v["type"] == "tool_call" && v["call_id"] == "tc2")
            .unwrap();
        assert_eq!(call["arguments"], r#"{"name":"W"}"#);
        let pos = f
            .iter()
            .position(|v| v["type"] == "tool_result" && v["call_id"] == "tc2")
            .unwrap();
        assert_eq!(f[pos + 1]["type"], "workflow_state");
        assert_eq!(f[pos + 1]["workflow_nodes"][0]["output"], json!({}));
        assert_eq!(
            f[pos + 1]["workflow_edges"][0],
            json!({"id": "edge-n1-n1", "src": "n1", "dst": "n1"})
        );
        // The next tool result repeats the state.
        assert_eq!(f[pos + 3]["type"], "workflow_state", "{:?}", &f[pos..]);
    }

    #[test]
    fn an_error_is_terminal_without_stream_end() {
        let mut log = Log::new("t1");
        demo_run(&mut log, "r1", "error");
        let f = frames(&log, Some("wf-x"));
        let last = f.last().unwrap();
        assert_eq!(last["type"], "error");
        assert_eq!(last["message"], "LLM provider 'demo' unavailable");
        assert!(!f.iter().any(|v| v["type"] == "stream_end"));
        assert!(
            !f.iter().any(|v| v["type"] == "workflow_state"),
            "wf-x was never shown"
        );
    }
}
