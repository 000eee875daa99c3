//! The subscriptions' state: what a subscription was created with ([`SubscriptionConfig`]), its
//! linked streams and its wake, and every subscription by id ([`Subscriptions`], the state the
//! `Subscriptions` aggregate folds).
//!
//! These are values the events carry too (`subscription-created` holds a configuration,
//! `subscriptions-restored` a whole state), so they are in a file of their own that both the
//! events (`crate::event::subscription`) and the aggregate (`crate::subscription`) import.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::glob::glob_match;

/// How a subscription tells its consumer there is work: `webhook` (a signed POST to the
/// consumer's URL) or `pull-wake` (a `wake` event on a stream its workers read, then claimed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SubscriptionType {
    /// A signed POST to the consumer's URL.
    Webhook,
    /// A `wake` event appended to a Durable Stream the consumer's workers read, then claimed.
    PullWake,
}

impl SubscriptionType {
    pub fn as_str(self) -> &'static str {
        match self {
            SubscriptionType::Webhook => "webhook",
            SubscriptionType::PullWake => "pull-wake",
        }
    }
}

/// What a subscription was created with; a create of the same id with the same configuration
/// is a re-confirm, with another a conflict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionConfig {
    #[serde(rename = "type")]
    pub kind: SubscriptionType,
    /// A glob over stream paths (relative to `/v1/stream/`): `*` one segment, `**` any number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Streams named explicitly (relative paths), sorted, without duplicates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
    /// The stream (relative path) pull-wake `wake` events are appended to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_stream: Option<String>,
    pub lease_ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One linked stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Named by the create or `POST …/streams`.
    pub explicit: bool,
    /// Matched by the subscription's glob.
    pub glob: bool,
    /// The offset (log id) the consumer acknowledged through.
    pub acked: i64,
}

/// The current wake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    pub generation: u64,
    pub wake_id: String,
    /// Each linked stream's tail when the wake began.
    pub snapshot: BTreeMap<String, i64>,
    /// The pull-wake worker holding it.
    pub holder: Option<String>,
    /// Epoch ms: the lease ends then unless an ack or claim renews it.
    pub lease_until_ms: i64,
}

/// One subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    pub owner: String,
    pub config: SubscriptionConfig,
    /// Where its consumers call back (see `SubscriptionCreated::callback_base`).
    pub callback_base: String,
    /// The id and time of its `subscription-created`.
    pub created_id: i64,
    pub created_ms: i64,
    pub links: BTreeMap<String, Link>,
    /// The generation of the last wake (0: none yet).
    pub generation: u64,
    /// The wake that was last begun and not ended (its lease may have run out: see
    /// [`Subscription::live_wake`]).
    pub wake: Option<Wake>,
}

impl Subscription {
    /// The current wake, unless its lease ran out by `now_ms`.
    pub fn live_wake(&self, now_ms: i64) -> Option<&Wake> {
        self.wake.as_ref().filter(|w| now_ms < w.lease_until_ms)
    }

    /// Whether a linked stream has messages after its acked offset (`tails`: the streams'
    /// tails; a stream missing there has none).
    pub fn has_pending(&self, tails: &BTreeMap<String, i64>) -> bool {
        self.links
            .iter()
            .any(|(path, link)| tails.get(path).is_some_and(|t| *t > link.acked))
    }

    /// Whether the glob of this subscription matches `path` (relative).
    pub fn glob_matches(&self, path: &str) -> bool {
        self.config
            .pattern
            .as_deref()
            .is_some_and(|p| glob_match(p, path))
    }
}

/// The aggregate: every subscription, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscriptions {
    pub by_id: BTreeMap<String, Subscription>,
    /// Every user who created a subscription here, deleted ones included: whose records the
    /// stream holds (what an erasure of a user asks).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub owners: BTreeSet<String>,
}

impl Subscriptions {
    /// The state without `user`'s subscriptions: what a `subscriptions-restored` starts the
    /// stream again from when `user` is erased. Everyone else's are kept as they are (links,
    /// acked offsets, generations, wakes).
    pub fn without_user(&self, user: &str) -> Subscriptions {
        let by_id: BTreeMap<String, Subscription> = self
            .by_id
            .iter()
            .filter(|(_, s)| s.owner != user)
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        let owners = by_id.values().map(|s| s.owner.clone()).collect();
        Subscriptions { by_id, owners }
    }
}
