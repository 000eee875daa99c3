//! threadstream's pure model: the agent events (wire-exact with `@n8n/api-types`), the internal
//! events the log also stores, the `Thread` aggregate that enforces the command-side rules, and
//! their errors. No I/O lives here.

pub mod error;
pub mod event;
pub mod stored;
pub mod thread;

pub use error::{DecodeError, RuleClass, ThreadError};
pub use event::{is_n8n_type, AgentEvent, EventBody};
pub use stored::StoredEvent;
pub use thread::{LiveRun, Thread, ThreadCommand};

/// Validates a client-chosen thread id: non-empty, at most 128 characters, no control characters.
pub fn validate_thread_id(id: &str) -> Result<(), String> {
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
