//! Every event the server sends on the n8n stream validates against `instanceAiEventSchema` of
//! `@n8n/api-types` 1.25.0 and 1.41.0 (through `tests/conformance/validate.mjs`): demo runs that
//! are approved, denied and cancelled, and an ingested fixture; together they cover all 15 types.
//! Every event is also checked against the `N8nEvent` schema of our own OpenAPI document
//! (`docs/openapi.json`), and the same demo runs as the other protocols stream them against its
//! `AgUiEvent`, `ItemsEvent` and `WorkflowBuilderFrame`. Also the SSE headers and frame format
//! of the n8n protocol.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const ALL_TYPES: [&str; 15] = [
    "run-start",
    "run-finish",
    "agent-spawned",
    "agent-completed",
    "text-delta",
    "reasoning-delta",
    "tool-call",
    "tool-result",
    "tool-error",
    "confirmation-request",
    "tasks-update",
    "status",
    "error",
    "filesystem-request",
    "thread-title-updated",
];

/// A run of every type, with the optional fields filled where the schema has them.
fn fixture() -> Vec<Value> {
    let (r, o, a) = ("fx-run", "fx-orch", "fx-sub");
    vec![
        ev(
            "run-start",
            r,
            o,
            json!({"messageId": "fx-msg", "messageGroupId": "fx-group"}),
        ),
        ev(
            "reasoning-delta",
            r,
            o,
            json!({"text": "Thinking about it…"}),
        ),
        ev("status", r, o, json!({"message": "Searching nodes..."})),
        ev(
            "tasks-update",
            r,
            o,
            json!({"tasks": {"tasks": [
                {"id": "t1", "description": "Build", "status": "todo"},
                {"id": "t2", "description": "Test", "status": "in_progress"},
                {"id": "t3", "description": "Ship", "status": "done"},
                {"id": "t4", "description": "Fail", "status": "failed"},
                {"id": "t5", "description": "Drop", "status": "cancelled"}
            ]}}),
        ),
        ev(
            "tool-call",
            r,
            o,
            json!({"toolCallId": "fx-tc1", "toolName": "list-workflows", "args": {"limit": 10}}),
        ),
        ev(
            "tool-result",
            r,
            o,
            json!({"toolCallId": "fx-tc1", "result": {"workflows": [{"id": "1", "name": "W", "active": true}]}}),
        ),
        ev(
            "tool-call",
            r,
            o,
            json!({"toolCallId": "fx-tc2", "toolName": "delegate", "args": {"role": "builder"}}),
        ),
        ev(
            "agent-spawned",
            r,
            a,
            json!({"parentId": o, "role": "workflow builder", "tools": ["create-workflow"], "taskId": "t1",
                   "title": "Builder", "subtitle": "builds", "goal": "build it"}),
        ),
        ev(
            "tool-call",
            r,
            a,
            json!({"toolCallId": "fx-tc3", "toolName": "create-workflow", "args": {}}),
        ),
        ev(
            "tool-error",
            r,
            a,
            json!({"toolCallId": "fx-tc3", "error": "node type unknown"}),
        ),
        ev("text-delta", r, a, json!({"text": "Sub-agent text"})),
        ev(
            "agent-completed",
            r,
            a,
            json!({"role": "workflow builder", "result": "Created wf-1"}),
        ),
        ev(
            "tool-result",
            r,
            o,
            json!({"toolCallId": "fx-tc2", "result": "Created wf-1"}),
        ),
        ev(
            "tool-call",
            r,
            o,
            json!({"toolCallId": "fx-tc4", "toolName": "delete-workflow", "args": {"workflowId": "wf-1"}}),
        ),
        ev(
            "confirmation-request",
            r,
            o,
            json!({"requestId": "fx-cr1", "toolCallId": "fx-tc4", "toolName": "delete-workflow",
                   "args": {"workflowId": "wf-1"}, "severity": "destructive", "message": "Delete 'W'?",
                   "inputType": "questions", "introMessage": "A few questions",
                   "questions": [{"id": "q1", "question": "Which?", "type": "single", "options": ["a", "b"]},
                                 {"id": "q2", "question": "Why?", "type": "text"}]}),
        ),
        ev(
            "filesystem-request",
            r,
            o,
            json!({"requestId": "fx-fs1", "toolCall": {"name": "read_file", "arguments": {"path": "/tmp/x"}}}),
        ),
        ev(
            "tool-result",
            r,
            o,
            json!({"toolCallId": "fx-tc4", "result": null}),
        ),
        ev(
            "error",
            r,
            o,
            json!({"content": "Rate limited", "statusCode": 429, "provider": "openai", "technicalDetails": "retry later"}),
        ),
        ev("text-delta", r, o, json!({"text": "Done."})),
        ev(
            "thread-title-updated",
            r,
            o,
            json!({"title": "Fixture thread"}),
        ),
        ev(
            "run-finish",
            r,
            o,
            json!({"status": "error", "reason": "LLM provider unavailable"}),
        ),
    ]
}

/// The fields of an envelope a round trip must keep.
fn core(v: &Value) -> Value {
    json!({"type": v["type"], "runId": v["runId"], "agentId": v["agentId"], "payload": v["payload"]})
}

/// The data of every frame of `thread` up to the `run-finish` of `run`.
async fn run_events(s: &Server, thread: &str, run: &str, decision: Option<bool>) -> Vec<SseEvent> {
    s.follow_run(thread, run, |_| {
        decision.map(|approved| json!({"kind": "approval", "approved": approved}))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_on_the_stream_validates_and_all_15_types_appear() {
    bounded(360, async {
        let s = Server::start().await;
        let mut all: Vec<SseEvent> = Vec::new();

        // Ingested fixture, read back off the stream: the round trip keeps every field.
        let sent = fixture();
        let ids = s.ingest_ok("schema-fixture", &sent).await;
        assert_eq!(ids.len(), sent.len());
        let got = s
            .read_until_id("schema-fixture", *ids.last().unwrap())
            .await;
        assert_eq!(got.iter().map(|e| e.id()).collect::<Vec<_>>(), ids);
        for (e, want) in got.iter().zip(&sent) {
            assert_eq!(core(&e.json()), core(want), "round trip of {want}");
        }
        all.extend(got);

        // Demo: approved.
        let run = s.chat("schema-approve", "tidy my workflows").await;
        let evs = run_events(&s, "schema-approve", &run, Some(true)).await;
        let types: BTreeSet<String> = evs.iter().map(|e| e.ty()).collect();
        for t in [
            "run-start",
            "reasoning-delta",
            "text-delta",
            "status",
            "tasks-update",
            "tool-call",
            "tool-result",
            "agent-spawned",
            "agent-completed",
            "confirmation-request",
            "thread-title-updated",
            "run-finish",
        ] {
            assert!(
                types.contains(t),
                "the approved demo run has no {t}: {types:?}"
            );
        }
        assert_eq!(evs.first().unwrap().ty(), "run-start");
        assert_eq!(evs.last().unwrap().json()["payload"]["status"], "completed");
        let mut demos = vec![("schema-approve", run, evs.last().unwrap().id())];
        all.extend(evs);

        // Demo: denied.
        let run = s.chat("schema-deny", "tidy my workflows").await;
        let evs = run_events(&s, "schema-deny", &run, Some(false)).await;
        demos.push(("schema-deny", run, evs.last().unwrap().id()));
        assert!(
            evs.iter().any(|e| e.ty() == "tool-error"),
            "the denied run has no tool-error"
        );
        all.extend(evs);

        // Demo: cancelled mid-stream.
        let run = s.chat("schema-cancel", "a long answer").await;
        let mut sse = s.sse("schema-cancel", Cursor::None).await;
        sse.read_until(Duration::from_secs(20), |e| e.ty() == "text-delta")
            .await;
        s.cancel("schema-cancel").await.ok_json("cancel");
        drop(sse);
        let evs = run_events(&s, "schema-cancel", &run, None).await;
        assert_eq!(evs.last().unwrap().json()["payload"]["status"], "cancelled");
        demos.push(("schema-cancel", run, evs.last().unwrap().id()));
        all.extend(evs);

        let seen: BTreeSet<String> = all.iter().map(|e| e.ty()).collect();
        let missing: Vec<&str> = ALL_TYPES
            .iter()
            .copied()
            .filter(|t| !seen.contains(*t))
            .collect();
        assert!(missing.is_empty(), "types never seen: {missing:?}");
        let unknown: Vec<&String> = seen
            .iter()
            .filter(|t| !ALL_TYPES.contains(&t.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "types outside the 15 on the n8n stream: {unknown:?}"
        );
        for e in &all {
            let v = e.json();
            assert!(
                v.get("id").is_none(),
                "the SSE id leaked into the JSON: {v}"
            );
            for (k, val) in v.as_object().unwrap() {
                assert!(!val.is_null(), "envelope field {k} is null: {v}");
            }
            for (k, val) in v["payload"].as_object().expect("payload object") {
                assert!(
                    k == "result" || !val.is_null(),
                    "an optional field serialized as null ({k}): {v}"
                );
            }
        }

        let data: Vec<String> = all.iter().map(|e| e.data.clone()).collect();
        validate_n8n(&data).await;
        // And against our own document's schema of the stream's `data:` (issue #22).
        crate::openapi::validate_against_document(&data, "N8nEvent").await;

        // The same runs on the AG-UI stream of their thread, and each as an items request
        // (trace items included), against the document's schemas of those events.
        let (mut agui, mut items) = (Vec::new(), Vec::new());
        for (thread, run, last) in &demos {
            let sse = crate::agui::capture(&s, thread, None, *last).await;
            agui.extend(parse_sse(&sse).into_iter().map(|e| e.data));
            let request = format!("{thread}~{run}");
            let sse = crate::items::read_stream(&s, &request, "?unfiltered=1", None).await;
            items.extend(parse_sse(&sse).into_iter().map(|e| e.data));
        }
        let types = |events: &[String]| -> BTreeSet<String> {
            events
                .iter()
                .map(|e| serde_json::from_str::<Value>(e).unwrap()["type"].to_string())
                .collect()
        };
        assert!(types(&agui).len() >= 12, "AG-UI types: {:?}", types(&agui));
        assert!(types(&items).len() >= 8, "items types: {:?}", types(&items));
        crate::openapi::validate_against_document(&agui, "AgUiEvent").await;
        crate::openapi::validate_against_document(&items, "ItemsEvent").await;
        // A workflow-builder conversation (its own run, on the stream of `POST /smith`).
        let frames =
            crate::smith::converse(&s, "/smith", "Build me a weather to Slack workflow").await;
        let frames: Vec<String> = frames.iter().map(Value::to_string).collect();
        assert!(
            types(&frames).len() >= 5,
            "workflow-builder types: {:?}",
            types(&frames)
        );
        crate::openapi::validate_against_document(&frames, "WorkflowBuilderFrame").await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_validator_rejects_a_bad_event() {
    // Guards against a validator that accepts everything (and so proves nothing).
    bounded(120, async {
        let good = vec![
            r#"{"type":"run-start","runId":"r","agentId":"a","payload":{"messageId":"m"}}"#
                .to_string(),
        ];
        validate_n8n(&good).await;
        crate::openapi::validate_against_document(&good, "N8nEvent").await;
        let bad = r#"{"type":"run-start","runId":"r","agentId":"a","payload":{}}"#;
        let result = tokio::spawn(async move {
            crate::openapi::validate_against_document(&[bad.to_string()], "N8nEvent").await
        })
        .await;
        assert!(
            result.is_err(),
            "the document's N8nEvent accepted a run-start without messageId"
        );
        let result = tokio::spawn(async move { validate_n8n(&[bad.to_string()]).await }).await;
        assert!(
            result.is_err(),
            "validate_n8n accepted a run-start without messageId"
        );
        // The other protocols' event schemas: each accepts a good event and refuses it with a
        // required field missing or of the wrong type.
        for (name, good, bad) in [
            (
                "AgUiEvent",
                json!({"type": "TEXT_MESSAGE_CONTENT", "threadId": "t", "runId": "r",
                       "messageId": "m", "delta": "hi", "timestamp": 1}),
                vec![
                    json!({"type": "TEXT_MESSAGE_CONTENT", "threadId": "t", "runId": "r",
                           "messageId": "m", "timestamp": 1}),
                    json!({"type": "TEXT_MESSAGE_CONTENT", "threadId": "t", "runId": "r",
                           "messageId": "m", "delta": "hi", "timestamp": 1.5}),
                    json!({"type": "NO_SUCH_EVENT", "threadId": "t", "runId": "r",
                           "timestamp": 1}),
                ],
            ),
            (
                "ItemsEvent",
                json!({"stream": "request", "type": "content.delta", "requestId": "q",
                       "sequence_number": 3, "ts": 1, "itemId": "item_message_1",
                       "contentIndex": 0, "delta": {"text": "hi"}}),
                vec![
                    json!({"stream": "request", "type": "content.delta", "requestId": "q",
                           "sequence_number": 3, "ts": 1, "itemId": "item_message_1",
                           "contentIndex": 0}),
                    json!({"stream": "request", "type": "item.added", "requestId": "q",
                           "sequence_number": 3, "ts": 1,
                           "item": {"type": "message", "id": "i", "status": "done"}}),
                ],
            ),
            (
                "WorkflowBuilderFrame",
                json!({"type": "tool_call", "name": "add-node", "arguments": "{}",
                       "call_id": "c1"}),
                vec![
                    json!({"type": "tool_call", "name": "add-node", "arguments": {},
                           "call_id": "c1"}),
                    json!({"type": "token"}),
                ],
            ),
        ] {
            let mut events = vec![good.to_string()];
            events.extend(bad.iter().map(Value::to_string));
            let (refused, report) = crate::openapi::document_verdicts(&events, name).await;
            let want: BTreeSet<usize> = (1..events.len()).collect();
            assert_eq!(
                refused, want,
                "{name}: the bad events, and only they\n{report}"
            );
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_headers_frames_and_pings() {
    bounded(60, async {
        let s = Server::start_with(Opts {
            sse_ping_secs: 1,
            ..Opts::default()
        })
        .await;
        let ids = s
            .ingest_ok(
                "t-frames",
                &[run_start("r1", "o1"), text_delta("r1", "o1", "hi")],
            )
            .await;
        let mut sse = s.sse("t-frames", Cursor::None).await;
        let h = |name: &str| {
            sse.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase()
        };
        assert!(
            h("content-type").starts_with("text/event-stream"),
            "{}",
            h("content-type")
        );
        assert!(
            h("cache-control").contains("no-cache"),
            "{}",
            h("cache-control")
        );
        assert!(
            h("cache-control").contains("no-transform"),
            "{}",
            h("cache-control")
        );
        assert_eq!(h("x-accel-buffering"), "no");
        assert_eq!(h("content-encoding"), "");
        for id in &ids {
            let e = sse
                .next_event(Duration::from_secs(10))
                .await
                .expect("frame");
            assert_eq!(e.id(), *id);
            assert_eq!(e.event, None, "n8n frames have no event: line");
        }
        // An idle stream gets `: ping` comments.
        let t0 = std::time::Instant::now();
        match sse.next_item(Duration::from_secs(5)).await {
            Ok(SseItem::Comment(c)) => assert_eq!(c.trim(), "ping"),
            Ok(SseItem::Event(e)) => panic!("unexpected event {}", e.data),
            Err(e) => panic!("no ping within 5 s ({e:?}, {:?})", t0.elapsed()),
        }
        // Still live after the ping.
        let more = s
            .ingest_ok("t-frames", &[text_delta("r1", "o1", "again")])
            .await;
        let e = sse
            .next_event(Duration::from_secs(10))
            .await
            .expect("frame after ping");
        assert_eq!(e.id(), more[0]);
    })
    .await
}
