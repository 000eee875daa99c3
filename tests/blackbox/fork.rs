//! `POST /instance-ai/threads/:threadId/fork`: a fork reads its source through up to the fork
//! point and goes on with runs of its own. The source stays byte-identical on every rendering;
//! the fork's messages, agent trees, status and its n8n, AG-UI, items and workflow-builder
//! streams are the source's up to the fork point followed by its own; `projections rebuild`
//! gives the same read models; `threadstream verify` finds the store clean. Bad fork requests
//! get a clear error and store nothing.

use crate::common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use serde_json::{json, Value};

const SOURCE: &str = "fk-source";
const FORK: &str = "fk-fork";

fn approve(_: &Value) -> Option<Value> {
    Some(json!({"kind": "approval", "approved": true}))
}

/// The raw body of an endless SSE stream at `path` (from the start), read until a frame with
/// id `through`.
async fn capture(s: &Server, path: &str, through: i64) -> String {
    let resp = s
        .client
        .get(s.url(path))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("GET stream");
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let mut parser = SseParser::new();
    loop {
        let chunk = tokio::time::timeout(Duration::from_secs(20), body.next())
            .await
            .unwrap_or_else(|_| panic!("{path}: no frame with id {through} in 20s:\n{text}"))
            .expect("stream ended")
            .expect("read");
        text.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        let done = parser.push(&chunk).into_iter().any(|item| match item {
            SseItem::Event(e) => e.id_field.as_deref() == Some(through.to_string().as_str()),
            SseItem::Comment(_) => false,
        });
        if done {
            return text;
        }
    }
}

/// The whole body of a stream that closes by itself (an items request).
async fn read_closing(s: &Server, path: &str) -> String {
    let resp = s.client.get(s.url(path)).send().await.expect("GET stream");
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    tokio::time::timeout(Duration::from_secs(60), resp.text())
        .await
        .expect("the stream closes after the request's terminal event")
        .expect("body")
}

/// The frames of `text` up to and including the last one whose id is at most `through`.
fn frames_through(text: &str, through: i64) -> Vec<SseEvent> {
    let events = parse_sse(text);
    let end = events
        .iter()
        .rposition(|e| {
            e.id_field
                .as_deref()
                .is_some_and(|i| i.parse::<i64>().unwrap() <= through)
        })
        .map_or(0, |i| i + 1);
    events[..end].to_vec()
}

fn data(frames: &[SseEvent]) -> Vec<(Option<String>, String)> {
    frames
        .iter()
        .map(|e| (e.id_field.clone(), e.data.clone()))
        .collect()
}

/// The last event id of a thread (what its messages cover).
async fn last_event_id(s: &Server, thread: &str) -> i64 {
    s.messages(thread).await["nextEventId"].as_i64().unwrap() - 1
}

/// Every rendering and read model of the source that must not change.
async fn source_views(s: &Server, last: i64) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let n8n = format!("/instance-ai/events/{SOURCE}");
    out.push((n8n.clone(), capture(s, &n8n, last).await));
    let agui = format!("/api/v1/agent/runs/{SOURCE}/events");
    out.push((agui.clone(), capture(s, &agui, last).await));
    for view in ["messages", "status", "export"] {
        let path = format!("/instance-ai/threads/{SOURCE}/{view}");
        out.push((path.clone(), s.get(&path).await.text));
    }
    out
}

/// The read models the API serves for both threads.
async fn read_models(s: &Server) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let list = s.threads().await;
    out.push(("threads".into(), list));
    for t in [SOURCE, FORK] {
        for view in ["messages", "status"] {
            let path = format!("/instance-ai/threads/{t}/{view}");
            out.push((path.clone(), s.get(&path).await.json()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_reads_its_source_through_and_runs_on_its_own() {
    bounded(300, async {
        let mut s = Server::start().await;
        // The source: two finished demo runs (with a confirmation approved).
        for message in ["Build me a weather to Slack workflow", "thanks, once more"] {
            let run = s.chat(SOURCE, message).await;
            let events = s.follow_run(SOURCE, &run, approve).await;
            assert_eq!(
                events.last().unwrap().json()["payload"]["status"],
                "completed"
            );
        }
        let source_messages = s.messages(SOURCE).await;
        let messages = source_messages["messages"].as_array().unwrap().clone();
        assert_eq!(messages.len(), 4, "{source_messages}");
        let second_message = messages[2]["id"].as_str().unwrap().to_string();
        let source_last = last_event_id(&s, SOURCE).await;
        let before = source_views(&s, source_last).await;

        // Edit and resend the second message: fork just before it.
        let created = s
            .post(
                &format!("/instance-ai/threads/{SOURCE}/fork"),
                &json!({"beforeMessageId": second_message, "threadId": FORK}),
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.text);
        let created = created.json();
        assert_eq!(created["id"], FORK);
        assert_eq!(created["owner"], "local", "{created}");
        assert_eq!(created["forkOf"]["threadId"], SOURCE);
        let through = created["forkOf"]["throughEventId"].as_i64().unwrap();
        let source_list = s.threads().await;
        let source_summary = source_list["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == SOURCE)
            .unwrap()
            .clone();
        assert_eq!(
            created["title"], source_summary["title"],
            "the source's title"
        );
        // The fork point is the last event before the second user message.
        let export = s
            .get(&format!("/instance-ai/threads/{SOURCE}/export"))
            .await
            .text;
        let rows: Vec<Value> = export
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let user_message = rows
            .iter()
            .position(|r| {
                r["type"] == "user-message" && r["payload"]["messageId"] == second_message
            })
            .unwrap();
        assert_eq!(rows[user_message - 1]["id"], through);
        // Up to here, the fork's messages are the source's first two.
        let fork_messages = s.messages(FORK).await;
        assert_eq!(fork_messages["messages"], json!(messages[..2]));

        // A new message on the fork starts a new run there.
        let run = s.chat(FORK, "Build me a weather to Discord workflow").await;
        let fork_events = s.follow_run(FORK, &run, approve).await;
        assert_eq!(
            fork_events.last().unwrap().json()["payload"]["status"],
            "completed"
        );
        let fork_last = last_event_id(&s, FORK).await;

        // The source is unchanged, byte for byte, on every rendering.
        let after = source_views(&s, source_last).await;
        for ((path, a), (_, b)) in before.iter().zip(&after) {
            assert_eq!(a, b, "{path} changed");
        }
        // Its log stream holds none of the fork's events, and the fork none of the source's.
        assert!(!after[4].1.contains(&run), "the source's export");
        let fork_export = s
            .get(&format!("/instance-ai/threads/{FORK}/export"))
            .await
            .text;
        let fork_rows: Vec<Value> = fork_export
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let prefix: Vec<&Value> = rows
            .iter()
            .filter(|r| r["id"].as_i64() <= Some(through))
            .collect();
        assert_eq!(
            fork_rows
                .iter()
                .take(prefix.len())
                .map(|r| (&r["id"], &r["seq"], &r["type"]))
                .collect::<Vec<_>>(),
            prefix
                .iter()
                .map(|r| (&r["id"], &r["seq"], &r["type"]))
                .collect::<Vec<_>>(),
            "the fork's export is its prefix (read through) …"
        );
        assert!(fork_rows.iter().all(|r| r["thread"] == FORK));
        let own = &fork_rows[prefix.len()..];
        assert_eq!(own[0]["type"], "thread-created");
        assert_eq!(own[0]["payload"]["forkOf"]["throughEventId"], through);
        assert!(
            own.iter().all(|r| r["id"].as_i64().unwrap() > source_last),
            "the fork's own events come after everything the source had then"
        );
        for (i, r) in fork_rows.iter().enumerate() {
            assert_eq!(r["seq"], i as i64 + 1, "… then its own, numbered on: {r}");
        }

        // Messages and agent trees: the source's first exchange, then the new one.
        let fork_messages = s.messages(FORK).await;
        let got = fork_messages["messages"].as_array().unwrap();
        assert_eq!(got.len(), 4, "{fork_messages}");
        assert_eq!(json!(got[..2]), json!(messages[..2]));
        assert_eq!(got[2]["role"], "user");
        assert_eq!(got[2]["content"], "Build me a weather to Discord workflow");
        assert_eq!(got[3]["runId"], run.as_str());
        assert_eq!(got[3]["agentTree"]["status"], "completed", "{}", got[3]);
        assert!(!got[3]["agentTree"]["children"]
            .as_array()
            .unwrap()
            .is_empty());
        assert_eq!(fork_messages["nextEventId"], fork_last + 1);
        let status = s.status(FORK).await;
        assert_eq!(status["hasActiveRun"], false, "{status}");
        assert_eq!(status["isSuspended"], false, "{status}");
        assert_eq!(status["backgroundTasks"], json!([]), "{status}");

        // n8n: the source's frames through the fork point, byte for byte, then the new run's.
        let fork_n8n = capture(&s, &format!("/instance-ai/events/{FORK}"), fork_last).await;
        let source_n8n = &before[0].1;
        let prefix_frames = frames_through(source_n8n, through);
        let fork_frames = parse_sse(&fork_n8n);
        assert_eq!(
            data(&fork_frames[..prefix_frames.len()]),
            data(&prefix_frames),
            "n8n prefix"
        );
        let tail: Vec<Value> = fork_frames[prefix_frames.len()..]
            .iter()
            .map(SseEvent::json)
            .collect();
        assert_eq!(tail[0]["type"], "run-start", "{:?}", tail[0]);
        assert!(
            tail.iter().all(|e| e["runId"] == run.as_str()),
            "only the new run follows"
        );
        assert_eq!(tail.last().unwrap()["type"], "run-finish");
        let own_ids: Vec<String> = fork_frames[prefix_frames.len()..]
            .iter()
            .map(|e| e.id_field.clone().unwrap())
            .collect();
        assert!(own_ids.iter().all(|i| i.parse::<i64>().unwrap() > through));
        assert_strictly_increasing(&fork_frames, "fork n8n");
        // Resumed with Last-Event-ID at the fork point and inside the prefix.
        let resumed = s
            .read_idle(FORK, Cursor::header_id(through), Duration::from_millis(500))
            .await;
        assert_eq!(
            id_data(&resumed),
            id_data(&fork_frames[prefix_frames.len()..])
        );
        let inside = prefix_frames[prefix_frames.len() / 2].id();
        let resumed = s
            .read_idle(FORK, Cursor::header_id(inside), Duration::from_millis(500))
            .await;
        let want: Vec<SseEvent> = fork_frames
            .iter()
            .filter(|e| e.id() > inside)
            .cloned()
            .collect();
        assert_eq!(id_data(&resumed), id_data(&want));

        // AG-UI: the source's stream through the fork point (its thread id the fork's), then
        // the new run.
        let fork_agui = capture(&s, &format!("/api/v1/agent/runs/{FORK}/events"), fork_last).await;
        let source_agui = &before[1].1;
        let agui_prefix: Vec<(Option<String>, String)> =
            data(&frames_through(source_agui, through))
                .into_iter()
                .map(|(id, d)| {
                    (
                        id,
                        d.replace(
                            &format!("\"threadId\":\"{SOURCE}\""),
                            &format!("\"threadId\":\"{FORK}\""),
                        ),
                    )
                })
                .collect();
        let agui_frames = data(&parse_sse(&fork_agui));
        assert!(agui_prefix.len() > 10);
        assert_eq!(
            agui_frames[..agui_prefix.len()],
            agui_prefix[..],
            "AG-UI prefix"
        );
        let agui_tail: Vec<Value> = agui_frames[agui_prefix.len()..]
            .iter()
            .map(|(_, d)| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(agui_tail[0]["type"], "RUN_STARTED");
        assert_eq!(agui_tail[0]["runId"], run.as_str());
        assert_eq!(agui_tail.last().unwrap()["type"], "RUN_FINISHED");

        // Items: a request of the prefix reads the same on the fork; the new run is its own.
        let first_run = messages[1]["runId"].as_str().unwrap();
        let on_source = read_closing(
            &s,
            &format!(
                "/api/flows/chat/requests/{}/stream",
                enc(&format!("{SOURCE}~{first_run}"))
            ),
        )
        .await;
        let on_fork = read_closing(
            &s,
            &format!(
                "/api/flows/chat/requests/{}/stream",
                enc(&format!("{FORK}~{first_run}"))
            ),
        )
        .await;
        assert_eq!(
            on_fork,
            on_source.replace(&format!("{SOURCE}~"), &format!("{FORK}~"))
        );
        let second_run = messages[3]["runId"].as_str().unwrap();
        let missing = s
            .get(&format!(
                "/api/flows/chat/requests/{}/stream",
                enc(&format!("{FORK}~{second_run}"))
            ))
            .await;
        assert_eq!(
            missing.status, 404,
            "the source's later run is not the fork's: {}",
            missing.text
        );
        let new_request = read_closing(
            &s,
            &format!(
                "/api/flows/chat/requests/{}/stream",
                enc(&format!("{FORK}~{run}"))
            ),
        )
        .await;
        assert!(new_request.contains("request.completed"), "{new_request}");
        assert!(
            new_request.contains("Discord") || new_request.contains("item.done"),
            "{new_request}"
        );

        // The list shows the fork as the caller's, with what it reads through.
        let list = s.threads().await;
        let fork_summary = list["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == FORK)
            .unwrap()
            .clone();
        assert_eq!(
            fork_summary["forkOf"],
            json!({"threadId": SOURCE, "throughEventId": through})
        );
        assert_eq!(fork_summary["lastEventId"], fork_last);

        // Deleting the source later takes nothing from the fork: it read through up to before.
        let fork_messages = s.messages(FORK).await;
        s.delete(&format!("/instance-ai/threads/{SOURCE}"))
            .await
            .ok_json("delete the source");
        assert_eq!(s.messages(FORK).await, fork_messages);
        let again = capture(&s, &format!("/instance-ai/events/{FORK}"), fork_last).await;
        assert_eq!(again, fork_n8n);

        // A rebuild of every read model gives the same answers; verify finds the store clean.
        let live = read_models(&s).await;
        s.stop().await;
        s.rebuild_projections().await;
        let (ok, report, _) = cli_on(&s, &["verify"]).await.parts();
        assert!(ok && report.contains("result: clean"), "{report}");
        // Export → import into a fresh store keeps the fork a fork (its rules checked on its
        // prefix); the fork's own export is a thread of its own that imports on its own.
        let dump = s.data_dir().join("dump.ndjson").display().to_string();
        let (ok, out, err) = cli_on(&s, &["export", "--output", &dump]).await.parts();
        assert!(ok, "{out}\n{err}");
        for (input, what) in [
            (dump.clone(), "whole log"),
            (String::new(), "the fork alone"),
        ] {
            let target = tempfile::tempdir().unwrap();
            let input = if input.is_empty() {
                let path = target.path().join("fork.ndjson");
                std::fs::write(&path, &fork_export).unwrap();
                path.display().to_string()
            } else {
                input
            };
            let dir = target.path().join("data").display().to_string();
            for args in [
                vec!["import", "--data-dir", &dir, "--input", &input],
                vec!["verify", "--data-dir", &dir],
            ] {
                let out = tokio::process::Command::new(BIN)
                    .args(&args)
                    .env_remove("DATABASE_URL")
                    .env_remove("THREADSTREAM_DATABASE_URL")
                    .output()
                    .await
                    .unwrap();
                let text = String::from_utf8_lossy(&out.stdout).to_string()
                    + &String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success(), "{what}: {args:?}: {text}");
            }
        }
        s.restart().await;
        let rebuilt = read_models(&s).await;
        for ((path, a), (_, b)) in live.iter().zip(&rebuilt) {
            assert_eq!(a, b, "{path} after projections rebuild");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_workflow_conversation_goes_on_over_the_workflow_builder_stream() {
    bounded(180, async {
        let s = Server::start().await;
        let first = converse(&s, "Add an email step").await;
        assert_eq!(first.last().unwrap()["type"], "stream_end");
        let source = "smith-wf-sample-1-0";
        let through = last_event_id(&s, source).await;
        // The fork takes the next generation's id, and the cleared source leaves it current.
        let created = s
            .post(
                &format!("/instance-ai/threads/{source}/fork"),
                &json!({"throughEventId": through, "threadId": "smith-wf-sample-1-1"}),
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.text);
        // Read before the clear: a deleted thread's messages are a 404 to its readers.
        let source_messages = s.messages(source).await["messages"].clone();
        s.delete("/smith/wf-sample-1").await.ok_json("clear");
        s.get(&format!("/instance-ai/threads/{source}/messages"))
            .await
            .error(404, "the cleared source's messages");
        let frames = converse(&s, "Add an email step").await;
        assert_eq!(frames[0]["type"], "stream_start", "{frames:?}");
        assert_eq!(frames.last().unwrap()["type"], "stream_end", "{frames:?}");
        assert!(frames.iter().any(|f| f["type"] == "workflow_state"));
        let fork_messages = s.messages("smith-wf-sample-1-1").await["messages"].clone();
        assert_eq!(fork_messages.as_array().unwrap().len(), 4);
        assert_eq!(
            json!(fork_messages.as_array().unwrap()[..2]),
            source_messages
        );
    })
    .await;
}

/// A turn of `wf-sample-1`'s conversation over the workflow-builder stream, approving any
/// confirmation; every frame's JSON.
async fn converse(s: &Server, prompt: &str) -> Vec<Value> {
    let resp = s
        .client
        .post(s.url("/smith/wf-sample-1"))
        .json(&json!({"prompt": prompt}))
        .send()
        .await
        .expect("POST smith");
    assert_eq!(resp.status().as_u16(), 200);
    let text = tokio::time::timeout(Duration::from_secs(60), resp.text())
        .await
        .expect("the stream ends with its run")
        .expect("body");
    parse_sse(&text).iter().map(SseEvent::json).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_forks_get_a_clear_error_and_store_nothing() {
    bounded(180, async {
        let s = Server::start().await;
        let run = s
            .chat("fk-bad", "Build me a weather to Slack workflow")
            .await;
        let events = s.follow_run("fk-bad", &run, approve).await;
        let inside = events[events.len() / 2].id();
        let last = last_event_id(&s, "fk-bad").await;
        let other = s.chat("fk-other", "hello").await;
        let other_events = s.follow_run("fk-other", &other, approve).await;
        let count = s.count_events().await;
        let fork = |body: Value| {
            let s = &s;
            async move { s.post("/instance-ai/threads/fk-bad/fork", &body).await }
        };
        for (body, status, code) in [
            (
                json!({"throughEventId": inside}),
                409,
                "fork_point_inside_run",
            ),
            (
                json!({"throughEventId": other_events[0].id()}),
                409,
                "fork_point_not_found",
            ),
            (
                json!({"throughEventId": last + 1_000_000}),
                409,
                "fork_point_not_found",
            ),
            (
                json!({"throughEventId": last, "threadId": "fk-other"}),
                409,
                "thread_exists",
            ),
            (
                json!({"throughEventId": last, "threadId": "workflow:x"}),
                400,
                "invalid_thread_id",
            ),
            (
                json!({"throughEventId": last, "beforeMessageId": "m"}),
                422,
                "invalid_fork_point",
            ),
            (json!({}), 422, "invalid_fork_point"),
            (
                json!({"beforeMessageId": "no-such-message"}),
                409,
                "fork_point_not_found",
            ),
            (json!({"throughEventId": "1"}), 422, "invalid_body"),
            (
                json!({"throughEventId": last, "title": ""}),
                422,
                "invalid_title",
            ),
        ] {
            let r = fork(body.clone()).await;
            let (got_code, message) = r.error(status, &format!("fork {body}"));
            if !code.is_empty() {
                assert_eq!(got_code, code, "{body}: {message}");
            }
            assert!(!message.is_empty());
        }
        let r = s
            .post(
                "/instance-ai/threads/fk-nobody/fork",
                &json!({"throughEventId": last}),
            )
            .await;
        r.error(404, "fork of an unknown thread");
        let r = s
            .post_raw(
                "/instance-ai/threads/fk-bad/fork",
                "application/json",
                b"{".to_vec(),
            )
            .await;
        r.error(400, "bad JSON");
        assert_eq!(
            s.count_events().await,
            count,
            "nothing of a refused fork is stored"
        );
        // A deleted source cannot be forked.
        s.delete("/instance-ai/threads/fk-other")
            .await
            .ok_json("delete");
        let r = s
            .post(
                "/instance-ai/threads/fk-other/fork",
                &json!({"throughEventId": other_events[0].id()}),
            )
            .await;
        r.error(404, "fork of a deleted thread");
    })
    .await;
}
