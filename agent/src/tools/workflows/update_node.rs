//! `update-node`: a node's name, parameters, position or trigger flag changed.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use threadstream_domain::event::JsonObject;
use threadstream_domain::workflow::{NodePatch, WorkflowCommand};

use super::{change, find_workflow, resolve};
use crate::error::ToolFailure;
use crate::tools::args::{self, grid_position, NonBlank};
use crate::tools::{Tool, ToolCtx};
use crate::workflows;

pub const UPDATE_NODE: &str = "update-node";

// Field doc comments are the descriptions the model reads.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct UpdateNodeArgs {
    workflow_id: NonBlank,
    /// the node's name or id
    node: NonBlank,
    name: Option<NonBlank>,
    parameters: Option<JsonObject>,
    position: Option<[f64; 2]>,
    trigger: Option<bool>,
}

pub struct UpdateNode;

impl Tool for UpdateNode {
    fn name(&self) -> &str {
        UPDATE_NODE
    }
    fn description(&self) -> &str {
        "Change a node of a workflow (by name or id): its name, parameters (replaced whole), \
         position or trigger flag."
    }
    fn parameters(&self) -> Value {
        args::schema::<UpdateNodeArgs>()
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let UpdateNodeArgs {
                workflow_id,
                node,
                name,
                parameters,
                position,
                trigger,
            } = args::parse(&args)?;
            let id = workflow_id.as_str();
            let wf = find_workflow(ctx, id).await?;
            let node_id = resolve(&wf, node.as_str())?.id.clone();
            let patch = NodePatch {
                node_id,
                name: name.map(|n| n.trimmed()),
                parameters,
                position: position.map(grid_position),
                trigger,
            };
            let wf = change(ctx, id, vec![WorkflowCommand::UpdateNode(patch)]).await?;
            Ok(workflows::view(&wf))
        })
    }
}
