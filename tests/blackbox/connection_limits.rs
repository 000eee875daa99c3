//! The listener's limits on connections (http1/src/lib.rs): a connection silent before its
//! first request or between requests is closed after `--idle-timeout-secs` (an open event
//! stream never is), a request body that stalls is refused, `--max-connections` makes room by
//! closing idle connections oldest first and refuses a new one at once when all are busy, and a
//! client that half-closes its side after its request still gets the whole answer.

use crate::common;

use std::time::{Duration, Instant};

use crate::raw_http::{get, ingest_request, Raw};
use common::*;
use tokio::io::AsyncWriteExt;

fn with_args(args: &[&str]) -> Opts {
    Opts {
        extra_args: args.iter().map(|a| a.to_string()).collect(),
        ..Opts::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_idle_connections_are_closed_but_an_open_stream_is_not() {
    bounded(60, async {
        let s = Server::start_with(with_args(&["--idle-timeout-secs", "1"])).await;
        let started = Instant::now();
        // Connected, nothing sent.
        let mut silent = Raw::connect(&s).await;
        // A keep-alive connection after a body-less request, and one after a request with a
        // body (served by hyper from then on).
        let mut kept = Raw::connect(&s).await;
        kept.send(&get("/healthz")).await;
        assert_eq!(kept.response(false).await.status, 200);
        let mut posted = Raw::connect(&s).await;
        posted
            .send(&ingest_request("idle-1", &[run_start("r1", "o1")]))
            .await;
        assert_eq!(posted.response(false).await.status, 200);
        // An event stream with nothing to send for longer than the timeout.
        let mut stream = Raw::connect(&s).await;
        stream.send(&get("/instance-ai/events/idle-2")).await;
        assert_eq!(stream.head().await.status, 200);

        for (name, c) in [
            ("silent", &mut silent),
            ("keep-alive", &mut kept),
            ("after a body", &mut posted),
        ] {
            assert!(
                c.closes_within(Duration::from_secs(5)).await,
                "the {name} connection was closed"
            );
            assert!(c.buf.is_empty(), "{name}: closed without a word");
        }
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(900),
            "closed after {waited:?}"
        );

        // The stream outlived them all and still delivers.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        s.ingest_ok("idle-2", &[run_start("r1", "o1")]).await;
        let frame = stream.chunk().await.expect("the stream goes on");
        assert!(String::from_utf8_lossy(&frame).contains("run-start"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_that_stalls_is_refused() {
    bounded(60, async {
        let s = Server::start_with(with_args(&["--idle-timeout-secs", "1"])).await;
        let mut c = Raw::connect(&s).await;
        let started = Instant::now();
        c.send(
            b"POST /instance-ai/threads/stall/events HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"events\":",
        )
        .await;
        let r = c.response(false).await;
        assert_eq!(r.status, 400, "{r:?}");
        assert_eq!(r.json()["error"]["code"], "request_body_timeout", "{r:?}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
            "refused after {waited:?}, the timeout is 1 s"
        );
        assert_eq!(s.count_events().await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_sockets_leaves_room_for_a_fresh_client() {
    bounded(90, async {
        let s = Server::start_with(with_args(&["--max-connections", "20"])).await;
        let addr = s.base.trim_start_matches("http://").to_string();
        // Five times the cap, none of which ever sends a byte.
        let mut flood = Vec::new();
        for _ in 0..100 {
            flood.push(
                tokio::net::TcpStream::connect(&addr)
                    .await
                    .expect("connect"),
            );
        }
        let started = Instant::now();
        let mut fresh = Raw::connect(&s).await;
        fresh.send(&get("/healthz")).await;
        let r = fresh.response(false).await;
        assert_eq!(r.status, 200, "{r:?}");
        // Quick, on a loaded machine too (a client left hanging waits for ever).
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "/healthz took {:?}",
            started.elapsed()
        );
        // The oldest silent sockets made room: at least all but the cap's worth are closed.
        let mut closed = 0;
        for sock in flood {
            let mut raw = Raw {
                s: sock,
                buf: Vec::new(),
            };
            if raw.closes_within(Duration::from_millis(200)).await {
                closed += 1;
            }
        }
        assert!(closed >= 80, "{closed} of 100 silent sockets closed");
        // The cap and the open-files limit it was checked against are logged at start-up.
        let logs = s.logs();
        let line = logs
            .lines()
            .find(|l| l.contains("open files limit"))
            .unwrap_or_else(|| panic!("no open files limit line in:\n{logs}"));
        assert!(line.contains("max_connections=20"), "{line}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_connection_busy_a_new_one_is_refused_at_once() {
    bounded(60, async {
        let s = Server::start_with(with_args(&["--max-connections", "3"])).await;
        let mut streams = Vec::new();
        for i in 0..3 {
            let mut c = Raw::connect(&s).await;
            c.send(&get(&format!("/instance-ai/events/busy-{i}"))).await;
            assert_eq!(c.head().await.status, 200);
            streams.push(c);
        }
        let started = Instant::now();
        let mut refused = Raw::connect(&s).await;
        refused.send(&get("/healthz")).await;
        let r = refused.response(false).await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.json()["error"]["code"], "too_many_connections", "{r:?}");
        assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
        assert_eq!(r.header("connection"), Some("close"), "{r:?}");
        assert!(refused.closed().await);

        // A stream that ends gives its place back.
        drop(streams.pop());
        let left = Instant::now();
        loop {
            let mut c = Raw::connect(&s).await;
            c.send(&get("/healthz")).await;
            let status = c.response(false).await.status;
            if status == 200 {
                break;
            }
            assert!(left.elapsed() < Duration::from_secs(3), "still {status}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_half_closes_after_its_requests_gets_every_answer() {
    bounded(60, async {
        let s = Server::start().await;
        let mut events = vec![run_start("r1", "o1")];
        events.extend((0..199).map(|i| text_delta("r1", "o1", &format!("{i:0>200}"))));
        s.ingest_ok("half-1", &events).await;
        let expected = s.get("/instance-ai/threads/half-1/export").await;
        assert_eq!(expected.status, 200);

        // Two body-less requests (the second a large body), then the end of the client's input.
        let mut c = Raw::connect(&s).await;
        let mut batch = get("/healthz");
        batch.extend(get("/instance-ai/threads/half-1/export"));
        c.send(&batch).await;
        c.finish_sending().await;
        assert_eq!(c.response(false).await.status, 200);
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        assert_eq!(String::from_utf8(r.body).unwrap(), expected.text);
        assert!(c.closed().await, "closed after the answers");

        // A request with a body (served by hyper), then the end of input.
        let mut c = Raw::connect(&s).await;
        c.send(&ingest_request("half-2", &[run_start("r1", "o1")]))
            .await;
        c.s.shutdown().await.unwrap();
        let r = c.response(false).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.json()["ids"].as_array().map(Vec::len), Some(1), "{r:?}");
    })
    .await;
}
