//! Tests of the log against a real SQLite file and the machine's real Postgres (a fresh database
//! per test, so they run in parallel). The stores and helpers every test uses are here; the
//! tests are grouped by what they test: `log` (appends, reads, aggregates, on both stores),
//! `postgres` and `sqlite` (each backend's own mechanics), `idempotency` (keys), `fork` (forks).

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

/// `n` logs on one database, as `n` processes would have, each with its writer.
pub(crate) async fn writers(url: &str, n: usize) -> Vec<EventLog> {
    let mut logs = Vec::new();
    for _ in 0..n {
        logs.push(
            EventLog::open_postgres(url, NotifyMode::Postgres)
                .await
                .unwrap(),
        );
    }
    logs
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

/// A second run of the thread [`start`] made.
pub(crate) fn second_run(run: &str) -> ThreadCommand {
    ThreadCommand::StartRun {
        run_id: run.into(),
        agent_id: "a1".into(),
        message_id: format!("m-{run}"),
        message_group_id: None,
        text: "again".into(),
        user: "u".into(),
    }
}

pub(crate) fn finish(run: &str) -> ThreadCommand {
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

mod compaction;
mod erasure;
mod erasure_order;
mod fork;
mod idempotency;
mod log;
mod postgres;
mod signing_key;
mod sqlite;

/// The server process of a batch's connection.
pub(crate) async fn pid_of(batch: &mut crate::postgres::PgBatch) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut **batch)
        .await
        .unwrap()
}

/// Ends server process `pid` of `pg`'s database, as an administrator or a failover would.
pub(crate) async fn end_backend(pg: &crate::postgres::PgLog, pid: i32) {
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(pid)
        .fetch_one(pg.pool())
        .await
        .unwrap();
    assert!(ended);
}

/// The writer's counts: aggregates folded from the log, batches decided again, batches written.
pub(crate) async fn writer_counts(log: &EventLog) -> writer::WriterCounts {
    let (reply, rx) = tokio::sync::oneshot::channel();
    log.inner
        .tx
        .send(writer::WriterMsg::Counts { reply })
        .await
        .unwrap();
    rx.await.unwrap()
}
