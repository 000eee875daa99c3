//! `GET`, `HEAD` and `OPTIONS /v1/stream/*`: reads, through the one read engine.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see the module above)

use super::*;
use threadstream_domain::ErrorCode;

/// A Durable Stream as the read engine sees it (`crate::durable::reader`).
#[derive(Clone)]
struct StreamSource {
    ctx: ApiContext,
    caller: Caller,
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

    async fn lookup(&self) -> Result<Lookup<Self::State>, ApiError> {
        let (found, _, log_cursor) = find(&self.ctx, &self.caller, &self.path, true).await?;
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
    ) -> Result<(Vec<Message>, bool), ApiError> {
        messages(&self.ctx.log, &self.path, &view.state, after, limit).await
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

/// `HEAD /v1/stream/*`: the stream's metadata, no body.
#[utoipa::path(
    head,
    operation_id = "streamsHead",
    path = "/v1/stream/{*path}",
    tag = "durable-streams",
    params(("path" = String, Path, description = "The stream path (may contain `/`): at most 1024 characters, no control characters")),
    responses(
        (status = 200, description = "The stream's metadata in headers, no body", headers(("Stream-Next-Offset" = String, description = "The offset after the last message"), ("ETag" = String, description = "The read's entity tag"), ("Stream-Up-To-Date" = String, description = "`true` at the stream's end"), ("Stream-Closed" = String, description = "`true` once closed"), ("Stream-Cursor" = String, description = "Long-poll and SSE cache-busting cursor"))),
        (status = 403, description = "An ingest-only token (`ingest_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such stream, or another user's", body = crate::error::ErrorBody),
        (status = 410, description = "Deleted", body = crate::error::ErrorBody)
    )
)]
pub async fn head(State(ctx): State<ApiContext>, caller: Caller, req: Request) -> Response {
    let path = match stream_path(req.uri().path()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if let Some(gone) = erased_offset(&ctx, &path, req.uri().query()).await {
        return gone;
    }
    let source = StreamSource {
        ctx: ctx.clone(),
        caller,
        path,
    };
    let mut resp = reader::head(&source).await;
    // A stream's TTL and expiry are part of its metadata.
    if resp.status() == StatusCode::OK {
        if let Ok((Found::Live(life), _, _)) = find(&ctx, &source.caller, &source.path, true).await
        {
            if let Some(ttl) = life.ttl_seconds {
                set_header(&mut resp, TTL, ttl);
            }
            if let Some(at) = &life.expires_at {
                set_header(&mut resp, EXPIRES_AT, at);
            }
        }
    }
    resp
}

/// `GET /v1/stream/*`: catch-up, long-poll or SSE.
#[utoipa::path(
    get,
    operation_id = "streamsRead",
    path = "/v1/stream/{*path}",
    tag = "durable-streams",
    params(("path" = String, Path, description = "The stream path (may contain `/`): at most 1024 characters, no control characters"), ("offset" = Option<String>, Query, description = "`-1` (the start), `now`, or an offset the server gave"), ("live" = Option<String>, Query, description = "`long-poll` or `sse`; absent: catch-up"), ("cursor" = Option<String>, Query, description = "The last `Stream-Cursor` (long-poll, SSE)"), ("If-None-Match" = Option<String>, Header, description = "An ETag of an earlier read (304)")),
    responses(
        (status = 200, description = "The stream: the messages after `offset` (a JSON array in JSON mode, else the bytes), or with `live=sse` an SSE stream of `data` and `control` events", headers(("Stream-Next-Offset" = String, description = "The offset after the last message"), ("ETag" = String, description = "The read's entity tag"), ("Stream-Up-To-Date" = String, description = "`true` at the stream's end"), ("Stream-Closed" = String, description = "`true` once closed"), ("Stream-Cursor" = String, description = "Long-poll and SSE cache-busting cursor")), content((crate::openapi::JsonMessages = "application/json"), (Vec<u8> = "application/octet-stream"), (String = "text/event-stream"))),
        (status = 204, description = "Long-poll: nothing new within `--stream-long-poll-secs`", headers(("Stream-Next-Offset" = String, description = "The offset to poll from"), ("Stream-Cursor" = String, description = "The cursor for the next poll"))),
        (status = 304, description = "Not modified since `If-None-Match`"),
        (status = 400, description = "A malformed offset, `live` or cursor (`invalid_offset`, …), or path", body = crate::error::ErrorBody),
        (status = 403, description = "An ingest-only token (`ingest_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such stream, or another user's (`not_found`)", body = crate::error::ErrorBody),
        (status = 410, description = "Deleted (`stream_gone`), or an offset into erased history (`offset_erased`)", body = crate::error::ErrorBody)
    )
)]
pub async fn read(State(ctx): State<ApiContext>, caller: Caller, req: Request) -> Response {
    if let Role::Ingest { .. } = caller.role {
        return ApiError::Forbidden {
            code: ErrorCode::IngestOnly,
            message: "an ingest-only token cannot read".into(),
        }
        .into_response();
    }
    let path = match stream_path(req.uri().path()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if let Some(gone) = erased_offset(&ctx, &path, req.uri().query()).await {
        return gone;
    }
    let source = StreamSource {
        ctx: ctx.clone(),
        caller: caller.clone(),
        path,
    };
    reader::read(&ctx, &caller, source, req.uri(), req.headers()).await
}

/// `OPTIONS`: the CORS preflight (the protocol layer adds the CORS headers).
#[utoipa::path(
    options,
    operation_id = "streamsOptions",
    path = "/v1/stream/{*path}",
    tag = "durable-streams",
    params(("path" = String, Path, description = "The stream path (may contain `/`): at most 1024 characters, no control characters")),
    responses(
        (status = 204, description = "CORS preflight")
    )
)]
pub async fn options() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// 410 Gone for a read whose offset points into history an erasure removed (`erase --user`
/// takes the user's streams), as for a thread read as a stream; `None` otherwise, a malformed
/// offset included (the reader refuses it).
async fn erased_offset(ctx: &ApiContext, path: &str, query: Option<&str>) -> Option<Response> {
    let offset = crate::durable::protocol::read_query(query)
        .ok()
        .and_then(|q| q.offset)
        .and_then(|o| threadstream_domain::durable_stream::parse_offset(&o))?;
    match crate::sse::erased::erased_before(ctx, &log_stream_id(path), offset).await {
        Ok(Some(erased)) => Some(erased.durable_gone()),
        Ok(None) => None,
        Err(e) => Some(e.into_response()),
    }
}
