//! The orchestrator's turns: its answer to the user's message (with the thread's title written
//! beside it), the follow-up turns for background tasks that settled meanwhile, and the
//! follow-up run that reports tasks which outlived their run.

use threadstream_domain::event::*;
use threadstream_domain::ThreadCommand;

use super::agent_loop::{agent_loop, usage_command, AgentSpec, LoopEnd};
use super::context::RunCtx;
use super::summary::maybe_summarize;
use super::{read_thread, ORCHESTRATOR_MAX_STEPS};
use crate::error::RunError;
use crate::provider::ChatMessage;
use crate::replay;

const ORCHESTRATOR_PROMPT: &str = "You are the orchestrator of an automation assistant. You \
help the user with their workflows. Plan multi-step work with the `plan` tool and keep each \
task's status current; a new plan of several tasks is shown to the user for approval. Do simple \
reads yourself; delegate self-contained work (building, debugging) to a sub-agent with \
`delegate`, giving it a role, complete instructions and only the tools it needs. When you need \
information only the user has, use `ask-user`. Destructive tools ask the user for approval; if \
the user denies, do not retry — explain and continue. Finish with a short answer for the user.";

pub(super) fn orchestrator_spec(ctx: &RunCtx) -> AgentSpec {
    AgentSpec {
        id: ctx.ids.orchestrator_id.clone(),
        system: ORCHESTRATOR_PROMPT.to_string(),
        tools: crate::tools::offered_tools(&ctx.ids.thread_id, ctx.tools.builtin_names()),
        mcp: crate::tools::offers_mcp(&ctx.ids.thread_id),
        max_steps: ORCHESTRATOR_MAX_STEPS,
        task_id: None,
    }
}

/// After the orchestrator's turn: when background tasks it started have all settled meanwhile,
/// it gets another turn with how each ended, so it reports the outcome (repeated if that turn
/// starts more tasks that settle in time). While any task still runs, the turn ends here: the
/// run finishes and the tasks' outcome is reported by a follow-up run once they settle.
pub(super) async fn follow_up_tasks(
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
pub(super) async fn report_tasks(ctx: &RunCtx, report: String) -> Result<(), RunError> {
    let events = read_thread(&ctx.log, &ctx.ids.thread_id).await?;
    let mut messages = replay::thread_history(&events, &ctx.ids.run_id);
    messages = maybe_summarize(ctx, &events, messages).await?;
    messages.push(ChatMessage::User { text: report });
    let spec = orchestrator_spec(ctx);
    let end = agent_loop(ctx, &spec, &mut messages).await?;
    let end = follow_up_tasks(ctx, &spec, &mut messages, end).await?;
    stopped_at_limit(ctx, &end).await
}

/// The orchestrator's work, up to (not including) `run-finish`.
pub(super) async fn orchestrate(
    ctx: &RunCtx,
    message: String,
    title: bool,
) -> Result<(), RunError> {
    // The title is written by the model beside the answer (it must not delay the first token)
    // and stored as soon as it is ready.
    let titling = async {
        if !title {
            return Ok(());
        }
        let (title, call, usage) =
            crate::title::generate_title(ctx.provider.as_ref(), &ctx.ids.thread_id, &message).await;
        // The call's usage and the title in one append: they stay next to each other.
        let orchestrator = &ctx.ids.orchestrator_id;
        let mut commands: Vec<ThreadCommand> = usage_command(ctx, orchestrator, &call, usage)
            .into_iter()
            .collect();
        drop(call);
        commands.push(ThreadCommand::Record(AgentEvent::new(
            ctx.ids.run_id.as_str(),
            orchestrator,
            EventBody::ThreadTitleUpdated(ThreadTitle { title }),
        )));
        ctx.log.append(&ctx.ids.thread_id, commands).await?;
        Ok(())
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

pub(super) async fn stopped_at_limit(ctx: &RunCtx, end: &LoopEnd) -> Result<(), RunError> {
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
