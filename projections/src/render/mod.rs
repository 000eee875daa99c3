//! Wire renderers: the stored events of a thread rendered as the frames of one client protocol
//! each. Pure (no I/O): every renderer is a state struct fed the thread's events in log order,
//! so the HTTP layer can serve any of them off the same cursor over the log, and a golden test
//! can render a recorded run without a server.
//!
//! - [`agui`]: AG-UI 1.0 (`@ag-ui/core`), with a join prelude for resumed streams.
//! - [`items`]: the items protocol (`item.added` / `content.delta` / …), one stream
//!   per request (run).
//! - [`smith`]: the workflow-builder stream (data-only frames).
//! - [`ui_message`]: the AI SDK's UI message stream (`useChat`), one stream per run.
//! - [`schemas`]: what each of them sends, as types for the OpenAPI document.
//!
//! The n8n rendering needs no state: it is `StoredEvent::write_envelope_json`.

pub mod agui;
pub mod items;
pub mod schemas;
pub mod smith;
pub mod ui_message;
pub mod wire;

/// One SSE frame. `data` is one line of JSON; lines end with LF only (CRLF breaks the AG-UI
/// client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl Frame {
    /// A data-only frame of a typed value (keys sorted, [`wire`]).
    pub fn typed<T: serde::Serialize + ?Sized>(value: &T) -> Self {
        Frame {
            id: None,
            event: None,
            data: wire::to_string(value),
        }
    }

    /// Appends the frame in SSE text form.
    pub fn write_sse(&self, out: &mut String) {
        if let Some(id) = &self.id {
            out.push_str("id: ");
            out.push_str(id);
            out.push('\n');
        }
        if let Some(event) = &self.event {
            out.push_str("event: ");
            out.push_str(event);
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&self.data);
        out.push_str("\n\n");
    }
}

/// Frames in SSE text form.
pub fn to_sse(frames: &[Frame]) -> String {
    let mut out = String::new();
    for f in frames {
        f.write_sse(&mut out);
    }
    out
}

/// A tool's result as text: strings as they are, anything else as compact JSON.
pub(crate) fn result_text(result: &serde_json::Value) -> String {
    match result {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod fixture {
    //! A scripted thread, as the log would hold it, for the renderers' tests.
    use serde_json::{json, Value};
    use threadstream_domain::StoredEvent;

    pub struct Log {
        pub thread: String,
        pub events: Vec<StoredEvent>,
    }

    impl Log {
        pub fn new(thread: &str) -> Self {
            Log {
                thread: thread.into(),
                events: Vec::new(),
            }
        }

        pub fn push(&mut self, run: &str, agent: &str, ty: &str, payload: Value) -> &mut Self {
            let id = self.events.len() as i64 + 1;
            self.events.push(StoredEvent {
                id,
                thread_id: self.thread.clone(),
                seq: id,
                run_id: run.into(),
                agent_id: agent.into(),
                event_type: ty.into(),
                payload: payload.to_string(),
                ts: 1_700_000_000_000 + id,
                response_id: None,
                user_id: None,
            });
            self
        }
    }

    /// A run with reasoning, text, a plan, a tool call, a sub-agent with its own tool call and
    /// text, and a final answer; `finish` is the `run-finish` status.
    pub fn demo_run(log: &mut Log, run: &str, finish: &str) {
        let o = "orch";
        let s = "sub1";
        // The log stores the user's message just before its run-start.
        log.push(run, o, "user-message", json!({"messageId": "u1", "text": "Build it"}))
            .push(run, o, "run-start", json!({"messageId": "u1"}))
            .push(run, o, "reasoning-delta", json!({"text": "Think"}))
            .push(run, o, "reasoning-delta", json!({"text": "ing"}))
            .push(run, o, "text-delta", json!({"text": "On "}))
            .push(run, o, "text-delta", json!({"text": "it."}))
            .push(run, o, "tasks-update", json!({"tasks": {"tasks": [{"id": "t1", "description": "Build", "status": "in_progress"}]}}))
            .push(run, o, "tool-call", json!({"toolCallId": "tc1", "toolName": "delegate", "args": {"role": "builder"}}))
            .push(run, s, "agent-spawned", json!({"parentId": o, "role": "builder", "tools": ["create-workflow"]}))
            .push(run, s, "tool-call", json!({"toolCallId": "tc2", "toolName": "create-workflow", "args": {"name": "W"}}))
            .push(run, s, "tool-result", json!({"toolCallId": "tc2", "result": {"id": "wf1"}}))
            .push(run, s, "text-delta", json!({"text": "Created."}))
            .push(run, s, "agent-completed", json!({"role": "builder", "result": "Created."}))
            .push(run, o, "tool-result", json!({"toolCallId": "tc1", "result": "Created."}))
            .push(run, o, "llm-usage", json!({"model": "demo", "inputTokens": 10, "outputTokens": 5}))
            .push(run, o, "text-delta", json!({"text": "Done"}));
        if finish == "error" {
            log.push(
                run,
                o,
                "error",
                json!({"content": "LLM provider 'demo' unavailable"}),
            );
        }
        log.push(run, o, "run-finish", json!({"status": finish}));
    }
}
