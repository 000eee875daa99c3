//! `Idempotency-Key` on the three write routes (docs/protocol.md, "Idempotency-Key"),
//! black-box, on the suite's store: a retry gets the first answer byte for byte and stores
//! nothing; the same key for another request is a 422; keys are per caller; a failed request
//! leaves its key free; an expired key is forgotten and its row pruned; a malformed key is a 400.
//! On two instances sharing one Postgres: retries racing over both store one run (or one batch);
//! a key whose instance was killed (`kill -9`) while it held it is taken over and executed once;
//! and an execution slower than its claim, racing the retry that took it over, stores once.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const KEY_HEADER: &str = "idempotency-key";

/// POST `body` to `path` with `Idempotency-Key: key` (and a bearer token, if given).
async fn post_keyed(s: &Server, path: &str, key: &str, body: &Value) -> Resp {
    post_keyed_as(s, None, path, key, body).await
}

async fn post_keyed_as(
    s: &Server,
    token: Option<&str>,
    path: &str,
    key: &str,
    body: &Value,
) -> Resp {
    let mut req = s
        .client
        .post(s.url(path))
        .header(KEY_HEADER, key)
        .json(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    s.try_send(req)
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}\n--- server output ---\n{}", s.logs()))
}

fn chat_path(thread: &str) -> String {
    format!("/instance-ai/chat/{}", enc(thread))
}

fn ingest_path(thread: &str) -> String {
    format!("/instance-ai/threads/{}/events", enc(thread))
}

/// The `runId`s of the `run-start` events of the thread, in order.
async fn run_starts(s: &Server, thread: &str) -> Vec<String> {
    s.read_idle(thread, Cursor::None, Duration::from_millis(300))
        .await
        .iter()
        .map(|e| e.json())
        .filter(|v| v["type"] == "run-start")
        .map(|v| v["runId"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Ends the run (the demo's runs wait on a confirmation): cancels it and waits for its
/// `run-finish`.
async fn until_finished(s: &Server, thread: &str, run: &str) {
    s.cancel(thread).await.ok_json("cancel");
    let mut sse = s.sse(thread, Cursor::None).await;
    sse.read_until(Duration::from_secs(30), |e| {
        let v = e.json();
        v["type"] == "run-finish" && v["runId"] == run
    })
    .await;
}

/// `SELECT count(*) FROM idempotency_keys` on the server's store.
async fn stored_keys(s: &Server) -> i64 {
    let sql = "SELECT count(*) FROM idempotency_keys";
    match &s.database_url {
        None => sqlite_i64(s.data_dir(), sql).await,
        Some(url) => {
            let pool = sqlx::PgPool::connect(url).await.expect("connect");
            let n: i64 = sqlx::query_scalar(sql).fetch_one(&pool).await.expect(sql);
            pool.close().await;
            n
        }
    }
}

fn text_batch(run: &str, agent: &str, text: &str) -> Value {
    json!({"events": [run_start(run, agent), text_delta(run, agent, text)]})
}

#[tokio::test]
async fn a_retried_chat_gets_the_first_answer_and_starts_no_second_run() {
    bounded(90, async {
        let s = Server::start().await;
        let t = "t-idem-chat";
        let body = json!({"message": "hello"});
        let first = post_keyed(&s, &chat_path(t), "chat-1", &body).await;
        let run = first.ok_json("first chat")["runId"]
            .as_str()
            .expect("runId")
            .to_string();
        // While the run is live (a new chat would be a 409 run_active) and after it ended.
        let live = post_keyed(&s, &chat_path(t), "chat-1", &body).await;
        assert_eq!((live.status, &live.text), (200, &first.text));
        until_finished(&s, t, &run).await;
        let events = s.count_events().await;
        let late = post_keyed(&s, &chat_path(t), "chat-1", &body).await;
        assert_eq!((late.status, &late.text), (200, &first.text));
        assert_eq!(s.count_events().await, events, "a retry stores nothing");
        assert_eq!(run_starts(&s, t).await, vec![run.clone()]);

        // A new key is a new request.
        let other = post_keyed(&s, &chat_path(t), "chat-2", &body).await;
        let run2 = other.ok_json("chat with another key")["runId"].clone();
        assert_ne!(run2, json!(run));
    })
    .await
}

#[tokio::test]
async fn a_retried_ingest_gets_the_same_ids_and_stores_nothing_new() {
    bounded(60, async {
        let s = Server::start().await;
        let t = "t-idem-ingest";
        let body = text_batch("r1", "o1", "once");
        let first = post_keyed(&s, &ingest_path(t), "batch-1", &body).await;
        let ids = ids_of(&first.ok_json("first ingest"));
        assert_eq!(ids.len(), 2);
        let events = s.count_events().await;
        for _ in 0..3 {
            let again = post_keyed(&s, &ingest_path(t), "batch-1", &body).await;
            assert_eq!((again.status, &again.text), (200, &first.text));
        }
        assert_eq!(s.count_events().await, events, "retries store nothing");

        // The same key for another request: another body, or the same body elsewhere.
        let other_body = text_batch("r1", "o1", "twice");
        for (path, body) in [
            (ingest_path(t), &other_body),
            (ingest_path("t-idem-elsewhere"), &body),
        ] {
            let r = post_keyed(&s, &path, "batch-1", body).await;
            let (code, message) = r.error(422, "the key reused for another request");
            assert_eq!(code, "idempotency_key_reused");
            assert!(message.contains("Idempotency-Key"), "{message}");
        }
        assert_eq!(
            s.count_events().await,
            events,
            "a refused reuse stores nothing"
        );
        // The first answer is still there.
        let again = post_keyed(&s, &ingest_path(t), "batch-1", &body).await;
        assert_eq!(again.text, first.text);
    })
    .await
}

#[tokio::test]
async fn an_agui_run_retried_gets_the_first_thread_run_and_stream() {
    bounded(90, async {
        let s = Server::start().await;
        // No threadId: the first request makes one up, and every retry gets that one.
        let body = json!({"message": "hi there"});
        let first = post_keyed(&s, "/api/v1/agent/runs", "agui-1", &body).await;
        let v = first.ok_json("first AG-UI run");
        let (thread, run) = (
            v["threadId"].as_str().expect("threadId").to_string(),
            v["runId"].as_str().expect("runId").to_string(),
        );
        let again = post_keyed(&s, "/api/v1/agent/runs", "agui-1", &body).await;
        assert_eq!((again.status, &again.text), (200, &first.text));
        until_finished(&s, &thread, &run).await;

        // Asked as a stream, a retry is the run's AG-UI stream from its start to its end.
        let streamed = |key: &'static str| {
            let s = &s;
            let body = &body;
            async move {
                s.try_send(
                    s.client
                        .post(s.url("/api/v1/agent/runs"))
                        .header(KEY_HEADER, key)
                        .header("accept", "text/event-stream")
                        .json(body),
                )
                .await
                .expect("POST /api/v1/agent/runs as a stream")
            }
        };
        let replay = streamed("agui-1").await;
        assert_eq!(replay.status, 200, "{}", replay.text);
        let frames = parse_sse(&replay.text);
        let types: Vec<String> = frames
            .iter()
            .map(|e| e.json()["type"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(
            types.first().map(String::as_str),
            Some("RUN_STARTED"),
            "{types:?}"
        );
        assert_eq!(
            types.last().map(String::as_str),
            Some("RUN_FINISHED"),
            "{types:?}"
        );
        assert_eq!(frames[0].json()["runId"], run.as_str());
        assert_eq!(frames[0].json()["threadId"], thread.as_str());
        let replay2 = streamed("agui-1").await;
        let frames_of = |text: &str| -> Vec<(Option<String>, String)> {
            parse_sse(text)
                .into_iter()
                .map(|e| (e.id_field, e.data))
                .collect()
        };
        assert_eq!(frames_of(&replay2.text), frames_of(&replay.text));
        assert_eq!(run_starts(&s, &thread).await, vec![run]);
    })
    .await
}

#[tokio::test]
async fn a_malformed_key_is_a_400_and_stores_nothing() {
    bounded(60, async {
        let s = Server::start().await;
        let t = "t-idem-bad-key";
        let body = text_batch("r1", "o1", "x");
        let too_long = "k".repeat(256);
        for key in ["", too_long.as_str(), "with space", "tab\there"] {
            let r = post_keyed(&s, &ingest_path(t), key, &body).await;
            let (code, _) = r.error(400, &format!("key {key:?}"));
            assert_eq!(code, "invalid_idempotency_key");
        }
        // Bytes outside ASCII.
        let r = s
            .try_send(
                s.client
                    .post(s.url(&ingest_path(t)))
                    .header(
                        KEY_HEADER,
                        reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
                    )
                    .json(&body),
            )
            .await
            .expect("send");
        assert_eq!(r.error(400, "non-ASCII key").0, "invalid_idempotency_key");
        assert_eq!(s.count_events().await, 0);
        // 255 visible characters, or a quoted string, are keys.
        let longest = "k".repeat(255);
        post_keyed(&s, &ingest_path(t), &longest, &body)
            .await
            .ok_json("a 255-character key");
        let quoted = post_keyed(&s, &ingest_path("t-q"), "\"q-1\"", &body).await;
        let bare = post_keyed(&s, &ingest_path("t-q"), "q-1", &body).await;
        assert_eq!(
            (bare.status, &bare.text),
            (200, &quoted.text),
            "\"q-1\" is q-1"
        );
    })
    .await
}

#[tokio::test]
async fn a_failed_request_leaves_its_key_free_for_a_retry() {
    bounded(60, async {
        let s = Server::start().await;
        let t = "t-idem-failed";
        s.ingest_ok(t, &[run_start("r0", "o0")]).await;
        // No live run r1 yet: the batch breaks a rule and nothing of it is stored.
        let body = json!({"events": [text_delta("r1", "o1", "early")]});
        let refused = post_keyed(&s, &ingest_path(t), "after-start", &body).await;
        assert_eq!(refused.status, 422, "{}", refused.text);
        s.ingest_ok(
            t,
            &[run_finish("r0", "o0", "completed"), run_start("r1", "o1")],
        )
        .await;
        // The same request again, now valid: executed, not answered with the 422.
        let ok = post_keyed(&s, &ingest_path(t), "after-start", &body).await;
        let ids = ids_of(&ok.ok_json("the retry after the failure"));
        assert_eq!(ids.len(), 1);
        let again = post_keyed(&s, &ingest_path(t), "after-start", &body).await;
        assert_eq!(again.text, ok.text);
    })
    .await
}

#[tokio::test]
async fn keys_are_per_caller() {
    bounded(60, async {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens.json");
        let tokens = json!({"tokens": [
            {"sha256": token_hash("tok-idem-alice-0123456789"), "user": "alice", "role": "user"},
            {"sha256": token_hash("tok-idem-bob-0123456789ab"), "user": "bob", "role": "user"},
        ]});
        std::fs::write(&file, tokens.to_string()).unwrap();
        let s = Server::start_with(Opts {
            extra_args: vec!["--tokens-file".into(), file.display().to_string()],
            ..Opts::default()
        })
        .await;
        let body = json!({"message": "same words"});
        let path = "/api/v1/agent/runs";
        let alice = post_keyed_as(&s, Some("tok-idem-alice-0123456789"), path, "k", &body).await;
        let bob = post_keyed_as(&s, Some("tok-idem-bob-0123456789ab"), path, "k", &body).await;
        let (a, b) = (alice.ok_json("alice"), bob.ok_json("bob"));
        // Bob's key is his own: a run of his on a thread of his, not Alice's answer.
        assert_ne!(a["threadId"], b["threadId"]);
        assert_ne!(a["runId"], b["runId"]);
        let alice2 = post_keyed_as(&s, Some("tok-idem-alice-0123456789"), path, "k", &body).await;
        assert_eq!(alice2.text, alice.text);
    })
    .await
}

/// `threadstream token hash` of `token`.
fn token_hash(token: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(BIN)
        .args(["token", "hash"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn token hash");
    writeln!(child.stdin.take().unwrap(), "{token}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test]
async fn an_expired_key_is_forgotten_and_pruned() {
    bounded(60, async {
        let s = Server::start_with(Opts {
            extra_args: vec!["--idempotency-window-secs".into(), "1".into()],
            ..Opts::default()
        })
        .await;
        let t = "t-idem-expiry";
        s.ingest_ok(t, &[run_start("r1", "o1")]).await;
        let body = json!({"events": [text_delta("r1", "o1", "again")]});
        let first = post_keyed(&s, &ingest_path(t), "short", &body).await;
        let first = ids_of(&first.ok_json("first"));
        let retry = post_keyed(&s, &ingest_path(t), "short", &body).await;
        assert_eq!(ids_of(&retry.ok_json("a retry in the window")), first);
        assert_eq!(stored_keys(&s).await, 1);
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        // Forgotten: the same request is executed again.
        let later = post_keyed(&s, &ingest_path(t), "short", &body).await;
        let later = ids_of(&later.ok_json("the key after the window"));
        assert!(later[0] > first[0], "{later:?} after {first:?}");
        let other = post_keyed(&s, &ingest_path(t), "short2", &body).await;
        other.ok_json("another key");
        assert_eq!(stored_keys(&s).await, 2);
        // Pruned (at most once per window): the expired rows go when a later key is claimed.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        post_keyed(&s, &ingest_path(t), "short3", &body)
            .await
            .ok_json("a key after the window");
        assert_eq!(stored_keys(&s).await, 1, "expired keys pruned");
    })
    .await
}

// ------------------------------------------------------------------------------------------------
// Two instances on one Postgres
// ------------------------------------------------------------------------------------------------

/// The advisory lock every batch of the Postgres log takes (`threadstream_take_order()`,
/// migrations/postgres/0014_take_order.sql): held by a test, it stops every instance's appends
/// where they wait for it.
const ORDER_LOCK: i64 = 127991944667492;

/// Two instances, A and B, on one new database; dropped (servers first), the database goes.
struct Pair {
    a: Server,
    b: Server,
    url: String,
    name: Option<String>,
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.a.kill9();
        self.b.kill9();
        if let Some(name) = self.name.take() {
            drop_database(name);
        }
    }
}

async fn pair() -> Pair {
    let (name, url) = create_database().await;
    let opts = || Opts {
        database_url: Some(url.clone()),
        ..Opts::default()
    };
    let (a, b) = tokio::join!(Server::start_with(opts()), Server::start_with(opts()));
    Pair {
        a,
        b,
        url,
        name: Some(name),
    }
}

async fn pg_count(url: &str, sql: &str, thread: &str) -> i64 {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    let n: i64 = sqlx::query_scalar(sql)
        .bind(thread)
        .fetch_one(&pool)
        .await
        .expect(sql);
    pool.close().await;
    n
}

/// How many `event_type` events the thread holds.
async fn pg_events_of(url: &str, thread: &str, event_type: &str) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM events WHERE aggregate_id = $1 AND event_type = '{event_type}'"
    );
    pg_count(url, &sql, thread).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_retries_racing_on_two_postgres_instances_store_one_run() {
    bounded(120, async {
        let p = pair().await;
        const KEYS: usize = 6;
        const COPIES: usize = 6;
        let body = json!({"message": "race me"});
        // Every key's copies at once, half to A and half to B; all keys at once too.
        let sends = (0..KEYS).flat_map(|k| {
            let body = &body;
            let p = &p;
            (0..COPIES).map(move |c| async move {
                let s = [&p.a, &p.b][c % 2];
                let r = post_keyed(
                    s,
                    &chat_path(&format!("t-race-{k}")),
                    &format!("race-{k}"),
                    body,
                )
                .await;
                (k, r)
            })
        });
        let answers = futures::future::join_all(sends).await;
        for k in 0..KEYS {
            let mine: Vec<&Resp> = answers
                .iter()
                .filter(|(i, _)| *i == k)
                .map(|(_, r)| r)
                .collect();
            assert!(
                mine.iter()
                    .all(|r| r.status == 200 && r.text == mine[0].text),
                "key {k}: every copy gets the one answer: {:?}",
                mine.iter().map(|r| (r.status, &r.text)).collect::<Vec<_>>()
            );
            let t = format!("t-race-{k}");
            assert_eq!(
                pg_events_of(&p.url, &t, "run-start").await,
                1,
                "{t}: one run"
            );
            assert_eq!(pg_events_of(&p.url, &t, "user-message").await, 1, "{t}");
            assert_eq!(
                mine[0].json()["runId"],
                run_starts(&p.b, &t).await[0].as_str(),
                "{t}: the answer names the stored run"
            );
        }

        // The same for ingest: one batch stored per key, the same ids for every copy.
        let sends = (0..KEYS).flat_map(|k| {
            let p = &p;
            (0..COPIES).map(move |c| async move {
                let s = [&p.a, &p.b][c % 2];
                let body = text_batch(&format!("r{k}"), "o", "once");
                let r = post_keyed(
                    s,
                    &ingest_path(&format!("t-ingest-{k}")),
                    &format!("batch-{k}"),
                    &body,
                )
                .await;
                (k, r)
            })
        });
        let answers = futures::future::join_all(sends).await;
        for k in 0..KEYS {
            let mine: Vec<&Resp> = answers
                .iter()
                .filter(|(i, _)| *i == k)
                .map(|(_, r)| r)
                .collect();
            assert!(
                mine.iter()
                    .all(|r| r.status == 200 && r.text == mine[0].text),
                "ingest key {k}: {:?}",
                mine.iter().map(|r| (r.status, &r.text)).collect::<Vec<_>>()
            );
            let t = format!("t-ingest-{k}");
            let stored = pg_count(
                &p.url,
                "SELECT count(*) FROM events WHERE aggregate_id = $1",
                &t,
            )
            .await;
            // thread-created, run-start, text-delta.
            assert_eq!(stored, 3, "{t}: one batch stored");
        }
    })
    .await
}

/// Holds the Postgres log's order lock until dropped (or `release`d): every instance's next
/// batch waits for it.
struct OrderLock {
    tx: Option<sqlx::Transaction<'static, sqlx::Postgres>>,
    _pool: sqlx::PgPool,
}

impl OrderLock {
    async fn take(url: &str) -> OrderLock {
        let pool = sqlx::PgPool::connect(url).await.expect("connect");
        let mut tx = pool.begin().await.expect("begin");
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(ORDER_LOCK)
            .execute(&mut *tx)
            .await
            .expect("take the order lock");
        OrderLock {
            tx: Some(tx),
            _pool: pool,
        }
    }

    async fn release(mut self) {
        if let Some(tx) = self.tx.take() {
            tx.rollback().await.expect("release the order lock");
        }
    }
}

/// Polls the database until `sql` counts `want` rows (within 10 s).
async fn until_count(url: &str, sql: &str, want: i64) {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = sqlx::query_scalar(sql).fetch_one(&pool).await.expect(sql);
        if n == want {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{sql}: {n}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pool.close().await;
}

/// The token of the one claim in the database.
async fn claim(url: &str) -> String {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    let token: String = sqlx::query_scalar("SELECT claim FROM idempotency_keys")
        .fetch_one(&pool)
        .await
        .expect("the claim");
    pool.close().await;
    token
}

const PENDING_CLAIMS: &str = "SELECT count(*) FROM idempotency_keys WHERE answer IS NULL";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_by_an_instance_killed_mid_request_is_executed_once_by_the_other() {
    bounded(120, async {
        let mut p = pair().await;
        const KEYS: usize = 4;
        let body = json!({"message": "survive this"});
        // A claims every key, then waits for the order lock the test holds: killed there, it
        // leaves claims and no answers.
        let lock = OrderLock::take(&p.url).await;
        let sends: Vec<_> = (0..KEYS)
            .map(|k| {
                let client = p.a.client.clone();
                let url = p.a.url(&chat_path(&format!("t-crash-{k}")));
                let body = body.clone();
                tokio::spawn(async move {
                    let _ = client
                        .post(url)
                        .header(KEY_HEADER, format!("crash-{k}"))
                        .json(&body)
                        .send()
                        .await;
                })
            })
            .collect();
        until_count(&p.url, PENDING_CLAIMS, KEYS as i64).await;
        p.a.kill9();
        for s in sends {
            let _ = s.await;
        }
        lock.release().await;
        assert_eq!(p.a.count_events().await, 0, "A stored nothing");

        // Retries on B wait for A's claims to run out, then execute each key once.
        let retries = (0..KEYS).map(|k| {
            let b = &p.b;
            let body = &body;
            async move {
                post_keyed(
                    b,
                    &chat_path(&format!("t-crash-{k}")),
                    &format!("crash-{k}"),
                    body,
                )
                .await
            }
        });
        let answers = futures::future::join_all(retries).await;
        for (k, r) in answers.iter().enumerate() {
            let run = r.ok_json(&format!("retry of crash-{k}"))["runId"].clone();
            let t = format!("t-crash-{k}");
            assert_eq!(pg_events_of(&p.url, &t, "run-start").await, 1, "{t}");
            assert_eq!(
                run_starts(&p.b, &t).await,
                vec![run.as_str().unwrap().to_string()]
            );
            let again = post_keyed(&p.b, &chat_path(&t), &format!("crash-{k}"), &body).await;
            assert_eq!(again.text, r.text, "{t}: the answer stays the first");
        }
        until_count(&p.url, PENDING_CLAIMS, 0).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_slower_than_its_claim_and_the_retry_that_took_it_over_store_once() {
    bounded(120, async {
        let p = pair().await;
        let t = "t-slow";
        let body = json!({"events": [run_start("r-slow", "o-slow")]});
        // A's execution claims the key and waits for the order lock past its claim's end.
        let lock = OrderLock::take(&p.url).await;
        let first = {
            let client = p.a.client.clone();
            let url = p.a.url(&ingest_path(t));
            let body = body.clone();
            tokio::spawn(async move {
                let r = client
                    .post(url)
                    .header(KEY_HEADER, "slow")
                    .timeout(Duration::from_secs(60))
                    .json(&body)
                    .send()
                    .await
                    .expect("A's request");
                (r.status().as_u16(), r.text().await.expect("A's answer"))
            })
        };
        until_count(&p.url, PENDING_CLAIMS, 1).await;
        let claim_of_a = claim(&p.url).await;
        // B's retry waits, takes the key over once A's claim has run out (10 s), and executes
        // it too: both appends now wait for the lock.
        let second = {
            let client = p.b.client.clone();
            let url = p.b.url(&ingest_path(t));
            let body = body.clone();
            tokio::spawn(async move {
                let r = client
                    .post(url)
                    .header(KEY_HEADER, "slow")
                    .timeout(Duration::from_secs(60))
                    .json(&body)
                    .send()
                    .await
                    .expect("B's request");
                (r.status().as_u16(), r.text().await.expect("B's answer"))
            })
        };
        // Long enough for the takeover (the claim lasts 10 s) and for B's append to queue.
        tokio::time::sleep(Duration::from_secs(12)).await;
        assert_ne!(claim(&p.url).await, claim_of_a, "B took the key over");
        lock.release().await;
        let (a, b) = (first.await.unwrap(), second.await.unwrap());
        assert_eq!(a.0, 200, "A: {}", a.1);
        assert_eq!(a, b, "both executions answer with the one stored answer");
        let stored = pg_count(
            &p.url,
            "SELECT count(*) FROM events WHERE aggregate_id = $1",
            t,
        )
        .await;
        assert_eq!(stored, 2, "thread-created and one run-start");
    })
    .await
}
