//! The fuzz harnesses: one function per target, taking the fuzzer's bytes. Each must never
//! panic on any input; where a property can be checked cheaply it is asserted here, so the
//! fuzzer reports a broken property as a crash.
//!
//! `fuzz/libfuzzer/` (cargo-fuzz, built outside the workspace) calls these functions;
//! `tests/it/regressions.rs` replays every input kept under `fuzz/regressions/<target>/` in the
//! ordinary test suite, so a crasher, once fixed, stays fixed.

mod http1_codec;

pub use http1_codec::http1_codec_target;
use serde_json::Value;
use threadstream_agent::llm::anthropic::AnthropicDecoder;
use threadstream_agent::llm::http::Decoder;
use threadstream_agent::llm::openai::OpenAiDecoder;
use threadstream_agent::llm::sse::{SseEvent, SseParser};
use threadstream_domain::cursor;
use threadstream_domain::{AgentEvent, Thread, ThreadCommand};

/// The targets, by name (the names of `fuzz/libfuzzer/fuzz_targets/*.rs` and of the
/// regression folders).
/// A harness: the fuzzer's bytes in, a panic when a property breaks.
pub type Harness = fn(&[u8]);

pub const TARGETS: &[(&str, Harness)] = &[
    ("cursor", cursor_target),
    ("ingest", ingest_target),
    ("openai_stream", openai_stream_target),
    ("anthropic_stream", anthropic_stream_target),
    ("http1_codec", http1_codec_target),
];

/// `Last-Event-ID` / `?lastEventId=` / `?starting_after=` parsing: an accepted cursor is the
/// number the text says.
pub fn cursor_target(data: &[u8]) {
    if let Ok(Some(id)) = cursor::event_id(data) {
        assert!(id >= 0);
        let text = std::str::from_utf8(data).unwrap().trim();
        assert_eq!(text.parse::<i64>().ok(), Some(id));
    }
    if let Ok(Some(n)) = cursor::sequence(data) {
        let text = std::str::from_utf8(data).unwrap().trim();
        assert_eq!(text.parse::<u64>().ok(), Some(n));
    }
    // The request id is the input's first line, the header the rest.
    let (request_id, header) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&data[..0], data),
    };
    if let Ok(request_id) = std::str::from_utf8(request_id) {
        if let Ok(Some(n)) = cursor::item_event_id(header, request_id) {
            let text = std::str::from_utf8(header).unwrap().trim();
            assert!(text.starts_with(request_id) && text.ends_with(&n.to_string()));
        }
    }
}

/// Ingest: a JSON body's `events` decoded as agent events and recorded on a thread through
/// the aggregate's rules, as `POST /instance-ai/threads/:id/events` does. Accepted events
/// round-trip through their wire JSON unchanged.
pub fn ingest_target(data: &[u8]) {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Some(Value::Array(events)) = body.get("events") else {
        return;
    };
    let mut thread = Thread::default();
    let create = ThreadCommand::Create {
        owner: "fuzz".into(),
        title: None,
    };
    for e in thread.decide(&create).expect("a new thread can be created") {
        thread.apply(&e);
    }
    for raw in events {
        let Ok(event) = serde_json::from_value::<AgentEvent>(raw.clone()) else {
            continue;
        };
        let wire = serde_json::to_value(&event).expect("an event serializes");
        let back: AgentEvent = serde_json::from_value(wire).expect("an event's JSON decodes");
        assert_eq!(back, event, "wire round trip");
        if let Ok(accepted) = thread.decide(&ThreadCommand::Record(event)) {
            for e in &accepted {
                thread.apply(e);
            }
        }
    }
}

/// Feeds `body` to a fresh SSE parser in two pieces cut at `cut`, and checks that the cut
/// changes nothing: the events of the pieces are the events of the whole.
fn sse_events(body: &[u8], cut: usize) -> Result<Vec<SseEvent>, String> {
    let whole = {
        let mut p = SseParser::default();
        p.feed(body).map(|mut v| {
            v.extend(p.finish());
            v
        })
    };
    let cut = cut.min(body.len());
    let pieces = {
        let mut p = SseParser::default();
        p.feed(&body[..cut]).and_then(|mut v| {
            v.extend(p.feed(&body[cut..])?);
            v.extend(p.finish());
            Ok(v)
        })
    };
    match (&whole, &pieces) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "cut at {cut} changed the events"),
        (Err(_), Err(_)) => {}
        _ => panic!("cut at {cut}: whole {whole:?}, pieces {pieces:?}"),
    }
    whole
}

fn decode_stream(data: &[u8], mut decoder: impl Decoder) {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let Ok(events) = sse_events(body, cut as usize * body.len() / 256) else {
        return;
    };
    for event in events {
        if decoder.done() || decoder.event(event).is_err() {
            return;
        }
    }
    let _ = decoder.end();
}

/// An OpenAI-compatible chat-completions stream: the SSE parser, then the chunk decoder.
pub fn openai_stream_target(data: &[u8]) {
    decode_stream(data, OpenAiDecoder::default());
}

/// An Anthropic messages stream: the SSE parser, then the event decoder.
pub fn anthropic_stream_target(data: &[u8]) {
    decode_stream(data, AnthropicDecoder::default());
}
