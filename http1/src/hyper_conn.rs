//! Connections served by hyper's HTTP/1 connection: those [`super::conn`] hands over (requests
//! with bodies, upgrades), and every connection under `--http1-engine hyper`.
//!
//! hyper gets a timer, so that its header-read timeout is on: a request head, and the wait for
//! the next one on a keep-alive connection, must be over within the head timeout (hyper starts
//! it when it starts waiting for a head). A request body that stalls for the idle timeout fails
//! (tower-http's `TimeoutBody`, reset by every chunk that arrives), so a client cannot hold a
//! request open by trickling nothing. Requests are counted as they come and go, so that the
//! listener knows when the connection is idle ([`super::connections`]).
//!
//! A client that half-closes its side after its request still gets the answer, as on our own
//! connection ([`super::conn`]): hyper, told of the end of input, would drop the response in
//! hand, so [`EofGate`] holds the end of input back while a response other than an event
//! stream is in flight. An event stream is ended by it, as the sign that its client left.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response};
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tower::ServiceExt;
use tower_http::timeout::TimeoutBody;

use super::codec::{is_event_stream, MAX_HEAD};
use super::connections::{Slot, Wait};

/// Bytes hyper may buffer per connection, each way: request heads must fit (431 above), and
/// response bytes queued beyond it wait in the SSE stream (which then reads small pages) rather
/// than here. hyper's default (~400 KB) let every slow SSE reader hold that much. The same
/// bound as [`super::codec`]'s.
const MAX_BUF: usize = MAX_HEAD;

/// The time limits of a hyper connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    /// A request head, or the wait for the next one, must be over within this.
    pub head: Duration,
    /// A request body may pause this long between chunks.
    pub body: Duration,
}

/// Serves the rest of a connection with hyper. `slot` is busy if the connection already has a
/// request in hand (handed over by [`super::conn`]), else it has sent nothing yet.
pub(super) async fn serve<I>(
    io: I,
    app: Router,
    timeouts: Timeouts,
    mut stopping: watch::Receiver<()>,
    mut slot: Slot,
    handed_over: bool,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if !handed_over {
        slot.wait(Wait::Fresh);
    }
    let close = slot.close_signal();
    // A handed-over connection's slot is busy already; its request is counted when hyper
    // calls the router with it, like any other.
    let requests = Requests(Arc::new(Mutex::new(InFlight {
        slot,
        count: 0,
        streams: 0,
        unflushed: false,
        eof_waiter: None,
    })));
    let io = EofGate {
        io,
        requests: requests.clone(),
    };
    let service = TrackedRouter {
        app,
        requests,
        body_timeout: timeouts.body,
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.head)
        .max_buf_size(MAX_BUF)
        // The buffer bound alone let a head a little past it through when it came in one read.
        .max_header_size(MAX_HEAD)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    let mut conn = pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        // Idle (no request in flight) and asked to close: dropping it closes the socket.
        () = close.notified() => {}
        _ = stopping.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// The connection's place under the cap, its requests in flight, and a read of the socket
/// waiting for them to end before it reports the end of input.
struct InFlight {
    slot: Slot,
    count: usize,
    /// How many of `count` are answered with an event stream.
    streams: usize,
    /// The last request has ended and hyper has not flushed its answer to the socket since:
    /// hyper, told of the end of input, would close without flushing it.
    unflushed: bool,
    eof_waiter: Option<Waker>,
}

impl InFlight {
    /// Whether the end of the client's input is held back from hyper for now.
    fn holds_eof(&self) -> bool {
        self.count > self.streams || self.unflushed
    }

    fn wake_eof_waiter(&mut self) {
        if let Some(waker) = self.eof_waiter.take() {
            waker.wake();
        }
    }
}

/// Shared by the connection's requests; one lock, taken when a request starts and ends.
#[derive(Clone)]
struct Requests(Arc<Mutex<InFlight>>);

impl Requests {
    fn start(&self) -> RequestGuard {
        let mut in_flight = self.0.lock().expect("in-flight lock");
        in_flight.count += 1;
        if in_flight.count == 1 {
            // Asked to close meanwhile: the connection task is closing it already.
            in_flight.slot.busy();
        }
        RequestGuard {
            requests: self.clone(),
            stream: false,
        }
    }
}

/// A request in flight, until its response body is done (dropped by hyper).
struct RequestGuard {
    requests: Requests,
    /// Answered with an event stream.
    stream: bool,
}

impl RequestGuard {
    fn answered_with_a_stream(&mut self) {
        self.stream = true;
        let mut in_flight = self.requests.0.lock().expect("in-flight lock");
        in_flight.streams += 1;
        in_flight.wake_eof_waiter();
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut in_flight = self.requests.0.lock().expect("in-flight lock");
        in_flight.count -= 1;
        if self.stream {
            in_flight.streams -= 1;
        }
        if in_flight.count == 0 {
            in_flight.slot.wait(Wait::Idle);
            in_flight.unflushed = true;
        }
        in_flight.wake_eof_waiter();
    }
}

/// The socket as hyper sees it: the end of the client's input is reported only once no
/// response but event streams is in flight (see the module's comment).
struct EofGate<I> {
    io: I,
    requests: Requests,
}

impl<I: AsyncRead + Unpin> AsyncRead for EofGate<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        if buf.filled().len() == before && buf.remaining() > 0 {
            let mut in_flight = this.requests.0.lock().expect("in-flight lock");
            if in_flight.holds_eof() {
                // The end of input stays where it is: asked again once the requests end.
                in_flight.eof_waiter = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for EofGate<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(Pin::new(&mut this.io).poll_flush(cx))?;
        let mut in_flight = this.requests.0.lock().expect("in-flight lock");
        if in_flight.count == 0 && in_flight.unflushed {
            in_flight.unflushed = false;
            in_flight.wake_eof_waiter();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The router, with request bodies under the body timeout and requests counted.
struct TrackedRouter {
    app: Router,
    requests: Requests,
    body_timeout: Duration,
}

// hyper's own trait rather than a tower service behind `TowerToHyperService`: hyper calls
// `call` as soon as it has read a head, so the request is counted before hyper reads on (a
// tower service is only called when its future is first polled).
impl hyper::service::Service<Request<Incoming>> for TrackedRouter {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let mut guard = self.requests.start();
        let timeout = self.body_timeout;
        let req = req.map(|body| Body::new(TimeoutBody::new(timeout, body)));
        let app = self.app.clone();
        Box::pin(async move {
            let Ok(resp) = app.oneshot(req).await;
            if is_event_stream(resp.headers()) {
                guard.answered_with_a_stream();
            }
            Ok(resp.map(|body| {
                Body::new(Tracked {
                    body,
                    _guard: guard,
                })
            }))
        })
    }
}

/// A response body that holds its request's [`RequestGuard`].
struct Tracked {
    body: Body,
    _guard: RequestGuard,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
