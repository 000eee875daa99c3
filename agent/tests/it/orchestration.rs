//! The orchestrator against a fake provider (a real HTTP server): multi-turn history rebuilt
//! from the log, the stuck-loop stop, the confirmation timeout, a pending confirmation answered
//! after a restart, and the summary taking over when the history passes its budget. Every event
//! is validated against both published n8n schemas.

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use threadstream_agent::{AgentRuntime, Recovery};
use threadstream_store::{Durability, EventLog};

fn last_finish(events: &[threadstream_domain::StoredEvent]) -> Value {
    payload(of_type(events, "run-finish").last().unwrap())
}

#[tokio::test]
async fn the_model_sees_earlier_turns_rebuilt_from_the_log() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            oai_call("c1", "get-workflow", json!({"workflowId": "wf-sample-1"})),
            oai_answer("It has 3 nodes."),
            oai_answer("You asked about Weather to Slack."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "how big is wf-sample-1?").await;
        wait_finish(&h, "t1", "r1").await;
        wait_idle(&h.rt).await;
        start(&h, "t1", "r2", "what did I ask before?").await;
        let events = wait_finish(&h, "t1", "r2").await;
        let msgs = fake.requests()[2]["messages"].as_array().unwrap().clone();
        // system, user 1, assistant (call), tool result, assistant text, user 2
        assert_eq!(msgs.len(), 6, "{msgs:#?}");
        assert_eq!(
            msgs[1],
            json!({"role": "user", "content": "how big is wf-sample-1?"})
        );
        assert_eq!(msgs[2]["tool_calls"][0]["function"]["name"], "get-workflow");
        assert_eq!(
            msgs[2]["tool_calls"][0]["function"]["arguments"],
            "{\"workflowId\":\"wf-sample-1\"}"
        );
        let call_id = msgs[2]["tool_calls"][0]["id"].as_str().unwrap();
        assert!(call_id.starts_with("tc-"), "the log's id: {call_id}");
        assert_eq!(msgs[3]["role"], "tool");
        assert_eq!(msgs[3]["tool_call_id"], call_id);
        assert!(msgs[3]["content"]
            .as_str()
            .unwrap()
            .contains("Weather to Slack"));
        assert_eq!(
            msgs[4],
            json!({"role": "assistant", "content": "It has 3 nodes."})
        );
        assert_eq!(
            msgs[5],
            json!({"role": "user", "content": "what did I ask before?"})
        );
        // No second title.
        assert_eq!(of_type(&events, "thread-title-updated").len(), 1);
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn the_same_failing_call_twice_stops_the_loop() {
    bounded(120, async {
        let bad = || oai_call("c", "get-workflow", json!({"workflowId": "wf-missing"}));
        let fake = FakeLlm::start(vec![bad(), bad(), oai_answer("never asked")]).await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "show wf-missing").await;
        let events = wait_finish(&h, "t1", "r1").await;
        assert_eq!(fake.requests().len(), 2);
        assert_eq!(of_type(&events, "tool-error").len(), 2);
        let err = payload(of_type(&events, "error")[0]);
        let content = err["content"].as_str().unwrap();
        assert!(
            content.contains("'get-workflow' failed twice in a row"),
            "{content}"
        );
        assert!(
            content.contains("Workflow 'wf-missing' not found"),
            "{content}"
        );
        let fin = last_finish(&events);
        assert_eq!(fin["status"], "error");
        assert!(fin["reason"].as_str().unwrap().contains("twice in a row"));
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

/// Arguments the model got wrong are the call's `tool-error`, naming the argument and what is
/// wrong with it (the tool's typed arguments), and the model is told so it can retry.
#[tokio::test]
async fn wrong_arguments_are_a_tool_error_naming_the_argument() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            oai_call(
                "c1",
                "add-node",
                json!({"workflowId": "wf-sample-1", "name": "  ", "type": "n8n-nodes-base.set"}),
            ),
            oai_call("c2", "list-workflows", json!({"limit": 0})),
            oai_answer("Sorry, let me fix that."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "add a node").await;
        let events = wait_finish(&h, "t1", "r1").await;
        let errors: Vec<String> = of_type(&events, "tool-error")
            .into_iter()
            .map(|e| payload(e)["error"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(errors[0], "invalid argument 'name': must not be empty");
        assert!(
            errors[1].starts_with("invalid argument 'limit':"),
            "{errors:?}"
        );
        // The model saw both errors and answered.
        let last = fake.requests().last().cloned().unwrap();
        let told: Vec<&str> = last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str())
            .collect();
        assert!(told[0].contains("'name': must not be empty"), "{told:?}");
        assert!(told[1].contains("'limit'"), "{told:?}");
        assert_eq!(last_finish(&events)["status"], "completed");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn an_unanswered_confirmation_times_out() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![oai_call(
            "c1",
            "delete-workflow",
            json!({"workflowId": "wf-sample-2"}),
        )])
        .await;
        let mut config = openai_config(&fake);
        config.confirmation_timeout = Duration::from_millis(300);
        let h = harness(config).await;
        start(&h, "t1", "r1", "delete the old one").await;
        let cr = wait_request(&h, "t1", "r1").await;
        let events = wait_finish(&h, "t1", "r1").await;
        assert_eq!(
            last_finish(&events),
            json!({"status": "cancelled", "reason": "timeout"})
        );
        let err = payload(of_type(&events, "tool-error")[0]);
        assert_eq!(err["toolCallId"], cr["toolCallId"]);
        assert_eq!(err["error"], "The confirmation was not answered in time");
        // Too late to answer now.
        let late = h
            .log
            .append(
                "t1",
                vec![threadstream_domain::ThreadCommand::AnswerConfirmation {
                    request_id: cr["requestId"].as_str().unwrap().into(),
                    approved: true,
                    user_input: None,
                    answers: None,
                    by: "u1".into(),
                }],
            )
            .await;
        assert!(late.is_err());
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

async fn reopen(h: Harness, fake: &FakeLlm) -> Harness {
    h.rt.shutdown();
    wait_idle(&h.rt).await;
    h.log.shutdown().await;
    let Harness { dir, .. } = h;
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let rt = AgentRuntime::new(log.clone(), openai_config(fake)).unwrap();
    Harness { dir, log, rt }
}

#[tokio::test]
async fn a_pending_confirmation_survives_a_restart() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            oai_text_then_call(),
            oai_answer("Deleted after the restart."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "delete the old one").await;
        let cr = wait_request(&h, "t1", "r1").await;

        // The process stops while the run waits; a new one starts on the same log.
        let h = reopen(h, &fake).await;
        assert_eq!(
            h.rt.recover("t1").await.unwrap(),
            Recovery::Resumed {
                run_id: "r1".into()
            }
        );
        let st = h.log.thread_state("t1").await.unwrap();
        assert!(st.is_suspended(), "still waiting for the answer");
        answer(
            &h,
            "t1",
            cr["requestId"].as_str().unwrap(),
            true,
            None,
            None,
        )
        .await;
        let events = wait_finish(&h, "t1", "r1").await;
        let result = payload(of_type(&events, "tool-result")[0]);
        assert_eq!(result["toolCallId"], cr["toolCallId"]);
        assert_eq!(result["result"]["deleted"], "wf-sample-2");
        assert_eq!(last_finish(&events)["status"], "completed");
        // The resumed model call saw the whole run so far: the text, the call, its result.
        let msgs = fake.requests()[1]["messages"].as_array().unwrap().clone();
        assert_eq!(msgs[1]["content"], "delete the old one");
        assert_eq!(msgs[2]["content"], "I will delete it.");
        assert_eq!(
            msgs[2]["tool_calls"][0]["function"]["name"],
            "delete-workflow"
        );
        assert_eq!(msgs[3]["role"], "tool");
        assert!(msgs[3]["content"].as_str().unwrap().contains("wf-sample-2"));
        // One confirmation request, not a second one after the restart.
        assert_eq!(of_type(&events, "confirmation-request").len(), 1);
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn an_answer_given_while_no_process_ran_the_run_is_used() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            oai_text_then_call(),
            oai_answer("Deleted with the earlier answer."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "delete the old one").await;
        let cr = wait_request(&h, "t1", "r1").await;
        let h = reopen(h, &fake).await;
        // Answered before any runtime took the run back (another instance took the request).
        answer(
            &h,
            "t1",
            cr["requestId"].as_str().unwrap(),
            true,
            None,
            None,
        )
        .await;
        assert!(!h.log.thread_state("t1").await.unwrap().is_suspended());
        assert_eq!(
            h.rt.recover("t1").await.unwrap(),
            Recovery::Resumed {
                run_id: "r1".into()
            }
        );
        let events = wait_finish(&h, "t1", "r1").await;
        let settled: Vec<_> = events
            .iter()
            .filter(|e| {
                (e.event_type == "tool-result" || e.event_type == "tool-error")
                    && payload(e)["toolCallId"] == cr["toolCallId"]
            })
            .collect();
        assert_eq!(settled.len(), 1);
        assert_eq!(settled[0].event_type, "tool-result");
        assert_eq!(last_finish(&events)["status"], "completed");
        assert_eq!(of_type(&events, "confirmation-request").len(), 1);
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

fn oai_text_then_call() -> Reply {
    Reply::stream(vec![
        oai_text("I will delete it."),
        oai_tool(0, Some("c1"), Some("delete-workflow"), "{\"workflowId\":"),
        oai_tool(0, None, None, "\"wf-sample-2\"}"),
        oai_finish("tool_calls"),
        oai_done(),
    ])
}

#[tokio::test]
async fn the_timeout_counts_across_a_restart() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![oai_call(
            "c1",
            "delete-workflow",
            json!({"workflowId": "wf-sample-2"}),
        )])
        .await;
        let mut config = openai_config(&fake);
        config.confirmation_timeout = Duration::from_millis(1500);
        let h = harness(config.clone()).await;
        start(&h, "t1", "r1", "delete the old one").await;
        wait_request(&h, "t1", "r1").await;
        // Down for longer than the timeout: the resumed run does not wait another 1.5 s.
        h.rt.shutdown();
        wait_idle(&h.rt).await;
        h.log.shutdown().await;
        tokio::time::sleep(Duration::from_millis(1600)).await;
        let Harness { dir, .. } = h;
        let log = EventLog::open_sqlite(dir.path(), Durability::Full)
            .await
            .unwrap();
        let rt = AgentRuntime::new(log.clone(), config).unwrap();
        let h = Harness { dir, log, rt };
        let t0 = std::time::Instant::now();
        assert!(matches!(
            h.rt.recover("t1").await.unwrap(),
            Recovery::Resumed { .. }
        ));
        let events = wait_finish(&h, "t1", "r1").await;
        assert!(
            t0.elapsed() < Duration::from_millis(350),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(
            last_finish(&events),
            json!({"status": "cancelled", "reason": "timeout"})
        );
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn a_sub_agent_waiting_on_a_confirmation_survives_a_restart() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            oai_call(
                "c1",
                "delegate",
                json!({"role": "janitor", "instructions": "Delete wf-sample-2.", "tools": ["delete-workflow"]}),
            ),
            oai_call("s1", "delete-workflow", json!({"workflowId": "wf-sample-2"})),
            oai_answer("Deleted wf-sample-2."),
            oai_answer("The janitor deleted it."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "clean up").await;
        let cr = wait_request(&h, "t1", "r1").await;
        let h = reopen(h, &fake).await;
        assert!(matches!(
            h.rt.recover("t1").await.unwrap(),
            Recovery::Resumed { .. }
        ));
        answer(&h, "t1", cr["requestId"].as_str().unwrap(), false, None, None).await;
        let events = wait_finish(&h, "t1", "r1").await;
        let completed = of_type(&events, "agent-completed");
        assert_eq!(completed.len(), 1);
        assert_eq!(payload(completed[0])["result"], "Deleted wf-sample-2.");
        let err = payload(of_type(&events, "tool-error")[0]);
        assert_eq!(err["error"], "delete-workflow was denied by the user");
        // The sub-agent's resumed call had its own context back.
        let sub_req = &fake.requests()[2]["messages"];
        assert_eq!(sub_req[1]["content"], "Delete wf-sample-2.");
        assert_eq!(sub_req[3]["content"], "Error: delete-workflow was denied by the user");
        assert_eq!(last_finish(&events)["status"], "completed");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn a_run_that_was_executing_is_finished_as_interrupted() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![Reply::Stream {
            frames: vec![oai_text("Working")],
            delay: Duration::from_millis(1),
            hang: true,
        }])
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "hi").await;
        wait_until(&h.log, "t1", Duration::from_secs(10), |e| {
            !of_type(e, "text-delta").is_empty()
        })
        .await;
        let h = reopen(h, &fake).await;
        assert_eq!(
            h.rt.recover("t1").await.unwrap(),
            Recovery::Interrupted {
                run_id: "r1".into()
            }
        );
        let events = read_all(&h.log, "t1").await;
        assert_eq!(
            last_finish(&events),
            json!({"status": "error", "reason": "interrupted"})
        );
        assert_eq!(h.rt.recover("t1").await.unwrap(), Recovery::Idle);
        assert_n8n_valid(&events).await;
    })
    .await
}

#[tokio::test]
async fn a_summary_replaces_the_history_past_its_budget() {
    bounded(120, async {
        let long = format!("The first answer {}", "is long ".repeat(250));
        let fake = FakeLlm::start(vec![
            oai_answer(&long),
            // Run 2: first the summary call, then the turn itself.
            oai_answer("Goal: test. Important facts: none. Current state: talking. Open issues: none. Next step: answer."),
            oai_answer("Second answer."),
            // Run 3 uses the stored summary (still under budget: no new summary call).
            oai_answer("Third answer."),
        ])
        .await;
        let mut config = openai_config(&fake);
        // The first run (~500 estimated tokens) passes it; the summary and run 2 do not.
        config.summary_token_budget = 300;
        let h = harness(config).await;
        start(&h, "t1", "r1", "first question").await;
        wait_finish(&h, "t1", "r1").await;
        wait_idle(&h.rt).await;
        start(&h, "t1", "r2", "second question").await;
        wait_finish(&h, "t1", "r2").await;
        wait_idle(&h.rt).await;
        start(&h, "t1", "r3", "third").await;
        let events = wait_finish(&h, "t1", "r3").await;
        let reqs = fake.requests();
        assert_eq!(reqs.len(), 4);
        // The summary call: no tools, the transcript to summarize.
        assert!(reqs[1].get("tools").is_none());
        assert!(reqs[1]["messages"][0]["content"].as_str().unwrap().contains("summarize"));
        let transcript = reqs[1]["messages"][1]["content"].as_str().unwrap();
        assert!(transcript.contains("User: first question"), "{transcript}");
        assert!(transcript.contains("The first answer"), "{transcript}");
        // The turn after it sees the summary instead of the first run.
        let msgs = reqs[2]["messages"].as_array().unwrap();
        assert!(msgs[1]["content"].as_str().unwrap().contains("<conversation-summary>"));
        assert!(msgs[1]["content"].as_str().unwrap().contains("Goal: test."));
        assert!(!msgs.iter().any(|m| m["content"] == "first question"));
        assert_eq!(msgs.last().unwrap()["content"], "second question");
        // Stored as an internal event; the n8n stream never carries it.
        let summaries = of_type(&events, "conversation-summary");
        assert_eq!(summaries.len(), 1);
        assert_eq!(summaries[0].run_id, "r2");
        assert!(!summaries[0].is_n8n());
        // Run 3: summary + run 2 + its own message.
        let msgs = reqs[3]["messages"].as_array().unwrap();
        assert!(msgs[1]["content"].as_str().unwrap().contains("Goal: test."));
        assert_eq!(msgs[3]["content"], "second question");
        assert_eq!(msgs[4]["content"], "Second answer.");
        assert_eq!(msgs[5]["content"], "third");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}
