//! The items protocol over HTTP against the real binary: a request started with
//! `POST /api/flows/:kind/actions/:action`, streamed live and after the fact, and resumed at
//! every cut point with `?starting_after=N` (and `Last-Event-ID: {requestId}:{N}`) — a resumed
//! client gets exactly the frames it missed, so it ends with the same text as one that never
//! disconnected.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const STREAM_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts a request; returns (requestId, threadId, runId).
async fn start(server: &Server, body: Value) -> (String, String, String) {
    let r = server.post("/api/flows/chat/actions/send", &body).await;
    assert_eq!(r.status, 202, "{}", r.text);
    let request_id = r.json()["requestId"].as_str().unwrap().to_string();
    let (thread, run) = request_id.rsplit_once('~').expect("threadId~runId");
    (request_id.clone(), thread.to_string(), run.to_string())
}

/// The whole stream (it closes after the request's terminal event).
pub(crate) async fn read_stream(
    server: &Server,
    request_id: &str,
    query: &str,
    last_event_id: Option<&str>,
) -> String {
    let mut req = server.client.get(server.url(&format!(
        "/api/flows/chat/requests/{}/stream{query}",
        enc(request_id)
    )));
    if let Some(h) = last_event_id {
        req = req.header("last-event-id", h);
    }
    let resp = tokio::time::timeout(STREAM_TIMEOUT, req.send())
        .await
        .expect("headers in time")
        .expect("GET stream");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    tokio::time::timeout(STREAM_TIMEOUT, resp.text())
        .await
        .expect("the stream closes after the request's terminal event")
        .expect("body")
}

/// Text per item assembled from `content.delta`.
fn assembled(evs: &[SseEvent]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for e in evs {
        let v = e.json();
        if v["type"] == "content.delta" {
            out.entry(v["itemId"].as_str().unwrap().to_string())
                .or_default()
                .push_str(v["delta"]["text"].as_str().unwrap());
        }
    }
    out
}

fn seq_of(e: &SseEvent) -> u64 {
    e.json()["sequence_number"].as_u64().unwrap()
}

#[tokio::test]
async fn a_request_streams_live_and_resumes_exactly_at_every_cut_point() {
    let server = Server::start().await;
    let (request_id, thread, run) = start(
        &server,
        json!({"message": "Build me a weather to Slack workflow"}),
    )
    .await;
    // A client that never disconnects, reading while the run is live.
    let live = {
        let url = server.url(&format!(
            "/api/flows/chat/requests/{}/stream",
            enc(&request_id)
        ));
        let client = server.client.clone();
        tokio::spawn(async move {
            let resp = client.get(url).send().await.unwrap();
            tokio::time::timeout(STREAM_TIMEOUT, resp.text())
                .await
                .unwrap()
                .unwrap()
        })
    };
    server
        .follow_run(&thread, &run, |_| {
            Some(json!({"kind": "approval", "approved": true}))
        })
        .await;
    let live = live.await.unwrap();
    let full = read_stream(&server, &request_id, "", None).await;
    assert_eq!(
        live, full,
        "a live reader and a later reader see the same frames"
    );

    let evs = parse_sse(&full);
    assert_eq!(evs.last().unwrap().ty(), "request.completed");
    for (i, e) in evs.iter().enumerate() {
        let v = e.json();
        assert_eq!(v["stream"], "request");
        assert_eq!(v["requestId"], request_id.as_str());
        assert!(v["ts"].is_i64());
        assert_eq!(
            e.event.as_deref(),
            v["type"].as_str(),
            "event: line is the type"
        );
        assert_eq!(
            e.id_field.as_deref(),
            Some(format!("{request_id}:{}", seq_of(e)).as_str())
        );
        if i > 0 {
            assert!(seq_of(e) > seq_of(&evs[i - 1]));
        }
    }
    let types: Vec<String> = evs.iter().map(SseEvent::ty).collect();
    for t in [
        "item.added",
        "item.updated",
        "item.done",
        "content.added",
        "content.delta",
        "content.done",
    ] {
        assert!(types.iter().any(|x| x == t), "{t} missing");
    }
    let vals: Vec<Value> = evs.iter().map(SseEvent::json).collect();
    assert!(vals.iter().any(|v| v["item"]["type"] == "tool_output"));
    assert!(vals.iter().any(|v| v["item"]["type"] == "reasoning"));
    assert!(
        vals.iter().any(|v| v["item"]["agentName"].is_string()),
        "sub-agent items carry agentName"
    );
    assert!(
        !full.contains("block_trace"),
        "trace items only with ?unfiltered=1"
    );
    let unfiltered = read_stream(&server, &request_id, "?unfiltered=1", None).await;
    let traces: Vec<Value> = parse_sse(&unfiltered)
        .iter()
        .map(SseEvent::json)
        .filter(|v| v["type"] == "item.done" && v["item"]["type"] == "block_trace")
        .collect();
    assert!(traces.len() >= 2, "one per agent step: {traces:?}");
    assert!(traces
        .iter()
        .any(|t| t["item"]["modelUsage"]["totalTokens"].as_u64().unwrap_or(0) > 0));

    // Every cut point: the resumed stream is exactly the rest of the full one.
    let want = assembled(&evs);
    assert!(want.values().any(|t| !t.is_empty()));
    let mut cuts = vec![0];
    cuts.extend(evs.iter().map(seq_of));
    for n in cuts {
        let resumed =
            read_stream(&server, &request_id, &format!("?starting_after={n}"), None).await;
        let rest = parse_sse(&resumed);
        let expected: Vec<&SseEvent> = evs.iter().filter(|e| seq_of(e) > n).collect();
        assert_eq!(rest.len(), expected.len(), "cut {n}");
        for (a, b) in rest.iter().zip(&expected) {
            assert_eq!((&a.id_field, &a.data), (&b.id_field, &b.data), "cut {n}");
        }
        let mut seen: Vec<SseEvent> = evs.iter().filter(|e| seq_of(e) <= n).cloned().collect();
        seen.extend(rest);
        assert_eq!(assembled(&seen), want, "cut {n}: the text differs");
    }
    // Last-Event-ID {requestId}:{N} resumes the same way; starting_after wins over it.
    let n = seq_of(&evs[evs.len() / 2]);
    let by_header = read_stream(&server, &request_id, "", Some(&format!("{request_id}:{n}"))).await;
    assert_eq!(parse_sse(&by_header).first().map(seq_of), Some(n + 1));
    let both = read_stream(
        &server,
        &request_id,
        "?starting_after=1",
        Some(&format!("{request_id}:{n}")),
    )
    .await;
    assert_eq!(parse_sse(&both).first().map(seq_of), Some(2));
    // Another request's id in Last-Event-ID is ignored.
    let other = read_stream(&server, &request_id, "", Some("someone-else~run_x:5")).await;
    assert_eq!(other, full);
}

#[tokio::test]
async fn a_failing_request_ends_with_request_failed() {
    let server = Server::start().await;
    let (request_id, thread, run) = start(
        &server,
        json!({"input": {"message": "please crash"}, "sessionId": "items-crash"}),
    )
    .await;
    assert_eq!(thread, "items-crash", "sessionId names the thread");
    server.follow_run(&thread, &run, |_| None).await;
    let evs = parse_sse(&read_stream(&server, &request_id, "", None).await);
    let last = evs.last().unwrap().json();
    assert_eq!(last["type"], "request.failed");
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unavailable"),
        "{last}"
    );
}

#[tokio::test]
async fn bad_input_gets_a_clear_error() {
    let server = Server::start().await;
    let r = server
        .post("/api/flows/chat/actions/send", &json!({}))
        .await;
    assert_eq!(r.error(422, "no message").0, "missing_message");
    let r = server
        .post(
            "/api/flows/bad%20kind/actions/send",
            &json!({"message": "x"}),
        )
        .await;
    assert_eq!(r.error(400, "bad kind").0, "invalid_name");
    let r = server
        .get("/api/flows/chat/requests/nothing~run_1/stream")
        .await;
    r.error(404, "unknown request");
    let r = server
        .get("/api/flows/chat/requests/no-separator/stream")
        .await;
    r.error(404, "malformed request id");
    let (request_id, thread, run) = start(&server, json!({"message": "please crash"})).await;
    server.follow_run(&thread, &run, |_| None).await;
    let r = server
        .get(&format!(
            "/api/flows/chat/requests/{}/stream?starting_after=-1",
            enc(&request_id)
        ))
        .await;
    assert_eq!(r.error(400, "bad cursor").0, "invalid_cursor");
}
