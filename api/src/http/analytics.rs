//! `GET /instance-ai/analytics/runs?from&to&user`: the analytics read model's runs started in
//! `[from, to)` (epoch ms, `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM:SSZ`), as JSON `{runs: [...]}` or,
//! with `Accept: text/csv`, as CSV; `GET /instance-ai/analytics/summary` with the same query:
//! their summary (what the web page's charts draw, and `threadstream analytics --format
//! summary` prints). A user's runs are those of the threads they own. A caller sees their own
//! runs only (`user` naming anyone else is a 403); an admin may name any user.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use threadstream_audit::report::{select, summarize, to_csv, to_json, RunFilter, Summary};
use threadstream_audit::time::parse_time;
use threadstream_domain::ErrorCode;
use threadstream_projections::{Analytics, RunAnalytics};

use crate::background::projector;
use crate::error::ApiError;
use crate::extract::{ApiQuery, Caller};
use crate::ApiContext;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    from: Option<String>,
    to: Option<String>,
    user: Option<String>,
}

/// A time query parameter (epoch ms, `YYYY-MM-DD` or RFC 3339), or the 400 naming it.
pub(super) fn time_param(name: &'static str, raw: Option<&str>) -> Result<Option<i64>, ApiError> {
    raw.filter(|s| !s.is_empty())
        .map(|s| {
            parse_time(s)
                .map_err(|e| ApiError::bad_request(ErrorCode::InvalidTime, format!("{name}: {e}")))
        })
        .transpose()
}

#[utoipa::path(
    get,
    operation_id = "analyticsRuns",
    path = "/instance-ai/analytics/runs",
    tag = "analytics",
    params(RunsQuery, ("Accept" = Option<String>, Header, description = "`text/csv` for CSV")),
    responses(
        (status = 200, description = "Runs started in `[from, to)`", content((crate::openapi::RunsReport = "application/json"), (String = "text/csv"))),
        (status = 400, description = "A malformed time (`invalid_time`) or query (`invalid_query`)", body = crate::error::ErrorBody),
        (status = 403, description = "`user` names another user and the caller is not an admin (`forbidden`)", body = crate::error::ErrorBody)
    )
)]
pub async fn runs(
    State(ctx): State<ApiContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<RunsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let runs = selected(&ctx, &caller, q).await?;
    let wants_csv = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/csv"));
    if wants_csv {
        let mut resp = (StatusCode::OK, to_csv(&runs)).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/csv; charset=utf-8"),
        );
        return Ok(resp);
    }
    Ok(Json(to_json(&runs)).into_response())
}

#[utoipa::path(
    get,
    operation_id = "analyticsSummary",
    path = "/instance-ai/analytics/summary",
    tag = "analytics",
    params(RunsQuery),
    responses(
        (status = 200, description = "The summary of the runs started in `[from, to)`: runs per day by status, tokens per day by model, duration and time to first token (p50, p95), tool calls and errors by tool, confirmations, top threads by events (`threadstream analytics --format summary`)", body = Summary),
        (status = 400, description = "A malformed time (`invalid_time`) or query (`invalid_query`)", body = crate::error::ErrorBody),
        (status = 403, description = "`user` names another user and the caller is not an admin (`forbidden`)", body = crate::error::ErrorBody)
    )
)]
pub async fn summary(
    State(ctx): State<ApiContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> Result<Json<Summary>, ApiError> {
    let runs = selected(&ctx, &caller, q).await?;
    Ok(Json(summarize(&runs)))
}

/// The runs the query selects, after checking the caller may see them.
async fn selected(
    ctx: &ApiContext,
    caller: &Caller,
    q: RunsQuery,
) -> Result<Vec<RunAnalytics>, ApiError> {
    let user = q.user.unwrap_or_else(|| caller.user_id.clone());
    if user != caller.user_id && !caller.is_admin() {
        return Err(ApiError::Forbidden {
            code: ErrorCode::Forbidden,
            message: format!("only your own runs can be listed, not user '{user}'s"),
        });
    }
    let filter = RunFilter {
        from: time_param("from", q.from.as_deref())?,
        to: time_param("to", q.to.as_deref())?,
        threads: Some(crate::threads_of(&ctx.log, &user).await?),
    };
    let docs = projector::view_all::<Analytics>(&ctx.log, ctx.log.client_sight()).await?;
    Ok(select(docs.into_values(), &filter))
}
