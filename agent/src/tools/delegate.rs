//! `delegate`: a self-contained task handed to a sub-agent, run to its end or in the
//! background.

use futures::future::BoxFuture;
use schemars::{JsonSchema, Schema};
use serde::Deserialize;
use serde_json::Value;
use threadstream_domain::event::JsonObject;

use super::args::{self, NonBlank};
use super::{Tool, ToolCtx};
use crate::error::ToolFailure;

pub const DELEGATE: &str = "delegate";

/// The model is asked for `tools` (the schema lists it as required, without a default), so it
/// thinks about what the sub-agent needs; a call without it is still taken, and gets a
/// sub-agent with no tools.
fn ask_for_tools(schema: &mut Schema) {
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.push(Value::from("tools"));
    }
    if let Some(Value::Object(tools)) = schema.pointer_mut("/properties/tools") {
        tools.remove("default");
    }
}

// Field doc comments are the descriptions the model reads.
#[derive(Deserialize, JsonSchema)]
#[schemars(transform = ask_for_tools)]
struct DelegateArgs {
    /// free-form role, e.g. 'workflow builder'
    role: NonBlank,
    /// the sub-agent's task
    instructions: NonBlank,
    /// tool names the sub-agent may use
    #[serde(default)]
    tools: Vec<String>,
    /// run as a background task and return at once
    background: Option<bool>,
}

/// Hands a task to a sub-agent with a role, instructions and a tool subset.
pub struct DelegateTool;

impl Tool for DelegateTool {
    fn name(&self) -> &str {
        DELEGATE
    }
    fn description(&self) -> &str {
        "Delegate a self-contained task to a sub-agent. Give it a role, complete instructions \
         (it sees nothing else of this conversation) and the tools it needs. Sub-agents cannot \
         delegate. Returns the sub-agent's final answer. With `background: true` the sub-agent \
         runs detached (at most 5 at once): the call returns its taskId at once, and you are \
         told how each task ended when they are all done."
    }
    fn parameters(&self) -> Value {
        args::schema::<DelegateArgs>()
    }
    fn status_message(&self, args: &JsonObject) -> Option<String> {
        let role = args
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("sub-agent");
        Some(format!("Delegating to {role}…"))
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let DelegateArgs {
                role,
                instructions,
                tools,
                background,
            } = args::parse(&args)?;
            let role = role.trimmed();
            let instructions = instructions.0;
            let background = background.unwrap_or(false);
            if background {
                return ctx
                    .host
                    .start_task(ctx.agent_id, role, instructions, tools)
                    .await;
            }
            let answer = ctx
                .host
                .run_sub_agent(ctx.agent_id, role, instructions, tools)
                .await?;
            Ok(Value::String(answer))
        })
    }
}
