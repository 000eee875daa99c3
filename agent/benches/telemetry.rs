//! What the GenAI spans cost one model call and one tool call of a run:
//! `cargo bench -p threadstream-agent --bench telemetry`.
//!
//! - `off`: the server's subscriber without an OTLP endpoint (the log layer, whose filter turns
//!   the spans' target off): the claim "off when unset, at no cost";
//! - `on`: the same plus the `tracing-opentelemetry` layer on an SDK tracer with no exporter
//!   (building, recording and ending the spans; exporting is the batch processor's own thread).

use criterion::{criterion_group, criterion_main, Criterion};
use opentelemetry::trace::TracerProvider as _;
use threadstream_agent::provider::{
    ChatMessage, ChatRequest, Chunk, Finish, LlmProvider, ToolOutcome, Usage,
};
use threadstream_agent::telemetry::{self, ChatCall};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

struct Model;

impl LlmProvider for Model {
    fn name(&self) -> &str {
        "gpt-bench"
    }
    fn kind(&self) -> &str {
        "openai"
    }
    fn stream(&self, _: ChatRequest) -> threadstream_agent::provider::ChunkStream {
        unreachable!("the bench only observes")
    }
}

/// One model call of ten chunks and one tool call, observed as the runtime does.
fn one_step(request: &ChatRequest, args: &serde_json::Map<String, serde_json::Value>) {
    let agent = telemetry::sub_agent_span("thread-1", "run-1", "agent-1", "builder", "gpt", None);
    let _in_agent = agent.enter();
    let mut call = ChatCall::start("thread-1", &Model, request);
    for _ in 0..9 {
        call.observe(&Ok(Chunk::Text("word ".into())));
    }
    call.observe(&Ok(Chunk::Finish(Finish {
        usage: Some(Usage {
            input_tokens: 120,
            output_tokens: 10,
        }),
    })));
    drop(call);
    let tool = telemetry::tool_span("thread-1", "list-workflows", "tc-1", args);
    telemetry::tool_ended(
        &tool,
        &ToolOutcome::Ok(serde_json::json!({"workflows": []})),
    );
}

fn log_filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::new("info")
        .add_directive(format!("{}=off", telemetry::TARGET).parse().unwrap())
}

fn bench(c: &mut Criterion) {
    let request = ChatRequest {
        system: "You are the orchestrator.".into(),
        messages: vec![ChatMessage::User {
            text: "Build me a workflow".into(),
        }],
        tools: Vec::new(),
    };
    let args = serde_json::Map::new();
    let mut group = c.benchmark_group("genai_spans");
    let off = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::sink)
            .with_filter(log_filter()),
    );
    tracing::subscriber::with_default(off, || {
        group.bench_function("off", |b| b.iter(|| one_step(&request, &args)));
    });
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let on = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(log_filter()),
        )
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("bench"))
                .with_filter(
                    tracing_subscriber::filter::Targets::new()
                        .with_target(telemetry::TARGET, tracing::Level::INFO),
                ),
        );
    tracing::subscriber::with_default(on, || {
        group.bench_function("on", |b| b.iter(|| one_step(&request, &args)));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
