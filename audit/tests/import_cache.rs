//! An import keeps a bounded number of thread aggregates: with room for one thread only, three
//! interleaved threads still import exactly (evicted threads are folded again from the import's
//! own transaction), and a rule broken in a thread that was evicted is still caught.

use threadstream_audit::export::{export_to, Selection};
use threadstream_audit::import::import_with_cache;
use threadstream_domain::event::{EventBody, RunFinish, RunStatus, TextDelta};
use threadstream_domain::{AgentEvent, ThreadCommand};
use threadstream_store::{Durability, EventLog};

async fn source() -> (tempfile::TempDir, EventLog) {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    for round in 0..3 {
        for t in ["ta", "tb", "tc"] {
            let run = format!("run-{t}-{round}");
            let mut cmds = vec![
                ThreadCommand::Create {
                    owner: "u".into(),
                    title: None,
                },
                ThreadCommand::StartRun {
                    run_id: run.clone(),
                    agent_id: "a1".into(),
                    message_id: format!("m-{run}"),
                    message_group_id: None,
                    text: "hi".into(),
                    user: "u".into(),
                },
            ];
            for word in ["one ", "two "] {
                cmds.push(ThreadCommand::Record(AgentEvent::new(
                    run.clone(),
                    "a1",
                    EventBody::TextDelta(TextDelta { text: word.into() }),
                )));
            }
            cmds.push(ThreadCommand::Record(AgentEvent::new(
                run.clone(),
                "a1",
                EventBody::RunFinish(RunFinish {
                    status: RunStatus::Completed,
                    reason: None,
                    archived_workflow_ids: None,
                }),
            )));
            log.append(t, cmds).await.unwrap();
        }
    }
    (dir, log)
}

async fn ndjson(log: &EventLog) -> String {
    let mut out = Vec::new();
    export_to(log.clone(), Selection::default(), &mut out)
        .await
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn three_interleaved_threads_through_a_cache_of_one() {
    let (_src_dir, src) = source().await;
    let text = ndjson(&src).await;
    let lines = text.lines().count() as u64;

    let dir = tempfile::tempdir().unwrap();
    let target = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let done = import_with_cache(&target, text.as_bytes(), |_| {}, 1)
        .await
        .unwrap();
    assert_eq!(done.events, lines);
    assert_eq!(done.threads, 3);
    assert_eq!(ndjson(&target).await, text, "ids, seqs and payloads kept");

    // Drop a text delta of thread `ta`'s last run: `ta` was evicted by then (tb and tc came
    // between), so the gap is only seen by folding it again from the transaction.
    let victim = text
        .lines()
        .rev()
        .filter(|l| l.contains("\"thread\":\"ta\"") || l.contains("\"thread_id\":\"ta\""))
        .find(|l| l.contains("text-delta"))
        .expect("a text delta of ta")
        .to_string();
    let broken: String = text
        .lines()
        .filter(|l| *l != victim)
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let target = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let err = import_with_cache(&target, broken.as_bytes(), |_| {}, 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("seq"), "{err}");
    assert_eq!(
        ndjson(&target).await,
        "",
        "nothing stored on a refused import"
    );
}
