//! Conversations rebuilt from the log.
//!
//! The model's view of a thread is never kept in memory between runs: before each run the
//! runtime reads the thread's events and rebuilds, for every earlier run, the user's message and
//! the orchestrator's turns — its text, its tool calls with their arguments, and each call's
//! result or error — in the order they were stored. The same rebuild of one agent's events
//! lets a run that was waiting on a confirmation continue after a restart.
//!
//! A turn's tool calls are recorded one by one as they run, so a model turn of text + two calls
//! comes back as `assistant(text, call 1)`, `tool(1)`, `assistant(call 2)`, `tool(2)`: the same
//! facts, in an order both providers accept.

use serde_json::Value;
use threadstream_domain::event::{
    ConfirmationAnswered, ConfirmationRequest, TextDelta, ToolCall, ToolError, ToolResult,
    UserMessage,
};
use threadstream_domain::StoredEvent;

use crate::control::Answer;
use crate::provider::{ChatMessage, ToolCallRequest, ToolOutcome};

/// Summaries are stored as `conversation-summary` events (internal, never on the n8n stream).
pub const SUMMARY_EVENT: &str = "conversation-summary";

/// A tool call that was recorded but has no result yet.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenCall {
    /// The log's id (`tc-…`), also used as the call id the model sees.
    pub tool_call_id: String,
    pub call: ToolCallRequest,
    /// The call's confirmation request, if one was stored.
    pub request: Option<StoredRequest>,
}

/// A stored confirmation request and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRequest {
    pub request_id: String,
    /// When it was stored (epoch ms): the timeout counts from here, across restarts.
    pub ts: i64,
    pub answer: Option<Answer>,
}

/// One agent's turns in one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentTurns {
    pub messages: Vec<ChatMessage>,
    /// The call the agent was in the middle of (tools run one at a time: at most one).
    pub open: Option<OpenCall>,
}

#[derive(Default)]
struct Builder {
    messages: Vec<ChatMessage>,
    /// Index of the assistant message that calls and text are added to, until a result.
    current: Option<usize>,
    open: Vec<OpenCall>,
}

impl Builder {
    fn assistant(&mut self) -> &mut ChatMessage {
        let i = match self.current {
            Some(i) => i,
            None => {
                self.messages.push(ChatMessage::Assistant {
                    text: String::new(),
                    reasoning: String::new(),
                    tool_calls: Vec::new(),
                    provider_blocks: Vec::new(),
                });
                let i = self.messages.len() - 1;
                self.current = Some(i);
                i
            }
        };
        &mut self.messages[i]
    }

    fn apply(&mut self, e: &StoredEvent) {
        match e.event_type.as_str() {
            "text-delta" => {
                if let Ok(d) = serde_json::from_str::<TextDelta>(&e.payload) {
                    if let ChatMessage::Assistant { text, .. } = self.assistant() {
                        text.push_str(&d.text);
                    }
                }
            }
            "tool-call" => {
                if let Ok(c) = serde_json::from_str::<ToolCall>(&e.payload) {
                    let call = ToolCallRequest {
                        id: c.tool_call_id.clone(),
                        name: c.tool_name,
                        args: c.args,
                    };
                    if let ChatMessage::Assistant { tool_calls, .. } = self.assistant() {
                        tool_calls.push(call.clone());
                    }
                    self.open.push(OpenCall {
                        tool_call_id: c.tool_call_id,
                        call,
                        request: None,
                    });
                }
            }
            "tool-result" | "tool-error" => {
                let (id, outcome) = if e.event_type == "tool-result" {
                    match serde_json::from_str::<ToolResult>(&e.payload) {
                        Ok(r) => (r.tool_call_id, ToolOutcome::Ok(r.result)),
                        Err(_) => return,
                    }
                } else {
                    match serde_json::from_str::<ToolError>(&e.payload) {
                        Ok(r) => (r.tool_call_id, ToolOutcome::Err(r.error)),
                        Err(_) => return,
                    }
                };
                let Some(pos) = self.open.iter().position(|o| o.tool_call_id == id) else {
                    return;
                };
                let open = self.open.remove(pos);
                self.messages.push(ChatMessage::Tool {
                    call_id: id,
                    tool_name: open.call.name,
                    outcome,
                });
                self.current = None;
            }
            "confirmation-request" => {
                if let Ok(r) = serde_json::from_str::<ConfirmationRequest>(&e.payload) {
                    if let Some(o) = self
                        .open
                        .iter_mut()
                        .find(|o| o.tool_call_id == r.tool_call_id)
                    {
                        o.request = Some(StoredRequest {
                            request_id: r.request_id,
                            ts: e.ts,
                            answer: None,
                        });
                    }
                }
            }
            _ => {}
        }
    }

    fn answer(&mut self, a: &ConfirmationAnswered) {
        for o in &mut self.open {
            if let Some(r) = o.request.as_mut().filter(|r| r.request_id == a.request_id) {
                r.answer = Some(Answer {
                    approved: a.approved,
                    user_input: a.user_input.clone(),
                    answers: a.answers.clone(),
                });
            }
        }
    }

    /// Closes calls that never got a result (a run that ended without settling them).
    fn close_open(&mut self) {
        for o in std::mem::take(&mut self.open) {
            self.messages.push(ChatMessage::Tool {
                call_id: o.tool_call_id,
                tool_name: o.call.name,
                outcome: ToolOutcome::Err("the tool call never finished".into()),
            });
        }
    }
}

/// The turns of `agent_id` in run `run_id`. Confirmation answers are matched to the open
/// call's request whatever agent they are attributed to.
pub fn agent_turns(events: &[StoredEvent], run_id: &str, agent_id: &str) -> AgentTurns {
    let mut b = Builder::default();
    for e in events.iter().filter(|e| e.run_id == run_id) {
        if e.event_type == "confirmation-answered" {
            if let Ok(a) = serde_json::from_str::<ConfirmationAnswered>(&e.payload) {
                b.answer(&a);
            }
        } else if e.agent_id == agent_id {
            b.apply(e);
        }
    }
    let open = b.open.pop();
    b.close_open();
    AgentTurns {
        messages: b.messages,
        open,
    }
}

/// The conversation of the thread's runs other than `current_run`: each user message and the
/// orchestrator's turns. When a `conversation-summary` is stored, it replaces everything before
/// the run it was written in (the summary is the first message, as a user message).
pub fn thread_history(events: &[StoredEvent], current_run: &str) -> Vec<ChatMessage> {
    // Runs in order, each with its orchestrator.
    let mut runs: Vec<(String, String)> = Vec::new();
    let mut summary: Option<(String, usize)> = None;
    for e in events {
        match e.event_type.as_str() {
            "run-start" if e.run_id != current_run => {
                runs.push((e.run_id.clone(), e.agent_id.clone()))
            }
            t if t == SUMMARY_EVENT => {
                if let Ok(v) = serde_json::from_str::<Value>(&e.payload) {
                    if let Some(text) = v.get("summary").and_then(Value::as_str) {
                        // Covers every run that started before it (the run it was written in
                        // is the one after the last covered).
                        let covered =
                            runs.len() - usize::from(runs.last().is_some_and(|r| r.0 == e.run_id));
                        summary = Some((text.to_string(), covered));
                    }
                }
            }
            _ => {}
        }
    }
    let mut messages = Vec::new();
    let skip = match &summary {
        Some((text, covered)) => {
            messages.extend(summary_turns(text));
            *covered
        }
        None => 0,
    };
    for (run_id, orchestrator) in runs.iter().skip(skip) {
        let text = events
            .iter()
            .find(|e| &e.run_id == run_id && e.event_type == "user-message")
            .and_then(|e| serde_json::from_str::<UserMessage>(&e.payload).ok())
            .map(|m| m.text)
            .unwrap_or_default();
        messages.push(ChatMessage::User { text });
        let mut b = Builder::default();
        for e in events
            .iter()
            .filter(|e| &e.run_id == run_id && &e.agent_id == orchestrator)
        {
            b.apply(e);
        }
        b.close_open();
        messages.extend(b.messages);
    }
    messages
}

/// How a stored summary is shown to the model.
pub fn summary_message(summary: &str) -> String {
    format!(
        "<conversation-summary>\n{summary}\n</conversation-summary>\n\nThe conversation so far \
         is summarized above; earlier messages are not shown."
    )
}

/// The two turns a conversation starts with once `summary` replaces its earlier turns: the
/// summary as the user's message, and the assistant's acknowledgement.
pub fn summary_turns(summary: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::User {
            text: summary_message(summary),
        },
        ChatMessage::Assistant {
            text: "Understood; I will continue from this summary.".into(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
            provider_blocks: Vec::new(),
        },
    ]
}

/// A rough token count of messages (4 characters a token), for the summary budget.
pub fn estimate_tokens(messages: &[ChatMessage]) -> usize {
    let chars: usize = messages
        .iter()
        .map(|m| match m {
            ChatMessage::User { text } => text.len(),
            ChatMessage::Assistant {
                text, tool_calls, ..
            } => {
                text.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + Value::Object(c.args.clone()).to_string().len())
                        .sum::<usize>()
            }
            ChatMessage::Tool { outcome, .. } => match outcome {
                ToolOutcome::Ok(v) => v.to_string().len(),
                ToolOutcome::Err(e) => e.len(),
            },
        })
        .sum();
    chars / 4 + messages.len() * 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(id: i64, run: &str, agent: &str, ty: &str, payload: Value) -> StoredEvent {
        StoredEvent {
            id,
            thread_id: "t".into(),
            seq: id,
            run_id: run.into(),
            agent_id: agent.into(),
            event_type: ty.into(),
            payload: payload.to_string(),
            ts: id * 10,
            response_id: None,
            user_id: None,
        }
    }

    #[test]
    fn history_has_user_text_calls_and_results_of_earlier_runs() {
        let evs = vec![
            row(
                1,
                "r1",
                "o1",
                "user-message",
                json!({"messageId":"m","text":"hi"}),
            ),
            row(2, "r1", "o1", "run-start", json!({"messageId":"m"})),
            row(3, "r1", "o1", "text-delta", json!({"text":"Let me "})),
            row(4, "r1", "o1", "text-delta", json!({"text":"look."})),
            row(
                5,
                "r1",
                "o1",
                "tool-call",
                json!({"toolCallId":"tc-1","toolName":"list-workflows","args":{}}),
            ),
            row(
                6,
                "r1",
                "s1",
                "text-delta",
                json!({"text":"sub-agent text is not history"}),
            ),
            row(
                7,
                "r1",
                "o1",
                "tool-result",
                json!({"toolCallId":"tc-1","result":{"n":1}}),
            ),
            row(
                8,
                "r1",
                "o1",
                "tool-call",
                json!({"toolCallId":"tc-2","toolName":"get-workflow","args":{"workflowId":"x"}}),
            ),
            row(
                9,
                "r1",
                "o1",
                "tool-error",
                json!({"toolCallId":"tc-2","error":"nope"}),
            ),
            row(10, "r1", "o1", "text-delta", json!({"text":"Done."})),
            row(11, "r1", "o1", "run-finish", json!({"status":"completed"})),
            row(
                12,
                "r2",
                "o2",
                "user-message",
                json!({"messageId":"m2","text":"again"}),
            ),
            row(13, "r2", "o2", "run-start", json!({"messageId":"m2"})),
        ];
        let h = thread_history(&evs, "r2");
        // The current run (r2) is not history: the runtime adds its message itself.
        assert_eq!(h.len(), 6, "{h:#?}");
        assert_eq!(h[0], ChatMessage::User { text: "hi".into() });
        let ChatMessage::Assistant {
            text, tool_calls, ..
        } = &h[1]
        else {
            panic!()
        };
        assert_eq!(text, "Let me look.");
        assert_eq!(tool_calls[0].id, "tc-1");
        assert!(
            matches!(&h[2], ChatMessage::Tool { call_id, outcome: ToolOutcome::Ok(_), .. } if call_id == "tc-1")
        );
        let ChatMessage::Assistant { tool_calls, .. } = &h[3] else {
            panic!()
        };
        assert_eq!(tool_calls[0].name, "get-workflow");
        assert!(
            matches!(&h[4], ChatMessage::Tool { outcome: ToolOutcome::Err(e), .. } if e == "nope")
        );
        assert!(matches!(&h[5], ChatMessage::Assistant { text, .. } if text == "Done."));
    }

    #[test]
    fn open_call_with_its_answered_request() {
        let evs = vec![
            row(
                1,
                "r1",
                "o1",
                "tool-call",
                json!({"toolCallId":"tc-1","toolName":"delete-workflow","args":{"workflowId":"w"}}),
            ),
            row(
                2,
                "r1",
                "o1",
                "confirmation-request",
                json!({"requestId":"cr-1","toolCallId":"tc-1","toolName":"delete-workflow","args":{},"severity":"destructive","message":"?"}),
            ),
            row(
                3,
                "r1",
                "o1",
                "confirmation-answered",
                json!({"requestId":"cr-1","approved":true}),
            ),
        ];
        let t = agent_turns(&evs, "r1", "o1");
        assert_eq!(t.messages.len(), 1);
        let open = t.open.unwrap();
        assert_eq!(open.tool_call_id, "tc-1");
        let req = open.request.unwrap();
        assert_eq!(req.ts, 20);
        assert!(req.answer.unwrap().approved);
    }

    #[test]
    fn a_summary_replaces_the_runs_before_it() {
        let evs = vec![
            row(
                1,
                "r1",
                "o1",
                "user-message",
                json!({"messageId":"m","text":"old"}),
            ),
            row(2, "r1", "o1", "run-start", json!({"messageId":"m"})),
            row(3, "r1", "o1", "run-finish", json!({"status":"completed"})),
            row(
                4,
                "r2",
                "o2",
                "user-message",
                json!({"messageId":"m","text":"newer"}),
            ),
            row(5, "r2", "o2", "run-start", json!({"messageId":"m"})),
            row(
                6,
                "r2",
                "o2",
                SUMMARY_EVENT,
                json!({"summary":"S","coveredThroughId":3}),
            ),
            row(7, "r2", "o2", "run-finish", json!({"status":"completed"})),
            row(8, "r3", "o3", "run-start", json!({"messageId":"m"})),
        ];
        let h = thread_history(&evs, "r3");
        assert!(matches!(&h[0], ChatMessage::User { text } if text.contains("S")));
        assert_eq!(
            h[2],
            ChatMessage::User {
                text: "newer".into()
            }
        );
        assert_eq!(h.len(), 3);
    }
}
