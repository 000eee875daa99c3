//! The `Thread` aggregate: the command-side rules of one thread's stream.
//!
//! [`Thread::decide`] is the only place the rules live; the log's writer calls it (and
//! [`Thread::apply`]) directly on its in-memory aggregate, and the cqrs-es [`Aggregate`] impl
//! wraps the same two functions so cqrs-es's `TestFramework` and the baseline `CqrsFramework`
//! exercise exactly the same rules.

use std::collections::{BTreeMap, HashMap, HashSet};

use cqrs_es::{Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::durable_stream::{check_producer_in, DurableStream, ProducerState, StreamCommand};
use crate::error::ThreadError;
use crate::event::durable_stream::ProducerStamp;
use crate::event::*;
use crate::workflow::{Workflow, WorkflowCommand};

/// What a caller asks of a thread. Each command decides zero or more events.
#[derive(Debug, Clone, PartialEq)]
pub enum ThreadCommand {
    /// Create the thread if it does not exist yet; a no-op when it does and `owner` owns it,
    /// `ThreadNotFound` when another user does.
    Create {
        owner: String,
        title: Option<String>,
    },
    /// Create this thread as a fork of `fork_of`: decided on an aggregate already folded from
    /// the source's events through the fork point (the log's writer does that), it stores the
    /// fork's `thread-created` with `forkOf`. The title defaults to the source's at that point.
    Fork {
        owner: String,
        title: Option<String>,
        fork_of: ForkOf,
    },
    Rename {
        title: String,
        by: String,
    },
    Delete {
        by: String,
    },
    /// A user's chat message: stores `user-message` and opens the run with `run-start`.
    StartRun {
        run_id: String,
        agent_id: String,
        message_id: String,
        message_group_id: Option<String>,
        text: String,
        user: String,
    },
    /// Open a follow-up run that reports on background tasks: `run-start` with the
    /// `messageGroupId` of the runs it continues, and no user message.
    StartFollowUp {
        run_id: String,
        agent_id: String,
        message_id: String,
        message_group_id: String,
    },
    /// One agent event (n8n wire type) from the runtime or from ingest.
    Record(AgentEvent),
    AnswerConfirmation {
        request_id: String,
        approved: bool,
        user_input: Option<String>,
        answers: Option<Value>,
        by: String,
    },
    /// Ask the live run to stop, and every running background task of the thread (also those
    /// that outlive their finished run); a no-op when nothing is running or every stop is
    /// already asked for.
    Cancel {
        by: String,
        reason: String,
    },
    /// Ask a running background task to stop.
    CancelTask {
        task_id: String,
        by: String,
    },
    /// Inject a user's correction into a running background task.
    CorrectTask {
        task_id: String,
        message: String,
        by: String,
    },
    /// A command on a workflow stream (`workflow:<id>`), decided by its [`Workflow`]; the
    /// events are attributed to `run_id`/`agent_id` (the tool call's run and agent, or empty).
    Workflow {
        command: WorkflowCommand,
        run_id: String,
        agent_id: String,
        by: String,
    },
    /// A command on a Durable Stream (`stream:<path>`), decided by its [`DurableStream`]. The
    /// request's wall clock and the last read this process served go with it: a stream's TTL
    /// window slides on both.
    Stream {
        command: StreamCommand,
        by: String,
        now_ms: i64,
        last_read_ms: i64,
    },
    /// An idempotent producer's write to the thread (`Producer-Id`/`-Epoch`/`-Seq`), as the
    /// first command of the append it stamps: a duplicate or a fenced epoch refuses the whole
    /// append, so a producer's retry never stores an event twice.
    Produce(ProducerStamp),
    /// Record the tokens of one model call (the internal `llm-usage` event) for an active agent
    /// of the live run `run_id`.
    RecordUsage {
        run_id: String,
        agent_id: String,
        usage: LlmUsage,
    },
    /// Store an LLM-written summary of the thread's earlier runs (the internal
    /// `conversation-summary` event), from an active agent of the live run `run_id`.
    Summarize {
        run_id: String,
        agent_id: String,
        summary: String,
        covered_through_id: i64,
    },
}

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
    /// On a workflow stream (`workflow:<id>`): the workflow. A stream is a thread or a
    /// workflow, never both.
    #[serde(default)]
    pub workflow: Workflow,
    /// On a Durable Stream (`stream:<path>`): the stream.
    #[serde(default)]
    pub stream: DurableStream,
    /// Idempotent producers appending to this thread as a Durable Stream (`/v1/threads/:id`),
    /// from its `producer-write` events.
    #[serde(default)]
    pub producers: BTreeMap<String, ProducerState>,
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

    /// Decides the events a command produces, or the rule it breaks. Pure: `self` is unchanged.
    pub fn decide(&self, command: &ThreadCommand) -> Result<Vec<AgentEvent>, ThreadError> {
        if let ThreadCommand::Stream {
            command,
            by,
            now_ms,
            last_read_ms,
        } = command
        {
            if self.exists || self.workflow.exists {
                return Err(ThreadError::WrongStream(
                    "this stream is a thread or a workflow".into(),
                ));
            }
            return Ok(self
                .stream
                .decide(command, *now_ms, *last_read_ms)?
                .into_iter()
                .map(|body| AgentEvent::new("", "", body).with_user(by.clone()))
                .collect());
        }
        if self.deleted {
            return Err(ThreadError::ThreadDeleted);
        }
        if let ThreadCommand::Workflow {
            command,
            run_id,
            agent_id,
            by,
        } = command
        {
            if self.exists {
                return Err(ThreadError::WrongStream("this stream is a thread".into()));
            }
            return Ok(self
                .workflow
                .decide(command)?
                .into_iter()
                .map(|body| {
                    AgentEvent::new(run_id.clone(), agent_id.clone(), body).with_user(by.clone())
                })
                .collect());
        }
        if self.workflow.exists {
            return Err(ThreadError::WrongStream(format!(
                "this stream is workflow '{}'",
                self.workflow.id
            )));
        }
        match command {
            ThreadCommand::Create { owner, title } => {
                if self.exists {
                    // Another user's thread is not there for them: this closes the gap between
                    // an API ownership check and the append (both users' creates race).
                    if self.owner.as_ref().is_some_and(|o| o != owner) {
                        return Err(ThreadError::ThreadNotFound);
                    }
                    return Ok(vec![]);
                }
                Ok(vec![AgentEvent::new(
                    "",
                    "",
                    EventBody::ThreadCreated(ThreadCreated {
                        owner: owner.clone(),
                        title: title.clone(),
                        fork_of: None,
                    }),
                )
                .with_user(owner.clone())])
            }
            ThreadCommand::Fork {
                owner,
                title,
                fork_of,
            } => {
                self.require_exists()?;
                // A run (or a background task) cut by the fork point could never finish in the
                // fork: its agents write to the source. So a fork starts between runs.
                if let Some(run) = self.open_runs().next() {
                    return Err(ThreadError::ForkInsideRun {
                        run_id: run.run_id.clone(),
                        through_event_id: fork_of.through_event_id,
                    });
                }
                Ok(vec![AgentEvent::new(
                    "",
                    "",
                    EventBody::ThreadCreated(ThreadCreated {
                        owner: owner.clone(),
                        title: title.clone().or_else(|| self.title.clone()),
                        fork_of: Some(fork_of.clone()),
                    }),
                )
                .with_user(owner.clone())])
            }
            ThreadCommand::Produce(stamp) => {
                self.require_exists()?;
                check_producer_in(&self.producers, stamp, false, 0)?;
                Ok(vec![AgentEvent::new(
                    "",
                    "",
                    EventBody::ProducerWrite(stamp.clone()),
                )])
            }
            ThreadCommand::Rename { title, by } => {
                self.require_exists()?;
                Ok(vec![AgentEvent::new(
                    "",
                    "",
                    EventBody::ThreadRenamed(ThreadTitle {
                        title: title.clone(),
                    }),
                )
                .with_user(by.clone())])
            }
            ThreadCommand::Delete { by } => {
                self.require_exists()?;
                if let Some(run) = self.open_runs().next() {
                    return Err(ThreadError::RunAlreadyActive {
                        run_id: run.run_id.clone(),
                    });
                }
                Ok(vec![AgentEvent::new(
                    "",
                    "",
                    EventBody::ThreadDeleted(Empty {}),
                )
                .with_user(by.clone())])
            }
            ThreadCommand::StartRun {
                run_id,
                agent_id,
                message_id,
                message_group_id,
                text,
                user,
            } => {
                let start = self
                    .run_start(run_id, agent_id, message_id, message_group_id.clone())?
                    .with_user(user.clone());
                let message = AgentEvent::new(
                    run_id.clone(),
                    agent_id.clone(),
                    EventBody::UserMessage(UserMessage {
                        message_id: message_id.clone(),
                        text: text.clone(),
                    }),
                )
                .with_user(user.clone());
                Ok(vec![message, start])
            }
            ThreadCommand::StartFollowUp {
                run_id,
                agent_id,
                message_id,
                message_group_id,
            } => {
                let start =
                    self.run_start(run_id, agent_id, message_id, Some(message_group_id.clone()))?;
                Ok(vec![start])
            }
            ThreadCommand::Record(event) => {
                self.require_exists()?;
                if !event.body.is_n8n() {
                    return Err(ThreadError::InternalEvent {
                        event_type: event.body.event_type().to_string(),
                    });
                }
                self.check(event)?;
                Ok(vec![event.clone()])
            }
            ThreadCommand::AnswerConfirmation {
                request_id,
                approved,
                user_input,
                answers,
                by,
            } => {
                let run = self
                    .open_runs()
                    .find(|r| r.waiting.contains_key(request_id))
                    .ok_or_else(|| ThreadError::ConfirmationNotFound(request_id.clone()))?;
                Ok(vec![AgentEvent::new(
                    run.run_id.clone(),
                    run.orchestrator.clone(),
                    EventBody::ConfirmationAnswered(ConfirmationAnswered {
                        request_id: request_id.clone(),
                        approved: *approved,
                        user_input: user_input.clone(),
                        answers: answers.clone(),
                    }),
                )
                .with_user(by.clone())])
            }
            ThreadCommand::CancelTask { task_id, by } => {
                let (run, agent) = self
                    .running_task(task_id)
                    .ok_or_else(|| ThreadError::TaskNotFound(task_id.clone()))?;
                Ok(vec![AgentEvent::new(
                    run.run_id.clone(),
                    agent,
                    EventBody::TaskCancelRequested(TaskRef {
                        task_id: task_id.clone(),
                    }),
                )
                .with_user(by.clone())])
            }
            ThreadCommand::CorrectTask {
                task_id,
                message,
                by,
            } => {
                let (run, agent) = self
                    .running_task(task_id)
                    .ok_or_else(|| ThreadError::TaskNotFound(task_id.clone()))?;
                Ok(vec![AgentEvent::new(
                    run.run_id.clone(),
                    agent,
                    EventBody::TaskCorrection(TaskCorrection {
                        task_id: task_id.clone(),
                        message: message.clone(),
                    }),
                )
                .with_user(by.clone())])
            }
            ThreadCommand::Workflow { .. } | ThreadCommand::Stream { .. } => {
                unreachable!("decided above")
            }
            ThreadCommand::RecordUsage {
                run_id,
                agent_id,
                usage,
            } => {
                self.require_exists()?;
                let event = AgentEvent::new(
                    run_id.clone(),
                    agent_id.clone(),
                    EventBody::LlmUsage(usage.clone()),
                );
                self.check(&event)?;
                Ok(vec![event])
            }
            ThreadCommand::Summarize {
                run_id,
                agent_id,
                summary,
                covered_through_id,
            } => {
                self.require_exists()?;
                let event = AgentEvent::new(
                    run_id.clone(),
                    agent_id.clone(),
                    EventBody::ConversationSummary(ConversationSummary {
                        summary: summary.clone(),
                        covered_through_id: *covered_through_id,
                    }),
                );
                self.check(&event)?;
                Ok(vec![event])
            }
            ThreadCommand::Cancel { by, reason } => {
                let mut events = Vec::new();
                if let Some(run) = self.live.as_ref().filter(|r| !r.cancel_requested) {
                    // The live run's own tasks stop with it.
                    events.push(
                        AgentEvent::new(
                            run.run_id.clone(),
                            run.orchestrator.clone(),
                            EventBody::CancelRequested(CancelRequested {
                                reason: reason.clone(),
                            }),
                        )
                        .with_user(by.clone()),
                    );
                }
                let mut detached: Vec<(&str, &str, &str)> = self
                    .detached
                    .values()
                    .flat_map(|run| {
                        run.agents
                            .iter()
                            .filter_map(move |(id, a)| match &a.task_id {
                                Some(t) if !a.completed && !a.cancel_requested => {
                                    Some((run.run_id.as_str(), id.as_str(), t.as_str()))
                                }
                                _ => None,
                            })
                    })
                    .collect();
                detached.sort();
                for (run_id, agent, task_id) in detached {
                    events.push(
                        AgentEvent::new(
                            run_id,
                            agent,
                            EventBody::TaskCancelRequested(TaskRef {
                                task_id: task_id.to_string(),
                            }),
                        )
                        .with_user(by.clone()),
                    );
                }
                Ok(events)
            }
        }
    }

    /// A `run-start` for a new run, checked against the thread.
    fn run_start(
        &self,
        run_id: &str,
        agent_id: &str,
        message_id: &str,
        message_group_id: Option<String>,
    ) -> Result<AgentEvent, ThreadError> {
        self.require_exists()?;
        let start = AgentEvent::new(
            run_id,
            agent_id,
            EventBody::RunStart(RunStart {
                message_id: message_id.to_string(),
                message_group_id,
            }),
        );
        self.check(&start)?;
        Ok(start)
    }

    fn require_exists(&self) -> Result<(), ThreadError> {
        if self.exists {
            Ok(())
        } else {
            Err(ThreadError::ThreadNotFound)
        }
    }

    /// Checks one n8n agent event against the live run.
    fn check(&self, e: &AgentEvent) -> Result<(), ThreadError> {
        if let EventBody::RunStart(_) = &e.body {
            if let Some(run) = &self.live {
                return Err(ThreadError::RunAlreadyActive {
                    run_id: run.run_id.clone(),
                });
            }
            if self.runs.contains(&e.run_id) {
                return Err(ThreadError::DuplicateRun(e.run_id.clone()));
            }
            if e.run_id.is_empty() || e.agent_id.is_empty() {
                return Err(ThreadError::Invalid(
                    "run-start needs a non-empty runId and agentId".into(),
                ));
            }
            return Ok(());
        }
        let run = match self.open_run(&e.run_id) {
            Some(run) => run,
            None if self.runs.contains(&e.run_id) => {
                return Err(ThreadError::RunFinished(e.run_id.clone()))
            }
            None => return Err(ThreadError::RunNotLive(e.run_id.clone())),
        };
        let detached = self.live.as_ref().is_none_or(|l| l.run_id != e.run_id);
        if detached && matches!(e.body, EventBody::RunFinish(_)) {
            return Err(ThreadError::RunFinished(e.run_id.clone()));
        }
        let known_active_agent = |id: &str| match run.agents.get(id) {
            None => Err(ThreadError::UnknownAgent(id.to_string())),
            Some(a) if a.completed => Err(ThreadError::AgentCompleted(id.to_string())),
            Some(_) => Ok(()),
        };
        match &e.body {
            EventBody::RunFinish(_) => {
                if e.agent_id != run.orchestrator {
                    return Err(ThreadError::FinishNotFromOrchestrator {
                        expected: run.orchestrator.clone(),
                        got: e.agent_id.clone(),
                    });
                }
            }
            EventBody::AgentSpawned(p) => {
                if run.agents.contains_key(&e.agent_id) {
                    return Err(ThreadError::DuplicateAgent(e.agent_id.clone()));
                }
                match run.agents.get(&p.parent_id) {
                    None => return Err(ThreadError::UnknownParent(p.parent_id.clone())),
                    Some(parent) if parent.parent.is_some() => {
                        return Err(ThreadError::SubAgentCannotSpawn(p.parent_id.clone()))
                    }
                    Some(parent) if parent.completed => {
                        return Err(ThreadError::AgentCompleted(p.parent_id.clone()))
                    }
                    Some(_) => {}
                }
            }
            EventBody::AgentCompleted(_) => {
                known_active_agent(&e.agent_id)?;
                if e.agent_id == run.orchestrator {
                    return Err(ThreadError::OrchestratorCannotComplete(e.agent_id.clone()));
                }
            }
            EventBody::ToolCall(p) => {
                known_active_agent(&e.agent_id)?;
                if run.tool_calls.contains(&p.tool_call_id) {
                    return Err(ThreadError::DuplicateToolCall(p.tool_call_id.clone()));
                }
            }
            EventBody::ToolResult(ToolResult { tool_call_id, .. })
            | EventBody::ToolError(ToolError { tool_call_id, .. }) => {
                known_active_agent(&e.agent_id)?;
                if run.open_tool_calls.get(tool_call_id) != Some(&e.agent_id) {
                    return Err(ThreadError::ToolCallNotOpen {
                        tool_call_id: tool_call_id.clone(),
                        agent_id: e.agent_id.clone(),
                    });
                }
            }
            EventBody::ConfirmationRequest(p) => {
                known_active_agent(&e.agent_id)?;
                if run.open_tool_calls.get(&p.tool_call_id) != Some(&e.agent_id) {
                    return Err(ThreadError::ToolCallNotOpen {
                        tool_call_id: p.tool_call_id.clone(),
                        agent_id: e.agent_id.clone(),
                    });
                }
                if self.confirmations.contains(&p.request_id) {
                    return Err(ThreadError::DuplicateConfirmation(p.request_id.clone()));
                }
            }
            _ => known_active_agent(&e.agent_id)?,
        }
        Ok(())
    }

    /// Folds one stored event, at log id `id`, into the state. Never fails: events in the log
    /// were decided. (Only Durable Streams need the id: their offsets are ids.)
    pub fn apply_at(&mut self, id: i64, e: &AgentEvent) {
        if let EventBody::StreamCreated(_)
        | EventBody::StreamAppended(_)
        | EventBody::StreamClosed(_)
        | EventBody::StreamDeleted(_)
        | EventBody::StreamForkAdded(_)
        | EventBody::StreamForkReleased(_) = &e.body
        {
            self.version += 1;
            self.stream.apply(id, e.ts.unwrap_or(0), &e.body);
        } else {
            self.apply(e);
        }
    }

    /// Folds one stored event into the state. Never fails: events in the log were decided.
    pub fn apply(&mut self, e: &AgentEvent) {
        self.version += 1;
        match &e.body {
            // Without the id (cqrs-es, audit folds): the stream's offsets read 0.
            EventBody::StreamCreated(_)
            | EventBody::StreamAppended(_)
            | EventBody::StreamClosed(_)
            | EventBody::StreamDeleted(_)
            | EventBody::StreamForkAdded(_)
            | EventBody::StreamForkReleased(_) => {
                self.stream.apply(0, e.ts.unwrap_or(0), &e.body);
            }
            EventBody::WorkflowCreated(_)
            | EventBody::WorkflowNodeAdded(_)
            | EventBody::WorkflowNodesConnected(_)
            | EventBody::WorkflowNodeUpdated(_)
            | EventBody::WorkflowNodeRemoved(_)
            | EventBody::WorkflowDeleted(_) => {
                self.workflow.apply(&e.body);
                if let Some(ts) = e.ts {
                    if self.workflow.created_at == 0 {
                        self.workflow.created_at = ts;
                    }
                    self.workflow.updated_at = ts;
                }
            }
            EventBody::ThreadCreated(p) => {
                self.exists = true;
                self.owner = Some(p.owner.clone());
                self.title = p.title.clone();
            }
            EventBody::ThreadRenamed(p) => self.title = Some(p.title.clone()),
            EventBody::ProducerWrite(p) => {
                self.producers.insert(
                    p.id.clone(),
                    ProducerState {
                        epoch: p.epoch,
                        last_seq: p.seq,
                    },
                );
            }
            EventBody::ThreadTitleUpdated(p) => self.title = Some(p.title.clone()),
            EventBody::ThreadDeleted(_) => self.deleted = true,
            EventBody::RunStart(_) => {
                self.runs.insert(e.run_id.clone());
                let mut agents = HashMap::new();
                agents.insert(e.agent_id.clone(), RunAgent::default());
                self.live = Some(LiveRun {
                    run_id: e.run_id.clone(),
                    orchestrator: e.agent_id.clone(),
                    agents,
                    ..LiveRun::default()
                });
            }
            EventBody::RunFinish(_) => {
                let Some(mut run) = self.live.take_if(|r| r.run_id == e.run_id) else {
                    return;
                };
                let tasks_running = run
                    .agents
                    .values()
                    .any(|a| a.task_id.is_some() && !a.completed);
                if tasks_running {
                    // Its background tasks go on: only they may still record in this run.
                    if let Some(o) = run.agents.get_mut(&run.orchestrator) {
                        o.completed = true;
                    }
                    self.detached.insert(run.run_id.clone(), run);
                }
            }
            _ => {
                let run = match self.live.as_mut() {
                    Some(run) if run.run_id == e.run_id => run,
                    _ => match self.detached.get_mut(&e.run_id) {
                        Some(run) => run,
                        None => return,
                    },
                };
                match &e.body {
                    EventBody::AgentSpawned(p) => {
                        run.agents.insert(
                            e.agent_id.clone(),
                            RunAgent {
                                parent: Some(p.parent_id.clone()),
                                completed: false,
                                task_id: p.task_id.clone(),
                                cancel_requested: false,
                            },
                        );
                    }
                    EventBody::AgentCompleted(_) => {
                        if let Some(a) = run.agents.get_mut(&e.agent_id) {
                            a.completed = true;
                        }
                        // Completing settles the agent's open calls and withdraws their
                        // confirmation requests (as n8n's reducer does).
                        run.open_tool_calls.retain(|tc, agent| {
                            let settled = *agent == e.agent_id;
                            if settled {
                                run.waiting.retain(|_, w| w != tc);
                                run.answered.retain(|_, w| w != tc);
                            }
                            !settled
                        });
                        let run_id = run.run_id.clone();
                        let done = !run
                            .agents
                            .values()
                            .any(|a| a.task_id.is_some() && !a.completed);
                        if done && self.detached.contains_key(&run_id) {
                            self.detached.remove(&run_id);
                        }
                    }
                    EventBody::ToolCall(p) => {
                        run.tool_calls.insert(p.tool_call_id.clone());
                        run.open_tool_calls
                            .insert(p.tool_call_id.clone(), e.agent_id.clone());
                    }
                    EventBody::ToolResult(ToolResult { tool_call_id, .. })
                    | EventBody::ToolError(ToolError { tool_call_id, .. }) => {
                        run.open_tool_calls.remove(tool_call_id);
                        run.waiting.retain(|_, tc| tc != tool_call_id);
                        run.answered.retain(|_, tc| tc != tool_call_id);
                    }
                    EventBody::ConfirmationRequest(p) => {
                        self.confirmations.insert(p.request_id.clone());
                        run.waiting
                            .insert(p.request_id.clone(), p.tool_call_id.clone());
                    }
                    EventBody::ConfirmationAnswered(p) => {
                        if let Some(tc) = run.waiting.remove(&p.request_id) {
                            run.answered.insert(p.request_id.clone(), tc);
                        }
                    }
                    EventBody::CancelRequested(c) => {
                        run.cancel_requested = true;
                        run.cancel_reason = Some(c.reason.clone());
                    }
                    EventBody::TaskCancelRequested(_) => {
                        if let Some(a) = run.agents.get_mut(&e.agent_id) {
                            a.cancel_requested = true;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The stored form of an event for cqrs-es: the envelope as n8n serializes it.
impl DomainEvent for AgentEvent {
    fn event_type(&self) -> String {
        self.body.event_type().to_string()
    }

    fn event_version(&self) -> String {
        "1".to_string()
    }
}

impl Aggregate for Thread {
    const TYPE: &'static str = "thread";
    type Command = ThreadCommand;
    type Event = AgentEvent;
    type Error = ThreadError;
    type Services = ();

    async fn handle(
        &mut self,
        command: Self::Command,
        _services: &Self::Services,
        sink: &cqrs_es::event_sink::EventSink<Self>,
    ) -> Result<(), Self::Error> {
        for event in self.decide(&command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: Self::Event) {
        Thread::apply(self, &event);
    }
}
