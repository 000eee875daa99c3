//! `plan`: the run's task checklist, a new plan shown to the user for review first.

use std::collections::HashSet;

use futures::future::BoxFuture;
use serde_json::{json, Value};
use threadstream_domain::event::{
    EventBody, InputType, JsonObject, Severity, TaskList, TaskStatus, TasksUpdate,
};
use threadstream_store::StoreError;

use super::{args, Tool, ToolCtx};
use crate::error::ToolFailure;

pub const PLAN: &str = "plan";

/// Writes or updates the task checklist: emits `tasks-update` with the full list. A new plan
/// — more than one task, none started yet, and tasks the run's previous plan did not have — is
/// first shown to the user (`confirmation-request` with `inputType: "plan-review"` and the
/// tasks); it is only published once approved, and a rejection (with the user's feedback) is
/// the call's error.
pub struct PlanTool;

/// The run's last plan shown by `agent_id`, from the log.
async fn previous_plan(ctx: &ToolCtx<'_>) -> Result<Option<TaskList>, StoreError> {
    let mut last = None;
    let mut after = 0;
    loop {
        let page = ctx.log.read_thread(ctx.thread_id, after, 5_000).await?;
        let Some(end) = page.last() else { break };
        after = end.id;
        for e in page.iter().filter(|e| {
            e.run_id == ctx.run_id && e.agent_id == ctx.agent_id && e.event_type == "tasks-update"
        }) {
            if let Ok(u) = serde_json::from_str::<TasksUpdate>(&e.payload) {
                last = Some(u.tasks);
            }
        }
        if page.len() < 5_000 {
            break;
        }
    }
    Ok(last)
}

impl Tool for PlanTool {
    fn name(&self) -> &str {
        PLAN
    }
    fn description(&self) -> &str {
        "Write or update the task checklist. Send the whole list every time, with each task's \
         current status (todo, in_progress, done, failed, cancelled). A new plan of several \
         tasks, none started, is shown to the user for approval before it runs; if it is \
         rejected, revise it using the user's feedback."
    }
    fn parameters(&self) -> Value {
        args::schema::<TaskList>()
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let list: TaskList = args::parse(&args)?;
            if list.tasks.is_empty() {
                return Err(ToolFailure::failed("invalid plan: no tasks"));
            }
            let mut ids = HashSet::new();
            for t in &list.tasks {
                if !ids.insert(t.id.as_str()) {
                    return Err(ToolFailure::failed(format!(
                        "invalid plan: duplicate task id '{}'",
                        t.id
                    )));
                }
            }
            let previous = previous_plan(ctx).await?;
            let known: HashSet<&str> = previous
                .iter()
                .flat_map(|p| p.tasks.iter().map(|t| t.id.as_str()))
                .collect();
            let new_plan = list.tasks.iter().any(|t| !known.contains(t.id.as_str()));
            let not_started = list.tasks.iter().all(|t| t.status == TaskStatus::Todo);
            let mut result = json!({ "tasks": list.tasks });
            if new_plan && not_started && list.tasks.len() > 1 {
                let mut request = ctx.request(
                    PLAN,
                    &args,
                    Severity::Info,
                    format!(
                        "Review this plan of {} tasks before it runs.",
                        list.tasks.len()
                    ),
                );
                request.input_type = Some(InputType::PlanReview);
                request.tasks = Some(list.clone());
                let answer = ctx.ask(request).await?;
                let feedback = answer.user_input.filter(|f| !f.trim().is_empty());
                if !answer.approved {
                    return Err(ToolFailure::failed(match feedback {
                        Some(f) => format!("The user rejected the plan: {f}"),
                        None => "The user rejected the plan".to_string(),
                    }));
                }
                result["approved"] = Value::Bool(true);
                if let Some(f) = feedback {
                    result["feedback"] = Value::String(f);
                }
            }
            ctx.record(EventBody::TasksUpdate(TasksUpdate {
                tasks: list,
                plan_items: None,
            }))
            .await?;
            Ok(result)
        })
    }
}
