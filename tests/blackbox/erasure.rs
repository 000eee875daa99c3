//! Erasure against the real binary, on both stores (`THREADSTREAM_TEST_STORE`): a thread (with
//! its fork, idempotency records and attachment) erased through `POST /instance-ai/admin/erase`
//! is gone — read routes 404, no byte of a marker written in it left in any file of the SQLite
//! data dir (on Postgres: in no row) — while other threads are untouched; `verify` accounts for
//! it through the tombstone and still catches a planted gap; `projections rebuild` equals the
//! live read models; `threadstream erase --user` removes a user's streams; a `kill -9` in the
//! middle of an erasure leaves all or nothing and a second run finishes; appends to other
//! threads during an erasure lose nothing and wait less than [`APPEND_BOUND`].

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;

/// The longest an append to another thread may wait while an erasure runs (stated in
/// docs/operations.md; measured well below it).
const APPEND_BOUND: Duration = Duration::from_millis(1500);

/// A string no other test writes, to look for in the store's files.
pub(crate) fn marker(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("ZQX-{tag}-{nanos}-MARKER")
}

/// How many files under `dir` (recursively) contain `needle`, and which.
pub(crate) fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    hits.push(p.display().to_string());
                }
            }
        }
    }
    hits
}

/// Rows of the store (SQLite file or Postgres database) whose text holds `needle`, over every
/// table that may hold a thread's content.
pub(crate) async fn rows_containing(s: &Server, needle: &str) -> i64 {
    let like = format!("%{needle}%");
    match &s.database_url {
        None => {
            let q = format!(
                "SELECT (SELECT count(*) FROM events WHERE payload LIKE '{like}')
                      + (SELECT count(*) FROM read_models WHERE doc LIKE '{like}')
                      + (SELECT count(*) FROM idempotency_keys WHERE key LIKE '{like}')"
            );
            sqlite_i64(s.data_dir(), &q).await
        }
        Some(url) => pg_rows_containing(url, needle).await,
    }
}

/// [`rows_containing`] in the Postgres database at `url`.
pub(crate) async fn pg_rows_containing(url: &str, needle: &str) -> i64 {
    let like = format!("%{needle}%");
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    let n: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM events WHERE payload::text LIKE $1)
              + (SELECT count(*) FROM read_models WHERE doc LIKE $1)
              + (SELECT count(*) FROM idempotency_keys WHERE key LIKE $1)
              + (SELECT count(*) FROM attachments WHERE convert_from(bytes, 'UTF8') LIKE $1)",
    )
    .bind(&like)
    .fetch_one(&pool)
    .await
    .expect("count rows");
    pool.close().await;
    n
}

async fn erase(s: &Server, body: &Value) -> Resp {
    s.post("/instance-ai/admin/erase", body).await
}

/// Messages, status and the thread list as the API serves them.
async fn views(s: &Server, threads: &[&str]) -> Vec<Value> {
    let mut out = vec![s.get("/instance-ai/threads").await.json()];
    for t in threads {
        for view in ["messages", "status"] {
            let r = s.get(&format!("/instance-ai/threads/{t}/{view}")).await;
            out.push(json!({"status": r.status, "body": r.json()}));
        }
    }
    out
}

fn approve(_: &Value) -> Option<Value> {
    Some(json!({"kind": "approval", "approved": true}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_thread_is_gone_from_every_file_and_route() {
    bounded(240, async {
        let mut s = Server::start().await;
        let mark = marker("thread");
        // The marked thread is ingested (an agent run would also copy the text into a shared
        // workflow of the demo model's, which is not the thread's: docs/operations.md).
        s.ingest_ok(
            "er-gone",
            &[
                run_start("r1", "o"),
                text_delta("r1", "o", &format!("please remember {mark}")),
                run_finish("r1", "o", "completed"),
            ],
        )
        .await;
        // An idempotent append (its key and answer are stored with its events).
        let keyed = s
            .try_send(
                s.client
                    .post(s.url("/instance-ai/threads/er-gone/events"))
                    .header("Idempotency-Key", format!("key-{mark}"))
                    .json(&json!({"events": [
                        run_start("r2", "o"),
                        text_delta("r2", "o", &format!("again {mark}")),
                        run_finish("r2", "o", "completed"),
                    ]})),
            )
            .await
            .expect("keyed ingest");
        assert!(
            keyed.status < 300,
            "keyed ingest: {} {}",
            keyed.status,
            keyed.text
        );
        let up = s
            .post_raw(
                "/api/v1/agent/attachments?threadId=er-gone&fileName=note.txt",
                "text/plain",
                format!("attached {mark}").into_bytes(),
            )
            .await;
        assert!(up.status < 300, "upload: {} {}", up.status, up.text);
        // A fork reads through it: it goes with it.
        let through = s.messages("er-gone").await["nextEventId"].as_i64().unwrap() - 1;
        s.post(
            "/instance-ai/threads/er-gone/fork",
            &json!({"threadId": "er-gone-fork", "throughEventId": through}),
        )
        .await
        .ok_json("fork");
        // Another thread, which must not change.
        let run = s.chat("er-kept", "hello there").await;
        s.follow_run("er-kept", &run, approve).await;
        // Let the projector store the read models, so their rows are erased too.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(rows_containing(&s, &mark).await > 0, "the marker is stored");
        if s.database_url.is_none() {
            assert!(!files_containing(s.data_dir(), &mark).is_empty());
        }
        let kept_before = views(&s, &["er-kept"]).await[1..].to_vec();
        let head_before = s.count_events().await;

        // Refusals first: nothing changes.
        for bad in [
            json!({}),
            json!({"threadId": "a", "userId": "b"}),
            json!({"userId": " "}),
        ] {
            let r = erase(&s, &bad).await;
            assert_eq!(r.status, 422, "{bad}: {}", r.text);
            assert_eq!(r.client_error("bad scope").0, "invalid_scope", "{bad}");
        }
        let r = erase(&s, &json!({"threadId": "er-never"})).await;
        assert_eq!(r.status, 404, "{}", r.text);
        assert_eq!(s.count_events().await, head_before);

        let answer = erase(&s, &json!({"threadId": "er-gone"}))
            .await
            .ok_json("erase");
        let streams: Vec<&str> = answer["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["stream"].as_str().unwrap())
            .collect();
        assert_eq!(streams, ["er-gone", "er-gone-fork"], "{answer}");
        assert_eq!(answer["eventsErased"], 8, "{answer}");
        assert_eq!(answer["alreadyErased"], false);
        let tombstone = answer["tombstoneId"].as_i64().unwrap();

        for t in ["er-gone", "er-gone-fork"] {
            for view in ["messages", "status"] {
                let r = s.get(&format!("/instance-ai/threads/{t}/{view}")).await;
                assert_eq!(r.status, 404, "{t}/{view}: {}", r.text);
            }
        }
        assert!(!s.threads().await.to_string().contains("er-gone"));
        assert_eq!(views(&s, &["er-kept"]).await[1..], kept_before[..]);
        assert_eq!(
            rows_containing(&s, &mark).await,
            0,
            "a row still holds the marker"
        );
        if s.database_url.is_none() {
            let hits = files_containing(s.data_dir(), &mark);
            assert!(hits.is_empty(), "files still holding the marker: {hits:?}");
        }

        // Again: nothing left to remove, said so.
        let again = erase(&s, &json!({"threadId": "er-gone"}))
            .await
            .ok_json("again");
        assert_eq!(again["alreadyErased"], true, "{again}");
        // Ids go on above the tombstone; the id may be used for a new thread.
        let run = s.chat("er-gone", "a new thread under the old id").await;
        let evs = s.follow_run("er-gone", &run, approve).await;
        assert!(evs.iter().all(|e| e.id() > tombstone));
        assert_eq!(s.status("er-gone").await["hasActiveRun"], false);

        // verify accounts for the erasure; a rebuild equals the live read models.
        let live = views(&s, &["er-kept", "er-gone"]).await;
        s.stop().await;
        let (ok, out, err) = cli_on(&s, &["verify"]).await.parts();
        assert!(ok, "verify after erasure:\n{out}\n{err}");
        assert!(
            !out.contains("ids are absent"),
            "the tombstone accounts for every erased id:\n{out}"
        );
        assert!(out.contains("1 erasures account for"), "{out}");
        // `scrub`: Postgres rewrites the erased tables (the cluster test greps every node's
        // files after it); SQLite has nothing left to do, and says so.
        let (ok, out, err) = cli_on(&s, &["scrub"]).await.parts();
        assert!(ok, "scrub:\n{out}\n{err}");
        let said = if s.database_url.is_some() {
            "erased tables rewritten"
        } else {
            "nothing to scrub"
        };
        assert!(out.contains(said), "{out}");
        s.rebuild_projections().await;
        s.restart().await;
        assert_eq!(views(&s, &["er-kept", "er-gone"]).await, live);
        s.stop().await;

        // Export carries the tombstone, import takes it (and records what it erased): the new
        // store verifies clean and answers 404 for the erased fork.
        let dump = tempfile::tempdir().unwrap();
        let file = dump.path().join("log.ndjson");
        let file_arg = file.display().to_string();
        let (ok, _, err) = cli_on(&s, &["export", "--output", &file_arg]).await.parts();
        assert!(ok, "export: {err}");
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text.matches("\"erasure:log\"").count(),
            1,
            "one tombstone exported"
        );
        assert!(!text.contains(&mark), "the export holds no erased text");
        let mut copy = Server::start().await;
        copy.stop().await;
        let (ok, _, err) = cli_on(&copy, &["import", "--input", &file_arg])
            .await
            .parts();
        assert!(ok, "import: {err}");
        let (ok, out, err) = cli_on(&copy, &["verify"]).await.parts();
        assert!(
            ok && out.contains("1 erasures account for 8 removed events"),
            "{out}\n{err}"
        );
        assert!(!out.contains("ids are absent"), "{out}");
        copy.restart().await;
        let r = copy.get("/instance-ai/threads/er-gone-fork/status").await;
        assert_eq!(r.status, 404, "{}", r.text);
        assert_eq!(views(&copy, &["er-kept"]).await[1..], live[1..3]);
        drop(copy);

        // A real gap — an event deleted behind the log's back — is still caught.
        let victim = s.messages_ids_of("er-kept").await;
        s.store_damaged = true;
        delete_event(&s, victim).await;
        let (ok, out, _) = cli_on(&s, &["verify"]).await.parts();
        assert!(!ok, "verify missed a planted gap:\n{out}");
        assert!(out.contains("seq"), "{out}");
        assert!(
            out.contains(&format!(
                "1 ids are absent and no tombstone accounts for them ({victim}–{victim})"
            )),
            "{out}"
        );
    })
    .await;
}

impl Server {
    /// The id of an event in the middle of `thread` (read from the store directly).
    async fn messages_ids_of(&self, thread: &str) -> i64 {
        match &self.database_url {
            None => {
                sqlite_i64(
                    self.data_dir(),
                    &format!(
                        "SELECT id FROM events WHERE thread_id = '{thread}' ORDER BY id LIMIT 1 OFFSET 3"
                    ),
                )
                .await
            }
            Some(url) => {
                let pool = sqlx::PgPool::connect(url).await.unwrap();
                let id: i64 = sqlx::query_scalar(
                    "SELECT id FROM events WHERE aggregate_id = $1 ORDER BY id LIMIT 1 OFFSET 3",
                )
                .bind(thread)
                .fetch_one(&pool)
                .await
                .unwrap();
                pool.close().await;
                id
            }
        }
    }
}

async fn delete_event(s: &Server, id: i64) {
    match &s.database_url {
        None => {
            use sqlx::{ConnectOptions, Connection};
            let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(s.data_dir().join("threadstream.db"))
                .connect()
                .await
                .unwrap();
            sqlx::query("DELETE FROM events WHERE id = ?")
                .bind(id)
                .execute(&mut conn)
                .await
                .unwrap();
            conn.close().await.unwrap();
        }
        Some(url) => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            sqlx::query("DELETE FROM events WHERE id = $1")
                .bind(id)
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        }
    }
}

/// Ingests a thread of `n` text deltas (one run), in requests of 500.
async fn big_thread(s: &Server, thread: &str, n: usize, text: &str) {
    s.ingest_ok(thread, &[run_start("r1", "o")]).await;
    let mut left = n;
    while left > 0 {
        let k = left.min(500);
        let evs: Vec<Value> = (0..k).map(|_| text_delta("r1", "o", text)).collect();
        s.ingest_ok(thread, &evs).await;
        left -= k;
    }
    s.ingest_ok(thread, &[run_finish("r1", "o", "completed")])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_to_other_threads_lose_nothing_and_wait_little_during_an_erasure() {
    bounded(300, async {
        let s = Server::start().await;
        big_thread(&s, "er-big", 20_000, "some text to erase").await;
        let writers = 4;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for w in 0..writers {
            let client = s.client.clone();
            let url = s.url(&format!("/instance-ai/threads/er-live-{w}/events"));
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                let mut acked = 0usize;
                let mut slowest = Duration::ZERO;
                let post = |evs: Vec<Value>| {
                    let client = client.clone();
                    let url = url.clone();
                    async move {
                        let r = client
                            .post(url)
                            .json(&json!({"events": evs}))
                            .send()
                            .await
                            .unwrap();
                        assert!(r.status().is_success(), "append: {}", r.status());
                    }
                };
                post(vec![run_start("r1", "o")]).await;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let t = Instant::now();
                    post(vec![text_delta("r1", "o", "live")]).await;
                    slowest = slowest.max(t.elapsed());
                    acked += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                (acked, slowest)
            }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t = Instant::now();
        let answer = erase(&s, &json!({"threadId": "er-big"}))
            .await
            .ok_json("erase");
        let took = t.elapsed();
        assert_eq!(answer["eventsErased"], 20_003, "{answer}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for (w, task) in tasks.into_iter().enumerate() {
            let (acked, slowest) = task.await.unwrap();
            let deltas = s
                .messages(&format!("er-live-{w}"))
                .await
                .to_string()
                .matches("live")
                .count();
            assert!(deltas >= 1, "writer {w} stored nothing");
            // Every acknowledged delta is stored: the history holds them as one text.
            let stored = s.count_thread_events(&format!("er-live-{w}")).await;
            assert_eq!(
                stored as usize,
                acked + 2,
                "writer {w}: acknowledged {acked}, stored {stored}"
            );
            assert!(
                slowest < APPEND_BOUND,
                "writer {w}: an append waited {slowest:?} during an erasure of {took:?}"
            );
            eprintln!("writer {w}: {acked} appends, slowest {slowest:?} (erasure took {took:?})");
        }
    })
    .await;
}

impl Server {
    /// Events of one log stream, counted in the store.
    pub(crate) async fn count_thread_events(&self, thread: &str) -> i64 {
        match &self.database_url {
            None => {
                sqlite_i64(
                    self.data_dir(),
                    &format!("SELECT count(*) FROM events WHERE thread_id = '{thread}'"),
                )
                .await
            }
            Some(url) => {
                let pool = sqlx::PgPool::connect(url).await.unwrap();
                let n: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM events WHERE aggregate_id = $1")
                        .bind(thread)
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                pool.close().await;
                n
            }
        }
    }
}

/// `threadstream erase --thread <thread>` on `s`'s store, started; with `logs`, its stderr piped
/// with the store's debug lines on.
fn erase_cli(s: &Server, thread: &str, logs: bool) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["erase", "--thread", thread, "--data-dir"])
        .arg(s.data_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(if logs { Stdio::piped() } else { Stdio::null() })
        .kill_on_drop(true);
    if logs {
        cmd.env("RUST_LOG", "info,threadstream_store=debug,sqlx=warn");
    }
    if let Some(url) = &s.database_url {
        cmd.arg("--database-url").arg(url);
    }
    cmd.env_remove("DATABASE_URL");
    cmd.spawn().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_an_erasure_leaves_all_or_nothing_and_a_second_run_finishes() {
    bounded(300, async {
        let mut s = Server::start().await;
        big_thread(&s, "er-killed", 30_000, "text of a thread being erased").await;
        let run = s.chat("er-user-2", "hello").await;
        s.follow_run("er-user-2", &run, approve).await;
        s.stop().await;
        let total = s.count_thread_events("er-killed").await;
        assert_eq!(total, 30_003);
        // Kill the CLI once its erasure's transaction is deleting (it logs that at debug level
        // as the deletes begin, before anything is committed): nothing of the thread may be
        // gone. Then at growing delays until one kill lands after the commit; before it, the
        // thread must be whole each time.
        let mut child = erase_cli(&s, "er-killed", true);
        let stderr = child.stderr.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let deleting = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains("erasure: deleting") {
                    return true;
                }
                seen.push(line);
            }
            false
        })
        .await
        .unwrap_or(false);
        let _ = child.start_kill(); // SIGKILL
        let _ = child.wait().await;
        assert!(
            deleting,
            "the erasure never logged its deletes:\n{}",
            seen.join("\n")
        );
        assert_eq!(
            s.count_thread_events("er-killed").await,
            total,
            "a kill while the erasure deleted must leave the thread whole"
        );
        let mut outcomes = Vec::new();
        for delay_ms in [30u64, 80, 150, 300, 600, 1200, 3000] {
            let mut child = erase_cli(&s, "er-killed", false);
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            let _ = child.start_kill(); // SIGKILL
            let _ = child.wait().await;
            let left = s.count_thread_events("er-killed").await;
            assert!(
                left == total || left == 0,
                "after a kill at {delay_ms} ms: {left} of {total} events left"
            );
            outcomes.push((delay_ms, left));
            if left == 0 {
                break;
            }
        }
        eprintln!("kill -9 outcomes (delay ms, events left): {outcomes:?}");
        // A second run finishes the job (or finds it done) and the store verifies clean.
        let (ok, out, err) = cli_on(&s, &["erase", "--thread", "er-killed"])
            .await
            .parts();
        assert!(ok, "second run: {out}\n{err}");
        assert_eq!(s.count_thread_events("er-killed").await, 0);
        let (ok, out, err) = cli_on(&s, &["verify"]).await.parts();
        assert!(ok, "verify:\n{out}\n{err}");
        // `--user` removes every stream of the user (the local user of a server without
        // authentication), and nothing else remains.
        let (ok, out, err) = cli_on(&s, &["erase", "--user", "local"]).await.parts();
        assert!(ok, "erase --user: {out}\n{err}");
        let answer: Value = serde_json::from_str(out.trim()).expect("JSON answer");
        assert!(
            answer["streams"].to_string().contains("er-user-2"),
            "{answer}"
        );
        assert_eq!(s.count_thread_events("er-user-2").await, 0);
        // Again: nothing of the user is left, the run says it was erased before (exit 0).
        let (ok, out, err) = cli_on(&s, &["erase", "--user", "local"]).await.parts();
        assert!(ok, "repeated erase --user: {out}\n{err}");
        let again: Value = serde_json::from_str(out.trim()).expect("JSON answer");
        assert_eq!(again["alreadyErased"], true, "{again}");
        assert_eq!(again["eventsErased"], 0, "{again}");
        let (ok, out, err) = cli_on(&s, &["verify"]).await.parts();
        assert!(ok, "verify:\n{out}\n{err}");
        s.restart().await;
        assert_eq!(
            s.get("/instance-ai/threads/er-user-2/messages")
                .await
                .status,
            404
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_resuming_into_erased_history_are_told_in_each_protocol() {
    bounded(120, async {
        let s = Server::start().await;
        let ids = s
            .ingest_ok(
                "er-sig",
                &[
                    run_start("r1", "o"),
                    text_delta("r1", "o", "gone soon"),
                    run_finish("r1", "o", "completed"),
                ],
            )
            .await;
        let cursor = ids[1];
        let tombstone = erase(&s, &json!({"threadId": "er-sig"}))
            .await
            .ok_json("erase")["tombstoneId"]
            .as_i64()
            .unwrap();

        // n8n: a documented `status` event with the tombstone's id, then the stream goes on.
        let mut sse = s.sse("er-sig", Cursor::header_id(cursor)).await;
        let signal = sse
            .next_event(Duration::from_secs(5))
            .await
            .expect("signal");
        assert_eq!(signal.id(), tombstone);
        assert_eq!(signal.ty(), "status");
        let message = signal.json()["payload"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(message.starts_with("history-erased"), "{message}");
        validate_n8n(std::slice::from_ref(&signal.data)).await;
        // The thread made again under the same id streams on, after the tombstone.
        let new_ids = s
            .ingest_ok(
                "er-sig",
                &[run_start("r2", "o"), text_delta("r2", "o", "new")],
            )
            .await;
        let next = sse
            .next_event(Duration::from_secs(5))
            .await
            .expect("stream goes on");
        assert_eq!(next.id(), new_ids[0], "the run-start follows the signal");
        assert!(next.id() > tombstone);
        drop(sse);
        // A cursor after the tombstone is not told again.
        let mut sse = s.sse("er-sig", Cursor::header_id(tombstone)).await;
        assert_eq!(
            sse.next_event(Duration::from_secs(5)).await.unwrap().ty(),
            "run-start"
        );
        drop(sse);

        // AG-UI: RUN_ERROR {code: history_erased}, and the stream ends.
        let r = s
            .try_send(
                s.client
                    .get(s.url("/api/v1/agent/runs/er-sig/events"))
                    .header("Last-Event-ID", cursor.to_string()),
            )
            .await
            .expect("ag-ui stream");
        assert_eq!(r.status, 200);
        assert!(r.text.contains("\"type\":\"RUN_ERROR\""), "{}", r.text);
        assert!(r.text.contains("\"code\":\"history_erased\""), "{}", r.text);
        assert!(r.text.contains(&format!("id: {tombstone}")), "{}", r.text);

        // Items: the erased run's request gets the protocol's terminal `request.failed` with
        // `code: history_erased`, numbered after the client's cursor, and the stream ends; a
        // request of a thread never erased is still unknown (404).
        let text = crate::items::read_stream(&s, "er-sig~r1", "?starting_after=3", None).await;
        let evs = parse_sse(&text);
        assert_eq!(evs.len(), 1, "{text}");
        let failed = evs[0].json();
        assert_eq!(evs[0].ty(), "request.failed", "{text}");
        assert_eq!(failed["type"], "request.failed");
        assert_eq!(failed["requestId"], "er-sig~r1");
        assert_eq!(failed["sequence_number"], 4, "{failed}");
        assert_eq!(failed["error"]["code"], "history_erased", "{failed}");
        assert_eq!(
            failed["error"]["details"]["tombstoneId"], tombstone,
            "{failed}"
        );
        assert!(failed["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("history-erased"));
        assert!(
            text.contains("id: er-sig~r1:4\nevent: request.failed\n"),
            "{text}"
        );
        let r = s.get("/api/flows/chat/requests/er-never~r1/stream").await;
        assert_eq!(r.status, 404, "{}", r.text);
        // The request of the thread made again streams as usual.
        s.ingest_ok("er-sig", &[run_finish("r2", "o", "completed")])
            .await;
        let text = crate::items::read_stream(&s, "er-sig~r2", "", None).await;
        assert!(text.contains("request.completed"), "{text}");
        assert!(!text.contains("history_erased"), "{text}");

        // Durable Streams: 410 Gone for an offset before what is retained; -1 reads on.
        let r = s
            .get(&format!("/v1/threads/er-sig?offset={cursor}_0"))
            .await;
        assert_eq!(r.status, 410, "{}", r.text);
        assert_eq!(r.json()["error"]["code"], "offset_erased", "{}", r.text);
        let r = s.get("/v1/threads/er-sig?offset=-1").await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(r.text.contains("\"new\""), "{}", r.text);
    })
    .await;
}
