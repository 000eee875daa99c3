//! What an idle SSE subscriber costs the server: 500 subscribers that received
//! the response head and wait. With axum's HTTP/1-or-2 connection each cost ~74 KB of RSS, with
//! hyper's HTTP/1 connection ~15 KB (its read buffer); the server's own HTTP/1.1 connection
//! (http1/src/conn.rs), which holds no buffer while it waits, costs 5–7 KB in this debug
//! build. The bound leaves room for allocator noise and fails with hyper's connection put back
//! (15–16 KB). The benchmark `threadstream-bench idle-sse` measures 10,000.

use crate::common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SUBSCRIBERS: usize = 500;
/// KB of server RSS per idle subscriber that this test allows.
const BOUND_KB: f64 = 10.0;

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

async fn subscribe(addr: String, thread: String) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!(
            "GET /instance-ai/events/{thread} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = [0u8; 1024];
    let n = s.read(&mut head).await.unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/event-stream"), "{head}");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_subscribers_cost_little_server_memory() {
    bounded(120, async {
        // What our connection costs (hyper's: 14-16 KB).
        let s = Server::start_with(Opts {
            extra_args: vec!["--http1-engine".into(), "threadstream".into()],
            ..Opts::default()
        })
        .await;
        let pid = s.pid().expect("server pid");
        let addr = s.base.trim_start_matches("http://").to_string();
        // Warm the code paths and the allocator, then measure from a settled state.
        let warm: Vec<_> = futures::future::join_all((0..20).map(|i| subscribe(addr.clone(), format!("w{i}")))).await;
        drop(warm);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = rss_kb(pid);
        let mut conns = Vec::with_capacity(SUBSCRIBERS);
        for chunk in (0..SUBSCRIBERS).collect::<Vec<_>>().chunks(50) {
            let opened = futures::future::join_all(
                chunk.iter().map(|i| subscribe(addr.clone(), format!("idle-{i}"))),
            )
            .await;
            conns.extend(opened);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let with_all = rss_kb(pid);
        let per_conn = (with_all.saturating_sub(before)) as f64 / SUBSCRIBERS as f64;
        eprintln!("idle subscriber: {per_conn:.1} KB");
        assert!(
            per_conn <= BOUND_KB,
            "{SUBSCRIBERS} idle subscribers cost {per_conn:.1} KB each (RSS {before} → {with_all} KB)"
        );
        // They are still served: a new event reaches one of them.
        s.ingest_ok("idle-7", &[run_start("r1", "o1")]).await;
        let mut frame = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), conns[7].read(&mut frame))
            .await
            .expect("the idle subscriber got the new event")
            .unwrap();
        let frame = String::from_utf8_lossy(&frame[..n]);
        assert!(frame.contains("run-start"), "{frame}");
    })
    .await;
}
