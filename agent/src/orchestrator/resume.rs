//! Continuing a run that was waiting on a confirmation when its process stopped.

use threadstream_domain::event::*;
use threadstream_domain::StoredEvent;

use super::agent_loop::{agent_loop, continue_open_call};
use super::context::{ResumedSubAgent, RunCtx};
use super::read_thread;
use super::turns::{follow_up_tasks, orchestrator_spec, stopped_at_limit};
use crate::error::RunError;
use crate::provider::ChatMessage;
use crate::replay::{self, OpenCall};
use crate::tools::DELEGATE;

/// Continues a run that was waiting on a confirmation when its process stopped: its
/// conversation is rebuilt from the log, the call it was in the middle of goes on (waiting for
/// the answer, which may have been given meanwhile), and then the loop continues.
pub(super) async fn resume(ctx: &RunCtx) -> Result<(), RunError> {
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
            messages = replay::summary_turns(&p.summary);
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
                let mut state = ctx.state();
                state.roles.insert(sub.agent_id.clone(), sub.role.clone());
                state.resumed_sub = Some(sub);
            }
        }
        let outcome = continue_open_call(ctx, &spec, &open).await?;
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
