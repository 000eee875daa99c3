use super::*;
use serde_json::json;
use serde_json::Value;

fn ev(agent: &str, v: Value) -> AgentEvent {
    let mut raw = v;
    raw["runId"] = json!("r1");
    raw["agentId"] = json!(agent);
    serde_json::from_value(raw).unwrap()
}

#[test]
fn text_tool_and_child_fold_like_n8n() {
    let mut s = AgentRunState::new("o");
    let events = [
        ev(
            "o",
            json!({"type":"run-start","payload":{"messageId":"m"},"ts":0}),
        ),
        ev(
            "o",
            json!({"type":"text-delta","payload":{"text":"Hel"},"responseId":"x"}),
        ),
        ev(
            "o",
            json!({"type":"text-delta","payload":{"text":"lo"},"responseId":"x"}),
        ),
        ev(
            "o",
            json!({"type":"tool-call","payload":{"toolCallId":"t1","toolName":"plan","args":{"a":1}},"ts":1000}),
        ),
        ev(
            "o",
            json!({"type":"tool-result","payload":{"toolCallId":"t1","result":null},"ts":2000}),
        ),
        ev(
            "s",
            json!({"type":"agent-spawned","payload":{"parentId":"o","role":"builder","tools":[]},"responseId":"x"}),
        ),
        ev(
            "o",
            json!({"type":"run-finish","payload":{"status":"completed"}}),
        ),
    ];
    for e in &events {
        s.reduce(e);
    }
    let tree = serde_json::to_value(s.to_agent_tree()).unwrap();
    assert_eq!(
        tree,
        json!({"agentId":"o","role":"orchestrator","status":"completed","textContent":"Hello","reasoning":"",
            "toolCalls":[{"toolCallId":"t1","toolName":"plan","args":{"a":1},"isLoading":false,"renderHint":"planner",
                "startedAt":"1970-01-01T00:00:01.000Z","result":null,"completedAt":"1970-01-01T00:00:02.000Z"}],
            "children":[{"agentId":"s","role":"builder","tools":[],"status":"active","textContent":"","reasoning":"",
                "toolCalls":[],"children":[],"timeline":[]}],
            "timeline":[{"type":"text","content":"Hello","responseId":"x"},{"type":"tool-call","toolCallId":"t1"},
                {"type":"child","agentId":"s","responseId":"x"}]})
    );
    // The stored state reads back equal, `result: null` included.
    let stored = serde_json::to_string(&s).unwrap();
    let back: AgentRunState = serde_json::from_str(&stored).unwrap();
    assert_eq!(back, s);
}

#[test]
fn late_keys_follow_assignment_order() {
    let mut s = AgentRunState::new("o");
    s.reduce(&ev(
        "o",
        json!({"type":"tool-call","payload":{"toolCallId":"t","toolName":"x","args":{}}}),
    ));
    s.reduce(&ev(
        "o",
        json!({"type":"tool-error","payload":{"toolCallId":"t","error":"boom"},"ts":5}),
    ));
    s.reduce(&ev("o", json!({"type":"confirmation-request","payload":{"requestId":"q","toolCallId":"t","toolName":"x","args":{},"severity":"info","message":"ok?"}})));
    s.reduce(&ev(
        "o",
        json!({"type":"tool-result","payload":{"toolCallId":"t","result":1},"ts":6}),
    ));
    let text = serde_json::to_string(&s.to_agent_tree().tool_calls[0]).unwrap();
    assert_eq!(
        text,
        r#"{"toolCallId":"t","toolName":"x","args":{},"isLoading":false,"renderHint":"default","error":"boom","completedAt":"1970-01-01T00:00:00.006Z","confirmation":{"requestId":"q","severity":"info","message":"ok?"},"result":1}"#
    );
}

#[test]
fn self_parent_cycle_is_cut_not_overflowed() {
    let mut s = AgentRunState::new("o");
    s.reduce(&ev(
        "o",
        json!({"type":"agent-spawned","payload":{"parentId":"o","role":"again","tools":[]}}),
    ));
    let tree = s.to_agent_tree();
    assert_eq!(tree.role, "again");
    assert!(tree.children.is_empty());
    assert_eq!(tree.timeline.len(), 1);
}

#[test]
fn deep_chains_stop_at_the_depth_cap() {
    let mut s = AgentRunState::new("a0");
    for i in 1..1000 {
        s.reduce(&ev(
            &format!("a{i}"),
            json!({"type":"agent-spawned","payload":{"parentId":format!("a{}", i - 1),"role":"r","tools":[]}}),
        ));
    }
    let mut depth = 1;
    let mut node = &s.to_agent_tree();
    while let Some(c) = node.children.first() {
        depth += 1;
        node = c;
    }
    assert_eq!(depth, MAX_TREE_DEPTH);
}
