//! What an agent tree is made of: agents, their timelines, tool calls and confirmations, and
//! the tree node `toAgentTree` gives.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use threadstream_domain::event::{
    AgentKind, ConfirmationRequest, CredentialFlow, DomainAccess, InputType, JsonObject,
    PlannedTask, Question, Severity, TargetResource, TaskList, WebSearch,
};

use super::*;

/// `isSafeObjectKey`.
pub fn is_safe_object_key(key: &str) -> bool {
    !UNSAFE_OBJECT_KEYS.contains(&key)
}

/// `InstanceAiAgentStatus`; also the run's status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentStatus {
    #[default]
    Active,
    Completed,
    Cancelled,
    Error,
}

/// `InstanceAiToolCallState['renderHint']`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RenderHint {
    Tasks,
    Delegate,
    Builder,
    Researcher,
    DataTable,
    Planner,
    EvalSetup,
    Skill,
    Default,
}

/// `getRenderHint` as of 1.25.0 (1.41.0 changed the table: see the conformance test).
pub fn render_hint(tool_name: &str) -> RenderHint {
    match tool_name {
        "task-control" => RenderHint::Tasks,
        "delegate" => RenderHint::Delegate,
        "build-workflow-with-agent" => RenderHint::Builder,
        "research-with-agent" => RenderHint::Researcher,
        "plan" => RenderHint::Planner,
        "eval-setup-with-agent" => RenderHint::EvalSetup,
        "list_skills" | "load_skill" => RenderHint::Skill,
        _ => RenderHint::Default,
    }
}

/// One agent as the reducer keeps it (the JS `AgentNode` of `agent-run-reducer.d.ts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    pub agent_id: String,
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<AgentKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtitle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_resource: Option<TargetResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    pub status: AgentStatus,
    pub text_content: String,
    pub reasoning: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_items: Option<Vec<PlannedTask>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl AgentRecord {
    pub(super) fn orchestrator(agent_id: &str) -> Self {
        AgentRecord {
            agent_id: agent_id.to_string(),
            role: "orchestrator".to_string(),
            tools: None,
            task_id: None,
            kind: None,
            title: None,
            subtitle: None,
            goal: None,
            target_resource: None,
            status_message: None,
            status: AgentStatus::Active,
            text_content: String::new(),
            reasoning: String::new(),
            tasks: None,
            plan_items: None,
            result: None,
            error: None,
        }
    }
}

/// `InstanceAiTimelineEntry`. `responseId` is only ever present when non-empty (the JS spreads
/// it in on truthiness).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum TimelineEntry {
    #[serde(rename_all = "camelCase")]
    Text {
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCall {
        tool_call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Child {
        agent_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
    },
}

impl TimelineEntry {
    pub fn response_id(&self) -> Option<&str> {
        match self {
            TimelineEntry::Text { response_id, .. }
            | TimelineEntry::ToolCall { response_id, .. }
            | TimelineEntry::Child { response_id, .. } => response_id.as_deref(),
        }
    }

    /// The JS `filter` in `buildNodeRecursive`: entries pointing at unsafe ids are dropped.
    pub(super) fn is_safe(&self) -> bool {
        match self {
            TimelineEntry::Text { .. } => true,
            TimelineEntry::ToolCall { tool_call_id, .. } => is_safe_object_key(tool_call_id),
            TimelineEntry::Child { agent_id, .. } => is_safe_object_key(agent_id),
        }
    }
}

/// `InstanceAiConfirmation` as the reducer builds it from a `confirmation-request` (the request's
/// `toolCallId`, `toolName` and `args` are not copied). Field order is the JS literal's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Confirmation {
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_thread_id: Option<String>,
    pub severity: Severity,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_requests: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_type: Option<InputType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_access: Option<DomainAccess>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_search: Option<WebSearch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_flow: Option<CredentialFlow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_requests: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_items: Option<Vec<PlannedTask>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questions: Option<Vec<Question>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intro_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_decision: Option<Value>,
}

impl From<&ConfirmationRequest> for Confirmation {
    fn from(p: &ConfirmationRequest) -> Self {
        Confirmation {
            request_id: p.request_id.clone(),
            input_thread_id: p.input_thread_id.clone(),
            severity: p.severity,
            message: p.message.clone(),
            credential_requests: p.credential_requests.clone(),
            project_id: p.project_id.clone(),
            input_type: p.input_type,
            domain_access: p.domain_access.clone(),
            web_search: p.web_search.clone(),
            credential_flow: p.credential_flow.clone(),
            setup_requests: p.setup_requests.clone(),
            workflow_id: p.workflow_id.clone(),
            plan_items: p.plan_items.clone(),
            questions: p.questions.clone(),
            intro_message: p.intro_message.clone(),
            tasks: p.tasks.clone(),
            resource_decision: p.resource_decision.clone(),
        }
    }
}

/// The keys a tool call gains after `tool-call`, in the order JS first assigned them (a JS object
/// lists keys in assignment order, so this decides where they appear in `JSON.stringify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LateKey {
    Result,
    Error,
    CompletedAt,
    Confirmation,
}

/// One tool call as the reducer keeps it (`InstanceAiToolCallState`), plus `keyOrder`, the
/// assignment order of its late keys, so the tree can list them where the JS would.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallState {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: JsonObject,
    /// `Some(Value::Null)` is a result of `null`, kept apart from "no result yet".
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_value"
    )]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub is_loading: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render_hint: Option<RenderHint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<Confirmation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_order: Vec<LateKey>,
}

/// A present JSON field, `null` included, as `Some` (serde's default maps `null` to `None`).
fn present_value<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl ToolCallState {
    pub(super) fn touch(&mut self, key: LateKey) {
        if !self.key_order.contains(&key) {
            self.key_order.push(key);
        }
    }

    pub(super) fn settle(&mut self, ts: Option<&str>) {
        self.is_loading = false;
        self.touch(LateKey::CompletedAt);
        self.completed_at = ts.map(str::to_string);
    }
}

/// One tool call in the tree (`InstanceAiToolCallState`). Serializes in the JS key order:
/// `toolCallId, toolName, args, isLoading, renderHint, startedAt`, then `result`, `error`,
/// `completedAt` and `confirmation` in the order the events first set them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: JsonObject,
    #[serde(default, deserialize_with = "present_value")]
    pub result: Option<Value>,
    #[serde(default)]
    pub error: Option<String>,
    pub is_loading: bool,
    #[serde(default)]
    pub render_hint: Option<RenderHint>,
    #[serde(default)]
    pub confirmation: Option<Confirmation>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub completed_at: Option<String>,
    /// Where the late keys go; empty means the fixed order above.
    #[serde(skip)]
    pub key_order: Vec<LateKey>,
}

impl From<&ToolCallState> for ToolCall {
    fn from(tc: &ToolCallState) -> Self {
        ToolCall {
            tool_call_id: tc.tool_call_id.clone(),
            tool_name: tc.tool_name.clone(),
            args: tc.args.clone(),
            result: tc.result.clone(),
            error: tc.error.clone(),
            is_loading: tc.is_loading,
            render_hint: tc.render_hint,
            confirmation: tc.confirmation.clone(),
            started_at: tc.started_at.clone(),
            completed_at: tc.completed_at.clone(),
            key_order: tc.key_order.clone(),
        }
    }
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("toolCallId", &self.tool_call_id)?;
        m.serialize_entry("toolName", &self.tool_name)?;
        m.serialize_entry("args", &self.args)?;
        m.serialize_entry("isLoading", &self.is_loading)?;
        if let Some(h) = &self.render_hint {
            m.serialize_entry("renderHint", h)?;
        }
        if let Some(t) = &self.started_at {
            m.serialize_entry("startedAt", t)?;
        }
        const FIXED: [LateKey; 4] = [
            LateKey::Result,
            LateKey::Error,
            LateKey::CompletedAt,
            LateKey::Confirmation,
        ];
        let rest = FIXED.iter().filter(|k| !self.key_order.contains(k));
        for key in self.key_order.iter().chain(rest) {
            match key {
                LateKey::Result => {
                    if let Some(v) = &self.result {
                        m.serialize_entry("result", v)?;
                    }
                }
                LateKey::Error => {
                    if let Some(v) = &self.error {
                        m.serialize_entry("error", v)?;
                    }
                }
                LateKey::CompletedAt => {
                    if let Some(v) = &self.completed_at {
                        m.serialize_entry("completedAt", v)?;
                    }
                }
                LateKey::Confirmation => {
                    if let Some(v) = &self.confirmation {
                        m.serialize_entry("confirmation", v)?;
                    }
                }
            }
        }
        m.end()
    }
}

/// A node of the agent tree (`InstanceAiAgentNode`), in `toAgentTree`'s key order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentNode {
    pub agent_id: String,
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<AgentKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtitle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_resource: Option<TargetResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    pub status: AgentStatus,
    pub text_content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub children: Vec<AgentNode>,
    pub timeline: Vec<TimelineEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_items: Option<Vec<PlannedTask>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
