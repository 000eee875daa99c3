//! The vocabulary of the agent's trace spans (OpenTelemetry GenAI semantic conventions,
//! <https://opentelemetry.io/docs/specs/semconv/gen-ai/>): the operation names, span names and
//! the values both the live spans (`threadstream_agent::telemetry`) and the spans rebuilt from
//! the log (`threadstream_projections::trace`) use, so the two trees agree.

/// `gen_ai.operation.name` of a run's orchestrator and of each sub-agent.
pub const INVOKE_AGENT: &str = "invoke_agent";
/// `gen_ai.operation.name` of a model call.
pub const CHAT: &str = "chat";
/// `gen_ai.operation.name` of a tool call.
pub const EXECUTE_TOOL: &str = "execute_tool";
/// `gen_ai.agent.name` of a run's orchestrator (a sub-agent's is its role).
pub const ORCHESTRATOR: &str = "orchestrator";
/// `error.type` of a tool call that ended with `tool-error`.
pub const TOOL_ERROR: &str = "tool_error";
/// `error.type` of a sub-agent that ended with an error.
pub const AGENT_ERROR: &str = "agent_error";
/// Span event names on a tool call's span.
pub const CONFIRMATION_REQUESTED: &str = "confirmation requested";
pub const CONFIRMATION_ANSWERED: &str = "confirmation answered";

/// A span's name: `{operation} {target}` (the model, agent or tool name).
pub fn span_name(operation: &str, target: &str) -> String {
    format!("{operation} {target}")
}

/// `gen_ai.request.model` of a configured model name (`openai/gpt-4o`, `anthropic/…`, `demo`):
/// the model as its provider names it, for the provider is `gen_ai.provider.name`. Only the
/// first segment is the provider's: a model may contain `/` (`openai/meta-llama/Llama-3`).
pub fn request_model(configured: &str) -> &str {
    configured
        .split_once('/')
        .map_or(configured, |(_, model)| model)
}

/// `error.type` of a failed model call: the provider's HTTP status when it answered with one,
/// else the conventions' `_OTHER`.
pub fn provider_error_type(status: Option<u16>) -> String {
    match status {
        Some(s) => s.to_string(),
        None => "_OTHER".to_string(),
    }
}

/// The MCP server of an MCP tool's name (`server__tool`); built-in tools have no `__`.
pub fn mcp_server(tool_name: &str) -> Option<&str> {
    tool_name.split_once("__").map(|(server, _)| server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_model_is_the_configured_name_without_its_provider() {
        assert_eq!(request_model("openai/gpt-4o"), "gpt-4o");
        assert_eq!(
            request_model("anthropic/claude-sonnet-4"),
            "claude-sonnet-4"
        );
        assert_eq!(
            request_model("openai/meta-llama/Llama-3.1-8B"),
            "meta-llama/Llama-3.1-8B"
        );
        assert_eq!(request_model("demo"), "demo");
    }
}
