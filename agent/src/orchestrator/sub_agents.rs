//! `delegate`'s sub-agents: spawned with a checked tool subset, run to their
//! `agent-completed`, and the [`RunHost`] the tools reach the run through.

use futures::future::BoxFuture;
use threadstream_domain::event::*;
use threadstream_domain::genai;
use tracing::Instrument;
use uuid::Uuid;

use super::agent_loop::{agent_loop, continue_open_call, AgentSpec};
use super::context::RunCtx;
use super::SUB_AGENT_MAX_STEPS;
use crate::control::Answer;
use crate::error::{RunError, ToolFailure};
use crate::provider::ChatMessage;
use crate::replay::OpenCall;
use crate::telemetry;
use crate::tools::{RunHost, DELEGATE};

const SUB_AGENT_PROTOCOL: &str = "You are a sub-agent. You see only the task below, not the \
user's conversation. Use your tools to do the task, then answer with a short summary of what \
you did (ids included): that answer is all the orchestrator receives. You cannot delegate.";

impl RunCtx {
    /// Checks a sub-agent's tool subset (never `delegate`), gives it an id and records
    /// `agent-spawned`.
    pub(super) async fn spawn_sub_agent(
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
        self.state()
            .roles
            .insert(agent_id.clone(), role.to_string());
        self.record(
            &agent_id,
            // No `kind`: `"delegate"` is valid in @n8n/api-types 1.25.0 but not 1.41.0.
            EventBody::AgentSpawned(AgentSpawned::new(parent_id, role, subset.clone(), task_id)),
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
        let resumed = self.state().resumed_sub.take();
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
        self.drive_sub_agent(
            agent_id,
            role,
            subset,
            instructions,
            messages,
            open,
            None,
            None,
        )
        .await
    }

    /// Runs a spawned sub-agent's loop (continuing `open` first, when resuming) and records its
    /// `agent-completed`; returns its answer. A background task's `trace_parent` is its
    /// `delegate` call's span (a synchronous sub-agent runs within it).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn drive_sub_agent(
        &self,
        agent_id: String,
        role: String,
        subset: Vec<String>,
        instructions: String,
        messages: Vec<ChatMessage>,
        open: Option<OpenCall>,
        task_id: Option<String>,
        trace_parent: Option<opentelemetry::Context>,
    ) -> Result<String, ToolFailure> {
        let span = tracing::info_span!("sub_agent", agent_id = %agent_id, role = %role, task_id = ?task_id);
        let agent_span = span.in_scope(|| {
            telemetry::sub_agent_span(
                &self.ids.thread_id,
                &self.ids.run_id,
                &agent_id,
                &role,
                self.provider.name(),
                trace_parent,
            )
        });
        let traced = agent_span.clone();
        async {
            let spec = AgentSpec {
                id: agent_id.clone(),
                system: format!("{SUB_AGENT_PROTOCOL}\n\nRole: {role}\n\n{instructions}"),
                tools: subset,
                mcp: false,
                max_steps: SUB_AGENT_MAX_STEPS,
                task_id,
            };
            let run = async {
                let mut messages = messages;
                if let Some(open) = open {
                    let outcome = continue_open_call(self, &spec, &open).await?;
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
            telemetry::agent_ended(&traced, None, error.is_some().then_some(genai::AGENT_ERROR));
            match error {
                None => Ok(result),
                Some(e) => Err(ToolFailure::failed(format!("the sub-agent failed: {e}"))),
            }
        }
        .instrument(agent_span)
        .instrument(span)
        .await
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
