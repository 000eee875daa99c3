//! Erasure planning finds a scope's streams through indexes (the thread index's `stream_heads`
//! on SQLite, partial indexes on Postgres): the same streams a scan of every head finds, for a
//! user (threads, forks of them by others, workflow streams with their events) and a thread,
//! before the SQLite indexer has reached the log and after.

use std::collections::BTreeSet;

use threadstream_domain::event::erasure::{ErasureReason, ErasureScope};
use threadstream_domain::workflow::{WorkflowChange, WorkflowCommand};

use super::*;
use crate::ErasureRequest;

fn create(owner: &str) -> Vec<ThreadCommand> {
    vec![ThreadCommand::Create {
        owner: owner.into(),
        title: None,
    }]
}

fn fork(owner: &str, source: &str, through: i64) -> Vec<ThreadCommand> {
    vec![ThreadCommand::Fork {
        owner: owner.into(),
        title: None,
        fork_of: threadstream_domain::ForkOf {
            thread_id: source.into(),
            through_event_id: through,
        },
    }]
}

fn workflow(by: &str, command: WorkflowCommand) -> Vec<WorkflowChange> {
    vec![WorkflowChange {
        command,
        run_id: "r".into(),
        agent_id: "a".into(),
        by: by.into(),
    }]
}

fn request(scope: ErasureScope) -> ErasureRequest {
    ErasureRequest {
        scope,
        requested_by: "test".into(),
        reason: ErasureReason::Request,
    }
}

async fn planned(log: &EventLog, scope: &ErasureScope, scan: bool) -> BTreeSet<String> {
    let heads = if scan {
        Some(log.stream_heads().await.unwrap())
    } else {
        None
    };
    let plan = log
        .plan_erasure(request(scope.clone()), heads.as_ref())
        .await
        .unwrap();
    plan.streams().cloned().collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

async fn scope_heads_find_what_a_scan_finds_on(kind: Kind) {
    let (guard, log) = open_kind(kind).await;
    let a1 = log.append("a1", create("alice")).await.unwrap();
    // A NUL in a payload (`\u0000` in its JSON) must neither fail the append nor hide the thread
    // from the indexes (Postgres cannot turn it into text; the indexes' expression skirts that).
    log.append(
        "a2",
        vec![ThreadCommand::Create {
            owner: "alice".into(),
            title: Some("nul \u{0} here".into()),
        }],
    )
    .await
    .unwrap();
    let b1 = log.append("b1", create("bob")).await.unwrap();
    // Bob forks alice's thread (it reads her text through), alice forks bob's, and bob forks
    // his fork of hers.
    let bf = log
        .append("a1-by-bob", fork("bob", "a1", a1[0].id))
        .await
        .unwrap();
    log.append("b1-by-alice", fork("alice", "b1", b1[0].id))
        .await
        .unwrap();
    log.append("a1-by-bob-2", fork("bob", "a1-by-bob", bf[0].id))
        .await
        .unwrap();
    // A workflow the agent wrote for bob that alice's agent changed, and one of bob's alone.
    let create_wf = |id: &str| WorkflowCommand::Create {
        workflow_id: id.into(),
        name: id.into(),
        active: false,
    };
    log.append("workflow:shared", workflow("bob", create_wf("shared")))
        .await
        .unwrap();
    log.append(
        "workflow:shared",
        workflow(
            "alice",
            WorkflowCommand::AddNode(threadstream_domain::workflow::Node {
                id: "n1".into(),
                name: "n1".into(),
                node_type: "t".into(),
                trigger: true,
                parameters: Default::default(),
                position: [0, 0],
            }),
        ),
    )
    .await
    .unwrap();
    log.append("workflow:bobs", workflow("bob", create_wf("bobs")))
        .await
        .unwrap();

    let alice = ErasureScope {
        user_id: Some("alice".into()),
        ..Default::default()
    };
    let bob = ErasureScope {
        user_id: Some("bob".into()),
        ..Default::default()
    };
    let thread = ErasureScope {
        thread_id: Some("a1".into()),
        ..Default::default()
    };
    let expected = [
        (
            &alice,
            set(&[
                "a1",
                "a1-by-bob",
                "a1-by-bob-2",
                "a2",
                "b1-by-alice",
                "workflow:shared",
            ]),
        ),
        (
            &bob,
            set(&[
                "a1-by-bob",
                "a1-by-bob-2",
                "b1",
                "b1-by-alice",
                "workflow:bobs",
                "workflow:shared",
            ]),
        ),
        (&thread, set(&["a1", "a1-by-bob", "a1-by-bob-2"])),
    ];
    // SQLite: first from the log above the index (the indexer may not have run yet), then
    // once it has indexed everything (it passes once a second).
    for round in 0..2 {
        if round == 1 {
            if let Kind::Postgres = kind {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
            if let Guard::Dir(dir) = &guard {
                let idx =
                    rusqlite::Connection::open(dir.path().join(crate::sqlite_index::INDEX_FILE))
                        .unwrap();
                let n: i64 = idx
                    .query_row("SELECT count(*) FROM stream_heads", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(n, 9, "6 stream heads and 3 users of workflows indexed");
            }
        }
        for (scope, want) in &expected {
            assert_eq!(planned(&log, scope, true).await, *want, "scan, {scope:?}");
            assert_eq!(
                planned(&log, scope, false).await,
                *want,
                "indexed, round {round}, {scope:?}"
            );
        }
    }
    log.shutdown().await;
}

both_stores!(
    scope_heads_find_what_a_scan_finds,
    scope_heads_find_what_a_scan_finds_on
);
