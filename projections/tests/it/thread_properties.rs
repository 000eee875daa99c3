//! Property test over random command sequences against the `Thread` aggregate: whatever the
//! sequence, every command the aggregate accepts folds without panic, and the read models
//! folded from the accepted events never contradict the log or the aggregate:
//!
//! - a run is live in `status` iff the log has its `run-start` and no `run-finish`, and it is
//!   the aggregate's live run;
//! - `status`'s background tasks are exactly the aggregate's running tasks;
//! - every read model folded event by event equals the same model rebuilt from the whole log;
//! - the stored events decode back to the events the aggregate decided.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::{json, Value};
use threadstream_domain::{AgentEvent, StoredEvent, Thread, ThreadCommand};
use threadstream_projections::{rebuild, Analytics, History, ReadModel, Status, ThreadList};

const RUNS: &[&str] = &["r1", "r2", "r3"];
const AGENTS: &[&str] = &["a1", "a1", "a2", "a3"];
const CALLS: &[&str] = &["tc1", "tc2", "tc3"];
const REQUESTS: &[&str] = &["cr1", "cr2"];
const TASKS: &[&str] = &["task1", "task2"];

pub(crate) fn pick(pool: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(pool).prop_map(str::to_string)
}

/// One agent event in its wire form, as ingest receives it.
fn wire_event() -> impl Strategy<Value = Value> {
    let payload = prop_oneof![
        pick(RUNS).prop_map(|m| json!(["run-start", {"messageId": format!("m-{m}")}])),
        prop::sample::select(&["completed", "cancelled", "error"][..])
            .prop_map(|s| json!(["run-finish", {"status": s}])),
        (pick(AGENTS), prop::option::of(pick(TASKS))).prop_map(|(parent, task)| {
            let mut p = json!({"parentId": parent, "role": "builder", "tools": []});
            if let Some(t) = task {
                p["taskId"] = json!(t);
            }
            json!(["agent-spawned", p])
        }),
        Just(json!(["agent-completed", {"role": "builder", "result": "done"}])),
        "[a-z ]{0,8}".prop_map(|t| json!(["text-delta", {"text": t}])),
        "[a-z ]{0,8}".prop_map(|t| json!(["reasoning-delta", {"text": t}])),
        pick(CALLS)
            .prop_map(|c| json!(["tool-call", {"toolCallId": c, "toolName": "list", "args": {}}])),
        pick(CALLS).prop_map(|c| json!(["tool-result", {"toolCallId": c, "result": {"ok": true}}])),
        pick(CALLS).prop_map(|c| json!(["tool-error", {"toolCallId": c, "error": "boom"}])),
        (pick(REQUESTS), pick(CALLS)).prop_map(|(r, c)| json!(["confirmation-request", {
            "requestId": r, "toolCallId": c, "toolName": "delete", "args": {},
            "severity": "warning", "message": "sure?"}])),
        Just(
            json!(["tasks-update", {"tasks": {"tasks": [{"id": "t1", "description": "d", "status": "in_progress"}]}}])
        ),
        "[a-z]{0,6}".prop_map(|m| json!(["status", {"message": m}])),
        "[a-z]{1,6}".prop_map(|t| json!(["thread-title-updated", {"title": t}])),
        Just(json!(["error", {"content": "oops"}])),
    ];
    (pick(RUNS), pick(AGENTS), payload).prop_map(
        |(run, agent, tp)| json!({"type": tp[0], "runId": run, "agentId": agent, "payload": tp[1]}),
    )
}

pub(crate) fn command() -> impl Strategy<Value = ThreadCommand> {
    prop_oneof![
        4 => wire_event().prop_map(|v| {
            ThreadCommand::Record(serde_json::from_value::<AgentEvent>(v).expect("generated events decode"))
        }),
        2 => (pick(RUNS), "[a-z]{1,6}").prop_map(|(run, text)| ThreadCommand::StartRun {
            run_id: run.clone(),
            agent_id: "a1".into(),
            message_id: format!("m-{run}"),
            message_group_id: Some("mg1".into()),
            text,
            user: "u".into(),
        }),
        1 => (pick(RUNS), pick(AGENTS)).prop_map(|(run, agent)| ThreadCommand::StartFollowUp {
            run_id: run.clone(),
            agent_id: agent,
            message_id: format!("f-{run}"),
            message_group_id: "mg1".into(),
        }),
        1 => (pick(REQUESTS), any::<bool>()).prop_map(|(r, approved)| ThreadCommand::AnswerConfirmation {
            request_id: r,
            approved,
            user_input: None,
            answers: None,
            by: "u".into(),
        }),
        1 => Just(ThreadCommand::Cancel { by: "u".into(), reason: "user_cancelled".into() }),
        1 => pick(TASKS).prop_map(|t| ThreadCommand::CancelTask { task_id: t, by: "u".into() }),
        1 => "[a-z]{1,6}".prop_map(|t| ThreadCommand::Rename { title: t, by: "u".into() }),
    ]
}

/// Runs with a `run-start` and no `run-finish` in `log`.
fn open_runs(log: &[StoredEvent]) -> BTreeSet<String> {
    let mut open = BTreeSet::new();
    for e in log {
        match e.event_type.as_str() {
            "run-start" => {
                open.insert(e.run_id.clone());
            }
            "run-finish" => {
                open.remove(&e.run_id);
            }
            _ => {}
        }
    }
    open
}

fn incremental<M: ReadModel>(docs: &mut BTreeMap<String, M::Doc>, e: &StoredEvent) {
    if let Some(key) = M::key(e) {
        M::apply(docs.entry(key).or_default(), e);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn accepted_sequences_fold_and_projections_agree_with_the_log(
        commands in prop::collection::vec(command(), 1..150)
    ) {
        const THREAD: &str = "t1";
        let mut thread = Thread::default();
        let mut log: Vec<StoredEvent> = Vec::new();
        let mut status = BTreeMap::new();
        let mut history = BTreeMap::new();
        let mut list = BTreeMap::new();
        let mut analytics = BTreeMap::new();
        let create = ThreadCommand::Create { owner: "u".into(), title: None };
        let mut accepted = 0;
        for command in std::iter::once(create).chain(commands) {
            let Ok(events) = thread.decide(&command) else { continue };
            accepted += 1;
            for event in events {
                thread.apply(&event);
                let id = log.len() as i64 + 1;
                let stored = StoredEvent::from_event(id, THREAD, id, 1_700_000_000_000 + id, &event);
                // What is stored decodes back to what was decided.
                let mut back = stored.decode().expect("stored events decode");
                back.ts = event.ts;
                prop_assert_eq!(&back, &event);
                incremental::<Status>(&mut status, &stored);
                incremental::<History>(&mut history, &stored);
                incremental::<ThreadList>(&mut list, &stored);
                incremental::<Analytics>(&mut analytics, &stored);
                log.push(stored);
            }

            // A run is live in status iff it has a start and no finish in the log.
            let open = open_runs(&log);
            let doc = status.get(THREAD).cloned().unwrap_or_default();
            prop_assert!(open.len() <= 1, "two open runs: {:?}", open);
            prop_assert_eq!(doc.run_id().map(str::to_string), open.iter().next().cloned());
            prop_assert_eq!(
                thread.live_run().map(|r| r.run_id.clone()),
                open.iter().next().cloned()
            );
            // Background tasks: the status lists exactly the aggregate's running tasks.
            let listed: BTreeSet<String> =
                doc.background_tasks.iter().map(|t| t.task_id.clone()).collect();
            let running: BTreeSet<String> =
                thread.running_tasks().map(|(_, _, task)| task.to_string()).collect();
            prop_assert_eq!(listed, running);
        }
        prop_assert!(accepted >= 1);

        // Folding event by event and rebuilding from the whole log give the same documents.
        prop_assert_eq!(&status, &rebuild::<Status>(&log));
        prop_assert_eq!(&history, &rebuild::<History>(&log));
        prop_assert_eq!(&list, &rebuild::<ThreadList>(&log));
        prop_assert_eq!(&analytics, &rebuild::<Analytics>(&log));
    }
}
