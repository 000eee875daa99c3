//! Reading a Durable Stream's messages: those of its current life after an offset, a fork's
//! inherited ones read through its source (and the source's source), never copied.

use base64::Engine;
use serde::Deserialize;
use serde_json::value::RawValue;
use threadstream_domain::durable_stream::{is_json, log_stream_id, StreamLife};
use threadstream_domain::event::durable_stream::{StreamCreated, StreamData};
use threadstream_domain::event::EventBody;
use threadstream_domain::ErrorCode;
use threadstream_domain::StoredEvent;
use threadstream_store::{EventLog, Sight, StoreError};

use crate::error::DurableError;

/// Log events read per query.
const PAGE: i64 = 1_000;

/// One message: its offset (a log id) and its data.
pub struct Message {
    pub id: i64,
    data: Data,
}

/// A message's data as the log holds it. A JSON-mode message keeps the stored text of its values
/// (the log wrote them compact, as a body wants them): reads copy that text instead of decoding
/// every value into a `Value` and encoding it again, which bounded catch-up reads.
enum Data {
    Text(String),
    Base64(String),
    /// `text[span]` is the JSON array of the message's values.
    Json {
        text: String,
        span: std::ops::Range<usize>,
    },
}

/// The `data` of a `stream-created` or `stream-appended` payload (its other fields skipped).
#[derive(Deserialize)]
struct StoredWrite<'a> {
    #[serde(default, borrow)]
    data: Option<StoredData<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum StoredData<'a> {
    Text(String),
    Base64(String),
    Json(#[serde(borrow)] &'a RawValue),
}

/// How the log writes a `stream-appended` payload of JSON data: `data` first, then the array.
const APPENDED_JSON: &str = r#"{"data":{"json":"#;

/// Where the JSON array of a `stream-appended` payload of JSON data (`APPENDED_JSON…`, as
/// serde_json wrote it) ends, found from the payload's end rather than by scanning every value.
/// After the array come the close of `data`, then the optional fields `seq` (a string),
/// `producer` (a string and two numbers) and `close` (`true`), then the payload's close. A
/// payload ending `]}}` has none of them (each of them ends otherwise); else the array ends at
/// the last `]},"`, a sequence none of them can hold (a quote inside a string is escaped, and
/// `producer` holds no `]`), while the values before it may.
fn appended_json_end(payload: &str) -> Option<usize> {
    if payload.ends_with("]}}") {
        return Some(payload.len() - 2);
    }
    payload.rfind(r#"]},""#).map(|i| i + 1)
}

/// [`appended_json_end`] where it found an array's end after `start`.
fn json_span_end(payload: &str, start: usize) -> Option<usize> {
    appended_json_end(payload).filter(|&end| end > start && payload.as_bytes()[end - 1] == b']')
}

impl Message {
    /// A message of `data` (JSON values encoded as serde_json writes them, as the log holds them).
    pub fn new(id: i64, data: StreamData) -> Message {
        let data = match data {
            StreamData::Text(s) => Data::Text(s),
            StreamData::Base64(b) => Data::Base64(b),
            StreamData::Json(items) => {
                let text = serde_json::to_string(&items).unwrap_or_else(|_| "[]".into());
                let span = 0..text.len();
                Data::Json { text, span }
            }
        };
        Message { id, data }
    }

    /// A JSON-mode message whose values are already JSON text: `array` is their JSON array, as
    /// serde_json writes it (served as it is, never parsed).
    pub fn json_array(id: i64, array: String) -> Message {
        let span = 0..array.len();
        Message {
            id,
            data: Data::Json { text: array, span },
        }
    }

    /// The message's data, decoded.
    pub fn data(&self) -> StreamData {
        match &self.data {
            Data::Text(s) => StreamData::Text(s.clone()),
            Data::Base64(b) => StreamData::Base64(b.clone()),
            // Valid JSON: the log holds what serde_json wrote.
            Data::Json { text, span } => {
                StreamData::Json(serde_json::from_str(&text[span.clone()]).unwrap_or_default())
            }
        }
    }

    /// The message's bytes: a JSON-mode message as the JSON array of its values.
    pub fn bytes(&self) -> Vec<u8> {
        match &self.data {
            Data::Json { text, span } => text[span.clone()].as_bytes().to_vec(),
            Data::Text(s) => s.as_bytes().to_vec(),
            Data::Base64(b) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .unwrap_or_default(),
        }
    }

    /// A JSON-mode message's values as JSON text, comma-separated (the text between the array's
    /// brackets); `None` for other data.
    fn json_items(&self) -> Option<&str> {
        let Data::Json { text, span } = &self.data else {
            return None;
        };
        let array = text[span.clone()].trim();
        Some(
            array
                .strip_prefix('[')
                .and_then(|t| t.strip_suffix(']'))
                .unwrap_or("")
                .trim(),
        )
    }
}

/// A committed `stream-appended` row as a live reader follows it: its message, and whether the
/// append also closed the stream.
pub fn appended(row: StoredEvent) -> Result<(Option<Message>, bool), StoreError> {
    debug_assert_eq!(row.event_type, "stream-appended");
    let start = APPENDED_JSON.len();
    if row.payload.starts_with(APPENDED_JSON) {
        if let Some(end) = json_span_end(&row.payload, start) {
            // What follows the data: `close` is written only when true; a quote inside a JSON
            // string is escaped, so `"close":true` there can only be that field.
            let closes = row.payload[end..].contains(r#""close":true"#);
            return Ok((message_of(row)?, closes));
        }
    }
    let closes = match row.decode()?.body {
        EventBody::StreamAppended(a) => a.close,
        _ => false,
    };
    Ok((message_of(row)?, closes))
}

/// The data a stored event carries as a message of its stream, if any.
fn message_of(row: StoredEvent) -> Result<Option<Message>, StoreError> {
    if row.event_type != "stream-created" && row.event_type != "stream-appended" {
        return Ok(None);
    }
    let id = row.id;
    // The common case, an append of JSON values, located without a parse.
    if row.event_type == "stream-appended" && row.payload.starts_with(APPENDED_JSON) {
        let start = APPENDED_JSON.len();
        if let Some(end) = json_span_end(&row.payload, start) {
            if row.payload.as_bytes()[start] == b'[' && row.payload[end..].starts_with('}') {
                let data = Data::Json {
                    text: row.payload,
                    span: start..end,
                };
                return Ok(Some(Message { id, data }));
            }
        }
    }
    let data = match serde_json::from_str::<StoredWrite<'_>>(&row.payload) {
        Ok(w) => match w.data {
            None => None,
            Some(StoredData::Text(s)) => Some(Data::Text(s)),
            Some(StoredData::Base64(b)) => Some(Data::Base64(b)),
            Some(StoredData::Json(raw)) => {
                let text = raw.get().to_string();
                let span = 0..text.len();
                Some(Data::Json { text, span })
            }
        },
        // Not what the log writes: the full decode names the problem.
        Err(e) => {
            row.decode()?;
            return Err(StoreError::Corrupt(
                threadstream_domain::DecodeError::Payload {
                    event_type: row.event_type.clone(),
                    message: e.to_string(),
                },
            ));
        }
    };
    Ok(data.map(|data| Message { id, data }))
}

/// Up to `limit` messages of `life` (the life of the stream at `path`) after offset `after`,
/// and whether they reach its end, read from a store that holds what `sight` says (a reader's
/// view of the stream: on a standby that holds it, when standbys are configured).
pub async fn messages(
    log: &EventLog,
    sight: Sight,
    path: &str,
    life: &StreamLife,
    after: i64,
    limit: usize,
) -> Result<(Vec<Message>, bool), StoreError> {
    let reads = LogReads { log, sight };
    let mut out = Vec::new();
    if let Some(fork) = &life.fork {
        if after < fork.offset {
            let whole = Box::pin(inherited(
                reads,
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
        reads,
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

/// The log's pages, of what a read must hold.
#[derive(Clone, Copy)]
struct LogReads<'a> {
    log: &'a EventLog,
    sight: Sight,
}

impl LogReads<'_> {
    async fn page(
        &self,
        log_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.log
            .read_thread_in(self.sight, log_id, after, limit)
            .await
    }
}

/// The messages a fork inherits from `source` (its life begun at `created_id`) after `after`
/// and up to `cap`, pushed onto `out`; `false` when `limit` stopped it first.
async fn inherited(
    reads: LogReads<'_>,
    source: &str,
    created_id: i64,
    after: i64,
    cap: i64,
    limit: usize,
    out: &mut Vec<Message>,
) -> Result<bool, StoreError> {
    let log_id = log_stream_id(source);
    let first = reads.page(&log_id, created_id - 1, 1).await?;
    let created: Option<StreamCreated> = match first.first().map(StoredEvent::decode) {
        Some(Ok(e)) => match e.body {
            EventBody::StreamCreated(c) => Some(*c),
            _ => None,
        },
        Some(Err(e)) => return Err(StoreError::from(e)),
        None => None,
    };
    if let Some(parent) = created.and_then(|c| c.fork) {
        if after < parent.offset {
            let whole = Box::pin(inherited(
                reads,
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
    own(reads, &log_id, created_id, after, Some(cap), limit, out).await
}

/// The messages of one log stream's life begun at `created_id`, after `after` (and up to `cap`),
/// pushed onto `out`; `false` when `limit` stopped it first.
async fn own(
    reads: LogReads<'_>,
    log_id: &str,
    created_id: i64,
    after: i64,
    cap: Option<i64>,
    limit: usize,
    out: &mut Vec<Message>,
) -> Result<bool, StoreError> {
    let mut cursor = after.max(created_id - 1);
    loop {
        let page = reads.page(log_id, cursor, PAGE).await?;
        let whole_page = page.len() as i64 == PAGE;
        for row in page {
            if cap.is_some_and(|c| row.id > c) {
                return Ok(true);
            }
            if out.len() >= limit {
                return Ok(false);
            }
            cursor = row.id;
            if let Some(m) = message_of(row)? {
                out.push(m);
            }
        }
        if !whole_page {
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
        let len: usize = messages
            .iter()
            .filter_map(|m| m.json_items())
            .map(|t| t.len() + 1)
            .sum();
        let mut out = Vec::with_capacity(len + 2);
        out.push(b'[');
        let mut first = true;
        for items in messages.iter().filter_map(Message::json_items) {
            if items.is_empty() {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(items.as_bytes());
        }
        out.push(b']');
        return out;
    }
    let mut out = Vec::new();
    for m in messages {
        out.extend_from_slice(&m.bytes());
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
) -> Result<Option<StreamData>, DurableError> {
    if body.is_empty() && on_create {
        return Ok(None);
    }
    if is_json(content_type) {
        let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
            DurableError::bad_request(
                ErrorCode::InvalidJson,
                format!("the body is not valid JSON: {e}"),
            )
        })?;
        let items = match value {
            serde_json::Value::Array(items) => items,
            other => vec![other],
        };
        if items.is_empty() {
            if on_create {
                return Ok(None);
            }
            return Err(DurableError::bad_request(
                ErrorCode::EmptyJsonArray,
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

#[cfg(test)]
mod tests {
    use super::*;
    use threadstream_domain::event::durable_stream::{ProducerStamp, StreamAppended};
    use threadstream_domain::AgentEvent;

    fn appended_row(
        items: &[serde_json::Value],
        seq: Option<&str>,
        producer: Option<&str>,
        close: bool,
    ) -> StoredEvent {
        let body = EventBody::StreamAppended(StreamAppended {
            data: StreamData::Json(items.to_vec()),
            seq: seq.map(str::to_string),
            producer: producer.map(|id| ProducerStamp {
                id: id.into(),
                epoch: 3,
                seq: 41,
            }),
            close,
        });
        StoredEvent::from_event(7, "stream:x", 1, 0, &AgentEvent::new("", "", body))
    }

    /// Values are served as serde_json writes them, located from the payload's end without a
    /// parse (the span) and equal to a parse (the decoded data), whatever the values, `seq` and
    /// producer id hold (brackets, quotes, escapes, the very sequences the end is found by), and
    /// a follower reads `close` right.
    #[test]
    fn json_values_are_served_from_their_stored_text() {
        let values: Vec<Vec<serde_json::Value>> = [
            r#"[{"a":"]}\"[{\\","b":[1,{"c":null}]},"x\\",2.5,[],{}]"#,
            r#"[{"a":[1]},"x"]"#,
            r#"[{"k":[2]},"]}}"]"#,
            r#"[{"close":true},"]},\"close\":true}"]"#,
            r#"[[[]]]"#,
            r#"[{}]"#,
        ]
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
        let texts = [
            None,
            Some("]}"),
            Some(r#"]},"x"#),
            Some("x\\"),
            Some(r#"]}}"#),
        ];
        for items in &values {
            for seq in texts {
                for producer in texts {
                    for close in [false, true] {
                        let row = appended_row(items, seq, producer, close);
                        let m = message_of(row.clone()).unwrap().unwrap();
                        let case =
                            format!("{items:?} {seq:?} {producer:?} {close}: {}", row.payload);
                        assert!(
                            matches!(&m.data, Data::Json { span, .. } if span.start == APPENDED_JSON.len()),
                            "{case}"
                        );
                        assert_eq!(m.bytes(), serde_json::to_vec(items).unwrap(), "{case}");
                        assert_eq!(m.data(), StreamData::Json(items.clone()), "{case}");
                        let (followed, closes) = appended(row).unwrap();
                        assert_eq!(followed.unwrap().bytes(), m.bytes(), "{case}");
                        assert_eq!(closes, close, "{case}");
                    }
                }
            }
        }
        let items = &values[0];
        let m = message_of(appended_row(items, Some("]}"), None, false))
            .unwrap()
            .unwrap();
        let two = [
            m,
            message_of(appended_row(&items[..1], None, None, false))
                .unwrap()
                .unwrap(),
        ];
        let body: Vec<serde_json::Value> =
            serde_json::from_slice(&body_bytes("application/json", &two)).unwrap();
        assert_eq!(body.len(), items.len() + 1);
        assert_eq!(body[..items.len()], items[..]);
    }
}
