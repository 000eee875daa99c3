//! Criterion benches of the pure folds and the n8n SSE frame rendering:
//! `cargo bench -p threadstream-projections --bench folds`.
//!
//! The input is one thread of realistic runs (reasoning, a tool call, a sub-agent with its own
//! text and tool call, the answer's text deltas), as the log stores it.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use serde_json::{json, Value};
use threadstream_domain::{AgentEvent, StoredEvent};
use threadstream_projections::{AgentRunState, ReadModel, Status, ThreadHistory};

fn row(id: i64, run: &str, agent: &str, event_type: &str, payload: Value) -> StoredEvent {
    StoredEvent {
        id,
        thread_id: "bench-thread".into(),
        seq: id,
        run_id: run.into(),
        agent_id: agent.into(),
        event_type: event_type.into(),
        payload: payload.to_string(),
        ts: 1_795_313_483_000 + id,
        response_id: None,
        user_id: Some("local".into()),
    }
}

/// `runs` runs of `run_len` events each (≥ 13), preceded by the thread's creation.
fn thread_events(runs: usize, run_len: usize) -> Vec<StoredEvent> {
    let mut events = Vec::with_capacity(runs * run_len + 1);
    events.push(row(1, "", "", "thread-created", json!({"owner": "local"})));
    for r in 0..runs {
        let run = format!("run-{r}");
        let o = format!("o-{r}");
        let s = format!("s-{r}");
        let mut push = |agent: &str, t: &str, p: Value| {
            let id = events.len() as i64 + 1;
            events.push(row(id, &run, agent, t, p));
        };
        let deltas = run_len - 10;
        push(
            &o,
            "user-message",
            json!({"messageId": format!("m-{r}"), "text": "Build me a weather to Slack workflow"}),
        );
        push(&o, "run-start", json!({"messageId": format!("m-{r}")}));
        for i in 0..deltas / 4 {
            push(
                &o,
                "reasoning-delta",
                json!({"text": format!("thinking {i} ")}),
            );
        }
        push(
            &o,
            "tool-call",
            json!({"toolCallId": format!("tc1-{r}"), "toolName": "list-workflows", "args": {"limit": 10}}),
        );
        push(
            &o,
            "tool-result",
            json!({"toolCallId": format!("tc1-{r}"), "result": {"workflows": [{"id": "wf-1", "name": "Weather", "active": false}]}}),
        );
        push(
            &s,
            "agent-spawned",
            json!({"parentId": o, "role": "workflow builder", "tools": ["list-workflows", "create-workflow"]}),
        );
        for i in 0..deltas / 4 {
            push(&s, "text-delta", json!({"text": format!("building {i} ")}));
        }
        push(
            &s,
            "tool-call",
            json!({"toolCallId": format!("tc2-{r}"), "toolName": "create-workflow", "args": {"name": "Weather"}}),
        );
        push(
            &s,
            "tool-result",
            json!({"toolCallId": format!("tc2-{r}"), "result": {"id": "wf-2"}}),
        );
        push(
            &s,
            "agent-completed",
            json!({"role": "workflow builder", "result": "Created wf-2"}),
        );
        for i in 0..deltas - 2 * (deltas / 4) {
            push(&o, "text-delta", json!({"text": format!("word{i} ")}));
        }
        push(&o, "run-finish", json!({"status": "completed"}));
    }
    events
}

fn folds(c: &mut Criterion) {
    // 10 runs of 100 events: one thread of 1,001 events.
    let events = thread_events(10, 100);
    let n = events.len() as u64;
    let one_run: Vec<AgentEvent> = events
        .iter()
        .filter(|e| e.run_id == "run-0" && e.event_type != "user-message")
        .map(|e| e.decode().expect("decodes"))
        .collect();

    let mut g = c.benchmark_group("folds");
    g.throughput(Throughput::Elements(one_run.len() as u64));
    g.bench_function("agent_tree_reduce_run_100_events", |b| {
        b.iter(|| {
            let mut state = AgentRunState::new("o-0");
            for e in &one_run {
                state.reduce(e);
            }
            state
        })
    });
    g.bench_function("agent_tree_reduce_and_render_run_100_events", |b| {
        b.iter(|| {
            let mut state = AgentRunState::new("o-0");
            for e in &one_run {
                state.reduce(e);
            }
            state.to_agent_tree()
        })
    });
    g.throughput(Throughput::Elements(n));
    g.bench_function("history_fold_thread_1001_events", |b| {
        b.iter(|| {
            let mut h = ThreadHistory::default();
            for e in &events {
                h.apply(e);
            }
            h
        })
    });
    g.bench_function("status_fold_thread_1001_events", |b| {
        b.iter(|| {
            let mut s = <Status as ReadModel>::Doc::default();
            for e in &events {
                Status::apply(&mut s, e);
            }
            s
        })
    });
    g.finish();

    // The n8n SSE frames of one page (512 events), as the SSE engine (api/src/sse/) writes them.
    let page: Vec<StoredEvent> = events.iter().take(512).cloned().collect();
    let mut g = c.benchmark_group("render");
    g.throughput(Throughput::Elements(page.len() as u64));
    g.bench_function("n8n_sse_frames_page_512", |b| {
        b.iter_batched_ref(
            || String::with_capacity(page.len() * 160),
            |buf| {
                for e in page.iter().filter(|e| e.is_n8n()) {
                    buf.push_str("id: ");
                    buf.push_str(&e.id.to_string());
                    buf.push_str("\ndata: ");
                    e.write_envelope_json(buf);
                    buf.push_str("\n\n");
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, folds);
criterion_main!(benches);
