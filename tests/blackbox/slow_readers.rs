//! What a subscriber that stops reading costs the server's kernel: its
//! connection's send queue stays near the server's unsent limit (128 KB, `TCP_NOTSENT_LOWAT`,
//! http1/src/lib.rs) instead of growing with Linux's send-buffer tuning (up to 4 MB per
//! connection here, ~2.8 MB seen per slow reader), and once it reads again it gets every event.
//! The benchmark `threadstream-bench slow-consumers` measures 100 such readers beside fast ones.

use crate::common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Send-queue bytes this test allows the stalled connection: the unsent limit, what one write
/// can overshoot it by, and the few KB the client's small receive window takes.
const BOUND: u64 = 384 * 1024;

/// Bytes queued in the kernel for sending (`tx_queue` of `/proc/net/tcp`) on connections whose
/// local port is `port`: the server's side of its connections.
fn send_queue(port: u16) -> u64 {
    let port = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if !cols.get(1)?.ends_with(&port) {
                return None;
            }
            u64::from_str_radix(cols.get(4)?.split(':').next()?, 16).ok()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_subscriber_holds_a_bounded_send_queue_and_gets_everything_later() {
    bounded(120, async {
        let s = Server::start().await;
        let addr: std::net::SocketAddr = s.base.trim_start_matches("http://").parse().unwrap();
        s.ingest_ok("stall", &[run_start("r1", "o1")]).await;

        // A reader with a small receive window that reads the head and then nothing.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut conn = socket.connect(addr).await.unwrap();
        conn.write_all(
            b"GET /instance-ai/events/stall HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n",
        )
        .await
        .unwrap();
        let mut raw = Vec::new();
        while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut buf = [0u8; 512];
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "no response head");
            raw.extend_from_slice(&buf[..n]);
        }
        assert!(raw.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&raw));

        // ~4 MB of events while it does not read.
        let text = "x".repeat(2000);
        let mut last = 0;
        for _ in 0..40 {
            let batch: Vec<_> = (0..50).map(|_| text_delta("r1", "o1", &text)).collect();
            last = *s.ingest_ok("stall", &batch).await.last().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let queued = send_queue(addr.port());
        eprintln!("stalled subscriber: {} KB in the server's send queue", queued / 1024);
        assert!(
            queued > 64 * 1024,
            "the subscriber is not backed up ({queued} bytes queued): the test proves nothing"
        );
        assert!(
            queued <= BOUND,
            "a stalled subscriber holds {queued} bytes of the server's send queue (bound {BOUND})"
        );

        // Reading again, it gets every event once, in order, the last one included.
        let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let mut chunks = Chunks {
            raw: raw.split_off(head_end),
            body: Vec::new(),
        };
        chunks.decode();
        let want = format!("id: {last}\n");
        let mut buf = vec![0u8; 64 * 1024];
        while !String::from_utf8_lossy(&chunks.body[chunks.body.len().saturating_sub(8192)..])
            .contains(&want)
        {
            let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
                .await
                .expect("the subscriber caught up")
                .unwrap();
            assert!(n > 0, "the server closed the stream");
            chunks.raw.extend_from_slice(&buf[..n]);
            chunks.decode();
        }
        let events = parse_sse(&String::from_utf8(chunks.body).unwrap());
        assert_strictly_increasing(&events, "the stalled subscriber's events");
        assert_eq!(events.len(), 2001, "run-start and every delta, once each");
    })
    .await;
}

/// A chunked HTTP/1.1 response body, decoded as its bytes arrive.
struct Chunks {
    /// Received bytes not decoded yet (a partial chunk).
    raw: Vec<u8>,
    body: Vec<u8>,
}

impl Chunks {
    /// Moves every complete chunk of `raw` to `body`.
    fn decode(&mut self) {
        let mut at = 0;
        while let Some(eol) = self.raw[at..].windows(2).position(|w| w == b"\r\n") {
            let size = std::str::from_utf8(&self.raw[at..at + eol]).unwrap();
            let size = usize::from_str_radix(size, 16).unwrap();
            let data = at + eol + 2;
            if self.raw.len() < data + size + 2 {
                break;
            }
            self.body.extend_from_slice(&self.raw[data..data + size]);
            at = data + size + 2;
        }
        self.raw.drain(..at);
    }
}
