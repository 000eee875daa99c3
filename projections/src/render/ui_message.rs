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
//! - an approval (a confirmation request asking to approve a tool call): the SDK's
//!   `tool-approval-request` on that tool call (approval id = the request id), and its answer a
//!   `tool-approval-response`; a denied call's error is `tool-output-denied`. An approval not
//!   answered yet ends the stream there (`finish` with `tool-calls`), as the SDK expects of a
//!   server waiting for the user; the answer comes back through `POST /api/chat`, whose stream
//!   continues the same message ([`UiMessageRenderer::after`]);
//! - any other confirmation request (questions, text, plan review): a `data-confirmation` part
//!   (id = its request id, data = the request). Not answered yet, it ends the stream as an
//!   approval does; its answer, from `POST /api/chat` or any other route, sends the part again
//!   with `answer: {approved, userInput?, answers?}` added;
//! - an `error` event: an `error` chunk; a cancelled run: `abort`; then `finish-step`, `finish`
//!   and `[DONE]`.
//!
//! Pure and deterministic, like the other renderers: a resumed client gets the whole message
//! again from the run's first event (the SDK's `resumeStreamIsReplay`).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{json, Value};
use threadstream_domain::event::{InputType, RunStatus};
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
    /// Approvals asked on a tool call: request id → tool call id.
    approvals: HashMap<String, String>,
    /// Tool calls whose approval was denied.
    denied: HashSet<String>,
    /// The other confirmation requests (questions, text, plan review), as sent: request id →
    /// the part's data.
    confirmations: HashMap<String, Value>,
    /// Requests answered in the log when the stream began (an approval among them does not
    /// end the stream).
    answered: HashSet<String>,
    /// Events up to this id are folded but not sent (a continuation of a message the client
    /// holds up to there).
    after: i64,
    /// A continuation sent its `start` already.
    continued: bool,
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
            approvals: HashMap::new(),
            denied: HashSet::new(),
            confirmations: HashMap::new(),
            answered: HashSet::new(),
            after: 0,
            continued: false,
            finished: false,
        }
    }

    /// The confirmation requests answered in the log before the stream began.
    pub fn answered(mut self, requests: HashSet<String>) -> Self {
        self.answered = requests;
        self
    }

    /// A continuation of the message as the client holds it through event `id`: the events up
    /// to it are folded silently, then `start` (the same message id) and the rest.
    pub fn after(mut self, id: i64) -> Self {
        self.after = id;
        self
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
        if e.is_compacted() && e.first_id() <= self.after && self.after < e.id {
            // Compacted text across the resume point: what the client holds, then the rest.
            let held = e.compacted_part(0, self.after);
            let rest = e.compacted_part(self.after, i64::MAX);
            for part in held.iter().chain(rest.iter()) {
                self.render(part, out);
            }
            return;
        }
        if e.id <= self.after {
            self.render_event(e, &mut String::new());
            // A message the client holds ends nowhere: the continuation goes on after it.
            self.finished = false;
            return;
        }
        if self.after > 0 && !self.continued {
            self.continued = true;
            chunk(
                out,
                json!({"type": "start", "messageId": format!("msg-{}", self.run_id)}),
            );
        }
        self.render_event(e, out);
    }

    fn render_event(&mut self, e: &StoredEvent, out: &mut String) {
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
            EventBody::ToolError(r) if self.denied.contains(&r.tool_call_id) => {
                self.close(out);
                chunk(
                    out,
                    json!({"type": "tool-output-denied", "toolCallId": r.tool_call_id}),
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
            EventBody::ConfirmationRequest(c)
                if matches!(c.input_type, None | Some(InputType::Approval))
                    && self.tools.contains_key(&c.tool_call_id) =>
            {
                self.close(out);
                chunk(
                    out,
                    json!({"type": "tool-approval-request", "approvalId": c.request_id, "toolCallId": c.tool_call_id, "reason": c.message}),
                );
                self.approvals
                    .insert(c.request_id.clone(), c.tool_call_id.clone());
                if !self.answered.contains(&c.request_id) {
                    // The run waits for the user: so does this message.
                    chunk(out, json!({"type": "finish-step"}));
                    chunk(out, json!({"type": "finish", "finishReason": "tool-calls"}));
                    out.push_str("data: [DONE]\n\n");
                    self.finished = true;
                }
            }
            EventBody::ConfirmationAnswered(a) if self.approvals.contains_key(&a.request_id) => {
                if !a.approved {
                    self.denied.insert(self.approvals[&a.request_id].clone());
                }
                chunk(
                    out,
                    json!({"type": "tool-approval-response", "approvalId": a.request_id, "approved": a.approved}),
                );
            }
            EventBody::ConfirmationAnswered(a)
                if self.confirmations.contains_key(&a.request_id) =>
            {
                let mut data = self.confirmations[&a.request_id].clone();
                let mut answer = json!({"approved": a.approved});
                if let Some(text) = &a.user_input {
                    answer["userInput"] = json!(text);
                }
                if let Some(answers) = &a.answers {
                    answer["answers"] = answers.clone();
                }
                data["answer"] = answer;
                self.close(out);
                chunk(
                    out,
                    json!({"type": "data-confirmation", "id": a.request_id, "data": data}),
                );
            }
            EventBody::ConfirmationRequest(c) => {
                self.close(out);
                let data = json!(*c);
                chunk(
                    out,
                    json!({"type": "data-confirmation", "id": c.request_id, "data": data}),
                );
                self.confirmations.insert(c.request_id.clone(), data);
                if !self.answered.contains(&c.request_id) {
                    // The run waits for the user's answer: so does this message.
                    chunk(out, json!({"type": "finish-step"}));
                    chunk(out, json!({"type": "finish", "finishReason": "tool-calls"}));
                    out.push_str("data: [DONE]\n\n");
                    self.finished = true;
                }
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

    /// The `data:` lines `r` sends for the whole log, `[DONE]` included.
    fn data_lines(r: &mut UiMessageRenderer, log: &Log) -> Vec<String> {
        let mut out = String::new();
        for e in &log.events {
            r.render(e, &mut out);
        }
        out.split("\n\n")
            .filter_map(|f| f.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }

    /// The chunks of `run` (without `[DONE]`) and the stream's text.
    fn chunks(log: &Log, run: &str) -> (Vec<Value>, String) {
        let lines = data_lines(&mut UiMessageRenderer::new(run), log);
        let out = lines.iter().map(|d| format!("data: {d}\n\n")).collect();
        let values = lines
            .iter()
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        (values, out)
    }

    /// The chunks `r` sends for `events`, each run of deltas of one part merged into one.
    fn merged_chunks(mut r: UiMessageRenderer, events: &[StoredEvent]) -> Vec<Value> {
        let mut out = String::new();
        for e in events {
            r.render(e, &mut out);
        }
        let mut merged: Vec<Value> = Vec::new();
        for d in out.split("\n\n").filter_map(|f| f.strip_prefix("data: ")) {
            if d == "[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_str(d).unwrap();
            let is_delta = |v: &Value| v["type"] == "text-delta" || v["type"] == "reasoning-delta";
            match merged.last_mut() {
                Some(last) if is_delta(&v) && is_delta(last) && last["id"] == v["id"] => {
                    let text = format!(
                        "{}{}",
                        last["delta"].as_str().unwrap(),
                        v["delta"].as_str().unwrap()
                    );
                    last["delta"] = Value::String(text);
                }
                _ => merged.push(v),
            }
        }
        merged
    }

    #[test]
    fn a_continuation_from_inside_compacted_text_sends_the_rest_of_it() {
        let mut log = Log::new("t");
        demo_run(&mut log, "r1", "completed");
        let merges = threadstream_domain::compaction::plan(&log.events, "r1");
        assert!(!merges.is_empty());
        let deleted: std::collections::HashSet<i64> = merges
            .iter()
            .flat_map(|m| m.deleted().iter().copied())
            .collect();
        let compacted: Vec<StoredEvent> = log
            .events
            .iter()
            .filter(|e| !deleted.contains(&e.id))
            .map(|e| {
                merges
                    .iter()
                    .find(|m| m.row.id == e.id)
                    .map_or_else(|| e.clone(), |m| m.row.clone())
            })
            .collect();
        let mut inside = 0;
        for e in &log.events {
            inside += usize::from(deleted.contains(&e.id));
            let r = || UiMessageRenderer::new("r1").after(e.id);
            assert_eq!(
                merged_chunks(r(), &compacted),
                merged_chunks(r(), &log.events),
                "continued after {}",
                e.id
            );
        }
        assert!(inside > 0, "some cuts fall inside compacted text");
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

    /// A run that asks to approve a tool call: `request` (with the answer, then the rest, when
    /// `approved` is given).
    fn approval_run(log: &mut Log, approved: Option<bool>) {
        let o = "orch";
        log.push("r1", o, "run-start", json!({"messageId": "u1"}))
            .push("r1", o, "text-delta", json!({"text": "Deleting."}))
            .push("r1", o, "tool-call", json!({"toolCallId": "tc9", "toolName": "delete-workflow", "args": {"workflowId": "w1"}}))
            .push("r1", o, "confirmation-request", json!({"requestId": "cr1", "toolCallId": "tc9", "toolName": "delete-workflow", "args": {"workflowId": "w1"}, "severity": "destructive", "message": "Delete w1?", "inputType": "approval"}));
        let Some(approved) = approved else { return };
        log.push(
            "r1",
            o,
            "confirmation-answered",
            json!({"requestId": "cr1", "approved": approved}),
        );
        if approved {
            log.push(
                "r1",
                o,
                "tool-result",
                json!({"toolCallId": "tc9", "result": "deleted"}),
            );
        } else {
            log.push(
                "r1",
                o,
                "tool-error",
                json!({"toolCallId": "tc9", "error": "denied by the user"}),
            );
        }
        log.push("r1", o, "text-delta", json!({"text": "Done."}))
            .push("r1", o, "run-finish", json!({"status": "completed"}));
    }

    /// Each chunk's type, and `[DONE]` as itself.
    fn types_of(r: &mut UiMessageRenderer, log: &Log) -> Vec<String> {
        data_lines(r, log)
            .into_iter()
            .map(|d| match serde_json::from_str::<Value>(&d) {
                Ok(v) => v["type"].as_str().unwrap().to_string(),
                Err(_) => d,
            })
            .collect()
    }

    #[test]
    fn a_pending_approval_ends_the_message_and_its_answer_continues_it() {
        let mut log = Log::new("t");
        approval_run(&mut log, None);
        let paused = types_of(&mut UiMessageRenderer::new("r1"), &log);
        assert_eq!(
            paused[paused.len() - 4..],
            ["tool-approval-request", "finish-step", "finish", "[DONE]"]
        );

        let mut log = Log::new("t");
        approval_run(&mut log, Some(true));
        let answered: HashSet<String> = ["cr1".to_string()].into();
        // A replay after the answer goes through the approval.
        let whole = types_of(
            &mut UiMessageRenderer::new("r1").answered(answered.clone()),
            &log,
        );
        assert!(
            whole.contains(&"tool-approval-response".to_string()),
            "{whole:?}"
        );
        assert_eq!(whole.last().unwrap(), "[DONE]");
        // The continuation sent to the client that answered: from the answer on.
        let request_id = log.events[3].id;
        let cont = types_of(
            &mut UiMessageRenderer::new("r1")
                .answered(answered)
                .after(request_id),
            &log,
        );
        assert_eq!(
            cont,
            [
                "start",
                "tool-approval-response",
                "tool-output-available",
                "text-start",
                "text-delta",
                "text-end",
                "finish-step",
                "finish",
                "[DONE]"
            ]
        );
    }

    #[test]
    fn a_denied_approval_is_the_sdks_output_denied() {
        let mut log = Log::new("t");
        approval_run(&mut log, Some(false));
        let types = types_of(
            &mut UiMessageRenderer::new("r1").answered(["cr1".to_string()].into()),
            &log,
        );
        assert!(
            types.contains(&"tool-output-denied".to_string()),
            "{types:?}"
        );
        assert!(
            !types.contains(&"tool-output-error".to_string()),
            "{types:?}"
        );
    }

    #[test]
    fn a_pending_question_ends_the_message_and_its_answer_is_sent_on_its_part() {
        let o = "orch";
        let mut log = Log::new("t");
        log.push("r1", o, "run-start", json!({"messageId": "u1"}))
            .push("r1", o, "tool-call", json!({"toolCallId": "tc1", "toolName": "ask-user", "args": {}}))
            .push("r1", o, "confirmation-request", json!({"requestId": "cq", "toolCallId": "tc1", "toolName": "ask-user", "args": {}, "severity": "info", "message": "Which?", "inputType": "questions",
                "questions": [{"id": "q1", "question": "Which?", "type": "single", "options": ["a", "b"]}]}));
        let paused = types_of(&mut UiMessageRenderer::new("r1"), &log);
        assert_eq!(
            paused[paused.len() - 4..],
            ["data-confirmation", "finish-step", "finish", "[DONE]"]
        );
        let asked = log.events[2].id;
        log.push(
            "r1",
            o,
            "confirmation-answered",
            json!({"requestId": "cq", "approved": true, "answers": [{"questionId": "q1", "selectedOptions": ["b"]}]}),
        )
        .push("r1", o, "tool-result", json!({"toolCallId": "tc1", "result": "ok"}))
        .push("r1", o, "run-finish", json!({"status": "completed"}));
        let lines = data_lines(
            &mut UiMessageRenderer::new("r1")
                .answered(["cq".to_string()].into())
                .after(asked),
            &log,
        );
        let again: Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(again["type"], "data-confirmation");
        assert_eq!(again["id"], "cq");
        assert_eq!(again["data"]["questions"][0]["id"], "q1");
        assert_eq!(
            again["data"]["answer"],
            json!({"approved": true, "answers": [{"questionId": "q1", "selectedOptions": ["b"]}]})
        );
        assert_eq!(lines.last().unwrap(), "[DONE]");
    }
}
