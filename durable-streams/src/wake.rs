//! A subscription's wakes: a webhook consumer's callback, and a pull-wake worker's claim, ack
//! and release. Callbacks, acks and releases carry the wake token (`Authorization: Bearer …`)
//! the wake was handed out with, not a user's credentials: the token names the subscription and
//! the wake's generation, and a token of an earlier wake is fenced (`FENCED`).
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer

use std::collections::BTreeMap;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use threadstream_domain::clock::now_ms;
use threadstream_domain::durable_stream::parse_offset;
use threadstream_domain::event::subscription::{StreamAck, SubscriptionType};
use threadstream_domain::subscription::{normalize_path, Subscription, SubscriptionCommand};
use threadstream_domain::ErrorCode;
use utoipa::ToSchema;

use crate::context::Context;
use crate::dispatch::try_wake;
use crate::error::{settle, DurableError, Stop};
use crate::protocol::{header_str, refuse};
use crate::subscribe::{invalid, not_found, owned, parse, refusal};
use crate::subscriptions::{execute, links, tails, LinkView};

/// `POST …/callback` and `…/ack` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AckRequest {
    pub wake_id: String,
    /// An integer; `3.0` is 3 (docs/openapi.md counts zero-fraction numbers as integers).
    #[serde(deserialize_with = "threadstream_domain::integers::non_negative")]
    pub generation: u64,
    /// The streams processed, each through an offset.
    #[serde(default)]
    pub acks: Vec<AckItem>,
    /// The wake is finished (its lease ends; a next wake follows if more is pending).
    #[serde(default)]
    pub done: bool,
}

/// One stream processed through `offset`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AckItem {
    /// The relative stream path (`path` is accepted too).
    #[serde(alias = "path")]
    pub stream: String,
    pub offset: String,
}

/// `POST …/release` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ReleaseRequest {
    pub wake_id: String,
    /// An integer; `3.0` is 3 (docs/openapi.md counts zero-fraction numbers as integers).
    #[serde(deserialize_with = "threadstream_domain::integers::non_negative")]
    pub generation: u64,
}

/// `POST …/claim` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ClaimRequest {
    /// Who claims (shown to the next claimer as `current_holder`): not empty.
    #[schema(min_length = 1)]
    pub worker: String,
}

/// The answer to an ack.
#[derive(Debug, Serialize, ToSchema)]
pub struct AckAnswer {
    pub ok: bool,
    /// A next wake began (more was pending when this one finished).
    pub next_wake: bool,
}

/// The answer to a claim: the wake, and the token its acks and release carry.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClaimAnswer {
    pub wake_id: String,
    pub generation: u64,
    pub token: String,
    pub streams: Vec<LinkView>,
    pub lease_ttl_ms: u64,
}

/// The subscription a wake token is for, and the token's generation (401 without a valid
/// token, 404 for no such subscription).
async fn by_token(
    ctx: &Context,
    headers: &HeaderMap,
    id: &str,
) -> Result<(Subscription, u64), Stop> {
    let token = header_str(headers, "authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .ok_or_else(|| {
            refuse(
                StatusCode::UNAUTHORIZED,
                ErrorCode::DsTokenInvalid,
                "a wake token is needed: Authorization: Bearer <token>",
            )
        })?;
    let (subs, _) = ctx.streams.subscriptions(&ctx.log).await?;
    let sub = subs.by_id.get(id).cloned().ok_or_else(not_found)?;
    let claims = ctx
        .webhooks
        .signing
        .check_token(token, id, now_ms() / 1000)
        .map_err(|e| {
            refuse(
                StatusCode::UNAUTHORIZED,
                e.code(),
                "the wake token is invalid or expired",
            )
        })?;
    Ok((sub, claims.generation))
}

fn fenced() -> Response {
    refuse(
        StatusCode::CONFLICT,
        ErrorCode::DsFenced,
        "wake generation is stale",
    )
}

/// `POST /v1/stream/__ds/subscriptions/:id/callback` (`via` webhook: a webhook consumer acks
/// its wake) and `…/ack` (`via` pull-wake: a worker acks the wake it claimed), under a wake
/// token.
pub async fn ack(
    ctx: &Context,
    headers: &HeaderMap,
    id: &str,
    body: &[u8],
    via: SubscriptionType,
) -> Result<Response, DurableError> {
    settle(ack_with_token(ctx, headers, id, body, via).await)
}

async fn ack_with_token(
    ctx: &Context,
    headers: &HeaderMap,
    id: &str,
    body: &[u8],
    via: SubscriptionType,
) -> Result<Response, Stop> {
    let (sub, generation) = by_token(ctx, headers, id).await?;
    let request: AckRequest = parse(body)?;
    if request.generation != generation {
        return Err(fenced().into());
    }
    let mut acks = Vec::new();
    for a in &request.acks {
        let offset = parse_offset(&a.offset)
            .ok_or_else(|| invalid(format!("'{}' is not an offset", a.offset)))?;
        acks.push(StreamAck {
            stream: normalize_path(&a.stream),
            offset,
        });
    }
    let ack = SubscriptionCommand::Ack {
        id: id.to_string(),
        via,
        generation,
        wake_id: request.wake_id,
        acks,
        done: request.done,
        tails: tails(ctx, &sub).await?,
    };
    execute(ctx, &sub.owner, ack, vec![])
        .await
        .map_err(refusal)?;
    let next_wake = request.done && try_wake(ctx, id, "").await.map_err(refusal)?;
    Ok(Json(AckAnswer {
        ok: true,
        next_wake,
    })
    .into_response())
}

/// `POST /v1/stream/__ds/subscriptions/:id/release`: a pull-wake worker lets go of its wake
/// unfinished (a next wake follows if work is pending).
pub async fn release(
    ctx: &Context,
    headers: &HeaderMap,
    id: &str,
    body: &[u8],
) -> Result<Response, DurableError> {
    let released = async {
        let (sub, generation) = by_token(ctx, headers, id).await?;
        let request: ReleaseRequest = parse(body)?;
        if request.generation != generation {
            return Err(fenced().into());
        }
        let release = SubscriptionCommand::Release {
            id: id.to_string(),
            generation,
            wake_id: request.wake_id,
        };
        execute(ctx, &sub.owner, release, vec![])
            .await
            .map_err(refusal)?;
        try_wake(ctx, id, "").await.map_err(refusal)?;
        Ok(StatusCode::NO_CONTENT.into_response())
    };
    settle(released.await)
}

/// `POST /v1/stream/__ds/subscriptions/:id/claim` by `user`: a pull-wake worker claims the
/// wake (begun now if there is pending work and none is live).
pub async fn claim(
    ctx: &Context,
    user: &str,
    id: &str,
    body: &[u8],
) -> Result<Response, DurableError> {
    let claimed = async {
        let sub = owned(ctx, user, id).await?;
        let request: ClaimRequest = parse(body)?;
        if request.worker.is_empty() {
            return Err(invalid("worker must be a non-empty string").into());
        }
        let tails: BTreeMap<String, i64> = tails(ctx, &sub).await?;
        let claim = SubscriptionCommand::Claim {
            id: id.to_string(),
            worker: request.worker,
            wake_id: uuid::Uuid::now_v7().to_string(),
            tails: tails.clone(),
        };
        execute(ctx, user, claim, vec![]).await.map_err(refusal)?;
        let (subs, _) = ctx.streams.subscriptions(&ctx.log).await?;
        let sub = subs.by_id.get(id).cloned().ok_or_else(not_found)?;
        let wake = sub.wake.clone().ok_or_else(fenced)?;
        let answer = ClaimAnswer {
            token: ctx
                .webhooks
                .signing
                .token(id, wake.generation, now_ms() / 1000),
            wake_id: wake.wake_id,
            generation: wake.generation,
            streams: links(&sub, Some(&tails)),
            lease_ttl_ms: sub.config.lease_ttl_ms,
        };
        Ok(Json(answer).into_response())
    };
    settle(claimed.await)
}
