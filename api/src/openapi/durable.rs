//! What the Durable Streams routes (`/v1/stream/*`, `/v1/threads/*`) check of their headers and
//! query and the derived document cannot say: the numbers the protocol reads strictly, the
//! offsets, a non-empty `Producer-Id`, a live read's offset, and a thread append's events.
//! The checks themselves: `crate::durable::protocol` (`producer_of`, `strict_uint`,
//! `read_query`), `threadstream_domain::durable_stream::parse_offset`, `http::streams::create`.

use serde_json::{json, Value};

/// A regular expression (unanchored, one group) of the decimal numbers from 0 to `max` without
/// leading zeros: `strict_uint`'s numbers, bounded as the server bounds them.
pub(super) fn uint_at_most(max: u64) -> String {
    let digits: Vec<u8> = max.to_string().bytes().map(|b| b - b'0').collect();
    let n = digits.len();
    let mut alternatives = vec!["0".to_string()];
    if n > 1 {
        // Every number with fewer digits than `max`.
        alternatives.push(format!("[1-9][0-9]{{0,{}}}", n - 2));
    }
    // As many digits as `max`: its first `i` digits, a smaller one at `i`, anything after.
    for i in 0..n {
        let low = u8::from(i == 0);
        if digits[i] <= low {
            continue;
        }
        let prefix: String = digits[..i].iter().map(u8::to_string).collect();
        let high = digits[i] - 1;
        let range = if high == low {
            low.to_string()
        } else {
            format!("[{low}-{high}]")
        };
        let rest = n - i - 1;
        let tail = if rest > 0 {
            format!("[0-9]{{{rest}}}")
        } else {
            String::new()
        };
        alternatives.push(format!("{prefix}{range}{tail}"));
    }
    if max > 0 {
        alternatives.push(max.to_string());
    }
    format!("(?:{})", alternatives.join("|"))
}

/// The largest producer epoch and sequence number (`producer_of`: below 2^53, exact in a
/// JavaScript number).
const MAX_PRODUCER_NUMBER: u64 = (1 << 53) - 1;

/// An offset the server gave (`parse_offset`): a log id, any leading zeros, `_`, digits.
fn log_offset() -> String {
    format!("0*{}_[0-9]+", uint_at_most(i64::MAX as u64))
}

/// The schema of a Durable Streams header, by name, where it says more than a string.
pub(super) fn header_schema(name: &str) -> Option<Value> {
    let uint = |max: u64| json!({"type": "string", "pattern": format!("^{}$", uint_at_most(max))});
    Some(match name {
        // Not empty (else 400 `invalid_producer_id`); a value the server can read as text.
        "Producer-Id" => json!({
            "type": "string",
            "pattern": "^[!-~]+(?:[ \\t]+[!-~]+)*$",
            "description": "Idempotent producer: not empty, visible ASCII (else 400 `invalid_producer_id`)"
        }),
        "Producer-Epoch" | "Producer-Seq" => uint(MAX_PRODUCER_NUMBER),
        "Stream-TTL" | "Stream-Fork-Sub-Offset" => uint(u64::MAX),
        "Stream-Expires-At" => json!({"type": "string", "format": "date-time"}),
        "Stream-Fork-Offset" => json!({"type": "string", "pattern": format!("^{}$", log_offset())}),
        _ => return None,
    })
}

/// A read's query (`read_query`) as one `form`-exploded object parameter, so the document can
/// say what separate parameters cannot: `live` needs `offset` (else 400 `offset_required`).
/// On the wire it is the same `?offset=…&live=…&cursor=…`.
pub(super) fn read_query(params: &mut Vec<Value>) {
    let mut properties = serde_json::Map::new();
    params.retain(|p| {
        let name = p["name"].as_str().unwrap_or_default();
        if p["in"] != "query" || !matches!(name, "offset" | "live" | "cursor") {
            return true;
        }
        let mut schema = match name {
            "offset" => json!({
                "type": "string",
                "pattern": format!("^(?:-1|now|{})$", log_offset())
            }),
            "live" => json!({"type": "string", "enum": ["long-poll", "sse"]}),
            _ => json!({"type": "string"}),
        };
        schema["description"] = p["description"].clone();
        properties.insert(name.to_string(), schema);
        false
    });
    assert_eq!(
        properties.len(),
        3,
        "a Durable Streams read has offset, live and cursor"
    );
    params.insert(
        1,
        json!({
            "name": "read",
            "in": "query",
            "required": false,
            "style": "form",
            "explode": true,
            "description": "The read's query: `offset`, `live` and `cursor`, each its own query \
                parameter (`?offset=-1&live=sse`). `live` needs `offset` (else 400 `offset_required`).",
            "schema": {
                "type": "object",
                "properties": properties,
                "dependentRequired": {"live": ["offset"]}
            }
        }),
    );
}

/// `POST /v1/threads/{thread_id}`'s body: one n8n event, or a non-empty array of them.
pub(super) fn thread_append_body() -> Value {
    let event = json!({"$ref": "#/components/schemas/N8nEvent"});
    json!({"anyOf": [event, {"type": "array", "minItems": 1, "items": event}]})
}

/// The `data` of an `event: data` of a live SSE read of `path`, if it is a Durable Streams
/// route. A thread's messages are n8n events, one JSON array per event. A stream's depend on
/// its content type (`durable-streams/src/reader.rs`): a JSON-mode stream's are one JSON
/// array; a `text/*` stream's, the text as written; any other's, the bytes in base64, and the
/// answer then says `Stream-SSE-Data-Encoding: base64`.
pub(super) fn sse_messages(path: &str) -> Option<Value> {
    match path {
        "/v1/threads/{thread_id}" => Some(json!({
            "type": "array",
            "items": {"$ref": "#/components/schemas/N8nEvent"},
            "description": "`event: data`: the thread's events after the offset"
        })),
        "/v1/stream/{path}" => Some(json!({
            "type": "array",
            "description": "`event: data` of a JSON-mode stream: its messages after the offset"
        })),
        _ => None,
    }
}

/// The schema of one server-sent event of a live read of `/v1/stream/{path}`, whose `data` is
/// JSON only for `event: control` and for a JSON-mode stream's `event: data` (see
/// [`sse_messages`]): the event's name says which.
pub(super) fn stream_sse_event(control: &Value) -> Value {
    let messages = sse_messages("/v1/stream/{path}").expect("the stream route");
    json!({
        "type": "object",
        "description": "One server-sent event: `event: control` (JSON, `DurableStreamControl`) or `event: data` (the messages after the offset, as the stream's content type has them)",
        "properties": {
            "data": {"type": "string"},
            "event": {"type": "string", "enum": ["data", "control"]},
            "id": {"type": "string"},
            "retry": {"type": "integer"}
        },
        "allOf": [
            {
                "if": {"properties": {"event": {"const": "control"}}, "required": ["event"]},
                "then": {"properties": {"data": {"contentMediaType": "application/json", "contentSchema": control}}}
            },
            {
                "if": {"properties": {"event": {"const": "data"}}, "required": ["event"]},
                "then": {"properties": {"data": {"anyOf": [
                    {"contentMediaType": "application/json", "contentSchema": messages},
                    {"description": "A `text/*` stream: its messages after the offset, as written"},
                    {"contentEncoding": "base64", "description": "Any other content type: the messages' bytes in base64 (the answer's `Stream-SSE-Data-Encoding` is `base64`)"}
                ]}}}
            }
        ]
    })
}

/// The catch-up answer of a stream that is not in JSON mode: its messages' bytes as written,
/// under the stream's own content type (any).
pub(super) fn stream_bytes() -> Value {
    json!({"description": "A stream not in JSON mode: its messages' bytes after the offset, as written, with the stream's content type"})
}

#[cfg(test)]
mod tests {
    use super::uint_at_most;

    #[test]
    fn uint_at_most_matches_exactly_the_numbers_up_to_max() {
        for max in [
            0u64, 1, 5, 9, 10, 19, 20, 99, 100, 101, 250, 909, 1000, 1234,
        ] {
            let re = regex::Regex::new(&format!("^{}$", uint_at_most(max))).unwrap();
            for n in 0..=2_000u64 {
                assert_eq!(
                    re.is_match(&n.to_string()),
                    n <= max,
                    "{n} against max {max}"
                );
                assert!(!re.is_match(&format!("0{n}")), "a leading zero: 0{n}");
            }
        }
        let big = regex::Regex::new(&format!("^{}$", uint_at_most(u64::MAX))).unwrap();
        assert!(big.is_match(&u64::MAX.to_string()));
        assert!(!big.is_match("18446744073709551616"));
        assert!(big.is_match("9999999999999999999"));
        let js = regex::Regex::new(&format!("^{}$", uint_at_most((1 << 53) - 1))).unwrap();
        assert!(js.is_match("9007199254740991"));
        assert!(!js.is_match("9007199254740992"));
        assert!(!js.is_match("10000000000000000"));
    }
}
