//! A run of an upstream AG-UI agent (`--agui-agent`): the run's work, as `turns.rs` is the
//! built-in agent's. It posts the `RunAgentInput` (the conversation rebuilt from the log),
//! records each event of the answer as it arrives ([`crate::agui::events`]), and ends when the
//! upstream's run does. A tool call the upstream left without a result is the client's
//! (a frontend tool): it is asked as a confirmation, its answer recorded as the call's result
//! (or error, when denied), and the upstream is called again with it, as its next run. An
//! interrupt the run stopped for (AG-UI's interrupt outcome, or LangGraph's `on_interrupt`) is
//! recorded as a call of [`input::INTERRUPT_TOOL`] and asked as a text confirmation; the
//! answer is the call's result, and goes back as the next run's `resume` (or
//! `forwardedProps.command.resume` for `on_interrupt`).
//!
//! Failures end the run with an error naming the agent: a refused connection or an HTTP error,
//! no bytes for the stall timeout, an event that is not JSON or breaks AG-UI's order, a stream
//! that ends before `RUN_FINISHED`, and `RUN_ERROR`. A cancel drops this future, which closes the
//! request: the upstream sees its client go.

use serde_json::{Map, Value};
use threadstream_domain::event::{
    ConfirmationRequest, EventBody, InputType, Severity, ToolCall, ToolError, ToolResult,
};
use threadstream_domain::{AgentEvent, ThreadCommand};

use super::context::RunCtx;
use super::{read_thread, ORCHESTRATOR_MAX_STEPS};
use crate::agui::events::{Ending, Mapper, UpstreamInterrupt};
use crate::agui::input::Resume;
use crate::agui::{input, UpstreamRun};
use crate::error::RunError;
use crate::llm::sse::SseParser;

/// The run's work, up to (not including) `run-finish`.
pub(super) async fn run_upstream(ctx: &RunCtx, run: UpstreamRun) -> Result<(), RunError> {
    let orchestrator = ctx.ids.orchestrator_id.clone();
    let fail =
        |what: String| RunError::Upstream(format!("AG-UI agent '{}': {what}", run.agent.name));
    let mut state = run.input.state.clone();
    let mut resume = Resume::default();
    for round in 1..=ORCHESTRATOR_MAX_STEPS {
        let events = read_thread(&ctx.log, &ctx.ids.thread_id).await?;
        let messages = input::messages(&events);
        let upstream_run_id = match round {
            1 => ctx.ids.run_id.clone(),
            n => format!("{}-{n}", ctx.ids.run_id),
        };
        let body = input::run_agent_input(
            &ctx.ids.thread_id,
            &upstream_run_id,
            &state,
            messages,
            &run.input,
            &resume,
        );
        let mut mapper = Mapper::new(&run.agent.name, &orchestrator, || {
            format!("agent-{}", uuid::Uuid::now_v7())
        });
        stream_round(ctx, &run, &body, &mut mapper)
            .await
            .map_err(|e| match e {
                Round::Store(e) => e,
                Round::Upstream(what) => fail(what),
            })?;
        let closing = mapper.close_steps();
        record_all(ctx, closing).await?;
        if let Some(Ending::Error(message)) = mapper.ending() {
            return Err(fail(format!("RUN_ERROR: {message}")));
        }
        if let Some(s) = mapper.state() {
            state = s.clone();
        }
        let interrupts = mapper.interrupts();
        resume = Resume::default();
        for interrupt in interrupts.iter() {
            ask_interrupt(ctx, &orchestrator, interrupt, &mut resume).await?;
        }
        let calls = mapper.unresolved().to_vec();
        if calls.is_empty() && interrupts.is_empty() {
            return Ok(());
        }
        for call in calls {
            let request = ConfirmationRequest::approval(
                format!("cr-{}", uuid::Uuid::now_v7()),
                call.id.clone(),
                call.name.clone(),
                call.args.clone(),
                Severity::Info,
                format!("The agent asks you to run `{}`", call.name),
            );
            let answer = ctx.ask(&orchestrator, request).await?;
            let body = if answer.approved {
                EventBody::ToolResult(ToolResult {
                    tool_call_id: call.id.clone(),
                    result: answer
                        .answers
                        .or(answer.user_input.map(Value::String))
                        .unwrap_or(Value::Bool(true)),
                })
            } else {
                EventBody::ToolError(ToolError {
                    tool_call_id: call.id.clone(),
                    error: answer
                        .user_input
                        .unwrap_or_else(|| "The user denied this tool call".into()),
                })
            };
            ctx.record(&orchestrator, body).await?;
        }
    }
    Err(fail(format!(
        "still calling client tools after {ORCHESTRATOR_MAX_STEPS} runs"
    )))
}

/// Asks `interrupt` as a text confirmation, recorded as a call of [`input::INTERRUPT_TOOL`]
/// whose result is the answer (or whose error is the denial), and adds the answer to `resume`.
async fn ask_interrupt(
    ctx: &RunCtx,
    orchestrator: &str,
    interrupt: &UpstreamInterrupt,
    resume: &mut Resume,
) -> Result<(), RunError> {
    let call_id = format!(
        "{}{}",
        input::INTERRUPT_CALL_PREFIX,
        interrupt
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string())
    );
    let mut args = Map::new();
    args.insert("interrupt".into(), interrupt.value.clone());
    ctx.record(
        orchestrator,
        EventBody::ToolCall(ToolCall {
            tool_call_id: call_id.clone(),
            tool_name: input::INTERRUPT_TOOL.into(),
            args: args.clone(),
        }),
    )
    .await?;
    let mut request = ConfirmationRequest::approval(
        format!("cr-{}", uuid::Uuid::now_v7()),
        call_id.clone(),
        input::INTERRUPT_TOOL,
        args,
        Severity::Info,
        interrupt.message.clone(),
    );
    request.input_type = Some(InputType::Text);
    let answer = ctx.ask(orchestrator, request).await?;
    let payload = answer.approved.then(|| {
        answer
            .answers
            .clone()
            .or(answer.user_input.clone().map(Value::String))
            .unwrap_or(Value::Bool(true))
    });
    let body = match &payload {
        Some(result) => EventBody::ToolResult(ToolResult {
            tool_call_id: call_id,
            result: result.clone(),
        }),
        None => EventBody::ToolError(ToolError {
            tool_call_id: call_id,
            error: answer
                .user_input
                .unwrap_or_else(|| "The user declined to answer".into()),
        }),
    };
    ctx.record(orchestrator, body).await?;
    match &interrupt.id {
        Some(id) => resume.entries.push(serde_json::json!({
            "interruptId": id,
            "status": if payload.is_some() { "resolved" } else { "cancelled" },
            "payload": payload,
        })),
        // LangGraph's `Command(resume=…)` takes one value: a declined question resumes with
        // `false`.
        None => resume.command = Some(payload.unwrap_or(Value::Bool(false))),
    }
    Ok(())
}

enum Round {
    Store(RunError),
    Upstream(String),
}

impl From<RunError> for Round {
    fn from(e: RunError) -> Self {
        Round::Store(e)
    }
}

/// One upstream request: its answer's events recorded as they arrive, until its run ends.
async fn stream_round(
    ctx: &RunCtx,
    run: &UpstreamRun,
    body: &Value,
    mapper: &mut Mapper,
) -> Result<(), Round> {
    let stall = run.agents.stall_timeout();
    let request = run
        .agents
        .client()
        .post(run.agent.url.clone())
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .json(body)
        .send();
    let mut response = match tokio::time::timeout(stall, request).await {
        Err(_) => {
            return Err(Round::Upstream(format!(
                "no answer in {} s",
                stall.as_secs()
            )))
        }
        Ok(Err(e)) => return Err(Round::Upstream(describe(&e))),
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    if !status.is_success() {
        let text = tokio::time::timeout(stall, response.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let excerpt: String = text.chars().take(300).collect();
        return Err(Round::Upstream(format!("HTTP {status}: {excerpt}")));
    }
    let mut parser = SseParser::default();
    loop {
        let chunk = match tokio::time::timeout(stall, response.chunk()).await {
            Err(_) => {
                return Err(Round::Upstream(format!(
                    "no event for {} s",
                    stall.as_secs()
                )))
            }
            Ok(Err(e)) => return Err(Round::Upstream(describe(&e))),
            Ok(Ok(c)) => c,
        };
        let Some(bytes) = chunk else { break };
        for event in parser.feed(&bytes).map_err(Round::Upstream)? {
            apply(ctx, mapper, &event.data).await?;
            if mapper.ending().is_some() {
                return Ok(());
            }
        }
    }
    // The end of the body: a last event without its blank line still counts.
    if let Some(event) = parser.finish() {
        apply(ctx, mapper, &event.data).await?;
    }
    if mapper.ending().is_none() {
        return Err(Round::Upstream(
            "the stream ended before RUN_FINISHED".into(),
        ));
    }
    Ok(())
}

/// One SSE event's data: an AG-UI event, mapped and recorded.
async fn apply(ctx: &RunCtx, mapper: &mut Mapper, data: &str) -> Result<(), Round> {
    if data.trim().is_empty() {
        return Ok(());
    }
    let event: Map<String, Value> = serde_json::from_str(data).map_err(|e| {
        let excerpt: String = data.chars().take(120).collect();
        Round::Upstream(format!(
            "an event that is not a JSON object ({e}): {excerpt}"
        ))
    })?;
    let records = mapper.map(event).map_err(Round::Upstream)?;
    record_all(ctx, records).await?;
    Ok(())
}

/// Records `records` in one append (nothing when empty).
async fn record_all(ctx: &RunCtx, records: Vec<(String, EventBody)>) -> Result<(), RunError> {
    if records.is_empty() {
        return Ok(());
    }
    let commands = records
        .into_iter()
        .map(|(agent, body)| match body {
            EventBody::AguiEvent(event) => ThreadCommand::RecordAgui {
                run_id: ctx.ids.run_id.clone(),
                agent_id: agent,
                event,
            },
            body => ThreadCommand::Record(AgentEvent::new(ctx.ids.run_id.as_str(), agent, body)),
        })
        .collect();
    ctx.log.append(&ctx.ids.thread_id, commands).await?;
    Ok(())
}

/// A request error as the run's error says it: what failed, not the address or the system's
/// words (they go to the server's log).
fn describe(e: &reqwest::Error) -> String {
    tracing::warn!(
        error = e as &dyn std::error::Error,
        "AG-UI agent request failed"
    );
    if e.is_connect() {
        "cannot connect".into()
    } else if e.is_timeout() {
        "timed out".into()
    } else if e.is_body() || e.is_decode() {
        "the stream broke off".into()
    } else {
        "the request failed".into()
    }
}
