//! Workflows: `GET /instance-ai/workflows` (every workflow, short form, oldest first) and
//! `GET /instance-ai/workflows/:workflowId` (one, with nodes and edges; 404 when unknown or
//! deleted). Read from the event-sourced store the agent's tools write
//! (`threadstream_agent::workflows`).

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};
use threadstream_agent::workflows;

use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

#[utoipa::path(
    get,
    operation_id = "workflowsList",
    path = "/instance-ai/workflows",
    tag = "workflows",
    responses(
        (status = 200, description = "Every workflow, oldest first", body = crate::openapi::WorkflowList)
    )
)]
pub async fn list(State(ctx): State<ApiContext>, _caller: Caller) -> Result<Json<Value>, ApiError> {
    let all = ctx.runtime.workflows().list().await?;
    let list: Vec<Value> = all.iter().map(workflows::summary).collect();
    Ok(Json(json!({ "workflows": list })))
}

#[utoipa::path(
    get,
    operation_id = "workflowsGet",
    path = "/instance-ai/workflows/{workflow_id}",
    tag = "workflows",
    params(("workflow_id" = String, Path, description = "The workflow")),
    responses(
        (status = 200, description = "The workflow with its nodes and edges", body = crate::openapi::Workflow),
        (status = 404, description = "Unknown or deleted (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn get(
    State(ctx): State<ApiContext>,
    _caller: Caller,
    Path(workflow_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match ctx.runtime.workflows().get(&workflow_id).await? {
        Some(w) => Ok(Json(workflows::view(&w))),
        None => Err(ApiError::NotFound(format!(
            "workflow '{workflow_id}' not found"
        ))),
    }
}
