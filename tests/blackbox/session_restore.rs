//! The n8n client's reload flow in the middle of a run: GET messages → `nextEventId` → SSE from
//! `nextEventId - 1` gives every later event exactly once, and the snapshot's assistant text plus
//! the later deltas is the final text. Both cursor sources (query and `Last-Event-ID`) are used.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// The assistant message of `run` in a messages response.
fn assistant_of<'a>(messages: &'a Value, run: &str) -> Option<&'a Value> {
    messages["messages"]
        .as_array()
        .expect("messages array")
        .iter()
        .find(|m| m["role"] == "assistant" && m["runId"] == run)
}

fn content_of(messages: &Value, run: &str) -> String {
    assistant_of(messages, run)
        .map(|m| {
            m["content"]
                .as_str()
                .expect("content is a string")
                .to_string()
        })
        .unwrap_or_default()
}

#[derive(Clone, Copy, Debug)]
enum Via {
    Query,
    Header,
    /// A valid header wins over the query (which here would replay everything).
    HeaderOverQuery,
}

async fn reload_mid_run(via: Via) {
    let s = Server::start().await;
    let t = "t-reload";
    // History before the run, so the snapshot covers an earlier run too.
    s.ingest_ok(
        t,
        &[
            run_start("r-old", "o-old"),
            text_delta("r-old", "o-old", "earlier answer"),
            run_finish("r-old", "o-old", "completed"),
        ],
    )
    .await;

    let run = s.chat(t, "please write a long answer").await;
    // The first tab watches the run for a while.
    let mut tab1 = s.sse(t, Cursor::None).await;
    let mut deltas = 0;
    tab1.read_until(Duration::from_secs(20), |e| {
        let v = e.json();
        assert!(
            !(v["runId"] == run.as_str() && v["type"] == "run-finish"),
            "run finished before the reload"
        );
        if v["type"] == "text-delta" && v["runId"] == run.as_str() {
            deltas += 1;
        }
        deltas >= 30
    })
    .await;
    drop(tab1);

    // Reload: messages, then status, then SSE from nextEventId - 1.
    let snapshot = s.messages(t).await;
    assert_eq!(snapshot["threadId"], t);
    let next = snapshot["nextEventId"]
        .as_i64()
        .unwrap_or_else(|| panic!("nextEventId is not an integer: {snapshot}"));
    let assistant = assistant_of(&snapshot, &run)
        .unwrap_or_else(|| panic!("no assistant message for the live run: {snapshot}"))
        .clone();
    assert_eq!(assistant["isStreaming"], true, "mid-run: {assistant}");
    let snap_text = content_of(&snapshot, &run);
    assert!(
        !snap_text.is_empty(),
        "snapshot has no text yet: {assistant}"
    );
    let st = s.status(t).await;
    assert_eq!(st["hasActiveRun"], true, "{st}");
    assert_eq!(st["runId"], run.as_str(), "{st}");

    let cursor = next - 1;
    let c = match via {
        Via::Query => Cursor::query_id(cursor),
        Via::Header => Cursor::header_id(cursor),
        Via::HeaderOverQuery => Cursor::Both {
            header: cursor.to_string(),
            query: "0".into(),
        },
    };
    let mut tab2 = s.sse(t, c).await;
    let mut live: Vec<SseEvent> = Vec::new();
    loop {
        let e = tab2
            .next_event(Duration::from_secs(30))
            .await
            .unwrap_or_else(|err| {
                panic!("{via:?}: after reload: {err:?} after {} events", live.len())
            });
        let v = e.json();
        live.push(e);
        if v["runId"] == run.as_str() && v["type"] == "confirmation-request" {
            // Keeps a run that asks moving.
            let rid = v["payload"]["requestId"].as_str().expect("requestId");
            s.confirm(rid, &json!({"kind": "approval", "approved": true}))
                .await
                .ok_json("approve");
        }
        if v["runId"] == run.as_str() && v["type"] == "run-finish" {
            break;
        }
    }
    assert_strictly_increasing(&live, "stream after reload");
    assert!(
        live.iter().all(|e| e.id() > cursor),
        "{via:?}: the stream after the reload repeated an event the snapshot covers (cursor {cursor}, first id {})",
        live[0].id()
    );

    // A fresh full read is the truth: the reload saw exactly its tail after the cursor.
    let last = live.last().unwrap().id();
    let full = s.read_until_id(t, last).await;
    assert_strictly_increasing(&full, "full read");
    let tail: Vec<(i64, String)> = id_data(&full)
        .into_iter()
        .filter(|(id, _)| *id > cursor)
        .collect();
    assert_eq!(
        tail,
        id_data(&live),
        "{via:?}: events after the cursor differ between the reload and a full read"
    );

    // Snapshot text + later deltas == the final text.
    let orch = orchestrator_of(&full, &run);
    let later_text = text_of(&live, &run, &orch);
    let full_text = text_of(&full, &run, &orch);
    assert_eq!(
        format!("{snap_text}{later_text}"),
        full_text,
        "{via:?}: snapshot text + deltas after nextEventId-1 != all deltas"
    );
    let final_msgs = s.messages(t).await;
    let final_assistant = assistant_of(&final_msgs, &run).unwrap().clone();
    assert_eq!(final_assistant["isStreaming"], false, "{final_assistant}");
    assert_eq!(content_of(&final_msgs, &run), full_text);
    assert_eq!(content_of(&final_msgs, "r-old"), "earlier answer");
    // The user message is in the history too.
    assert!(
        final_msgs["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "user" && m["content"] == "please write a long answer"),
        "{final_msgs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_mid_run_with_query_cursor() {
    bounded(150, reload_mid_run(Via::Query)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_mid_run_with_last_event_id_header() {
    bounded(150, reload_mid_run(Via::Header)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_mid_run_header_wins_over_query() {
    bounded(150, reload_mid_run(Via::HeaderOverQuery)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_when_idle_replays_nothing_and_then_goes_live() {
    bounded(120, async {
        let s = Server::start().await;
        let t = "t-idle";
        s.ingest_ok(
            t,
            &[
                run_start("r1", "o1"),
                text_delta("r1", "o1", "hello"),
                run_finish("r1", "o1", "completed"),
            ],
        )
        .await;
        // Internal events after the last n8n event (a rename) must not confuse the cursor.
        s.patch(
            &format!("/instance-ai/threads/{t}"),
            &json!({"title": "Renamed"}),
        )
        .await
        .ok_json("rename");
        let snapshot = s.messages(t).await;
        let next = snapshot["nextEventId"].as_i64().expect("nextEventId");
        let mut sse = s.sse(t, Cursor::query_id(next - 1)).await;
        let replayed = sse.drain_idle(Duration::from_millis(500)).await;
        assert!(
            replayed.is_empty(),
            "replayed events the snapshot covers: {:?}",
            replayed.iter().map(|e| e.data.clone()).collect::<Vec<_>>()
        );
        // Live from here on.
        let ids = s
            .ingest_ok(
                t,
                &[run_start("r2", "o2"), run_finish("r2", "o2", "completed")],
            )
            .await;
        let got = sse
            .read_until(Duration::from_secs(10), |e| e.id() == *ids.last().unwrap())
            .await;
        assert_eq!(got.iter().map(|e| e.id()).collect::<Vec<_>>(), ids);
        assert!(ids[0] >= next, "new ids {ids:?} below nextEventId {next}");
    })
    .await
}
