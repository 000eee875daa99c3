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

/// The schema offered: the workflow and the node's arguments in one object. Only its schema is
/// used: the arguments are parsed in their two parts, because within a `#[serde(flatten)]`
/// field serde cannot tell which argument failed, and the model must be told.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct AddNodeArgs {
    #[serde(flatten)]
    target: Target,
    #[serde(flatten)]
    node: NodeArgs,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Target {
    workflow_id: NonBlank,
    connect_from: Option<String>,
}

pub struct AddNode;

impl Tool for AddNode {
    fn name(&self) -> &str {
        ADD_NODE
    }
    fn description(&self) -> &str {
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
            let Target {
                workflow_id,
                connect_from,
            } = args::parse(&args)?;
            let id = workflow_id.as_str();
            let wf = find_workflow(ctx, id).await?;
            let node: NodeArgs = args::parse(&args)?;
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
