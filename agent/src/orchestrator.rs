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
//! inputs — cancel and confirmation answers — are read back from the log ([`Control`]).
//!
//! A confirmation (destructive tool, `ask-user`, plan review) waits at most the configured
//! timeout, counted from the request's stored time; a run that was waiting when the process
//! stopped is resumed from the log (`resume`, through `AgentRuntime::recover`) and can still be
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

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use threadstream_domain::event::*;
use threadstream_domain::{AgentEvent, StoredEvent, ThreadCommand};
use threadstream_store::{EventLog, StoreError};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;
use uuid::Uuid;

use crate::control::{Answer, Control};
use crate::error::{RunError, ToolFailure};
use crate::provider::{
    ChatMessage, ChatRequest, Chunk, LlmProvider, ToolCallRequest, ToolOutcome, Usage,
};
use crate::replay::{self, OpenCall, StoredRequest};
use crate::tools::{RunHost, ToolCtx, ToolRegistry, DELEGATE};
use crate::workflows::WorkflowStore;

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

const ORCHESTRATOR_PROMPT: &str = "You are the orchestrator of an automation assistant. You \
help the user with their workflows. Plan multi-step work with the `plan` tool and keep each \
task's status current; a new plan of several tasks is shown to the user for approval. Do simple \
reads yourself; delegate self-contained work (building, debugging) to a sub-agent with \
`delegate`, giving it a role, complete instructions and only the tools it needs. When you need \
information only the user has, use `ask-user`. Destructive tools ask the user for approval; if \
the user denies, do not retry — explain and continue. Finish with a short answer for the user.";

const SUB_AGENT_PROTOCOL: &str = "You are a sub-agent. You see only the task below, not the \
user's conversation. Use your tools to do the task, then answer with a short summary of what \
you did (ids included): that answer is all the orchestrator receives. You cannot delegate.";

const SUMMARY_PROMPT: &str = "You summarize conversations between a user and an automation \
assistant so the assistant can continue without the full history. Write a dense summary with \
these sections: Goal, Important facts (ids, names, decisions), Current state, Open issues, Next \
step. Answer with the summary only.";

/// The ids of one run.
#[derive(Debug, Clone)]
pub struct RunIds {
    pub thread_id: String,
    pub run_id: String,
    pub orchestrator_id: String,
    pub user: String,
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
}

/// What a run leaves to do after its `run-finish`: its background tasks all settled after the
/// run finished, and a follow-up run in `message_group_id` should report how they ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FollowUp {
    pub message_group_id: String,
    pub report: String,
}

/// One agent's loop settings.
struct AgentSpec {
    id: String,
    system: String,
    tools: Vec<String>,
    max_steps: usize,
    /// The background task this agent runs (its corrections are injected into its context).
    task_id: Option<String>,
}

/// A background task of this run.
struct TaskInfo {
    task_id: String,
    role: String,
    /// `None` while running; then the result or the error.
    outcome: Option<Result<String, String>>,
    /// The orchestrator has been told how it ended.
    reported: bool,
}

/// How an agent loop ended.
struct LoopEnd {
    /// The text of the last model turn.
    text: String,
    exhausted: bool,
}

/// A sub-agent to continue rather than spawn (resuming after a restart).
struct ResumedSubAgent {
    agent_id: String,
    role: String,
    tools: Vec<String>,
    instructions: String,
    messages: Vec<ChatMessage>,
    open: Option<OpenCall>,
}

/// Everything a run's tasks share. Nothing here is state the log does not also hold: the
/// sub-agent roles and shown statuses are what this run appended, the resume state what it
/// read back.
struct RunCtx {
    /// This context, for the background tasks it starts.
    me: Weak<RunCtx>,
    /// Hands background tasks to the run's task set (polled by [`execute_run`], which aborts
    /// them when the run ends).
    spawner: mpsc::UnboundedSender<futures::future::BoxFuture<'static, ()>>,
    tasks: Mutex<Vec<TaskInfo>>,
    /// Held while a task is counted against the limit and spawned: only the live run spawns
    /// tasks, so this makes the thread's limit exact.
    task_start: tokio::sync::Mutex<()>,
    log: EventLog,
    ids: RunIds,
    provider: Arc<dyn LlmProvider>,
    tools: Arc<ToolRegistry>,
    workflows: Arc<WorkflowStore>,
    control: Control,
    settings: RunSettings,
    /// Sub-agents spawned in this run: id → role (for `agent-completed` when settling).
    roles: Mutex<HashMap<String, String>>,
    /// Agents whose `status` is currently non-empty.
    statuses: Mutex<HashSet<String>>,
    usage: Mutex<Usage>,
    /// Resuming: confirmation requests already stored, by tool call id.
    stored_requests: Mutex<HashMap<String, StoredRequest>>,
    /// Resuming: the sub-agent the open `delegate` call was running.
    resumed_sub: Mutex<Option<ResumedSubAgent>>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl RunCtx {
    async fn record(&self, agent_id: &str, body: EventBody) -> Result<(), RunError> {
        self.record_stored(agent_id, body).await.map(|_| ())
    }

    async fn record_stored(
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

    /// Stores `request` (unless a request for its tool call is already stored: resuming) and
    /// waits for the answer. Past the timeout, counted from the stored request's time, the run
    /// ends as cancelled with reason `timeout`.
    async fn ask(&self, agent_id: &str, request: ConfirmationRequest) -> Result<Answer, RunError> {
        let stored = self
            .stored_requests
            .lock()
            .expect("requests")
            .remove(&request.tool_call_id);
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
                (id, rows.first().map_or_else(now_ms, |r| r.ts))
            }
        };
        let timeout_ms = self.settings.confirmation_timeout.as_millis() as i64;
        let left = (asked_at + timeout_ms - now_ms()).max(0) as u64;
        tokio::select! {
            a = self.control.answer(&request_id) => Ok(a),
            _ = tokio::time::sleep(Duration::from_millis(left)) => {
                tracing::warn!(%request_id, "confirmation timed out");
                Err(RunError::ConfirmationTimeout)
            }
        }
    }
}

/// Runs one run to its `run-finish`. Called on the spawned task.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn execute_run(
    log: EventLog,
    provider: Arc<dyn LlmProvider>,
    tools: Arc<ToolRegistry>,
    workflows: Arc<WorkflowStore>,
    settings: RunSettings,
    ids: RunIds,
    entry: Entry,
) -> Option<FollowUp> {
    let started = Instant::now();
    let (control, state) = match Control::start(&log, &ids.thread_id, &ids.run_id).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot start watching the run's log");
            finish_without_ctx(&log, &ids, &RunError::Store(e)).await;
            return None;
        }
    };
    let live = state
        .live_run()
        .filter(|r| r.run_id == ids.run_id && r.orchestrator == ids.orchestrator_id);
    if live.is_none() {
        tracing::warn!(
            "run is not live in its thread (already finished, or never started); nothing to do"
        );
        return None;
    }
    let first_untitled_run = state.title.is_none() && state.runs.len() == 1;
    let (spawner, mut spawned) = mpsc::unbounded_channel();
    let ctx = Arc::new_cyclic(|me| RunCtx {
        me: me.clone(),
        spawner,
        tasks: Mutex::new(Vec::new()),
        task_start: tokio::sync::Mutex::new(()),
        log,
        ids,
        provider,
        tools,
        workflows,
        control,
        settings,
        roles: Mutex::new(HashMap::new()),
        statuses: Mutex::new(HashSet::new()),
        usage: Mutex::new(Usage::default()),
        stored_requests: Mutex::new(HashMap::new()),
        resumed_sub: Mutex::new(None),
    });
    tracing::info!(
        resumed = matches!(entry, Entry::Resume),
        follow_up = matches!(entry, Entry::FollowUp { .. }),
        "run started"
    );

    enum Outcome {
        Completed,
        Cancelled,
        Failed(RunError),
    }
    let work = AssertUnwindSafe(async {
        match entry {
            Entry::Start { message } => orchestrate(&ctx, message, first_untitled_run).await,
            Entry::Resume => resume(&ctx).await,
            Entry::FollowUp { report } => report_tasks(&ctx, report).await,
        }
    })
    .catch_unwind();
    tokio::pin!(work);
    // Background tasks run in this set: dropped (aborted) with the run, whatever ends it.
    let mut background: JoinSet<()> = JoinSet::new();
    let outcome = loop {
        tokio::select! {
            biased;
            _ = ctx.control.cancelled() => break Outcome::Cancelled,
            Some(task) = spawned.recv() => {
                background.spawn(task);
            }
            Some(_) = background.join_next(), if !background.is_empty() => {}
            r = &mut work => break match r {
                Ok(Ok(())) => Outcome::Completed,
                Ok(Err(e)) => Outcome::Failed(e),
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "panic".into());
                    let panic: Box<dyn std::error::Error + Send + Sync> =
                        format!("the run panicked: {what}").into();
                    Outcome::Failed(RunError::Internal(panic.into()))
                }
            },
        }
    };
    // A run that did not complete stops its tasks before settling, so nothing races the final
    // append; a completed one leaves them running past its run-finish (see below).
    if !matches!(outcome, Outcome::Completed) {
        background.abort_all();
        while background.join_next().await.is_some() {}
    }
    let completed = matches!(outcome, Outcome::Completed);
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
                    settle(&ctx, Ending::Failed(&e)).await;
                    (RunStatus::Error, Err(e))
                }
            }
        }
        Outcome::Cancelled => {
            settle(&ctx, Ending::Cancelled).await;
            (RunStatus::Cancelled, Ok(()))
        }
        Outcome::Failed(RunError::ConfirmationTimeout) => {
            settle(&ctx, Ending::TimedOut).await;
            (RunStatus::Cancelled, Ok(()))
        }
        Outcome::Failed(e) => {
            settle(&ctx, Ending::Failed(&e)).await;
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
            input_tokens = usage.input_tokens,
            output_tokens = usage.output_tokens,
            error = &e as &dyn std::error::Error,
            "run failed"
        ),
    }
    if !completed || background.is_empty() {
        return None;
    }
    // The run is finished; its background tasks go on (they record under its id, and stop on
    // their own cancel or the thread's). Once the last one settles, a follow-up run reports.
    tracing::info!(
        tasks = background.len(),
        "run finished with background tasks running"
    );
    while background.join_next().await.is_some() {}
    let report = ctx.take_report()?;
    let message_group_id = match read_thread(&ctx.log, &ctx.ids.thread_id).await {
        Ok(events) => message_group_of(&events, &ctx.ids.run_id),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the thread for the follow-up run");
            ctx.ids.run_id.clone()
        }
    };
    Some(FollowUp {
        message_group_id,
        report,
    })
}

/// The `messageGroupId` of `run_id`'s `run-start`, or the run id when it has none.
pub(crate) fn message_group_of(events: &[StoredEvent], run_id: &str) -> String {
    events
        .iter()
        .find(|e| e.run_id == run_id && e.event_type == "run-start")
        .and_then(|e| serde_json::from_str::<RunStart>(&e.payload).ok())
        .and_then(|p| p.message_group_id)
        .unwrap_or_else(|| run_id.to_string())
}

fn orchestrator_spec(ctx: &RunCtx) -> AgentSpec {
    AgentSpec {
        id: ctx.ids.orchestrator_id.clone(),
        system: ORCHESTRATOR_PROMPT.to_string(),
        tools: crate::tools::offered_tools(&ctx.ids.thread_id, ctx.tools.names()),
        max_steps: ORCHESTRATOR_MAX_STEPS,
        task_id: None,
    }
}

/// After the orchestrator's turn: when background tasks it started have all settled meanwhile,
/// it gets another turn with how each ended, so it reports the outcome (repeated if that turn
/// starts more tasks that settle in time). While any task still runs, the turn ends here: the
/// run finishes and the tasks' outcome is reported by a follow-up run once they settle.
async fn follow_up_tasks(
    ctx: &RunCtx,
    spec: &AgentSpec,
    messages: &mut Vec<ChatMessage>,
    mut end: LoopEnd,
) -> Result<LoopEnd, RunError> {
    loop {
        if end.exhausted || ctx.running_tasks() > 0 {
            return Ok(end);
        }
        let Some(report) = ctx.take_report() else {
            return Ok(end);
        };
        messages.push(ChatMessage::User { text: report });
        end = agent_loop(ctx, spec, messages).await?;
    }
}

/// A follow-up run: the orchestrator sees the thread's earlier turns and the report of the
/// background tasks, and tells the user how they ended.
async fn report_tasks(ctx: &RunCtx, report: String) -> Result<(), RunError> {
    let events = read_thread(&ctx.log, &ctx.ids.thread_id).await?;
    let mut messages = replay::thread_history(&events, &ctx.ids.run_id);
    messages = maybe_summarize(ctx, &events, messages).await?;
    messages.push(ChatMessage::User { text: report });
    let spec = orchestrator_spec(ctx);
    let end = agent_loop(ctx, &spec, &mut messages).await?;
    let end = follow_up_tasks(ctx, &spec, &mut messages, end).await?;
    stopped_at_limit(ctx, &end).await
}

/// The first line of a background-task report (the demo model recognizes it).
pub const TASK_REPORT_HEADER: &str = "[Background tasks finished]";

impl RunCtx {
    /// How the settled tasks not yet reported ended, marking them reported; `None` when there
    /// is nothing new.
    fn take_report(&self) -> Option<String> {
        let mut report = format!("{TASK_REPORT_HEADER}\n");
        let mut any = false;
        for t in self.tasks.lock().expect("tasks").iter_mut() {
            if t.reported {
                continue;
            }
            let Some(outcome) = &t.outcome else { continue };
            t.reported = true;
            any = true;
            match outcome {
                Ok(r) => report.push_str(&format!("- {} ({}): done: {r}\n", t.task_id, t.role)),
                Err(e) => report.push_str(&format!("- {} ({}): failed: {e}\n", t.task_id, t.role)),
            }
        }
        report.push_str("Report the outcome to the user.");
        any.then_some(report)
    }

    fn running_tasks(&self) -> usize {
        self.tasks
            .lock()
            .expect("tasks")
            .iter()
            .filter(|t| t.outcome.is_none())
            .count()
    }

    fn task_ended(&self, task_id: &str, outcome: Result<String, String>) {
        if let Some(t) = self
            .tasks
            .lock()
            .expect("tasks")
            .iter_mut()
            .find(|t| t.task_id == task_id)
        {
            t.outcome = Some(outcome);
        }
    }
}

/// The orchestrator's work, up to (not including) `run-finish`.
async fn orchestrate(ctx: &RunCtx, message: String, title: bool) -> Result<(), RunError> {
    // The title is written by the model beside the answer (it must not delay the first token)
    // and stored as soon as it is ready.
    let titling = async {
        if !title {
            return Ok(());
        }
        let title = crate::title::generate_title(ctx.provider.as_ref(), &message).await;
        ctx.record(
            &ctx.ids.orchestrator_id,
            EventBody::ThreadTitleUpdated(ThreadTitle { title }),
        )
        .await
    };
    let (titled, answered) = tokio::join!(titling, answer(ctx, message.clone()));
    answered.and(titled)
}

/// The orchestrator's answer to the user's message, with follow-up turns for tasks that
/// settled meanwhile.
async fn answer(ctx: &RunCtx, message: String) -> Result<(), RunError> {
    let events = read_thread(&ctx.log, &ctx.ids.thread_id).await?;
    let mut messages = replay::thread_history(&events, &ctx.ids.run_id);
    messages = maybe_summarize(ctx, &events, messages).await?;
    messages.push(ChatMessage::User { text: message });
    let spec = orchestrator_spec(ctx);
    let end = agent_loop(ctx, &spec, &mut messages).await?;
    let end = follow_up_tasks(ctx, &spec, &mut messages, end).await?;
    stopped_at_limit(ctx, &end).await
}

async fn stopped_at_limit(ctx: &RunCtx, end: &LoopEnd) -> Result<(), RunError> {
    if end.exhausted {
        tracing::warn!(
            steps = ORCHESTRATOR_MAX_STEPS,
            "orchestrator reached its step limit"
        );
        ctx.record(
            &ctx.ids.orchestrator_id,
            EventBody::TextDelta(TextDelta {
                text: format!("\n\n(Stopped after {ORCHESTRATOR_MAX_STEPS} steps.)"),
            }),
        )
        .await?;
    }
    Ok(())
}

/// When the earlier turns pass the budget, an LLM-written summary replaces them: it is stored
/// as a `conversation-summary` event (internal: the n8n stream never shows it) and later runs
/// start from it.
async fn maybe_summarize(
    ctx: &RunCtx,
    events: &[StoredEvent],
    history: Vec<ChatMessage>,
) -> Result<Vec<ChatMessage>, RunError> {
    let budget = ctx.settings.summary_token_budget;
    let tokens = replay::estimate_tokens(&history);
    if budget == 0 || tokens <= budget || history.is_empty() {
        return Ok(history);
    }
    tracing::info!(tokens, budget, "history over budget: summarizing");
    let mut transcript = String::new();
    for m in &history {
        match m {
            ChatMessage::User { text } => transcript.push_str(&format!("User: {text}\n\n")),
            ChatMessage::Assistant {
                text, tool_calls, ..
            } => {
                if !text.is_empty() {
                    transcript.push_str(&format!("Assistant: {text}\n\n"));
                }
                for c in tool_calls {
                    transcript.push_str(&format!(
                        "Assistant called {} with {}\n\n",
                        c.name,
                        serde_json::Value::Object(c.args.clone())
                    ));
                }
            }
            ChatMessage::Tool {
                tool_name, outcome, ..
            } => {
                let text = match outcome {
                    ToolOutcome::Ok(v) => v.to_string(),
                    ToolOutcome::Err(e) => format!("error: {e}"),
                };
                transcript.push_str(&format!("Result of {tool_name}: {text}\n\n"));
            }
        }
    }
    let request = ChatRequest {
        system: SUMMARY_PROMPT.to_string(),
        messages: vec![ChatMessage::User {
            text: format!("Summarize this conversation:\n\n{transcript}"),
        }],
        tools: Vec::new(),
    };
    let mut stream = ctx.provider.stream(request);
    let mut summary = String::new();
    while let Some(chunk) = stream.next().await {
        match chunk? {
            Chunk::Text(t) => summary.push_str(&t),
            Chunk::Finish(f) => {
                record_usage(ctx, &ctx.ids.orchestrator_id, f.usage).await?;
                break;
            }
            _ => {}
        }
    }
    drop(stream);
    let summary = summary.trim().to_string();
    if summary.is_empty() {
        tracing::warn!("the summary came back empty; keeping the full history");
        return Ok(history);
    }
    let covered = events
        .iter()
        .filter(|e| e.run_id != ctx.ids.run_id)
        .map(|e| e.id)
        .max()
        .unwrap_or(0);
    ctx.log
        .append(
            &ctx.ids.thread_id,
            vec![ThreadCommand::Summarize {
                run_id: ctx.ids.run_id.clone(),
                agent_id: ctx.ids.orchestrator_id.clone(),
                summary: summary.clone(),
                covered_through_id: covered,
            }],
        )
        .await?;
    Ok(vec![
        ChatMessage::User {
            text: replay::summary_message(&summary),
        },
        ChatMessage::Assistant {
            text: "Understood; I will continue from this summary.".into(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
            provider_blocks: Vec::new(),
        },
    ])
}

/// Adds a model call's usage to the run's total and records it in the log (`llm-usage`).
async fn record_usage(ctx: &RunCtx, agent_id: &str, usage: Option<Usage>) -> Result<(), RunError> {
    let Some(u) = usage else { return Ok(()) };
    {
        let mut total = ctx.usage.lock().expect("usage");
        total.input_tokens += u.input_tokens;
        total.output_tokens += u.output_tokens;
    }
    ctx.log
        .append(
            &ctx.ids.thread_id,
            vec![ThreadCommand::RecordUsage {
                run_id: ctx.ids.run_id.clone(),
                agent_id: agent_id.to_string(),
                usage: LlmUsage {
                    model: ctx.provider.name().to_string(),
                    input_tokens: u.input_tokens,
                    output_tokens: u.output_tokens,
                },
            }],
        )
        .await?;
    Ok(())
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

/// Continues a run that was waiting on a confirmation when its process stopped: its
/// conversation is rebuilt from the log, the call it was in the middle of goes on (waiting for
/// the answer, which may have been given meanwhile), and then the loop continues.
async fn resume(ctx: &RunCtx) -> Result<(), RunError> {
    let events = read_thread(&ctx.log, &ctx.ids.thread_id).await?;
    let run_id = ctx.ids.run_id.clone();
    let orchestrator = ctx.ids.orchestrator_id.clone();
    let message = events
        .iter()
        .find(|e| e.run_id == run_id && e.event_type == "user-message")
        .and_then(|e| serde_json::from_str::<UserMessage>(&e.payload).ok())
        .map(|m| m.text)
        .unwrap_or_default();
    let mut messages = replay::thread_history(&events, &run_id);
    if let Some(s) = events
        .iter()
        .rev()
        .find(|e| e.run_id == run_id && e.event_type == replay::SUMMARY_EVENT)
    {
        if let Ok(p) = serde_json::from_str::<ConversationSummary>(&s.payload) {
            messages = vec![
                ChatMessage::User {
                    text: replay::summary_message(&p.summary),
                },
                ChatMessage::Assistant {
                    text: "Understood; I will continue from this summary.".into(),
                    reasoning: String::new(),
                    tool_calls: Vec::new(),
                    provider_blocks: Vec::new(),
                },
            ];
        }
    }
    messages.push(ChatMessage::User { text: message });
    let turns = replay::agent_turns(&events, &run_id, &orchestrator);
    messages.extend(turns.messages);
    let spec = orchestrator_spec(ctx);
    if let Some(open) = turns.open {
        // A delegate call in flight: its sub-agent continues where it was.
        if open.call.name == DELEGATE {
            if let Some(sub) = resumed_sub_agent(&events, &run_id, &open) {
                ctx.roles
                    .lock()
                    .expect("roles")
                    .insert(sub.agent_id.clone(), sub.role.clone());
                *ctx.resumed_sub.lock().expect("resumed") = Some(sub);
            }
        }
        if let Some(r) = open.request.clone() {
            ctx.stored_requests
                .lock()
                .expect("requests")
                .insert(open.tool_call_id.clone(), r);
        }
        let outcome = continue_tool(ctx, &spec, &open.call, &open.tool_call_id).await?;
        messages.push(ChatMessage::Tool {
            call_id: open.tool_call_id.clone(),
            tool_name: open.call.name.clone(),
            outcome,
        });
    }
    let end = agent_loop(ctx, &spec, &mut messages).await?;
    let end = follow_up_tasks(ctx, &spec, &mut messages, end).await?;
    stopped_at_limit(ctx, &end).await
}

/// The sub-agent a `delegate` call was running: the first `agent-spawned` after the call.
fn resumed_sub_agent(
    events: &[StoredEvent],
    run_id: &str,
    delegate: &OpenCall,
) -> Option<ResumedSubAgent> {
    let call_pos = events.iter().position(|e| {
        e.run_id == run_id
            && e.event_type == "tool-call"
            && e.payload.contains(&delegate.tool_call_id)
    })?;
    let spawned = events[call_pos..]
        .iter()
        .find(|e| e.run_id == run_id && e.event_type == "agent-spawned")?;
    let p: AgentSpawned = serde_json::from_str(&spawned.payload).ok()?;
    let instructions = delegate
        .call
        .args
        .get("instructions")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    let turns = replay::agent_turns(events, run_id, &spawned.agent_id);
    let mut messages = vec![ChatMessage::User {
        text: instructions.clone(),
    }];
    messages.extend(turns.messages);
    Some(ResumedSubAgent {
        agent_id: spawned.agent_id.clone(),
        role: p.role,
        tools: p.tools,
        instructions,
        messages,
        open: turns.open,
    })
}

/// One agent's loop: model call, tools, repeat.
async fn agent_loop(
    ctx: &RunCtx,
    spec: &AgentSpec,
    messages: &mut Vec<ChatMessage>,
) -> Result<LoopEnd, RunError> {
    let tool_specs = ctx.tools.specs(&spec.tools);
    let mut last_text = String::new();
    // The last tool call, if it failed: (name, args).
    let mut last_failure: Option<(String, JsonObject)> = None;
    let mut corrections_seen = 0;
    for step in 0..spec.max_steps {
        if let Some(task_id) = &spec.task_id {
            for c in ctx.control.corrections(task_id, &mut corrections_seen) {
                tracing::info!(%task_id, "correction injected into the background task");
                messages.push(ChatMessage::User {
                    text: format!("Correction from the user: {c}"),
                });
            }
        }
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
        let mut provider_blocks = Vec::new();
        // Calls whose arguments did not parse: id → what was wrong.
        let mut invalid: HashMap<String, String> = HashMap::new();
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
                Chunk::InvalidToolCall(call, why) => {
                    invalid.insert(call.id.clone(), why);
                    calls.push(call);
                }
                Chunk::ProviderBlock(b) => provider_blocks.push(b),
                Chunk::Finish(f) => {
                    record_usage(ctx, &spec.id, f.usage).await?;
                    break;
                }
            }
        }
        drop(stream);
        messages.push(ChatMessage::Assistant {
            text: text.clone(),
            reasoning,
            tool_calls: calls.clone(),
            provider_blocks,
        });
        last_text = text;
        if calls.is_empty() {
            return Ok(LoopEnd {
                text: last_text,
                exhausted: false,
            });
        }
        for call in calls {
            let outcome = match invalid.remove(&call.id) {
                Some(why) => invalid_tool_call(ctx, spec, &call, why).await?,
                None => run_tool(ctx, spec, &call).await?,
            };
            match &outcome {
                ToolOutcome::Err(error) => {
                    let same = last_failure
                        .as_ref()
                        .is_some_and(|(n, a)| *n == call.name && *a == call.args);
                    if same {
                        return Err(RunError::Stuck(format!(
                            "the tool call '{}' failed twice in a row with the same arguments \
                             (last error: {error}); stopping instead of repeating it",
                            call.name
                        )));
                    }
                    last_failure = Some((call.name.clone(), call.args.clone()));
                }
                ToolOutcome::Ok(_) => last_failure = None,
            }
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

/// One tool call: `tool-call`, then [`continue_tool`]. Returns what the model is told.
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
    continue_tool(ctx, agent, call, &tool_call_id).await
}

/// A call the model made with arguments that are not a JSON object: recorded (with no
/// arguments) and answered with a `tool-error` the model can act on.
async fn invalid_tool_call(
    ctx: &RunCtx,
    agent: &AgentSpec,
    call: &ToolCallRequest,
    why: String,
) -> Result<ToolOutcome, RunError> {
    let tool_call_id = format!("tc-{}", Uuid::now_v7());
    ctx.record(
        &agent.id,
        EventBody::ToolCall(ToolCall {
            tool_call_id: tool_call_id.clone(),
            tool_name: call.name.clone(),
            args: JsonObject::new(),
        }),
    )
    .await?;
    let message = format!(
        "Invalid call of '{}': {why}. Send the arguments as a JSON object.",
        call.name
    );
    tool_error(ctx, &agent.id, &tool_call_id, message).await
}

/// A recorded tool call from there on: the confirmation if destructive, `status` around the
/// work, and `tool-result` or `tool-error`.
async fn continue_tool(
    ctx: &RunCtx,
    agent: &AgentSpec,
    call: &ToolCallRequest,
    tool_call_id: &str,
) -> Result<ToolOutcome, RunError> {
    let tool = match ctx.tools.get(&call.name) {
        Some(t) if agent.tools.contains(&call.name) => t.clone(),
        _ => {
            let message = format!(
                "Unknown tool '{}'; available: {}",
                call.name,
                agent.tools.join(", ")
            );
            return tool_error(ctx, &agent.id, tool_call_id, message).await;
        }
    };
    if tool.destructive() {
        let mut request = ConfirmationRequest::approval(
            format!("cr-{}", Uuid::now_v7()),
            tool_call_id.to_string(),
            call.name.clone(),
            call.args.clone(),
            Severity::Destructive,
            tool.confirmation_message(&call.args),
        );
        request.input_type = Some(InputType::Approval);
        let answer = ctx.ask(&agent.id, request).await?;
        if !answer.approved {
            let message = format!("{} was denied by the user", call.name);
            return tool_error(ctx, &agent.id, tool_call_id, message).await;
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
        tool_call_id,
        host: ctx,
        workflows: &ctx.workflows,
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
                    tool_call_id: tool_call_id.to_string(),
                    result: value.clone(),
                }),
            )
            .await?;
            Ok(ToolOutcome::Ok(value))
        }
        Err(ToolFailure::Failed(message)) => {
            tool_error(ctx, &agent.id, tool_call_id, message).await
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

impl RunCtx {
    /// Checks a sub-agent's tool subset (never `delegate`), gives it an id and records
    /// `agent-spawned`.
    async fn spawn_sub_agent(
        &self,
        parent_id: &str,
        role: &str,
        tools: Vec<String>,
        task_id: Option<String>,
    ) -> Result<(String, Vec<String>), ToolFailure> {
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
        self.roles
            .lock()
            .expect("roles")
            .insert(agent_id.clone(), role.to_string());
        self.record(
            &agent_id,
            EventBody::AgentSpawned(AgentSpawned {
                parent_id: parent_id.to_string(),
                role: role.to_string(),
                tools: subset.clone(),
                task_id,
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
        Ok((agent_id, subset))
    }

    /// Spawns (or, resuming, continues) a sub-agent and runs it to its `agent-completed`.
    async fn sub_agent(
        &self,
        parent_id: &str,
        role: String,
        instructions: String,
        tools: Vec<String>,
    ) -> Result<String, ToolFailure> {
        let resumed = self.resumed_sub.lock().expect("resumed").take();
        let (agent_id, role, subset, instructions, messages, open) = match resumed {
            Some(r) => (
                r.agent_id,
                r.role,
                r.tools,
                r.instructions,
                r.messages,
                r.open,
            ),
            None => {
                let (agent_id, subset) =
                    self.spawn_sub_agent(parent_id, &role, tools, None).await?;
                let messages = vec![ChatMessage::User {
                    text: instructions.clone(),
                }];
                (agent_id, role, subset, instructions, messages, None)
            }
        };
        self.drive_sub_agent(agent_id, role, subset, instructions, messages, open, None)
            .await
    }

    /// Runs a spawned sub-agent's loop (continuing `open` first, when resuming) and records its
    /// `agent-completed`; returns its answer.
    #[allow(clippy::too_many_arguments)]
    async fn drive_sub_agent(
        &self,
        agent_id: String,
        role: String,
        subset: Vec<String>,
        instructions: String,
        messages: Vec<ChatMessage>,
        open: Option<OpenCall>,
        task_id: Option<String>,
    ) -> Result<String, ToolFailure> {
        let span = tracing::info_span!("sub_agent", agent_id = %agent_id, role = %role, task_id = ?task_id);
        async {
            let spec = AgentSpec {
                id: agent_id.clone(),
                system: format!("{SUB_AGENT_PROTOCOL}\n\nRole: {role}\n\n{instructions}"),
                tools: subset,
                max_steps: SUB_AGENT_MAX_STEPS,
                task_id,
            };
            let run = async {
                let mut messages = messages;
                if let Some(open) = open {
                    if let Some(r) = open.request.clone() {
                        self.stored_requests
                            .lock()
                            .expect("requests")
                            .insert(open.tool_call_id.clone(), r);
                    }
                    let outcome =
                        continue_tool(self, &spec, &open.call, &open.tool_call_id).await?;
                    messages.push(ChatMessage::Tool {
                        call_id: open.tool_call_id.clone(),
                        tool_name: open.call.name.clone(),
                        outcome,
                    });
                }
                agent_loop(self, &spec, &mut messages).await
            };
            let (result, error) = match run.await {
                Ok(end) if end.exhausted => {
                    let text = format!(
                        "{}\n\n(Stopped after {SUB_AGENT_MAX_STEPS} steps.)",
                        end.text
                    );
                    (text.trim().to_string(), None)
                }
                Ok(end) => (end.text, None),
                // A provider failure or a stuck loop ends the sub-agent, not the run: the
                // orchestrator's model is told and decides.
                Err(RunError::Provider(e)) => (String::new(), Some(e.to_string())),
                Err(RunError::Stuck(m)) => (String::new(), Some(m)),
                Err(e) => return Err(ToolFailure::Fatal(e)),
            };
            let completed = AgentCompleted {
                role: role.clone(),
                result: result.clone(),
                error: error.clone(),
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
    }

    /// Starts a sub-agent as a background task and returns at once with its task id. The
    /// sixth running task is spawned and completed at once with [`TASK_LIMIT_ERROR`].
    async fn start_task(
        &self,
        parent_id: &str,
        role: String,
        instructions: String,
        tools: Vec<String>,
    ) -> Result<serde_json::Value, ToolFailure> {
        let task_id = format!("task-{}", Uuid::now_v7());
        let _counting = self.task_start.lock().await;
        // The limit is the thread's: tasks of earlier runs that still run count too.
        let running = self
            .log
            .thread_state(&self.ids.thread_id)
            .await
            .map_err(|e| ToolFailure::Fatal(e.into()))?
            .running_tasks()
            .count();
        if running >= MAX_BACKGROUND_TASKS {
            // Spawned and completed with the limit error in one append: the task never shows
            // as running.
            let agent_id = format!("agent-{}", Uuid::now_v7());
            let event = |body| {
                ThreadCommand::Record(AgentEvent::new(
                    self.ids.run_id.as_str(),
                    agent_id.as_str(),
                    body,
                ))
            };
            let commands = vec![
                event(EventBody::AgentSpawned(AgentSpawned {
                    parent_id: parent_id.to_string(),
                    role: role.clone(),
                    tools: tools.into_iter().filter(|t| t != DELEGATE).collect(),
                    task_id: Some(task_id),
                    kind: None,
                    title: None,
                    subtitle: None,
                    goal: None,
                    target_resource: None,
                })),
                event(EventBody::AgentCompleted(AgentCompleted {
                    role,
                    result: String::new(),
                    error: Some(TASK_LIMIT_ERROR.to_string()),
                })),
            ];
            self.log
                .append(&self.ids.thread_id, commands)
                .await
                .map_err(|e| ToolFailure::Fatal(e.into()))?;
            return Err(ToolFailure::failed(TASK_LIMIT_ERROR));
        }
        let (agent_id, subset) = self
            .spawn_sub_agent(parent_id, &role, tools, Some(task_id.clone()))
            .await?;
        self.tasks.lock().expect("tasks").push(TaskInfo {
            task_id: task_id.clone(),
            role: role.clone(),
            outcome: None,
            reported: false,
        });
        let me = self
            .me
            .upgrade()
            .expect("the run context outlives its tools");
        let (tid, aid, r) = (task_id.clone(), agent_id.clone(), role.clone());
        let task = async move {
            let ctx = me;
            let messages = vec![ChatMessage::User {
                text: instructions.clone(),
            }];
            let body = AssertUnwindSafe(ctx.drive_sub_agent(
                aid.clone(),
                r.clone(),
                subset,
                instructions,
                messages,
                None,
                Some(tid.clone()),
            ))
            .catch_unwind();
            let outcome = tokio::select! {
                biased;
                _ = ctx.control.task_cancelled(&tid) => Err(CANCELLED_BY_USER.to_string()),
                res = body => match res {
                    Ok(Ok(text)) => Ok(text),
                    Ok(Err(ToolFailure::Failed(e))) => Err(e),
                    Ok(Err(ToolFailure::Fatal(e))) => Err(e.to_string()),
                    Err(_) => Err("the background task panicked".to_string()),
                },
            };
            if let Err(e) = &outcome {
                ctx.settle_agent(&aid, &r, e).await;
            }
            tracing::info!(task_id = %tid, ok = outcome.is_ok(), "background task ended");
            ctx.task_ended(&tid, outcome);
        };
        let _ = self.spawner.send(Box::pin(task));
        Ok(serde_json::json!({
            "taskId": task_id,
            "agentId": agent_id,
            "role": role,
            "status": "running",
        }))
    }

    /// Ends a sub-agent that did not complete by itself: a `tool-error` for each of its open
    /// calls, its status cleared, `agent-completed` with `error`. Nothing when it has completed.
    async fn settle_agent(&self, agent_id: &str, role: &str, error: &str) {
        let state = match self.log.thread_state(&self.ids.thread_id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the thread to settle a sub-agent");
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
        if self.statuses.lock().expect("statuses").remove(agent_id) {
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
            tracing::warn!(error = %e, "cannot settle the sub-agent");
        }
    }
}

impl RunHost for RunCtx {
    fn run_sub_agent<'a>(
        &'a self,
        parent_id: &'a str,
        role: String,
        instructions: String,
        tools: Vec<String>,
    ) -> BoxFuture<'a, Result<String, ToolFailure>> {
        Box::pin(self.sub_agent(parent_id, role, instructions, tools))
    }

    fn start_task<'a>(
        &'a self,
        parent_id: &'a str,
        role: String,
        instructions: String,
        tools: Vec<String>,
    ) -> BoxFuture<'a, Result<serde_json::Value, ToolFailure>> {
        Box::pin(RunCtx::start_task(
            self,
            parent_id,
            role,
            instructions,
            tools,
        ))
    }

    fn confirm<'a>(
        &'a self,
        agent_id: &'a str,
        request: ConfirmationRequest,
    ) -> BoxFuture<'a, Result<Answer, ToolFailure>> {
        Box::pin(async move {
            self.ask(agent_id, request)
                .await
                .map_err(ToolFailure::Fatal)
        })
    }
}

/// How a run that did not complete ends.
#[derive(Clone, Copy)]
enum Ending<'a> {
    Cancelled,
    TimedOut,
    Failed(&'a RunError),
}

/// Ends a run that did not complete: the `error` event (if any), tool errors for every open tool
/// call, `agent-completed` for every running sub-agent, cleared statuses and `run-finish`, in
/// one append. Does nothing if the run is no longer live.
async fn settle(ctx: &RunCtx, ending: Ending<'_>) {
    let ids = &ctx.ids;
    let state = match ctx.log.thread_state(&ids.thread_id).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the thread to settle the run");
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
    let finish = match ending {
        Ending::Cancelled => finish_body(RunStatus::Cancelled, Some(cancel_reason)),
        Ending::TimedOut => finish_body(RunStatus::Cancelled, Some("timeout".into())),
        Ending::Failed(e) => finish_body(RunStatus::Error, Some(e.to_string())),
    };
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
pub(crate) async fn append_retrying(
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
async fn finish_without_ctx(log: &EventLog, ids: &RunIds, error: &RunError) {
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

fn finish_body(status: RunStatus, reason: Option<String>) -> EventBody {
    EventBody::RunFinish(RunFinish {
        status,
        reason,
        archived_workflow_ids: None,
    })
}
