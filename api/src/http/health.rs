//! Liveness and readiness, apart: `GET /healthz` is 200 while the process serves (restart it
//! when not); `GET /readyz` says whether it should get new requests now (`crate::readiness`
//! decides), so a load balancer checking it skips an instance that drains or cannot reach its
//! store and comes back to it by itself.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::ApiContext;

#[utoipa::path(
    get,
    operation_id = "health",
    path = "/healthz",
    tag = "service",
    security(()),
    responses(
        (status = 200, description = "The process serves (liveness: also while it drains or its store is unreachable; `GET /readyz` says whether to send it requests)", body = crate::openapi::Ok),
    )
)]
/// `GET /healthz`: liveness, 200 whenever the process answers at all.
pub async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"ok": true}))
}

/// `GET /readyz`'s answer.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"ready": false, "cause": "store_unreachable", "message": "the store is unreachable: store unavailable: a database call failed"}))]
pub struct Readiness {
    /// Whether to send this instance new requests.
    pub ready: bool,
    /// Not ready only: `shutting_down` (SIGTERM came; it drains) or `store_unreachable` (its
    /// store did not answer a round trip within 2 s, or refuses appends).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub cause: Option<&'static str>,
    /// Not ready only: for the operator.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub message: Option<String>,
}

#[utoipa::path(
    get,
    operation_id = "ready",
    path = "/readyz",
    tag = "service",
    security(()),
    responses(
        (status = 200, description = "Ready: send it requests", body = Readiness, example = json!({"ready": true})),
        (status = 503, description = "Not ready, with the cause: `shutting_down` or `store_unreachable`", body = Readiness),
    )
)]
/// `GET /readyz`: 200 `{ready: true}`, or 503 `{ready: false, cause, message}` while the
/// instance is shutting down or cannot reach its store; 200 again on the first check after the
/// store answers.
pub async fn ready(State(ctx): State<ApiContext>) -> Response {
    match ctx.readiness.check(&ctx.runtime, &ctx.log).await {
        Ok(()) => Json(Readiness {
            ready: true,
            cause: None,
            message: None,
        })
        .into_response(),
        Err(not) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Readiness {
                ready: false,
                cause: Some(not.cause()),
                message: Some(not.message()),
            }),
        )
            .into_response(),
    }
}
