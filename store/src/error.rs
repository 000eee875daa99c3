//! The store's one error type.
//!
//! A failure keeps what caused it as its `source()` (the driver's, the OS's, a task's error),
//! and its own message says only what was being done: the message is safe to show, the chain
//! is for the log (`tracing`'s `error = &e as &dyn std::error::Error` prints both).

use std::borrow::Cow;
use std::sync::Arc;

use thiserror::Error;
use threadstream_domain::{DecodeError, ThreadError};

/// What made the store fail. Shared (`Arc`), because one failed batch answers every request in
/// it with the same error.
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Why an append or a read failed.
#[derive(Debug, Clone, Error)]
pub enum StoreError {
    /// The command broke a rule of the `Thread` aggregate; nothing was stored.
    #[error(transparent)]
    Rule(#[from] ThreadError),
    /// The database failed or is unreachable; nothing of the request was stored. `what` says
    /// what was being done; `source` is why it failed, when another error says so.
    #[error("store unavailable: {what}")]
    Unavailable {
        what: Cow<'static, str>,
        #[source]
        source: Option<Cause>,
    },
    /// A stored event could not be decoded (the log is newer than this binary, or corrupt).
    #[error("a stored event cannot be decoded")]
    Corrupt(#[from] DecodeError),
    /// The append's idempotency key already has an answer (another execution of the same
    /// request stored it); nothing was stored.
    #[error("the idempotency key is already answered")]
    KeyAnswered,
    /// The writer has shut down.
    #[error("the log is shutting down")]
    Closed,
    /// Commands of one kind of stream were sent to a stream of another kind (say, a thread's
    /// to a workflow stream's id): a caller's bug, refused before any aggregate sees them.
    #[error("{stream:?} is a {is}, not a {not}")]
    WrongKind {
        stream: String,
        is: &'static str,
        not: &'static str,
    },
}

impl StoreError {
    /// [`StoreError::WrongKind`] for `stream`, which is of kind `is`, asked as one of `not`.
    pub fn wrong_kind(
        stream: &str,
        is: threadstream_domain::StreamKind,
        not: threadstream_domain::StreamKind,
    ) -> Self {
        StoreError::WrongKind {
            stream: stream.to_string(),
            is: is.name(),
            not: not.name(),
        }
    }
}

impl StoreError {
    /// The store failed while doing `what`, because of `source`.
    pub fn unavailable(
        what: impl Into<Cow<'static, str>>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        StoreError::Unavailable {
            what: what.into(),
            source: Some(Arc::from(source.into())),
        }
    }

    /// Whether the database could not be reached or dropped the connection (a restart, a
    /// failover: the primary gone, or another node not yet promoted), as opposed to refusing
    /// what was asked: the same request may succeed once it is reachable again.
    pub fn is_connection_loss(&self) -> bool {
        let StoreError::Unavailable {
            source: Some(source),
            ..
        } = self
        else {
            return false;
        };
        let Some(e) = source.downcast_ref::<sqlx::Error>() else {
            return false;
        };
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            // 08: connection exception; 57P01-57P03: the server is shutting down or starting
            // (crash recovery); 25006: a read-only transaction (a standby not yet promoted, or
            // a demoted primary still reached).
            sqlx::Error::Database(db) => db.code().is_some_and(|c| {
                c.starts_with("08") || matches!(&*c, "57P01" | "57P02" | "57P03" | "25006")
            }),
            _ => false,
        }
    }

    /// The store cannot do `what`, and no other error says why (`what` says it all).
    pub fn refused(what: impl Into<Cow<'static, str>>) -> Self {
        StoreError::Unavailable {
            what: what.into(),
            source: None,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::unavailable("a database call failed", e)
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::unavailable("an SQLite call failed", e)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// What the writer waits out (a failover) and what it does not (a refusal).
    #[test]
    fn only_a_lost_or_refused_connection_is_a_connection_loss() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(StoreError::from(sqlx::Error::Io(io)).is_connection_loss());
        assert!(StoreError::from(sqlx::Error::PoolTimedOut).is_connection_loss());
        assert!(!StoreError::from(sqlx::Error::RowNotFound).is_connection_loss());
        assert!(!StoreError::refused("no").is_connection_loss());
        assert!(!StoreError::KeyAnswered.is_connection_loss());
    }

    #[test]
    fn a_driver_error_is_kept_as_the_source_not_in_the_message() {
        let e = StoreError::from(sqlx::Error::PoolTimedOut);
        assert_eq!(e.to_string(), "store unavailable: a database call failed");
        let source = e.source().expect("the driver's error is the source");
        assert_eq!(source.to_string(), sqlx::Error::PoolTimedOut.to_string());
        // A clone (every request of a failed batch gets one) keeps the same cause.
        assert!(e.clone().source().is_some());
        assert!(StoreError::refused("no head returned").source().is_none());
    }
}
