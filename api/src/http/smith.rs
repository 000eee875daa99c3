//! The workflow-builder stream: `POST /smith/{workflow_id}` and `POST /smith` run
//! the agent on a prompt and answer with the run as data-only frames
//! ([`threadstream_projections::render::smith`]); `DELETE /smith/{workflow_id}` clears the
//! workflow's conversation.
//!
//! A workflow's conversation is the thread `smith-{workflow_id}-{n}`: clearing it deletes the
//! thread (the log keeps it), and the next prompt starts generation `n + 1`.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use threadstream_domain::ErrorCode;
use threadstream_domain::StoredEvent;
use threadstream_projections::render::smith::SmithRenderer;

use threadstream_agent::tools::WORKFLOW_BUILDER_THREADS;

use crate::access::authorize_thread;
use crate::error::ApiError;
use crate::extract::{ApiJson, Caller, RunTrace};
use crate::ids::new_id;
use crate::runs::start_run;
use crate::sse::{frames, sse_response, SseRender};
use crate::threads::delete_thread;
use crate::ApiContext;

#[derive(Deserialize, utoipa::ToSchema)]
pub struct PromptBody {
    prompt: String,
}

struct SmithSse(SmithRenderer);

impl SseRender for SmithSse {
    fn render(&mut self, event: &StoredEvent, out: &mut String) -> bool {
        for f in self.0.render(event) {
            f.write_sse(out);
        }
        !self.0.finished()
    }
}

/// The current conversation thread of a workflow: the first generation not cleared.
async fn conversation(ctx: &ApiContext, workflow_id: &str) -> Result<String, ApiError> {
    let mut n = 0u32;
    loop {
        let thread_id = format!("{WORKFLOW_BUILDER_THREADS}{workflow_id}-{n}");
        if !ctx.log.thread_state(&thread_id).await?.deleted {
            return Ok(thread_id);
        }
        n += 1;
    }
}

async fn run(
    ctx: ApiContext,
    caller: Caller,
    trace: RunTrace,
    thread_id: String,
    workflow: Option<(String, Value)>,
    prompt: String,
) -> Result<Response, ApiError> {
    let workflow_id = workflow.as_ref().map(|(id, _)| id.clone());
    authorize_thread(&ctx, &caller, &thread_id).await?;
    // The model sees which workflow the conversation is about.
    let message = match &workflow_id {
        Some(id) => threadstream_agent::tools::workflow_builder_message(id, &prompt),
        None => prompt,
    };
    let run_id = new_id("run");
    // The stream's slot before the run: no run is started whose stream would be refused.
    let slot = ctx
        .limits
        .sse_slot(&caller.user_id, crate::metrics::WORKFLOW_BUILDER)?;
    let stored = start_run(&ctx, &caller, &trace, &thread_id, &run_id, message, None).await?;
    let cursor = stored.first().map(|e| e.id - 1).unwrap_or(0);
    let mut renderer = SmithRenderer::new(&run_id, workflow_id.as_deref());
    if let Some((_, view)) = &workflow {
        renderer.know_workflow(view);
    }
    let render = SmithSse(renderer);
    Ok(sse_response(Body::from_stream(frames(
        &ctx,
        &caller,
        slot,
        thread_id,
        cursor,
        String::new(),
        render,
    ))))
}

/// The workflow as the tools show it; 404 when it does not exist or was deleted.
async fn existing_workflow(ctx: &ApiContext, workflow_id: &str) -> Result<Value, ApiError> {
    threadstream_domain::validate_thread_id(&format!("{WORKFLOW_BUILDER_THREADS}{workflow_id}"))
        .map_err(|m| ApiError::bad_request(ErrorCode::InvalidWorkflowId, m))?;
    match ctx.runtime.workflows().get(workflow_id).await? {
        Some(w) => Ok(threadstream_agent::workflows::view(&w)),
        None => Err(ApiError::NotFound(format!(
            "workflow '{workflow_id}' not found"
        ))),
    }
}

fn non_empty(prompt: &str) -> Result<(), ApiError> {
    if prompt.trim().is_empty() {
        return Err(ApiError::unprocessable(
            ErrorCode::EmptyPrompt,
            "prompt must not be empty",
        ));
    }
    Ok(())
}

/// `POST /smith/{workflow_id}` `{prompt}`: a turn of the workflow's conversation.
#[utoipa::path(
    post,
    operation_id = "smithPrompt",
    path = "/smith/{workflow_id}",
    tag = "workflow-builder",
    params(("workflow_id" = String, Path, description = "The workflow"), crate::extract::RunTraceHeaders),
    request_body(content = PromptBody, content_type = "application/json"),
    responses(
        (status = 200, description = "One turn of the workflow's conversation (data-only SSE, no ids, no resume)", content_type = "text/event-stream", body = String),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown or deleted workflow (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The conversation has a live run (`run_active`)", body = crate::error::ErrorBody),
        (status = 400, description = "Malformed JSON (`malformed_json`) or not `Content-Type: application/json` (`unsupported_media_type`)", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Wrong shape (`invalid_body`) or an empty prompt (`empty_prompt`)", body = crate::error::ErrorBody)
    )
)]
pub async fn prompt(
    State(ctx): State<ApiContext>,
    caller: Caller,
    trace: RunTrace,
    Path(workflow_id): Path<String>,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<Response, ApiError> {
    non_empty(&body.prompt)?;
    let view = existing_workflow(&ctx, &workflow_id).await?;
    let thread_id = conversation(&ctx, &workflow_id).await?;
    run(
        ctx,
        caller,
        trace,
        thread_id,
        Some((workflow_id, view)),
        body.prompt,
    )
    .await
}

/// `POST /smith` `{prompt}`: a new workflow; the stream's workflow is the first the run creates.
#[utoipa::path(
    post,
    operation_id = "smithPromptNew",
    path = "/smith",
    tag = "workflow-builder",
    params(crate::extract::RunTraceHeaders),
    request_body(content = PromptBody, content_type = "application/json"),
    responses(
        (status = 200, description = "One turn of the workflow's conversation (data-only SSE, no ids, no resume)", content_type = "text/event-stream", body = String),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 409, description = "The conversation has a live run (`run_active`)", body = crate::error::ErrorBody),
        (status = 400, description = "Malformed JSON (`malformed_json`) or not `Content-Type: application/json` (`unsupported_media_type`)", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Wrong shape (`invalid_body`) or an empty prompt (`empty_prompt`)", body = crate::error::ErrorBody)
    )
)]
pub async fn prompt_new(
    State(ctx): State<ApiContext>,
    caller: Caller,
    trace: RunTrace,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<Response, ApiError> {
    non_empty(&body.prompt)?;
    let thread_id = new_id(&format!("{WORKFLOW_BUILDER_THREADS}new"));
    run(ctx, caller, trace, thread_id, None, body.prompt).await
}

/// `DELETE /smith/{workflow_id}`: clears the workflow's conversation (the workflow stays).
#[utoipa::path(
    delete,
    operation_id = "smithClear",
    path = "/smith/{workflow_id}",
    tag = "workflow-builder",
    params(("workflow_id" = String, Path, description = "The workflow")),
    responses(
        (status = 200, description = "The conversation is cleared (the workflow stays)", body = crate::openapi::Ok),
        (status = 400, description = "A malformed workflow id (`invalid_workflow_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown or deleted workflow (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The conversation has a live run (`run_active`)", body = crate::error::ErrorBody)
    )
)]
pub async fn clear(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(workflow_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    existing_workflow(&ctx, &workflow_id).await?;
    let thread_id = conversation(&ctx, &workflow_id).await?;
    let state = ctx.log.thread_state(&thread_id).await?;
    if state.exists {
        delete_thread(&ctx, &caller, &thread_id).await?;
    }
    Ok(Json(json!({"ok": true})))
}
