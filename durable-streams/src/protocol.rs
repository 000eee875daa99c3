//! The Durable Streams protocol's HTTP vocabulary, shared by every route that speaks it (the
//! streams of `/v1/stream/*` and threads read as streams): header names, the CORS and security
//! headers, read parameters, response cursors, ETags, SSE `data:` framing, and refusals with a
//! JSON body naming the problem.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see crate::error)

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use threadstream_domain::clock::now_ms;
use threadstream_domain::durable_stream::{format_offset, parse_offset, StreamRefusal};
use threadstream_domain::event::durable_stream::ProducerStamp;
use threadstream_domain::{ErrorBody, ErrorCode, ThreadError};

use crate::error::{DurableError, Stop};

pub const NEXT_OFFSET: &str = "stream-next-offset";
pub const UP_TO_DATE: &str = "stream-up-to-date";
pub const CLOSED: &str = "stream-closed";
pub const CURSOR: &str = "stream-cursor";
pub const TTL: &str = "stream-ttl";
pub const EXPIRES_AT: &str = "stream-expires-at";
pub const SEQ: &str = "stream-seq";
pub const FORKED_FROM: &str = "stream-forked-from";
pub const FORK_OFFSET: &str = "stream-fork-offset";
pub const FORK_SUB_OFFSET: &str = "stream-fork-sub-offset";
pub const PRODUCER_ID: &str = "producer-id";
pub const PRODUCER_EPOCH: &str = "producer-epoch";
pub const PRODUCER_SEQ: &str = "producer-seq";
pub const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
pub const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";
pub const SSE_DATA_ENCODING: &str = "stream-sse-data-encoding";

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
pub fn refuse(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Response {
    (status, axum::Json(ErrorBody::new(code, message))).into_response()
}

pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub fn set_header(resp: &mut Response, name: &'static str, value: impl ToString) {
    if let Ok(v) = HeaderValue::from_str(&value.to_string()) {
        resp.headers_mut().insert(HeaderName::from_static(name), v);
    }
}

/// A non-negative integer with no sign, no leading zeros and no fraction.
pub fn strict_uint(s: &str) -> Option<u64> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if ok {
        s.parse().ok()
    } else {
        None
    }
}

/// A `type/subtype` content type as the protocol accepts one.
pub fn valid_content_type(ct: &str) -> bool {
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

pub fn etag(path: &str, start: &str, end: &str, closed: bool) -> String {
    use base64::Engine;
    let p = base64::engine::general_purpose::STANDARD.encode(path);
    format!("\"{p}:{start}:{end}{}\"", if closed { ":c" } else { "" })
}

/// The read parameters: `offset` (at most once, not empty), `live`, `cursor`.
pub struct ReadQuery {
    pub offset: Option<String>,
    pub live: Option<String>,
    pub cursor: Option<String>,
}

pub fn read_query(raw: Option<&str>) -> Result<ReadQuery, Response> {
    let bad = |code: ErrorCode, m: &str| refuse(StatusCode::BAD_REQUEST, code, m);
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
                    return Err(bad(
                        ErrorCode::MultipleOffsets,
                        "offset may be given only once",
                    ));
                }
                q.offset = Some(v);
            }
            "live" => q.live = Some(v),
            "cursor" => q.cursor = Some(v),
            _ => {}
        }
    }
    if q.offset.as_deref() == Some("") {
        return Err(bad(ErrorCode::EmptyOffset, "offset must not be empty"));
    }
    if let Some(o) = &q.offset {
        if o != "now" && parse_offset(o).is_none() {
            return Err(bad(
                ErrorCode::InvalidOffset,
                "offset must be -1, now, or an offset this server returned",
            ));
        }
    }
    match q.live.as_deref() {
        None | Some("long-poll") | Some("sse") => {}
        Some(_) => return Err(bad(ErrorCode::InvalidLive, "live must be long-poll or sse")),
    }
    if q.live.is_some() && q.offset.is_none() {
        return Err(bad(
            ErrorCode::OffsetRequired,
            "live reads require an offset",
        ));
    }
    Ok(q)
}

/// The protocol's response cursor (CDN cache-busting for live reads): the 20 s interval since
/// 2024-10-09, moved past the client's when it sent the current one.
pub fn response_cursor(client: Option<&str>) -> String {
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

/// `data:` lines for `payload`, one per line of it (CR, LF and CRLF all end a line, so a
/// payload cannot inject an event), then the blank line.
pub fn push_data_lines(out: &mut String, payload: &str) {
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

pub fn not_found() -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "stream not found",
    )
}

pub fn gone() -> Response {
    refuse(
        StatusCode::GONE,
        ErrorCode::StreamGone,
        "stream was deleted; forks still read through it",
    )
}

/// The answer to a command the stream's aggregate refused (`producer`: the request's).
pub fn stream_refusal(r: StreamRefusal, producer: Option<&ProducerStamp>) -> Response {
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

/// A refusal of the stream's aggregate as its answer; any other error stops the request for
/// the server to answer.
pub(crate) fn refusal_response(e: DurableError, producer: Option<&ProducerStamp>) -> Stop {
    match e {
        DurableError::Refused(ThreadError::Stream(r)) => Stop::Answer(stream_refusal(r, producer)),
        e => Stop::Failed(e),
    }
}

/// The producer headers: all three or none.
pub fn producer_of(headers: &HeaderMap) -> Result<Option<ProducerStamp>, Response> {
    let id = header_str(headers, PRODUCER_ID);
    let epoch = header_str(headers, PRODUCER_EPOCH);
    let seq = header_str(headers, PRODUCER_SEQ);
    let bad = |code: ErrorCode, m: &str| refuse(StatusCode::BAD_REQUEST, code, m);
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            if id.is_empty() {
                return Err(bad(
                    ErrorCode::InvalidProducerId,
                    "Producer-Id must not be empty",
                ));
            }
            let epoch = strict_uint(epoch)
                .filter(|n| *n < (1 << 53))
                .ok_or_else(|| {
                    bad(
                        ErrorCode::InvalidProducerEpoch,
                        "Producer-Epoch must be a non-negative integer",
                    )
                })?;
            let seq = strict_uint(seq).filter(|n| *n < (1 << 53)).ok_or_else(|| {
                bad(
                    ErrorCode::InvalidProducerSeq,
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
            ErrorCode::IncompleteProducerHeaders,
            "Producer-Id, Producer-Epoch and Producer-Seq must be given together",
        )),
    }
}
