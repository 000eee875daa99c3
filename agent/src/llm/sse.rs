//! The providers' streams through the one `text/event-stream` parser (`threadstream-sse`, the
//! WHATWG rules): events come out as text, and the last event is dispatched at the end of the
//! body even without its blank line (some providers omit it). Bytes may arrive cut anywhere,
//! including inside a UTF-8 character: only whole fields are decoded.

use threadstream_sse::{Item, Parser};

pub use threadstream_sse::MAX_LINE;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field (empty when absent).
    pub event: String,
    pub data: String,
}

/// Feeds bytes in, takes complete events out.
#[derive(Debug, Default)]
pub struct SseParser {
    parser: Parser,
}

const NOT_UTF8: &str = "the event stream is not valid UTF-8";

impl SseParser {
    /// Adds bytes; returns the events they complete. `Err` when a line grows beyond
    /// [`MAX_LINE`] or an event is not UTF-8.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut out = Vec::new();
        let mut bad = false;
        self.parser
            .feed(bytes, &mut |item| match to_event(item) {
                Some(Ok(e)) => out.push(e),
                Some(Err(())) => bad = true,
                None => {}
            })
            .map_err(|e| e.to_string())?;
        if bad {
            return Err(NOT_UTF8.to_string());
        }
        Ok(out)
    }

    /// The end of the body: an event not yet dispatched by a blank line is dispatched now.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut last = None;
        self.parser.finish_dispatching(&mut |item| {
            if let Item::Event(e) = item {
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                last = Some(SseEvent {
                    event: e.event.map(text).unwrap_or_default(),
                    data: text(e.data),
                });
            }
        });
        last
    }
}

fn to_event(item: Item<'_>) -> Option<Result<SseEvent, ()>> {
    let Item::Event(e) = item else {
        return None;
    };
    let text = |b: &[u8]| std::str::from_utf8(b).map(str::to_string).map_err(|_| ());
    Some((|| {
        Ok(SseEvent {
            event: e.event.map(text).transpose()?.unwrap_or_default(),
            data: text(e.data)?,
        })
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere() {
        let text = "event: a\r\ndata: {\"x\":\"é\"}\r\n\r\n: ping\n\ndata: one\ndata: two\n\ndata: [DONE]\n\n";
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let mut p = SseParser::default();
            let mut got = p.feed(&bytes[..cut]).unwrap();
            got.extend(p.feed(&bytes[cut..]).unwrap());
            assert_eq!(
                got,
                vec![
                    SseEvent {
                        event: "a".into(),
                        data: "{\"x\":\"é\"}".into()
                    },
                    SseEvent {
                        event: String::new(),
                        data: "one\ntwo".into()
                    },
                    SseEvent {
                        event: String::new(),
                        data: "[DONE]".into()
                    },
                ],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn last_event_without_blank_line() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: x").unwrap().is_empty());
        assert_eq!(p.finish().unwrap().data, "x");
        assert!(p.finish().is_none());
    }

    #[test]
    fn lone_cr_ends_lines() {
        let mut p = SseParser::default();
        let got = p.feed(b"data: a\r\rdata: b\r\r").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].data, "b");
    }
}
