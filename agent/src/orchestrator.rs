//! The orchestrator loop and sub-agents.
//!
//! A run: ask the provider, append its text and reasoning deltas to the log as they arrive,
//! collect its tool calls, run them (asking the user first for destructive ones), feed the
//! results back, and repeat until the model answers without a tool call or the step limit
//! ([`ORCHESTRATOR_MAX_STEPS`], [`SUB_AGENT_MAX_STEPS`]) is reached. `delegate` runs the same
//! loop as a sub-agent: its own `agent-<uuid>` id, a clean context (only its instructions), a
//! tool subset that never contains `delegate`.
//!
//! Every event goes through `EventLog::append` as `ThreadCommand::Record`. The run's other
//! inputs — cancel and confirmation answers — are read back from the log ([`Control`]).
//!
//! Endings:
//! - the model is done → `run-finish {status: "completed"}`;
//! - cancel → the work is dropped at once (provider stream, tool, sub-agent, confirmation
//!   wait), open tool calls get `tool-error "Cancelled by user"`, running sub-agents
//!   `agent-completed` with error `"Cancelled by user"`, then
//!   `run-finish {status: "cancelled", reason: "user_cancelled"}` — all in one append;
//! - any failure (append refused, provider error, panic) → `error`, the same settling, and
//!   `run-finish {status: "error", reason}`, so no thread stays live.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use threadstream_domain::event::*;
use threadstream_domain::{AgentEvent, ThreadCommand};
use threadstream_store::{EventLog, StoreError};
use tracing::Instrument;
use uuid::Uuid;

use crate::control::Control;
use crate::error::{RunError, ToolFailure};
use crate::provider::{
    ChatMessage, ChatRequest, Chunk, LlmProvider, ProviderError, ToolCallRequest, ToolOutcome,
    Usage,
};
use crate::title::short_title;
use crate::tools::{SubAgentRunner, ToolCtx, ToolRegistry, DELEGATE};

/// Model calls the orchestrator may make in one run.
pub const ORCHESTRATOR_MAX_STEPS: usize = 50;
/// Model calls a sub-agent may make.
pub const SUB_AGENT_MAX_STEPS: usize = 10;

/// What a cancelled tool call or sub-agent is settled with.
pub const CANCELLED_BY_USER: &str = "Cancelled by user";

const HISTORY_PAGE: i64 = 5_000;

const ORCHESTRATOR_PROMPT: &str = "You are the orchestrator of an automation assistant. You \
help the user with their workflows. Plan multi-step work with the `plan` tool and keep each \
task's status current. Do simple reads yourself; delegate self-contained work (building, \
debugging) to a sub-agent with `delegate`, giving it a role, complete instructions and only the \
tools it needs. Destructive tools ask the user for approval; if the user denies, do not retry — \
explain and continue. Finish with a short answer for the user.";

const SUB_AGENT_PROTOCOL: &str = "You are a sub-agent. You see only the task below, not the \
user's conversation. Use your tools to do the task, then answer with a short summary of what \
you did (ids included): that answer is all the orchestrator receives. You cannot delegate.";

/// The ids of one run.
#[derive(Debug, Clone)]
pub struct RunIds {
    pub thread_id: String,
    pub run_id: String,
    pub orchestrator_id: String,
    pub user: String,
}

/// One agent's loop settings.
struct AgentSpec {
    id: String,
    system: String,
    tools: Vec<String>,
    max_steps: usize,
}

/// How an agent loop ended.
struct LoopEnd {
    /// The text of the last model turn.
    text: String,
    exhausted: bool,
}

/// Everything a run's tasks share. Nothing here is state the log does not also hold: the
/// sub-agent roles and shown statuses are what this run appended.
struct RunCtx {
    log: EventLog,
    ids: RunIds,
    provider: Arc<dyn LlmProvider>,
    tools: Arc<ToolRegistry>,
    control: Control,
    /// Sub-agents spawned in this run: id → role (for `agent-completed` when settling).
    roles: Mutex<HashMap<String, String>>,
    /// Agents whose `status` is currently non-empty.
    statuses: Mutex<HashSet<String>>,
    usage: Mutex<Usage>,
}

impl RunCtx {
    async fn record(&self, agent_id: &str, body: EventBody) -> Result<(), RunError> {
        let event = AgentEvent::new(self.ids.run_id.as_str(), agent_id, body);
        self.log
            .append(&self.ids.thread_id, vec![ThreadCommand::Record(event)])
            .await?;
        Ok(())
    }

    async fn set_status(&self, agent_id: &str, message: String) -> Result<(), RunError> {
        let clearing = message.is_empty();
        if !clearing {
            self.statuses
                .lock()
                .expect("statuses")
                .insert(agent_id.to_string());
        }
        self.record(agent_id, EventBody::Status(Status { message }))
            .await?;
        if clearing {
            self.statuses.lock().expect("statuses").remove(agent_id);
        }
        Ok(())
    }
}

/// Runs one run to its `run-finish`. Called on the spawned task.
pub(crate) async fn execute_run(
    log: EventLog,
    provider: Arc<dyn LlmProvider>,
    tools: Arc<ToolRegistry>,
    ids: RunIds,
    message: String,
) {
    let started = Instant::now();
    let (control, state) = match Control::start(&log, &ids.thread_id, &ids.run_id).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot start watching the run's log");
            finish_without_ctx(&log, &ids, &RunError::Store(e)).await;
            return;
        }
    };
    let live = state
        .live_run()
        .filter(|r| r.run_id == ids.run_id && r.orchestrator == ids.orchestrator_id);
    if live.is_none() {
        tracing::warn!(
            "run is not live in its thread (already finished, or never started); nothing to do"
        );
        return;
    }
    let first_untitled_run = state.title.is_none() && state.runs.len() == 1;
    let ctx = RunCtx {
        log,
        ids,
        provider,
        tools,
        control,
        roles: Mutex::new(HashMap::new()),
        statuses: Mutex::new(HashSet::new()),
        usage: Mutex::new(Usage::default()),
    };
    tracing::info!("run started");

    enum Outcome {
        Completed,
        Cancelled,
        Failed(RunError),
    }
    let work = AssertUnwindSafe(orchestrate(&ctx, message, first_untitled_run)).catch_unwind();
    let outcome = tokio::select! {
        biased;
        _ = ctx.control.cancelled() => Outcome::Cancelled,
        r = work => match r {
            Ok(Ok(())) => Outcome::Completed,
            Ok(Err(e)) => Outcome::Failed(e),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".into());
                Outcome::Failed(RunError::Internal(format!("the run panicked: {what}")))
            }
        },
    };
    let usage = *ctx.usage.lock().expect("usage");
    let (status, result) = match outcome {
        Outcome::Completed => {
            let finish = EventBody::RunFinish(RunFinish {
                status: RunStatus::Completed,
                reason: None,
                archived_workflow_ids: None,
            });
            match ctx.record(&ctx.ids.orchestrator_id, finish).await {
                Ok(()) => (RunStatus::Completed, Ok(())),
                Err(e) => {
                    settle(&ctx, RunStatus::Error, Some(&e)).await;
                    (RunStatus::Error, Err(e))
                }
            }
        }
        Outcome::Cancelled => {
            settle(&ctx, RunStatus::Cancelled, None).await;
            (RunStatus::Cancelled, Ok(()))
        }
        Outcome::Failed(e) => {
            settle(&ctx, RunStatus::Error, Some(&e)).await;
            (RunStatus::Error, Err(e))
        }
    };
    let ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(()) => tracing::info!(
            status = status.as_str(),
            duration_ms = ms,
            input_tokens = usage.input_tokens,
            output_tokens = usage.output_tokens,
            "run finished"
        ),
        Err(e) => tracing::warn!(
            status = status.as_str(),
            duration_ms = ms,
            error = %e,
            "run failed"
        ),
    }
}

/// The orchestrator's work, up to (not including) `run-finish`.
async fn orchestrate(ctx: &RunCtx, message: String, title: bool) -> Result<(), RunError> {
    let orchestrator = ctx.ids.orchestrator_id.clone();
    if title {
        ctx.record(
            &orchestrator,
            EventBody::ThreadTitleUpdated(ThreadTitle {
                title: short_title(&message),
            }),
        )
        .await?;
    }
    let mut messages = load_history(&ctx.log, &ctx.ids.thread_id, &ctx.ids.run_id).await?;
    messages.push(ChatMessage::User { text: message });
    let spec = AgentSpec {
        id: orchestrator.clone(),
        system: ORCHESTRATOR_PROMPT.to_string(),
        tools: ctx.tools.names(),
        max_steps: ORCHESTRATOR_MAX_STEPS,
    };
    let end = agent_loop(ctx, &spec, messages).await?;
    if end.exhausted {
        tracing::warn!(
            steps = ORCHESTRATOR_MAX_STEPS,
            "orchestrator reached its step limit"
        );
        ctx.record(
            &orchestrator,
            EventBody::TextDelta(TextDelta {
                text: format!("\n\n(Stopped after {ORCHESTRATOR_MAX_STEPS} steps.)"),
            }),
        )
        .await?;
    }
    Ok(())
}

/// The conversation of the thread's earlier runs: each user message and the orchestrator's text.
async fn load_history(
    log: &EventLog,
    thread_id: &str,
    current_run: &str,
) -> Result<Vec<ChatMessage>, StoreError> {
    let mut messages = Vec::new();
    let mut orchestrators: HashMap<String, String> = HashMap::new();
    let mut answer: Option<String> = None;
    let flush = |answer: &mut Option<String>, messages: &mut Vec<ChatMessage>| {
        if let Some(text) = answer.take() {
            messages.push(ChatMessage::Assistant {
                text,
                reasoning: String::new(),
                tool_calls: Vec::new(),
            });
        }
    };
    let mut after = 0;
    loop {
        let page = log.read_thread(thread_id, after, HISTORY_PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for row in page.iter().filter(|r| r.run_id != current_run) {
            match row.event_type.as_str() {
                "user-message" => {
                    flush(&mut answer, &mut messages);
                    if let Ok(m) = serde_json::from_str::<UserMessage>(&row.payload) {
                        messages.push(ChatMessage::User { text: m.text });
                    }
                }
                "run-start" => {
                    orchestrators.insert(row.run_id.clone(), row.agent_id.clone());
                }
                "text-delta" if orchestrators.get(&row.run_id) == Some(&row.agent_id) => {
                    if let Ok(d) = serde_json::from_str::<TextDelta>(&row.payload) {
                        answer.get_or_insert_with(String::new).push_str(&d.text);
                    }
                }
                "run-finish" => flush(&mut answer, &mut messages),
                _ => {}
            }
        }
        if (page.len() as i64) < HISTORY_PAGE {
            break;
        }
    }
    flush(&mut answer, &mut messages);
    Ok(messages)
}

/// One agent's loop: model call, tools, repeat.
async fn agent_loop(
    ctx: &RunCtx,
    spec: &AgentSpec,
    mut messages: Vec<ChatMessage>,
) -> Result<LoopEnd, RunError> {
    let tool_specs = ctx.tools.specs(&spec.tools);
    let mut last_text = String::new();
    for step in 0..spec.max_steps {
        let request = ChatRequest {
            system: spec.system.clone(),
            messages: messages.clone(),
            tools: tool_specs.clone(),
        };
        tracing::debug!(agent_id = %spec.id, step, "model call");
        let mut stream = ctx.provider.stream(request);
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut calls: Vec<ToolCallRequest> = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk? {
                Chunk::Text(t) => {
                    if t.is_empty() {
                        continue;
                    }
                    text.push_str(&t);
                    ctx.record(&spec.id, EventBody::TextDelta(TextDelta { text: t }))
                        .await?;
                }
                Chunk::Reasoning(t) => {
                    if t.is_empty() {
                        continue;
                    }
                    reasoning.push_str(&t);
                    ctx.record(&spec.id, EventBody::ReasoningDelta(TextDelta { text: t }))
                        .await?;
                }
                Chunk::ToolCall(call) => calls.push(call),
                Chunk::Finish(f) => {
                    if let Some(u) = f.usage {
                        let mut total = ctx.usage.lock().expect("usage");
                        total.input_tokens += u.input_tokens;
                        total.output_tokens += u.output_tokens;
                    }
                    break;
                }
            }
        }
        drop(stream);
        messages.push(ChatMessage::Assistant {
            text: text.clone(),
            reasoning,
            tool_calls: calls.clone(),
        });
        last_text = text;
        if calls.is_empty() {
            return Ok(LoopEnd {
                text: last_text,
                exhausted: false,
            });
        }
        for call in calls {
            let outcome = run_tool(ctx, spec, &call).await?;
            messages.push(ChatMessage::Tool {
                call_id: call.id,
                tool_name: call.name,
                outcome,
            });
        }
    }
    Ok(LoopEnd {
        text: last_text,
        exhausted: true,
    })
}

/// One tool call: `tool-call`, the confirmation if destructive, `status` around the work, and
/// `tool-result` or `tool-error`. Returns what the model is told.
async fn run_tool(
    ctx: &RunCtx,
    agent: &AgentSpec,
    call: &ToolCallRequest,
) -> Result<ToolOutcome, RunError> {
    let tool_call_id = format!("tc-{}", Uuid::now_v7());
    ctx.record(
        &agent.id,
        EventBody::ToolCall(ToolCall {
            tool_call_id: tool_call_id.clone(),
            tool_name: call.name.clone(),
            args: call.args.clone(),
        }),
    )
    .await?;
    let tool = match ctx.tools.get(&call.name) {
        Some(t) if agent.tools.contains(&call.name) => t.clone(),
        _ => {
            let message = format!(
                "Unknown tool '{}'; available: {}",
                call.name,
                agent.tools.join(", ")
            );
            return tool_error(ctx, &agent.id, &tool_call_id, message).await;
        }
    };
    if tool.destructive() {
        let request_id = format!("cr-{}", Uuid::now_v7());
        let mut request = ConfirmationRequest::approval(
            request_id.clone(),
            tool_call_id.clone(),
            call.name.clone(),
            call.args.clone(),
            Severity::Destructive,
            tool.confirmation_message(&call.args),
        );
        request.input_type = Some(InputType::Approval);
        ctx.record(&agent.id, EventBody::ConfirmationRequest(Box::new(request)))
            .await?;
        tracing::info!(%request_id, tool = %call.name, "waiting for confirmation");
        let answer = ctx.control.answer(&request_id).await;
        if !answer.approved {
            let message = format!("{} was denied by the user", call.name);
            return tool_error(ctx, &agent.id, &tool_call_id, message).await;
        }
    }
    let status = tool.status_message(&call.args);
    if let Some(message) = &status {
        ctx.set_status(&agent.id, message.clone()).await?;
    }
    let tctx = ToolCtx {
        log: &ctx.log,
        thread_id: &ctx.ids.thread_id,
        run_id: &ctx.ids.run_id,
        agent_id: &agent.id,
        tool_call_id: &tool_call_id,
        sub_agents: ctx,
    };
    let result = tool.execute(&tctx, call.args.clone()).await;
    if status.is_some() {
        ctx.set_status(&agent.id, String::new()).await?;
    }
    match result {
        Ok(value) => {
            ctx.record(
                &agent.id,
                EventBody::ToolResult(ToolResult {
                    tool_call_id: tool_call_id.clone(),
                    result: value.clone(),
                }),
            )
            .await?;
            Ok(ToolOutcome::Ok(value))
        }
        Err(ToolFailure::Failed(message)) => {
            tool_error(ctx, &agent.id, &tool_call_id, message).await
        }
        Err(ToolFailure::Fatal(e)) => Err(e),
    }
}

/// Settles a tool call with `tool-error`; the model is told `message`.
async fn tool_error(
    ctx: &RunCtx,
    agent_id: &str,
    tool_call_id: &str,
    message: String,
) -> Result<ToolOutcome, RunError> {
    ctx.record(
        agent_id,
        EventBody::ToolError(ToolError {
            tool_call_id: tool_call_id.to_string(),
            error: message.clone(),
        }),
    )
    .await?;
    Ok(ToolOutcome::Err(message))
}

impl SubAgentRunner for RunCtx {
    fn run_sub_agent<'a>(
        &'a self,
        parent_id: &'a str,
        role: String,
        instructions: String,
        tools: Vec<String>,
    ) -> BoxFuture<'a, Result<String, ToolFailure>> {
        Box::pin(async move {
            // Sub-agents never delegate: `delegate` is dropped from the subset.
            let mut subset: Vec<String> = Vec::new();
            for t in tools {
                if t == DELEGATE || subset.contains(&t) {
                    continue;
                }
                if self.tools.get(&t).is_none() {
                    return Err(ToolFailure::failed(format!(
                        "unknown tool '{t}' for the sub-agent; available: {}",
                        self.tools
                            .names()
                            .into_iter()
                            .filter(|n| n != DELEGATE)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                subset.push(t);
            }
            let agent_id = format!("agent-{}", Uuid::now_v7());
            let span = tracing::info_span!("sub_agent", agent_id = %agent_id, role = %role);
            async {
                self.roles
                    .lock()
                    .expect("roles")
                    .insert(agent_id.clone(), role.clone());
                self.record(
                    &agent_id,
                    EventBody::AgentSpawned(AgentSpawned {
                        parent_id: parent_id.to_string(),
                        role: role.clone(),
                        tools: subset.clone(),
                        task_id: None,
                        // `kind: "delegate"` is valid in @n8n/api-types 1.25.0 but not 1.41.0.
                        kind: None,
                        title: None,
                        subtitle: None,
                        goal: None,
                        target_resource: None,
                    }),
                )
                .await
                .map_err(ToolFailure::Fatal)?;
                let spec = AgentSpec {
                    id: agent_id.clone(),
                    system: format!("{SUB_AGENT_PROTOCOL}\n\nRole: {role}\n\n{instructions}"),
                    tools: subset,
                    max_steps: SUB_AGENT_MAX_STEPS,
                };
                let messages = vec![ChatMessage::User { text: instructions }];
                let (result, error) = match agent_loop(self, &spec, messages).await {
                    Ok(end) if end.exhausted => {
                        let text = format!(
                            "{}\n\n(Stopped after {SUB_AGENT_MAX_STEPS} steps.)",
                            end.text
                        );
                        (text.trim().to_string(), None)
                    }
                    Ok(end) => (end.text, None),
                    // A provider failure ends the sub-agent, not the run: the orchestrator's
                    // model is told and decides.
                    Err(RunError::Provider(e)) => (String::new(), Some(e)),
                    Err(e) => return Err(ToolFailure::Fatal(e)),
                };
                let completed = AgentCompleted {
                    role: role.clone(),
                    result: result.clone(),
                    error: error.as_ref().map(ProviderError::to_string),
                };
                self.record(&agent_id, EventBody::AgentCompleted(completed))
                    .await
                    .map_err(ToolFailure::Fatal)?;
                tracing::info!(failed = error.is_some(), "sub-agent completed");
                match error {
                    None => Ok(result),
                    Some(e) => Err(ToolFailure::failed(format!("the sub-agent failed: {e}"))),
                }
            }
            .instrument(span)
            .await
        })
    }
}

/// Ends a run that did not complete: the `error` event (if any), tool errors for every open tool
/// call, `agent-completed` for every running sub-agent, cleared statuses and `run-finish`, in
/// one append. Does nothing if the run is no longer live.
async fn settle(ctx: &RunCtx, status: RunStatus, error: Option<&RunError>) {
    let ids = &ctx.ids;
    let state = match ctx.log.thread_state(&ids.thread_id).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the thread to settle the run");
            if let Some(err) = error {
                finish_without_ctx(&ctx.log, ids, err).await;
            }
            return;
        }
    };
    let Some(live) = state.live_run().filter(|r| r.run_id == ids.run_id) else {
        tracing::debug!("run already finished; nothing to settle");
        return;
    };
    let settle_text = match error {
        None => CANCELLED_BY_USER.to_string(),
        Some(e) => format!("Run failed: {e}"),
    };
    let event = |agent: &str, body: EventBody| {
        ThreadCommand::Record(AgentEvent::new(ids.run_id.as_str(), agent, body))
    };
    let mut commands = Vec::new();
    if let Some(e) = error {
        commands.push(event(&ids.orchestrator_id, error_body(e)));
    }
    let statuses = ctx.statuses.lock().expect("statuses").clone();
    let roles = ctx.roles.lock().expect("roles").clone();
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
    let finish = finish_body(status, error);
    commands.push(event(&ids.orchestrator_id, finish.clone()));
    if let Err(e) = append_retrying(&ctx.log, &ids.thread_id, commands).await {
        tracing::error!(error = %e, "settling the run was refused; finishing it alone");
        let only = vec![event(&ids.orchestrator_id, finish)];
        if let Err(e) = append_retrying(&ctx.log, &ids.thread_id, only).await {
            tracing::error!(error = %e, "cannot finish the run; the thread stays live");
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
            Err(StoreError::Unavailable(e)) => match pauses.next() {
                Some(ms) => {
                    tracing::warn!(error = %e, retry_in_ms = ms, "cannot store the end of the run; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
                }
                None => return Err(StoreError::Unavailable(e)),
            },
            Err(e) => return Err(e),
        }
    }
}

/// `error` + `run-finish {status: "error"}` when there is no run context yet.
async fn finish_without_ctx(log: &EventLog, ids: &RunIds, error: &RunError) {
    let commands = [
        error_body(error),
        finish_body(RunStatus::Error, Some(error)),
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
        tracing::error!(error = %e, "cannot finish the run with an error");
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

fn finish_body(status: RunStatus, error: Option<&RunError>) -> EventBody {
    let reason = match (status, error) {
        (RunStatus::Cancelled, _) => Some("user_cancelled".to_string()),
        (_, Some(e)) => Some(e.to_string()),
        _ => None,
    };
    EventBody::RunFinish(RunFinish {
        status,
        reason,
        archived_workflow_ids: None,
    })
}
