//! The open connections: the cap on how many (a semaphore, as in tokio's mini-redis), and which
//! of them wait for a request, oldest first, so that the idle ones can be closed — after the
//! idle timeout, or at once to make room for a new connection at the cap.
//!
//! A connection is in one of three states: *fresh* (connected, nothing sent yet), *idle*
//! (between requests of a keep-alive connection) or *busy* (a request in progress, a response
//! being written, an open event stream). Only fresh and idle ones are ever closed here; which
//! state it is in, its connection task says ([`Slot::wait`], [`Slot::busy`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How long a new connection at the cap waits for the idle connection it closed to be gone.
/// It is waiting in a `select!`, so it goes at once unless the runtime is saturated.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// A cheap handle (clone per connection) on the cap and the waiting connections.
#[derive(Clone)]
pub(super) struct Connections {
    permits: Arc<Semaphore>,
    /// One lock over both queues: every change is a map insert or removal, far shorter than
    /// anything a connection does between two of them, so a finer scheme would buy nothing.
    waiting: Arc<Mutex<Waiting>>,
    limit: usize,
}

/// The connections that wait, each queue ordered by when it began to wait (the sequence
/// numbers are handed out under the lock, so they sort as their `since` instants do).
#[derive(Default)]
struct Waiting {
    next_seq: u64,
    fresh: BTreeMap<u64, Waiter>,
    idle: BTreeMap<u64, Waiter>,
}

struct Waiter {
    since: Instant,
    close: Arc<Notify>,
}

/// What a waiting connection waits for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Wait {
    /// Its first byte: it has sent nothing yet.
    Fresh,
    /// Its next request, after a response (keep-alive).
    Idle,
}

impl Waiting {
    fn queue(&mut self, wait: Wait) -> &mut BTreeMap<u64, Waiter> {
        match wait {
            Wait::Fresh => &mut self.fresh,
            Wait::Idle => &mut self.idle,
        }
    }
}

impl Connections {
    /// At most `limit` connections open at once (at least 1).
    pub(super) fn new(limit: usize) -> Self {
        let limit = limit.max(1);
        Connections {
            permits: Arc::new(Semaphore::new(limit)),
            waiting: Arc::default(),
            limit,
        }
    }

    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// A place for a new connection: free, or made by closing the oldest waiting connection
    /// (fresh ones first, then idle ones). `None` when every connection is busy: the caller
    /// refuses the new one at once.
    pub(super) async fn admit(&self) -> Option<Slot> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Some(self.slot(permit));
        }
        if !self.close_oldest() {
            return None;
        }
        let permit = tokio::time::timeout(EVICTION_WAIT, self.permits.clone().acquire_owned())
            .await
            .ok()?
            .ok()?;
        Some(self.slot(permit))
    }

    fn slot(&self, permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            connections: self.clone(),
            close: Arc::new(Notify::new()),
            waiting: None,
            _permit: permit,
        }
    }

    /// Asks the oldest waiting connection to close; `false` when none waits.
    fn close_oldest(&self) -> bool {
        let mut waiting = self.waiting.lock().expect("connections lock");
        let oldest = match waiting.fresh.pop_first() {
            Some(w) => Some(w),
            None => waiting.idle.pop_first(),
        };
        match oldest {
            Some((_, waiter)) => {
                waiter.close.notify_one();
                true
            }
            None => false,
        }
    }

    /// Asks every connection that has waited `timeout` or longer to close; returns how many.
    pub(super) fn close_idle(&self, timeout: Duration) -> usize {
        let now = Instant::now();
        let mut waiting = self.waiting.lock().expect("connections lock");
        let mut closed = 0;
        for wait in [Wait::Fresh, Wait::Idle] {
            let queue = waiting.queue(wait);
            while let Some(entry) = queue.first_entry() {
                if now.duration_since(entry.get().since) < timeout {
                    break;
                }
                entry.remove().close.notify_one();
                closed += 1;
            }
        }
        closed
    }

    /// Closes idle connections every `tick` until dropped (the caller aborts it on stop).
    pub(super) async fn close_idle_every(self, timeout: Duration, tick: Duration) {
        let mut ticks = tokio::time::interval(tick);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let closed = self.close_idle(timeout);
            if closed > 0 {
                tracing::debug!(closed, "closed idle connections");
            }
        }
    }
}

/// One open connection's place under the cap (released when dropped) and its waiting state.
pub(super) struct Slot {
    connections: Connections,
    /// Notified when the connection is to close (idle timeout, or room at the cap).
    close: Arc<Notify>,
    /// Its queue and sequence number while it waits.
    waiting: Option<(Wait, u64)>,
    _permit: OwnedSemaphorePermit,
}

impl Slot {
    /// The connection waits for `wait`; from now on it may be asked to close. A connection
    /// already waiting keeps its place.
    pub(super) fn wait(&mut self, wait: Wait) {
        if self.waiting.is_some() {
            return;
        }
        let mut waiting = self.connections.waiting.lock().expect("connections lock");
        let seq = waiting.next_seq;
        waiting.next_seq += 1;
        waiting.queue(wait).insert(
            seq,
            Waiter {
                since: Instant::now(),
                close: self.close.clone(),
            },
        );
        self.waiting = Some((wait, seq));
    }

    /// The connection has work (bytes arrived, a request started); `false` if it was already
    /// asked to close while it waited, and must now close.
    pub(super) fn busy(&mut self) -> bool {
        let Some((wait, seq)) = self.waiting.take() else {
            return true;
        };
        let mut waiting = self.connections.waiting.lock().expect("connections lock");
        waiting.queue(wait).remove(&seq).is_some()
    }

    /// Completes when the connection is asked to close (it was waiting; see [`Slot::busy`]).
    pub(super) fn close_signal(&self) -> Arc<Notify> {
        self.close.clone()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.busy();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_the_cap_the_oldest_fresh_then_idle_connection_makes_room() {
        let conns = Connections::new(3);
        let mut idle = conns.admit().await.unwrap();
        idle.wait(Wait::Fresh);
        assert!(idle.busy());
        idle.wait(Wait::Idle);
        let mut fresh = conns.admit().await.unwrap();
        fresh.wait(Wait::Fresh);
        let mut busy = conns.admit().await.unwrap();
        busy.wait(Wait::Fresh);
        assert!(busy.busy());

        // The fourth: the fresh one is asked to close (though the idle one waited longer).
        let fresh_close = fresh.close_signal();
        let closing = tokio::spawn(async move {
            fresh_close.notified().await;
            drop(fresh);
        });
        let fourth = conns.admit().await.expect("room made");
        closing.await.unwrap();
        // The fifth: then the idle one.
        let idle_close = idle.close_signal();
        let closing = tokio::spawn(async move {
            idle_close.notified().await;
            assert!(!idle.busy(), "asked to close: busy says so");
            drop(idle);
        });
        let fifth = conns.admit().await.expect("room made");
        closing.await.unwrap();
        // All busy now: the sixth is refused at once.
        let started = Instant::now();
        assert!(conns.admit().await.is_none());
        assert!(started.elapsed() < Duration::from_millis(100));
        drop((busy, fourth, fifth));
        assert!(conns.admit().await.is_some(), "places come back on drop");
    }

    #[tokio::test]
    async fn connections_waiting_longer_than_the_timeout_are_asked_to_close() {
        let conns = Connections::new(10);
        let mut old = conns.admit().await.unwrap();
        old.wait(Wait::Idle);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut young = conns.admit().await.unwrap();
        young.wait(Wait::Fresh);
        let mut busy = conns.admit().await.unwrap();
        busy.wait(Wait::Fresh);
        assert!(busy.busy());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(conns.close_idle(Duration::from_millis(150)), 1);
        assert!(!old.busy(), "the old one was asked to close");
        assert!(young.busy(), "the young one was not");
        assert!(busy.busy());
    }
}
