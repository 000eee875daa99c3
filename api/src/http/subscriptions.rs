//! Durable Streams subscriptions: the protocol's reserved `/v1/stream/__ds/*` routes. A
//! subscription is created, read and deleted (with its explicit streams) by its owner, like a
//! stream; its wakes are acked through wake tokens. The JWKS that publishes the webhook signing
//! key is public. The engine is `threadstream_durable_streams` (`subscribe`, `wake`) and the
//! domain's `Subscriptions` aggregate; these routes check the caller and hand it the request.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use threadstream_domain::event::subscription::SubscriptionType;
use threadstream_domain::subscription::{normalize_path, SubscriptionCommand};
use threadstream_durable_streams::subscribe::{self, AddStreams, CreateSubscription};
use threadstream_durable_streams::subscriptions::SubscriptionView;
use threadstream_durable_streams::wake::{
    self, AckAnswer, AckRequest, ClaimAnswer, ClaimRequest, ReleaseRequest,
};

use crate::durable::answer;
use crate::extract::Caller;
use crate::ApiContext;

/// The caller may manage subscriptions (ingest-only tokens may not).
fn manager(caller: &Caller) -> Result<(), Response> {
    crate::access::durable_streams_user(caller).map_err(IntoResponse::into_response)
}

/// `PUT /v1/stream/__ds/subscriptions/:id`: create a subscription (201), or re-confirm one with
/// the same configuration (200).
#[utoipa::path(
    put,
    operation_id = "subscriptionsPut",
    path = "/v1/stream/__ds/subscriptions/{id}",
    tag = "durable-streams",
    params(("id" = String, Path, description = "The subscription id")),
    request_body(content = CreateSubscription, content_type = "application/json"),
    responses(
        (status = 201, description = "Created", body = SubscriptionView),
        (status = 200, description = "It exists with the same configuration", body = SubscriptionView),
        (status = 400, description = "Bad id, JSON, type, pattern, streams, webhook URL, wake stream or lease (`INVALID_REQUEST`), or a webhook URL the policy refuses (`WEBHOOK_URL_REJECTED`)", body = crate::error::ErrorBody),
        (status = 403, description = "An ingest-only token", body = crate::error::ErrorBody),
        (status = 404, description = "Another user's subscription (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "It exists with another configuration (`SUBSCRIPTION_ALREADY_EXISTS`)", body = crate::error::ErrorBody),
    )
)]
pub async fn put(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = manager(&caller) {
        return r;
    }
    answer(subscribe::put(&ctx.durable, &caller.user_id, &id, &headers, &body).await)
}

/// `GET /v1/stream/__ds/subscriptions/:id`: the subscription, with each linked stream's acked
/// offset.
#[utoipa::path(
    get,
    operation_id = "subscriptionsGet",
    path = "/v1/stream/__ds/subscriptions/{id}",
    tag = "durable-streams",
    params(("id" = String, Path, description = "The subscription id")),
    responses(
        (status = 200, description = "The subscription", body = SubscriptionView),
        (status = 403, description = "An ingest-only token", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription, or another user's (`not_found`)", body = crate::error::ErrorBody),
    )
)]
pub async fn get(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = manager(&caller) {
        return r;
    }
    answer(subscribe::get(&ctx.durable, &caller.user_id, &id, &headers).await)
}

/// `DELETE /v1/stream/__ds/subscriptions/:id`: the subscription ends (its wakes with it).
#[utoipa::path(
    delete,
    operation_id = "subscriptionsDelete",
    path = "/v1/stream/__ds/subscriptions/{id}",
    tag = "durable-streams",
    params(("id" = String, Path, description = "The subscription id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "An ingest-only token", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription, or another user's (`not_found`)", body = crate::error::ErrorBody),
    )
)]
pub async fn delete(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(id): Path<String>,
) -> Response {
    run_owned(&ctx, &caller, SubscriptionCommand::Delete { id }).await
}

/// Runs a command on one of `caller`'s subscriptions: 204, or the refusal.
async fn run_owned(ctx: &ApiContext, caller: &Caller, command: SubscriptionCommand) -> Response {
    if let Err(r) = manager(caller) {
        return r;
    }
    answer(subscribe::run(&ctx.durable, &caller.user_id, command).await)
}

/// `POST /v1/stream/__ds/subscriptions/:id/streams`: link more streams explicitly (acked from
/// now on).
#[utoipa::path(
    post,
    operation_id = "subscriptionsAddStreams",
    path = "/v1/stream/__ds/subscriptions/{id}/streams",
    tag = "durable-streams",
    params(("id" = String, Path, description = "The subscription id")),
    request_body(content = AddStreams, content_type = "application/json"),
    responses(
        (status = 204, description = "Linked"),
        (status = 400, description = "Bad JSON or stream paths (`INVALID_REQUEST`)", body = crate::error::ErrorBody),
        (status = 403, description = "An ingest-only token", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription, or another user's (`not_found`)", body = crate::error::ErrorBody),
    )
)]
pub async fn add_streams(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let streams = match subscribe::streams_to_add(&body) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let link = SubscriptionCommand::Link {
        id,
        streams,
        explicit: true,
    };
    run_owned(&ctx, &caller, link).await
}

/// `DELETE /v1/stream/__ds/subscriptions/:id/streams/:path`: the stream is no longer named (a
/// stream the pattern matches stays linked through it).
#[utoipa::path(
    delete,
    operation_id = "subscriptionsRemoveStream",
    path = "/v1/stream/__ds/subscriptions/{id}/streams/{*path}",
    tag = "durable-streams",
    params(("id" = String, Path, description = "The subscription id"), ("path" = String, Path, description = "The relative stream path (URL-encoded, or with its `/`)")),
    responses(
        (status = 204, description = "Unlinked (or was not named)"),
        (status = 403, description = "An ingest-only token", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription, or another user's (`not_found`)", body = crate::error::ErrorBody),
    )
)]
pub async fn remove_stream(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path((id, path)): Path<(String, String)>,
) -> Response {
    let unlink = SubscriptionCommand::Unlink {
        id,
        stream: normalize_path(&path),
    };
    run_owned(&ctx, &caller, unlink).await
}

/// `GET /v1/stream/__ds/jwks.json`: the public key webhook deliveries are signed with (public:
/// consumers verify with it).
#[utoipa::path(
    get,
    operation_id = "subscriptionsJwks",
    path = "/v1/stream/__ds/jwks.json",
    tag = "durable-streams",
    security(()),
    responses((status = 200, description = "A JWK Set of one OKP Ed25519 key (`alg` EdDSA, `kid` `ds_…`)", content_type = "application/jwk-set+json", body = Object))
)]
pub async fn jwks(State(ctx): State<ApiContext>) -> Response {
    subscribe::jwks(&ctx.durable)
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
        (status = 400, description = "Bad JSON or offsets (`INVALID_REQUEST`)", body = crate::error::ErrorBody),
        (status = 401, description = "No, or an invalid, wake token (`TOKEN_INVALID`, `TOKEN_EXPIRED`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "Not a webhook subscription (`INVALID_REQUEST`), the wake is over (`FENCED`), or an offset is not ackable (`INVALID_OFFSET`)", body = crate::error::ErrorBody),
    )
)]
pub async fn callback(
    State(ctx): State<ApiContext>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let via = SubscriptionType::Webhook;
    answer(wake::ack(&ctx.durable, &headers, &id, &body, via).await)
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
        (status = 400, description = "Bad JSON or offsets (`INVALID_REQUEST`)", body = crate::error::ErrorBody),
        (status = 401, description = "No, or an invalid, wake token (`TOKEN_INVALID`, `TOKEN_EXPIRED`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "Not a pull-wake subscription (`INVALID_REQUEST`), the wake is over (`FENCED`), or an offset is not ackable (`INVALID_OFFSET`)", body = crate::error::ErrorBody),
    )
)]
pub async fn ack(
    State(ctx): State<ApiContext>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let via = SubscriptionType::PullWake;
    answer(wake::ack(&ctx.durable, &headers, &id, &body, via).await)
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
        (status = 400, description = "Bad JSON (`INVALID_REQUEST`)", body = crate::error::ErrorBody),
        (status = 401, description = "No, or an invalid, wake token (`TOKEN_INVALID`, `TOKEN_EXPIRED`)", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "Not a pull-wake subscription (`INVALID_REQUEST`), or the wake is over (`FENCED`)", body = crate::error::ErrorBody),
    )
)]
pub async fn release(
    State(ctx): State<ApiContext>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(wake::release(&ctx.durable, &headers, &id, &body).await)
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
        (status = 400, description = "Bad JSON or worker (`INVALID_REQUEST`)", body = crate::error::ErrorBody),
        (status = 403, description = "An ingest-only token", body = crate::error::ErrorBody),
        (status = 404, description = "No such subscription, or another user's (`not_found`)", body = crate::error::ErrorBody),
        (status = 409, description = "Not a pull-wake subscription (`INVALID_REQUEST`), another worker holds the wake (`ALREADY_CLAIMED`, with `current_holder`), or nothing is pending (`NO_PENDING_WORK`)", body = crate::error::ErrorBody),
    )
)]
pub async fn claim(
    State(ctx): State<ApiContext>,
    caller: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = manager(&caller) {
        return r;
    }
    answer(wake::claim(&ctx.durable, &caller.user_id, &id, &body).await)
}
