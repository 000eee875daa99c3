//! `GET /instance-ai/events/:threadId` (the n8n SSE stream) and
//! `POST /instance-ai/threads/:threadId/events` (ingest for agents that run elsewhere).
//!
//! The stream is one cursor over the log: read the thread's events after the cursor, send them,
//! advance, and sleep until the thread's head moves. There is no replay/live seam. The body is
//! produced only as fast as the socket drains it, so a slow client costs at most one page of
//! events in memory and simply reads the store at its own pace.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::{AgentEvent, StoredEvent, ThreadCommand};
use threadstream_store::EventLog;

use crate::error::ApiError;
use crate::extract::{ApiJson, Caller};
use crate::http::{authorize_thread, authorize_thread_read};
use crate::limits::SseSlot;
use crate::ApiContext;

/// Events read from the store per page.
const PAGE: i64 = 512;
/// Events per page for a subscriber that does not keep up (see `frames`).
const SLOW_PAGE: i64 = 32;
/// A hand-over that waits longer than this marks the subscriber as slow.
const SLOW_SEND: Duration = Duration::from_millis(20);
/// Bytes handed to the response body at a time (see `frames`).
const SEND_SLICE: usize = 16 * 1024;

#[derive(Deserialize)]
pub struct CursorQuery {
    #[serde(rename = "lastEventId")]
    last_event_id: Option<String>,
}

/// The cursor: a `Last-Event-ID` header wins, then `?lastEventId=`, then 0 (full history).
/// An empty value counts as absent; anything else that is not an id is a 400.
pub fn cursor_from(headers: &HeaderMap, query: &CursorQuery) -> Result<i64, ApiError> {
    use threadstream_domain::cursor::event_id;
    let bad = |e: threadstream_domain::cursor::CursorError| {
        ApiError::bad_request("invalid_cursor", e.to_string())
    };
    if let Some(h) = headers.get("last-event-id") {
        if let Some(id) = event_id(h.as_bytes()).map_err(bad)? {
            return Ok(id);
        }
    }
    let query = query.last_event_id.as_deref().unwrap_or("");
    Ok(event_id(query.as_bytes()).map_err(bad)?.unwrap_or(0))
}

pub async fn stream(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
    Query(query): Query<CursorQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize_thread_read(&ctx, &caller, &thread_id).await?;
    let cursor = cursor_from(&headers, &query)?;
    let slot = ctx.limits.sse_slot(&caller.user_id)?;
    Ok(sse_response(Body::from_stream(frames(
        &ctx,
        &caller,
        slot,
        thread_id,
        cursor,
        String::new(),
        N8nRender,
    ))))
}

/// A `text/event-stream` response with n8n's headers (no caching, no proxy buffering).
pub fn sse_response(body: Body) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// Turns stored events into the SSE text of one wire protocol, for [`frames`].
pub trait SseRender: Send + 'static {
    /// Appends the frames of `event` to `out`; `false` ends the stream after them.
    fn render(&mut self, event: &StoredEvent, out: &mut String) -> bool;
}

/// The n8n rendering: the 15 wire types as stored, `id:` = the event id.
struct N8nRender;

impl SseRender for N8nRender {
    fn render(&mut self, e: &StoredEvent, out: &mut String) -> bool {
        if e.is_n8n() {
            out.push_str("id: ");
            out.push_str(&e.id.to_string());
            out.push_str("\ndata: ");
            e.write_envelope_json(out);
            out.push_str("\n\n");
        }
        true
    }
}

/// Every event of `thread_id` with `from < id <= through`, in order.
pub async fn read_range(
    log: &EventLog,
    thread_id: &str,
    from: i64,
    through: i64,
) -> Result<Vec<StoredEvent>, ApiError> {
    let mut out = Vec::new();
    let mut after = from;
    while after < through {
        let page = log.read_thread(thread_id, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        out.extend(page.into_iter().filter(|e| e.id <= through));
    }
    Ok(out)
}

/// The frames of one subscriber: `prelude`, then `renderer`'s frames of the thread's events
/// after `cursor`, until the renderer ends the stream, the client goes away or the server shuts
/// down. One cursor over the log: no replay/live seam. On shutdown the stream first sends what
/// is committed up to then (the runs' `run-finish` of the shutdown included), then ends
/// cleanly; the client resumes elsewhere with its `Last-Event-ID`. `slot` (the stream's place
/// in the SSE limits) is given back when the response body is dropped.
///
/// `caller` was authorized before the stream opened, but a thread that did not exist then had
/// no owner to check: before the first events are sent, read access is checked again, and a
/// thread that turned out to be someone else's ends the stream with nothing sent.
pub fn frames<R: SseRender>(
    ctx: &ApiContext,
    caller: &Caller,
    slot: SseSlot,
    thread_id: String,
    mut cursor: i64,
    prelude: String,
    mut renderer: R,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    let log = ctx.log.clone();
    let ping = ctx.config.sse_ping;
    let mut shutdown = ctx.shutdown.clone();
    let ctx = ctx.clone();
    let caller = caller.clone();
    let frames = async_stream_lite(move |tx| async move {
        // The owner of a thread never changes: one check once it has events is enough.
        let mut owner_checked = false;
        if !prelude.is_empty() && tx.send(Ok(Bytes::from(prelude))).await.is_err() {
            return;
        }
        let mut head = log.heads().thread(&thread_id);
        let mut next_ping = tokio::time::Instant::now() + ping;
        let mut closing = *shutdown.borrow();
        let mut page_size = PAGE;
        loop {
            // Mark the head seen *before* reading, so a commit after the read wakes us.
            head.borrow_and_update();
            let page = match log.read_thread(&thread_id, cursor, page_size).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "SSE read failed; closing stream");
                    return;
                }
            };
            if let Some(last) = page.last() {
                if !owner_checked {
                    if let Err(e) = authorize_thread_read(&ctx, &caller, &thread_id).await {
                        tracing::info!(thread = %thread_id, reason = %e, "closing a stream on a thread the caller may not read");
                        return;
                    }
                    owner_checked = true;
                }
                cursor = last.id;
                let mut buf = String::with_capacity(page.len() * 160);
                let mut more = true;
                for e in &page {
                    if !renderer.render(e, &mut buf) {
                        more = false;
                        break;
                    }
                }
                // A slow reader waits in `send` below: hold only the rendered frames, never the
                // page they came from, and hand them over in slices of one allocation, so the
                // channel and hyper's write queue hold parts of this page, not whole pages. A
                // reader that made us wait gets small pages until it keeps up again: what it
                // costs the server is a few KB, whatever its backlog in the log.
                drop(page);
                let mut frames = Bytes::from(buf);
                let mut slow = false;
                while !frames.is_empty() {
                    let slice = frames.split_to(frames.len().min(SEND_SLICE));
                    let started = tokio::time::Instant::now();
                    if tx.send(Ok(slice)).await.is_err() {
                        return; // client went away
                    }
                    slow |= started.elapsed() > SLOW_SEND;
                }
                page_size = if slow { SLOW_PAGE } else { PAGE };
                if !more {
                    return;
                }
                continue;
            }
            if closing {
                return; // everything committed before the shutdown is sent
            }
            tokio::select! {
                r = head.changed() => { if r.is_err() { return; } }
                // Re-check the store now and then: a wake-up is a hint, the log is the truth.
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = tokio::time::sleep_until(next_ping) => {
                    next_ping = tokio::time::Instant::now() + ping;
                    if tx.send(Ok(Bytes::from_static(b": ping\n\n"))).await.is_err() {
                        return;
                    }
                }
                // One more read to the head, then the end (above).
                _ = shutdown.changed() => closing = true,
                // The client went away while the stream was idle: stop now, not at the next
                // ping, so its slot and task are freed at once.
                _ = tx.closed() => return,
            }
        }
    });
    frames.map(move |item| {
        let _ = &slot;
        item
    })
}

/// A stream fed by a task through a capacity-1 channel: the producer runs only as fast as the
/// consumer (the socket) takes items, which is what bounds a slow reader's memory.
fn async_stream_lite<T, F, Fut>(f: F) -> impl futures::Stream<Item = T>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(f(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestBody {
    /// Kept as sent, so each event's size is known without serializing it again.
    events: Vec<Box<serde_json::value::RawValue>>,
}

/// Appends events produced by an agent running elsewhere, through the same writer and rules as
/// the built-in runtime. All or nothing: one broken rule and nothing of the request is stored.
pub async fn ingest(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
    ApiJson(body): ApiJson<IngestBody>,
) -> Result<Json<Value>, ApiError> {
    authorize_thread(&ctx, &caller, &thread_id).await?;
    if body.events.is_empty() {
        return Err(ApiError::unprocessable(
            "empty_batch",
            "events must not be empty",
        ));
    }
    ctx.limits
        .check_ingest(body.events.iter().map(|e| e.get().len()))?;
    let mut commands = Vec::with_capacity(body.events.len() + 1);
    commands.push(ThreadCommand::Create {
        owner: caller.user_id.clone(),
        title: None,
    });
    for (i, raw) in body.events.into_iter().enumerate() {
        let event: AgentEvent = serde_json::from_str(raw.get())
            .map_err(|e| ApiError::unprocessable("invalid_event", format!("events[{i}]: {e}")))?;
        commands.push(ThreadCommand::Record(event));
    }
    let stored = ctx.log.append(&thread_id, commands).await?;
    if let Some(leases) = &ctx.leases {
        // This instance took the run's start: if it dies, another one finishes the run.
        for e in stored.iter().filter(|e| e.event_type == "run-start") {
            if let Err(err) = leases.hold(&thread_id, &e.run_id).await {
                tracing::warn!(error = %err, thread = %thread_id, "could not take the run's lease");
            }
        }
    }
    let ids: Vec<i64> = stored.iter().filter(|e| e.is_n8n()).map(|e| e.id).collect();
    Ok(Json(json!({ "ids": ids })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(v: Option<&str>) -> CursorQuery {
        CursorQuery {
            last_event_id: v.map(str::to_string),
        }
    }

    #[test]
    fn header_wins_over_query_and_default_is_zero() {
        let mut h = HeaderMap::new();
        assert_eq!(cursor_from(&h, &q(None)).unwrap(), 0);
        assert_eq!(cursor_from(&h, &q(Some("7"))).unwrap(), 7);
        h.insert("last-event-id", HeaderValue::from_static("9"));
        assert_eq!(cursor_from(&h, &q(Some("7"))).unwrap(), 9);
    }

    #[test]
    fn malformed_cursors_are_rejected() {
        let h = HeaderMap::new();
        for bad in ["x", "-1", "1.5", "99999999999999999999"] {
            assert!(cursor_from(&h, &q(Some(bad))).is_err(), "{bad}");
        }
        let mut h = HeaderMap::new();
        h.insert("last-event-id", HeaderValue::from_static("abc"));
        assert!(cursor_from(&h, &q(Some("3"))).is_err());
    }
}
