//! [`Thread::apply`]: folding stored events into a thread's state.

use super::*;

impl Thread {
    /// Folds one stored event into the state (cqrs-es's `apply`). Never fails: events in the
    /// log were decided.
    pub fn apply(&mut self, e: &AgentEvent) {
        self.apply_at(0, e);
    }

    /// Folds one stored event into the state. Never fails: events in the log were decided.
    /// (The log id is not used: [`StreamAggregate::apply_at`] takes it for the kinds that do.)
    pub fn apply_at(&mut self, _id: i64, e: &AgentEvent) {
        self.version += 1;
        match &e.body {
            EventBody::ThreadCreated(p) => {
                self.exists = true;
                self.owner = Some(p.owner.clone());
                self.title = p.title.clone();
                // A fork's chat is its own, whatever its prefix said of the source's.
                self.chat_thread = None;
            }
            EventBody::ChatForked(p) => self.chat_thread = Some(p.thread_id.clone()),
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
