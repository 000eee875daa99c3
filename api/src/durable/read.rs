//! Reading a Durable Stream's messages: those of its current life after an offset, a fork's
//! inherited ones read through its source (and the source's source), never copied.

use base64::Engine;
use threadstream_domain::durable_stream::{is_json, log_stream_id, StreamLife};
use threadstream_domain::event::durable_stream::{StreamCreated, StreamData};
use threadstream_domain::event::EventBody;
use threadstream_domain::StoredEvent;
use threadstream_store::{EventLog, StoreError};

use crate::error::ApiError;

/// Log events read per query.
const PAGE: i64 = 1_000;

/// One message: its offset (a log id) and its data.
pub struct Message {
    pub id: i64,
    pub data: StreamData,
}

/// The data a stored event carries as a message of its stream, if any.
fn message_of(row: &StoredEvent) -> Result<Option<Message>, StoreError> {
    if row.event_type != "stream-created" && row.event_type != "stream-appended" {
        return Ok(None);
    }
    let data = match row.decode()?.body {
        EventBody::StreamCreated(c) => c.data,
        EventBody::StreamAppended(a) => Some(a.data),
        _ => None,
    };
    Ok(data.map(|data| Message { id: row.id, data }))
}

/// Up to `limit` messages of `life` (the life of the stream at `path`) after offset `after`,
/// and whether they reach its end.
pub async fn messages(
    log: &EventLog,
    path: &str,
    life: &StreamLife,
    after: i64,
    limit: usize,
) -> Result<(Vec<Message>, bool), ApiError> {
    let mut out = Vec::new();
    if let Some(fork) = &life.fork {
        if after < fork.offset {
            let whole = Box::pin(inherited(
                log,
                &fork.source,
                fork.source_created_id,
                after,
                fork.offset,
                limit,
                &mut out,
            ))
            .await?;
            if !whole {
                return Ok((out, false));
            }
        }
    }
    let complete = own(
        log,
        &log_stream_id(path),
        life.created_id,
        after,
        None,
        limit,
        &mut out,
    )
    .await?;
    Ok((out, complete))
}

/// The messages a fork inherits from `source` (its life begun at `created_id`) after `after`
/// and up to `cap`, pushed onto `out`; `false` when `limit` stopped it first.
async fn inherited(
    log: &EventLog,
    source: &str,
    created_id: i64,
    after: i64,
    cap: i64,
    limit: usize,
    out: &mut Vec<Message>,
) -> Result<bool, ApiError> {
    let log_id = log_stream_id(source);
    let first = log.read_thread(&log_id, created_id - 1, 1).await?;
    let created: Option<StreamCreated> = match first.first().map(StoredEvent::decode) {
        Some(Ok(e)) => match e.body {
            EventBody::StreamCreated(c) => Some(*c),
            _ => None,
        },
        Some(Err(e)) => return Err(StoreError::from(e).into()),
        None => None,
    };
    if let Some(parent) = created.and_then(|c| c.fork) {
        if after < parent.offset {
            let whole = Box::pin(inherited(
                log,
                &parent.source,
                parent.source_created_id,
                after,
                parent.offset.min(cap),
                limit,
                out,
            ))
            .await?;
            if !whole {
                return Ok(false);
            }
        }
    }
    own(log, &log_id, created_id, after, Some(cap), limit, out).await
}

/// The messages of one log stream's life begun at `created_id`, after `after` (and up to `cap`),
/// pushed onto `out`; `false` when `limit` stopped it first.
async fn own(
    log: &EventLog,
    log_id: &str,
    created_id: i64,
    after: i64,
    cap: Option<i64>,
    limit: usize,
    out: &mut Vec<Message>,
) -> Result<bool, ApiError> {
    let mut cursor = after.max(created_id - 1);
    loop {
        let page = log.read_thread(log_id, cursor, PAGE).await?;
        for row in &page {
            if cap.is_some_and(|c| row.id > c) {
                return Ok(true);
            }
            if out.len() >= limit {
                return Ok(false);
            }
            if let Some(m) = message_of(row)? {
                out.push(m);
            }
            cursor = row.id;
        }
        if (page.len() as i64) < PAGE {
            return Ok(true);
        }
    }
}

/// A message's bytes: a JSON-mode message as the JSON array of its values.
pub fn message_bytes(data: &StreamData) -> Vec<u8> {
    match data {
        StreamData::Text(s) => s.as_bytes().to_vec(),
        StreamData::Base64(b) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .unwrap_or_default(),
        StreamData::Json(items) => serde_json::to_vec(items).unwrap_or_default(),
    }
}

/// A catch-up read's body: JSON mode, one array of every message's values; otherwise the
/// messages' bytes one after another.
pub fn body_bytes(content_type: &str, messages: &[Message]) -> Vec<u8> {
    if is_json(content_type) {
        let mut out = Vec::with_capacity(messages.len() * 32 + 2);
        out.push(b'[');
        let mut first = true;
        for m in messages {
            if let StreamData::Json(items) = &m.data {
                for item in items {
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    // Values from the log serialize (they were parsed from JSON).
                    let _ = serde_json::to_writer(&mut out, item);
                }
            }
        }
        out.push(b']');
        return out;
    }
    let mut out = Vec::new();
    for m in messages {
        out.extend_from_slice(&message_bytes(&m.data));
    }
    out
}

/// The data of a write (a create's body or an append) as the log keeps it for a stream of
/// `content_type`. JSON mode: the body must be JSON; a top-level array is flattened into its
/// values, and an empty one is refused (except on create, where it means no message).
pub fn data_of(
    content_type: &str,
    body: &[u8],
    on_create: bool,
) -> Result<Option<StreamData>, ApiError> {
    if body.is_empty() && on_create {
        return Ok(None);
    }
    if is_json(content_type) {
        let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request("invalid_json", format!("the body is not valid JSON: {e}"))
        })?;
        let items = match value {
            serde_json::Value::Array(items) => items,
            other => vec![other],
        };
        if items.is_empty() {
            if on_create {
                return Ok(None);
            }
            return Err(ApiError::bad_request(
                "empty_json_array",
                "an empty JSON array appends nothing: empty arrays are not allowed",
            ));
        }
        return Ok(Some(StreamData::Json(items)));
    }
    if body.is_empty() {
        return Ok(None);
    }
    Ok(Some(match std::str::from_utf8(body) {
        Ok(s) => StreamData::Text(s.to_string()),
        Err(_) => StreamData::Base64(base64::engine::general_purpose::STANDARD.encode(body)),
    }))
}

/// The first `units` of `data` (bytes, or JSON values): what a fork at a sub-offset copies.
pub fn prefix_of(data: &StreamData, units: usize) -> StreamData {
    match data {
        StreamData::Json(items) => StreamData::Json(items[..units.min(items.len())].to_vec()),
        other => {
            let bytes = message_bytes(other);
            let cut = &bytes[..units.min(bytes.len())];
            match std::str::from_utf8(cut) {
                Ok(s) => StreamData::Text(s.to_string()),
                Err(_) => StreamData::Base64(base64::engine::general_purpose::STANDARD.encode(cut)),
            }
        }
    }
}
