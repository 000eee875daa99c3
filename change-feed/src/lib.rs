//! The change feed (`--change-feed nats://HOST:PORT`): every committed event of the log, in id
//! order, published to a NATS JetStream stream, exactly once (docs/integrations.md, "Change
//! feed").
//!
//! - One instance of a fleet publishes: the one holding [`Job::ChangeFeed`]'s lock (on SQLite,
//!   the one process). The others stand by and take over within a second of it going away.
//! - Each event is one message on `threadstream.events.<token>` ([`subject`]) with `Nats-Msg-Id`
//!   set to its global id, so JetStream drops a second copy of an id inside the stream's
//!   duplicate window.
//! - The publisher resumes after the highest id the stream holds (its last message's
//!   `Nats-Msg-Id`), or after the id stored in the log's checkpoints if that is higher; it
//!   stores the id it has seen acknowledged at most once a second ([`publisher`]).
//! - It reads the log like any reader (pages after its cursor, woken by the head), so appends
//!   never wait for it.
//! - An erasure's tombstone purges the erased streams' subjects before the tombstone itself is
//!   published.
//!
//! [`Job::ChangeFeed`]: threadstream_store::Job::ChangeFeed

pub mod jetstream;
pub mod metrics;
pub mod publisher;
pub mod subject;

use std::sync::{Arc, Mutex};

use threadstream_store::{EventLog, StoreError};

/// The JetStream stream the feed publishes to when no name is given.
pub const DEFAULT_STREAM: &str = "THREADSTREAM";

/// Where the feed publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeFeedConfig {
    /// The NATS server, `nats://HOST:PORT` (several, comma-separated, for a cluster).
    pub url: String,
    /// The JetStream stream; created, capturing `threadstream.events.>`, when missing.
    pub stream: String,
}

impl ChangeFeedConfig {
    pub fn new(url: impl Into<String>) -> Self {
        ChangeFeedConfig {
            url: url.into(),
            stream: DEFAULT_STREAM.into(),
        }
    }

    /// The name of the log checkpoint holding the highest id the stream acknowledged.
    pub fn checkpoint_name(&self) -> String {
        format!("change-feed:{}", self.stream)
    }
}

/// What this instance's publisher knows, for `GET /instance-ai/admin/change-feed` and the
/// metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublisherState {
    /// This instance holds the feed's lock and publishes.
    pub publishing: bool,
    /// Its connection to NATS is up and the stream is there.
    pub connected: bool,
    /// The highest id the stream acknowledged (0: none yet).
    pub published_id: i64,
    /// Events this process published (JetStream's duplicates included).
    pub published_events: u64,
    /// Why the last attempt to publish failed, while it is not publishing again.
    pub last_error: Option<String>,
}

/// The feed's handle: cheap to clone. The state sits behind one `std` mutex, held only to read
/// or replace a few fields (never across an await), so the publisher and the admin route never
/// wait on each other for longer than a copy.
#[derive(Clone)]
pub struct ChangeFeed {
    config: Arc<ChangeFeedConfig>,
    state: Arc<Mutex<PublisherState>>,
}

/// How far the bus is behind the log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lag {
    /// The log's highest id.
    pub head_id: i64,
    /// The highest id the stream acknowledged, as this instance knows it: the publisher's own
    /// count where it publishes, else the stored checkpoint (written at most once a second).
    pub published_id: i64,
    /// Ids after `published_id` up to the head: the events not yet on the bus (an erased id in
    /// between counts too).
    pub events: i64,
    /// Age of the oldest event not yet on the bus (0 when none is).
    pub seconds: f64,
}

impl ChangeFeed {
    pub fn new(config: ChangeFeedConfig) -> Self {
        ChangeFeed {
            config: Arc::new(config),
            state: Arc::default(),
        }
    }

    pub fn config(&self) -> &ChangeFeedConfig {
        &self.config
    }

    /// A copy of the publisher's state.
    pub fn state(&self) -> PublisherState {
        self.state.lock().expect("feed state lock").clone()
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut PublisherState)) {
        f(&mut self.state.lock().expect("feed state lock"));
    }

    /// How far the bus is behind the log now.
    pub async fn lag(&self, log: &EventLog) -> Result<Lag, StoreError> {
        let state = self.state();
        let published_id = if state.publishing {
            state.published_id
        } else {
            log.backend()
                .checkpoint(&self.config.checkpoint_name())
                .await?
        };
        lag_after(log, published_id).await
    }

    /// Starts the publisher, which runs until `stop` fires.
    pub fn spawn(
        &self,
        log: EventLog,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(publisher::run(self.clone(), log, stop))
    }
}

/// The lag of a bus that holds every id up to `published_id`.
pub(crate) async fn lag_after(log: &EventLog, published_id: i64) -> Result<Lag, StoreError> {
    let head_id = log.backend().max_id().await?;
    let events = (head_id - published_id).max(0);
    let seconds = if events == 0 {
        0.0
    } else {
        match log.read_all(published_id, 1).await?.first() {
            Some(oldest) => {
                (threadstream_domain::clock::now_ms() - oldest.ts).max(0) as f64 / 1000.0
            }
            None => 0.0,
        }
    };
    Ok(Lag {
        head_id,
        published_id,
        events,
        seconds,
    })
}
