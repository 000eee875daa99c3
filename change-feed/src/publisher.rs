//! The publisher: while this instance holds the feed's lock, reads the log after the highest id
//! the stream holds and publishes it page by page.
//!
//! Exactly once, and in id order, rests on four things:
//! - **One connection publishes, in id order.** NATS keeps one connection's messages in order,
//!   and the publisher sends a page's events in id order, waiting for every acknowledgement of a
//!   page before reading the next.
//! - **It resumes from the stream.** Every (re)start, after a crash, a takeover or a lost
//!   connection, begins after the highest id the stream holds ([`Bus::last_published_id`]), or
//!   after the stored checkpoint if that is higher (the stream lost its tail: it is not
//!   republished). So a message the stream stored is never sent again by a publisher that knows
//!   of it, and one it lost is sent again.
//! - **JetStream drops copies of an id.** Two publishers can overlap for a moment (the old one's
//!   last messages still in flight when a new one takes over): `Nats-Msg-Id` makes the stream
//!   keep the first copy of each id. The overlap lasts seconds (a lock passes within
//!   [`STANDBY_RETRY`] of its holder going, and a publish times out after 5 s), inside the
//!   duplicate window (two minutes by default); the publisher warns at start when the stream's
//!   window is shorter than [`MIN_DUPLICATE_WINDOW`]. Both publish the same events in the same
//!   order, so whichever copy of each id comes first, the stream still holds the ids in order.
//! - **Erasure before its tombstone.** The events of an erased stream leave the log in the same
//!   commit that stores the tombstone, with a higher id than any of them. Before publishing a
//!   tombstone, the publisher waits for every earlier acknowledgement and purges each erased
//!   stream's subject: whatever it published of them before is gone, and it cannot read them
//!   again. A crash between the purge and the tombstone's acknowledgement purges again on
//!   restart (the stream's last id is below the tombstone's).

use std::time::{Duration, Instant};

use threadstream_domain::EventBody;
use threadstream_domain::StoredEvent;
use threadstream_store::erasure::STREAM as ERASURE_STREAM;
use threadstream_store::{EventLog, Job, JobLock};

use crate::jetstream::{Bus, FeedError};
use crate::{metrics, ChangeFeed};

/// Events read from the log and published per page.
const PAGE: i64 = 1_000;
/// How often an instance that does not hold the lock tries to take it, and how long the
/// publisher waits before trying again after a failure.
pub const STANDBY_RETRY: Duration = Duration::from_secs(1);
/// How often the stored checkpoint is moved at most: it is the fallback when the stream lost its
/// tail, so a second of lag there costs nothing but a second of events sent again.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// How often the publisher looks at the log without a wake-up (one may be coalesced away), and
/// so the longest a checkpoint waits to be stored after the last page.
const RECHECK: Duration = Duration::from_secs(1);
/// How long the publisher lets commits collect after the head moves before it reads them: at
/// model speed the log commits a few hundred small batches a second, and a page read and
/// published for each cost more than the events in it (docs/performance.md, "Change feed").
/// It bounds the lag it adds.
const FOLLOW_LINGER: Duration = Duration::from_millis(20);
/// A stream whose duplicate window is shorter than this may keep a second copy of an id when two
/// publishers overlap (see the module's comment).
pub const MIN_DUPLICATE_WINDOW: Duration = Duration::from_secs(30);

/// Runs the feed until `stop` fires.
pub async fn run(feed: ChangeFeed, log: EventLog, mut stop: tokio::sync::watch::Receiver<bool>) {
    metrics::describe();
    loop {
        let lock = match log.try_job_lock(Job::ChangeFeed).await {
            Ok(lock) => lock,
            Err(e) => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "change feed lock unavailable; retrying"
                );
                None
            }
        };
        let leading = lock.is_some();
        feed.update(|s| {
            s.publishing = leading;
            s.connected = false;
        });
        metrics::publishing(leading);
        if let Some(lock) = lock {
            match publish(&feed, &log, lock, &mut stop).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "change feed stopped publishing; retrying"
                    );
                    feed.update(|s| {
                        s.connected = false;
                        s.last_error = Some(e.to_string());
                    });
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(STANDBY_RETRY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Publishes while it can; `Ok` when `stop` fired. The lock is held until it returns.
async fn publish(
    feed: &ChangeFeed,
    log: &EventLog,
    _lock: JobLock,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), FeedError> {
    let config = feed.config().clone();
    let checkpoint_name = config.checkpoint_name();
    let backend = log.backend();
    let mut head = log.heads().global();
    let bus = Bus::connect(&config.url, &config.stream).await?;
    if bus.duplicate_window() < MIN_DUPLICATE_WINDOW {
        tracing::warn!(
            window_ms = bus.duplicate_window().as_millis() as u64,
            stream = %config.stream,
            "the change feed's stream has a short duplicate window: an id published by two \
             instances at a takeover may be stored twice"
        );
    }
    let mut stored = backend.checkpoint(&checkpoint_name).await?;
    let on_bus = bus.last_published_id().await?;
    if on_bus < stored {
        tracing::warn!(
            stream = %config.stream,
            on_bus,
            stored,
            "the change feed's stream holds less than was acknowledged before; \
             going on after the stored id (the missing ids are not published again)"
        );
    }
    let mut published = on_bus.max(stored);
    tracing::info!(stream = %config.stream, after = published, "change feed publishing");
    feed.update(|s| {
        s.connected = true;
        s.published_id = published;
        s.last_error = None;
    });
    let mut last_checkpoint = Instant::now();
    loop {
        // Seen before reading, so a commit after the read wakes `changed`.
        head.borrow_and_update();
        let page = log.read_all(published, PAGE).await?;
        if let Some(last) = page.last() {
            publish_page(&bus, &page).await?;
            published = last.id;
            metrics::published(page.len());
            feed.update(|s| {
                s.published_id = published;
                s.published_events += page.len() as u64;
            });
        }
        if published > stored && last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            if !backend
                .save_docs(&checkpoint_name, &[], stored, published)
                .await?
            {
                // Another publisher moved it (this one's lock was lost): carry on from ours.
                tracing::warn!("the change feed's checkpoint was moved by another instance");
            }
            stored = backend.checkpoint(&checkpoint_name).await?;
            last_checkpoint = Instant::now();
        }
        if page.len() as i64 == PAGE {
            continue;
        }
        tokio::select! {
            _ = head.changed() => {
                // Let the commits of a moment collect into one page.
                tokio::time::sleep(FOLLOW_LINGER).await;
            }
            _ = tokio::time::sleep(RECHECK) => {}
            _ = stop.changed() => {
                if published > stored {
                    backend.save_docs(&checkpoint_name, &[], stored, published).await?;
                }
                return Ok(());
            }
        }
    }
}

/// Publishes `page` (consecutive events of the log, in id order) and waits for every
/// acknowledgement; a tombstone first waits for the events before it, then purges what it
/// erased.
async fn publish_page(bus: &Bus, page: &[StoredEvent]) -> Result<(), FeedError> {
    let mut pending = Vec::with_capacity(page.len());
    for e in page {
        if let Some(erased) = erased_streams(e) {
            for ack in pending.drain(..) {
                bus.acknowledged(ack).await?;
            }
            for stream in &erased {
                let purged = bus.purge(stream).await?;
                tracing::info!(stream = %stream, purged, "change feed purged an erased stream");
            }
        }
        pending.push(bus.publish(e).await?);
    }
    for ack in pending {
        bus.acknowledged(ack).await?;
    }
    Ok(())
}

/// The log streams an erasure tombstone says were erased.
fn erased_streams(e: &StoredEvent) -> Option<Vec<String>> {
    if e.thread_id != ERASURE_STREAM {
        return None;
    }
    match e.decode().ok()?.body {
        EventBody::Erased(erased) => Some(erased.streams.into_iter().map(|s| s.stream).collect()),
        _ => None,
    }
}
