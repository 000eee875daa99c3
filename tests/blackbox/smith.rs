//! The workflow-builder stream against the real binary: `POST /smith` (a new
//! workflow) and `POST /smith/{workflow_id}` answer with data-only frames, `workflow_state`
//! follows every tool result, a confirmation shows as a `warning` and can be answered while the
//! stream is open, and `DELETE /smith/{workflow_id}` clears the conversation.

use crate::common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use serde_json::{json, Value};

/// POSTs a prompt and reads the data-only stream to its end, approving confirmations (their
/// request id is in the `warning`). Returns every frame's JSON.
pub(crate) async fn converse(server: &Server, path: &str, prompt: &str) -> Vec<Value> {
    let resp = server
        .client
        .post(server.url(path))
        .json(&json!({"prompt": prompt}))
        .send()
        .await
        .expect("POST smith");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = resp.bytes_stream();
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    loop {
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .unwrap_or_else(|_| panic!("smith stream stalled after {out:?}"));
        let Some(chunk) = chunk else { return out };
        let chunk = chunk.expect("read");
        for item in parser.push(&chunk) {
            let SseItem::Event(e) = item else { continue };
            assert!(
                e.id_field.is_none() && e.event.is_none(),
                "data-only frames: {e:?}"
            );
            let v = e.json();
            if v["type"] == "warning" {
                let msg = v["message"].as_str().unwrap();
                if let Some(rest) = msg.strip_prefix("waiting for confirmation '") {
                    let request_id = rest.split('\'').next().unwrap();
                    server
                        .confirm(request_id, &json!({"kind": "approval", "approved": true}))
                        .await
                        .ok_json("confirm");
                }
            }
            out.push(v);
        }
    }
}

fn of_type<'a>(frames: &'a [Value], ty: &str) -> Vec<&'a Value> {
    frames.iter().filter(|v| v["type"] == ty).collect()
}

#[tokio::test]
async fn a_new_workflow_is_built_over_the_stream() {
    let server = Server::start().await;
    let frames = converse(&server, "/smith", "Build me a weather to Slack workflow").await;
    assert_eq!(frames[0]["type"], "stream_start");
    assert_eq!(frames.last().unwrap()["type"], "stream_end");
    let tokens: String = of_type(&frames, "token")
        .iter()
        .map(|v| v["content"].as_str().unwrap())
        .collect();
    assert!(!tokens.is_empty());
    for call in of_type(&frames, "tool_call") {
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap())
            .expect("arguments are a JSON string");
        assert!(args.is_object());
        assert!(call["call_id"].is_string() && call["name"].is_string());
    }
    let created = of_type(&frames, "tool_call")
        .into_iter()
        .find(|c| c["name"] == "create-workflow")
        .expect("the demo's sub-agent creates a workflow");
    let pos = frames
        .iter()
        .position(|v| v["type"] == "tool_result" && v["call_id"] == created["call_id"])
        .unwrap();
    let state = &frames[pos + 1];
    assert_eq!(state["type"], "workflow_state", "after the tool result");
    assert_eq!(state["workflow_nodes"].as_array().unwrap().len(), 3);
    for n in state["workflow_nodes"].as_array().unwrap() {
        for k in [
            "id",
            "name",
            "type",
            "trigger",
            "parameters",
            "output",
            "position",
        ] {
            assert!(n.get(k).is_some(), "node lacks {k}: {n}");
        }
    }
    // From then on every tool result is followed by the state.
    for (i, v) in frames.iter().enumerate().skip(pos) {
        if v["type"] == "tool_result" {
            assert_eq!(frames[i + 1]["type"], "workflow_state", "after {v}");
        }
    }
    assert_only_workflow_tools(&frames);
}

/// The tools the workflow builder may use (the workflow tools).
const WORKFLOW_TOOLS: &[&str] = &[
    "list-workflows",
    "get-workflow",
    "create-workflow",
    "add-node",
    "connect-nodes",
    "update-node",
    "remove-node",
    "validate-workflow",
    "delete-workflow",
];

fn assert_only_workflow_tools(frames: &[Value]) {
    let calls = of_type(frames, "tool_call");
    assert!(!calls.is_empty());
    for c in calls {
        let name = c["name"].as_str().unwrap();
        assert!(
            WORKFLOW_TOOLS.contains(&name),
            "{name} is not a workflow tool"
        );
    }
}

#[tokio::test]
async fn a_turn_works_on_its_workflow_with_the_workflow_tools_only() {
    let server = Server::start().await;
    let frames = converse(&server, "/smith/wf-sample-1", "Add an email step").await;
    assert_eq!(frames.last().unwrap()["type"], "stream_end");
    assert_only_workflow_tools(&frames);
    let calls = of_type(&frames, "tool_call");
    let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["get-workflow", "add-node", "validate-workflow"]);
    for c in &calls {
        let args: Value = serde_json::from_str(c["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args["workflowId"], "wf-sample-1", "{c}");
    }
    // The change is on that workflow: one more node, connected after the former last one.
    let states = of_type(&frames, "workflow_state");
    let nodes = |s: &Value| s["workflow_nodes"].as_array().unwrap().len();
    assert_eq!(nodes(states.last().unwrap()), nodes(states[0]) + 1);
    let stored = server
        .get("/instance-ai/workflows/wf-sample-1")
        .await
        .ok_json("workflow");
    assert!(stored.to_string().contains("Send Email"), "{stored}");
    let text: String = of_type(&frames, "token")
        .iter()
        .map(|v| v["content"].as_str().unwrap())
        .collect();
    assert!(text.contains("wf-sample-1"), "{text}");

    // Deleting asks first: the confirmation is a warning (approved by `converse`).
    let frames = converse(&server, "/smith/wf-sample-2", "Please delete this workflow").await;
    assert_only_workflow_tools(&frames);
    let warnings = of_type(&frames, "warning");
    assert!(
        warnings
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("confirmation")),
        "the delete asks first: {warnings:?}"
    );
    assert_eq!(frames.last().unwrap()["type"], "stream_end");
    server
        .get("/instance-ai/workflows/wf-sample-2")
        .await
        .error(404, "deleted workflow");
}

#[tokio::test]
async fn an_existing_workflow_conversation_and_its_clearing() {
    let server = Server::start().await;
    let frames = converse(&server, "/smith/wf-sample-1", "Add an email step").await;
    assert_eq!(frames.last().unwrap()["type"], "stream_end");
    let states = of_type(&frames, "workflow_state");
    assert!(!states.is_empty());
    assert!(
        states[0]["workflow_nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["id"].is_string()),
        "{:?}",
        states[0]
    );
    assert_eq!(
        of_type(&frames, "tool_result").len(),
        states.len(),
        "a workflow_state after every tool result"
    );
    // The conversation is a thread; clearing it starts the next one.
    let threads = server.threads().await.to_string();
    assert!(threads.contains("smith-wf-sample-1-0"), "{threads}");
    server
        .delete("/smith/wf-sample-1")
        .await
        .ok_json("DELETE smith");
    let frames = converse(&server, "/smith/wf-sample-1", "crash please").await;
    assert_eq!(
        frames.last().unwrap()["type"],
        "error",
        "an error is terminal"
    );
    assert!(!frames.iter().any(|v| v["type"] == "stream_end"));
    let threads = server.threads().await.to_string();
    assert!(threads.contains("smith-wf-sample-1-1"), "{threads}");
}

#[tokio::test]
async fn bad_input_gets_a_clear_error() {
    let server = Server::start().await;
    let r = server
        .post("/smith/no-such-workflow", &json!({"prompt": "hi"}))
        .await;
    r.error(404, "unknown workflow");
    let r = server.post("/smith", &json!({"prompt": "  "})).await;
    assert_eq!(r.error(422, "empty prompt").0, "empty_prompt");
    let r = server.post("/smith", &json!({})).await;
    r.client_error("missing prompt");
    server
        .delete("/smith/no-such-workflow")
        .await
        .error(404, "unknown workflow");
}
