//! The message history (`GET /instance-ai/threads/:id/messages`): user and assistant messages in
//! n8n's `InstanceAiMessage` shape, and each assistant message's agent tree equal to what the real
//! n8n reducer of `@n8n/api-types` 1.25.0 folds from the same events off the stream.

use crate::common;

use common::*;
use serde_json::{json, Value};

fn is_iso(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() >= 20 && s.as_bytes()[4] == b'-' && s.contains('T') && s.ends_with('Z')
    })
}

/// Compares the assistant message of `run` with the npm reducer's tree of the run's events.
pub(crate) async fn check_run(s: &Server, thread: &str, run: &str, events: &[SseEvent]) {
    let msgs = s.messages(thread).await;
    assert_eq!(msgs["threadId"], thread);
    let list = msgs["messages"].as_array().expect("messages");
    let assistant = list
        .iter()
        .find(|m| m["role"] == "assistant" && m["runId"] == run)
        .unwrap_or_else(|| panic!("no assistant message for {run}: {msgs}"));
    let run_events: Vec<String> = events
        .iter()
        .filter(|e| e.json()["runId"] == run)
        .map(|e| e.data.clone())
        .collect();
    let orch = orchestrator_of(events, run);

    assert_eq!(assistant["isStreaming"], false, "{assistant}");
    assert!(is_iso(&assistant["createdAt"]), "{assistant}");
    assert!(assistant["id"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(assistant["content"], text_of(events, run, &orch).as_str());
    let reasoning: String = events
        .iter()
        .map(|e| e.json())
        .filter(|v| v["type"] == "reasoning-delta" && v["runId"] == run && v["agentId"] == orch)
        .map(|v| v["payload"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(assistant["reasoning"], reasoning.as_str());

    let mut ours = assistant["agentTree"].clone();
    assert!(
        ours.is_object(),
        "assistant message without agentTree: {assistant}"
    );
    strip_tool_call_times(&mut ours);
    let theirs = reduce_n8n("1.25.0", &run_events).await;
    assert_eq!(
        ours, theirs,
        "{thread}/{run}: agentTree differs from the npm reducer\nours:   {ours}\ntheirs: {theirs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_run_history_matches_the_npm_reducer() {
    bounded(180, async {
        let s = Server::start().await;
        let t = "h-demo";
        let run = s.chat(t, "build me a weather workflow").await;
        let evs = s
            .follow_run(t, &run, |_| {
                Some(json!({"kind": "approval", "approved": true}))
            })
            .await;
        check_run(&s, t, &run, &evs).await;

        // A second, denied run: two user and two assistant messages, in order.
        let run2 = s.chat(t, "and delete the old one").await;
        let evs = s
            .follow_run(t, &run2, |_| Some(json!({"approved": false})))
            .await;
        check_run(&s, t, &run2, &evs).await;
        let msgs = s.messages(t).await;
        let roles: Vec<&str> = msgs["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant"], "{msgs}");
        let user = &msgs["messages"][2];
        assert_eq!(user["content"], "and delete the old one");
        assert!(is_iso(&user["createdAt"]), "{user}");

        // A cancelled run.
        let run3 = s.chat(t, "one long answer").await;
        let mut sse = s.sse(t, Cursor::query_id(evs.last().unwrap().id())).await;
        sse.read_until(std::time::Duration::from_secs(20), |e| {
            e.ty() == "text-delta"
        })
        .await;
        s.cancel(t).await.ok_json("cancel");
        let evs = s.follow_run(t, &run3, |_| None).await;
        check_run(&s, t, &run3, &evs).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingested_run_history_matches_the_npm_reducer() {
    bounded(120, async {
        let s = Server::start().await;
        let t = "h-ingest";
        let (r, o) = ("hr1", "ho");
        let events = vec![
            run_start(r, o),
            ev("reasoning-delta", r, o, json!({"text": "Let me see. "})),
            text_delta(r, o, "Looking"),
            ev(
                "tool-call",
                r,
                o,
                json!({"toolCallId": "c1", "toolName": "list-workflows", "args": {}}),
            ),
            ev(
                "tool-result",
                r,
                o,
                json!({"toolCallId": "c1", "result": [1, 2]}),
            ),
            ev(
                "tool-call",
                r,
                o,
                json!({"toolCallId": "c2", "toolName": "delegate", "args": {"role": "b"}}),
            ),
            ev(
                "agent-spawned",
                r,
                "hs",
                json!({"parentId": o, "role": "builder", "tools": ["x"]}),
            ),
            ev(
                "tool-call",
                r,
                "hs",
                json!({"toolCallId": "c3", "toolName": "x", "args": {"a": 1}}),
            ),
            text_delta(r, "hs", "sub says hi"),
            ev(
                "agent-completed",
                r,
                "hs",
                json!({"role": "builder", "result": "done", "error": "partly"}),
            ),
            ev(
                "tool-error",
                r,
                o,
                json!({"toolCallId": "c2", "error": "sub-agent failed"}),
            ),
            ev("status", r, o, json!({"message": "Almost there"})),
            ev(
                "tasks-update",
                r,
                o,
                json!({"tasks": {"tasks": [{"id": "t1", "description": "d", "status": "done"}]}}),
            ),
            ev("error", r, o, json!({"content": "Rate limited"})),
            text_delta(r, o, " and done."),
            ev(
                "run-finish",
                r,
                o,
                json!({"status": "error", "reason": "LLM provider unavailable"}),
            ),
        ];
        let ids = s.ingest_ok(t, &events).await;
        let evs = s.read_until_id(t, *ids.last().unwrap()).await;
        let run_events: Vec<String> = evs.iter().map(|e| e.data.clone()).collect();
        let msgs = s.messages(t).await;
        let assistant = msgs["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "assistant")
            .unwrap_or_else(|| panic!("{msgs}"))
            .clone();
        assert_eq!(assistant["runId"], r);
        let mut ours = assistant["agentTree"].clone();
        strip_tool_call_times(&mut ours);
        let theirs = reduce_n8n("1.25.0", &run_events).await;
        assert_eq!(ours, theirs, "\nours:   {ours}\ntheirs: {theirs}");
        assert_eq!(
            msgs["nextEventId"].as_i64().unwrap(),
            ids.last().unwrap() + 1
        );
    })
    .await
}
