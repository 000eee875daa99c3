//! The server's own HTTP/1.1 connection (http1/src/conn.rs) over raw sockets: keep-alive,
//! HEAD, `Connection: close`, HTTP/1.0, pipelining, refusals (400, 431), a request with a body
//! on a connection that served body-less ones (handed to hyper), chunked SSE, and a client that
//! goes away in the middle of a stream giving its SSE slot back at once.

use crate::common;

use std::time::{Duration, Instant};

use crate::raw_http::{get, ingest_request, Raw};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_head_and_close() {
    bounded(60, async {
        let s = Server::start().await;
        s.ingest_ok("h1-a", &[run_start("r1", "o1")]).await;
        let mut c = Raw::connect(&s).await;
        // Several requests, one connection.
        for _ in 0..3 {
            c.send(&get("/healthz")).await;
            let r = c.response(false).await;
            assert_eq!(r.status_line, "HTTP/1.1 200 OK");
            assert!(
                r.header("date").is_some_and(|d| d.ends_with("GMT")),
                "{r:?}"
            );
            assert_eq!(r.header("connection"), None, "{r:?}");
        }
        c.send(&get("/instance-ai/threads/h1-a/status")).await;
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["hasActiveRun"], true, "{r:?}");
        c.send(&get("/no/such/route")).await;
        assert_eq!(c.response(false).await.status, 404);
        // HEAD: the GET's headers, no body (the next response parses right after the head).
        c.send(b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n").await;
        let head = c.response(true).await;
        assert_eq!(head.status, 200);
        let len: usize = head
            .header("content-length")
            .expect("content-length")
            .parse()
            .unwrap();
        assert!(len > 0, "{head:?}");
        c.send(&get("/healthz")).await;
        let r = c.response(false).await;
        assert_eq!(r.body.len(), len, "{r:?}");
        // Connection: close is answered, then the connection ends.
        c.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await;
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("connection"), Some("close"), "{r:?}");
        assert!(
            c.closed().await,
            "the server closed after Connection: close"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_requests_get_http10_answers_and_a_close() {
    bounded(60, async {
        let s = Server::start().await;
        let mut c = Raw::connect(&s).await;
        c.send(b"GET /healthz HTTP/1.0\r\n\r\n").await;
        let r = c.response(false).await;
        assert_eq!(r.status_line, "HTTP/1.0 200 OK");
        assert_eq!(r.json()["ok"], true, "{r:?}");
        assert!(c.closed().await);
        // A stream to an HTTP/1.0 client: no chunked encoding, the body ends with the connection.
        let mut c = Raw::connect(&s).await;
        c.send(b"GET /instance-ai/events/h10-sse HTTP/1.0\r\nAccept: text/event-stream\r\n\r\n")
            .await;
        let r = c.head().await;
        assert_eq!(r.status_line, "HTTP/1.0 200 OK");
        assert_eq!(r.header("transfer-encoding"), None, "{r:?}");
        s.ingest_ok("h10-sse", &[run_start("r1", "o1")]).await;
        while !String::from_utf8_lossy(&c.buf).contains("\n\n") {
            assert!(c.fill().await, "stream ended early");
        }
        let text = String::from_utf8_lossy(&c.buf).to_string();
        assert!(text.starts_with("id: "), "raw SSE frames: {text:?}");
        assert!(text.contains("run-start"), "{text:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_heads_are_refused() {
    bounded(60, async {
        // Our connection's JSON refusals (hyper's 400 has no body).
        let s = Server::start_with(Opts {
            extra_args: vec!["--http1-engine".into(), "threadstream".into()],
            ..Opts::default()
        })
        .await;
        let mut c = Raw::connect(&s).await;
        c.send(b"this is not http\r\n\r\n").await;
        let r = c.response(false).await;
        assert_eq!(r.status, 400, "{r:?}");
        assert_eq!(r.json()["error"]["code"], "bad_request");
        assert_eq!(r.header("connection"), Some("close"));
        assert!(c.closed().await);

        // A head of 70 KB (the bound is 64 KB), sent whole before the answer is read.
        let mut c = Raw::connect(&s).await;
        let mut big = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Filler: ".to_vec();
        big.resize(70 * 1024, b'a');
        big.extend_from_slice(b"\r\n\r\n");
        c.send(&big).await;
        let r = c.response(false).await;
        assert_eq!(r.status, 431, "{r:?}");
        assert_eq!(r.json()["error"]["code"], "request_header_fields_too_large");
        assert!(c.closed().await);

        // The server is fine afterwards.
        assert_eq!(s.get("/healthz").await.status, 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_trickled_past_the_head_timeout_is_refused_and_an_idle_connection_stays() {
    bounded(60, async {
        // Our connection's rule (hyper's header-read timeout also counts the wait for a first
        // byte, and closes without an answer).
        let s = Server::start_with(Opts {
            extra_args: vec![
                "--head-timeout-secs".into(),
                "2".into(),
                "--http1-engine".into(),
                "threadstream".into(),
            ],
            ..Opts::default()
        })
        .await;
        // Connected, nothing sent: no head has begun, so no timeout applies.
        let mut idle = Raw::connect(&s).await;
        // A head sent a few bytes at a time, never finished (a slowloris client).
        let mut slow = Raw::connect(&s).await;
        let started = Instant::now();
        slow.send(b"GET /healthz HTTP/1.1\r\n").await;
        // More of it keeps arriving: the timeout counts from the head's first byte.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            slow.send(b"X-Slow: a\r\n").await;
        }
        let r = slow.response(false).await;
        let waited = started.elapsed();
        assert_eq!(r.status, 408, "{r:?}");
        assert_eq!(r.json()["error"]["code"], "request_timeout", "{r:?}");
        assert_eq!(r.header("connection"), Some("close"));
        assert!(
            waited >= Duration::from_millis(1900) && waited < Duration::from_secs(5),
            "refused after {waited:?}, the timeout is 2 s"
        );

        // The idle connection outlived the timeout and still serves a request.
        tokio::time::sleep(Duration::from_millis(500)).await;
        idle.send(&get("/healthz")).await;
        assert_eq!(idle.response(false).await.status, 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_body_after_body_less_ones_is_served() {
    bounded(60, async {
        let s = Server::start().await;
        let mut c = Raw::connect(&s).await;
        c.send(&get("/healthz")).await;
        assert_eq!(c.response(false).await.status, 200);
        c.send(&ingest_request(
            "h1-post",
            &[run_start("r1", "o1"), text_delta("r1", "o1", "hi")],
        ))
        .await;
        let r = c.response(false).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["ids"].as_array().map(Vec::len), Some(2), "{r:?}");
        // Body-less requests still work on the connection afterwards.
        c.send(&get("/instance-ai/threads/h1-post/status")).await;
        let r = c.response(false).await;
        assert_eq!(r.json()["hasActiveRun"], true, "{r:?}");
        assert_eq!(s.count_events().await, 3, "thread-created + 2 events");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    bounded(60, async {
        let s = Server::start().await;
        s.ingest_ok("h1-pipe", &[run_start("r1", "o1")]).await;
        let mut c = Raw::connect(&s).await;
        // Body-less ones, then one with a body, then body-less again: all in one write.
        let mut batch = Vec::new();
        batch.extend(get("/healthz"));
        batch.extend(b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
        batch.extend(get("/instance-ai/threads/h1-pipe/status"));
        batch.extend(ingest_request("h1-pipe", &[text_delta("r1", "o1", "x")]));
        batch.extend(get("/no/such/route"));
        c.send(&batch).await;
        assert_eq!(c.response(false).await.status, 200);
        let head = c.response(true).await;
        assert_eq!(head.status, 200);
        assert!(head.header("content-length").is_some());
        assert_eq!(c.response(false).await.json()["hasActiveRun"], true);
        let r = c.response(false).await;
        assert_eq!(r.json()["ids"].as_array().map(Vec::len), Some(1), "{r:?}");
        assert_eq!(c.response(false).await.status, 404);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_over_a_raw_connection_is_chunked_and_large_bodies_arrive_whole() {
    bounded(60, async {
        let s = Server::start().await;
        // 400 events: the export and the stream's replay are each many KB.
        let mut events = vec![run_start("r1", "o1")];
        events.extend((0..399).map(|i| text_delta("r1", "o1", &format!("{i:0>200}"))));
        for batch in events.chunks(50) {
            s.ingest_ok("h1-big", batch).await;
        }
        let expected = s.get("/instance-ai/threads/h1-big/export").await;
        assert_eq!(expected.status, 200);
        let mut c = Raw::connect(&s).await;
        c.send(&get("/instance-ai/threads/h1-big/export")).await;
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        assert!(r.body.len() > 80_000, "{} bytes", r.body.len());
        assert_eq!(String::from_utf8(r.body).unwrap(), expected.text);

        c.send(&get("/instance-ai/events/h1-big")).await;
        let r = c.head().await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{r:?}");
        assert!(r
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream")));
        let mut parser = SseParser::new();
        let mut got = Vec::new();
        while got.len() < 400 {
            let chunk = c.chunk().await.expect("the stream goes on");
            for item in parser.push(&chunk) {
                if let SseItem::Event(e) = item {
                    got.push(e);
                }
            }
        }
        assert_strictly_increasing(&got, "raw stream");
        assert_eq!(got.len(), 400);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_stream_frees_its_slot_at_once() {
    bounded(60, async {
        let s = Server::start_with(Opts {
            // No ping for a minute: only noticing the closed socket frees the slot in time.
            sse_ping_secs: 60,
            extra_args: vec!["--max-sse-per-user".into(), "1".into()],
            ..Opts::default()
        })
        .await;
        let mut c = Raw::connect(&s).await;
        c.send(&get("/instance-ai/events/h1-leave")).await;
        assert_eq!(c.head().await.status, 200);
        s.ingest_ok("h1-leave", &[run_start("r1", "o1")]).await;
        let frame = c.chunk().await.expect("a frame");
        assert!(String::from_utf8_lossy(&frame).contains("run-start"));
        let r = s
            .try_sse("h1-leave", Cursor::None)
            .await
            .err()
            .expect("a second stream is over the limit");
        assert_eq!(r.status, 429, "{}", r.text);
        drop(c);
        let left = Instant::now();
        loop {
            match s.try_sse("h1-leave", Cursor::None).await {
                Ok(_) => break,
                Err(r) if r.status == 429 && left.elapsed() < Duration::from_secs(3) => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(r) => panic!(
                    "slot not freed {:?} after the client left: {} {}",
                    left.elapsed(),
                    r.status,
                    r.text
                ),
            }
        }
    })
    .await;
}
