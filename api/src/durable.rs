//! The server's side of Durable Streams (the `threadstream-durable-streams` crate): the engine's
//! context, built from the server's configuration, and what the engine asks of the server:
//! a request body read within the size limit, a slot for an SSE reader,
//! the caller as an actor, and its errors answered as every route's.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use threadstream_durable_streams::signing::Signing;
use threadstream_durable_streams::{
    webhook_client, Actor, Context, DurableError, Streams, Webhooks,
};
use threadstream_store::EventLog;
use tokio::sync::watch;

pub use threadstream_durable_streams::WebhookTargets;

use crate::error::ApiError;
use crate::extract::{body_error, Caller};
use crate::limits::{Limits, SseSlot};

/// The engine's context: the log, fresh folds, the stored signing key, a webhook client for
/// `webhook_targets`, and the settings the protocol reads (`--stream-long-poll-secs`, the
/// listen address).
pub async fn context(
    log: &EventLog,
    shutdown: watch::Receiver<bool>,
    long_poll: Duration,
    webhook_targets: WebhookTargets,
    addr: SocketAddr,
) -> anyhow::Result<Context> {
    Ok(Context {
        log: log.clone(),
        streams: Streams::default(),
        webhooks: Webhooks {
            signing: Signing::load(log).await?,
            client: webhook_client(webhook_targets)?,
        },
        shutdown,
        long_poll,
        webhook_targets,
        addr,
    })
}

/// The caller as the engine knows them: their user, and whether they may read every user's
/// streams.
pub fn actor(caller: &Caller) -> Actor {
    Actor {
        user_id: caller.user_id.clone(),
        admin: caller.is_admin(),
    }
}

/// The engine's answer, or its error answered as every route's.
pub fn answer(result: Result<Response, DurableError>) -> Response {
    result.unwrap_or_else(|e| ApiError::from(e).into_response())
}

/// A slot for one SSE reader of `caller` (the connection limits), or the 429 that refuses it.
pub fn sse_slot<'a>(
    limits: &'a Limits,
    caller: &'a Caller,
) -> impl FnOnce() -> Result<SseSlot, Response> + 'a {
    move || {
        limits
            .sse_slot(&caller.user_id, crate::metrics::DURABLE_STREAMS)
            .map_err(IntoResponse::into_response)
    }
}

/// A body too large is still read (and dropped) up to this many bytes before the 413, so a
/// client that sends it whole gets the answer instead of a reset connection.
pub const DRAIN_LIMIT: usize = 64 << 20;

/// A request's body, read within `limit` bytes (`--max-body-bytes`: 413 above it).
pub async fn read_body(limit: usize, body: Body) -> Result<Bytes, ApiError> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut buf = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| body_error(&e, limit))?;
        seen += chunk.len();
        if seen <= limit {
            buf.extend_from_slice(&chunk);
        } else if seen > DRAIN_LIMIT {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    Ok(buf.freeze())
}

/// [`read_body`] as the engine awaits it, when it wants the body: its refusal is the answer.
pub async fn body(limit: usize, body: Body) -> Result<Bytes, Response> {
    read_body(limit, body)
        .await
        .map_err(IntoResponse::into_response)
}
