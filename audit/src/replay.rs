//! `threadstream replay`: a thread's events again, with the gaps between their `ts` (divided by
//! the speed), as NDJSON lines ([`crate::line`]) or as the n8n SSE stream on a local port, so a
//! UI or a test can be driven by a real past run.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{Stream, StreamExt};
use threadstream_domain::StoredEvent;
use threadstream_store::EventLog;

use crate::line::write_line;
use crate::{AuditError, PAGE};

/// How fast to replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// Original gaps divided by this factor.
    Factor(f64),
    /// No waiting at all.
    Max,
}

impl std::str::FromStr for Speed {
    type Err = AuditError;

    fn from_str(s: &str) -> Result<Self, AuditError> {
        if s == "max" {
            return Ok(Speed::Max);
        }
        match s.parse::<f64>() {
            Ok(f) if f.is_finite() && f > 0.0 => Ok(Speed::Factor(f)),
            _ => Err(AuditError::Invalid(format!(
                "invalid speed {s:?}: a positive factor (1, 10, …) or `max`"
            ))),
        }
    }
}

/// What to replay.
#[derive(Debug, Clone)]
pub struct Replay {
    pub thread: String,
    /// Replay the events after this id (0: from the start).
    pub after: i64,
    pub speed: Speed,
    /// Longest wait between two events (long pauses between runs are shortened to this).
    pub max_gap: Option<Duration>,
}

impl Replay {
    fn wait(&self, prev_ts: Option<i64>, ts: i64) -> Duration {
        let (Some(prev), Speed::Factor(f)) = (prev_ts, self.speed) else {
            return Duration::ZERO;
        };
        let gap = Duration::from_secs_f64((ts - prev).max(0) as f64 / 1000.0 / f);
        self.max_gap.map_or(gap, |m| gap.min(m))
    }
}

/// The thread's events after `r.after`, each released at its replayed time.
pub fn timed(log: EventLog, r: Replay) -> impl Stream<Item = Result<StoredEvent, AuditError>> {
    struct St {
        log: EventLog,
        r: Replay,
        page: std::collections::VecDeque<StoredEvent>,
        prev_ts: Option<i64>,
        done: bool,
    }
    let st = St {
        log,
        r,
        page: Default::default(),
        prev_ts: None,
        done: false,
    };
    futures::stream::unfold(st, |mut st| async move {
        if st.page.is_empty() && !st.done {
            match st.log.read_thread(&st.r.thread, st.r.after, PAGE).await {
                Ok(p) => {
                    st.done = p.is_empty();
                    if let Some(last) = p.last() {
                        st.r.after = last.id;
                    }
                    st.page.extend(p);
                }
                Err(e) => {
                    st.done = true;
                    return Some((Err(e.into()), st));
                }
            }
        }
        let e = st.page.pop_front()?;
        tokio::time::sleep(st.r.wait(st.prev_ts, e.ts)).await;
        st.prev_ts = Some(e.ts);
        Some((Ok(e), st))
    })
}

/// Writes the replay as NDJSON lines to `out`, flushing each line; returns the number of lines.
pub async fn to_ndjson(
    log: EventLog,
    r: Replay,
    out: &mut (impl tokio::io::AsyncWrite + Unpin),
) -> Result<u64, AuditError> {
    use tokio::io::AsyncWriteExt;
    let events = timed(log, r);
    futures::pin_mut!(events);
    let mut n = 0;
    let mut line = String::new();
    while let Some(e) = events.next().await {
        line.clear();
        write_line(&e?, &mut line);
        out.write_all(line.as_bytes()).await?;
        out.flush().await?;
        n += 1;
    }
    Ok(n)
}

#[derive(Clone)]
struct ReplayState {
    log: EventLog,
    replay: Replay,
}

/// Serves the replay as SSE on `listener`: `GET /instance-ai/events/{threadId}` (the thread
/// replayed, like the real route) and `GET /events`. Each connection gets its own replay from
/// its `Last-Event-ID` (else from `after`); the stream ends after the thread's last event.
pub async fn serve_sse(
    log: EventLog,
    replay: Replay,
    listener: tokio::net::TcpListener,
) -> Result<(), AuditError> {
    let app = axum::Router::new()
        .route("/events", get(sse))
        .route("/instance-ai/events/{thread_id}", get(sse_thread))
        .with_state(ReplayState { log, replay });
    axum::serve(listener, app).await?;
    Ok(())
}

async fn sse_thread(
    State(st): State<ReplayState>,
    Path(thread_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if thread_id != st.replay.thread {
        let body = serde_json::json!({"error": {"code": "not_found", "message":
            format!("this replay serves thread '{}', not '{thread_id}'", st.replay.thread)}});
        return (StatusCode::NOT_FOUND, axum::Json(body)).into_response();
    }
    sse(State(st), headers).await
}

async fn sse(State(st): State<ReplayState>, headers: HeaderMap) -> Response {
    let mut replay = st.replay.clone();
    if let Some(h) = headers.get("last-event-id") {
        match threadstream_domain::cursor::event_id(h.as_bytes()) {
            Ok(Some(id)) => replay.after = id,
            // A blank header is no cursor, as on the server's own streams.
            Ok(None) => {}
            Err(e) => {
                let body = serde_json::json!({"error": {"code": "invalid_cursor",
                    "message": e.to_string()}});
                return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
            }
        }
    }
    let frames = timed(st.log.clone(), replay).filter_map(|e| async move {
        match e {
            Ok(e) if e.is_n8n() => {
                let mut frame = String::with_capacity(e.payload.len() + 128);
                e.write_n8n_frame(&mut frame);
                Some(Ok::<_, std::io::Error>(Bytes::from(frame)))
            }
            Ok(_) => None,
            Err(err) => Some(Err(std::io::Error::other(err))),
        }
    });
    let mut resp = (StatusCode::OK, Body::from_stream(frames)).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speed_scales_gaps_and_max_gap_caps_them() {
        let r = |speed, max_gap| Replay {
            thread: "t".into(),
            after: 0,
            speed,
            max_gap,
        };
        assert_eq!("max".parse::<Speed>().unwrap(), Speed::Max);
        assert!("0".parse::<Speed>().is_err() && "fast".parse::<Speed>().is_err());
        let ten: Speed = "10".parse().unwrap();
        assert_eq!(
            r(ten, None).wait(Some(1000), 3000),
            Duration::from_millis(200)
        );
        assert_eq!(r(Speed::Max, None).wait(Some(0), 50_000), Duration::ZERO);
        assert_eq!(r(ten, None).wait(None, 3000), Duration::ZERO);
        let capped = r(Speed::Factor(1.0), Some(Duration::from_millis(5)));
        assert_eq!(capped.wait(Some(0), 60_000), Duration::from_millis(5));
    }
}
