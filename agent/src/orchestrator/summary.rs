//! Summarizing a thread's earlier turns once they pass the token budget.

use futures::StreamExt;
use threadstream_domain::{StoredEvent, ThreadCommand};

use super::agent_loop::record_usage;
use super::context::RunCtx;
use crate::error::RunError;
use crate::provider::{ChatMessage, ChatRequest, Chunk, ToolOutcome};
use crate::replay;
use crate::telemetry::ChatCall;

const SUMMARY_PROMPT: &str = "You summarize conversations between a user and an automation \
assistant so the assistant can continue without the full history. Write a dense summary with \
these sections: Goal, Important facts (ids, names, decisions), Current state, Open issues, Next \
step. Answer with the summary only.";

/// When the earlier turns pass the budget, an LLM-written summary replaces them: it is stored
/// as a `conversation-summary` event (internal: the n8n stream never shows it) and later runs
/// start from it.
pub(super) async fn maybe_summarize(
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
    let mut call = ChatCall::start(&ctx.ids.thread_id, ctx.provider.as_ref(), &request);
    let mut stream = ctx.provider.stream(request);
    let mut summary = String::new();
    while let Some(chunk) = stream.next().await {
        call.observe(&chunk);
        match chunk? {
            Chunk::Text(t) => summary.push_str(&t),
            Chunk::Finish(f) => {
                record_usage(ctx, &ctx.ids.orchestrator_id, &call, f.usage).await?;
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
    Ok(replay::summary_turns(&summary))
}
