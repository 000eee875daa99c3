//! The store's one error type.

use thiserror::Error;
use threadstream_domain::{DecodeError, ThreadError};

/// Why an append or a read failed.
#[derive(Debug, Clone, Error)]
pub enum StoreError {
    /// The command broke a rule of the `Thread` aggregate; nothing was stored.
    #[error(transparent)]
    Rule(#[from] ThreadError),
    /// The database failed or is unreachable; nothing of the request was stored.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored event could not be decoded (the log is newer than this binary, or corrupt).
    #[error("stored event cannot be decoded: {0}")]
    Corrupt(#[from] DecodeError),
    /// The writer has shut down.
    #[error("the log is shutting down")]
    Closed,
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}
