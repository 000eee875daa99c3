//! A small incremental parser for `text/event-stream` bodies (the WHATWG rules the providers'
//! streams follow): lines end in LF, CRLF or CR; `data:` lines of one event are joined with LF;
//! a blank line dispatches the event; lines starting with `:` are comments. Bytes may arrive cut
//! anywhere, including inside a UTF-8 character: only complete lines are decoded.

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
    buf: Vec<u8>,
    event: String,
    data: Option<String>,
    /// The last byte seen was a CR: a following LF belongs to the same line end.
    after_cr: bool,
}

/// Longest line accepted (a provider never sends one this long; a broken one might).
pub const MAX_LINE: usize = 16 << 20;

impl SseParser {
    /// Adds bytes; returns the events they complete. `Err` when a line grows beyond
    /// [`MAX_LINE`] or is not UTF-8.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut out = Vec::new();
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.buf);
                    let line = String::from_utf8(line)
                        .map_err(|_| "the event stream is not valid UTF-8".to_string())?;
                    if let Some(e) = self.line(&line) {
                        out.push(e);
                    }
                }
                _ => {
                    if self.buf.len() >= MAX_LINE {
                        return Err(format!(
                            "an event-stream line is longer than {MAX_LINE} bytes"
                        ));
                    }
                    self.buf.push(b);
                }
            }
        }
        Ok(out)
    }

    /// The end of the body: an event not yet dispatched by a blank line is dispatched now.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.buf.is_empty() {
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
            if let Some(e) = self.line(&line) {
                return Some(e);
            }
        }
        self.line("")
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let data = self.data.take()?;
            return Some(SseEvent {
                event: std::mem::take(&mut self.event),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "event" => self.event = value.to_string(),
            _ => {}
        }
        None
    }
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
