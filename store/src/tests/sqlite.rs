//! SQLite's own mechanics: the thread index file, its pages, upgrades, acknowledgement after sync.

use super::*;

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
        let old = include_str!("../../../migrations/sqlite/0001_log.sql");
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
