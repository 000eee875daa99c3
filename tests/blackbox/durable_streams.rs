//! Durable Streams (`/v1/stream/*`): the official conformance suite against the real binary,
//! a stream written through one instance read live through another, and exactly-once writes
//! from the real `IdempotentProducer` through a proxy that drops answers and across a `kill -9`.

use crate::common;

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub fn ds_dir() -> std::path::PathBuf {
    conformance_dir().join("durable-streams")
}

pub fn require_install() {
    let suite = ds_dir().join("node_modules/@durable-streams/server-conformance-tests");
    assert!(
        suite.is_dir(),
        "{} is missing: install the pinned npm packages first: `bash tests/conformance/install.sh`",
        suite.display()
    );
}

/// Drops its database when dropped (after the servers that use it).
struct Db(Option<String>);

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(name) = self.0.take() {
            drop_database(name);
        }
    }
}

/// The suite (`conformance.test.mjs` calls its `runConformanceTests` with its `subscriptions`
/// option on), run by the vitest it brings, against this server: all 338 tests pass, none is
/// skipped (the six of its reserved subscription APIs included: webhooks to a receiver the
/// suite runs on loopback, and pull-wake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_passes() {
    require_install();
    bounded(300, async {
        let server = Server::start().await;
        let report = tempfile::NamedTempFile::new().unwrap();
        let out = tokio::process::Command::new("node")
            .current_dir(ds_dir())
            .arg("node_modules/vitest/vitest.mjs")
            .args(["run", "conformance.test.mjs", "--reporter=json"])
            .arg(format!("--outputFile={}", report.path().display()))
            .env("CONFORMANCE_TEST_URL", &server.base)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output()
            .await
            .expect("run vitest");
        let text = std::fs::read_to_string(report.path()).unwrap_or_default();
        let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "no vitest report ({e}); stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let mut failed = Vec::new();
        let mut skipped = Vec::new();
        for file in report["testResults"].as_array().unwrap() {
            for t in file["assertionResults"].as_array().unwrap() {
                let name = t["fullName"].as_str().unwrap_or("").to_string();
                match t["status"].as_str() {
                    Some("passed") => {}
                    Some("failed") => failed.push(format!(
                        "{name}: {}",
                        t["failureMessages"][0]
                            .as_str()
                            .unwrap_or("")
                            .chars()
                            .take(300)
                            .collect::<String>()
                    )),
                    _ => skipped.push(name),
                }
            }
        }
        assert!(
            failed.is_empty(),
            "{} conformance tests failed:\n{}\n\nserver log tail:\n{}",
            failed.len(),
            failed.join("\n"),
            server
                .logs()
                .chars()
                .rev()
                .take(4000)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>()
        );
        assert!(skipped.is_empty(), "conformance tests skipped: {skipped:?}");
        assert_eq!(report["numPassedTests"].as_u64(), Some(338));
        assert_eq!(report["numTotalTests"].as_u64(), Some(338));
    })
    .await
}

pub async fn put(server: &Server, path: &str, content_type: &str, body: &str) -> reqwest::Response {
    server
        .client
        .put(server.url(path))
        .header("content-type", content_type)
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// Reads a JSON-mode stream whole from the start, following `Stream-Next-Offset`.
pub async fn read_all_json(server: &Server, path: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut offset = "-1".to_string();
    loop {
        let r = server
            .client
            .get(server.url(&format!("{path}?offset={offset}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "catch-up read of {path}");
        let up_to_date = r.headers().get("stream-up-to-date").is_some();
        offset = r.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        let page: Vec<Value> = r.json().await.unwrap();
        items.extend(page);
        if up_to_date {
            return items;
        }
    }
}

/// Appended through A, a long-poll waiting on B answers with it (Postgres: the instances share
/// the log and wake each other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_appended_through_one_instance_is_read_live_through_another() {
    bounded(60, async {
        let (name, url) = create_database().await;
        let _db = Db(Some(name));
        let opts = || Opts {
            database_url: Some(url.clone()),
            ..Opts::default()
        };
        let (a, b) = tokio::join!(Server::start_with(opts()), Server::start_with(opts()));
        let path = "/v1/stream/cross-instance";
        let r = put(&a, path, "application/json", "").await;
        assert_eq!(r.status(), 201);
        let mut tail = r.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        for round in 0..5 {
            let poll = {
                let url = b.url(&format!("{path}?offset={tail}&live=long-poll"));
                let client = b.client.clone();
                tokio::spawn(async move { client.get(url).send().await.unwrap() })
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            let started = std::time::Instant::now();
            let r = a
                .client
                .post(a.url(path))
                .header("content-type", "application/json")
                .body(format!("{{\"round\":{round}}}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 204);
            let got = poll.await.unwrap();
            assert_eq!(got.status(), 200, "B's long-poll answers with A's append");
            assert!(
                started.elapsed() < Duration::from_millis(1500),
                "B saw A's append only after {:?}",
                started.elapsed()
            );
            let offset = got.headers()["stream-next-offset"]
                .to_str()
                .unwrap()
                .to_string();
            let items: Vec<Value> = got.json().await.unwrap();
            assert_eq!(items, vec![serde_json::json!({"round": round})]);
            assert!(offset > tail, "offsets grow: {offset} after {tail}");
            // The same offset from either instance.
            let head = b.client.head(b.url(path)).send().await.unwrap();
            assert_eq!(
                head.headers()["stream-next-offset"].to_str().unwrap(),
                offset
            );
            tail = offset;
        }
        assert_eq!(read_all_json(&b, path).await.len(), 5);
    })
    .await
}

/// A TCP proxy in front of the server that loses every `drop_every`-th piece of an answer: it
/// closes that connection instead of passing the piece on. The request was done; the client
/// never learns it. `upstream` is where the server listens now (a restart moves it).
pub struct DroppingProxy {
    pub addr: String,
    upstream: Arc<Mutex<String>>,
    pub dropped: Arc<AtomicU64>,
}

impl DroppingProxy {
    pub async fn start(upstream: &str, drop_every: u64) -> DroppingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let upstream = Arc::new(Mutex::new(upstream.to_string()));
        let dropped = Arc::new(AtomicU64::new(0));
        // Counted over all connections: clients keep a few alive and send everything on them.
        let pieces = Arc::new(AtomicU64::new(0));
        let (up, dr) = (upstream.clone(), dropped.clone());
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let target = up.lock().unwrap().clone();
                let (dr, pieces) = (dr.clone(), pieces.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&target).await else {
                        return; // the client sees a reset and retries
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut cr, &mut sw).await;
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        match sr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(k) => {
                                let n = pieces.fetch_add(1, Ordering::Relaxed) + 1;
                                if n.is_multiple_of(drop_every) {
                                    // The server answered: the request is done. Lose it.
                                    dr.fetch_add(1, Ordering::Relaxed);
                                    break;
                                }
                                if cw.write_all(&buf[..k]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    up.abort();
                });
            }
        });
        DroppingProxy {
            addr,
            upstream,
            dropped,
        }
    }

    pub fn point_at(&self, upstream: &str) {
        *self.upstream.lock().unwrap() = upstream.to_string();
    }
}

/// The real `IdempotentProducer` (tests/conformance/durable-streams/produce.mjs) appends 3,000
/// JSON items through a proxy that loses every 7th answer, and the server is
/// killed with SIGKILL and restarted in the middle. The producer retries what it did not hear
/// back (the client's own backoff fetch); every item it was told is stored is there exactly
/// once, in order, and it was told about all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_writes_exactly_once_through_lost_answers_and_a_kill9() {
    require_install();
    bounded(180, async {
        let mut server = Server::start().await;
        let path = "/v1/stream/exactly-once";
        assert_eq!(
            put(&server, path, "application/json", "").await.status(),
            201
        );
        let upstream = |s: &Server| s.base.trim_start_matches("http://").to_string();
        let proxy = DroppingProxy::start(&upstream(&server), 7).await;
        let total = 3000;
        let mut producer = tokio::process::Command::new("node")
            .current_dir(ds_dir())
            .arg("produce.mjs")
            .arg(format!("http://{}{path}", proxy.addr))
            .arg(total.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run node produce.mjs");
        // Kill the server once some items are in.
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let r = server.client.head(server.url(path)).send().await.unwrap();
            let offset = r.headers()["stream-next-offset"].to_str().unwrap();
            if !offset.starts_with("0000000000000000_") && offset > "0000000000000100_" {
                break;
            }
        }
        server.kill9();
        tokio::time::sleep(Duration::from_millis(500)).await;
        server.restart().await;
        proxy.point_at(&upstream(&server));
        let mut stdout = String::new();
        producer
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .await
            .unwrap();
        let status = producer.wait().await.unwrap();
        let mut stderr = String::new();
        producer
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .await
            .unwrap();
        assert!(status.success(), "produce.mjs failed: {stderr}");
        let result: Value = serde_json::from_str(stdout.trim()).expect("produce.mjs result");
        assert_eq!(result["acknowledged"], total, "{result}");
        assert!(
            proxy.dropped.load(Ordering::Relaxed) > 0,
            "the proxy lost no answer: the test proved nothing"
        );
        let items = read_all_json(&server, path).await;
        let seen: Vec<u64> = items.iter().map(|v| v["i"].as_u64().unwrap()).collect();
        let expected: Vec<u64> = (0..total).collect();
        assert_eq!(
            seen.len(),
            expected.len(),
            "stored {} items for {total} appended",
            seen.len()
        );
        assert_eq!(seen, expected, "every item exactly once, in order");
    })
    .await
}

/// Streams, a fork, a deleted fork and a thread written as a stream, then a restart and a
/// `projections rebuild`: every read answers the same bytes after, and the server's
/// verify-on-drop (`threadstream verify`) finds the log clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_and_forks_survive_a_restart_a_rebuild_and_verify() {
    bounded(90, async {
        let mut server = Server::start().await;
        let src = "/v1/stream/lasting-src";
        assert_eq!(put(&server, src, "text/plain", "one ").await.status(), 201);
        for word in ["two ", "three "] {
            let r = server
                .client
                .post(server.url(src))
                .header("content-type", "text/plain")
                .body(word)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 204);
        }
        let fork_at = server
            .client
            .head(server.url(src))
            .send()
            .await
            .unwrap()
            .headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        for (fork, extra) in [
            ("/v1/stream/lasting-fork", "four"),
            ("/v1/stream/gone-fork", "x"),
        ] {
            let r = server
                .client
                .put(server.url(fork))
                .header("stream-forked-from", src)
                .header("stream-fork-offset", &fork_at)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201, "fork {fork}");
            let r = server
                .client
                .post(server.url(fork))
                .header("content-type", "text/plain")
                .body(extra)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 204);
        }
        let r = server
            .client
            .delete(server.url("/v1/stream/gone-fork"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
        let r = server.client.delete(server.url(src)).send().await.unwrap();
        assert_eq!(
            r.status(),
            204,
            "the source goes (soft: a fork still reads through it)"
        );
        let thread = "/v1/threads/t-lasting";
        assert_eq!(
            put(&server, thread, "application/json", "").await.status(),
            201
        );
        let r = server
            .client
            .post(server.url(thread))
            .header("content-type", "application/json")
            .header("producer-id", "p")
            .header("producer-epoch", "0")
            .header("producer-seq", "0")
            .body(
                json!([
                    run_start("r", "a"),
                    text_delta("r", "a", "hi"),
                    run_finish("r", "a", "completed")
                ])
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);

        async fn snapshot(s: &Server) -> Vec<(u16, String)> {
            let mut out = Vec::new();
            for path in [
                "/v1/stream/lasting-src?offset=-1",
                "/v1/stream/lasting-fork?offset=-1",
                "/v1/stream/gone-fork?offset=-1",
                "/v1/threads/t-lasting?offset=-1",
                "/instance-ai/threads/t-lasting/messages",
            ] {
                let r = s.client.get(s.url(path)).send().await.unwrap();
                out.push((r.status().as_u16(), r.text().await.unwrap()));
            }
            out
        }
        let before = snapshot(&server).await;
        assert_eq!(
            before[0].0, 410,
            "the deleted source is gone to its readers"
        );
        assert_eq!(before[1], (200, "one two three four".to_string()));
        assert_eq!(before[2].0, 404, "the deleted fork");
        server.stop().await;
        let rebuilt = server.rebuild_projections().await;
        assert!(!rebuilt.is_empty());
        server.restart().await;
        // The projector catches up after a restart before the read models answer.
        let mut after = snapshot(&server).await;
        for _ in 0..50 {
            if after == before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            after = snapshot(&server).await;
        }
        assert_eq!(after, before);
        // The source may be re-created only once its last fork is gone.
        let r = put(&server, src, "text/plain", "").await;
        assert_eq!(r.status(), 409);
        let r = server
            .client
            .delete(server.url("/v1/stream/lasting-fork"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
        assert_eq!(put(&server, src, "text/plain", "anew").await.status(), 201);
    })
    .await
}
