//! AG-UI 1.0 rendering (`@ag-ui/core` `EventSchemas`, checked by `@ag-ui/client`
//! `verifyEvents` and `ag-ui-validate`): the thread's stored events → AG-UI events.
//!
//! The mapping (also the table in `docs/protocol.md`):
//! - `run-start` → `RUN_STARTED`; `run-finish` → `RUN_FINISHED` (outcome `cancelled` when
//!   cancelled) or `RUN_ERROR` (status `error`, with the run's last `error` content), after
//!   closing everything still open, as AG-UI requires.
//! - `user-message` → `TEXT_MESSAGE_START/CONTENT/END` with role `user` (optional, see
//!   [`AgUiRenderer::new`]).
//! - `text-delta` → `TEXT_MESSAGE_*`: one message per uninterrupted run of an agent's text;
//!   `TEXT_MESSAGE_END` carries seed 003's `workerAgentOutput`.
//! - `reasoning-delta` → `REASONING_START`, `REASONING_MESSAGE_*`, `REASONING_END`.
//! - `tool-call` → `STEP_STARTED` + `TOOL_CALL_START/ARGS/END`; `tool-result` / `tool-error` →
//!   `TOOL_CALL_RESULT` (with seed 003's `toolAgentOutput`) + `STEP_FINISHED`.
//! - `agent-spawned` → `SUBAGENT_STARTED`; `agent-completed` → `SUBAGENT_FINISHED` or
//!   `SUBAGENT_ERROR`; every event of a sub-agent carries `subagentRunId` (its agent id).
//! - `tasks-update`, `status`, `thread-title-updated` → `STATE_SNAPSHOT` of
//!   `{tasks?, status?, title?}` (`tasks-update` also as `CUSTOM`);
//!   `confirmation-request`, `filesystem-request`, `error` → `CUSTOM` named `threadstream.<type>`.
//! - internal events (`llm-usage` → the run's `usage`, the rest) → nothing.
//!
//! AG-UI allows one open run per stream and nothing after `RUN_FINISHED` but a new
//! `RUN_STARTED`. Background sub-agents may go on after their run finished: at `run-finish`
//! their open sub-agents end with outcome `suspended`; their later events open a continuation
//! run with the same `runId` (or land in the run open at the time) that re-starts the sub-agent,
//! and a continuation run finishes as soon as nothing is open in it.
//!
//! Resume: AG-UI has none, so [`AgUiRenderer::join_prelude`] gives what a client joining
//! mid-stream needs: `RUN_STARTED` with the open run's ids, `MESSAGES_SNAPSHOT` of the settled
//! messages, `STATE_SNAPSHOT`, and re-opened starts (sub-agents, steps, pending tool calls,
//! text and reasoning with their content so far).
//!
//! Frames carry an `id:` only on the last frame rendered from a stored event (the event's id),
//! so a client cut between two frames of one event resumes before it, never after.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{json, Map, Value};
use threadstream_domain::event::{
    AgentCompleted, AgentSpawned, ErrorPayload, RunFinish, RunStatus, ToolCall, ToolError,
    ToolResult,
};
use threadstream_domain::{EventBody, StoredEvent};

use super::{result_text, Frame};

/// How long `toolAgentOutput.result_summary` may be, in characters.
const SUMMARY_CHARS: usize = 200;

/// The AG-UI renderer of one thread. Feed it the thread's events in log order.
#[derive(Debug, Clone)]
pub struct AgUiRenderer {
    thread_id: String,
    echo_user_messages: bool,
    /// The AG-UI run open on the stream.
    run: Option<OpenRun>,
    /// Every sub-agent ever spawned: agent id → (name, description).
    subagents: HashMap<String, (String, Option<String>)>,
    /// Every tool call seen: id → (name, args JSON text, owner sub-agent).
    tool_calls: HashMap<String, ToolCallInfo>,
    /// Settled messages, for `MESSAGES_SNAPSHOT`.
    messages: Vec<Value>,
    /// Tool calls without a result yet (their messages stay out of a snapshot: a join prelude
    /// re-opens them instead).
    pending_calls: BTreeSet<String>,
    /// `{tasks?, status?, title?}`.
    state: Map<String, Value>,
    /// The last `error` content per run, for `RUN_ERROR.message`.
    last_error: HashMap<String, String>,
    /// The user's message (id, text), stored before its `run-start`, to stream after it.
    pending_user: Option<(String, String)>,
}

#[derive(Debug, Clone)]
struct ToolCallInfo {
    name: String,
    args: String,
    owner: Option<String>,
}

#[derive(Debug, Clone)]
struct OpenRun {
    run_id: String,
    /// Opened by a late event of a finished run (not by `run-start`): it finishes as soon as
    /// nothing is open in it.
    continuation: bool,
    /// Open text per agent.
    text: BTreeMap<String, OpenMessage>,
    /// Open reasoning per agent.
    reasoning: BTreeMap<String, OpenMessage>,
    /// Open steps: tool call id → (step name, owner).
    steps: BTreeMap<String, (String, Option<String>)>,
    /// Tool calls started in this run.
    calls: BTreeSet<String>,
    /// Active sub-agents.
    subagents: BTreeSet<String>,
    /// Tokens by model.
    usage: BTreeMap<String, (u64, u64)>,
}

#[derive(Debug, Clone)]
struct OpenMessage {
    id: String,
    text: String,
}

impl OpenRun {
    fn new(run_id: &str, continuation: bool) -> Self {
        OpenRun {
            run_id: run_id.to_string(),
            continuation,
            text: BTreeMap::new(),
            reasoning: BTreeMap::new(),
            steps: BTreeMap::new(),
            calls: BTreeSet::new(),
            subagents: BTreeSet::new(),
            usage: BTreeMap::new(),
        }
    }

    fn is_idle(&self) -> bool {
        self.text.is_empty()
            && self.reasoning.is_empty()
            && self.steps.is_empty()
            && self.subagents.is_empty()
    }
}

/// How a run's open messages are closed.
#[derive(Clone, Copy)]
enum Close {
    Success,
    Partial,
    Failed,
}

impl Close {
    fn status(self) -> &'static str {
        match self {
            Close::Success => "success",
            Close::Partial => "partial_success",
            Close::Failed => "failed",
        }
    }
}

/// The two streamed message kinds.
#[derive(Clone, Copy)]
enum Stream {
    Text,
    Reasoning,
}

impl Stream {
    fn id_prefix(self) -> &'static str {
        match self {
            Stream::Text => "msg",
            Stream::Reasoning => "rsn",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Stream::Text => "TEXT_MESSAGE_CONTENT",
            Stream::Reasoning => "REASONING_MESSAGE_CONTENT",
        }
    }
}

impl AgUiRenderer {
    /// A renderer for `thread_id`. `echo_user_messages`: render the user's messages as
    /// `TEXT_MESSAGE_*` with role `user` (a client that sent the message itself, like
    /// `HttpAgent`, does not want it echoed).
    pub fn new(thread_id: &str, echo_user_messages: bool) -> Self {
        AgUiRenderer {
            thread_id: thread_id.to_string(),
            echo_user_messages,
            run: None,
            subagents: HashMap::new(),
            tool_calls: HashMap::new(),
            messages: Vec::new(),
            pending_calls: BTreeSet::new(),
            state: Map::new(),
            last_error: HashMap::new(),
            pending_user: None,
        }
    }

    /// The run open on the stream, if any.
    pub fn open_run(&self) -> Option<&str> {
        self.run.as_ref().map(|r| r.run_id.as_str())
    }

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

    /// What a client joining after the events fed so far needs before the tail: empty when no
    /// run is open (the tail's next `RUN_STARTED` opens one). The last frame carries `cursor`.
    pub fn join_prelude(&self, cursor: i64, ts: i64) -> Vec<Frame> {
        let Some(run) = &self.run else {
            return Vec::new();
        };
        let mut out = Vec::new();
        out.push(self.frame(
            "RUN_STARTED",
            &run.run_id,
            ts,
            json!({"threadId": self.thread_id, "runId": run.run_id}),
        ));
        let hidden: BTreeSet<String> = self
            .pending_calls
            .iter()
            .map(|id| call_message_id(id))
            .collect();
        let messages: Vec<Value> = self
            .messages
            .iter()
            .filter(|m| !m["id"].as_str().is_some_and(|id| hidden.contains(id)))
            .cloned()
            .collect();
        out.push(json!({"type": "MESSAGES_SNAPSHOT", "messages": messages, "timestamp": ts}));
        out.push(self.frame(
            "STATE_SNAPSHOT",
            &run.run_id,
            ts,
            json!({"snapshot": Value::Object(self.state.clone())}),
        ));
        for agent in &run.subagents {
            out.push(self.subagent_started(&run.run_id, agent, ts));
        }
        for (step, owner) in run.steps.values() {
            out.push(self.attributed(
                "STEP_STARTED",
                &run.run_id,
                ts,
                owner.as_deref(),
                json!({"stepName": step}),
            ));
        }
        for call_id in run.calls.iter().filter(|c| self.pending_calls.contains(*c)) {
            self.tool_call_frames(&run.run_id, call_id, ts, &mut out);
        }
        for (kind, open) in [
            (Stream::Reasoning, &run.reasoning),
            (Stream::Text, &run.text),
        ] {
            for (agent, m) in open {
                let sub = self.sub_tag(agent);
                self.open_frames(kind, &run.run_id, ts, sub, &m.id, &mut out);
                if !m.text.is_empty() {
                    out.push(self.attributed(
                        kind.content_type(),
                        &run.run_id,
                        ts,
                        sub,
                        json!({"messageId": m.id, "delta": m.text}),
                    ));
                }
            }
        }
        let mut frames: Vec<Frame> = out.iter().map(Frame::data).collect();
        if let Some(last) = frames.last_mut() {
            last.id = Some(cursor.to_string());
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
    fn open_frames(
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
    fn tool_call_frames(&self, run: &str, call_id: &str, ts: i64, out: &mut Vec<Value>) {
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
    fn sub_tag<'a>(&self, agent: &'a str) -> Option<&'a str> {
        self.subagents.contains_key(agent).then_some(agent)
    }

    fn subagent_started(&self, run: &str, agent: &str, ts: i64) -> Value {
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

    fn attributed(&self, ty: &str, run: &str, ts: i64, sub: Option<&str>, fields: Value) -> Value {
        let mut v = self.frame(ty, run, ts, fields);
        if let Some(s) = sub {
            v["subagentRunId"] = json!(s);
        }
        v
    }

    /// `{type, threadId, runId, …fields, timestamp}`: seed 003's envelope on every event.
    fn frame(&self, ty: &str, run: &str, ts: i64, fields: Value) -> Value {
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

/// Seed 003's history: one UTC day of a thread's conversation as a `STATE_SNAPSHOT` with
/// `scope: "history_day"`. The day is the latest with messages before `before` (`YYYY-MM-DD`,
/// exclusive; none: the latest of all); `hasMore` says whether an earlier day has messages.
/// Messages: the user's (`role: "user"`), the orchestrator's text of each run (`assistant`, one
/// message per run) and tool results (`tool`), each `{id, seq, role, content, metadata,
/// timestamp}` with the ISO time of its first event.
pub fn history_day(thread_id: Option<&str>, events: &[StoredEvent], before: Option<&str>) -> Value {
    let mut messages: Vec<(String, Value)> = Vec::new();
    let mut orchestrators: HashMap<String, String> = HashMap::new();
    let mut answers: HashMap<String, usize> = HashMap::new();
    let mut tool_names: HashMap<String, String> = HashMap::new();
    for e in events {
        let Ok(decoded) = e.decode() else { continue };
        let day = crate::time::iso_millis(e.ts)[..10].to_string();
        let message = |id: &str, role: &str, content: &str| {
            json!({"id": id, "seq": e.seq, "role": role, "content": content,
                   "metadata": {"runId": e.run_id}, "timestamp": crate::time::iso_millis(e.ts)})
        };
        match decoded.body {
            EventBody::RunStart(_) => {
                orchestrators.insert(e.run_id.clone(), e.agent_id.clone());
            }
            EventBody::UserMessage(m) => {
                messages.push((day, message(&m.message_id, "user", &m.text)));
            }
            EventBody::TextDelta(d) if orchestrators.get(&e.run_id) == Some(&e.agent_id) => {
                match answers.get(&e.run_id) {
                    Some(&i) => {
                        let content = messages[i].1["content"].as_str().unwrap_or_default();
                        messages[i].1["content"] = json!(format!("{content}{}", d.text));
                    }
                    None => {
                        answers.insert(e.run_id.clone(), messages.len());
                        messages
                            .push((day, message(&format!("msg-{}", e.id), "assistant", &d.text)));
                    }
                }
            }
            EventBody::ToolCall(c) => {
                tool_names.insert(c.tool_call_id, c.tool_name);
            }
            EventBody::ToolResult(ToolResult {
                tool_call_id,
                result,
            }) => {
                let mut m = message(
                    &format!("{tool_call_id}-result"),
                    "tool",
                    &result_text(&result),
                );
                m["metadata"]["toolCallId"] = json!(tool_call_id);
                if let Some(name) = tool_names.get(&tool_call_id) {
                    m["metadata"]["toolName"] = json!(name);
                }
                messages.push((day, m));
            }
            _ => {}
        }
    }
    let earlier: Vec<&(String, Value)> = messages
        .iter()
        .filter(|(day, _)| before.is_none_or(|b| day.as_str() < b))
        .collect();
    let day = earlier.iter().map(|(d, _)| d.clone()).max();
    let of_day: Vec<Value> = earlier
        .iter()
        .filter(|(d, _)| Some(d) == day.as_ref())
        .map(|(_, m)| m.clone())
        .collect();
    let has_more = earlier
        .iter()
        .any(|(d, _)| day.as_ref().is_some_and(|day| d < day));
    let mut out = json!({"type": "STATE_SNAPSHOT", "snapshot": {"scope": "history_day",
        "threadId": thread_id, "day": day, "hasMore": has_more, "messages": of_day}});
    if let Some(t) = thread_id {
        out["threadId"] = json!(t);
    }
    out
}

/// Whether `s` is a `YYYY-MM-DD` date.
pub fn is_day(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

/// The id of the assistant message that carries a tool call in a `MESSAGES_SNAPSHOT`.
fn call_message_id(tool_call_id: &str) -> String {
    format!("{tool_call_id}-call")
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{demo_run, Log};
    use super::*;

    fn render_all(r: &mut AgUiRenderer, events: &[StoredEvent]) -> Vec<Frame> {
        events.iter().flat_map(|e| r.render(e)).collect()
    }

    fn types(frames: &[Frame]) -> Vec<String> {
        frames
            .iter()
            .map(|f| {
                let v: Value = serde_json::from_str(&f.data).unwrap();
                v["type"].as_str().unwrap().to_string()
            })
            .collect()
    }

    fn json_of(f: &Frame) -> Value {
        serde_json::from_str(&f.data).unwrap()
    }

    #[test]
    fn a_run_opens_and_closes_everything_it_opens() {
        let mut log = Log::new("t1");
        demo_run(&mut log, "r1", "completed");
        let mut r = AgUiRenderer::new("t1", true);
        let frames = render_all(&mut r, &log.events);
        let t = types(&frames);
        assert_eq!(
            t[..4],
            [
                "RUN_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END"
            ]
        );
        assert_eq!(json_of(&frames[1])["role"], "user");
        assert_eq!(t.last().unwrap(), "RUN_FINISHED");
        for (open, close) in [
            ("TEXT_MESSAGE_START", "TEXT_MESSAGE_END"),
            ("REASONING_START", "REASONING_END"),
            ("TOOL_CALL_START", "TOOL_CALL_END"),
            ("STEP_STARTED", "STEP_FINISHED"),
            ("SUBAGENT_STARTED", "SUBAGENT_FINISHED"),
        ] {
            let o = t.iter().filter(|x| *x == open).count();
            assert!(o > 0, "{open} missing: {t:?}");
            assert_eq!(
                o,
                t.iter().filter(|x| *x == close).count(),
                "{open}/{close}"
            );
        }
        // The sub-agent's events carry its id; the orchestrator's do not.
        let sub_text = frames
            .iter()
            .map(json_of)
            .find(|v| v["type"] == "TEXT_MESSAGE_CONTENT" && v["delta"] == "Created.")
            .unwrap();
        assert_eq!(sub_text["subagentRunId"], "sub1");
        let first_text = frames
            .iter()
            .map(json_of)
            .find(|v| v["type"] == "TEXT_MESSAGE_CONTENT" && v["delta"] == "On ")
            .unwrap();
        assert!(first_text.get("subagentRunId").is_none());
        // No nulls anywhere, integer timestamps, LF-only frames.
        for f in &frames {
            assert!(!f.data.contains("null"), "{}", f.data);
            assert!(json_of(f)["timestamp"].is_i64());
        }
        assert!(!super::super::to_sse(&frames).contains('\r'));
        let end = frames
            .iter()
            .map(json_of)
            .find(|v| v["type"] == "TEXT_MESSAGE_END" && v["messageId"] == "msg-5")
            .unwrap();
        assert_eq!(
            end["workerAgentOutput"],
            json!({"status": "success", "answer": "On it."})
        );
        let result = frames
            .iter()
            .map(json_of)
            .find(|v| v["type"] == "TOOL_CALL_RESULT" && v["toolCallId"] == "tc2")
            .unwrap();
        assert_eq!(result["toolAgentOutput"]["tool_name"], "create-workflow");
        assert_eq!(result["toolAgentOutput"]["status"], "success");
        assert_eq!(result["content"], r#"{"id":"wf1"}"#);
        let finished = json_of(frames.last().unwrap());
        assert_eq!(
            finished["usage"],
            json!([{"model": "demo", "inputTokens": 10, "outputTokens": 5, "totalTokens": 15}])
        );
    }

    #[test]
    fn only_the_last_frame_of_an_event_carries_its_id() {
        let mut log = Log::new("t1");
        demo_run(&mut log, "r1", "completed");
        let mut r = AgUiRenderer::new("t1", true);
        for e in &log.events {
            let frames = r.render(e);
            if let Some((last, rest)) = frames.split_last() {
                assert_eq!(last.id.as_deref(), Some(e.id.to_string().as_str()));
                assert!(rest.iter().all(|f| f.id.is_none()));
            }
        }
    }

    #[test]
    fn an_error_run_ends_with_run_error_naming_the_error() {
        let mut log = Log::new("t1");
        demo_run(&mut log, "r1", "error");
        let mut r = AgUiRenderer::new("t1", false);
        let frames = render_all(&mut r, &log.events);
        let last = json_of(frames.last().unwrap());
        assert_eq!(last["type"], "RUN_ERROR");
        assert_eq!(last["message"], "LLM provider 'demo' unavailable");
        let end = frames
            .iter()
            .map(json_of)
            .find(|v| v["type"] == "TEXT_MESSAGE_END" && v["messageId"] == "msg-16");
        assert!(end.is_some(), "the open text is closed before the error");
        // Without the echo the user's message is not streamed.
        assert!(!frames.iter().any(|f| f.data.contains("\"role\":\"user\"")));
    }

    #[test]
    fn a_background_sub_agent_after_run_finish_gets_a_continuation_run() {
        let mut log = Log::new("t1");
        log.push("r1", "o", "run-start", json!({"messageId": "u1"}))
            .push(
                "r1",
                "bg",
                "agent-spawned",
                json!({"parentId": "o", "role": "researcher", "tools": [], "taskId": "k1"}),
            )
            .push("r1", "o", "text-delta", json!({"text": "Started."}))
            .push("r1", "o", "run-finish", json!({"status": "completed"}))
            .push("r1", "bg", "text-delta", json!({"text": "Found it."}))
            .push(
                "r1",
                "bg",
                "agent-completed",
                json!({"role": "researcher", "result": "Found it."}),
            )
            .push("r2", "o", "run-start", json!({"messageId": "u2"}))
            .push("r2", "o", "run-finish", json!({"status": "completed"}));
        let mut r = AgUiRenderer::new("t1", true);
        let frames = render_all(&mut r, &log.events);
        let t = types(&frames);
        assert_eq!(
            t,
            [
                "RUN_STARTED",
                "SUBAGENT_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "SUBAGENT_FINISHED", // suspended
                "RUN_FINISHED",
                "RUN_STARTED", // continuation of r1
                "SUBAGENT_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "SUBAGENT_FINISHED",
                "RUN_FINISHED",
                "RUN_STARTED",
                "RUN_FINISHED"
            ]
        );
        assert_eq!(json_of(&frames[5])["outcome"]["type"], "suspended");
        assert_eq!(json_of(&frames[7])["runId"], "r1");
        assert_eq!(json_of(&frames[12])["outcome"]["type"], "success");
    }

    #[test]
    fn the_join_prelude_reopens_what_is_open() {
        let mut log = Log::new("t1");
        demo_run(&mut log, "r1", "completed");
        // Cut after the sub-agent's tool call (event 10): the delegate call is pending, the
        // sub-agent active, and nothing else open.
        let mut r = AgUiRenderer::new("t1", true);
        for e in &log.events[..10] {
            r.render(e);
        }
        let prelude = r.join_prelude(10, 99);
        let t = types(&prelude);
        assert_eq!(
            t,
            [
                "RUN_STARTED",
                "MESSAGES_SNAPSHOT",
                "STATE_SNAPSHOT",
                "SUBAGENT_STARTED",
                "STEP_STARTED",
                "STEP_STARTED",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END"
            ]
        );
        assert_eq!(prelude.last().unwrap().id.as_deref(), Some("10"));
        let snapshot = json_of(&prelude[1]);
        let ids: Vec<&str> = snapshot["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["u1", "rsn-3", "msg-5"]);
        assert_eq!(
            json_of(&prelude[2])["snapshot"]["tasks"][0]["status"],
            "in_progress"
        );

        // Cut mid-text: the open message is re-opened with its text so far.
        let mut r = AgUiRenderer::new("t1", true);
        for e in &log.events[..5] {
            r.render(e);
        }
        let prelude = r.join_prelude(5, 99);
        let last = json_of(prelude.last().unwrap());
        assert_eq!(last["type"], "TEXT_MESSAGE_CONTENT");
        assert_eq!(last["delta"], "On ");
        assert_eq!(last["messageId"], "msg-5");

        // Nothing open: no prelude.
        let mut r = AgUiRenderer::new("t1", true);
        render_all(&mut r, &log.events);
        assert!(r.join_prelude(99, 99).is_empty());
    }

    #[test]
    fn history_pages_by_day() {
        let day = 86_400_000;
        let mut log = Log::new("t1");
        demo_run(&mut log, "r1", "completed");
        let first_day = log.events.len();
        demo_run(&mut log, "r2", "completed");
        // The second run happens the next day.
        for e in &mut log.events[first_day..] {
            e.ts += day;
        }
        let latest = history_day(Some("t1"), &log.events, None);
        assert_eq!(latest["type"], "STATE_SNAPSHOT");
        let snap = &latest["snapshot"];
        assert_eq!(snap["scope"], "history_day");
        assert_eq!(snap["day"], "2023-11-15");
        assert_eq!(snap["hasMore"], true);
        let roles: Vec<&str> = snap["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool"]);
        assert_eq!(snap["messages"][1]["content"], "On it.Done");
        assert_eq!(snap["messages"][0]["timestamp"], "2023-11-15T22:13:20.018Z");
        let earlier = history_day(Some("t1"), &log.events, Some("2023-11-15"));
        assert_eq!(earlier["snapshot"]["day"], "2023-11-14");
        assert_eq!(earlier["snapshot"]["hasMore"], false);
        let none = history_day(Some("t1"), &log.events, Some("2023-11-14"));
        assert_eq!(none["snapshot"]["day"], Value::Null);
        assert_eq!(none["snapshot"]["messages"], json!([]));
        assert!(is_day("2023-11-14") && !is_day("2023-1-14") && !is_day("yesterday"));
    }
}
