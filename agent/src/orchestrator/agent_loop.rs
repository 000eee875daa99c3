//! One agent's loop: a model call streamed into the log, its tool calls run one after another
//! (a destructive one only once the user approved), their outcomes fed back, until the model
//! answers without a tool call or the step limit is reached.

use std::collections::HashMap;

use futures::StreamExt;
use threadstream_domain::event::*;
use threadstream_domain::ThreadCommand;
use tracing::Instrument;
use uuid::Uuid;

use super::context::RunCtx;
use crate::error::{RunError, ToolFailure};
use crate::provider::{ChatMessage, ChatRequest, Chunk, ToolCallRequest, ToolOutcome, Usage};
use crate::replay::OpenCall;
use crate::telemetry::{self, ChatCall};
use crate::tools::ToolCtx;

/// One agent's loop settings.
pub(super) struct AgentSpec {
    pub(super) id: String,
    pub(super) system: String,
    pub(super) tools: Vec<String>,
    /// Also offered every MCP tool available at each step (the orchestrator's tools; a
    /// sub-agent gets only the MCP tools named in `tools`).
    pub(super) mcp: bool,
    pub(super) max_steps: usize,
    /// The background task this agent runs (its corrections are injected into its context).
    pub(super) task_id: Option<String>,
}

impl AgentSpec {
    /// The names offered to the model now.
    fn offered(&self, ctx: &RunCtx) -> Vec<String> {
        let mut names = self.tools.clone();
        if self.mcp {
            names.extend(ctx.tools.mcp_names());
        }
        names
    }

    /// Whether this agent may call `name`.
    fn offers(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t == name) || (self.mcp && name.contains("__"))
    }
}

/// How an agent loop ended.
pub(super) struct LoopEnd {
    /// The text of the last model turn.
    pub(super) text: String,
    pub(super) exhausted: bool,
}

/// Adds a model call's usage to the run's total and records it in the log (`llm-usage`, with
/// the call's provider and timings, from which `threadstream traces` rebuilds its span).
pub(super) async fn record_usage(
    ctx: &RunCtx,
    agent_id: &str,
    call: &ChatCall,
    usage: Option<Usage>,
) -> Result<(), RunError> {
    let Some(command) = usage_command(ctx, agent_id, call, usage) else {
        return Ok(());
    };
    ctx.log.append(&ctx.ids.thread_id, vec![command]).await?;
    Ok(())
}

/// [`record_usage`]'s command, for a caller that appends it with other events; the usage is
/// added to the run's total.
pub(super) fn usage_command(
    ctx: &RunCtx,
    agent_id: &str,
    call: &ChatCall,
    usage: Option<Usage>,
) -> Option<ThreadCommand> {
    let u = usage?;
    {
        let mut state = ctx.state();
        let total = &mut state.usage;
        total.input_tokens += u.input_tokens;
        total.output_tokens += u.output_tokens;
    }
    Some(ThreadCommand::RecordUsage {
        run_id: ctx.ids.run_id.clone(),
        agent_id: agent_id.to_string(),
        usage: LlmUsage {
            model: ctx.provider.name().to_string(),
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            provider: Some(ctx.provider.kind().to_string()),
            started_at: Some(call.started_at_ms()),
            first_chunk_ms: call.first_chunk_ms(),
        },
    })
}

/// One agent's loop: model call, tools, repeat.
pub(super) async fn agent_loop(
    ctx: &RunCtx,
    spec: &AgentSpec,
    messages: &mut Vec<ChatMessage>,
) -> Result<LoopEnd, RunError> {
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
        // Read at each step: MCP tools come and go with their servers and lists.
        if spec.mcp || spec.tools.iter().any(|t| t.contains("__")) {
            ctx.tools.mcp().settled().await;
        }
        let request = ChatRequest {
            system: spec.system.clone(),
            messages: messages.clone(),
            tools: ctx.tools.specs(&spec.offered(ctx)),
        };
        tracing::debug!(agent_id = %spec.id, step, "model call");
        let mut call = ChatCall::start(&ctx.ids.thread_id, ctx.provider.as_ref(), &request);
        let mut stream = ctx.provider.stream(request);
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut calls: Vec<ToolCallRequest> = Vec::new();
        let mut provider_blocks = Vec::new();
        // Calls whose arguments did not parse: id → what was wrong.
        let mut invalid: HashMap<String, String> = HashMap::new();
        while let Some(chunk) = stream.next().await {
            call.observe(&chunk);
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
                    record_usage(ctx, &spec.id, &call, f.usage).await?;
                    break;
                }
            }
        }
        drop(stream);
        drop(call);
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
    traced_call(ctx, agent, call, call.args.clone(), |id| async move {
        continue_tool(ctx, agent, call, &id).await
    })
    .await
}

/// A call the model made with arguments that are not a JSON object: recorded (with no
/// arguments) and answered with a `tool-error` the model can act on.
async fn invalid_tool_call(
    ctx: &RunCtx,
    agent: &AgentSpec,
    call: &ToolCallRequest,
    why: String,
) -> Result<ToolOutcome, RunError> {
    traced_call(ctx, agent, call, JsonObject::new(), |id| async move {
        let message = format!(
            "Invalid call of '{}': {why}. Send the arguments as a JSON object.",
            call.name
        );
        tool_error(ctx, &agent.id, &id, message).await
    })
    .await
}

/// A tool call recorded (`tool-call` with `args` under a new `tc-…` id) and settled by
/// `settle`, within its `execute_tool` span.
async fn traced_call<F, Fut>(
    ctx: &RunCtx,
    agent: &AgentSpec,
    call: &ToolCallRequest,
    args: JsonObject,
    settle: F,
) -> Result<ToolOutcome, RunError>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<ToolOutcome, RunError>>,
{
    let tool_call_id = format!("tc-{}", Uuid::now_v7());
    let span = telemetry::tool_span(&ctx.ids.thread_id, &call.name, &tool_call_id, &args);
    in_tool_span(span, async {
        ctx.record(
            &agent.id,
            EventBody::ToolCall(ToolCall {
                tool_call_id: tool_call_id.clone(),
                tool_name: call.name.clone(),
                args,
            }),
        )
        .await?;
        settle(tool_call_id.clone()).await
    })
    .await
}

/// A call the log holds open, continued by a resumed run (after a restart or a lease takeover):
/// within an `execute_tool` span like a new call's, so that its confirmation, and a resumed
/// sub-agent under a `delegate` call, hang where the tree rebuilt from the log has them.
pub(super) async fn continue_open_call(
    ctx: &RunCtx,
    agent: &AgentSpec,
    open: &OpenCall,
) -> Result<ToolOutcome, RunError> {
    if let Some(r) = open.request.clone() {
        ctx.state()
            .stored_requests
            .insert(open.tool_call_id.clone(), r);
    }
    let span = telemetry::tool_span(
        &ctx.ids.thread_id,
        &open.call.name,
        &open.tool_call_id,
        &open.call.args,
    );
    in_tool_span(
        span,
        continue_tool(ctx, agent, &open.call, &open.tool_call_id),
    )
    .await
}

/// Runs `work` within a tool call's `span` and records its outcome there.
async fn in_tool_span(
    span: tracing::Span,
    work: impl std::future::Future<Output = Result<ToolOutcome, RunError>>,
) -> Result<ToolOutcome, RunError> {
    async {
        let outcome = work.await?;
        telemetry::tool_ended(&tracing::Span::current(), &outcome);
        Ok(outcome)
    }
    .instrument(span)
    .await
}

/// A recorded tool call from there on: the confirmation if destructive, `status` around the
/// work, and `tool-result` or `tool-error`.
async fn continue_tool(
    ctx: &RunCtx,
    agent: &AgentSpec,
    call: &ToolCallRequest,
    tool_call_id: &str,
) -> Result<ToolOutcome, RunError> {
    let mut found = ctx
        .tools
        .get(&call.name)
        .filter(|_| agent.offers(&call.name));
    if found.is_none()
        && agent.offers(&call.name)
        && ctx
            .tools
            .mcp()
            .wait_connected(&call.name, crate::mcp::connection::CONNECT_TIMEOUT)
            .await
    {
        found = ctx.tools.get(&call.name);
    }
    let tool = match found {
        Some(t) => t,
        None => {
            if let Some(why) = ctx
                .tools
                .unavailable(&call.name)
                .filter(|_| agent.offers(&call.name))
            {
                return tool_error(ctx, &agent.id, tool_call_id, why).await;
            }
            let message = format!(
                "Unknown tool '{}'; available: {}",
                call.name,
                agent.offered(ctx).join(", ")
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
