//! The SSE engine every stream route shares (the n8n stream, AG-UI's and the items' streams):
//! where a stream resumes (`Last-Event-ID`), the response's headers, and the subscriber that
//! pages a thread's events into frames.
//!
//! A stream is one cursor over the log: read the thread's events after the cursor, send them,
//! advance, and sleep until the thread's head moves. There is no replay/live seam. Recent events
//! come from the thread's hot tail, shared by all its subscribers with each n8n frame rendered
//! once; older ones from the store. The body is produced only as fast as the socket drains it,
//! so a slow client costs at most a page in memory and simply reads at its own pace.

pub mod erased;
mod subscriber;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use threadstream_domain::ErrorCode;
use threadstream_domain::StoredEvent;
use threadstream_store::EventLog;

use crate::error::ApiError;

pub use subscriber::frames;

/// `?lastEventId=`: the resume point of a client that cannot send `Last-Event-ID`.
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
        ApiError::bad_request(ErrorCode::InvalidCursor, e.to_string())
    };
    // Both are checked, the losing one too: a malformed cursor is a 400 wherever it is.
    let from_query =
        event_id(query.last_event_id.as_deref().unwrap_or("").as_bytes()).map_err(bad)?;
    if let Some(h) = headers.get("last-event-id") {
        // A header's surrounding blanks are not its value (RFC 9110 §5.5).
        if let Some(id) = event_id(h.as_bytes().trim_ascii()).map_err(bad)? {
            return Ok(id);
        }
    }
    Ok(from_query.unwrap_or(0))
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

    /// Whether this is the n8n rendering, whose frames the thread's tail holds already rendered
    /// ([`TailEvent::n8n_frame`]): those are copied instead of rendered again.
    fn is_n8n(&self) -> bool {
        false
    }
}

/// Every event of `thread_id` with `from < id <= through`, in order, of what a client must see
/// ([`EventLog::client_sight`]: on a standby that holds it, when standbys are configured).
pub async fn read_range(
    log: &EventLog,
    thread_id: &str,
    from: i64,
    through: i64,
) -> Result<Vec<StoredEvent>, ApiError> {
    let sight = log.client_sight();
    let mut out = Vec::new();
    let mut after = from;
    while after < through {
        let page = log
            .read_thread_in(sight, thread_id, after, subscriber::PAGE as i64)
            .await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        // A compacted row across `through` holds the deltas up to it too: that part is in the
        // range (the rest is what a reader resuming at `through` is sent first).
        let across = page
            .iter()
            .find(|e| e.id > through)
            .and_then(|e| e.compacted_part(from, through));
        out.extend(page.into_iter().filter(|e| e.id <= through));
        out.extend(across);
    }
    Ok(out)
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
