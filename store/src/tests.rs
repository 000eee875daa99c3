//! Tests of the log against a real SQLite file.

use std::collections::HashSet;

use threadstream_domain::event::*;
use threadstream_domain::{AgentEvent, ThreadCommand, ThreadError};

use super::*;

async fn open() -> (tempfile::TempDir, EventLog) {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    (dir, log)
}

fn start(run: &str) -> Vec<ThreadCommand> {
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

fn delta(run: &str, text: &str) -> ThreadCommand {
    ThreadCommand::Record(AgentEvent::new(
        run,
        "a1",
        EventBody::TextDelta(TextDelta { text: text.into() }),
    ))
}

#[tokio::test]
async fn append_assigns_global_ids_and_contiguous_seqs() {
    let (_d, log) = open().await;
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

#[tokio::test]
async fn refused_request_stores_nothing_of_itself() {
    let (_d, log) = open().await;
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

#[tokio::test]
async fn second_run_conflicts_while_first_is_live() {
    let (_d, log) = open().await;
    log.append("t", start("r1")).await.unwrap();
    let err = log.append("t", start("r2")).await.unwrap_err();
    assert!(matches!(
        err,
        StoreError::Rule(ThreadError::RunAlreadyActive { .. })
    ));
}

#[tokio::test]
async fn concurrent_appends_are_group_committed_with_unique_increasing_ids() {
    let (_d, log) = open().await;
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

#[tokio::test]
async fn heads_wake_thread_subscribers() {
    let (_d, log) = open().await;
    let mut head = log.heads().thread("t");
    log.append("t", start("r1")).await.unwrap();
    head.changed().await.unwrap();
    assert_eq!(*head.borrow(), 3);
}

#[tokio::test]
async fn confirmation_requests_are_found_by_request_id() {
    let (_d, log) = open().await;
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
