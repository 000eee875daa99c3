//! Our own HTTP/1.1 server connection for requests without a body (GET, HEAD, DELETE, …): the
//! socket half — reading request heads, calling the router, writing responses, keep-alive, and
//! noticing a client that went away while its response (an SSE stream) idles. What the bytes
//! mean is decided in [`super::codec`], which does no I/O.
//!
//! Why not hyper for these: hyper's HTTP/1 connection keeps a read buffer of at least 8 KB and a
//! head buffer for its whole life, which made an idle SSE subscriber cost ~17 KB of server RSS
//! (docs/performance-history.md, "Our own HTTP/1.1 loop"). Here a connection that waits holds no buffer at
//! all: the head is read into a buffer sized to it and freed once parsed, and response bytes
//! are queued only until the socket takes them.
//!
//! Anything else — a request with a body (`Content-Length` > 0, `Transfer-Encoding`), an
//! `Upgrade`, an `Expect`, `CONNECT` — is handed to hyper ([`Outcome::HandOff`]) with the bytes
//! already read, for the rest of the connection: request bodies keep hyper's streaming, limits
//! and error handling.
//!
//! A client may half-close its side once its request is sent (`shutdown(SHUT_WR)`): the
//! response is still written whole, and the connection closes after it. An event stream is the
//! exception: the end of the client's input is how a client that left is noticed, so that its
//! SSE slot is given back at once, and TCP cannot tell a half-close from a close.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{header, Method, Request, Version};
use axum::Router;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::Service;

use super::codec::{self, Framing, HeadReader, Parsed, Refusal, MAX_HEAD};
use super::connections::{Slot, Wait};

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
    /// Closed: by the client, after `Connection: close`, an error, the idle timeout, to make
    /// room at the connection cap, or the server's stop.
    Closed,
    /// A request this loop does not serve: hyper takes the connection, replaying `prefix` (the
    /// bytes already read, that request's head first).
    HandOff(TcpStream, Vec<u8>),
}

/// Serves requests on `io` until the connection ends or a request needs hyper. `stopping`
/// completes when the server stops: an idle connection then closes at once, a request in hand
/// is answered with `Connection: close`. `slot` is told when the connection waits for a request
/// and when it has one; while it waits it may be asked to close.
pub(super) async fn serve(
    io: TcpStream,
    app: Router,
    head_timeout: Duration,
    stopping: &mut watch::Receiver<()>,
    slot: &mut Slot,
) -> Outcome {
    match serve_requests(io, app, head_timeout, stopping, slot).await {
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

/// What the client's side of the connection has done.
#[derive(Default)]
struct Peer {
    /// It sent its end of input (a half-close, or a close).
    eof: bool,
    /// It has sent at least one byte.
    spoke: bool,
}

/// The request loop of [`serve`]. What it holds across an `.await` is what every waiting
/// connection costs, so requests and responses live in blocks without one (the router's future
/// and the response body are boxed anyway).
async fn serve_requests(
    mut io: TcpStream,
    mut app: Router,
    head_timeout: Duration,
    stopping: &mut watch::Receiver<()>,
    slot: &mut Slot,
) -> Ended {
    // Bytes read and not yet parsed: empty (no allocation) while the connection waits.
    let mut inbuf: Vec<u8> = Vec::new();
    let mut stop_seen = false;
    let mut peer = Peer::default();
    loop {
        // Asked before a request exists, as tower wants; the router is always ready.
        let Ok(()) = poll_fn(|cx| Service::<Request<Body>>::poll_ready(&mut app, cx)).await;
        let head = next_head(
            &io,
            &mut inbuf,
            head_timeout,
            stopping,
            &mut stop_seen,
            slot,
            &mut peer,
        )
        .await;
        let (call, is_head, version10, client_close) = match head {
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
        let response = prepare(resp, is_head, version10, close);
        let close = response.close;
        if let Err(e) = send(&io, &mut inbuf, response, &mut peer.eof).await {
            tracing::debug!(error = %e, "response not completed; closing the connection");
            return Ended::Closed;
        }
        // A client that ended its input gets the answers to what it sent, then the close.
        if close || (peer.eof && inbuf.is_empty()) {
            let _ = io.shutdown().await;
            return Ended::Closed;
        }
    }
}

/// Reads until `inbuf` starts with a complete request head (or a refusable one); `None` when
/// the client closed, the connection was asked to close while it waited (idle timeout, room at
/// the cap), or the server stopped while the connection was idle. A head that has begun must be
/// complete within `head_timeout` (408 after it).
async fn next_head(
    io: &TcpStream,
    inbuf: &mut Vec<u8>,
    head_timeout: Duration,
    stopping: &mut watch::Receiver<()>,
    stop_seen: &mut bool,
    slot: &mut Slot,
    peer: &mut Peer,
) -> Option<Parsed> {
    // Boxed, and only once a head has begun: a waiting connection holds no timer (the idle
    // timeout is kept by the listener for all connections at once).
    let mut deadline: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut reader = HeadReader::default();
    let close = slot.close_signal();
    loop {
        if inbuf.is_empty() {
            if peer.eof {
                return None;
            }
            slot.wait(if peer.spoke { Wait::Idle } else { Wait::Fresh });
        } else {
            match reader.next(inbuf) {
                Parsed::Partial if peer.eof => return None,
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
                Ok(0) => peer.eof = true,
                Err(_) => return None,
                Ok(_) => {
                    peer.spoke = true;
                    if !slot.busy() {
                        return None;
                    }
                }
            },
            // In an async block: `select!` evaluates a disabled branch's expression too.
            () = async { deadline.as_mut().expect("a head has begun").await }, if deadline.is_some() => {
                return Some(Parsed::Refuse(Refusal::HeadTimeout(head_timeout)));
            }
            // Only a waiting connection is ever asked (see `Slot::busy`).
            () = close.notified() => return None,
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

/// A response ready to send.
struct Prepared {
    head: Bytes,
    /// None for HEAD, 204, 304.
    body: Option<Body>,
    framing: Framing,
    /// The connection closes after it.
    close: bool,
    /// An event stream (see [`codec::is_event_stream`]).
    stream: bool,
}

fn prepare(
    resp: axum::response::Response,
    is_head: bool,
    version10: bool,
    close: bool,
) -> Prepared {
    let (mut parts, body) = resp.into_parts();
    let framing = codec::framing(is_head, version10, parts.status, &mut parts.headers, &body);
    let close = close
        || matches!(framing, Framing::UntilClose)
        || parts
            .headers
            .get(header::CONNECTION)
            .is_some_and(|v| codec::has_token(v, "close"));
    let stream = codec::is_event_stream(&parts.headers);
    let head = codec::encode_head(parts.status, version10, &mut parts.headers, close);
    let body = (!matches!(framing, Framing::None)).then_some(body);
    Prepared {
        head,
        body,
        framing,
        close,
        stream,
    }
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

/// Writes the response's head and then its body, as fast as the socket takes it. While the
/// body idles the socket is watched: bytes the client sends (a pipelined request) are kept in
/// `inbuf`, up to [`MAX_HEAD`]; the end of its input sets `peer_eof` and the response goes on,
/// unless it is an event stream, which then ends at once (the body, and the stream's SSE slot
/// with it, is dropped by the caller).
async fn send(
    io: &TcpStream,
    inbuf: &mut Vec<u8>,
    response: Prepared,
    peer_eof: &mut bool,
) -> Result<(), SendError> {
    let Prepared {
        head,
        mut body,
        framing,
        stream,
        ..
    } = response;
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
        if !*peer_eof && inbuf.len() < MAX_HEAD {
            match poll_read_into(io, inbuf, cx) {
                Poll::Ready(Ok(0)) if stream => return Poll::Ready(Err(SendError::PeerClosed)),
                Poll::Ready(Ok(0)) => {
                    *peer_eof = true;
                    progress = true;
                }
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

/// Answers a connection the listener will not serve (see [`Refusal`]) and closes it: the
/// client's remaining bytes are read and dropped for a moment first, so that closing with unread
/// input (a TCP reset) does not destroy the answer before the client reads it.
pub(super) async fn refuse(mut io: TcpStream, refusal: Refusal) {
    if io.write_all(&codec::encode_refusal(refusal)).await.is_err() {
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
