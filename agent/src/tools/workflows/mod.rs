//! The workflow tools, one module each, over the event-sourced workflow store
//! ([`crate::workflows`]), and what they share: finding a workflow and a node, appending
//! workflow commands, the arguments that describe a node.

mod add_node;
mod connect_nodes;
mod create;
mod delete;
mod get;
mod list;
mod remove_node;
mod update_node;
mod validate;

use schemars::JsonSchema;
use serde::Deserialize;
use threadstream_domain::event::JsonObject;
use threadstream_domain::workflow::{Node, WorkflowCommand};
use threadstream_domain::ThreadError;
use threadstream_store::StoreError;

use super::args::{grid_position, NonBlank};
use super::ToolCtx;
use crate::error::ToolFailure;
use crate::workflows::{self, Workflow};

pub use add_node::{AddNode, ADD_NODE};
pub use connect_nodes::{ConnectNodes, CONNECT_NODES};
pub use create::{CreateWorkflow, CREATE_WORKFLOW};
pub use delete::{DeleteWorkflow, DELETE_WORKFLOW};
pub use get::{GetWorkflow, GET_WORKFLOW};
pub use list::{ListWorkflows, LIST_WORKFLOWS};
pub use remove_node::{RemoveNode, REMOVE_NODE};
pub use update_node::{UpdateNode, UPDATE_NODE};
pub use validate::{ValidateWorkflow, VALIDATE_WORKFLOW};

/// The workflow builder's tools: a conversation on a workflow (`POST /smith…`) gets only these.
pub const WORKFLOW_TOOLS: &[&str] = &[
    LIST_WORKFLOWS,
    GET_WORKFLOW,
    CREATE_WORKFLOW,
    ADD_NODE,
    CONNECT_NODES,
    UPDATE_NODE,
    REMOVE_NODE,
    VALIDATE_WORKFLOW,
    DELETE_WORKFLOW,
];

/// Threads of workflow-builder conversations (`POST /smith…`) start with this.
pub const WORKFLOW_BUILDER_THREADS: &str = "smith-";

/// The message a workflow-builder turn on an existing workflow sends the model: the prompt,
/// introduced by the workflow it is about.
pub fn workflow_builder_message(workflow_id: &str, prompt: &str) -> String {
    format!("Workflow `{workflow_id}`: {prompt}")
}

/// The workflow id and prompt of a [`workflow_builder_message`].
pub fn parse_workflow_builder_message(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix("Workflow `")?;
    let (id, prompt) = rest.split_once("`: ")?;
    Some((id, prompt))
}

/// Arguments naming one workflow.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct WorkflowIdArgs {
    pub(super) workflow_id: NonBlank,
}

// The arguments that describe a new node (`create-workflow`'s `nodes`, `add-node`). Field doc
// comments are the descriptions the model reads.
#[derive(Deserialize, JsonSchema)]
pub(super) struct NodeArgs {
    /// unique in the workflow
    name: NonBlank,
    /// node type, e.g. n8n-nodes-base.httpRequest
    #[serde(rename = "type")]
    node_type: NonBlank,
    /// starts the workflow (default: the type contains 'trigger')
    trigger: Option<bool>,
    parameters: Option<JsonObject>,
    position: Option<[f64; 2]>,
}

impl NodeArgs {
    /// The node with id `id`, the `index`-th of its workflow (which places it by default).
    fn into_node(self, id: String, index: usize) -> Node {
        let mut node = workflows::new_node(
            &id,
            &self.name.trimmed(),
            &self.node_type.trimmed(),
            250 * index as i64,
        );
        if let Some(t) = self.trigger {
            node.trigger = t;
        }
        if let Some(p) = self.parameters {
            node.parameters = p;
        }
        if let Some(p) = self.position {
            node.position = grid_position(p);
        }
        node
    }
}

pub(super) fn not_found(id: &str) -> ToolFailure {
    ToolFailure::failed(format!("Workflow '{id}' not found"))
}

pub(super) async fn find_workflow(ctx: &ToolCtx<'_>, id: &str) -> Result<Workflow, ToolFailure> {
    ctx.workflows.get(id).await?.ok_or_else(|| not_found(id))
}

/// Whom the agent changes a workflow for, as its events record (`userId`): the thread's owner,
/// since the workflow may hold their words and erasing that user takes it
/// (docs/operations.md, "Erasure and retention"); `agent` for a thread without one.
pub(super) async fn acting_for(ctx: &ToolCtx<'_>) -> Result<String, ToolFailure> {
    Ok(ctx
        .log
        .thread_owner(ctx.thread_id)
        .await?
        .unwrap_or_else(|| "agent".into()))
}

/// Appends workflow commands for the calling agent; a broken rule is the tool's failure.
pub(super) async fn change(
    ctx: &ToolCtx<'_>,
    workflow_id: &str,
    commands: Vec<WorkflowCommand>,
) -> Result<Workflow, ToolFailure> {
    let by = acting_for(ctx).await?;
    match ctx
        .workflows
        .execute(ctx.run_id, ctx.agent_id, &by, workflow_id, commands)
        .await
    {
        Ok(_) => find_workflow(ctx, workflow_id).await,
        Err(StoreError::Rule(ThreadError::WorkflowNotFound(_))) => Err(not_found(workflow_id)),
        Err(StoreError::Rule(rule)) => Err(ToolFailure::failed(rule.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// A node of `wf` by id or name.
pub(super) fn resolve<'w>(wf: &'w Workflow, node: &str) -> Result<&'w Node, ToolFailure> {
    wf.nodes
        .iter()
        .find(|n| n.id == node)
        .or_else(|| wf.nodes.iter().find(|n| n.name == node))
        .ok_or_else(|| {
            ToolFailure::failed(format!(
                "workflow '{}' has no node '{node}'; nodes: {}",
                wf.id,
                wf.nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// The next free `n<k>` node id.
pub(super) fn next_node_id(wf: &Workflow, taken: usize) -> String {
    let max = wf
        .nodes
        .iter()
        .filter_map(|n| n.id.strip_prefix('n').and_then(|k| k.parse::<usize>().ok()))
        .max()
        .unwrap_or(0);
    format!("n{}", max + 1 + taken)
}
