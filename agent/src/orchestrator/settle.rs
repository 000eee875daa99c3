//! Ending what did not complete: a run (cancelled, timed out or failed) or a background
//! sub-agent, with every open tool call, status and sub-agent closed in one append; and the
//! final append retried while the database is unavailable.

use threadstream_domain::event::*;
use threadstream_domain::{AgentEvent, ThreadCommand};
use threadstream_store::{EventLog, StoreError};

use super::context::RunCtx;
use super::{
    RunIds, CANCELLED_BY_SHUTDOWN, CANCELLED_BY_USER, CONFIRMATION_TIMED_OUT, SERVICE_SHUTDOWN,
    USER_CANCELLED,
};
use crate::error::RunError;

impl RunCtx {
    /// Ends a sub-agent that did not complete by itself: a `tool-error` for each of its open
    /// calls, its status cleared, `agent-completed` with `error`. Nothing when it has completed.
    pub(super) async fn settle_agent(&self, agent_id: &str, role: &str, error: &str) {
        let state = match self.log.thread_state(&self.ids.thread_id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "cannot read the thread to settle a sub-agent"
                );
                return;
            }
        };
        let Some(live) = state.open_run(&self.ids.run_id) else {
            return;
        };
        if live.agents.get(agent_id).is_none_or(|a| a.completed) {
            return;
        }
        let event = |body: EventBody| {
            ThreadCommand::Record(AgentEvent::new(self.ids.run_id.as_str(), agent_id, body))
        };
        let mut commands = Vec::new();
        let mut open: Vec<&String> = live
            .open_tool_calls
            .iter()
            .filter(|(_, a)| a.as_str() == agent_id)
            .map(|(tc, _)| tc)
            .collect();
        open.sort();
        for tc in open {
            commands.push(event(EventBody::ToolError(ToolError {
                tool_call_id: tc.clone(),
                error: error.to_string(),
            })));
        }
        if self.state().statuses.remove(agent_id) {
            commands.push(event(EventBody::Status(Status {
                message: String::new(),
            })));
        }
        commands.push(event(EventBody::AgentCompleted(AgentCompleted {
            role: role.to_string(),
            result: String::new(),
            error: Some(error.to_string()),
        })));
        if let Err(e) = append_retrying(&self.log, &self.ids.thread_id, commands).await {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "cannot settle the sub-agent"
            );
        }
    }
}

/// How a run that did not complete ends.
#[derive(Clone, Copy)]
pub(super) enum Ending<'a> {
    Cancelled,
    TimedOut,
    Failed(&'a RunError),
}

/// Ends a run that did not complete: the `error` event (if any), tool errors for every open tool
/// call, `agent-completed` for every running sub-agent, cleared statuses and `run-finish`, in
/// one append. Does nothing if the run is no longer live.
pub(super) async fn settle(ctx: &RunCtx, ending: Ending<'_>) {
    let ids = &ctx.ids;
    let state = match ctx.log.thread_state(&ids.thread_id).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "cannot read the thread to settle the run"
            );
            if let Ending::Failed(err) = ending {
                finish_without_ctx(&ctx.log, ids, err).await;
            }
            return;
        }
    };
    let Some(live) = state.live_run().filter(|r| r.run_id == ids.run_id) else {
        tracing::debug!("run already finished; nothing to settle");
        return;
    };
    // A cancel carries its reason to `run-finish`; the service's own shutdown says so in
    // the settled tool calls too, so nobody reads it as the user's doing.
    let cancel_reason = ctx
        .control
        .cancel_reason()
        .unwrap_or_else(|| USER_CANCELLED.to_string());
    let settle_text = match ending {
        Ending::Cancelled if cancel_reason == SERVICE_SHUTDOWN => CANCELLED_BY_SHUTDOWN.to_string(),
        Ending::Cancelled => CANCELLED_BY_USER.to_string(),
        Ending::TimedOut => CONFIRMATION_TIMED_OUT.to_string(),
        Ending::Failed(e) => format!("Run failed: {e}"),
    };
    let event = |agent: &str, body: EventBody| {
        ThreadCommand::Record(AgentEvent::new(ids.run_id.as_str(), agent, body))
    };
    let mut commands = Vec::new();
    if let Ending::Failed(e) = ending {
        commands.push(event(&ids.orchestrator_id, error_body(e)));
    }
    let (statuses, roles) = {
        let state = ctx.state();
        (state.statuses.clone(), state.roles.clone())
    };
    let mut open: Vec<(&String, &String)> = live.open_tool_calls.iter().collect();
    open.sort();
    let mut sub_agents: Vec<&String> = live
        .agents
        .iter()
        .filter(|(id, a)| a.parent.is_some() && !a.completed && **id != ids.orchestrator_id)
        .map(|(id, _)| id)
        .collect();
    sub_agents.sort();
    let close_agent = |agent: &str, commands: &mut Vec<ThreadCommand>| {
        for (tc, _) in open.iter().filter(|(_, a)| a.as_str() == agent) {
            commands.push(event(
                agent,
                EventBody::ToolError(ToolError {
                    tool_call_id: (*tc).clone(),
                    error: settle_text.clone(),
                }),
            ));
        }
        if statuses.contains(agent) {
            commands.push(event(
                agent,
                EventBody::Status(Status {
                    message: String::new(),
                }),
            ));
        }
    };
    for agent in sub_agents {
        close_agent(agent, &mut commands);
        commands.push(event(
            agent,
            EventBody::AgentCompleted(AgentCompleted {
                role: roles
                    .get(agent)
                    .cloned()
                    .unwrap_or_else(|| "sub-agent".into()),
                result: String::new(),
                error: Some(settle_text.clone()),
            }),
        ));
    }
    close_agent(&ids.orchestrator_id, &mut commands);
    let finish = match ending {
        Ending::Cancelled => finish_body(RunStatus::Cancelled, Some(cancel_reason)),
        Ending::TimedOut => finish_body(RunStatus::Cancelled, Some("timeout".into())),
        Ending::Failed(e) => finish_body(RunStatus::Error, Some(e.to_string())),
    };
    commands.push(event(&ids.orchestrator_id, finish.clone()));
    if let Err(e) = append_retrying(&ctx.log, &ids.thread_id, commands).await {
        tracing::error!(
            error = &e as &dyn std::error::Error,
            "settling the run was refused; finishing it alone"
        );
        let only = vec![event(&ids.orchestrator_id, finish)];
        if let Err(e) = append_retrying(&ctx.log, &ids.thread_id, only).await {
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "cannot finish the run; the thread stays live"
            );
        }
    }
}

/// Pauses before retrying a final append the database could not take.
const FINAL_APPEND_RETRIES: [u64; 4] = [100, 500, 2_000, 5_000];

/// Appends the events that end a run, retrying while the database is unavailable (a refused
/// rule or a closing log is not retried).
async fn append_retrying(
    log: &EventLog,
    thread_id: &str,
    commands: Vec<ThreadCommand>,
) -> Result<(), StoreError> {
    let mut pauses = FINAL_APPEND_RETRIES.iter();
    loop {
        match log.append(thread_id, commands.clone()).await {
            Ok(_) => return Ok(()),
            Err(e @ StoreError::Unavailable { .. }) => match pauses.next() {
                Some(ms) => {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        retry_in_ms = ms,
                        "cannot store the end of the run; retrying"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
                }
                None => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}

/// `error` + `run-finish {status: "error"}` when there is no run context yet.
pub(super) async fn finish_without_ctx(log: &EventLog, ids: &RunIds, error: &RunError) {
    let commands = [
        error_body(error),
        finish_body(RunStatus::Error, Some(error.to_string())),
    ]
    .into_iter()
    .map(|body| {
        ThreadCommand::Record(AgentEvent::new(
            ids.run_id.as_str(),
            ids.orchestrator_id.as_str(),
            body,
        ))
    })
    .collect();
    if let Err(e) = append_retrying(log, &ids.thread_id, commands).await {
        tracing::error!(
            error = &e as &dyn std::error::Error,
            "cannot finish the run with an error"
        );
    }
}

fn error_body(error: &RunError) -> EventBody {
    let (provider, status_code) = match error {
        RunError::Provider(p) => (
            Some(p.provider().to_string()),
            p.status_code().map(serde_json::Number::from),
        ),
        _ => (None, None),
    };
    EventBody::Error(ErrorPayload {
        content: error.to_string(),
        status_code,
        provider,
        technical_details: None,
    })
}

fn finish_body(status: RunStatus, reason: Option<String>) -> EventBody {
    EventBody::RunFinish(RunFinish {
        status,
        reason,
        archived_workflow_ids: None,
    })
}
