//! The pure half of our HTTP/1.1 connection ([`super::conn`] is the socket half): finding and
//! parsing a request head, deciding who serves it and how a response body is framed, and
//! encoding response heads and the listener's own refusals. No I/O, so every decision here is
//! unit-tested and fuzzed against hyper's (`fuzz/src/http1_codec.rs`).
//!
//! Public only for the fuzz harness; the server uses it through [`super::serve`].

use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{
    header, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version,
};
use threadstream_domain::{ErrorBody, ErrorCode};

/// Largest request head accepted (431 above it); hyper's connections use the same bound.
pub const MAX_HEAD: usize = 64 * 1024;
/// Most header fields in one request (431 above it), hyper's default.
pub const MAX_HEADERS: usize = 100;

/// What a buffer's first request head turned out to be.
// Lives only between parsing and dispatch: boxing the request would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Parsed {
    /// Not complete yet.
    Partial,
    /// A request without a body, served by our loop; its head is `len` bytes long.
    Ours {
        req: Request<Body>,
        len: usize,
        client_close: bool,
    },
    /// A request for hyper: a body (`Content-Length` other than 0, `Transfer-Encoding`), an
    /// `Upgrade`, an `Expect`, `CONNECT`. hyper's parser then also rules on the framing
    /// headers (both CL and TE, differing CLs: RFC 9112 section 6.3).
    Hyper,
    /// Not servable: answer and close.
    Refuse(Refusal),
}

/// Why the listener answers a connection itself and closes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Refusal {
    /// 400: not an HTTP/1.x request head.
    Malformed,
    /// 431: larger than [`MAX_HEAD`] or more than [`MAX_HEADERS`] fields.
    TooLarge,
    /// 408: begun and not complete within the head timeout.
    HeadTimeout(Duration),
    /// 503: the connection cap (this many) is reached and every connection is busy.
    AtCapacity(usize),
}

/// Finds the end of a request head as bytes arrive, without re-parsing what was already
/// searched: the full parse runs once the head's blank line has arrived (or the buffer is at
/// [`MAX_HEAD`]), plus once when its first line is complete, so that a request line that is
/// not HTTP is refused at once rather than after the head timeout.
#[derive(Debug, Default)]
pub struct HeadReader {
    /// Bytes of the buffer already searched for the blank line.
    searched: usize,
    /// The first line was complete and checked.
    first_line_checked: bool,
    /// Full parses run since the last head (what the tests bound).
    #[cfg(test)]
    parses: usize,
}

impl HeadReader {
    /// What `buf` (the bytes read and not yet consumed) starts with. After anything but
    /// [`Parsed::Partial`] the reader starts afresh: the caller consumes the head or closes.
    pub fn next(&mut self, buf: &[u8]) -> Parsed {
        // A blank line may straddle the previous end: "\n" + "\r\n" needs two bytes back.
        let from = self.searched.saturating_sub(2).min(buf.len());
        let new = &buf[from..];
        let blank_line = new
            .windows(2)
            .any(|w| w == b"\n\n" || (w[0] == b'\n' && w[1] == b'\r'));
        // The request line's end; empty lines before it (which httparse skips) do not count.
        let first_line = !self.first_line_checked
            && buf
                .iter()
                .position(|b| !matches!(b, b'\r' | b'\n'))
                .is_some_and(|start| buf[start.max(from)..].contains(&b'\n'));
        self.searched = buf.len();
        if !(blank_line || first_line || buf.len() >= MAX_HEAD) {
            return Parsed::Partial;
        }
        if first_line {
            self.first_line_checked = true;
        }
        #[cfg(test)]
        {
            self.parses += 1;
        }
        let parsed = parse_head(buf);
        if !matches!(parsed, Parsed::Partial) {
            *self = HeadReader::default();
        }
        parsed
    }
}

/// Parses the request head `buf` starts with (the whole buffer; [`HeadReader`] decides when).
pub fn parse_head(buf: &[u8]) -> Parsed {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut fields);
    let len = match head.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Parsed::Partial,
        Ok(_) | Err(httparse::Error::TooManyHeaders) => return Parsed::Refuse(Refusal::TooLarge),
        Err(_) => return Parsed::Refuse(Refusal::Malformed),
    };
    let (Some(method), Some(path), Some(version)) = (head.method, head.path, head.version) else {
        return Parsed::Refuse(Refusal::Malformed);
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::Refuse(Refusal::Malformed);
    };
    if method == Method::CONNECT {
        return Parsed::Hyper;
    }
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    let mut client_close = false;
    for field in head.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(field.name.as_bytes()),
            HeaderValue::from_bytes(field.value),
        ) else {
            return Parsed::Refuse(Refusal::Malformed);
        };
        // A body, or a protocol switch: hyper's business (its body handling, limits and 400s).
        if name == header::TRANSFER_ENCODING
            || name == header::UPGRADE
            || name == header::EXPECT
            || (name == header::CONTENT_LENGTH && value.as_bytes().trim_ascii() != b"0")
        {
            return Parsed::Hyper;
        }
        if name == header::CONNECTION && has_token(&value, "close") {
            client_close = true;
        }
        headers.append(name, value);
    }
    let Ok(uri) = Uri::try_from(path) else {
        return Parsed::Refuse(Refusal::Malformed);
    };
    let mut req = Request::new(Body::empty());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = if version == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    *req.headers_mut() = headers;
    Parsed::Ours {
        req,
        len,
        client_close,
    }
}

/// Whether a comma-separated header value (`Connection`) holds `token`.
pub fn has_token(value: &HeaderValue, token: &str) -> bool {
    value
        .as_bytes()
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// How a response body goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Framing {
    /// No body: a HEAD request, 1xx, 204, 304.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// HTTP/1.1 chunked encoding (a body of unknown length: SSE).
    Chunked,
    /// HTTP/1.0 and unknown length: the end of the body is the end of the connection.
    UntilClose,
}

/// Picks the framing and fixes the headers that state it (ours to set, not the handler's).
pub fn framing(
    is_head: bool,
    version10: bool,
    status: StatusCode,
    headers: &mut HeaderMap,
    body: &Body,
) -> Framing {
    headers.remove(header::TRANSFER_ENCODING);
    if status.is_informational() || status == StatusCode::NO_CONTENT {
        headers.remove(header::CONTENT_LENGTH);
        return Framing::None;
    }
    if status == StatusCode::NOT_MODIFIED {
        return Framing::None;
    }
    let declared = match headers.get(header::CONTENT_LENGTH) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(n) => Some(n),
            None => {
                headers.remove(header::CONTENT_LENGTH);
                None
            }
        },
    };
    if is_head {
        // The GET's headers (axum set Content-Length from the body it dropped), no body.
        return Framing::None;
    }
    match declared.or(body.size_hint().exact()) {
        Some(n) => {
            if declared.is_none() {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
            }
            Framing::Length(n)
        }
        None if version10 => Framing::UntilClose,
        None => {
            headers.insert(
                header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            );
            Framing::Chunked
        }
    }
}

/// Whether a response is an event stream: one that lives until the client leaves, so a client
/// that half-closes its side is taken to have left (see [`super::conn`]).
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

pub fn encode_head(
    status: StatusCode,
    version10: bool,
    headers: &mut HeaderMap,
    close: bool,
) -> Bytes {
    if close {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let mut out = Vec::with_capacity(128 + headers.len() * 32);
    out.extend_from_slice(if version10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers.iter() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !headers.contains_key(header::DATE) {
        out.extend_from_slice(b"date: ");
        push_date(&mut out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

/// Appends the current time in HTTP-date form, formatted once per second per thread.
fn push_date(out: &mut Vec<u8>) {
    thread_local! {
        static DATE: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((0, String::new())) };
    }
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    DATE.with(|date| {
        let mut date = date.borrow_mut();
        if date.0 != secs || date.1.is_empty() {
            *date = (secs, httpdate::fmt_http_date(now));
        }
        out.extend_from_slice(date.1.as_bytes());
    });
}

/// The whole answer to a refused connection (head and JSON body), which closes it.
pub fn encode_refusal(refusal: Refusal) -> Vec<u8> {
    let (status, code, message) = match refusal {
        Refusal::Malformed => (
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            "malformed HTTP/1.1 request head".to_string(),
        ),
        Refusal::TooLarge => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ErrorCode::RequestHeaderFieldsTooLarge,
            format!(
                "the request head is larger than {MAX_HEAD} bytes or has more than {MAX_HEADERS} header fields"
            ),
        ),
        Refusal::HeadTimeout(limit) => (
            StatusCode::REQUEST_TIMEOUT,
            ErrorCode::RequestTimeout,
            format!(
                "the request head did not arrive whole within {} s of its first byte",
                limit.as_secs_f64()
            ),
        ),
        Refusal::AtCapacity(limit) => (
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::TooManyConnections,
            format!("the server has {limit} connections open, all busy; retry shortly"),
        ),
    };
    let body = ErrorBody::new(code, message).to_json();
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    if matches!(refusal, Refusal::AtCapacity(_)) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    let mut out = encode_head(status, false, &mut headers, true).to_vec();
    out.extend_from_slice(body.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(buf: &[u8]) -> (Request<Body>, usize, bool) {
        match parse_head(buf) {
            Parsed::Ours {
                req,
                len,
                client_close,
            } => (req, len, client_close),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn body_less_requests_are_ours_with_their_head_length() {
        let raw = b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\nLast-Event-ID: 7\r\n\r\nGET /next";
        let (req, len, close) = ours(raw);
        assert_eq!(len, raw.len() - b"GET /next".len());
        assert_eq!(req.uri().path(), "/a");
        assert_eq!(req.uri().query(), Some("b=1"));
        assert_eq!(req.headers()["last-event-id"], "7");
        assert_eq!(req.version(), Version::HTTP_11);
        assert!(!close);
        let (req, _, close) = ours(b"HEAD / HTTP/1.0\r\nConnection: Keep-Alive, Close\r\n\r\n");
        assert_eq!(req.method(), Method::HEAD);
        assert_eq!(req.version(), Version::HTTP_10);
        assert!(close);
        let (req, _, _) = ours(b"DELETE /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(req.method(), Method::DELETE);
    }

    #[test]
    fn bodies_upgrades_and_expectations_go_to_hyper() {
        for raw in [
            &b"POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"[..],
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET /x HTTP/1.1\r\nContent-Length: nope\r\n\r\n",
            b"GET /ws HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
            b"PUT /x HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"CONNECT example.com:443 HTTP/1.1\r\n\r\n",
            // Framing headers hyper rules on (RFC 9112 section 6.3): never a body-less request
            // of ours, whatever their order.
            b"POST /x HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n",
            b"POST /x HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n",
            b"POST /x HTTP/1.1\r\nContent-Length: 0, 0\r\n\r\n",
        ] {
            assert!(
                matches!(parse_head(raw), Parsed::Hyper),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn partial_malformed_and_oversized_heads() {
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\nHost:"),
            Parsed::Partial
        ));
        for raw in [
            &b"GET / HTTP/9.9\r\n\r\n"[..],
            b"NOT A REQUEST\r\n\r\n",
            // obs-fold: a field line continued on the next (RFC 9112 section 5.2).
            b"GET / HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n",
            b"GET / HTTP/1.1\r\nX-A: 1\r\n\t2\r\n\r\n",
            // A bare CR inside the head.
            b"GET / HTTP/1.1\rHost: x\r\n\r\n",
            // Whitespace between a field name and its colon (RFC 9112 section 5.1).
            b"GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\n",
        ] {
            assert!(
                matches!(parse_head(raw), Parsed::Refuse(Refusal::Malformed)),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        let mut big = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
        big.resize(MAX_HEAD + 10, b'a');
        assert!(matches!(
            parse_head(&big),
            Parsed::Refuse(Refusal::TooLarge)
        ));
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(matches!(
            parse_head(&many),
            Parsed::Refuse(Refusal::TooLarge)
        ));
    }

    #[test]
    fn bare_lf_line_ends_are_one_request_as_rfc_9112_allows() {
        // RFC 9112 section 2.2: a recipient MAY take a bare LF as a line end.
        let raw = b"GET /a HTTP/1.1\nHost: x\n\nGET /b HTTP/1.1\r\n\r\n";
        let (req, len, _) = ours(raw);
        assert_eq!(req.uri().path(), "/a");
        assert_eq!(&raw[len..], b"GET /b HTTP/1.1\r\n\r\n");
    }

    /// Feeds `raw` to a reader in pieces of `step` bytes, as reads would deliver it.
    fn read_in_steps(raw: &[u8], step: usize) -> Parsed {
        let mut reader = HeadReader::default();
        let mut end = 0;
        loop {
            end = (end + step).min(raw.len());
            let parsed = reader.next(&raw[..end]);
            if !matches!(parsed, Parsed::Partial) || end == raw.len() {
                return parsed;
            }
        }
    }

    #[test]
    fn the_head_reader_finds_heads_split_anywhere() {
        let raw = b"GET /split HTTP/1.1\r\nHost: x\r\nX-Long: aaaaaaaaaaaaaaaa\r\n\r\nGET /next";
        for step in 1..raw.len() {
            match read_in_steps(raw, step) {
                Parsed::Ours { req, len, .. } => {
                    assert_eq!(req.uri().path(), "/split", "step {step}");
                    assert_eq!(len, raw.len() - b"GET /next".len(), "step {step}");
                }
                other => panic!("step {step}: {other:?}"),
            }
        }
        let bare = b"GET /lf HTTP/1.1\nHost: x\n\n";
        for step in 1..bare.len() {
            assert!(
                matches!(read_in_steps(bare, step), Parsed::Ours { .. }),
                "step {step}"
            );
        }
    }

    #[test]
    fn the_head_reader_parses_a_trickled_head_only_at_its_ends() {
        // A head trickled a byte at a time is parsed when its first line ends and when its
        // blank line arrives ("\r\n\r", then the last "\n"), not once per read.
        let mut raw = b"GET /slow HTTP/1.1\r\n".to_vec();
        for i in 0..50 {
            raw.extend_from_slice(format!("X-{i}: value\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        let mut reader = HeadReader::default();
        let mut parses = 0;
        for end in 1..=raw.len() {
            parses = reader.parses;
            match reader.next(&raw[..end]) {
                Parsed::Partial => assert!(end < raw.len()),
                Parsed::Ours { len, .. } => {
                    assert_eq!(len, raw.len());
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(parses + 1, 3, "parses for a head of {} reads", raw.len());
        // Garbage is refused when its first line ends, without waiting for a blank line, also
        // after empty lines (found by the http1_codec fuzz target).
        let mut reader = HeadReader::default();
        assert!(matches!(reader.next(b"\r\n\r\nGT"), Parsed::Partial));
        assert!(matches!(
            reader.next(b"\r\n\r\nGTE /\xaf HTTP/1.1\r\n"),
            Parsed::Refuse(Refusal::Malformed)
        ));
        let mut reader = HeadReader::default();
        assert!(matches!(reader.next(b"\x16\x03\x01 TLS"), Parsed::Partial));
        assert!(matches!(
            reader.next(b"\x16\x03\x01 TLS hello\n"),
            Parsed::Refuse(Refusal::Malformed)
        ));
    }

    #[test]
    fn framing_follows_the_body_and_the_request() {
        let sized = Body::from("hello");
        let stream = Body::from_stream(futures::stream::empty::<Result<Bytes, std::io::Error>>());
        let mut h = HeaderMap::new();
        assert_eq!(
            framing(false, false, StatusCode::OK, &mut h, &sized),
            Framing::Length(5)
        );
        assert_eq!(h[header::CONTENT_LENGTH], "5");
        let mut h = HeaderMap::new();
        assert_eq!(
            framing(false, false, StatusCode::OK, &mut h, &stream),
            Framing::Chunked
        );
        assert_eq!(h[header::TRANSFER_ENCODING], "chunked");
        let mut h = HeaderMap::new();
        assert_eq!(
            framing(false, true, StatusCode::OK, &mut h, &stream),
            Framing::UntilClose
        );
        assert!(h.get(header::TRANSFER_ENCODING).is_none());
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(5));
        assert_eq!(
            framing(true, false, StatusCode::OK, &mut h, &sized),
            Framing::None
        );
        assert_eq!(h[header::CONTENT_LENGTH], "5");
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
        assert_eq!(
            framing(false, false, StatusCode::NO_CONTENT, &mut h, &sized),
            Framing::None
        );
        assert!(h.get(header::CONTENT_LENGTH).is_none());
    }

    #[test]
    fn heads_carry_status_headers_date_and_close() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(2));
        let head = encode_head(StatusCode::NOT_FOUND, false, &mut h, true);
        let head = String::from_utf8(head.to_vec()).unwrap();
        assert!(head.starts_with("HTTP/1.1 404 Not Found\r\n"), "{head}");
        assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
        assert!(!head.contains("keep-alive"), "{head}");
        assert!(head.contains("\r\ncontent-length: 2\r\n"), "{head}");
        assert!(head.contains(" GMT\r\n"), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "{head}");
    }

    #[test]
    fn refusals_are_json_with_their_length_and_a_close() {
        let answer = String::from_utf8(encode_refusal(Refusal::AtCapacity(7))).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(head.contains("\r\nretry-after: 1"), "{head}");
        assert!(
            head.contains(&format!("\r\ncontent-length: {}", body.len())),
            "{head}"
        );
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "too_many_connections");
    }
}
