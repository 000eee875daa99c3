//! Tests of the log against a real SQLite file and the machine's real Postgres (a fresh database
//! per test, so they run in parallel).

use std::collections::HashSet;

use threadstream_domain::event::*;
use threadstream_domain::{AgentEvent, ThreadCommand, ThreadError};

use super::*;

/// Keeps a test's store alive: the SQLite temp dir, or the Postgres database (dropped at end).
pub(crate) enum Guard {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    Pg(String),
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Guard::Pg(name) = self {
            let name = name.clone();
            // Best effort; a left-over database is harmless (names are unique).
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    if let Ok(pool) = sqlx::PgPool::connect(&admin_url()).await {
                        let _ = sqlx::query(&format!(
                            "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
                        ))
                        .execute(&pool)
                        .await;
                    }
                });
            })
            .join();
        }
    }
}

/// The machine's Postgres (trust auth); `THREADSTREAM_TEST_DATABASE_URL` overrides it.
fn admin_url() -> String {
    std::env::var("THREADSTREAM_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A fresh database for one test.
pub(crate) async fn fresh_pg_url() -> (Guard, String) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let admin = admin_url();
    let pool = sqlx::PgPool::connect(&admin)
        .await
        .expect("Postgres must be running on 127.0.0.1:5432 (see .ci/run)");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!(
        "ts_store_{}_{nanos}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let base = admin.rsplit_once('/').map(|(b, _)| b.to_string()).unwrap();
    (Guard::Pg(name.clone()), format!("{base}/{name}"))
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Sqlite,
    Postgres,
}

async fn open_kind(kind: Kind) -> (Guard, EventLog) {
    match kind {
        Kind::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let log = EventLog::open_sqlite(dir.path(), Durability::Full)
                .await
                .unwrap();
            (Guard::Dir(dir), log)
        }
        Kind::Postgres => {
            let (guard, url) = fresh_pg_url().await;
            let log = EventLog::open_postgres(&url, NotifyMode::Postgres)
                .await
                .unwrap();
            (guard, log)
        }
    }
}

/// Runs one test body against both stores.
macro_rules! both_stores {
    ($name:ident, $body:ident) => {
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$body(super::Kind::Sqlite).await
            }
            #[tokio::test]
            async fn postgres() {
                super::$body(super::Kind::Postgres).await
            }
        }
    };
}

pub(crate) fn start(run: &str) -> Vec<ThreadCommand> {
    vec![
        ThreadCommand::Create {
            owner: "u".into(),
            title: None,
        },
        ThreadCommand::StartRun {
            run_id: run.into(),
            agent_id: "a1".into(),
            message_id: "m1".into(),
            message_group_id: None,
            text: "hi".into(),
            user: "u".into(),
        },
    ]
}

pub(crate) fn delta(run: &str, text: &str) -> ThreadCommand {
    ThreadCommand::Record(AgentEvent::new(
        run,
        "a1",
        EventBody::TextDelta(TextDelta { text: text.into() }),
    ))
}

both_stores!(
    append_assigns_global_ids_and_contiguous_seqs,
    append_assigns_global_ids_and_contiguous_seqs_on
);
async fn append_assigns_global_ids_and_contiguous_seqs_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    let a = log.append("t1", start("r1")).await.unwrap();
    let b = log.append("t2", start("r2")).await.unwrap();
    let c = log.append("t1", vec![delta("r1", "x")]).await.unwrap();
    let ids: Vec<i64> = a.iter().chain(&b).chain(&c).map(|e| e.id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5, 6, 7]);
    let t1 = log.read_thread("t1", 0, 100).await.unwrap();
    assert_eq!(
        t1.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        t1.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![1, 2, 3, 7]
    );
    assert_eq!(log.read_thread("t1", 3, 100).await.unwrap().len(), 1);
}

both_stores!(
    every_column_reads_back_as_appended,
    every_column_reads_back_as_appended_on
);
/// What an append returns is exactly what is read back: every envelope field, NULLs, and text
/// that needs escaping in some format (quotes, backslashes, newlines, tabs, non-ASCII, a JSON
/// `\u0000` escape), in thread ids as well as in payloads.
async fn every_column_reads_back_as_appended_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    let thread = "thr \"é\\\n\t🦀";
    log.append(thread, start("r1")).await.unwrap();
    let text = "quote \" backslash \\ newline \n tab \t nul \u{0} é 🦀 \\N";
    let mut with_envelope = AgentEvent::new(
        "r1",
        "a1",
        EventBody::TextDelta(TextDelta { text: text.into() }),
    );
    with_envelope.user_id = Some("user 🦀".into());
    with_envelope.response_id = Some("resp\t1".into());
    let appended = log
        .append(
            thread,
            vec![ThreadCommand::Record(with_envelope), delta("r1", "plain")],
        )
        .await
        .unwrap();
    assert_eq!(appended[0].user_id.as_deref(), Some("user 🦀"));
    assert_eq!(appended[0].response_id.as_deref(), Some("resp\t1"));
    assert_eq!(appended[1].user_id, None);
    assert_eq!(appended[1].response_id, None);
    let stored = log.read_thread(thread, 0, 100).await.unwrap();
    let stored = &stored[stored.len() - 2..];
    for (a, s) in appended.iter().zip(stored) {
        assert_eq!(
            (
                a.id,
                &a.thread_id,
                a.seq,
                &a.run_id,
                &a.agent_id,
                &a.event_type,
                &a.payload,
                a.ts,
                &a.response_id,
                &a.user_id
            ),
            (
                s.id,
                &s.thread_id,
                s.seq,
                &s.run_id,
                &s.agent_id,
                &s.event_type,
                &s.payload,
                s.ts,
                &s.response_id,
                &s.user_id
            )
        );
    }
    match stored[0].decode().unwrap().body {
        EventBody::TextDelta(d) => assert_eq!(d.text, text),
        other => panic!("not a text delta: {other:?}"),
    }
}

both_stores!(
    thread_pages_start_after_any_cursor,
    thread_pages_start_after_any_cursor_on
);
/// A page holds the thread's events with `id > after`, in id order, whatever `after` is: an
/// event of the thread, of another thread, an id between them, 0, or past the head (Postgres
/// turns the cursor into a sequence differently for each).
async fn thread_pages_start_after_any_cursor_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    let threads = ["t0", "t1", "t2"];
    for (i, t) in threads.iter().enumerate() {
        log.append(t, start(&format!("r{i}"))).await.unwrap();
    }
    for round in 0..8 {
        // One thread alone, then all three in one batch, so ids of a thread have gaps of
        // every size.
        let t = threads[round % 3];
        let run = format!("r{}", round % 3);
        log.append(t, vec![delta(&run, "a")]).await.unwrap();
        futures::future::join_all(threads.iter().enumerate().map(|(i, t)| {
            let log = log.clone();
            async move { log.append(t, vec![delta(&format!("r{i}"), "b")]).await }
        }))
        .await
        .into_iter()
        .for_each(|r| {
            r.unwrap();
        });
    }
    let all = log.read_all(0, 10_000).await.unwrap();
    let head = all.last().unwrap().id;
    for t in threads {
        for after in 0..=head + 2 {
            for limit in [1, 3, 1_000] {
                let expected: Vec<i64> = all
                    .iter()
                    .filter(|e| e.thread_id == t && e.id > after)
                    .take(limit)
                    .map(|e| e.id)
                    .collect();
                let page = log.read_thread(t, after, limit as i64).await.unwrap();
                let got: Vec<i64> = page.iter().map(|e| e.id).collect();
                assert_eq!(got, expected, "thread {t}, after {after}, limit {limit}");
            }
        }
    }
}

both_stores!(
    refused_request_stores_nothing_of_itself,
    refused_request_stores_nothing_of_itself_on
);
async fn refused_request_stores_nothing_of_itself_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    log.append("t", start("r1")).await.unwrap();
    // The second command breaks a rule: the first must not be stored either.
    let err = log
        .append(
            "t",
            vec![
                delta("r1", "ok"),
                ThreadCommand::Record(AgentEvent::new(
                    "r1",
                    "a1",
                    EventBody::ToolResult(ToolResult {
                        tool_call_id: "nope".into(),
                        result: serde_json::Value::Null,
                    }),
                )),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::Rule(ThreadError::ToolCallNotOpen { .. })
    ));
    assert_eq!(log.read_thread("t", 0, 100).await.unwrap().len(), 3);
    // And the aggregate was rolled back: the next append gets seq 4.
    let next = log.append("t", vec![delta("r1", "y")]).await.unwrap();
    assert_eq!(next[0].seq, 4);
}

both_stores!(
    second_run_conflicts_while_first_is_live,
    second_run_conflicts_while_first_is_live_on
);
async fn second_run_conflicts_while_first_is_live_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    log.append("t", start("r1")).await.unwrap();
    let err = log.append("t", start("r2")).await.unwrap_err();
    assert!(matches!(
        err,
        StoreError::Rule(ThreadError::RunAlreadyActive { .. })
    ));
}

both_stores!(
    concurrent_appends_are_group_committed_with_unique_increasing_ids,
    concurrent_appends_are_group_committed_with_unique_increasing_ids_on
);
async fn concurrent_appends_are_group_committed_with_unique_increasing_ids_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    for t in 0..20 {
        log.append(&format!("t{t}"), start("r")).await.unwrap();
    }
    let mut tasks = Vec::new();
    for t in 0..20 {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..50 {
                let rows = log
                    .append(&format!("t{t}"), vec![delta("r", &i.to_string())])
                    .await
                    .unwrap();
                ids.push(rows[0].id);
            }
            ids
        }));
    }
    let mut all = HashSet::new();
    for task in tasks {
        let ids = task.await.unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "acks in id order per client"
        );
        for id in ids {
            assert!(all.insert(id), "id {id} given twice");
        }
    }
    let stored = log.read_all(0, 10_000).await.unwrap();
    assert_eq!(stored.len(), 20 * 3 + 20 * 50);
    assert!(stored.windows(2).all(|w| w[1].id == w[0].id + 1));
}

#[tokio::test]
async fn reopening_restores_aggregates_and_the_next_id() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = EventLog::open_sqlite(dir.path(), Durability::Full)
            .await
            .unwrap();
        log.append("t", start("r1")).await.unwrap();
        log.shutdown().await;
    }
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let err = log.append("t", start("r2")).await.unwrap_err();
    assert!(matches!(
        err,
        StoreError::Rule(ThreadError::RunAlreadyActive { .. })
    ));
    let rows = log.append("t", vec![delta("r1", "z")]).await.unwrap();
    assert_eq!((rows[0].id, rows[0].seq), (4, 4));
}

both_stores!(
    heads_wake_thread_subscribers,
    heads_wake_thread_subscribers_on
);
async fn heads_wake_thread_subscribers_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    let mut head = log.heads().thread("t");
    log.append("t", start("r1")).await.unwrap();
    head.changed().await.unwrap();
    assert_eq!(*head.borrow(), 3);
}

both_stores!(
    confirmation_requests_are_found_by_request_id,
    confirmation_requests_are_found_by_request_id_on
);
async fn confirmation_requests_are_found_by_request_id_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    log.append("t", start("r1")).await.unwrap();
    let call = AgentEvent::new(
        "r1",
        "a1",
        EventBody::ToolCall(ToolCall {
            tool_call_id: "tc".into(),
            tool_name: "delete-workflow".into(),
            args: Default::default(),
        }),
    );
    let ask = AgentEvent::new(
        "r1",
        "a1",
        EventBody::ConfirmationRequest(Box::new(ConfirmationRequest::approval(
            "cr1",
            "tc",
            "delete-workflow",
            Default::default(),
            Severity::Destructive,
            "Delete?",
        ))),
    );
    log.append(
        "t",
        vec![ThreadCommand::Record(call), ThreadCommand::Record(ask)],
    )
    .await
    .unwrap();
    assert_eq!(
        log.confirmation_thread("cr1").await.unwrap().as_deref(),
        Some("t")
    );
    assert_eq!(log.confirmation_thread("cr2").await.unwrap(), None);
}

/// Several writers (as several processes would have) append concurrently to many threads of one
/// Postgres log while a reader tails the global log by cursor: the reader must see every
/// committed event exactly once, in id order — none skipped by an out-of-order commit.
#[tokio::test]
async fn postgres_ids_become_visible_in_order_across_writers() {
    let (_g, url) = fresh_pg_url().await;
    let mut logs = Vec::new();
    for _ in 0..3 {
        logs.push(
            EventLog::open_postgres(&url, NotifyMode::Postgres)
                .await
                .unwrap(),
        );
    }
    for t in 0..12 {
        logs[t % 3]
            .append(&format!("t{t}"), start("r"))
            .await
            .unwrap();
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tail = {
        let log = logs[0].clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut cursor = 0;
            let mut seen = Vec::new();
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                let page = log.read_all(cursor, 1000).await.unwrap();
                if page.is_empty() && finished {
                    return seen;
                }
                for e in &page {
                    assert!(e.id > cursor, "ids go backwards: {} after {cursor}", e.id);
                    cursor = e.id;
                    seen.push(e.id);
                }
            }
        })
    };
    let mut writers = Vec::new();
    for w in 0..12usize {
        let log = logs[w % 3].clone();
        writers.push(tokio::spawn(async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
            let mut n = 0;
            while std::time::Instant::now() < deadline {
                log.append(&format!("t{w}"), vec![delta("r", &n.to_string())])
                    .await
                    .unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut appended = 0;
    for w in writers {
        appended += w.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = tail.await.unwrap();
    let all: Vec<i64> = logs[1]
        .read_all(0, 1_000_000)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(all.len(), 12 * 3 + appended);
    assert_eq!(
        seen, all,
        "the tailing reader saw exactly the committed ids, in order"
    );
    assert!(all.windows(2).all(|w| w[1] == w[0] + 1), "no id gaps");
}

/// A raw row for batch tests that bypass the writer: event `id`, sequence `id` of thread "t".
fn raw_row(id: i64) -> StoredEvent {
    StoredEvent {
        id,
        thread_id: "t".into(),
        seq: id,
        run_id: "r".into(),
        agent_id: "a".into(),
        event_type: "text-delta".into(),
        payload: "{\"text\":\"x\"}".into(),
        ts: 0,
        response_id: None,
        user_id: None,
    }
}

/// A batch whose transaction failed cannot be committed as if it had succeeded (a bare
/// `COMMIT` of an aborted transaction rolls back and reports success), and a batch dropped
/// without commit stores nothing and releases the order lock to the next batch.
#[tokio::test]
async fn postgres_batches_commit_only_what_succeeded() {
    let (_g, url) = fresh_pg_url().await;
    let pg = PgLog::open(&url).await.unwrap();
    let (mut batch, head) = pg.begin_batch().await.unwrap();
    assert_eq!(head, 0);
    PgLog::insert(&mut batch, &[raw_row(1)]).await.unwrap();
    assert!(sqlx::query("SELECT 1 / 0")
        .execute(&mut *batch)
        .await
        .is_err());
    assert!(batch.commit().await.is_err(), "an aborted batch committed");
    assert_eq!(pg.max_id().await.unwrap(), 0);

    let (mut batch, _) = pg.begin_batch().await.unwrap();
    PgLog::insert(&mut batch, &[raw_row(1)]).await.unwrap();
    drop(batch);
    let (mut batch, head) =
        tokio::time::timeout(std::time::Duration::from_secs(10), pg.begin_batch())
            .await
            .expect("the dropped batch still holds the order lock")
            .unwrap();
    assert_eq!(head, 0);
    PgLog::insert(&mut batch, &[raw_row(1)]).await.unwrap();
    batch.commit().await.unwrap();
    assert_eq!(pg.max_id().await.unwrap(), 1);
}

/// The server process of a batch's connection.
async fn pid_of(batch: &mut crate::postgres::PgBatch) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut **batch)
        .await
        .unwrap()
}

/// Batches keep their connection between batches; when the server ended it meanwhile (a
/// restart, an administrator), the next batch opens on a fresh connection instead of failing.
#[tokio::test]
async fn postgres_batch_opens_after_its_kept_connection_ended() {
    let (_g, url) = fresh_pg_url().await;
    let pg = PgLog::open(&url).await.unwrap();
    let (mut batch, _) = pg.begin_batch().await.unwrap();
    let first = pid_of(&mut batch).await;
    batch.commit().await.unwrap();
    let (mut batch, _) = pg.begin_batch().await.unwrap();
    assert_eq!(pid_of(&mut batch).await, first, "the connection is kept");
    batch.commit().await.unwrap();

    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(first)
        .fetch_one(pg.pool())
        .await
        .unwrap();
    assert!(ended);
    let (mut batch, head) = pg.begin_batch().await.unwrap();
    assert_eq!(head, 0);
    assert_ne!(pid_of(&mut batch).await, first);
    PgLog::insert(&mut batch, &[raw_row(1)]).await.unwrap();
    batch.commit().await.unwrap();
    assert_eq!(pg.max_id().await.unwrap(), 1);
}

/// A rule decided by one process is seen by another: the aggregate of a second writer catches up
/// with what the first committed before deciding.
#[tokio::test]
async fn postgres_writers_share_the_aggregate_rules() {
    let (_g, url) = fresh_pg_url().await;
    let a = EventLog::open_postgres(&url, NotifyMode::Postgres)
        .await
        .unwrap();
    let b = EventLog::open_postgres(&url, NotifyMode::Postgres)
        .await
        .unwrap();
    // b caches the thread's aggregate first (no run live).
    b.append(
        "t",
        vec![ThreadCommand::Create {
            owner: "u".into(),
            title: None,
        }],
    )
    .await
    .unwrap();
    a.append("t", start("r1")).await.unwrap();
    let err = b.append("t", start("r2")).await.unwrap_err();
    assert!(matches!(
        err,
        StoreError::Rule(ThreadError::RunAlreadyActive { .. })
    ));
    let rows = b.append("t", vec![delta("r1", "x")]).await.unwrap();
    assert_eq!(rows[0].seq, 4);
}

/// Head notifications cross processes: a subscriber on one log wakes when another log commits,
/// also after its LISTEN connection was killed.
#[tokio::test]
async fn postgres_notify_wakes_other_processes_and_survives_reconnect() {
    for mode in [
        NotifyMode::Postgres,
        NotifyMode::Redis("redis://127.0.0.1:6379".into()),
    ] {
        let (_g, url) = fresh_pg_url().await;
        let a = EventLog::open_postgres(&url, mode.clone()).await.unwrap();
        let b = EventLog::open_postgres(&url, mode.clone()).await.unwrap();
        let mut head = b.heads().thread("t");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await; // listeners up
        head.borrow_and_update();
        a.append("t", start("r1")).await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(2), head.changed())
            .await
            .unwrap_or_else(|_| panic!("{mode:?}: no wake-up from the other process"))
            .unwrap();
        if mode == NotifyMode::Postgres {
            // Kill every LISTEN connection on this database; the listener must come back.
            let name = url.rsplit('/').next().unwrap().to_string();
            let admin = sqlx::PgPool::connect(&admin_url()).await.unwrap();
            let killed = sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = $1 AND query ILIKE 'LISTEN%'",
            )
            .bind(&name)
            .fetch_all(&admin)
            .await
            .unwrap();
            assert!(
                killed.len() >= 2,
                "both processes' LISTEN connections were killed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
            head.borrow_and_update();
            a.append("t", vec![delta("r1", "after")]).await.unwrap();
            tokio::time::timeout(std::time::Duration::from_secs(3), head.changed())
                .await
                .expect("wake-up after the LISTEN connection was restarted")
                .unwrap();
        }
    }
}

/// The ids of the aggregates the writer has cached, least recently used first.
async fn cached_threads(log: &EventLog) -> Vec<String> {
    let (reply, rx) = tokio::sync::oneshot::channel();
    log.inner
        .tx
        .send(writer::WriterMsg::Cached { reply })
        .await
        .unwrap();
    rx.await.unwrap()
}

both_stores!(
    evicted_aggregates_reload_and_obey_the_rules,
    evicted_aggregates_reload_and_obey_the_rules_on
);
async fn evicted_aggregates_reload_and_obey_the_rules_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    let log = EventLog::start_with_cache(log.backend().clone(), NotifyMode::Local, 2)
        .await
        .unwrap();
    // t1 has a live run with an open tool call when it is evicted.
    log.append("t1", start("r1")).await.unwrap();
    let call = AgentEvent::new(
        "r1",
        "a1",
        EventBody::ToolCall(ToolCall {
            tool_call_id: "tc1".into(),
            tool_name: "search".into(),
            args: Default::default(),
        }),
    );
    log.append("t1", vec![ThreadCommand::Record(call)])
        .await
        .unwrap();
    for t in ["t2", "t3", "t4"] {
        log.append(t, start("r")).await.unwrap();
    }
    let cached = cached_threads(&log).await;
    assert_eq!(
        cached,
        ["t3", "t4"],
        "bounded to 2, least recently used out"
    );

    // Reloaded from the log, t1 still has its live run and its open call.
    let err = log.append("t1", start("r2")).await.unwrap_err();
    assert!(matches!(
        err,
        StoreError::Rule(ThreadError::RunAlreadyActive { .. })
    ));
    let unknown = AgentEvent::new(
        "r1",
        "a1",
        EventBody::ToolResult(ToolResult {
            tool_call_id: "nope".into(),
            result: serde_json::Value::Null,
        }),
    );
    let err = log
        .append("t1", vec![ThreadCommand::Record(unknown)])
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::Rule(ThreadError::ToolCallNotOpen { .. })
    ));
    let result = AgentEvent::new(
        "r1",
        "a1",
        EventBody::ToolResult(ToolResult {
            tool_call_id: "tc1".into(),
            result: serde_json::json!("found"),
        }),
    );
    let rows = log
        .append("t1", vec![ThreadCommand::Record(result)])
        .await
        .unwrap();
    // seq continues where the evicted aggregate left off (3 from start, 1 call).
    assert_eq!(rows[0].seq, 5);
    assert_eq!(
        cached_threads(&log).await.last().map(String::as_str),
        Some("t1")
    );
    assert!(cached_threads(&log).await.len() <= 2);
}

#[tokio::test]
async fn thread_owner_comes_from_the_committed_thread_created_event() {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    assert_eq!(log.thread_owner("t").await.unwrap(), None);
    log.append("t", start("r1")).await.unwrap();
    assert_eq!(log.thread_owner("t").await.unwrap().as_deref(), Some("u"));
    // Cached, and a later create of the same thread by someone else is refused as if the
    // thread did not exist (another user's thread is never revealed).
    let refused = log
        .append(
            "t",
            vec![ThreadCommand::Create {
                owner: "other".into(),
                title: None,
            }],
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::Rule(ThreadError::ThreadNotFound))),
        "{refused:?}"
    );
    assert_eq!(log.thread_owner("t").await.unwrap().as_deref(), Some("u"));
    // A new handle on the same file (empty cache) reads the same owner from the log.
    log.shutdown().await;
    let again = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    assert_eq!(again.thread_owner("t").await.unwrap().as_deref(), Some("u"));
}

/// The plan `sql` (an `EXPLAIN …`) prints, as one string.
async fn explain(conn: &mut sqlx::PgConnection, sql: &str) -> String {
    sqlx::query(sql)
        .fetch_all(conn)
        .await
        .unwrap()
        .iter()
        .map(|r| sqlx::Row::get::<String, _>(r, 0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A thread's page is one ordered range of the primary key in the plan Postgres uses for the
/// prepared statement (a generic plan), with no sort, and a cursor that is an event of the
/// thread costs one probe of `events_id_unique` (the backward walk for other cursors is never
/// run). The cause of the 30 s replay before migration 0005 was a primary-key scan sorting the
/// whole thread for every page.
#[tokio::test]
async fn postgres_thread_pages_are_one_ordered_index_range() {
    let (_guard, url) = fresh_pg_url().await;
    let log = crate::postgres::PgLog::open(&url).await.unwrap();
    let mut conn = log.pool().acquire().await.unwrap();
    // 50 threads of 2,000 events, interleaved as concurrent threads are.
    sqlx::query(
        "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version,
                             payload, metadata, id, run_id, agent_id, ts)
         SELECT 'thread', 't' || (i % 50), i / 50 + 1, 'text-delta', '1',
                '{\"text\":\"x\"}'::json, '{}'::json, i + 1, 'r', 'a', 0
         FROM generate_series(0, 99999) AS i",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query("ANALYZE events")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query(&format!(
        "PREPARE page(text, bigint, bigint) AS {}",
        crate::postgres::THREAD_PAGE
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    let plan = explain(&mut conn, "EXPLAIN EXECUTE page('t7', 0, 1000)").await;
    let main = plan
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("->  Index Scan using events_pkey on events  ")
        })
        .unwrap_or_else(|| panic!("the page is not a range of the primary key:\n{plan}"));
    let cond = plan
        .lines()
        .skip_while(|l| *l != main)
        .nth(1)
        .unwrap_or_default();
    assert!(
        cond.contains("Index Cond:") && cond.contains("(sequence > "),
        "the page's range is not bounded by the cursor's sequence:\n{plan}"
    );
    assert!(!plan.contains("Sort"), "the page is sorted:\n{plan}");
    // t7's events have ids 8, 58, 108, …: 58 is one of them.
    let plan = explain(
        &mut conn,
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE page('t7', 58, 1000)",
    )
    .await;
    assert!(
        plan.contains("Index Scan using events_id_unique"),
        "the cursor is not found through events_id_unique:\n{plan}"
    );
    let backward = plan
        .lines()
        .find(|l| l.contains("Index Scan Backward"))
        .unwrap_or_else(|| panic!("no backward walk for foreign cursors:\n{plan}"));
    assert!(
        backward.contains("(never executed)"),
        "the backward walk ran for a cursor of the thread:\n{plan}"
    );
}

/// The same on SQLite: the indexed part of a page is one range of the thread index's primary
/// key, then each run of ids one range of the log's, with no temporary sort; the tail part scans
/// the log by id.
#[tokio::test]
async fn sqlite_thread_pages_are_one_ordered_index_range() {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    log.append("t", start("r1")).await.unwrap();
    let reader = crate::sqlite_pages::PageReader::new(&dir.path().join("threadstream.db"));
    let conn = reader.open().unwrap();
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let args: [&dyn rusqlite::ToSql; 4] = [&"t", &0, &1000, &i64::MAX];
        let n = stmt.parameter_count();
        let rows: Vec<String> = stmt
            .query_map(&args[..n], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        rows.join("\n")
    };
    let indexed = plan(crate::sqlite_pages::THREAD_RUNS);
    assert!(
        indexed.contains("SEARCH idx.thread_runs USING PRIMARY KEY (thread_id=? AND last_id>?)"),
        "not a range of the thread index:\n{indexed}"
    );
    assert!(
        !indexed.contains("TEMP B-TREE"),
        "the index rows are sorted:\n{indexed}"
    );
    let run = plan(crate::sqlite_pages::ID_RUN);
    assert!(
        run.contains("SEARCH e USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
        "a run of ids is not a range of the log's key:\n{run}"
    );
    assert!(!run.contains("TEMP B-TREE"), "a run is sorted:\n{run}");
    let tail = plan(crate::sqlite_pages::THREAD_TAIL);
    assert!(
        tail.contains("SEARCH e USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
        "the tail is not a scan by id:\n{tail}"
    );
    assert!(!tail.contains("TEMP B-TREE"), "the tail is sorted:\n{tail}");
}

/// Events of `thread` after `after`, at most `limit`, straight from the log (no index): what
/// every page must equal.
fn expected_page(
    conn: &rusqlite::Connection,
    thread: &str,
    after: i64,
    limit: i64,
) -> Vec<(i64, i64)> {
    let mut stmt = conn
        .prepare("SELECT id, seq FROM events WHERE thread_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3")
        .unwrap();
    stmt.query_map(rusqlite::params![thread, after, limit], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// Sets the thread index as if the indexer had reached exactly `through`.
fn index_only_through(dir: &std::path::Path, through: i64) {
    let idx = rusqlite::Connection::open(dir.join(crate::sqlite_index::INDEX_FILE)).unwrap();
    idx.execute(
        "ATTACH DATABASE ?1 AS log",
        [dir.join("threadstream.db").to_str().unwrap()],
    )
    .unwrap();
    idx.execute_batch("BEGIN; DELETE FROM thread_runs;")
        .unwrap();
    // In passes of 7 ids, so a thread's ids are spread over several rows of the index.
    let mut at = 0;
    while at < through {
        let upto = (at + 7).min(through);
        crate::sqlite_index::index_range(&idx, at, upto).unwrap();
        at = upto;
    }
    idx.execute("UPDATE index_state SET through = ?1", [through])
        .unwrap();
    idx.execute_batch("COMMIT").unwrap();
}

/// A page is the same whatever part of the log the indexer has reached: nothing indexed, part of
/// it (also in the middle of a page), all of it, and with indexed rows since deleted from the log.
/// Every cursor and page size is checked against a plain scan of the log.
#[tokio::test]
async fn sqlite_pages_are_exact_whatever_the_index_has_reached() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = EventLog::open_sqlite(dir.path(), Durability::Full)
            .await
            .unwrap();
        for t in ["a", "b", "c"] {
            log.append(t, start(&format!("r-{t}"))).await.unwrap();
        }
        for i in 0..40 {
            for t in ["a", "b", "c"] {
                if i % 3 == 0 && t == "b" {
                    continue;
                }
                log.append(t, vec![delta(&format!("r-{t}"), "x")])
                    .await
                    .unwrap();
            }
        }
        log.shutdown().await;
    }
    // The log is closed: its indexer is stopped, so the index stays as set below.
    let path = dir.path().join("threadstream.db");
    let plain = rusqlite::Connection::open(&path).unwrap();
    let head: i64 = plain
        .query_row("SELECT MAX(id) FROM events", [], |r| r.get(0))
        .unwrap();
    let reader = crate::sqlite_pages::PageReader::new(&path);
    let conn = reader.open().unwrap();
    for (through, holes) in [
        (head, false),
        (head / 2 + 1, false),
        (7, false),
        (0, false),
        (head, true),
    ] {
        index_only_through(dir.path(), through);
        if holes {
            // Rows deleted by hand after they were indexed: pages still fill from what is left.
            plain
                .execute(
                    "DELETE FROM events WHERE id % 4 = 0 OR id BETWEEN 30 AND 60",
                    [],
                )
                .unwrap();
        }
        for t in ["a", "b", "c", "nobody"] {
            for after in (0..=head + 1).step_by(5) {
                // i64::MAX: "the whole thread", as the runtime's recovery reads it.
                for limit in [1, 3, 50, 1000, i64::MAX] {
                    let got: Vec<(i64, i64)> =
                        crate::sqlite_pages::thread_page(&conn, t, after, limit, i64::MAX)
                            .unwrap()
                            .iter()
                            .map(|e| {
                                assert_eq!(e.thread_id, t);
                                (e.id, e.seq)
                            })
                            .collect();
                    assert_eq!(
                        got,
                        expected_page(&plain, t, after, limit),
                        "thread {t} after {after} limit {limit}, indexed through {through}, holes {holes}"
                    );
                }
            }
        }
    }
}

/// The indexer follows the log on its own, and an index that is missing or was made from another
/// log is rebuilt when the log is opened.
#[tokio::test]
async fn sqlite_thread_index_follows_the_log_and_is_rebuilt_when_foreign() {
    let dir = tempfile::tempdir().unwrap();
    let through = |dir: &std::path::Path| -> i64 {
        let idx = rusqlite::Connection::open(dir.join(crate::sqlite_index::INDEX_FILE)).unwrap();
        idx.query_row("SELECT through FROM index_state", [], |r| r.get(0))
            .unwrap()
    };
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    log.append("t", start("r1")).await.unwrap();
    log.append("u", start("r2")).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while through(dir.path()) < 6 {
        assert!(
            std::time::Instant::now() < deadline,
            "the indexer never caught up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    log.shutdown().await;
    drop(log);

    // Deleted: rebuilt at open.
    std::fs::remove_file(dir.path().join(crate::sqlite_index::INDEX_FILE)).unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    assert_eq!(through(dir.path()), 6);
    log.shutdown().await;
    drop(log);

    // In the format of before runs (one row per id, `user_version` 0): replaced and rebuilt.
    std::fs::remove_file(dir.path().join(crate::sqlite_index::INDEX_FILE)).unwrap();
    {
        let idx =
            rusqlite::Connection::open(dir.path().join(crate::sqlite_index::INDEX_FILE)).unwrap();
        idx.execute_batch(
            "CREATE TABLE thread_index (thread_id TEXT NOT NULL, id INTEGER NOT NULL,
                 PRIMARY KEY (thread_id, id)) WITHOUT ROWID;
             CREATE TABLE index_state (only INTEGER PRIMARY KEY, through INTEGER NOT NULL);
             INSERT INTO thread_index VALUES ('t', 1);
             INSERT INTO index_state VALUES (1, 1);",
        )
        .unwrap();
    }
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    assert_eq!(through(dir.path()), 6);
    let u: Vec<i64> = log
        .read_thread("u", 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(u, vec![4, 5, 6]);
    log.shutdown().await;
    drop(log);

    // Made from another log (its last indexed id is in another thread here): rebuilt at open,
    // and pages come from the log, not from the stale entries.
    {
        let idx =
            rusqlite::Connection::open(dir.path().join(crate::sqlite_index::INDEX_FILE)).unwrap();
        let runs = crate::sqlite_index::encode_runs(&[4, 5, 6]);
        idx.execute_batch(
            "DELETE FROM thread_runs; UPDATE index_state SET through = 6, through_thread = 't';",
        )
        .unwrap();
        idx.execute("INSERT INTO thread_runs VALUES ('t', 6, 4, ?1)", [runs])
            .unwrap();
    }
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let t: Vec<i64> = log
        .read_thread("t", 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(t, vec![1, 2, 3]);
    let u: Vec<i64> = log
        .read_thread("u", 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(u, vec![4, 5, 6]);
    log.shutdown().await;
}

/// A log written before migration 0002 (with the thread-keyed indexes in the log file) keeps
/// every event and id when it is opened by this version, and its threads read as before.
#[tokio::test]
async fn sqlite_log_from_before_the_index_file_is_upgraded() {
    use sha2::Digest;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threadstream.db");
    {
        let old = include_str!("../../migrations/sqlite/0001_log.sql");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
        conn.execute_batch(old).unwrap();
        // sqlx's migration table, as sqlx 0.8 writes it after applying 0001.
        conn.execute_batch(
            "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL,
             installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, success BOOLEAN NOT NULL,
             checksum BLOB NOT NULL, execution_time BIGINT NOT NULL);",
        )
        .unwrap();
        let checksum = sha2::Sha384::digest(old.as_bytes()).to_vec();
        conn.execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
             VALUES (1, 'log', 1, ?1, 0)",
            [checksum],
        )
        .unwrap();
        // Ids with a gap (rows removed by hand): the upgrade keeps ids as they are.
        conn.execute_batch(
            r#"INSERT INTO events (id, thread_id, seq, run_id, agent_id, type, payload, ts) VALUES
               (1, 't', 1, '', '', 'thread-created', '{"owner":"u"}', 1),
               (2, 'u', 1, '', '', 'thread-created', '{"owner":"u"}', 1),
               (5, 't', 2, 'r1', 'a1', 'run-start', '{"messageId":"m1"}', 2);"#,
        )
        .unwrap();
    }
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let t: Vec<(i64, i64)> = log
        .read_thread("t", 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.id, e.seq))
        .collect();
    assert_eq!(t, vec![(1, 1), (5, 2)]);
    // The thread goes on from where it was.
    let next = log.append("t", vec![delta("r1", "x")]).await.unwrap();
    assert_eq!((next[0].id, next[0].seq), (6, 3));
    log.shutdown().await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let indexes: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(indexes, vec!["events_by_confirmation".to_string()]);
}

/// Durable SQLite: a row committed to the file but not yet acknowledged (here written by another
/// connection, as a batch between its commit and its WAL sync looks) is invisible to every
/// reader of the log, but not to the writer's own reads; once acknowledged up to it, it is read.
#[tokio::test]
async fn sqlite_readers_stop_at_the_last_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let stored = log.append("t", start("r1")).await.unwrap();
    let head = stored.last().unwrap().id;
    let raw = rusqlite::Connection::open(dir.path().join("threadstream.db")).unwrap();
    let mut row = stored.last().unwrap().clone();
    row.id = head + 1;
    row.seq += 1;
    raw.execute(
        "INSERT INTO events (id, thread_id, seq, run_id, agent_id, type, payload, ts, response_id, user_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        rusqlite::params![row.id, row.thread_id, row.seq, row.run_id, row.agent_id,
            row.event_type, row.payload, row.ts, row.response_id, row.user_id],
    )
    .unwrap();
    let Backend::Sqlite(sqlite) = log.backend() else {
        unreachable!()
    };
    let ids = |page: Vec<StoredEvent>| page.iter().map(|e| e.id).collect::<Vec<_>>();
    let acknowledged: Vec<i64> = (1..=head).collect();
    assert_eq!(ids(log.read_all(0, 100).await.unwrap()), acknowledged);
    assert_eq!(
        ids(log.read_thread("t", 0, 100).await.unwrap()),
        acknowledged
    );
    let mut committed = acknowledged.clone();
    committed.push(head + 1);
    assert_eq!(
        ids(sqlite.read_all_committed(0, 100).await.unwrap()),
        committed
    );
    assert_eq!(
        ids(sqlite.read_thread_committed("t", 0, 100).await.unwrap()),
        committed
    );
    sqlite.committed(head + 1);
    assert_eq!(ids(log.read_thread("t", 0, 100).await.unwrap()), committed);
    log.shutdown().await;
}

/// Durable SQLite: an acknowledged append has been through the syncer (the WAL is synced before
/// the reply), and its events are readable at once; many concurrent appends all get their own
/// rows back, in the order they were stored.
#[tokio::test]
async fn sqlite_durable_appends_are_acknowledged_after_their_sync_with_their_own_rows() {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let appends = (0..50).map(|i| {
        let log = log.clone();
        async move {
            let t = format!("t{i}");
            let mut ids = Vec::new();
            let first = log.append(&t, start("r")).await.unwrap();
            ids.extend(first.iter().map(|e| e.id));
            for k in 0..20 {
                let rows = log
                    .append(&t, vec![delta("r", &format!("{k}"))])
                    .await
                    .unwrap();
                assert_eq!(rows.len(), 1);
                assert_eq!(rows[0].thread_id, t);
                // Read-your-writes: acknowledged means visible.
                let read = log.read_thread(&t, rows[0].id - 1, 10).await.unwrap();
                assert_eq!(read.first().map(|e| e.id), Some(rows[0].id));
                ids.push(rows[0].id);
            }
            (t, ids)
        }
    });
    for (t, ids) in futures::future::join_all(appends).await {
        let stored = log.read_thread(&t, 0, 1000).await.unwrap();
        assert_eq!(stored.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
        assert!(stored.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    }
    log.shutdown().await;
}

fn keyed(key: &str, fingerprint: &str, expires_at: i64) -> KeyedAppend {
    KeyedAppend {
        key: IdempotencyKey {
            scope: "u".into(),
            key: key.into(),
        },
        fingerprint: fingerprint.into(),
        expires_at,
        answer: std::sync::Arc::new(|stored: &[StoredEvent]| {
            let ids: Vec<i64> = stored.iter().map(|e| e.id).collect();
            serde_json::json!({ "ids": ids }).to_string()
        }),
    }
}

/// Many appends under one key, in one process (in one batch, and in a batch decided while one
/// with the key is written): one is stored, with its answer; the others store nothing.
async fn a_keys_racing_appends_store_once(kind: Kind) {
    let (_guard, log) = open_kind(kind).await;
    let far = threadstream_domain::clock::now_ms() + 60_000;
    // Rounds: whether an append arrives while the key's batch is written is up to timing.
    for round in 0..8 {
        let t = format!("t{round}");
        log.append(&t, start("r1")).await.unwrap();
        let appends = (0..40).map(|i| {
            let log = log.clone();
            let t = t.clone();
            // Other keys among them, each stored.
            let key = if i % 4 == 0 {
                format!("other-{round}-{i}")
            } else {
                format!("k{round}")
            };
            // Spread out, so that some arrive while a batch with the key is being written (on
            // Postgres the writer decides them before that batch lands).
            async move {
                tokio::time::sleep(std::time::Duration::from_micros(300 * i)).await;
                log.append_keyed(&t, vec![delta("r1", "x")], keyed(&key, "fp", far))
                    .await
            }
        });
        let results = futures::future::join_all(appends).await;
        let stored = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(
            stored,
            1 + 10,
            "round {round}: one of the key, and each other key"
        );
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, StoreError::KeyAnswered), "round {round}: {e:?}");
            }
        }
        let deltas = log
            .read_thread(&t, 0, 1000)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.event_type == "text-delta")
            .count();
        assert_eq!(deltas, 11, "round {round}");
        let key = IdempotencyKey {
            scope: "u".into(),
            key: format!("k{round}"),
        };
        let answer = log
            .key_answer(&key, threadstream_domain::clock::now_ms())
            .await
            .unwrap()
            .expect("the key is answered");
        let winner = results
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 4 != 0)
            .find_map(|(_, r)| r.as_ref().ok())
            .expect("one append of the key stored");
        let ids: Vec<i64> = winner.iter().map(|e| e.id).collect();
        assert_eq!(answer, serde_json::json!({ "ids": ids }).to_string());
    }
}
both_stores!(
    keys_racing_appends_store_once,
    a_keys_racing_appends_store_once
);

/// A claim's life: taken, held against a second claim (of any request), given back, answered,
/// taken over once it ran out, and forgotten once expired.
async fn a_claims_life(kind: Kind) {
    let (_guard, log) = open_kind(kind).await;
    let now = threadstream_domain::clock::now_ms();
    let key = IdempotencyKey {
        scope: "u".into(),
        key: "k".into(),
    };
    let claim = |token: &str, fingerprint: &str, now: i64| KeyClaim {
        key: key.clone(),
        fingerprint: fingerprint.into(),
        token: token.into(),
        now,
        claimed_until: now + 10_000,
        expires_at: now + 60_000,
    };
    assert_eq!(
        log.claim_key(&claim("a", "fp", now)).await.unwrap(),
        Claim::Taken
    );
    let held = Claim::Held {
        fingerprint: "fp".into(),
    };
    assert_eq!(log.claim_key(&claim("b", "fp", now)).await.unwrap(), held);
    assert_eq!(
        log.claim_key(&claim("b", "other", now)).await.unwrap(),
        held
    );
    // Only its holder gives a claim back.
    log.release_key(&key, "b").await.unwrap();
    assert_eq!(log.claim_key(&claim("b", "fp", now)).await.unwrap(), held);
    log.release_key(&key, "a").await.unwrap();
    assert_eq!(
        log.claim_key(&claim("b", "fp", now)).await.unwrap(),
        Claim::Taken
    );
    // Past b's claim, another execution takes the key over.
    let later = now + 10_001;
    assert_eq!(
        log.claim_key(&claim("c", "fp", later)).await.unwrap(),
        Claim::Taken
    );

    log.append("t", start("r1")).await.unwrap();
    let stored = log
        .append_keyed("t", vec![delta("r1", "x")], keyed("k", "fp", now + 60_000))
        .await
        .unwrap();
    let answer = serde_json::json!({ "ids": [stored[0].id] }).to_string();
    let answered = Claim::Answered {
        fingerprint: "fp".into(),
        answer,
    };
    assert_eq!(
        log.claim_key(&claim("d", "fp", later)).await.unwrap(),
        answered
    );
    // An answered key is not given back, nor taken over.
    log.release_key(&key, "c").await.unwrap();
    let much_later = now + 59_000;
    assert_eq!(
        log.claim_key(&claim("d", "fp", much_later)).await.unwrap(),
        answered
    );
    // Expired: forgotten by reads, claims and appends, and pruned.
    let expired = now + 60_001;
    assert_eq!(log.key_answer(&key, expired).await.unwrap(), None);
    assert_eq!(
        log.claim_key(&claim("e", "fp2", expired)).await.unwrap(),
        Claim::Taken
    );
    log.prune_keys(expired + 60_001).await.unwrap();
    assert_eq!(
        log.claim_key(&claim("f", "fp3", expired)).await.unwrap(),
        Claim::Taken
    );
}
both_stores!(claims_life, a_claims_life);

fn finish(run: &str) -> ThreadCommand {
    ThreadCommand::Record(AgentEvent::new(
        run,
        "a1",
        EventBody::RunFinish(RunFinish {
            status: RunStatus::Completed,
            reason: None,
            archived_workflow_ids: None,
        }),
    ))
}

fn fork_at(source: &str, through: i64) -> Vec<ThreadCommand> {
    vec![ThreadCommand::Fork {
        owner: "u".into(),
        title: None,
        fork_of: threadstream_domain::ForkOf {
            thread_id: source.into(),
            through_event_id: through,
        },
    }]
}

fn second_run(run: &str) -> ThreadCommand {
    ThreadCommand::StartRun {
        run_id: run.into(),
        agent_id: "a1".into(),
        message_id: format!("m-{run}"),
        message_group_id: None,
        text: "again".into(),
        user: "u".into(),
    }
}

/// `(id, seq, thread, type)` of every event, to compare reads.
fn shape(rows: &[StoredEvent]) -> Vec<(i64, i64, String, String)> {
    rows.iter()
        .map(|e| (e.id, e.seq, e.thread_id.clone(), e.event_type.clone()))
        .collect()
}

both_stores!(
    a_fork_reads_through_its_source,
    a_fork_reads_through_its_source_on
);
/// A fork holds only its own events and reads its source's through the fork point, at every
/// cursor and page size; its own events are numbered on after that prefix; the writer decides
/// its commands on the prefix's state; a fork of a fork reads through both; and the source is
/// untouched. Fork points inside a run, or not of the source, are refused with nothing stored.
async fn a_fork_reads_through_its_source_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    let mut source = log.append("s", start("r1")).await.unwrap();
    source.extend(
        log.append("s", vec![delta("r1", "a"), finish("r1")])
            .await
            .unwrap(),
    );
    let through = source.last().unwrap().id;
    // The source goes on after the fork point: none of that is the fork's.
    source.extend(
        log.append("s", vec![second_run("r2"), delta("r2", "later")])
            .await
            .unwrap(),
    );
    let source_before = shape(&log.read_thread("s", 0, 100).await.unwrap());

    let created = log.append("f", fork_at("s", through)).await.unwrap();
    assert_eq!(created.len(), 1);
    assert_eq!(
        created[0].seq, 6,
        "numbered on after the 5 events of the prefix"
    );
    assert_eq!(created[0].fork_of().unwrap().through_event_id, through);
    assert_eq!(log.fork_source("f").await.unwrap().unwrap().thread_id, "s");
    // The run r2 of the source is not the fork's: the fork may start its own r2.
    let own = log
        .append("f", vec![second_run("r2"), delta("r2", "mine")])
        .await
        .unwrap();
    assert_eq!(own.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![7, 8, 9]);
    assert!(matches!(
        log.append("f", vec![second_run("r3")]).await,
        Err(StoreError::Rule(ThreadError::RunAlreadyActive { .. }))
    ));

    let mut want: Vec<(i64, i64, String, String)> = shape(&source[..5])
        .into_iter()
        .map(|(id, seq, _, ty)| (id, seq, "f".to_string(), ty))
        .collect();
    want.extend(shape(&created));
    want.extend(shape(&own));
    let whole = log.read_thread("f", 0, 100).await.unwrap();
    assert_eq!(shape(&whole), want);
    for after in std::iter::once(0).chain(whole.iter().map(|e| e.id)) {
        for limit in 1..=4 {
            let mut got = Vec::new();
            let mut cursor = after;
            loop {
                let page = log.read_thread("f", cursor, limit).await.unwrap();
                let Some(last) = page.last() else { break };
                cursor = last.id;
                got.extend(shape(&page));
            }
            let expected: Vec<_> = want.iter().filter(|w| w.0 > after).cloned().collect();
            assert_eq!(got, expected, "after {after}, pages of {limit}");
        }
    }
    // The fork's own log stream holds no copy of the source's events.
    let raw = log.backend().read_thread("f", 0, 100).await.unwrap();
    assert_eq!(raw.len(), 4);
    assert_eq!(
        shape(&log.read_thread("s", 0, 100).await.unwrap()),
        source_before
    );

    // A fork of the fork, at a point inside the first fork's prefix and at its own event.
    let inner = log.append("ff", fork_at("f", source[0].id)).await.unwrap();
    assert_eq!(inner[0].seq, 2, "after the source's thread-created");
    let ff = log.read_thread("ff", 0, 100).await.unwrap();
    assert_eq!(
        ff.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![source[0].id, inner[0].id]
    );
    assert!(matches!(
        log.append("fff", fork_at("f", created[0].id)).await,
        Ok(rows) if rows[0].seq == 7
    ));

    // Refused, nothing stored: a point inside a run, an id not of the source, a taken id.
    let inside = source[3].id; // r1's text-delta
    assert!(matches!(
        log.append("g", fork_at("s", inside)).await,
        Err(StoreError::Rule(ThreadError::ForkInsideRun { .. }))
    ));
    assert!(matches!(
        log.append("g", fork_at("s", own[0].id)).await,
        Err(StoreError::Rule(ThreadError::ForkPointNotFound { .. }))
    ));
    assert!(matches!(
        log.append("f", fork_at("s", through)).await,
        Err(StoreError::Rule(ThreadError::ThreadExists(_)))
    ));
    assert!(log.read_thread("g", 0, 10).await.unwrap().is_empty());
    // A fresh process folds the fork's aggregate through its source, as the writer did.
    let state = log.thread_state("f").await.unwrap();
    assert_eq!(state.version, 9);
    assert_eq!(state.live_run().unwrap().run_id, "r2");
    log.shutdown().await;
}

/// A fork made by one process and appended to by another: the second, which had the fork's id
/// cached as an empty aggregate, folds it through the source when it catches up, so its next
/// command is decided on the prefix (a run id of the prefix is refused, seqs go on from it).
#[tokio::test]
async fn postgres_a_fork_made_elsewhere_is_decided_on_its_prefix() {
    let (_g, url) = fresh_pg_url().await;
    let a = EventLog::open_postgres(&url, NotifyMode::Local)
        .await
        .unwrap();
    let b = EventLog::open_postgres(&url, NotifyMode::Local)
        .await
        .unwrap();
    let mut source = a.append("s", start("r1")).await.unwrap();
    source.extend(a.append("s", vec![finish("r1")]).await.unwrap());
    assert_eq!(
        b.thread_state("f").await.unwrap().version,
        0,
        "cached empty in b"
    );
    let created = a
        .append("f", fork_at("s", source.last().unwrap().id))
        .await
        .unwrap();
    assert!(matches!(
        b.append("f", vec![second_run("r1")]).await,
        Err(StoreError::Rule(ThreadError::DuplicateRun(_)))
    ));
    let own = b.append("f", vec![second_run("r2")]).await.unwrap();
    assert_eq!(own[0].seq, created[0].seq + 1);
    a.shutdown().await;
    b.shutdown().await;
}
