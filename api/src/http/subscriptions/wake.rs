//! A subscription's wakes: a webhook consumer's callback, and a pull-wake worker's claim, ack
//! and release. Callbacks, acks and releases carry the wake token (`Authorization: Bearer …`)
//! the wake was handed out with, not a user's credentials: the token names the subscription and
//! the wake's generation, and a token of an earlier wake is fenced (`FENCED`).

use std::collections::BTreeMap;
use threadstream_domain::ErrorCode;

use serde::Serialize;
use threadstream_domain::clock::now_ms;
use threadstream_domain::durable_stream::parse_offset;
use threadstream_domain::event::subscription::{StreamAck, SubscriptionType};

use super::*;
use crate::durable::dispatch::try_wake;
use crate::durable::subscriptions::{links, tails, LinkView};

/// `POST …/callback` and `…/ack` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AckRequest {
    pub wake_id: String,
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
    pub generation: u64,
}

/// `POST …/claim` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ClaimRequest {
    /// Who claims (shown to the next claimer as `current_holder`).
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
    ctx: &ApiContext,
    headers: &HeaderMap,
    id: &str,
) -> Result<(Subscription, u64), Response> {
    let token = header_str(headers, "authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .ok_or_else(|| {
            refuse(
                StatusCode::UNAUTHORIZED,
                ErrorCode::DsTokenInvalid,
                "a wake token is needed: Authorization: Bearer <token>",
            )
        })?;
    let (subs, _) = ctx.streams.subscriptions(&ctx.log).await.map_err(refusal)?;
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

/// Acks under a wake token (a webhook callback or a pull-wake ack).
async fn ack_with_token(
    ctx: &ApiContext,
    headers: &HeaderMap,
    id: &str,
    body: &Bytes,
    via: SubscriptionType,
) -> Result<Response, Response> {
    let (sub, generation) = by_token(ctx, headers, id).await?;
    let request: AckRequest = parse(body)?;
    if request.generation != generation {
        return Err(fenced());
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
        tails: tails(ctx, &sub).await.map_err(refusal)?,
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

/// `POST /v1/stream/__ds/subscriptions/:id/callback`: a webhook consumer acks its wake.
#[utoipa::path(
    post,
    operation_id = "subscriptionsCallback",
    path = "/v1/stream/__ds/subscriptions/{id}/callback",
    tag = "durable-streams",
    security(()),
    params(("id" = String, Path, description = "The subscription id"), ("Authorization" = String, Header, description = "`Bearer <callback_token>` of the wake notification")),
    request_body(content = AckRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Acked", body = AckAnswer),
        (status = 400, description = "Bad JSON or offsets (`INVALID_REQUEST`), or not a webhook subscription", body = crate::error::ErrorBody),
        (status = 401, description = "No, or an invalid, wake token (`TOKEN_INVALID`, `TOKEN_EXPIRED`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The wake is over (`FENCED`), or an offset is not ackable (`INVALID_OFFSET`)", body = crate::error::ErrorBody),
    )
)]
pub async fn callback(
    State(ctx): State<ApiContext>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match ack_with_token(&ctx, &headers, &id, &body, SubscriptionType::Webhook).await {
        Ok(r) | Err(r) => r,
    }
}

/// `POST /v1/stream/__ds/subscriptions/:id/ack`: a pull-wake worker acks the wake it claimed.
#[utoipa::path(
    post,
    operation_id = "subscriptionsAck",
    path = "/v1/stream/__ds/subscriptions/{id}/ack",
    tag = "durable-streams",
    security(()),
    params(("id" = String, Path, description = "The subscription id"), ("Authorization" = String, Header, description = "`Bearer <token>` of the claim")),
    request_body(content = AckRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Acked", body = AckAnswer),
        (status = 400, description = "Bad JSON or offsets (`INVALID_REQUEST`), or not a pull-wake subscription", body = crate::error::ErrorBody),
        (status = 401, description = "No, or an invalid, wake token (`TOKEN_INVALID`, `TOKEN_EXPIRED`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The wake is over (`FENCED`), or an offset is not ackable (`INVALID_OFFSET`)", body = crate::error::ErrorBody),
    )
)]
pub async fn ack(
    State(ctx): State<ApiContext>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match ack_with_token(&ctx, &headers, &id, &body, SubscriptionType::PullWake).await {
        Ok(r) | Err(r) => r,
    }
}

/// `POST /v1/stream/__ds/subscriptions/:id/release`: a pull-wake worker lets go of its wake
/// unfinished (a next wake follows if work is pending).
#[utoipa::path(
    post,
    operation_id = "subscriptionsRelease",
    path = "/v1/stream/__ds/subscriptions/{id}/release",
    tag = "durable-streams",
    security(()),
    params(("id" = String, Path, description = "The subscription id"), ("Authorization" = String, Header, description = "`Bearer <token>` of the claim")),
    request_body(content = ReleaseRequest, content_type = "application/json"),
    responses(
        (status = 204, description = "Released"),
        (status = 400, description = "Bad JSON (`INVALID_REQUEST`), or not a pull-wake subscription", body = crate::error::ErrorBody),
        (status = 401, description = "No, or an invalid, wake token (`TOKEN_INVALID`, `TOKEN_EXPIRED`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "The wake is over (`FENCED`)", body = crate::error::ErrorBody),
    )
)]
pub async fn release(
    State(ctx): State<ApiContext>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let released = async {
        let (sub, generation) = by_token(&ctx, &headers, &id).await?;
        let request: ReleaseRequest = parse(&body)?;
        if request.generation != generation {
            return Err(fenced());
        }
        let release = SubscriptionCommand::Release {
            id: id.clone(),
            generation,
            wake_id: request.wake_id,
        };
        execute(&ctx, &sub.owner, release, vec![])
            .await
            .map_err(refusal)?;
        try_wake(&ctx, &id, "").await.map_err(refusal)?;
        Ok(StatusCode::NO_CONTENT.into_response())
    };
    match released.await {
        Ok(r) | Err(r) => r,
    }
}

/// `POST /v1/stream/__ds/subscriptions/:id/claim`: a pull-wake worker claims the wake (begun
/// now if there is pending work and none is live).
#[utoipa::path(
    post,
    operation_id = "subscriptionsClaim",
    path = "/v1/stream/__ds/subscriptions/{id}/claim",
    tag = "durable-streams",
    params(("id" = String, Path, description = "The subscription id")),
    request_body(content = ClaimRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Claimed: the wake and its token", body = ClaimAnswer),
        (status = 400, description = "Bad JSON or worker (`INVALID_REQUEST`), or not a pull-wake subscription", body = crate::error::ErrorBody),
        (status = 403, description = "An ingest-only token", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription, or another user's (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "Another worker holds the wake (`ALREADY_CLAIMED`, with `current_holder`), or nothing is pending (`NO_PENDING_WORK`)", body = crate::error::ErrorBody),
    )
)]
pub async fn claim(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let claimed = async {
        let sub = owned(&ctx, &caller, &id).await?;
        let request: ClaimRequest = parse(&body)?;
        if request.worker.is_empty() {
            return Err(invalid("worker must be a non-empty string"));
        }
        let tails: BTreeMap<String, i64> = tails(&ctx, &sub).await.map_err(refusal)?;
        let claim = SubscriptionCommand::Claim {
            id: id.clone(),
            worker: request.worker,
            wake_id: uuid::Uuid::now_v7().to_string(),
            tails: tails.clone(),
        };
        execute(&ctx, &caller.user_id, claim, vec![])
            .await
            .map_err(refusal)?;
        let (subs, _) = ctx.streams.subscriptions(&ctx.log).await.map_err(refusal)?;
        let sub = subs.by_id.get(&id).cloned().ok_or_else(not_found)?;
        let wake = sub.wake.clone().ok_or_else(fenced)?;
        let answer = ClaimAnswer {
            token: ctx
                .webhooks
                .signing
                .token(&id, wake.generation, now_ms() / 1000),
            wake_id: wake.wake_id,
            generation: wake.generation,
            streams: links(&sub, Some(&tails)),
            lease_ttl_ms: sub.config.lease_ttl_ms,
        };
        Ok(Json(answer).into_response())
    };
    match claimed.await {
        Ok(r) | Err(r) => r,
    }
}
