//! A Postgres erasure deletes the bulk of its scope before it takes the write order
//! (`crate::erasure::postgres::ErasedAhead`): appends to other threads are not held up while it
//! waits or deletes, and what is appended to its scope meanwhile is erased with it — or, for a
//! retention erasure, the whole erasure is given up and the deletes already made roll back.
//!
//! Each test holds the erasure before the write order with a row lock taken from another
//! connection (waiting for it is seen in `pg_stat_activity`), so the interleaving is certain,
//! not timed.

use std::time::Duration;

use sqlx::{Connection, PgConnection};
use threadstream_domain::event::erasure::{ErasureReason, ErasureScope};

use super::*;
use crate::{ErasureRequest, NotErased};

fn create(owner: &str) -> Vec<ThreadCommand> {
    vec![ThreadCommand::Create {
        owner: owner.into(),
        title: None,
    }]
}

fn rename(title: &str) -> Vec<ThreadCommand> {
    vec![ThreadCommand::Rename {
        title: title.into(),
        by: "alice".into(),
    }]
}

fn erase_thread(thread: &str, retention: bool) -> ErasureRequest {
    ErasureRequest {
        scope: ErasureScope {
            thread_id: Some(thread.into()),
            idle_before_ms: retention.then_some(i64::MAX),
            ..Default::default()
        },
        requested_by: "test".into(),
        reason: if retention {
            ErasureReason::Retention
        } else {
            ErasureReason::Request
        },
    }
}

/// A log on a fresh database with thread `gone` (3 events) and thread `kept` (1), and a
/// connection of its own to that database.
async fn two_threads() -> (Guard, EventLog, PgConnection) {
    let (guard, url, log) = fresh_log().await;
    log.append("gone", create("alice")).await.unwrap();
    log.append("gone", rename("one")).await.unwrap();
    log.append("gone", rename("two")).await.unwrap();
    log.append("kept", create("bob")).await.unwrap();
    let conn = PgConnection::connect(&url).await.unwrap();
    (guard, log, conn)
}

async fn fresh_log() -> (Guard, String, EventLog) {
    let (guard, url) = fresh_pg_url().await;
    let log = EventLog::open_postgres(&url, NotifyMode::Postgres)
        .await
        .unwrap();
    (guard, url, log)
}

/// An append must not wait for the erasure in progress.
async fn append_soon(log: &EventLog, thread: &str, title: &str) -> i64 {
    tokio::time::timeout(Duration::from_secs(5), log.append(thread, rename(title)))
        .await
        .expect("an append waited for the erasure in progress")
        .unwrap()[0]
        .id
}

/// Where an erasure is held, by a row lock another transaction takes, before the write order.
#[derive(Debug, Clone, Copy)]
enum Pin {
    /// Before its first delete: waiting for a projector's checkpoint row.
    BeforeTheDeletes,
    /// In its deletes (one statement, its snapshot taken): waiting for the row of the thread's
    /// attachment.
    InTheDeletes,
}

type Erasing = tokio::task::JoinHandle<Result<Result<crate::Erasure, NotErased>, StoreError>>;

/// Starts erasing thread `gone` and returns once it is held at `pin`, with the transaction
/// holding it there.
async fn erase_pinned(
    log: &EventLog,
    other: &mut PgConnection,
    pin: Pin,
    retention: bool,
) -> (sqlx::Transaction<'static, sqlx::Postgres>, Erasing) {
    sqlx::query("INSERT INTO checkpoints (model, last_id) VALUES ('test-model', 0)")
        .execute(&mut *other)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO attachments (path, thread_id, user_id, file_name, content_type, size, \
         sha256, created_at, bytes) VALUES ('p', 'gone', 'alice', 'f', 'text/plain', 1, '', 0, 'x')",
    )
    .execute(&mut *other)
    .await
    .unwrap();
    let Backend::Postgres(pg) = log.backend() else {
        unreachable!("a Postgres log")
    };
    let (lock, waiting) = match pin {
        Pin::BeforeTheDeletes => (
            "SELECT model FROM checkpoints FOR UPDATE",
            "SELECT model FROM checkpoints%",
        ),
        Pin::InTheDeletes => (
            "SELECT path FROM attachments FOR UPDATE",
            "WITH ev AS (DELETE FROM events%",
        ),
    };
    let mut holder = pg.pool().begin().await.unwrap();
    sqlx::query(lock).fetch_all(&mut *holder).await.unwrap();
    let erasing = tokio::spawn({
        let log = log.clone();
        async move { log.erase(erase_thread("gone", retention)).await }
    });
    let waits = "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1";
    for _ in 0..250 {
        let n: i64 = sqlx::query_scalar(waits)
            .bind(waiting)
            .fetch_one(&mut *other)
            .await
            .unwrap();
        if n == 1 {
            return (holder, erasing);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the erasure never waited at {pin:?}");
}

async fn attachments(conn: &mut PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM attachments")
        .fetch_one(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_erasure_waiting_for_a_projector_holds_up_no_append() {
    let (_guard, log, mut other) = two_threads().await;
    let (projector, erasing) = erase_pinned(&log, &mut other, Pin::BeforeTheDeletes, false).await;

    append_soon(&log, "kept", "while the erasure waits").await;
    assert!(
        !erasing.is_finished(),
        "the erasure waits for the projector"
    );

    projector.commit().await.unwrap();
    let erased = erasing.await.unwrap().unwrap().expect("erased");
    assert_eq!(erased.erased.events, 3);
    assert!(log.read_thread("gone", 0, 100).await.unwrap().is_empty());
    assert_eq!(log.read_thread("kept", 0, 100).await.unwrap().len(), 2);
    assert_eq!(attachments(&mut other).await, 0);
}

#[tokio::test]
async fn what_is_appended_while_an_erasure_deletes_ahead_is_erased_with_it() {
    let (_guard, log, mut other) = two_threads().await;
    let (holder, erasing) = erase_pinned(&log, &mut other, Pin::InTheDeletes, false).await;

    // The writer is free: the thread being erased and another take appends meanwhile.
    let late = append_soon(&log, "gone", "appended after the deletes").await;
    append_soon(&log, "kept", "meanwhile").await;
    holder.rollback().await.unwrap();

    let erased = erasing.await.unwrap().unwrap().expect("erased");
    assert_eq!(erased.erased.events, 4, "the late event counts");
    let gone = &erased.erased.streams[0];
    assert_eq!(gone.stream, "gone");
    assert_eq!(
        gone.last_id(),
        late,
        "the late event's id is in the tombstone"
    );
    assert!(erased.tombstone.id > late);
    assert!(log.read_thread("gone", 0, 100).await.unwrap().is_empty());
    assert_eq!(log.read_thread("kept", 0, 100).await.unwrap().len(), 2);
    assert_eq!(attachments(&mut other).await, 0);
}

/// Activity after the plan, whether the erasure's deletes took the new event (appended before
/// them) or not (appended after their snapshot), makes a retention erasure busy: nothing of the
/// thread is gone.
#[tokio::test]
async fn a_retention_erasure_of_a_thread_active_since_its_plan_rolls_its_deletes_back() {
    for pin in [Pin::BeforeTheDeletes, Pin::InTheDeletes] {
        let (_guard, log, mut other) = two_threads().await;
        let (holder, erasing) = erase_pinned(&log, &mut other, pin, true).await;

        append_soon(&log, "gone", "the thread is active again").await;
        holder.rollback().await.unwrap();

        let answer = erasing.await.unwrap().unwrap();
        assert!(
            matches!(answer, Err(NotErased::Busy)),
            "{pin:?}: a thread with activity since the plan is busy: {answer:?}"
        );
        assert_eq!(
            log.read_thread("gone", 0, 100).await.unwrap().len(),
            4,
            "{pin:?}: the deletes made before the order rolled back"
        );
        assert_eq!(attachments(&mut other).await, 1, "{pin:?}");
        log.shutdown().await;
    }
}

/// The erasure's transaction no longer sees the rows it deleted before taking the order: when
/// they held the highest ids, the tombstone must still take an id above them (ids are never
/// reused), and so must every append after it.
#[tokio::test]
async fn erasing_the_newest_thread_reuses_no_id() {
    let (_guard, _, log) = fresh_log().await;
    log.append("kept", create("bob")).await.unwrap();
    log.append("gone", create("alice")).await.unwrap();
    let newest = log.append("gone", rename("newest")).await.unwrap()[0].id;
    let erased = log
        .erase(erase_thread("gone", false))
        .await
        .unwrap()
        .expect("erased");
    assert_eq!(erased.erased.streams[0].last_id(), newest);
    assert_eq!(
        erased.tombstone.id,
        newest + 1,
        "the tombstone reused an id"
    );
    let next = append_soon(&log, "kept", "after").await;
    assert_eq!(next, newest + 2);
}

/// The two lookups the writer makes under the write order for an erasure (the heads and the
/// ids appended since its plan) must go through indexes: written with conditions no index
/// matched, each scanned every event (~5 ms a lookup on 100,000 events, every append waiting;
/// docs/performance.md, "erasure-postgres"). EXPLAINed on an analysed table of 20,000 events,
/// as prepared statements planned for any argument.
#[tokio::test]
async fn the_writers_lookups_under_the_order_go_through_indexes() {
    let (_guard, url, log) = fresh_log().await;
    for t in 0..40 {
        let thread = format!("t{t}");
        let mut commands = create("alice");
        for n in 0..499 {
            commands.extend(rename(&format!("title {n}")));
        }
        log.append(&thread, commands).await.unwrap();
    }
    let mut conn = PgConnection::connect(&url).await.unwrap();
    sqlx::query("ANALYZE events")
        .execute(&mut conn)
        .await
        .unwrap();
    let head: i64 = sqlx::query_scalar("SELECT MAX(id) FROM events")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(
        head >= 20_000,
        "the table the planner weighs: {head} events"
    );
    // The writer's statements are prepared (sqlx), so Postgres may plan them once for any
    // argument (a generic plan, which cannot know that `id > $1` is a few rows): that plan
    // is the one asked for, with the arguments an erasure passes.
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut conn)
        .await
        .unwrap();
    let after = head - 5;
    // Each with the index it must use, if one: the workflow streams' heads through their
    // partial index (`events_workflow_users`, migration 0010), which the planner matches only to
    // the index's own condition (`LIKE 'workflow:%'`; `starts_with` read every event above the
    // id instead).
    for (what, statement, types, args, index) in [
        (
            "the heads since the plan",
            crate::erasure::postgres::HEADS_AFTER,
            "bigint",
            format!("{after}"),
            Some("events_workflow_users"),
        ),
        (
            "the streams' ids since the plan",
            crate::erasure::postgres::STREAM_IDS_AFTER,
            "bigint, text[]",
            format!("{after}, ARRAY['t3', 't7']"),
            None,
        ),
    ] {
        sqlx::raw_sql(&format!(
            "DEALLOCATE ALL; PREPARE lookup({types}) AS {statement}"
        ))
        .execute(&mut conn)
        .await
        .unwrap();
        let plan: serde_json::Value =
            sqlx::query_scalar::<_, sqlx::types::Json<serde_json::Value>>(&format!(
                "EXPLAIN (FORMAT JSON) EXECUTE lookup({args})"
            ))
            .fetch_one(&mut conn)
            .await
            .unwrap()
            .0;
        let mut scans = Vec::new();
        seq_scans(&plan, &mut scans);
        assert!(
            scans.is_empty(),
            "{what} scans {scans:?} instead of an index: {plan:#}"
        );
        assert!(
            plan.to_string().contains("Index"),
            "{what} uses no index: {plan:#}"
        );
        if let Some(index) = index {
            assert!(
                plan.to_string()
                    .contains(&format!("\"Index Name\":\"{index}\"")),
                "{what} does not use {index}: {plan:#}"
            );
        }
    }
}

/// The tables a plan (EXPLAIN's JSON) reads by a sequential scan.
fn seq_scans(plan: &serde_json::Value, into: &mut Vec<String>) {
    match plan {
        serde_json::Value::Object(node) => {
            if node.get("Node Type").and_then(|t| t.as_str()) == Some("Seq Scan") {
                into.push(
                    node.get("Relation Name")
                        .and_then(|r| r.as_str())
                        .unwrap_or("?")
                        .to_owned(),
                );
            }
            node.values().for_each(|v| seq_scans(v, into));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| seq_scans(v, into)),
        _ => {}
    }
}
