use serde_json::{json, Value};
use threadstream_domain::StoredEvent;

use super::AgUiRenderer;
use crate::render::fixture::{demo_run, Log};
use crate::render::Frame;

fn render_all(r: &mut AgUiRenderer, events: &[StoredEvent]) -> Vec<Frame> {
    events.iter().flat_map(|e| r.render(e)).collect()
}

fn types(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .map(|f| {
            let v: Value = serde_json::from_str(&f.data).unwrap();
            v["type"].as_str().unwrap().to_string()
        })
        .collect()
}

fn json_of(f: &Frame) -> Value {
    serde_json::from_str(&f.data).unwrap()
}

#[test]
fn a_run_opens_and_closes_everything_it_opens() {
    let mut log = Log::new("t1");
    demo_run(&mut log, "r1", "completed");
    let mut r = AgUiRenderer::new("t1", true);
    let frames = render_all(&mut r, &log.events);
    let t = types(&frames);
    assert_eq!(
        t[..4],
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END"
        ]
    );
    assert_eq!(json_of(&frames[1])["role"], "user");
    assert_eq!(t.last().unwrap(), "RUN_FINISHED");
    for (open, close) in [
        ("TEXT_MESSAGE_START", "TEXT_MESSAGE_END"),
        ("REASONING_START", "REASONING_END"),
        ("TOOL_CALL_START", "TOOL_CALL_END"),
        ("STEP_STARTED", "STEP_FINISHED"),
        ("SUBAGENT_STARTED", "SUBAGENT_FINISHED"),
    ] {
        let o = t.iter().filter(|x| *x == open).count();
        assert!(o > 0, "{open} missing: {t:?}");
        assert_eq!(
            o,
            t.iter().filter(|x| *x == close).count(),
            "{open}/{close}"
        );
    }
    // The sub-agent's events carry its id; the orchestrator's do not.
    let sub_text = frames
        .iter()
        .map(json_of)
        .find(|v| v["type"] == "TEXT_MESSAGE_CONTENT" && v["delta"] == "Created.")
        .unwrap();
    assert_eq!(sub_text["subagentRunId"], "sub1");
    let first_text = frames
        .iter()
        .map(json_of)
        .find(|v| v["type"] == "TEXT_MESSAGE_CONTENT" && v["delta"] == "On ")
        .unwrap();
    assert!(first_text.get("subagentRunId").is_none());
    // No nulls anywhere, integer timestamps, LF-only frames.
    for f in &frames {
        assert!(!f.data.contains("null"), "{}", f.data);
        assert!(json_of(f)["timestamp"].is_i64());
    }
    assert!(!super::super::to_sse(&frames).contains('\r'));
    let end = frames
        .iter()
        .map(json_of)
        .find(|v| v["type"] == "TEXT_MESSAGE_END" && v["messageId"] == "msg-5")
        .unwrap();
    assert_eq!(
        end["workerAgentOutput"],
        json!({"status": "success", "answer": "On it."})
    );
    let result = frames
        .iter()
        .map(json_of)
        .find(|v| v["type"] == "TOOL_CALL_RESULT" && v["toolCallId"] == "tc2")
        .unwrap();
    assert_eq!(result["toolAgentOutput"]["tool_name"], "create-workflow");
    assert_eq!(result["toolAgentOutput"]["status"], "success");
    assert_eq!(result["content"], r#"{"id":"wf1"}"#);
    let finished = json_of(frames.last().unwrap());
    assert_eq!(
        finished["usage"],
        json!([{"model": "demo", "inputTokens": 10, "outputTokens": 5, "totalTokens": 15}])
    );
}

#[test]
fn only_the_last_frame_of_an_event_carries_its_id() {
    let mut log = Log::new("t1");
    demo_run(&mut log, "r1", "completed");
    let mut r = AgUiRenderer::new("t1", true);
    for e in &log.events {
        let frames = r.render(e);
        if let Some((last, rest)) = frames.split_last() {
            assert_eq!(last.id.as_deref(), Some(e.id.to_string().as_str()));
            assert!(rest.iter().all(|f| f.id.is_none()));
        }
    }
}

#[test]
fn an_error_run_ends_with_run_error_naming_the_error() {
    let mut log = Log::new("t1");
    demo_run(&mut log, "r1", "error");
    let mut r = AgUiRenderer::new("t1", false);
    let frames = render_all(&mut r, &log.events);
    let last = json_of(frames.last().unwrap());
    assert_eq!(last["type"], "RUN_ERROR");
    assert_eq!(last["message"], "LLM provider 'demo' unavailable");
    let end = frames
        .iter()
        .map(json_of)
        .find(|v| v["type"] == "TEXT_MESSAGE_END" && v["messageId"] == "msg-16");
    assert!(end.is_some(), "the open text is closed before the error");
    // Without the echo the user's message is not streamed.
    assert!(!frames.iter().any(|f| f.data.contains("\"role\":\"user\"")));
}

#[test]
fn a_background_sub_agent_after_run_finish_gets_a_continuation_run() {
    let mut log = Log::new("t1");
    log.push("r1", "o", "run-start", json!({"messageId": "u1"}))
        .push(
            "r1",
            "bg",
            "agent-spawned",
            json!({"parentId": "o", "role": "researcher", "tools": [], "taskId": "k1"}),
        )
        .push("r1", "o", "text-delta", json!({"text": "Started."}))
        .push("r1", "o", "run-finish", json!({"status": "completed"}))
        .push("r1", "bg", "text-delta", json!({"text": "Found it."}))
        .push(
            "r1",
            "bg",
            "agent-completed",
            json!({"role": "researcher", "result": "Found it."}),
        )
        .push("r2", "o", "run-start", json!({"messageId": "u2"}))
        .push("r2", "o", "run-finish", json!({"status": "completed"}));
    let mut r = AgUiRenderer::new("t1", true);
    let frames = render_all(&mut r, &log.events);
    let t = types(&frames);
    assert_eq!(
        t,
        [
            "RUN_STARTED",
            "SUBAGENT_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "SUBAGENT_FINISHED", // suspended
            "RUN_FINISHED",
            "RUN_STARTED", // continuation of r1
            "SUBAGENT_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "SUBAGENT_FINISHED",
            "RUN_FINISHED",
            "RUN_STARTED",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(json_of(&frames[5])["outcome"]["type"], "suspended");
    assert_eq!(json_of(&frames[7])["runId"], "r1");
    assert_eq!(json_of(&frames[12])["outcome"]["type"], "success");
}

#[test]
fn the_join_prelude_reopens_what_is_open() {
    let mut log = Log::new("t1");
    demo_run(&mut log, "r1", "completed");
    // Cut after the sub-agent's tool call (event 10): the delegate call is pending, the
    // sub-agent active, and nothing else open.
    let mut r = AgUiRenderer::new("t1", true);
    for e in &log.events[..10] {
        r.render(e);
    }
    let prelude = r.join_prelude(10, 99);
    let t = types(&prelude);
    assert_eq!(
        t,
        [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STATE_SNAPSHOT",
            "SUBAGENT_STARTED",
            "STEP_STARTED",
            "STEP_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END"
        ]
    );
    assert_eq!(prelude.last().unwrap().id.as_deref(), Some("10"));
    let snapshot = json_of(&prelude[1]);
    let ids: Vec<&str> = snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["u1", "rsn-3", "msg-5"]);
    assert_eq!(
        json_of(&prelude[2])["snapshot"]["tasks"][0]["status"],
        "in_progress"
    );

    // Cut mid-text: the open message is re-opened with its text so far.
    let mut r = AgUiRenderer::new("t1", true);
    for e in &log.events[..5] {
        r.render(e);
    }
    let prelude = r.join_prelude(5, 99);
    let last = json_of(prelude.last().unwrap());
    assert_eq!(last["type"], "TEXT_MESSAGE_CONTENT");
    assert_eq!(last["delta"], "On ");
    assert_eq!(last["messageId"], "msg-5");

    // Nothing open: no prelude.
    let mut r = AgUiRenderer::new("t1", true);
    render_all(&mut r, &log.events);
    assert!(r.join_prelude(99, 99).is_empty());
}
