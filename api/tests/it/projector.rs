//! The projector's catch-up reads each batch once for every read model, from the furthest-behind
//! checkpoint. Models at different positions must each fold exactly the events after their own
//! checkpoint: a model cleared while the others are current ends with the same documents as a
//! rebuild from scratch, and the current ones are not folded twice.

use threadstream_api::background::projector;
use threadstream_domain::event::{EventBody, TextDelta};
use threadstream_domain::{AgentEvent, ThreadCommand};
use threadstream_store::{Durability, EventLog};

fn start(run: &str) -> Vec<ThreadCommand> {
    vec![
        ThreadCommand::Create {
            owner: "u".into(),
            title: None,
        },
        ThreadCommand::StartRun {
            run_id: run.into(),
            agent_id: "a1".into(),
            message_id: format!("m-{run}"),
            message_group_id: None,
            text: "hi".into(),
            user: "u".into(),
        },
    ]
}

fn deltas(run: &str, n: usize) -> Vec<ThreadCommand> {
    (0..n)
        .map(|i| {
            ThreadCommand::Record(AgentEvent::new(
                run,
                "a1",
                EventBody::TextDelta(TextDelta {
                    text: format!("{run}-{i} "),
                }),
            ))
        })
        .collect()
}

async fn stored(log: &EventLog) -> Vec<Vec<(String, String, i64)>> {
    let mut all = Vec::new();
    for model in projector::MODELS {
        let mut docs = log.backend().load_docs(model).await.unwrap();
        docs.sort();
        all.push(docs);
    }
    all
}

#[tokio::test]
async fn models_at_different_checkpoints_each_fold_their_own_events() {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    for t in ["t1", "t2", "t3"] {
        log.append(t, start(&format!("r-{t}"))).await.unwrap();
        log.append(t, deltas(&format!("r-{t}"), 20)).await.unwrap();
    }
    projector::catch_up(&log).await.unwrap();
    // The history model starts over while the others stay where they are; more events come.
    log.backend().clear_model("history").await.unwrap();
    for t in ["t1", "t3"] {
        log.append(t, deltas(&format!("r-{t}"), 7)).await.unwrap();
    }
    let read = projector::catch_up(&log).await.unwrap();
    assert!(read > 0);
    let caught_up = stored(&log).await;
    assert!(
        caught_up.iter().all(|docs| !docs.is_empty()),
        "{caught_up:?}"
    );

    projector::rebuild(&log).await.unwrap();
    let rebuilt = stored(&log).await;
    for (i, model) in projector::MODELS.iter().enumerate() {
        assert_eq!(
            caught_up[i], rebuilt[i],
            "read model {model} differs from a rebuild"
        );
    }
    log.shutdown().await;
}
