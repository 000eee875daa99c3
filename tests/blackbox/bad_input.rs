//! Bad input is a 4xx with `{"error": {"code", "message"}}` and stores nothing: malformed JSON,
//! unknown event types, missing fields, broken rules of the thread aggregate, oversized bodies,
//! bad thread ids, malformed SSE cursors.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// What "nothing stored" is checked against: the n8n events on the stream and the position the
/// message history covers (which counts internal events too).
async fn footprint(s: &Server, thread: &str) -> (Vec<(i64, String)>, Value) {
    let evs = s
        .read_idle(thread, Cursor::None, Duration::from_millis(300))
        .await;
    let next = s.messages(thread).await["nextEventId"].clone();
    (id_data(&evs), next)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_is_400_everywhere() {
    bounded(60, async {
        let s = Server::start().await;
        s.ingest_ok("t1", &[run_start("r1", "o1")]).await;
        let before = footprint(&s, "t1").await;
        let bodies: [&[u8]; 5] = [
            b"{\"message\":",
            b"{",
            b"not json",
            b"{\"events\": [}",
            b"\xff\xfe",
        ];
        // Every syntax error is a 400, also when serde would first notice a wrong field (a
        // truncated body must not be reported as a shape error).
        let mut wrong = Vec::new();
        for (method, path) in [
            ("POST", "/instance-ai/chat/t1"),
            ("POST", "/instance-ai/threads/t1/events"),
            ("POST", "/instance-ai/confirm/cr-x"),
            ("POST", "/instance-ai/threads"),
            ("PATCH", "/instance-ai/threads/t1"),
        ] {
            for body in bodies {
                let req = if method == "POST" {
                    s.client.post(s.url(path))
                } else {
                    s.client.patch(s.url(path))
                };
                let req = req
                    .header("content-type", "application/json")
                    .body(body.to_vec());
                let r = s.try_send(req).await.expect("request");
                let what = format!("{method} {path} with {:?}", String::from_utf8_lossy(body));
                if r.status != 400 {
                    wrong.push(format!("{what}: {} {}", r.status, r.text));
                } else {
                    r.error(400, &what);
                }
            }
        }
        assert_eq!(
            footprint(&s, "t1").await,
            before,
            "malformed requests stored something"
        );
        let list = s.threads().await;
        assert_eq!(
            list["threads"].as_array().unwrap().len(),
            1,
            "a malformed request created a thread: {list}"
        );
        assert!(
            wrong.is_empty(),
            "malformed JSON not answered 400:\n{}",
            wrong.join("\n")
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_types_and_missing_fields_are_422_naming_them() {
    bounded(60, async {
        let s = Server::start().await;
        let t = "t-shape";
        s.ingest_ok(t, &[run_start("r1", "o1")]).await;
        let before = footprint(&s, t).await;

        let cases: Vec<(Value, &[&str])> = vec![
            // An unknown event type: named.
            (ev("telepathy", "r1", "o1", json!({})), &["telepathy"]),
            // Payload fields missing: the type and field are named.
            (
                ev("tool-call", "r1", "o1", json!({"toolCallId": "tc1"})),
                &["toolName"],
            ),
            (ev("text-delta", "r1", "o1", json!({})), &["text"]),
            (
                ev("run-finish", "r1", "o1", json!({"status": "exploded"})),
                &["exploded"],
            ),
            (
                ev(
                    "agent-spawned",
                    "r1",
                    "a2",
                    json!({"parentId": "o1", "role": "x"}),
                ),
                &["tools"],
            ),
            // Envelope fields missing.
            (
                json!({"type": "text-delta", "agentId": "o1", "payload": {"text": "x"}}),
                &["runId"],
            ),
            (
                json!({"type": "text-delta", "runId": "r1", "payload": {"text": "x"}}),
                &["agentId"],
            ),
            (
                json!({"runId": "r1", "agentId": "o1", "payload": {"text": "x"}}),
                &["type"],
            ),
            // Wrong types.
            (
                ev("text-delta", "r1", "o1", json!({"text": 5})),
                &["text-delta"],
            ),
        ];
        for (event, names) in cases {
            // Alone, and after a valid event (the whole request must be refused).
            for batch in [
                vec![event.clone()],
                vec![text_delta("r1", "o1", "ok"), event.clone()],
            ] {
                let r = s.ingest(t, &batch).await;
                let (_, message) = r.error(422, &format!("ingest {event}"));
                for n in names {
                    assert!(
                        message.contains(n),
                        "error for {event} does not name {n:?}: {message}"
                    );
                }
            }
        }
        // Bodies of the wrong shape.
        for body in [
            json!({}),
            json!({"events": "nope"}),
            json!({"events": []}),
            json!([1, 2]),
        ] {
            s.post("/instance-ai/threads/t-shape/events", &body)
                .await
                .error(422, &format!("ingest body {body}"));
        }
        for body in [json!({}), json!({"message": 5}), json!({"message": ""})] {
            s.post("/instance-ai/chat/t-other", &body)
                .await
                .error(422, &format!("chat body {body}"));
        }
        s.post("/instance-ai/confirm/cr-1", &json!({"kind": "approval"}))
            .await
            .client_error("confirm without approved");
        assert_eq!(
            footprint(&s, t).await,
            before,
            "refused requests stored something"
        );
        let list = s.threads().await;
        assert!(
            list["threads"]
                .as_array()
                .unwrap()
                .iter()
                .all(|th| th["id"] != "t-other"),
            "a refused chat created its thread: {list}"
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_rules_are_409_or_422_naming_the_rule_and_store_nothing() {
    bounded(90, async {
        let s = Server::start().await;
        let t = "t-rules";
        s.ingest_ok(
            t,
            &[
                run_start("r0", "o0"),
                run_finish("r0", "o0", "completed"),
                run_start("r1", "o1"),
                ev("agent-spawned", "r1", "sub1", json!({"parentId": "o1", "role": "builder", "tools": ["x"]})),
                ev("tool-call", "r1", "o1", json!({"toolCallId": "tc-open", "toolName": "list-workflows", "args": {}})),
                ev("tool-call", "r1", "sub1", json!({"toolCallId": "tc-sub", "toolName": "x", "args": {}})),
            ],
        )
        .await;
        let before = footprint(&s, t).await;

        let spawned = |agent: &str, parent: &str| {
            ev("agent-spawned", "r1", agent, json!({"parentId": parent, "role": "r", "tools": []}))
        };
        let cases: Vec<(&str, Vec<Value>, u16, &str)> = vec![
            ("second run-start while live", vec![run_start("r2", "o2")], 409, "run_active"),
            ("event of no live run", vec![text_delta("r-none", "o1", "x")], 422, "run_not_live"),
            ("event of a finished run", vec![text_delta("r0", "o0", "x")], 409, "run_finished"),
            ("unknown agent", vec![text_delta("r1", "ghost", "x")], 422, "unknown_agent"),
            (
                "tool-result with no open call",
                vec![ev("tool-result", "r1", "o1", json!({"toolCallId": "tc-nope", "result": 1}))],
                422,
                "tool_call_not_open",
            ),
            (
                "tool-error from another agent",
                vec![ev("tool-error", "r1", "sub1", json!({"toolCallId": "tc-open", "error": "x"}))],
                422,
                "tool_call_not_open",
            ),
            (
                "confirmation for no open call",
                vec![ev(
                    "confirmation-request",
                    "r1",
                    "o1",
                    json!({"requestId": "cr1", "toolCallId": "tc-nope", "toolName": "x", "args": {}, "severity": "info", "message": "m"}),
                )],
                422,
                "tool_call_not_open",
            ),
            ("spawn with unknown parent", vec![spawned("sub2", "nobody")], 422, "unknown_parent"),
            ("spawn by a sub-agent", vec![spawned("sub3", "sub1")], 422, "sub_agent_cannot_spawn"),
            ("duplicate agent", vec![spawned("sub1", "o1")], 409, "duplicate_agent"),
            (
                "duplicate tool call",
                vec![ev("tool-call", "r1", "o1", json!({"toolCallId": "tc-open", "toolName": "y", "args": {}}))],
                409,
                "duplicate_tool_call",
            ),
            (
                "run-finish from a sub-agent",
                vec![run_finish("r1", "sub1", "completed")],
                422,
                "finish_not_from_orchestrator",
            ),
            (
                "orchestrator completing",
                vec![ev("agent-completed", "r1", "o1", json!({"role": "o", "result": "r"}))],
                422,
                "orchestrator_cannot_complete",
            ),
            (
                "internal event type",
                vec![ev("user-message", "r1", "o1", json!({"messageId": "m", "text": "hi"}))],
                422,
                "internal_event",
            ),
            (
                "valid events then a broken one",
                vec![
                    text_delta("r1", "o1", "fine"),
                    ev("tool-result", "r1", "o1", json!({"toolCallId": "tc-open", "result": 1})),
                    ev("tool-result", "r1", "o1", json!({"toolCallId": "tc-open", "result": 2})),
                ],
                422,
                "tool_call_not_open",
            ),
            (
                "a finish then more of the run",
                vec![run_finish("r1", "o1", "completed"), text_delta("r1", "o1", "late")],
                409,
                "run_finished",
            ),
        ];
        for (what, events, status, code) in cases {
            let r = s.ingest(t, &events).await;
            let (got_code, message) = r.error(status, what);
            assert_eq!(got_code, code, "{what}: {message}");
            assert_eq!(footprint(&s, t).await, before, "{what}: the refused request stored something");
        }
        // A run id may not be reused once its run finished.
        s.ingest_ok("t-rules2", &[run_start("r0", "o0"), run_finish("r0", "o0", "completed")])
            .await;
        let before2 = footprint(&s, "t-rules2").await;
        let (code, _) = s
            .ingest("t-rules2", &[run_start("r0", "o0")])
            .await
            .error(409, "reused run id");
        assert_eq!(code, "duplicate_run");
        assert_eq!(footprint(&s, "t-rules2").await, before2);

        // The run is still usable after all those refusals.
        let ids = s
            .ingest_ok(
                t,
                &[
                    ev("tool-result", "r1", "o1", json!({"toolCallId": "tc-open", "result": []})),
                    ev("agent-completed", "r1", "sub1", json!({"role": "builder", "result": "done"})),
                    run_finish("r1", "o1", "completed"),
                ],
            )
            .await;
        assert_eq!(ids.len(), 3);
        assert!(ids[0] > before.0.last().unwrap().0);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_413() {
    bounded(60, async {
        let s = Server::start_with(Opts {
            max_body_bytes: Some(2048),
            ..Opts::default()
        })
        .await;
        let t = "t-big";
        s.ingest_ok(t, &[run_start("r1", "o1")]).await;
        let before = footprint(&s, t).await;
        let big = "x".repeat(4096);
        s.ingest(t, &[text_delta("r1", "o1", &big)])
            .await
            .error(413, "ingest over the limit");
        let many: Vec<Value> = (0..100)
            .map(|i| text_delta("r1", "o1", &format!("{i}")))
            .collect();
        s.ingest(t, &many)
            .await
            .error(413, "ingest of many small events over the limit");
        s.chat_resp("t-big2", &big)
            .await
            .error(413, "chat over the limit");
        assert_eq!(
            footprint(&s, t).await,
            before,
            "an oversized request stored something"
        );
        // Under the limit is fine.
        s.ingest_ok(t, &[text_delta("r1", "o1", &"y".repeat(500))])
            .await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_thread_ids_are_json_4xx_and_store_nothing() {
    bounded(90, async {
        let s = Server::start().await;
        let long = "a".repeat(129);
        let bad_ids: Vec<String> = vec![
            long.clone(),
            "é".repeat(129),
            "ctl\u{1}x".into(),
            "new\nline".into(),
            "tab\there".into(),
            "del\u{7f}".into(),
        ];
        for id in &bad_ids {
            let p = enc(id);
            let what = |route: &str| format!("{route} with thread id {id:?}");
            let (code, _) = s.chat_resp(id, "hi").await.error(400, &what("chat"));
            assert!(!code.is_empty());
            s.cancel(id).await.error(400, &what("cancel"));
            s.ingest(id, &[run_start("r1", "o1")])
                .await
                .error(400, &what("ingest"));
            s.get(&format!("/instance-ai/threads/{p}/messages"))
                .await
                .error(400, &what("messages"));
            s.get(&format!("/instance-ai/threads/{p}/status"))
                .await
                .error(400, &what("status"));
            s.patch(&format!("/instance-ai/threads/{p}"), &json!({"title": "x"}))
                .await
                .error(400, &what("rename"));
            s.delete(&format!("/instance-ai/threads/{p}"))
                .await
                .error(400, &what("delete"));
            s.post("/instance-ai/threads", &json!({"threadId": id}))
                .await
                .error(400, &what("create"));
            match s.try_sse(id, Cursor::None).await {
                Ok(_) => panic!("{}: SSE opened", what("events")),
                Err(r) => {
                    r.error(400, &what("events"));
                }
            }
        }
        s.post("/instance-ai/threads", &json!({"threadId": ""}))
            .await
            .client_error("create with an empty thread id");
        // An empty path segment: whatever the router answers, it is a JSON 4xx.
        for (method, path) in [
            ("POST", "/instance-ai/chat/"),
            ("POST", "/instance-ai/chat//cancel"),
            ("GET", "/instance-ai/events/"),
            ("GET", "/instance-ai/threads//messages"),
            ("GET", "/instance-ai/threads//status"),
            ("POST", "/instance-ai/threads//events"),
            ("PATCH", "/instance-ai/threads/"),
            ("DELETE", "/instance-ai/threads/"),
            ("POST", "/instance-ai/confirm/"),
        ] {
            let req = match method {
                "GET" => s.client.get(s.url(path)),
                "POST" => s
                    .client
                    .post(s.url(path))
                    .json(&json!({"message": "hi", "events": [], "approved": true})),
                "PATCH" => s.client.patch(s.url(path)).json(&json!({"title": "x"})),
                _ => s.client.delete(s.url(path)),
            };
            let r = s.try_send(req).await.expect("request");
            r.client_error(&format!("{method} {path}"));
        }
        // 128 characters is fine.
        let ok = "b".repeat(128);
        s.ingest_ok(&ok, &[run_start("r1", "o1")]).await;
        let list = s.threads().await;
        let ids: Vec<&str> = list["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            vec![ok.as_str()],
            "only the valid thread exists: {list}"
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_cursors_are_400_json() {
    bounded(60, async {
        let s = Server::start().await;
        let t = "t-cursor";
        let ids = s
            .ingest_ok(t, &[run_start("r1", "o1"), text_delta("r1", "o1", "a")])
            .await;
        let bad_values = [
            "abc",
            "-1",
            "1.5",
            "99999999999999999999",
            "0x10",
            "1 2",
            "+-3",
        ];
        for bad in bad_values {
            match s.try_sse(t, Cursor::Header(bad.into())).await {
                Ok(_) => panic!("Last-Event-ID {bad:?} opened a stream"),
                Err(r) => {
                    r.error(400, &format!("Last-Event-ID {bad:?}"));
                }
            }
        }
        // Header values must be visible ASCII; a query can carry anything.
        for bad in bad_values.iter().chain(&["١٢", "5\u{0}", "NaN"]) {
            match s.try_sse(t, Cursor::Query(bad.to_string())).await {
                Ok(_) => panic!("?lastEventId={bad:?} opened a stream"),
                Err(r) => {
                    r.error(400, &format!("?lastEventId={bad:?}"));
                }
            }
        }
        // Valid cursors still work: a query cursor and a header cursor each skip what they cover.
        let got = s
            .read_idle(t, Cursor::query_id(ids[0]), Duration::from_millis(300))
            .await;
        assert_eq!(got.iter().map(|e| e.id()).collect::<Vec<_>>(), vec![ids[1]]);
        let got = s
            .read_idle(t, Cursor::header_id(ids[1]), Duration::from_millis(300))
            .await;
        assert!(got.is_empty());
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_threads() {
    bounded(60, async {
        let s = Server::start().await;
        s.get("/instance-ai/nope").await.error(404, "unknown route");
        s.get("/nope").await.error(404, "unknown route");
        // An unknown thread's status is all-false, not 404 (as n8n answers).
        let st = s.status("t-unknown").await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
        assert_eq!(st["isSuspended"], false, "{st}");
    })
    .await
}

/// Bugs schemathesis found (tests/blackbox/schemathesis.rs), each kept here as a test of ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_findings_stay_fixed() {
    bounded(60, async {
        let s = Server::start().await;
        let before = s.threads().await;

        // A JSON array was read as a struct, field by field: `[null,null]` created a thread.
        for (path, body) in [
            ("/instance-ai/threads", "[null,null]"),
            ("/instance-ai/threads", "[]"),
            ("/instance-ai/chat/t-array", r#"["hello"]"#),
            ("/instance-ai/threads/t-array/events", "[[]]"),
            ("/smith", r#"["build"]"#),
            ("/instance-ai/threads", "7"),
        ] {
            let r = s
                .post_raw(path, "application/json", body.as_bytes().to_vec())
                .await;
            let (code, message) = r.error(422, &format!("POST {path} {body}"));
            assert_eq!(code, "invalid_body");
            assert!(message.contains("object"), "{message}");
        }
        // Broken JSON is still a 400, whatever it starts with.
        s.post_raw("/instance-ai/threads", "application/json", b"[1,".to_vec())
            .await
            .error(400, "broken array");

        // A blank title was accepted on create (rename and fork refused it).
        for title in [
            "",
            "   ",
            "\u{3000}\t",
            &"x".repeat(201),
            &format!(" {} ", "x".repeat(199)),
        ] {
            let r = s
                .post(
                    "/instance-ai/threads",
                    &json!({"threadId": "t-blank", "title": title}),
                )
                .await;
            let (code, _) = r.error(422, &format!("title {title:?}"));
            assert_eq!(code, "invalid_title");
        }
        assert_eq!(
            s.threads().await,
            before,
            "a refused request stored a thread"
        );
        let ok = s
            .post(
                "/instance-ai/threads",
                &json!({"threadId": "t-title", "title": "  Trip  "}),
            )
            .await
            .ok_json("a good title");
        assert_eq!(ok["title"], "Trip");

        // axum's query rejections answered in plain text; they are our JSON error now.
        for path in [
            "/instance-ai/events/t-title?lastEventId=1&lastEventId=2",
            "/api/v1/agent/runs/t-title/events?lastEventId=1&lastEventId=2",
            "/api/v1/agent/history?threadId=t-title&threadId=t-other",
            "/api/flows/k/requests/r/stream?starting_after=1&starting_after=2",
        ] {
            let (code, _) = s.get(path).await.error(400, path);
            assert_eq!(code, "invalid_query", "{path}");
        }

        // A malformed `?lastEventId=` was ignored when a `Last-Event-ID` header was present.
        for path in [
            "/instance-ai/events/t-title?lastEventId=abc",
            "/api/v1/agent/runs/t-title/events?lastEventId=abc",
        ] {
            let r = s
                .try_send(s.client.get(s.url(path)).header("last-event-id", "1"))
                .await
                .unwrap();
            let (code, _) = r.error(400, path);
            assert_eq!(code, "invalid_cursor", "{path}");
        }

        // An integral float where the document says integer (`ts: 1.0`, `throughEventId: 3.0`)
        // is that integer, as JSON Schema counts it; `1.5` is refused.
        let mut start = run_start("r1", "o1");
        start["ts"] = json!(1.0);
        let mut finish = run_finish("r1", "o1", "completed");
        finish["ts"] = json!(1.5);
        let (code, _) = s
            .ingest("t-float", &[start.clone(), finish.clone()])
            .await
            .error(422, "ts 1.5");
        assert_eq!(code, "invalid_event");
        finish["ts"] = json!(2.0);
        let ids = s.ingest_ok("t-float", &[start, finish]).await;
        let ids = &ids[ids.len() - 1..];
        let fork = s
            .post(
                "/instance-ai/threads/t-float/fork",
                &json!({"threadId": "t-float-fork", "throughEventId": ids[0] as f64}),
            )
            .await;
        assert_eq!(fork.status, 201, "fork at {}.0: {}", ids[0], fork.text);
        let r = s
            .post(
                "/instance-ai/threads/t-float/fork",
                &json!({"threadId": "t-float-fork2", "throughEventId": ids[0] as f64 + 0.5}),
            )
            .await;
        assert_eq!(r.error(422, "throughEventId x.5").0, "invalid_body");

        // Stateful phase: the messages of a deleted thread answered 200 (with none); a deleted
        // thread's history is a 404, as an erased one's is.
        s.post("/instance-ai/threads", &json!({"threadId": "t-gone"}))
            .await
            .ok_json("create t-gone");
        s.get("/instance-ai/threads/t-gone/messages")
            .await
            .ok_json("messages before the delete");
        s.delete("/instance-ai/threads/t-gone")
            .await
            .ok_json("delete t-gone");
        let (code, _) = s
            .get("/instance-ai/threads/t-gone/messages")
            .await
            .error(404, "messages of a deleted thread");
        assert_eq!(code, "thread_deleted");

        // Stateful phase: a fork at a user message the source does not have was a 404, which
        // says the source (the request's target, which exists) was not found. It is a 409 now,
        // like a fork point inside a run: the source has no such fork point.
        for body in [
            json!({"beforeMessageId": "no-such-message"}),
            json!({"throughEventId": 1_000_000_000}),
        ] {
            let (code, _) = s
                .post("/instance-ai/threads/t-float/fork", &body)
                .await
                .error(409, &format!("fork at {body}"));
            assert_eq!(code, "fork_point_not_found", "{body}");
        }
        s.get("/instance-ai/threads/t-float/messages")
            .await
            .ok_json("the source is still there");

        // The runs of #22's narrowed exceptions. An AG-UI run whose messages hold a user
        // message without string or list `content` was accepted when a later user message had
        // one, and refused (422) only when the last one lacked it, which the document did not
        // say; every user message needs it now, as the document says.
        for messages in [
            json!([{"role": "user"}]),
            json!([{"role": "user", "content": 7}, {"role": "user", "content": "hi"}]),
            json!([{"role": "user"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "hi"}]),
        ] {
            let (code, _) = s
                .post("/api/v1/agent/runs", &json!({"threadId": "t-agui", "messages": messages}))
                .await
                .error(422, &format!("messages {messages}"));
            assert_eq!(code, "invalid_message", "{messages}");
        }
        // The tokens-file run: a blank user message was refused (422 `empty_message`) though the
        // document allowed it; it says "not blank" now, of every user message, as the server
        // checks.
        for messages in [
            json!([{"role": "user", "content": ""}]),
            json!([{"role": "user", "content": " \n"}, {"role": "user", "content": "hi"}]),
            json!([{"role": "user", "content": [{"type": "text", "text": "  "}, {"type": "image"}]}]),
        ] {
            let (code, _) = s
                .post("/api/v1/agent/runs", &json!({"threadId": "t-agui", "messages": messages}))
                .await
                .error(422, &format!("messages {messages}"));
            assert_eq!(code, "empty_message", "{messages}");
        }
        // A subscription's stream paths: an empty one was refused (400) though the document
        // allowed it; 1,024 characters are counted as characters, as `maxLength` counts them.
        for (streams, status) in [
            (json!([""]), 400),
            (json!(["///"]), 400),
            (json!([]), 400),
            (json!(["\u{e9}".repeat(1024)]), 404),
            (json!(["a".repeat(1025)]), 400),
        ] {
            let r = s
                .post("/v1/stream/__ds/subscriptions/nope/streams", &json!({"streams": streams}))
                .await;
            assert_eq!(r.status, status, "streams {streams}: {}", r.text);
        }
        // The document says both.
        let doc = s.get("/openapi.json").await.ok_json("openapi.json");
        let schemas = &doc["components"]["schemas"];
        // Where `message` is absent: the server reads `messages` only then.
        let user = &schemas["RunBody"]["allOf"][1]["anyOf"][1]["properties"]["messages"]["items"];
        assert_eq!(user["then"]["required"], json!(["content"]), "{user}");
        let streams = &schemas["AddStreams"]["properties"]["streams"];
        assert_eq!(streams["minItems"], 1, "{streams}");
        assert_eq!(streams["items"]["maxLength"], 1024, "{streams}");

        // Found with seeds other than the project's (#34), each a request the document called
        // valid that the server refused, or the reverse:
        // - `message` given, `messages` is not read: a user message without `content` beside it
        //   is accepted, as the document now says.
        let r = s
            .post(
                "/api/v1/agent/runs",
                &json!({"threadId": "t-agui-2", "message": "Hi", "messages": [{"role": "user"}]}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let paths = &doc["paths"];
        // - a live read without an offset (400 `offset_required`): one query object that says
        //   `live` needs `offset`;
        for path in ["/v1/stream/{path}", "/v1/threads/{thread_id}"] {
            let params = paths[path]["get"]["parameters"].as_array().unwrap();
            let read = params.iter().find(|p| p["name"] == "read").expect("the read query");
            assert_eq!(read["style"], "form", "{read}");
            assert_eq!(read["explode"], true, "{read}");
            assert_eq!(read["schema"]["dependentRequired"], json!({"live": ["offset"]}));
            assert!(!params.iter().any(|p| p["name"] == "offset"), "{path}");
            // - the `event: data` of a live read (the messages, an array) beside the control;
            let sse = &paths[path]["get"]["responses"]["200"]["content"]["text/event-stream"];
            assert!(sse["x-sse-data"]["anyOf"].as_array().is_some_and(|a| a.len() == 2));
        }
        // - a live read of a stream that is not JSON (text as written, other bytes in base64,
        //   said by `Stream-SSE-Data-Encoding`), and its catch-up under its own content type;
        let ok = &paths["/v1/stream/{path}"]["get"]["responses"]["200"];
        let event = &ok["content"]["text/event-stream"]["schema"];
        let data = &event["allOf"][1]["then"]["properties"]["data"]["anyOf"];
        assert_eq!(event["allOf"][1]["if"]["properties"]["event"]["const"], "data");
        assert_eq!(data.as_array().map(Vec::len), Some(3), "{event}");
        assert_eq!(data[2]["contentEncoding"], "base64", "{event}");
        assert!(ok["headers"]["Stream-SSE-Data-Encoding"].is_object(), "{ok}");
        assert!(ok["content"]["*/*"].is_object(), "{ok}");
        assert!(ok["content"].get("application/octet-stream").is_none(), "{ok}");
        // - empty or malformed producer headers (400 `invalid_producer_id`, …);
        let post = paths["/v1/stream/{path}"]["post"]["parameters"].as_array().unwrap();
        for name in ["Producer-Id", "Producer-Epoch", "Producer-Seq"] {
            let p = post.iter().find(|p| p["name"] == name).unwrap();
            assert!(p["schema"]["pattern"].is_string(), "{p}");
        }
        let r = s
            .client
            .post(s.url("/v1/stream/st-empty-producer"))
            .header("content-type", "text/plain")
            .header("producer-id", "")
            .header("producer-epoch", "0")
            .header("producer-seq", "0")
            .body("x");
        let r = s.try_send(r).await.unwrap();
        assert_eq!(r.status, 400, "{}", r.text);
        // - a thread append of an object that is no n8n event (422 `invalid_event`);
        let body = &paths["/v1/threads/{thread_id}"]["post"]["requestBody"]["content"];
        assert!(body["application/json"]["schema"]["anyOf"].is_array(), "{body}");
        // - an `application/octet-stream` upload, which the server refuses (422
        //   `unsupported_attachment_type`), no longer offered.
        let upload = &paths["/api/v1/agent/attachments"]["post"]["requestBody"]["content"];
        assert!(upload.get("application/octet-stream").is_none(), "{upload}");
        let r = s
            .client
            .post(s.url("/api/v1/agent/attachments?threadId=t-upload"))
            .header("content-type", "application/octet-stream")
            .body("x");
        assert_eq!(s.try_send(r).await.unwrap().status, 422);
        // - a subscription create: `lease_ttl_ms: 3842.0`, an integer to JSON Schema, was
        //   refused ("expected u64"); and the document did not say the rest it checks: the
        //   `type`s, a glob or a stream, a webhook's `webhook.url`, a pull-wake's `wake_stream`,
        //   the id's form.
        let body = json!({"type": "pull-wake", "streams": ["st-sub"], "wake_stream": "st-wake", "lease_ttl_ms": 3842.0});
        let r = s
            .client
            .put(s.url("/v1/stream/__ds/subscriptions/st-float-lease"))
            .json(&body);
        let r = s.try_send(r).await.unwrap();
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.json()["lease_ttl_ms"], 3842, "{}", r.text);
        let schemas = &doc["components"]["schemas"];
        assert_eq!(
            schemas["SubscriptionType"]["enum"],
            json!(["webhook", "pull-wake"])
        );
        let create = &schemas["CreateSubscription"]["allOf"][1];
        assert!(create["anyOf"].is_array(), "{create}");
        assert_eq!(create["oneOf"][0]["required"], json!(["type", "webhook"]));
        assert_eq!(create["oneOf"][1]["required"], json!(["type", "wake_stream"]));
        let id = &paths["/v1/stream/__ds/subscriptions/{id}"]["put"]["parameters"][0];
        assert_eq!(id["schema"]["maxLength"], 256, "{id}");
        assert!(id["schema"]["pattern"].is_string(), "{id}");
    })
    .await
}
