//! The events of Durable Streams subscriptions (internal: stored in the log stream
//! `stream:__ds/subscriptions`, never on the n8n stream). The rules that produce them are the
//! `Subscriptions` aggregate's (`domain/src/subscription/`).
//!
//! Offsets here are log ids, as a Durable Stream's offsets are (`format_offset` shows them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

// What a subscription is created with is part of the aggregate's state too, so it is defined
// with that state.
pub use crate::subscription::state::{SubscriptionConfig, SubscriptionType};

/// `subscription-created`. Its explicit streams are linked from this event on (acked: this
/// event's id, i.e. everything stored before it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionCreated {
    pub id: String,
    pub owner: String,
    #[serde(flatten)]
    pub config: SubscriptionConfig,
    /// The origin (`http://host:port`) the create was sent to: wake notifications name their
    /// callback URL under it.
    pub callback_base: String,
}

/// `subscription-deleted`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionRef {
    pub id: String,
}

/// `subscription-linked`: streams join the subscription. Explicit ones (`POST …/streams`) are
/// acked through this event's id; ones a glob found (their first message after the
/// subscription began) through the subscription's creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionLinked {
    pub id: String,
    pub streams: Vec<String>,
    pub explicit: bool,
}

/// `subscription-unlinked`: a stream is no longer named explicitly (`DELETE …/streams/:path`);
/// a stream the glob also matches stays linked through the glob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionUnlinked {
    pub id: String,
    pub stream: String,
}

/// `subscription-woken`: a wake begins (generation `generation`), its lease running from this
/// event's time; `snapshot` is each linked stream's tail when it began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionWoken {
    pub id: String,
    pub generation: u64,
    pub wake_id: String,
    pub snapshot: BTreeMap<String, i64>,
    /// The stream whose message began it.
    pub stream: String,
}

/// `subscription-claimed`: a pull-wake worker holds the wake; its lease starts again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionClaimed {
    pub id: String,
    pub generation: u64,
    pub worker: String,
}

/// One stream's new acked offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamAck {
    pub stream: String,
    pub offset: i64,
}

/// `subscription-acked`: the consumer processed the streams through these offsets; `done` ends
/// the wake (otherwise its lease starts again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionAcked {
    pub id: String,
    pub generation: u64,
    pub acks: Vec<StreamAck>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
}

/// `subscription-released`: a pull-wake worker let go of its wake without finishing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionReleased {
    pub id: String,
    pub generation: u64,
}

/// `subscriptions-restored`: the first event of the subscriptions' log stream begun anew, with
/// the state it starts from. Only an erasure of a user stores it: the stream's events all go in
/// its transaction (they hold the user's subscriptions among everyone's, and a stream cannot
/// lose events in its middle: seqs stay contiguous), and everyone else's subscriptions are
/// restored by this one event, as they were.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionsRestored {
    pub subscriptions: crate::subscription::state::Subscriptions,
}
