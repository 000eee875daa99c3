//! The `RunAgentInput` an upstream gets: the thread's conversation rebuilt from the log (so a
//! client sends only its new message, and the upstream needs no memory of its own), with the
//! client's tools, state, context and forwarded properties as the client sent them.

use serde_json::{json, Value};
use threadstream_domain::event::UserMessage;
use threadstream_domain::StoredEvent;

use super::ClientInput;
use crate::provider::{ChatMessage, ToolOutcome};
use crate::replay;

/// The body of one upstream request: `threadId`, `runId` (the upstream run's id), `state`,
/// `messages`, `tools`, `context`, `forwardedProps`.
pub fn run_agent_input(
    thread_id: &str,
    upstream_run_id: &str,
    state: &Value,
    messages: Vec<Value>,
    client: &ClientInput,
) -> Value {
    json!({
        "threadId": thread_id,
        "runId": upstream_run_id,
        "state": state,
        "messages": messages,
        "tools": client.tools,
        "context": client.context,
        "forwardedProps": client.forwarded_props,
    })
}

/// The conversation as AG-UI messages: every earlier run's user message and answer, then this
/// run's user message and what its orchestrator has recorded so far (text, tool calls and
/// their results: a call the client answered comes back as its tool message).
pub fn messages(events: &[StoredEvent], run_id: &str, orchestrator: &str) -> Vec<Value> {
    let mut chat = replay::thread_history(events, run_id);
    if let Some(m) = events
        .iter()
        .find(|e| e.run_id == run_id && e.event_type == "user-message")
        .and_then(|e| serde_json::from_str::<UserMessage>(&e.payload).ok())
    {
        chat.push(ChatMessage::User { text: m.text });
    }
    chat.extend(replay::agent_turns(events, run_id, orchestrator).messages);
    to_agui(&chat)
}

/// [`ChatMessage`]s as AG-UI messages, with ids `m1`, `m2`, … in order.
pub fn to_agui(chat: &[ChatMessage]) -> Vec<Value> {
    chat.iter()
        .enumerate()
        .map(|(i, m)| {
            let id = format!("m{}", i + 1);
            match m {
                ChatMessage::User { text } => json!({"id": id, "role": "user", "content": text}),
                ChatMessage::Assistant {
                    text, tool_calls, ..
                } => {
                    let mut v = json!({"id": id, "role": "assistant"});
                    if !text.is_empty() {
                        v["content"] = json!(text);
                    }
                    if !tool_calls.is_empty() {
                        v["toolCalls"] = tool_calls
                            .iter()
                            .map(|c| {
                                json!({
                                    "id": c.id,
                                    "type": "function",
                                    "function": {
                                        "name": c.name,
                                        "arguments": Value::Object(c.args.clone()).to_string(),
                                    },
                                })
                            })
                            .collect();
                    }
                    v
                }
                ChatMessage::Tool {
                    call_id, outcome, ..
                } => match outcome {
                    ToolOutcome::Ok(Value::String(s)) => {
                        json!({"id": id, "role": "tool", "toolCallId": call_id, "content": s})
                    }
                    ToolOutcome::Ok(v) => json!({
                        "id": id, "role": "tool", "toolCallId": call_id, "content": v.to_string(),
                    }),
                    ToolOutcome::Err(e) => json!({
                        "id": id, "role": "tool", "toolCallId": call_id, "content": e, "error": e,
                    }),
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCallRequest;

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
        ];
        assert_eq!(
            to_agui(&chat),
            vec![
                json!({"id": "m1", "role": "user", "content": "hi"}),
                json!({"id": "m2", "role": "assistant", "content": "let me check", "toolCalls": [
                    {"id": "c1", "type": "function", "function": {"name": "confirm", "arguments": "{\"q\":1}"}}
                ]}),
                json!({"id": "m3", "role": "tool", "toolCallId": "c1", "content": "yes"}),
                json!({"id": "m4", "role": "tool", "toolCallId": "c2", "content": "denied", "error": "denied"}),
            ]
        );
    }
}
