//! `GET /instance-ai/threads/:threadId/export`: every stored event of a thread as NDJSON
//! (`threadstream-audit`'s line format), streamed page by page. Owner only for now: an admin
//! role arrives with authentication (issue #7).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use threadstream_audit::export::{export, Selection};

use crate::error::ApiError;
use crate::extract::Caller;
use crate::http::authorize_thread;
use crate::ApiContext;

pub async fn thread(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(thread_id): Path<String>,
) -> Result<Response, ApiError> {
    authorize_thread(&ctx, &caller, &thread_id).await?;
    if !ctx.log.thread_state(&thread_id).await?.exists {
        return Err(ApiError::NotFound(format!(
            "thread '{thread_id}' not found"
        )));
    }
    let lines = export(ctx.log.clone(), Selection::thread(&thread_id))
        .map(|chunk| chunk.map_err(|e| std::io::Error::other(e.to_string())));
    let mut resp = (StatusCode::OK, Body::from_stream(lines)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(resp)
}
