//! `delete-workflow`: deletes a workflow for good, once the user approved.

use futures::future::BoxFuture;
use serde_json::{json, Value};
use threadstream_domain::event::JsonObject;
use threadstream_domain::workflow::WorkflowCommand;
use threadstream_domain::ThreadError;
use threadstream_store::StoreError;

use super::{acting_for, find_workflow, not_found, WorkflowIdArgs};
use crate::error::ToolFailure;
use crate::tools::{args, Tool, ToolCtx};
use crate::workflows;

pub const DELETE_WORKFLOW: &str = workflows::DELETE;

pub struct DeleteWorkflow;

impl Tool for DeleteWorkflow {
    fn name(&self) -> &str {
        DELETE_WORKFLOW
    }
    fn description(&self) -> &str {
        "Delete a workflow for good. Destructive: the user is asked to approve first."
    }
    fn parameters(&self) -> Value {
        args::schema::<WorkflowIdArgs>()
    }
    fn destructive(&self) -> bool {
        true
    }
    fn confirmation_message(&self, args: &JsonObject) -> String {
        match args.get("workflowId").and_then(Value::as_str) {
            Some(id) => format!("Delete workflow '{id}'? This cannot be undone."),
            None => "Delete this workflow? This cannot be undone.".into(),
        }
    }
    fn status_message(&self, _args: &JsonObject) -> Option<String> {
        Some("Deleting workflow…".into())
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let WorkflowIdArgs { workflow_id } = args::parse(&args)?;
            let id = workflow_id.as_str();
            let wf = find_workflow(ctx, id).await?;
            let by = acting_for(ctx).await?;
            match ctx
                .workflows
                .execute(
                    ctx.run_id,
                    ctx.agent_id,
                    &by,
                    id,
                    vec![WorkflowCommand::Delete],
                )
                .await
            {
                Ok(_) => Ok(json!({"deleted": wf.id, "name": wf.name})),
                Err(StoreError::Rule(ThreadError::WorkflowNotFound(_))) => Err(not_found(id)),
                Err(e) => Err(e.into()),
            }
        })
    }
}
