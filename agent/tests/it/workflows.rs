//! The event-sourced workflow store through the agent's tools, driven by a fake provider (a
//! real HTTP server): create, add, connect, update, validate, remove, delete (destructive);
//! every change is an event of the workflow's own stream in the same log.

use crate::support;

use serde_json::{json, Value};
use support::*;
use threadstream_domain::workflow::stream_id;

/// The tool results the model has seen so far, parsed.
fn results(req: &Value) -> Vec<Value> {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap_or(Value::Null))
        .collect()
}

#[tokio::test]
async fn the_agent_builds_a_workflow_through_its_stream() {
    bounded(120, async {
        let fake = FakeLlm::start_with(|req| {
            let done = results(req);
            let id = done
                .first()
                .and_then(|r| r["id"].as_str())
                .unwrap_or("")
                .to_string();
            let call = |name: &str, args: Value| oai_call(&format!("c{}", done.len()), name, args);
            match done.len() {
                0 => call(
                    "create-workflow",
                    json!({
                        "name": "Weather digest",
                        "nodes": [
                            {"name": "Every morning", "type": "n8n-nodes-base.scheduleTrigger", "parameters": {"hour": 8}},
                            {"name": "Fetch weather", "type": "n8n-nodes-base.httpRequest"}
                        ],
                        "connections": [{"from": "Every morning", "to": "Fetch weather"}]
                    }),
                ),
                1 => call(
                    "add-node",
                    json!({"workflowId": id, "name": "Post", "type": "n8n-nodes-base.slack", "connectFrom": "Fetch weather"}),
                ),
                2 => call(
                    "update-node",
                    json!({"workflowId": id, "node": "Post", "parameters": {"channel": "#weather"}, "position": [500, 320]}),
                ),
                3 => call("validate-workflow", json!({"workflowId": id})),
                4 => call(
                    "add-node",
                    json!({"workflowId": id, "name": "Stray", "type": "n8n-nodes-base.noOp"}),
                ),
                5 => call("validate-workflow", json!({"workflowId": id})),
                6 => call("connect-nodes", json!({"workflowId": id, "from": "Post", "to": "Fetch weather"})),
                7 => call("validate-workflow", json!({"workflowId": id})),
                8 => call("remove-node", json!({"workflowId": id, "node": "Stray"})),
                9 => call("connect-nodes", json!({"workflowId": id, "from": "Post", "to": "Nowhere"})),
                10 => call("get-workflow", json!({"workflowId": id})),
                11 => call("delete-workflow", json!({"workflowId": id})),
                _ => oai_answer("Built, checked and deleted."),
            }
        })
        .await;
        let mut config = openai_config(&fake);
        config.sample_workflows = false;
        let h = harness(config).await;
        start(&h, "t1", "r1", "build a weather digest").await;
        let cr = wait_request(&h, "t1", "r1").await;
        assert_eq!(cr["toolName"], "delete-workflow");
        assert_eq!(cr["severity"], "destructive");
        // Before the deletion: the store has it, as the tools built it.
        let listed = h.rt.workflows().list().await.unwrap();
        assert_eq!(listed.len(), 1);
        let wf = &listed[0];
        assert_eq!(wf.name, "Weather digest");
        let names: Vec<&str> = wf.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["Every morning", "Fetch weather", "Post"]);
        assert!(wf.nodes[0].trigger && !wf.nodes[1].trigger);
        assert_eq!(wf.nodes[0].parameters["hour"], 8);
        assert_eq!(wf.nodes[2].parameters["channel"], "#weather");
        assert_eq!(wf.nodes[2].position, [500, 320]);
        assert_eq!(wf.edges.len(), 3, "{:?}", wf.edges);
        answer(&h, "t1", cr["requestId"].as_str().unwrap(), true, None, None).await;
        let events = wait_finish(&h, "t1", "r1").await;
        assert_eq!(payload(of_type(&events, "run-finish")[0])["status"], "completed");

        // What the model was told.
        let told = results(fake.requests().last().unwrap());
        let wf_id = told[0]["id"].as_str().unwrap().to_string();
        assert_eq!(told[0]["edges"], json!([{"from": "n1", "to": "n2"}]));
        assert_eq!(told[1]["nodeId"], "n3");
        assert_eq!(told[3], json!({"workflowId": wf_id, "valid": true, "issues": []}));
        assert_eq!(told[5]["valid"], false);
        assert_eq!(
            told[5]["issues"],
            json!(["not reachable from the trigger 'Every morning': Stray"])
        );
        let cycle = told[7]["issues"].as_array().unwrap();
        assert!(cycle.iter().any(|i| i.as_str().unwrap().contains("cycle")), "{cycle:?}");
        assert_eq!(told[8]["nodes"].as_array().unwrap().len(), 3);
        // A broken rule is the call's error, named.
        let errors = of_type(&events, "tool-error");
        assert_eq!(errors.len(), 1);
        assert!(payload(errors[0])["error"].as_str().unwrap().contains("no node 'Nowhere'"));
        assert_eq!(told[11], json!({"deleted": wf_id, "name": "Weather digest"}));

        // The workflow's own stream: every change, attributed to the run and its agent.
        let stream = read_all(&h.log, &stream_id(&wf_id)).await;
        let types: Vec<&str> = stream.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(
            types,
            [
                "workflow-created",
                "workflow-node-added",
                "workflow-node-added",
                "workflow-nodes-connected",
                "workflow-node-added",
                "workflow-nodes-connected",
                "workflow-node-updated",
                "workflow-node-added",
                "workflow-nodes-connected",
                "workflow-node-removed",
                "workflow-deleted",
            ]
        );
        assert!(stream.iter().all(|e| e.run_id == "r1" && e.agent_id.starts_with("agent-orch")));
        assert!(stream.iter().all(|e| !e.is_n8n()));
        assert!(h.rt.workflows().list().await.unwrap().is_empty());
        assert!(h.rt.workflows().get(&wf_id).await.unwrap().is_none());
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn samples_are_created_once_and_thread_ids_cannot_take_the_prefix() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![]).await;
        let h = harness(openai_config(&fake)).await;
        let first = h.rt.workflows().list().await.unwrap();
        let ids: Vec<&str> = first.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ids, ["wf-sample-1", "wf-sample-2"]);
        assert!(first[0].validate().is_empty());
        // A second runtime on the same log does not create them again.
        let rt2 =
            threadstream_agent::AgentRuntime::new(h.log.clone(), openai_config(&fake)).unwrap();
        assert_eq!(rt2.workflows().list().await.unwrap().len(), 2);
        assert_eq!(read_all(&h.log, &stream_id("wf-sample-2")).await.len(), 4);
        // Thread commands on a workflow stream, and the reverse, are refused.
        let before = read_all(&h.log, &stream_id("wf-sample-1")).await.len();
        let err = h
            .log
            .append(
                &stream_id("wf-sample-1"),
                vec![threadstream_domain::ThreadCommand::Create {
                    owner: "u1".into(),
                    title: None,
                }],
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, threadstream_store::StoreError::WrongKind { .. }),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "\"workflow:wf-sample-1\" is a workflow stream, not a thread"
        );
        // Nothing of it was stored.
        assert_eq!(
            read_all(&h.log, &stream_id("wf-sample-1")).await.len(),
            before
        );
        let err = h
            .log
            .append(
                "a-thread",
                vec![threadstream_domain::workflow::WorkflowChange {
                    command: threadstream_domain::workflow::WorkflowCommand::Delete,
                    run_id: String::new(),
                    agent_id: String::new(),
                    by: "u1".into(),
                }],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"a-thread\" is a thread, not a workflow stream"
        );
        assert!(threadstream_domain::validate_thread_id("workflow:wf-sample-1").is_err());
        assert!(threadstream_domain::validate_thread_id("my-workflow:1").is_ok());
    })
    .await
}
