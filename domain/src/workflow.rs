//! The `Workflow` aggregate: a workflow of nodes and edges whose events live in the same log as
//! the threads, one stream per workflow (`workflow:<id>`, see [`stream_id`]).
//!
//! It is one of the log's aggregates ([`crate::aggregate`]): the writer decides a workflow
//! stream's [`WorkflowChange`]s against it, so workflows get the same group commit, the same
//! cross-process catch-up and the same ids as everything else, with no second writer path.
//!
//! Rules ([`Workflow::decide`]): a workflow is created once; nothing happens to a workflow that
//! does not exist or was deleted; node ids and names are unique in a workflow; an edge joins two
//! existing nodes, once; a removed node takes its edges with it. [`Workflow::validate`] checks
//! what a runnable workflow needs: exactly one trigger, edges between existing nodes, no cycle,
//! every node reachable from the trigger.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::aggregate::{AggregateCommand, StreamAggregate, StreamKind};
use crate::error::ThreadError;
use crate::event::workflow::{NodeAdded, NodeRemoved, WorkflowCreated};
use crate::event::{AgentEvent, Empty, EventBody};

// The values a workflow is made of travel in its events, so they are defined with them.
pub use crate::event::workflow::{Edge, Node, NodePatch};

/// Stream ids of workflows start with this; thread ids may not. (Defined with the other kinds' ids,
/// where [`StreamKind::of`] tells them apart.)
pub use crate::aggregate::WORKFLOW_STREAM_PREFIX as STREAM_PREFIX;

/// The log stream of workflow `workflow_id`.
pub fn stream_id(workflow_id: &str) -> String {
    format!("{STREAM_PREFIX}{workflow_id}")
}

/// The workflow id of a stream id, if it is a workflow stream.
pub fn workflow_of_stream(stream_id: &str) -> Option<&str> {
    stream_id.strip_prefix(STREAM_PREFIX)
}

/// A command on a workflow stream.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkflowCommand {
    Create {
        workflow_id: String,
        name: String,
        active: bool,
    },
    AddNode(Node),
    Connect(Edge),
    UpdateNode(NodePatch),
    RemoveNode {
        node_id: String,
    },
    Delete,
}

/// One workflow's state, folded from its stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    pub exists: bool,
    pub deleted: bool,
    pub id: String,
    pub name: String,
    pub active: bool,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    /// Epoch ms of the first and the last event (set by readers that know the stored `ts`).
    #[serde(default)]
    pub created_at: i64,
    #[serde(default)]
    pub updated_at: i64,
    /// Events folded (not part of the workflow's document).
    #[serde(skip)]
    pub version: u64,
}

fn not_found(w: &Workflow) -> ThreadError {
    ThreadError::WorkflowNotFound(w.id.clone())
}

impl Workflow {
    fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The events `command` produces, or the rule it breaks. Pure.
    pub fn decide(&self, command: &WorkflowCommand) -> Result<Vec<EventBody>, ThreadError> {
        if !matches!(command, WorkflowCommand::Create { .. }) && (!self.exists || self.deleted) {
            return Err(not_found(self));
        }
        match command {
            WorkflowCommand::Create {
                workflow_id,
                name,
                active,
            } => {
                if self.exists || self.deleted {
                    return Err(ThreadError::WorkflowExists(workflow_id.clone()));
                }
                if name.trim().is_empty() {
                    return Err(ThreadError::Invalid("a workflow needs a name".into()));
                }
                Ok(vec![EventBody::WorkflowCreated(WorkflowCreated {
                    workflow_id: workflow_id.clone(),
                    name: name.trim().to_string(),
                    active: *active,
                })])
            }
            WorkflowCommand::AddNode(node) => {
                if node.id.trim().is_empty() || node.name.trim().is_empty() {
                    return Err(ThreadError::Invalid("a node needs an id and a name".into()));
                }
                if node.node_type.trim().is_empty() {
                    return Err(ThreadError::Invalid(format!(
                        "node '{}' needs a type",
                        node.name
                    )));
                }
                if self.node(&node.id).is_some() || self.nodes.iter().any(|n| n.name == node.name) {
                    return Err(ThreadError::DuplicateNode(node.name.clone()));
                }
                Ok(vec![EventBody::WorkflowNodeAdded(NodeAdded {
                    node: node.clone(),
                })])
            }
            WorkflowCommand::Connect(edge) => {
                for id in [&edge.from, &edge.to] {
                    if self.node(id).is_none() {
                        return Err(ThreadError::NodeNotFound(id.clone()));
                    }
                }
                if self.edges.contains(edge) {
                    return Err(ThreadError::DuplicateEdge {
                        from: edge.from.clone(),
                        to: edge.to.clone(),
                    });
                }
                Ok(vec![EventBody::WorkflowNodesConnected(edge.clone())])
            }
            WorkflowCommand::UpdateNode(patch) => {
                if self.node(&patch.node_id).is_none() {
                    return Err(ThreadError::NodeNotFound(patch.node_id.clone()));
                }
                if let Some(name) = &patch.name {
                    if name.trim().is_empty() {
                        return Err(ThreadError::Invalid("a node needs a name".into()));
                    }
                    if self
                        .nodes
                        .iter()
                        .any(|n| n.name == *name && n.id != patch.node_id)
                    {
                        return Err(ThreadError::DuplicateNode(name.clone()));
                    }
                }
                Ok(vec![EventBody::WorkflowNodeUpdated(patch.clone())])
            }
            WorkflowCommand::RemoveNode { node_id } => {
                if self.node(node_id).is_none() {
                    return Err(ThreadError::NodeNotFound(node_id.clone()));
                }
                Ok(vec![EventBody::WorkflowNodeRemoved(NodeRemoved {
                    node_id: node_id.clone(),
                })])
            }
            WorkflowCommand::Delete => Ok(vec![EventBody::WorkflowDeleted(Empty {})]),
        }
    }

    /// Folds one event (other events are ignored).
    pub fn apply(&mut self, body: &EventBody) {
        match body {
            EventBody::WorkflowCreated(p) => {
                self.exists = true;
                self.id = p.workflow_id.clone();
                self.name = p.name.clone();
                self.active = p.active;
            }
            EventBody::WorkflowNodeAdded(p) => self.nodes.push(p.node.clone()),
            EventBody::WorkflowNodesConnected(e) => self.edges.push(e.clone()),
            EventBody::WorkflowNodeUpdated(p) => {
                if let Some(n) = self.nodes.iter_mut().find(|n| n.id == p.node_id) {
                    if let Some(name) = &p.name {
                        n.name = name.clone();
                    }
                    if let Some(params) = &p.parameters {
                        n.parameters = params.clone();
                    }
                    if let Some(pos) = p.position {
                        n.position = pos;
                    }
                    if let Some(t) = p.trigger {
                        n.trigger = t;
                    }
                }
            }
            EventBody::WorkflowNodeRemoved(p) => {
                self.nodes.retain(|n| n.id != p.node_id);
                self.edges
                    .retain(|e| e.from != p.node_id && e.to != p.node_id);
            }
            EventBody::WorkflowDeleted(_) => self.deleted = true,
            _ => {}
        }
    }

    /// What keeps the workflow from running, in a stable order; empty when it is valid.
    pub fn validate(&self) -> Vec<String> {
        let mut issues = Vec::new();
        let triggers: Vec<&Node> = self.nodes.iter().filter(|n| n.trigger).collect();
        match triggers.len() {
            0 => issues.push("the workflow has no trigger node".to_string()),
            1 => {}
            n => issues.push(format!(
                "the workflow has {n} trigger nodes ({}); it needs exactly one",
                triggers
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
        let ids: HashSet<&str> = self.nodes.iter().map(|n| n.id.as_str()).collect();
        let name = |id: &str| {
            self.node(id)
                .map(|n| n.name.clone())
                .unwrap_or_else(|| id.to_string())
        };
        for e in &self.edges {
            for end in [&e.from, &e.to] {
                if !ids.contains(end.as_str()) {
                    issues.push(format!(
                        "the edge {} → {} refers to a node that does not exist ({end})",
                        e.from, e.to
                    ));
                }
            }
        }
        // Cycles: depth-first search with colours.
        let mut out: HashMap<&str, Vec<&str>> = HashMap::new();
        for e in &self.edges {
            out.entry(e.from.as_str()).or_default().push(e.to.as_str());
        }
        let mut colour: BTreeMap<&str, u8> = BTreeMap::new();
        fn visit<'a>(
            n: &'a str,
            out: &HashMap<&'a str, Vec<&'a str>>,
            colour: &mut BTreeMap<&'a str, u8>,
        ) -> Option<&'a str> {
            colour.insert(n, 1);
            for &m in out.get(n).into_iter().flatten() {
                match colour.get(m).copied().unwrap_or(0) {
                    1 => return Some(m),
                    0 => {
                        if let Some(c) = visit(m, out, colour) {
                            return Some(c);
                        }
                    }
                    _ => {}
                }
            }
            colour.insert(n, 2);
            None
        }
        for n in &self.nodes {
            if colour.get(n.id.as_str()).copied().unwrap_or(0) == 0 {
                if let Some(at) = visit(&n.id, &out, &mut colour) {
                    issues.push(format!("the workflow has a cycle through '{}'", name(at)));
                    break;
                }
            }
        }
        // Reachability from the trigger (only meaningful with exactly one).
        if let [trigger] = triggers.as_slice() {
            let mut seen: HashSet<&str> = HashSet::new();
            let mut stack = vec![trigger.id.as_str()];
            while let Some(n) = stack.pop() {
                if seen.insert(n) {
                    stack.extend(out.get(n).into_iter().flatten().copied());
                }
            }
            let unreachable: Vec<String> = self
                .nodes
                .iter()
                .filter(|n| !seen.contains(n.id.as_str()))
                .map(|n| n.name.clone())
                .collect();
            if !unreachable.is_empty() {
                issues.push(format!(
                    "not reachable from the trigger '{}': {}",
                    trigger.name,
                    unreachable.join(", ")
                ));
            }
        }
        issues
    }
}

/// A change to a workflow stream: a [`WorkflowCommand`] by the user `by`, attributed to the
/// tool call's run and agent (or empty ones).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowChange {
    pub command: WorkflowCommand,
    pub run_id: String,
    pub agent_id: String,
    pub by: String,
}

impl AggregateCommand for WorkflowChange {
    type Aggregate = Workflow;
}

impl StreamAggregate for Workflow {
    type Command = WorkflowChange;
    const KIND: StreamKind = StreamKind::Workflow;

    fn decide(&self, change: &WorkflowChange) -> Result<Vec<AgentEvent>, ThreadError> {
        Ok(Workflow::decide(self, &change.command)?
            .into_iter()
            .map(|body| {
                AgentEvent::new(change.run_id.clone(), change.agent_id.clone(), body)
                    .with_user(change.by.clone())
            })
            .collect())
    }

    fn apply_at(&mut self, _id: i64, e: &AgentEvent) {
        self.version += 1;
        self.apply(&e.body);
        if let Some(ts) = e.ts {
            if self.created_at == 0 {
                self.created_at = ts;
            }
            self.updated_at = ts;
        }
    }

    fn version(&self) -> u64 {
        self.version
    }

    fn command_for(&self, e: &AgentEvent) -> WorkflowChange {
        let command = match &e.body {
            EventBody::WorkflowCreated(p) => WorkflowCommand::Create {
                workflow_id: p.workflow_id.clone(),
                name: p.name.clone(),
                active: p.active,
            },
            EventBody::WorkflowNodeAdded(p) => WorkflowCommand::AddNode(p.node.clone()),
            EventBody::WorkflowNodesConnected(p) => WorkflowCommand::Connect(p.clone()),
            EventBody::WorkflowNodeUpdated(p) => WorkflowCommand::UpdateNode(p.clone()),
            EventBody::WorkflowNodeRemoved(p) => WorkflowCommand::RemoveNode {
                node_id: p.node_id.clone(),
            },
            // A delete, or an event of another kind of stream: compared with what a delete
            // stores, and refused.
            _ => WorkflowCommand::Delete,
        };
        WorkflowChange {
            command,
            run_id: e.run_id.clone(),
            agent_id: e.agent_id.clone(),
            by: e.user_id.clone().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::JsonObject;

    fn node(id: &str, trigger: bool) -> Node {
        Node {
            id: id.into(),
            name: id.to_uppercase(),
            node_type: "t".into(),
            trigger,
            parameters: JsonObject::new(),
            position: [0, 0],
        }
    }

    fn run(cmds: &[WorkflowCommand]) -> Result<Workflow, ThreadError> {
        let mut w = Workflow::default();
        for c in cmds {
            for e in w.decide(c)? {
                w.apply(&e);
            }
        }
        Ok(w)
    }

    fn edge(a: &str, b: &str) -> WorkflowCommand {
        WorkflowCommand::Connect(Edge {
            from: a.into(),
            to: b.into(),
        })
    }

    fn create() -> WorkflowCommand {
        WorkflowCommand::Create {
            workflow_id: "w".into(),
            name: "W".into(),
            active: false,
        }
    }

    #[test]
    fn rules() {
        assert!(matches!(
            run(&[WorkflowCommand::Delete]),
            Err(ThreadError::WorkflowNotFound(_))
        ));
        assert!(matches!(
            run(&[create(), create()]),
            Err(ThreadError::WorkflowExists(_))
        ));
        let a = WorkflowCommand::AddNode(node("a", true));
        assert!(matches!(
            run(&[create(), a.clone(), a.clone()]),
            Err(ThreadError::DuplicateNode(_))
        ));
        assert!(matches!(
            run(&[create(), a.clone(), edge("a", "b")]),
            Err(ThreadError::NodeNotFound(_))
        ));
        let b = WorkflowCommand::AddNode(node("b", false));
        assert!(matches!(
            run(&[
                create(),
                a.clone(),
                b.clone(),
                edge("a", "b"),
                edge("a", "b")
            ]),
            Err(ThreadError::DuplicateEdge { .. })
        ));
        // Removing a node removes its edges; a deleted workflow refuses everything.
        let w = run(&[
            create(),
            a.clone(),
            b.clone(),
            edge("a", "b"),
            WorkflowCommand::RemoveNode {
                node_id: "b".into(),
            },
        ])
        .unwrap();
        assert!(w.edges.is_empty());
        assert!(matches!(
            run(&[create(), WorkflowCommand::Delete, a]),
            Err(ThreadError::WorkflowNotFound(_))
        ));
    }

    #[test]
    fn validation() {
        let a = WorkflowCommand::AddNode(node("a", true));
        let b = WorkflowCommand::AddNode(node("b", false));
        let c = WorkflowCommand::AddNode(node("c", false));
        let ok = run(&[create(), a.clone(), b.clone(), edge("a", "b")]).unwrap();
        assert!(ok.validate().is_empty(), "{:?}", ok.validate());

        let none = run(&[create(), b.clone()]).unwrap();
        assert_eq!(none.validate(), ["the workflow has no trigger node"]);

        let two = run(&[
            create(),
            a.clone(),
            WorkflowCommand::AddNode(node("t2", true)),
        ])
        .unwrap();
        assert!(two.validate()[0].contains("2 trigger nodes"));

        let cycle = run(&[
            create(),
            a.clone(),
            b.clone(),
            c.clone(),
            edge("a", "b"),
            edge("b", "c"),
            edge("c", "b"),
        ])
        .unwrap();
        assert_eq!(cycle.validate(), ["the workflow has a cycle through 'B'"]);

        let island = run(&[create(), a, b, c, edge("a", "b")]).unwrap();
        assert_eq!(island.validate(), ["not reachable from the trigger 'A': C"]);
    }
}
