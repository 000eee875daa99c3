//! The one incremental parser of `text/event-stream` bodies, after the WHATWG HTML standard's
//! "Parsing an event stream" (§9.2.6): the LLM providers' streams (`threadstream-agent`), the
//! black-box tests' reader of our own streams, and the load tool's SSE client all go through it.
//!
//! The rules it keeps:
//! - lines end in CRLF, LF or CR (a CRLF cut between two reads is one line end);
//! - one leading U+FEFF (BOM) of the stream is skipped, even cut between reads;
//! - a line starting with `:` is a comment;
//! - `field: value`: one space after the colon is dropped, a line without a colon is a field with
//!   an empty value, unknown fields are ignored;
//! - `data` lines of one event are joined with LF; a blank line dispatches the event, but only
//!   when it had a `data` line (the event type and the event's own id are reset either way);
//! - `id` sets the last event id, which persists across events, unless its value holds a NUL;
//! - `retry` sets the reconnection time when its value is ASCII digits only;
//! - at the end of the stream an event not dispatched by a blank line is dropped
//!   ([`Parser::finish`]), or, for providers known to omit the last blank line, dispatched
//!   ([`Parser::finish_dispatching`]).
//!
//! It works on bytes and hands out borrowed slices through a callback: after the first events
//! no event allocates (its buffers are kept and reused), which the load tool's reader, on the
//! path of every frame it counts, relies on. Line ends are ASCII, so a UTF-8 character is never
//! cut by a line: decoding a field's bytes gives what decoding the stream first would.

use std::fmt;

/// The longest line accepted by default (a provider never sends one this long; a broken one
/// might).
pub const MAX_LINE: usize = 16 << 20;

/// One dispatched event; the slices borrow the parser until the callback returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    /// The `event` field's value, when the event had one.
    pub event: Option<&'a [u8]>,
    /// The `data` lines, joined with LF.
    pub data: &'a [u8],
    /// The event's own `id` field, when it had one (without a NUL).
    pub id: Option<&'a [u8]>,
    /// The stream's last event id when the event was dispatched (the last `id` seen so far).
    pub last_event_id: &'a [u8],
}

/// What the parser hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item<'a> {
    Event(Event<'a>),
    /// A comment line: what follows its `:` (e.g. `" ping"`).
    Comment(&'a [u8]),
}

/// A line grew beyond the parser's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTooLong {
    pub max: usize,
}

impl fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an event-stream line is longer than {} bytes", self.max)
    }
}

impl std::error::Error for LineTooLong {}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Feeds bytes cut anywhere in; hands complete events and comments out.
#[derive(Debug, Clone)]
pub struct Parser {
    /// The current line's bytes that arrived in earlier reads (while the stream's start is
    /// undecided: the bytes of a BOM seen so far).
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    event: Vec<u8>,
    has_event: bool,
    id: Vec<u8>,
    has_id: bool,
    last_event_id: Vec<u8>,
    retry: Option<u64>,
    /// Whether the stream's start was past a BOM's length (or a byte that is not the BOM's).
    started: bool,
    /// The last byte read was a CR: an LF first in the next read ends no other line.
    after_cr: bool,
    max_line: usize,
}

impl Default for Parser {
    fn default() -> Self {
        Parser::new()
    }
}

impl Parser {
    pub fn new() -> Self {
        Parser::with_max_line(MAX_LINE)
    }

    /// A parser refusing lines longer than `max_line` bytes.
    pub fn with_max_line(max_line: usize) -> Self {
        Parser {
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            event: Vec::new(),
            has_event: false,
            id: Vec::new(),
            has_id: false,
            last_event_id: Vec::new(),
            retry: None,
            started: false,
            after_cr: false,
            max_line,
        }
    }

    /// The reconnection time the stream asked for (`retry`), in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// The last event id so far.
    pub fn last_event_id(&self) -> &[u8] {
        &self.last_event_id
    }

    /// Adds bytes; calls `on` for every event and comment they complete. `Err` when a line grows
    /// beyond the limit (what was handed out before stays valid; the parser should be dropped).
    pub fn feed(
        &mut self,
        mut input: &[u8],
        on: &mut impl FnMut(Item<'_>),
    ) -> Result<(), LineTooLong> {
        if !self.started {
            input = self.skip_bom(input);
            if !self.started {
                return Ok(());
            }
        }
        if self.after_cr {
            let Some(&first) = input.first() else {
                return Ok(());
            };
            self.after_cr = false;
            if first == b'\n' {
                input = &input[1..];
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', input) {
            let (part, rest) = input.split_at(i);
            input = &rest[1..];
            if rest[0] == b'\r' {
                match input.first() {
                    None => self.after_cr = true,
                    Some(b'\n') => input = &input[1..],
                    Some(_) => {}
                }
            }
            self.check(self.line.len() + part.len())?;
            if self.line.is_empty() {
                self.line_done(part, on);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(part);
                self.line_done(&line, on);
                line.clear();
                self.line = line;
            }
        }
        self.check(self.line.len() + input.len())?;
        self.line.extend_from_slice(input);
        Ok(())
    }

    /// The end of the stream, as the standard has it: an event not dispatched by a blank line,
    /// and an unfinished line, are dropped.
    pub fn finish(&mut self) {
        self.line.clear();
        self.reset_event();
        self.after_cr = false;
    }

    /// The end of the stream for a sender known to omit the last line end or blank line: the
    /// unfinished line is taken as a line, then the event is dispatched as if a blank line
    /// followed.
    pub fn finish_dispatching(&mut self, on: &mut impl FnMut(Item<'_>)) {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            self.line_done(&line, on);
        }
        self.dispatch(on);
        self.after_cr = false;
    }

    fn check(&self, len: usize) -> Result<(), LineTooLong> {
        if len > self.max_line {
            return Err(LineTooLong { max: self.max_line });
        }
        Ok(())
    }

    /// Takes the bytes of a leading BOM; a byte that is not the BOM's next one decides the
    /// stream's start, and what was taken so far is the first line's beginning.
    fn skip_bom<'i>(&mut self, mut input: &'i [u8]) -> &'i [u8] {
        while self.line.len() < BOM.len() {
            let Some(&b) = input.first() else {
                return input;
            };
            if b != BOM[self.line.len()] {
                self.started = true;
                return input;
            }
            self.line.push(b);
            input = &input[1..];
        }
        self.line.clear();
        self.started = true;
        input
    }

    fn line_done(&mut self, line: &[u8], on: &mut impl FnMut(Item<'_>)) {
        if line.is_empty() {
            self.dispatch(on);
            return;
        }
        if let Some(comment) = line.strip_prefix(b":") {
            on(Item::Comment(comment));
            return;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                self.event.extend_from_slice(value);
                self.has_event = true;
            }
            b"id" if !value.contains(&0) => {
                self.id.clear();
                self.id.extend_from_slice(value);
                self.has_id = true;
                self.last_event_id.clear();
                self.last_event_id.extend_from_slice(value);
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // All digits, so only an overflow fails: such a delay is no delay to keep.
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, on: &mut impl FnMut(Item<'_>)) {
        if self.has_data {
            on(Item::Event(Event {
                event: self.has_event.then_some(&self.event[..]),
                data: &self.data,
                id: self.has_id.then_some(&self.id[..]),
                last_event_id: &self.last_event_id,
            }));
        }
        self.reset_event();
    }

    fn reset_event(&mut self) {
        self.data.clear();
        self.has_data = false;
        self.event.clear();
        self.has_event = false;
        self.id.clear();
        self.has_id = false;
    }
}

#[cfg(test)]
mod tests;
