//! The log on both stores: appends, ids and seqs, pages, refusals, group commit, reopening, heads, aggregates.

use super::*;

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
            // A NUL in the question (`\u0000` in the JSON) must not fail the append on Postgres
            // (migration 0011).
            "Delete \u{0}?",
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

both_stores!(
    a_small_batch_lingers_for_the_next_append,
    a_small_batch_lingers_for_the_next_append_on
);
both_stores!(
    a_large_append_does_not_linger,
    a_large_append_does_not_linger_on
);
both_stores!(
    only_fragments_continuing_a_burst_linger,
    only_fragments_continuing_a_burst_linger_on
);
both_stores!(
    appends_to_one_stream_alone_do_not_linger,
    appends_to_one_stream_alone_do_not_linger_on
);
/// A caller appending to one stream alone awaits each answer before its next append, so nothing
/// could join its batch: with no append to another stream lately, no batch lingers (a run's
/// start is several appends in turn; `src/writer/linger.rs`).
async fn appends_to_one_stream_alone_do_not_linger_on(kind: Kind) {
    use std::time::{Duration, Instant};
    let (_d, log) = open_kind(kind).await;
    log.set_commit_linger(Duration::from_millis(400));
    let sent = Instant::now();
    log.append("solo", start("r")).await.unwrap();
    for i in 0..3 {
        log.append("solo", vec![delta("r", &format!("{i}"))])
            .await
            .unwrap();
    }
    let took = sent.elapsed();
    assert!(
        took < Duration::from_millis(400),
        "four appends to one stream took {took:?}: some lingered"
    );
}

/// A log with a run on "t1" and on "t2" (each with its first token stored when `tokens`, so
/// the next ones continue a burst), then a commit linger of 400 ms, which it returns.
async fn two_runs_under_a_linger(
    kind: Kind,
    tokens: bool,
) -> (Guard, EventLog, std::time::Duration) {
    let (d, log) = open_kind(kind).await;
    log.append("t1", start("r1")).await.unwrap();
    log.append("t2", start("r2")).await.unwrap();
    if tokens {
        log.append("t1", vec![delta("r1", "0")]).await.unwrap();
        log.append("t2", vec![delta("r2", "0")]).await.unwrap();
    }
    let linger = std::time::Duration::from_millis(400);
    log.set_commit_linger(linger);
    (d, log, linger)
}

/// With a commit linger, a token appended while the batch before it lingers is committed in the
/// same transaction, and neither is answered before the linger is over; without one, the first
/// append is committed alone before the second is sent.
async fn a_small_batch_lingers_for_the_next_append_on(kind: Kind) {
    use std::time::{Duration, Instant};
    let (_d, log, linger) = two_runs_under_a_linger(kind, true).await;
    let before = writer_counts(&log).await.batches;
    let sent = Instant::now();
    let first = tokio::spawn({
        let log = log.clone();
        async move {
            (
                log.append("t1", vec![delta("r1", "a")]).await,
                Instant::now(),
            )
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (second, second_at) = (
        log.append("t2", vec![delta("r2", "b")]).await,
        Instant::now(),
    );
    let (first, first_at) = first.await.unwrap();
    first.unwrap();
    second.unwrap();
    assert!(
        first_at.duration_since(sent) >= linger,
        "the first append was answered {:?} after it was sent, inside the linger",
        first_at.duration_since(sent)
    );
    assert!(second_at >= first_at || first_at.duration_since(second_at) < linger);
    let batches = writer_counts(&log).await.batches - before;
    assert_eq!(batches, 1, "the two appends were {batches} transactions");

    log.set_commit_linger(Duration::ZERO);
    let before = writer_counts(&log).await.batches;
    log.append("t1", vec![delta("r1", "c")]).await.unwrap();
    log.append("t2", vec![delta("r2", "d")]).await.unwrap();
    assert_eq!(writer_counts(&log).await.batches - before, 2);
}

/// Only fragments continuing a burst wait out the linger (`AggregateCommand::is_fragment`,
/// `writer/linger.rs`): while appends to several streams arrive, a run's start and its first
/// token are stored at once, and the tokens after it linger.
async fn only_fragments_continuing_a_burst_linger_on(kind: Kind) {
    use std::time::Instant;
    let (_d, log, linger) = two_runs_under_a_linger(kind, false).await;
    // Appends to two streams in a row: the linger applies from here on.
    let sent = Instant::now();
    log.append("t3", start("r3")).await.unwrap();
    log.append("t3", vec![delta("r3", "first")]).await.unwrap();
    let took = sent.elapsed();
    assert!(
        took < linger,
        "a run's start and first token took {took:?}: one waited for the {linger:?} linger"
    );
    let sent = Instant::now();
    log.append("t3", vec![delta("r3", "second")]).await.unwrap();
    let took = sent.elapsed();
    assert!(
        took >= linger,
        "a second token was answered {took:?} after it was sent, inside the linger"
    );
}

/// A batch already holding 256 commands (`LINGER_FULL`) goes out at once: one post of
/// 300 tokens to a thread in a burst does not wait out the linger (ingest posts of 50 events
/// from 100 clients did, each answered that much later).
async fn a_large_append_does_not_linger_on(kind: Kind) {
    use std::time::Instant;
    let (_d, log, linger) = two_runs_under_a_linger(kind, true).await;
    let tokens: Vec<_> = (0..300).map(|i| delta("r1", &format!("{i}"))).collect();
    let sent = Instant::now();
    let stored = log.append("t1", tokens).await.unwrap();
    let took = sent.elapsed();
    assert_eq!(stored.len(), 300);
    assert!(
        took < linger,
        "an append of 300 tokens waited {took:?} for the {linger:?} linger"
    );
    let sent = Instant::now();
    log.append("t1", vec![delta("r1", "small")]).await.unwrap();
    assert!(sent.elapsed() >= linger, "a small one did not linger");
}

/// With nothing else waiting, the writer syncs and acknowledges a batch itself: appends in
/// turn pass through no syncer thread (`writer/acks.rs`, `Acks::dispatch`). With many appenders
/// (which thread syncs a batch then depends on whether requests wait when it commits) every
/// append is answered with its own events, and all of them are in the log when it is opened
/// again.
#[tokio::test]
async fn an_idle_writer_syncs_its_batch_itself() {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    log.append("t", start("r")).await.unwrap();
    let before = writer_counts(&log).await;
    for i in 0..5 {
        let stored = log
            .append("t", vec![delta("r", &format!("{i}"))])
            .await
            .unwrap();
        assert_eq!(stored.len(), 1);
    }
    let after = writer_counts(&log).await;
    assert_eq!(after.batches - before.batches, 5);
    assert_eq!(
        after.synced_inline - before.synced_inline,
        5,
        "appends in turn were synced by the syncer thread"
    );

    let mut tasks = Vec::new();
    for t in 0..64 {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let thread = format!("c{t}");
            log.append(&thread, start("r")).await.unwrap();
            for i in 0..20 {
                let stored = log
                    .append(&thread, vec![delta("r", &format!("{i}"))])
                    .await
                    .unwrap();
                assert_eq!(stored[0].thread_id, thread);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = log.read_all(0, 100_000).await.unwrap().len();
    assert!(total >= 5 + 64 * 21, "{total} events read back");
    log.shutdown().await;
    let again = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    assert_eq!(again.read_all(0, 100_000).await.unwrap().len(), total);
}
