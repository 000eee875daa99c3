//! The orchestrator loop and sub-agents.
//!
//! A run: rebuild the thread's earlier turns from the log ([`crate::replay`]), summarize them
//! first if they pass the token budget, ask the provider, append its text and reasoning deltas
//! to the log as they arrive, collect its tool calls, run them (asking the user first for
//! destructive ones), feed the results back, and repeat until the model answers without a tool
//! call or the step limit ([`ORCHESTRATOR_MAX_STEPS`], [`SUB_AGENT_MAX_STEPS`]) is reached.
//! `delegate` runs the same loop as a sub-agent: its own `agent-<uuid>` id, a clean context
//! (only its instructions), a tool subset that never contains `delegate`. The same tool call
//! (name and arguments) failing twice in a row stops the agent: it is not going anywhere.
//!
//! Every event goes through `EventLog::append` as `ThreadCommand::Record`. The run's other
//! inputs — cancel and confirmation answers — are read back from the log
//! ([`Control`](crate::control::Control)).
//!
//! A confirmation (destructive tool, `ask-user`, plan review) waits at most the configured
//! timeout, counted from the request's stored time; a run that was waiting when the process
//! stopped is resumed from the log (`resume.rs`, through `AgentRuntime::recover`) and can still be
//! answered.
//!
//! Endings:
//! - the model is done → `run-finish {status: "completed"}`;
//! - cancel → the work is dropped at once (provider stream — so the HTTP request is closed —,
//!   tool, sub-agent, confirmation wait), open tool calls get `tool-error "Cancelled by user"`,
//!   running sub-agents `agent-completed` with error `"Cancelled by user"`, then
//!   `run-finish {status: "cancelled", reason: "user_cancelled"}` — all in one append;
//!   (a cancel's reason is carried to `run-finish`: the service's shutdown cancels with
//!   `service_shutdown`);
//! - a confirmation left unanswered past the timeout → the same, with reason `timeout`;
//! - any failure (append refused, provider error, a stuck tool loop, panic) → `error`, the
//!   same settling, and `run-finish {status: "error", reason}`, so no thread stays live.
//!
//! Where each part lives:
//! - `lifecycle.rs`: a run from its start to its `run-finish` (cancel, panics, background tasks
//!   that outlive the run and the follow-up run that reports them);
//! - `settle.rs`: ending a run, or a sub-agent, that did not complete;
//! - `turns.rs`: the orchestrator's turns (answering the user's message, reporting background
//!   tasks); `resume.rs`: continuing a run after a restart; `summary.rs`: summarizing earlier
//!   turns;
//! - `agent_loop.rs`: one agent's loop of model calls and tool calls;
//! - `sub_agents.rs`: `delegate`'s sub-agents; `background.rs`: those that run as background tasks;
//! - `context.rs`: what a run's tasks share, and the run's mutable state behind one lock.

mod agent_loop;
mod background;
mod context;
mod lifecycle;
mod resume;
mod settle;
mod sub_agents;
mod summary;
mod turns;
mod upstream;

use std::time::Duration;

use threadstream_domain::StoredEvent;
use threadstream_store::{EventLog, StoreError};

pub(crate) use lifecycle::{execute_run, message_group_of};

/// Model calls the orchestrator may make in one run.
pub const ORCHESTRATOR_MAX_STEPS: usize = 50;
/// Model calls a sub-agent may make.
pub const SUB_AGENT_MAX_STEPS: usize = 10;

/// What a cancelled tool call or sub-agent is settled with.
pub const CANCELLED_BY_USER: &str = "Cancelled by user";
/// ... and when the service cancelled it because it is shutting down.
pub const CANCELLED_BY_SHUTDOWN: &str = "Cancelled: the service is shutting down";
/// `cancel-requested` / `run-finish` reason of a cancel asked by a user.
pub const USER_CANCELLED: &str = "user_cancelled";
/// `cancel-requested` / `run-finish` reason of a run ended by the service's shutdown.
pub const SERVICE_SHUTDOWN: &str = "service_shutdown";
/// Background tasks that may run at once in a thread (of its live run and of finished ones).
pub const MAX_BACKGROUND_TASKS: usize = 5;
/// What the sixth background task is completed with.
pub const TASK_LIMIT_ERROR: &str = "Cannot start background task: limit of 5 concurrent tasks \
reached. Wait for existing tasks to complete.";

/// What a tool call whose confirmation timed out is settled with.
pub const CONFIRMATION_TIMED_OUT: &str = "The confirmation was not answered in time";

const HISTORY_PAGE: i64 = 5_000;

/// The ids of one run.
#[derive(Debug, Clone)]
pub struct RunIds {
    pub thread_id: String,
    pub run_id: String,
    pub orchestrator_id: String,
    pub user: String,
    /// The trace the run's spans join (the `traceparent` of the request that started it).
    pub trace_parent: Option<crate::telemetry::TraceParent>,
}

/// Settings of runs that come from configuration.
#[derive(Debug, Clone)]
pub(crate) struct RunSettings {
    pub confirmation_timeout: Duration,
    /// Estimated tokens of earlier turns above which they are summarized (0: never).
    pub summary_token_budget: usize,
}

/// How a run is entered.
pub(crate) enum Entry {
    /// A new run: its `run-start` and user message are stored, nothing else.
    Start { message: String },
    /// A run that was waiting on a confirmation when its process stopped.
    Resume,
    /// A follow-up run (its `run-start` is stored, no user message): the orchestrator reports
    /// how the background tasks of an earlier run of the same message group ended.
    FollowUp { report: String },
    /// A new run of an upstream AG-UI agent: its `run-start` and user message are stored.
    Upstream(Box<crate::agui::UpstreamRun>),
}

/// What a run leaves to do after its `run-finish`: its background tasks all settled after the
/// run finished, and a follow-up run in `message_group_id` should report how they ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FollowUp {
    pub message_group_id: String,
    pub report: String,
}

/// Every event of a thread, in order.
async fn read_thread(log: &EventLog, thread_id: &str) -> Result<Vec<StoredEvent>, StoreError> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = log.read_thread(thread_id, after, HISTORY_PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        let short = (page.len() as i64) < HISTORY_PAGE;
        out.extend(page);
        if short {
            break;
        }
    }
    Ok(out)
}
