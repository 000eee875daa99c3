//! `list-workflows`: every workflow, summarized.

use std::num::NonZeroUsize;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::event::JsonObject;

use crate::error::ToolFailure;
use crate::tools::{args, Tool, ToolCtx};
use crate::workflows;

pub const LIST_WORKFLOWS: &str = "list-workflows";

// Field doc comments are the descriptions the model reads.
#[derive(Deserialize, JsonSchema)]
struct ListArgs {
    /// at most this many
    limit: Option<NonZeroUsize>,
}

pub struct ListWorkflows;

impl Tool for ListWorkflows {
    fn name(&self) -> &str {
        LIST_WORKFLOWS
    }
    fn description(&self) -> &str {
        "List the workflows (id, name, active, node count)."
    }
    fn parameters(&self) -> Value {
        args::schema::<ListArgs>()
    }
    fn status_message(&self, _args: &JsonObject) -> Option<String> {
        Some("Looking up workflows…".into())
    }
    fn execute<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let ListArgs { limit } = args::parse(&args)?;
            let limit = limit.map_or(usize::MAX, NonZeroUsize::get);
            let all = ctx.workflows.list().await?;
            let list: Vec<Value> = all.iter().take(limit).map(workflows::summary).collect();
            Ok(json!({"workflows": list, "total": all.len()}))
        })
    }
}
