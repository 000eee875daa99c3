//! [`StoredEvent`]: an event as the log holds it, with its global position.

use crate::error::DecodeError;
use crate::event::{AgentEvent, EventBody, ForkOf};

/// One row of the log. `payload` stays JSON text so readers that only forward it (SSE) never
/// re-serialize; [`StoredEvent::decode`] gives the typed event.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Global position in commit order; the SSE `id:`.
    pub id: i64,
    pub thread_id: String,
    /// 1.. per thread, contiguous.
    pub seq: i64,
    pub run_id: String,
    pub agent_id: String,
    pub event_type: String,
    pub payload: String,
    /// Epoch milliseconds.
    pub ts: i64,
    pub response_id: Option<String>,
    pub user_id: Option<String>,
}

impl StoredEvent {
    /// What this event, a log stream's first, says the stream reads through: a fork's
    /// `thread-created` with `forkOf`. A fork point at or above the event's own id is not
    /// honoured (no valid log has one), so following sources always goes down in id and ends.
    pub fn fork_of(&self) -> Option<ForkOf> {
        if self.event_type != "thread-created" || !self.payload.contains("forkOf") {
            return None;
        }
        match self.decode().ok()?.body {
            EventBody::ThreadCreated(c) => c.fork_of.filter(|f| f.through_event_id < self.id),
            _ => None,
        }
    }

    /// Builds the row for `event` at the given position.
    pub fn from_event(id: i64, thread_id: &str, seq: i64, ts: i64, event: &AgentEvent) -> Self {
        StoredEvent {
            id,
            thread_id: thread_id.to_string(),
            seq,
            run_id: event.run_id.clone(),
            agent_id: event.agent_id.clone(),
            event_type: event.body.event_type().to_string(),
            payload: event.body.payload_json(),
            ts,
            response_id: event.response_id.clone(),
            user_id: event.user_id.clone(),
        }
    }

    /// The typed event, with `ts` set.
    pub fn decode(&self) -> Result<AgentEvent, DecodeError> {
        Ok(AgentEvent {
            run_id: self.run_id.clone(),
            agent_id: self.agent_id.clone(),
            body: EventBody::from_json(&self.event_type, &self.payload)?,
            user_id: self.user_id.clone(),
            response_id: self.response_id.clone(),
            ts: Some(self.ts),
        })
    }

    /// Whether the n8n stream carries this event.
    pub fn is_n8n(&self) -> bool {
        crate::event::is_n8n_type(&self.event_type)
    }

    /// The event as n8n's JSON envelope, written straight from the stored parts:
    /// `{type, runId, agentId, payload, userId?, responseId?, ts}`.
    pub fn envelope_json(&self) -> String {
        let mut out = String::with_capacity(self.payload.len() + 96);
        self.write_envelope_json(&mut out);
        out
    }

    /// Appends the event's SSE frame on the n8n stream to `out`: `id: <id>`, `data: <envelope>`,
    /// blank line. The one definition of that frame: the server's streams, their hot tails and
    /// the audit replay all write it here.
    pub fn write_n8n_frame(&self, out: &mut String) {
        out.push_str("id: ");
        out.push_str(&self.id.to_string());
        out.push_str("\ndata: ");
        self.write_envelope_json(out);
        out.push_str("\n\n");
    }

    /// Appends [`StoredEvent::envelope_json`] to `out`.
    pub fn write_envelope_json(&self, out: &mut String) {
        out.push_str("{\"type\":");
        push_json_str(out, &self.event_type);
        out.push_str(",\"runId\":");
        push_json_str(out, &self.run_id);
        out.push_str(",\"agentId\":");
        push_json_str(out, &self.agent_id);
        out.push_str(",\"payload\":");
        out.push_str(&self.wire_payload());
        if let Some(u) = &self.user_id {
            out.push_str(",\"userId\":");
            push_json_str(out, u);
        }
        if let Some(r) = &self.response_id {
            out.push_str(",\"responseId\":");
            push_json_str(out, r);
        }
        out.push_str(",\"ts\":");
        out.push_str(&self.ts.to_string());
        out.push('}');
    }
}

fn push_json_str(out: &mut String, s: &str) {
    // serde_json's escaping, without an intermediate Value.
    out.push_str(&serde_json::to_string(s).expect("strings serialize"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::*;

    #[test]
    fn envelope_json_matches_serde_envelope() {
        let mut e = AgentEvent::new(
            "r\"1",
            "a1",
            EventBody::TextDelta(TextDelta {
                text: "hé\n".into(),
            }),
        )
        .with_response("resp");
        let row = StoredEvent::from_event(7, "t", 3, 1234, &e);
        e.ts = Some(1234);
        let a: serde_json::Value = serde_json::from_str(&row.envelope_json()).unwrap();
        assert_eq!(a, serde_json::to_value(&e).unwrap());
        assert_eq!(row.decode().unwrap(), e);
    }
}
