//! Thread status: what `GET /threads/:id/status` answers.
//!
//! [`ThreadStatus`] owns three facts about a thread:
//! - **active run**: a `run-start` without its `run-finish` (`hasActiveRun`, `runId`);
//! - **suspended**: the live run has a `confirmation-request` whose tool call has seen no
//!   `tool-result`/`tool-error` and whose request has no `confirmation-answered` (`isSuspended`);
//! - **background tasks**: sub-agents spawned with a `taskId` that have not sent
//!   `agent-completed`, in spawn order (`backgroundTasks`, status always `running`).
//!
//! A `run-finish` ends the first two for its run. Background tasks outlive their run: the log
//! accepts their events after the run's `run-finish` until their `agent-completed` (see the
//! `Thread` aggregate), so they stay listed until then, across later runs. An unknown thread is
//! the default doc, which renders all-false.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use threadstream_domain::event::{AgentEvent, EventBody, ToolError, ToolResult};
use threadstream_domain::StoredEvent;

/// A confirmation request waiting for its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingConfirmation {
    pub request_id: String,
    pub tool_call_id: String,
}

/// The run that is live.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveRunStatus {
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_group_id: Option<String>,
    #[serde(default)]
    pub pending: Vec<PendingConfirmation>,
    /// Tool calls of this run that already have a result or error, so a confirmation request
    /// arriving after its tool's result does not suspend the thread.
    #[serde(default)]
    pub settled_tool_calls: Vec<String>,
}

/// One running background task, as rendered in `backgroundTasks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackgroundTask {
    pub task_id: String,
    pub role: String,
    pub agent_id: String,
    /// Always `running`: finished tasks leave the list.
    pub status: String,
    /// Epoch ms of the `agent-spawned` event.
    pub started_at: i64,
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_group_id: Option<String>,
}

/// The status read model's document for one thread.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStatus {
    /// Id of the last event folded (0 before any).
    pub last_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveRunStatus>,
    #[serde(default)]
    pub background_tasks: Vec<BackgroundTask>,
}

impl ThreadStatus {
    pub fn has_active_run(&self) -> bool {
        self.live.is_some()
    }

    pub fn is_suspended(&self) -> bool {
        self.live.as_ref().is_some_and(|r| !r.pending.is_empty())
    }

    pub fn run_id(&self) -> Option<&str> {
        self.live.as_ref().map(|r| r.run_id.as_str())
    }

    /// Folds one stored event; already-folded ids are skipped, undecodable events ignored.
    pub fn apply(&mut self, event: &StoredEvent) {
        if self.last_id > 0 && event.id <= self.last_id {
            return;
        }
        self.last_id = event.id;
        if let Ok(decoded) = event.decode() {
            self.apply_event(&decoded, event.ts);
        }
    }

    fn apply_event(&mut self, e: &AgentEvent, ts: i64) {
        if let EventBody::RunStart(p) = &e.body {
            self.live = Some(LiveRunStatus {
                run_id: e.run_id.clone(),
                message_group_id: p.message_group_id.clone(),
                ..LiveRunStatus::default()
            });
            return;
        }
        // An answer names its request, which is unique in the thread.
        if let EventBody::ConfirmationAnswered(p) = &e.body {
            if let Some(run) = self.live.as_mut() {
                run.pending.retain(|c| c.request_id != p.request_id);
            }
            return;
        }
        // Background tasks are spawned in the live run; they complete in it or after it.
        match &e.body {
            EventBody::AgentSpawned(p) => {
                let Some(task_id) = &p.task_id else { return };
                if self.run_id() != Some(e.run_id.as_str()) {
                    return;
                }
                let task = BackgroundTask {
                    task_id: task_id.clone(),
                    role: p.role.clone(),
                    agent_id: e.agent_id.clone(),
                    status: "running".to_string(),
                    started_at: ts,
                    run_id: e.run_id.clone(),
                    message_group_id: self
                        .live
                        .as_ref()
                        .filter(|r| r.run_id == e.run_id)
                        .and_then(|r| r.message_group_id.clone()),
                };
                // One entry per agent of a run, as `agent-completed` removes it: an agent id
                // may be spawned again in a later run while the first task still runs.
                match self
                    .background_tasks
                    .iter_mut()
                    .find(|t| t.agent_id == e.agent_id && t.run_id == e.run_id)
                {
                    Some(existing) => *existing = task,
                    None => self.background_tasks.push(task),
                }
                return;
            }
            EventBody::AgentCompleted(_) => {
                self.background_tasks
                    .retain(|t| !(t.agent_id == e.agent_id && t.run_id == e.run_id));
                return;
            }
            _ => {}
        }
        let Some(run) = self.live.as_mut().filter(|r| r.run_id == e.run_id) else {
            return;
        };
        match &e.body {
            EventBody::RunFinish(_) => self.live = None,
            EventBody::ToolResult(ToolResult { tool_call_id, .. })
            | EventBody::ToolError(ToolError { tool_call_id, .. }) => {
                run.pending.retain(|c| &c.tool_call_id != tool_call_id);
                if !run.settled_tool_calls.contains(tool_call_id) {
                    run.settled_tool_calls.push(tool_call_id.clone());
                }
            }
            EventBody::ConfirmationRequest(p) => {
                let settled = run.settled_tool_calls.contains(&p.tool_call_id);
                let known = run.pending.iter().any(|c| c.request_id == p.request_id);
                if !settled && !known {
                    run.pending.push(PendingConfirmation {
                        request_id: p.request_id.clone(),
                        tool_call_id: p.tool_call_id.clone(),
                    });
                }
            }
            _ => {}
        }
    }

    /// `{hasActiveRun, isSuspended, runId?, backgroundTasks}`; `runId` only while a run is live.
    pub fn render(&self) -> Value {
        let mut v = json!({
            "hasActiveRun": self.has_active_run(),
            "isSuspended": self.is_suspended(),
            "backgroundTasks": self.background_tasks,
        });
        if let Some(run_id) = self.run_id() {
            v["runId"] = Value::String(run_id.to_string());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Log;

    fn fold(log: &Log) -> ThreadStatus {
        let mut doc = ThreadStatus::default();
        for e in &log.events {
            doc.apply(e);
        }
        doc
    }

    fn confirm(log: &mut Log, request: &str, tool_call: &str) {
        log.n8n(
            "r1",
            "o",
            "confirmation-request",
            json!({"requestId":request,"toolCallId":tool_call,"toolName":"delete-workflow","args":{},
                "severity":"destructive","message":"Delete?"}),
        );
    }

    #[test]
    fn unknown_thread_is_all_false() {
        assert_eq!(
            ThreadStatus::default().render(),
            json!({"hasActiveRun":false,"isSuspended":false,"backgroundTasks":[]})
        );
    }

    #[test]
    fn active_then_suspended_then_answered_then_finished() {
        let mut log = Log::new("t");
        log.start_run("r1", "o", "m1", "hi", None);
        let s = fold(&log);
        assert_eq!(
            s.render(),
            json!({"hasActiveRun":true,"isSuspended":false,"runId":"r1","backgroundTasks":[]})
        );
        log.tool_call("r1", "o", "tc1", "delete-workflow");
        confirm(&mut log, "req1", "tc1");
        assert!(fold(&log).is_suspended());
        log.internal_in_run(
            "r1",
            "o",
            "confirmation-answered",
            json!({"requestId":"req1","approved":true}),
        );
        let s = fold(&log);
        assert!(s.has_active_run() && !s.is_suspended());
        log.n8n("r1", "o", "run-finish", json!({"status":"completed"}));
        assert_eq!(fold(&log).render()["hasActiveRun"], false);
        assert!(fold(&log).render().get("runId").is_none());
    }

    #[test]
    fn tool_result_or_error_ends_suspension_and_late_requests_do_not_suspend() {
        let mut log = Log::new("t");
        log.start_run("r1", "o", "m1", "hi", None);
        log.tool_call("r1", "o", "tc1", "x");
        log.tool_call("r1", "o", "tc2", "y");
        confirm(&mut log, "req1", "tc1");
        confirm(&mut log, "req2", "tc2");
        log.n8n(
            "r1",
            "o",
            "tool-error",
            json!({"toolCallId":"tc1","error":"denied"}),
        );
        assert!(fold(&log).is_suspended(), "req2 still waits");
        log.n8n(
            "r1",
            "o",
            "tool-result",
            json!({"toolCallId":"tc2","result":"ok"}),
        );
        assert!(!fold(&log).is_suspended());
        // A request for an already-settled call never suspends.
        confirm(&mut log, "req3", "tc2");
        assert!(!fold(&log).is_suspended());
        // A cancelled run is not suspended any more.
        log.tool_call("r1", "o", "tc4", "z");
        confirm(&mut log, "req4", "tc4");
        assert!(fold(&log).is_suspended());
        log.n8n(
            "r1",
            "o",
            "run-finish",
            json!({"status":"cancelled","reason":"user_cancelled"}),
        );
        assert!(!fold(&log).is_suspended());
    }

    #[test]
    fn background_tasks_run_until_completed() {
        let mut log = Log::new("t");
        log.start_run("r1", "o", "m1", "hi", Some("g1"));
        log.n8n(
            "r1",
            "bg1",
            "agent-spawned",
            json!({"parentId":"o","role":"builder","tools":[],"taskId":"task-1"}),
        );
        let spawned_at = log.events.last().unwrap().ts;
        log.n8n(
            "r1",
            "sub",
            "agent-spawned",
            json!({"parentId":"o","role":"helper","tools":[]}),
        );
        log.n8n(
            "r1",
            "bg2",
            "agent-spawned",
            json!({"parentId":"o","role":"researcher","tools":[],"taskId":"task-2"}),
        );
        let s = fold(&log).render();
        assert_eq!(
            s["backgroundTasks"][0],
            json!({"taskId":"task-1","role":"builder","agentId":"bg1","status":"running",
                "startedAt":spawned_at,"runId":"r1","messageGroupId":"g1"})
        );
        assert_eq!(s["backgroundTasks"].as_array().unwrap().len(), 2);
        log.n8n(
            "r1",
            "bg1",
            "agent-completed",
            json!({"role":"builder","result":"done"}),
        );
        let s = fold(&log).render();
        assert_eq!(s["backgroundTasks"].as_array().unwrap().len(), 1);
        assert_eq!(s["backgroundTasks"][0]["taskId"], "task-2");
        // The run finishes; its task goes on, also while a later run is live.
        log.n8n("r1", "o", "run-finish", json!({"status":"completed"}));
        let s = fold(&log).render();
        assert_eq!(s["hasActiveRun"], false);
        assert_eq!(s["backgroundTasks"][0]["taskId"], "task-2");
        log.start_run("r2", "o2", "m2", "next", None);
        assert_eq!(
            fold(&log).render()["backgroundTasks"][0]["taskId"],
            "task-2"
        );
        log.n8n(
            "r1",
            "bg2",
            "agent-completed",
            json!({"role":"researcher","result":"found"}),
        );
        assert_eq!(fold(&log).render()["backgroundTasks"], json!([]));
    }

    #[test]
    fn an_agent_id_spawned_again_in_a_later_run_is_a_second_task() {
        let mut log = Log::new("t");
        log.start_run("r1", "o", "m1", "hi", None);
        log.n8n(
            "r1",
            "bg",
            "agent-spawned",
            json!({"parentId":"o","role":"builder","tools":[],"taskId":"task-1"}),
        );
        log.n8n("r1", "o", "run-finish", json!({"status":"completed"}));
        log.start_run("r2", "o", "m2", "next", None);
        log.n8n(
            "r2",
            "bg",
            "agent-spawned",
            json!({"parentId":"o","role":"builder","tools":[],"taskId":"task-2"}),
        );
        let tasks = |log: &Log| -> Vec<(String, String)> {
            fold(log)
                .background_tasks
                .iter()
                .map(|t| (t.run_id.clone(), t.task_id.clone()))
                .collect()
        };
        assert_eq!(
            tasks(&log),
            [
                ("r1".into(), "task-1".into()),
                ("r2".into(), "task-2".into())
            ]
        );
        // Each completes in its own run.
        log.n8n(
            "r1",
            "bg",
            "agent-completed",
            json!({"role":"builder","result":"done"}),
        );
        assert_eq!(tasks(&log), [("r2".into(), "task-2".into())]);
    }

    #[test]
    fn events_of_other_runs_do_not_count() {
        let mut log = Log::new("t");
        log.start_run("r1", "o", "m1", "hi", None);
        log.n8n("old", "o", "run-finish", json!({"status":"completed"}));
        log.n8n(
            "old",
            "x",
            "agent-spawned",
            json!({"parentId":"o","role":"b","tools":[],"taskId":"t"}),
        );
        let s = fold(&log);
        assert!(s.has_active_run());
        assert!(s.background_tasks.is_empty());
    }
}
