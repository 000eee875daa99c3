//! The message history of one thread: what `GET /threads/:id/messages` restores a session from.
//!
//! [`ThreadHistory`] owns the thread's conversation: one user message per `user-message` event
//! and one assistant message per run (opened by `run-start`), whose agent tree is the n8n reducer
//! ([`AgentRunState`]) folded over that run's events. It renders as n8n's `InstanceAiMessage[]`
//! (`@n8n/api-types` 1.25.0 `instance-ai.schema.d.ts`); the optional `runIds` and `attachments`
//! of that type are never produced.
//!
//! `last_id` is the id of the last event folded into the doc, decodable or not, so
//! `nextEventId = last_id + 1` covers exactly what the snapshot shows: a client that restores the
//! snapshot and resumes SSE after `nextEventId - 1` neither misses nor repeats an event.

use serde::{Deserialize, Serialize};
use threadstream_domain::event::{AgentEvent, EventBody};
use threadstream_domain::StoredEvent;

use crate::agent_tree::{AgentNode, AgentRunState};
use crate::time::iso_millis;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One message as stored in the doc. Assistant text and reasoning are not copied out of the run
/// state: they are read from it when rendering, so there is one source for them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryMessage {
    pub id: String,
    pub role: Role,
    /// Epoch ms of the event that created the message.
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_group_id: Option<String>,
    /// The user's text; empty for assistant messages.
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub is_streaming: bool,
    /// The reducer state of the assistant message's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<AgentRunState>,
}

/// The history read model's document for one thread.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadHistory {
    /// Id of the last event folded (0 before any).
    pub last_id: i64,
    pub messages: Vec<HistoryMessage>,
}

/// `InstanceAiMessage`, as rendered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceAiMessage {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_group_id: Option<String>,
    pub role: Role,
    /// ISO 8601 with milliseconds, UTC.
    pub created_at: String,
    pub content: String,
    pub reasoning: String,
    pub is_streaming: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_tree: Option<AgentNode>,
}

impl ThreadHistory {
    /// The `nextEventId` of the messages response: the first id the snapshot does not cover.
    pub fn next_event_id(&self) -> i64 {
        self.last_id.saturating_add(1)
    }

    /// Folds one stored event. Events at or below `last_id` were already folded and are skipped,
    /// so replaying a batch is harmless; undecodable events only advance `last_id`.
    pub fn apply(&mut self, event: &StoredEvent) {
        if self.last_id > 0 && event.id <= self.last_id {
            return;
        }
        self.last_id = event.id;
        if let Ok(decoded) = event.decode() {
            self.apply_event(&decoded, event.ts);
        }
    }

    fn apply_event(&mut self, event: &AgentEvent, ts: i64) {
        match &event.body {
            EventBody::UserMessage(p) => self.messages.push(HistoryMessage {
                id: p.message_id.clone(),
                role: Role::User,
                created_at: ts,
                run_id: None,
                message_group_id: None,
                text: p.text.clone(),
                is_streaming: false,
                run: None,
            }),
            EventBody::RunStart(p) => {
                // A repeated run-start of a known run folds into its message (the reducer
                // re-activates the tree); otherwise the run gets a new assistant message.
                if let Some(msg) = self.run_message(&event.run_id) {
                    msg.is_streaming = true;
                    if let Some(run) = msg.run.as_mut() {
                        run.reduce(event);
                    }
                    return;
                }
                let mut run = AgentRunState::new(&event.agent_id);
                run.reduce(event);
                self.messages.push(HistoryMessage {
                    id: event.run_id.clone(),
                    role: Role::Assistant,
                    created_at: ts,
                    run_id: Some(event.run_id.clone()),
                    message_group_id: p.message_group_id.clone(),
                    text: String::new(),
                    is_streaming: true,
                    run: Some(run),
                });
            }
            body if body.is_n8n() => {
                // Events of a run never started here have no message to land in.
                if let Some(msg) = self.run_message(&event.run_id) {
                    if let EventBody::RunFinish(_) = body {
                        msg.is_streaming = false;
                    }
                    if let Some(run) = msg.run.as_mut() {
                        run.reduce(event);
                    }
                }
            }
            _ => {}
        }
    }

    /// The assistant message of `run_id`; searched from the end, where the live run is.
    fn run_message(&mut self, run_id: &str) -> Option<&mut HistoryMessage> {
        self.messages
            .iter_mut()
            .rev()
            .find(|m| m.role == Role::Assistant && m.run_id.as_deref() == Some(run_id))
    }

    /// The messages as n8n's `InstanceAiMessage[]`.
    pub fn messages(&self) -> Vec<InstanceAiMessage> {
        self.messages
            .iter()
            .map(|m| {
                let root = m.run.as_ref().and_then(AgentRunState::root);
                InstanceAiMessage {
                    id: m.id.clone(),
                    run_id: m.run_id.clone(),
                    message_group_id: m.message_group_id.clone(),
                    role: m.role,
                    created_at: iso_millis(m.created_at),
                    content: match m.role {
                        Role::User => m.text.clone(),
                        Role::Assistant => root.map(|r| r.text_content.clone()).unwrap_or_default(),
                    },
                    reasoning: root.map(|r| r.reasoning.clone()).unwrap_or_default(),
                    is_streaming: m.is_streaming,
                    agent_tree: m.run.as_ref().map(AgentRunState::to_agent_tree),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Log;
    use serde_json::json;

    #[test]
    fn user_and_assistant_messages_with_next_event_id() {
        let mut log = Log::new("t1");
        log.internal("thread-created", json!({"owner":"u1"}));
        log.start_run("r1", "o", "m1", "Build me a workflow", Some("g1"));
        log.n8n("r1", "o", "reasoning-delta", json!({"text":"thinking"}));
        log.n8n("r1", "o", "text-delta", json!({"text":"Sure"}));
        let mut doc = ThreadHistory::default();
        for e in &log.events {
            doc.apply(e);
        }
        assert_eq!(doc.last_id, log.events.last().unwrap().id);
        assert_eq!(doc.next_event_id(), doc.last_id + 1);

        let v = serde_json::to_value(doc.messages()).unwrap();
        assert_eq!(v[0]["id"], "m1");
        assert_eq!(v[0]["role"], "user");
        assert_eq!(v[0]["content"], "Build me a workflow");
        assert_eq!(v[0]["isStreaming"], false);
        assert!(v[0].get("agentTree").is_none() && v[0].get("runId").is_none());
        assert_eq!(v[1]["id"], "r1");
        assert_eq!(v[1]["runId"], "r1");
        assert_eq!(v[1]["messageGroupId"], "g1");
        assert_eq!(v[1]["role"], "assistant");
        assert_eq!(v[1]["content"], "Sure");
        assert_eq!(v[1]["reasoning"], "thinking");
        assert_eq!(v[1]["isStreaming"], true);
        assert_eq!(v[1]["agentTree"]["agentId"], "o");
        assert_eq!(v[1]["createdAt"], iso_millis(log.events[2].ts));

        log.n8n("r1", "o", "run-finish", json!({"status":"completed"}));
        doc.apply(log.events.last().unwrap());
        let v = serde_json::to_value(doc.messages()).unwrap();
        assert_eq!(v[1]["isStreaming"], false);
        assert_eq!(v[1]["agentTree"]["status"], "completed");
        assert_eq!(doc.next_event_id(), log.events.last().unwrap().id + 1);
    }

    #[test]
    fn undecodable_and_replayed_events_only_move_the_checkpoint() {
        let mut log = Log::new("t1");
        log.start_run("r1", "o", "m1", "hi", None);
        log.n8n("r1", "o", "text-delta", json!({"text":"a"}));
        let mut doc = ThreadHistory::default();
        for e in &log.events {
            doc.apply(e);
        }
        let before = doc.clone();
        // Replaying an already-folded event changes nothing.
        doc.apply(&log.events[2]);
        assert_eq!(doc, before);
        // Garbage advances last_id only.
        let mut bad = log.events[2].clone();
        bad.id = 99;
        bad.payload = "{not json".into();
        doc.apply(&bad);
        bad.id = 100;
        bad.event_type = "no-such-type".into();
        doc.apply(&bad);
        assert_eq!(doc.last_id, 100);
        assert_eq!(doc.messages, before.messages);
    }

    #[test]
    fn events_of_unknown_runs_are_ignored_and_second_run_gets_its_own_message() {
        let mut log = Log::new("t1");
        log.n8n("ghost", "o", "text-delta", json!({"text":"lost"}));
        log.start_run("r1", "o", "m1", "one", None);
        log.n8n("r1", "o", "text-delta", json!({"text":"first"}));
        log.n8n("r1", "o", "run-finish", json!({"status":"completed"}));
        log.start_run("r2", "o", "m2", "two", None);
        log.n8n("r2", "o", "text-delta", json!({"text":"second"}));
        let mut doc = ThreadHistory::default();
        for e in &log.events {
            doc.apply(e);
        }
        let msgs = doc.messages();
        let contents: Vec<_> = msgs.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents, ["one", "first", "two", "second"]);
        assert!(!msgs[1].is_streaming && msgs[3].is_streaming);
    }
}
