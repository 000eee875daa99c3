//! Durable Streams subscriptions, what their routes (`crate::subscribe`, `crate::wake`) and
//! their dispatcher (`crate::dispatch`) share: paths, the streams' tails, the wire shapes, and
//! executing a command on the subscriptions' log stream.
//!
//! The rules are the `Subscriptions` aggregate's (`threadstream_domain::subscription`); its
//! state is folded from the log like a stream's ([`crate::streams::Streams::subscriptions`]).

use std::collections::BTreeMap;

use serde::Serialize;
use threadstream_domain::clock::now_ms;
use threadstream_domain::durable_stream::{format_offset, log_stream_id};
use threadstream_domain::event::subscription::SubscriptionType;
use threadstream_domain::subscription::SubscriptionsChange;
use threadstream_domain::subscription::{Subscription, SubscriptionCommand, LOG_STREAM};
use threadstream_domain::StoredEvent;
use threadstream_store::{Part, StoreError};
use utoipa::ToSchema;

use crate::context::Context;
use crate::error::DurableError;
use crate::signing::Signing;

/// The protocol's reserved control namespace under the streams' root.
pub const CONTROL_PREFIX: &str = "/v1/stream/__ds";
/// Where the signing key is published.
pub const JWKS_PATH: &str = "/v1/stream/__ds/jwks.json";
/// A subscription's routes are under this, then its id.
pub const SUBSCRIPTIONS_PATH: &str = "/v1/stream/__ds/subscriptions";
const STREAM_ROOT: &str = "/v1/stream/";

/// A stream's path relative to the streams' root, as subscriptions name streams; `None` for a
/// path outside it or in the reserved `__ds` namespace.
pub fn relative_path(stream_path: &str) -> Option<&str> {
    let rel = stream_path.strip_prefix(STREAM_ROOT)?;
    let reserved = rel == "__ds" || rel.starts_with("__ds/");
    (!rel.is_empty() && !reserved).then_some(rel)
}

/// The stream path (as the `/v1/stream/*` routes key streams) of a relative path.
pub fn stream_path(relative: &str) -> String {
    format!("{STREAM_ROOT}{relative}")
}

/// Each linked stream's tail (the offset after its last message; 0 when it has none or does
/// not exist), now.
pub async fn tails(ctx: &Context, sub: &Subscription) -> Result<BTreeMap<String, i64>, StoreError> {
    let mut out = BTreeMap::new();
    for path in sub.links.keys() {
        let full = stream_path(path);
        let stream = ctx.streams.current(&ctx.log, &full).await?;
        let tail = stream
            .live(now_ms(), ctx.streams.last_read_ms(&full))
            .map_or(0, |l| l.current_offset());
        out.insert(path.clone(), tail);
    }
    Ok(out)
}

/// An acked offset as the protocol shows it: `-1` before everything.
pub fn show_offset(offset: i64) -> String {
    if offset <= 0 {
        "-1".into()
    } else {
        format_offset(offset)
    }
}

/// A linked stream as a subscription shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LinkView {
    /// Relative to `/v1/stream/`.
    pub path: String,
    /// `explicit` (named) or `glob` (matched by the pattern).
    pub link_type: &'static str,
    /// The offset the consumer acknowledged through (`-1`: before everything).
    pub acked_offset: String,
    /// Wake notifications and claims: the offset after its last message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_offset: Option<String>,
    /// Wake notifications and claims: whether it has messages after `acked_offset`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_pending: Option<bool>,
}

/// The linked streams; with `tails`, as a wake notification and a claim show them.
pub fn links(sub: &Subscription, tails: Option<&BTreeMap<String, i64>>) -> Vec<LinkView> {
    sub.links
        .iter()
        .map(|(path, link)| {
            let tail = tails.map(|t| t.get(path).copied().unwrap_or(0));
            LinkView {
                path: path.clone(),
                link_type: if link.explicit { "explicit" } else { "glob" },
                acked_offset: show_offset(link.acked),
                tail_offset: tail.map(format_offset),
                has_pending: tail.map(|t| t > link.acked),
            }
        })
        .collect()
}

/// How webhook deliveries are signed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SigningView {
    /// `ed25519`.
    pub alg: &'static str,
    /// The key id (`ds_…`) in the JWKS.
    pub kid: String,
    /// Where the JWKS is served.
    pub jwks_url: String,
}

/// Where wakes are posted.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WebhookView {
    pub url: String,
    pub signing: SigningView,
}

/// A subscription, as `PUT` and `GET` answer it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SubscriptionView {
    pub id: String,
    /// The same as `id`.
    pub subscription_id: String,
    #[serde(rename = "type")]
    pub kind: SubscriptionType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    pub streams: Vec<LinkView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wake_stream: Option<String>,
    pub lease_ttl_ms: u64,
    /// RFC 3339.
    pub created_at: String,
    /// `active`.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A subscription as `GET`/`PUT` answer it; `origin` is where the request was sent.
pub fn view(id: &str, sub: &Subscription, signing: &Signing, origin: &str) -> SubscriptionView {
    let c = &sub.config;
    SubscriptionView {
        id: id.to_string(),
        subscription_id: id.to_string(),
        kind: c.kind,
        pattern: c.pattern.clone(),
        streams: links(sub, None),
        webhook: c.webhook_url.as_ref().map(|url| WebhookView {
            url: url.clone(),
            signing: SigningView {
                alg: "ed25519",
                kid: signing.kid().to_string(),
                jwks_url: format!("{origin}{JWKS_PATH}"),
            },
        }),
        wake_stream: c.wake_stream.clone(),
        lease_ttl_ms: c.lease_ttl_ms,
        created_at: jiff::Timestamp::from_millisecond(sub.created_ms)
            .map(|t| t.to_string())
            .unwrap_or_default(),
        status: "active",
        description: c.description.clone(),
    }
}

/// What JavaScript's `encodeURIComponent` escapes (the reference server encodes ids so).
const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// The URL of a subscription's action (`callback`, …) under `base`.
pub fn action_url(base: &str, id: &str, action: &str) -> String {
    let id = percent_encoding::utf8_percent_encode(id, COMPONENT);
    format!("{base}{SUBSCRIPTIONS_PATH}/{id}/{action}")
}

/// Decides `command` by `by` on the subscriptions' log stream (and, in the same append, the
/// `extra` parts) and stores what it decides.
pub async fn execute(
    ctx: &Context,
    by: &str,
    command: SubscriptionCommand,
    extra: Vec<Part>,
) -> Result<Vec<StoredEvent>, DurableError> {
    let mut parts = vec![Part::new(
        LOG_STREAM,
        vec![SubscriptionsChange::Command {
            command,
            by: by.to_string(),
            now_ms: now_ms(),
        }],
    )];
    parts.extend(extra);
    Ok(ctx.log.append_parts(parts).await?)
}

/// The log stream id of a relative stream path.
pub fn log_id(relative: &str) -> String {
    log_stream_id(&stream_path(relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_leave_out_the_control_namespace() {
        assert_eq!(relative_path("/v1/stream/events/a"), Some("events/a"));
        assert_eq!(relative_path("/v1/stream/__ds/subscriptions/x"), None);
        assert_eq!(relative_path("/v1/threads/t"), None);
        assert_eq!(stream_path("events/a"), "/v1/stream/events/a");
    }
}
