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
