//! Background tasks: sub-agents started by `delegate` with `background: true`, counted against
//! the thread's limit, run beside the run (and past its end), and reported once settled.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use threadstream_domain::event::*;
use threadstream_domain::{AgentEvent, ThreadCommand};
use uuid::Uuid;

use super::context::{RunCtx, TaskInfo};
use super::{CANCELLED_BY_USER, MAX_BACKGROUND_TASKS, TASK_LIMIT_ERROR};
use crate::error::ToolFailure;
use crate::provider::ChatMessage;
use crate::task_report::TaskReport;
use crate::tools::DELEGATE;

impl RunCtx {
    /// How the settled tasks not yet reported ended, marking them reported; `None` when there
    /// is nothing new.
    pub(super) fn take_report(&self) -> Option<String> {
        let mut report = TaskReport::new();
        let mut any = false;
        for t in self.state().tasks.iter_mut() {
            if t.reported {
                continue;
            }
            let Some(outcome) = &t.outcome else { continue };
            t.reported = true;
            any = true;
            let outcome = outcome.as_deref().map_err(String::as_str);
            report.task(&format!("{} ({})", t.task_id, t.role), outcome);
        }
        any.then(|| report.finish())
    }

    pub(super) fn running_tasks(&self) -> usize {
        self.state()
            .tasks
            .iter()
            .filter(|t| t.outcome.is_none())
            .count()
    }

    fn task_ended(&self, task_id: &str, outcome: Result<String, String>) {
        if let Some(t) = self.state().tasks.iter_mut().find(|t| t.task_id == task_id) {
            t.outcome = Some(outcome);
        }
    }
}

impl RunCtx {
    /// Starts a sub-agent as a background task and returns at once with its task id. The
    /// sixth running task is spawned and completed at once with [`TASK_LIMIT_ERROR`].
    pub(super) async fn start_task(
        &self,
        parent_id: &str,
        role: String,
        instructions: String,
        tools: Vec<String>,
    ) -> Result<serde_json::Value, ToolFailure> {
        let task_id = format!("task-{}", Uuid::now_v7());
        // The limit is the thread's: tasks of earlier runs that still run count too. Counting
        // and then spawning needs no lock: only the live run's orchestrator calls `delegate`
        // (sub-agents are never offered it, and a thread has one live run), and an agent runs
        // its tool calls one after another, so no other start can come between the two.
        let running = self
            .log
            .thread_state(&self.ids.thread_id)
            .await
            .map_err(|e| ToolFailure::Fatal(e.into()))?
            .running_tasks()
            .count();
        if running >= MAX_BACKGROUND_TASKS {
            // Spawned and completed with the limit error in one append: the task never shows
            // as running.
            let agent_id = format!("agent-{}", Uuid::now_v7());
            let event = |body| {
                ThreadCommand::Record(AgentEvent::new(
                    self.ids.run_id.as_str(),
                    agent_id.as_str(),
                    body,
                ))
            };
            let commands = vec![
                event(EventBody::AgentSpawned(AgentSpawned::new(
                    parent_id,
                    role.clone(),
                    tools.into_iter().filter(|t| t != DELEGATE).collect(),
                    Some(task_id),
                ))),
                event(EventBody::AgentCompleted(AgentCompleted {
                    role,
                    result: String::new(),
                    error: Some(TASK_LIMIT_ERROR.to_string()),
                })),
            ];
            self.log
                .append(&self.ids.thread_id, commands)
                .await
                .map_err(|e| ToolFailure::Fatal(e.into()))?;
            return Err(ToolFailure::failed(TASK_LIMIT_ERROR));
        }
        let (agent_id, subset) = self
            .spawn_sub_agent(parent_id, &role, tools, Some(task_id.clone()))
            .await?;
        self.state().tasks.push(TaskInfo {
            task_id: task_id.clone(),
            role: role.clone(),
            outcome: None,
            reported: false,
        });
        let me = self
            .me
            .upgrade()
            .expect("the run context outlives its tools");
        let (tid, aid, r) = (task_id.clone(), agent_id.clone(), role.clone());
        // The `delegate` call's span, named as the task's parent without holding it open.
        let trace_parent = crate::telemetry::current_context();
        let task = async move {
            let ctx = me;
            let messages = vec![ChatMessage::User {
                text: instructions.clone(),
            }];
            let body = AssertUnwindSafe(ctx.drive_sub_agent(
                aid.clone(),
                r.clone(),
                subset,
                instructions,
                messages,
                None,
                Some(tid.clone()),
                Some(trace_parent),
            ))
            .catch_unwind();
            let outcome = tokio::select! {
                biased;
                _ = ctx.control.task_cancelled(&tid) => Err(CANCELLED_BY_USER.to_string()),
                res = body => match res {
                    Ok(Ok(text)) => Ok(text),
                    Ok(Err(ToolFailure::Failed(e))) => Err(e),
                    Ok(Err(ToolFailure::Fatal(e))) => Err(e.to_string()),
                    Err(_) => Err("the background task panicked".to_string()),
                },
            };
            if let Err(e) = &outcome {
                ctx.settle_agent(&aid, &r, e).await;
            }
            tracing::info!(task_id = %tid, ok = outcome.is_ok(), "background task ended");
            ctx.task_ended(&tid, outcome);
        };
        let _ = self.spawner.send(Box::pin(task));
        Ok(serde_json::json!({
            "taskId": task_id,
            "agentId": agent_id,
            "role": role,
            "status": "running",
        }))
    }
}
