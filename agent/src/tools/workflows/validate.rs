//! `validate-workflow`: whether a workflow can run, and what stops it.

use futures::future::BoxFuture;
use serde_json::{json, Value};
use threadstream_domain::event::JsonObject;

use super::{find_workflow, WorkflowIdArgs};
use crate::error::ToolFailure;
use crate::tools::{args, Tool, ToolCtx};

pub const VALIDATE_WORKFLOW: &str = "validate-workflow";

pub struct ValidateWorkflow;

impl Tool for ValidateWorkflow {
    fn name(&self) -> &str {
        VALIDATE_WORKFLOW
    }
    fn description(&self) -> &str {
        "Check that a workflow can run: exactly one trigger, edges between existing nodes, no \
         cycles, every node reachable from the trigger. Returns {valid, issues}."
    }
    fn parameters(&self) -> Value {
        args::schema::<WorkflowIdArgs>()
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let WorkflowIdArgs { workflow_id } = args::parse(&args)?;
            let wf = find_workflow(ctx, workflow_id.as_str()).await?;
            let issues = wf.validate();
            Ok(json!({"workflowId": wf.id, "valid": issues.is_empty(), "issues": issues}))
        })
    }
}
