//! Postgres's own mechanics: visibility order across writers, batches, notifications, query plans.

use super::*;

/// Appends one delta after another to `thread` for `secs` seconds; answers how many.
fn append_for(log: EventLog, thread: String, secs: u64) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        let mut n = 0u64;
        while std::time::Instant::now() < deadline {
            log.append(&thread, vec![delta("r", &n.to_string())])
                .await
                .unwrap();
            n += 1;
        }
        n
    })
}

/// Several writers (as several processes would have) append concurrently to many threads of one
/// Postgres log while a reader tails the global log by cursor: the reader must see every
/// committed event exactly once, in id order — none skipped by an out-of-order commit.
#[tokio::test]
async fn postgres_ids_become_visible_in_order_across_writers() {
    let (_g, url) = fresh_pg_url().await;
    let logs = writers(&url, 3).await;
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
        writers.push(append_for(log, format!("t{w}"), 3));
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
    assert_eq!(all.len() as u64, 12 * 3 + appended);
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

/// A batch of row 1 (the first, on an empty log) whose transaction then failed.
async fn aborted_batch(pg: &PgLog) -> crate::postgres::PgBatch {
    let (mut batch, head) = pg.begin_batch().await.unwrap();
    assert_eq!(head, 0);
    PgLog::insert(&mut batch, &[raw_row(1)]).await.unwrap();
    assert!(sqlx::query("SELECT 1 / 0")
        .execute(&mut *batch)
        .await
        .is_err());
    batch
}

/// A batch whose transaction failed cannot be committed as if it had succeeded (a bare
/// `COMMIT` of an aborted transaction rolls back and reports success), and a batch dropped
/// without commit stores nothing and releases the order lock to the next batch.
#[tokio::test]
async fn postgres_batches_commit_only_what_succeeded() {
    let (_g, url) = fresh_pg_url().await;
    let pg = PgLog::open(&url).await.unwrap();
    assert!(
        aborted_batch(&pg).await.commit(None).await.is_err(),
        "an aborted batch committed"
    );
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
    batch.commit(None).await.unwrap();
    assert_eq!(pg.max_id().await.unwrap(), 1);
}

/// A batch's head notification goes out in its commit, exactly as given (quotes, backslashes
/// and other scripts included), and only if it commits: an aborted batch sends none.
#[tokio::test]
async fn postgres_a_batch_notifies_in_its_commit_and_only_then() {
    let (_g, url) = fresh_pg_url().await;
    let pg = PgLog::open(&url).await.unwrap();
    let mut listener = sqlx::postgres::PgListener::connect(&url).await.unwrap();
    listener.listen(crate::notify::CHANNEL).await.unwrap();
    async fn next(listener: &mut sqlx::postgres::PgListener) -> Option<String> {
        tokio::time::timeout(std::time::Duration::from_secs(2), listener.recv())
            .await
            .ok()
            .map(|n| n.unwrap().payload().to_string())
    }

    assert!(
        aborted_batch(&pg)
            .await
            .commit(Some((crate::notify::CHANNEL, "aborted")))
            .await
            .is_err(),
        "an aborted batch committed"
    );

    let hint = r#"{"i":"o'neil \\ \"x\" ünï 线","h":1,"t":["a'b","c\\d"]}"#;
    let (mut batch, _) = pg.begin_batch().await.unwrap();
    PgLog::insert(&mut batch, &[raw_row(1)]).await.unwrap();
    batch
        .commit(Some((crate::notify::CHANNEL, hint)))
        .await
        .unwrap();
    assert_eq!(pg.max_id().await.unwrap(), 1);
    assert_eq!(
        next(&mut listener).await.as_deref(),
        Some(hint),
        "the committed batch's hint, and none of the aborted one before it"
    );
}

/// Batches keep their connection between batches; when the server ended it meanwhile (a
/// restart, an administrator), the next batch opens on a fresh connection instead of failing.
#[tokio::test]
async fn postgres_batch_opens_after_its_kept_connection_ended() {
    let (_g, url) = fresh_pg_url().await;
    let pg = PgLog::open(&url).await.unwrap();
    let (mut batch, _) = pg.begin_batch().await.unwrap();
    let first = pid_of(&mut batch).await;
    batch.commit(None).await.unwrap();
    let (mut batch, _) = pg.begin_batch().await.unwrap();
    assert_eq!(pid_of(&mut batch).await, first, "the connection is kept");
    batch.commit(None).await.unwrap();

    end_backend(&pg, first).await;
    let (mut batch, head) = pg.begin_batch().await.unwrap();
    assert_eq!(head, 0);
    assert_ne!(pid_of(&mut batch).await, first);
    PgLog::insert(&mut batch, &[raw_row(1)]).await.unwrap();
    batch.commit(None).await.unwrap();
    assert_eq!(pg.max_id().await.unwrap(), 1);
}

/// A rule decided by one process is seen by another: the aggregate of a second writer catches up
/// with what the first committed before deciding.
#[tokio::test]
async fn postgres_writers_share_the_aggregate_rules() {
    let (_g, url) = fresh_pg_url().await;
    let mut logs = writers(&url, 2).await;
    let (b, a) = (logs.pop().unwrap(), logs.pop().unwrap());
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

/// Thread pages are read on connections that always take the generic plan: Postgres kept
/// re-planning the page at every call under load (custom plans), which cost five times its
/// execution (docs/performance.md, "Postgres's share").
#[tokio::test]
async fn postgres_thread_pages_are_never_planned_again() {
    let (_guard, url) = fresh_pg_url().await;
    let log = crate::postgres::PgLog::open(&url).await.unwrap();
    let pool = log.pages_pool();
    // The pool opens connections only when a page is read: one now means pages use it.
    assert_eq!(pool.size(), 0);
    log.read_thread("t", 0, 100).await.unwrap();
    assert!(pool.size() >= 1, "thread pages did not use their pool");
    // Its sessions take the generic plan of the page at once, every time.
    let mut conn = pool.acquire().await.unwrap();
    let mode: String = sqlx::query_scalar("SHOW plan_cache_mode")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(mode, "force_generic_plan");
    for i in 0..8 {
        crate::postgres::PgLog::read_thread_on(&mut *conn, "t", i, 100)
            .await
            .unwrap();
    }
    let row = sqlx::query(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements \
         WHERE statement LIKE '%aggregate_type = ''thread'' AND aggregate_id = $1%'",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let plans: (i64, i64) = (sqlx::Row::get(&row, 0), sqlx::Row::get(&row, 1));
    // At least the 8 pages read here (the one read above may have run on this connection too).
    assert!(
        plans.0 >= 8 && plans.1 == 0,
        "thread pages' plans (generic, custom): {plans:?}"
    );
}

/// Three writers on one database append to threads each of them shares with another. A batch
/// decided ahead while another process committed is rolled back to the aggregates as they were
/// and decided again: no aggregate is folded from the log again for it (that reload, under the
/// order lock, is what made several writers on one database collapse, docs/scaling.md), and
/// every thread's seqs still run 1..n with every append answered.
#[tokio::test]
async fn postgres_writers_in_conflict_decide_again_without_reloading() {
    let (_g, url) = fresh_pg_url().await;
    let logs = writers(&url, 3).await;
    // Thread t is written by logs t % 3 and (t + 1) % 3; each log loads its threads once here.
    let threads = 12usize;
    for t in 0..threads {
        logs[t % 3]
            .append(&format!("t{t}"), start("r"))
            .await
            .unwrap();
        logs[(t + 1) % 3]
            .append(&format!("t{t}"), vec![delta("r", "warm")])
            .await
            .unwrap();
    }
    let warm_events = logs[0].read_all(0, 1_000_000).await.unwrap().len() as u64;
    let mut warm = Vec::new();
    for log in &logs {
        warm.push(writer_counts(log).await);
    }
    // Rounds of two seconds until some batch was decided again (the first, nearly always; on a
    // machine busy with other work the writers may take turns for a while).
    let (mut appended, mut loads, mut decided_again) = (0, 0, 0);
    for _round in 0..5 {
        let mut writers = Vec::new();
        for w in 0..(threads * 2) {
            let (t, log) = (w % threads, logs[(w % threads + w / threads) % 3].clone());
            writers.push(append_for(log, format!("t{t}"), 2));
        }
        for w in writers {
            appended += w.await.unwrap();
        }
        (loads, decided_again) = (0, 0);
        for (log, before) in logs.iter().zip(&warm) {
            let now = writer_counts(log).await;
            loads += now.loads - before.loads;
            decided_again += now.decided_again - before.decided_again;
        }
        if decided_again > 0 {
            break;
        }
    }
    assert!(
        decided_again > 0,
        "three writers on one database never decided a batch again: the test proves nothing"
    );
    assert_eq!(
        loads, 0,
        "{decided_again} batches decided again reloaded aggregates"
    );
    let all = logs[0].read_all(0, 10_000_000).await.unwrap();
    assert_eq!(all.len() as u64, warm_events + appended);
    for t in 0..threads {
        let seqs: Vec<i64> = all
            .iter()
            .filter(|e| e.thread_id == format!("t{t}"))
            .map(|e| e.seq)
            .collect();
        assert!(
            seqs.iter().enumerate().all(|(i, s)| *s == i as i64 + 1),
            "t{t}'s seqs are not 1..n"
        );
        // Each of its writers' aggregates agrees with the log: the next seq follows.
        for log in [&logs[t % 3], &logs[(t + 1) % 3]] {
            let next = log
                .append(&format!("t{t}"), vec![delta("r", "end")])
                .await
                .unwrap();
            let last = log
                .read_thread(&format!("t{t}"), 0, 1_000_000)
                .await
                .unwrap();
            assert_eq!(next[0].seq, last.last().unwrap().seq);
        }
    }
}

/// A writer catching up with another process's commits reads whole only the rows it uses (its
/// cached threads', thread creations, erasures); the rest it reads as ids.
#[tokio::test]
async fn postgres_catch_up_reads_whole_only_the_rows_of_cached_threads() {
    let (_g, url) = fresh_pg_url().await;
    let logs = writers(&url, 2).await;
    let (a, b) = (&logs[0], &logs[1]);
    a.append("mine", start("r")).await.unwrap();
    b.append("theirs", start("r")).await.unwrap();
    b.append("shared", start("r")).await.unwrap();
    a.append("shared", vec![delta("r", "a")]).await.unwrap();
    let before = writer_counts(a).await.caught_up_rows;
    for i in 0..50 {
        b.append("theirs", vec![delta("r", &format!("{i}"))])
            .await
            .unwrap();
    }
    b.append("shared", vec![delta("r", "b")]).await.unwrap();
    // a catches up with b's 51 events before deciding this; only "shared"'s is one it caches.
    let next = a.append("shared", vec![delta("r", "a2")]).await.unwrap();
    let read = writer_counts(a).await.caught_up_rows - before;
    assert_eq!(read, 1, "whole rows read by the catch-up");
    let all = a.read_thread("shared", 0, 100).await.unwrap();
    assert_eq!(next[0].seq, all.last().unwrap().seq);
    assert_eq!(
        all.len(),
        next[0].seq as usize,
        "seqs 1..n: the catch-up folded b's event"
    );
    // A thread it did not cache is folded from the log when first used: its seq follows b's.
    let theirs = a.append("theirs", vec![delta("r", "a")]).await.unwrap();
    let stored = a.read_thread("theirs", 0, 100).await.unwrap();
    assert_eq!(theirs[0].seq, stored.len() as i64);
    assert_eq!(stored.len(), 3 + 50 + 1, "start's events, b's 50, a's one");
}

/// Read-model documents are compressed with lz4 (migration 0013): pglz at every rewrite of a
/// growing document was a tenth of Postgres's CPU under the agent load (docs/performance.md).
#[tokio::test]
async fn postgres_read_model_documents_are_compressed_with_lz4() {
    let (_guard, url) = fresh_pg_url().await;
    let log = crate::postgres::PgLog::open(&url).await.unwrap();
    let method: String = sqlx::query_scalar(
        "SELECT attcompression::text FROM pg_attribute \
         WHERE attrelid = 'read_models'::regclass AND attname = 'doc'",
    )
    .fetch_one(log.pool())
    .await
    .unwrap();
    assert_eq!(method, "l", "read_models.doc is not set to lz4");
    // A document past TOAST's threshold is stored compressed with it.
    let doc = "{\"text\":\"".to_string() + &"token ".repeat(2_000) + "\"}";
    sqlx::query("INSERT INTO read_models (model, key, doc, last_id) VALUES ('m', 'k', $1, 1)")
        .bind(&doc)
        .execute(log.pool())
        .await
        .unwrap();
    let stored: Option<String> = sqlx::query_scalar(
        "SELECT pg_column_compression(doc) FROM read_models WHERE model = 'm' AND key = 'k'",
    )
    .fetch_one(log.pool())
    .await
    .unwrap();
    assert_eq!(stored.as_deref(), Some("lz4"));
}

/// A batch whose `COMMIT` lost its connection is looked up by its key, its first and last rows
/// (ids and contents), once the server process it ran in has ended: not known while that
/// process runs (a `COMMIT` waiting for a synchronous standby outlives its connection); then
/// found when stored; not found when its ids hold nothing, or rows of another writer (who took
/// the ids after this batch was lost in a failover).
#[tokio::test]
async fn postgres_a_batch_is_found_by_its_first_and_last_rows_once_its_session_ended() {
    let (_g, url) = fresh_pg_url().await;
    let log = EventLog::open_postgres(&url, NotifyMode::Postgres)
        .await
        .unwrap();
    log.append("t", start("r")).await.unwrap();
    let rows = log
        .append("t", vec![delta("r", "a"), delta("r", "b")])
        .await
        .unwrap();
    assert!(!rows.is_empty());
    let (batch, _) = log.backend().begin_batch().await.unwrap();
    let session = batch.session().expect("a Postgres batch has a session");
    assert_eq!(
        log.backend().batch_stored(&rows, session).await.unwrap(),
        None,
        "looked up while its session runs"
    );
    // Dropped uncommitted, the batch closes its connection; its server process ends soon after.
    drop(batch);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let found = loop {
        match log.backend().batch_stored(&rows, session).await.unwrap() {
            Some(found) => break found,
            None if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await
            }
            None => panic!("the closed batch's session still runs after 10 s"),
        }
    };
    assert!(found);
    let mut other = rows.clone();
    other.last_mut().unwrap().payload.push(' ');
    assert_eq!(
        log.backend().batch_stored(&other, session).await.unwrap(),
        Some(false)
    );
    let mut absent = rows.clone();
    for r in &mut absent {
        r.id += 1_000;
    }
    assert_eq!(
        log.backend().batch_stored(&absent, session).await.unwrap(),
        Some(false)
    );
}

/// A stream reader's page with standbys configured (here the primary's own database stands for
/// a standby that is up to date, or behind when the reader needs an id not committed yet): read
/// there when it holds what the reader must see; else, after the lag wait, on the primary, the
/// same page either way.
#[tokio::test]
async fn postgres_a_page_is_read_on_the_standby_only_when_it_holds_the_readers_head() {
    let (_g, url) = fresh_pg_url().await;
    let log = EventLog::open_postgres_reading_from(&url, Some(&url), NotifyMode::Postgres)
        .await
        .unwrap();
    log.append("t", start("r")).await.unwrap();
    let rows = log
        .append("t", vec![delta("r", "a"), delta("r", "b")])
        .await
        .unwrap();
    let head = rows.last().unwrap().id;
    let want = log.read_thread("t", 0, 100).await.unwrap();
    let reads = || log.replica_reads().expect("standbys configured");
    assert_eq!(reads(), crate::ReplicaReads::default());

    let page = log.read_thread_seen("t", 0, 100, head).await.unwrap();
    assert_eq!(ids(&page), ids(&want));
    assert_eq!(
        reads(),
        crate::ReplicaReads {
            standby_pages: 1,
            ..Default::default()
        }
    );

    // A head the "standby" does not hold: waited for, then read on the primary.
    let t0 = std::time::Instant::now();
    let page = log.read_thread_seen("t", 0, 100, head + 1).await.unwrap();
    assert_eq!(ids(&page), ids(&want));
    assert!(
        t0.elapsed() >= crate::postgres::LAG_WAIT,
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(
        reads(),
        crate::ReplicaReads {
            standby_pages: 1,
            primary_pages: 1,
            ..Default::default()
        }
    );
    // Without standbys, nothing is counted.
    let plain = EventLog::open_postgres(&url, NotifyMode::Postgres)
        .await
        .unwrap();
    assert_eq!(plain.replica_reads(), None);
}

/// A client's read-model reads with standbys configured (the primary's own database standing
/// for a standby, as above): served there when it holds the client's head, else after the lag
/// wait on the primary, the same answer either way; this process's own reads
/// ([`crate::Sight::Committed`]) never go to a standby.
#[tokio::test]
async fn postgres_a_clients_read_model_reads_go_to_the_standby_when_it_holds_their_head() {
    use crate::Sight;
    let (_g, url) = fresh_pg_url().await;
    let log = EventLog::open_postgres_reading_from(&url, Some(&url), NotifyMode::Postgres)
        .await
        .unwrap();
    let rows = log.append("t", start("r")).await.unwrap();
    let head = rows.last().unwrap().id;
    let doc = (String::from("t"), String::from(r#"{"n":1}"#), head);
    assert!(log
        .backend()
        .save_docs("history", std::slice::from_ref(&doc), 0, head)
        .await
        .unwrap());
    let reads = || log.replica_reads().expect("standbys configured");
    let views = |standby_views, primary_views| crate::ReplicaReads {
        standby_views,
        primary_views,
        ..Default::default()
    };

    let sight = log.client_sight();
    assert_eq!(sight, Sight::Upto(head), "what this process acknowledged");
    let one = log.load_doc_in(sight, "history", "t").await.unwrap();
    assert_eq!(one, Some((doc.1.clone(), head)));
    let all = log.model_docs_in(sight, "history").await.unwrap();
    assert_eq!(all, (head, vec![doc.clone()]));
    let tail = log.read_all_in(sight, 0, 100).await.unwrap();
    assert_eq!(ids(&tail), ids(&rows));
    assert_eq!(log.head_in(sight).await.unwrap(), head);
    assert_eq!(reads(), views(3, 0));

    // This process's own reads: on the primary, not counted.
    let committed = log.load_doc_in(Sight::Committed, "history", "t").await;
    assert_eq!(committed.unwrap(), one);
    assert_eq!(
        log.model_docs_in(Sight::Committed, "history")
            .await
            .unwrap(),
        all
    );
    assert_eq!(reads(), views(3, 0));

    // A head the "standby" does not hold: waited for, then read on the primary.
    let t0 = std::time::Instant::now();
    let behind = Sight::Upto(head + 1);
    assert_eq!(log.load_doc_in(behind, "history", "t").await.unwrap(), one);
    assert!(t0.elapsed() >= crate::postgres::LAG_WAIT);
    assert_eq!(log.model_docs_in(behind, "history").await.unwrap(), all);
    assert_eq!(reads(), views(3, 2));
}

fn ids(events: &[StoredEvent]) -> Vec<i64> {
    events.iter().map(|e| e.id).collect()
}

/// A writer whose next batch lingers for company does not hold the database's order lock while
/// it waits: another instance's appends wait for its commits, never for its linger (a fleet's
/// delivery p99 was 189 ms at a 15 ms linger while it did; docs/performance.md, "the order lock
/// through a linger").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_lingering_batch_does_not_hold_the_order_lock() {
    use std::time::{Duration, Instant};
    let (_d, url) = fresh_pg_url().await;
    let mut logs = writers(&url, 2).await;
    let (other, lingering) = (logs.pop().unwrap(), logs.pop().unwrap());
    for t in ["t1", "t2"] {
        lingering.append(t, start(&format!("r-{t}"))).await.unwrap();
        lingering
            .append(t, vec![delta(&format!("r-{t}"), "0")])
            .await
            .unwrap();
    }
    other.append("tb", start("rb")).await.unwrap();
    let linger = Duration::from_millis(1000);
    lingering.set_commit_linger(linger);
    // Tokens to two runs every 10 ms, none waiting for the one before: there is always a next
    // batch gathering while one is written, so each lingers with a batch in flight.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let streaming = tokio::spawn({
        let (log, stop) = (lingering.clone(), stop.clone());
        async move {
            let mut pending = Vec::new();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = if i.is_multiple_of(2) { "t1" } else { "t2" };
                let log = log.clone();
                pending.push(tokio::spawn(async move {
                    log.append(t, vec![delta(&format!("r-{t}"), &i.to_string())])
                        .await
                        .unwrap();
                }));
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            for p in pending {
                p.await.unwrap();
            }
            i
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The other instance appends alone (no linger of its own) while the first one lingers.
    let mut slowest = Duration::ZERO;
    let until = Instant::now() + 3 * linger;
    let mut n = 0;
    while Instant::now() < until {
        let sent = Instant::now();
        other.append("tb", vec![delta("rb", "x")]).await.unwrap();
        slowest = slowest.max(sent.elapsed());
        n += 1;
        tokio::time::sleep(Duration::from_millis(37)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let tokens = streaming.await.unwrap();
    assert!(tokens > 100, "{tokens} tokens streamed");
    assert!(
        slowest < linger / 2,
        "an append of the other instance waited {slowest:?} (of {n}): the order lock was held \
         through the {linger:?} linger"
    );
}
