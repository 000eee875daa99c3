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

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use threadstream_domain::clock::now_ms;
use threadstream_domain::durable_stream::{
    format_offset, is_json, log_stream_id, normalize_content_type, parse_offset, CreateSpec,
    DurableStream, StreamCommand, StreamLife, StreamRefusal,
};
use threadstream_domain::event::durable_stream::{ForkOf, ProducerStamp, StreamData};
use threadstream_domain::event::EventBody;
use threadstream_domain::{StoredEvent, ThreadCommand, ThreadError};
use threadstream_store::StoreError;

use crate::auth::Role;
use crate::durable::read::{body_bytes, data_of, message_bytes, messages, prefix_of, Message};
use crate::error::ApiError;
use crate::extract::{body_error, Caller};
use crate::ApiContext;

/// The route; a stream's path is the whole request path, as forks name their source.
pub const ROUTE: &str = "/v1/stream/{*path}";
const ROUTE_PREFIX: &str = "/v1/stream/";

/// Messages per catch-up response (a client reads on from the `Stream-Next-Offset` it got).
const READ_MESSAGES: usize = 1_000;
/// An idle SSE stream sends a control event this often (its `upToDate` keeps proxies and
/// clients from timing out).
const SSE_KEEPALIVE: Duration = Duration::from_secs(15);
/// An idle reader re-checks the store this often: a head hint from another process can be lost.
const RECHECK: Duration = Duration::from_secs(1);

const NEXT_OFFSET: &str = "stream-next-offset";
const UP_TO_DATE: &str = "stream-up-to-date";
const CLOSED: &str = "stream-closed";
const CURSOR: &str = "stream-cursor";
const TTL: &str = "stream-ttl";
const EXPIRES_AT: &str = "stream-expires-at";
const SEQ: &str = "stream-seq";
const FORKED_FROM: &str = "stream-forked-from";
const FORK_OFFSET: &str = "stream-fork-offset";
const FORK_SUB_OFFSET: &str = "stream-fork-sub-offset";
const PRODUCER_ID: &str = "producer-id";
const PRODUCER_EPOCH: &str = "producer-epoch";
const PRODUCER_SEQ: &str = "producer-seq";
const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";
const SSE_DATA_ENCODING: &str = "stream-sse-data-encoding";

/// The headers every `/v1/stream/*` response carries: CORS for browser clients (the protocol's
/// headers allowed and exposed) and the browser security headers the protocol asks for.
pub async fn protocol_headers(req: Request, next: axum::middleware::Next) -> Response {
    let preflight = req.method() == Method::OPTIONS;
    let mut resp = if preflight {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(req).await
    };
    let h = resp.headers_mut();
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
    };
    set(h, "access-control-allow-origin", "*");
    set(
        h,
        "access-control-allow-methods",
        "GET, POST, PUT, DELETE, HEAD, OPTIONS",
    );
    set(
        h,
        "access-control-allow-headers",
        "content-type, authorization, if-none-match, stream-seq, stream-ttl, stream-expires-at, \
         stream-closed, producer-id, producer-epoch, producer-seq, stream-forked-from, \
         stream-fork-offset, stream-fork-sub-offset",
    );
    set(
        h,
        "access-control-expose-headers",
        "stream-next-offset, stream-cursor, stream-up-to-date, stream-closed, producer-epoch, \
         producer-seq, producer-expected-seq, producer-received-seq, stream-sse-data-encoding, \
         etag, content-type, content-encoding, vary, location",
    );
    set(h, "x-content-type-options", "nosniff");
    set(h, "cross-origin-resource-policy", "cross-origin");
    resp
}

/// A protocol answer with a JSON error body naming the problem.
fn refuse(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": code, "message": message.into()}});
    (status, axum::Json(body)).into_response()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn set_header(resp: &mut Response, name: &'static str, value: impl ToString) {
    if let Ok(v) = HeaderValue::from_str(&value.to_string()) {
        resp.headers_mut().insert(HeaderName::from_static(name), v);
    }
}

/// A non-negative integer with no sign, no leading zeros and no fraction.
fn strict_uint(s: &str) -> Option<u64> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if ok {
        s.parse().ok()
    } else {
        None
    }
}

/// A `type/subtype` content type as the protocol accepts one.
fn valid_content_type(ct: &str) -> bool {
    let Some((ty, rest)) = ct.trim().split_once('/') else {
        return false;
    };
    let word = |s: &str| {
        !s.is_empty()
            && s.bytes().all(|b| {
                b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'+' || b == b'.'
            })
    };
    let subtype = rest.split(';').next().unwrap_or("").trim();
    word(ty) && word(subtype)
}

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
        Some(life) if !visible(caller, life, read) => Found::Missing,
        Some(life) if life.soft_deleted || life.expired(now, last_read) => Found::Gone,
        Some(life) => Found::Live(Box::new(life.clone())),
        None => Found::Missing,
    };
    Ok((found, stream))
}

fn not_found() -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        "stream_not_found",
        "stream not found",
    )
}

fn gone() -> Response {
    refuse(
        StatusCode::GONE,
        "stream_gone",
        "stream was deleted; forks still read through it",
    )
}

/// The answer to a command the stream's aggregate refused (or an error of the store).
fn refusal_response(e: ApiError, producer: Option<&ProducerStamp>) -> Response {
    let ApiError::Rule(ThreadError::Stream(r)) = e else {
        return e.into_response();
    };
    let message = r.to_string();
    let code = r.code();
    match r {
        StreamRefusal::NotFound => not_found(),
        StreamRefusal::Gone => gone(),
        StreamRefusal::Exists { .. } | StreamRefusal::AlreadyClosed { .. } => {
            // Handled by the callers (they are answers); reaching here is a conflict.
            refuse(StatusCode::CONFLICT, code, message)
        }
        StreamRefusal::ConfigMismatch
        | StreamRefusal::ContentTypeMismatch { .. }
        | StreamRefusal::SeqConflict { .. } => refuse(StatusCode::CONFLICT, code, message),
        StreamRefusal::Closed { offset } => {
            let mut resp = refuse(StatusCode::CONFLICT, code, message);
            set_header(&mut resp, CLOSED, "true");
            set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
            resp
        }
        StreamRefusal::StaleEpoch { current } => {
            let mut resp = refuse(StatusCode::FORBIDDEN, code, message);
            set_header(&mut resp, PRODUCER_EPOCH, current);
            resp
        }
        StreamRefusal::InvalidEpochSeq | StreamRefusal::ForkOffsetBeyond => {
            refuse(StatusCode::BAD_REQUEST, code, message)
        }
        StreamRefusal::SequenceGap { expected, received } => {
            let mut resp = refuse(StatusCode::CONFLICT, code, message);
            set_header(&mut resp, PRODUCER_EXPECTED_SEQ, expected);
            set_header(&mut resp, PRODUCER_RECEIVED_SEQ, received);
            resp
        }
        StreamRefusal::Duplicate {
            last_seq,
            closed,
            offset,
        } => {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            if let Some(p) = producer {
                set_header(&mut resp, PRODUCER_EPOCH, p.epoch);
            }
            set_header(&mut resp, PRODUCER_SEQ, last_seq);
            if closed {
                set_header(&mut resp, CLOSED, "true");
                set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
            }
            resp
        }
    }
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

/// A body too large is still read (and dropped) up to this many bytes before the 413, so a
/// client that sends it whole gets the answer instead of a reset connection.
const DRAIN_LIMIT: usize = 64 << 20;

async fn read_body(ctx: &ApiContext, body: Body) -> Result<Bytes, ApiError> {
    use futures::StreamExt;
    let limit = ctx.config.max_body_bytes;
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
            if sub_offset as usize > first.data.units() {
                return Err(bad(
                    "invalid_fork_sub_offset",
                    "Stream-Fork-Sub-Offset is beyond the length of the message it cuts",
                ));
            }
            spec.data = Some(prefix_of(&first.data, sub_offset as usize));
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

/// The producer headers: all three or none.
fn producer_of(headers: &HeaderMap) -> Result<Option<ProducerStamp>, Response> {
    let id = header_str(headers, PRODUCER_ID);
    let epoch = header_str(headers, PRODUCER_EPOCH);
    let seq = header_str(headers, PRODUCER_SEQ);
    let bad = |code: &str, m: &str| refuse(StatusCode::BAD_REQUEST, code, m);
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            if id.is_empty() {
                return Err(bad("invalid_producer_id", "Producer-Id must not be empty"));
            }
            let epoch = strict_uint(epoch)
                .filter(|n| *n < (1 << 53))
                .ok_or_else(|| {
                    bad(
                        "invalid_producer_epoch",
                        "Producer-Epoch must be a non-negative integer",
                    )
                })?;
            let seq = strict_uint(seq).filter(|n| *n < (1 << 53)).ok_or_else(|| {
                bad(
                    "invalid_producer_seq",
                    "Producer-Seq must be a non-negative integer",
                )
            })?;
            Ok(Some(ProducerStamp {
                id: id.to_string(),
                epoch,
                seq,
            }))
        }
        _ => Err(bad(
            "incomplete_producer_headers",
            "Producer-Id, Producer-Epoch and Producer-Seq must be given together",
        )),
    }
}

/// `POST /v1/stream/*`: append (or, with an empty body and `Stream-Closed: true`, close).
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

/// `HEAD /v1/stream/*`: the stream's metadata, no body.
pub async fn head(State(ctx): State<ApiContext>, caller: Caller, req: Request) -> Response {
    let path = match stream_path(req.uri().path()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let life = match find(&ctx, &caller, &path, true).await {
        Ok((Found::Live(l), _)) => l,
        Ok((Found::Gone, _)) => return StatusCode::GONE.into_response(),
        Ok((Found::Missing, _)) => return StatusCode::NOT_FOUND.into_response(),
        Err(e) => return e.into_response(),
    };
    let mut resp = StatusCode::OK.into_response();
    let offset = format_offset(life.current_offset());
    set_header(&mut resp, NEXT_OFFSET, &offset);
    set_header(&mut resp, "content-type", &life.content_type);
    set_header(&mut resp, "cache-control", "no-store");
    if life.closed {
        set_header(&mut resp, CLOSED, "true");
    }
    if let Some(ttl) = life.ttl_seconds {
        set_header(&mut resp, TTL, ttl);
    }
    if let Some(at) = &life.expires_at {
        set_header(&mut resp, EXPIRES_AT, at);
    }
    set_header(&mut resp, "etag", etag(&path, "-1", &offset, life.closed));
    resp
}

fn etag(path: &str, start: &str, end: &str, closed: bool) -> String {
    use base64::Engine;
    let p = base64::engine::general_purpose::STANDARD.encode(path);
    format!("\"{p}:{start}:{end}{}\"", if closed { ":c" } else { "" })
}

/// `DELETE /v1/stream/*`: the stream ends; a source with live forks is kept for them (410 to
/// its own clients) until the last is deleted.
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

/// The read parameters: `offset` (at most once, not empty), `live`, `cursor`.
struct ReadQuery {
    offset: Option<String>,
    live: Option<String>,
    cursor: Option<String>,
}

fn read_query(raw: Option<&str>) -> Result<ReadQuery, Response> {
    let bad = |code: &str, m: &str| refuse(StatusCode::BAD_REQUEST, code, m);
    let mut q = ReadQuery {
        offset: None,
        live: None,
        cursor: None,
    };
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_encoding::percent_decode_str(&v.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned();
        match k {
            "offset" => {
                if q.offset.is_some() {
                    return Err(bad("multiple_offsets", "offset may be given only once"));
                }
                q.offset = Some(v);
            }
            "live" => q.live = Some(v),
            "cursor" => q.cursor = Some(v),
            _ => {}
        }
    }
    if q.offset.as_deref() == Some("") {
        return Err(bad("empty_offset", "offset must not be empty"));
    }
    if let Some(o) = &q.offset {
        if o != "now" && parse_offset(o).is_none() {
            return Err(bad(
                "invalid_offset",
                "offset must be -1, now, or an offset this server returned",
            ));
        }
    }
    match q.live.as_deref() {
        None | Some("long-poll") | Some("sse") => {}
        Some(_) => return Err(bad("invalid_live", "live must be long-poll or sse")),
    }
    if q.live.is_some() && q.offset.is_none() {
        return Err(bad("offset_required", "live reads require an offset"));
    }
    Ok(q)
}

/// The protocol's response cursor (CDN cache-busting for live reads): the 20 s interval since
/// 2024-10-09, moved past the client's when it sent the current one.
fn response_cursor(client: Option<&str>) -> String {
    const EPOCH_MS: i64 = 1_728_432_000_000;
    const INTERVAL_MS: i64 = 20_000;
    let current = (now_ms() - EPOCH_MS) / INTERVAL_MS;
    match client.and_then(|c| c.parse::<i64>().ok()) {
        Some(c) if c >= current => {
            let jitter = 1 + (uuid::Uuid::new_v4().as_u128() % 180) as i64;
            (c + jitter).to_string()
        }
        _ => current.to_string(),
    }
}

/// `GET /v1/stream/*`: catch-up, long-poll or SSE.
pub async fn read(State(ctx): State<ApiContext>, caller: Caller, req: Request) -> Response {
    match read_inner(&ctx, &caller, req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn read_inner(ctx: &ApiContext, caller: &Caller, req: Request) -> Result<Response, Response> {
    let ise = |e: ApiError| e.into_response();
    if let Role::Ingest { .. } = caller.role {
        return Err(ise(ApiError::Forbidden {
            code: "ingest_only",
            message: "an ingest-only token cannot read".into(),
        }));
    }
    let path = stream_path(req.uri().path()).map_err(ise)?;
    let q = read_query(req.uri().query())?;
    let if_none_match = header_str(req.headers(), "if-none-match").map(str::to_string);
    let (found, _) = find(ctx, caller, &path, true).await.map_err(ise)?;
    let life = match found {
        Found::Live(l) => l,
        Found::Gone => return Err(gone()),
        Found::Missing => return Err(not_found()),
    };
    ctx.streams.touch(&path, now_ms());
    let after = match q.offset.as_deref() {
        Some("now") => life.current_offset(),
        Some(o) => parse_offset(o).unwrap_or(0),
        None => 0,
    };
    if q.live.as_deref() == Some("sse") {
        let slot = ctx.limits.sse_slot(&caller.user_id).map_err(ise)?;
        let base64 = {
            let ct = normalize_content_type(&life.content_type);
            !(ct.starts_with("text/") || ct == "application/json")
        };
        let sse = SseReader {
            ctx: ctx.clone(),
            caller: caller.clone(),
            path,
            cursor: after,
            client_cursor: q.cursor,
            base64,
            first: true,
            done: false,
            _slot: slot,
        };
        let body = Body::from_stream(futures::stream::unfold(sse, |mut s| async move {
            let bytes = s.next().await?;
            Some((Ok::<_, std::io::Error>(bytes), s))
        }));
        let mut resp = (StatusCode::OK, body).into_response();
        set_header(&mut resp, "content-type", "text/event-stream");
        set_header(&mut resp, "cache-control", "no-cache");
        set_header(&mut resp, "x-accel-buffering", "no");
        if base64 {
            set_header(&mut resp, SSE_DATA_ENCODING, "base64");
        }
        return Ok(resp);
    }
    if q.offset.as_deref() == Some("now") && q.live.is_none() {
        let mut resp = (
            StatusCode::OK,
            if is_json(&life.content_type) {
                "[]"
            } else {
                ""
            },
        )
            .into_response();
        set_header(&mut resp, "content-type", &life.content_type);
        set_header(&mut resp, NEXT_OFFSET, format_offset(life.current_offset()));
        set_header(&mut resp, UP_TO_DATE, "true");
        set_header(&mut resp, "cache-control", "no-store");
        if life.closed {
            set_header(&mut resp, CLOSED, "true");
        }
        return Ok(resp);
    }
    let (mut msgs, mut complete) = messages(&ctx.log, &path, &life, after, READ_MESSAGES)
        .await
        .map_err(ise)?;
    let mut life = life;
    let long_poll = q.live.as_deref() == Some("long-poll");
    if long_poll && msgs.is_empty() && after >= life.current_offset() {
        if life.closed {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            set_header(&mut resp, NEXT_OFFSET, format_offset(life.current_offset()));
            set_header(&mut resp, UP_TO_DATE, "true");
            set_header(&mut resp, CLOSED, "true");
            return Ok(resp);
        }
        match wait_for_messages(ctx, caller, &path, after, ctx.config.stream_long_poll)
            .await
            .map_err(ise)?
        {
            Waited::Messages(l, m, c) => {
                life = l;
                msgs = m;
                complete = c;
            }
            Waited::Closed(offset) | Waited::TimedOut(offset, true) => {
                let mut resp = StatusCode::NO_CONTENT.into_response();
                set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
                set_header(&mut resp, UP_TO_DATE, "true");
                set_header(&mut resp, CURSOR, response_cursor(q.cursor.as_deref()));
                set_header(&mut resp, CLOSED, "true");
                return Ok(resp);
            }
            Waited::TimedOut(offset, false) => {
                let mut resp = StatusCode::NO_CONTENT.into_response();
                set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
                set_header(&mut resp, UP_TO_DATE, "true");
                set_header(&mut resp, CURSOR, response_cursor(q.cursor.as_deref()));
                return Ok(resp);
            }
            Waited::Gone => return Err(gone()),
            Waited::Missing => return Err(not_found()),
        }
    }
    let end = msgs.last().map_or(
        life.current_offset().max(after.min(life.current_offset())),
        |m| m.id,
    );
    let end_offset = format_offset(end);
    let at_tail = complete && end >= life.current_offset();
    let closed_here = life.closed && at_tail;
    let start = q.offset.clone().unwrap_or_else(|| "-1".into());
    let tag = etag(&path, &start, &end_offset, closed_here);
    if if_none_match.as_deref() == Some(tag.as_str()) {
        let mut resp = StatusCode::NOT_MODIFIED.into_response();
        set_header(&mut resp, "etag", &tag);
        return Ok(resp);
    }
    let body = body_bytes(&life.content_type, &msgs);
    let mut resp = (StatusCode::OK, body).into_response();
    set_header(&mut resp, "content-type", &life.content_type);
    set_header(&mut resp, NEXT_OFFSET, &end_offset);
    set_header(&mut resp, "etag", &tag);
    if complete {
        set_header(&mut resp, UP_TO_DATE, "true");
    }
    if long_poll {
        set_header(&mut resp, CURSOR, response_cursor(q.cursor.as_deref()));
    }
    if closed_here {
        set_header(&mut resp, CLOSED, "true");
    }
    Ok(resp)
}

/// How a wait for messages after an offset ended.
enum Waited {
    Messages(Box<StreamLife>, Vec<Message>, bool),
    Closed(i64),
    /// The offset to answer with, and whether the stream is closed.
    TimedOut(i64, bool),
    Gone,
    Missing,
}

/// Waits up to `timeout` for messages of `path` after `after` (or its closing).
async fn wait_for_messages(
    ctx: &ApiContext,
    caller: &Caller,
    path: &str,
    after: i64,
    timeout: Duration,
) -> Result<Waited, ApiError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut feed = ctx.log.feed(&log_stream_id(path), i64::MAX);
    let mut shutdown = ctx.shutdown.clone();
    loop {
        // Marks the head seen before the state is read, so a commit after it wakes `changed`.
        let _ = feed.next_page(1).await?;
        let life = match find(ctx, caller, path, true).await?.0 {
            Found::Live(l) => l,
            Found::Gone => return Ok(Waited::Gone),
            Found::Missing => return Ok(Waited::Missing),
        };
        let (msgs, complete) = messages(&ctx.log, path, &life, after, READ_MESSAGES).await?;
        if !msgs.is_empty() {
            return Ok(Waited::Messages(life, msgs, complete));
        }
        if life.closed {
            return Ok(Waited::Closed(life.current_offset().max(after)));
        }
        let now = tokio::time::Instant::now();
        if now >= deadline || *shutdown.borrow() {
            return Ok(Waited::TimedOut(after.max(life.current_offset()), false));
        }
        tokio::select! {
            _ = feed.changed() => {}
            _ = tokio::time::sleep_until(deadline.min(now + RECHECK)) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// One SSE reader of a stream: catch-up, then live, every data event followed by a control
/// event with the offset after it.
struct SseReader {
    ctx: ApiContext,
    caller: Caller,
    path: String,
    cursor: i64,
    client_cursor: Option<String>,
    base64: bool,
    first: bool,
    done: bool,
    _slot: crate::limits::SseSlot,
}

impl SseReader {
    fn data_event(&self, out: &mut String, m: &Message) {
        use base64::Engine;
        let bytes = message_bytes(&m.data);
        // JSON mode: the message's values as one array (`message_bytes`), text as it is.
        let payload = if self.base64 {
            base64::engine::general_purpose::STANDARD.encode(&bytes)
        } else {
            String::from_utf8_lossy(&bytes).into_owned()
        };
        out.push_str("event: data\n");
        push_data_lines(out, &payload);
    }

    fn control(&self, out: &mut String, offset: i64, up_to_date: bool, closed: bool) {
        let mut c = serde_json::Map::new();
        c.insert("streamNextOffset".into(), format_offset(offset).into());
        if closed {
            c.insert("streamClosed".into(), true.into());
        } else {
            c.insert(
                "streamCursor".into(),
                response_cursor(self.client_cursor.as_deref()).into(),
            );
            if up_to_date {
                c.insert("upToDate".into(), true.into());
            }
        }
        out.push_str("event: control\n");
        push_data_lines(out, &serde_json::Value::Object(c).to_string());
    }

    /// The next piece of the body; `None` ends it.
    async fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut feed = self.ctx.log.feed(&log_stream_id(&self.path), i64::MAX);
        let mut shutdown = self.ctx.shutdown.clone();
        let keepalive = tokio::time::Instant::now() + SSE_KEEPALIVE;
        loop {
            let _ = feed.next_page(1).await.ok()?;
            let life = match find(&self.ctx, &self.caller, &self.path, true)
                .await
                .ok()?
                .0
            {
                Found::Live(l) => l,
                _ => return None,
            };
            let (msgs, complete) = messages(&self.ctx.log, &self.path, &life, self.cursor, 100)
                .await
                .ok()?;
            let mut out = String::new();
            let n = msgs.len();
            for (i, m) in msgs.iter().enumerate() {
                self.data_event(&mut out, m);
                self.cursor = m.id;
                let last = i + 1 == n && complete;
                let closed = last && life.closed;
                self.control(&mut out, m.id, last, closed);
                if closed {
                    self.done = true;
                }
            }
            if n > 0 {
                self.first = false;
                self.ctx.streams.touch(&self.path, now_ms());
                return Some(Bytes::from(out));
            }
            let offset = self.cursor.max(life.current_offset());
            if life.closed {
                self.control(&mut out, offset, true, true);
                self.done = true;
                return Some(Bytes::from(out));
            }
            if std::mem::take(&mut self.first) {
                self.cursor = offset;
                self.control(&mut out, offset, true, false);
                return Some(Bytes::from(out));
            }
            if *shutdown.borrow() {
                return None;
            }
            let now = tokio::time::Instant::now();
            if now >= keepalive {
                self.control(&mut out, offset, true, false);
                return Some(Bytes::from(out));
            }
            tokio::select! {
                r = feed.changed() => { if r.is_err() { return None; } }
                _ = tokio::time::sleep_until(keepalive.min(now + RECHECK)) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
}

/// `data:` lines for `payload`, one per line of it (CR, LF and CRLF all end a line, so a
/// payload cannot inject an event), then the blank line.
fn push_data_lines(out: &mut String, payload: &str) {
    let mut rest = payload;
    loop {
        let cut = rest.find(['\r', '\n']);
        let (line, next) = match cut {
            Some(i) => {
                let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                (&rest[..i], Some(&rest[i + skip..]))
            }
            None => (rest, None),
        };
        out.push_str("data:");
        out.push_str(line);
        out.push('\n');
        match next {
            Some(n) => rest = n,
            None => break,
        }
    }
    out.push('\n');
}
