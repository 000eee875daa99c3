//! The `RunAgentInput` an upstream gets: the thread's conversation rebuilt from the log (so a
//! client sends only its new message, and the upstream needs no memory of its own), with the
//! client's tools, state, context and forwarded properties as the client sent them.

use serde_json::{json, Value};
use threadstream_domain::event::{AguiEvent, UserMessage};
use threadstream_domain::StoredEvent;

use super::ClientInput;
use crate::provider::{ChatMessage, ToolCallRequest, ToolOutcome};
use crate::replay;

/// The tool name an upstream's interrupt is recorded under: a call of it is the interrupt's
/// question, its result the answer ([`crate::agui::events::UpstreamInterrupt`]). Its id starts
/// with [`INTERRUPT_CALL_PREFIX`].
pub const INTERRUPT_TOOL: &str = "interrupt";

/// The start of every interrupt call's id.
pub const INTERRUPT_CALL_PREFIX: &str = "interrupt-";

/// The answers to the interrupts a run stopped for, sent on the run that continues it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Resume {
    /// `resume` entries (`{interruptId, status, payload}`), for the outcome's interrupts.
    pub entries: Vec<Value>,
    /// `forwardedProps.command.resume`, for an `on_interrupt` custom event.
    pub command: Option<Value>,
}

/// The body of one upstream request: `threadId`, `runId` (the upstream run's id), `state`,
/// `messages`, `tools`, `context`, `forwardedProps`, and `resume` when it answers interrupts.
pub fn run_agent_input(
    thread_id: &str,
    upstream_run_id: &str,
    state: &Value,
    messages: Vec<Value>,
    client: &ClientInput,
    resume: &Resume,
) -> Value {
    let mut body = json!({
        "threadId": thread_id,
        "runId": upstream_run_id,
        "state": state,
        "messages": messages,
        "tools": client.tools,
        "context": client.context,
        "forwardedProps": client.forwarded_props,
    });
    if !resume.entries.is_empty() {
        body["resume"] = Value::Array(resume.entries.clone());
    }
    if let Some(value) = &resume.command {
        let mut props = match &client.forwarded_props {
            Value::Object(o) => o.clone(),
            _ => Default::default(),
        };
        props.insert("command".into(), json!({ "resume": value }));
        body["forwardedProps"] = Value::Object(props);
    }
    body
}

/// The conversation as AG-UI messages: every run's user message and its orchestrator's turns
/// (text, tool calls and their results: a call the client answered comes back as its tool
/// message), this run's so far included, in order.
///
/// Ids are stable from one request to the next, since an upstream may merge the messages it
/// gets into its own by id (LangGraph's checkpoint does): a user message has the id it was
/// stored with, an assistant message the upstream's own id for it when the upstream streamed it
/// ([`upstream_message_ids`]), else `<run>-a<n>`; a tool message is `<call id>-result`.
pub fn messages(events: &[StoredEvent]) -> Vec<Value> {
    let mut out = Vec::new();
    for start in events.iter().filter(|e| e.event_type == "run-start") {
        let run = start.run_id.as_str();
        if let Some(m) = events
            .iter()
            .find(|e| e.run_id == run && e.event_type == "user-message")
            .and_then(|e| serde_json::from_str::<UserMessage>(&e.payload).ok())
        {
            out.push(json!({"id": m.message_id, "role": "user", "content": m.text}));
        }
        let turns = replay::agent_turns(events, run, &start.agent_id).messages;
        let ids = upstream_message_ids(events, run, &start.agent_id);
        out.extend(to_agui(&turns, run, &ids));
    }
    out
}

/// The upstream's ids of `run`'s assistant messages, in order, as [`replay::agent_turns`]
/// splits the agent's turns into messages (a new one at the first text or call after a tool's
/// result): each message's id is the last `TEXT_MESSAGE_START` id, or `TOOL_CALL_START`
/// `parentMessageId`, kept before or in it. `None` where the upstream gave none (or for the
/// built-in agent's runs).
pub fn upstream_message_ids(events: &[StoredEvent], run: &str, agent: &str) -> Vec<Option<String>> {
    let mut ids: Vec<Option<String>> = Vec::new();
    let mut open = false;
    let mut pending: Option<String> = None;
    for e in events
        .iter()
        .filter(|e| e.run_id == run && e.agent_id == agent)
    {
        match e.event_type.as_str() {
            "text-delta" | "tool-call" if !open => {
                ids.push(pending.take());
                open = true;
            }
            "tool-result" | "tool-error" => open = false,
            "agui-event" => {
                let Ok(kept) = serde_json::from_str::<AguiEvent>(&e.payload) else {
                    continue;
                };
                let id = match kept.event.get("type").and_then(Value::as_str) {
                    Some("TEXT_MESSAGE_START") => kept.event.get("messageId"),
                    Some("TOOL_CALL_START") => kept.event.get("parentMessageId"),
                    _ => None,
                };
                let Some(id) = id.and_then(Value::as_str) else {
                    continue;
                };
                match (open, ids.last_mut()) {
                    (true, Some(slot @ None)) => *slot = Some(id.to_string()),
                    (true, _) => {}
                    (false, _) => pending = Some(id.to_string()),
                }
            }
            _ => {}
        }
    }
    ids
}

/// One run's [`ChatMessage`]s as AG-UI messages; `ids` are its assistant messages' upstream ids
/// ([`upstream_message_ids`]).
pub fn to_agui(chat: &[ChatMessage], run: &str, ids: &[Option<String>]) -> Vec<Value> {
    let mut assistant = 0;
    chat.iter()
        .filter_map(|m| match m {
            ChatMessage::User { text } => {
                Some(json!({"id": format!("{run}-u"), "role": "user", "content": text}))
            }
            ChatMessage::Assistant {
                text, tool_calls, ..
            } => {
                let id = ids
                    .get(assistant)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| format!("{run}-a{}", assistant + 1));
                assistant += 1;
                let mut v = json!({"id": id, "role": "assistant"});
                if !text.is_empty() {
                    v["content"] = json!(text);
                }
                // An interrupt's question and answer are ours, not the upstream's: it asked
                // them itself and gets the answer as `resume`.
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .filter(|c| !is_interrupt(&c.id))
                    .map(ToolCallRequest::function_call_json)
                    .collect();
                if !calls.is_empty() {
                    v["toolCalls"] = Value::Array(calls);
                } else if text.is_empty() {
                    return None;
                }
                Some(v)
            }
            ChatMessage::Tool { call_id, .. } if is_interrupt(call_id) => None,
            ChatMessage::Tool {
                call_id, outcome, ..
            } => {
                let id = format!("{call_id}-result");
                Some(match outcome {
                    ToolOutcome::Ok(Value::String(s)) => {
                        json!({"id": id, "role": "tool", "toolCallId": call_id, "content": s})
                    }
                    ToolOutcome::Ok(v) => json!({
                        "id": id, "role": "tool", "toolCallId": call_id, "content": v.to_string(),
                    }),
                    ToolOutcome::Err(e) => json!({
                        "id": id, "role": "tool", "toolCallId": call_id, "content": e, "error": e,
                    }),
                })
            }
        })
        .collect()
}

fn is_interrupt(call_id: &str) -> bool {
    call_id.starts_with(INTERRUPT_CALL_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCallRequest;

    fn stored(id: i64, run: &str, event_type: &str, payload: Value) -> StoredEvent {
        StoredEvent {
            id,
            thread_id: "t".into(),
            seq: id,
            run_id: run.into(),
            agent_id: if event_type == "user-message" {
                "user"
            } else {
                "o"
            }
            .into(),
            event_type: event_type.into(),
            payload: payload.to_string(),
            ts: 0,
            response_id: None,
            user_id: None,
        }
    }

    fn kept(id: i64, event: Value) -> StoredEvent {
        stored(
            id,
            "r",
            "agui-event",
            json!({"agent": "up", "event": event}),
        )
    }

    /// pydantic-ai's shape: an empty text message that parents a tool call, the result, then
    /// the answer in a message of its own; the history sends both back under the upstream's ids.
    #[test]
    fn assistant_messages_keep_the_upstreams_ids() {
        let events = vec![
            stored(1, "r", "run-start", json!({"messageId": "msg_1"})),
            stored(
                2,
                "r",
                "user-message",
                json!({"messageId": "msg_u", "text": "weather?"}),
            ),
            kept(
                3,
                json!({"type": "TEXT_MESSAGE_START", "messageId": "up-A"}),
            ),
            kept(
                4,
                json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "w", "parentMessageId": "up-A"}),
            ),
            stored(
                5,
                "r",
                "tool-call",
                json!({"toolCallId": "c1", "toolName": "w", "args": {}}),
            ),
            stored(
                6,
                "r",
                "tool-result",
                json!({"toolCallId": "c1", "result": "sunny"}),
            ),
            kept(
                7,
                json!({"type": "TEXT_MESSAGE_START", "messageId": "up-B"}),
            ),
            stored(8, "r", "text-delta", json!({"text": "It is sunny."})),
        ];
        assert_eq!(
            upstream_message_ids(&events, "r", "o"),
            vec![Some("up-A".to_string()), Some("up-B".to_string())]
        );
        let ids: Vec<Value> = messages(&events).iter().map(|m| m["id"].clone()).collect();
        assert_eq!(
            ids,
            vec![
                json!("msg_u"),
                json!("up-A"),
                json!("c1-result"),
                json!("up-B")
            ]
        );
    }

    #[test]
    fn an_interrupts_answer_goes_as_resume_and_its_call_is_not_sent() {
        let client = ClientInput {
            tools: vec![],
            state: json!({}),
            context: vec![],
            forwarded_props: json!({"nodeName": "chat"}),
        };
        let resume = Resume {
            entries: vec![json!({"interruptId": "i1", "status": "resolved", "payload": "yes"})],
            command: Some(json!("yes")),
        };
        let body = run_agent_input("t", "r-2", &json!({}), vec![], &client, &resume);
        assert_eq!(body["resume"][0]["interruptId"], "i1");
        assert_eq!(
            body["forwardedProps"],
            json!({"nodeName": "chat", "command": {"resume": "yes"}})
        );
        let plain = run_agent_input("t", "r", &json!({}), vec![], &client, &Resume::default());
        assert!(plain.get("resume").is_none());
        assert_eq!(plain["forwardedProps"], json!({"nodeName": "chat"}));

        let chat = vec![
            ChatMessage::Assistant {
                text: String::new(),
                reasoning: String::new(),
                tool_calls: vec![ToolCallRequest {
                    id: "interrupt-i1".into(),
                    name: INTERRUPT_TOOL.into(),
                    args: Default::default(),
                }],
                provider_blocks: vec![],
            },
            ChatMessage::Tool {
                call_id: "interrupt-i1".into(),
                tool_name: INTERRUPT_TOOL.into(),
                outcome: ToolOutcome::Ok(json!("yes")),
            },
            ChatMessage::Assistant {
                text: "done".into(),
                reasoning: String::new(),
                tool_calls: vec![],
                provider_blocks: vec![],
            },
        ];
        let sent = to_agui(&chat, "r", &[Some("up-1".into()), Some("up-2".into())]);
        assert_eq!(
            sent,
            vec![json!({"id": "up-2", "role": "assistant", "content": "done"})]
        );
    }

    #[test]
    fn messages_take_ag_ui_shapes() {
        let chat = vec![
            ChatMessage::User { text: "hi".into() },
            ChatMessage::Assistant {
                text: "let me check".into(),
                reasoning: String::new(),
                tool_calls: vec![ToolCallRequest {
                    id: "c1".into(),
                    name: "confirm".into(),
                    args: json!({"q": 1}).as_object().unwrap().clone(),
                }],
                provider_blocks: vec![],
            },
            ChatMessage::Tool {
                call_id: "c1".into(),
                tool_name: "confirm".into(),
                outcome: ToolOutcome::Ok(json!("yes")),
            },
            ChatMessage::Tool {
                call_id: "c2".into(),
                tool_name: "x".into(),
                outcome: ToolOutcome::Err("denied".into()),
            },
            ChatMessage::Assistant {
                text: "done".into(),
                reasoning: String::new(),
                tool_calls: vec![],
                provider_blocks: vec![],
            },
        ];
        assert_eq!(
            to_agui(&chat, "r1", &[None, Some("up-1".into())]),
            vec![
                json!({"id": "r1-u", "role": "user", "content": "hi"}),
                json!({"id": "r1-a1", "role": "assistant", "content": "let me check", "toolCalls": [
                    {"id": "c1", "type": "function", "function": {"name": "confirm", "arguments": "{\"q\":1}"}}
                ]}),
                json!({"id": "c1-result", "role": "tool", "toolCallId": "c1", "content": "yes"}),
                json!({"id": "c2-result", "role": "tool", "toolCallId": "c2", "content": "denied", "error": "denied"}),
                json!({"id": "up-1", "role": "assistant", "content": "done"}),
            ]
        );
    }
}
