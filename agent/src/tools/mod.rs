//! The tool registry and the built-in tools, one module each.
//!
//! A [`Tool`] has a name, a description, JSON-schema parameters, a destructive flag (the runtime
//! asks the user before running a destructive tool) and an async `execute`. Tools keep no state
//! of their own: what they need is read from the log (the thread's workflows are folded from its
//! stored tool results, see [`crate::workflows`]) or is deterministic, and anything they produce
//! besides their result is appended to the log through [`ToolCtx::record`]. Each tool parses its
//! arguments into one type, from which its JSON schema is generated too ([`args`]).
//!
//! Built-in tools: [`plan`] (a new plan of several tasks is shown for review first),
//! [`delegate`], [`ask_user`], [`fetch_url`] (when configured), and the workflow tools over the
//! event-sourced store ([`workflows`]): `list-workflows`, `get-workflow`, `create-workflow`,
//! `add-node`, `connect-nodes`, `update-node`, `remove-node`, `validate-workflow`,
//! `delete-workflow` (destructive).

pub mod args;
pub mod ask_user;
pub mod delegate;
pub mod fetch_url;
pub mod plan;
pub mod workflows;

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use threadstream_domain::event::{ConfirmationRequest, EventBody, JsonObject, Severity};
use threadstream_domain::{AgentEvent, ThreadCommand};
use threadstream_store::{EventLog, StoreError};
use uuid::Uuid;

use crate::control::Answer;
use crate::error::ToolFailure;
use crate::fetch::{FetchPolicy, SafeFetcher};
use crate::mcp::McpServers;
use crate::provider::ToolSpec;
use crate::workflows::WorkflowStore;

pub use ask_user::{AskUser, ASK_USER};
pub use delegate::{DelegateTool, DELEGATE};
pub use fetch_url::{FetchUrl, FETCH_URL};
pub use plan::{PlanTool, PLAN};
pub use workflows::{
    parse_workflow_builder_message, workflow_builder_message, AddNode, ConnectNodes,
    CreateWorkflow, DeleteWorkflow, GetWorkflow, ListWorkflows, RemoveNode, UpdateNode,
    ValidateWorkflow, ADD_NODE, CONNECT_NODES, CREATE_WORKFLOW, DELETE_WORKFLOW, GET_WORKFLOW,
    LIST_WORKFLOWS, REMOVE_NODE, UPDATE_NODE, VALIDATE_WORKFLOW, WORKFLOW_BUILDER_THREADS,
    WORKFLOW_TOOLS,
};

/// The tools a thread's orchestrator is offered: the workflow tools on a workflow-builder
/// conversation, else all of `all`. Decided by the thread id, so a run resumed after a restart
/// gets the same tools.
pub fn offered_tools(thread_id: &str, all: Vec<String>) -> Vec<String> {
    if thread_id.starts_with(WORKFLOW_BUILDER_THREADS) {
        all.into_iter()
            .filter(|t| WORKFLOW_TOOLS.contains(&t.as_str()))
            .collect()
    } else {
        all
    }
}

/// Whether a thread's orchestrator is offered the MCP servers' tools: not on a
/// workflow-builder conversation, which keeps to the workflow tools.
pub fn offers_mcp(thread_id: &str) -> bool {
    !thread_id.starts_with(WORKFLOW_BUILDER_THREADS)
}

/// What the run offers its tools; implemented by the orchestrator.
pub trait RunHost: Send + Sync {
    /// Spawns a sub-agent of `parent_id` with a clean context and runs it to the end; returns
    /// its final answer. `tools` must name registered tools other than `delegate`.
    fn run_sub_agent<'a>(
        &'a self,
        parent_id: &'a str,
        role: String,
        instructions: String,
        tools: Vec<String>,
    ) -> BoxFuture<'a, Result<String, ToolFailure>>;

    /// Starts a sub-agent as a background task; returns `{taskId, agentId, role, status}` at
    /// once (or fails with the limit error when 5 tasks are running).
    fn start_task<'a>(
        &'a self,
        parent_id: &'a str,
        role: String,
        instructions: String,
        tools: Vec<String>,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>>;

    /// Stores a `confirmation-request` of agent `agent_id` and waits for the user's answer
    /// (the configured timeout ends the run).
    fn confirm<'a>(
        &'a self,
        agent_id: &'a str,
        request: ConfirmationRequest,
    ) -> BoxFuture<'a, Result<Answer, ToolFailure>>;
}

/// What a tool may use while it runs.
pub struct ToolCtx<'a> {
    pub log: &'a EventLog,
    pub thread_id: &'a str,
    pub run_id: &'a str,
    /// The agent that called the tool.
    pub agent_id: &'a str,
    /// The log's id of this call (`tc-…`).
    pub tool_call_id: &'a str,
    pub host: &'a dyn RunHost,
    pub workflows: &'a WorkflowStore,
}

impl ToolCtx<'_> {
    /// Appends an event of the calling agent to the log.
    pub async fn record(&self, body: EventBody) -> Result<(), StoreError> {
        let event = AgentEvent::new(self.run_id, self.agent_id, body);
        self.log
            .append(self.thread_id, vec![ThreadCommand::Record(event)])
            .await
            .map(|_| ())
    }

    /// Asks the user (`confirmation-request` on this call) and waits for the answer.
    pub async fn ask(&self, request: ConfirmationRequest) -> Result<Answer, ToolFailure> {
        self.host.confirm(self.agent_id, request).await
    }

    /// A confirmation request on this call, with a fresh id.
    pub fn request(
        &self,
        tool: &str,
        args: &JsonObject,
        severity: Severity,
        message: String,
    ) -> ConfirmationRequest {
        ConfirmationRequest::approval(
            format!("cr-{}", Uuid::now_v7()),
            self.tool_call_id,
            tool,
            args.clone(),
            severity,
            message,
        )
    }
}

/// One tool.
pub trait Tool: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// Parameters as a JSON-schema object.
    fn parameters(&self) -> Value;
    /// Destructive tools run only after the user approved a `confirmation-request`.
    fn destructive(&self) -> bool {
        false
    }
    /// The question shown to the user before a destructive call.
    fn confirmation_message(&self, _args: &JsonObject) -> String {
        format!("Run {}?", self.name())
    }
    /// A transient `status` shown while the tool runs (cleared afterwards), if any.
    fn status_message(&self, _args: &JsonObject) -> Option<String> {
        None
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>>;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_string(),
            description: self.description().to_string(),
            parameters: self.parameters(),
        }
    }
}

/// The tools a runtime offers: the built-in ones, in a stable order, then the tools the MCP
/// servers offer at the moment (they come and go with their servers).
#[derive(Clone)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    mcp: McpServers,
}

impl ToolRegistry {
    /// The built-in tools.
    pub fn builtin() -> Self {
        ToolRegistry {
            tools: vec![
                Arc::new(PlanTool),
                Arc::new(DelegateTool),
                Arc::new(AskUser),
                Arc::new(ListWorkflows),
                Arc::new(GetWorkflow),
                Arc::new(CreateWorkflow),
                Arc::new(AddNode),
                Arc::new(ConnectNodes),
                Arc::new(UpdateNode),
                Arc::new(RemoveNode),
                Arc::new(ValidateWorkflow),
                Arc::new(DeleteWorkflow),
            ],
            mcp: McpServers::default(),
        }
    }

    /// These tools plus those of `servers`.
    pub fn with_mcp(mut self, servers: McpServers) -> Self {
        self.mcp = servers;
        self
    }

    /// The MCP servers whose tools are offered.
    pub fn mcp(&self) -> &McpServers {
        &self.mcp
    }

    /// These tools plus `fetch-url` under `policy`, when there is one (off unless configured:
    /// it lets the model reach the network).
    pub fn with_fetch_url(mut self, policy: Option<FetchPolicy>) -> Self {
        if let Some(policy) = policy {
            self.tools
                .push(Arc::new(FetchUrl::new(SafeFetcher::new(policy))));
        }
        self
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        match self.tools.iter().find(|t| t.name() == name) {
            Some(t) => Some(t.clone()),
            None => self.mcp.tool(name).map(|t| t as Arc<dyn Tool>),
        }
    }

    /// Why `name` is not available now, when it is a tool of an MCP server that is down.
    pub fn unavailable(&self, name: &str) -> Option<String> {
        self.mcp.unavailable(name)
    }

    /// Every tool name: the built-in ones in registry order, then the MCP tools offered now.
    pub fn names(&self) -> Vec<String> {
        let mut names = self.builtin_names();
        names.extend(self.mcp_names());
        names
    }

    /// The built-in tools' names, in registry order.
    pub fn builtin_names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.name().to_string()).collect()
    }

    /// The names of the MCP tools offered now.
    pub fn mcp_names(&self) -> Vec<String> {
        self.mcp.tools().iter().map(|t| t.offered.clone()).collect()
    }

    /// The specs of the named tools, in registry order; names not offered now are skipped.
    pub fn specs(&self, names: &[String]) -> Vec<ToolSpec> {
        let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
        let mcp = self.mcp.tools();
        self.tools
            .iter()
            .filter(|t| wanted.contains(t.name()))
            .map(|t| t.spec())
            .chain(
                mcp.iter()
                    .filter(|t| wanted.contains(t.offered.as_str()))
                    .map(|t| t.spec()),
            )
            .collect()
    }
}
