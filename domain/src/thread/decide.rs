//! [`Thread::decide`]: the one place a thread's rules live.

use super::*;

impl Thread {
    /// Decides the events a command produces, or the rule it breaks. Pure: `self` is unchanged.
    pub fn decide(&self, command: &ThreadCommand) -> Result<Vec<AgentEvent>, ThreadError> {
        if self.deleted {
            return Err(ThreadError::ThreadDeleted);
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
            ThreadCommand::RecordUsage {
                run_id,
                agent_id,
                usage,
            } => self.record_internal(run_id, agent_id, EventBody::LlmUsage(usage.clone())),
            ThreadCommand::RecordAgui {
                run_id,
                agent_id,
                event,
            } => self.record_internal(run_id, agent_id, EventBody::AguiEvent(event.clone())),
            ThreadCommand::MoveChat { thread_id, by } => {
                self.require_exists()?;
                Ok(vec![AgentEvent::new(
                    "",
                    "",
                    EventBody::ChatForked(ChatForked {
                        thread_id: thread_id.clone(),
                    }),
                )
                .with_user(by.clone())])
            }
            ThreadCommand::Summarize {
                run_id,
                agent_id,
                summary,
                covered_through_id,
            } => self.record_internal(
                run_id,
                agent_id,
                EventBody::ConversationSummary(ConversationSummary {
                    summary: summary.clone(),
                    covered_through_id: *covered_through_id,
                }),
            ),
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

    /// An internal event of an active agent of the live run `run_id`, which has a command of
    /// its own (`RecordUsage`, `RecordAgui`, `Summarize`) rather than `Record`.
    fn record_internal(
        &self,
        run_id: &str,
        agent_id: &str,
        body: EventBody,
    ) -> Result<Vec<AgentEvent>, ThreadError> {
        self.require_exists()?;
        let event = AgentEvent::new(run_id, agent_id, body);
        self.check(&event)?;
        Ok(vec![event])
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
}
