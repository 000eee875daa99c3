//! The join prelude: AG-UI has no resume, so a client joining mid-run is first given what it
//! missed (the open run, the settled messages, the state, and everything still open) before the
//! tail.

use std::collections::BTreeSet;

use super::frames::call_message_id;
use super::state::Stream;
use super::AgUiRenderer;
use crate::render::schemas::agui::{AgUiEventBody as Body, AgUiFrame, AgUiMessage};
use crate::render::Frame;

impl AgUiRenderer {
    /// What a client joining after the events fed so far needs before the tail: empty when no
    /// run is open (the tail's next `RUN_STARTED` opens one). The last frame carries `cursor`.
    pub fn join_prelude(&self, cursor: i64, ts: i64) -> Vec<Frame> {
        let Some(run) = &self.run else {
            return Vec::new();
        };
        let mut out = Vec::new();
        out.push(self.frame(&run.run_id, ts, Body::RunStarted {}));
        let hidden: BTreeSet<String> = self
            .pending_calls
            .iter()
            .map(|id| call_message_id(id))
            .collect();
        let messages: Vec<&AgUiMessage> = self
            .messages
            .iter()
            .filter(|m| !hidden.contains(m.id()))
            .collect();
        // Conversation-wide: no `threadId` or `runId`.
        out.push(Frame::typed(&AgUiFrame {
            body: Body::MessagesSnapshot { messages },
            thread_id: None,
            run_id: None,
            subagent_run_id: None,
            timestamp: ts,
        }));
        out.push(self.state_snapshot(&run.run_id, ts));
        for agent in &run.subagents {
            out.push(self.subagent_started(&run.run_id, agent, ts));
        }
        for (step, owner) in run.steps.values() {
            out.push(self.attributed(
                &run.run_id,
                ts,
                owner.as_deref(),
                Body::StepStarted { step_name: step },
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
                    out.push(self.attributed(&run.run_id, ts, sub, kind.content(&m.id, &m.text)));
                }
            }
        }
        if let Some(last) = out.last_mut() {
            last.id = Some(cursor.to_string());
        }
        out
    }
}
