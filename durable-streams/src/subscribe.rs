//! Durable Streams subscriptions, as their owner manages them (`/v1/stream/__ds/subscriptions/*`):
//! create (checking the configuration and the webhook URL policy), read, link and unlink
//! streams, delete; and the JWKS that publishes the webhook signing key. The server's routes
//! check the caller may manage subscriptions (ingest-only tokens may not) and call in here.
//!
//! Errors are the protocol's: `{"error": {"code", "message"}}` with its upper-case codes
//! (`INVALID_REQUEST`, `WEBHOOK_URL_REJECTED`, `FENCED`, `ALREADY_CLAIMED`, …), except that a
//! missing (or another user's) subscription is `not_found`, as a missing stream is.
#![allow(clippy::result_large_err)] // a refusal is a whole protocol answer

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

use crate::context::Context;
use crate::error::{settle, DurableError, Stop};
use crate::protocol::{header_str, refuse};
use crate::subscriptions::{execute, view};
use crate::webhooks::{check_webhook_url, WebhookTargets};

/// The longest subscription id, in characters (`check_id`; the document's `maxLength`).
pub const MAX_ID_CHARS: usize = 256;
/// The longest stream path a subscription names, in characters, once the slashes around it are
/// trimmed (`stream_list`; the document's `maxLength`).
pub const MAX_STREAM_PATH_CHARS: usize = 1024;

/// `PUT` body: what to watch and how to wake the consumer.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateSubscription {
    /// `webhook` or `pull-wake`.
    #[serde(rename = "type")]
    pub kind: SubscriptionType,
    /// A glob over stream paths relative to `/v1/stream/`: `*` one segment, `**` any number,
    /// each only as a whole segment. Empty: no glob.
    pub pattern: Option<String>,
    /// Streams named explicitly (relative paths). One of `pattern` and `streams` is needed.
    pub streams: Option<Vec<String>>,
    /// `webhook` only: where wakes are posted (`http` only to localhost or 127.x; otherwise
    /// `https`, not to a private address).
    pub webhook: Option<WebhookSpec>,
    /// `pull-wake` only: the stream (relative path) `wake` events are appended to.
    pub wake_stream: Option<String>,
    /// A wake's lease: 1,000 to 600,000 ms (default 30,000); `3000.0` is 3000.
    #[serde(
        default,
        deserialize_with = "threadstream_domain::integers::optional_i64"
    )]
    pub lease_ttl_ms: Option<i64>,
    pub description: Option<String>,
}

/// Where a webhook subscription posts its wakes.
#[derive(Debug, Deserialize, ToSchema)]
pub struct WebhookSpec {
    /// Of a `webhook` subscription: not empty, and a URL the server's `--webhook-targets` policy
    /// allows (else 400 `WEBHOOK_URL_REJECTED`).
    pub url: String,
}

/// `POST …/streams` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AddStreams {
    /// Relative stream paths, each non-empty.
    pub streams: Vec<String>,
}

/// The protocol's 400 for input it cannot take.
pub(crate) fn invalid(message: impl Into<String>) -> Response {
    refuse(
        StatusCode::BAD_REQUEST,
        ErrorCode::DsInvalidRequest,
        message,
    )
}

/// Parses a JSON object body into `T` (an empty body as `{}`), or the 400 naming what is wrong.
pub(crate) fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, Response> {
    let body: &[u8] = match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => b"{}",
        Some(b'{') => body,
        // serde reads a struct from a JSON array too (its fields in order); the protocol's
        // bodies are objects, as the document says.
        Some(_) => return Err(invalid("invalid JSON body: expected a JSON object")),
    };
    serde_json::from_slice(body).map_err(|e| invalid(format!("invalid JSON body: {e}")))
}

/// The answer to a refused subscription command (or a failure of the store).
pub(crate) fn refusal(e: DurableError) -> Stop {
    let DurableError::Refused(ThreadError::Subscription(r)) = e else {
        return Stop::Failed(e);
    };
    let (code, message) = (r.code(), r.to_string());
    Stop::Answer(match r {
        SubscriptionRefusal::NotFound => not_found(),
        SubscriptionRefusal::AlreadyClaimed { holder, generation } => {
            let mut body = ErrorBody::new(code, message);
            body.error.current_holder = Some(holder);
            body.error.generation = Some(generation);
            (StatusCode::CONFLICT, Json(body)).into_response()
        }
        _ => refuse(StatusCode::CONFLICT, code, message),
    })
}

pub(crate) fn not_found() -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "subscription not found",
    )
}

/// Subscription `id` if it is `user`'s.
pub(crate) async fn owned(ctx: &Context, user: &str, id: &str) -> Result<Subscription, Stop> {
    let (subs, _) = ctx.streams.subscriptions(&ctx.log).await?;
    match subs.by_id.get(id) {
        Some(s) if s.owner == user => Ok(s.clone()),
        _ => Err(not_found().into()),
    }
}

/// Where the request was sent: `http(s)://<Host>` (https behind a proxy that says so).
fn origin(ctx: &Context, headers: &HeaderMap) -> String {
    let scheme = match header_str(headers, "x-forwarded-proto") {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    match header_str(headers, "host") {
        Some(host) => format!("{scheme}://{host}"),
        None => format!("{scheme}://{}", ctx.addr),
    }
}

fn check_id(id: &str) -> Result<(), Response> {
    if id.is_empty() || id.chars().count() > MAX_ID_CHARS || id.chars().any(char::is_control) {
        return Err(invalid(format!(
            "a subscription id is 1 to {MAX_ID_CHARS} characters, without control characters"
        )));
    }
    Ok(())
}

/// Normalized relative stream paths, each non-empty.
fn stream_list(streams: &[String]) -> Result<Vec<String>, Response> {
    let mut out = Vec::new();
    for s in streams {
        let p = normalize_path(s);
        // Characters of the path as sent, as the document's `maxLength` counts them (not of
        // the path with its outer slashes trimmed).
        if p.is_empty()
            || s.chars().count() > MAX_STREAM_PATH_CHARS
            || p.chars().any(char::is_control)
        {
            return Err(invalid(format!(
                "streams must be non-empty paths of at most {MAX_STREAM_PATH_CHARS} characters"
            )));
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
    let lease_ttl_ms = match body.lease_ttl_ms {
        None => DEFAULT_LEASE_TTL_MS,
        Some(ms) => u64::try_from(ms)
            .ok()
            .filter(|ms| (MIN_LEASE_TTL_MS..=MAX_LEASE_TTL_MS).contains(ms))
            .ok_or_else(|| {
                invalid(format!(
                    "lease_ttl_ms must be an integer from {MIN_LEASE_TTL_MS} to {MAX_LEASE_TTL_MS}"
                ))
            })?,
    };
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

/// `PUT /v1/stream/__ds/subscriptions/:id` by `user`: create a subscription (201), or
/// re-confirm one with the same configuration (200).
pub async fn put(
    ctx: &Context,
    user: &str,
    id: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, DurableError> {
    settle(put_inner(ctx, user, id, headers, body).await)
}

async fn put_inner(
    ctx: &Context,
    user: &str,
    id: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, Stop> {
    check_id(id)?;
    let config = config_of(parse(body)?, ctx.webhook_targets)?;
    let origin = origin(ctx, headers);
    let create = SubscriptionCommand::Create {
        id: id.to_string(),
        config,
        callback_base: origin.clone(),
    };
    let status = match execute(ctx, user, create, vec![]).await {
        Ok(_) => StatusCode::CREATED,
        Err(DurableError::Refused(ThreadError::Subscription(SubscriptionRefusal::Exists))) => {
            StatusCode::OK
        }
        Err(e) => return Err(refusal(e)),
    };
    let sub = owned(ctx, user, id).await?;
    let view = view(id, &sub, &ctx.webhooks.signing, &origin);
    Ok((status, Json(view)).into_response())
}

/// `GET /v1/stream/__ds/subscriptions/:id` by `user`: the subscription, with each linked
/// stream's acked offset.
pub async fn get(
    ctx: &Context,
    user: &str,
    id: &str,
    headers: &HeaderMap,
) -> Result<Response, DurableError> {
    settle(
        async {
            let sub = owned(ctx, user, id).await?;
            let origin = origin(ctx, headers);
            Ok(Json(view(id, &sub, &ctx.webhooks.signing, &origin)).into_response())
        }
        .await,
    )
}

/// Runs a command on one of `user`'s subscriptions: 204, or the refusal.
pub async fn run(
    ctx: &Context,
    user: &str,
    command: SubscriptionCommand,
) -> Result<Response, DurableError> {
    settle(match execute(ctx, user, command, vec![]).await {
        Ok(_) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(e) => Err(refusal(e)),
    })
}

/// The streams a `POST …/streams` body links explicitly, or the 400 naming what is wrong.
pub fn streams_to_add(body: &[u8]) -> Result<Vec<String>, Response> {
    let b = parse::<AddStreams>(body)?;
    if b.streams.is_empty() {
        return Err(invalid("streams must be a non-empty array of paths"));
    }
    stream_list(&b.streams)
}

/// `GET /v1/stream/__ds/jwks.json`: the public key webhook deliveries are signed with.
pub fn jwks(ctx: &Context) -> Response {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wake::ClaimRequest;

    /// The configuration a body asks for, as `put` checks it (URLs under the loopback policy).
    fn config(body: &str) -> Result<SubscriptionConfig, Response> {
        config_of(parse(body.as_bytes())?, WebhookTargets::Loopback)
    }

    #[test]
    fn a_stream_path_is_counted_as_sent() {
        let streams = |path: &str| {
            let body =
                serde_json::json!({"type": "pull-wake", "streams": [path], "wake_stream": "w"});
            config(&body.to_string()).map(|c| c.streams)
        };
        let longest = "a".repeat(MAX_STREAM_PATH_CHARS);
        assert_eq!(streams(&longest).unwrap(), vec![longest.clone()]);
        assert_eq!(streams(&format!("/{}/", &longest[2..])).unwrap().len(), 1);
        // Over the limit as sent, though not once its outer slashes are trimmed.
        let refused = streams(&format!("//{longest}")).unwrap_err();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn a_body_is_a_json_object_or_empty() {
        let streams = r#"{"type": "pull-wake", "streams": ["a"], "wake_stream": "w"}"#;
        assert!(config(streams).is_ok());
        assert!(config(&format!("  \n{streams}")).is_ok());
        // A claim's one field as an array, which serde reads as the struct's fields in order.
        assert_eq!(
            parse::<ClaimRequest>(br#"{"worker": "w1"}"#)
                .unwrap()
                .worker,
            "w1"
        );
        let refused = parse::<ClaimRequest>(br#"["w1"]"#).unwrap_err();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        assert!(
            parse::<ClaimRequest>(b"   ").is_err(),
            "an empty claim has no worker"
        );
        assert!(parse::<serde_json::Value>(b"").is_ok_and(|v| v == serde_json::json!({})));
    }

    #[test]
    fn a_lease_is_an_integer_as_json_schema_counts_them() {
        let body = |lease: &str| {
            format!(
                r#"{{"type": "pull-wake", "streams": ["a"], "wake_stream": "w", "lease_ttl_ms": {lease}}}"#
            )
        };
        let lease = |l: &str| config(&body(l)).map(|c| c.lease_ttl_ms);
        // A zero fraction is an integer (docs/openapi.md): schemathesis sent `3842.0`.
        assert_eq!(lease("3842.0").unwrap(), 3842);
        assert_eq!(lease("3842").unwrap(), 3842);
        assert_eq!(lease("1e3").unwrap(), 1000);
        assert_eq!(lease("null").unwrap(), DEFAULT_LEASE_TTL_MS);
        for refused in [
            "3842.5",
            "999",
            "600001",
            "-1000",
            "1e300",
            "18446744073709551615",
        ] {
            let answer = lease(refused).expect_err(refused);
            assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{refused}");
        }
        let absent = r#"{"type": "pull-wake", "streams": ["a"], "wake_stream": "w"}"#;
        assert_eq!(config(absent).unwrap().lease_ttl_ms, DEFAULT_LEASE_TTL_MS);
    }
}
