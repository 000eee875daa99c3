//! Request heads whose framing is ambiguous (RFC 9112 sections 2.2, 5.2 and 6.3), over raw
//! sockets: each is answered with a 4xx and a close, or read exactly as the RFC says — never as
//! two requests where the client meant one. Each case ends its bytes with a second, smuggled
//! request (`GET /instance-ai/threads/smuggled/status`) that must never be answered.

use crate::common;

use std::time::Duration;

use crate::raw_http::{get, Raw, RawResp};
use common::*;

const SMUGGLED: &[u8] = b"GET /instance-ai/threads/smuggled/status HTTP/1.1\r\nHost: t\r\n\r\n";

/// Sends `head` (and the smuggled request after it), reads one answer, and checks that the
/// connection then closes with nothing more said.
async fn one_answer_then_close(s: &Server, head: &[u8]) -> RawResp {
    let mut c = Raw::connect(s).await;
    let mut bytes = head.to_vec();
    bytes.extend_from_slice(SMUGGLED);
    c.send(&bytes).await;
    let r = c.response(false).await;
    assert!(
        c.closes_within(Duration::from_secs(5)).await,
        "{}: the connection closes after the answer",
        String::from_utf8_lossy(head)
    );
    assert!(
        c.buf.is_empty(),
        "{}: a second answer: {}",
        String::from_utf8_lossy(head),
        String::from_utf8_lossy(&c.buf)
    );
    r
}

fn is_4xx(r: &RawResp) -> bool {
    (400..500).contains(&r.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_and_transfer_encoding_together_are_one_request_then_a_close() {
    bounded(60, async {
        let s = Server::start().await;
        // Either order, and `Content-Length: 0`: the body is the chunked one (empty here), per
        // RFC 9112 section 6.3, and the connection closes after the answer.
        for head in [
            &b"POST /instance-ai/threads/te-1/events HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..],
            b"POST /instance-ai/threads/te-1/events HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
            b"POST /instance-ai/threads/te-1/events HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ] {
            let r = one_answer_then_close(&s, head).await;
            assert_ne!(r.status, 0);
        }
        // A transfer coding that does not end in chunked, and TE in HTTP/1.0: 400.
        for head in [
            &b"POST /instance-ai/threads/te-2/events HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}"[..],
            b"POST /instance-ai/threads/te-2/events HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ] {
            let r = one_answer_then_close(&s, head).await;
            assert_eq!(r.status, 400, "{r:?}");
        }
        assert_eq!(s.count_events().await, 0, "nothing was ingested");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differing_content_lengths_are_refused() {
    bounded(60, async {
        let s = Server::start().await;
        for head in [
            &b"POST /instance-ai/threads/cl-1/events HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nContent-Length: 2\r\n\r\n{}"[..],
            b"POST /instance-ai/threads/cl-1/events HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 0\r\n\r\n{}",
            b"POST /instance-ai/threads/cl-1/events HTTP/1.1\r\nHost: t\r\nContent-Length: 2, 0\r\n\r\n{}",
            b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: +2\r\n\r\n{}",
        ] {
            let r = one_answer_then_close(&s, head).await;
            assert_eq!(r.status, 400, "{}: {r:?}", String::from_utf8_lossy(head));
        }
        // The same length twice is one length (RFC 9110 section 8.6): one request, kept alive.
        let mut c = Raw::connect(&s).await;
        let mut bytes = b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n".to_vec();
        bytes.extend(get("/healthz"));
        c.send(&bytes).await;
        assert_eq!(c.response(false).await.status, 200);
        assert_eq!(c.response(false).await.status, 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obs_fold_and_bare_cr_are_refused() {
    bounded(60, async {
        let s = Server::start().await;
        for head in [
            // A field line continued on the next (obs-fold), hiding a Content-Length.
            &b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n Content-Length: 56\r\n\r\n"[..],
            b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n\tb\r\n\r\n",
            b"POST /instance-ai/threads/f-1/events HTTP/1.1\r\nHost: t\r\nContent-Length:\r\n 2\r\n\r\n{}",
            // A bare CR as a line end.
            b"GET /healthz HTTP/1.1\rHost: t\r\n\r\n",
            // Whitespace between a field name and its colon.
            b"POST /instance-ai/threads/f-1/events HTTP/1.1\r\nHost: t\r\nContent-Length : 2\r\n\r\n{}",
        ] {
            let r = one_answer_then_close(&s, head).await;
            assert_eq!(r.status, 400, "{}: {r:?}", String::from_utf8_lossy(head));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_lf_line_ends_read_as_one_request_each() {
    bounded(60, async {
        let s = Server::start().await;
        // RFC 9112 section 2.2: a recipient may take a bare LF as a line end; then each head
        // below is one request, and the next one follows it.
        let mut c = Raw::connect(&s).await;
        let mut bytes = b"GET /healthz HTTP/1.1\nHost: t\n\n".to_vec();
        bytes.extend(b"GET /no/such/route HTTP/1.1\r\nHost: t\n\r\n");
        bytes.extend(get("/healthz"));
        c.send(&bytes).await;
        assert_eq!(c.response(false).await.status, 200);
        assert_eq!(c.response(false).await.status, 404);
        assert_eq!(c.response(false).await.status, 200);
        // A body after bare-LF heads is framed by its Content-Length like any other.
        let body = br#"{"events":[]}"#;
        let mut c = Raw::connect(&s).await;
        let mut bytes = format!(
            "POST /instance-ai/threads/lf-1/events HTTP/1.1\nHost: t\nContent-Type: application/json\nContent-Length: {}\n\n",
            body.len()
        )
        .into_bytes();
        bytes.extend(body);
        bytes.extend(get("/healthz"));
        c.send(&bytes).await;
        let r = c.response(false).await;
        assert!(r.status == 200 || is_4xx(&r), "{r:?}");
        assert_eq!(c.response(false).await.status, 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_long_request_lines_and_header_lines_are_refused() {
    bounded(60, async {
        let s = Server::start().await;
        let mut line = b"GET /".to_vec();
        line.resize(70 * 1024, b'a');
        line.extend_from_slice(b" HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut field = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Long: ".to_vec();
        field.resize(70 * 1024, b'b');
        field.extend_from_slice(b"\r\n\r\n");
        for head in [line, field] {
            let r = one_answer_then_close(&s, &head).await;
            assert!(
                r.status == 431 || r.status == 414,
                "{} {r:?}",
                String::from_utf8_lossy(&head[..40])
            );
        }
        assert_eq!(s.get("/healthz").await.status, 200);
    })
    .await;
}
