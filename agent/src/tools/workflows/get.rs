//! `get-workflow`: one workflow with its nodes and edges.

use futures::future::BoxFuture;
use serde_json::Value;
use threadstream_domain::event::JsonObject;

use super::{find_workflow, WorkflowIdArgs};
use crate::error::ToolFailure;
use crate::tools::{args, Tool, ToolCtx};
use crate::workflows;

pub const GET_WORKFLOW: &str = "get-workflow";

pub struct GetWorkflow;

impl Tool for GetWorkflow {
    fn name(&self) -> &str {
        GET_WORKFLOW
    }
    fn description(&self) -> &str {
        "Get one workflow with its nodes and edges."
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
            Ok(workflows::view(&wf))
        })
    }
}
