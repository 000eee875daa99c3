//! The accept loop: owns the listening socket and one task per HTTP/1.1 connection, and the
//! graceful stop of both.
//!
//! Why not `axum::serve`: it serves every connection with hyper-util's auto (HTTP/1 or HTTP/2)
//! connection, whose per-connection state cost ~54 KB of server RSS before a request had even
//! arrived; an idle SSE subscriber cost ~74 KB in all (docs/performance.md, "Idle
//! connections"). SSE clients and browsers talk HTTP/1.1 to us (HTTP/2 needs TLS in browsers,
//! and a TLS-terminating proxy speaks HTTP/1.1 upstream).
//!
//! Each connection starts in [`conn`], our own HTTP/1.1 loop for requests without a body, which
//! holds no buffer while it waits (an idle SSE subscriber costs a few KB). The first request
//! with a body (or an upgrade, …) hands the connection to hyper's HTTP/1 connection for the
//! rest of its life, with the bytes already read replayed ([`replay`]).

mod conn;
mod replay;

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use replay::Replay;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Bytes hyper may buffer per connection, each way: request heads must fit (431 above), and
/// response bytes queued beyond it wait in the SSE stream (which then reads small pages) rather
/// than here. hyper's default (~400 KB) let every slow SSE reader hold that much. The same
/// bound as [`conn`]'s.
const MAX_BUF: usize = conn::MAX_HEAD;

/// Bytes a connection's socket may hold that TCP has not sent yet; beyond them a write waits,
/// and so does the SSE stream feeding it (which then reads small pages).
///
/// Why: Linux grows a socket's send buffer up to `tcp_wmem`'s maximum (4 MB here), so a slow SSE
/// reader looked fast until it had taken ~2.8 MB of kernel memory, and meanwhile every append
/// woke it and wrote to it like any other subscriber: 100 such readers held 280 MB of send queue
/// and doubled the fast subscribers' p99 (docs/performance.md, "Sixth pass"). Unlike a fixed
/// `SO_SNDBUF`, this leaves the bytes in flight (sent, not yet acknowledged) to TCP's own
/// tuning, so a distant client's throughput is not capped at buffer / round trip.
const UNSENT_LIMIT: u32 = 128 * 1024;

/// Sets [`UNSENT_LIMIT`] on `stream` (`TCP_NOTSENT_LOWAT`; Linux and Android only, elsewhere the
/// system's default holds).
fn limit_unsent(stream: &TcpStream) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_notsent_lowat(UNSENT_LIMIT) {
        tracing::debug!(error = %e, "cannot limit the connection's unsent bytes");
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = stream;
}

/// How long a request head may take to arrive once its first byte has (the default of
/// [`crate::Config::head_timeout`]; hyper's own default for its `header_read_timeout`).
///
/// Why: without it a client that trickles a head a byte at a time (slowloris) holds a
/// connection and its partial head for ever. A connection with nothing read waits without
/// one: an idle keep-alive connection costs nothing but its socket.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` until `stop` completes; then stops accepting, asks every open
/// connection to finish its response in hand and close, and returns once all have closed. A
/// request head not complete within `head_timeout` of its first byte is answered 408.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    head_timeout: Duration,
    stop: impl Future<Output = ()>,
) {
    // Connections watch `stopping` (its sender dropped = stop); each holds a `closed` receiver,
    // so `closed_tx.closed()` completes when the last connection is gone.
    let (stopping_tx, stopping_rx) = watch::channel(());
    let (closed_tx, closed_rx) = watch::channel(());
    let mut stop = pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: wait rather than spin (as hyper does).
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // SSE frames are small writes that must leave at once.
        let _ = stream.set_nodelay(true);
        limit_unsent(&stream);
        let app = app.clone();
        let mut stopping = stopping_rx.clone();
        let closed = closed_rx.clone();
        tokio::spawn(async move {
            if let conn::Outcome::HandOff(stream, read) =
                conn::serve(stream, app.clone(), head_timeout, &mut stopping).await
            {
                // Boxed: hyper's connection is large, and most connections never get here.
                Box::pin(serve_with_hyper(Replay::new(read, stream), app, stopping)).await;
            }
            drop(closed);
        });
    }
    drop(listener);
    drop(stopping_tx);
    drop(closed_rx);
    closed_tx.closed().await;
}

/// Serves the rest of a connection with hyper's HTTP/1 connection (requests with bodies,
/// upgrades), replaying what [`conn`] had read.
async fn serve_with_hyper(io: Replay<TcpStream>, app: Router, mut stopping: watch::Receiver<()>) {
    let conn = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_BUF)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(app))
        .with_upgrades();
    let mut conn = pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        _ = stopping.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
