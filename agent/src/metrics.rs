//! What the agent runtime reports to the process's metrics recorder (the `metrics` facade; the
//! server renders it for Prometheus, see docs/operations.md): model calls, their tokens and
//! errors by provider and model, and MCP tool calls by server and outcome. Every name the agent
//! records is here, with its description.

use std::sync::Arc;

use futures::StreamExt;

use crate::provider::{ChatRequest, Chunk, ChunkStream, LlmProvider, ProviderError};

pub const LLM_CALLS: &str = "threadstream_llm_calls_total";
pub const LLM_TOKENS: &str = "threadstream_llm_tokens_total";
pub const LLM_ERRORS: &str = "threadstream_llm_errors_total";
pub const MCP_CALLS: &str = "threadstream_mcp_calls_total";
pub const RUNS_FINISHED: &str = "threadstream_runs_finished_total";
pub const RUNS_RUNNING: &str = "threadstream_runs_running";
pub const CONFIRMATIONS_WAITING: &str = "threadstream_confirmations_waiting";

/// Describes the agent's metrics to the recorder (once, at start-up).
pub fn describe() {
    use metrics::{describe_counter, Unit};
    describe_counter!(
        LLM_CALLS,
        Unit::Count,
        "Model calls started, by provider and model"
    );
    describe_counter!(
        LLM_TOKENS,
        Unit::Count,
        "Tokens the providers reported, by provider, model and direction (input, output)"
    );
    describe_counter!(
        LLM_ERRORS,
        Unit::Count,
        "Model calls that failed, by provider, model and error type"
    );
    describe_counter!(
        RUNS_FINISHED,
        Unit::Count,
        "Runs finished in this process, by status (completed, error, cancelled)"
    );
    metrics::describe_gauge!(
        RUNS_RUNNING,
        Unit::Count,
        "Runs executing in this process now"
    );
    metrics::describe_gauge!(
        CONFIRMATIONS_WAITING,
        Unit::Count,
        "Confirmation requests of this process's runs waiting for an answer now"
    );
    describe_counter!(
        MCP_CALLS,
        Unit::Count,
        "MCP tool calls, by server and outcome (ok, error)"
    );
}

/// A provider whose calls are counted: `provider` is its kind (`demo`, `openai`, `anthropic`).
pub(crate) fn metered(provider: &'static str, inner: Arc<dyn LlmProvider>) -> Arc<dyn LlmProvider> {
    Arc::new(Metered { provider, inner })
}

struct Metered {
    provider: &'static str,
    inner: Arc<dyn LlmProvider>,
}

impl LlmProvider for Metered {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn kind(&self) -> &str {
        self.provider
    }

    fn stream(&self, request: ChatRequest) -> ChunkStream {
        let (provider, model) = (self.provider, self.inner.name().to_string());
        metrics::counter!(LLM_CALLS, "provider" => provider, "model" => model.clone()).increment(1);
        Box::pin(self.inner.stream(request).inspect(move |item| match item {
            Ok(Chunk::Finish(f)) => {
                if let Some(u) = &f.usage {
                    for (direction, n) in [("input", u.input_tokens), ("output", u.output_tokens)] {
                        metrics::counter!(LLM_TOKENS, "provider" => provider,
                            "model" => model.clone(), "direction" => direction)
                        .increment(n);
                    }
                }
            }
            Err(e) => {
                metrics::counter!(LLM_ERRORS, "provider" => provider,
                    "model" => model.clone(), "type" => error_type(e))
                .increment(1);
            }
            Ok(_) => {}
        }))
    }
}

/// The `error.type`-style name of a provider error.
fn error_type(e: &ProviderError) -> &'static str {
    match e {
        ProviderError::Unavailable { .. } => "unavailable",
        ProviderError::Status { .. } => "status",
        ProviderError::Protocol { .. } => "protocol",
    }
}

/// An MCP tool call of `server` ended, well or not.
pub(crate) fn mcp_call(server: &str, ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::counter!(MCP_CALLS, "server" => server.to_string(), "outcome" => outcome).increment(1);
}

/// A run finished with `status`.
pub(crate) fn run_finished(status: &'static str) {
    metrics::counter!(RUNS_FINISHED, "status" => status).increment(1);
}

/// Counts one in the gauge `name` while it lives (a run executing, a confirmation waiting).
pub(crate) struct Present(&'static str);

impl Present {
    pub(crate) fn new(name: &'static str) -> Self {
        metrics::gauge!(name).increment(1.0);
        Present(name)
    }
}

impl Drop for Present {
    fn drop(&mut self) {
        metrics::gauge!(self.0).decrement(1.0);
    }
}
