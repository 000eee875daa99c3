//! The agent's spans, in the OpenTelemetry GenAI semantic conventions
//! (<https://opentelemetry.io/docs/specs/semconv/gen-ai/>): `invoke_agent` for a run's
//! orchestrator and for each sub-agent, `chat` for each model call, `execute_tool` for each tool
//! call (MCP calls included). They are `tracing` spans of target [`TARGET`]: the server exports
//! them over OTLP when an endpoint is configured (`api::telemetry`), and otherwise no layer
//! enables the target, so they are never built.
//!
//! The same tree is rebuilt from the log by `threadstream_projections::trace`; every name and
//! attribute key both sides use is in [`threadstream_domain::genai`], so the two cannot drift.
//!
//! Message and tool content is recorded only after [`capture_content`]`(true)` (the server's
//! `--otel-capture-content`): it may hold personal data.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::TraceContextExt;
use threadstream_domain::genai;
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::provider::{ChatMessage, ChatRequest, Chunk, ProviderError, ToolOutcome, Usage};

/// The `tracing` target of every GenAI span; the OTLP layer enables exactly this target.
pub const TARGET: &str = "threadstream::genai";

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// Whether spans carry message and tool content (`gen_ai.input.messages`, tool arguments and
/// results). Off unless the operator opts in.
pub fn capture_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

fn content_captured() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// A W3C trace context a run's spans are children of (the `traceparent` and `tracestate`
/// headers of the request that started the run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceParent {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceParent {
    /// The remote parent as an OpenTelemetry context; `None` when the header is not a valid
    /// `traceparent` (W3C Trace Context: a malformed header is ignored, not an error).
    fn context(&self) -> Option<opentelemetry::Context> {
        use opentelemetry::propagation::TextMapPropagator;
        let mut carrier = std::collections::HashMap::new();
        carrier.insert("traceparent".to_string(), self.traceparent.clone());
        if let Some(state) = &self.tracestate {
            carrier.insert("tracestate".to_string(), state.clone());
        }
        let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
        cx.span().span_context().is_valid().then_some(cx)
    }
}

/// The OpenTelemetry context of the current span: what a span started later, elsewhere, names
/// as its parent without keeping the current one open (a background task's agent).
pub fn current_context() -> opentelemetry::Context {
    Span::current().context()
}

/// The `invoke_agent` span of a run's orchestrator, a child of `parent` when the run was started
/// with a `traceparent`, else a root.
pub fn orchestrator_span(
    conversation_id: &str,
    run_id: &str,
    agent_id: &str,
    model: &str,
    parent: Option<&TraceParent>,
) -> Span {
    let span = invoke_agent(
        conversation_id,
        run_id,
        agent_id,
        genai::ORCHESTRATOR,
        model,
    );
    if let Some(cx) = parent.and_then(TraceParent::context) {
        let _ = span.set_parent(cx);
    }
    span
}

/// The `invoke_agent` span of a sub-agent. A synchronous sub-agent is the child of the current
/// span (its `delegate` call); a background task's names `parent`, the `delegate` call's
/// context taken when the task started, without holding that span open.
pub fn sub_agent_span(
    conversation_id: &str,
    run_id: &str,
    agent_id: &str,
    role: &str,
    model: &str,
    parent: Option<opentelemetry::Context>,
) -> Span {
    let span = invoke_agent(conversation_id, run_id, agent_id, role, model);
    if let Some(cx) = parent {
        let _ = span.set_parent(cx);
    }
    span
}

fn invoke_agent(
    conversation_id: &str,
    run_id: &str,
    agent_id: &str,
    agent_name: &str,
    model: &str,
) -> Span {
    tracing::info_span!(target: TARGET, "invoke_agent",
        otel.name = genai::span_name(genai::INVOKE_AGENT, agent_name).as_str(),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = genai::INVOKE_AGENT,
        gen_ai.agent.id = agent_id,
        gen_ai.agent.name = agent_name,
        gen_ai.request.model = genai::request_model(model),
        gen_ai.conversation.id = conversation_id,
        threadstream.run.id = run_id,
        threadstream.run.status = Empty,
        error.type = Empty,
    )
}

/// How an `invoke_agent` span ended: the run's status (orchestrator) and the error's type, if
/// any.
pub fn agent_ended(span: &Span, status: Option<&str>, error_type: Option<&str>) {
    if let Some(status) = status {
        span.record("threadstream.run.status", status);
    }
    if let Some(error) = error_type {
        span.record("error.type", error);
        span.record("otel.status_code", "error");
    }
}

/// The `execute_tool` span of one tool call (`tool_call_id` is the log's `tc-…` id); a child of
/// the current span (the calling agent's); an MCP tool's names its server.
pub fn tool_span(
    conversation_id: &str,
    tool_name: &str,
    tool_call_id: &str,
    args: &serde_json::Map<String, serde_json::Value>,
) -> Span {
    let span = tracing::info_span!(target: TARGET, "execute_tool",
        otel.name = genai::span_name(genai::EXECUTE_TOOL, tool_name).as_str(),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = genai::EXECUTE_TOOL,
        gen_ai.tool.name = tool_name,
        gen_ai.tool.call.id = tool_call_id,
        gen_ai.tool.type = "function",
        gen_ai.conversation.id = conversation_id,
        threadstream.mcp.server = genai::mcp_server(tool_name),
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
    );
    if content_captured() && !span.is_disabled() {
        span.record(
            "gen_ai.tool.call.arguments",
            serde_json::Value::Object(args.clone()).to_string().as_str(),
        );
    }
    span
}

/// A tool call's outcome on its span: the result (content opt-in) or the error.
pub fn tool_ended(span: &Span, outcome: &ToolOutcome) {
    match outcome {
        ToolOutcome::Ok(value) => {
            if content_captured() && !span.is_disabled() {
                span.record("gen_ai.tool.call.result", value.to_string().as_str());
            }
        }
        ToolOutcome::Err(_) => {
            span.record("error.type", genai::TOOL_ERROR);
            span.record("otel.status_code", "error");
        }
    }
}

/// A confirmation asked or answered during the current tool call: an event on its span.
pub fn confirmation(request_id: &str, answered: Option<bool>) {
    match answered {
        None => tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            gen_ai.confirmation.id = request_id,
            message = genai::CONFIRMATION_REQUESTED
        ),
        Some(approved) => tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            gen_ai.confirmation.id = request_id,
            approved,
            message = genai::CONFIRMATION_ANSWERED
        ),
    }
}

/// One model call being observed: its `chat` span (a child of the current span), when it
/// started and when its first chunk came, which the call's `llm-usage` event also records.
pub struct ChatCall {
    span: Span,
    started: Instant,
    started_at_ms: i64,
    first_chunk_ms: Option<i64>,
    output: String,
}

impl ChatCall {
    /// Starts observing a call of `provider` in `conversation_id` (the thread) with `request`
    /// (its messages are recorded only when content is captured).
    pub fn start(
        conversation_id: &str,
        provider: &dyn crate::provider::LlmProvider,
        request: &ChatRequest,
    ) -> Self {
        let model = genai::request_model(provider.name());
        let span = tracing::info_span!(target: TARGET, "chat",
            otel.name = genai::span_name(genai::CHAT, model).as_str(),
            otel.kind = "client",
            otel.status_code = Empty,
            gen_ai.operation.name = genai::CHAT,
            gen_ai.provider.name = provider.kind(),
            gen_ai.request.model = model,
            gen_ai.conversation.id = conversation_id,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.response.time_to_first_chunk = Empty,
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
            error.type = Empty,
        );
        if content_captured() && !span.is_disabled() {
            span.record(
                "gen_ai.input.messages",
                input_messages(request).to_string().as_str(),
            );
        }
        ChatCall {
            span,
            started: Instant::now(),
            started_at_ms: now_ms(),
            first_chunk_ms: None,
            output: String::new(),
        }
    }

    /// Epoch milliseconds when the call started.
    pub fn started_at_ms(&self) -> i64 {
        self.started_at_ms
    }

    /// Milliseconds from the start to the first chunk, once one came.
    pub fn first_chunk_ms(&self) -> Option<i64> {
        self.first_chunk_ms
    }

    /// One item of the call's stream.
    pub fn observe(&mut self, item: &Result<Chunk, ProviderError>) {
        if self.first_chunk_ms.is_none() {
            let elapsed = self.started.elapsed();
            self.first_chunk_ms = Some(elapsed.as_millis() as i64);
            self.span
                .record("gen_ai.response.time_to_first_chunk", elapsed.as_secs_f64());
        }
        match item {
            Ok(Chunk::Text(t)) if content_captured() => self.output.push_str(t),
            Ok(Chunk::Finish(f)) => {
                if let Some(Usage {
                    input_tokens,
                    output_tokens,
                }) = f.usage
                {
                    // As i64: the OTLP layer turns a u64 into a string.
                    self.span
                        .record("gen_ai.usage.input_tokens", input_tokens as i64);
                    self.span
                        .record("gen_ai.usage.output_tokens", output_tokens as i64);
                }
            }
            Err(e) => {
                self.span.record(
                    "error.type",
                    genai::provider_error_type(e.status_code()).as_str(),
                );
                self.span.record("otel.status_code", "error");
            }
            Ok(_) => {}
        }
    }
}

impl Drop for ChatCall {
    fn drop(&mut self) {
        if content_captured() && !self.span.is_disabled() && !self.output.is_empty() {
            let output = serde_json::json!([{"role": "assistant",
                "parts": [{"type": "text", "content": self.output}]}]);
            self.span
                .record("gen_ai.output.messages", output.to_string().as_str());
        }
    }
}

/// A request's instructions and messages in the conventions' message format
/// (`gen_ai.input.messages`).
fn input_messages(request: &ChatRequest) -> serde_json::Value {
    use serde_json::json;
    let text = |role: &str, content: &str| json!({"role": role, "parts": [{"type": "text", "content": content}]});
    let mut out = vec![text("system", &request.system)];
    for m in &request.messages {
        out.push(match m {
            ChatMessage::User { text: t } => text("user", t),
            ChatMessage::Assistant {
                text: t,
                tool_calls,
                ..
            } => {
                let mut parts = vec![json!({"type": "text", "content": t})];
                parts.extend(tool_calls.iter().map(|c| {
                    json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.args})
                }));
                json!({"role": "assistant", "parts": parts})
            }
            ChatMessage::Tool {
                call_id, outcome, ..
            } => {
                let response = match outcome {
                    ToolOutcome::Ok(v) => v.clone(),
                    ToolOutcome::Err(e) => json!({ "error": e }),
                };
                json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": response}]})
            }
        });
    }
    serde_json::Value::Array(out)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
