//! `create-workflow`: a new (inactive) workflow, with nodes and connections if given.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use threadstream_domain::event::JsonObject;
use threadstream_domain::workflow::{Edge, WorkflowCommand};
use uuid::Uuid;

use super::{change, NodeArgs};
use crate::error::ToolFailure;
use crate::tools::args::{self, NonBlank};
use crate::tools::{Tool, ToolCtx};
use crate::workflows;

pub const CREATE_WORKFLOW: &str = workflows::CREATE;

#[derive(Deserialize, JsonSchema)]
struct CreateArgs {
    name: NonBlank,
    nodes: Option<Vec<NodeArgs>>,
    connections: Option<Vec<ConnectionArgs>>,
}

// An edge between two of the new nodes, by name (or id).
#[derive(Deserialize, JsonSchema)]
struct ConnectionArgs {
    from: NonBlank,
    to: NonBlank,
}

pub struct CreateWorkflow;

impl Tool for CreateWorkflow {
    fn name(&self) -> &str {
        CREATE_WORKFLOW
    }
    fn description(&self) -> &str {
        "Create a workflow from a name, optionally with nodes and connections between them \
         (by node name). New workflows are inactive. Returns the workflow with its id."
    }
    fn parameters(&self) -> Value {
        args::schema::<CreateArgs>()
    }
    fn status_message(&self, _args: &JsonObject) -> Option<String> {
        Some("Creating workflow…".into())
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let CreateArgs {
                name,
                nodes,
                connections,
            } = args::parse(&args)?;
            let id = format!("wf-{}", Uuid::now_v7());
            let mut commands = vec![WorkflowCommand::Create {
                workflow_id: id.clone(),
                name: name.trimmed(),
                active: false,
            }];
            let mut by_name: Vec<(String, String)> = Vec::new();
            for (i, node) in nodes.unwrap_or_default().into_iter().enumerate() {
                let node = node.into_node(format!("n{}", i + 1), i);
                by_name.push((node.name.clone(), node.id.clone()));
                commands.push(WorkflowCommand::AddNode(node));
            }
            let find = |n: &NonBlank| {
                let n = n.as_str();
                by_name
                    .iter()
                    .find(|(name, id)| name == n || id == n)
                    .map(|(_, id)| id.clone())
                    .ok_or_else(|| ToolFailure::failed(format!("no node '{n}' to connect")))
            };
            for c in connections.unwrap_or_default() {
                commands.push(WorkflowCommand::Connect(Edge {
                    from: find(&c.from)?,
                    to: find(&c.to)?,
                }));
            }
            let wf = change(ctx, &id, commands).await?;
            Ok(workflows::view(&wf))
        })
    }
}
