//! `GET /instance-ai/threads/:threadId/export`: every stored event of a thread as NDJSON
//! (`threadstream-audit`'s line format), streamed page by page. `?runId=` keeps one run's events
//! (the web page's timeline and its download link). The thread's owner or an admin (audit) may
//! export it.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use threadstream_audit::export::{export, Selection};

use crate::access::authorize_thread_read;
use crate::error::ApiError;
use crate::extract::{ApiQuery, Caller};
use crate::ApiContext;

#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct ExportQuery {
    run_id: Option<String>,
}

#[utoipa::path(
    get,
    operation_id = "exportThread",
    path = "/instance-ai/threads/{thread_id}/export",
    tag = "export",
    params(("thread_id" = String, Path, description = "The thread (its schema, ThreadId, says what an id may be)"), ExportQuery),
    responses(
        (status = 200, description = "Every stored event of the thread, one JSON object a line (threadstream-audit's format)", content_type = "application/x-ndjson", body = String),
        (status = 400, description = "A malformed thread id or query (`invalid_query`)", body = crate::error::ErrorBody),
        (status = 403, description = "The caller's role may not do this (`read_only`, `ingest_only`, `thread_not_granted`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is unknown or another user's (`not_found`)", body = crate::error::ErrorBody)
    )
)]
pub async fn thread(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
    ApiQuery(query): ApiQuery<ExportQuery>,
) -> Result<Response, ApiError> {
    authorize_thread_read(&ctx, &caller, &thread_id).await?;
    if !ctx.log.thread_state(&thread_id).await?.exists {
        return Err(ApiError::NotFound(format!(
            "thread '{thread_id}' not found"
        )));
    }
    let mut selection = Selection::thread(&thread_id);
    if let Some(run) = query.run_id.filter(|r| !r.is_empty()) {
        selection.run = Some(run);
    }
    let lines =
        export(ctx.log.clone(), selection).map(|chunk| chunk.map_err(std::io::Error::other));
    let mut resp = (StatusCode::OK, Body::from_stream(lines)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(resp)
}
