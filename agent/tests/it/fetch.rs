//! Outbound safety: `SafeFetcher` against real HTTP servers on loopback, and the `fetch-url`
//! tool through the real runtime with a fake OpenAI provider (a real HTTP server).
//! Loopback is refused like any non-public address; the positive cases reach the test's servers
//! only through the policy's exact-address allowance.

use crate::support;

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::*;
use threadstream_agent::fetch::{is_public, FetchError, FetchPolicy, SafeFetcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A one-route HTTP server: answers every request with `response` (raw bytes, after an optional
/// pause) and counts the connections it accepted.
struct Target {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

async fn target(response: Vec<u8>, pause: Duration) -> Target {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let response = response.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                tokio::time::sleep(pause).await;
                let _ = sock.write_all(&response).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    Target { addr, hits }
}

fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn redirect(to: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )
    .into_bytes()
}

fn allowing(addrs: &[SocketAddr]) -> SafeFetcher {
    SafeFetcher::new(FetchPolicy {
        allowed: addrs.iter().copied().collect::<HashSet<_>>(),
        ..FetchPolicy::default()
    })
}

#[test]
fn address_classes() {
    let refused = [
        "127.0.0.1",
        "127.255.0.9",
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "0.1.2.3",
        "255.255.255.255",
        "224.0.0.1",
        "240.0.0.1",
        "192.0.2.1",
        "198.18.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "ff02::1",
        "2001:db8::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "::127.0.0.1",
        "64:ff9b::a00:1",
    ];
    for a in refused {
        assert!(
            !is_public(a.parse::<IpAddr>().unwrap()),
            "{a} must be refused"
        );
    }
    let allowed = [
        "1.1.1.1",
        "8.8.8.8",
        "172.32.0.1",
        "100.128.0.1",
        "2606:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
    ];
    for a in allowed {
        assert!(
            is_public(a.parse::<IpAddr>().unwrap()),
            "{a} must be allowed"
        );
    }
}

#[tokio::test]
async fn only_http_and_https() {
    let f = SafeFetcher::default();
    for url in ["file:///etc/passwd", "ftp://example.com/x", "gopher://x/"] {
        assert!(
            matches!(f.fetch(url).await, Err(FetchError::Scheme(_))),
            "{url}"
        );
    }
}

#[tokio::test]
async fn non_public_addresses_are_refused_before_connecting() {
    let t = target(ok("secret"), Duration::ZERO).await;
    let port = t.addr.port();
    let f = SafeFetcher::default();
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://[::1]:{port}/"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://10.0.0.1/".to_string(),
    ] {
        let r = f.fetch(&url).await;
        assert!(
            matches!(r, Err(FetchError::NotPublic { .. })),
            "{url}: {r:?}"
        );
    }
    assert_eq!(t.hits.load(Ordering::SeqCst), 0, "no connection was made");
    assert_eq!(
        f.fetch(&format!("http://127.0.0.1:{port}/"))
            .await
            .unwrap_err()
            .to_string(),
        "refused: 127.0.0.1 is a loopback address"
    );
}

#[tokio::test]
async fn an_allowed_address_is_fetched() {
    let t = target(ok("hello"), Duration::ZERO).await;
    let page = allowing(&[t.addr])
        .fetch(&format!("http://{}/x", t.addr))
        .await
        .unwrap();
    assert_eq!(page.status, 200);
    assert_eq!(page.body, "hello");
    assert_eq!(page.content_type, "text/plain");
}

#[tokio::test]
async fn every_redirect_hop_is_checked() {
    let inner = target(ok("internal"), Duration::ZERO).await;
    let outer = target(
        redirect(&format!("http://127.0.0.1:{}/admin", inner.addr.port())),
        Duration::ZERO,
    )
    .await;
    // The first hop is allowed, the redirect's target is not.
    let r = allowing(&[outer.addr])
        .fetch(&format!("http://{}/", outer.addr))
        .await;
    assert!(matches!(r, Err(FetchError::NotPublic { .. })), "{r:?}");
    assert_eq!(outer.hits.load(Ordering::SeqCst), 1);
    assert_eq!(
        inner.hits.load(Ordering::SeqCst),
        0,
        "the redirect was not followed"
    );

    // Allowed at every hop, the redirect is followed.
    let page = allowing(&[outer.addr, inner.addr])
        .fetch(&format!("http://{}/", outer.addr))
        .await
        .unwrap();
    assert_eq!(page.body, "internal");
    assert!(page.url.ends_with("/admin"), "{}", page.url);
}

#[tokio::test]
async fn redirect_loops_stop() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    // A server redirecting to itself forever.
    let t = {
        let l = TcpListener::bind(addr).await.unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let c = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(&redirect(&format!("http://{addr}/again")))
                    .await;
            }
        });
        Target { addr, hits }
    };
    let r = allowing(&[t.addr]).fetch(&format!("http://{addr}/")).await;
    assert_eq!(r, Err(FetchError::TooManyRedirects(5)));
    assert_eq!(t.hits.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn bodies_over_the_cap_fail_with_or_without_a_length() {
    let big = "x".repeat(2000);
    let with_length = target(ok(&big), Duration::ZERO).await;
    let chunked = target(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
            big.len()
        )
        .into_bytes(),
        Duration::ZERO,
    )
    .await;
    let policy = |a: SocketAddr| {
        SafeFetcher::new(FetchPolicy {
            max_bytes: 1000,
            allowed: [a].into_iter().collect(),
            ..FetchPolicy::default()
        })
    };
    for t in [&with_length, &chunked] {
        let r = policy(t.addr).fetch(&format!("http://{}/", t.addr)).await;
        assert_eq!(r, Err(FetchError::TooLarge(1000)));
    }
    // At the cap it is fine.
    let small = target(ok(&"y".repeat(1000)), Duration::ZERO).await;
    let page = policy(small.addr)
        .fetch(&format!("http://{}/", small.addr))
        .await
        .unwrap();
    assert_eq!(page.body.len(), 1000);
}

#[tokio::test]
async fn slow_servers_time_out() {
    let t = target(ok("late"), Duration::from_secs(5)).await;
    let f = SafeFetcher::new(FetchPolicy {
        timeout: Duration::from_millis(500),
        allowed: [t.addr].into_iter().collect(),
        ..FetchPolicy::default()
    });
    let started = std::time::Instant::now();
    let r = f.fetch(&format!("http://{}/", t.addr)).await;
    assert_eq!(r, Err(FetchError::Timeout(1)));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn binary_content_is_not_returned() {
    let t = target(
        b"HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: 3\r\nconnection: close\r\n\r\nPNG".to_vec(),
        Duration::ZERO,
    )
    .await;
    let r = allowing(&[t.addr])
        .fetch(&format!("http://{}/", t.addr))
        .await;
    assert_eq!(r, Err(FetchError::NotText("image/png".into())));
}

/// The tool through the runtime: off by default (not offered to the model), and when on, a
/// loopback URL the model asks for ends as a `tool-error` naming the refusal, with no connection
/// made.
#[tokio::test]
async fn the_fetch_url_tool_is_off_by_default_and_refuses_loopback() {
    bounded(120, async {
        let t = target(ok("secret"), Duration::ZERO).await;
        let offered = |requests: Vec<serde_json::Value>| -> bool {
            requests.iter().any(|r| {
                r["tools"].as_array().is_some_and(|tools| {
                    tools
                        .iter()
                        .any(|t| t["function"]["name"] == "fetch-url" || t["name"] == "fetch-url")
                })
            })
        };

        let fake = FakeLlm::start(vec![oai_answer("Hello.")]).await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t0", "r0", "hi").await;
        wait_finish(&h, "t0", "r0").await;
        let requests = fake.requests();
        assert!(
            requests.iter().any(|r| r["tools"].is_array()),
            "{requests:?}"
        );
        assert!(!offered(requests), "fetch-url offered although not enabled");

        let fake = FakeLlm::start(vec![
            oai_call(
                "c1",
                "fetch-url",
                json!({"url": format!("http://127.0.0.1:{}/", t.addr.port())}),
            ),
            oai_answer("I could not fetch it."),
        ])
        .await;
        let mut config = openai_config(&fake);
        config.fetch_url = Some(FetchPolicy::default());
        let h = harness(config).await;
        start(&h, "t1", "r1", "fetch my local admin page").await;
        let events = wait_finish(&h, "t1", "r1").await;
        assert!(
            offered(fake.requests()),
            "fetch-url not offered when enabled"
        );
        let errors = of_type(&events, "tool-error");
        assert_eq!(errors.len(), 1, "{events:?}");
        let error = payload(errors[0]);
        assert_eq!(
            error["error"], "refused: 127.0.0.1 is a loopback address",
            "{error}"
        );
        assert!(of_type(&events, "tool-result").is_empty());
        assert_eq!(t.hits.load(Ordering::SeqCst), 0, "no connection was made");
    })
    .await;
}
