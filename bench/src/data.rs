//! The events the scenarios append: n8n envelopes as JSON (the ingest body's form), and the same
//! as store commands.

use bytes::Bytes;
use serde_json::{json, Value};
use threadstream_domain::{AgentEvent, ThreadCommand};
use threadstream_store::EventLog;

pub const OWNER: &str = "local";

pub fn run_start(run: &str, agent: &str) -> Value {
    json!({"type": "run-start", "runId": run, "agentId": agent, "payload": {"messageId": format!("m-{run}")}})
}

pub fn delta(run: &str, agent: &str, text: &str) -> Value {
    json!({"type": "text-delta", "runId": run, "agentId": agent, "payload": {"text": text}})
}

pub fn run_finish(run: &str, agent: &str) -> Value {
    json!({"type": "run-finish", "runId": run, "agentId": agent, "payload": {"status": "completed"}})
}

/// One run of exactly `n` events (n ≥ 12) with the shapes a real run has: reasoning, a tool
/// call and its result, a sub-agent with its own text and tool call, the answer's text deltas.
pub fn realistic_run(run: &str, n: usize) -> Vec<Value> {
    assert!(n >= 12, "a realistic run has at least 12 events");
    let o = format!("o-{run}");
    let s = format!("s-{run}");
    let deltas = n - 8;
    let reasoning = deltas / 4;
    let sub_text = deltas / 4;
    let answer = deltas - reasoning - sub_text;
    let mut v = vec![run_start(run, &o)];
    for i in 0..reasoning {
        v.push(json!({"type": "reasoning-delta", "runId": run, "agentId": o, "payload": {"text": format!("thinking {i} ")}}));
    }
    v.push(json!({"type": "tool-call", "runId": run, "agentId": o, "payload": {"toolCallId": format!("tc1-{run}"), "toolName": "list-workflows", "args": {"limit": 10}}}));
    v.push(json!({"type": "tool-result", "runId": run, "agentId": o, "payload": {"toolCallId": format!("tc1-{run}"), "result": {"workflows": [{"id": "wf-1", "name": "Weather to Slack", "active": false}]}}}));
    v.push(json!({"type": "agent-spawned", "runId": run, "agentId": s, "payload": {"parentId": o, "role": "workflow builder", "tools": ["list-workflows", "create-workflow"]}}));
    for i in 0..sub_text {
        v.push(json!({"type": "text-delta", "runId": run, "agentId": s, "payload": {"text": format!("building {i} ")}}));
    }
    v.push(json!({"type": "tool-call", "runId": run, "agentId": s, "payload": {"toolCallId": format!("tc2-{run}"), "toolName": "create-workflow", "args": {"name": "Weather"}}}));
    v.push(json!({"type": "tool-result", "runId": run, "agentId": s, "payload": {"toolCallId": format!("tc2-{run}"), "result": {"id": "wf-2"}}}));
    v.push(json!({"type": "agent-completed", "runId": run, "agentId": s, "payload": {"role": "workflow builder", "result": "Created wf-2"}}));
    for i in 0..answer {
        v.push(delta(run, &o, &format!("word{i} ")));
    }
    v.push(run_finish(run, &o));
    debug_assert_eq!(v.len(), n);
    v
}

pub fn create() -> ThreadCommand {
    ThreadCommand::Create {
        owner: OWNER.into(),
        title: None,
    }
}

/// The store command that records `v` (an n8n envelope).
pub fn cmd(v: &Value) -> ThreadCommand {
    let event: AgentEvent = serde_json::from_value(v.clone()).expect("valid bench event");
    ThreadCommand::Record(event)
}

/// `{"events": [...]}`, the ingest body.
pub fn ingest_body(events: &[Value]) -> Bytes {
    Bytes::from(serde_json::to_vec(&json!({ "events": events })).expect("serializes"))
}

/// Fills `thread` with `runs` realistic runs of `run_len` events each (the thread is created
/// first: one more event), appending `per_request` commands at a time.
pub async fn fill_thread(
    log: &EventLog,
    thread: &str,
    runs: usize,
    run_len: usize,
    per_request: usize,
) -> anyhow::Result<()> {
    log.append(thread, vec![create()]).await?;
    let mut pending: Vec<ThreadCommand> = Vec::with_capacity(per_request);
    for r in 0..runs {
        for v in realistic_run(&format!("{thread}-r{r}"), run_len) {
            pending.push(cmd(&v));
            if pending.len() == per_request {
                log.append(thread, std::mem::take(&mut pending)).await?;
            }
        }
    }
    if !pending.is_empty() {
        log.append(thread, pending).await?;
    }
    Ok(())
}
