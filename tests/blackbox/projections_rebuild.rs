//! `threadstream projections rebuild` drops every read model and folds it again from the log; the
//! message history, thread status and thread list it produces are identical to the live ones.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const THREADS: [&str; 6] = [
    "pr-complete",
    "pr-cancel",
    "pr-deny",
    "pr-renamed",
    "pr-deleted",
    "pr-ingest",
];

/// Status and body (JSON when it parses) of one GET.
async fn get_view(s: &Server, path: &str) -> Value {
    let r = s.get(path).await;
    let body = serde_json::from_str::<Value>(&r.text).unwrap_or(Value::String(r.text.clone()));
    json!({"status": r.status, "body": body})
}

/// Every read model the API serves for the test's threads.
async fn snapshot(s: &Server) -> Vec<(String, Value)> {
    let mut out = vec![(
        "threads".to_string(),
        get_view(s, "/instance-ai/threads").await,
    )];
    for t in THREADS {
        for view in ["messages", "status"] {
            let path = format!("/instance-ai/threads/{t}/{view}");
            out.push((path.clone(), get_view(s, &path).await));
        }
    }
    out
}

fn assert_same(before: &[(String, Value)], after: &[(String, Value)], what: &str) {
    assert_eq!(before.len(), after.len());
    for ((path, a), (_, b)) in before.iter().zip(after) {
        assert_eq!(a, b, "{what}: {path} differs");
    }
}

fn approve(yes: bool) -> impl FnMut(&Value) -> Option<Value> {
    move |_| Some(json!({"kind": "approval", "approved": yes}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilt_read_models_are_identical_to_the_live_ones() {
    bounded(240, async {
        let mut s = Server::start().await;

        // Two completed runs in one thread.
        for msg in ["tidy my workflows", "thanks, once more"] {
            let run = s.chat("pr-complete", msg).await;
            let evs = s.follow_run("pr-complete", &run, approve(true)).await;
            assert_eq!(evs.last().unwrap().json()["payload"]["status"], "completed");
        }
        // Cancelled mid-stream.
        let run = s.chat("pr-cancel", "a long answer please").await;
        let mut sse = s.sse("pr-cancel", Cursor::None).await;
        sse.read_until(Duration::from_secs(20), |e| e.ty() == "text-delta")
            .await;
        s.cancel("pr-cancel").await.ok_json("cancel");
        drop(sse);
        let evs = s.follow_run("pr-cancel", &run, |_| None).await;
        assert_eq!(evs.last().unwrap().json()["payload"]["status"], "cancelled");
        // Denied.
        let run = s.chat("pr-deny", "delete the old one").await;
        s.follow_run("pr-deny", &run, approve(false)).await;
        // Created with a title, used, renamed.
        let created = s
            .post(
                "/instance-ai/threads",
                &json!({"threadId": "pr-renamed", "title": "First title"}),
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.text);
        assert_eq!(created.json()["id"], "pr-renamed");
        let run = s.chat("pr-renamed", "hello").await;
        s.follow_run("pr-renamed", &run, approve(true)).await;
        let renamed = s
            .patch(
                "/instance-ai/threads/pr-renamed",
                &json!({"title": "Second title"}),
            )
            .await
            .ok_json("rename");
        assert_eq!(renamed["title"], "Second title", "{renamed}");
        // Used, then deleted.
        let run = s.chat("pr-deleted", "hello").await;
        s.follow_run("pr-deleted", &run, approve(true)).await;
        s.delete("/instance-ai/threads/pr-deleted")
            .await
            .ok_json("delete");
        // Ingested: a run with a sub-agent, and an errored run.
        let ids = s
            .ingest_ok(
                "pr-ingest",
                &[
                    run_start("ri1", "oi"),
                    ev("reasoning-delta", "ri1", "oi", json!({"text": "hmm"})),
                    ev(
                        "tool-call",
                        "ri1",
                        "oi",
                        json!({"toolCallId": "tc1", "toolName": "delegate", "args": {}}),
                    ),
                    ev(
                        "agent-spawned",
                        "ri1",
                        "si",
                        json!({"parentId": "oi", "role": "builder", "tools": ["a"]}),
                    ),
                    text_delta("ri1", "si", "sub text"),
                    ev(
                        "agent-completed",
                        "ri1",
                        "si",
                        json!({"role": "builder", "result": "ok"}),
                    ),
                    ev(
                        "tool-result",
                        "ri1",
                        "oi",
                        json!({"toolCallId": "tc1", "result": "ok"}),
                    ),
                    text_delta("ri1", "oi", "all done"),
                    run_finish("ri1", "oi", "completed"),
                    run_start("ri2", "oi"),
                    ev("error", "ri2", "oi", json!({"content": "provider down"})),
                    ev(
                        "run-finish",
                        "ri2",
                        "oi",
                        json!({"status": "error", "reason": "LLM provider unavailable"}),
                    ),
                ],
            )
            .await;
        assert_eq!(ids.len(), 12);

        let live = snapshot(&s).await;
        // Sanity of what is being compared.
        let list = &live[0].1["body"]["threads"];
        let listed: Vec<&str> = list
            .as_array()
            .unwrap_or_else(|| panic!("thread list: {list}"))
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        for t in THREADS.iter().filter(|t| **t != "pr-deleted") {
            assert!(listed.contains(t), "{t} not listed: {list}");
        }
        assert!(
            !listed.contains(&"pr-deleted"),
            "deleted thread listed: {list}"
        );
        let renamed_entry = list
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == "pr-renamed")
            .unwrap();
        assert_eq!(renamed_entry["title"], "Second title");
        let msgs = s.messages("pr-complete").await;
        assert_eq!(
            msgs["messages"].as_array().unwrap().len(),
            4,
            "two user and two assistant messages: {msgs}"
        );

        s.stop().await;
        let out = s.rebuild_projections().await;
        assert!(out.contains("rebuilt read models from "), "{out:?}");
        s.restart().await;
        assert_same(&live, &snapshot(&s).await, "after projections rebuild");

        // Rebuilding twice changes nothing either.
        s.stop().await;
        s.rebuild_projections().await;
        s.restart().await;
        assert_same(&live, &snapshot(&s).await, "after a second rebuild");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_reports_the_number_of_events_in_the_log() {
    bounded(60, async {
        let mut s = Server::start().await;
        s.ingest_ok(
            "pr-count",
            &[
                run_start("r1", "o1"),
                text_delta("r1", "o1", "hi"),
                run_finish("r1", "o1", "completed"),
            ],
        )
        .await;
        s.patch(
            "/instance-ai/threads/pr-count",
            &json!({"title": "Counted"}),
        )
        .await
        .ok_json("rename");
        s.stop().await;
        let events_in_log = s.count_events().await;
        let out = s.rebuild_projections().await;
        let n: i64 = out
            .split("rebuilt read models from ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected rebuild output: {out:?}"));
        assert_eq!(
            n, events_in_log,
            "`projections rebuild` says it rebuilt from {n} events; the log holds {events_in_log}"
        );
    })
    .await
}
