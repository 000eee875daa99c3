//! What the engine needs of the server it runs in: one cheap-to-clone handle.

use std::net::SocketAddr;
use std::time::Duration;

use threadstream_store::EventLog;
use tokio::sync::watch;

use crate::streams::Streams;
use crate::webhooks::{WebhookTargets, Webhooks};

/// The log, the readers' folds, the webhook key and client, and the settings the protocol
/// reads. Each field is a handle or a copy: cloning is cheap.
#[derive(Clone)]
pub struct Context {
    pub log: EventLog,
    /// Each stream's fold, as readers see it.
    pub streams: Streams,
    /// The subscriptions' webhook signing key and HTTP client.
    pub webhooks: Webhooks,
    /// Flips to `true` when the server starts shutting down: waiting readers answer and end.
    pub shutdown: watch::Receiver<bool>,
    /// How long a long-poll waits for data before answering 204 (`--stream-long-poll-secs`).
    pub long_poll: Duration,
    /// Which URLs subscriptions may send webhooks to (`--webhook-targets`).
    pub webhook_targets: WebhookTargets,
    /// Where the server listens: the origin of a subscription's callback URL when the request
    /// names no `Host`.
    pub addr: SocketAddr,
}

/// Who acts on a stream or a subscription: the caller's user, and whether they may read every
/// user's streams (an admin).
#[derive(Clone, Debug)]
pub struct Actor {
    pub user_id: String,
    pub admin: bool,
}
