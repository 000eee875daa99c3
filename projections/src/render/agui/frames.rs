//! Stored events → AG-UI frames: what each event opens, streams and closes (the mapping is in
//! the module's documentation, `super`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use threadstream_domain::event::{
    AgentCompleted, AgentSpawned, RunFinish, RunStatus, ToolCall, ToolError, ToolResult,
};
use threadstream_domain::{EventBody, StoredEvent};

use super::state::{Close, OpenMessage, OpenRun, Stream, ToolCallInfo};
use super::AgUiRenderer;
use crate::render::schemas::agui::{
    AgUiEventBody as Body, AgUiFrame, AgUiFunctionCall, AgUiMessage, AgUiTokenUsage, AgUiToolCall,
    CustomValue, FunctionType, ReasoningRole, RunOutcome, StateValue, SubagentOutcome, TextRole,
    ToolAgentError, ToolAgentOutput, ToolRole, WorkerAgentOutput,
};
use crate::render::{result_text, Frame};

/// How long `toolAgentOutput.result_summary` may be, in characters.
const SUMMARY_CHARS: usize = 200;

impl AgUiRenderer {
    /// The frames of one stored event (none for internal events). The last frame carries the
    /// event's id.
    pub fn render(&mut self, event: &StoredEvent) -> Vec<Frame> {
        let mut frames = Vec::new();
        if let Ok(decoded) = event.decode() {
            self.apply(event, decoded.body, &mut frames);
        }
        if let Some(last) = frames.last_mut() {
            last.id = Some(event.id.to_string());
        }
        frames
    }

    fn apply(&mut self, e: &StoredEvent, body: EventBody, out: &mut Vec<Frame>) {
        let ts = e.ts;
        let agent = e.agent_id.as_str();
        match body {
            EventBody::RunStart(_) => {
                if self.run.is_some() {
                    self.close_run(ts, Close::Partial, None, out);
                }
                self.run = Some(OpenRun::new(&e.run_id, false));
                out.push(self.frame(&e.run_id, ts, Body::RunStarted {}));
                if let Some((id, text)) = self.pending_user.take() {
                    self.user_message_frames(&e.run_id, &id, &text, ts, out);
                }
            }
            EventBody::UserMessage(m) => {
                // Stored just before its `run-start`: streamed right after `RUN_STARTED`.
                self.messages.push(AgUiMessage::User {
                    id: m.message_id.clone(),
                    content: m.text.clone(),
                    subagent_run_id: None,
                });
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
                let value = CustomValue::ConfirmationRequest(&c);
                out.push(self.custom(&run, agent, ts, "confirmation-request", value));
            }
            EventBody::FilesystemRequest(f) => {
                let run = self.enter(e, out);
                let value = CustomValue::FilesystemRequest(&f);
                out.push(self.custom(&run, agent, ts, "filesystem-request", value));
            }
            EventBody::TasksUpdate(t) => {
                let run = self.enter(e, out);
                self.state.tasks = Some(t.tasks.tasks.clone());
                let value = CustomValue::TasksUpdate(&t);
                out.push(self.custom(&run, agent, ts, "tasks-update", value));
                out.push(self.state_snapshot(&run, ts));
            }
            EventBody::Status(s) => {
                self.state.status = (!s.message.is_empty()).then_some(s.message);
                if let Some(run) = self.open_run().map(str::to_string) {
                    out.push(self.state_snapshot(&run, ts));
                }
            }
            EventBody::ThreadTitleUpdated(t) => {
                self.state.title = Some(t.title);
                if let Some(run) = self.open_run().map(str::to_string) {
                    out.push(self.state_snapshot(&run, ts));
                }
            }
            EventBody::Error(err) => {
                let run = self.enter(e, out);
                self.close_agent_messages(agent, ts, out);
                self.last_error
                    .insert(e.run_id.clone(), err.content.clone());
                out.push(self.custom(&run, agent, ts, "error", CustomValue::Error(&err)));
            }
            EventBody::LlmUsage(u) => {
                if let Some(r) = self.run.as_mut() {
                    let slot = r.usage.entry(u.model).or_default();
                    slot.0 += u.input_tokens;
                    slot.1 += u.output_tokens;
                }
            }
            EventBody::RunFinish(f) => self.finished(e, &f, out),
            EventBody::AguiEvent(a) => self.upstream(e, &a.event, out),
            _ => {}
        }
    }

    fn user_message_frames(&self, run: &str, id: &str, text: &str, ts: i64, out: &mut Vec<Frame>) {
        out.push(self.frame(
            run,
            ts,
            Body::TextMessageStart {
                message_id: id,
                role: TextRole::User,
            },
        ));
        if !text.is_empty() {
            out.push(self.frame(
                run,
                ts,
                Body::TextMessageContent {
                    message_id: id,
                    delta: text,
                },
            ));
        }
        out.push(self.frame(
            run,
            ts,
            Body::TextMessageEnd {
                message_id: id,
                worker_agent_output: Some(WorkerAgentOutput {
                    status: Close::Success.status(),
                    answer: text,
                }),
            },
        ));
    }

    /// A text or reasoning delta: opens the agent's message of that kind (closing the other
    /// kind) on its first delta, then streams the content.
    fn delta(&mut self, e: &StoredEvent, kind: Stream, text: &str, out: &mut Vec<Frame>) {
        if text.is_empty() {
            return;
        }
        let (ts, agent) = (e.ts, e.agent_id.as_str());
        let run = self.enter(e, out);
        match kind {
            Stream::Text => self.close_reasoning(agent, ts, out),
            Stream::Reasoning => self.close_text(agent, ts, Close::Success, out),
        }
        let sub = self.sub_tag(agent);
        if !self.open_messages(kind).contains_key(agent) {
            // The id of the message's first delta, compacted or not: a message keeps its id
            // across compaction, and a reader resuming inside one finds it open.
            let id = format!("{}-{}", kind.id_prefix(), e.first_id());
            self.open_frames(kind, &run, ts, sub, &id, out);
            self.open_messages(kind).insert(
                agent.to_string(),
                OpenMessage {
                    id,
                    text: String::new(),
                },
            );
        }
        let open = self.run.as_ref().expect("open run").messages(kind);
        let id = &open[agent].id;
        out.push(self.attributed(&run, ts, sub, kind.content(id, text)));
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
        out: &mut Vec<Frame>,
    ) {
        match kind {
            Stream::Text => out.push(self.attributed(
                run,
                ts,
                sub,
                Body::TextMessageStart {
                    message_id: id,
                    role: TextRole::Assistant,
                },
            )),
            Stream::Reasoning => {
                out.push(self.attributed(run, ts, sub, Body::ReasoningStart { message_id: id }));
                out.push(self.attributed(
                    run,
                    ts,
                    sub,
                    Body::ReasoningMessageStart {
                        message_id: id,
                        role: ReasoningRole::Reasoning,
                    },
                ));
            }
        }
    }

    /// Opens a continuation run when none is open, and re-starts a suspended sub-agent.
    /// Returns the open run's id.
    fn enter(&mut self, e: &StoredEvent, out: &mut Vec<Frame>) -> String {
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

    /// An upstream agent's state, custom and raw events, sent on as it sent them; its other
    /// kept events (its own run's start and end, message snapshots) have frames of this
    /// log's already.
    fn upstream(&mut self, e: &StoredEvent, event: &Map<String, Value>, out: &mut Vec<Frame>) {
        let field = |name: &str| event.get(name);
        let text = |name: &str| event.get(name).and_then(Value::as_str);
        let body = match text("type") {
            Some("STATE_SNAPSHOT") => field("snapshot").map(|s| Body::StateSnapshot {
                snapshot: StateValue::Upstream(s),
            }),
            Some("STATE_DELTA") => field("delta").map(|delta| Body::StateDelta { delta }),
            Some("CUSTOM") => text("name")
                .zip(field("value"))
                .map(|(name, value)| Body::Custom {
                    name,
                    value: CustomValue::Upstream(value),
                }),
            Some("RAW") => field("event").map(|raw| Body::Raw {
                event: raw,
                source: text("source"),
            }),
            _ => None,
        };
        let Some(body) = body else { return };
        let run = self.enter(e, out);
        out.push(self.attributed(&run, e.ts, self.sub_tag(&e.agent_id), body));
    }

    fn ensure_run(&mut self, e: &StoredEvent, out: &mut Vec<Frame>) -> String {
        if let Some(r) = &self.run {
            return r.run_id.clone();
        }
        self.run = Some(OpenRun::new(&e.run_id, true));
        out.push(self.frame(&e.run_id, e.ts, Body::RunStarted {}));
        e.run_id.clone()
    }

    fn tool_call(&mut self, run: &str, agent: &str, c: &ToolCall, ts: i64, out: &mut Vec<Frame>) {
        let owner = self.sub_tag(agent).map(str::to_string);
        let args = serde_json::to_string(&c.args).expect("a JSON object serializes");
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
            run,
            ts,
            owner.as_deref(),
            Body::StepStarted { step_name: &step },
        ));
        let r = self.run.as_mut().expect("open run");
        r.steps
            .insert(c.tool_call_id.clone(), (step, owner.clone()));
        r.calls.insert(c.tool_call_id.clone());
        self.tool_call_frames(run, &c.tool_call_id, ts, out);
        self.remember(
            AgUiMessage::Assistant {
                id: call_message_id(&c.tool_call_id),
                content: None,
                tool_calls: Some(vec![AgUiToolCall {
                    id: c.tool_call_id.clone(),
                    call_type: FunctionType::Function,
                    function: AgUiFunctionCall {
                        name: c.tool_name.clone(),
                        arguments: args,
                    },
                }]),
                subagent_run_id: None,
            },
            owner.as_deref(),
        );
        self.pending_calls.insert(c.tool_call_id.clone());
    }

    /// `TOOL_CALL_START/ARGS/END` of a known call.
    pub(super) fn tool_call_frames(&self, run: &str, call_id: &str, ts: i64, out: &mut Vec<Frame>) {
        let Some(info) = self.tool_calls.get(call_id) else {
            return;
        };
        let owner = info.owner.as_deref();
        out.push(self.attributed(
            run,
            ts,
            owner,
            Body::ToolCallStart {
                tool_call_id: call_id,
                tool_call_name: &info.name,
            },
        ));
        out.push(self.attributed(
            run,
            ts,
            owner,
            Body::ToolCallArgs {
                tool_call_id: call_id,
                delta: &info.args,
            },
        ));
        out.push(self.attributed(
            run,
            ts,
            owner,
            Body::ToolCallEnd {
                tool_call_id: call_id,
            },
        ));
    }

    fn tool_result(
        &mut self,
        run: &str,
        r: &ToolResult,
        error: Option<&str>,
        ts: i64,
        out: &mut Vec<Frame>,
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
        let output = ToolAgentOutput {
            tool_name: &info.name,
            tool_call_id: &r.tool_call_id,
            tool_call_args: args,
            status: if error.is_some() {
                "failure"
            } else {
                "success"
            },
            result_summary: &summary,
            error: error.map(|message| ToolAgentError {
                code: "tool_error",
                message,
            }),
        };
        let message_id = format!("{}-result", r.tool_call_id);
        out.push(self.attributed(
            run,
            ts,
            info.owner.as_deref(),
            Body::ToolCallResult {
                message_id: &message_id,
                tool_call_id: &r.tool_call_id,
                content: &content,
                role: Some(ToolRole::Tool),
                tool_agent_output: Some(output),
            },
        ));
        let step = self
            .run
            .as_mut()
            .expect("open run")
            .steps
            .remove(&r.tool_call_id);
        if let Some((step, owner)) = step {
            out.push(self.attributed(
                run,
                ts,
                owner.as_deref(),
                Body::StepFinished { step_name: &step },
            ));
        }
        let message = AgUiMessage::Tool {
            id: message_id,
            tool_call_id: r.tool_call_id.clone(),
            content,
            error: error.map(str::to_string),
            subagent_run_id: None,
        };
        self.remember(message, info.owner.as_deref());
        self.pending_calls.remove(&r.tool_call_id);
        self.finish_idle_continuation(ts, out);
    }

    fn spawned(&mut self, e: &StoredEvent, s: &AgentSpawned, out: &mut Vec<Frame>) {
        let run = self.ensure_run(e, out);
        let description = s.goal.clone().or_else(|| s.title.clone());
        self.subagents
            .insert(e.agent_id.clone(), (s.role.clone(), description));
        let r = self.run.as_mut().expect("open run");
        if r.subagents.insert(e.agent_id.clone()) {
            out.push(self.subagent_started(&run, &e.agent_id, e.ts));
        }
    }

    fn completed(&mut self, e: &StoredEvent, c: &AgentCompleted, out: &mut Vec<Frame>) {
        if !self.subagents.contains_key(&e.agent_id) {
            return; // the orchestrator's own completion: its run-finish says it all
        }
        let run = self.enter(e, out);
        self.close_agent_messages(&e.agent_id, e.ts, out);
        self.close_agent_steps(&run, &e.agent_id, e.ts, out);
        let frame = match &c.error {
            Some(err) => self.frame(
                &run,
                e.ts,
                Body::SubagentError {
                    subagent_run_id: &e.agent_id,
                    message: err,
                },
            ),
            None => self.frame(
                &run,
                e.ts,
                Body::SubagentFinished {
                    subagent_run_id: &e.agent_id,
                    result: Some(&c.result),
                    outcome: Some(SubagentOutcome::Success {}),
                },
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

    fn finished(&mut self, e: &StoredEvent, f: &RunFinish, out: &mut Vec<Frame>) {
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
    fn finish_idle_continuation(&mut self, ts: i64, out: &mut Vec<Frame>) {
        if self
            .run
            .as_ref()
            .is_some_and(|r| r.continuation && r.is_idle())
        {
            self.close_run(ts, Close::Success, None, out);
        }
    }

    fn close_run(&mut self, ts: i64, close: Close, error: Option<String>, out: &mut Vec<Frame>) {
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
        out: &mut Vec<Frame>,
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
                &run.run_id,
                ts,
                owner.as_deref(),
                Body::StepFinished { step_name: step },
            ));
        }
        for agent in &run.subagents {
            out.push(self.frame(
                &run.run_id,
                ts,
                Body::SubagentFinished {
                    subagent_run_id: agent,
                    result: None,
                    outcome: Some(SubagentOutcome::Suspended {}),
                },
            ));
        }
        let usage: Vec<AgUiTokenUsage<'_>> = run
            .usage
            .iter()
            .map(|(model, &(i, o))| AgUiTokenUsage {
                model,
                input_tokens: i,
                output_tokens: o,
                total_tokens: i + o,
            })
            .collect();
        let usage = (!usage.is_empty()).then_some(usage);
        let body = match &error {
            Some(message) => Body::RunError {
                message,
                code: reason,
                usage,
            },
            None => Body::RunFinished {
                outcome: cancelled.then_some(RunOutcome::Cancelled {}),
                usage,
            },
        };
        out.push(self.frame(&run.run_id, ts, body));
        self.run = None;
    }

    fn close_agent_messages(&mut self, agent: &str, ts: i64, out: &mut Vec<Frame>) {
        self.close_text(agent, ts, Close::Success, out);
        self.close_reasoning(agent, ts, out);
    }

    fn close_agent_steps(&mut self, run: &str, agent: &str, ts: i64, out: &mut Vec<Frame>) {
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
                    run,
                    ts,
                    owner.as_deref(),
                    Body::StepFinished { step_name: &step },
                ));
            }
        }
    }

    fn close_text(&mut self, agent: &str, ts: i64, close: Close, out: &mut Vec<Frame>) {
        self.close_message(Stream::Text, agent, ts, close, out);
    }

    fn close_reasoning(&mut self, agent: &str, ts: i64, out: &mut Vec<Frame>) {
        self.close_message(Stream::Reasoning, agent, ts, Close::Success, out);
    }

    /// Closes an agent's open message of `kind` and keeps it for `MESSAGES_SNAPSHOT`.
    fn close_message(
        &mut self,
        kind: Stream,
        agent: &str,
        ts: i64,
        close: Close,
        out: &mut Vec<Frame>,
    ) {
        let Some(run) = self.run.as_ref().map(|r| r.run_id.clone()) else {
            return;
        };
        let Some(m) = self.open_messages(kind).remove(agent) else {
            return;
        };
        let sub = self.sub_tag(agent);
        let message = match kind {
            Stream::Text => {
                out.push(self.attributed(
                    &run,
                    ts,
                    sub,
                    Body::TextMessageEnd {
                        message_id: &m.id,
                        worker_agent_output: Some(WorkerAgentOutput {
                            status: close.status(),
                            answer: &m.text,
                        }),
                    },
                ));
                AgUiMessage::Assistant {
                    id: m.id,
                    content: Some(m.text),
                    tool_calls: None,
                    subagent_run_id: None,
                }
            }
            Stream::Reasoning => {
                out.push(self.attributed(
                    &run,
                    ts,
                    sub,
                    Body::ReasoningMessageEnd { message_id: &m.id },
                ));
                out.push(self.attributed(&run, ts, sub, Body::ReasoningEnd { message_id: &m.id }));
                AgUiMessage::Reasoning {
                    id: m.id,
                    content: m.text,
                    subagent_run_id: None,
                }
            }
        };
        self.remember(message, sub);
    }

    /// Keeps a settled message for `MESSAGES_SNAPSHOT`, attributed to its sub-agent.
    fn remember(&mut self, mut message: AgUiMessage, owner: Option<&str>) {
        message.set_subagent(owner);
        self.messages.push(message);
    }

    /// The sub-agent an agent's events are attributed to: itself, when it is a sub-agent.
    pub(super) fn sub_tag<'a>(&self, agent: &'a str) -> Option<&'a str> {
        self.subagents.contains_key(agent).then_some(agent)
    }

    pub(super) fn subagent_started(&self, run: &str, agent: &str, ts: i64) -> Frame {
        let (name, description) = match self.subagents.get(agent) {
            Some((name, description)) => (name.as_str(), description.as_deref()),
            None => (agent, None),
        };
        self.frame(
            run,
            ts,
            Body::SubagentStarted {
                subagent_run_id: agent,
                name,
                description,
            },
        )
    }

    pub(super) fn state_snapshot(&self, run: &str, ts: i64) -> Frame {
        self.frame(
            run,
            ts,
            Body::StateSnapshot {
                snapshot: StateValue::Thread(&self.state),
            },
        )
    }

    fn custom(&self, run: &str, agent: &str, ts: i64, name: &str, value: CustomValue<'_>) -> Frame {
        self.attributed(
            run,
            ts,
            self.sub_tag(agent),
            Body::Custom {
                name: &format!("threadstream.{name}"),
                value,
            },
        )
    }

    /// [`Self::frame`] of a sub-agent's work (`sub`), which carries its `subagentRunId`.
    pub(super) fn attributed(
        &self,
        run: &str,
        ts: i64,
        sub: Option<&str>,
        body: Body<'_>,
    ) -> Frame {
        Frame::typed(&AgUiFrame {
            body,
            thread_id: Some(&self.thread_id),
            run_id: Some(run),
            subagent_run_id: sub,
            timestamp: ts,
        })
    }

    /// `{type, threadId, runId, …fields, timestamp}`: AG-UI's envelope on every event.
    pub(super) fn frame(&self, run: &str, ts: i64, body: Body<'_>) -> Frame {
        self.attributed(run, ts, None, body)
    }
}

/// The id of the assistant message that carries a tool call in a `MESSAGES_SNAPSHOT`.
pub(super) fn call_message_id(tool_call_id: &str) -> String {
    format!("{tool_call_id}-call")
}
