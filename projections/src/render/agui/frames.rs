//! Stored events → AG-UI frames: what each event opens, streams and closes (the mapping is in
//! the module's documentation, `super`).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use threadstream_domain::event::{
    AgentCompleted, AgentSpawned, ErrorPayload, RunFinish, RunStatus, ToolCall, ToolError,
    ToolResult,
};
use threadstream_domain::{EventBody, StoredEvent};

use super::state::{Close, OpenMessage, OpenRun, Stream, ToolCallInfo};
use super::AgUiRenderer;
use crate::render::{result_text, Frame};

/// How long `toolAgentOutput.result_summary` may be, in characters.
const SUMMARY_CHARS: usize = 200;

impl AgUiRenderer {
    /// The frames of one stored event (none for internal events). The last frame carries the
    /// event's id.
    pub fn render(&mut self, event: &StoredEvent) -> Vec<Frame> {
        let mut out = Vec::new();
        if let Ok(decoded) = event.decode() {
            self.apply(event, decoded.body, &mut out);
        }
        let mut frames: Vec<Frame> = out.iter().map(Frame::data).collect();
        if let Some(last) = frames.last_mut() {
            last.id = Some(event.id.to_string());
        }
        frames
    }

    fn apply(&mut self, e: &StoredEvent, body: EventBody, out: &mut Vec<Value>) {
        let ts = e.ts;
        let agent = e.agent_id.as_str();
        match body {
            EventBody::RunStart(_) => {
                if self.run.is_some() {
                    self.close_run(ts, Close::Partial, None, out);
                }
                self.run = Some(OpenRun::new(&e.run_id, false));
                out.push(self.frame(
                    "RUN_STARTED",
                    &e.run_id,
                    ts,
                    json!({"threadId": self.thread_id, "runId": e.run_id}),
                ));
                if let Some((id, text)) = self.pending_user.take() {
                    self.user_message_frames(&e.run_id, &id, &text, ts, out);
                }
            }
            EventBody::UserMessage(m) => {
                // Stored just before its `run-start`: streamed right after `RUN_STARTED`.
                self.messages
                    .push(json!({"id": m.message_id, "role": "user", "content": m.text}));
                if self.echo_user_messages {
                    self.pending_user = Some((m.message_id, m.text));
                }
            }
            EventBody::TextDelta(d) => self.delta(e, Stream::Text, &d.text, out),
            EventBody::ReasoningDelta(d) => self.delta(e, Stream::Reasoning, &d.text, out),
            EventBody::ToolCall(c) => {
                let run = self.enter(e, out);
                self.close_agent_messages(agent, ts, out);
                self.tool_call(&run, agent, &c, ts, out);
            }
            EventBody::ToolResult(r) => {
                let run = self.enter(e, out);
                self.close_agent_messages(agent, ts, out);
                self.tool_result(&run, &r, None, ts, out);
            }
            EventBody::ToolError(err) => {
                let run = self.enter(e, out);
                self.close_agent_messages(agent, ts, out);
                let ToolError {
                    tool_call_id,
                    error,
                } = err;
                let as_result = ToolResult {
                    tool_call_id,
                    result: Value::String(error.clone()),
                };
                self.tool_result(&run, &as_result, Some(&error), ts, out);
            }
            EventBody::AgentSpawned(s) => self.spawned(e, &s, out),
            EventBody::AgentCompleted(c) => self.completed(e, &c, out),
            EventBody::ConfirmationRequest(c) => {
                let run = self.enter(e, out);
                self.close_agent_messages(agent, ts, out);
                let value = serde_json::to_value(&*c).expect("payload serializes");
                out.push(self.custom(&run, agent, ts, "confirmation-request", value));
            }
            EventBody::FilesystemRequest(f) => {
                let run = self.enter(e, out);
                let value = serde_json::to_value(&f).expect("payload serializes");
                out.push(self.custom(&run, agent, ts, "filesystem-request", value));
            }
            EventBody::TasksUpdate(t) => {
                let run = self.enter(e, out);
                self.state.insert(
                    "tasks".into(),
                    serde_json::to_value(&t.tasks.tasks).expect("tasks serialize"),
                );
                let value = serde_json::to_value(&t).expect("payload serializes");
                out.push(self.custom(&run, agent, ts, "tasks-update", value));
                out.push(self.state_snapshot(&run, ts));
            }
            EventBody::Status(s) => {
                if s.message.is_empty() {
                    self.state.remove("status");
                } else {
                    self.state.insert("status".into(), Value::String(s.message));
                }
                if let Some(run) = self.open_run().map(str::to_string) {
                    out.push(self.state_snapshot(&run, ts));
                }
            }
            EventBody::ThreadTitleUpdated(t) => {
                self.state.insert("title".into(), Value::String(t.title));
                if let Some(run) = self.open_run().map(str::to_string) {
                    out.push(self.state_snapshot(&run, ts));
                }
            }
            EventBody::Error(err) => {
                let run = self.enter(e, out);
                self.close_agent_messages(agent, ts, out);
                self.last_error
                    .insert(e.run_id.clone(), err.content.clone());
                let ErrorPayload { .. } = &err;
                let value = serde_json::to_value(&err).expect("payload serializes");
                out.push(self.custom(&run, agent, ts, "error", value));
            }
            EventBody::LlmUsage(u) => {
                if let Some(r) = self.run.as_mut() {
                    let slot = r.usage.entry(u.model).or_default();
                    slot.0 += u.input_tokens;
                    slot.1 += u.output_tokens;
                }
            }
            EventBody::RunFinish(f) => self.finished(e, &f, out),
            _ => {}
        }
    }

    fn user_message_frames(&self, run: &str, id: &str, text: &str, ts: i64, out: &mut Vec<Value>) {
        out.push(self.frame(
            "TEXT_MESSAGE_START",
            run,
            ts,
            json!({"messageId": id, "role": "user"}),
        ));
        if !text.is_empty() {
            out.push(self.frame(
                "TEXT_MESSAGE_CONTENT",
                run,
                ts,
                json!({"messageId": id, "delta": text}),
            ));
        }
        out.push(self.frame(
            "TEXT_MESSAGE_END",
            run,
            ts,
            json!({"messageId": id, "workerAgentOutput": {"status": "success", "answer": text}}),
        ));
    }

    /// A text or reasoning delta: opens the agent's message of that kind (closing the other
    /// kind) on its first delta, then streams the content.
    fn delta(&mut self, e: &StoredEvent, kind: Stream, text: &str, out: &mut Vec<Value>) {
        if text.is_empty() {
            return;
        }
        let (ts, agent) = (e.ts, e.agent_id.as_str());
        let run = self.enter(e, out);
        match kind {
            Stream::Text => self.close_reasoning(agent, ts, out),
            Stream::Reasoning => self.close_text(agent, ts, Close::Success, out),
        }
        let sub = self.sub_tag(agent).map(str::to_string);
        let open = self.open_messages(kind).get(agent).map(|m| m.id.clone());
        let id = match open {
            Some(id) => id,
            None => {
                let id = format!("{}-{}", kind.id_prefix(), e.id);
                self.open_frames(kind, &run, ts, sub.as_deref(), &id, out);
                self.open_messages(kind).insert(
                    agent.to_string(),
                    OpenMessage {
                        id: id.clone(),
                        text: String::new(),
                    },
                );
                id
            }
        };
        out.push(self.attributed(
            kind.content_type(),
            &run,
            ts,
            sub.as_deref(),
            json!({"messageId": id, "delta": text}),
        ));
        if let Some(m) = self.open_messages(kind).get_mut(agent) {
            m.text.push_str(text);
        }
    }

    /// The open messages of a kind in the open run.
    fn open_messages(&mut self, kind: Stream) -> &mut BTreeMap<String, OpenMessage> {
        let run = self.run.as_mut().expect("open run");
        match kind {
            Stream::Text => &mut run.text,
            Stream::Reasoning => &mut run.reasoning,
        }
    }

    /// The events that open a text or reasoning message.
    pub(super) fn open_frames(
        &self,
        kind: Stream,
        run: &str,
        ts: i64,
        sub: Option<&str>,
        id: &str,
        out: &mut Vec<Value>,
    ) {
        match kind {
            Stream::Text => out.push(self.attributed(
                "TEXT_MESSAGE_START",
                run,
                ts,
                sub,
                json!({"messageId": id, "role": "assistant"}),
            )),
            Stream::Reasoning => {
                out.push(self.attributed(
                    "REASONING_START",
                    run,
                    ts,
                    sub,
                    json!({"messageId": id}),
                ));
                out.push(self.attributed(
                    "REASONING_MESSAGE_START",
                    run,
                    ts,
                    sub,
                    json!({"messageId": id, "role": "reasoning"}),
                ));
            }
        }
    }

    /// Opens a continuation run when none is open, and re-starts a suspended sub-agent.
    /// Returns the open run's id.
    fn enter(&mut self, e: &StoredEvent, out: &mut Vec<Value>) -> String {
        let run = self.ensure_run(e, out);
        if self.subagents.contains_key(&e.agent_id)
            && !self
                .run
                .as_ref()
                .is_some_and(|r| r.subagents.contains(&e.agent_id))
        {
            out.push(self.subagent_started(&run, &e.agent_id, e.ts));
            self.run
                .as_mut()
                .expect("open run")
                .subagents
                .insert(e.agent_id.clone());
        }
        run
    }

    fn ensure_run(&mut self, e: &StoredEvent, out: &mut Vec<Value>) -> String {
        if let Some(r) = &self.run {
            return r.run_id.clone();
        }
        self.run = Some(OpenRun::new(&e.run_id, true));
        out.push(self.frame(
            "RUN_STARTED",
            &e.run_id,
            e.ts,
            json!({"threadId": self.thread_id, "runId": e.run_id}),
        ));
        e.run_id.clone()
    }

    fn tool_call(&mut self, run: &str, agent: &str, c: &ToolCall, ts: i64, out: &mut Vec<Value>) {
        let owner = self.sub_tag(agent).map(str::to_string);
        let args = Value::Object(c.args.clone()).to_string();
        self.tool_calls.insert(
            c.tool_call_id.clone(),
            ToolCallInfo {
                name: c.tool_name.clone(),
                args: args.clone(),
                owner: owner.clone(),
            },
        );
        let step = format!("{}#{}", c.tool_name, c.tool_call_id);
        out.push(self.attributed(
            "STEP_STARTED",
            run,
            ts,
            owner.as_deref(),
            json!({"stepName": step}),
        ));
        let r = self.run.as_mut().expect("open run");
        r.steps
            .insert(c.tool_call_id.clone(), (step, owner.clone()));
        r.calls.insert(c.tool_call_id.clone());
        self.tool_call_frames(run, &c.tool_call_id, ts, out);
        self.remember(
            json!({
                "id": call_message_id(&c.tool_call_id),
                "role": "assistant",
                "toolCalls": [{"id": c.tool_call_id, "type": "function",
                               "function": {"name": c.tool_name, "arguments": args}}],
            }),
            owner.as_deref(),
        );
        self.pending_calls.insert(c.tool_call_id.clone());
    }

    /// `TOOL_CALL_START/ARGS/END` of a known call.
    pub(super) fn tool_call_frames(&self, run: &str, call_id: &str, ts: i64, out: &mut Vec<Value>) {
        let Some(info) = self.tool_calls.get(call_id) else {
            return;
        };
        let owner = info.owner.as_deref();
        out.push(self.attributed(
            "TOOL_CALL_START",
            run,
            ts,
            owner,
            json!({"toolCallId": call_id, "toolCallName": info.name}),
        ));
        out.push(self.attributed(
            "TOOL_CALL_ARGS",
            run,
            ts,
            owner,
            json!({"toolCallId": call_id, "delta": info.args}),
        ));
        out.push(self.attributed(
            "TOOL_CALL_END",
            run,
            ts,
            owner,
            json!({"toolCallId": call_id}),
        ));
    }

    fn tool_result(
        &mut self,
        run: &str,
        r: &ToolResult,
        error: Option<&str>,
        ts: i64,
        out: &mut Vec<Value>,
    ) {
        let Some(info) = self.tool_calls.get(&r.tool_call_id).cloned() else {
            return; // a result for a call we never saw: nothing AG-UI could attach it to
        };
        // A result in another run than its call (a background task's): re-open the call first.
        if !self
            .run
            .as_ref()
            .is_some_and(|o| o.calls.contains(&r.tool_call_id))
        {
            self.tool_call_frames(run, &r.tool_call_id, ts, out);
            self.run
                .as_mut()
                .expect("open run")
                .calls
                .insert(r.tool_call_id.clone());
        }
        let content = result_text(&r.result);
        let summary: String = content.chars().take(SUMMARY_CHARS).collect();
        let args: Value = serde_json::from_str(&info.args).unwrap_or(Value::Null);
        let mut output = json!({
            "tool_name": info.name,
            "tool_call_id": r.tool_call_id,
            "tool_call_args": args,
            "status": if error.is_some() { "failure" } else { "success" },
            "result_summary": summary,
        });
        if let Some(err) = error {
            output["error"] = json!({"code": "tool_error", "message": err});
        }
        let message_id = format!("{}-result", r.tool_call_id);
        out.push(self.attributed(
            "TOOL_CALL_RESULT",
            run,
            ts,
            info.owner.as_deref(),
            json!({"messageId": message_id, "toolCallId": r.tool_call_id, "content": content,
                   "role": "tool", "toolAgentOutput": output}),
        ));
        let step = self
            .run
            .as_mut()
            .expect("open run")
            .steps
            .remove(&r.tool_call_id);
        if let Some((step, owner)) = step {
            out.push(self.attributed(
                "STEP_FINISHED",
                run,
                ts,
                owner.as_deref(),
                json!({"stepName": step}),
            ));
        }
        let mut message = json!({"id": message_id, "role": "tool", "toolCallId": r.tool_call_id,
                                 "content": content});
        if let Some(err) = error {
            message["error"] = json!(err);
        }
        self.remember(message, info.owner.as_deref());
        self.pending_calls.remove(&r.tool_call_id);
        self.finish_idle_continuation(ts, out);
    }

    fn spawned(&mut self, e: &StoredEvent, s: &AgentSpawned, out: &mut Vec<Value>) {
        let run = self.ensure_run(e, out);
        let description = s.goal.clone().or_else(|| s.title.clone());
        self.subagents
            .insert(e.agent_id.clone(), (s.role.clone(), description));
        let r = self.run.as_mut().expect("open run");
        if r.subagents.insert(e.agent_id.clone()) {
            out.push(self.subagent_started(&run, &e.agent_id, e.ts));
        }
    }

    fn completed(&mut self, e: &StoredEvent, c: &AgentCompleted, out: &mut Vec<Value>) {
        if !self.subagents.contains_key(&e.agent_id) {
            return; // the orchestrator's own completion: its run-finish says it all
        }
        let run = self.enter(e, out);
        self.close_agent_messages(&e.agent_id, e.ts, out);
        self.close_agent_steps(&run, &e.agent_id, e.ts, out);
        let frame = match &c.error {
            Some(err) => self.frame(
                "SUBAGENT_ERROR",
                &run,
                e.ts,
                json!({"subagentRunId": e.agent_id, "message": err}),
            ),
            None => self.frame(
                "SUBAGENT_FINISHED",
                &run,
                e.ts,
                json!({"subagentRunId": e.agent_id, "result": c.result,
                       "outcome": {"type": "success"}}),
            ),
        };
        out.push(frame);
        self.run
            .as_mut()
            .expect("open run")
            .subagents
            .remove(&e.agent_id);
        self.subagents.remove(&e.agent_id);
        self.finish_idle_continuation(e.ts, out);
    }

    fn finished(&mut self, e: &StoredEvent, f: &RunFinish, out: &mut Vec<Value>) {
        self.ensure_run(e, out);
        let close = match f.status {
            RunStatus::Completed => Close::Success,
            RunStatus::Cancelled => Close::Partial,
            RunStatus::Error => Close::Failed,
        };
        let error = (f.status == RunStatus::Error).then(|| {
            self.last_error
                .remove(&e.run_id)
                .or_else(|| f.reason.clone())
                .unwrap_or_else(|| "the run failed".into())
        });
        let cancelled = f.status == RunStatus::Cancelled;
        self.close_run_with(e.ts, close, error, cancelled, f.reason.as_deref(), out);
    }

    /// A continuation run ends when nothing is open in it any more.
    fn finish_idle_continuation(&mut self, ts: i64, out: &mut Vec<Value>) {
        if self
            .run
            .as_ref()
            .is_some_and(|r| r.continuation && r.is_idle())
        {
            self.close_run(ts, Close::Success, None, out);
        }
    }

    fn close_run(&mut self, ts: i64, close: Close, error: Option<String>, out: &mut Vec<Value>) {
        self.close_run_with(ts, close, error, false, None, out);
    }

    /// Closes everything open, suspends active sub-agents and ends the run.
    fn close_run_with(
        &mut self,
        ts: i64,
        close: Close,
        error: Option<String>,
        cancelled: bool,
        reason: Option<&str>,
        out: &mut Vec<Value>,
    ) {
        let Some(run) = self.run.clone() else {
            return;
        };
        for agent in run.text.keys().chain(run.reasoning.keys()) {
            self.close_text(agent, ts, close, out);
            self.close_reasoning(agent, ts, out);
        }
        for (step, owner) in run.steps.values() {
            out.push(self.attributed(
                "STEP_FINISHED",
                &run.run_id,
                ts,
                owner.as_deref(),
                json!({"stepName": step}),
            ));
        }
        for agent in &run.subagents {
            out.push(self.frame(
                "SUBAGENT_FINISHED",
                &run.run_id,
                ts,
                json!({"subagentRunId": agent, "outcome": {"type": "suspended"}}),
            ));
        }
        let usage: Vec<Value> = run
            .usage
            .iter()
            .map(|(model, (i, o))| {
                json!({"model": model, "inputTokens": i, "outputTokens": o, "totalTokens": i + o})
            })
            .collect();
        let mut frame = match error {
            Some(message) => {
                let mut f = self.frame("RUN_ERROR", &run.run_id, ts, json!({"message": message}));
                if let Some(r) = reason {
                    f["code"] = json!(r);
                }
                f
            }
            None => {
                let mut f = self.frame(
                    "RUN_FINISHED",
                    &run.run_id,
                    ts,
                    json!({"threadId": self.thread_id, "runId": run.run_id}),
                );
                if cancelled {
                    f["outcome"] = json!({"type": "cancelled"});
                }
                f
            }
        };
        if !usage.is_empty() {
            frame["usage"] = Value::Array(usage);
        }
        out.push(frame);
        self.run = None;
    }

    fn close_agent_messages(&mut self, agent: &str, ts: i64, out: &mut Vec<Value>) {
        self.close_text(agent, ts, Close::Success, out);
        self.close_reasoning(agent, ts, out);
    }

    fn close_agent_steps(&mut self, run: &str, agent: &str, ts: i64, out: &mut Vec<Value>) {
        let Some(r) = self.run.as_mut() else {
            return;
        };
        let mine: Vec<String> = r
            .steps
            .iter()
            .filter(|(_, (_, owner))| owner.as_deref() == Some(agent))
            .map(|(id, _)| id.clone())
            .collect();
        for id in mine {
            if let Some((step, owner)) = self.run.as_mut().expect("open run").steps.remove(&id) {
                out.push(self.attributed(
                    "STEP_FINISHED",
                    run,
                    ts,
                    owner.as_deref(),
                    json!({"stepName": step}),
                ));
            }
        }
    }

    fn close_text(&mut self, agent: &str, ts: i64, close: Close, out: &mut Vec<Value>) {
        self.close_message(Stream::Text, agent, ts, close, out);
    }

    fn close_reasoning(&mut self, agent: &str, ts: i64, out: &mut Vec<Value>) {
        self.close_message(Stream::Reasoning, agent, ts, Close::Success, out);
    }

    /// Closes an agent's open message of `kind` and keeps it for `MESSAGES_SNAPSHOT`.
    fn close_message(
        &mut self,
        kind: Stream,
        agent: &str,
        ts: i64,
        close: Close,
        out: &mut Vec<Value>,
    ) {
        let Some(run) = self.run.as_ref().map(|r| r.run_id.clone()) else {
            return;
        };
        let Some(m) = self.open_messages(kind).remove(agent) else {
            return;
        };
        let sub = self.sub_tag(agent).map(str::to_string);
        let role = match kind {
            Stream::Text => {
                out.push(self.attributed(
                    "TEXT_MESSAGE_END",
                    &run,
                    ts,
                    sub.as_deref(),
                    json!({"messageId": m.id,
                           "workerAgentOutput": {"status": close.status(), "answer": m.text}}),
                ));
                "assistant"
            }
            Stream::Reasoning => {
                for ty in ["REASONING_MESSAGE_END", "REASONING_END"] {
                    out.push(self.attributed(
                        ty,
                        &run,
                        ts,
                        sub.as_deref(),
                        json!({"messageId": m.id}),
                    ));
                }
                "reasoning"
            }
        };
        self.remember(
            json!({"id": m.id, "role": role, "content": m.text}),
            sub.as_deref(),
        );
    }

    /// Keeps a settled message for `MESSAGES_SNAPSHOT`, attributed to its sub-agent.
    fn remember(&mut self, mut message: Value, owner: Option<&str>) {
        if let Some(o) = owner {
            message["subagentRunId"] = json!(o);
        }
        self.messages.push(message);
    }

    /// The sub-agent an agent's events are attributed to: itself, when it is a sub-agent.
    pub(super) fn sub_tag<'a>(&self, agent: &'a str) -> Option<&'a str> {
        self.subagents.contains_key(agent).then_some(agent)
    }

    pub(super) fn subagent_started(&self, run: &str, agent: &str, ts: i64) -> Value {
        let (name, description) = self
            .subagents
            .get(agent)
            .cloned()
            .unwrap_or_else(|| (agent.to_string(), None));
        let mut v = self.frame(
            "SUBAGENT_STARTED",
            run,
            ts,
            json!({"subagentRunId": agent, "name": name}),
        );
        if let Some(d) = description {
            v["description"] = json!(d);
        }
        v
    }

    fn state_snapshot(&self, run: &str, ts: i64) -> Value {
        self.frame(
            "STATE_SNAPSHOT",
            run,
            ts,
            json!({"snapshot": Value::Object(self.state.clone())}),
        )
    }

    fn custom(&self, run: &str, agent: &str, ts: i64, name: &str, value: Value) -> Value {
        self.attributed(
            "CUSTOM",
            run,
            ts,
            self.sub_tag(agent),
            json!({"name": format!("threadstream.{name}"), "value": value}),
        )
    }

    pub(super) fn attributed(
        &self,
        ty: &str,
        run: &str,
        ts: i64,
        sub: Option<&str>,
        fields: Value,
    ) -> Value {
        let mut v = self.frame(ty, run, ts, fields);
        if let Some(s) = sub {
            v["subagentRunId"] = json!(s);
        }
        v
    }

    /// `{type, threadId, runId, …fields, timestamp}`: AG-UI's envelope on every event.
    pub(super) fn frame(&self, ty: &str, run: &str, ts: i64, fields: Value) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), json!(ty));
        m.insert("threadId".into(), json!(self.thread_id));
        m.insert("runId".into(), json!(run));
        if let Value::Object(f) = fields {
            m.extend(f);
        }
        m.insert("timestamp".into(), json!(ts));
        Value::Object(m)
    }
}

/// The id of the assistant message that carries a tool call in a `MESSAGES_SNAPSHOT`.
pub(super) fn call_message_id(tool_call_id: &str) -> String {
    format!("{tool_call_id}-call")
}
