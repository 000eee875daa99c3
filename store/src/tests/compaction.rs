//! Compaction of finished runs on both stores: every cursor resumes exactly, the writer's next
//! seq and a cold fold see the replaced deltas, and compacting again changes nothing.

use super::*;

fn text_of(rows: &[StoredEvent]) -> String {
    rows.iter()
        .filter_map(|e| match e.decode().unwrap().body {
            EventBody::TextDelta(d) => Some(d.text),
            _ => None,
        })
        .collect()
}

/// Every event of `thread` after `after`, a page of `page` at a time.
async fn read_from(log: &EventLog, thread: &str, mut after: i64, page: i64) -> Vec<StoredEvent> {
    let mut out = Vec::new();
    loop {
        let rows = log.read_thread(thread, after, page).await.unwrap();
        let Some(last) = rows.last() else { break };
        after = last.id;
        out.extend(rows);
    }
    out
}

const WORDS: [&str; 6] = ["Hé", "llo", ", ", "wörld", "!", " 🦀"];

/// `t` with a run of text deltas (another thread's appends between them, so their ids are not
/// consecutive), finished; returns the thread's rows as appended.
async fn a_finished_run(log: &EventLog) -> Vec<StoredEvent> {
    let mut rows = log.append("t", start("r1")).await.unwrap();
    log.append("other", start("o1")).await.unwrap();
    for (i, w) in WORDS.iter().enumerate() {
        rows.extend(log.append("t", vec![delta("r1", w)]).await.unwrap());
        if i % 2 == 0 {
            log.append("other", vec![delta("o1", "x")]).await.unwrap();
        }
    }
    rows.extend(log.append("t", vec![finish("r1")]).await.unwrap());
    rows
}

both_stores!(
    a_compacted_run_resumes_exactly_from_every_cursor,
    a_compacted_run_resumes_exactly_from_every_cursor_on
);
async fn a_compacted_run_resumes_exactly_from_every_cursor_on(kind: Kind) {
    let (_d, log) = open_kind(kind).await;
    let before = a_finished_run(&log).await;
    let last = before.last().unwrap().id;
    let sweep = log.compact_finished(i64::MAX).await.unwrap();
    assert_eq!(sweep.runs, 1, "the other thread's run is live");
    assert_eq!(
        (sweep.compacted.ranges, sweep.compacted.replaced),
        (1, WORDS.len() as u64)
    );
    let after = read_from(&log, "t", 0, 100).await;
    assert_eq!(after.len(), before.len() - WORDS.len() + 1);
    let row = after.iter().find(|e| e.event_type == "text-delta").unwrap();
    assert_eq!(
        (row.id, row.seq),
        (before[before.len() - 2].id, before[before.len() - 2].seq)
    );
    // No reader sees the marker: resumed pages are cut, the wire envelope has the text alone.
    assert!(!row.envelope_json().contains("compacted"));
    for cursor in 0..=last {
        for page in [1, 2, 100] {
            let read = read_from(&log, "t", cursor, page).await;
            let expected: Vec<StoredEvent> =
                before.iter().filter(|e| e.id > cursor).cloned().collect();
            assert_eq!(
                text_of(&read),
                text_of(&expected),
                "cursor {cursor}, pages of {page}"
            );
            // The same events but the deltas, with the same ids.
            let ids = |rows: &[StoredEvent]| -> Vec<i64> {
                rows.iter()
                    .filter(|e| e.event_type != "text-delta")
                    .map(|e| e.id)
                    .collect()
            };
            assert_eq!(ids(&read), ids(&expected));
        }
    }
    // Nothing left to compact: a second sweep, and the run again, change nothing.
    assert_eq!(log.compact_finished(i64::MAX).await.unwrap().runs, 0);
    let again = log
        .compact_run("t", "r1", before[0].id, last)
        .await
        .unwrap();
    assert_eq!(again, Compacted::default());
    assert_eq!(read_from(&log, "t", 0, 100).await, after);
    // The log-wide read is cut the same way.
    let first_delta = before
        .iter()
        .find(|e| e.event_type == "text-delta")
        .unwrap();
    let all = log.read_all(first_delta.id, 1_000).await.unwrap();
    let t: Vec<StoredEvent> = all.into_iter().filter(|e| e.thread_id == "t").collect();
    assert_eq!(
        text_of(&t),
        WORDS[1..].concat(),
        "the log read from inside the range"
    );
}

both_stores!(
    the_writer_numbers_on_after_a_compacted_run,
    the_writer_numbers_on_after_a_compacted_run_on
);
/// The writer's aggregate counts the replaced deltas: cached, and folded cold from the store
/// (SQLite reopened; on Postgres another process).
async fn the_writer_numbers_on_after_a_compacted_run_on(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, url) = match kind {
        Kind::Sqlite => (None, String::new()),
        Kind::Postgres => {
            let (g, url) = fresh_pg_url().await;
            (Some(g), url)
        }
    };
    let open = || async {
        match kind {
            Kind::Sqlite => EventLog::open_sqlite(dir.path(), Durability::Full)
                .await
                .unwrap(),
            Kind::Postgres => EventLog::open_postgres(&url, NotifyMode::Postgres)
                .await
                .unwrap(),
        }
    };
    let log = open().await;
    let before = a_finished_run(&log).await;
    log.compact_finished(i64::MAX).await.unwrap();
    let rows = log.append("t", vec![second_run("r2")]).await.unwrap();
    assert_eq!(rows[0].seq, before.last().unwrap().seq + 1);
    let started = rows.last().unwrap().seq;
    let other = match kind {
        Kind::Sqlite => {
            log.shutdown().await;
            open().await
        }
        Kind::Postgres => open().await,
    };
    let rows = other
        .append("t", vec![delta("r2", "x"), finish("r2")])
        .await
        .unwrap();
    assert_eq!(rows[0].seq, started + 1);
    let state: Thread = other.state("t").await.unwrap();
    assert_eq!(state.version() as i64, rows.last().unwrap().seq);
}

/// One instance of a fleet sweeps at a time: while another holds the compaction's lock, a sweep
/// does nothing; once it is let go, the next sweep compacts.
#[tokio::test]
async fn postgres_one_instance_sweeps_at_a_time() {
    let (_d, url) = fresh_pg_url().await;
    let mut logs = writers(&url, 2).await;
    let (other, log) = (logs.pop().unwrap(), logs.pop().unwrap());
    a_finished_run(&log).await;
    let held = other
        .try_job_lock(crate::Job::Compaction)
        .await
        .unwrap()
        .expect("nobody sweeps yet");
    assert_eq!(
        log.compact_finished(i64::MAX).await.unwrap(),
        CompactionSweep::default(),
        "swept while another instance held the lock"
    );
    drop(held);
    // The lock goes with its connection, closed when the guard is dropped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let sweep = log.compact_finished(i64::MAX).await.unwrap();
        if sweep.runs > 0 {
            assert_eq!(sweep.compacted.replaced, WORDS.len() as u64);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lock was not let go"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
