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

/// A catch-up folds the log as it stood when called, even while appends go on faster than it
/// folds: chasing the head instead kept a restarting instance of a busy fleet from ever
/// listening (`serve` catches up before it binds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_returns_while_appends_go_on() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Normal)
        .await
        .unwrap();
    let appending = std::sync::Arc::new(AtomicBool::new(true));
    // Four threads grow by 20 events an append, much faster than a catch-up folds them into four
    // models, for as long as the catch-up runs (at most a minute).
    let appenders: Vec<_> = (0..4)
        .map(|k| {
            let log = log.clone();
            let appending = appending.clone();
            tokio::spawn(async move {
                let (thread, run) = (format!("t{k}"), format!("r-t{k}"));
                log.append(&thread, start(&run)).await.unwrap();
                let t0 = Instant::now();
                while appending.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(60) {
                    log.append(&thread, deltas(&run, 20)).await.unwrap();
                }
            })
        })
        .collect();
    // Let the appends get going first.
    while log.backend().max_id().await.unwrap() < 5_000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let t0 = Instant::now();
    let caught_up = tokio::time::timeout(Duration::from_secs(20), projector::catch_up(&log)).await;
    let took = t0.elapsed();
    let still_appending = appenders.iter().all(|a| !a.is_finished());
    appending.store(false, Ordering::Relaxed);
    for a in appenders {
        a.await.unwrap();
    }
    let head = log.backend().max_id().await.unwrap();
    let Ok(read) = caught_up else {
        panic!("the catch-up chased the appends for 20 s (the log grew to {head} events)");
    };
    let read = read.unwrap();
    assert!(read >= 5_000, "the catch-up read {read} events");
    assert!(
        still_appending,
        "the catch-up returned only once the appends stopped, after {took:?}"
    );
    println!("caught up with {read} events in {took:?}; the log grew to {head} meanwhile");
    log.shutdown().await;
}
