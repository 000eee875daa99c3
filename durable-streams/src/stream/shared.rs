//! What the `/v1/stream/*` operations share: finding a stream for an actor, its path, commands
//! and offsets.

use threadstream_domain::clock::now_ms;
use threadstream_domain::durable_stream::{DurableStream, StreamChange, StreamCommand, StreamLife};
use threadstream_domain::{ErrorCode, StoredEvent};

use crate::context::{Actor, Context};
use crate::error::DurableError;

/// The routes' prefix (`/v1/stream/{*path}`); a stream's path is the whole request path, as
/// forks name their source.
pub const ROUTE_PREFIX: &str = "/v1/stream/";

/// Whether `actor` may see `life`: its owner, or (reading) an admin.
pub(crate) fn visible(actor: &Actor, life: &StreamLife, read: bool) -> bool {
    life.owner == actor.user_id || (read && actor.admin)
}

/// What a stream is to this actor now.
pub(crate) enum Found {
    Live(Box<StreamLife>),
    Gone,
    Missing,
}

/// Finds the stream at `path` for `actor` (`read`: to read it, which an admin may): what it is
/// to the actor, the whole fold, and the id of the last event of its log stream folded.
pub(crate) async fn find(
    ctx: &Context,
    actor: &Actor,
    path: &str,
    read: bool,
) -> Result<(Found, DurableStream, i64), DurableError> {
    let (stream, last_id) = ctx.streams.current_at(&ctx.log, path).await?;
    let last_read = ctx.streams.last_read_ms(path);
    let now = now_ms();
    let found = match stream.live(now, last_read) {
        Some(life) if !visible(actor, life, read) => {
            if actor.admin && !read {
                return Err(DurableError::Forbidden {
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

pub(crate) fn stream_command(
    actor: &Actor,
    path: &str,
    command: StreamCommand,
    ctx: &Context,
) -> StreamChange {
    StreamChange {
        command,
        by: actor.user_id.clone(),
        now_ms: now_ms(),
        last_read_ms: ctx.streams.last_read_ms(path),
    }
}

/// The offset after the messages among `stored` (a write's rows), else `fallback`.
pub(crate) fn offset_after(stored: &[StoredEvent], fallback: i64) -> i64 {
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
pub fn stream_path(req_path: &str) -> Result<String, DurableError> {
    let name = req_path.strip_prefix(ROUTE_PREFIX).unwrap_or("");
    if name == "__ds" || name.starts_with("__ds/") {
        // The protocol's reserved control namespace (subscriptions): never a stream.
        return Err(DurableError::NotFound(format!("no such route: {req_path}")));
    }
    if name.is_empty() {
        return Err(DurableError::bad_request(
            ErrorCode::InvalidStreamPath,
            "a stream path needs a name after /v1/stream/",
        ));
    }
    if req_path.len() > 1024 || req_path.chars().any(char::is_control) {
        return Err(DurableError::bad_request(
            ErrorCode::InvalidStreamPath,
            "a stream path is at most 1024 characters, without control characters",
        ));
    }
    Ok(req_path.to_string())
}
