//! The crate's one error type, and how a protocol request stops before its answer.
//!
//! A refusal the protocol phrases itself (a status, its headers, a JSON body naming the
//! problem) is an answer, built where the rule is known. What is not the protocol's to phrase
//! (the store failed, a rule of another aggregate, malformed input, a caller who may not act)
//! is a [`DurableError`], which the server turns into its own error answer (`threadstream-api`
//! converts it with one `From`).

use axum::response::Response;
use threadstream_domain::{ErrorCode, ThreadError};
use threadstream_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// A rule of the stream's aggregate refused the command; nothing was stored.
    #[error(transparent)]
    Refused(ThreadError),
    /// The store failed (unavailable, closed, corrupt); nothing was stored.
    #[error(transparent)]
    Store(StoreError),
    /// Malformed input (400).
    #[error("{message}")]
    BadRequest { code: ErrorCode, message: String },
    /// No such route (404, `not_found`).
    #[error("{0}")]
    NotFound(String),
    /// The caller may not do this (403).
    #[error("{message}")]
    Forbidden { code: ErrorCode, message: String },
}

impl DurableError {
    pub fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        DurableError::BadRequest {
            code,
            message: message.into(),
        }
    }
}

impl From<StoreError> for DurableError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Rule(rule) => DurableError::Refused(rule),
            e => DurableError::Store(e),
        }
    }
}

/// How a protocol request ends before its answer: with a refusal the protocol phrases (a
/// whole answer), or with an error for the server to answer.
pub(crate) enum Stop {
    Answer(Response),
    Failed(DurableError),
}

impl From<Response> for Stop {
    fn from(r: Response) -> Self {
        Stop::Answer(r)
    }
}

impl From<DurableError> for Stop {
    fn from(e: DurableError) -> Self {
        Stop::Failed(e)
    }
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Failed(e.into())
    }
}

/// A request's answer: what it answered, or the refusal it stopped at; `Err` only for an error
/// the server answers.
pub(crate) fn settle(r: Result<Response, Stop>) -> Result<Response, DurableError> {
    match r {
        Ok(resp) | Err(Stop::Answer(resp)) => Ok(resp),
        Err(Stop::Failed(e)) => Err(e),
    }
}
