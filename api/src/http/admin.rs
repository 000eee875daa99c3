//! `POST /instance-ai/admin/erase`: an admin erases a thread (with its forks) or every stream
//! of a user, for real (docs/operations.md, "Erasure and retention"). `GET
//! /instance-ai/admin/export`: an admin exports a thread or a time range as NDJSON, or one table
//! of it as a Parquet file (docs/integrations.md).

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Deserialize;
use threadstream_audit::export::{export, Selection};
use threadstream_audit::parquet::{export_table, Table};
use threadstream_audit::AuditError;
use threadstream_domain::event::erasure::{ErasureReason, ErasureScope};
use threadstream_domain::ErrorCode;
use threadstream_store::{ErasureRequest, NotErased};

use super::analytics::time_param;
use crate::access::check_thread_id;
use crate::erasure::{erase, ErasureAnswer};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::ApiContext;

/// Exactly one of the two.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EraseBody {
    /// Erase this thread and every fork of it.
    #[serde(default)]
    thread_id: Option<String>,
    /// Erase every thread and Durable Stream this user owns, and the user's attachments and
    /// idempotency records.
    #[serde(default)]
    user_id: Option<String>,
}

#[utoipa::path(
    post,
    operation_id = "adminErase",
    path = "/instance-ai/admin/erase",
    tag = "service",
    request_body(content = EraseBody, content_type = "application/json", description = "Exactly one of `threadId` and `userId`"),
    responses(
        (status = 200, description = "Erased: the rows are gone and an `erased` tombstone records it (`alreadyErased`: the thread or user was erased before; leftovers were removed. A user with only attachments or idempotency records gets `tombstoneId: null`)", body = ErasureAnswer),
        (status = 400, description = "Malformed JSON (`malformed_json`) or thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "Not an admin (`admin_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "Nothing of that thread or user is stored (`not_found`)", body = crate::error::ErrorBody),
        (status = 413, description = "The body is larger than `--max-body-bytes` (`payload_too_large`)", body = crate::error::ErrorBody),
        (status = 422, description = "Neither or both of `threadId` and `userId`, a blank user id, or the wrong shape (`invalid_scope`, `invalid_body`)", body = crate::error::ErrorBody)
    )
)]
pub async fn erase_route(
    State(ctx): State<ApiContext>,
    caller: Caller,
    ApiJson(body): ApiJson<EraseBody>,
) -> Result<Json<ErasureAnswer>, ApiError> {
    admin_only(&ctx, &caller, "erase")?;
    let scope = match (body.thread_id, body.user_id) {
        (Some(thread), None) => {
            check_thread_id(&thread)?;
            ErasureScope {
                thread_id: Some(thread),
                ..Default::default()
            }
        }
        (None, Some(user)) if !user.trim().is_empty() => ErasureScope {
            user_id: Some(user),
            ..Default::default()
        },
        _ => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidScope,
                "give exactly one of threadId and userId (not blank)",
            ))
        }
    };
    let what = match (&scope.thread_id, &scope.user_id) {
        (Some(t), _) => format!("thread '{t}'"),
        (_, Some(u)) => format!("user '{u}'"),
        _ => unreachable!("one is set"),
    };
    let request = ErasureRequest {
        scope,
        requested_by: caller.user_id.clone(),
        reason: ErasureReason::Request,
    };
    match erase(&ctx.log, ctx.attachments.store(), request).await? {
        Ok(answer) => {
            tracing::info!(
                by = %caller.user_id,
                events = answer.events_erased,
                tombstone = ?answer.tombstone_id,
                "erased {what}"
            );
            Ok(Json(answer))
        }
        Err(NotErased::NothingFound | NotErased::Busy) => {
            Err(ApiError::NotFound(format!("nothing of {what} is stored")))
        }
    }
}

pub(super) fn admin_only(ctx: &ApiContext, caller: &Caller, what: &str) -> Result<(), ApiError> {
    if ctx.auth.enabled() && !caller.is_admin() {
        return Err(ApiError::Forbidden {
            code: ErrorCode::AdminOnly,
            message: format!("only an admin may {what}"),
        });
    }
    Ok(())
}

/// The export's file format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExportFormat {
    /// Every selected event, one JSON object a line (`threadstream export`'s format).
    #[default]
    Ndjson,
    /// One table of the selection as one Parquet file.
    Parquet,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdminExportQuery {
    /// `ndjson` (default) or `parquet`.
    #[param(inline)]
    format: Option<ExportFormat>,
    /// With `format=parquet`: the table, `events` by default (the derived tables are folded
    /// from the selected events).
    #[param(inline)]
    table: Option<Table>,
    /// Every event of this thread.
    thread_id: Option<String>,
    /// Events at or after this time (epoch ms, `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM:SSZ`).
    from: Option<String>,
    /// Events before this time.
    to: Option<String>,
}

#[utoipa::path(
    get,
    operation_id = "adminExport",
    path = "/instance-ai/admin/export",
    tag = "export",
    params(AdminExportQuery),
    responses(
        (status = 200, description = "The selected events as NDJSON, or one table of them as a Parquet file (`format=parquet`)", content((String = "application/x-ndjson"), (Vec<u8> = "application/vnd.apache.parquet"))),
        (status = 400, description = "An unknown format or table (`invalid_query`), a malformed time (`invalid_time`) or thread id (`invalid_thread_id`)", body = crate::error::ErrorBody),
        (status = 403, description = "Not an admin (`admin_only`)", body = crate::error::ErrorBody),
        (status = 404, description = "The thread is unknown or erased (`not_found`)", body = crate::error::ErrorBody),
        (status = 422, description = "Neither a thread nor a time range (`invalid_scope`); `from` not before `to`, or a `table` with NDJSON (`invalid_query`)", body = crate::error::ErrorBody)
    )
)]
pub async fn export_route(
    State(ctx): State<ApiContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AdminExportQuery>,
) -> Result<Response, ApiError> {
    admin_only(&ctx, &caller, "export")?;
    let format = q.format.unwrap_or_default();
    // The parameters' rules on each other, which OpenAPI parameters cannot say: 422, as the
    // erase route's scope.
    if format == ExportFormat::Ndjson && q.table.is_some() {
        return Err(ApiError::unprocessable(
            ErrorCode::InvalidQuery,
            "table: only with format=parquet",
        ));
    }
    let table = q.table.unwrap_or(Table::Events);
    let selection = Selection {
        thread: q.thread_id.filter(|t| !t.is_empty()),
        from_ts: time_param("from", q.from.as_deref())?,
        to_ts: time_param("to", q.to.as_deref())?,
        ..Selection::default()
    };
    match (&selection.thread, selection.from_ts, selection.to_ts) {
        (None, None, None) => return Err(ApiError::unprocessable(
            ErrorCode::InvalidScope,
            "give threadId or a time range (from, to): the whole log is `threadstream export`'s",
        )),
        (_, Some(from), Some(to)) if from >= to => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidQuery,
                "from must be before to",
            ))
        }
        _ => {}
    }
    if let Some(thread) = &selection.thread {
        check_thread_id(thread)?;
        if !ctx.log.thread_state(thread).await?.exists {
            return Err(ApiError::NotFound(format!("thread '{thread}' not found")));
        }
    }
    let (content_type, body) = match format {
        ExportFormat::Ndjson => {
            let lines = export(ctx.log.clone(), selection)
                .map(|chunk| chunk.map_err(std::io::Error::other));
            ("application/x-ndjson", Body::from_stream(lines))
        }
        ExportFormat::Parquet => {
            let (file, _) = export_table(&ctx.log, selection, table, Vec::new())
                .await
                .map_err(|e| match e {
                    AuditError::Store(e) => ApiError::from(e),
                    e => ApiError::Internal(Box::new(e)),
                })?;
            ("application/vnd.apache.parquet", Body::from(file))
        }
    };
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(resp)
}
