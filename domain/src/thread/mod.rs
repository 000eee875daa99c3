//! The `Thread` aggregate: the command-side rules of one thread's stream (the other kinds of
//! log stream have aggregates of their own: [`crate::aggregate`]).
//!
//! [`Thread::decide`] is the only place the rules live; the log's writer calls it (and
//! [`Thread::apply_at`]) through [`StreamAggregate`] on its in-memory aggregate, and the cqrs-es
//! `Aggregate` impl ([`crate::aggregate`]) wraps the same two functions so cqrs-es's
//! `TestFramework` and the baseline `CqrsFramework` exercise exactly the same rules.
//!
//! `command`: what a caller asks; `decide`: the rules; `apply`: the fold; `replay`: the command
//! that stores a given event (for `verify` and `import`); `cqrs`: the events' cqrs-es form. The
//! state and its queries are here.

use std::collections::{BTreeMap, HashMap, HashSet};

use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aggregate::{AggregateCommand, StreamAggregate, StreamKind};
use crate::durable_stream::{check_producer_in, ProducerState};
use crate::error::ThreadError;
use crate::event::durable_stream::ProducerStamp;
use crate::event::*;

mod apply;
mod command;
mod cqrs;
mod decide;
mod replay;

pub use command::ThreadCommand;

/// An agent taking part in the live run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunAgent {
    pub parent: Option<String>,
    pub completed: bool,
    /// The background task this sub-agent runs (`agent-spawned.taskId`).
    #[serde(default)]
    pub task_id: Option<String>,
    /// A stop of this background task was asked for (`task-cancel-requested`).
    #[serde(default)]
    pub cancel_requested: bool,
}

/// The run that is live (active or waiting on a confirmation), or a finished run whose
/// background tasks still run (see [`Thread::detached`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveRun {
    pub run_id: String,
    pub orchestrator: String,
    pub agents: HashMap<String, RunAgent>,
    /// Open tool calls: id → calling agent.
    pub open_tool_calls: HashMap<String, String>,
    /// Every tool-call id of the run, open or settled.
    pub tool_calls: HashSet<String>,
    /// Confirmation requests of this run still waiting for an answer: request id → tool call id.
    pub waiting: BTreeMap<String, String>,
    /// Confirmation requests answered whose tool call is still open (the answer is not used
    /// yet): request id → tool call id. A run taken over by another process resumes from these.
    #[serde(default)]
    pub answered: BTreeMap<String, String>,
    pub cancel_requested: bool,
    /// Why the run was asked to stop (`cancel-requested.reason`: `user_cancelled`,
    /// `service_shutdown`); its `run-finish` carries the same reason.
    #[serde(default)]
    pub cancel_reason: Option<String>,
}

/// One thread's command-side state, folded from its events.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Thread {
    pub exists: bool,
    pub deleted: bool,
    pub owner: Option<String>,
    pub title: Option<String>,
    /// Number of events applied; the next event's `seq` is `version + 1`.
    pub version: u64,
    pub live: Option<LiveRun>,
    /// Finished runs whose background tasks still run, by run id. A background task outlives
    /// the orchestrator's turn: the run finishes (the thread takes a new chat message) while its
    /// task agents go on recording events under the run's id until their `agent-completed`;
    /// only they may (the run's orchestrator is marked completed).
    #[serde(default)]
    pub detached: BTreeMap<String, LiveRun>,
    pub runs: HashSet<String>,
    /// Every confirmation request id ever seen in this thread.
    pub confirmations: HashSet<String>,
    /// Idempotent producers appending to this thread as a Durable Stream (`/v1/threads/:id`),
    /// from its `producer-write` events.
    #[serde(default)]
    pub producers: BTreeMap<String, ProducerState>,
    /// Where the AI SDK chat of this thread's id goes on, from its last `chat-forked`
    /// (`regenerate-message` forks): `None` while it is this thread.
    #[serde(default)]
    pub chat_thread: Option<String>,
}

impl Thread {
    pub fn live_run(&self) -> Option<&LiveRun> {
        self.live.as_ref()
    }

    /// The live run if it is `run_id`, else the finished run `run_id` whose background tasks
    /// still run.
    pub fn open_run(&self, run_id: &str) -> Option<&LiveRun> {
        match &self.live {
            Some(run) if run.run_id == run_id => Some(run),
            _ => self.detached.get(run_id),
        }
    }

    /// The live run, then the detached ones.
    fn open_runs(&self) -> impl Iterator<Item = &LiveRun> {
        self.live.iter().chain(self.detached.values())
    }

    /// Every running background task of the thread: (its run, agent id, task id).
    pub fn running_tasks(&self) -> impl Iterator<Item = (&LiveRun, &str, &str)> {
        self.open_runs().flat_map(|run| {
            run.agents
                .iter()
                .filter_map(move |(id, a)| match &a.task_id {
                    Some(task) if !a.completed => Some((run, id.as_str(), task.as_str())),
                    _ => None,
                })
        })
    }

    /// The agent running background task `task_id`, if it is still running.
    pub fn running_task(&self, task_id: &str) -> Option<(&LiveRun, &str)> {
        self.running_tasks()
            .find(|(_, _, t)| *t == task_id)
            .map(|(run, agent, _)| (run, agent))
    }

    /// Waiting on a confirmation.
    pub fn is_suspended(&self) -> bool {
        self.live.as_ref().is_some_and(|r| !r.waiting.is_empty())
    }
}

impl AggregateCommand for ThreadCommand {
    type Aggregate = Thread;

    /// Text and reasoning deltas: a run's first token waits behind its start, so the start is
    /// not one.
    fn is_fragment(&self) -> bool {
        matches!(
            self,
            ThreadCommand::Record(AgentEvent {
                body: EventBody::TextDelta(_) | EventBody::ReasoningDelta(_),
                ..
            })
        )
    }
}

impl StreamAggregate for Thread {
    type Command = ThreadCommand;
    const KIND: StreamKind = StreamKind::Thread;

    fn decide(&self, command: &ThreadCommand) -> Result<Vec<AgentEvent>, ThreadError> {
        Thread::decide(self, command)
    }

    fn apply_at(&mut self, id: i64, event: &AgentEvent) {
        Thread::apply_at(self, id, event)
    }

    fn version(&self) -> u64 {
        self.version
    }

    fn command_for(&self, event: &AgentEvent) -> ThreadCommand {
        replay::command_for(event)
    }

    /// A live run, or a background task still running after its run.
    fn in_progress(&self) -> bool {
        self.live.is_some() || self.running_tasks().next().is_some()
    }

    fn fork_source(command: &ThreadCommand) -> Option<&ForkOf> {
        match command {
            ThreadCommand::Fork { fork_of, .. } => Some(fork_of),
            _ => None,
        }
    }
}
