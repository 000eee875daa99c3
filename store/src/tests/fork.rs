//! Forks read through their source, on both stores and across Postgres processes.

use super::*;

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
