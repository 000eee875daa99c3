//! Durable Streams: `/v1/stream/*` (create `PUT`, append `POST`, read `GET` with catch-up,
//! long-poll and SSE, `HEAD`, `DELETE`, `OPTIONS`), the protocol of
//! <https://github.com/durable-streams/durable-streams> and its conformance suite
//! (`tests/conformance/durable-streams`). Streams live in the log (see `crate::durable`); a
//! stream belongs to the user who created it, like a thread.
//!
//! A refusal here is a whole protocol answer (status, the protocol's headers, a JSON body naming
//! the problem), built where the rule is known: the handlers' `Err` is that `Response`.
#![allow(clippy::result_large_err)]
//!
//! One module per method group: `create` (PUT, forks), `append` (POST, producers), `read` (GET,
//! HEAD, OPTIONS, through `crate::durable::reader`), `delete` (DELETE, releasing forks); what they
//! share (finding a stream for a caller, its path, commands, offsets) is here.

mod append;
mod create;
mod delete;
mod read;

pub use append::{__path_append, append};
pub use create::{__path_create, create};
pub use delete::{__path_delete, delete};
pub use read::{__path_head, __path_options, __path_read, head, options, read};

use std::time::Duration;
use threadstream_domain::ErrorCode;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use threadstream_domain::clock::now_ms;
use threadstream_domain::durable_stream::StreamChange;
use threadstream_domain::durable_stream::{
    format_offset, log_stream_id, normalize_content_type, parse_offset, CreateSpec, DurableStream,
    StreamCommand, StreamLife, StreamRefusal,
};
use threadstream_domain::event::durable_stream::{ForkOf, ProducerStamp, StreamData};
use threadstream_domain::event::EventBody;
use threadstream_domain::{StoredEvent, ThreadError};
use threadstream_store::{Part, StoreError};

use crate::auth::Role;
use crate::durable::protocol::*;
use crate::durable::read::{appended, data_of, messages, prefix_of, Message};
use crate::durable::reader::{self, Lookup, ReadSource, View};
use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

/// The routes' prefix (`/v1/stream/{*path}` in `crate::http`); a stream's path is the whole
/// request path, as forks name their source.
pub(super) const ROUTE_PREFIX: &str = "/v1/stream/";

pub(super) use crate::access::durable_streams_user as writer;

/// Whether `caller` may see `life`: its owner, or (reading) an admin.
pub(super) fn visible(caller: &Caller, life: &StreamLife, read: bool) -> bool {
    life.owner == caller.user_id || (read && caller.is_admin())
}

/// What a stream is to this caller now.
pub(super) enum Found {
    Live(Box<StreamLife>),
    Gone,
    Missing,
}

/// Finds the stream at `path` for `caller` (`read`: to read it, which an admin may): what it is
/// to the caller, the whole fold, and the id of the last event of its log stream folded.
pub(super) async fn find(
    ctx: &ApiContext,
    caller: &Caller,
    path: &str,
    read: bool,
) -> Result<(Found, DurableStream, i64), ApiError> {
    let (stream, last_id) = ctx.streams.current_at(&ctx.log, path).await?;
    let last_read = ctx.streams.last_read_ms(path);
    let now = now_ms();
    let found = match stream.live(now, last_read) {
        Some(life) if !visible(caller, life, read) => {
            if caller.is_admin() && !read {
                return Err(ApiError::Forbidden {
                    code: ErrorCode::ReadOnly,
                    message: format!(
                        "stream '{path}' belongs to another user: an admin may read it, not act on it"
                    ),
                });
            }
            Found::Missing
        }
        Some(life) if life.soft_deleted || life.expired(now, last_read) => Found::Gone,
        Some(life) => Found::Live(Box::new(life.clone())),
        None => Found::Missing,
    };
    Ok((found, stream, last_id))
}

pub(super) fn stream_command(
    caller: &Caller,
    path: &str,
    command: StreamCommand,
    ctx: &ApiContext,
) -> StreamChange {
    StreamChange {
        command,
        by: caller.user_id.clone(),
        now_ms: now_ms(),
        last_read_ms: ctx.streams.last_read_ms(path),
    }
}

/// The offset after the messages among `stored` (a write's rows), else `fallback`.
pub(super) fn offset_after(stored: &[StoredEvent], fallback: i64) -> i64 {
    stored
        .iter()
        .rev()
        .find(|r| match r.event_type.as_str() {
            "stream-appended" => true,
            "stream-created" => r.payload.contains("\"data\":"),
            _ => false,
        })
        .map_or(fallback, |r| r.id)
}

/// The stream path of a request: the whole path, decoded as the router saw it.
pub(super) fn stream_path(req_path: &str) -> Result<String, ApiError> {
    let name = req_path.strip_prefix(ROUTE_PREFIX).unwrap_or("");
    if name == "__ds" || name.starts_with("__ds/") {
        // The protocol's reserved control namespace (subscriptions): never a stream.
        return Err(ApiError::NotFound(format!("no such route: {req_path}")));
    }
    if name.is_empty() {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidStreamPath,
            "a stream path needs a name after /v1/stream/",
        ));
    }
    if req_path.len() > 1024 || req_path.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            ErrorCode::InvalidStreamPath,
            "a stream path is at most 1024 characters, without control characters",
        ));
    }
    Ok(req_path.to_string())
}
