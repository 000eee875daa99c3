//! `DELETE /v1/stream/*`: delete a stream, releasing the source it forked from.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see crate::error)

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use threadstream_domain::durable_stream::{log_stream_id, StreamCommand};
use threadstream_domain::event::durable_stream::ForkOf;
use threadstream_domain::event::EventBody;
use threadstream_store::Part;

use super::shared::{find, stream_command, stream_path, visible, Found};
use crate::context::{Actor, Context};
use crate::error::{settle, DurableError, Stop};
use crate::protocol::{gone, not_found, refusal_response};

/// `DELETE /v1/stream/*` at `req_path` by `actor`: the stream ends; a source with live forks
/// is kept for them (410 to its own clients) until the last is deleted.
pub async fn delete(
    ctx: &Context,
    actor: &Actor,
    req_path: &str,
) -> Result<Response, DurableError> {
    settle(delete_inner(ctx, actor, req_path).await)
}

async fn delete_inner(ctx: &Context, actor: &Actor, req_path: &str) -> Result<Response, Stop> {
    let path = stream_path(req_path)?;
    let (found, stream, _) = find(ctx, actor, &path, false).await?;
    let life = match found {
        Found::Live(l) => l,
        Found::Gone => {
            // Soft-deleted stays 410; expired with forks reading through it is deleted now.
            match stream.life {
                Some(l) if !l.soft_deleted && visible(actor, &l, false) => Box::new(l),
                _ => return Err(gone().into()),
            }
        }
        Found::Missing => return Err(not_found().into()),
    };
    let mut parts = vec![Part::new(
        log_stream_id(&path),
        vec![stream_command(actor, &path, StreamCommand::Delete, ctx)],
    )];
    if let Some(f) = &life.fork {
        if life.live_forks.is_empty() {
            parts.push(Part::new(
                log_stream_id(&f.source),
                vec![stream_command(
                    actor,
                    &f.source,
                    StreamCommand::ReleaseFork { fork: path.clone() },
                    ctx,
                )],
            ));
        }
    }
    ctx.log
        .append_parts(parts)
        .await
        .map_err(|e| refusal_response(e.into(), None))?;
    if life.live_forks.is_empty() {
        release_chain(ctx, actor, life.fork.clone()).await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// After a fork let go of `parent`: a soft-deleted source whose last fork went is gone now, so
/// it lets go of its own source in turn, up the chain.
async fn release_chain(ctx: &Context, actor: &Actor, mut parent: Option<ForkOf>) {
    while let Some(p) = parent.take() {
        let Ok(stream) = ctx.streams.current(&ctx.log, &p.source).await else {
            return;
        };
        if stream.life.is_some() {
            return; // still alive, or soft-deleted with other forks
        }
        // Gone: the life that began at `source_created_id` held the fork it was made from.
        let Ok(first) = ctx
            .log
            .read_thread(&log_stream_id(&p.source), p.source_created_id - 1, 1)
            .await
        else {
            return;
        };
        let Some(grand) = first.first().and_then(|r| match r.decode().ok()?.body {
            EventBody::StreamCreated(c) => c.fork,
            _ => None,
        }) else {
            return;
        };
        let release = stream_command(
            actor,
            &grand.source,
            StreamCommand::ReleaseFork {
                fork: p.source.clone(),
            },
            ctx,
        );
        if ctx
            .log
            .append(&log_stream_id(&grand.source), vec![release])
            .await
            .is_err()
        {
            return;
        }
        parent = Some(grand);
    }
}
