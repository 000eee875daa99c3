//! Our own HTTP/1.1 server connection for requests without a body (GET, HEAD, DELETE, …):
//! reading request heads, calling the router, writing responses, keep-alive, and noticing a
//! client that went away while its response (an SSE stream) idles.
//!
//! Why not hyper for these: hyper's HTTP/1 connection keeps a read buffer of at least 8 KB and a
//! head buffer for its whole life, which made an idle SSE subscriber cost ~17 KB of server RSS
//! (issue #5 item 9 asks ≤ 8 KB). Here a connection that waits holds no buffer at all: the head
//! is read into a buffer sized to it and freed once parsed, and response bytes are queued only
//! until the socket takes them.
//!
//! Anything else — a request with a body (`Content-Length` > 0, `Transfer-Encoding`), an
//! `Upgrade`, an `Expect`, `CONNECT` — is handed to hyper ([`Outcome::HandOff`]) with the bytes
//! already read, for the rest of the connection: request bodies keep hyper's streaming, limits
//! and error handling.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{
    header, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version,
};
use axum::Router;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::Service;

/// Largest request head accepted (431 above it); hyper's connections use the same bound.
pub(super) const MAX_HEAD: usize = 64 * 1024;
/// Most header fields in one request (431 above it), hyper's default.
const MAX_HEADERS: usize = 100;
/// Bytes read from the socket at a time, into a stack buffer: the heap buffer grows only by
/// what arrived.
const READ_CHUNK: usize = 4096;
/// Response bytes queued before the body is polled again: a body that has more ready waits
/// for the socket beyond this (as it did with hyper's `max_buf_size`).
const HIGH_WATER: usize = 64 * 1024;
/// Data frames up to this size are copied into one allocation with their chunk framing; larger
/// ones go out as they are (a vectored write).
const SMALL_FRAME: usize = 1024;
/// Buffers handed to one vectored write.
const MAX_IOVECS: usize = 64;
/// After refusing a request, how long the rest of what the client sent is read and dropped
/// before closing, so the refusal is not lost to a TCP reset.
const LINGER: Duration = Duration::from_secs(1);

/// How a connection served here ended.
pub(super) enum Outcome {
    /// Closed: by the client, after `Connection: close`, an error, or the server's stop.
    Closed,
    /// A request this loop does not serve: hyper takes the connection, replaying `prefix` (the
    /// bytes already read, that request's head first).
    HandOff(TcpStream, Vec<u8>),
}

/// Serves requests on `io` until the connection ends or a request needs hyper. `stopping`
/// completes when the server stops: an idle connection then closes at once, a request in hand
/// is answered with `Connection: close`.
pub(super) async fn serve(
    io: TcpStream,
    app: Router,
    head_timeout: Duration,
    stopping: &mut watch::Receiver<()>,
) -> Outcome {
    match serve_requests(io, app, head_timeout, stopping).await {
        Ended::Closed => Outcome::Closed,
        Ended::HandOff(io, read) => Outcome::HandOff(io, read),
        // Boxed: rare, and its timer would otherwise enlarge every connection's future.
        Ended::Refuse(io, refusal) => {
            Box::pin(refuse(io, refusal)).await;
            Outcome::Closed
        }
    }
}

enum Ended {
    Closed,
    HandOff(TcpStream, Vec<u8>),
    Refuse(TcpStream, Refusal),
}

/// The request loop of [`serve`]. What it holds across an `.await` is what every waiting
/// connection costs, so requests and responses live in blocks without one (the router's future
/// and the response body are boxed anyway).
async fn serve_requests(
    mut io: TcpStream,
    mut app: Router,
    head_timeout: Duration,
    stopping: &mut watch::Receiver<()>,
) -> Ended {
    // Bytes read and not yet parsed: empty (no allocation) while the connection waits.
    let mut inbuf: Vec<u8> = Vec::new();
    let mut stop_seen = false;
    loop {
        // Asked before a request exists, as tower wants; the router is always ready.
        let Ok(()) = poll_fn(|cx| Service::<Request<Body>>::poll_ready(&mut app, cx)).await;
        let (call, is_head, version10, client_close) =
            match next_head(&io, &mut inbuf, head_timeout, stopping, &mut stop_seen).await {
                None => return Ended::Closed,
                Some(Parsed::Partial) => unreachable!("next_head waits for a complete head"),
                Some(Parsed::Hyper) => return Ended::HandOff(io, inbuf),
                Some(Parsed::Refuse(refusal)) => return Ended::Refuse(io, refusal),
                Some(Parsed::Ours {
                    req,
                    len,
                    client_close,
                }) => {
                    inbuf.drain(..len);
                    if inbuf.is_empty() {
                        inbuf = Vec::new();
                    }
                    let is_head = req.method() == Method::HEAD;
                    let version10 = req.version() == Version::HTTP_10;
                    (Box::pin(app.call(req)), is_head, version10, client_close)
                }
            };
        // The router never fails (`Infallible`).
        let Ok(resp) = call.await;
        let close = client_close || version10 || stop_seen || stopping.has_changed().is_err();
        let (head, body, framing, close) = prepare(resp, is_head, version10, close);
        if let Err(e) = send(&io, &mut inbuf, head, body, framing).await {
            tracing::debug!(error = %e, "response not completed; closing the connection");
            return Ended::Closed;
        }
        if close {
            let _ = io.shutdown().await;
            return Ended::Closed;
        }
    }
}

/// Reads until `inbuf` starts with a complete request head (or a refusable one); `None` when
/// the client closed, or the server stopped while the connection was idle. A head that has
/// begun must be complete within `head_timeout` (408 after it).
async fn next_head(
    io: &TcpStream,
    inbuf: &mut Vec<u8>,
    head_timeout: Duration,
    stopping: &mut watch::Receiver<()>,
    stop_seen: &mut bool,
) -> Option<Parsed> {
    // Boxed, and only once a head has begun: a waiting connection holds no timer.
    let mut deadline: Option<Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        if !inbuf.is_empty() {
            match parse_head(inbuf) {
                Parsed::Partial => {
                    if deadline.is_none() {
                        deadline = Some(Box::pin(tokio::time::sleep(head_timeout)));
                    }
                }
                done => return Some(done),
            }
        }
        tokio::select! {
            read = read_more(io, inbuf) => match read {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            },
            // In an async block: `select!` evaluates a disabled branch's expression too.
            () = async { deadline.as_mut().expect("a head has begun").await }, if deadline.is_some() => {
                return Some(Parsed::Refuse(Refusal::HeadTimeout(head_timeout)));
            }
            // The sender is dropped on stop: `changed` then fails at once.
            _ = stopping.changed(), if !*stop_seen => {
                *stop_seen = true;
                if inbuf.is_empty() {
                    return None;
                }
            }
        }
    }
}

/// The head to write, the body to send (none for HEAD, 204, 304), its framing, and whether the
/// connection closes after it.
fn prepare(
    resp: axum::response::Response,
    is_head: bool,
    version10: bool,
    close: bool,
) -> (Bytes, Option<Body>, Framing, bool) {
    let (mut parts, body) = resp.into_parts();
    let framing = framing(is_head, version10, parts.status, &mut parts.headers, &body);
    let close = close
        || matches!(framing, Framing::UntilClose)
        || parts
            .headers
            .get(header::CONNECTION)
            .is_some_and(|v| has_token(v, "close"));
    let head = encode_head(parts.status, version10, &mut parts.headers, close);
    let body = (!matches!(framing, Framing::None)).then_some(body);
    (head, body, framing, close)
}

/// Waits until the socket has bytes and appends them to `buf`; `Ok(0)` is the end of input.
async fn read_more(io: &TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    poll_fn(|cx| poll_read_into(io, buf, cx)).await
}

fn poll_read_into(
    io: &TcpStream,
    buf: &mut Vec<u8>,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    loop {
        ready!(io.poll_read_ready(cx))?;
        let mut chunk = [0u8; READ_CHUNK];
        match io.try_read(&mut chunk) {
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Poll::Ready(Ok(n));
            }
            // Readiness was stale: `try_read` cleared it, so polling again registers a wake-up.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// What a buffer's first request head turned out to be.
// Lives only between parsing and dispatch: boxing the request would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Parsed {
    /// Not complete yet.
    Partial,
    /// A request served here; its head is `len` bytes long.
    Ours {
        req: Request<Body>,
        len: usize,
        client_close: bool,
    },
    /// A request for hyper (a body, an upgrade, …).
    Hyper,
    /// Not servable: answer and close.
    Refuse(Refusal),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Refusal {
    /// 400: not an HTTP/1.x request head.
    Malformed,
    /// 431: larger than [`MAX_HEAD`] or more than [`MAX_HEADERS`] fields.
    TooLarge,
    /// 408: begun and not complete within the head timeout.
    HeadTimeout(Duration),
}

fn parse_head(buf: &[u8]) -> Parsed {
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
fn has_token(value: &HeaderValue, token: &str) -> bool {
    value
        .as_bytes()
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// How a response body goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
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
fn framing(
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

fn encode_head(status: StatusCode, version10: bool, headers: &mut HeaderMap, close: bool) -> Bytes {
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

/// Why a response was not completed.
#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error("the client closed the connection")]
    PeerClosed,
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    #[error("response body: {0}")]
    Body(axum::Error),
    #[error("the response body did not match its Content-Length")]
    LengthMismatch,
}

/// Writes `head` and then `body` framed as `framing`, as fast as the socket takes it. While
/// the body idles the socket is watched: the client closing ends the response at once (the
/// body, and an SSE stream's slot with it, is dropped by the caller), and bytes it sends
/// (a pipelined request) are kept in `inbuf`, up to [`MAX_HEAD`].
async fn send(
    io: &TcpStream,
    inbuf: &mut Vec<u8>,
    head: Bytes,
    mut body: Option<Body>,
    framing: Framing,
) -> Result<(), SendError> {
    let mut out = Outbox::default();
    out.push(head);
    let mut remaining = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    poll_fn(|cx| loop {
        let mut progress = false;
        // Every frame the body has ready, up to the high-water mark: one write for them all.
        while out.len < HIGH_WATER {
            let Some(b) = body.as_mut() else { break };
            match Pin::new(b).poll_frame(cx) {
                Poll::Pending => break,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(SendError::Body(e))),
                Poll::Ready(Some(Ok(frame))) => {
                    progress = true;
                    // Trailers are dropped: nobody asked for them (`TE: trailers`).
                    if let Ok(data) = frame.into_data() {
                        queue_data(&mut out, framing, &mut remaining, data)?;
                    }
                }
                Poll::Ready(None) => {
                    progress = true;
                    body = None;
                    match framing {
                        Framing::Chunked => out.push(Bytes::from_static(b"0\r\n\r\n")),
                        Framing::Length(_) if remaining != 0 => {
                            return Poll::Ready(Err(SendError::LengthMismatch))
                        }
                        _ => {}
                    }
                }
            }
        }
        if !out.is_empty() {
            match out.poll_write(io, cx) {
                Poll::Ready(Ok(())) => progress = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => {}
            }
        }
        if body.is_none() && out.is_empty() {
            return Poll::Ready(Ok(()));
        }
        // Reading stops at the bound: a client that sends more waits for this response.
        if inbuf.len() < MAX_HEAD {
            match poll_read_into(io, inbuf, cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(SendError::PeerClosed)),
                Poll::Ready(Ok(_)) => progress = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => {}
            }
        }
        if !progress {
            return Poll::Pending;
        }
    })
    .await
}

fn queue_data(
    out: &mut Outbox,
    framing: Framing,
    remaining: &mut u64,
    data: Bytes,
) -> Result<(), SendError> {
    if data.is_empty() {
        return Ok(());
    }
    match framing {
        Framing::Chunked if data.len() <= SMALL_FRAME => {
            let mut chunk = Vec::with_capacity(data.len() + 12);
            chunk.extend_from_slice(format!("{:X}\r\n", data.len()).as_bytes());
            chunk.extend_from_slice(&data);
            chunk.extend_from_slice(b"\r\n");
            out.push(Bytes::from(chunk));
        }
        Framing::Chunked => {
            out.push(Bytes::from(format!("{:X}\r\n", data.len())));
            out.push(data);
            out.push(Bytes::from_static(b"\r\n"));
        }
        Framing::Length(_) => {
            let n = data.len() as u64;
            if n > *remaining {
                return Err(SendError::LengthMismatch);
            }
            *remaining -= n;
            out.push(data);
        }
        Framing::UntilClose => out.push(data),
        Framing::None => {}
    }
    Ok(())
}

/// Response bytes waiting for the socket. Empty — and holding no allocation — whenever the
/// socket has taken everything.
#[derive(Default)]
struct Outbox {
    parts: VecDeque<Bytes>,
    len: usize,
}

impl Outbox {
    fn push(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.len += bytes.len();
            self.parts.push_back(bytes);
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes until everything is written (`Ready(Ok)`) or the socket is full (`Pending`).
    fn poll_write(&mut self, io: &TcpStream, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.is_empty() {
            ready!(io.poll_write_ready(cx))?;
            let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
            let n = self
                .parts
                .iter()
                .zip(slices.iter_mut())
                .map(|(part, slice)| *slice = IoSlice::new(part))
                .count();
            match io.try_write_vectored(&slices[..n]) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(written) => self.advance(written),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.parts = VecDeque::new();
        Poll::Ready(Ok(()))
    }

    fn advance(&mut self, mut n: usize) {
        self.len -= n;
        while n > 0 {
            let front = self.parts.front_mut().expect("written bytes were queued");
            if front.len() <= n {
                n -= front.len();
                self.parts.pop_front();
            } else {
                bytes::Buf::advance(front, n);
                n = 0;
            }
        }
    }
}

/// Answers a head that cannot be served (400, 431) and closes: the client's remaining bytes are
/// read and dropped for a moment first, so that closing with unread input (a TCP reset) does
/// not destroy the answer before the client reads it.
async fn refuse(mut io: TcpStream, refusal: Refusal) {
    let (status, body): (StatusCode, Vec<u8>) = match refusal {
        Refusal::Malformed => (
            StatusCode::BAD_REQUEST,
            br#"{"error":{"code":"bad_request","message":"malformed HTTP/1.1 request head"}}"#.to_vec(),
        ),
        Refusal::TooLarge => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            br#"{"error":{"code":"request_header_fields_too_large","message":"the request head is larger than 65536 bytes or has more than 100 header fields"}}"#.to_vec(),
        ),
        Refusal::HeadTimeout(limit) => (
            StatusCode::REQUEST_TIMEOUT,
            format!(
                r#"{{"error":{{"code":"request_timeout","message":"the request head did not arrive whole within {} s of its first byte"}}}}"#,
                limit.as_secs_f64()
            )
            .into_bytes(),
        ),
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    let head = encode_head(status, false, &mut headers, true);
    if io.write_all(&head).await.is_err() || io.write_all(&body).await.is_err() {
        return;
    }
    let _ = io.shutdown().await;
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = Vec::new();
        loop {
            sink.clear();
            match read_more(&io, &mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
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
            Parsed::Partial => panic!("partial"),
            Parsed::Hyper => panic!("hyper"),
            Parsed::Refuse(r) => panic!("refused: {r:?}"),
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
        assert!(matches!(
            parse_head(b"GET / HTTP/9.9\r\n\r\n"),
            Parsed::Refuse(Refusal::Malformed)
        ));
        assert!(matches!(
            parse_head(b"NOT A REQUEST\r\n\r\n"),
            Parsed::Refuse(Refusal::Malformed)
        ));
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
    fn framing_follows_the_body_and_the_request() {
        let sized = Body::from("hello");
        let stream = Body::from_stream(futures::stream::empty::<Result<Bytes, io::Error>>());
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
    fn outbox_advances_across_parts() {
        let mut out = Outbox::default();
        out.push(Bytes::from_static(b"abc"));
        out.push(Bytes::new());
        out.push(Bytes::from_static(b"defg"));
        assert_eq!(out.len, 7);
        out.advance(4);
        assert_eq!(out.len, 3);
        assert_eq!(out.parts.len(), 1);
        assert_eq!(&out.parts[0][..], b"efg");
        out.advance(3);
        assert!(out.is_empty() && out.parts.is_empty());
    }
}
