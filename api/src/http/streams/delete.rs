//! `DELETE /v1/stream/*`: delete a stream, releasing the source it forked from.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see the module above)

use super::*;

/// `DELETE /v1/stream/*`: the stream ends; a source with live forks is kept for them (410 to
/// its own clients) until the last is deleted.
#[utoipa::path(
    delete,
    operation_id = "streamsDelete",
    path = "/v1/stream/{*path}",
    tag = "durable-streams",
    params(("path" = String, Path, description = "The stream path (may contain `/`): at most 1024 characters, no control characters")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "An ingest-only token, or an admin on another user's stream (`read_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such stream, or another user's", body = crate::error::ErrorBody),
        (status = 410, description = "Deleted already", body = crate::error::ErrorBody)
    )
)]
pub async fn delete(State(ctx): State<ApiContext>, caller: Caller, req: Request) -> Response {
    match delete_inner(&ctx, &caller, req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn delete_inner(
    ctx: &ApiContext,
    caller: &Caller,
    req: Request,
) -> Result<Response, Response> {
    let ise = |e: ApiError| e.into_response();
    writer(caller).map_err(ise)?;
    let path = stream_path(req.uri().path()).map_err(ise)?;
    let (found, stream, _) = find(ctx, caller, &path, false).await.map_err(ise)?;
    let life = match found {
        Found::Live(l) => l,
        Found::Gone => {
            // Soft-deleted stays 410; expired with forks reading through it is deleted now.
            match stream.life {
                Some(l) if !l.soft_deleted && visible(caller, &l, false) => Box::new(l),
                _ => return Err(gone()),
            }
        }
        Found::Missing => return Err(not_found()),
    };
    let mut parts = vec![Part::new(
        log_stream_id(&path),
        vec![stream_command(caller, &path, StreamCommand::Delete, ctx)],
    )];
    if let Some(f) = &life.fork {
        if life.live_forks.is_empty() {
            parts.push(Part::new(
                log_stream_id(&f.source),
                vec![stream_command(
                    caller,
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
        release_chain(ctx, caller, life.fork.clone()).await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// After a fork let go of `parent`: a soft-deleted source whose last fork went is gone now, so
/// it lets go of its own source in turn, up the chain.
async fn release_chain(ctx: &ApiContext, caller: &Caller, mut parent: Option<ForkOf>) {
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
            caller,
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
