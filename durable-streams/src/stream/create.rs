//! `PUT /v1/stream/*`: create a stream, or a fork of one.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer (see crate::error)

use std::future::Future;

use axum::body::Bytes;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use threadstream_domain::durable_stream::{
    format_offset, log_stream_id, normalize_content_type, parse_offset, CreateSpec, StreamCommand,
    StreamRefusal,
};
use threadstream_domain::event::durable_stream::ForkOf;
use threadstream_domain::{ErrorCode, ThreadError};
use threadstream_store::{Part, Sight, StoreError};

use super::shared::{find, offset_after, stream_command, stream_path, Found};
use crate::context::{Actor, Context};
use crate::error::{settle, DurableError, Stop};
use crate::protocol::*;
use crate::read::{data_of, messages, prefix_of};

/// `PUT /v1/stream/*`: create (idempotent for the same configuration), or fork.
/// `PUT /v1/stream/*` at `req_path` by `actor`: create (idempotent for the same
/// configuration), or fork. `body` is read when the headers are found good.
pub async fn create(
    ctx: &Context,
    actor: &Actor,
    req_path: &str,
    headers: &HeaderMap,
    body: impl Future<Output = Result<Bytes, Response>>,
) -> Result<Response, DurableError> {
    settle(create_inner(ctx, actor, req_path, headers, body).await)
}

async fn create_inner(
    ctx: &Context,
    actor: &Actor,
    req_path: &str,
    headers: &HeaderMap,
    body: impl Future<Output = Result<Bytes, Response>>,
) -> Result<Response, Stop> {
    let path = stream_path(req_path)?;
    let location = format!(
        "http://{}{path}",
        header_str(headers, "host").unwrap_or("localhost")
    );
    let bad = |code: ErrorCode, m: &str| Stop::from(refuse(StatusCode::BAD_REQUEST, code, m));
    let forked_from = header_str(headers, FORKED_FROM).map(str::to_string);
    let content_type = header_str(headers, header::CONTENT_TYPE.as_str())
        .filter(|ct| valid_content_type(ct))
        .map(str::to_string);
    let ttl = header_str(headers, TTL);
    let expires_at = header_str(headers, EXPIRES_AT);
    if ttl.is_some() && expires_at.is_some() {
        return Err(bad(
            ErrorCode::TtlAndExpiry,
            "Stream-TTL and Stream-Expires-At cannot both be given",
        ));
    }
    let ttl_seconds = match ttl {
        Some(t) => Some(strict_uint(t).ok_or_else(|| {
            bad(
                ErrorCode::InvalidTtl,
                "Stream-TTL must be a non-negative integer of seconds",
            )
        })?),
        None => None,
    };
    let expires_at_ms = match expires_at {
        Some(at) => Some(
            at.parse::<jiff::Timestamp>()
                .map_err(|_| {
                    bad(
                        ErrorCode::InvalidExpiresAt,
                        "Stream-Expires-At must be an RFC 3339 timestamp",
                    )
                })?
                .as_millisecond(),
        ),
        None => None,
    };
    let fork_offset = match header_str(headers, FORK_OFFSET) {
        Some(o) => Some(parse_offset(o).filter(|_| o != "-1").ok_or_else(|| {
            bad(
                ErrorCode::InvalidForkOffset,
                "Stream-Fork-Offset must be an offset",
            )
        })?),
        None => None,
    };
    let sub_offset = match headers.get(FORK_SUB_OFFSET) {
        Some(v) => {
            if forked_from.is_none() {
                return Err(bad(
                    ErrorCode::SubOffsetWithoutFork,
                    "Stream-Fork-Sub-Offset requires Stream-Forked-From",
                ));
            }
            v.to_str().ok().and_then(strict_uint).ok_or_else(|| {
                bad(
                    ErrorCode::InvalidForkSubOffset,
                    "Stream-Fork-Sub-Offset must be a non-negative integer",
                )
            })?
        }
        None => 0,
    };
    let closed = header_str(headers, CLOSED) == Some("true");
    let body = body.await?;

    let mut spec = CreateSpec {
        owner: actor.user_id.clone(),
        content_type: content_type
            .clone()
            .unwrap_or_else(|| "application/octet-stream".into()),
        ttl_seconds,
        expires_at: expires_at.map(str::to_string),
        expires_at_ms,
        closed,
        data: None,
        fork: None,
    };
    let mut parts = Vec::new();
    let mut initial = None;
    if let Some(source) = &forked_from {
        let (found, _, _) = find(ctx, actor, source, true).await?;
        let src = match found {
            Found::Live(l) => l,
            Found::Gone => {
                return Err(refuse(
                    StatusCode::CONFLICT,
                    ErrorCode::ForkSourceGone,
                    "the source stream was deleted (its forks still read through it)",
                )
                .into())
            }
            Found::Missing => {
                return Err(refuse(
                    StatusCode::NOT_FOUND,
                    ErrorCode::ForkSourceNotFound,
                    "source stream not found",
                )
                .into())
            }
        };
        if let Some(ct) = &content_type {
            if normalize_content_type(ct) != normalize_content_type(&src.content_type) {
                return Err(refuse(
                    StatusCode::CONFLICT,
                    ErrorCode::ContentTypeMismatch,
                    "a fork's content type must be its source's",
                )
                .into());
            }
        }
        spec.content_type = src.content_type.clone();
        let offset = fork_offset.unwrap_or_else(|| src.current_offset());
        if offset > src.current_offset() {
            return Err(bad(
                ErrorCode::ForkOffsetBeyondSource,
                "Stream-Fork-Offset is beyond the source stream's end",
            ));
        }
        if ttl_seconds.is_none() && expires_at.is_none() {
            spec.ttl_seconds = src.ttl_seconds;
            spec.expires_at = src.expires_at.clone();
            spec.expires_at_ms = src.expires_at_ms;
        }
        if sub_offset > 0 {
            let (next, _) = messages(&ctx.log, Sight::Committed, source, &src, offset, 1).await?;
            let Some(first) = next.first() else {
                return Err(bad(
                    ErrorCode::InvalidForkSubOffset,
                    "no message after the fork offset to take a sub-offset of",
                ));
            };
            let first = first.data();
            if sub_offset as usize > first.units() {
                return Err(bad(
                    ErrorCode::InvalidForkSubOffset,
                    "Stream-Fork-Sub-Offset is beyond the length of the message it cuts",
                ));
            }
            spec.data = Some(prefix_of(&first, sub_offset as usize));
        }
        spec.fork = Some(ForkOf {
            source: source.clone(),
            source_created_id: src.created_id,
            offset,
            sub_offset,
        });
        parts.push(Part::new(
            log_stream_id(source),
            vec![stream_command(
                actor,
                source,
                StreamCommand::AddFork {
                    fork: path.clone(),
                    created_id: src.created_id,
                    offset,
                },
                ctx,
            )],
        ));
    }
    // Invalid JSON on create: 400 like an append's.
    let data = data_of(&spec.content_type, &body, true)?;
    match (&spec.data, data) {
        (None, d) => spec.data = d,
        (Some(_), Some(d)) => initial = Some(d),
        (Some(_), None) => {}
    }
    let content_type_out = spec.content_type.clone();
    let start = spec.fork.as_ref().map_or(0, |f| f.offset);
    let mut commands = vec![stream_command(
        actor,
        &path,
        StreamCommand::Create(Box::new(spec)),
        ctx,
    )];
    if let Some(d) = initial {
        commands.push(stream_command(
            actor,
            &path,
            StreamCommand::Append {
                data: d,
                content_type: content_type_out.clone(),
                seq: None,
                producer: None,
                close: false,
            },
            ctx,
        ));
    }
    parts.insert(0, Part::new(log_stream_id(&path), commands));
    let (status, offset, closed_now) = match ctx.log.append_parts(parts).await {
        Ok(stored) => (StatusCode::CREATED, offset_after(&stored, start), closed),
        Err(StoreError::Rule(ThreadError::Stream(StreamRefusal::Exists { offset, closed }))) => {
            (StatusCode::OK, offset, closed)
        }
        Err(StoreError::Rule(ThreadError::Stream(StreamRefusal::Gone))) => {
            return Err(refuse(
                StatusCode::CONFLICT,
                ErrorCode::StreamGone,
                "the stream was deleted but forks still read through it: its path cannot be \
                 reused until they are deleted",
            )
            .into())
        }
        Err(e) => return Err(refusal_response(e.into(), None)),
    };
    let mut resp = status.into_response();
    set_header(&mut resp, "content-type", &content_type_out);
    set_header(&mut resp, NEXT_OFFSET, format_offset(offset));
    if status == StatusCode::CREATED {
        set_header(&mut resp, "location", &location);
    }
    if closed_now {
        set_header(&mut resp, CLOSED, "true");
    }
    Ok(resp)
}
