//! Background tasks: `delegate` with `background: true`, the limit of 5 running tasks, the
//! status read model listing them, cancelling and correcting one task through the log, tasks
//! outliving their run (the thread takes new messages meanwhile), the follow-up run in the same
//! message group once they have all settled, and tasks interrupted by a restart. The fake
//! provider (a real HTTP server) answers from the request body, since tasks call it
//! concurrently.

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use threadstream_agent::orchestrator::TASK_LIMIT_ERROR;
use threadstream_domain::{StoredEvent, ThreadCommand};
use threadstream_projections::{ReadModel, Status};

fn status(events: &[StoredEvent]) -> Value {
    let mut doc = <Status as ReadModel>::Doc::default();
    for e in events {
        Status::apply(&mut doc, e);
    }
    Status::render(&doc)
}

fn is_sub_agent(req: &Value) -> bool {
    req["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .contains("You are a sub-agent")
}

fn user_texts(req: &Value) -> Vec<String> {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

/// One OpenAI answer with several tool calls.
fn oai_calls(calls: &[(&str, &str, Value)]) -> Reply {
    let mut frames = Vec::new();
    for (i, (id, name, args)) in calls.iter().enumerate() {
        frames.push(oai_tool(i as u64, Some(id), Some(name), &args.to_string()));
    }
    frames.push(oai_finish("tool_calls"));
    frames.push(oai_done());
    Reply::stream(frames)
}

fn slow_answer(text: &str, delay_ms: u64) -> Reply {
    let mut frames: Vec<String> = text.split_inclusive(' ').map(oai_text).collect();
    frames.push(oai_finish("stop"));
    frames.push(oai_done());
    Reply::Stream {
        frames,
        delay: Duration::from_millis(delay_ms),
        hang: false,
    }
}

#[tokio::test]
async fn six_background_tasks_five_run_and_the_orchestrator_reports() {
    bounded(120, async {
        let fake = FakeLlm::start_with(|req| {
            if is_sub_agent(req) {
                return slow_answer("Task done for you.", 60);
            }
            let users = user_texts(req);
            if users.iter().any(|u| u.contains("[Background tasks finished]")) {
                return oai_answer("All five tasks are done.");
            }
            if req["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool") {
                return oai_answer("I started the tasks.");
            }
            let calls: Vec<(String, Value)> = (1..=6)
                .map(|i| {
                    (
                        format!("c{i}"),
                        json!({"role": format!("builder {i}"), "instructions": format!("Build number {i}."), "tools": ["list-workflows"], "background": true}),
                    )
                })
                .collect();
            let calls: Vec<(&str, &str, Value)> = calls
                .iter()
                .map(|(id, a)| (id.as_str(), "delegate", a.clone()))
                .collect();
            oai_calls(&calls)
        })
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "build six things").await;

        // While they run, the status lists five running tasks.
        let events = wait_until(&h.log, "t1", Duration::from_secs(20), |evs| {
            of_type(evs, "agent-spawned").len() == 6
        })
        .await;
        let st = status(&events);
        let listed = st["backgroundTasks"].as_array().unwrap();
        assert_eq!(listed.len(), 5, "{st}");
        assert!(listed.iter().all(|t| t["status"] == "running"
            && t["taskId"].as_str().unwrap().starts_with("task-")));

        // The run finishes while they run; they go on, then a follow-up run reports.
        let events = wait_finish(&h, "t1", "r1").await;
        let st = status(&events);
        assert_eq!(st["hasActiveRun"], false, "{st}");
        assert_eq!(st["backgroundTasks"].as_array().unwrap().len(), 5, "{st}");
        let (follow_up, events) = wait_follow_up(&h, "t1", "r1").await;
        let spawned = of_type(&events, "agent-spawned");
        assert_eq!(spawned.len(), 6);
        assert!(spawned.iter().all(|e| payload(e)["taskId"].is_string()));
        let completed = of_type(&events, "agent-completed");
        assert_eq!(completed.len(), 6);
        // The sixth: completed at once with the limit error, and the call says so too.
        let sixth = spawned[5].agent_id.clone();
        let c6 = completed.iter().find(|e| e.agent_id == sixth).unwrap();
        assert_eq!(payload(c6)["error"], TASK_LIMIT_ERROR);
        assert_eq!(
            TASK_LIMIT_ERROR,
            "Cannot start background task: limit of 5 concurrent tasks reached. Wait for existing tasks to complete."
        );
        let errors = of_type(&events, "tool-error");
        assert_eq!(errors.len(), 1);
        assert_eq!(payload(errors[0])["error"], TASK_LIMIT_ERROR);
        // The five ran and answered.
        let done: Vec<&&StoredEvent> = completed
            .iter()
            .filter(|e| payload(e)["result"] == "Task done for you.")
            .collect();
        assert_eq!(done.len(), 5);
        // The delegate calls returned at once with the task ids, before the tasks finished,
        // and the run finished before them too.
        let results = of_type(&events, "tool-result");
        assert_eq!(results.len(), 5);
        assert!(results.iter().all(|r| payload(r)["result"]["status"] == "running"));
        assert!(results.iter().all(|r| r.id < done[0].id));
        let r1_finish = of_type(&events, "run-finish")[0];
        assert_eq!(r1_finish.run_id, "r1");
        assert!(done.iter().all(|d| d.run_id == "r1" && d.id > r1_finish.id));
        // The follow-up run: same message group, no user message, reports, completes.
        let starts = of_type(&events, "run-start");
        assert_eq!(starts.len(), 2);
        assert_eq!(payload(starts[1])["messageGroupId"], "r1", "the group of a run without one is its id");
        assert_eq!(starts[1].run_id, follow_up);
        assert!(starts[1].id > done.iter().map(|d| d.id).max().unwrap());
        assert_eq!(of_type(&events, "user-message").len(), 1);
        let text: String = of_type(&events, "text-delta")
            .iter()
            .filter(|e| e.run_id == follow_up)
            .map(|e| payload(e)["text"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(text, "All five tasks are done.");
        // The follow-up turn was told how each ended, and reported.
        let reqs = fake.requests();
        let follow = reqs
            .iter()
            .find(|r| !is_sub_agent(r) && user_texts(r).iter().any(|u| u.contains("[Background tasks finished]")))
            .unwrap();
        let report = user_texts(follow).last().unwrap().clone();
        assert_eq!(report.matches(": done: Task done for you.").count(), 5, "{report}");
        assert!(of_type(&events, "run-finish").iter().all(|f| payload(f)["status"] == "completed"));
        let st = status(&events);
        assert_eq!(st["hasActiveRun"], false);
        assert_eq!(st["backgroundTasks"], json!([]));
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn a_task_can_be_cancelled_and_another_corrected() {
    bounded(120, async {
        let fake = FakeLlm::start_with(|req| {
            let users = user_texts(req);
            if is_sub_agent(req) {
                let first = users.first().cloned().unwrap_or_default();
                if first.contains("Task A") {
                    // Never answers: cancelled by the user.
                    return Reply::Stream {
                        frames: vec![oai_text("Working on A")],
                        delay: Duration::from_millis(1),
                        hang: true,
                    };
                }
                let tool_results = req["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|m| m["role"] == "tool")
                    .count();
                if tool_results == 0 {
                    // Slow enough for the correction to arrive before B's next call.
                    return Reply::Stream {
                        frames: vec![
                            oai_tool(0, Some("b1"), Some("list-workflows"), "{}"),
                            oai_finish("tool_calls"),
                            oai_done(),
                        ],
                        delay: Duration::from_millis(150),
                        hang: false,
                    };
                }
                let corrected = users.iter().any(|u| u == "Correction from the user: use wf-sample-2");
                return oai_answer(if corrected { "B used wf-sample-2." } else { "B was not corrected." });
            }
            if users.iter().any(|u| u.contains("[Background tasks finished]")) {
                return oai_answer("A was cancelled, B is done.");
            }
            if req["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool") {
                return oai_answer("Both started.");
            }
            oai_calls(&[
                ("c1", "delegate", json!({"role": "a", "instructions": "Task A.", "tools": [], "background": true})),
                ("c2", "delegate", json!({"role": "b", "instructions": "Task B.", "tools": ["list-workflows"], "background": true})),
            ])
        })
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "two tasks").await;
        let events = wait_until(&h.log, "t1", Duration::from_secs(20), |evs| {
            of_type(evs, "agent-spawned").len() == 2
                && of_type(evs, "text-delta").iter().any(|e| payload(e)["text"] == "Working on A")
        })
        .await;
        let task = |i: usize| payload(of_type(&events, "agent-spawned")[i])["taskId"].as_str().unwrap().to_string();
        let (a, b) = (task(0), task(1));
        h.log
            .append("t1", vec![ThreadCommand::CorrectTask { task_id: b.clone(), message: "use wf-sample-2".into(), by: "u1".into() }])
            .await
            .unwrap();
        let closed_before = fake.closed_early();
        h.log
            .append("t1", vec![ThreadCommand::CancelTask { task_id: a.clone(), by: "u1".into() }])
            .await
            .unwrap();
        let (_, events) = wait_follow_up(&h, "t1", "r1").await;
        let completed = of_type(&events, "agent-completed");
        let agent_a = of_type(&events, "agent-spawned")[0].agent_id.clone();
        let ca = completed.iter().find(|e| e.agent_id == agent_a).unwrap();
        assert_eq!(payload(ca)["error"], "Cancelled by user");
        let cb = completed.iter().find(|e| e.agent_id != agent_a).unwrap();
        assert_eq!(payload(cb)["result"], "B used wf-sample-2.");
        assert!(fake.closed_early() > closed_before, "A's provider request was closed");
        // The correction and the cancel are stored as internal events of the run.
        assert_eq!(of_type(&events, "task-correction").len(), 1);
        assert_eq!(of_type(&events, "task-cancel-requested").len(), 1);
        assert!(events.iter().filter(|e| e.event_type.starts_with("task-")).all(|e| !e.is_n8n()));
        let follow = fake
            .requests()
            .into_iter()
            .find(|r| !is_sub_agent(r) && user_texts(r).iter().any(|u| u.contains("[Background tasks finished]")))
            .unwrap();
        let report = user_texts(&follow).last().unwrap().clone();
        assert!(report.contains(&format!("{a} (a): failed: Cancelled by user")), "{report}");
        assert!(report.contains(&format!("{b} (b): done: B used wf-sample-2.")), "{report}");
        assert!(of_type(&events, "run-finish").iter().all(|f| payload(f)["status"] == "completed"));
        // A settled task cannot be cancelled or corrected any more.
        let err = h
            .log
            .append("t1", vec![ThreadCommand::CancelTask { task_id: b, by: "u1".into() }])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not running"), "{err}");
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn cancelling_the_run_cancels_its_tasks() {
    bounded(120, async {
        let fake = FakeLlm::start_with(|req| {
            if is_sub_agent(req) {
                return Reply::Stream { frames: vec![oai_text("busy")], delay: Duration::from_millis(1), hang: true };
            }
            if req["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool") {
                // The run stays live (its model never finishes) until it is cancelled.
                return Reply::Stream { frames: vec![oai_text("Started.")], delay: Duration::from_millis(1), hang: true };
            }
            oai_calls(&[("c1", "delegate", json!({"role": "slow", "instructions": "Slow task.", "tools": [], "background": true}))])
        })
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "start a slow task").await;
        wait_until(&h.log, "t1", Duration::from_secs(20), |evs| {
            of_type(evs, "text-delta").iter().any(|e| payload(e)["text"] == "busy")
        })
        .await;
        h.log
            .append("t1", vec![ThreadCommand::Cancel { by: "u1".into(), reason: "user_cancelled".into() }])
            .await
            .unwrap();
        let events = wait_finish(&h, "t1", "r1").await;
        let completed = payload(of_type(&events, "agent-completed")[0]);
        assert_eq!(completed["error"], "Cancelled by user");
        assert_eq!(
            payload(of_type(&events, "run-finish")[0]),
            json!({"status": "cancelled", "reason": "user_cancelled"})
        );
        assert_eq!(status(&events)["backgroundTasks"], json!([]));
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

/// Waits for the follow-up run of `run` (a later `run-start` without a user message) to
/// finish; returns its id and the thread's events.
async fn wait_follow_up(h: &Harness, thread: &str, run: &str) -> (String, Vec<StoredEvent>) {
    let follow_up_of = |evs: &[StoredEvent]| {
        let after = evs
            .iter()
            .find(|e| e.run_id == run && e.event_type == "run-start")?
            .id;
        evs.iter()
            .filter(|e| e.event_type == "run-start" && e.id > after && e.run_id != run)
            .find(|s| {
                !evs.iter()
                    .any(|u| u.run_id == s.run_id && u.event_type == "user-message")
            })
            .map(|s| s.run_id.clone())
    };
    let events = wait_until(&h.log, thread, Duration::from_secs(30), |evs| {
        follow_up_of(evs).is_some_and(|f| {
            evs.iter()
                .any(|e| e.run_id == f && e.event_type == "run-finish")
        })
    })
    .await;
    (follow_up_of(&events).unwrap(), events)
}

#[tokio::test]
async fn the_thread_takes_messages_while_a_task_runs_and_the_report_waits_for_the_live_run() {
    bounded(120, async {
        let fake = FakeLlm::start_with(|req| {
            let users = user_texts(req);
            if is_sub_agent(req) {
                // Long enough for a second message to start (and stay in) a run meanwhile.
                return slow_answer("Built the thing after a while.", 150);
            }
            let last = users.last().cloned().unwrap_or_default();
            if last.contains("[Background tasks finished]") {
                return oai_answer("Your background build is done.");
            }
            if last == "and how is the weather" {
                // This run outlasts the task: the report must wait for it.
                return slow_answer("It is sunny today, and the forecast says it stays so.", 120);
            }
            if req["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool") {
                return oai_answer("Started the build in the background.");
            }
            oai_calls(&[("c1", "delegate", json!({"role": "builder", "instructions": "Build it.", "tools": [], "background": true}))])
        })
        .await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "build it in the background").await;
        let events = wait_finish(&h, "t1", "r1").await;
        assert_eq!(status(&events)["backgroundTasks"].as_array().unwrap().len(), 1);
        // A new message is a new run while the task still runs.
        start(&h, "t1", "r2", "and how is the weather").await;
        let (follow_up, events) = wait_follow_up(&h, "t1", "r1").await;
        let id_of = |run: &str, t: &str| events.iter().find(|e| e.run_id == run && e.event_type == t).unwrap().id;
        let task_done = of_type(&events, "agent-completed")[0];
        assert_eq!(task_done.run_id, "r1");
        assert_eq!(payload(task_done)["result"], "Built the thing after a while.");
        // The task completed while r2 was live; the report started only after r2 finished.
        assert!(task_done.id > id_of("r2", "run-start") && task_done.id < id_of("r2", "run-finish"));
        assert!(id_of(&follow_up, "run-start") > id_of("r2", "run-finish"));
        let r2_text: String = of_type(&events, "text-delta").iter().filter(|e| e.run_id == "r2")
            .map(|e| payload(e)["text"].as_str().unwrap().to_string()).collect();
        assert_eq!(r2_text, "It is sunny today, and the forecast says it stays so.");
        let st = status(&events);
        assert_eq!(st["backgroundTasks"], json!([]));
        assert_eq!(st["hasActiveRun"], false);
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

/// A fake whose orchestrator starts one background task and finishes its turn, whose task
/// streams "busy" and never ends, and whose follow-up run answers `report`.
async fn busy_task_fake(report: &'static str) -> FakeLlm {
    FakeLlm::start_with(move |req| {
        if is_sub_agent(req) {
            return Reply::Stream {
                frames: vec![oai_text("busy")],
                delay: Duration::from_millis(1),
                hang: true,
            };
        }
        let users = user_texts(req);
        if users
            .last()
            .is_some_and(|u| u.contains("[Background tasks finished]"))
        {
            return oai_answer(report);
        }
        if req["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool")
        {
            return oai_answer("Started.");
        }
        oai_calls(&[(
            "c1",
            "delegate",
            json!({"role": "builder", "instructions": "Build.", "tools": [], "background": true}),
        )])
    })
    .await
}

/// Waits until `run` has finished while its task streams "busy".
async fn wait_detached_busy(h: &Harness, run: &str) {
    wait_until(&h.log, "t1", Duration::from_secs(20), |evs| {
        finished(evs, run)
            && of_type(evs, "text-delta")
                .iter()
                .any(|e| payload(e)["text"] == "busy")
    })
    .await;
}

#[tokio::test]
async fn cancelling_the_thread_stops_the_tasks_of_a_finished_run() {
    bounded(120, async {
        let fake = busy_task_fake("The task was cancelled.").await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "start a slow task").await;
        wait_detached_busy(&h, "r1").await;
        let closed_before = fake.closed_early();
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
        let (follow_up, events) = wait_follow_up(&h, "t1", "r1").await;
        assert_eq!(
            payload(of_type(&events, "agent-completed")[0])["error"],
            "Cancelled by user"
        );
        assert!(
            fake.closed_early() > closed_before,
            "the task's provider request was closed"
        );
        // No run was live: the cancel was stored for the task alone.
        assert_eq!(of_type(&events, "cancel-requested").len(), 0);
        assert_eq!(of_type(&events, "task-cancel-requested").len(), 1);
        let finish = of_type(&events, "run-finish");
        assert!(finish.iter().all(|f| payload(f)["status"] == "completed"));
        assert_eq!(finish.last().unwrap().run_id, follow_up);
        assert_n8n_valid(&events).await;
        wait_idle(&h.rt).await;
    })
    .await
}

#[tokio::test]
async fn tasks_running_when_the_process_stops_are_completed_as_interrupted_and_reported() {
    bounded(120, async {
        let fake = busy_task_fake("The build was interrupted by a restart.").await;
        let h = harness(openai_config(&fake)).await;
        start(&h, "t1", "r1", "build in the background").await;
        wait_detached_busy(&h, "r1").await;
        // The process stops (its tasks with it); a new runtime on the same log recovers.
        h.rt.shutdown();
        wait_idle(&h.rt).await;
        let rt2 =
            threadstream_agent::AgentRuntime::new(h.log.clone(), openai_config(&fake)).unwrap();
        let recovered = rt2.recover("t1").await.unwrap();
        assert_eq!(
            recovered,
            threadstream_agent::Recovery::TasksInterrupted { tasks: 1 }
        );
        let (follow_up, events) = wait_follow_up(&h, "t1", "r1").await;
        let completed = payload(of_type(&events, "agent-completed")[0]);
        assert_eq!(
            completed["error"],
            "interrupted: the server stopped while this task was running"
        );
        let text: String = of_type(&events, "text-delta")
            .iter()
            .filter(|e| e.run_id == follow_up)
            .map(|e| payload(e)["text"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(text, "The build was interrupted by a restart.");
        assert_eq!(status(&events)["backgroundTasks"], json!([]));
        // Nothing is left to recover.
        wait_idle(&rt2).await;
        assert_eq!(
            rt2.recover("t1").await.unwrap(),
            threadstream_agent::Recovery::Idle
        );
        assert_n8n_valid(&events).await;
    })
    .await
}
