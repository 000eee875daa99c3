//! AG-UI over HTTP: `POST /api/v1/agent/runs` and
//! `GET /api/v1/agent/runs/{thread_id}/events` against the real binary. Every captured stream
//! (fresh, with sub-agents, several runs with an error in the middle, resumed at every cut
//! point) goes through `@ag-ui/core` `EventSchemas`, `@ag-ui/client` `verifyEvents` and PyPI
//! `ag-ui-validate`, and through our own OpenAPI document's `AgUiEvent` (issue #22); one run
//! is driven end to end by `@ag-ui/client`'s `HttpAgent`, and a set of events and their
//! mutations shows where our document and `@ag-ui/core` agree and where ours is stricter.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use serde_json::{json, Value};

fn approve() -> Value {
    json!({"kind": "approval", "approved": true})
}

fn agui_dir() -> std::path::PathBuf {
    conformance_dir().join("ag-ui")
}

const INSTALL_HINT: &str = "run `bash tests/conformance/install.sh` first";

/// Starts a run with the simple `{threadId, message}` body; returns its run id.
async fn start_run(server: &Server, thread: &str, message: &str) -> String {
    let v = server
        .post(
            "/api/v1/agent/runs",
            &json!({"threadId": thread, "message": message}),
        )
        .await
        .ok_json("POST /api/v1/agent/runs");
    assert_eq!(v["threadId"], thread);
    v["runId"].as_str().expect("runId").to_string()
}

/// Runs `message` to its end on `thread`, approving every confirmation.
async fn run_to_end(server: &Server, thread: &str, message: &str) -> String {
    let run = start_run(server, thread, message).await;
    server.follow_run(thread, &run, |_| Some(approve())).await;
    run
}

/// The raw AG-UI stream of `thread` from `last_event_id` (none: from the start), read until a
/// frame with id `through`; returns the body text.
pub(crate) async fn capture(
    server: &Server,
    thread: &str,
    last_event_id: Option<i64>,
    through: i64,
) -> String {
    let mut req = server
        .client
        .get(server.url(&format!("/api/v1/agent/runs/{}/events", enc(thread))))
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id.to_string());
    }
    let resp = req.send().await.expect("GET events");
    assert_eq!(resp.status().as_u16(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let mut parser = SseParser::new();
    loop {
        let chunk = tokio::time::timeout(Duration::from_secs(20), body.next())
            .await
            .unwrap_or_else(|_| panic!("no frame with id {through} within 20s; got:\n{text}"))
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

fn types(events: &[SseEvent]) -> Vec<String> {
    events.iter().map(|e| e.ty()).collect()
}

/// The highest `id:` of a stream: where a complete capture ends.
fn last_id(text: &str) -> i64 {
    parse_sse(text)
        .iter()
        .filter_map(|e| e.id_field.as_deref().map(|i| i.parse::<i64>().unwrap()))
        .max()
        .expect("a frame with an id")
}

/// `check.mjs` on the streams (one node process): its JSON report and exit status.
async fn ag_ui_core_report(streams: &[(String, String)]) -> (Value, std::process::ExitStatus) {
    use tokio::io::AsyncWriteExt;
    let dir = agui_dir();
    assert!(
        dir.join("node_modules/@ag-ui/client").is_dir(),
        "@ag-ui/client is missing: {INSTALL_HINT}"
    );
    let input = json!({"streams": streams.iter().map(|(n, s)| json!({"name": n, "sse": s})).collect::<Vec<_>>()});
    let mut child = tokio::process::Command::new("node")
        .arg(dir.join("check.mjs"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run node");
    let mut stdin = child.stdin.take().unwrap();
    let text = input.to_string();
    let writer = tokio::spawn(async move {
        stdin.write_all(text.as_bytes()).await.unwrap();
        stdin.shutdown().await.unwrap();
    });
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("check.mjs within 120s")
        .unwrap();
    writer.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "check.mjs output is not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(report["results"].as_array().unwrap().len(), streams.len());
    (report, out.status)
}

/// Every stream through `EventSchemas` + `verifyEvents` (one node process), through our
/// document's `AgUiEvent`, and each through `ag-ui-validate` (with `validate_every`-th stream,
/// the first and the last, to bound the time).
pub(crate) async fn check_streams(streams: &[(String, String)], validate_every: usize) {
    let dir = agui_dir();
    let (report, status) = ag_ui_core_report(streams).await;
    for (r, (name, sse)) in report["results"].as_array().unwrap().iter().zip(streams) {
        assert!(r["events"].as_u64().unwrap() > 0, "{name}: no events");
        assert!(
            r["schemaFailures"].as_array().unwrap().is_empty() && r["verifyError"].is_null(),
            "{name} fails @ag-ui: {r}\n--- stream ---\n{sse}"
        );
    }
    assert!(status.success(), "check.mjs exit {status:?}");

    // What @ag-ui/core accepts, our document's event schema accepts too.
    let data: Vec<String> = streams
        .iter()
        .flat_map(|(_, sse)| parse_sse(sse).into_iter().map(|e| e.data))
        .collect();
    crate::openapi::validate_against_document(&data, "AgUiEvent").await;

    let validator = dir.join(".venv/bin/ag-ui-validate");
    assert!(
        validator.is_file(),
        "ag-ui-validate is missing: {INSTALL_HINT}"
    );
    let tmp = tempfile::tempdir().unwrap();
    for (i, (name, sse)) in streams.iter().enumerate() {
        if !(i == 0 || i + 1 == streams.len() || i % validate_every.max(1) == 0) {
            continue;
        }
        let file = tmp.path().join(format!("{i}.sse"));
        std::fs::write(&file, sse).unwrap();
        let out = tokio::process::Command::new(&validator)
            .arg("--json")
            .arg("--no-color")
            .arg(&file)
            .output()
            .await
            .expect("run ag-ui-validate");
        assert!(
            out.status.success(),
            "{name} fails ag-ui-validate (exit {:?}):\n{}\n{}\n--- stream ---\n{sse}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The final text of every message a client ends up with: `MESSAGES_SNAPSHOT` content, then
/// `TEXT_MESSAGE_CONTENT` deltas appended by message id.
pub(crate) fn texts(events: &[SseEvent]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for e in events {
        let v = e.json();
        match v["type"].as_str().unwrap() {
            "MESSAGES_SNAPSHOT" => {
                for m in v["messages"].as_array().unwrap() {
                    if let (Some(id), Some(c)) = (m["id"].as_str(), m["content"].as_str()) {
                        if m["role"] == "assistant" || m["role"] == "user" {
                            out.insert(id.to_string(), c.to_string());
                        }
                    }
                }
            }
            "TEXT_MESSAGE_CONTENT" => out
                .entry(v["messageId"].as_str().unwrap().to_string())
                .or_default()
                .push_str(v["delta"].as_str().unwrap()),
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn a_fresh_stream_with_sub_agents_passes_every_checker() {
    let server = Server::start().await;
    let run = run_to_end(&server, "ag-fresh", "Build me a weather to Slack workflow").await;
    let n8n_last = server
        .read_idle("ag-fresh", Cursor::None, Duration::from_millis(300))
        .await;
    let through = n8n_last.last().unwrap().id();
    let sse = capture(&server, "ag-fresh", None, through).await;
    assert!(!sse.contains('\r'), "frames must use LF only");
    assert!(
        !sse.contains(":null"),
        "optional fields are omitted, never null"
    );
    let events = parse_sse(&sse);
    let t = types(&events);
    assert_eq!(t.first().map(String::as_str), Some("RUN_STARTED"));
    assert_eq!(t.last().map(String::as_str), Some("RUN_FINISHED"));
    for needed in [
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
        "REASONING_MESSAGE_CONTENT",
        "TOOL_CALL_START",
        "TOOL_CALL_RESULT",
        "STEP_STARTED",
        "STEP_FINISHED",
        "SUBAGENT_STARTED",
        "SUBAGENT_FINISHED",
        "STATE_SNAPSHOT",
        "CUSTOM",
    ] {
        assert!(t.iter().any(|x| x == needed), "{needed} missing: {t:?}");
    }
    for e in &events {
        let v = e.json();
        assert_eq!(v["threadId"], "ag-fresh");
        assert!(v["timestamp"].is_i64(), "integer timestamp: {v}");
        match v["type"].as_str().unwrap() {
            "RUN_STARTED" | "RUN_FINISHED" => assert_eq!(v["runId"], run.as_str()),
            "TEXT_MESSAGE_END" => {
                assert!(v["workerAgentOutput"]["status"].is_string(), "{v}");
                assert!(v["workerAgentOutput"]["answer"].is_string(), "{v}");
            }
            "TOOL_CALL_RESULT" => {
                assert_eq!(v["toolAgentOutput"]["tool_call_id"], v["toolCallId"]);
                assert!(v["toolAgentOutput"]["status"].is_string(), "{v}");
            }
            _ => {}
        }
    }
    // The sub-agent's work is attributed to it.
    let sub = events
        .iter()
        .map(SseEvent::json)
        .find(|v| v["type"] == "SUBAGENT_STARTED")
        .unwrap();
    let sub_id = sub["subagentRunId"].as_str().unwrap();
    assert!(events
        .iter()
        .map(SseEvent::json)
        .any(|v| v["type"] == "TOOL_CALL_START" && v["subagentRunId"] == sub_id));
    // The confirmation request has no AG-UI form: a namespaced CUSTOM event.
    assert!(events
        .iter()
        .map(SseEvent::json)
        .any(|v| v["type"] == "CUSTOM"
            && v["name"] == "threadstream.confirmation-request"
            && v["value"]["requestId"].is_string()));
    check_streams(&[("fresh".into(), sse)], 1).await;
}

#[tokio::test]
async fn several_runs_with_an_error_between_pass_every_checker() {
    let server = Server::start().await;
    run_to_end(&server, "ag-many", "Build me a weather to Slack workflow").await;
    let crash = run_to_end(&server, "ag-many", "please crash now").await;
    run_to_end(&server, "ag-many", "Build another workflow").await;
    let n8n = server
        .read_idle("ag-many", Cursor::None, Duration::from_millis(300))
        .await;
    let sse = capture(&server, "ag-many", None, n8n.last().unwrap().id()).await;
    let events = parse_sse(&sse);
    let t = types(&events);
    assert_eq!(t.iter().filter(|x| *x == "RUN_STARTED").count(), 3, "{t:?}");
    let error = events
        .iter()
        .map(SseEvent::json)
        .find(|v| v["type"] == "RUN_ERROR")
        .expect("the crashing run ends with RUN_ERROR");
    assert_eq!(error["runId"], crash.as_str());
    assert!(
        error["message"].as_str().unwrap().contains("unavailable"),
        "{error}"
    );
    assert_eq!(t.last().map(String::as_str), Some("RUN_FINISHED"));
    check_streams(&[("three runs".into(), sse)], 1).await;
}

#[tokio::test]
async fn a_stream_resumed_at_every_cut_point_passes_and_ends_with_the_same_text() {
    let server = Server::start().await;
    run_to_end(&server, "ag-cut", "Build me a weather to Slack workflow").await;
    let n8n = server
        .read_idle("ag-cut", Cursor::None, Duration::from_millis(300))
        .await;
    let full = capture(&server, "ag-cut", None, n8n.last().unwrap().id()).await;
    let through = last_id(&full);
    let want = texts(&parse_sse(&full));
    assert!(want.values().any(|t| !t.is_empty()));
    let cuts: Vec<i64> = parse_sse(&full)
        .iter()
        .filter_map(|e| e.id_field.as_deref().map(|i| i.parse().unwrap()))
        .filter(|id| *id < through)
        .collect();
    assert!(
        cuts.len() > 20,
        "a demo run has many cut points: {}",
        cuts.len()
    );
    let mut streams = vec![("full".to_string(), full.clone())];
    let mut mid_message = 0;
    for cut in &cuts {
        let resumed = capture(&server, "ag-cut", Some(*cut), through).await;
        let events = parse_sse(&resumed);
        assert_eq!(
            events[0].ty(),
            "RUN_STARTED",
            "cut {cut}: the join prelude comes first"
        );
        assert_eq!(events[1].ty(), "MESSAGES_SNAPSHOT", "cut {cut}");
        if events
            .iter()
            .take_while(|e| e.id_field.is_none())
            .any(|e| e.ty() == "TEXT_MESSAGE_START")
        {
            mid_message += 1;
        }
        assert_eq!(
            texts(&events),
            want,
            "cut {cut}: text differs from the full stream"
        );
        streams.push((format!("resumed at {cut}"), resumed));
    }
    assert!(
        mid_message > 0,
        "some cut points fall inside a text message"
    );
    check_streams(&streams, 15).await;
}

#[tokio::test]
async fn http_agent_drives_a_run_end_to_end() {
    let server = Server::start().await;
    let out = tokio::process::Command::new("node")
        .arg(agui_dir().join("http_agent.mjs"))
        .arg(server.url(""))
        .arg("ag-client")
        .arg("Build me a weather to Slack workflow")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("HttpAgent run within 120s")
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "HttpAgent failed: {stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.logs()
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    let t: Vec<&str> = report["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(t.first(), Some(&"RUN_STARTED"));
    assert_eq!(t.last(), Some(&"RUN_FINISHED"));
    assert!(report["confirmations"].as_u64().unwrap() >= 1, "{report}");
    // The client folded the stream into messages: the user's own, then the agent's answer.
    let messages = report["messages"].as_array().unwrap();
    assert_eq!(messages[0]["id"], "user-1");
    assert_eq!(
        messages.iter().filter(|m| m["role"] == "user").count(),
        1,
        "the user's message is not echoed back to the client that sent it: {messages:?}"
    );
    assert!(messages
        .iter()
        .any(|m| m["role"] == "assistant" && m["content"].as_str().is_some_and(|c| !c.is_empty())));
    assert!(messages.iter().any(|m| m["role"] == "tool"));
    // The run is the same run on the n8n stream.
    let status = server.status("ag-client").await;
    assert_eq!(status["hasActiveRun"], false, "{status}");
}

#[tokio::test]
async fn bad_input_gets_a_clear_error() {
    let server = Server::start().await;
    let r = server
        .post(
            "/api/v1/agent/runs",
            &json!({"threadId": "ag-bad", "messages": []}),
        )
        .await;
    let (code, _) = r.error(422, "no user message");
    assert_eq!(code, "no_user_message");
    let r = server
        .post(
            "/api/v1/agent/runs",
            &json!({"threadId": "ag-bad", "runId": "", "message": "hi"}),
        )
        .await;
    assert_eq!(r.error(400, "empty runId").0, "invalid_run_id");
    let r = server
        .try_send(
            server
                .client
                .get(server.url("/api/v1/agent/runs/ag-bad/events"))
                .header("last-event-id", "abc"),
        )
        .await
        .unwrap();
    assert_eq!(r.error(400, "bad cursor").0, "invalid_cursor");
    // Nothing was stored by the refused requests.
    let status = server.status("ag-bad").await;
    assert_eq!(status["hasActiveRun"], false);
}

#[tokio::test]
async fn history_is_a_day_snapshot_of_the_thread() {
    let server = Server::start().await;
    run_to_end(
        &server,
        "ag-hist-old",
        "Build me a weather to Slack workflow",
    )
    .await;
    run_to_end(&server, "ag-hist", "Build me a weather to Slack workflow").await;
    let v = server
        .get("/api/v1/agent/history?threadId=ag-hist")
        .await
        .ok_json("history");
    assert_eq!(v["type"], "STATE_SNAPSHOT");
    assert_eq!(v["threadId"], "ag-hist");
    let snap = &v["snapshot"];
    assert_eq!(snap["scope"], "history_day");
    assert_eq!(snap["threadId"], "ag-hist");
    let day = snap["day"].as_str().expect("a day").to_string();
    assert_eq!(day.len(), 10);
    assert_eq!(snap["hasMore"], false);
    let messages = snap["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(
        messages[0]["content"],
        "Build me a weather to Slack workflow"
    );
    assert!(messages
        .iter()
        .any(|m| m["role"] == "assistant" && !m["content"].as_str().unwrap().is_empty()));
    for m in messages {
        assert!(m["seq"].is_i64() && m["timestamp"].as_str().unwrap().starts_with(&day));
    }
    // Nothing before that day.
    let v = server
        .get(&format!(
            "/api/v1/agent/history?threadId=ag-hist&before={day}"
        ))
        .await
        .ok_json("history before");
    assert_eq!(v["snapshot"]["day"], Value::Null);
    assert_eq!(v["snapshot"]["messages"], json!([]));
    // Without threadId: the caller's latest thread.
    let v = server.get("/api/v1/agent/history").await.ok_json("latest");
    assert_eq!(v["threadId"], "ag-hist");
    let r = server.get("/api/v1/agent/history?before=yesterday").await;
    assert_eq!(r.error(400, "bad day").0, "invalid_before");
}

/// What was done to an event: `(type, key, dropped | 42 | null)`.
type Mutation = (String, String, &'static str);

/// Our document's `AgUiEvent` and `@ag-ui/core` `EventSchemas` judge the same events alike,
/// except where ours is knowingly stricter. The events: a demo run with sub-agents, a crashing
/// run (`RUN_ERROR`) and a join prelude (`MESSAGES_SNAPSHOT`), each event also with every key
/// but `type` dropped, set to `42` and set to `null`.
#[tokio::test]
async fn the_document_and_ag_ui_core_agree_on_events() {
    let server = Server::start().await;
    run_to_end(&server, "ag-agree", "Build me a weather to Slack workflow").await;
    run_to_end(&server, "ag-agree", "please crash now").await;
    let n8n = server
        .read_idle("ag-agree", Cursor::None, Duration::from_millis(300))
        .await;
    let full = capture(&server, "ag-agree", None, n8n.last().unwrap().id()).await;
    let through = last_id(&full);
    // A cut inside the first run: the resumed stream opens with the join prelude.
    let ids: Vec<i64> = parse_sse(&full)
        .iter()
        .filter_map(|e| e.id_field.as_deref().map(|i| i.parse().unwrap()))
        .collect();
    let joined = capture(&server, "ag-agree", Some(ids[ids.len() / 4]), through).await;
    // One event of each type and set of keys.
    let mut originals: Vec<Value> = Vec::new();
    let mut shapes = BTreeSet::new();
    for sse in [&full, &joined] {
        for e in parse_sse(sse) {
            let v = e.json();
            let keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            if shapes.insert((v["type"].to_string(), keys)) {
                originals.push(v);
            }
        }
    }
    let seen: BTreeSet<String> = originals
        .iter()
        .map(|v| v["type"].as_str().unwrap().to_string())
        .collect();
    for t in [
        "MESSAGES_SNAPSHOT",
        "RUN_ERROR",
        "SUBAGENT_STARTED",
        "CUSTOM",
    ] {
        assert!(seen.contains(t), "no {t} among the events: {seen:?}");
    }

    // (event, what was done to it): the originals, then their mutations.
    let mut events: Vec<(Value, Option<Mutation>)> =
        originals.iter().map(|v| (v.clone(), None)).collect();
    for v in &originals {
        let ty = v["type"].as_str().unwrap().to_string();
        for key in v.as_object().unwrap().keys().filter(|k| *k != "type") {
            let mut dropped = v.clone();
            dropped.as_object_mut().unwrap().remove(key);
            events.push((dropped, Some((ty.clone(), key.clone(), "dropped"))));
            for (value, how) in [(json!(42), "42"), (Value::Null, "null")] {
                let mut changed = v.clone();
                changed[key.as_str()] = value;
                events.push((changed, Some((ty.clone(), key.clone(), how))));
            }
        }
    }
    let sse: String = events
        .iter()
        .map(|(v, _)| format!("data: {v}\n\n"))
        .collect();
    let (report, _) = ag_ui_core_report(&[("agreement".into(), sse)]).await;
    let theirs: BTreeSet<usize> = report["results"][0]["schemaFailures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["index"].as_u64().unwrap() as usize)
        .collect();
    let texts: Vec<String> = events.iter().map(|(v, _)| v.to_string()).collect();
    let (ours, our_report) = crate::openapi::document_verdicts(&texts, "AgUiEvent").await;

    // Where ours is stricter than AG-UI: the envelope we always send (`threadId`, `runId`,
    // `timestamp`, `subagentRunId` where AG-UI has no such field), `role` on
    // `TEXT_MESSAGE_START`, our extensions (`workerAgentOutput`, `toolAgentOutput`), and values
    // AG-UI leaves open that we send as objects or strings.
    let stricter = |ty: &str, key: &str| {
        matches!(
            key,
            "threadId" | "runId" | "timestamp" | "subagentRunId" | "workerAgentOutput"
        ) || matches!(
            (ty, key),
            ("TEXT_MESSAGE_START", "role")
                | ("TOOL_CALL_RESULT", "toolAgentOutput")
                | ("STATE_SNAPSHOT", "snapshot")
                | ("CUSTOM", "value")
                | ("SUBAGENT_FINISHED", "result")
        )
    };
    let mut both_refuse = 0;
    let mut ours_only = 0;
    for (i, (v, mutation)) in events.iter().enumerate() {
        let (t, o) = (theirs.contains(&i), ours.contains(&i));
        match mutation {
            None => assert!(
                !t && !o,
                "an event of the server is refused (@ag-ui/core: {t}, ours: {o}): {v}\n{our_report}"
            ),
            Some((ty, key, how)) => {
                assert!(
                    !t || o,
                    "ours accepts what @ag-ui/core refuses ({ty}.{key} {how}): {v}"
                );
                if t {
                    both_refuse += 1;
                }
                if o && !t {
                    assert!(
                        stricter(ty, key),
                        "ours refuses what @ag-ui/core accepts, unexpectedly \
                         ({ty}.{key} {how}): {v}\n{our_report}"
                    );
                    ours_only += 1;
                }
            }
        }
    }
    eprintln!(
        "{} events ({} from the server): both refuse {both_refuse}, only ours {ours_only}",
        events.len(),
        originals.len()
    );
    assert!(
        both_refuse > 50,
        "too few refusals to compare: {both_refuse}"
    );
}
