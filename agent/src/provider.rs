//! The LLM-provider boundary.
//!
//! A provider takes the conversation so far ([`ChatRequest`]: system prompt, messages with tool
//! calls and tool results, tool specs) and answers with a stream of [`Chunk`]s: text deltas,
//! reasoning deltas, complete tool calls and a final [`Finish`]. The trait is object-safe (the
//! stream is boxed) so the runtime holds an `Arc<dyn LlmProvider>` chosen by configuration
//! ([`crate::models::provider_for`]). This module names no implementation, so every provider
//! can depend on it without a circle.
//!
//! The HTTP providers ([`crate::llm`]: OpenAI-compatible chat completions, Anthropic messages)
//! send the request over reqwest, parse the SSE body as it arrives, forward text and
//! reasoning deltas at once, assemble a tool call from its argument fragments and yield it only
//! when it is complete, and end with `Finish` carrying the usage the API reports. Connection and
//! HTTP failures are yielded as the stream's `Err` item.

use std::pin::Pin;

use futures::Stream;
use serde_json::Value;
use thiserror::Error;
use threadstream_domain::event::JsonObject;

/// A tool as the model sees it: a name, what it does, and its parameters as a JSON schema.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// A JSON-schema object (`{"type":"object","properties":{…},"required":[…]}`).
    pub parameters: Value,
}

/// A complete tool call made by the model. `id` is the provider's own id (OpenAI `call_…`,
/// Anthropic `toolu_…`); it is echoed back in the matching [`ChatMessage::Tool`]. The log uses
/// its own `tc-<uuid>` ids.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRequest {
    pub id: String,
    pub name: String,
    pub args: JsonObject,
}

impl ToolCallRequest {
    /// The call as OpenAI's chat API writes it in an assistant message (`tool_calls`), which
    /// AG-UI's `toolCalls` copy: `{id, type: "function", function: {name, arguments}}`, the
    /// arguments as JSON text.
    pub fn function_call_json(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "type": "function",
            "function": {
                "name": self.name,
                "arguments": Value::Object(self.args.clone()).to_string(),
            },
        })
    }
}

/// What a tool call came back with.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    Ok(Value),
    Err(String),
}

/// One message of the conversation sent to the model.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    User {
        text: String,
    },
    Assistant {
        text: String,
        reasoning: String,
        tool_calls: Vec<ToolCallRequest>,
        /// Content the provider needs back verbatim in the same turn (Anthropic's signed
        /// `thinking` / `redacted_thinking` blocks). Kept in memory only: not in the log.
        provider_blocks: Vec<Value>,
    },
    /// The result of the assistant's tool call `call_id`.
    Tool {
        call_id: String,
        tool_name: String,
        outcome: ToolOutcome,
    },
}

/// Everything a provider needs for one model call.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub system: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
}

/// Token counts reported by the provider for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The end of a model call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Finish {
    pub usage: Option<Usage>,
}

/// One piece of a streamed model answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    Text(String),
    Reasoning(String),
    /// A tool call, complete (its arguments fully assembled).
    ToolCall(ToolCallRequest),
    /// A tool call whose arguments are not a JSON object (the model's mistake, not the
    /// stream's): `args` is empty, the `String` says what was wrong. The runtime records the
    /// call and answers it with a `tool-error`, so the model can try again.
    InvalidToolCall(ToolCallRequest, String),
    /// An opaque content block to send back with this assistant turn (see
    /// [`ChatMessage::Assistant::provider_blocks`]).
    ProviderBlock(Value),
    Finish(Finish),
}

/// Why a model call failed.
#[derive(Debug, Clone, Error)]
pub enum ProviderError {
    /// The provider could not be reached or its stream broke. `message` is short and shown in
    /// the run's `error` event; the transport's error, when there is one, is the `source()`
    /// (for the log: it may name hosts and addresses).
    #[error("LLM provider '{provider}' unavailable: {message}")]
    Unavailable {
        provider: String,
        message: String,
        #[source]
        source: Option<std::sync::Arc<reqwest::Error>>,
    },
    #[error("LLM provider '{provider}' answered HTTP {status}: {message}")]
    Status {
        provider: String,
        status: u16,
        message: String,
    },
    #[error("LLM provider '{provider}' sent an invalid response: {message}")]
    Protocol { provider: String, message: String },
}

impl ProviderError {
    /// The provider's name, for the `error` event's `provider` field.
    pub fn provider(&self) -> &str {
        match self {
            ProviderError::Unavailable { provider, .. }
            | ProviderError::Status { provider, .. }
            | ProviderError::Protocol { provider, .. } => provider,
        }
    }

    /// The HTTP status, when the provider answered with one.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            ProviderError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The streamed answer of one model call. It may end without a `Finish` chunk (the runtime
/// treats the end of the stream as the finish).
pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<Chunk, ProviderError>> + Send>>;

/// An LLM provider. Implementations are cheap to share (`Arc`) and handle many calls at once.
pub trait LlmProvider: Send + Sync + 'static {
    /// The configured model name, e.g. `demo`.
    fn name(&self) -> &str;

    /// The provider's kind, `gen_ai.provider.name` in traces: `demo`, `openai`, `anthropic`
    /// (the configured model's prefix; [`crate::models::provider_for`] sets it).
    fn kind(&self) -> &str {
        "unknown"
    }

    /// Starts one model call. Returns at once; the work happens as the stream is polled, and
    /// dropping the stream abandons the call.
    fn stream(&self, request: ChatRequest) -> ChunkStream;
}
