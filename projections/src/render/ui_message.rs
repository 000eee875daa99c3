//! The AI SDK's UI message stream (npm `ai`, `x-vercel-ai-ui-message-stream: v1`): one run
//! rendered as the chunks `useChat` and `readUIMessageStream` build an assistant message from,
//! each a `data: {json}` frame, ended by `data: [DONE]`.
//!
//! - the run's own agent (the one whose `run-start` opens it): `text-*` and `reasoning-*` parts
//!   (a part closes when the agent does anything else, so parts keep the log's order);
//! - every agent's tool calls: `tool-input-available`, then `tool-output-available` or
//!   `tool-output-error`;
//! - sub-agents: a `data-agent` part per agent (id = agent id), sent again (the SDK replaces a
//!   data part of the same id) when it completes, with its result;
//! - the task list: one `data-tasks` part (id `tasks`), replaced on each update;
//! - a confirmation request: a `data-confirmation` part (id = its request id);
//! - an `error` event: an `error` chunk; a cancelled run: `abort`; then `finish-step`, `finish`
//!   and `[DONE]`.
//!
//! Pure and deterministic, like the other renderers: a resumed client gets the whole message
//! again from the run's first event (the SDK's `resumeStreamIsReplay`).

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};
use threadstream_domain::event::RunStatus;
use threadstream_domain::{EventBody, StoredEvent};

use super::wire;

/// The response header naming the protocol.
pub const HEADER: &str = "x-vercel-ai-ui-message-stream";
/// Its value.
pub const VERSION: &str = "v1";

/// Which kind of part an agent has open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Reasoning,
}

/// Renders one run of a thread.
#[derive(Debug, Clone)]
pub struct UiMessageRenderer {
    run_id: String,
    /// The run's own agent, once its `run-start` was seen.
    root: Option<String>,
    /// The open text or reasoning part of the root agent, and its id.
    open: Option<(Open, String)>,
    /// Parts opened so far (part ids are `text-N` / `reasoning-N`).
    parts: u64,
    /// Sub-agents by id: their role and parent.
    agents: HashMap<String, Value>,
    /// Tool calls whose input was sent: id → tool name.
    tools: BTreeMap<String, String>,
    finished: bool,
}

impl UiMessageRenderer {
    pub fn new(run_id: &str) -> Self {
        UiMessageRenderer {
            run_id: run_id.to_string(),
            root: None,
            open: None,
            parts: 0,
            agents: HashMap::new(),
            tools: BTreeMap::new(),
            finished: false,
        }
    }

    /// The run's terminal event was rendered (the stream ends there).
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Appends the frames of `e` (an event of the thread, in log order) to `out`.
    pub fn render(&mut self, e: &StoredEvent, out: &mut String) {
        if self.finished || e.run_id != self.run_id {
            return;
        }
        let Ok(event) = e.decode() else { return };
        let agent = e.agent_id.as_str();
        match event.body {
            EventBody::RunStart(start) if self.root.is_none() => {
                self.root = Some(agent.to_string());
                chunk(
                    out,
                    json!({"type": "start", "messageId": format!("msg-{}", self.run_id), "messageMetadata": {"userMessageId": start.message_id}}),
                );
                chunk(out, json!({"type": "start-step"}));
            }
            EventBody::TextDelta(d) if self.is_root(agent) => self.delta(out, Open::Text, &d.text),
            EventBody::ReasoningDelta(d) if self.is_root(agent) => {
                self.delta(out, Open::Reasoning, &d.text)
            }
            EventBody::ToolCall(call) => {
                self.close(out);
                self.tools
                    .insert(call.tool_call_id.clone(), call.tool_name.clone());
                chunk(
                    out,
                    json!({"type": "tool-input-available", "toolCallId": call.tool_call_id, "toolName": call.tool_name, "input": call.args}),
                );
            }
            EventBody::ToolResult(r) if self.tools.contains_key(&r.tool_call_id) => {
                self.close(out);
                chunk(
                    out,
                    json!({"type": "tool-output-available", "toolCallId": r.tool_call_id, "output": r.result}),
                );
            }
            EventBody::ToolError(r) if self.tools.contains_key(&r.tool_call_id) => {
                self.close(out);
                chunk(
                    out,
                    json!({"type": "tool-output-error", "toolCallId": r.tool_call_id, "errorText": r.error}),
                );
            }
            EventBody::AgentSpawned(s) => {
                self.close(out);
                let data = json!({"agentId": agent, "role": s.role, "parentId": s.parent_id, "status": "running"});
                self.agents.insert(agent.to_string(), data.clone());
                chunk(
                    out,
                    json!({"type": "data-agent", "id": agent, "data": data}),
                );
            }
            EventBody::AgentCompleted(c) => {
                self.close(out);
                let mut data = self
                    .agents
                    .remove(agent)
                    .unwrap_or_else(|| json!({"agentId": agent, "role": c.role}));
                data["status"] = json!(if c.error.is_some() {
                    "error"
                } else {
                    "completed"
                });
                data["result"] = json!(c.result);
                if let Some(err) = c.error {
                    data["error"] = json!(err);
                }
                chunk(
                    out,
                    json!({"type": "data-agent", "id": agent, "data": data}),
                );
            }
            EventBody::TasksUpdate(t) => {
                self.close(out);
                chunk(
                    out,
                    json!({"type": "data-tasks", "id": "tasks", "data": t.tasks}),
                );
            }
            EventBody::ConfirmationRequest(c) => {
                self.close(out);
                chunk(
                    out,
                    json!({"type": "data-confirmation", "id": c.request_id, "data": *c}),
                );
            }
            EventBody::Error(err) => {
                self.close(out);
                chunk(out, json!({"type": "error", "errorText": err.content}));
            }
            EventBody::RunFinish(f) if self.is_root(agent) => {
                self.close(out);
                if f.status == RunStatus::Cancelled {
                    chunk(out, json!({"type": "abort"}));
                }
                chunk(out, json!({"type": "finish-step"}));
                let reason = match f.status {
                    RunStatus::Completed => "stop",
                    RunStatus::Cancelled => "other",
                    RunStatus::Error => "error",
                };
                chunk(out, json!({"type": "finish", "finishReason": reason}));
                out.push_str("data: [DONE]\n\n");
                self.finished = true;
            }
            _ => {}
        }
    }

    fn is_root(&self, agent: &str) -> bool {
        self.root.as_deref() == Some(agent)
    }

    /// A text or reasoning delta of the root agent: opens a part of that kind when the open one
    /// (if any) is of the other kind.
    fn delta(&mut self, out: &mut String, kind: Open, text: &str) {
        if self.open.as_ref().map(|(k, _)| *k) != Some(kind) {
            self.close(out);
            self.parts += 1;
            let (name, id) = match kind {
                Open::Text => ("text", format!("text-{}", self.parts)),
                Open::Reasoning => ("reasoning", format!("reasoning-{}", self.parts)),
            };
            chunk(out, json!({"type": format!("{name}-start"), "id": id}));
            self.open = Some((kind, id));
        }
        let (kind, id) = self.open.as_ref().expect("opened above");
        let name = match kind {
            Open::Text => "text-delta",
            Open::Reasoning => "reasoning-delta",
        };
        chunk(out, json!({"type": name, "id": id, "delta": text}));
    }

    /// Ends the open text or reasoning part, if any.
    fn close(&mut self, out: &mut String) {
        if let Some((kind, id)) = self.open.take() {
            let name = match kind {
                Open::Text => "text-end",
                Open::Reasoning => "reasoning-end",
            };
            chunk(out, json!({"type": name, "id": id}));
        }
    }
}

/// One `data:` frame.
fn chunk(out: &mut String, value: Value) {
    out.push_str("data: ");
    out.push_str(&wire::to_string(&value));
    out.push_str("\n\n");
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{demo_run, Log};
    use super::*;

    fn chunks(log: &Log, run: &str) -> (Vec<Value>, String) {
        let mut r = UiMessageRenderer::new(run);
        let mut out = String::new();
        for e in &log.events {
            r.render(e, &mut out);
        }
        let values = out
            .split("\n\n")
            .filter_map(|f| f.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        (values, out)
    }

    #[test]
    fn a_run_becomes_one_message_in_the_logs_order() {
        let mut log = Log::new("t");
        demo_run(&mut log, "r1", "completed");
        let (c, out) = chunks(&log, "r1");
        let types: Vec<&str> = c.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "start",
                "start-step",
                "reasoning-start",
                "reasoning-delta",
                "reasoning-delta",
                "reasoning-end",
                "text-start",
                "text-delta",
                "text-delta",
                "text-end",
                "data-tasks",
                "tool-input-available",
                "data-agent",
                "tool-input-available",
                "tool-output-available",
                "data-agent",
                "tool-output-available",
                "text-start",
                "text-delta",
                "text-end",
                "finish-step",
                "finish",
            ]
        );
        assert!(out.ends_with("data: [DONE]\n\n"));
        // The sub-agent's text is its part's result, not the message's text.
        let text: String = c
            .iter()
            .filter(|v| v["type"] == "text-delta")
            .map(|v| v["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "On it.Done");
        assert_eq!(c[15]["data"]["status"], "completed");
        assert_eq!(c[15]["data"]["result"], "Created.");
        assert_eq!(c[21]["finishReason"], "stop");
    }

    #[test]
    fn an_error_and_a_cancel_end_the_message_in_the_sdks_words() {
        let mut log = Log::new("t");
        demo_run(&mut log, "r1", "error");
        demo_run(&mut log, "r2", "cancelled");
        let (c1, _) = chunks(&log, "r1");
        assert!(c1
            .iter()
            .any(|v| v["type"] == "error" && v["errorText"] == "LLM provider 'demo' unavailable"));
        assert_eq!(c1.last().unwrap()["finishReason"], "error");
        let (c2, _) = chunks(&log, "r2");
        let n = c2.len();
        assert_eq!(c2[n - 3]["type"], "abort");
        // Another run's events are not this message's.
        assert_eq!(c2.iter().filter(|v| v["type"] == "start").count(), 1);
    }
}
