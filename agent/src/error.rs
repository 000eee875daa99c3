//! The runtime's errors.

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
}

/// Why a run ended in `run-finish {status: "error"}`.
#[derive(Debug, Clone, Error)]
pub enum RunError {
    /// The log refused or failed to store an event.
    #[error("the log refused an event: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Provider(#[from] ProviderError),
    #[error("internal error: {0}")]
    Internal(String),
    /// A confirmation was not answered within the configured timeout (the run is cancelled
    /// with reason `timeout`).
    #[error("the confirmation was not answered in time")]
    ConfirmationTimeout,
    /// The agent repeated a failing tool call.
    #[error("{0}")]
    Stuck(String),
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
