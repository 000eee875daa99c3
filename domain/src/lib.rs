//! threadstream's pure model: the agent events (wire-exact with `@n8n/api-types`), the internal
//! events the log also stores, the `Thread` aggregate that enforces the command-side rules, and
//! their errors; every kind of log stream has an aggregate of its own ([`aggregate`]). No I/O lives here (reading the wall clock aside: [`clock`]).

pub mod aggregate;
pub mod clock;
pub mod compaction;
pub mod cursor;
pub mod durable_stream;
pub mod erasure_log;
pub mod error;
pub mod error_code;
pub mod event;
pub mod genai;
pub mod integers;
pub mod registry;
pub mod stored;
pub mod subscription;
pub mod thread;
pub mod workflow;

pub use aggregate::{AggregateCommand, LogAggregate, StreamAggregate, StreamKind};
pub use error::{DecodeError, RuleClass, ThreadError};
pub use error_code::{ErrorBody, ErrorCode};
pub use event::{is_n8n_type, AgentEvent, EventBody, ForkOf};
pub use stored::StoredEvent;
pub use thread::{LiveRun, Thread, ThreadCommand};

/// The longest thread id (and run id) taken from a client, in characters.
pub const MAX_THREAD_ID_CHARS: usize = 128;

/// The longest thread title taken from a client, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// Validates a client-chosen thread id: non-empty, at most 128 characters, no control characters,
/// not in the workflow streams', Durable Streams' or erasure log's namespaces (`workflow:…`,
/// `stream:…`, `erasure:…`).
pub fn validate_thread_id(id: &str) -> Result<(), String> {
    // The prefixes of the other kinds of log stream are `StreamKind::of`'s, the one place that
    // tells kinds apart.
    let kind = StreamKind::of(id);
    let prefix = match kind {
        StreamKind::Thread => None,
        StreamKind::Workflow => Some(workflow::STREAM_PREFIX),
        StreamKind::DurableStream | StreamKind::Subscriptions => {
            Some(durable_stream::STREAM_PREFIX)
        }
        StreamKind::ErasureLog => Some(event::erasure::STREAM_PREFIX),
    };
    if let Some(prefix) = prefix {
        return Err(format!(
            "thread ids may not start with '{prefix}': that prefix belongs to another kind of \
             log stream ({})",
            kind.name()
        ));
    }
    if id.is_empty() {
        return Err("thread id must not be empty".into());
    }
    if id.chars().count() > MAX_THREAD_ID_CHARS {
        return Err(format!(
            "thread id must be at most {MAX_THREAD_ID_CHARS} characters"
        ));
    }
    if id.chars().any(char::is_control) {
        return Err("thread id must not contain control characters".into());
    }
    Ok(())
}
