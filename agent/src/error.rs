//! The runtime's errors.

use std::sync::Arc;

use thiserror::Error;
use threadstream_store::StoreError;

use crate::provider::ProviderError;

/// Why the runtime could not be built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AgentError {
    #[error("unknown model '{model}'; available: {available}")]
    UnknownModel { model: String, available: String },
    #[error("model '{model}' needs an API key: set {variable}")]
    MissingKey {
        model: String,
        variable: &'static str,
    },
    #[error("{0}")]
    InvalidSetting(String),
    /// The `--mcp-config` file cannot be used.
    #[error("--mcp-config {path}: {message}")]
    McpConfig { path: String, message: String },
}

/// Why a run ended in `run-finish {status: "error"}`. The message becomes the run's `error`
/// event, which clients read: a store or internal failure says only that it happened, and keeps
/// its cause as the `source()` for the log.
#[derive(Debug, Clone, Error)]
pub enum RunError {
    /// The log refused or failed to store an event.
    #[error("the log refused an event")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Provider(#[from] ProviderError),
    /// A failure of the runtime's own (a panic).
    #[error("internal error")]
    Internal(#[source] Arc<dyn std::error::Error + Send + Sync + 'static>),
    /// A confirmation was not answered within the configured timeout (the run is cancelled
    /// with reason `timeout`).
    #[error("the confirmation was not answered in time")]
    ConfirmationTimeout,
    /// The agent repeated a failing tool call.
    #[error("{0}")]
    Stuck(String),
    /// An upstream AG-UI agent failed (`--agui-agent`): the message names it and what went
    /// wrong.
    #[error("{0}")]
    Upstream(String),
}

/// How a tool failed.
#[derive(Debug, Clone)]
pub enum ToolFailure {
    /// The tool did not do its job; the model sees the message (`tool-error`) and carries on.
    Failed(String),
    /// Something the run cannot continue after (the log refused an event).
    Fatal(RunError),
}

impl ToolFailure {
    pub fn failed(message: impl Into<String>) -> Self {
        ToolFailure::Failed(message.into())
    }
}

impl From<StoreError> for ToolFailure {
    fn from(e: StoreError) -> Self {
        ToolFailure::Fatal(RunError::Store(e))
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_store_failure_ends_a_run_with_a_message_free_of_its_cause() {
        let cause = std::io::Error::other("fsync of /data/threadstream.db-wal failed");
        let e = RunError::from(StoreError::unavailable("WAL sync failed", cause));
        // The message becomes the run's `error` event, which clients read.
        assert_eq!(e.to_string(), "the log refused an event");
        let store = e.source().expect("the store's error is the source");
        let io = store.source().expect("the I/O error is kept");
        assert_eq!(io.to_string(), "fsync of /data/threadstream.db-wal failed");
    }

    #[test]
    fn a_panic_ends_a_run_with_a_generic_message() {
        let panic: Box<dyn std::error::Error + Send + Sync> =
            "the run panicked: index out of bounds".into();
        let e = RunError::Internal(panic.into());
        assert_eq!(e.to_string(), "internal error");
        assert_eq!(
            e.source().map(|s| s.to_string()).as_deref(),
            Some("the run panicked: index out of bounds")
        );
    }
}
