//! What a run's tasks share ([`RunCtx`]), the run's mutable state ([`RunState`]) behind one
//! lock, and the two things every part does through it: record an event, ask the user.
//!
//! The values that state holds ([`TaskInfo`], [`ResumedSubAgent`]) are defined here too, not in
//! the files that fill them in (`background.rs`, `resume.rs`): those files import this one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use threadstream_domain::clock::now_ms;
use threadstream_domain::event::*;
use threadstream_domain::{AgentEvent, StoredEvent, ThreadCommand};
use threadstream_store::EventLog;
use tokio::sync::mpsc;

use super::{RunIds, RunSettings};
use crate::control::{Answer, Control};
use crate::error::RunError;
use crate::provider::{ChatMessage, LlmProvider, Usage};
use crate::replay::{OpenCall, StoredRequest};
use crate::tools::ToolRegistry;
use crate::workflows::WorkflowStore;

/// A background task of this run.
pub(super) struct TaskInfo {
    pub(super) task_id: String,
    pub(super) role: String,
    /// `None` while running; then the result or the error.
    pub(super) outcome: Option<Result<String, String>>,
    /// The orchestrator has been told how it ended.
    pub(super) reported: bool,
}

/// A sub-agent to continue rather than spawn (resuming after a restart).
pub(super) struct ResumedSubAgent {
    pub(super) agent_id: String,
    pub(super) role: String,
    pub(super) tools: Vec<String>,
    pub(super) instructions: String,
    pub(super) messages: Vec<ChatMessage>,
    pub(super) open: Option<OpenCall>,
}

/// Everything a run's tasks share. Nothing here is state the log does not also hold: the
/// sub-agent roles and shown statuses are what this run appended, the resume state what it
/// read back.
pub(super) struct RunCtx {
    /// This context, for the background tasks it starts.
    pub(super) me: Weak<RunCtx>,
    /// Hands background tasks to the run's task set (polled by
    /// [`execute_run`](super::execute_run), which aborts them when the run ends).
    pub(super) spawner: mpsc::UnboundedSender<futures::future::BoxFuture<'static, ()>>,
    pub(super) log: EventLog,
    pub(super) ids: RunIds,
    pub(super) provider: Arc<dyn LlmProvider>,
    pub(super) tools: Arc<ToolRegistry>,
    pub(super) workflows: Arc<WorkflowStore>,
    pub(super) control: Control,
    pub(super) settings: RunSettings,
    /// The run's mutable state. One lock rather than one per field: no two fields need to be
    /// held apart for concurrency (each access is a few map operations), and settling reads
    /// several of them as one consistent picture. It is a `std` mutex and never held across an
    /// `.await` (take it through [`RunCtx::state`], use it, drop it): a guard held over an await
    /// would make the run's future `!Send` and could stall the other tasks of the run.
    state: Mutex<RunState>,
}

/// What a run changes as it goes, beside the log: see [`RunCtx::state`].
#[derive(Default)]
pub(super) struct RunState {
    /// The background tasks this run started.
    pub(super) tasks: Vec<TaskInfo>,
    /// Sub-agents spawned in this run: id → role (for `agent-completed` when settling).
    pub(super) roles: HashMap<String, String>,
    /// Agents whose `status` is currently non-empty.
    pub(super) statuses: HashSet<String>,
    /// Tokens used by this run's model calls so far.
    pub(super) usage: Usage,
    /// Resuming: confirmation requests already stored, by tool call id.
    pub(super) stored_requests: HashMap<String, StoredRequest>,
    /// Resuming: the sub-agent the open `delegate` call was running.
    pub(super) resumed_sub: Option<ResumedSubAgent>,
}

impl RunCtx {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        me: Weak<RunCtx>,
        spawner: mpsc::UnboundedSender<futures::future::BoxFuture<'static, ()>>,
        log: EventLog,
        ids: RunIds,
        provider: Arc<dyn LlmProvider>,
        tools: Arc<ToolRegistry>,
        workflows: Arc<WorkflowStore>,
        control: Control,
        settings: RunSettings,
    ) -> Self {
        RunCtx {
            me,
            spawner,
            log,
            ids,
            provider,
            tools,
            workflows,
            control,
            settings,
            state: Mutex::new(RunState::default()),
        }
    }

    /// The run's mutable state, locked. Drop the guard before the next `.await`.
    pub(super) fn state(&self) -> MutexGuard<'_, RunState> {
        self.state.lock().expect("run state")
    }
}

impl RunCtx {
    pub(super) async fn record(&self, agent_id: &str, body: EventBody) -> Result<(), RunError> {
        self.record_stored(agent_id, body).await.map(|_| ())
    }

    pub(super) async fn record_stored(
        &self,
        agent_id: &str,
        body: EventBody,
    ) -> Result<Vec<StoredEvent>, RunError> {
        let event = AgentEvent::new(self.ids.run_id.as_str(), agent_id, body);
        Ok(self
            .log
            .append(&self.ids.thread_id, vec![ThreadCommand::Record(event)])
            .await?)
    }

    pub(super) async fn set_status(&self, agent_id: &str, message: String) -> Result<(), RunError> {
        let clearing = message.is_empty();
        if !clearing {
            self.state().statuses.insert(agent_id.to_string());
        }
        self.record(agent_id, EventBody::Status(Status { message }))
            .await?;
        if clearing {
            self.state().statuses.remove(agent_id);
        }
        Ok(())
    }

    /// Stores `request` (unless a request for its tool call is already stored: resuming) and
    /// waits for the answer. Past the timeout, counted from the stored request's time, the run
    /// ends as cancelled with reason `timeout`.
    pub(super) async fn ask(
        &self,
        agent_id: &str,
        request: ConfirmationRequest,
    ) -> Result<Answer, RunError> {
        let stored = self.state().stored_requests.remove(&request.tool_call_id);
        let (request_id, asked_at) = match stored {
            Some(s) => {
                if let Some(a) = s.answer {
                    return Ok(a);
                }
                (s.request_id, s.ts)
            }
            None => {
                let id = request.request_id.clone();
                let tool = request.tool_name.clone();
                let rows = self
                    .record_stored(agent_id, EventBody::ConfirmationRequest(Box::new(request)))
                    .await?;
                tracing::info!(request_id = %id, %tool, "waiting for confirmation");
                crate::telemetry::confirmation(&id, None);
                (id, rows.first().map_or_else(now_ms, |r| r.ts))
            }
        };
        let timeout_ms = self.settings.confirmation_timeout.as_millis() as i64;
        let left = (asked_at + timeout_ms - now_ms()).max(0) as u64;
        let _waiting = crate::metrics::Present::new(crate::metrics::CONFIRMATIONS_WAITING);
        tokio::select! {
            a = self.control.answer(&request_id) => {
                crate::telemetry::confirmation(&request_id, Some(a.approved));
                Ok(a)
            }
            _ = tokio::time::sleep(Duration::from_millis(left)) => {
                tracing::warn!(%request_id, "confirmation timed out");
                Err(RunError::ConfirmationTimeout)
            }
        }
    }
}
