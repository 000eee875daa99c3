//! The HTTP LLM providers: OpenAI-compatible chat completions and Anthropic messages, both
//! streamed over reqwest and parsed as they arrive.

pub mod anthropic;
pub mod http;
pub mod openai;
pub mod sse;

pub use anthropic::AnthropicProvider;
pub use http::HttpSettings;
pub use openai::OpenAiProvider;
