//! The runtime against a real SQLite log: full demo runs, confirmations, cancel, errors. Every
//! run that is followed to its end is validated against both published n8n schemas.

use crate::support;
use crate::support::{start, Harness};

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use threadstream_agent::provider::{
    ChatRequest, Chunk, ChunkStream, LlmProvider, ProviderError, ToolCallRequest,
};
use threadstream_agent::{AgentRuntime, RuntimeConfig};
use threadstream_domain::{StoredEvent, ThreadCommand};
use threadstream_store::{Durability, EventLog};

async fn harness(delay_ms: u64) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let rt = AgentRuntime::new(
        log.clone(),
        RuntimeConfig {
            model: "demo".into(),
            demo_delay: Duration::from_millis(delay_ms),
            ..RuntimeConfig::default()
        },
    )
    .unwrap();
    Harness { dir, log, rt }
}

async fn read_all(log: &EventLog, thread: &str) -> Vec<StoredEvent> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = log.read_thread(thread, after, 10_000).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.id;
        out.extend(page);
    }
    out
}

/// Waits (on the thread's head, with a short re-check) until `pred` holds for the thread's
/// events; returns them.
async fn wait_until(
    log: &EventLog,
    thread: &str,
    timeout: Duration,
    mut pred: impl FnMut(&[StoredEvent]) -> bool,
) -> Vec<StoredEvent> {
    let deadline = Instant::now() + timeout;
    let mut head = log.heads().thread(thread);
    let mut events: Vec<StoredEvent> = Vec::new();
    loop {
        loop {
            let after = events.last().map_or(0, |e| e.id);
            let page = log.read_thread(thread, after, 10_000).await.unwrap();
            if page.is_empty() {
                break;
            }
            events.extend(page);
        }
        if pred(&events) {
            return events;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "timed out; last events: {:?}",
            events
                .iter()
                .rev()
                .take(5)
                .map(|e| (&e.event_type, &e.payload))
                .collect::<Vec<_>>()
        );
        let _ = tokio::time::timeout(left.min(Duration::from_millis(20)), head.changed()).await;
    }
}

fn payload(e: &StoredEvent) -> Value {
    serde_json::from_str(&e.payload).unwrap()
}

fn of_run<'a>(events: &'a [StoredEvent], run: &str) -> Vec<&'a StoredEvent> {
    events.iter().filter(|e| e.run_id == run).collect()
}

fn finished(events: &[StoredEvent], run: &str) -> bool {
    events
        .iter()
        .any(|e| e.run_id == run && e.event_type == "run-finish")
}

/// Runs to `run-finish`, answering every confirmation request with `approve`.
async fn run_to_end(h: &Harness, thread: &str, run: &str, approve: bool) -> Vec<StoredEvent> {
    let mut answered: HashSet<String> = HashSet::new();
    loop {
        let events = wait_until(&h.log, thread, Duration::from_secs(30), |evs| {
            finished(evs, run)
                || evs.iter().any(|e| {
                    e.run_id == run
                        && e.event_type == "confirmation-request"
                        && !answered.contains(payload(e)["requestId"].as_str().unwrap())
                })
        })
        .await;
        if finished(&events, run) {
            support::assert_n8n_valid(&events).await;
            return events;
        }
        for e in &events {
            if e.run_id != run || e.event_type != "confirmation-request" {
                continue;
            }
            let id = payload(e)["requestId"].as_str().unwrap().to_string();
            if answered.insert(id.clone()) {
                h.log
                    .append(
                        thread,
                        vec![ThreadCommand::AnswerConfirmation {
                            request_id: id,
                            approved: approve,
                            user_input: None,
                            answers: None,
                            by: "u1".into(),
                        }],
                    )
                    .await
                    .unwrap();
            }
        }
    }
}

async fn wait_idle(rt: &AgentRuntime) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while rt.running() > 0 {
        assert!(Instant::now() < deadline, "run task did not end");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Structural rules every run must satisfy: decodable events, user-message + run-start first,
/// run-finish last, results only for open calls of the same agent, confirmations on open calls,
/// sub-agents spawned by the orchestrator and silent outside spawned..completed, nothing left
/// open, every status cleared.
fn check_run(events: &[&StoredEvent], orchestrator: &str) {
    for e in events {
        e.decode()
            .unwrap_or_else(|err| panic!("undecodable {}: {err}", e.event_type));
    }
    assert_eq!(events[0].event_type, "user-message");
    assert_eq!(events[1].event_type, "run-start");
    assert_eq!(events[1].agent_id, orchestrator);
    assert_eq!(events.last().unwrap().event_type, "run-finish");
    let mut open: HashMap<String, String> = HashMap::new();
    let mut agents: HashMap<String, bool> = HashMap::from([(orchestrator.to_string(), false)]);
    let mut status: HashMap<String, String> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let p = payload(e);
        match e.event_type.as_str() {
            "agent-spawned" => {
                assert_eq!(p["parentId"], orchestrator);
                assert!(agents.insert(e.agent_id.clone(), false).is_none());
                assert!(!p["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t == "delegate"));
            }
            "agent-completed" => {
                assert_ne!(e.agent_id, orchestrator);
                assert_eq!(agents.insert(e.agent_id.clone(), true), Some(false));
                assert!(
                    !open.values().any(|a| a == &e.agent_id),
                    "sub-agent completed with open calls"
                );
            }
            "user-message" | "run-start" | "cancel-requested" | "confirmation-answered" => {}
            other => {
                assert_eq!(
                    agents.get(&e.agent_id),
                    Some(&false),
                    "{other} from an unknown or completed agent"
                );
                match other {
                    "tool-call" => {
                        let tc = p["toolCallId"].as_str().unwrap();
                        assert!(tc.starts_with("tc-"), "{tc}");
                        open.insert(tc.to_string(), e.agent_id.clone());
                    }
                    "tool-result" | "tool-error" => {
                        let tc = p["toolCallId"].as_str().unwrap();
                        assert_eq!(open.remove(tc).as_deref(), Some(e.agent_id.as_str()));
                    }
                    "confirmation-request" => {
                        let tc = p["toolCallId"].as_str().unwrap();
                        assert_eq!(open.get(tc), Some(&e.agent_id));
                        assert!(p["requestId"].as_str().unwrap().starts_with("cr-"));
                    }
                    "status" => {
                        status.insert(
                            e.agent_id.clone(),
                            p["message"].as_str().unwrap().to_string(),
                        );
                    }
                    "run-finish" => {
                        assert_eq!(i, events.len() - 1);
                        assert_eq!(e.agent_id, orchestrator);
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(open.is_empty(), "open tool calls at the end: {open:?}");
    assert!(
        agents.values().filter(|done| !**done).count() == 1,
        "sub-agents left running"
    );
    assert!(
        status.values().all(String::is_empty),
        "status not cleared: {status:?}"
    );
}

/// The run as one line per event, adjacent deltas of an agent merged (shown with --nocapture).
fn outline(events: &[&StoredEvent]) -> String {
    let mut out = String::new();
    let mut last: Option<(String, String)> = None;
    for e in events {
        let key = (e.event_type.clone(), e.agent_id.clone());
        let p = payload(e);
        if e.event_type.ends_with("-delta") {
            if last.as_ref() == Some(&key) {
                out.push_str(p["text"].as_str().unwrap());
                continue;
            }
            out.push_str(&format!(
                "\n{:<22} {:<14} {}",
                e.event_type,
                &e.agent_id[..e.agent_id.len().min(14)],
                p["text"].as_str().unwrap()
            ));
        } else {
            let mut detail = p.to_string();
            detail.truncate(140);
            out.push_str(&format!(
                "\n{:<22} {:<14} {}",
                e.event_type,
                &e.agent_id[..e.agent_id.len().min(14)],
                detail
            ));
        }
        last = Some(key);
    }
    out
}

fn types(events: &[&StoredEvent]) -> HashSet<String> {
    events.iter().map(|e| e.event_type.clone()).collect()
}

fn find<'a>(events: &[&'a StoredEvent], ty: &str) -> Vec<&'a StoredEvent> {
    events
        .iter()
        .copied()
        .filter(|e| e.event_type == ty)
        .collect()
}

fn tool_call_named<'a>(events: &[&'a StoredEvent], name: &str) -> Vec<&'a StoredEvent> {
    find(events, "tool-call")
        .into_iter()
        .filter(|e| payload(e)["toolName"] == name)
        .collect()
}

fn settled_by<'a>(events: &[&'a StoredEvent], tool_call_id: &str) -> &'a StoredEvent {
    events
        .iter()
        .copied()
        .find(|e| {
            (e.event_type == "tool-result" || e.event_type == "tool-error")
                && payload(e)["toolCallId"] == tool_call_id
        })
        .unwrap_or_else(|| panic!("{tool_call_id} never settled"))
}

fn task_statuses(e: &StoredEvent) -> Vec<String> {
    payload(e)["tasks"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn full_demo_run_approved() {
    let h = harness(1).await;
    let orch = start(&h, "t1", "run-1", "Build a weather to Slack workflow").await;
    let all = run_to_end(&h, "t1", "run-1", true).await;
    let run = of_run(&all, "run-1");
    eprintln!("{}", outline(&run));

    check_run(&run, &orch);

    let seen = types(&run);
    for ty in [
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
        assert!(seen.contains(ty), "missing {ty}; saw {seen:?}");
    }
    assert_eq!(
        payload(run.last().unwrap()),
        serde_json::json!({"status": "completed"})
    );

    let title = find(&run, "thread-title-updated");
    assert_eq!(title.len(), 1);
    assert_eq!(
        payload(title[0])["title"],
        "Build a weather to Slack workflow"
    );

    // Text streamed in small pieces.
    let deltas = find(&run, "text-delta");
    assert!(deltas.len() > 10, "{}", deltas.len());
    assert!(deltas
        .iter()
        .all(|d| payload(d)["text"].as_str().unwrap().len() < 64));

    // Status set and cleared.
    let statuses: Vec<String> = find(&run, "status")
        .iter()
        .map(|e| payload(e)["message"].as_str().unwrap().to_string())
        .collect();
    assert!(statuses.iter().any(|s| !s.is_empty()));
    assert!(statuses.iter().any(String::is_empty));

    // The plan moves through the real statuses.
    let plans = find(&run, "tasks-update");
    assert!(plans.len() >= 3, "{}", plans.len());
    assert_eq!(task_statuses(plans[0]), ["in_progress", "todo", "todo"]);
    assert_eq!(task_statuses(plans[1]), ["done", "in_progress", "todo"]);
    assert_eq!(
        task_statuses(plans.last().unwrap()),
        ["done", "done", "done"]
    );
    let plan_call = &tool_call_named(&run, "plan")[0];
    let plan_pos = |e: &StoredEvent| run.iter().position(|x| x.id == e.id).unwrap();
    assert!(plan_pos(plan_call) < plan_pos(plans[0]));

    // A read tool (the orchestrator's; the sub-agent lists too).
    let list: Vec<&StoredEvent> = tool_call_named(&run, "list-workflows")
        .into_iter()
        .filter(|e| e.agent_id == orch)
        .collect();
    assert_eq!(list.len(), 1);
    let listed = settled_by(&run, payload(list[0])["toolCallId"].as_str().unwrap());
    assert_eq!(listed.event_type, "tool-result");
    assert_eq!(
        payload(listed)["result"]["workflows"][1]["id"],
        "wf-sample-2"
    );

    // The destructive tool asked first, then ran.
    let delete = tool_call_named(&run, "delete-workflow");
    assert_eq!(delete.len(), 1);
    let tc = payload(delete[0])["toolCallId"]
        .as_str()
        .unwrap()
        .to_string();
    let cr = find(&run, "confirmation-request");
    assert_eq!(cr.len(), 1);
    let crp = payload(cr[0]);
    assert_eq!(crp["toolCallId"], tc.as_str());
    assert_eq!(crp["toolName"], "delete-workflow");
    assert_eq!(crp["severity"], "destructive");
    assert_eq!(crp["inputType"], "approval");
    assert_eq!(crp["args"]["workflowId"], "wf-sample-2");
    let answered = all
        .iter()
        .find(|e| e.event_type == "confirmation-answered")
        .unwrap();
    let result = settled_by(&run, &tc);
    assert_eq!(result.event_type, "tool-result");
    assert!(cr[0].id < answered.id && answered.id < result.id);
    assert_eq!(payload(result)["result"]["deleted"], "wf-sample-2");

    // The thread's workflows, folded from the log: the sample that was deleted is gone, the
    // sub-agent's new one is there.
    let wfs = h.rt.workflows().list().await.unwrap();
    let names: Vec<&str> = wfs.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["Weather to Slack", "Weather to Slack workflow"]);

    let state = h.log.thread_state("t1").await.unwrap();
    assert!(state.live_run().is_none());
    wait_idle(&h.rt).await;
}

#[tokio::test]
async fn sub_agent_has_its_own_id_and_completes_before_the_delegate_result() {
    let h = harness(1).await;
    let orch = start(&h, "t-sub", "run-1", "make a daily digest workflow").await;
    let all = run_to_end(&h, "t-sub", "run-1", true).await;
    let run = of_run(&all, "run-1");
    check_run(&run, &orch);

    let delegate = tool_call_named(&run, "delegate");
    assert_eq!(delegate.len(), 1);
    assert_eq!(delegate[0].agent_id, orch);
    let spawned = find(&run, "agent-spawned");
    assert_eq!(spawned.len(), 1);
    let sub = spawned[0].agent_id.clone();
    assert!(sub.starts_with("agent-") && sub != orch, "{sub}");
    let sp = payload(spawned[0]);
    assert_eq!(sp["parentId"], orch.as_str());
    assert_eq!(sp["role"], "workflow builder");
    assert_eq!(
        sp["tools"],
        serde_json::json!(["list-workflows", "get-workflow", "create-workflow"])
    );

    let sub_events: Vec<&StoredEvent> = run.iter().copied().filter(|e| e.agent_id == sub).collect();
    let sub_types = types(&sub_events);
    for ty in [
        "agent-spawned",
        "reasoning-delta",
        "text-delta",
        "tool-call",
        "tool-result",
        "agent-completed",
    ] {
        assert!(sub_types.contains(ty), "sub-agent missing {ty}");
    }
    let sub_calls: Vec<String> = find(&sub_events, "tool-call")
        .iter()
        .map(|e| payload(e)["toolName"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sub_calls, ["list-workflows", "create-workflow"]);

    // delegate call < spawned < sub-agent's events < completed < delegate result.
    let delegate_tc = payload(delegate[0])["toolCallId"]
        .as_str()
        .unwrap()
        .to_string();
    let result = settled_by(&run, &delegate_tc);
    assert_eq!(result.event_type, "tool-result");
    let completed = find(&run, "agent-completed")[0];
    assert!(delegate[0].id < spawned[0].id);
    assert!(sub_events
        .iter()
        .all(|e| e.id >= spawned[0].id && e.id <= completed.id));
    assert!(completed.id < result.id);
    let cp = payload(completed);
    assert_eq!(cp["role"], "workflow builder");
    assert!(cp.get("error").is_none());
    assert_eq!(payload(result)["result"], cp["result"]);
    let text = cp["result"].as_str().unwrap();
    assert!(
        text.contains("\"Daily digest workflow\"") && text.contains("wf-"),
        "{text}"
    );
    wait_idle(&h.rt).await;
}

#[tokio::test]
async fn denied_confirmation_gives_tool_error_and_the_model_continues() {
    let h = harness(1).await;
    let orch = start(&h, "t-deny", "run-1", "Build a weather to Slack workflow").await;
    let all = run_to_end(&h, "t-deny", "run-1", false).await;
    let run = of_run(&all, "run-1");
    check_run(&run, &orch);

    let delete = tool_call_named(&run, "delete-workflow");
    let tc = payload(delete[0])["toolCallId"]
        .as_str()
        .unwrap()
        .to_string();
    let err = settled_by(&run, &tc);
    assert_eq!(err.event_type, "tool-error");
    let msg = payload(err)["error"].as_str().unwrap().to_string();
    assert!(msg.contains("denied by the user"), "{msg}");
    // The model carried on: a final plan (t3 cancelled), an answer after the denial.
    let plans = find(&run, "tasks-update");
    assert_eq!(
        task_statuses(plans.last().unwrap()),
        ["done", "done", "cancelled"]
    );
    assert!(find(&run, "text-delta").iter().any(|e| e.id > err.id));
    assert_eq!(payload(run.last().unwrap())["status"], "completed");
    // Nothing was deleted.
    let wfs = h.rt.workflows().list().await.unwrap();
    assert!(wfs.iter().any(|w| w.id == "wf-sample-2"));
    wait_idle(&h.rt).await;
}

/// Appends a cancel and returns (wall-clock from the append call to seeing run-finish, stored
/// ts difference cancel-requested → run-finish), and the thread's events.
async fn cancel_and_measure(
    h: &Harness,
    thread: &str,
    run: &str,
) -> (Duration, i64, Vec<StoredEvent>) {
    let mut head = h.log.heads().thread(thread);
    let t0 = Instant::now();
    let appended = h
        .log
        .append(
            thread,
            vec![ThreadCommand::Cancel {
                by: "u1".into(),
                reason: "user_cancelled".into(),
            }],
        )
        .await
        .unwrap();
    assert_eq!(appended.len(), 1, "cancel was a no-op");
    let cancel = appended[0].clone();
    let mut cursor = cancel.id;
    let finish = loop {
        let page = h.log.read_thread(thread, cursor, 10_000).await.unwrap();
        if let Some(f) = page
            .iter()
            .find(|e| e.run_id == run && e.event_type == "run-finish")
        {
            break f.clone();
        }
        if let Some(last) = page.last() {
            cursor = last.id;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "run never finished");
        let _ = tokio::time::timeout(Duration::from_millis(5), head.changed()).await;
    };
    let wall = t0.elapsed();
    let stored = finish.ts - cancel.ts;
    (wall, stored, read_all(&h.log, thread).await)
}

#[tokio::test]
async fn cancel_mid_stream_finishes_within_100ms() {
    let h = harness(1).await;
    let orch = start(&h, "t-cancel", "run-1", "tell me a long story").await;
    wait_until(&h.log, "t-cancel", Duration::from_secs(30), |evs| {
        evs.iter().filter(|e| e.event_type == "text-delta").count() >= 100
    })
    .await;
    let (wall, stored, all) = cancel_and_measure(&h, "t-cancel", "run-1").await;
    eprintln!("cancel mid-stream: run-finish seen {wall:?} after the cancel append (stored ts diff {stored} ms)");
    assert!(wall < Duration::from_millis(100), "{wall:?}");
    assert!(stored <= 100, "{stored}");

    let run = of_run(&all, "run-1");
    check_run(&run, &orch);
    assert_eq!(
        payload(run.last().unwrap()),
        serde_json::json!({"status": "cancelled", "reason": "user_cancelled"})
    );
    let deltas = find(&run, "text-delta").len();
    assert!(deltas < threadstream_agent::demo::LONG_DELTAS, "{deltas}");
    // Nothing more is produced after run-finish.
    wait_idle(&h.rt).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(read_all(&h.log, "t-cancel").await.len(), all.len());
}

#[tokio::test]
async fn cancel_while_waiting_on_a_confirmation() {
    let h = harness(1).await;
    let orch = start(&h, "t-cw", "run-1", "Build a weather to Slack workflow").await;
    wait_until(&h.log, "t-cw", Duration::from_secs(30), |evs| {
        evs.iter().any(|e| e.event_type == "confirmation-request")
    })
    .await;
    let state = h.log.thread_state("t-cw").await.unwrap();
    assert!(state.is_suspended());
    let (wall, stored, all) = cancel_and_measure(&h, "t-cw", "run-1").await;
    eprintln!("cancel while waiting: run-finish seen {wall:?} after the cancel append (stored ts diff {stored} ms)");
    assert!(wall < Duration::from_millis(100), "{wall:?}");
    assert!(stored <= 100, "{stored}");

    let run = of_run(&all, "run-1");
    check_run(&run, &orch);
    let delete = tool_call_named(&run, "delete-workflow");
    let tc = payload(delete[0])["toolCallId"]
        .as_str()
        .unwrap()
        .to_string();
    let err = settled_by(&run, &tc);
    assert_eq!(err.event_type, "tool-error");
    assert_eq!(payload(err)["error"], "Cancelled by user");
    assert_eq!(payload(run.last().unwrap())["status"], "cancelled");
    let state = h.log.thread_state("t-cw").await.unwrap();
    assert!(state.live_run().is_none() && !state.is_suspended());
    // The request is settled: answering it now is refused.
    let cr = payload(find(&run, "confirmation-request")[0])["requestId"]
        .as_str()
        .unwrap()
        .to_string();
    let late = h
        .log
        .append(
            "t-cw",
            vec![ThreadCommand::AnswerConfirmation {
                request_id: cr,
                approved: true,
                user_input: None,
                answers: None,
                by: "u1".into(),
            }],
        )
        .await;
    assert!(late.is_err());
    wait_idle(&h.rt).await;
}

#[tokio::test]
async fn cancel_during_a_sub_agent_completes_it_with_cancelled() {
    // A slower model so the sub-agent is still working when the cancel lands.
    let h = harness(25).await;
    let orch = start(&h, "t-cs", "run-1", "Build a weather to Slack workflow").await;
    wait_until(&h.log, "t-cs", Duration::from_secs(30), |evs| {
        evs.iter().any(|e| e.event_type == "agent-spawned")
    })
    .await;
    let (wall, stored, all) = cancel_and_measure(&h, "t-cs", "run-1").await;
    eprintln!("cancel during sub-agent: {wall:?} (stored ts diff {stored} ms)");
    assert!(wall < Duration::from_millis(100), "{wall:?}");

    let run = of_run(&all, "run-1");
    check_run(&run, &orch);
    let completed = find(&run, "agent-completed");
    assert_eq!(completed.len(), 1);
    let cp = payload(completed[0]);
    assert_eq!(cp["error"], "Cancelled by user");
    assert_eq!(cp["role"], "workflow builder");
    let delegate = tool_call_named(&run, "delegate");
    let tc = payload(delegate[0])["toolCallId"]
        .as_str()
        .unwrap()
        .to_string();
    let err = settled_by(&run, &tc);
    assert_eq!(err.event_type, "tool-error");
    assert!(completed[0].id < err.id);
    assert_eq!(
        payload(run.last().unwrap()),
        serde_json::json!({"status": "cancelled", "reason": "user_cancelled"})
    );
    wait_idle(&h.rt).await;
}

#[tokio::test]
async fn cancel_after_the_run_finished_is_a_no_op() {
    let h = harness(0).await;
    start(&h, "t-late", "run-1", "hello").await;
    let all = run_to_end(&h, "t-late", "run-1", true).await;
    let appended = h
        .log
        .append(
            "t-late",
            vec![ThreadCommand::Cancel {
                by: "u1".into(),
                reason: "user_cancelled".into(),
            }],
        )
        .await
        .unwrap();
    assert!(appended.is_empty());
    wait_idle(&h.rt).await;
    assert_eq!(read_all(&h.log, "t-late").await.len(), all.len());
}

#[tokio::test]
async fn provider_failure_ends_the_run_with_error() {
    let h = harness(1).await;
    let orch = start(&h, "t-err", "run-1", "please crash now").await;
    let all = run_to_end(&h, "t-err", "run-1", true).await;
    let run = of_run(&all, "run-1");
    check_run(&run, &orch);
    let err = find(&run, "error");
    assert_eq!(err.len(), 1);
    let ep = payload(err[0]);
    assert!(ep["content"].as_str().unwrap().contains("demo"), "{ep}");
    assert_eq!(ep["provider"], "demo");
    let fin = payload(run.last().unwrap());
    assert_eq!(fin["status"], "error");
    assert!(
        fin["reason"].as_str().unwrap().contains("unavailable"),
        "{fin}"
    );
    assert!(h
        .log
        .thread_state("t-err")
        .await
        .unwrap()
        .live_run()
        .is_none());
    wait_idle(&h.rt).await;
}

#[tokio::test]
async fn second_run_uses_the_thread_and_is_not_retitled() {
    let h = harness(0).await;
    start(&h, "t-2", "run-1", "Build a weather to Slack workflow").await;
    let first = run_to_end(&h, "t-2", "run-1", true).await;
    let created = first
        .iter()
        .find(|e| e.event_type == "tool-result" && payload(e)["result"]["nodes"].is_array())
        .map(|e| payload(e)["result"]["id"].as_str().unwrap().to_string())
        .unwrap();
    let orch = start(&h, "t-2", "run-2", "and another one").await;
    let all = run_to_end(&h, "t-2", "run-2", true).await;
    let run = of_run(&all, "run-2");
    check_run(&run, &orch);
    assert!(find(&run, "thread-title-updated").is_empty());
    // The workflow the first run created is inactive, so the second run offers to delete it.
    let cr = payload(find(&run, "confirmation-request")[0]);
    assert_eq!(cr["args"]["workflowId"], created.as_str());
    assert_eq!(payload(run.last().unwrap())["status"], "completed");
    wait_idle(&h.rt).await;
}

#[tokio::test]
async fn unknown_model_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let err = AgentRuntime::new(
        log.clone(),
        RuntimeConfig {
            model: "gpt-x".into(),
            demo_delay: Duration::ZERO,
            ..RuntimeConfig::default()
        },
    )
    .err()
    .unwrap();
    assert_eq!(
        err.to_string(),
        "unknown model 'gpt-x'; available: demo, openai/<model>, anthropic/<model>"
    );
    // The public endpoints need a key; a local base URL does not.
    let err = AgentRuntime::new(
        log.clone(),
        RuntimeConfig {
            model: "anthropic/claude-x".into(),
            ..RuntimeConfig::default()
        },
    )
    .err()
    .unwrap();
    assert_eq!(
        err.to_string(),
        "model 'anthropic/claude-x' needs an API key: set ANTHROPIC_API_KEY"
    );
    // A thinking budget must fit under max_tokens.
    let mut bad = RuntimeConfig {
        model: "anthropic/claude-x".into(),
        ..RuntimeConfig::default()
    };
    bad.llm.anthropic_api_key = Some("k".into());
    bad.llm.anthropic_thinking_budget = 9000;
    let err = AgentRuntime::new(log.clone(), bad).err().unwrap();
    assert!(err.to_string().contains("thinking budget"), "{err}");
    let mut local = RuntimeConfig {
        model: "openai/llama3.1".into(),
        ..RuntimeConfig::default()
    };
    local.llm.openai_base_url = "http://127.0.0.1:11434/v1".into();
    let rt = AgentRuntime::new(log, local).unwrap();
    assert_eq!(rt.model(), "openai/llama3.1");
}

// ---- custom providers: the loop's edges ----

/// A provider whose answer is computed by a function of the request.
struct FnProvider<F>(F);

impl<F> LlmProvider for FnProvider<F>
where
    F: Fn(&ChatRequest) -> ChunkStream + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        "test"
    }
    fn stream(&self, request: ChatRequest) -> ChunkStream {
        (self.0)(&request)
    }
}

async fn harness_with(provider: impl LlmProvider) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let rt = AgentRuntime::with_provider(log.clone(), std::sync::Arc::new(provider));
    Harness { dir, log, rt }
}

#[tokio::test]
async fn cancel_does_not_need_the_provider_to_cooperate() {
    // The model sends one delta and then never anything again.
    let h = harness_with(FnProvider(|_: &ChatRequest| -> ChunkStream {
        Box::pin(
            futures::stream::iter(vec![Ok::<_, ProviderError>(Chunk::Text("thinking".into()))])
                .chain(futures::stream::pending()),
        )
    }))
    .await;
    let orch = start(&h, "t-stall", "run-1", "hi").await;
    wait_until(&h.log, "t-stall", Duration::from_secs(10), |evs| {
        evs.iter().any(|e| e.event_type == "text-delta")
    })
    .await;
    let (wall, _, all) = cancel_and_measure(&h, "t-stall", "run-1").await;
    assert!(wall < Duration::from_millis(100), "{wall:?}");
    check_run(&of_run(&all, "run-1"), &orch);
    wait_idle(&h.rt).await;
}

#[tokio::test]
async fn a_panicking_provider_ends_the_run_with_error() {
    let h = harness_with(FnProvider(|_: &ChatRequest| -> ChunkStream {
        Box::pin(futures::stream::once(async { panic!("boom") }))
    }))
    .await;
    let orch = start(&h, "t-panic", "run-1", "hi").await;
    let all = run_to_end(&h, "t-panic", "run-1", true).await;
    let run = of_run(&all, "run-1");
    check_run(&run, &orch);
    let fin = payload(run.last().unwrap());
    assert_eq!(fin["status"], "error");
    // The panic's text is the server's own: the log has it, clients read only that it failed.
    assert_eq!(fin["reason"], "internal error", "{fin}");
    let errors = find(&run, "error");
    assert_eq!(errors.len(), 1);
    assert_eq!(payload(errors[0])["content"], "internal error");
    wait_idle(&h.rt).await;
}

#[tokio::test]
async fn the_orchestrator_stops_at_its_step_limit() {
    // A model that calls a tool forever.
    let h = harness_with(FnProvider(|req: &ChatRequest| -> ChunkStream {
        let n = req.messages.len();
        Box::pin(futures::stream::iter(vec![Ok(Chunk::ToolCall(
            ToolCallRequest {
                id: format!("c{n}"),
                name: "get-workflow".into(),
                args: serde_json::json!({"workflowId": "wf-sample-1"})
                    .as_object()
                    .unwrap()
                    .clone(),
            },
        ))]))
    }))
    .await;
    let orch = start(&h, "t-limit", "run-1", "hi").await;
    let all = run_to_end(&h, "t-limit", "run-1", true).await;
    let run = of_run(&all, "run-1");
    check_run(&run, &orch);
    assert_eq!(
        find(&run, "tool-call").len(),
        threadstream_agent::orchestrator::ORCHESTRATOR_MAX_STEPS
    );
    let last_text = find(&run, "text-delta")
        .last()
        .map(|e| payload(e)["text"].clone());
    assert!(last_text
        .unwrap()
        .as_str()
        .unwrap()
        .contains("Stopped after 50 steps"));
    assert_eq!(payload(run.last().unwrap())["status"], "completed");
    wait_idle(&h.rt).await;
}

#[tokio::test]
async fn a_run_finished_by_someone_else_stops_quietly() {
    let h = harness(1).await;
    let orch = start(&h, "t-ext", "run-1", "a long one please").await;
    wait_until(&h.log, "t-ext", Duration::from_secs(30), |evs| {
        evs.iter().filter(|e| e.event_type == "text-delta").count() >= 20
    })
    .await;
    // Another writer (e.g. ingest) finishes the run; the runtime's next append is refused.
    h.log
        .append(
            "t-ext",
            vec![ThreadCommand::Record(threadstream_domain::AgentEvent::new(
                "run-1",
                orch.as_str(),
                threadstream_domain::EventBody::RunFinish(threadstream_domain::event::RunFinish {
                    status: threadstream_domain::event::RunStatus::Completed,
                    reason: None,
                    archived_workflow_ids: None,
                }),
            ))],
        )
        .await
        .unwrap();
    wait_idle(&h.rt).await;
    let all = read_all(&h.log, "t-ext").await;
    let run = of_run(&all, "run-1");
    assert_eq!(find(&run, "run-finish").len(), 1);
    assert!(find(&run, "error").is_empty());
}

#[tokio::test]
async fn runtime_is_shareable_and_spawns_a_run_once() {
    fn shareable<T: Clone + Send + Sync + 'static>() {}
    shareable::<AgentRuntime>();

    let h = harness(1).await;
    let orch = start(&h, "t-twice", "run-1", "hello").await;
    // A second spawn of the same run while it executes is ignored.
    h.rt.spawn_run(
        "t-twice".into(),
        "run-1".into(),
        orch.clone(),
        "hello".into(),
        "u1".into(),
    );
    assert_eq!(h.rt.running(), 1);
    let all = run_to_end(&h, "t-twice", "run-1", true).await;
    check_run(&of_run(&all, "run-1"), &orch);
    wait_idle(&h.rt).await;
    // Spawning a run that is not live (finished) does nothing.
    h.rt.spawn_run(
        "t-twice".into(),
        "run-1".into(),
        orch,
        "hello".into(),
        "u1".into(),
    );
    wait_idle(&h.rt).await;
    assert_eq!(read_all(&h.log, "t-twice").await.len(), all.len());
}

#[tokio::test]
async fn a_sub_agent_stops_at_its_step_limit() {
    // The orchestrator delegates once, then answers; the sub-agent calls a tool forever.
    let h = harness_with(FnProvider(|req: &ChatRequest| -> ChunkStream {
        let sub = req.system.contains("You are a sub-agent");
        let turns = req
            .messages
            .iter()
            .filter(|m| matches!(m, threadstream_agent::provider::ChatMessage::Assistant { .. }))
            .count();
        let call = |name: &str, args: Value| {
            Ok(Chunk::ToolCall(ToolCallRequest {
                id: format!("c{turns}"),
                name: name.into(),
                args: args.as_object().unwrap().clone(),
            }))
        };
        let item = match (sub, turns) {
            (true, _) => call("get-workflow", serde_json::json!({"workflowId": "wf-sample-1"})),
            (false, 0) => call(
                "delegate",
                serde_json::json!({"role": "looper", "instructions": "loop", "tools": ["get-workflow"]}),
            ),
            (false, _) => Ok(Chunk::Text("done".into())),
        };
        Box::pin(futures::stream::iter(vec![item]))
    }))
    .await;
    let orch = start(&h, "t-sub-limit", "run-1", "hi").await;
    let all = run_to_end(&h, "t-sub-limit", "run-1", true).await;
    let run = of_run(&all, "run-1");
    check_run(&run, &orch);
    let sub = find(&run, "agent-spawned")[0].agent_id.clone();
    let sub_calls = find(&run, "tool-call")
        .into_iter()
        .filter(|e| e.agent_id == sub)
        .count();
    assert_eq!(
        sub_calls,
        threadstream_agent::orchestrator::SUB_AGENT_MAX_STEPS
    );
    let completed = payload(find(&run, "agent-completed")[0]);
    assert!(completed["result"]
        .as_str()
        .unwrap()
        .contains("Stopped after 10 steps"));
    assert_eq!(payload(run.last().unwrap())["status"], "completed");
    wait_idle(&h.rt).await;
}
