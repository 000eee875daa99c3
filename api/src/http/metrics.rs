//! `GET /metrics`: every metric of this process in the Prometheus text exposition format
//! (`crate::metrics`). An admin's only when authentication is on; `--metrics-addr` serves the
//! same on a listener of its own, for a scraper on a private network.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use threadstream_domain::ErrorCode;

use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

/// The exposition format's content type (text format 0.0.4).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[utoipa::path(
    get,
    operation_id = "metrics",
    path = "/metrics",
    tag = "service",
    responses(
        (status = 200, description = "Every metric in the Prometheus text exposition format (0.0.4)", content_type = "text/plain", body = String),
        (status = 403, description = "Not an admin (`admin_only`)", body = crate::error::ErrorBody)
    )
)]
pub async fn metrics(
    State(ctx): State<ApiContext>,
    caller: Caller,
) -> Result<impl IntoResponse, ApiError> {
    if ctx.auth.enabled() && !caller.is_admin() {
        return Err(ApiError::Forbidden {
            code: ErrorCode::AdminOnly,
            message: "only an admin may read the metrics (or scrape --metrics-addr)".into(),
        });
    }
    exposition(&ctx).await
}

/// The metrics as a response (the route above, and `--metrics-addr`).
pub async fn exposition(ctx: &ApiContext) -> Result<impl IntoResponse + use<>, ApiError> {
    let text = crate::metrics::render(&ctx.log, ctx.change_feed.as_ref()).await?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text))
}
