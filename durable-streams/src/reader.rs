//! Reading anything the log holds as a Durable Stream: catch-up, long-poll and SSE over a
//! [`ReadSource`] (a stream of `/v1/stream/*`, or a thread). One engine, so a thread read as a
//! stream answers exactly as a stream does.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see crate::error)

use std::future::Future;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use threadstream_domain::durable_stream::{
    format_offset, is_json, normalize_content_type, parse_offset,
};
use threadstream_domain::StoredEvent;
use threadstream_store::ThreadFeed;

use crate::context::Context;
use crate::error::{settle, DurableError, Stop};
use crate::protocol::*;
use crate::read::{body_bytes, Message};

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
    /// The id of the last event of the source's log stream this view folded: a live reader
    /// follows the log stream from there.
    pub log_cursor: i64,
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
    fn lookup(&self) -> impl Future<Output = Result<Lookup<Self::State>, DurableError>> + Send;
    /// Up to `limit` messages after offset `after`, and whether they reach the end.
    fn messages(
        &self,
        view: &View<Self::State>,
        after: i64,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<Message>, bool), DurableError>> + Send;
    /// Carries `view` forward over `events`, the next committed events of the log stream after
    /// `view.log_cursor` (served to live readers from the log's hot tail), and returns the
    /// messages among them. `None` when they hold something only a fresh [`ReadSource::lookup`]
    /// can tell (a deletion, a new life, an expiry): the reader then looks the source up again.
    fn follow(&self, view: &mut View<Self::State>, events: &[&StoredEvent])
        -> Option<Vec<Message>>;
    /// A read was served now.
    fn touch(&self) {}
}

/// `HEAD`: the source's offset, content type and closure, no body.
pub async fn head<R: ReadSource>(source: &R) -> Result<Response, DurableError> {
    let view = match source.lookup().await? {
        Lookup::Live(v) => v,
        Lookup::Gone => return Ok(StatusCode::GONE.into_response()),
        Lookup::Missing => return Ok(StatusCode::NOT_FOUND.into_response()),
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
    Ok(resp)
}

/// `GET`: catch-up, long-poll (`live=long-poll`) or SSE (`live=sse`), from `offset`.
/// `sse_slot` admits an SSE reader (the server's connection limits): it holds what it returns
/// until its stream ends, or is answered with its refusal.
pub async fn read<R: ReadSource, S: Send + 'static>(
    ctx: &Context,
    sse_slot: impl FnOnce() -> Result<S, Response>,
    source: R,
    query: Option<&str>,
    headers: &axum::http::HeaderMap,
) -> Result<Response, DurableError> {
    let if_none_match = header_str(headers, "if-none-match");
    settle(read_from(ctx, sse_slot, source, query, if_none_match).await)
}

async fn read_from<R: ReadSource, S: Send + 'static>(
    ctx: &Context,
    sse_slot: impl FnOnce() -> Result<S, Response>,
    source: R,
    query: Option<&str>,
    if_none_match: Option<&str>,
) -> Result<Response, Stop> {
    let q = read_query(query)?;
    let view = match source.lookup().await? {
        Lookup::Live(v) => v,
        Lookup::Gone => return Err(gone().into()),
        Lookup::Missing => return Err(not_found().into()),
    };
    source.touch();
    let after = match q.offset.as_deref() {
        Some("now") => view.current,
        Some(o) => parse_offset(o).unwrap_or(0),
        None => 0,
    };
    if q.live.as_deref() == Some("sse") {
        let slot = sse_slot()?;
        let base64 = {
            let ct = normalize_content_type(&view.content_type);
            !(ct.starts_with("text/") || ct == "application/json")
        };
        let sse = SseReader {
            ctx: ctx.clone(),
            reading: Reading::lookup(ctx, source),
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
    let (msgs, complete) = source.messages(&view, after, READ_MESSAGES).await?;
    let mut look = Look {
        msgs,
        complete,
        current: view.current,
        closed: view.closed,
    };
    let content_type = view.content_type.clone();
    let long_poll = q.live.as_deref() == Some("long-poll");
    if long_poll && look.msgs.is_empty() && after >= view.current {
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
        let mut reading = Reading::live(ctx, source.clone(), view);
        match wait_for_messages(ctx, &mut reading, after, ctx.long_poll).await? {
            Waited::Messages(l) => look = l,
            Waited::Empty { offset, closed } => return Ok(answer_empty(offset, closed)),
            Waited::Gone => return Err(gone().into()),
            Waited::Missing => return Err(not_found().into()),
        }
    }
    let Look {
        msgs,
        complete,
        current,
        closed,
    } = look;
    let end = msgs
        .last()
        .map_or(current.max(after.min(current)), |m| m.id);
    let end_offset = format_offset(end);
    let closed_here = closed && complete && end >= current;
    let start = q.offset.clone().unwrap_or_else(|| "-1".into());
    let tag = etag(source.name(), &start, &end_offset, closed_here);
    if if_none_match == Some(tag.as_str()) {
        let mut resp = StatusCode::NOT_MODIFIED.into_response();
        set_header(&mut resp, "etag", &tag);
        return Ok(resp);
    }
    let body = body_bytes(&content_type, &msgs);
    let mut resp = (StatusCode::OK, body).into_response();
    set_header(&mut resp, "content-type", &content_type);
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

/// What one look at a source found after a reader's offset.
struct Look {
    msgs: Vec<Message>,
    /// The messages reach the source's end as this look saw it.
    complete: bool,
    /// The source's offset and closure as this look saw it.
    current: i64,
    closed: bool,
}

enum Looked {
    Found(Look),
    Gone,
    Missing,
}

/// How a waiting reader reads its source: looked up afresh from the store, or, once caught up
/// with it, following it live: its view carried forward over the log stream's committed events
/// as the feed hands them over, from the log's hot tail when that holds them, so a wake costs
/// no store read (as on the n8n stream).
struct Reading<R: ReadSource> {
    log: threadstream_store::EventLog,
    source: R,
    /// What the reader sleeps on; a live reader also takes the log stream's events from it.
    feed: ThreadFeed,
    /// Set while following live: the view carried forward, positioned where `feed` reads from.
    live: Option<View<R::State>>,
}

impl<R: ReadSource> Reading<R> {
    /// A reader that looks its source up first.
    fn lookup(ctx: &Context, source: R) -> Self {
        let log = ctx.log.clone();
        let feed = log.feed(&source.log_id(), i64::MAX);
        Reading {
            log,
            source,
            feed,
            live: None,
        }
    }

    /// A reader caught up with `view`, following it from there.
    fn live(ctx: &Context, source: R, view: View<R::State>) -> Self {
        let mut reading = Self::lookup(ctx, source);
        reading.follow_from(view);
        reading
    }

    fn follow_from(&mut self, view: View<R::State>) {
        self.feed = self.log.feed(&self.source.log_id(), view.log_cursor);
        self.live = Some(view);
    }

    /// Up to `limit` messages after `after`. Marks the head seen first, so a commit after the
    /// look wakes [`ThreadFeed::changed`].
    async fn look(&mut self, after: i64, limit: usize) -> Result<Looked, DurableError> {
        if let Some(view) = &mut self.live {
            let page = self.feed.next_page(limit).await?;
            let whole = page.len() < limit;
            match self.source.follow(view, &page.events()) {
                Some(mut msgs) => {
                    // A catch-up read may have gone past the view it began from.
                    msgs.retain(|m| m.id > after);
                    return Ok(Looked::Found(Look {
                        msgs,
                        complete: whole,
                        current: view.current,
                        closed: view.closed,
                    }));
                }
                None => self.live = None,
            }
        }
        self.feed.mark_seen();
        let view = match self.source.lookup().await? {
            Lookup::Live(v) => v,
            Lookup::Gone => return Ok(Looked::Gone),
            Lookup::Missing => return Ok(Looked::Missing),
        };
        let (msgs, complete) = self.source.messages(&view, after, limit).await?;
        let look = Look {
            msgs,
            complete,
            current: view.current,
            closed: view.closed,
        };
        if complete && !view.closed {
            self.follow_from(view);
        }
        Ok(Looked::Found(look))
    }

    /// A periodic re-check: a head hint from another process can be lost, so the next look
    /// reads the store.
    fn recheck(&mut self) {
        self.feed.read_store_next();
    }
}

/// How a wait for messages after an offset ended.
enum Waited {
    Messages(Look),
    /// Nothing new before the timeout (or the source closed): answer with this offset.
    Empty {
        offset: i64,
        closed: bool,
    },
    Gone,
    Missing,
}

/// Waits up to `timeout` for messages of the source after `after` (or its closing).
async fn wait_for_messages<R: ReadSource>(
    ctx: &Context,
    reading: &mut Reading<R>,
    after: i64,
    timeout: Duration,
) -> Result<Waited, DurableError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut shutdown = ctx.shutdown.clone();
    loop {
        let look = match reading.look(after, READ_MESSAGES).await? {
            Looked::Found(l) => l,
            Looked::Gone => return Ok(Waited::Gone),
            Looked::Missing => return Ok(Waited::Missing),
        };
        if !look.msgs.is_empty() {
            return Ok(Waited::Messages(look));
        }
        if !look.complete {
            continue; // a page of events that are not messages: read on
        }
        if look.closed {
            return Ok(Waited::Empty {
                offset: look.current.max(after),
                closed: true,
            });
        }
        let now = tokio::time::Instant::now();
        if now >= deadline || *shutdown.borrow() {
            return Ok(Waited::Empty {
                offset: after.max(look.current),
                closed: false,
            });
        }
        tokio::select! {
            _ = reading.feed.changed() => {}
            _ = tokio::time::sleep_until(deadline.min(now + RECHECK)) => reading.recheck(),
            _ = shutdown.changed() => {}
        }
    }
}

/// One SSE reader: catch-up, then live, every data event followed by a control event with the
/// offset after it.
struct SseReader<R: ReadSource, S> {
    ctx: Context,
    reading: Reading<R>,
    cursor: i64,
    client_cursor: Option<String>,
    base64: bool,
    first: bool,
    done: bool,
    _slot: S,
}

impl<R: ReadSource, S> SseReader<R, S> {
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
        let mut shutdown = self.ctx.shutdown.clone();
        let keepalive = tokio::time::Instant::now() + SSE_KEEPALIVE;
        loop {
            let look = match self.reading.look(self.cursor, SSE_MESSAGES).await.ok()? {
                Looked::Found(l) => l,
                Looked::Gone | Looked::Missing => return None,
            };
            let mut out = String::new();
            let n = look.msgs.len();
            for (i, m) in look.msgs.iter().enumerate() {
                self.data_event(&mut out, m);
                self.cursor = m.id;
                let last = i + 1 == n && look.complete;
                let closed = last && look.closed;
                self.control(&mut out, m.id, last, closed);
                if closed {
                    self.done = true;
                }
            }
            if n > 0 {
                self.first = false;
                self.reading.source.touch();
                return Some(Bytes::from(out));
            }
            if !look.complete {
                continue; // a page of events that are not messages: read on
            }
            let offset = self.cursor.max(look.current);
            if look.closed {
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
                r = self.reading.feed.changed() => { if r.is_err() { return None; } }
                _ = tokio::time::sleep_until(keepalive.min(now + RECHECK)) => self.reading.recheck(),
                _ = shutdown.changed() => {}
            }
        }
    }
}
