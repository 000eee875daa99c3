//! Durable Streams: `/v1/stream/*` (create `PUT`, append `POST`, read `GET` with catch-up,
//! long-poll and SSE, `HEAD`, `DELETE`, `OPTIONS`), the protocol of
//! <https://github.com/durable-streams/durable-streams> and its conformance suite
//! (`tests/conformance/durable-streams`). The engine is `threadstream_durable_streams::stream`;
//! these routes check the caller, hand it the request, and answer its errors.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use threadstream_domain::durable_stream::log_stream_id;
use threadstream_domain::ErrorCode;
use threadstream_durable_streams::{protocol, stream};

use crate::access::durable_streams_user as writer;
use crate::auth::Role;
use crate::durable::{actor, answer, body, sse_slot};
use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

/// `PUT /v1/stream/*`: create (idempotent for the same configuration), or fork.
#[utoipa::path(
    put,
    operation_id = "streamsCreate",
    path = "/v1/stream/{*path}",
    tag = "durable-streams",
    params(("path" = String, Path, description = "The stream path (may contain `/`): at most 1024 characters, no control characters"), ("Content-Type" = Option<String>, Header, description = "The stream's content type (`application/json`: JSON mode)"), ("Stream-TTL" = Option<String>, Header, description = "Seconds without writes before the stream expires"), ("Stream-Expires-At" = Option<String>, Header, description = "RFC 3339 expiry (not with Stream-TTL)"), ("Stream-Closed" = Option<String>, Header, description = "`true`: create it closed"), ("Stream-Forked-From" = Option<String>, Header, description = "`/v1/stream/<source>`: create a fork"), ("Stream-Fork-Offset" = Option<String>, Header, description = "Where the fork cuts its source"), ("Stream-Fork-Sub-Offset" = Option<String>, Header, description = "Where in the cut message")),
    request_body(content(("application/json"), ("application/octet-stream"), ("text/plain")), description = "Optional: the first message(s)"),
    responses(
        (status = 201, description = "Created", headers(("Location" = String, description = "The stream's URL"), ("Stream-Next-Offset" = String, description = "The offset after the first messages"))),
        (status = 200, description = "It exists with the same configuration", headers(("Stream-Next-Offset" = String, description = "The offset at its end"))),
        (status = 400, description = "Malformed headers, body or path (`invalid_ttl`, `invalid_json`, …)", body = crate::error::ErrorBody),
        (status = 403, description = "An ingest-only token, or an admin on another user's stream (`read_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "Another user's stream, or the fork's source is unknown (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "It exists with another configuration, or was deleted while forks read through it (`stream_exists`, …)", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes`", body = crate::error::ErrorBody),
        (status = 410, description = "The fork's source is deleted", body = crate::error::ErrorBody)
    )
)]
pub async fn create(State(ctx): State<ApiContext>, caller: Caller, req: Request) -> Response {
    if let Err(e) = writer(&caller) {
        return e.into_response();
    }
    let (parts, b) = req.into_parts();
    let (actor, b) = (actor(&caller), body(ctx.config.max_body_bytes, b));
    answer(stream::create(&ctx.durable, &actor, parts.uri.path(), &parts.headers, b).await)
}

/// `POST /v1/stream/*`: append (or, with an empty body and `Stream-Closed: true`, close).
#[utoipa::path(
    post,
    operation_id = "streamsAppend",
    path = "/v1/stream/{*path}",
    tag = "durable-streams",
    params(("path" = String, Path, description = "The stream path (may contain `/`): at most 1024 characters, no control characters"), ("Content-Type" = Option<String>, Header, description = "Must be the stream's"), ("Stream-Seq" = Option<String>, Header, description = "Writer coordination: must increase"), ("Stream-Closed" = Option<String>, Header, description = "`true`: close the stream (after this body, if any)"), ("Producer-Id" = Option<String>, Header, description = "Idempotent producer"), ("Producer-Epoch" = Option<String>, Header, description = "Idempotent producer epoch"), ("Producer-Seq" = Option<String>, Header, description = "Idempotent producer sequence number")),
    request_body(content(("application/json"), ("application/octet-stream"), ("text/plain")), description = "Optional: the first message(s)"),
    responses(
        (status = 204, description = "Appended (or a duplicate of a stored producer write: nothing stored)", headers(("Stream-Next-Offset" = String, description = "The offset after this append"), ("Producer-Epoch" = String, description = "The producer's epoch"), ("Producer-Seq" = String, description = "The producer's highest stored sequence number"))),
        (status = 200, description = "Appended, with producer headers", headers(("Stream-Next-Offset" = String, description = "The offset after this append"))),
        (status = 400, description = "Malformed headers or body (`invalid_json`, `empty_body`, `empty_array`, …)", body = crate::error::ErrorBody),
        (status = 403, description = "A fenced producer epoch (`stale_epoch`, with `Producer-Epoch`), an ingest-only token, or an admin on another user's stream (`read_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such stream, or another user's", body = crate::error::ErrorBody),
        (status = 409, description = "Content type mismatch, the stream is closed, a `Stream-Seq` regression, or a producer sequence gap (with `Producer-Expected-Seq` and `Producer-Received-Seq`)", body = crate::error::ErrorBody),
        (status = 410, description = "Deleted", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes`", body = crate::error::ErrorBody)
    )
)]
pub async fn append(State(ctx): State<ApiContext>, caller: Caller, req: Request) -> Response {
    if let Err(e) = writer(&caller) {
        return e.into_response();
    }
    let (parts, b) = req.into_parts();
    let (actor, b) = (actor(&caller), body(ctx.config.max_body_bytes, b));
    answer(stream::append(&ctx.durable, &actor, parts.uri.path(), &parts.headers, b).await)
}

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
    if let Err(e) = writer(&caller) {
        return e.into_response();
    }
    answer(stream::delete(&ctx.durable, &actor(&caller), req.uri().path()).await)
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
    let path = match stream::stream_path(req.uri().path()) {
        Ok(p) => p,
        Err(e) => return ApiError::from(e).into_response(),
    };
    if let Some(gone) = erased_offset(&ctx, &path, req.uri().query()).await {
        return gone;
    }
    answer(stream::head(&ctx.durable, &actor(&caller), path).await)
}

/// `GET /v1/stream/*`: catch-up, long-poll or SSE.
#[utoipa::path(
    get,
    operation_id = "streamsRead",
    path = "/v1/stream/{*path}",
    tag = "durable-streams",
    params(("path" = String, Path, description = "The stream path (may contain `/`): at most 1024 characters, no control characters"), ("offset" = Option<String>, Query, description = "`-1` (the start), `now`, or an offset the server gave"), ("live" = Option<String>, Query, description = "`long-poll` or `sse`; absent: catch-up"), ("cursor" = Option<String>, Query, description = "The last `Stream-Cursor` (long-poll, SSE)"), ("If-None-Match" = Option<String>, Header, description = "An ETag of an earlier read (304)")),
    responses(
        (status = 200, description = "The stream: the messages after `offset` (a JSON array in JSON mode, else the bytes under the stream's content type), or with `live=sse` an SSE stream of `data` and `control` events", headers(("Stream-Next-Offset" = String, description = "The offset after the last message"), ("ETag" = String, description = "The read's entity tag"), ("Stream-Up-To-Date" = String, description = "`true` at the stream's end"), ("Stream-Closed" = String, description = "`true` once closed"), ("Stream-Cursor" = String, description = "Long-poll and SSE cache-busting cursor"), ("Stream-SSE-Data-Encoding" = String, description = "`base64` on a live SSE read of a stream that is neither JSON nor `text/*`: each `event: data` is its bytes in base64")), content((crate::openapi::JsonMessages = "application/json"), (String = "*/*"), (String = "text/event-stream"))),
        crate::openapi::DurableReadAnswers
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
    let path = match stream::stream_path(req.uri().path()) {
        Ok(p) => p,
        Err(e) => return ApiError::from(e).into_response(),
    };
    if let Some(gone) = erased_offset(&ctx, &path, req.uri().query()).await {
        return gone;
    }
    let (uri, headers) = (req.uri(), req.headers());
    let slot = sse_slot(&ctx.limits, &caller);
    answer(
        stream::read(
            &ctx.durable,
            &actor(&caller),
            path,
            uri.query(),
            headers,
            slot,
        )
        .await,
    )
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
    let offset = protocol::read_query(query)
        .ok()
        .and_then(|q| q.offset)
        .and_then(|o| threadstream_domain::durable_stream::parse_offset(&o))?;
    match crate::sse::erased::erased_before(ctx, &log_stream_id(path), offset).await {
        Ok(Some(erased)) => Some(erased.durable_gone()),
        Ok(None) => None,
        Err(e) => Some(e.into_response()),
    }
}
