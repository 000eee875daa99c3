//! Head notifications across processes: Postgres `LISTEN/NOTIFY` (default on Postgres) or Redis
//! Pub/Sub (as n8n's queue mode does).
//!
//! With each committed batch the writer publishes one message `{"i": instance, "h": max id,
//! "t": [thread ids]}` (`"t": null` when the list would not fit: wake every thread). Listeners in
//! the other processes wake the matching [`Heads`]. Every message is a hint: when a listener
//! (re)connects it wakes every subscriber, and subscribers re-read the log on a timer anyway, so
//! a lost notification costs latency, never an event.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use threadstream_domain::StoredEvent;
use tokio::sync::mpsc;

use crate::heads::Heads;
use crate::postgres::PgLog;

/// Channel (Postgres) and topic (Redis) the heads travel on.
pub const CHANNEL: &str = "threadstream_heads";

/// Largest NOTIFY payload we send (Postgres refuses 8,000 bytes and more).
const MAX_PAYLOAD: usize = 7_000;

/// How head notifications travel between processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyMode {
    /// In-process only (one process on the log: SQLite).
    Local,
    /// Postgres `LISTEN/NOTIFY` on the log's own database.
    Postgres,
    /// Redis Pub/Sub at this URL.
    Redis(String),
}

/// The form `--notify` takes: `postgres`, or a `redis://` / `rediss://` URL.
impl std::str::FromStr for NotifyMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "postgres" => Ok(NotifyMode::Postgres),
            url if url.starts_with("redis://") || url.starts_with("rediss://") => {
                Ok(NotifyMode::Redis(url.to_string()))
            }
            _ => Err("must be `postgres` or a redis:// URL".into()),
        }
    }
}

/// The form [`FromStr`](std::str::FromStr) reads (`local` has no flag form). The Redis URL is
/// shown as configured, as `Debug` already does.
impl std::fmt::Display for NotifyMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotifyMode::Local => f.write_str("local"),
            NotifyMode::Postgres => f.write_str("postgres"),
            NotifyMode::Redis(url) => f.write_str(url),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct HeadMessage {
    i: String,
    h: i64,
    t: Option<Vec<String>>,
}

/// [`HeadMessage`] as the writer builds it, borrowing from the batch. `i` comes first, so a
/// listener tells its own messages by their start ([`Publisher::own_prefix`]).
#[derive(Serialize)]
struct HeadMessageRef<'a> {
    i: &'a str,
    h: i64,
    t: Option<Vec<&'a str>>,
}

/// The writer's side. On Postgres each batch's message goes out in the batch's own `COMMIT`
/// ([`Publisher::in_commit`], `PgBatch::commit`): a `NOTIFY` is sent only if its transaction
/// commits, and the batches' commits already take turns at the order lock, so it costs no
/// round trip, statement or transaction of its own (docs/performance.md, "The head
/// notification in the batch's commit"). On Redis it goes to a task that sends it, so the
/// writer never waits on the network for a hint.
pub(crate) struct Publisher {
    instance: String,
    /// Where Redis's messages go; `None` on Postgres (sent in the commit).
    tx: Option<mpsc::Sender<String>>,
}

impl Publisher {
    /// Whether the batch's message goes out in its commit ([`Publisher::message`]) rather than
    /// after it ([`Publisher::publish`]).
    pub fn in_commit(&self) -> bool {
        self.tx.is_none()
    }

    /// The message announcing `rows`, a batch in id order (`None` for an empty one).
    pub fn message(&self, rows: &[StoredEvent]) -> Option<String> {
        let last = rows.last()?;
        let mut threads: Vec<&str> = rows.iter().map(|r| r.thread_id.as_str()).collect();
        threads.sort_unstable();
        threads.dedup();
        let mut msg = HeadMessageRef {
            i: &self.instance,
            h: last.id,
            t: Some(threads),
        };
        let mut text = serde_json::to_string(&msg).expect("serializes");
        if text.len() > MAX_PAYLOAD {
            msg.t = None;
            text = serde_json::to_string(&msg).expect("serializes");
        }
        Some(text)
    }

    /// Sends the message announcing a committed batch, where it is not sent in the commit.
    pub fn publish(&self, rows: &[StoredEvent]) {
        let Some(tx) = &self.tx else { return };
        if let Some(text) = self.message(rows) {
            // A full queue drops the hint; readers' timers cover it.
            let _ = tx.try_send(text);
        }
    }

    /// How every message `instance` publishes starts.
    fn own_prefix(instance: &str) -> String {
        let mut prefix = serde_json::to_string(&HeadMessageRef {
            i: instance,
            h: 0,
            t: None,
        })
        .expect("serializes");
        prefix.truncate(prefix.find(",\"h\":").expect("h follows i") + 1);
        prefix
    }
}

/// Starts the listening task for `mode` (and on Redis the publishing one); `None` for
/// [`NotifyMode::Local`].
pub(crate) async fn start(
    mode: &NotifyMode,
    pg: Option<&PgLog>,
    heads: Heads,
    instance: String,
) -> Result<Option<Publisher>, crate::StoreError> {
    match mode {
        NotifyMode::Local => Ok(None),
        NotifyMode::Postgres => {
            let pg = pg
                .ok_or_else(|| {
                    crate::StoreError::refused("LISTEN/NOTIFY needs the Postgres store")
                })?
                .clone();
            tokio::spawn(pg_listen(pg, heads, instance.clone()));
            Ok(Some(Publisher { instance, tx: None }))
        }
        NotifyMode::Redis(url) => {
            let client = redis::Client::open(url.as_str())
                .map_err(|e| crate::StoreError::unavailable("invalid redis url", e))?;
            let (tx, rx) = mpsc::channel::<String>(1024);
            tokio::spawn(redis_publish(client.clone(), rx));
            tokio::spawn(redis_listen(client, heads, instance.clone()));
            Ok(Some(Publisher {
                instance,
                tx: Some(tx),
            }))
        }
    }
}

/// Applies one received message to this process's heads. Our own batches were already woken
/// in-process: they are recognized by `own_prefix` without parsing their thread list.
fn deliver(heads: &Heads, own_prefix: &str, payload: &str) {
    if payload.starts_with(own_prefix) {
        return;
    }
    match serde_json::from_str::<HeadMessage>(payload) {
        Ok(m) => match m.t {
            // Another process erased streams: which, the hint does not say (the tombstone
            // does), so every tail goes and every cache keyed by stream is dropped.
            Some(threads) if threads.iter().any(|t| t == crate::erasure::STREAM) => {
                heads.erased(&[], m.h);
                heads.wake_all(m.h);
            }
            Some(threads) => heads.wake(&threads, m.h),
            None => heads.wake_all(m.h),
        },
        Err(_) => heads.wake_all(0),
    }
}

async fn pg_listen(pg: PgLog, heads: Heads, instance: String) {
    let own = Publisher::own_prefix(&instance);
    loop {
        let mut listener = match sqlx::postgres::PgListener::connect_with(pg.pool()).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "LISTEN connection failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if listener.listen(CHANNEL).await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        // Anything committed while we were not listening: have every subscriber re-read.
        heads.wake_all(0);
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) => deliver(&heads, &own, n.payload()),
                Ok(None) => {
                    // The connection dropped; sqlx reconnects on the next call. Re-read all.
                    tracing::debug!("LISTEN connection lost; reconnecting");
                    crate::metrics::notify_reconnect("postgres");
                    heads.wake_all(0);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "LISTEN failed; reconnecting");
                    crate::metrics::notify_reconnect("postgres");
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn redis_publish(client: redis::Client, mut rx: mpsc::Receiver<String>) {
    let mut conn = None;
    while let Some(payload) = rx.recv().await {
        if conn.is_none() {
            conn = client.get_multiplexed_async_connection().await.ok();
        }
        if let Some(c) = conn.as_mut() {
            let r: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                .arg(CHANNEL)
                .arg(&payload)
                .query_async(c)
                .await;
            if r.is_err() {
                conn = None;
            }
        }
    }
}

async fn redis_listen(client: redis::Client, heads: Heads, instance: String) {
    use futures::StreamExt;
    let own = Publisher::own_prefix(&instance);
    loop {
        let mut pubsub = match client.get_async_pubsub().await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "redis SUBSCRIBE connection failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if pubsub.subscribe(CHANNEL).await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        heads.wake_all(0);
        let mut messages = pubsub.on_message();
        while let Some(msg) = messages.next().await {
            if let Ok(payload) = msg.get_payload::<String>() {
                deliver(&heads, &own, &payload);
            }
        }
        tracing::debug!("redis subscription ended; reconnecting");
        crate::metrics::notify_reconnect("redis");
        heads.wake_all(0);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, thread: &str) -> StoredEvent {
        StoredEvent {
            id,
            thread_id: thread.into(),
            seq: 1,
            run_id: "r".into(),
            agent_id: "a".into(),
            event_type: "text-delta".into(),
            payload: "{}".into(),
            ts: 0,
            response_id: None,
            user_id: None,
        }
    }

    /// `--notify` reads what it shows as its default, and refuses anything but `postgres` and a
    /// Redis URL.
    #[test]
    fn notify_mode_round_trips_its_flag_form() {
        for mode in [
            NotifyMode::Postgres,
            NotifyMode::Redis("redis://127.0.0.1:6379".into()),
            NotifyMode::Redis("rediss://cache.example:6380".into()),
        ] {
            assert_eq!(mode.to_string().parse::<NotifyMode>(), Ok(mode));
        }
        assert!("local".parse::<NotifyMode>().is_err());
        assert!("http://cache:6379".parse::<NotifyMode>().is_err());
    }

    /// A listener skips what its own instance published, by the message's start, and wakes the
    /// threads of every other instance's message, also one whose id extends ours.
    #[test]
    fn listeners_skip_their_own_messages_only() {
        let (tx, mut rx) = mpsc::channel(4);
        let ours = Publisher {
            instance: "7-1".into(),
            tx: Some(tx.clone()),
        };
        let other = Publisher {
            instance: "7-10".into(),
            tx: Some(tx),
        };
        let rows = [row(5, "b"), row(6, "a"), row(7, "b")];
        ours.publish(&rows);
        other.publish(&rows);
        let (mine, theirs) = (rx.try_recv().unwrap(), rx.try_recv().unwrap());
        let parsed: HeadMessage = serde_json::from_str(&mine).unwrap();
        assert_eq!((parsed.i.as_str(), parsed.h), ("7-1", 7));
        assert_eq!(parsed.t, Some(vec!["a".to_string(), "b".to_string()]));

        let heads = Heads::new(0);
        let mut a = heads.thread("a");
        let own = Publisher::own_prefix("7-1");
        deliver(&heads, &own, &mine);
        assert!(!a.has_changed().unwrap(), "woken by our own message");
        deliver(&heads, &own, &theirs);
        assert!(a.has_changed().unwrap(), "not woken by another instance");
        assert_eq!(*a.borrow_and_update(), 7);
    }
}
