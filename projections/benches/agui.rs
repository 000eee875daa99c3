//! Criterion bench of the AG-UI renderer's hot path: one `text-delta` rendered into an agent's
//! open message, the frame every AG-UI watcher gets for every token.
//! `cargo bench -p threadstream-projections --bench agui`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use serde_json::{json, Value};
use threadstream_domain::StoredEvent;
use threadstream_projections::render::agui::AgUiRenderer;

fn row(id: i64, agent: &str, event_type: &str, payload: Value) -> StoredEvent {
    StoredEvent {
        id,
        thread_id: "bench-thread".into(),
        seq: id,
        run_id: "run-0".into(),
        agent_id: agent.into(),
        event_type: event_type.into(),
        payload: payload.to_string(),
        ts: 1_795_313_483_000 + id,
        response_id: None,
        user_id: Some("local".into()),
    }
}

fn agui(c: &mut Criterion) {
    // A run whose sub-agent has a text message open (so the frame carries `subagentRunId`, as a
    // sub-agent's tokens do), and the orchestrator's too.
    let mut renderer = AgUiRenderer::new("bench-thread", false);
    let setup = [
        row(1, "o", "run-start", json!({"messageId": "m-0"})),
        row(2, "o", "text-delta", json!({"text": "On it. "})),
        row(
            3,
            "s",
            "agent-spawned",
            json!({"parentId": "o", "role": "workflow builder", "tools": ["create-workflow"]}),
        ),
        row(4, "s", "text-delta", json!({"text": "Building "})),
    ];
    for e in &setup {
        renderer.render(e);
    }
    let orchestrator = row(5, "o", "text-delta", json!({"text": "word "}));
    let subagent = row(
        6,
        "s",
        "text-delta",
        json!({"text": "the \"Weather\" node "}),
    );

    let mut g = c.benchmark_group("agui");
    g.throughput(Throughput::Elements(1));
    for (name, event) in [
        ("text_delta_frame", &orchestrator),
        ("subagent_text_delta_frame", &subagent),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || renderer.clone(),
                |r| r.render(event),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, agui);
criterion_main!(benches);
