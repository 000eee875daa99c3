//! The change feed to NATS JetStream (`--change-feed`, docs/integrations.md "Change feed"),
//! black-box: each test starts its own `nats-server -js` (Debian's, on a free loopback port,
//! with its own store folder) and reads the stream back with a JetStream consumer
//! (`async-nats`). The stream must equal the log: every event once, in id order, its
//! `Nats-Msg-Id` the id, its subject the thread's token, its body the event's export line.
//!
//! - a load of chats, ingest and a Durable Stream with a `kill -9` of the publishing instance
//!   mid-load (on SQLite the one instance restarts; on Postgres the other takes over);
//! - two instances on one Postgres: one publishes, the other stands by;
//! - NATS stopped for 10 s: `/readyz` stays 200, the lag rises, the backlog arrives, the lag
//!   falls to 0;
//! - an erasure leaves no message of the thread in the stream, and its tombstone is there.
//! - the acknowledged id is stored: a stream that lost everything while the server was away is
//!   not refilled from the start of the log, only from after that id.

use crate::common;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::multi_instance::Db;

/// The stream every test's server publishes to (each test has its own NATS server).
const STREAM: &str = "THREADSTREAM";

/// A `nats-server -js` of one test: a free loopback port and a store folder kept across
/// restarts. Dropping it kills the server.
struct Nats {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Nats {
    fn start() -> Nats {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut nats = Nats {
            port,
            dir: tempfile::Builder::new()
                .prefix("threadstream-nats-")
                .tempdir()
                .expect("temp dir"),
            child: None,
        };
        nats.spawn();
        nats
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "nats-server already running");
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .arg("-sd")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server (Debian's nats-server package)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One message of the stream, as a consumer sees it.
#[derive(Debug, Clone)]
struct Msg {
    subject: String,
    msg_id: i64,
    thread_header: String,
    type_header: String,
    run_header: Option<String>,
    body: Value,
}

/// Every message the stream holds, in stream order, read by an ephemeral pull consumer.
async fn stream_messages(nats: &Nats) -> Vec<Msg> {
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let stream = js.get_stream(STREAM).await.expect("the feed's stream");
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
            ack_policy: async_nats::jetstream::consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .expect("a consumer");
    let mut out = Vec::new();
    loop {
        let mut batch = consumer
            .fetch()
            .max_messages(1_000)
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .expect("fetch");
        let mut got = 0;
        while let Some(m) = batch.next().await {
            let m = m.expect("a message");
            got += 1;
            let headers = m.headers.clone().unwrap_or_default();
            let header = |name: &str| headers.get(name).map(|v| v.as_str().to_string());
            out.push(Msg {
                subject: m.subject.to_string(),
                msg_id: header("Nats-Msg-Id")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no Nats-Msg-Id: {headers:?}")),
                thread_header: header("Threadstream-Thread").expect("Threadstream-Thread"),
                type_header: header("Threadstream-Type").expect("Threadstream-Type"),
                run_header: header("Threadstream-Run"),
                body: serde_json::from_slice(&m.payload).expect("a JSON body"),
            });
        }
        if got == 0 {
            return out;
        }
    }
}

/// The whole log as the admin export writes it, one parsed line per event.
async fn log_lines(s: &Server) -> Vec<Value> {
    let r = s
        .get("/instance-ai/admin/export?from=0&to=4102444800000")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
        .lines()
        .map(|l| serde_json::from_str(l).expect("an NDJSON line"))
        .collect()
}

/// The stream holds exactly the log: each event once, in id order, with the headers and body
/// the docs promise.
fn assert_stream_is_the_log(msgs: &[Msg], log: &[Value]) {
    let ids: Vec<i64> = msgs.iter().map(|m| m.msg_id).collect();
    let log_ids: Vec<i64> = log.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "an id is in the stream twice");
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "the stream is not in id order"
    );
    let missing: Vec<&i64> = log_ids.iter().filter(|i| !unique.contains(i)).collect();
    let extra: Vec<&i64> = ids
        .iter()
        .filter(|i| !log_ids.contains(i))
        .take(10)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "stream ≠ log: {} missing (first {:?}), extra {:?}",
        missing.len(),
        missing.iter().take(10).collect::<Vec<_>>(),
        extra
    );
    for (m, e) in msgs.iter().zip(log) {
        assert_eq!(
            &m.body, e,
            "message {} is not the event's export line",
            m.msg_id
        );
        let thread = e["thread"].as_str().unwrap();
        let token = m
            .subject
            .strip_prefix("threadstream.events.")
            .unwrap_or_else(|| panic!("subject {}", m.subject));
        // The documented decoder: plain percent-decoding.
        let decoded = percent_encoding::percent_decode_str(token)
            .decode_utf8()
            .expect("UTF-8");
        assert_eq!(decoded, thread, "subject {}", m.subject);
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_%".contains(&b)),
            "{token}"
        );
        assert_eq!(m.thread_header, thread);
        assert_eq!(m.type_header, e["type"].as_str().unwrap());
        let run = e["run"].as_str().unwrap();
        assert_eq!(m.run_header.as_deref(), (!run.is_empty()).then_some(run));
    }
}

/// `GET /instance-ai/admin/change-feed`.
async fn feed_status(s: &Server) -> Value {
    s.get("/instance-ai/admin/change-feed")
        .await
        .ok_json("GET /instance-ai/admin/change-feed")
}

/// Waits until `s` says the stream holds the whole log (lag 0 at a head of at least `head`).
async fn wait_caught_up(s: &Server, head: i64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = feed_status(s).await;
        if st["lagEvents"] == 0 && st["headId"].as_i64() >= Some(head) && st["publishing"] == true {
            return st;
        }
        assert!(Instant::now() < deadline, "the feed did not catch up: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn feed_opts(nats: &Nats) -> Opts {
    Opts {
        extra_args: vec!["--change-feed".into(), nats.url()],
        ..Opts::default()
    }
}

/// Ingests a run of `deltas` text deltas into `thread` in posts of 5 (errors tolerated: the
/// instance may be killed under it).
async fn ingest_run(s: &Server, thread: String, run: String, deltas: usize) {
    let mut events = vec![run_start(&run, "agent")];
    events.extend((0..deltas).map(|i| text_delta(&run, "agent", &format!("token {i} "))));
    events.push(run_finish(&run, "agent", "completed"));
    let url = s.url(&format!("/instance-ai/threads/{}/events", enc(&thread)));
    for posted in events.chunks(5) {
        let _ = s
            .try_send(s.client.post(&url).json(&json!({ "events": posted })))
            .await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Chats, ingest and a Durable Stream on `s`, concurrently.
async fn load(s: &Server, round: usize) {
    let mut chats = Vec::new();
    for i in 0..3 {
        chats.push(
            s.try_send(
                s.client
                    .post(s.url(&format!("/instance-ai/chat/cf-chat-{round}-{i}")))
                    .json(&json!({ "message": "hello feed" })),
            ),
        );
    }
    let ingests = (0..4).map(|i| {
        ingest_run(
            s,
            format!("cf-ingest-{round}-{i}"),
            format!("run-{round}-{i}"),
            40,
        )
    });
    // A Durable Stream: its id holds a `/`, which a subject token escapes.
    let stream = async {
        let path = format!("/v1/stream/cf/stream-{round}");
        let _ = s
            .try_send(
                s.client
                    .put(s.url(&path))
                    .header("content-type", "application/json")
                    .body("[1,2]"),
            )
            .await;
        for v in 0..5 {
            let _ = s
                .try_send(
                    s.client
                        .post(s.url(&path))
                        .header("content-type", "application/json")
                        .body(format!("[{v}]")),
                )
                .await;
        }
    };
    let (_, _, _) = tokio::join!(
        futures::future::join_all(chats),
        futures::future::join_all(ingests),
        stream
    );
}

/// The log's head once nothing was appended for 1.5 s (the chats' runs go on after their
/// requests are answered).
async fn settled_head(s: &Server) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = (-1, Instant::now());
    loop {
        let head = feed_status(s).await["headId"].as_i64().unwrap();
        if head != last.0 {
            last = (head, Instant::now());
        } else if last.1.elapsed() >= Duration::from_millis(1_500) {
            return head;
        }
        assert!(Instant::now() < deadline, "the log did not settle");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `kill -9` of `s`'s process after `delay` (while a load borrows the server).
async fn kill9_after(s: &Server, delay: Duration) {
    tokio::time::sleep(delay).await;
    let pid = s.pid().expect("a running server");
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Waits until the stream holds at least `n` messages.
async fn wait_messages(nats: &Nats, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let have = stream_messages(nats).await.len();
        if have >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the stream holds {have} messages, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_exactly_once_in_id_order_through_a_kill_of_the_publisher() {
    bounded(240, async {
        let nats = Nats::start();
        match store_kind() {
            StoreKind::Sqlite => {
                let mut s = Server::start_with(feed_opts(&nats)).await;
                load(&s, 0).await;
                wait_messages(&nats, 20).await;
                // Killed while a second load is under way; then started again on its store.
                tokio::join!(load(&s, 1), kill9_after(&s, Duration::from_millis(100)));
                s.kill9();
                s.restart().await;
                load(&s, 2).await;
                let head = settled_head(&s).await;
                let st = wait_caught_up(&s, head).await;
                assert_eq!(st["publishedId"], head, "{st}");
                let msgs = stream_messages(&nats).await;
                assert_stream_is_the_log(&msgs, &log_lines(&s).await);
            }
            StoreKind::Postgres => {
                let (name, url) = create_database().await;
                let _db = Db(Some(name));
                let shared = |nats: &Nats| Opts {
                    database_url: Some(url.clone()),
                    ..feed_opts(nats)
                };
                let a = Server::start_with(shared(&nats)).await;
                let b = Server::start_with(shared(&nats)).await;
                load(&a, 0).await;
                wait_messages(&nats, 20).await;
                // The publisher dies mid-load; the other instance takes over.
                let (pub_is_a, st) = {
                    let sa = feed_status(&a).await;
                    (sa["publishing"] == true, sa)
                };
                let (mut publisher, other) = if pub_is_a { (a, b) } else { (b, a) };
                assert_eq!(
                    feed_status(&other).await["publishing"],
                    false,
                    "two publishers: {st}"
                );
                tokio::join!(
                    load(&other, 1),
                    load(&publisher, 2),
                    kill9_after(&publisher, Duration::from_millis(100))
                );
                publisher.kill9();
                load(&other, 3).await;
                let head = settled_head(&other).await;
                let st = wait_caught_up(&other, head).await;
                assert_eq!(st["publishedId"], head, "{st}");
                let msgs = stream_messages(&nats).await;
                assert_stream_is_the_log(&msgs, &log_lines(&other).await);
                drop(publisher);
                drop(other);
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_instances_on_one_postgres_only_one_publishes() {
    bounded(120, async {
        let nats = Nats::start();
        let (name, url) = create_database().await;
        let _db = Db(Some(name));
        let opts = Opts {
            database_url: Some(url.clone()),
            ..feed_opts(&nats)
        };
        let (a, b) = tokio::join!(Server::start_with(opts.clone()), Server::start_with(opts));
        let ids_a = a
            .ingest_ok(
                "cf-two-a",
                &[run_start("r1", "agent"), text_delta("r1", "agent", "a")],
            )
            .await;
        let ids_b = b
            .ingest_ok(
                "cf-two-b",
                &[run_start("r2", "agent"), text_delta("r2", "agent", "b")],
            )
            .await;
        let head = *ids_a.iter().chain(&ids_b).max().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let (sa, sb) = loop {
            let (sa, sb) = (feed_status(&a).await, feed_status(&b).await);
            let caught = [&sa, &sb].iter().any(|s| {
                s["publishing"] == true && s["lagEvents"] == 0 && s["headId"].as_i64() >= Some(head)
            });
            if caught {
                break (sa, sb);
            }
            assert!(
                Instant::now() < deadline,
                "no instance caught up: {sa} {sb}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_ne!(
            sa["publishing"], sb["publishing"],
            "exactly one publishes: {sa} {sb}"
        );
        let standby = if sa["publishing"] == true { &sb } else { &sa };
        assert_eq!(standby["publishedEvents"], 0, "{standby}");
        assert_eq!(standby["connected"], false, "{standby}");
        // The metric says the same.
        for (s, st) in [(&a, &sa), (&b, &sb)] {
            let text = s.get("/metrics").await.text;
            let want = if st["publishing"] == true { 1 } else { 0 };
            assert!(
                text.lines()
                    .any(|l| l == format!("threadstream_change_feed_publishing {want}")),
                "{text}"
            );
        }
        let msgs = stream_messages(&nats).await;
        assert_stream_is_the_log(&msgs, &log_lines(&a).await);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_down_for_ten_seconds_delays_the_feed_and_nothing_else() {
    bounded(180, async {
        let mut nats = Nats::start();
        let s = Server::start_with(feed_opts(&nats)).await;
        let ids = s
            .ingest_ok(
                "cf-down",
                &[
                    run_start("r1", "agent"),
                    text_delta("r1", "agent", "before"),
                ],
            )
            .await;
        wait_caught_up(&s, *ids.last().unwrap()).await;

        nats.kill();
        let down = Instant::now();
        let mut lags = Vec::new();
        let mut n = 0;
        while down.elapsed() < Duration::from_secs(10) {
            n += 1;
            s.ingest_ok(
                "cf-down",
                &[text_delta("r1", "agent", &format!("while down {n} "))],
            )
            .await;
            let ready = s.get("/readyz").await;
            assert_eq!(ready.status, 200, "/readyz with NATS down: {}", ready.text);
            let st = feed_status(&s).await;
            lags.push((
                st["lagEvents"].as_i64().unwrap(),
                st["lagSeconds"].as_f64().unwrap(),
            ));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let (last_events, last_secs) = *lags.last().unwrap();
        assert!(
            last_events >= n && last_secs >= 8.0,
            "the lag did not rise while NATS was down: {lags:?}"
        );
        let metrics = s.get("/metrics").await.text;
        let gauge = metrics
            .lines()
            .find_map(|l| l.strip_prefix("threadstream_change_feed_lag_events "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no lag gauge: {metrics}"));
        assert!(gauge >= n as f64, "lag gauge {gauge} < {n}");

        nats.spawn();
        let head = s
            .ingest_ok("cf-down", &[run_finish("r1", "agent", "completed")])
            .await[0];
        let st = wait_caught_up(&s, head).await;
        assert_eq!(st["lagSeconds"], 0.0, "{st}");
        let metrics = s.get("/metrics").await.text;
        assert!(
            metrics
                .lines()
                .any(|l| l == "threadstream_change_feed_lag_events 0"),
            "{metrics}"
        );
        let msgs = stream_messages(&nats).await;
        assert_stream_is_the_log(&msgs, &log_lines(&s).await);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_leaves_no_message_of_the_thread_in_the_stream() {
    bounded(120, async {
        let nats = Nats::start();
        let s = Server::start_with(feed_opts(&nats)).await;
        s.ingest_ok(
            "cf-keep",
            &[run_start("k", "agent"), text_delta("k", "agent", "kept")],
        )
        .await;
        let ids = s
            .ingest_ok(
                "cf-erase.me",
                &[
                    run_start("e", "agent"),
                    text_delta("e", "agent", "a secret"),
                ],
            )
            .await;
        wait_caught_up(&s, *ids.last().unwrap()).await;
        let before = stream_messages(&nats).await;
        let erased_subject = "threadstream.events.cf-erase%2Eme";
        assert!(
            before.iter().any(|m| m.subject == erased_subject),
            "{before:?}"
        );

        let r = s
            .post(
                "/instance-ai/admin/erase",
                &json!({ "threadId": "cf-erase.me" }),
            )
            .await;
        let answer = r.ok_json("erase");
        let tombstone = answer["tombstoneId"].as_i64().expect("tombstoneId");
        wait_caught_up(&s, tombstone).await;

        let after = stream_messages(&nats).await;
        assert!(
            !after
                .iter()
                .any(|m| m.subject == erased_subject || m.body["thread"] == "cf-erase.me"),
            "the erased thread is still in the stream"
        );
        assert!(
            !after
                .iter()
                .any(|m| m.body.to_string().contains("a secret")),
            "the erased text is still in the stream"
        );
        let t = after
            .iter()
            .find(|m| m.msg_id == tombstone)
            .expect("the tombstone is published");
        assert_eq!(t.subject, "threadstream.events.erasure%3Alog");
        assert_eq!(t.type_header, "erased");
        assert!(after.iter().any(|m| m.body["thread"] == "cf-keep"));
        assert_stream_is_the_log(&after, &log_lines(&s).await);
    })
    .await
}

/// The Python consumer of docs/integrations.md ("Subscribing with Python"), as written.
fn documented_python_consumer() -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/integrations.md"))
        .expect("docs/integrations.md");
    let section = &doc[doc
        .find("### Subscribing with Python")
        .expect("the Python section")..];
    let code = &section[section.find("```python\n").expect("a python block") + 10..];
    code[..code.find("\n```").expect("the block's end")].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_python_consumer_reads_the_feed_as_written() {
    bounded(120, async {
        let nats = Nats::start();
        let s = Server::start_with(feed_opts(&nats)).await;
        s.ingest_ok(
            "cf-py.thread",
            &[
                run_start("p", "agent"),
                text_delta("p", "agent", "from python"),
            ],
        )
        .await;
        let r = s
            .client
            .put(s.url("/v1/stream/cf/py"))
            .header("content-type", "application/json")
            .body("[1]")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let head = settled_head(&s).await;
        wait_caught_up(&s, head).await;
        let want: Vec<String> = log_lines(&s)
            .await
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}",
                    e["id"],
                    e["thread"].as_str().unwrap(),
                    e["type"].as_str().unwrap()
                )
            })
            .collect();

        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("consume.py");
        std::fs::write(&script, documented_python_consumer()).unwrap();
        let python = conformance_dir().join("nats/.venv/bin/python");
        let mut child = tokio::process::Command::new(&python)
            .arg(&script)
            .env("NATS_URL", nats.url())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "run {}: {e} (bash tests/conformance/install.sh)",
                    python.display()
                )
            });
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(30), async {
            use tokio::io::AsyncBufReadExt;
            let mut line = String::new();
            while got.len() < want.len() {
                line.clear();
                if lines.read_line(&mut line).await.unwrap() == 0 {
                    break;
                }
                got.push(line.trim_end().to_string());
            }
        })
        .await;
        child.kill().await.ok();
        let out = child.wait_with_output().await.unwrap();
        assert!(
            read.is_ok() && got == want,
            "the documented consumer printed {got:?}, not {want:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acknowledged_id_is_stored_and_a_stream_that_lost_its_tail_is_not_refilled() {
    bounded(120, async {
        let nats = Nats::start();
        let mut s = Server::start_with(feed_opts(&nats)).await;
        let ids = s
            .ingest_ok(
                "cf-stored",
                &[
                    run_start("r1", "agent"),
                    text_delta("r1", "agent", "before"),
                    run_finish("r1", "agent", "completed"),
                ],
            )
            .await;
        let before = *ids.last().unwrap();
        wait_caught_up(&s, before).await;
        // The checkpoint is written at most once a second, after the acknowledgement.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        s.stop().await;
        // The stream loses everything while the server is away.
        let client = async_nats::connect(nats.url()).await.expect("connect");
        async_nats::jetstream::new(client)
            .delete_stream(STREAM)
            .await
            .expect("delete the stream");
        s.restart().await;
        let after = *s
            .ingest_ok(
                "cf-stored",
                &[run_start("r2", "agent"), text_delta("r2", "agent", "after")],
            )
            .await
            .last()
            .unwrap();
        wait_caught_up(&s, after).await;
        // The publisher went on after the id it had stored, not from the start of the log: the
        // new stream holds exactly the log's ids after `before`.
        let ids: Vec<i64> = stream_messages(&nats)
            .await
            .iter()
            .map(|m| m.msg_id)
            .collect();
        let log_after: Vec<i64> = log_lines(&s)
            .await
            .iter()
            .map(|e| e["id"].as_i64().unwrap())
            .filter(|&id| id > before)
            .collect();
        assert_eq!(ids, log_after, "{}", s.logs());
        assert_eq!(ids.last(), Some(&after));
        assert!(
            s.logs().contains("holds less than was acknowledged before"),
            "{}",
            s.logs()
        );
    })
    .await
}
