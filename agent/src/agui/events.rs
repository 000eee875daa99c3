//! An upstream's AG-UI events → this log's events. Pure: [`Mapper::map`] takes one event as the
//! upstream sent it and says what to record, under which agent.
//!
//! - `TEXT_MESSAGE_CONTENT` / `TEXT_MESSAGE_CHUNK` → `text-delta`; `REASONING_MESSAGE_CONTENT`,
//!   `REASONING_MESSAGE_CHUNK` and the older `THINKING_TEXT_MESSAGE_CONTENT` → `reasoning-delta`
//!   (messages are runs of deltas here; `TEXT_MESSAGE_START` is kept as an `agui-event` for its
//!   message id, the other starts and ends carry nothing the log needs).
//! - `TOOL_CALL_START` + `TOOL_CALL_ARGS`… (or `TOOL_CALL_CHUNK`s) + `TOOL_CALL_END` →
//!   one `tool-call` with the arguments parsed (`TOOL_CALL_START` kept too, for its
//!   `parentMessageId`); `TOOL_CALL_RESULT` → `tool-result` (its content
//!   parsed as JSON when it is JSON, else kept as the string). A call the upstream ended its run
//!   without a result for is the client's to run ([`Mapper::unresolved`]).
//! - `STEP_STARTED` / `STEP_FINISHED` → `agent-spawned` / `agent-completed` of a sub-agent
//!   whose role is the step's name (text and calls stay the orchestrator's: they are the
//!   answer, and the next request's history is rebuilt from them).
//! - `RUN_FINISHED` ends the run; `RUN_ERROR` ends it with the upstream's message.
//! - everything else (`RUN_STARTED`, `STATE_SNAPSHOT`, `STATE_DELTA`, `MESSAGES_SNAPSHOT`,
//!   `CUSTOM`, `RAW`, activity events, types this server does not know) → `agui-event`, kept as
//!   sent.

use std::collections::HashMap;

use serde_json::{Map, Value};
use threadstream_domain::event::{
    AgentCompleted, AgentSpawned, AguiEvent, EventBody, TextDelta, ToolCall, ToolResult,
};

/// How an upstream's run ended, once it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Finished,
    /// `RUN_ERROR`'s message (and code, when it has one).
    Error(String),
}

/// A tool call the upstream has streamed.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamCall {
    pub id: String,
    pub name: String,
    pub args: Map<String, Value>,
}

/// Something the upstream's run stopped for and waits to be answered on its next run: an
/// AG-UI interrupt (`RUN_FINISHED`'s `outcome: {type: "interrupt", interrupts}`, answered by the
/// next input's `resume`), or LangGraph's `on_interrupt` custom event (ag-ui-langgraph's default,
/// answered by `forwardedProps.command.resume`).
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamInterrupt {
    /// The interrupt's id; `None` for an `on_interrupt` custom event, which has none.
    pub id: Option<String>,
    /// What to ask: the interrupt's `message` (else its `reason`), or the custom event's value.
    pub message: String,
    /// The interrupt as the upstream sent it (an interrupt object, or the custom event's value).
    pub value: Value,
}

/// The custom event ag-ui-langgraph sends for a LangGraph `interrupt()`.
const ON_INTERRUPT: &str = "on_interrupt";

/// One upstream run's mapping state.
pub struct Mapper {
    agent: String,
    orchestrator: String,
    /// Calls still streaming their arguments: id → (name, arguments so far).
    streaming: HashMap<String, (String, String)>,
    /// Calls recorded without a result yet, in order.
    open: Vec<UpstreamCall>,
    /// Steps started and not finished: (name, sub-agent id).
    steps: Vec<(String, String)>,
    /// Numbers the steps' sub-agent ids.
    step_ids: Box<dyn FnMut() -> String + Send>,
    ending: Option<Ending>,
    /// The last `STATE_SNAPSHOT`'s state.
    state: Option<Value>,
    /// Interrupts of `RUN_FINISHED`'s outcome, and `on_interrupt` custom events, in order.
    interrupts: Vec<UpstreamInterrupt>,
}

/// What to record: (agent id, event).
pub type Record = (String, EventBody);

impl Mapper {
    /// `agent`: the upstream's name; `orchestrator`: the run's orchestrator id; `step_ids`
    /// makes each step's sub-agent id.
    pub fn new(
        agent: &str,
        orchestrator: &str,
        step_ids: impl FnMut() -> String + Send + 'static,
    ) -> Self {
        Mapper {
            agent: agent.to_string(),
            orchestrator: orchestrator.to_string(),
            streaming: HashMap::new(),
            open: Vec::new(),
            steps: Vec::new(),
            step_ids: Box::new(step_ids),
            ending: None,
            state: None,
            interrupts: Vec::new(),
        }
    }

    /// How the run ended, once `RUN_FINISHED` or `RUN_ERROR` came.
    pub fn ending(&self) -> Option<&Ending> {
        self.ending.as_ref()
    }

    /// The last state snapshot the upstream sent.
    pub fn state(&self) -> Option<&Value> {
        self.state.as_ref()
    }

    /// Tool calls with no result: after `RUN_FINISHED`, the client's to run.
    pub fn unresolved(&self) -> &[UpstreamCall] {
        &self.open
    }

    /// What the run stopped for, once it finished: the outcome's interrupts when it has any
    /// (an upstream that sends both forms, as ag-ui-langgraph can, is asked once), else the
    /// `on_interrupt` custom events.
    pub fn interrupts(&self) -> Vec<UpstreamInterrupt> {
        let structured: Vec<_> = self
            .interrupts
            .iter()
            .filter(|i| i.id.is_some())
            .cloned()
            .collect();
        if structured.is_empty() {
            self.interrupts.clone()
        } else {
            structured
        }
    }

    /// The steps still open, as `agent-completed` events (the run ended around them).
    pub fn close_steps(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.steps)
            .into_iter()
            .rev()
            .map(|(name, id)| (id, completed(name)))
            .collect()
    }

    /// Maps one event. `Err` names what is wrong with it (the run then ends with an error).
    pub fn map(&mut self, event: Map<String, Value>) -> Result<Vec<Record>, String> {
        if self.ending.is_some() {
            return Err("the agent sent an event after its run ended".into());
        }
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .ok_or("an event without a `type`")?
            .to_string();
        let str_field = |name: &str| -> Result<String, String> {
            event
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("{kind} without `{name}`"))
        };
        let me = self.orchestrator.clone();
        let text =
            |delta: String| vec![(me.clone(), EventBody::TextDelta(TextDelta { text: delta }))];
        let reasoning = |delta: String| {
            vec![(
                me.clone(),
                EventBody::ReasoningDelta(TextDelta { text: delta }),
            )]
        };
        Ok(match kind.as_str() {
            "TEXT_MESSAGE_CONTENT" => text(str_field("delta")?),
            "TEXT_MESSAGE_CHUNK" => match event.get("delta").and_then(Value::as_str) {
                Some(d) if !d.is_empty() => text(d.to_string()),
                _ => vec![],
            },
            "REASONING_MESSAGE_CONTENT" | "THINKING_TEXT_MESSAGE_CONTENT" => {
                reasoning(str_field("delta")?)
            }
            "REASONING_MESSAGE_CHUNK" => match event.get("delta").and_then(Value::as_str) {
                Some(d) if !d.is_empty() => reasoning(d.to_string()),
                _ => vec![],
            },
            // Kept: the upstream's message ids, which the next request's history reuses
            // (`input::messages`), so an upstream that merges messages by id (LangGraph's
            // checkpoint) does not take its own answer for a new message.
            "TEXT_MESSAGE_START" => vec![self.kept(event)],
            "TEXT_MESSAGE_END"
            | "REASONING_START"
            | "REASONING_END"
            | "REASONING_MESSAGE_START"
            | "REASONING_MESSAGE_END"
            | "THINKING_START"
            | "THINKING_END"
            | "THINKING_TEXT_MESSAGE_START"
            | "THINKING_TEXT_MESSAGE_END" => {
                vec![]
            }
            "TOOL_CALL_START" => {
                let id = str_field("toolCallId")?;
                let name = str_field("toolCallName")?;
                self.streaming.insert(id, (name, String::new()));
                // Kept for its `parentMessageId` (see `TEXT_MESSAGE_START`).
                vec![self.kept(event)]
            }
            "TOOL_CALL_ARGS" => {
                let id = str_field("toolCallId")?;
                let delta = str_field("delta")?;
                let (_, args) = self
                    .streaming
                    .get_mut(&id)
                    .ok_or_else(|| format!("TOOL_CALL_ARGS of a call not started: {id}"))?;
                args.push_str(&delta);
                vec![]
            }
            "TOOL_CALL_CHUNK" => {
                // Chunks name the call in the first and may omit it later: the call streaming
                // last is the one continued.
                let id = event.get("toolCallId").and_then(Value::as_str);
                let name = event.get("toolCallName").and_then(Value::as_str);
                let delta = event.get("delta").and_then(Value::as_str).unwrap_or("");
                match (id, name) {
                    (Some(id), Some(name)) if !self.streaming.contains_key(id) => {
                        self.streaming
                            .insert(id.to_string(), (name.to_string(), delta.to_string()));
                    }
                    (Some(id), _) => match self.streaming.get_mut(id) {
                        Some((_, args)) => args.push_str(delta),
                        None => return Err(format!("TOOL_CALL_CHUNK of a call not started: {id}")),
                    },
                    (None, _) if self.streaming.len() == 1 => {
                        if let Some((_, args)) = self.streaming.values_mut().next() {
                            args.push_str(delta);
                        }
                    }
                    (None, _) => return Err("TOOL_CALL_CHUNK without `toolCallId`".into()),
                }
                vec![]
            }
            "TOOL_CALL_END" => {
                let id = str_field("toolCallId")?;
                let (name, args) = self
                    .streaming
                    .remove(&id)
                    .ok_or_else(|| format!("TOOL_CALL_END of a call not started: {id}"))?;
                let args = parse_args(&args).map_err(|e| format!("tool call {id}: {e}"))?;
                self.open.push(UpstreamCall {
                    id: id.clone(),
                    name: name.clone(),
                    args: args.clone(),
                });
                vec![(
                    me,
                    EventBody::ToolCall(ToolCall {
                        tool_call_id: id,
                        tool_name: name,
                        args,
                    }),
                )]
            }
            "TOOL_CALL_RESULT" => {
                let id = str_field("toolCallId")?;
                let content = str_field("content")?;
                let at = self
                    .open
                    .iter()
                    .position(|c| c.id == id)
                    .ok_or_else(|| format!("TOOL_CALL_RESULT of a call not open: {id}"))?;
                self.open.remove(at);
                let result = serde_json::from_str(&content).unwrap_or(Value::String(content));
                vec![(
                    me,
                    EventBody::ToolResult(ToolResult {
                        tool_call_id: id,
                        result,
                    }),
                )]
            }
            "STEP_STARTED" => {
                let name = str_field("stepName")?;
                let id = (self.step_ids)();
                self.steps.push((name.clone(), id.clone()));
                vec![(
                    id,
                    EventBody::AgentSpawned(AgentSpawned::new(me, name, vec![], None)),
                )]
            }
            "STEP_FINISHED" => {
                let name = str_field("stepName")?;
                match self.steps.iter().rposition(|(n, _)| *n == name) {
                    Some(at) => {
                        let (name, id) = self.steps.remove(at);
                        vec![(id, completed(name))]
                    }
                    // A step finished that never started: nothing to close.
                    None => vec![self.kept(event)],
                }
            }
            "RUN_FINISHED" => {
                self.ending = Some(Ending::Finished);
                let outcome = event.get("outcome").and_then(Value::as_object);
                if let Some(outcome) = outcome.filter(|o| o["type"] == "interrupt") {
                    for interrupt in outcome
                        .get("interrupts")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let id = interrupt
                            .get("id")
                            .and_then(Value::as_str)
                            .ok_or("an interrupt without `id`")?;
                        let said = |k: &str| interrupt.get(k).and_then(Value::as_str);
                        // An interrupt about a tool call is that call's question: asked once.
                        if let Some(call) = said("toolCallId") {
                            self.open.retain(|c| c.id != call);
                        }
                        self.interrupts.push(UpstreamInterrupt {
                            id: Some(id.to_string()),
                            message: said("message")
                                .or(said("reason"))
                                .unwrap_or("The agent waits for your answer")
                                .to_string(),
                            value: interrupt.clone(),
                        });
                    }
                }
                vec![self.kept(event)]
            }
            "CUSTOM" if event.get("name").and_then(Value::as_str) == Some(ON_INTERRUPT) => {
                let value = event.get("value").cloned().unwrap_or(Value::Null);
                let message = match &value {
                    Value::String(s) => s.clone(),
                    Value::Object(o) if o.get("message").is_some_and(Value::is_string) => {
                        o["message"].as_str().unwrap_or_default().to_string()
                    }
                    other => other.to_string(),
                };
                self.interrupts.push(UpstreamInterrupt {
                    id: None,
                    message,
                    value,
                });
                vec![self.kept(event)]
            }
            "RUN_ERROR" => {
                let message = event
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the agent failed");
                let message = match event.get("code").and_then(Value::as_str) {
                    Some(code) => format!("{message} ({code})"),
                    None => message.to_string(),
                };
                self.ending = Some(Ending::Error(message));
                vec![self.kept(event)]
            }
            "STATE_SNAPSHOT" => {
                self.state = event.get("snapshot").cloned();
                vec![self.kept(event)]
            }
            _ => vec![self.kept(event)],
        })
    }

    fn kept(&self, event: Map<String, Value>) -> Record {
        (
            self.orchestrator.clone(),
            EventBody::AguiEvent(AguiEvent {
                agent: self.agent.clone(),
                event,
            }),
        )
    }
}

fn completed(role: String) -> EventBody {
    EventBody::AgentCompleted(AgentCompleted {
        role,
        result: String::new(),
        error: None,
    })
}

/// A call's streamed arguments: a JSON object, or nothing (`{}`).
fn parse_args(text: &str) -> Result<Map<String, Value>, String> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("the arguments are not a JSON object".into()),
        Err(e) => Err(format!("the arguments are not JSON ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mapper() -> Mapper {
        let mut n = 0;
        Mapper::new("py", "agent_o", move || {
            n += 1;
            format!("agent-step-{n}")
        })
    }

    fn ev(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn types(records: &[Record]) -> Vec<(&str, &str)> {
        records
            .iter()
            .map(|(a, b)| (a.as_str(), b.event_type()))
            .collect()
    }

    #[test]
    fn text_reasoning_and_a_backend_tool_map_to_the_logs_events() {
        let mut m = mapper();
        let mut all = Vec::new();
        for e in [
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
            json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "x", "delta": "hmm"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "get_weather"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"city\":"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "\"Paris\"}"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "m", "toolCallId": "c1", "content": "Sunny"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m2", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "It is sunny."}),
            json!({"type": "TEXT_MESSAGE_END", "messageId": "m2"}),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}),
        ] {
            all.extend(m.map(ev(e)).unwrap());
        }
        assert_eq!(
            types(&all),
            vec![
                ("agent_o", "agui-event"),
                ("agent_o", "reasoning-delta"),
                ("agent_o", "agui-event"),
                ("agent_o", "tool-call"),
                ("agent_o", "tool-result"),
                ("agent_o", "agui-event"),
                ("agent_o", "text-delta"),
                ("agent_o", "agui-event"),
            ]
        );
        let EventBody::ToolCall(call) = &all[3].1 else {
            panic!()
        };
        assert_eq!(Value::Object(call.args.clone()), json!({"city": "Paris"}));
        let EventBody::ToolResult(r) = &all[4].1 else {
            panic!()
        };
        assert_eq!(r.result, json!("Sunny"));
        assert_eq!(m.ending(), Some(&Ending::Finished));
        assert!(m.unresolved().is_empty());
        assert!(m
            .map(ev(json!({"type": "TEXT_MESSAGE_CONTENT", "delta": "late"})))
            .is_err());
    }

    #[test]
    fn a_call_without_a_result_is_the_clients_and_steps_are_sub_agents() {
        let mut m = mapper();
        let mut all = Vec::new();
        for e in [
            json!({"type": "STEP_STARTED", "stepName": "chat"}),
            json!({"type": "TOOL_CALL_CHUNK", "toolCallId": "c2", "toolCallName": "confirm", "delta": "{\"q\""}),
            json!({"type": "TOOL_CALL_CHUNK", "delta": ":1}"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c2"}),
            json!({"type": "STATE_SNAPSHOT", "snapshot": {"n": 1}}),
            json!({"type": "STEP_STARTED", "stepName": "other"}),
        ] {
            all.extend(m.map(ev(e)).unwrap());
        }
        assert_eq!(
            types(&all),
            vec![
                ("agent-step-1", "agent-spawned"),
                ("agent_o", "tool-call"),
                ("agent_o", "agui-event"),
                ("agent-step-2", "agent-spawned"),
            ]
        );
        assert_eq!(m.state(), Some(&json!({"n": 1})));
        let finished = m
            .map(ev(json!({"type": "STEP_FINISHED", "stepName": "chat"})))
            .unwrap();
        assert_eq!(types(&finished), vec![("agent-step-1", "agent-completed")]);
        assert_eq!(
            types(&m.close_steps()),
            vec![("agent-step-2", "agent-completed")]
        );
        assert_eq!(m.unresolved().len(), 1);
        assert_eq!(m.unresolved()[0].name, "confirm");
        m.map(ev(
            json!({"type": "RUN_ERROR", "message": "boom", "code": "E1"}),
        ))
        .unwrap();
        assert_eq!(m.ending(), Some(&Ending::Error("boom (E1)".into())));
    }

    #[test]
    fn interrupts_come_from_the_outcome_or_else_from_on_interrupt() {
        // LangGraph's legacy form: a custom event, then a plain finish.
        let mut m = mapper();
        m.map(ev(
            json!({"type": "CUSTOM", "name": "on_interrupt", "value": "Go on?"}),
        ))
        .unwrap();
        m.map(ev(
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}),
        ))
        .unwrap();
        assert_eq!(
            m.interrupts(),
            vec![UpstreamInterrupt {
                id: None,
                message: "Go on?".into(),
                value: json!("Go on?"),
            }]
        );
        // Both forms (ag-ui-langgraph with the outcome on): asked once, by the outcome; an
        // interrupt about a call is that call's question, not a frontend tool's.
        let mut m = mapper();
        for e in [
            json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "pay"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}),
            json!({"type": "CUSTOM", "name": "on_interrupt", "value": {"message": "Pay?"}}),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {
                "type": "interrupt",
                "interrupts": [{"id": "i1", "reason": "approval", "toolCallId": "c1"}],
            }}),
        ] {
            m.map(ev(e)).unwrap();
        }
        let got = m.interrupts();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].id.as_deref(), Some("i1"));
        assert_eq!(got[0].message, "approval");
        assert!(m.unresolved().is_empty());
        // An interrupt needs its id.
        let mut m = mapper();
        let e =
            json!({"type": "RUN_FINISHED", "outcome": {"type": "interrupt", "interrupts": [{}]}});
        assert!(m.map(ev(e)).unwrap_err().contains("`id`"));
    }

    #[test]
    fn malformed_events_are_named() {
        let mut m = mapper();
        assert!(m
            .map(ev(json!({"delta": "x"})))
            .unwrap_err()
            .contains("type"));
        assert!(m
            .map(ev(
                json!({"type": "TOOL_CALL_ARGS", "toolCallId": "nope", "delta": "{}"})
            ))
            .unwrap_err()
            .contains("not started"));
        m.map(ev(
            json!({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "t"}),
        ))
        .unwrap();
        m.map(ev(
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "[1]"}),
        ))
        .unwrap();
        assert!(m
            .map(ev(json!({"type": "TOOL_CALL_END", "toolCallId": "c"})))
            .unwrap_err()
            .contains("not a JSON object"));
    }
}
