//! Durable Streams: `/v1/stream/*` (create `PUT`, append `POST`, read `GET` with catch-up,
//! long-poll and SSE, `HEAD`, `DELETE`, `OPTIONS`), the protocol of
//! <https://github.com/durable-streams/durable-streams> and its conformance suite
//! (`tests/conformance/durable-streams`). Streams live in the log (see `crate::durable`); a
//! stream belongs to the user who created it, like a thread.
//!
//! A refusal here is a whole protocol answer (status, the protocol's headers, a JSON body naming
//! the problem), built where the rule is known: the handlers' `Err` is that `Response`.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use threadstream_domain::clock::now_ms;
use threadstream_domain::durable_stream::{
    format_offset, log_stream_id, normalize_content_type, parse_offset, CreateSpec, DurableStream,
    StreamCommand, StreamLife, StreamRefusal,
};
use threadstream_domain::event::durable_stream::{ForkOf, ProducerStamp, StreamData};
use threadstream_domain::event::EventBody;
use threadstream_domain::{StoredEvent, ThreadCommand, ThreadError};
use threadstream_store::StoreError;

use crate::auth::Role;
use crate::durable::protocol::*;
use crate::durable::read::{data_of, messages, prefix_of, Message};
use crate::durable::reader::{self, Lookup, ReadSource, View};
use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

/// The routes' prefix (`/v1/stream/{*path}` in `crate::http`); a stream's path is the whole
/// request path, as forks name their source.
const ROUTE_PREFIX: &str = "/v1/stream/";

/// How long a producer's write that overtook its predecessor waits for it (`wait_for_predecessor`).
const PRODUCER_GAP_WAIT: Duration = Duration::from_millis(100);

/// The caller may write streams (ingest-only tokens may not).
fn writer(caller: &Caller) -> Result<(), ApiError> {
    if let Role::Ingest { .. } = caller.role {
        return Err(ApiError::Forbidden {
            code: "ingest_only",
            message: "an ingest-only token cannot use Durable Streams".into(),
        });
    }
    Ok(())
}

/// Whether `caller` may see `life`: its owner, or (reading) an admin.
fn visible(caller: &Caller, life: &StreamLife, read: bool) -> bool {
    life.owner == caller.user_id || (read && caller.is_admin())
}

/// What a stream is to this caller now.
enum Found {
    Live(Box<StreamLife>),
    Gone,
    Missing,
}

async fn find(
    ctx: &ApiContext,
    caller: &Caller,
    path: &str,
    read: bool,
) -> Result<(Found, DurableStream), ApiError> {
    let stream = ctx.streams.current(&ctx.log, path).await?;
    let last_read = ctx.streams.last_read_ms(path);
    let now = now_ms();
    let found = match stream.live(now, last_read) {
        Some(life) if !visible(caller, life, read) => {
            if caller.is_admin() && !read {
                return Err(ApiError::Forbidden {
                    code: "read_only",
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
    Ok((found, stream))
}

fn stream_command(
    caller: &Caller,
    path: &str,
    command: StreamCommand,
    ctx: &ApiContext,
) -> ThreadCommand {
    ThreadCommand::Stream {
        command,
        by: caller.user_id.clone(),
        now_ms: now_ms(),
        last_read_ms: ctx.streams.last_read_ms(path),
    }
}

/// The offset after the messages among `stored` (a write's rows), else `fallback`.
fn offset_after(stored: &[StoredEvent], fallback: i64) -> i64 {
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
fn stream_path(req_path: &str) -> Result<String, ApiError> {
    let name = req_path.strip_prefix(ROUTE_PREFIX).unwrap_or("");
    if name.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_stream_path",
            "a stream path needs a name after /v1/stream/",
        ));
    }
    if req_path.len() > 1024 || req_path.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "invalid_stream_path",
            "a stream path is at most 1024 characters, without control characters",
        ));
    }
    Ok(req_path.to_string())
}

/// `PUT /v1/stream/*`: create (idempotent for the same configuration), or fork.
#[utoipa::path(
    put,
    operation_id = "streamsCreate",
    path = "/v1/stream/{path}",
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
    match create_inner(&ctx, &caller, req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn create_inner(
    ctx: &ApiContext,
    caller: &Caller,
    req: Request,
) -> Result<Response, Response> {
    let ise = |e: ApiError| e.into_response();
    writer(caller).map_err(ise)?;
    let path = stream_path(req.uri().path()).map_err(ise)?;
    let headers = req.headers().clone();
    let location = format!(
        "http://{}{path}",
        header_str(&headers, "host").unwrap_or("localhost")
    );
    let bad = |code: &str, m: &str| refuse(StatusCode::BAD_REQUEST, code, m);
    let forked_from = header_str(&headers, FORKED_FROM).map(str::to_string);
    let content_type = header_str(&headers, header::CONTENT_TYPE.as_str())
        .filter(|ct| valid_content_type(ct))
        .map(str::to_string);
    let ttl = header_str(&headers, TTL);
    let expires_at = header_str(&headers, EXPIRES_AT);
    if ttl.is_some() && expires_at.is_some() {
        return Err(bad(
            "ttl_and_expiry",
            "Stream-TTL and Stream-Expires-At cannot both be given",
        ));
    }
    let ttl_seconds = match ttl {
        Some(t) => Some(strict_uint(t).ok_or_else(|| {
            bad(
                "invalid_ttl",
                "Stream-TTL must be a non-negative integer of seconds",
            )
        })?),
        None => None,
    };
    let expires_at_ms = match expires_at {
        Some(at) => Some(
            at.parse::<jiff::Timestamp>()
                .map_err(|_| {
                    bad(
                        "invalid_expires_at",
                        "Stream-Expires-At must be an RFC 3339 timestamp",
                    )
                })?
                .as_millisecond(),
        ),
        None => None,
    };
    let fork_offset = match header_str(&headers, FORK_OFFSET) {
        Some(o) => Some(parse_offset(o).filter(|_| o != "-1").ok_or_else(|| {
            bad(
                "invalid_fork_offset",
                "Stream-Fork-Offset must be an offset",
            )
        })?),
        None => None,
    };
    let sub_offset = match headers.get(FORK_SUB_OFFSET) {
        Some(v) => {
            if forked_from.is_none() {
                return Err(bad(
                    "sub_offset_without_fork",
                    "Stream-Fork-Sub-Offset requires Stream-Forked-From",
                ));
            }
            v.to_str().ok().and_then(strict_uint).ok_or_else(|| {
                bad(
                    "invalid_fork_sub_offset",
                    "Stream-Fork-Sub-Offset must be a non-negative integer",
                )
            })?
        }
        None => 0,
    };
    let closed = header_str(&headers, CLOSED) == Some("true");
    let body = read_body(ctx, req.into_body()).await.map_err(ise)?;

    let mut spec = CreateSpec {
        owner: caller.user_id.clone(),
        content_type: content_type
            .clone()
            .unwrap_or_else(|| "application/octet-stream".into()),
        ttl_seconds,
        expires_at: expires_at.map(str::to_string),
        expires_at_ms,
        closed,
        data: None,
        fork: None,
    };
    let mut parts = Vec::new();
    let mut initial = None;
    if let Some(source) = &forked_from {
        let (found, _) = find(ctx, caller, source, true).await.map_err(ise)?;
        let src = match found {
            Found::Live(l) => l,
            Found::Gone => {
                return Err(refuse(
                    StatusCode::CONFLICT,
                    "fork_source_gone",
                    "the source stream was deleted (its forks still read through it)",
                ))
            }
            Found::Missing => {
                return Err(refuse(
                    StatusCode::NOT_FOUND,
                    "fork_source_not_found",
                    "source stream not found",
                ))
            }
        };
        if let Some(ct) = &content_type {
            if normalize_content_type(ct) != normalize_content_type(&src.content_type) {
                return Err(refuse(
                    StatusCode::CONFLICT,
                    "content_type_mismatch",
                    "a fork's content type must be its source's",
                ));
            }
        }
        spec.content_type = src.content_type.clone();
        let offset = fork_offset.unwrap_or_else(|| src.current_offset());
        if offset > src.current_offset() {
            return Err(bad(
                "fork_offset_beyond_source",
                "Stream-Fork-Offset is beyond the source stream's end",
            ));
        }
        if ttl_seconds.is_none() && expires_at.is_none() {
            spec.ttl_seconds = src.ttl_seconds;
            spec.expires_at = src.expires_at.clone();
            spec.expires_at_ms = src.expires_at_ms;
        }
        if sub_offset > 0 {
            let (next, _) = messages(&ctx.log, source, &src, offset, 1)
                .await
                .map_err(ise)?;
            let Some(first) = next.first() else {
                return Err(bad(
                    "invalid_fork_sub_offset",
                    "no message after the fork offset to take a sub-offset of",
                ));
            };
            let first = first.data();
            if sub_offset as usize > first.units() {
                return Err(bad(
                    "invalid_fork_sub_offset",
                    "Stream-Fork-Sub-Offset is beyond the length of the message it cuts",
                ));
            }
            spec.data = Some(prefix_of(&first, sub_offset as usize));
        }
        spec.fork = Some(ForkOf {
            source: source.clone(),
            source_created_id: src.created_id,
            offset,
            sub_offset,
        });
        parts.push((
            log_stream_id(source),
            vec![stream_command(
                caller,
                source,
                StreamCommand::AddFork {
                    fork: path.clone(),
                    created_id: src.created_id,
                    offset,
                },
                ctx,
            )],
        ));
    }
    let data = data_of(&spec.content_type, &body, true).map_err(|e| {
        // Invalid JSON on create: 400 like an append's.
        e.into_response()
    })?;
    match (&spec.data, data) {
        (None, d) => spec.data = d,
        (Some(_), Some(d)) => initial = Some(d),
        (Some(_), None) => {}
    }
    let content_type_out = spec.content_type.clone();
    let start = spec.fork.as_ref().map_or(0, |f| f.offset);
    let mut commands = vec![stream_command(
        caller,
        &path,
        StreamCommand::Create(Box::new(spec)),
        ctx,
    )];
    if let Some(d) = initial {
        commands.push(stream_command(
            caller,
            &path,
            StreamCommand::Append {
                data: d,
                content_type: content_type_out.clone(),
                seq: None,
                producer: None,
                close: false,
            },
            ctx,
        ));
    }
    parts.insert(0, (log_stream_id(&path), commands));
    let (status, offset, closed_now) = match ctx.log.append_parts(parts).await {
        Ok(stored) => (StatusCode::CREATED, offset_after(&stored, start), closed),
        Err(StoreError::Rule(ThreadError::Stream(StreamRefusal::Exists { offset, closed }))) => {
            (StatusCode::OK, offset, closed)
        }
        Err(StoreError::Rule(ThreadError::Stream(StreamRefusal::Gone))) => {
            return Err(refuse(
                StatusCode::CONFLICT,
                "stream_gone",
                "the stream was deleted but forks still read through it: its path cannot be \
                 reused until they are deleted",
            ))
        }
        Err(e) => return Err(refusal_response(e.into(), None)),
    };
    let mut resp = status.into_response();
    set_header(&mut resp, "content-type", &content_type_out);
    set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
    if status == StatusCode::CREATED {
        set_header(&mut resp, "location", &location);
    }
    if closed_now {
        set_header(&mut resp, CLOSED, "true");
    }
    Ok(resp)
}

/// `POST /v1/stream/*`: append (or, with an empty body and `Stream-Closed: true`, close).
#[utoipa::path(
    post,
    operation_id = "streamsAppend",
    path = "/v1/stream/{path}",
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
    match append_inner(&ctx, &caller, req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn append_inner(
    ctx: &ApiContext,
    caller: &Caller,
    req: Request,
) -> Result<Response, Response> {
    let ise = |e: ApiError| e.into_response();
    writer(caller).map_err(ise)?;
    let path = stream_path(req.uri().path()).map_err(ise)?;
    let headers = req.headers().clone();
    let producer = producer_of(&headers)?;
    let close = header_str(&headers, CLOSED) == Some("true");
    let seq = header_str(&headers, SEQ).map(str::to_string);
    let body = read_body(ctx, req.into_body()).await.map_err(ise)?;
    let (found, _) = find(ctx, caller, &path, false).await.map_err(ise)?;
    let life = match found {
        Found::Live(l) => l,
        Found::Gone => return Err(gone()),
        Found::Missing => return Err(not_found()),
    };
    let life = match &producer {
        Some(p) if seq_gap(&life, p) => wait_for_predecessor(ctx, caller, &path, p).await?,
        _ => life,
    };
    let command = if body.is_empty() {
        if !close {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "empty_body",
                "an append needs a body (an empty body only closes, with Stream-Closed: true)",
            ));
        }
        StreamCommand::Close {
            producer: producer.clone(),
        }
    } else {
        let Some(ct) = header_str(&headers, header::CONTENT_TYPE.as_str()) else {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "content_type_required",
                "Content-Type is required on an append",
            ));
        };
        if normalize_content_type(ct) != normalize_content_type(&life.content_type) && !life.closed
        {
            return Err(refuse(
                StatusCode::CONFLICT,
                "content_type_mismatch",
                format!(
                    "content type '{ct}' does not match the stream's '{}'",
                    life.content_type
                ),
            ));
        }
        let data = if life.closed {
            // Refused below as closed (or answered as the closing producer's duplicate).
            StreamData::Text(String::new())
        } else {
            data_of(&life.content_type, &body, false)
                .map_err(ise)?
                .unwrap_or(StreamData::Text(String::new()))
        };
        StreamCommand::Append {
            data,
            content_type: if life.closed {
                life.content_type.clone()
            } else {
                ct.to_string()
            },
            seq,
            producer: producer.clone(),
            close,
        }
    };
    let closing = matches!(command, StreamCommand::Close { .. });
    let stored = match ctx
        .log
        .append(
            &log_stream_id(&path),
            vec![stream_command(caller, &path, command, ctx)],
        )
        .await
    {
        Ok(stored) => stored,
        Err(StoreError::Rule(ThreadError::Stream(StreamRefusal::AlreadyClosed { offset }))) => {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
            set_header(&mut resp, CLOSED, "true");
            return Ok(resp);
        }
        Err(StoreError::Rule(ThreadError::Stream(StreamRefusal::Closed { offset })))
            if closing && producer.is_some() =>
        {
            let mut resp = refuse(StatusCode::CONFLICT, "stream_closed", "stream is closed");
            set_header(&mut resp, CLOSED, "true");
            set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
            return Ok(resp);
        }
        Err(e) => return Err(refusal_response(e.into(), producer.as_ref())),
    };
    let offset = offset_after(&stored, life.current_offset());
    let mut resp = if producer.is_some() && !closing {
        StatusCode::OK.into_response()
    } else {
        StatusCode::NO_CONTENT.into_response()
    };
    set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
    if let Some(p) = &producer {
        set_header(&mut resp, PRODUCER_EPOCH, p.epoch);
        set_header(&mut resp, PRODUCER_SEQ, p.seq);
    }
    if close {
        set_header(&mut resp, CLOSED, "true");
    }
    Ok(resp)
}

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
        Ok(
            match find(&self.ctx, &self.caller, &self.path, true).await?.0 {
                Found::Live(life) => Lookup::Live(View {
                    content_type: life.content_type.clone(),
                    current: life.current_offset(),
                    closed: life.closed,
                    state: life,
                }),
                Found::Gone => Lookup::Gone,
                Found::Missing => Lookup::Missing,
            },
        )
    }

    async fn messages(
        &self,
        view: &View<Self::State>,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<Message>, bool), ApiError> {
        messages(&self.ctx.log, &self.path, &view.state, after, limit).await
    }

    fn touch(&self) {
        self.ctx.streams.touch(&self.path, now_ms());
    }
}

/// Whether `p` skips sequence numbers of its producer's current epoch on `life`.
fn seq_gap(life: &StreamLife, p: &ProducerStamp) -> bool {
    !life.closed
        && match life.producers.get(&p.id) {
            None => p.seq > 0,
            Some(s) => s.epoch == p.epoch && p.seq > s.last_seq + 1,
        }
}

/// A client pipelining a producer's writes (the npm client's `maxInFlight`) sends them over
/// several connections, so one can overtake its predecessor. Refused at once, it would be retried
/// after the predecessor's answer; instead it waits up to [`PRODUCER_GAP_WAIT`] for a commit to
/// the stream to fill the gap. Returns the stream as it then is; the writer decides as before (a
/// gap still open is refused).
async fn wait_for_predecessor(
    ctx: &ApiContext,
    caller: &Caller,
    path: &str,
    p: &ProducerStamp,
) -> Result<Box<StreamLife>, Response> {
    let deadline = tokio::time::Instant::now() + PRODUCER_GAP_WAIT;
    let mut feed = ctx.log.feed(&log_stream_id(path), i64::MAX);
    loop {
        // Marks the head seen before the state is read, so a commit after it wakes `changed`.
        let _ = feed.next_page(1).await;
        let life = match find(ctx, caller, path, false)
            .await
            .map_err(IntoResponse::into_response)?
            .0
        {
            Found::Live(l) => l,
            Found::Gone => return Err(gone()),
            Found::Missing => return Err(not_found()),
        };
        if !seq_gap(&life, p) || tokio::time::Instant::now() >= deadline {
            return Ok(life);
        }
        tokio::select! {
            _ = feed.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

/// `HEAD /v1/stream/*`: the stream's metadata, no body.
#[utoipa::path(
    head,
    operation_id = "streamsHead",
    path = "/v1/stream/{path}",
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
    let source = StreamSource {
        ctx: ctx.clone(),
        caller,
        path,
    };
    let mut resp = reader::head(&source).await;
    // A stream's TTL and expiry are part of its metadata.
    if resp.status() == StatusCode::OK {
        if let Ok((Found::Live(life), _)) = find(&ctx, &source.caller, &source.path, true).await {
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

/// `DELETE /v1/stream/*`: the stream ends; a source with live forks is kept for them (410 to
/// its own clients) until the last is deleted.
#[utoipa::path(
    delete,
    operation_id = "streamsDelete",
    path = "/v1/stream/{path}",
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
    let (found, stream) = find(ctx, caller, &path, false).await.map_err(ise)?;
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
    let mut parts = vec![(
        log_stream_id(&path),
        vec![stream_command(caller, &path, StreamCommand::Delete, ctx)],
    )];
    if let Some(f) = &life.fork {
        if life.live_forks.is_empty() {
            parts.push((
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

/// `GET /v1/stream/*`: catch-up, long-poll or SSE.
#[utoipa::path(
    get,
    operation_id = "streamsRead",
    path = "/v1/stream/{path}",
    tag = "durable-streams",
    params(("path" = String, Path, description = "The stream path (may contain `/`): at most 1024 characters, no control characters"), ("offset" = Option<String>, Query, description = "`-1` (the start), `now`, or an offset the server gave"), ("live" = Option<String>, Query, description = "`long-poll` or `sse`; absent: catch-up"), ("cursor" = Option<String>, Query, description = "The last `Stream-Cursor` (long-poll, SSE)"), ("If-None-Match" = Option<String>, Header, description = "An ETag of an earlier read (304)")),
    responses(
        (status = 200, description = "The stream: the messages after `offset` (a JSON array in JSON mode, else the bytes), or with `live=sse` an SSE stream of `data` and `control` events", headers(("Stream-Next-Offset" = String, description = "The offset after the last message"), ("ETag" = String, description = "The read's entity tag"), ("Stream-Up-To-Date" = String, description = "`true` at the stream's end"), ("Stream-Closed" = String, description = "`true` once closed"), ("Stream-Cursor" = String, description = "Long-poll and SSE cache-busting cursor")), content((crate::openapi::JsonMessages = "application/json"), (Vec<u8> = "application/octet-stream"), (String = "text/event-stream"))),
        (status = 204, description = "Long-poll: nothing new within `--stream-long-poll-secs`", headers(("Stream-Next-Offset" = String, description = "The offset to poll from"), ("Stream-Cursor" = String, description = "The cursor for the next poll"))),
        (status = 304, description = "Not modified since `If-None-Match`"),
        (status = 400, description = "A malformed offset, `live` or cursor (`invalid_offset`, …), or path", body = crate::error::ErrorBody),
        (status = 403, description = "An ingest-only token (`ingest_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such stream, or another user's (`not_found`)", body = crate::error::ErrorBody),
        (status = 410, description = "Deleted (`stream_gone`)", body = crate::error::ErrorBody)
    )
)]
pub async fn read(State(ctx): State<ApiContext>, caller: Caller, req: Request) -> Response {
    if let Role::Ingest { .. } = caller.role {
        return ApiError::Forbidden {
            code: "ingest_only",
            message: "an ingest-only token cannot read".into(),
        }
        .into_response();
    }
    let path = match stream_path(req.uri().path()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let if_none_match = header_str(req.headers(), "if-none-match").map(str::to_string);
    let source = StreamSource {
        ctx: ctx.clone(),
        caller: caller.clone(),
        path,
    };
    match reader::read(
        &ctx,
        &caller,
        source,
        req.uri().query(),
        if_none_match.as_deref(),
    )
    .await
    {
        Ok(r) | Err(r) => r,
    }
}

/// `OPTIONS`: the CORS preflight (the protocol layer adds the CORS headers).
#[utoipa::path(
    options,
    operation_id = "streamsOptions",
    path = "/v1/stream/{path}",
    tag = "durable-streams",
    params(("path" = String, Path, description = "The stream path (may contain `/`): at most 1024 characters, no control characters")),
    responses(
        (status = 204, description = "CORS preflight")
    )
)]
pub async fn options() -> StatusCode {
    StatusCode::NO_CONTENT
}
