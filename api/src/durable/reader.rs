//! Reading anything the log holds as a Durable Stream: catch-up, long-poll and SSE over a
//! [`ReadSource`] (a stream of `/v1/stream/*`, or a thread). One engine, so a thread read as a
//! stream answers exactly as a stream does.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see crate::http::streams)

use std::future::Future;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use threadstream_domain::durable_stream::{
    format_offset, is_json, normalize_content_type, parse_offset,
};

use super::protocol::*;
use super::read::{body_bytes, Message};
use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

/// Messages per catch-up response (a client reads on from the `Stream-Next-Offset` it got).
const READ_MESSAGES: usize = 1_000;
/// Messages per SSE piece.
const SSE_MESSAGES: usize = 100;
/// An idle SSE stream sends a control event this often (its `upToDate` keeps proxies and
/// clients from timing out).
const SSE_KEEPALIVE: Duration = Duration::from_secs(15);
/// An idle reader re-checks the store this often: a head hint from another process can be lost.
const RECHECK: Duration = Duration::from_secs(1);

/// What a read needs to know of a source now, and the source's own state (`S`) for reading its
/// messages.
pub struct View<S> {
    pub content_type: String,
    /// The offset after its last message.
    pub current: i64,
    pub closed: bool,
    pub state: S,
}

/// A source as this caller finds it.
pub enum Lookup<S> {
    Live(View<S>),
    /// Deleted, but kept for others (410).
    Gone,
    Missing,
}

/// Something readable as a Durable Stream.
pub trait ReadSource: Clone + Send + Sync + 'static {
    type State: Send + Sync;
    /// The log stream whose commits wake a waiting reader.
    fn log_id(&self) -> String;
    /// The name ETags are made of (the request path).
    fn name(&self) -> &str;
    fn lookup(&self) -> impl Future<Output = Result<Lookup<Self::State>, ApiError>> + Send;
    /// Up to `limit` messages after offset `after`, and whether they reach the end.
    fn messages(
        &self,
        view: &View<Self::State>,
        after: i64,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<Message>, bool), ApiError>> + Send;
    /// A read was served now.
    fn touch(&self) {}
}

/// `HEAD`: the source's offset, content type and closure, no body.
pub async fn head<R: ReadSource>(source: &R) -> Response {
    let view = match source.lookup().await {
        Ok(Lookup::Live(v)) => v,
        Ok(Lookup::Gone) => return StatusCode::GONE.into_response(),
        Ok(Lookup::Missing) => return StatusCode::NOT_FOUND.into_response(),
        Err(e) => return e.into_response(),
    };
    let mut resp = StatusCode::OK.into_response();
    let offset = format_offset(view.current);
    set_header(&mut resp, NEXT_OFFSET, &offset);
    set_header(&mut resp, "content-type", &view.content_type);
    set_header(&mut resp, "cache-control", "no-store");
    if view.closed {
        set_header(&mut resp, CLOSED, "true");
    }
    set_header(
        &mut resp,
        "etag",
        etag(source.name(), "-1", &offset, view.closed),
    );
    resp
}

/// `GET`: catch-up, long-poll (`live=long-poll`) or SSE (`live=sse`), from `offset`.
pub async fn read<R: ReadSource>(
    ctx: &ApiContext,
    caller: &Caller,
    source: R,
    uri: &axum::http::Uri,
    headers: &axum::http::HeaderMap,
) -> Response {
    let if_none_match = header_str(headers, "if-none-match");
    match read_from(ctx, caller, source, uri.query(), if_none_match).await {
        Ok(r) | Err(r) => r,
    }
}

async fn read_from<R: ReadSource>(
    ctx: &ApiContext,
    caller: &Caller,
    source: R,
    query: Option<&str>,
    if_none_match: Option<&str>,
) -> Result<Response, Response> {
    let ise = |e: ApiError| e.into_response();
    let q = read_query(query)?;
    let view = match source.lookup().await.map_err(ise)? {
        Lookup::Live(v) => v,
        Lookup::Gone => return Err(gone()),
        Lookup::Missing => return Err(not_found()),
    };
    source.touch();
    let after = match q.offset.as_deref() {
        Some("now") => view.current,
        Some(o) => parse_offset(o).unwrap_or(0),
        None => 0,
    };
    if q.live.as_deref() == Some("sse") {
        let slot = ctx.limits.sse_slot(&caller.user_id).map_err(ise)?;
        let base64 = {
            let ct = normalize_content_type(&view.content_type);
            !(ct.starts_with("text/") || ct == "application/json")
        };
        let sse = SseReader {
            ctx: ctx.clone(),
            source,
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
        let body = if is_json(&view.content_type) {
            "[]"
        } else {
            ""
        };
        let mut resp = (StatusCode::OK, body).into_response();
        set_header(&mut resp, "content-type", &view.content_type);
        set_header(&mut resp, NEXT_OFFSET, format_offset(view.current));
        set_header(&mut resp, UP_TO_DATE, "true");
        set_header(&mut resp, "cache-control", "no-store");
        if view.closed {
            set_header(&mut resp, CLOSED, "true");
        }
        return Ok(resp);
    }
    let (mut msgs, mut complete) = source
        .messages(&view, after, READ_MESSAGES)
        .await
        .map_err(ise)?;
    let mut view = view;
    let long_poll = q.live.as_deref() == Some("long-poll");
    if long_poll && msgs.is_empty() && after >= view.current {
        let answer_empty = |offset: i64, closed: bool| {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
            set_header(&mut resp, UP_TO_DATE, "true");
            set_header(&mut resp, CURSOR, response_cursor(q.cursor.as_deref()));
            if closed {
                set_header(&mut resp, CLOSED, "true");
            }
            resp
        };
        if view.closed {
            return Ok(answer_empty(view.current, true));
        }
        match wait_for_messages(ctx, &source, after, ctx.config.stream_long_poll)
            .await
            .map_err(ise)?
        {
            Waited::Messages(v, m, c) => {
                view = v;
                msgs = m;
                complete = c;
            }
            Waited::Empty { offset, closed } => return Ok(answer_empty(offset, closed)),
            Waited::Gone => return Err(gone()),
            Waited::Missing => return Err(not_found()),
        }
    }
    let end = msgs
        .last()
        .map_or(view.current.max(after.min(view.current)), |m| m.id);
    let end_offset = format_offset(end);
    let closed_here = view.closed && complete && end >= view.current;
    let start = q.offset.clone().unwrap_or_else(|| "-1".into());
    let tag = etag(source.name(), &start, &end_offset, closed_here);
    if if_none_match == Some(tag.as_str()) {
        let mut resp = StatusCode::NOT_MODIFIED.into_response();
        set_header(&mut resp, "etag", &tag);
        return Ok(resp);
    }
    let body = body_bytes(&view.content_type, &msgs);
    let mut resp = (StatusCode::OK, body).into_response();
    set_header(&mut resp, "content-type", &view.content_type);
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
enum Waited<S> {
    Messages(View<S>, Vec<Message>, bool),
    /// Nothing new before the timeout (or the source closed): answer with this offset.
    Empty {
        offset: i64,
        closed: bool,
    },
    Gone,
    Missing,
}

/// Waits up to `timeout` for messages of `source` after `after` (or its closing).
async fn wait_for_messages<R: ReadSource>(
    ctx: &ApiContext,
    source: &R,
    after: i64,
    timeout: Duration,
) -> Result<Waited<R::State>, ApiError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut feed = ctx.log.feed(&source.log_id(), i64::MAX);
    let mut shutdown = ctx.shutdown.clone();
    loop {
        // Marks the head seen before the state is read, so a commit after it wakes `changed`.
        let _ = feed.next_page(1).await?;
        let view = match source.lookup().await? {
            Lookup::Live(v) => v,
            Lookup::Gone => return Ok(Waited::Gone),
            Lookup::Missing => return Ok(Waited::Missing),
        };
        let (msgs, complete) = source.messages(&view, after, READ_MESSAGES).await?;
        if !msgs.is_empty() {
            return Ok(Waited::Messages(view, msgs, complete));
        }
        if view.closed {
            return Ok(Waited::Empty {
                offset: view.current.max(after),
                closed: true,
            });
        }
        let now = tokio::time::Instant::now();
        if now >= deadline || *shutdown.borrow() {
            return Ok(Waited::Empty {
                offset: after.max(view.current),
                closed: false,
            });
        }
        tokio::select! {
            _ = feed.changed() => {}
            _ = tokio::time::sleep_until(deadline.min(now + RECHECK)) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// One SSE reader: catch-up, then live, every data event followed by a control event with the
/// offset after it.
struct SseReader<R> {
    ctx: ApiContext,
    source: R,
    cursor: i64,
    client_cursor: Option<String>,
    base64: bool,
    first: bool,
    done: bool,
    _slot: crate::limits::SseSlot,
}

impl<R: ReadSource> SseReader<R> {
    fn data_event(&self, out: &mut String, m: &Message) {
        use base64::Engine;
        let bytes = m.bytes();
        // JSON mode: the message's values as one array (`Message::bytes`); text as it is.
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
        let mut feed = self.ctx.log.feed(&self.source.log_id(), i64::MAX);
        let mut shutdown = self.ctx.shutdown.clone();
        let keepalive = tokio::time::Instant::now() + SSE_KEEPALIVE;
        loop {
            let _ = feed.next_page(1).await.ok()?;
            let view = match self.source.lookup().await.ok()? {
                Lookup::Live(v) => v,
                _ => return None,
            };
            let (msgs, complete) = self
                .source
                .messages(&view, self.cursor, SSE_MESSAGES)
                .await
                .ok()?;
            let mut out = String::new();
            let n = msgs.len();
            for (i, m) in msgs.iter().enumerate() {
                self.data_event(&mut out, m);
                self.cursor = m.id;
                let last = i + 1 == n && complete;
                let closed = last && view.closed;
                self.control(&mut out, m.id, last, closed);
                if closed {
                    self.done = true;
                }
            }
            if n > 0 {
                self.first = false;
                self.source.touch();
                return Some(Bytes::from(out));
            }
            let offset = self.cursor.max(view.current);
            if view.closed {
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
