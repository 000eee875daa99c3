//! The HTTP providers end to end: a fake provider that is a real HTTP server in the test
//! (speaking the OpenAI and Anthropic streaming formats from a per-test script), the real
//! runtime, a real SQLite log. Every event of every test is validated against both published
//! n8n schemas.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;
use threadstream_domain::ThreadCommand;

fn texts(events: &[threadstream_domain::StoredEvent], ty: &str, agent: &str) -> String {
    events
        .iter()
        .filter(|e| e.event_type == ty && e.agent_id == agent)
        .map(|e| payload(e)["text"].as_str().unwrap().to_string())
        .collect()
}

fn last_finish(events: &[threadstream_domain::StoredEvent]) -> Value {
    payload(of_type(events, "run-finish").last().unwrap())
}

#[tokio::test]
async fn openai_text_and_reasoning_stream_as_deltas() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![Reply::stream(vec![
            oai_reasoning("Thinking "),
            oai(json!({"choices":[{"index":0,"delta":{"reasoning":"(ollama style)"}}]})),
            oai_text("Hello"),
            oai_text(", world"),
            oai_finish("stop"),
            oai_usage(42, 3),
            oai_done(),
        ])])
        .await;
        let h = harness(openai_config(&fake)).await;
        let orch = start(&h, "t1", "r1", "say hello").await;
        let events = wait_finish(&h, "t1", "r1").await;
        assert_eq!(
            texts(&events, "reasoning-delta", &orch),
            "Thinking (ollama style)"
        );
        assert_eq!(texts(&events, "text-delta", &orch), "Hello, world");
        assert_eq!(last_finish(&events), json!({"status": "completed"}));
        // Usage is recorded in the log (internal, not on the n8n stream), the answer's and the
        // title's, with the call's provider and timings.
        let usage = of_type(&events, "llm-usage");
        assert_eq!(usage.len(), 2);
        let answer = usage
            .iter()
            .find(|e| payload(e)["inputTokens"] == 42)
            .expect("the answer's usage");
        assert_eq!(
            untimed(payload(answer)),
            json!({"model": "openai/gpt-test", "inputTokens": 42, "outputTokens": 3, "provider": "openai"})
        );
        assert_eq!(answer.agent_id, orch);
        assert!(!answer.is_n8n());
        // The model wrote the title (the fake's answer, cleaned of its quotes and period).
        assert_eq!(
            payload(of_type(&events, "thread-title-updated")[0])["title"],
            "Fake title: say hello"
        );
        assert_eq!(fake.title_requests(), 1);
        // The request: streaming, usage asked for, system + user, the tools offered, the key.
        let req = &fake.requests()[0];
        assert_eq!(req["model"], "gpt-test");
        assert_eq!(req["stream"], true);
        assert_eq!(req["stream_options"]["include_usage"], true);
        assert_eq!(req["messages"][0]["role"], "system");
        assert_eq!(
            req["messages"][1],
            json!({"role": "user", "content": "say hello"})
        );
        let tools: Vec<&str> = req["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        for t in [
            "plan",
            "delegate",
            "ask-user",
            "list-workflows",
            "delete-workflow",
        ] {
            assert!(tools.contains(&t), "{tools:?}");
        }
        assert_eq!(fake.request_headers(0)["authorization"], "Bearer sk-test");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn openai_parallel_tool_calls_split_over_chunks() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            Reply::stream(vec![
                oai_text("Looking."),
                // Two calls, interleaved by index, names and arguments split.
                oai_tool(0, Some("call_a"), Some("list-"), ""),
                oai_tool(1, Some("call_b"), Some("get-work"), "{\"work"),
                oai_tool(0, None, Some("workflows"), "{\"li"),
                oai_tool(1, None, Some("flow"), "flowId\": \"wf-sa"),
                oai_tool(0, None, None, "mit\": 5}"),
                oai_tool(1, None, None, "mple-1\"}"),
                oai_finish("tool_calls"),
                oai_usage(30, 20),
                oai_done(),
            ]),
            oai_answer("You have two workflows."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        let orch = start(&h, "t1", "r1", "what do I have?").await;
        let events = wait_finish(&h, "t1", "r1").await;
        let calls = of_type(&events, "tool-call");
        assert_eq!(calls.len(), 2);
        let (a, b) = (payload(calls[0]), payload(calls[1]));
        assert_eq!(a["toolName"], "list-workflows");
        assert_eq!(a["args"], json!({"limit": 5}));
        assert_eq!(b["toolName"], "get-workflow");
        assert_eq!(b["args"], json!({"workflowId": "wf-sample-1"}));
        let results = of_type(&events, "tool-result");
        assert_eq!(results.len(), 2);
        assert_eq!(payload(results[1])["result"]["name"], "Weather to Slack");
        assert_eq!(
            texts(&events, "text-delta", &orch),
            "Looking.You have two workflows."
        );
        assert_eq!(last_finish(&events)["status"], "completed");
        // The second request carries the calls (with the provider's ids) and both results.
        let req = &fake.requests()[1];
        let msgs = req["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 5, "{msgs:#?}");
        assert_eq!(msgs[2]["role"], "assistant");
        assert_eq!(msgs[2]["content"], "Looking.");
        assert_eq!(msgs[2]["tool_calls"][0]["id"], "call_a");
        assert_eq!(msgs[2]["tool_calls"][1]["function"]["name"], "get-workflow");
        assert_eq!(msgs[3]["role"], "tool");
        assert_eq!(msgs[3]["tool_call_id"], "call_a");
        assert_eq!(msgs[4]["tool_call_id"], "call_b");
        assert!(msgs[4]["content"]
            .as_str()
            .unwrap()
            .contains("Weather to Slack"));
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn anthropic_thinking_text_and_tool_use() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            Reply::stream(vec![
                anth_start(),
                anth(json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})),
                anth(json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Which workflow? "}})),
                anth(json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The first."}})),
                anth(json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}})),
                anth(json!({"type":"content_block_stop","index":0})),
                anth(json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})),
                anth(json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me check."}})),
                anth(json!({"type":"content_block_stop","index":1})),
                anth(json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01","name":"get-workflow","input":{}}})),
                anth(json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}})),
                anth(json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"workflowId\": \"wf-"}})),
                anth(json!({"type":"ping"})),
                anth(json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"sample-2\"}"}})),
                anth(json!({"type":"content_block_stop","index":2})),
            ]
            .into_iter()
            .chain(anth_stop("tool_use", 40))
            .collect()),
            anth_answer("It is the old cleanup job."),
        ])
        .await;
        let mut config = anthropic_config(&fake);
        config.llm.max_tokens = 4096;
        config.llm.anthropic_thinking_budget = 2048;
        let h = harness(config).await;
        let orch = start(&h, "t1", "r1", "what is wf-sample-2?").await;
        let events = wait_finish(&h, "t1", "r1").await;
        assert_eq!(
            texts(&events, "reasoning-delta", &orch),
            "Which workflow? The first."
        );
        assert_eq!(
            texts(&events, "text-delta", &orch),
            "Let me check.It is the old cleanup job."
        );
        let call = payload(of_type(&events, "tool-call")[0]);
        assert_eq!(call["toolName"], "get-workflow");
        assert_eq!(call["args"], json!({"workflowId": "wf-sample-2"}));
        assert_eq!(last_finish(&events)["status"], "completed");
        let reqs = fake.requests();
        // Anthropic usage: input from message_start, output from message_delta.
        let usage: Vec<Value> = of_type(&events, "llm-usage").iter().map(|e| untimed(payload(e))).collect();
        assert!(usage.contains(&json!({"model": "anthropic/claude-test", "inputTokens": 12, "outputTokens": 40, "provider": "anthropic"})), "{usage:?}");
        assert_eq!(reqs[0]["model"], "claude-test");
        assert_eq!(reqs[0]["max_tokens"], 4096);
        assert_eq!(
            reqs[0]["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(reqs[0]["stream"], true);
        assert!(reqs[0]["system"].as_str().unwrap().contains("orchestrator"));
        assert!(reqs[0]["tools"][0]["input_schema"].is_object());
        let headers = fake.request_headers(0);
        assert_eq!(headers["x-api-key"], "ak-test");
        assert_eq!(headers["anthropic-version"], "2023-06-01");
        let msgs = reqs[1]["messages"].as_array().unwrap();
        assert_eq!(msgs[1]["role"], "assistant");
        // The signed thinking block goes back first, verbatim, as the API requires with tools.
        assert_eq!(
            msgs[1]["content"][0],
            json!({"type": "thinking", "thinking": "Which workflow? The first.", "signature": "sig"})
        );
        assert_eq!(msgs[1]["content"][1]["type"], "text");
        assert_eq!(msgs[1]["content"][2]["type"], "tool_use");
        assert_eq!(msgs[1]["content"][2]["id"], "toolu_01");
        assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
        assert_eq!(msgs[2]["content"][0]["tool_use_id"], "toolu_01");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn delegate_runs_a_sub_agent_with_a_clean_context() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            oai_call(
                "c1",
                "delegate",
                json!({"role": "workflow builder", "instructions": "Create a workflow named \"Digest\".", "tools": ["create-workflow", "delegate"]}),
            ),
            // The sub-agent.
            oai_call("s1", "create-workflow", json!({"name": "Digest"})),
            oai_answer("Created Digest."),
            // The orchestrator again.
            oai_answer("Your digest workflow is ready."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        let orch = start(&h, "t1", "r1", "build a digest").await;
        let events = wait_finish(&h, "t1", "r1").await;
        let spawned = of_type(&events, "agent-spawned");
        assert_eq!(spawned.len(), 1);
        let sub = spawned[0].agent_id.clone();
        let sp = payload(spawned[0]);
        assert_eq!(sp["parentId"], orch.as_str());
        assert_eq!(sp["role"], "workflow builder");
        assert_eq!(sp["tools"], json!(["create-workflow"]), "sub-agents cannot delegate");
        let sub_call = events
            .iter()
            .find(|e| e.event_type == "tool-call" && e.agent_id == sub)
            .unwrap();
        assert_eq!(payload(sub_call)["toolName"], "create-workflow");
        assert_eq!(texts(&events, "text-delta", &sub), "Created Digest.");
        let completed = payload(of_type(&events, "agent-completed")[0]);
        assert_eq!(completed["result"], "Created Digest.");
        let delegate_result = events
            .iter()
            .find(|e| e.event_type == "tool-result" && e.agent_id == orch)
            .unwrap();
        assert_eq!(payload(delegate_result)["result"], "Created Digest.");
        // The sub-agent's requests: only its instructions, only its tools.
        let reqs = fake.requests();
        let sub_req = &reqs[1];
        let msgs = sub_req["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 2);
        assert!(msgs[0]["content"].as_str().unwrap().contains("sub-agent"));
        assert_eq!(msgs[1]["content"], "Create a workflow named \"Digest\".");
        let tools: Vec<&str> = sub_req["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(tools, ["create-workflow"]);
        // The orchestrator's last request has the sub-agent's answer as the delegate result.
        let last = &reqs[3]["messages"];
        assert_eq!(last[3]["role"], "tool");
        assert_eq!(last[3]["content"], "Created Digest.");
        assert_eq!(last_finish(&events)["status"], "completed");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn destructive_tool_approved_then_denied() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            oai_call(
                "c1",
                "delete-workflow",
                json!({"workflowId": "wf-sample-2"}),
            ),
            oai_answer("Deleted."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "delete the old one").await;
        let cr = wait_request(&h, "t1", "r1").await;
        assert_eq!(cr["severity"], "destructive");
        assert_eq!(cr["inputType"], "approval");
        assert_eq!(cr["toolName"], "delete-workflow");
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
        let result = of_type(&events, "tool-result");
        assert_eq!(payload(result[0])["result"]["deleted"], "wf-sample-2");
        assert_eq!(last_finish(&events)["status"], "completed");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;

        // Denied: a tool-error that says so, and the model is told.
        fake.push(vec![
            oai_call(
                "c2",
                "delete-workflow",
                json!({"workflowId": "wf-sample-1"}),
            ),
            oai_answer("Kept it."),
        ]);
        start(&h, "t1", "r2", "delete the other one").await;
        let cr = wait_request(&h, "t1", "r2").await;
        answer(
            &h,
            "t1",
            cr["requestId"].as_str().unwrap(),
            false,
            None,
            None,
        )
        .await;
        let events = wait_finish(&h, "t1", "r2").await;
        let err = events
            .iter()
            .find(|e| e.run_id == "r2" && e.event_type == "tool-error")
            .unwrap();
        assert_eq!(
            payload(err)["error"],
            "delete-workflow was denied by the user"
        );
        let told = &fake.requests()[3]["messages"];
        let last = told.as_array().unwrap().last().unwrap();
        assert_eq!(
            last["content"],
            "Error: delete-workflow was denied by the user"
        );
        assert_eq!(last_finish(&events)["status"], "completed");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn ask_user_with_questions_returns_the_answers() {
    bounded(120, async {
        let questions = json!([
            {"id": "q1", "question": "Which channel?", "type": "single", "options": ["#general", "#alerts"]},
            {"id": "q2", "question": "Anything else?", "type": "text"}
        ]);
        let fake = FakeLlm::start(vec![
            oai_call(
                "c1",
                "ask-user",
                json!({"introMessage": "Two quick questions", "questions": questions}),
            ),
            oai_answer("Posting to #alerts."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "set up slack alerts").await;
        let cr = wait_request(&h, "t1", "r1").await;
        assert_eq!(cr["inputType"], "questions");
        assert_eq!(cr["questions"], questions);
        assert_eq!(cr["introMessage"], "Two quick questions");
        assert_eq!(cr["severity"], "info");
        let answers = json!([{"questionId": "q1", "selectedOptions": ["#alerts"]}, {"questionId": "q2", "customText": "no"}]);
        answer(
            &h,
            "t1",
            cr["requestId"].as_str().unwrap(),
            true,
            None,
            Some(answers.clone()),
        )
        .await;
        let events = wait_finish(&h, "t1", "r1").await;
        let result = payload(of_type(&events, "tool-result")[0]);
        assert_eq!(result["result"]["answers"], answers);
        let told = fake.requests()[1]["messages"].as_array().unwrap().clone();
        assert!(told.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("#alerts"));
        assert_eq!(last_finish(&events)["status"], "completed");
        assert_n8n_valid(&events).await;

        // A single free-text question.
        fake.push(vec![
            oai_call("c2", "ask-user", json!({"question": "What is the API key name?"})),
            oai_answer("Thanks."),
        ]);
        start(&h, "t1", "r2", "next").await;
        let cr = wait_request(&h, "t1", "r2").await;
        assert_eq!(cr["inputType"], "text");
        assert_eq!(cr["message"], "What is the API key name?");
        answer(&h, "t1", cr["requestId"].as_str().unwrap(), true, Some("WEATHER_KEY"), None).await;
        let events = wait_finish(&h, "t1", "r2").await;
        let result = events
            .iter()
            .find(|e| e.run_id == "r2" && e.event_type == "tool-result")
            .unwrap();
        assert_eq!(payload(result)["result"]["answer"], "WEATHER_KEY");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn a_new_multi_task_plan_is_reviewed_before_it_runs() {
    bounded(120, async {
        let plan = json!({"tasks": [
            {"id": "t1", "description": "Build the workflow", "status": "todo"},
            {"id": "t2", "description": "Test it", "status": "todo"}
        ]});
        let fake = FakeLlm::start(vec![
            oai_call("c1", "plan", plan.clone()),
            // Rejected with feedback: the model revises the plan.
            oai_call(
                "c2",
                "plan",
                json!({"tasks": [
                    {"id": "t1", "description": "Build the workflow", "status": "todo"},
                    {"id": "t2", "description": "Test it", "status": "todo"},
                    {"id": "t3", "description": "Activate it", "status": "todo"}
                ]}),
            ),
            // Progress on an approved plan needs no review.
            oai_call(
                "c3",
                "plan",
                json!({"tasks": [
                    {"id": "t1", "description": "Build the workflow", "status": "in_progress"},
                    {"id": "t2", "description": "Test it", "status": "todo"},
                    {"id": "t3", "description": "Activate it", "status": "todo"}
                ]}),
            ),
            oai_answer("Working on it."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "build and test a workflow").await;
        let cr = wait_request(&h, "t1", "r1").await;
        assert_eq!(cr["inputType"], "plan-review");
        assert_eq!(cr["tasks"], plan);
        assert_eq!(cr["toolName"], "plan");
        // Nothing is published before the review.
        let events = read_all(&h.log, "t1").await;
        assert!(of_type(&events, "tasks-update").is_empty());
        answer(
            &h,
            "t1",
            cr["requestId"].as_str().unwrap(),
            false,
            Some("Also activate it"),
            None,
        )
        .await;
        let cr2 = wait_request(&h, "t1", "r1").await;
        assert_eq!(cr2["tasks"]["tasks"].as_array().unwrap().len(), 3);
        answer(
            &h,
            "t1",
            cr2["requestId"].as_str().unwrap(),
            true,
            None,
            None,
        )
        .await;
        let events = wait_finish(&h, "t1", "r1").await;
        let err = payload(of_type(&events, "tool-error")[0]);
        assert_eq!(err["error"], "The user rejected the plan: Also activate it");
        let updates = of_type(&events, "tasks-update");
        assert_eq!(updates.len(), 2, "the approved plan and its progress");
        let answered = of_type(&events, "confirmation-answered");
        assert!(answered[1].id < updates[0].id);
        assert_eq!(of_type(&events, "confirmation-request").len(), 2);
        assert_eq!(
            payload(updates[1])["tasks"]["tasks"][0]["status"],
            "in_progress"
        );
        assert_eq!(last_finish(&events)["status"], "completed");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn rate_limited_then_success_honours_retry_after() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            Reply::Status {
                code: 429,
                headers: vec![("retry-after", "1".into())],
                body: json!({"error": {"message": "slow down"}}).to_string(),
            },
            Reply::status(503, "{\"error\":{\"message\":\"overloaded\"}}"),
            oai_answer("Finally."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        let t0 = Instant::now();
        let orch = start(&h, "t1", "r1", "hi").await;
        let events = wait_finish(&h, "t1", "r1").await;
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(950),
            "Retry-After: 1 was not honoured: {took:?}"
        );
        assert_eq!(fake.requests().len(), 3);
        assert_eq!(texts(&events, "text-delta", &orch), "Finally.");
        assert!(of_type(&events, "error").is_empty());
        assert_eq!(last_finish(&events)["status"], "completed");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn rate_limited_then_success_honours_retry_after_as_an_http_date() {
    bounded(120, async {
        // Whole seconds: 3 s ahead is more than 2 s ahead once written.
        let until = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(3));
        let fake = FakeLlm::start(vec![
            Reply::Status {
                code: 429,
                headers: vec![("retry-after", until.clone())],
                body: json!({"error": {"message": "slow down"}}).to_string(),
            },
            oai_answer("Later."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        let t0 = Instant::now();
        // What is left of the wait when the run starts (setting the harness up took some), up
        // to the pause's cap.
        let due = httpdate::parse_http_date(&until)
            .unwrap()
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default()
            .min(fast_http().backoff_max);
        assert!(
            due >= Duration::from_millis(500),
            "the harness took {due:?} too long"
        );
        let orch = start(&h, "t1", "r1", "hi").await;
        let events = wait_finish(&h, "t1", "r1").await;
        let took = t0.elapsed();
        assert!(
            took + Duration::from_millis(50) >= due,
            "a Retry-After date was not honoured: {took:?} of {due:?}"
        );
        assert_eq!(fake.requests().len(), 2);
        assert_eq!(texts(&events, "text-delta", &orch), "Later.");
        assert_eq!(last_finish(&events)["status"], "completed");
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn server_errors_until_the_retries_run_out() {
    bounded(120, async {
        let fail = || Reply::status(500, "{\"error\":{\"message\":\"internal trouble\"}}");
        let fake = FakeLlm::start(vec![fail(), fail(), fail(), oai_answer("never read")]).await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "hi").await;
        let events = wait_finish(&h, "t1", "r1").await;
        // max_retries = 2: three attempts, then the error.
        assert_eq!(fake.requests().len(), 3);
        assert_eq!(fake.remaining(), 1);
        let err = payload(of_type(&events, "error")[0]);
        assert_eq!(err["statusCode"], 500);
        assert_eq!(err["provider"], "openai");
        assert!(err["content"].as_str().unwrap().contains("internal trouble"), "{err}");
        let fin = last_finish(&events);
        assert_eq!(fin["status"], "error");
        assert!(fin["reason"].as_str().unwrap().contains("500"), "{fin}");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;

        // A 4xx other than 429 is not retried (Anthropic's error body shape).
        let fake = FakeLlm::start(vec![Reply::status(
            401,
            "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}",
        )])
        .await;
        let h = harness(anthropic_config(&fake)).await;
        start(&h, "t2", "r1", "hi").await;
        let events = wait_finish(&h, "t2", "r1").await;
        assert_eq!(fake.requests().len(), 1);
        let err = payload(of_type(&events, "error")[0]);
        assert_eq!(err["statusCode"], 401);
        assert_eq!(err["provider"], "anthropic");
        assert!(err["content"].as_str().unwrap().contains("invalid x-api-key"));
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn a_malformed_chunk_ends_the_run_with_an_error() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![Reply::stream(vec![
            oai_text("Partial "),
            "data: {\"choices\": [{\"delta\": {\"content\": \"oops\"\n\n".to_string(),
            oai_text("never seen"),
            oai_done(),
        ])])
        .await;
        let h = harness(openai_config(&fake)).await;
        let orch = start(&h, "t1", "r1", "hi").await;
        let events = wait_finish(&h, "t1", "r1").await;
        assert_eq!(texts(&events, "text-delta", &orch), "Partial ");
        let err = payload(of_type(&events, "error")[0]);
        assert_eq!(err["provider"], "openai");
        assert!(
            err["content"].as_str().unwrap().contains("malformed chunk"),
            "{err}"
        );
        let fin = last_finish(&events);
        assert_eq!(fin["status"], "error");
        assert!(
            fin["reason"].as_str().unwrap().contains("malformed"),
            "{fin}"
        );
        assert_n8n_valid(&events).await;

        // Anthropic: an `error` event in the middle of the stream.
        let fake = FakeLlm::start(vec![Reply::stream(vec![
            anth_start(),
            anth(
                json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            ),
        ])])
        .await;
        let h = harness(anthropic_config(&fake)).await;
        start(&h, "t2", "r1", "hi").await;
        let events = wait_finish(&h, "t2", "r1").await;
        let err = payload(of_type(&events, "error")[0]);
        assert_eq!(err["provider"], "anthropic");
        assert!(err["content"]
            .as_str()
            .unwrap()
            .contains("overloaded_error"));
        assert_eq!(last_finish(&events)["status"], "error");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn cancel_mid_stream_closes_the_provider_connection() {
    bounded(120, async {
        for anthropic in [false, true] {
            let frames = if anthropic {
                vec![
                    anth_start(),
                    anth(json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
                    anth(json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Once upon "}})),
                ]
            } else {
                vec![oai_text("Once upon "), oai_text("a time")]
            };
            let fake = FakeLlm::start(vec![Reply::Stream {
                frames,
                delay: Duration::from_millis(1),
                hang: true,
            }])
            .await;
            let config = if anthropic {
                anthropic_config(&fake)
            } else {
                openai_config(&fake)
            };
            let h = harness(config).await;
            start(&h, "t1", "r1", "tell me a story").await;
            wait_until(&h.log, "t1", Duration::from_secs(10), |e| {
                !of_type(e, "text-delta").is_empty()
            })
            .await;
            assert_eq!(fake.closed_early(), 0);
            let t0 = Instant::now();
            h.log
                .append(
                    "t1",
                    vec![ThreadCommand::Cancel {
                        by: "u1".into(),
                        reason: "user_cancelled".into(),
                    }],
                )
                .await
                .unwrap();
            let events = wait_finish(&h, "t1", "r1").await;
            assert_eq!(
                last_finish(&events),
                json!({"status": "cancelled", "reason": "user_cancelled"})
            );
            // The fake provider sees its connection go.
            while fake.closed_early() == 0 {
                assert!(
                    t0.elapsed() < Duration::from_secs(2),
                    "the provider never saw the connection close"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert_n8n_valid(&events).await;
            wait_idle(&h.rt).await;
        }
    })
    .await
}

#[tokio::test]
async fn arguments_that_are_not_json_are_the_models_to_fix() {
    bounded(120, async {
        let fake = FakeLlm::start(vec![
            Reply::stream(vec![
                oai_tool(
                    0,
                    Some("c1"),
                    Some("get-workflow"),
                    "{\"workflowId\": wf-sample-1}",
                ),
                oai_finish("tool_calls"),
                oai_done(),
            ]),
            oai_call("c2", "get-workflow", json!({"workflowId": "wf-sample-1"})),
            oai_answer("Fixed it."),
        ])
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "show wf-sample-1").await;
        let events = wait_finish(&h, "t1", "r1").await;
        let calls = of_type(&events, "tool-call");
        assert_eq!(calls.len(), 2);
        assert_eq!(payload(calls[0])["args"], json!({}));
        let err = payload(of_type(&events, "tool-error")[0]);
        assert!(
            err["error"].as_str().unwrap().contains("not a JSON object"),
            "{err}"
        );
        assert_eq!(of_type(&events, "tool-result").len(), 1);
        // The model was told, under its own call id.
        let told = fake.requests()[1]["messages"].as_array().unwrap().clone();
        assert_eq!(told[2]["tool_calls"][0]["id"], "c1");
        assert_eq!(told[3]["tool_call_id"], "c1");
        assert!(told[3]["content"]
            .as_str()
            .unwrap()
            .starts_with("Error: Invalid call"));
        assert_eq!(last_finish(&events)["status"], "completed");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

/// The idle timeout counts from the last piece of the body, not from the start of the answer:
/// a stream slower in total than the timeout, with no gap as long, is read to its end.
#[tokio::test]
async fn a_slow_stream_with_short_gaps_does_not_time_out() {
    bounded(120, async {
        let mut frames: Vec<String> = (0..8).map(|i| oai_text(&format!("w{i} "))).collect();
        frames.push(oai_finish("stop"));
        frames.push(oai_done());
        let fake = FakeLlm::start(vec![Reply::Stream {
            frames,
            delay: Duration::from_millis(100),
            hang: false,
        }])
        .await;
        let mut config = openai_config(&fake);
        config.llm.http.idle_timeout = Duration::from_millis(300);
        let h = harness(config).await;
        let orch = start(&h, "t1", "r1", "hi").await;
        let events = wait_finish(&h, "t1", "r1").await;
        assert_eq!(
            texts(&events, "text-delta", &orch),
            "w0 w1 w2 w3 w4 w5 w6 w7 "
        );
        assert!(of_type(&events, "error").is_empty());
        assert_eq!(last_finish(&events)["status"], "completed");
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn a_stalled_stream_times_out() {
    bounded(120, async {
        // One delta, then silence (no bytes at all) for longer than the idle timeout.
        let fake = FakeLlm::start(vec![Reply::Stall(vec![oai_text("Hmm")])]).await;
        let mut config = openai_config(&fake);
        config.llm.http.idle_timeout = Duration::from_millis(300);
        let h = harness(config).await;
        let orch = start(&h, "t1", "r1", "hi").await;
        let events = wait_finish(&h, "t1", "r1").await;
        assert_eq!(texts(&events, "text-delta", &orch), "Hmm");
        let err = payload(of_type(&events, "error")[0]);
        assert!(
            err["content"].as_str().unwrap().contains("stalled"),
            "{err}"
        );
        assert_eq!(last_finish(&events)["status"], "error");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

/// An `llm-usage` payload without its timings, once they are checked to be there: the call's
/// start (epoch ms, recent) and its time to the first chunk.
fn untimed(mut usage: Value) -> Value {
    let map = usage.as_object_mut().expect("an object");
    let started = map.remove("startedAt").and_then(|v| v.as_i64());
    assert!(
        started.is_some_and(|t| t > 1_700_000_000_000),
        "startedAt: {started:?}"
    );
    let first = map.remove("firstChunkMs").and_then(|v| v.as_i64());
    assert!(
        first.is_some_and(|ms| (0..60_000).contains(&ms)),
        "firstChunkMs: {first:?}"
    );
    usage
}
