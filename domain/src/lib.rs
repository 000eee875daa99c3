//! threadstream's pure model: the agent events (wire-exact with `@n8n/api-types`), the internal
//! events the log also stores, the `Thread` aggregate that enforces the command-side rules, and
//! their errors. No I/O lives here (reading the wall clock aside: [`clock`]).

pub mod clock;
pub mod cursor;
pub mod durable_stream;
pub mod error;
pub mod event;
pub mod genai;
pub mod integers;
pub mod stored;
pub mod subscription;
pub mod thread;
pub mod workflow;

pub use error::{DecodeError, RuleClass, ThreadError};
pub use event::{is_n8n_type, AgentEvent, EventBody, ForkOf};
pub use stored::StoredEvent;
pub use thread::{LiveRun, Thread, ThreadCommand};

/// Validates a client-chosen thread id: non-empty, at most 128 characters, no control characters,
/// not in the workflow streams', Durable Streams' or erasure log's namespaces (`workflow:…`,
/// `stream:…`, `erasure:…`).
pub fn validate_thread_id(id: &str) -> Result<(), String> {
    if id.starts_with(workflow::STREAM_PREFIX) {
        return Err(format!(
            "thread ids may not start with '{}': that prefix names workflow streams",
            workflow::STREAM_PREFIX
        ));
    }
    if id.starts_with(durable_stream::STREAM_PREFIX) {
        return Err(format!(
            "thread ids may not start with '{}': that prefix names Durable Streams",
            durable_stream::STREAM_PREFIX
        ));
    }
    if id.starts_with(event::erasure::STREAM_PREFIX) {
        return Err(format!(
            "thread ids may not start with '{}': that prefix names the erasure log",
            event::erasure::STREAM_PREFIX
        ));
    }
    if id.is_empty() {
        return Err("thread id must not be empty".into());
    }
    if id.chars().count() > 128 {
        return Err("thread id must be at most 128 characters".into());
    }
    if id.chars().any(char::is_control) {
        return Err("thread id must not contain control characters".into());
    }
    Ok(())
}
