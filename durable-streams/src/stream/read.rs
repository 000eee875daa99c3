//! `GET` and `HEAD /v1/stream/*`: reads, through the one read engine.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see crate::error)

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use threadstream_domain::clock::now_ms;
use threadstream_domain::durable_stream::{log_stream_id, StreamLife};
use threadstream_domain::StoredEvent;
use threadstream_store::Sight;

use super::shared::{find, Found};
use crate::context::{Actor, Context};
use crate::error::DurableError;
use crate::protocol::{set_header, EXPIRES_AT, TTL};
use crate::read::{appended, messages, Message};
use crate::reader::{self, Lookup, ReadSource, View};

/// A Durable Stream as the read engine sees it (`crate::reader`).
#[derive(Clone)]
struct StreamSource {
    ctx: Context,
    actor: Actor,
    path: String,
}

impl ReadSource for StreamSource {
    type State = Box<StreamLife>;

    fn log_id(&self) -> String {
        log_stream_id(&self.path)
    }

    fn name(&self) -> &str {
        &self.path
    }

    async fn lookup(&self) -> Result<Lookup<Self::State>, DurableError> {
        let (found, _, log_cursor) = find(&self.ctx, &self.actor, &self.path, true).await?;
        Ok(match found {
            Found::Live(life) => Lookup::Live(View {
                content_type: life.content_type.clone(),
                current: life.current_offset(),
                closed: life.closed,
                log_cursor,
                state: life,
            }),
            Found::Gone => Lookup::Gone,
            Found::Missing => Lookup::Missing,
        })
    }

    async fn messages(
        &self,
        view: &View<Self::State>,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<Message>, bool), DurableError> {
        // Everything the view folded, at least: a standby may serve it when it holds that.
        let sight = Sight::Upto(view.log_cursor);
        Ok(messages(&self.ctx.log, sight, &self.path, &view.state, after, limit).await?)
    }

    /// Appends are followed in memory; anything else (a close, a deletion, forks added or
    /// released) and an expiry are left to a fresh lookup.
    fn follow(
        &self,
        view: &mut View<Self::State>,
        events: &[&StoredEvent],
    ) -> Option<Vec<Message>> {
        let mut msgs = Vec::with_capacity(events.len());
        for &row in events {
            if row.event_type != "stream-appended" {
                return None;
            }
            let (message, closes) = appended(row.clone()).ok()?;
            if closes {
                return None;
            }
            view.log_cursor = row.id;
            view.current = row.id;
            view.state.last_message_id = Some(row.id);
            view.state.last_write_ms = row.ts;
            msgs.extend(message);
        }
        let last_read = self.ctx.streams.last_read_ms(&self.path);
        if view.state.expired(now_ms(), last_read) {
            return None;
        }
        Some(msgs)
    }

    fn touch(&self) {
        self.ctx.streams.touch(&self.path, now_ms());
    }
}

/// `HEAD /v1/stream/*` of the stream at `path` (checked by [`super::stream_path`]): its
/// metadata, no body.
pub async fn head(ctx: &Context, actor: &Actor, path: String) -> Result<Response, DurableError> {
    let source = StreamSource {
        ctx: ctx.clone(),
        actor: actor.clone(),
        path,
    };
    let mut resp = reader::head(&source).await?;
    // A stream's TTL and expiry are part of its metadata.
    if resp.status() == StatusCode::OK {
        if let Ok((Found::Live(life), _, _)) = find(ctx, actor, &source.path, true).await {
            if let Some(ttl) = life.ttl_seconds {
                set_header(&mut resp, TTL, ttl);
            }
            if let Some(at) = &life.expires_at {
                set_header(&mut resp, EXPIRES_AT, at);
            }
        }
    }
    Ok(resp)
}

/// `GET /v1/stream/*` of the stream at `path`: catch-up, long-poll or SSE (`sse_slot`: see
/// [`reader::read`]).
pub async fn read<S: Send + 'static>(
    ctx: &Context,
    actor: &Actor,
    path: String,
    query: Option<&str>,
    headers: &HeaderMap,
    sse_slot: impl FnOnce() -> Result<S, Response>,
) -> Result<Response, DurableError> {
    let source = StreamSource {
        ctx: ctx.clone(),
        actor: actor.clone(),
        path,
    };
    reader::read(ctx, sse_slot, source, query, headers).await
}
