//! The agent tree of one run: a port of n8n's reducer from `@n8n/api-types` 1.25.0
//! (`createInitialState`, `reduceEvent`, `toAgentTree` in `dist/schemas/agent-run-reducer.js`,
//! with `getRenderHint` and `isSafeObjectKey` from `instance-ai.schema.js`).
//!
//! [`AgentRunState`] mirrors the JS `AgentRunState` field for field (it serializes with the same
//! camelCase names) so a folded state can be stored and resumed. [`AgentRunState::to_agent_tree`]
//! gives an [`AgentNode`] that serializes like `JSON.stringify(toAgentTree(state))`: same keys, same
//! key order, absent (`undefined`) fields omitted. `tests/it/n8n_reducer.rs` checks this byte for byte
//! against the npm package.
//!
//! Where we differ from the JS, on purpose:
//! - `startedAt` / `completedAt` come from the event's `ts` (the log's commit time) instead of the
//!   wall clock at fold time, so a rebuild gives the same tree; with no `ts` they are omitted.
//! - The JS reads ids through plain objects, so an agent named after an `Object.prototype` member
//!   (`toString`, `valueOf`, `hasOwnProperty`, …) is "found" and the reducer throws a TypeError;
//!   here such ids are ordinary ids. (`__proto__`, `constructor`, `prototype` are ignored exactly
//!   like the JS ignores them.)
//! - Re-spawning an agent can make the parent links cyclic, on which `toAgentTree` recurses until
//!   the JS stack overflows; here a child already on the path from the root is left out of
//!   `children`, and nesting stops at [`MAX_TREE_DEPTH`].
//! - Only the 15 n8n event types change the tree; internal log events are ignored.

use serde::{Deserialize, Serialize};
use threadstream_domain::event::{AgentEvent, EventBody, RunStatus};

use crate::ordered_map::OrderedMap;
use crate::time::iso_millis;

/// The root id `createInitialState()` uses when none (or an unsafe one) is given.
pub const DEFAULT_ROOT_AGENT_ID: &str = "agent-001";

/// Ids the JS refuses to use as object keys (`UNSAFE_OBJECT_KEYS`).
pub const UNSAFE_OBJECT_KEYS: [&str; 3] = ["__proto__", "constructor", "prototype"];

/// How deep [`AgentRunState::to_agent_tree`] nests children. The log's rules allow depth 1
/// (sub-agents cannot spawn); the cap only keeps a hostile log from exhausting the stack when
/// the tree is built, serialized or dropped.
pub const MAX_TREE_DEPTH: usize = 64;

mod values;
pub use values::*;

/// The reducer's state for one run (the JS `AgentRunState`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRunState {
    pub root_agent_id: String,
    pub agents_by_id: OrderedMap<AgentRecord>,
    pub parent_by_agent_id: OrderedMap<String>,
    pub children_by_agent_id: OrderedMap<Vec<String>>,
    pub timeline_by_agent_id: OrderedMap<Vec<TimelineEntry>>,
    pub tool_calls_by_id: OrderedMap<ToolCallState>,
    pub tool_call_ids_by_agent_id: OrderedMap<Vec<String>>,
    pub status: AgentStatus,
}

impl Default for AgentRunState {
    /// `createInitialState()`.
    fn default() -> Self {
        AgentRunState::new(DEFAULT_ROOT_AGENT_ID)
    }
}

/// `appendTimelineText`: merge into the last entry when it is text of the same response. The
/// comparison is on the event's raw `responseId` (an empty string is not "absent" there, though
/// it is never stored), exactly like the JS `===`.
fn append_timeline_text(timeline: &mut Vec<TimelineEntry>, text: &str, response_id: Option<&str>) {
    if let Some(TimelineEntry::Text {
        content,
        response_id: last,
    }) = timeline.last_mut()
    {
        if last.as_deref() == response_id {
            content.push_str(text);
            return;
        }
    }
    timeline.push(TimelineEntry::Text {
        content: text.to_string(),
        response_id: truthy(response_id),
    });
}

/// `...(responseId ? { responseId } : {})`.
fn truthy(response_id: Option<&str>) -> Option<String> {
    response_id.filter(|r| !r.is_empty()).map(str::to_string)
}

impl AgentRunState {
    /// `createInitialState(rootAgentId)`: an unsafe id falls back to [`DEFAULT_ROOT_AGENT_ID`].
    pub fn new(root_agent_id: &str) -> Self {
        let root = if is_safe_object_key(root_agent_id) {
            root_agent_id
        } else {
            DEFAULT_ROOT_AGENT_ID
        };
        AgentRunState {
            root_agent_id: root.to_string(),
            agents_by_id: [(root, AgentRecord::orchestrator(root))]
                .into_iter()
                .collect(),
            parent_by_agent_id: OrderedMap::new(),
            children_by_agent_id: [(root, Vec::new())].into_iter().collect(),
            timeline_by_agent_id: [(root, Vec::new())].into_iter().collect(),
            tool_calls_by_id: OrderedMap::new(),
            tool_call_ids_by_agent_id: [(root, Vec::new())].into_iter().collect(),
            status: AgentStatus::Active,
        }
    }

    /// The orchestrator's record, whose text and reasoning are the assistant message's.
    pub fn root(&self) -> Option<&AgentRecord> {
        self.agents_by_id.get(&self.root_agent_id)
    }

    /// `findAgent` / `ensureAgent`.
    pub fn find_agent(&self, agent_id: &str) -> Option<&AgentRecord> {
        if !is_safe_object_key(agent_id) {
            return None;
        }
        self.agents_by_id.get(agent_id)
    }

    fn agent_mut(&mut self, agent_id: &str) -> Option<&mut AgentRecord> {
        if !is_safe_object_key(agent_id) {
            return None;
        }
        self.agents_by_id.get_mut(agent_id)
    }

    // `ensureTimeline` / `ensureChildren` / `ensureToolCallIds`: for an unsafe id the JS hands
    // back a fresh throwaway array; `None` here, and callers drop the write.
    fn timeline(&mut self, agent_id: &str) -> Option<&mut Vec<TimelineEntry>> {
        is_safe_object_key(agent_id).then(|| {
            self.timeline_by_agent_id
                .get_or_insert_with(agent_id, Vec::new)
        })
    }

    fn children(&mut self, agent_id: &str) -> Option<&mut Vec<String>> {
        is_safe_object_key(agent_id).then(|| {
            self.children_by_agent_id
                .get_or_insert_with(agent_id, Vec::new)
        })
    }

    fn tool_call_ids(&mut self, agent_id: &str) -> Option<&mut Vec<String>> {
        is_safe_object_key(agent_id).then(|| {
            self.tool_call_ids_by_agent_id
                .get_or_insert_with(agent_id, Vec::new)
        })
    }

    /// Appends agent text (text deltas and error notes) to the agent and its timeline.
    fn append_text(&mut self, agent_id: &str, text: &str, response_id: Option<&str>) {
        let Some(agent) = self.agents_by_id.get_mut(agent_id) else {
            return;
        };
        agent.text_content.push_str(text);
        if let Some(tl) = self.timeline(agent_id) {
            append_timeline_text(tl, text, response_id);
        }
    }

    /// `reduceEvent`: folds one event into the state.
    pub fn reduce(&mut self, event: &AgentEvent) {
        let agent_id = event.agent_id.as_str();
        let response_id = event.response_id.as_deref();
        let ts = event.ts.map(iso_millis);
        match &event.body {
            EventBody::RunStart(_) => {
                if !is_safe_object_key(agent_id) {
                    return;
                }
                let root_id = self.root_agent_id.as_str();
                let has_existing_agents = self.agents_by_id.len() > 1
                    || self
                        .agents_by_id
                        .get(root_id)
                        .is_some_and(|r| !r.text_content.is_empty())
                    || self
                        .children_by_agent_id
                        .get(root_id)
                        .is_some_and(|c| !c.is_empty())
                    || self
                        .tool_call_ids_by_agent_id
                        .get(root_id)
                        .is_some_and(|c| !c.is_empty());
                if has_existing_agents {
                    // A follow-up run on a tree with content re-activates it; the root keeps
                    // its id even when the new run-start names another agent.
                    self.status = AgentStatus::Active;
                    if let Some(root) = self.agents_by_id.get_mut(&self.root_agent_id) {
                        root.status = AgentStatus::Active;
                    }
                } else {
                    *self = AgentRunState::new(agent_id);
                }
            }
            EventBody::TextDelta(p) if self.find_agent(agent_id).is_some() => {
                self.append_text(agent_id, &p.text, response_id);
            }
            EventBody::ReasoningDelta(p) => {
                if let Some(agent) = self.agent_mut(agent_id) {
                    agent.reasoning.push_str(&p.text);
                }
            }
            EventBody::ToolCall(p) => {
                let id = p.tool_call_id.as_str();
                if !is_safe_object_key(id) || self.agent_mut(agent_id).is_none() {
                    return;
                }
                // A repeated id replaces the call (in place) and is listed again.
                self.tool_calls_by_id.insert(
                    id,
                    ToolCallState {
                        tool_call_id: id.to_string(),
                        tool_name: p.tool_name.clone(),
                        args: p.args.clone(),
                        result: None,
                        error: None,
                        is_loading: true,
                        render_hint: Some(render_hint(&p.tool_name)),
                        confirmation: None,
                        started_at: ts,
                        completed_at: None,
                        key_order: Vec::new(),
                    },
                );
                if let Some(ids) = self.tool_call_ids(agent_id) {
                    ids.push(id.to_string());
                }
                if let Some(tl) = self.timeline(agent_id) {
                    tl.push(TimelineEntry::ToolCall {
                        tool_call_id: id.to_string(),
                        response_id: truthy(response_id),
                    });
                }
            }
            EventBody::ToolResult(p) => {
                if !is_safe_object_key(&p.tool_call_id) {
                    return;
                }
                if let Some(tc) = self.tool_calls_by_id.get_mut(&p.tool_call_id) {
                    tc.touch(LateKey::Result);
                    tc.result = Some(p.result.clone());
                    tc.settle(ts.as_deref());
                }
            }
            EventBody::ToolError(p) => {
                if !is_safe_object_key(&p.tool_call_id) {
                    return;
                }
                if let Some(tc) = self.tool_calls_by_id.get_mut(&p.tool_call_id) {
                    tc.touch(LateKey::Error);
                    tc.error = Some(p.error.clone());
                    tc.settle(ts.as_deref());
                }
            }
            EventBody::AgentSpawned(p) => {
                let parent_id = p.parent_id.as_str();
                if !is_safe_object_key(agent_id) || !is_safe_object_key(parent_id) {
                    return;
                }
                if self.agent_mut(parent_id).is_none() {
                    return;
                }
                // Spawning an existing id replaces its record (text and all) in place.
                self.agents_by_id.insert(
                    agent_id,
                    AgentRecord {
                        agent_id: agent_id.to_string(),
                        role: p.role.clone(),
                        tools: Some(p.tools.clone()),
                        task_id: p.task_id.clone(),
                        kind: p.kind,
                        title: p.title.clone(),
                        subtitle: p.subtitle.clone(),
                        goal: p.goal.clone(),
                        target_resource: p.target_resource.clone(),
                        ..AgentRecord::orchestrator(agent_id)
                    },
                );
                self.parent_by_agent_id
                    .insert(agent_id, parent_id.to_string());
                if let Some(c) = self.children(parent_id) {
                    c.push(agent_id.to_string());
                }
                self.children(agent_id);
                self.timeline(agent_id);
                self.tool_call_ids(agent_id);
                if let Some(parent_tl) = self.timeline(parent_id) {
                    // `event.responseId ?? lastEntry?.responseId`: only an absent id inherits.
                    let inherited = match response_id {
                        Some(r) => Some(r.to_string()),
                        None => parent_tl
                            .last()
                            .and_then(|e| e.response_id().map(str::to_string)),
                    };
                    parent_tl.push(TimelineEntry::Child {
                        agent_id: agent_id.to_string(),
                        response_id: truthy(inherited.as_deref()),
                    });
                }
            }
            EventBody::AgentCompleted(p) => {
                if let Some(agent) = self.agent_mut(agent_id) {
                    let failed = p.error.as_deref().is_some_and(|e| !e.is_empty());
                    agent.status = if failed {
                        AgentStatus::Error
                    } else {
                        AgentStatus::Completed
                    };
                    agent.result = Some(p.result.clone());
                    agent.error = p.error.clone();
                }
                if !is_safe_object_key(agent_id) {
                    return;
                }
                if let Some(ids) = self.tool_call_ids_by_agent_id.get(agent_id) {
                    for id in ids {
                        if let Some(tc) = self.tool_calls_by_id.get_mut(id) {
                            tc.is_loading = false;
                        }
                    }
                }
            }
            EventBody::ConfirmationRequest(p) => {
                if !is_safe_object_key(&p.tool_call_id) {
                    return;
                }
                if let Some(tc) = self.tool_calls_by_id.get_mut(&p.tool_call_id) {
                    tc.touch(LateKey::Confirmation);
                    tc.confirmation = Some(Confirmation::from(p.as_ref()));
                }
            }
            EventBody::TasksUpdate(p) => {
                if let Some(agent) = self.agent_mut(agent_id) {
                    agent.tasks = Some(p.tasks.clone());
                    if let Some(items) = &p.plan_items {
                        agent.plan_items = Some(items.clone());
                    }
                }
            }
            EventBody::Status(p) => {
                if let Some(agent) = self.agent_mut(agent_id) {
                    // `message || undefined`: an empty message clears.
                    agent.status_message = Some(p.message.clone()).filter(|m| !m.is_empty());
                }
            }
            EventBody::Error(p) => {
                let text = format!("\n\n*Error: {}*", p.content);
                // Errors of unknown agents land on the root.
                let target = if self.find_agent(agent_id).is_some() {
                    agent_id.to_string()
                } else {
                    self.root_agent_id.clone()
                };
                self.append_text(&target, &text, response_id);
            }
            EventBody::RunFinish(p) => {
                self.status = match p.status {
                    RunStatus::Completed => AgentStatus::Completed,
                    RunStatus::Cancelled => AgentStatus::Cancelled,
                    RunStatus::Error => AgentStatus::Error,
                };
                let status = self.status;
                if let Some(root) = self.agents_by_id.get_mut(&self.root_agent_id) {
                    root.status = status;
                }
                if matches!(status, AgentStatus::Cancelled | AgentStatus::Error) {
                    for tc in self.tool_calls_by_id.values_mut() {
                        tc.is_loading = false;
                    }
                }
            }
            // filesystem-request, thread-title-updated and the log's internal events.
            _ => {}
        }
    }

    /// `toAgentTree`.
    pub fn to_agent_tree(&self) -> AgentNode {
        let mut path = Vec::new();
        self.build_node(&self.root_agent_id, &mut path)
    }

    /// `buildNodeRecursive`, with the cycle and depth guards described in the module docs.
    fn build_node<'a>(&'a self, agent_id: &'a str, path: &mut Vec<&'a str>) -> AgentNode {
        let agent = if is_safe_object_key(agent_id) {
            self.agents_by_id.get(agent_id)
        } else {
            None
        };
        let safe = |id: &&String| is_safe_object_key(id);
        let (child_ids, tool_call_ids, timeline): (Vec<&String>, Vec<&String>, _) =
            if is_safe_object_key(agent_id) {
                (
                    self.children_by_agent_id
                        .get(agent_id)
                        .map(|c| c.iter().filter(safe).collect())
                        .unwrap_or_default(),
                    self.tool_call_ids_by_agent_id
                        .get(agent_id)
                        .map(|c| c.iter().filter(safe).collect())
                        .unwrap_or_default(),
                    self.timeline_by_agent_id
                        .get(agent_id)
                        .map(|t| t.iter().filter(|e| e.is_safe()).cloned().collect())
                        .unwrap_or_default(),
                )
            } else {
                (Vec::new(), Vec::new(), Vec::new())
            };
        let tool_calls = tool_call_ids
            .iter()
            .filter_map(|id| self.tool_calls_by_id.get(id))
            .map(ToolCall::from)
            .collect();
        path.push(agent_id);
        let mut children = Vec::with_capacity(child_ids.len());
        for child in child_ids {
            if path.len() >= MAX_TREE_DEPTH || path.contains(&child.as_str()) {
                continue;
            }
            children.push(self.build_node(child, path));
        }
        path.pop();
        AgentNode {
            agent_id: agent.map_or(agent_id, |a| &a.agent_id).to_string(),
            role: agent.map_or("unknown", |a| &a.role).to_string(),
            tools: agent.and_then(|a| a.tools.clone()),
            task_id: agent.and_then(|a| a.task_id.clone()),
            kind: agent.and_then(|a| a.kind),
            title: agent.and_then(|a| a.title.clone()),
            subtitle: agent.and_then(|a| a.subtitle.clone()),
            goal: agent.and_then(|a| a.goal.clone()),
            target_resource: agent.and_then(|a| a.target_resource.clone()),
            status_message: agent.and_then(|a| a.status_message.clone()),
            status: agent.map_or(AgentStatus::Active, |a| a.status),
            text_content: agent.map(|a| a.text_content.clone()).unwrap_or_default(),
            reasoning: agent.map(|a| a.reasoning.clone()).unwrap_or_default(),
            tool_calls,
            children,
            timeline,
            tasks: agent.and_then(|a| a.tasks.clone()),
            plan_items: agent.and_then(|a| a.plan_items.clone()),
            result: agent.and_then(|a| a.result.clone()),
            error: agent.and_then(|a| a.error.clone()),
        }
    }
}

#[cfg(test)]
mod tests;
