//! `add-node`: a node added to a workflow, connected after another if asked.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::event::JsonObject;
use threadstream_domain::workflow::{Edge, WorkflowCommand};

use super::{change, find_workflow, next_node_id, resolve, NodeArgs};
use crate::error::ToolFailure;
use crate::tools::args::{self, NonBlank};
use crate::tools::{Tool, ToolCtx};
use crate::workflows;

pub const ADD_NODE: &str = "add-node";

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AddNodeArgs {
    workflow_id: NonBlank,
    connect_from: Option<String>,
    #[serde(flatten)]
    node: NodeArgs,
}

pub struct AddNode;

impl Tool for AddNode {
    fn name(&self) -> &'static str {
        ADD_NODE
    }
    fn description(&self) -> &'static str {
        "Add a node to a workflow; with `connectFrom` (a node name or id) it is also connected \
         after that node."
    }
    fn parameters(&self) -> Value {
        args::schema::<AddNodeArgs>()
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let AddNodeArgs {
                workflow_id,
                connect_from,
                node,
            } = args::parse(&args)?;
            let id = workflow_id.as_str();
            let wf = find_workflow(ctx, id).await?;
            let node = node.into_node(next_node_id(&wf, 0), wf.nodes.len());
            let node_id = node.id.clone();
            let mut commands = vec![WorkflowCommand::AddNode(node)];
            if let Some(from) = connect_from {
                commands.push(WorkflowCommand::Connect(Edge {
                    from: resolve(&wf, &from)?.id.clone(),
                    to: node_id.clone(),
                }));
            }
            let wf = change(ctx, id, commands).await?;
            Ok(json!({"nodeId": node_id, "workflow": workflows::view(&wf)}))
        })
    }
}
