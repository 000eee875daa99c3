//! `connect-nodes`: an edge between two nodes of a workflow.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use threadstream_domain::event::JsonObject;
use threadstream_domain::workflow::{Edge, WorkflowCommand};

use super::{change, find_workflow, resolve};
use crate::error::ToolFailure;
use crate::tools::args::{self, NonBlank};
use crate::tools::{Tool, ToolCtx};
use crate::workflows;

pub const CONNECT_NODES: &str = "connect-nodes";

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ConnectArgs {
    workflow_id: NonBlank,
    from: NonBlank,
    to: NonBlank,
}

pub struct ConnectNodes;

impl Tool for ConnectNodes {
    fn name(&self) -> &str {
        CONNECT_NODES
    }
    fn description(&self) -> &str {
        "Connect two nodes of a workflow: the output of `from` feeds `to` (node names or ids)."
    }
    fn parameters(&self) -> Value {
        args::schema::<ConnectArgs>()
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let ConnectArgs {
                workflow_id,
                from,
                to,
            } = args::parse(&args)?;
            let id = workflow_id.as_str();
            let wf = find_workflow(ctx, id).await?;
            let edge = Edge {
                from: resolve(&wf, from.as_str())?.id.clone(),
                to: resolve(&wf, to.as_str())?.id.clone(),
            };
            let wf = change(ctx, id, vec![WorkflowCommand::Connect(edge)]).await?;
            Ok(workflows::view(&wf))
        })
    }
}
