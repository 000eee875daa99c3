//! `POST /v1/stream/*`: append, close, and idempotent producers.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see crate::error)

use std::future::Future;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use threadstream_domain::durable_stream::{
    format_offset, log_stream_id, normalize_content_type, StreamCommand, StreamRefusal,
};
use threadstream_domain::event::durable_stream::{ProducerStamp, StreamData};
use threadstream_domain::{ErrorCode, StoredEvent, ThreadError};
use threadstream_store::StoreError;

use super::shared::{find, offset_after, stream_command, stream_path, Found};
use crate::context::{Actor, Context};
use crate::error::{settle, DurableError, Stop};
use crate::protocol::*;
use crate::read::data_of;

/// How long a producer's write that overtook its predecessor waits for it (`append_filling_gaps`).
const PRODUCER_GAP_WAIT: Duration = Duration::from_millis(100);

/// `POST /v1/stream/*` at `req_path` by `actor`: append (or, with an empty body and
/// `Stream-Closed: true`, close). `body` is read when the headers are found good.
pub async fn append(
    ctx: &Context,
    actor: &Actor,
    req_path: &str,
    headers: &HeaderMap,
    body: impl Future<Output = Result<Bytes, Response>>,
) -> Result<Response, DurableError> {
    settle(append_inner(ctx, actor, req_path, headers, body).await)
}

async fn append_inner(
    ctx: &Context,
    actor: &Actor,
    req_path: &str,
    headers: &HeaderMap,
    body: impl Future<Output = Result<Bytes, Response>>,
) -> Result<Response, Stop> {
    let path = stream_path(req_path)?;
    let producer = producer_of(headers)?;
    let close = header_str(headers, CLOSED) == Some("true");
    let seq = header_str(headers, SEQ).map(str::to_string);
    let body = body.await?;
    // The common case, a body in the content type it names, is decided by the log's writer
    // alone, on the stream's aggregate it holds in memory (the owner, the content type, the
    // producer's sequence, the closure): no read of the stream before it.
    if let Some(ct) = header_str(headers, header::CONTENT_TYPE.as_str()) {
        if let Ok(Some(data)) = data_of(ct, &body, false) {
            let command = StreamCommand::Append {
                data,
                content_type: ct.to_string(),
                seq: seq.clone(),
                producer: producer.clone(),
                close,
            };
            match append_filling_gaps(ctx, actor, &path, command, producer.is_some()).await {
                Ok(stored) => return Ok(appended(&stored, 0, producer.as_ref(), close, false)),
                // Told apart below: no such stream, or (to an admin) another user's.
                Err(StoreError::Rule(ThreadError::Stream(StreamRefusal::NotFound))) => {}
                Err(e) => return Err(refusal_response(e.into(), producer.as_ref())),
            }
        }
    }
    // Everything else (a close, a body that is not what it says, a stream that is not there)
    // answers as the stream now is.
    let (found, _, _) = find(ctx, actor, &path, false).await?;
    let life = match found {
        Found::Live(l) => l,
        Found::Gone => return Err(gone().into()),
        Found::Missing => return Err(not_found().into()),
    };
    let command = if body.is_empty() {
        if !close {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                ErrorCode::EmptyBody,
                "an append needs a body (an empty body only closes, with Stream-Closed: true)",
            )
            .into());
        }
        StreamCommand::Close {
            producer: producer.clone(),
        }
    } else {
        let Some(ct) = header_str(headers, header::CONTENT_TYPE.as_str()) else {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                ErrorCode::ContentTypeRequired,
                "Content-Type is required on an append",
            )
            .into());
        };
        if normalize_content_type(ct) != normalize_content_type(&life.content_type) && !life.closed
        {
            return Err(refuse(
                StatusCode::CONFLICT,
                ErrorCode::ContentTypeMismatch,
                format!(
                    "content type '{ct}' does not match the stream's '{}'",
                    life.content_type
                ),
            )
            .into());
        }
        let data = if life.closed {
            // Refused below as closed (or answered as the closing producer's duplicate).
            StreamData::Text(String::new())
        } else {
            data_of(&life.content_type, &body, false)?.unwrap_or(StreamData::Text(String::new()))
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
    let stored = match append_filling_gaps(ctx, actor, &path, command, producer.is_some()).await {
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
            let mut resp = refuse(
                StatusCode::CONFLICT,
                ErrorCode::StreamClosed,
                "stream is closed",
            );
            set_header(&mut resp, CLOSED, "true");
            set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
            return Ok(resp);
        }
        Err(e) => return Err(refusal_response(e.into(), producer.as_ref())),
    };
    Ok(appended(
        &stored,
        life.current_offset(),
        producer.as_ref(),
        close,
        closing,
    ))
}

/// The answer to a stored append (`closing`: a close without data): the offset after it (else
/// `fallback`), and the producer's headers.
fn appended(
    stored: &[StoredEvent],
    fallback: i64,
    producer: Option<&ProducerStamp>,
    close: bool,
    closing: bool,
) -> Response {
    let offset = offset_after(stored, fallback);
    let mut resp = if producer.is_some() && !closing {
        StatusCode::OK.into_response()
    } else {
        StatusCode::NO_CONTENT.into_response()
    };
    set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
    if let Some(p) = producer {
        set_header(&mut resp, PRODUCER_EPOCH, p.epoch);
        set_header(&mut resp, PRODUCER_SEQ, p.seq);
    }
    if close {
        set_header(&mut resp, CLOSED, "true");
    }
    resp
}

/// Appends `command` to the stream at `path`. A client pipelining a producer's writes (the npm
/// client's `maxInFlight`) sends them over several connections, so one can overtake its
/// predecessor. Refused at once, it would be retried after the predecessor's answer; instead a
/// producer's write refused for a sequence gap is decided again after each commit to the stream,
/// for up to [`PRODUCER_GAP_WAIT`], before the gap is its answer.
async fn append_filling_gaps(
    ctx: &Context,
    actor: &Actor,
    path: &str,
    command: StreamCommand,
    producer: bool,
) -> Result<Vec<StoredEvent>, StoreError> {
    let log_id = log_stream_id(path);
    let deadline = tokio::time::Instant::now() + PRODUCER_GAP_WAIT;
    let mut commits: Option<threadstream_store::ThreadFeed> = None;
    loop {
        if let Some(feed) = &mut commits {
            // Seen before deciding, so a commit after the decision wakes `changed`.
            feed.mark_seen();
        }
        let decided = ctx
            .log
            .append(
                &log_id,
                vec![stream_command(actor, path, command.clone(), ctx)],
            )
            .await;
        let gap = matches!(
            decided,
            Err(StoreError::Rule(ThreadError::Stream(
                StreamRefusal::SequenceGap { .. }
            )))
        );
        if !gap || !producer || tokio::time::Instant::now() >= deadline {
            return decided;
        }
        match &mut commits {
            // Watching from now on; the predecessor may have landed since the decision.
            None => commits = Some(ctx.log.feed(&log_id, i64::MAX)),
            Some(feed) => {
                tokio::select! {
                    _ = feed.changed() => {}
                    _ = tokio::time::sleep_until(deadline) => {}
                }
            }
        }
    }
}
