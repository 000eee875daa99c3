//! Restart recovery: what a process does at start-up with the runs and background tasks that a
//! stopped process left live in the log. A run waiting on a confirmation is resumed; a run that
//! was executing is finished as `interrupted`; background tasks no process runs any more are
//! completed with an error and reported in a follow-up run. Only runs started by a chat message
//! are touched: ingested runs belong to the agent that sends them.

use std::collections::HashMap;

use threadstream_domain::event::{AgentCompleted, RunFinish, RunStatus, ToolError};
use threadstream_domain::{AgentEvent, EventBody, ThreadCommand};
use threadstream_store::StoreError;

use crate::task_report::TaskReport;
use crate::{orchestrator, AgentRuntime};

/// What [`AgentRuntime::recover`] did with a thread's live run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// The thread has no live run.
    Idle,
    /// The run was waiting on a confirmation: it runs again, waiting for the answer.
    Resumed { run_id: String },
    /// The run was executing when its process stopped: it was finished as `interrupted`.
    Interrupted { run_id: String },
    /// No run was live, but background tasks of finished runs were running when their process
    /// stopped: they were completed with an error and a follow-up run reports that.
    TasksInterrupted { tasks: usize },
}

impl AgentRuntime {
    /// At start-up, for a thread whose run was left live by a process that stopped: a run
    /// waiting on a confirmation is resumed (rebuilt from the log; the answer may come now, or
    /// may already have come), a run that was executing is finished with a `tool-error` for
    /// every open tool call and `run-finish {status: "error", reason: "interrupted"}`.
    pub async fn recover(&self, thread_id: &str) -> Result<Recovery, StoreError> {
        let state = self.inner.log.thread_state(thread_id).await?;
        let mut interrupted_tasks = 0;
        for run in state.detached.values() {
            if !self.is_running(thread_id, &run.run_id) {
                interrupted_tasks += self.interrupt_tasks(thread_id, run).await?;
            }
        }
        let Some(run) = state.live_run() else {
            return Ok(match interrupted_tasks {
                0 => Recovery::Idle,
                n => Recovery::TasksInterrupted { tasks: n },
            });
        };
        let run_id = run.run_id.clone();
        // Only runs this runtime started (through `POST /chat`, which stores the user's
        // message): runs ingested from agents that run elsewhere are theirs to continue.
        let facts = self.run_facts(thread_id, &run_id).await?;
        // An upstream agent's run is not resumed: its agent's stream is gone with the process.
        if facts.started_by_chat && !facts.upstream && resumable(run, &facts.requested) {
            tracing::info!(thread = %thread_id, run = %run_id, "resuming a run waiting on a confirmation");
            let user = state.owner.clone().unwrap_or_default();
            self.spawn(
                orchestrator::RunIds {
                    thread_id: thread_id.to_string(),
                    run_id: run_id.clone(),
                    orchestrator_id: run.orchestrator.clone(),
                    user,
                    trace_parent: None,
                },
                orchestrator::Entry::Resume,
                Box::new(()),
            );
            return Ok(Recovery::Resumed { run_id });
        }
        let mut commands = interrupt_commands(run, |a| a.task_id.is_some());
        commands.push(ThreadCommand::Record(AgentEvent::new(
            run.run_id.clone(),
            run.orchestrator.clone(),
            EventBody::RunFinish(RunFinish {
                status: RunStatus::Error,
                reason: Some("interrupted".into()),
                archived_workflow_ids: None,
            }),
        )));
        tracing::warn!(thread = %thread_id, run = %run_id, "finishing run interrupted by a restart");
        self.inner.log.append(thread_id, commands).await?;
        Ok(Recovery::Interrupted { run_id })
    }

    /// Whether the run was started by a chat message (on any instance), so this runtime can
    /// resume or finish it; ingested runs belong to the agent that sends them.
    pub async fn started_by_chat(&self, thread_id: &str, run_id: &str) -> Result<bool, StoreError> {
        Ok(self.run_facts(thread_id, run_id).await?.started_by_chat)
    }
}

/// What an interrupted tool call is settled with.
const TOOL_INTERRUPTED: &str = "interrupted: the server stopped while this tool was running";
/// What an interrupted background task is completed with.
const TASK_INTERRUPTED: &str = "interrupted: the server stopped while this task was running";

/// A `tool-error` for every open tool call of `run`, and `agent-completed` with an error for its
/// running sub-agents that `stop` selects (after their calls' errors).
fn interrupt_commands(
    run: &threadstream_domain::LiveRun,
    stop: impl Fn(&threadstream_domain::thread::RunAgent) -> bool,
) -> Vec<ThreadCommand> {
    let record = |agent: &str, body| {
        ThreadCommand::Record(AgentEvent::new(run.run_id.as_str(), agent, body))
    };
    let mut open: Vec<(&String, &String)> = run.open_tool_calls.iter().collect();
    open.sort();
    let mut commands: Vec<ThreadCommand> = open
        .into_iter()
        .map(|(tool_call_id, agent_id)| {
            record(
                agent_id,
                EventBody::ToolError(ToolError {
                    tool_call_id: tool_call_id.clone(),
                    error: TOOL_INTERRUPTED.into(),
                }),
            )
        })
        .collect();
    let mut agents: Vec<(&String, &threadstream_domain::thread::RunAgent)> = run
        .agents
        .iter()
        .filter(|(id, a)| **id != run.orchestrator && !a.completed && stop(a))
        .collect();
    agents.sort_by_key(|(id, _)| *id);
    for (agent_id, _) in agents {
        commands.push(record(
            agent_id,
            EventBody::AgentCompleted(AgentCompleted {
                role: "background task".into(),
                result: String::new(),
                error: Some(TASK_INTERRUPTED.into()),
            }),
        ));
    }
    commands
}

impl AgentRuntime {
    /// Completes the running background tasks of a finished run that no process runs any more
    /// (their process stopped) with an error, then reports that in a follow-up run. Returns how
    /// many it completed.
    async fn interrupt_tasks(
        &self,
        thread_id: &str,
        run: &threadstream_domain::LiveRun,
    ) -> Result<usize, StoreError> {
        if !self
            .run_facts(thread_id, &run.run_id)
            .await?
            .started_by_chat
        {
            return Ok(0);
        }
        let tasks: Vec<String> = run
            .agents
            .values()
            .filter(|a| !a.completed)
            .filter_map(|a| a.task_id.clone())
            .collect();
        let commands = interrupt_commands(run, |a| a.task_id.is_some());
        tracing::warn!(thread = %thread_id, run = %run.run_id, tasks = tasks.len(), "completing background tasks interrupted by a restart");
        self.inner.log.append(thread_id, commands).await?;
        let mut report = TaskReport::new();
        for t in &tasks {
            report.task(t, Err(TASK_INTERRUPTED));
        }
        let report = report.finish();
        let events = self.inner.log.read_thread(thread_id, 0, i64::MAX).await?;
        let follow_up = orchestrator::FollowUp {
            message_group_id: orchestrator::message_group_of(&events, &run.run_id),
            report,
        };
        let user = self
            .inner
            .log
            .thread_state(thread_id)
            .await?
            .owner
            .unwrap_or_default();
        let me = self.clone();
        let thread = thread_id.to_string();
        tokio::spawn(async move { me.start_follow_up(thread, user, follow_up).await });
        Ok(tasks.len())
    }

    /// What the log says of `run_id` that recovery needs ([`RunFacts`]).
    async fn run_facts(&self, thread_id: &str, run_id: &str) -> Result<RunFacts, StoreError> {
        let mut started = false;
        let mut upstream = false;
        let mut requested = std::collections::HashSet::new();
        let mut after = 0;
        loop {
            let page = self.inner.log.read_thread(thread_id, after, 5_000).await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for e in page.iter().filter(|e| e.run_id == run_id) {
                match e.event_type.as_str() {
                    "user-message" => started = true,
                    "agui-event" => upstream = true,
                    "confirmation-request" => {
                        if let Ok(r) = serde_json::from_str::<
                            threadstream_domain::event::ConfirmationRequest,
                        >(&e.payload)
                        {
                            requested.insert(r.tool_call_id);
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(RunFacts {
            started_by_chat: started,
            upstream,
            requested,
        })
    }
}

/// What recovery reads of a run in the log.
struct RunFacts {
    /// Started by a chat message (its `user-message` is stored), on any instance.
    started_by_chat: bool,
    /// A run of an upstream AG-UI agent (it recorded an `agui-event`).
    upstream: bool,
    /// The tool calls of the run that have a confirmation request (answered or not).
    requested: std::collections::HashSet<String>,
}

/// A live run can be resumed when it was stopped at a confirmation and nothing else was in
/// flight: every open tool call either has a confirmation request (waiting for its answer, or
/// answered while no process was running the run — the answer is then used), or is a
/// `delegate` call of the orchestrator (its sub-agent is the one at the confirmation); no agent
/// has two calls open; no background task is running; no cancel is pending.
fn resumable(
    run: &threadstream_domain::LiveRun,
    requested: &std::collections::HashSet<String>,
) -> bool {
    if run.cancel_requested {
        return false;
    }
    // Background tasks are not resumed: such a run is finished as interrupted (its tasks
    // completed with an error).
    if run
        .agents
        .values()
        .any(|a| a.task_id.is_some() && !a.completed)
    {
        return false;
    }
    let mut at_confirmation = false;
    let mut per_agent: HashMap<&String, usize> = HashMap::new();
    for (tc, agent) in &run.open_tool_calls {
        *per_agent.entry(agent).or_default() += 1;
        if requested.contains(tc) {
            at_confirmation = true;
        } else if agent != &run.orchestrator {
            return false;
        }
    }
    at_confirmation && per_agent.values().all(|n| *n == 1)
}
