//! Erasing a user (`POST /instance-ai/admin/erase {"userId"}`), black-box on both stores: a
//! marker the user wrote into a thread, into the workflow the agent built for them, into a
//! Durable Stream and into a subscription is in no row afterwards (and, on SQLite, in no file of
//! the data dir), while another user's thread, workflow and subscription are untouched and the
//! store verifies clean.

use crate::auth::{start_with_tokens, TOKEN_A, TOKEN_ADMIN, TOKEN_B};
use crate::common;
use crate::erasure::{files_containing, marker, rows_containing};

use common::*;
use serde_json::{json, Value};

/// Refuses whatever the demo asks (it offers to delete an inactive workflow): a run changes
/// no workflow but the one it builds.
fn deny(_: &Value) -> Option<Value> {
    Some(json!({"kind": "approval", "approved": false}))
}

async fn put(s: &Server, path: &str, body: Value) -> Resp {
    s.try_send(
        s.client
            .put(s.url(path))
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
    .await
    .expect("PUT")
}

async fn workflow_names(s: &Server) -> String {
    s.get("/instance-ai/workflows").await.ok_json("workflows")["workflows"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_a_user_takes_their_workflows_and_subscriptions_too() {
    bounded(240, async {
        let dir = tempfile::tempdir().unwrap();
        let mut s = start_with_tokens(&dir, &[]).await;
        let mark = marker("user");

        // Bob first (his agent lists the workflows there are: a list made after alice's would copy
        // her workflow's name into his thread, which is his record, not hers): a thread, a
        // workflow and a subscription, which must stay.
        s.act_as(TOKEN_B);
        let run = s.chat("eu-bob", "build bob kept alerts").await;
        s.follow_run("eu-bob", &run, deny).await;
        let r = put(
            &s,
            "/v1/stream/__ds/subscriptions/eu-bob-sub",
            json!({"type": "webhook", "pattern": "bob/*",
                   "webhook": {"url": "http://127.0.0.1:9/hook"}, "description": "bob's"}),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert!(workflow_names(&s).await.contains("Bob kept alerts"));

        // Alice: a thread whose agent builds a workflow named after her words, a Durable Stream
        // and a subscription, each holding the marker.
        s.act_as(TOKEN_A);
        let run = s.chat("eu-alice", &format!("build {mark} alerts")).await;
        s.follow_run("eu-alice", &run, deny).await;
        assert!(
            workflow_names(&s).await.contains(&mark),
            "the demo built it"
        );
        let r = put(&s, "/v1/stream/eu-alice-notes", json!({"note": mark})).await;
        assert_eq!(r.status, 201, "{}", r.text);
        // A reader of the Durable Stream, and where it got to.
        let r = s.get("/v1/stream/eu-alice-notes?offset=-1").await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(r.text.contains(&mark), "{}", r.text);
        let notes_offset = r.headers["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        let r = put(
            &s,
            "/v1/stream/__ds/subscriptions/eu-alice-sub",
            json!({"type": "webhook", "streams": ["eu-alice-notes"],
                   "webhook": {"url": "http://127.0.0.1:9/hook"}, "description": mark}),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.text);
        s.act_as(TOKEN_B);
        let bob_sub = s
            .get("/v1/stream/__ds/subscriptions/eu-bob-sub")
            .await
            .ok_json("bob's subscription");
        let bob_messages = s.messages("eu-bob").await;

        // Let the projector store the read models, so their rows are erased too.
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        assert!(rows_containing(&s, &mark).await > 0, "the marker is stored");

        s.act_as(TOKEN_ADMIN);
        let answer = s
            .post("/instance-ai/admin/erase", &json!({"userId": "alice"}))
            .await
            .ok_json("erase alice");
        let streams = answer["streams"].to_string();
        for stream in [
            "\"eu-alice\"",
            "\"workflow:",
            "eu-alice-notes",
            "__ds/subscriptions",
        ] {
            assert!(streams.contains(stream), "{stream} not erased: {answer}");
        }
        assert!(!streams.contains("eu-bob"), "{answer}");

        assert_eq!(
            rows_containing(&s, &mark).await,
            0,
            "a row still holds the marker"
        );
        if s.database_url.is_none() {
            let hits = files_containing(s.data_dir(), &mark);
            assert!(hits.is_empty(), "files still holding the marker: {hits:?}");
        }
        let names = workflow_names(&s).await;
        assert!(!names.contains(&mark), "{names}");
        assert!(names.contains("Bob kept alerts"), "{names}");

        s.act_as(TOKEN_A);
        let r = s.get("/v1/stream/__ds/subscriptions/eu-alice-sub").await;
        assert_eq!(r.status, 404, "{}", r.text);
        // The Durable Stream's reader resuming at its offset is told the history was erased
        // (catch-up and long-poll alike), in the protocol's way; from the start: no stream.
        for live in ["", "&live=long-poll"] {
            let r = s
                .get(&format!(
                    "/v1/stream/eu-alice-notes?offset={notes_offset}{live}"
                ))
                .await;
            assert_eq!(r.status, 410, "{live}: {}", r.text);
            let body = r.json();
            assert_eq!(body["error"]["code"], "offset_erased", "{}", r.text);
            assert!(
                body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("history-erased"),
                "{}",
                r.text
            );
            assert!(!r.text.contains(&mark), "{}", r.text);
        }
        let r = s.get("/v1/stream/eu-alice-notes?offset=-1").await;
        assert_eq!(r.status, 404, "{}", r.text);
        // Created again, the path is a new stream above the tombstone: -1 reads only it, the old
        // offset is still erased history.
        let r = put(&s, "/v1/stream/eu-alice-notes", json!({"note": "new life"})).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let r = s.get("/v1/stream/eu-alice-notes?offset=-1").await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(
            r.text.contains("new life") && !r.text.contains(&mark),
            "{}",
            r.text
        );
        let r = s
            .get(&format!("/v1/stream/eu-alice-notes?offset={notes_offset}"))
            .await;
        assert_eq!(r.status, 410, "{}", r.text);
        s.act_as(TOKEN_B);
        let after = s
            .get("/v1/stream/__ds/subscriptions/eu-bob-sub")
            .await
            .ok_json("bob's subscription after");
        assert_eq!(after, bob_sub, "bob's subscription as it was");
        assert_eq!(s.messages("eu-bob").await, bob_messages);

        // The store verifies clean, and after a restart bob's subscription is read back from
        // the restored stream.
        s.stop().await;
        let (ok, out, err) = cli_on(&s, &["verify"]).await.parts();
        assert!(ok, "verify after erasure:\n{out}\n{err}");
        s.restart().await;
        let mut after = s
            .get("/v1/stream/__ds/subscriptions/eu-bob-sub")
            .await
            .ok_json("bob's subscription after a restart");
        // The JWKS address names the port, which a restart changes.
        let mut before = bob_sub.clone();
        for v in [&mut after, &mut before] {
            v["webhook"]["signing"]["jwks_url"].take();
        }
        assert_eq!(after, before);
        s.act_as(TOKEN_A);
        let r = s.get("/v1/stream/__ds/subscriptions/eu-alice-sub").await;
        assert_eq!(r.status, 404, "{}", r.text);
    })
    .await;
}

async fn upload_text(s: &Server, thread: &str, text: &str) -> Resp {
    s.post_raw(
        &format!("/api/v1/agent/attachments?threadId={thread}&fileName=note.txt"),
        "text/plain",
        text.as_bytes().to_vec(),
    )
    .await
}

/// Copies the directory tree `from` to `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn erase_answer(out: &str) -> Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("JSON answer ({e}): {out}"))
}

/// Whether the thread index's files (SQLite) hold `needle`.
fn index_holds(s: &Server, needle: &str) -> bool {
    ["threadstream-index.db", "threadstream-index.db-wal"]
        .iter()
        .filter_map(|f| std::fs::read(s.data_dir().join(f)).ok())
        .any(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

/// Puts `stream`'s row back into the thread index's `stream_heads` (SQLite, server stopped):
/// what an erasure killed after its commit and before its scrub leaves there.
async fn put_back_index_row(s: &Server, owner: &str, stream: &str) {
    use sqlx::{ConnectOptions, Connection};
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(s.data_dir().join("threadstream-index.db"))
        .connect()
        .await
        .unwrap();
    sqlx::query("INSERT INTO stream_heads (owner, stream, id, fork_source) VALUES (?, ?, 1, NULL)")
        .bind(owner)
        .bind(stream)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
}

/// Stores an unanswered idempotency claim of `scope` (a user) for `key` directly: what a
/// request that claimed its key and died before its append leaves (the server, stopped, holds
/// no claim in memory).
async fn insert_claim(s: &Server, scope: &str, key: &str) {
    let far = 4_102_444_800_000i64; // 2100-01-01
    match &s.database_url {
        None => {
            use sqlx::{ConnectOptions, Connection};
            let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(s.data_dir().join("threadstream.db"))
                .connect()
                .await
                .unwrap();
            sqlx::query(
                "INSERT INTO idempotency_keys (scope, key, fingerprint, expires_at, claim, \
                 claimed_until) VALUES (?, ?, 'f', ?, 'dead', 0)",
            )
            .bind(scope)
            .bind(key)
            .bind(far)
            .execute(&mut conn)
            .await
            .unwrap();
            conn.close().await.unwrap();
        }
        Some(url) => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            sqlx::query(
                "INSERT INTO idempotency_keys (scope, key, fingerprint, expires_at, claim, \
                 claimed_until) VALUES ($1, $2, 'f', $3, 'dead', 0)",
            )
            .bind(scope)
            .bind(key)
            .bind(far)
            .execute(&pool)
            .await
            .unwrap();
            pool.close().await;
        }
    }
}

/// `threadstream erase --user` run again after an erasure whose process died between the
/// commit and the removal of the attachment files (simulated on SQLite by putting the files it
/// removed, and the thread index's row of the stream, back: what such a kill leaves, the log's
/// rows gone, the files and the index's row there) finishes
/// the job with exit status 0 and says what it did; and a user with attachments, or an
/// idempotency record, but no stream is erased (before, each answered "nothing found", exit
/// status 1, and left the files and records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_user_erasure_finishes_the_job_and_a_user_without_streams_is_erased() {
    bounded(240, async {
        let dir = tempfile::tempdir().unwrap();
        let mut s = start_with_tokens(&dir, &[]).await;
        let mark = marker("user-att");
        let bob_mark = marker("bob-att");
        // Alice's thread id is a marker too: it names her stream in the thread index file.
        let alice_thread = marker("alice-thread");

        // Alice: a thread and an attachment, each holding the marker.
        s.act_as(TOKEN_A);
        s.ingest_ok(
            &alice_thread,
            &[
                run_start("r1", "o"),
                text_delta("r1", "o", &format!("alice wrote {mark}")),
                run_finish("r1", "o", "completed"),
            ],
        )
        .await;
        let r = upload_text(&s, &alice_thread, &format!("attached {mark}")).await;
        assert_eq!(r.status, 201, "{}", r.text);
        // Bob: an attachment uploaded before any message (the usual order), and no stream.
        s.act_as(TOKEN_B);
        let r = upload_text(&s, "eua-bob", &format!("attached {bob_mark}")).await;
        assert_eq!(r.status, 201, "{}", r.text);
        s.stop().await;

        let sqlite = s.database_url.is_none();
        let saved = tempfile::tempdir().unwrap();
        if sqlite {
            let hits = files_containing(s.data_dir(), &format!("attached {mark}"));
            assert_eq!(hits.len(), 1, "alice's attachment file: {hits:?}");
            let att_dir = std::path::Path::new(&hits[0])
                .parent()
                .unwrap()
                .to_path_buf();
            copy_tree(&att_dir, saved.path());
            let (ok, out, err) = cli_on(&s, &["erase", "--user", "alice"]).await.parts();
            assert!(ok, "first erase --user alice: {out}\n{err}");
            let first = erase_answer(&out);
            assert_eq!(first["attachmentsRemoved"], 1, "{first}");
            assert!(
                first["streams"].to_string().contains(&alice_thread),
                "{first}"
            );
            assert!(!att_dir.exists());
            // What a kill -9 between the commit and the files' removal leaves: the files, and
            // the thread index's row of the stream (the scrub comes before the files).
            copy_tree(saved.path(), &att_dir);
            assert!(!files_containing(s.data_dir(), &mark).is_empty());
            assert!(!index_holds(&s, &alice_thread), "the first scrub forgot it");
            put_back_index_row(&s, "alice", &alice_thread).await;
            assert!(index_holds(&s, &alice_thread));
        } else {
            let (ok, out, err) = cli_on(&s, &["erase", "--user", "alice"]).await.parts();
            assert!(ok, "first erase --user alice: {out}\n{err}");
            assert!(erase_answer(&out)["streams"]
                .to_string()
                .contains(&alice_thread));
        }

        // The repeat finishes the job, exit status 0, and says what it did.
        let (ok, out, err) = cli_on(&s, &["erase", "--user", "alice"]).await.parts();
        assert!(ok, "repeated erase --user alice: {out}\n{err}");
        let again = erase_answer(&out);
        assert_eq!(again["alreadyErased"], true, "{again}");
        assert_eq!(again["tombstoneId"], Value::Null, "{again}");
        assert_eq!(again["eventsErased"], 0, "{again}");
        assert_eq!(
            again["attachmentsRemoved"],
            if sqlite { 1 } else { 0 },
            "{again}"
        );
        if sqlite {
            // Scrubbed: the stream's name is in neither index file (the tombstone in the log
            // keeps it, as the receipt).
            assert!(!index_holds(&s, &alice_thread), "the repeat did not scrub");
        }

        // Bob has no stream: his attachment and nothing else goes, without a tombstone.
        let (ok, out, err) = cli_on(&s, &["erase", "--user", "bob"]).await.parts();
        assert!(ok, "erase --user bob (attachments only): {out}\n{err}");
        let bob = erase_answer(&out);
        assert_eq!(bob["attachmentsRemoved"], 1, "{bob}");
        assert_eq!(bob["alreadyErased"], false, "{bob}");
        assert_eq!(bob["tombstoneId"], Value::Null, "{bob}");
        // Nothing of bob is left now: exit status 1, as for a user never seen.
        let (ok, out, _) = cli_on(&s, &["erase", "--user", "bob"]).await.parts();
        assert!(!ok, "nothing of bob is left: {out}");
        let (ok, _, _) = cli_on(&s, &["erase", "--user", "nobody-ever"])
            .await
            .parts();
        assert!(!ok, "a user never seen: exit status 1");

        // Carol has only an idempotency record (a claim whose request died): it goes.
        let carol_mark = marker("carol-key");
        insert_claim(&s, "carol", &carol_mark).await;
        assert_eq!(rows_containing(&s, &carol_mark).await, 1);
        let (ok, out, err) = cli_on(&s, &["erase", "--user", "carol"]).await.parts();
        assert!(ok, "erase --user carol (a key only): {out}\n{err}");
        let carol = erase_answer(&out);
        assert_eq!(carol["idempotencyRecordsRemoved"], 1, "{carol}");
        assert_eq!(carol["attachmentsRemoved"], 0, "{carol}");
        let (ok, out, _) = cli_on(&s, &["erase", "--user", "carol"]).await.parts();
        assert!(!ok, "nothing of carol is left: {out}");

        for m in [&mark, &bob_mark, &carol_mark] {
            assert_eq!(rows_containing(&s, m).await, 0, "a row still holds {m}");
            if sqlite {
                let hits = files_containing(s.data_dir(), m);
                assert!(hits.is_empty(), "files still holding {m}: {hits:?}");
            }
        }
        let (ok, out, err) = cli_on(&s, &["verify"]).await.parts();
        assert!(ok, "verify:\n{out}\n{err}");
        s.restart().await;
        s.act_as(TOKEN_B);
        let r = s
            .get(&format!("/instance-ai/threads/{alice_thread}/messages"))
            .await;
        assert_eq!(r.status, 404, "{}", r.text);
    })
    .await;
}
