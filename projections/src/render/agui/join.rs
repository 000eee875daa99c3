//! The join prelude: AG-UI has no resume, so a client joining mid-run is first given what it
//! missed (the open run, the settled messages, the state, and everything still open) before the
//! tail.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::frames::call_message_id;
use super::state::Stream;
use super::AgUiRenderer;
use crate::render::Frame;

impl AgUiRenderer {
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
}
