//! The event-sourced workflow store, on the log: one stream per workflow (`workflow:<id>`),
//! decided by the `Workflow` aggregate of `threadstream_domain::workflow` through the same
//! writer as every thread.
//!
//! - [`WorkflowStore::execute`] appends workflow commands (attributed to the run and agent of
//!   the tool call that made them);
//! - [`WorkflowStore::get`] folds one workflow's stream;
//! - [`WorkflowStore::list`] reads an in-memory projection of every workflow, kept by folding
//!   the log's workflow events after its cursor (the first call reads the log once; later calls
//!   read only what is new). Nothing in it is not in the log: a new process rebuilds it.
//!
//! With `samples` on, two sample workflows are created the first time the store is used (once
//! per log: creating a workflow that exists is refused, so it is idempotent across processes).

use std::collections::BTreeMap;

use serde_json::{json, Value};
use threadstream_domain::event::JsonObject;
use threadstream_domain::workflow::{self, Edge, Node, WorkflowCommand};
use threadstream_domain::{StoredEvent, ThreadError};
use threadstream_store::{EventLog, StoreError};
use tokio::sync::{Mutex, OnceCell};

pub use threadstream_domain::workflow::Workflow;

pub const CREATE: &str = "create-workflow";
pub const DELETE: &str = "delete-workflow";

const PAGE: i64 = 5_000;

/// Who the sample workflows are created by.
pub const SYSTEM: &str = "system";

/// The workflow as tools and `GET /workflows/:id` show it.
pub fn view(w: &Workflow) -> Value {
    json!({
        "id": w.id,
        "name": w.name,
        "active": w.active,
        "nodes": w.nodes,
        "edges": w.edges,
        "createdAt": w.created_at,
        "updatedAt": w.updated_at,
    })
}

/// The short form `list-workflows` and `GET /workflows` return.
pub fn summary(w: &Workflow) -> Value {
    json!({
        "id": w.id,
        "name": w.name,
        "active": w.active,
        "nodeCount": w.nodes.len(),
        "updatedAt": w.updated_at,
    })
}

/// A node for a type: a trigger when its type says so (`…Trigger`, `…trigger`).
pub fn new_node(id: &str, name: &str, node_type: &str, x: i64) -> Node {
    Node {
        id: id.to_string(),
        name: name.to_string(),
        node_type: node_type.to_string(),
        trigger: node_type.to_lowercase().contains("trigger"),
        parameters: JsonObject::new(),
        position: [x, 300],
    }
}

fn sample(id: &str, name: &str, active: bool, nodes: &[(&str, &str)]) -> Vec<WorkflowCommand> {
    let mut cmds = vec![WorkflowCommand::Create {
        workflow_id: id.into(),
        name: name.into(),
        active,
    }];
    for (i, (n, t)) in nodes.iter().enumerate() {
        let mut node = new_node(&format!("n{}", i + 1), n, t, 250 * i as i64);
        node.trigger = i == 0;
        cmds.push(WorkflowCommand::AddNode(node));
    }
    for i in 1..nodes.len() {
        cmds.push(WorkflowCommand::Connect(Edge {
            from: format!("n{i}"),
            to: format!("n{}", i + 1),
        }));
    }
    cmds
}

/// The sample workflows: ids, and the commands that create them.
pub fn samples() -> Vec<(&'static str, Vec<WorkflowCommand>)> {
    vec![
        (
            "wf-sample-1",
            sample(
                "wf-sample-1",
                "Weather to Slack",
                true,
                &[
                    ("Schedule Trigger", "n8n-nodes-base.scheduleTrigger"),
                    ("HTTP Request", "n8n-nodes-base.httpRequest"),
                    ("Slack", "n8n-nodes-base.slack"),
                ],
            ),
        ),
        (
            "wf-sample-2",
            sample(
                "wf-sample-2",
                "Old cleanup job",
                false,
                &[
                    ("Cron", "n8n-nodes-base.cron"),
                    ("Postgres", "n8n-nodes-base.postgres"),
                ],
            ),
        ),
    ]
}

#[derive(Default)]
struct Index {
    /// Every event with an id up to this is folded.
    cursor: i64,
    /// The log's erasure count when folded: an erasure may remove workflows already folded, so
    /// the index starts over.
    erasures: u64,
    workflows: BTreeMap<String, Workflow>,
}

/// The workflow store of one log.
pub struct WorkflowStore {
    log: EventLog,
    samples: bool,
    seeded: OnceCell<()>,
    index: Mutex<Index>,
}

fn fold(w: &mut Workflow, row: &StoredEvent) -> Result<(), StoreError> {
    let e = row.decode()?;
    w.apply(&e.body);
    if w.created_at == 0 {
        w.created_at = row.ts;
    }
    w.updated_at = row.ts;
    Ok(())
}

impl WorkflowStore {
    pub fn new(log: EventLog, samples: bool) -> Self {
        WorkflowStore {
            log,
            samples,
            seeded: OnceCell::new(),
            index: Mutex::new(Index::default()),
        }
    }

    async fn seed(&self) -> Result<(), StoreError> {
        if !self.samples {
            return Ok(());
        }
        self.seeded
            .get_or_try_init(|| async {
                for (id, commands) in samples() {
                    match self.execute("", "", SYSTEM, id, commands).await {
                        Ok(_) | Err(StoreError::Rule(ThreadError::WorkflowExists(_))) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// Appends `commands` to workflow `workflow_id`'s stream, atomically.
    pub async fn execute(
        &self,
        run_id: &str,
        agent_id: &str,
        by: &str,
        workflow_id: &str,
        commands: Vec<WorkflowCommand>,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let commands: Vec<_> = commands
            .into_iter()
            .map(|command| workflow::WorkflowChange {
                command,
                run_id: run_id.to_string(),
                agent_id: agent_id.to_string(),
                by: by.to_string(),
            })
            .collect();
        self.log
            .append(&workflow::stream_id(workflow_id), commands)
            .await
    }

    /// One workflow as of now; `None` if it does not exist or was deleted.
    pub async fn get(&self, workflow_id: &str) -> Result<Option<Workflow>, StoreError> {
        self.seed().await?;
        let stream = workflow::stream_id(workflow_id);
        let mut w = Workflow::default();
        let mut after = 0;
        loop {
            let page = self.log.read_thread(&stream, after, PAGE).await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for row in &page {
                fold(&mut w, row)?;
            }
            if (page.len() as i64) < PAGE {
                break;
            }
        }
        Ok((w.exists && !w.deleted).then_some(w))
    }

    /// Every workflow that exists, oldest first.
    pub async fn list(&self) -> Result<Vec<Workflow>, StoreError> {
        self.seed().await?;
        let mut index = self.index.lock().await;
        let erasures = self.log.heads().erasures();
        if index.erasures != erasures {
            *index = Index {
                erasures,
                ..Index::default()
            };
        }
        loop {
            let page = self.log.read_all(index.cursor, PAGE).await?;
            let Some(last) = page.last() else { break };
            index.cursor = last.id;
            for row in &page {
                if let Some(id) = workflow::workflow_of_stream(&row.thread_id) {
                    let w = index.workflows.entry(id.to_string()).or_default();
                    fold(w, row)?;
                }
            }
            if (page.len() as i64) < PAGE {
                break;
            }
        }
        let mut out: Vec<Workflow> = index
            .workflows
            .values()
            .filter(|w| w.exists && !w.deleted)
            .cloned()
            .collect();
        out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(out)
    }
}
