//! threadstream's HTTP/1.1 listener, a crate of its own (the fuzz harness targets its codec).
//!
//! The accept loop: owns the listening socket and one task per HTTP/1.1 connection, the cap on
//! open connections and their idle timeout, and the graceful stop of them all.
//!
//! Why not `axum::serve`: it serves every connection with hyper-util's auto (HTTP/1 or HTTP/2)
//! connection, whose per-connection state cost ~54 KB of server RSS before a request had even
//! arrived; an idle SSE subscriber cost ~74 KB in all (docs/performance-history.md,
//! "Our own HTTP/1.1 accept loop"). SSE clients and browsers talk HTTP/1.1 to us (HTTP/2 needs TLS in browsers,
//! and a TLS-terminating proxy speaks HTTP/1.1 upstream).
//!
//! Each connection starts in [`conn`], our own HTTP/1.1 loop for requests without a body, which
//! holds no buffer while it waits (an idle SSE subscriber costs a few KB); [`codec`] is its
//! pure half. The first request with a body (or an upgrade, …) hands the connection to hyper's
//! HTTP/1 connection ([`hyper_conn`]) for the rest of its life, with the bytes already read
//! replayed ([`replay`]). `--http1-engine hyper` serves every connection with hyper alone.
//! [`connections`] keeps the cap and closes idle connections; [`fd_limit`] sizes the cap to
//! the process's limit on open files.

pub mod codec;
mod conn;
mod connections;
pub mod fd_limit;
mod hyper_conn;
mod replay;

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use codec::Refusal;
use connections::Connections;
use replay::Replay;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Which HTTP/1.1 implementation serves connections (`--http1-engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Http1Engine {
    /// Our own loop for requests without a body (an idle connection holds no buffer), hyper
    /// for the rest of a connection from its first request with a body.
    #[default]
    Threadstream,
    /// hyper alone, for every connection: a fallback an operator can switch to.
    Hyper,
}

/// How the listener treats connections (from the API's configuration, `threadstream_api::Config`).
#[derive(Debug, Clone, Copy)]
pub struct ListenerConfig {
    /// A request head must arrive whole within this of its first byte (408 after it).
    pub head_timeout: Duration,
    /// A connection that has sent nothing, or waits for its next request, this long is closed;
    /// so is a request body that pauses this long.
    pub idle_timeout: Duration,
    /// Connections open at once, in force (see [`fd_limit::connection_cap`]).
    pub max_connections: usize,
    pub engine: Http1Engine,
}

/// How long a request head may take to arrive once its first byte has (the default of
/// `threadstream_api::Config::head_timeout`; hyper's own default for its `header_read_timeout`).
///
/// Why: without it a client that trickles a head a byte at a time (slowloris) holds a
/// connection and its partial head for ever. A connection with nothing read has no head timer:
/// the idle timeout covers it, kept for all connections at once ([`connections`]).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The default of [`ListenerConfig::idle_timeout`] (`--idle-timeout-secs`).
///
/// Why: a connection that sends nothing costs a file descriptor; without a limit one client
/// holding thousands of silent sockets ran the server out of them.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The default of `--max-connections`; the file limit may lower it (see [`fd_limit`]).
pub const MAX_CONNECTIONS: usize = 10_000;

/// Whether a request body failed because it paused longer than the idle timeout (a connection
/// served by hyper; the handler answers 400 `request_body_timeout`).
pub fn is_body_timeout(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Bytes a connection's socket may hold that TCP has not sent yet; beyond them a write waits,
/// and so does the SSE stream feeding it (which then reads small pages).
///
/// Why: Linux grows a socket's send buffer up to `tcp_wmem`'s maximum (4 MB here), so a slow SSE
/// reader looked fast until it had taken ~2.8 MB of kernel memory, and meanwhile every append
/// woke it and wrote to it like any other subscriber: 100 such readers held 280 MB of send queue
/// and doubled the fast subscribers' p99 (docs/performance-history.md, "Sixth pass"). Unlike a fixed
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

/// Serves `app` on `listener` until `stop` completes; then stops accepting, asks every open
/// connection to finish its response in hand and close, and returns once all have closed.
///
/// At most `config.max_connections` are open at once. A new connection at the cap closes the
/// connection that has waited longest — one that has sent nothing yet, else an idle keep-alive
/// one — or, when every connection is busy, is answered 503 `too_many_connections` and closed
/// at once. Connections that wait longer than the idle timeout are closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    config: ListenerConfig,
    stop: impl Future<Output = ()>,
) {
    // Connections watch `stopping` (its sender dropped = stop); each holds a `closed` receiver,
    // so `closed_tx.closed()` completes when the last connection is gone.
    let (stopping_tx, stopping_rx) = watch::channel(());
    let (closed_tx, closed_rx) = watch::channel(());
    let connections = Connections::new(config.max_connections);
    // One timer for every waiting connection, rather than one each.
    let tick = (config.idle_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let idle_closer = tokio::spawn(
        connections
            .clone()
            .close_idle_every(config.idle_timeout, tick),
    );
    let timeouts = hyper_conn::Timeouts {
        head: config.head_timeout,
        body: config.idle_timeout,
    };
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
        let connections = connections.clone();
        let mut stopping = stopping_rx.clone();
        let closed = closed_rx.clone();
        tokio::spawn(async move {
            let Some(mut slot) = connections.admit().await else {
                tracing::debug!("every connection is busy at the cap: refusing a new one");
                conn::refuse(stream, Refusal::AtCapacity(connections.limit())).await;
                drop(closed);
                return;
            };
            match config.engine {
                Http1Engine::Threadstream => {
                    let outcome = conn::serve(
                        stream,
                        app.clone(),
                        config.head_timeout,
                        &mut stopping,
                        &mut slot,
                    )
                    .await;
                    if let conn::Outcome::HandOff(stream, read) = outcome {
                        // Boxed: hyper's connection is large, and most connections never get here.
                        let io = Replay::new(read, stream);
                        Box::pin(hyper_conn::serve(io, app, timeouts, stopping, slot, true)).await;
                    }
                }
                Http1Engine::Hyper => {
                    Box::pin(hyper_conn::serve(
                        stream, app, timeouts, stopping, slot, false,
                    ))
                    .await;
                }
            }
            drop(closed);
        });
    }
    drop(listener);
    idle_closer.abort();
    drop(stopping_tx);
    drop(closed_rx);
    closed_tx.closed().await;
}
