//! Runs over HTTP: one live run per thread (409), cancel (bounded latency, idempotent, no-op after
//! the run finished), and the HITL confirmation (approve → tool-result, deny → tool-error,
//! unknown or answered twice → 404, status suspended while waiting).

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn approve() -> Value {
    json!({"kind": "approval", "approved": true})
}

/// Reads `sse` until the confirmation request of `run`; returns (events so far, its payload).
async fn until_confirmation(sse: &mut Sse, run: &str) -> (Vec<SseEvent>, Value) {
    let evs = sse
        .read_until(Duration::from_secs(20), |e| {
            let v = e.json();
            v["runId"] == run && (v["type"] == "confirmation-request" || v["type"] == "run-finish")
        })
        .await;
    let last = evs.last().unwrap().json();
    assert_eq!(
        last["type"], "confirmation-request",
        "the demo run finished without asking for a confirmation: {last}"
    );
    (evs, last["payload"].clone())
}

fn find_by_tool_call<'a>(
    events: &'a [Value],
    tool_call_id: &str,
    types: &[&str],
) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|v| {
            types.contains(&v["type"].as_str().unwrap_or(""))
                && v["payload"]["toolCallId"] == tool_call_id
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_chat_while_a_run_is_active_is_409_and_a_new_chat_works_after() {
    bounded(120, async {
        let s = Server::start().await;
        let run = s.chat("t-409", "give me a long answer please").await;
        let r = s.chat_resp("t-409", "and another thing").await;
        let (code, message) = r.error(409, "second chat while a run is active");
        assert!(!code.is_empty() && !message.is_empty());
        let st = s.status("t-409").await;
        assert_eq!(st["hasActiveRun"], true, "{st}");
        assert_eq!(st["runId"], run.as_str(), "{st}");

        s.cancel("t-409").await.ok_json("cancel");
        let evs = s.follow_run("t-409", &run, |_| None).await;
        let fin = evs.last().unwrap().json();
        assert_eq!(fin["payload"]["status"], "cancelled", "{fin}");

        let st = s.status("t-409").await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
        assert_eq!(st["isSuspended"], false, "{st}");
        let run2 = s.chat("t-409", "hello again").await;
        assert_ne!(run, run2);
        s.cancel("t-409").await.ok_json("cancel");
        s.follow_run("t-409", &run2, |_| None).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_yields_tool_result_and_status_is_suspended_while_waiting() {
    bounded(120, async {
        let s = Server::start().await;
        let t = "t-approve";
        let run = s.chat(t, "clean up my old workflows").await;
        let mut sse = s.sse(t, Cursor::None).await;
        let (before, cr) = until_confirmation(&mut sse, &run).await;
        let request_id = cr["requestId"].as_str().expect("requestId").to_string();
        let tool_call_id = cr["toolCallId"].as_str().expect("toolCallId").to_string();
        let before: Vec<Value> = before.iter().map(|e| e.json()).collect();
        let calls = find_by_tool_call(&before, &tool_call_id, &["tool-call"]);
        assert_eq!(
            calls.len(),
            1,
            "one tool-call {tool_call_id} before its confirmation"
        );
        assert_eq!(calls[0]["payload"]["toolName"], cr["toolName"]);
        let calling_agent = calls[0]["agentId"].clone();

        // Waiting on the user: suspended, still live, and a second chat is refused.
        let st = s.status(t).await;
        assert_eq!(st["isSuspended"], true, "status while waiting: {st}");
        assert_eq!(st["hasActiveRun"], true, "status while waiting: {st}");
        assert_eq!(st["runId"], run.as_str(), "{st}");
        s.chat_resp(t, "are you there?")
            .await
            .error(409, "chat while waiting on a confirmation");

        let ok = s.confirm(&request_id, &approve()).await.ok_json("approve");
        assert_eq!(ok, json!({"ok": true}));

        let after = sse
            .read_until(Duration::from_secs(20), |e| {
                let v = e.json();
                v["runId"] == run.as_str() && v["type"] == "run-finish"
            })
            .await;
        let after: Vec<Value> = after.iter().map(|e| e.json()).collect();
        let settled = find_by_tool_call(&after, &tool_call_id, &["tool-result", "tool-error"]);
        assert_eq!(
            settled.len(),
            1,
            "exactly one settlement of {tool_call_id}: {settled:?}"
        );
        assert_eq!(
            settled[0]["type"], "tool-result",
            "approved → tool-result: {}",
            settled[0]
        );
        assert_eq!(settled[0]["agentId"], calling_agent);
        let fin = after.last().unwrap();
        assert_eq!(fin["payload"]["status"], "completed", "{fin}");

        // Answered: a second answer is a 404, and the thread is idle again.
        s.confirm(&request_id, &approve())
            .await
            .error(404, "answering twice");
        let st = s.status(t).await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
        assert_eq!(st["isSuspended"], false, "{st}");

        // After the finish a new chat works.
        let run2 = s.chat(t, "thanks").await;
        assert_ne!(run2, run);
        let evs = s.follow_run(t, &run2, |_| Some(approve())).await;
        assert_eq!(evs.last().unwrap().json()["payload"]["status"], "completed");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_yields_tool_error_with_the_flat_body() {
    bounded(120, async {
        let s = Server::start().await;
        let t = "t-deny";
        let run = s.chat(t, "delete the staging workflow").await;
        let mut sse = s.sse(t, Cursor::None).await;
        let (_, cr) = until_confirmation(&mut sse, &run).await;
        let request_id = cr["requestId"].as_str().unwrap().to_string();
        let tool_call_id = cr["toolCallId"].as_str().unwrap().to_string();

        // The older flat body.
        let ok = s
            .confirm(&request_id, &json!({"approved": false}))
            .await
            .ok_json("deny");
        assert_eq!(ok, json!({"ok": true}));
        let after = sse
            .read_until(Duration::from_secs(20), |e| {
                let v = e.json();
                v["runId"] == run.as_str() && v["type"] == "run-finish"
            })
            .await;
        let after: Vec<Value> = after.iter().map(|e| e.json()).collect();
        let settled = find_by_tool_call(&after, &tool_call_id, &["tool-result", "tool-error"]);
        assert_eq!(settled.len(), 1, "{settled:?}");
        assert_eq!(
            settled[0]["type"], "tool-error",
            "denied → tool-error: {}",
            settled[0]
        );
        assert!(
            settled[0]["payload"]["error"]
                .as_str()
                .is_some_and(|e| !e.is_empty()),
            "{}",
            settled[0]
        );
        assert_eq!(after.last().unwrap()["payload"]["status"], "completed");
        s.confirm(&request_id, &json!({"approved": true}))
            .await
            .error(404, "answering a denied request again");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_unknown_request_is_404_and_nothing_is_stored() {
    bounded(60, async {
        let s = Server::start().await;
        // A thread with history, so "nothing stored" is measurable.
        s.ingest_ok(
            "t-unk",
            &[run_start("r1", "o1"), run_finish("r1", "o1", "completed")],
        )
        .await;
        let before = s.messages("t-unk").await["nextEventId"].clone();
        for body in [approve(), json!({"approved": false})] {
            s.confirm("cr_does_not_exist", &body)
                .await
                .error(404, "confirm of an unknown request");
        }
        let after = s.messages("t-unk").await["nextEventId"].clone();
        assert_eq!(before, after, "a refused confirm stored something");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_stream_finishes_the_run_within_100ms() {
    bounded(120, async {
        let s = Server::start().await;
        let t = "t-cancel";
        let run = s.chat(t, "write me a long essay").await;
        let mut sse = s.sse(t, Cursor::None).await;
        // Mid-stream: some text is flowing.
        let mut deltas = 0;
        sse.read_until(Duration::from_secs(20), |e| {
            let v = e.json();
            assert_ne!(v["type"], "run-finish", "the long run finished before the cancel");
            if v["type"] == "text-delta" {
                deltas += 1;
            }
            deltas >= 20
        })
        .await;

        // A reader task timestamps every frame as it is parsed, so the backlog stays small.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<SseEvent>();
        let reader = tokio::spawn(async move {
            while let Ok(e) = sse.next_event(Duration::from_secs(20)).await {
                if tx.send(e).is_err() {
                    break;
                }
            }
        });
        let r = s.cancel(t).await;
        let acked = Instant::now();
        assert_eq!(r.ok_json("cancel"), json!({"ok": true}));

        let mut finish = None;
        let mut after_ack = 0usize;
        while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            if e.at > acked {
                after_ack += 1;
            }
            let v = e.json();
            if v["runId"] == run.as_str() && v["type"] == "run-finish" {
                finish = Some((e.at, v));
                break;
            }
        }
        let (at, fin) = finish.expect("no run-finish within 10 s of the cancel");
        assert_eq!(fin["payload"]["status"], "cancelled", "{fin}");
        assert_eq!(fin["payload"]["reason"], "user_cancelled", "{fin}");
        let latency = at.saturating_duration_since(acked);
        assert!(
            latency <= Duration::from_millis(100),
            "run-finish arrived {latency:?} after the cancel was acknowledged ({after_ack} frames after the ack)"
        );
        // Nothing of the run follows its run-finish.
        let late = tokio::time::timeout(Duration::from_millis(500), async {
            let mut n = Vec::new();
            while let Some(e) = rx.recv().await {
                n.push(e.data);
            }
            n
        })
        .await
        .unwrap_or_default();
        assert!(late.is_empty(), "events after run-finish: {late:?}");
        reader.abort();

        let st = s.status(t).await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_is_idempotent_and_a_noop_after_the_run_finished() {
    bounded(120, async {
        let s = Server::start().await;
        let t = "t-idem";
        // Cancel of a thread with nothing running is {ok:true}.
        assert_eq!(
            s.cancel("t-never-ran").await.ok_json("cancel"),
            json!({"ok": true})
        );

        let run = s.chat(t, "a long one, please").await;
        let mut sse = s.sse(t, Cursor::None).await;
        sse.read_until(Duration::from_secs(20), |e| e.ty() == "text-delta")
            .await;
        // Several cancels, concurrently and in a row: all {ok:true}, one run-finish.
        let (a, b) = tokio::join!(s.cancel(t), s.cancel(t));
        assert_eq!(a.ok_json("cancel a"), json!({"ok": true}));
        assert_eq!(b.ok_json("cancel b"), json!({"ok": true}));
        assert_eq!(s.cancel(t).await.ok_json("cancel c"), json!({"ok": true}));
        let rest = sse
            .read_until(Duration::from_secs(10), |e| {
                e.json()["runId"] == run.as_str() && e.ty() == "run-finish"
            })
            .await;
        assert_eq!(
            rest.last().unwrap().json()["payload"]["status"],
            "cancelled"
        );
        let more = sse.drain_idle(Duration::from_millis(500)).await;
        assert!(
            more.iter().all(|e| e.ty() != "run-finish"),
            "a second run-finish: {:?}",
            more.iter().map(|e| e.data.clone()).collect::<Vec<_>>()
        );

        // After the finish, cancel stores nothing and changes nothing.
        let next = s.messages(t).await["nextEventId"].clone();
        assert_eq!(
            s.cancel(t).await.ok_json("late cancel"),
            json!({"ok": true})
        );
        assert_eq!(
            s.messages(t).await["nextEventId"],
            next,
            "late cancel stored an event"
        );
        assert!(sse.drain_idle(Duration::from_millis(300)).await.is_empty());

        // A run that completed normally: cancel after it is a no-op too.
        let run2 = s.chat(t, "short please").await;
        let evs = s.follow_run(t, &run2, |_| Some(approve())).await;
        assert_eq!(evs.last().unwrap().json()["payload"]["status"], "completed");
        let next = s.messages(t).await["nextEventId"].clone();
        assert_eq!(
            s.cancel(t).await.ok_json("cancel after finish"),
            json!({"ok": true})
        );
        assert_eq!(s.messages(t).await["nextEventId"], next);
        let st = s.status(t).await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_waiting_on_a_confirmation_ends_the_run_and_voids_the_request() {
    bounded(120, async {
        let s = Server::start().await;
        let t = "t-cancel-wait";
        let run = s.chat(t, "remove the old workflow").await;
        let mut sse = s.sse(t, Cursor::None).await;
        let (_, cr) = until_confirmation(&mut sse, &run).await;
        let request_id = cr["requestId"].as_str().unwrap().to_string();
        assert_eq!(s.cancel(t).await.ok_json("cancel"), json!({"ok": true}));
        let rest = sse
            .read_until(Duration::from_secs(10), |e| {
                e.json()["runId"] == run.as_str() && e.ty() == "run-finish"
            })
            .await;
        let fin = rest.last().unwrap().json();
        assert_eq!(fin["payload"]["status"], "cancelled", "{fin}");
        assert_eq!(fin["payload"]["reason"], "user_cancelled", "{fin}");
        s.confirm(&request_id, &approve())
            .await
            .error(404, "answering a request of a cancelled run");
        let st = s.status(t).await;
        assert_eq!(st["isSuspended"], false, "{st}");
        assert_eq!(st["hasActiveRun"], false, "{st}");
        s.chat(t, "start over").await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_is_refused_while_a_run_is_live() {
    bounded(120, async {
        let s = Server::start().await;
        let t = "t-del";
        let run = s.chat(t, "long answer please").await;
        s.delete(&format!("/instance-ai/threads/{t}"))
            .await
            .error(409, "delete while a run is live");
        s.cancel(t).await.ok_json("cancel");
        s.follow_run(t, &run, |_| None).await;
        let ok = s
            .delete(&format!("/instance-ai/threads/{t}"))
            .await
            .ok_json("delete");
        assert_eq!(ok, json!({"ok": true}));
        let list = s.threads().await;
        assert!(
            list["threads"]
                .as_array()
                .unwrap()
                .iter()
                .all(|th| th["id"] != t),
            "deleted thread still listed: {list}"
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_a_sub_agent_works_stops_it_within_100ms() {
    bounded(120, async {
        // Slower deltas, so the sub-agent is surely still working when the cancel lands.
        let s = Server::start_with(Opts {
            demo_delay_ms: 25,
            ..Opts::default()
        })
        .await;
        let t = "t-cancel-sub";
        let run = s.chat(t, "build a weather workflow").await;
        let mut sse = s.sse(t, Cursor::None).await;
        let evs = sse
            .read_until(Duration::from_secs(30), |e| {
                let v = e.json();
                assert_ne!(
                    v["type"], "run-finish",
                    "finished before a sub-agent started"
                );
                v["runId"] == run.as_str() && v["type"] == "agent-spawned"
            })
            .await;
        let sub = evs.last().unwrap().json()["agentId"]
            .as_str()
            .unwrap()
            .to_string();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<SseEvent>();
        let reader = tokio::spawn(async move {
            while let Ok(e) = sse.next_event(Duration::from_secs(20)).await {
                if tx.send(e).is_err() {
                    break;
                }
            }
        });
        let r = s.cancel(t).await;
        let acked = Instant::now();
        assert_eq!(r.ok_json("cancel"), json!({"ok": true}));
        let mut sub_after_deadline = Vec::new();
        let mut finish = None;
        while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            let v = e.json();
            if v["agentId"] == sub.as_str()
                && e.at > acked + Duration::from_millis(100)
                && v["type"] != "agent-completed"
            {
                sub_after_deadline.push(e.data.clone());
            }
            if v["runId"] == run.as_str() && v["type"] == "run-finish" {
                finish = Some((e.at, v));
                break;
            }
        }
        reader.abort();
        let (at, fin) = finish.expect("no run-finish within 10 s of the cancel");
        assert_eq!(fin["payload"]["status"], "cancelled", "{fin}");
        assert_eq!(fin["payload"]["reason"], "user_cancelled", "{fin}");
        let latency = at.saturating_duration_since(acked);
        assert!(
            latency <= Duration::from_millis(100),
            "run-finish arrived {latency:?} after the cancel was acknowledged"
        );
        assert!(
            sub_after_deadline.is_empty(),
            "the sub-agent kept working after the cancel: {sub_after_deadline:?}"
        );
        let st = s.status(t).await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
        assert!(st["backgroundTasks"].is_array(), "{st}");
    })
    .await
}
