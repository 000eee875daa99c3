//! The tool registry and the built-in tools.
//!
//! A [`Tool`] has a name, a description, JSON-schema parameters, a destructive flag (the runtime
//! asks the user before running a destructive tool) and an async `execute`. Tools keep no state
//! of their own: what they need is read from the log (the thread's workflows are folded from its
//! stored tool results, see [`crate::workflows`]) or is deterministic, and anything they produce
//! besides their result is appended to the log through [`ToolCtx::record`].
//!
//! Built-in tools: `plan` (a new plan of several tasks is shown for review first), `delegate`,
//! `ask-user`, and the workflow tools over the event-sourced store ([`crate::workflows`]):
//! `list-workflows`, `get-workflow`, `create-workflow`, `add-node`, `connect-nodes`,
//! `update-node`, `remove-node`, `validate-workflow`, `delete-workflow` (destructive).

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{json, Value};
use threadstream_domain::event::{
    ConfirmationRequest, EventBody, InputType, JsonObject, Question, Severity, TaskList,
    TaskStatus, TasksUpdate,
};
use threadstream_domain::{AgentEvent, ThreadCommand};
use threadstream_store::{EventLog, StoreError};
use uuid::Uuid;

use crate::control::Answer;
use crate::error::ToolFailure;
use crate::fetch::{FetchPolicy, SafeFetcher};
use crate::provider::ToolSpec;
use crate::workflows::{self, Workflow, WorkflowStore};
use threadstream_domain::workflow::{Edge, NodePatch, WorkflowCommand};
use threadstream_domain::ThreadError;

pub const PLAN: &str = "plan";
pub const DELEGATE: &str = "delegate";
pub const ASK_USER: &str = "ask-user";
pub const LIST_WORKFLOWS: &str = "list-workflows";
pub const GET_WORKFLOW: &str = "get-workflow";
pub const CREATE_WORKFLOW: &str = workflows::CREATE;
pub const DELETE_WORKFLOW: &str = workflows::DELETE;
pub const ADD_NODE: &str = "add-node";
pub const CONNECT_NODES: &str = "connect-nodes";
pub const UPDATE_NODE: &str = "update-node";
pub const REMOVE_NODE: &str = "remove-node";
pub const VALIDATE_WORKFLOW: &str = "validate-workflow";
pub const FETCH_URL: &str = "fetch-url";

/// The workflow builder's tools (seed 004): a conversation on a workflow gets only these.
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
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
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

/// The tools a runtime offers, in a stable order.
#[derive(Clone)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
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
        }
    }

    /// These tools plus `fetch-url` under `policy`, when there is one (off unless configured:
    /// it lets the model reach the network).
    pub fn with_fetch_url(mut self, policy: Option<FetchPolicy>) -> Self {
        if let Some(policy) = policy {
            self.tools.push(Arc::new(FetchUrl {
                fetcher: SafeFetcher::new(policy),
            }));
        }
        self
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// Every tool name, in registry order.
    pub fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.name().to_string()).collect()
    }

    /// The specs of the named tools, in registry order; unknown names are skipped.
    pub fn specs(&self, names: &[String]) -> Vec<ToolSpec> {
        let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
        self.tools
            .iter()
            .filter(|t| wanted.contains(t.name()))
            .map(|t| t.spec())
            .collect()
    }
}

// ---- argument helpers ----

fn str_arg<'a>(args: &'a JsonObject, name: &str) -> Result<&'a str, ToolFailure> {
    match args.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        Some(Value::String(_)) => Err(ToolFailure::failed(format!("'{name}' must not be empty"))),
        Some(_) => Err(ToolFailure::failed(format!("'{name}' must be a string"))),
        None => Err(ToolFailure::failed(format!(
            "missing required argument '{name}'"
        ))),
    }
}

fn not_found(id: &str) -> ToolFailure {
    ToolFailure::failed(format!("Workflow '{id}' not found"))
}

async fn find_workflow(ctx: &ToolCtx<'_>, id: &str) -> Result<Workflow, ToolFailure> {
    ctx.workflows.get(id).await?.ok_or_else(|| not_found(id))
}

/// Appends workflow commands for the calling agent; a broken rule is the tool's failure.
async fn change(
    ctx: &ToolCtx<'_>,
    workflow_id: &str,
    commands: Vec<WorkflowCommand>,
) -> Result<Workflow, ToolFailure> {
    match ctx
        .workflows
        .execute(ctx.run_id, ctx.agent_id, "agent", workflow_id, commands)
        .await
    {
        Ok(_) => find_workflow(ctx, workflow_id).await,
        Err(StoreError::Rule(ThreadError::WorkflowNotFound(_))) => Err(not_found(workflow_id)),
        Err(StoreError::Rule(rule)) => Err(ToolFailure::failed(rule.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// A node of `wf` by id or name.
fn resolve<'w>(
    wf: &'w Workflow,
    node: &str,
) -> Result<&'w threadstream_domain::workflow::Node, ToolFailure> {
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
fn next_node_id(wf: &Workflow, taken: usize) -> String {
    let max = wf
        .nodes
        .iter()
        .filter_map(|n| n.id.strip_prefix('n').and_then(|k| k.parse::<usize>().ok()))
        .max()
        .unwrap_or(0);
    format!("n{}", max + 1 + taken)
}

fn opt_bool(args: &JsonObject, name: &str) -> Result<Option<bool>, ToolFailure> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ToolFailure::failed(format!("'{name}' must be a boolean"))),
    }
}

fn opt_object(args: &JsonObject, name: &str) -> Result<Option<JsonObject>, ToolFailure> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o.clone())),
        Some(_) => Err(ToolFailure::failed(format!("'{name}' must be an object"))),
    }
}

fn opt_position(args: &JsonObject) -> Result<Option<[i64; 2]>, ToolFailure> {
    match args.get("position") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value::<[f64; 2]>(v.clone())
            .map(|[x, y]| Some([x.round() as i64, y.round() as i64]))
            .map_err(|_| ToolFailure::failed("'position' must be [x, y]")),
    }
}

/// A node from tool arguments (`name`, `type`, `trigger?`, `parameters?`, `position?`).
fn node_from(
    args: &JsonObject,
    id: String,
    index: usize,
) -> Result<threadstream_domain::workflow::Node, ToolFailure> {
    let name = str_arg(args, "name")?.trim().to_string();
    let node_type = str_arg(args, "type")?.trim().to_string();
    let mut node = workflows::new_node(&id, &name, &node_type, 250 * index as i64);
    if let Some(t) = opt_bool(args, "trigger")? {
        node.trigger = t;
    }
    if let Some(p) = opt_object(args, "parameters")? {
        node.parameters = p;
    }
    if let Some(p) = opt_position(args)? {
        node.position = p;
    }
    Ok(node)
}

fn node_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "unique in the workflow"},
            "type": {"type": "string", "description": "node type, e.g. n8n-nodes-base.httpRequest"},
            "trigger": {"type": "boolean", "description": "starts the workflow (default: the type contains 'trigger')"},
            "parameters": {"type": "object"},
            "position": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}
        },
        "required": ["name", "type"]
    })
}

// ---- plan ----

/// Writes or updates the task checklist: emits `tasks-update` with the full list. A new plan
/// — more than one task, none started yet, and tasks the run's previous plan did not have — is
/// first shown to the user (`confirmation-request` with `inputType: "plan-review"` and the
/// tasks); it is only published once approved, and a rejection (with the user's feedback) is
/// the call's error.
pub struct PlanTool;

/// The run's last plan shown by `agent_id`, from the log.
async fn previous_plan(ctx: &ToolCtx<'_>) -> Result<Option<TaskList>, StoreError> {
    let mut last = None;
    let mut after = 0;
    loop {
        let page = ctx.log.read_thread(ctx.thread_id, after, 5_000).await?;
        let Some(end) = page.last() else { break };
        after = end.id;
        for e in page.iter().filter(|e| {
            e.run_id == ctx.run_id && e.agent_id == ctx.agent_id && e.event_type == "tasks-update"
        }) {
            if let Ok(u) = serde_json::from_str::<TasksUpdate>(&e.payload) {
                last = Some(u.tasks);
            }
        }
        if page.len() < 5_000 {
            break;
        }
    }
    Ok(last)
}

impl Tool for PlanTool {
    fn name(&self) -> &'static str {
        PLAN
    }
    fn description(&self) -> &'static str {
        "Write or update the task checklist. Send the whole list every time, with each task's \
         current status (todo, in_progress, done, failed, cancelled). A new plan of several \
         tasks, none started, is shown to the user for approval before it runs; if it is \
         rejected, revise it using the user's feedback."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "tasks": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "description": {"type": "string"},
                            "status": {"type": "string", "enum": ["todo", "in_progress", "done", "failed", "cancelled"]}
                        },
                        "required": ["id", "description", "status"]
                    }
                }
            },
            "required": ["tasks"]
        })
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let list: TaskList = serde_json::from_value(Value::Object(args.clone()))
                .map_err(|e| ToolFailure::failed(format!("invalid plan: {e}")))?;
            if list.tasks.is_empty() {
                return Err(ToolFailure::failed("invalid plan: no tasks"));
            }
            let mut ids = HashSet::new();
            for t in &list.tasks {
                if !ids.insert(t.id.as_str()) {
                    return Err(ToolFailure::failed(format!(
                        "invalid plan: duplicate task id '{}'",
                        t.id
                    )));
                }
            }
            let previous = previous_plan(ctx).await?;
            let known: HashSet<&str> = previous
                .iter()
                .flat_map(|p| p.tasks.iter().map(|t| t.id.as_str()))
                .collect();
            let new_plan = list.tasks.iter().any(|t| !known.contains(t.id.as_str()));
            let not_started = list.tasks.iter().all(|t| t.status == TaskStatus::Todo);
            let mut result = json!({ "tasks": list.tasks });
            if new_plan && not_started && list.tasks.len() > 1 {
                let mut request = ctx.request(
                    PLAN,
                    &args,
                    Severity::Info,
                    format!(
                        "Review this plan of {} tasks before it runs.",
                        list.tasks.len()
                    ),
                );
                request.input_type = Some(InputType::PlanReview);
                request.tasks = Some(list.clone());
                let answer = ctx.ask(request).await?;
                let feedback = answer.user_input.filter(|f| !f.trim().is_empty());
                if !answer.approved {
                    return Err(ToolFailure::failed(match feedback {
                        Some(f) => format!("The user rejected the plan: {f}"),
                        None => "The user rejected the plan".to_string(),
                    }));
                }
                result["approved"] = Value::Bool(true);
                if let Some(f) = feedback {
                    result["feedback"] = Value::String(f);
                }
            }
            ctx.record(EventBody::TasksUpdate(TasksUpdate {
                tasks: list,
                plan_items: None,
            }))
            .await?;
            Ok(result)
        })
    }
}

// ---- ask-user ----

/// Asks the user a question (`inputType: "text"`) or several structured ones
/// (`inputType: "questions"`); the answer is the call's result.
pub struct AskUser;

impl Tool for AskUser {
    fn name(&self) -> &'static str {
        ASK_USER
    }
    fn description(&self) -> &'static str {
        "Ask the user something only they know. Either one free-text `question`, or several \
         `questions` (each with an id, the question, a type single, multi or text, and options \
         for single and multi). Returns the user's answer."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "a free-text question"},
                "introMessage": {"type": "string", "description": "shown above the questions"},
                "questions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "question": {"type": "string"},
                            "type": {"type": "string", "enum": ["single", "multi", "text"]},
                            "options": {"type": "array", "items": {"type": "string"}}
                        },
                        "required": ["id", "question", "type"]
                    }
                }
            }
        })
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let questions: Option<Vec<Question>> = match args.get("questions") {
                None | Some(Value::Null) => None,
                Some(v) => Some(
                    serde_json::from_value(v.clone())
                        .map_err(|e| ToolFailure::failed(format!("invalid 'questions': {e}")))?,
                ),
            }
            .filter(|q: &Vec<Question>| !q.is_empty());
            let intro = args
                .get("introMessage")
                .and_then(Value::as_str)
                .map(str::to_string);
            let question = args
                .get("question")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|q| !q.is_empty())
                .map(str::to_string);
            let mut request = match (&questions, &question) {
                (Some(qs), _) => {
                    let message = question
                        .clone()
                        .or_else(|| intro.clone())
                        .unwrap_or_else(|| format!("{} questions for you", qs.len()));
                    let mut r = ctx.request(ASK_USER, &args, Severity::Info, message);
                    r.input_type = Some(InputType::Questions);
                    r.questions = questions.clone();
                    r
                }
                (None, Some(q)) => {
                    let mut r = ctx.request(ASK_USER, &args, Severity::Info, q.clone());
                    r.input_type = Some(InputType::Text);
                    r
                }
                (None, None) => {
                    return Err(ToolFailure::failed(
                        "give a 'question' or a list of 'questions'",
                    ))
                }
            };
            request.intro_message = intro;
            let answer = ctx.ask(request).await?;
            if !answer.approved {
                return Err(ToolFailure::failed("The user declined to answer"));
            }
            let mut result = json!({});
            if let Some(a) = answer.answers {
                result["answers"] = a;
            }
            if let Some(t) = answer.user_input {
                result["answer"] = Value::String(t);
            }
            Ok(result)
        })
    }
}

// ---- delegate ----

/// Hands a task to a sub-agent with a role, instructions and a tool subset.
pub struct DelegateTool;

impl Tool for DelegateTool {
    fn name(&self) -> &'static str {
        DELEGATE
    }
    fn description(&self) -> &'static str {
        "Delegate a self-contained task to a sub-agent. Give it a role, complete instructions \
         (it sees nothing else of this conversation) and the tools it needs. Sub-agents cannot \
         delegate. Returns the sub-agent's final answer. With `background: true` the sub-agent \
         runs detached (at most 5 at once): the call returns its taskId at once, and you are \
         told how each task ended when they are all done."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "role": {"type": "string", "description": "free-form role, e.g. 'workflow builder'"},
                "instructions": {"type": "string", "description": "the sub-agent's task"},
                "tools": {"type": "array", "items": {"type": "string"}, "description": "tool names the sub-agent may use"},
                "background": {"type": "boolean", "description": "run as a background task and return at once"}
            },
            "required": ["role", "instructions", "tools"]
        })
    }
    fn status_message(&self, args: &JsonObject) -> Option<String> {
        let role = args
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("sub-agent");
        Some(format!("Delegating to {role}…"))
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let role = str_arg(&args, "role")?.trim().to_string();
            let instructions = str_arg(&args, "instructions")?.to_string();
            let tools = match args.get("tools") {
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| ToolFailure::failed("'tools' must be a list of names"))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                None => Vec::new(),
                Some(_) => return Err(ToolFailure::failed("'tools' must be a list of names")),
            };
            let background = match args.get("background") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(ToolFailure::failed("'background' must be a boolean")),
            };
            if background {
                return ctx
                    .host
                    .start_task(ctx.agent_id, role, instructions, tools)
                    .await;
            }
            let answer = ctx
                .host
                .run_sub_agent(ctx.agent_id, role, instructions, tools)
                .await?;
            Ok(Value::String(answer))
        })
    }
}

// ---- workflows ----

pub struct ListWorkflows;

impl Tool for ListWorkflows {
    fn name(&self) -> &'static str {
        LIST_WORKFLOWS
    }
    fn description(&self) -> &'static str {
        "List the workflows (id, name, active, node count)."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"limit": {"type": "integer", "minimum": 1, "description": "at most this many"}}
        })
    }
    fn status_message(&self, _args: &JsonObject) -> Option<String> {
        Some("Looking up workflows…".into())
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let limit = match args.get("limit") {
                None | Some(Value::Null) => usize::MAX,
                Some(v) => match v.as_u64() {
                    Some(n) if n >= 1 => n as usize,
                    _ => return Err(ToolFailure::failed("'limit' must be a positive integer")),
                },
            };
            let all = ctx.workflows.list().await?;
            let list: Vec<Value> = all.iter().take(limit).map(workflows::summary).collect();
            Ok(json!({"workflows": list, "total": all.len()}))
        })
    }
}

/// Fetches a public http(s) URL through [`SafeFetcher`].
pub struct FetchUrl {
    fetcher: SafeFetcher,
}

impl Tool for FetchUrl {
    fn name(&self) -> &'static str {
        FETCH_URL
    }
    fn description(&self) -> &'static str {
        "Fetch a public http or https URL and return its status, content type and text. \
         Private, loopback and link-local addresses are refused; responses over 1 MB or slower \
         than 10 s fail."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"url": {"type": "string", "description": "the http(s) URL"}},
            "required": ["url"]
        })
    }
    fn status_message(&self, args: &JsonObject) -> Option<String> {
        args.get("url")
            .and_then(Value::as_str)
            .map(|u| format!("Fetching {u}…"))
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let url = str_arg(&args, "url")?;
            let page = self
                .fetcher
                .fetch(url)
                .await
                .map_err(|e| ToolFailure::failed(e.to_string()))?;
            Ok(json!({
                "url": page.url,
                "status": page.status,
                "contentType": page.content_type,
                "body": page.body,
            }))
        })
    }
}

pub struct GetWorkflow;

impl Tool for GetWorkflow {
    fn name(&self) -> &'static str {
        GET_WORKFLOW
    }
    fn description(&self) -> &'static str {
        "Get one workflow with its nodes and edges."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"workflowId": {"type": "string"}},
            "required": ["workflowId"]
        })
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let id = str_arg(&args, "workflowId")?;
            let wf = find_workflow(ctx, id).await?;
            Ok(workflows::view(&wf))
        })
    }
}

pub struct CreateWorkflow;

impl Tool for CreateWorkflow {
    fn name(&self) -> &'static str {
        CREATE_WORKFLOW
    }
    fn description(&self) -> &'static str {
        "Create a workflow from a name, optionally with nodes and connections between them \
         (by node name). New workflows are inactive. Returns the workflow with its id."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "nodes": {"type": "array", "items": node_schema()},
                "connections": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
                        "required": ["from", "to"]
                    }
                }
            },
            "required": ["name"]
        })
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
            let name = str_arg(&args, "name")?.trim().to_string();
            let id = format!("wf-{}", Uuid::now_v7());
            let mut commands = vec![WorkflowCommand::Create {
                workflow_id: id.clone(),
                name,
                active: false,
            }];
            let mut by_name: Vec<(String, String)> = Vec::new();
            match args.get("nodes") {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        let Value::Object(o) = item else {
                            return Err(ToolFailure::failed("each node must be an object"));
                        };
                        let node = node_from(o, format!("n{}", i + 1), i)?;
                        by_name.push((node.name.clone(), node.id.clone()));
                        commands.push(WorkflowCommand::AddNode(node));
                    }
                }
                Some(_) => return Err(ToolFailure::failed("'nodes' must be a list")),
            }
            let find = |n: &str| {
                by_name
                    .iter()
                    .find(|(name, id)| name == n || id == n)
                    .map(|(_, id)| id.clone())
                    .ok_or_else(|| ToolFailure::failed(format!("no node '{n}' to connect")))
            };
            match args.get("connections") {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for item in items {
                        let Value::Object(o) = item else {
                            return Err(ToolFailure::failed("each connection must be {from, to}"));
                        };
                        commands.push(WorkflowCommand::Connect(Edge {
                            from: find(str_arg(o, "from")?)?,
                            to: find(str_arg(o, "to")?)?,
                        }));
                    }
                }
                Some(_) => return Err(ToolFailure::failed("'connections' must be a list")),
            }
            let wf = change(ctx, &id, commands).await?;
            Ok(workflows::view(&wf))
        })
    }
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
        let mut schema = node_schema();
        schema["properties"]["workflowId"] = json!({"type": "string"});
        schema["properties"]["connectFrom"] = json!({"type": "string"});
        schema["required"] = json!(["workflowId", "name", "type"]);
        schema
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let id = str_arg(&args, "workflowId")?;
            let wf = find_workflow(ctx, id).await?;
            let node = node_from(&args, next_node_id(&wf, 0), wf.nodes.len())?;
            let node_id = node.id.clone();
            let mut commands = vec![WorkflowCommand::AddNode(node)];
            if let Some(Value::String(from)) = args.get("connectFrom") {
                commands.push(WorkflowCommand::Connect(Edge {
                    from: resolve(&wf, from)?.id.clone(),
                    to: node_id.clone(),
                }));
            }
            let wf = change(ctx, id, commands).await?;
            Ok(json!({"nodeId": node_id, "workflow": workflows::view(&wf)}))
        })
    }
}

pub struct ConnectNodes;

impl Tool for ConnectNodes {
    fn name(&self) -> &'static str {
        CONNECT_NODES
    }
    fn description(&self) -> &'static str {
        "Connect two nodes of a workflow: the output of `from` feeds `to` (node names or ids)."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"workflowId": {"type": "string"}, "from": {"type": "string"}, "to": {"type": "string"}},
            "required": ["workflowId", "from", "to"]
        })
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let id = str_arg(&args, "workflowId")?;
            let wf = find_workflow(ctx, id).await?;
            let edge = Edge {
                from: resolve(&wf, str_arg(&args, "from")?)?.id.clone(),
                to: resolve(&wf, str_arg(&args, "to")?)?.id.clone(),
            };
            let wf = change(ctx, id, vec![WorkflowCommand::Connect(edge)]).await?;
            Ok(workflows::view(&wf))
        })
    }
}

pub struct UpdateNode;

impl Tool for UpdateNode {
    fn name(&self) -> &'static str {
        UPDATE_NODE
    }
    fn description(&self) -> &'static str {
        "Change a node of a workflow (by name or id): its name, parameters (replaced whole), \
         position or trigger flag."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "workflowId": {"type": "string"},
                "node": {"type": "string", "description": "the node's name or id"},
                "name": {"type": "string"},
                "parameters": {"type": "object"},
                "position": {"type": "array", "items": {"type": "number"}},
                "trigger": {"type": "boolean"}
            },
            "required": ["workflowId", "node"]
        })
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let id = str_arg(&args, "workflowId")?;
            let wf = find_workflow(ctx, id).await?;
            let node_id = resolve(&wf, str_arg(&args, "node")?)?.id.clone();
            let patch = NodePatch {
                node_id,
                name: match args.get("name") {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(str_arg(&args, "name")?.trim().to_string()),
                },
                parameters: opt_object(&args, "parameters")?,
                position: opt_position(&args)?,
                trigger: opt_bool(&args, "trigger")?,
            };
            let wf = change(ctx, id, vec![WorkflowCommand::UpdateNode(patch)]).await?;
            Ok(workflows::view(&wf))
        })
    }
}

pub struct RemoveNode;

impl Tool for RemoveNode {
    fn name(&self) -> &'static str {
        REMOVE_NODE
    }
    fn description(&self) -> &'static str {
        "Remove a node (by name or id) and its connections from a workflow."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"workflowId": {"type": "string"}, "node": {"type": "string"}},
            "required": ["workflowId", "node"]
        })
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let id = str_arg(&args, "workflowId")?;
            let wf = find_workflow(ctx, id).await?;
            let node_id = resolve(&wf, str_arg(&args, "node")?)?.id.clone();
            let wf = change(ctx, id, vec![WorkflowCommand::RemoveNode { node_id }]).await?;
            Ok(workflows::view(&wf))
        })
    }
}

pub struct ValidateWorkflow;

impl Tool for ValidateWorkflow {
    fn name(&self) -> &'static str {
        VALIDATE_WORKFLOW
    }
    fn description(&self) -> &'static str {
        "Check that a workflow can run: exactly one trigger, edges between existing nodes, no \
         cycles, every node reachable from the trigger. Returns {valid, issues}."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"workflowId": {"type": "string"}},
            "required": ["workflowId"]
        })
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let id = str_arg(&args, "workflowId")?;
            let wf = find_workflow(ctx, id).await?;
            let issues = wf.validate();
            Ok(json!({"workflowId": wf.id, "valid": issues.is_empty(), "issues": issues}))
        })
    }
}

pub struct DeleteWorkflow;

impl Tool for DeleteWorkflow {
    fn name(&self) -> &'static str {
        DELETE_WORKFLOW
    }
    fn description(&self) -> &'static str {
        "Delete a workflow for good. Destructive: the user is asked to approve first."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"workflowId": {"type": "string"}},
            "required": ["workflowId"]
        })
    }
    fn destructive(&self) -> bool {
        true
    }
    fn confirmation_message(&self, args: &JsonObject) -> String {
        match args.get("workflowId").and_then(Value::as_str) {
            Some(id) => format!("Delete workflow '{id}'? This cannot be undone."),
            None => "Delete this workflow? This cannot be undone.".into(),
        }
    }
    fn status_message(&self, _args: &JsonObject) -> Option<String> {
        Some("Deleting workflow…".into())
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let id = str_arg(&args, "workflowId")?;
            let wf = find_workflow(ctx, id).await?;
            match ctx
                .workflows
                .execute(
                    ctx.run_id,
                    ctx.agent_id,
                    "agent",
                    id,
                    vec![WorkflowCommand::Delete],
                )
                .await
            {
                Ok(_) => Ok(json!({"deleted": wf.id, "name": wf.name})),
                Err(StoreError::Rule(ThreadError::WorkflowNotFound(_))) => Err(not_found(id)),
                Err(e) => Err(e.into()),
            }
        })
    }
}
