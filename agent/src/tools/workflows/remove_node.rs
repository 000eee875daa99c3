//! `remove-node`: a node and its connections removed from a workflow.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use threadstream_domain::event::JsonObject;
use threadstream_domain::workflow::WorkflowCommand;

use super::{change, find_workflow, resolve};
use crate::error::ToolFailure;
use crate::tools::args::{self, NonBlank};
use crate::tools::{Tool, ToolCtx};
use crate::workflows;

pub const REMOVE_NODE: &str = "remove-node";

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RemoveNodeArgs {
    workflow_id: NonBlank,
    node: NonBlank,
}

pub struct RemoveNode;

impl Tool for RemoveNode {
    fn name(&self) -> &str {
        REMOVE_NODE
    }
    fn description(&self) -> &str {
        "Remove a node (by name or id) and its connections from a workflow."
    }
    fn parameters(&self) -> Value {
        args::schema::<RemoveNodeArgs>()
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let RemoveNodeArgs { workflow_id, node } = args::parse(&args)?;
            let id = workflow_id.as_str();
            let wf = find_workflow(ctx, id).await?;
            let node_id = resolve(&wf, node.as_str())?.id.clone();
            let wf = change(ctx, id, vec![WorkflowCommand::RemoveNode { node_id }]).await?;
            Ok(workflows::view(&wf))
        })
    }
}
