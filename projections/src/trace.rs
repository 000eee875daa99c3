//! A run's trace rebuilt from the log: the same span tree the agent runtime exports live
//! (`threadstream_agent::telemetry`), folded from the stored events, so that a run from long
//! ago can be looked at in a tracing backend (`threadstream traces`). Names and attribute keys
//! come from [`threadstream_domain::genai`], which the live spans use too.
//!
//! - `invoke_agent` per run (`run-start` → `run-finish`) and per sub-agent (`agent-spawned` →
//!   `agent-completed`); a sub-agent is the child of its parent's `delegate` call, as live.
//! - `chat` per model call, from its `llm-usage` event (start time, provider, model, tokens,
//!   time to first chunk). Events stored before `llm-usage` carried a start time give a
//!   zero-length span at the call's end; a model call that failed stored no `llm-usage`, so it
//!   has no span here (its error is on the agent's span).
//! - `execute_tool` per tool call (`tool-call` → `tool-result` / `tool-error`), with the
//!   confirmation asked and answered as span events.
//!
//! No content is rebuilt (arguments, results, messages): the rebuilt trace is for shape and
//! timing, and content in a tracing backend is opt-in only.

use std::collections::HashMap;

use threadstream_domain::event::{EventBody, RunStatus};
use threadstream_domain::genai;
use threadstream_domain::StoredEvent;

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    Float(f64),
}

/// A point in a span's life (a confirmation asked or answered).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEvent {
    pub name: &'static str,
    /// Epoch milliseconds.
    pub ts: i64,
    pub attributes: Vec<(&'static str, AttrValue)>,
}

/// One span of a rebuilt trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSpan {
    /// The span's identity in the log: `agent:<agent id>`, `tool:<tool call id>` or
    /// `chat:<llm-usage event id>`; stable, so ids derived from it are the same on every export.
    pub key: String,
    /// The parent span's key; `None` for the run's orchestrator.
    pub parent: Option<String>,
    /// `{operation} {target}`, as live.
    pub name: String,
    /// `client` for model calls, else `internal`.
    pub kind: &'static str,
    /// Epoch milliseconds.
    pub start_ms: i64,
    /// `None` while the run, agent or call has not ended in the log.
    pub end_ms: Option<i64>,
    pub attributes: Vec<(&'static str, AttrValue)>,
    pub events: Vec<TraceEvent>,
    /// `error.type`, when the operation failed.
    pub error_type: Option<String>,
}

impl TraceSpan {
    fn new(key: String, parent: Option<String>, operation: &str, target: &str, ts: i64) -> Self {
        TraceSpan {
            key,
            parent,
            name: genai::span_name(operation, target),
            kind: if operation == genai::CHAT {
                "client"
            } else {
                "internal"
            },
            start_ms: ts,
            end_ms: None,
            attributes: vec![("gen_ai.operation.name", AttrValue::Str(operation.into()))],
            events: Vec::new(),
            error_type: None,
        }
    }

    fn set(&mut self, key: &'static str, value: AttrValue) {
        match self.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.attributes.push((key, value)),
        }
    }

    /// The attribute `key`, if set.
    pub fn attribute(&self, key: &str) -> Option<&AttrValue> {
        self.attributes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

/// The trace of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTrace {
    pub thread_id: String,
    pub run_id: String,
    /// In the order the log opened them (the orchestrator first).
    pub spans: Vec<TraceSpan>,
}

/// The traces of a thread's runs (only `run`'s when given), from the thread's events in log
/// order. Runs whose `run-start` is not among `events` are skipped.
pub fn run_traces(events: &[StoredEvent], run: Option<&str>) -> Vec<RunTrace> {
    let mut runs: Vec<Builder> = Vec::new();
    for e in events {
        if run.is_some_and(|r| r != e.run_id) || e.run_id.is_empty() {
            continue;
        }
        let Ok(event) = e.decode() else { continue };
        let builder = match runs.iter_mut().position(|b| b.trace.run_id == e.run_id) {
            Some(i) => &mut runs[i],
            None if matches!(event.body, EventBody::RunStart(_)) => {
                runs.push(Builder::new(&e.thread_id, &e.run_id));
                runs.last_mut().expect("just pushed")
            }
            None => continue,
        };
        builder.apply(e, event.body);
    }
    runs.into_iter().map(|b| b.trace).collect()
}

struct Builder {
    trace: RunTrace,
    /// Span index by key.
    index: HashMap<String, usize>,
    /// Open tool calls per agent, oldest first: `(agent id, tool call id, tool name)`.
    open_tools: Vec<(String, String, String)>,
    /// The tool call a confirmation request belongs to.
    confirmations: HashMap<String, String>,
    /// Agent spans that name no model yet: the next `llm-usage` names it (kept apart so that a
    /// run with many model calls is folded in linear time).
    unmodelled: Vec<usize>,
}

impl Builder {
    fn new(thread_id: &str, run_id: &str) -> Self {
        Builder {
            trace: RunTrace {
                thread_id: thread_id.to_string(),
                run_id: run_id.to_string(),
                spans: Vec::new(),
            },
            index: HashMap::new(),
            open_tools: Vec::new(),
            confirmations: HashMap::new(),
            unmodelled: Vec::new(),
        }
    }

    fn push(&mut self, mut span: TraceSpan) {
        span.set(
            "gen_ai.conversation.id",
            AttrValue::Str(self.trace.thread_id.clone()),
        );
        self.index.insert(span.key.clone(), self.trace.spans.len());
        self.trace.spans.push(span);
    }

    fn span(&mut self, key: &str) -> Option<&mut TraceSpan> {
        let i = *self.index.get(key)?;
        self.trace.spans.get_mut(i)
    }

    fn agent_span(&mut self, e: &StoredEvent, name: &str, parent: Option<String>) {
        let mut span = TraceSpan::new(
            agent_key(&e.agent_id),
            parent,
            genai::INVOKE_AGENT,
            name,
            e.ts,
        );
        span.set("gen_ai.agent.id", AttrValue::Str(e.agent_id.clone()));
        span.set("gen_ai.agent.name", AttrValue::Str(name.to_string()));
        span.set("threadstream.run.id", AttrValue::Str(e.run_id.clone()));
        self.unmodelled.push(self.trace.spans.len());
        self.push(span);
    }

    fn apply(&mut self, e: &StoredEvent, body: EventBody) {
        match body {
            EventBody::RunStart(_) => self.agent_span(e, genai::ORCHESTRATOR, None),
            EventBody::AgentSpawned(s) => {
                // Live, a sub-agent runs within its parent's `delegate` call.
                let parent = self
                    .open_tools
                    .iter()
                    .rev()
                    .find(|(agent, _, tool)| *agent == s.parent_id && tool == "delegate")
                    .map(|(_, call, _)| tool_key(call))
                    .unwrap_or_else(|| agent_key(&s.parent_id));
                self.agent_span(e, &s.role, Some(parent));
            }
            EventBody::AgentCompleted(c) => {
                if let Some(span) = self.span(&agent_key(&e.agent_id)) {
                    span.end_ms = Some(e.ts);
                    if c.error.is_some() {
                        span.error_type = Some(genai::AGENT_ERROR.into());
                    }
                }
            }
            EventBody::RunFinish(f) => {
                let key = self
                    .trace
                    .spans
                    .first()
                    .map(|s| s.key.clone())
                    .unwrap_or_default();
                if let Some(span) = self.span(&key) {
                    span.end_ms = Some(e.ts);
                    let status = match f.status {
                        RunStatus::Completed => "completed",
                        RunStatus::Cancelled => "cancelled",
                        RunStatus::Error => "error",
                    };
                    span.set("threadstream.run.status", AttrValue::Str(status.into()));
                    if f.status == RunStatus::Error {
                        span.error_type = Some(genai::AGENT_ERROR.into());
                    }
                }
            }
            EventBody::ToolCall(c) => {
                let mut span = TraceSpan::new(
                    tool_key(&c.tool_call_id),
                    Some(agent_key(&e.agent_id)),
                    genai::EXECUTE_TOOL,
                    &c.tool_name,
                    e.ts,
                );
                span.set("gen_ai.tool.name", AttrValue::Str(c.tool_name.clone()));
                span.set(
                    "gen_ai.tool.call.id",
                    AttrValue::Str(c.tool_call_id.clone()),
                );
                span.set("gen_ai.tool.type", AttrValue::Str("function".into()));
                if let Some(server) = genai::mcp_server(&c.tool_name) {
                    span.set("threadstream.mcp.server", AttrValue::Str(server.into()));
                }
                self.push(span);
                self.open_tools
                    .push((e.agent_id.clone(), c.tool_call_id, c.tool_name));
            }
            EventBody::ToolResult(r) => self.tool_ended(&r.tool_call_id, e.ts, false),
            EventBody::ToolError(r) => self.tool_ended(&r.tool_call_id, e.ts, true),
            EventBody::ConfirmationRequest(r) => {
                self.confirmations
                    .insert(r.request_id.clone(), r.tool_call_id.clone());
                if let Some(span) = self.span(&tool_key(&r.tool_call_id)) {
                    span.events.push(TraceEvent {
                        name: genai::CONFIRMATION_REQUESTED,
                        ts: e.ts,
                        attributes: vec![(
                            "gen_ai.confirmation.id",
                            AttrValue::Str(r.request_id.clone()),
                        )],
                    });
                }
            }
            EventBody::ConfirmationAnswered(a) => {
                let Some(call) = self.confirmations.get(&a.request_id).cloned() else {
                    return;
                };
                if let Some(span) = self.span(&tool_key(&call)) {
                    span.events.push(TraceEvent {
                        name: genai::CONFIRMATION_ANSWERED,
                        ts: e.ts,
                        attributes: vec![
                            ("gen_ai.confirmation.id", AttrValue::Str(a.request_id)),
                            ("approved", AttrValue::Str(a.approved.to_string())),
                        ],
                    });
                }
            }
            EventBody::LlmUsage(u) => {
                let mut span = TraceSpan::new(
                    format!("chat:{}", e.id),
                    Some(agent_key(&e.agent_id)),
                    genai::CHAT,
                    genai::request_model(&u.model),
                    u.started_at.unwrap_or(e.ts).min(e.ts),
                );
                span.end_ms = Some(e.ts);
                if let Some(provider) = &u.provider {
                    span.set("gen_ai.provider.name", AttrValue::Str(provider.clone()));
                }
                let model = genai::request_model(&u.model);
                span.set("gen_ai.request.model", AttrValue::Str(model.into()));
                span.set(
                    "gen_ai.usage.input_tokens",
                    AttrValue::Int(u.input_tokens as i64),
                );
                span.set(
                    "gen_ai.usage.output_tokens",
                    AttrValue::Int(u.output_tokens as i64),
                );
                if let Some(ms) = u.first_chunk_ms {
                    span.set(
                        "gen_ai.response.time_to_first_chunk",
                        AttrValue::Float(ms as f64 / 1000.0),
                    );
                }
                // The agents' spans name the model, as live.
                for i in std::mem::take(&mut self.unmodelled) {
                    self.trace.spans[i].set("gen_ai.request.model", AttrValue::Str(model.into()));
                }
                self.push(span);
            }
            _ => {}
        }
    }

    fn tool_ended(&mut self, tool_call_id: &str, ts: i64, failed: bool) {
        self.open_tools.retain(|(_, call, _)| call != tool_call_id);
        if let Some(span) = self.span(&tool_key(tool_call_id)) {
            span.end_ms = Some(ts);
            if failed {
                span.error_type = Some(genai::TOOL_ERROR.into());
            }
        }
    }
}

fn agent_key(agent_id: &str) -> String {
    format!("agent:{agent_id}")
}

fn tool_key(tool_call_id: &str) -> String {
    format!("tool:{tool_call_id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(id: i64, run: &str, agent: &str, ty: &str, payload: serde_json::Value) -> StoredEvent {
        StoredEvent {
            id,
            thread_id: "t1".into(),
            seq: id,
            run_id: run.into(),
            agent_id: agent.into(),
            event_type: ty.into(),
            payload: payload.to_string(),
            ts: 1_000 + id * 10,
            response_id: None,
            user_id: None,
        }
    }

    #[test]
    fn a_run_with_a_sub_agent_and_a_confirmation_folds_into_its_span_tree() {
        let events = vec![
            ev(1, "r1", "o", "run-start", json!({"messageId": "m1"})),
            ev(
                2,
                "r1",
                "o",
                "llm-usage",
                json!({"model": "demo", "inputTokens": 5, "outputTokens": 7, "provider": "demo", "startedAt": 1005, "firstChunkMs": 3}),
            ),
            ev(
                3,
                "r1",
                "o",
                "tool-call",
                json!({"toolCallId": "tc1", "toolName": "delegate", "args": {}}),
            ),
            ev(
                4,
                "r1",
                "s",
                "agent-spawned",
                json!({"parentId": "o", "role": "builder", "tools": []}),
            ),
            ev(
                5,
                "r1",
                "s",
                "llm-usage",
                json!({"model": "demo", "inputTokens": 1, "outputTokens": 2}),
            ),
            ev(
                6,
                "r1",
                "s",
                "agent-completed",
                json!({"role": "builder", "result": "ok"}),
            ),
            ev(
                7,
                "r1",
                "o",
                "tool-result",
                json!({"toolCallId": "tc1", "result": "ok"}),
            ),
            ev(
                8,
                "r1",
                "o",
                "tool-call",
                json!({"toolCallId": "tc2", "toolName": "delete-workflow", "args": {}}),
            ),
            ev(
                9,
                "r1",
                "o",
                "confirmation-request",
                json!({"requestId": "cr1", "toolCallId": "tc2", "toolName": "delete-workflow", "args": {}, "severity": "destructive", "message": "sure?"}),
            ),
            ev(
                10,
                "r1",
                "o",
                "confirmation-answered",
                json!({"requestId": "cr1", "approved": false}),
            ),
            ev(
                11,
                "r1",
                "o",
                "tool-error",
                json!({"toolCallId": "tc2", "error": "denied"}),
            ),
            ev(12, "r1", "o", "run-finish", json!({"status": "completed"})),
            ev(
                13,
                "r2",
                "o2",
                "text-delta",
                json!({"text": "a run whose start is not here"}),
            ),
        ];
        let traces = run_traces(&events, None);
        assert_eq!(traces.len(), 1);
        let t = &traces[0];
        let shape: Vec<(&str, Option<&str>)> = t
            .spans
            .iter()
            .map(|s| (s.name.as_str(), s.parent.as_deref()))
            .collect();
        assert_eq!(
            shape,
            vec![
                ("invoke_agent orchestrator", None),
                ("chat demo", Some("agent:o")),
                ("execute_tool delegate", Some("agent:o")),
                ("invoke_agent builder", Some("tool:tc1")),
                ("chat demo", Some("agent:s")),
                ("execute_tool delete-workflow", Some("agent:o")),
            ]
        );
        let root = &t.spans[0];
        assert_eq!((root.start_ms, root.end_ms), (1_010, Some(1_120)));
        assert_eq!(
            root.attribute("gen_ai.request.model"),
            Some(&AttrValue::Str("demo".into()))
        );
        // The sub-agent, spawned after the first model call, is named by the next one.
        assert_eq!(
            t.spans[3].attribute("gen_ai.request.model"),
            Some(&AttrValue::Str("demo".into()))
        );
        let chat = &t.spans[1];
        assert_eq!((chat.start_ms, chat.end_ms), (1_005, Some(1_020)));
        assert_eq!(
            chat.attribute("gen_ai.usage.output_tokens"),
            Some(&AttrValue::Int(7))
        );
        assert_eq!(
            chat.attribute("gen_ai.response.time_to_first_chunk"),
            Some(&AttrValue::Float(0.003))
        );
        // Without a recorded start, the call is a point at its end.
        assert_eq!(t.spans[4].start_ms, t.spans[4].end_ms.unwrap());
        let denied = &t.spans[5];
        assert_eq!(denied.error_type.as_deref(), Some(genai::TOOL_ERROR));
        let names: Vec<_> = denied.events.iter().map(|e| e.name).collect();
        assert_eq!(
            names,
            vec![genai::CONFIRMATION_REQUESTED, genai::CONFIRMATION_ANSWERED]
        );
        assert!(t
            .spans
            .iter()
            .all(|s| s.attribute("gen_ai.conversation.id") == Some(&AttrValue::Str("t1".into()))));
        assert_eq!(run_traces(&events, Some("r1")), traces);
        assert!(run_traces(&events, Some("r9")).is_empty());
    }

    #[test]
    fn a_model_call_names_the_bare_model_with_its_provider_apart() {
        let events = vec![
            ev(1, "r1", "o", "run-start", json!({"messageId": "m1"})),
            ev(
                2,
                "r1",
                "o",
                "llm-usage",
                json!({"model": "openai/gpt-4o", "inputTokens": 1, "outputTokens": 2, "provider": "openai"}),
            ),
            ev(3, "r1", "o", "run-finish", json!({"status": "completed"})),
        ];
        let t = &run_traces(&events, None)[0];
        let (agent, chat) = (&t.spans[0], &t.spans[1]);
        assert_eq!(chat.name, "chat gpt-4o");
        let str = |v: &str| Some(AttrValue::Str(v.into()));
        assert_eq!(
            chat.attribute("gen_ai.request.model").cloned(),
            str("gpt-4o")
        );
        assert_eq!(
            chat.attribute("gen_ai.provider.name").cloned(),
            str("openai")
        );
        assert_eq!(
            agent.attribute("gen_ai.request.model").cloned(),
            str("gpt-4o")
        );
    }
}
