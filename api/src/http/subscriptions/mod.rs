//! Durable Streams subscriptions: the protocol's reserved `/v1/stream/__ds/*` routes. A
//! subscription is created, read and deleted (with its explicit streams) by its owner, like a
//! stream; its wakes are acked through wake tokens (`wake`). The JWKS that publishes the webhook
//! signing key is public. State and rules: `crate::durable::subscriptions` and the domain's
//! `Subscriptions` aggregate.
//!
//! Errors are the protocol's: `{"error": {"code", "message"}}` with its upper-case codes
//! (`INVALID_REQUEST`, `WEBHOOK_URL_REJECTED`, `FENCED`, `ALREADY_CLAIMED`, …), except that a
//! missing (or another user's) subscription is `not_found`, as a missing stream is.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer

mod wake;

pub use wake::{
    __path_ack, __path_callback, __path_claim, __path_release, ack, callback, claim, release,
};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use threadstream_domain::event::subscription::{SubscriptionConfig, SubscriptionType};
use threadstream_domain::subscription::{
    check_pattern, normalize_path, Subscription, SubscriptionCommand, SubscriptionRefusal,
    DEFAULT_LEASE_TTL_MS, MAX_LEASE_TTL_MS, MIN_LEASE_TTL_MS,
};
use threadstream_domain::{ErrorBody, ErrorCode, ThreadError};
use utoipa::ToSchema;

use crate::durable::protocol::{header_str, refuse};
use crate::durable::subscriptions::{
    check_webhook_url, execute, view, SubscriptionView, WebhookTargets,
};
use crate::error::ApiError;
use crate::extract::Caller;
use crate::ApiContext;

/// `PUT` body: what to watch and how to wake the consumer.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateSubscription {
    /// `webhook` or `pull-wake`.
    #[serde(rename = "type")]
    #[schema(value_type = String, example = "webhook")]
    pub kind: SubscriptionType,
    /// A glob over stream paths relative to `/v1/stream/`: `*` one segment, `**` any number.
    pub pattern: Option<String>,
    /// Streams named explicitly (relative paths). One of `pattern` and `streams` is needed.
    pub streams: Option<Vec<String>>,
    /// `webhook` only: where wakes are posted (`http` only to localhost or 127.x; otherwise
    /// `https`, not to a private address).
    pub webhook: Option<WebhookSpec>,
    /// `pull-wake` only: the stream (relative path) `wake` events are appended to.
    pub wake_stream: Option<String>,
    /// A wake's lease: 1,000 to 600,000 ms (default 30,000).
    pub lease_ttl_ms: Option<u64>,
    pub description: Option<String>,
}

/// Where a webhook subscription posts its wakes.
#[derive(Debug, Deserialize, ToSchema)]
pub struct WebhookSpec {
    pub url: String,
}

/// `POST …/streams` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AddStreams {
    /// Relative stream paths, each non-empty.
    pub streams: Vec<String>,
}

/// The protocol's 400 for input it cannot take.
pub(super) fn invalid(message: impl Into<String>) -> Response {
    refuse(
        StatusCode::BAD_REQUEST,
        ErrorCode::DsInvalidRequest,
        message,
    )
}

/// Parses a JSON body into `T` (an empty body as `{}`), or the 400 naming what is wrong.
pub(super) fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, Response> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| invalid(format!("invalid JSON body: {e}")))
}

/// The answer to a refused subscription command (or a failure of the store).
pub(super) fn refusal(e: ApiError) -> Response {
    let ApiError::Rule(ThreadError::Subscription(r)) = e else {
        return e.into_response();
    };
    let (code, message) = (r.code(), r.to_string());
    match r {
        SubscriptionRefusal::NotFound => not_found(),
        SubscriptionRefusal::WrongType(_) => invalid(message),
        SubscriptionRefusal::AlreadyClaimed { holder, generation } => {
            let mut body = ErrorBody::new(code, message);
            body.error.current_holder = Some(holder);
            body.error.generation = Some(generation);
            (StatusCode::CONFLICT, Json(body)).into_response()
        }
        _ => refuse(StatusCode::CONFLICT, code, message),
    }
}

pub(super) fn not_found() -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "subscription not found",
    )
}

/// The caller may manage subscriptions (ingest-only tokens may not).
fn manager(caller: &Caller) -> Result<(), Response> {
    crate::access::durable_streams_user(caller).map_err(IntoResponse::into_response)
}

/// Subscription `id` if it is `caller`'s.
pub(super) async fn owned(
    ctx: &ApiContext,
    caller: &Caller,
    id: &str,
) -> Result<Subscription, Response> {
    manager(caller)?;
    let (subs, _) = ctx.streams.subscriptions(&ctx.log).await.map_err(refusal)?;
    match subs.by_id.get(id) {
        Some(s) if s.owner == caller.user_id => Ok(s.clone()),
        _ => Err(not_found()),
    }
}

/// Where the request was sent: `http(s)://<Host>` (https behind a proxy that says so).
fn origin(ctx: &ApiContext, headers: &HeaderMap) -> String {
    let scheme = match header_str(headers, "x-forwarded-proto") {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    match header_str(headers, "host") {
        Some(host) => format!("{scheme}://{host}"),
        None => format!("{scheme}://{}", ctx.config.addr),
    }
}

fn check_id(id: &str) -> Result<(), Response> {
    if id.is_empty() || id.chars().count() > 256 || id.chars().any(char::is_control) {
        return Err(invalid(
            "a subscription id is 1 to 256 characters, without control characters",
        ));
    }
    Ok(())
}

/// Normalized relative stream paths, each non-empty.
fn stream_list(streams: &[String]) -> Result<Vec<String>, Response> {
    let mut out = Vec::new();
    for s in streams {
        let p = normalize_path(s);
        // Characters, as the document's `maxLength` counts them.
        if p.is_empty() || p.chars().count() > 1024 || p.chars().any(char::is_control) {
            return Err(invalid(
                "streams must be non-empty paths of at most 1024 characters",
            ));
        }
        out.push(p);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The configuration a create asks for, checked.
fn config_of(
    body: CreateSubscription,
    targets: WebhookTargets,
) -> Result<SubscriptionConfig, Response> {
    let pattern = body
        .pattern
        .filter(|p| !p.is_empty())
        .map(|p| check_pattern(&p).map(|()| normalize_path(&p)))
        .transpose()
        .map_err(invalid)?;
    let streams = stream_list(body.streams.as_deref().unwrap_or_default())?;
    if pattern.is_none() && streams.is_empty() {
        return Err(invalid("at least one of pattern or streams is required"));
    }
    let lease_ttl_ms = body.lease_ttl_ms.unwrap_or(DEFAULT_LEASE_TTL_MS);
    if !(MIN_LEASE_TTL_MS..=MAX_LEASE_TTL_MS).contains(&lease_ttl_ms) {
        return Err(invalid(
            "lease_ttl_ms must be an integer from 1000 to 600000",
        ));
    }
    let webhook_url = match body.kind {
        SubscriptionType::Webhook => {
            let url = body.webhook.map(|w| w.url).filter(|u| !u.is_empty());
            let url = url.ok_or_else(|| invalid("webhook subscriptions require webhook.url"))?;
            check_webhook_url(&url, targets)
                .map_err(|m| refuse(StatusCode::BAD_REQUEST, ErrorCode::DsWebhookUrlRejected, m))?;
            Some(url)
        }
        SubscriptionType::PullWake => None,
    };
    let wake_stream = match body.kind {
        SubscriptionType::PullWake => {
            let wake = body.wake_stream.as_deref().map(normalize_path);
            let wake = wake.filter(|w| !w.is_empty());
            Some(wake.ok_or_else(|| invalid("pull-wake subscriptions require wake_stream"))?)
        }
        SubscriptionType::Webhook => None,
    };
    Ok(SubscriptionConfig {
        kind: body.kind,
        pattern,
        streams,
        webhook_url,
        wake_stream,
        lease_ttl_ms,
        description: body.description,
    })
}

/// `PUT /v1/stream/__ds/subscriptions/:id`: create a subscription (201), or re-confirm one with
/// the same configuration (200).
#[utoipa::path(
    put,
    operation_id = "subscriptionsPut",
    path = "/v1/stream/__ds/subscriptions/{id}",
    tag = "durable-streams",
    params(("id" = String, Path, description = "The subscription id: 1 to 256 characters, no control characters")),
    request_body(content = CreateSubscription, content_type = "application/json"),
    responses(
        (status = 201, description = "Created", body = SubscriptionView),
        (status = 200, description = "It exists with the same configuration", body = SubscriptionView),
        (status = 400, description = "Bad JSON, type, pattern, streams or lease (`INVALID_REQUEST`), or a webhook URL the policy refuses (`WEBHOOK_URL_REJECTED`)", body = crate::error::ErrorBody),
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
    match put_inner(&ctx, &caller, &id, &headers, &body).await {
        Ok(r) | Err(r) => r,
    }
}

async fn put_inner(
    ctx: &ApiContext,
    caller: &Caller,
    id: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, Response> {
    manager(caller)?;
    check_id(id)?;
    let config = config_of(parse(body)?, ctx.config.webhook_targets)?;
    let origin = origin(ctx, headers);
    let create = SubscriptionCommand::Create {
        id: id.to_string(),
        config,
        callback_base: origin.clone(),
    };
    let status = match execute(ctx, &caller.user_id, create, vec![]).await {
        Ok(_) => StatusCode::CREATED,
        Err(ApiError::Rule(ThreadError::Subscription(SubscriptionRefusal::Exists))) => {
            StatusCode::OK
        }
        Err(e) => return Err(refusal(e)),
    };
    let sub = owned(ctx, caller, id).await?;
    let view = view(id, &sub, &ctx.webhooks.signing, &origin);
    Ok((status, Json(view)).into_response())
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
    match owned(&ctx, &caller, &id).await {
        Ok(sub) => {
            let origin = origin(&ctx, &headers);
            Json(view(&id, &sub, &ctx.webhooks.signing, &origin)).into_response()
        }
        Err(r) => r,
    }
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
    match execute(ctx, &caller.user_id, command, vec![]).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => refusal(e),
    }
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
    let streams = match parse::<AddStreams>(&body).and_then(|b| {
        if b.streams.is_empty() {
            return Err(invalid("streams must be a non-empty array of paths"));
        }
        stream_list(&b.streams)
    }) {
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
    let body = ctx.webhooks.signing.jwks().to_string();
    (
        [
            ("content-type", "application/jwk-set+json"),
            ("cache-control", "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}
