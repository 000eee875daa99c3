//! Threads read and written as Durable Streams (`/v1/threads/:threadId`), with the real
//! `@durable-streams/client`: `stream()` follows a live demo run, reads resumed from any offset
//! end equal to the uninterrupted one, offsets are the n8n SSE ids, and an `IdempotentProducer`
//! appending events through a proxy that loses answers stores each exactly once.

use crate::common;
use crate::durable_streams::{ds_dir, put, read_all_json, require_install, DroppingProxy};

use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// `node follow.mjs <url> <offset> <live> [stop-type stop-run]`: the batches `stream()` gave.
async fn follow(url: &str, offset: &str, live: &str, stop: Option<(&str, &str)>) -> Vec<Value> {
    let mut cmd = tokio::process::Command::new("node");
    cmd.current_dir(ds_dir())
        .arg("follow.mjs")
        .args([url, offset, live]);
    if let Some((ty, run)) = stop {
        cmd.args([ty, run]);
    }
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("follow.mjs within 90 s")
    .expect("run node follow.mjs");
    assert!(
        out.status.success(),
        "follow.mjs {url} {offset} {live}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("follow.mjs prints JSON");
    v["batches"].as_array().unwrap().clone()
}

fn offset_id(offset: &str) -> i64 {
    offset.split('_').next().unwrap().parse().unwrap()
}

fn items_of(batches: &[Value]) -> Vec<Value> {
    batches
        .iter()
        .flat_map(|b| b["items"].as_array().unwrap().clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_client_follows_a_live_run_and_every_resumed_read_ends_the_same() {
    require_install();
    bounded(180, async {
        let server = Server::start_with(Opts {
            demo_delay_ms: 10,
            ..Opts::default()
        })
        .await;
        let t = "t-ds-follow";
        let approve = |_: &Value| Some(json!({"kind": "approval", "approved": true}));
        let first = server.chat(t, "a first question").await;
        server.follow_run(t, &first, approve).await;
        let url = server.url(&format!("/v1/threads/{t}"));
        let run = server.chat(t, "and a second one, live").await;
        // Two live followers from the start, one per live mode, while the run streams (and its
        // confirmation is answered).
        let (sse, long_poll, _) = tokio::join!(
            follow(&url, "-1", "sse", Some(("run-finish", &run))),
            follow(&url, "-1", "long-poll", Some(("run-finish", &run))),
            server.follow_run(t, &run, approve),
        );
        let last = sse
            .iter()
            .map(|b| offset_id(b["offset"].as_str().unwrap()))
            .max()
            .unwrap();
        // The same events as the n8n stream, in the same order, each once.
        let n8n = server.read_until_id(t, last).await;
        let n8n_data: Vec<Value> = n8n
            .iter()
            .filter(|e| !e.data.is_empty())
            .map(|e| serde_json::from_str(&e.data).unwrap())
            .collect();
        let n8n_ids: Vec<i64> = n8n
            .iter()
            .filter(|e| !e.data.is_empty())
            .map(|e| e.id())
            .collect();
        for (mode, batches) in [("sse", &sse), ("long-poll", &long_poll)] {
            let items = items_of(batches);
            assert!(
                items
                    .iter()
                    .any(|e| e["type"] == "run-finish" && e["runId"] == run.as_str()),
                "{mode}: the live run's end arrived"
            );
            assert_eq!(
                items,
                n8n_data[..items.len()].to_vec(),
                "{mode}: the thread's events as the n8n stream sends them"
            );
            // Offsets are n8n SSE ids: everything up to a batch's offset is what the n8n stream
            // sent up to that id.
            let mut seen = 0;
            for b in batches.iter() {
                seen += b["items"].as_array().unwrap().len();
                let id = offset_id(b["offset"].as_str().unwrap());
                let upto = n8n_ids.iter().filter(|i| **i <= id).count();
                assert_eq!(
                    upto, seen,
                    "{mode}: offset {id} is after exactly the items so far"
                );
            }
        }
        // A catch-up read resumed at any batch's offset ends as the uninterrupted one.
        let whole = items_of(&follow(&url, "-1", "false", None).await);
        assert_eq!(whole, n8n_data, "a catch-up read of the whole thread");
        // Every batch boundary would be a node process each: a dozen spread over the run, the
        // first and the last included.
        let step = (sse.len() / 12).max(1);
        let mut seen = 0;
        for (i, b) in sse.iter().enumerate() {
            seen += b["items"].as_array().unwrap().len();
            if i % step != 0 && i + 1 != sse.len() {
                continue;
            }
            let resumed =
                items_of(&follow(&url, b["offset"].as_str().unwrap(), "false", None).await);
            assert_eq!(
                resumed,
                whole[seen..].to_vec(),
                "resumed at {} (after {seen} items)",
                b["offset"]
            );
        }
        // The n8n stream resumed at a Durable Streams offset's id starts right after it.
        let mid = &sse[sse.len() / 2];
        let mid_id = offset_id(mid["offset"].as_str().unwrap());
        let after = server
            .read_idle(
                t,
                Cursor::Header(mid_id.to_string()),
                Duration::from_millis(800),
            )
            .await;
        let first_after = n8n_ids.iter().position(|i| *i > mid_id).unwrap();
        assert_eq!(
            after.iter().filter(|e| !e.data.is_empty()).count(),
            n8n_ids.len() - first_after,
            "the n8n stream from Last-Event-ID {mid_id}"
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_appends_a_run_to_a_thread_exactly_once_and_a_refused_event_stores_nothing() {
    require_install();
    bounded(120, async {
        let server = Server::start().await;
        let path = "/v1/threads/t-ds-produce";
        let r = put(&server, path, "application/json", "").await;
        assert_eq!(r.status(), 201, "PUT creates the thread");
        let r = put(&server, path, "application/json", "").await;
        assert_eq!(r.status(), 200, "a second PUT finds it");
        let head = |s: &Server| {
            let req = s.client.head(s.url(path));
            async move {
                req.send().await.unwrap().headers()["stream-next-offset"]
                    .to_str()
                    .unwrap()
                    .to_string()
            }
        };
        let before = head(&server).await;
        // A run-finish for a run that never started: refused by the Thread aggregate.
        let r = server
            .client
            .post(server.url(path))
            .header("content-type", "application/json")
            .body(
                json!([
                    text_delta("ghost", "a", "x"),
                    run_finish("ghost", "a", "completed")
                ])
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409);
        let body: Value = r.json().await.unwrap();
        assert!(
            body["error"]["code"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
                && body["error"]["message"].as_str().is_some(),
            "{body}"
        );
        assert_eq!(
            head(&server).await,
            before,
            "nothing of the refused request stored"
        );

        let proxy = DroppingProxy::start(server.base.trim_start_matches("http://"), 5).await;
        let n = 400;
        let out = tokio::process::Command::new("node")
            .current_dir(ds_dir())
            .arg("produce.mjs")
            .arg(format!("http://{}{path}", proxy.addr))
            .arg(n.to_string())
            .arg("run")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "produce.mjs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(result["acknowledged"], n, "{result}");
        assert!(
            proxy.dropped.load(Ordering::Relaxed) > 0,
            "no answer was lost"
        );
        let items = read_all_json(&server, path).await;
        let types: Vec<&str> = items.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types.first(), Some(&"run-start"));
        assert_eq!(types.last(), Some(&"run-finish"));
        let texts: Vec<String> = items
            .iter()
            .filter(|e| e["type"] == "text-delta")
            .map(|e| e["payload"]["text"].as_str().unwrap().to_string())
            .collect();
        let expected: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        assert_eq!(texts, expected, "every event exactly once, in order");
        assert_eq!(items.len() as u64, n + 2);
        // The run is in the thread's read models like an ingested one.
        let messages = server.messages("t-ds-produce").await;
        assert!(messages.to_string().contains("399"), "{messages}");
    })
    .await
}
