//! Head notifications: the highest committed id per thread and for the whole log, and the hot
//! tails of the threads someone streams ([`crate::tail`]).
//!
//! Heads are hints that wake readers; readers read the events themselves after their own
//! cursor, from a thread's tail when it provably covers them, else from the log, so a missed or
//! coalesced notification costs latency, never data. A thread's head only moves up: it is the
//! highest id this process knows to be committed for the thread (its own commits, and other
//! processes' batch heads as their hints arrive).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use hashlink::LinkedHashSet;
use threadstream_domain::StoredEvent;
use tokio::sync::watch;

use crate::tail::{TailEvent, TailLimits, ThreadTail};

/// Per-thread and global head ids, shared by the writer (which advances them) and readers.
#[derive(Clone)]
pub struct Heads {
    inner: Arc<HeadsInner>,
}

struct HeadsInner {
    state: Mutex<HeadsState>,
    /// Erasures this process has seen (its own, and other processes' through their hints):
    /// caches keyed by stream compare it to know they may hold an erased stream.
    erasures: std::sync::atomic::AtomicU64,
    global: watch::Sender<i64>,
    limits: TailLimits,
}

struct HeadsState {
    threads: HashMap<String, Arc<ThreadHead>>,
    /// Threads whose tail holds events, least recently appended first.
    tailed: LinkedHashSet<String>,
    /// Sum of the tails' bytes.
    tail_bytes: usize,
}

/// One thread's head and tail. Subscribers hold it, so reading the tail never takes the map's
/// lock; the tail's own lock is taken after the map's, never the other way round.
pub(crate) struct ThreadHead {
    head: watch::Sender<i64>,
    tail: Mutex<ThreadTail>,
    /// Live [`crate::ThreadFeed`]s: the tail is filled only while there is one.
    feeds: AtomicUsize,
    /// Held by a feed reading the thread from the store: the thread's other feeds, woken by the
    /// same hint, wait for that read and take its events from the tail instead of each reading
    /// the same page ([`crate::ThreadFeed::next_page`]). An async lock, since it is held across
    /// the read.
    pub(crate) store_read: tokio::sync::Mutex<()>,
}

impl ThreadHead {
    pub(crate) fn tail(&self) -> MutexGuard<'_, ThreadTail> {
        // Every tail operation leaves it whole or empty, so a poisoned lock is still used.
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn feed_closed(&self) {
        self.feeds.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the tails hold now (tests, diagnostics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailStats {
    pub threads: usize,
    pub events: usize,
    pub bytes: usize,
}

impl Heads {
    pub fn new(start: i64) -> Self {
        Self::with_tail_limits(start, TailLimits::default())
    }

    pub fn with_tail_limits(start: i64, limits: TailLimits) -> Self {
        Heads {
            inner: Arc::new(HeadsInner {
                state: Mutex::new(HeadsState {
                    threads: HashMap::new(),
                    tailed: LinkedHashSet::new(),
                    tail_bytes: 0,
                }),
                erasures: std::sync::atomic::AtomicU64::new(0),
                global: watch::channel(start).0,
                limits: TailLimits {
                    bytes_total: limits.bytes_total.max(limits.bytes_per_thread),
                    ..limits
                },
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, HeadsState> {
        self.inner.state.lock().expect("heads lock")
    }

    /// Subscribes to a thread's head. The value is the highest id known to be committed for the
    /// thread since this process started watching it (0 before); only changes matter.
    pub fn thread(&self, thread_id: &str) -> watch::Receiver<i64> {
        self.state().entry(thread_id).head.subscribe()
    }

    /// Subscribes to a thread's head as a stream reader: the thread's tail is filled from now
    /// on, until the returned handle's feed is closed ([`ThreadHead::feed_closed`]).
    pub(crate) fn feed(&self, thread_id: &str) -> (watch::Receiver<i64>, Arc<ThreadHead>) {
        let mut state = self.state();
        let entry = state.entry(thread_id);
        entry.feeds.fetch_add(1, Ordering::Relaxed);
        (entry.head.subscribe(), entry.clone())
    }

    /// The whole log's head as this process knows it now.
    pub fn global_head(&self) -> i64 {
        *self.inner.global.borrow()
    }

    /// Subscribes to the whole log's head.
    pub fn global(&self) -> watch::Receiver<i64> {
        self.inner.global.subscribe()
    }

    /// What the tails hold now.
    pub fn tail_stats(&self) -> TailStats {
        let state = self.state();
        let mut stats = TailStats {
            threads: 0,
            events: 0,
            bytes: state.tail_bytes,
        };
        for h in state.threads.values() {
            let n = h.tail().len();
            stats.events += n;
            stats.threads += usize::from(n > 0);
        }
        stats
    }

    /// Records a batch this process committed (`rows`, in id order, exactly as stored): fills
    /// the tails of the threads someone streams, then wakes each thread touched, then the
    /// global head.
    pub(crate) fn advance(&self, rows: &[StoredEvent]) {
        let Some(last) = rows.last() else { return };
        let mut seen: HashMap<&str, i64> = HashMap::new();
        for r in rows {
            seen.insert(&r.thread_id, r.id);
        }
        let fed = {
            let mut state = self.state();
            // Drop threads nobody listens to any more, so idle threads cost nothing.
            if state.threads.len() > 1024 {
                state.retain_watched();
            }
            state.fed_threads(&seen)
        };
        // Frames are rendered without the lock: new subscribers and hints need not wait.
        let mut events: HashMap<&str, Vec<Arc<TailEvent>>> = HashMap::new();
        if !fed.is_empty() {
            for r in rows {
                if fed.contains_key(r.thread_id.as_str()) {
                    let e = Arc::new(TailEvent::new(r.clone()));
                    events.entry(r.thread_id.as_str()).or_default().push(e);
                }
            }
        }
        {
            let mut state = self.state();
            // Tails first, then heads: a subscriber woken by the head finds the events.
            for (thread, events) in events {
                state.fill_tail(thread, &fed[thread], events, &self.inner.limits);
            }
            for (thread, id) in seen {
                if let Some(h) = state.threads.get(thread) {
                    raise(&h.head, id);
                }
            }
        }
        raise(&self.inner.global, last.id);
    }

    /// How many erasures this process has seen.
    pub fn erasures(&self) -> u64 {
        self.inner.erasures.load(Ordering::Acquire)
    }

    /// Log streams were erased (here, or by another process): their tails are dropped and
    /// their subscribers woken (a subscriber's next read finds the history gone), and the
    /// erasure count moves so caches keyed by stream are dropped.
    pub(crate) fn erased(&self, streams: &[String], id: i64) {
        self.inner.erasures.fetch_add(1, Ordering::AcqRel);
        {
            let mut state = self.state();
            for t in streams {
                if state.tailed.remove(t.as_str()) {
                    if let Some(h) = state.threads.get(t.as_str()) {
                        let mut tail = h.tail();
                        let bytes = tail.bytes();
                        tail.clear();
                        drop(tail);
                        state.tail_bytes -= bytes;
                    }
                }
                if let Some(h) = state.threads.get(t.as_str()) {
                    raise(&h.head, id);
                }
            }
        }
        raise(&self.inner.global, id);
    }

    /// Puts `events`, read from the store by a subscriber of `thread` whose last event is
    /// `cursor`, into the thread's tail when they continue it (the tail ends at `cursor`, or is
    /// empty), and records that the read saw every commit up to `through`
    /// ([`ThreadTail::cover_through`]). `false` when the tail had moved on (another reader or
    /// this process's writer filled it): nothing changes then.
    pub(crate) fn fill_read(
        &self,
        thread: &str,
        head: &ThreadHead,
        cursor: i64,
        events: Vec<Arc<TailEvent>>,
        through: i64,
    ) -> bool {
        // The map's lock first, as `advance` takes it: a commit of this process is either all
        // in the tail before this looks at it, or pushed after this fill.
        let mut state = self.state();
        if head.tail().last_id().is_some_and(|last| last != cursor) {
            return false;
        }
        if !events.is_empty() {
            state.fill_tail(thread, head, events, &self.inner.limits);
        }
        head.tail().cover_through(through);
        true
    }

    /// Wakes the given threads' subscribers: another process committed a batch up to `id` that
    /// touched them. Their heads rise to `id`, above any tail, so those events are read from the
    /// store.
    pub(crate) fn wake(&self, threads: &[String], id: i64) {
        {
            let state = self.state();
            for t in threads {
                if let Some(h) = state.threads.get(t.as_str()) {
                    raise(&h.head, id);
                }
            }
        }
        raise(&self.inner.global, id);
    }

    /// Wakes every subscriber: after a listener (re)connects, when a notification may be lost.
    /// Anything may have been committed elsewhere meanwhile, so every tail is dropped: each
    /// subscriber's next read goes to the store.
    pub(crate) fn wake_all(&self, id: i64) {
        {
            let mut state = self.state();
            state.clear_tails();
            for h in state.threads.values() {
                raise(&h.head, id);
            }
        }
        raise(&self.inner.global, id);
    }
}

/// Moves `head` up to `id` (never down) and wakes its receivers.
fn raise(head: &watch::Sender<i64>, id: i64) {
    head.send_modify(|h| *h = (*h).max(id));
}

impl HeadsState {
    fn entry(&mut self, thread_id: &str) -> &Arc<ThreadHead> {
        if !self.threads.contains_key(thread_id) {
            let head = Arc::new(ThreadHead {
                head: watch::channel(0).0,
                tail: Mutex::new(ThreadTail::default()),
                feeds: AtomicUsize::new(0),
                store_read: tokio::sync::Mutex::new(()),
            });
            self.threads.insert(thread_id.to_string(), head);
        }
        &self.threads[thread_id]
    }

    fn retain_watched(&mut self) {
        let mut dropped = 0;
        let tailed = &mut self.tailed;
        self.threads.retain(|thread, h| {
            let keep = h.head.receiver_count() > 0;
            if !keep {
                dropped += h.tail().bytes();
                tailed.remove(thread);
            }
            keep
        });
        self.tail_bytes -= dropped;
    }

    /// The threads among `seen` that have a feed (their tails are to be filled); empties the
    /// tails of those that no longer have one.
    fn fed_threads<'a>(
        &mut self,
        seen: &HashMap<&'a str, i64>,
    ) -> HashMap<&'a str, Arc<ThreadHead>> {
        let mut fed = HashMap::new();
        for thread in seen.keys() {
            let Some(h) = self.threads.get(*thread) else {
                continue;
            };
            if h.feeds.load(Ordering::Relaxed) > 0 {
                fed.insert(*thread, h.clone());
            } else if self.tailed.remove(*thread) {
                let mut tail = h.tail();
                self.tail_bytes -= tail.bytes();
                tail.clear();
            }
        }
        fed
    }

    /// Appends a thread's events of a batch to its tail, then keeps the total within its
    /// bound by dropping whole tails, least recently appended first.
    fn fill_tail(
        &mut self,
        thread: &str,
        head: &ThreadHead,
        events: Vec<Arc<TailEvent>>,
        limits: &TailLimits,
    ) {
        let mut tail = head.tail();
        let before = tail.bytes();
        for e in events {
            tail.push(e, limits);
        }
        self.tail_bytes = self.tail_bytes - before + tail.bytes();
        let non_empty = tail.len() > 0;
        drop(tail);
        self.tailed.remove(thread);
        if non_empty {
            self.tailed.insert(thread.to_string());
        }
        while self.tail_bytes > limits.bytes_total {
            let Some(evicted) = self.tailed.pop_front() else {
                break;
            };
            if let Some(h) = self.threads.get(&evicted) {
                let mut tail = h.tail();
                self.tail_bytes -= tail.bytes();
                tail.clear();
            }
        }
    }

    fn clear_tails(&mut self) {
        for thread in self.tailed.drain() {
            if let Some(h) = self.threads.get(&thread) {
                h.tail().clear();
            }
        }
        self.tail_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, thread: &str, seq: i64) -> StoredEvent {
        StoredEvent {
            id,
            thread_id: thread.into(),
            seq,
            run_id: "r".into(),
            agent_id: "a".into(),
            event_type: "text-delta".into(),
            payload: "{\"text\":\"0123456789\"}".into(),
            ts: 1,
            response_id: None,
            user_id: None,
        }
    }

    fn tail_ids(h: &ThreadHead) -> Vec<i64> {
        h.tail().ids()
    }

    #[test]
    fn tails_fill_only_for_fed_threads_and_heads_only_rise() {
        let heads = Heads::new(0);
        let _watch_only = heads.thread("w");
        let (mut rx, fed) = heads.feed("f");
        heads.advance(&[row(1, "f", 1), row(2, "w", 1), row(3, "f", 2)]);
        assert_eq!(*rx.borrow_and_update(), 3);
        assert_eq!(tail_ids(&fed), vec![1, 3]);
        let stats = heads.tail_stats();
        assert_eq!((stats.threads, stats.events), (1, 2));
        assert_eq!(stats.bytes, fed.tail().bytes());
        // A foreign hint raises the head above the tail: the tail no longer covers it.
        heads.wake(&["f".into()], 9);
        assert_eq!(*rx.borrow_and_update(), 9);
        assert!(fed.tail().after(3, Some(2), 9, 10, usize::MAX).is_none());
        // A lower id (a hint that arrives late) never lowers it.
        heads.wake(&["f".into()], 5);
        assert_eq!(*rx.borrow_and_update(), 9);
        // The feed closes: the next batch of the thread empties its tail.
        fed.feed_closed();
        heads.advance(&[row(10, "f", 4)]);
        assert_eq!(fed.tail().len(), 0);
        assert_eq!(heads.tail_stats().bytes, 0);
    }

    #[test]
    fn a_store_read_fills_the_tail_only_where_it_continues_it() {
        let heads = Heads::new(0);
        let (_rx, fed) = heads.feed("f");
        let ev = |id, seq| Arc::new(TailEvent::new(row(id, "f", seq)));
        let covered = |cursor, seq, head| {
            fed.tail()
                .after(cursor, Some(seq), head, 10, usize::MAX)
                .map(|v| v.iter().map(|e| e.event.id).collect::<Vec<_>>())
        };
        // An empty tail takes the read, and what the read saw up to (9) is covered.
        assert!(heads.fill_read("f", &fed, 0, vec![ev(3, 1), ev(5, 2)], 9));
        assert_eq!(tail_ids(&fed), vec![3, 5]);
        assert_eq!(heads.tail_stats().bytes, fed.tail().bytes());
        assert_eq!(covered(3, 1, 9), Some(vec![5]));
        // A read from a cursor the tail does not end at changes nothing.
        assert!(!heads.fill_read("f", &fed, 3, vec![ev(5, 2)], 12));
        assert_eq!(covered(5, 2, 12), None);
        // One that continues it is appended.
        assert!(heads.fill_read("f", &fed, 5, vec![ev(11, 3)], 11));
        assert_eq!(tail_ids(&fed), vec![3, 5, 11]);
        // This process's own next commit continues it too.
        heads.advance(&[row(14, "f", 4)]);
        assert_eq!(tail_ids(&fed), vec![3, 5, 11, 14]);
        // A read that found nothing more covers up to what it saw.
        assert_eq!(covered(14, 4, 20), None);
        assert!(heads.fill_read("f", &fed, 14, Vec::new(), 20));
        assert_eq!(covered(14, 4, 20), Some(vec![]));
        assert_eq!(heads.tail_stats().bytes, fed.tail().bytes());
    }

    #[test]
    fn wake_all_drops_every_tail() {
        let heads = Heads::new(0);
        let (_rx, fed) = heads.feed("f");
        heads.advance(&[row(1, "f", 1), row(2, "f", 2)]);
        assert_eq!(fed.tail().len(), 2);
        heads.wake_all(0);
        assert_eq!(fed.tail().len(), 0);
        assert_eq!(
            heads.tail_stats(),
            TailStats {
                threads: 0,
                events: 0,
                bytes: 0
            }
        );
        // Filling starts again with the next commit.
        heads.advance(&[row(3, "f", 3)]);
        assert_eq!(fed.tail().len(), 1);
    }

    #[test]
    fn the_total_bound_drops_least_recently_appended_tails() {
        let one = TailEvent::new(row(1, "a", 1)).bytes();
        let heads = Heads::with_tail_limits(
            0,
            TailLimits {
                events_per_thread: 100,
                bytes_per_thread: 4 * one,
                bytes_total: 6 * one,
            },
        );
        let (_a, a) = heads.feed("a");
        let (_b, b) = heads.feed("b");
        let (_c, c) = heads.feed("c");
        heads.advance(&[
            row(1, "a", 1),
            row(2, "a", 2),
            row(3, "b", 1),
            row(4, "b", 2),
        ]);
        heads.advance(&[row(5, "c", 1), row(6, "c", 2)]);
        assert_eq!(heads.tail_stats().bytes, 6 * one);
        // "a" is appended again, so "b" is now the least recently appended.
        heads.advance(&[row(7, "a", 3)]);
        assert_eq!((a.tail().len(), b.tail().len(), c.tail().len()), (3, 0, 2));
        assert_eq!(heads.tail_stats().bytes, 5 * one);
        // Per thread: the oldest go first.
        heads.advance(&[row(8, "a", 4), row(9, "a", 5)]);
        assert_eq!(a.tail().len(), 4);
        assert!(heads.tail_stats().bytes <= 6 * one);
        // A subscriber of "b" that had read event 4 reads the store now, and is served from
        // the tail again from b's next event.
        assert!(b.tail().after(4, Some(2), 4, 10, usize::MAX).is_none());
        heads.advance(&[row(10, "b", 3)]);
        let got = b
            .tail()
            .after(4, Some(2), 10, 10, usize::MAX)
            .expect("covered");
        assert_eq!(got.iter().map(|e| e.event.id).collect::<Vec<_>>(), vec![10]);
        assert!(heads.tail_stats().bytes <= 6 * one);
    }

    #[test]
    fn idle_threads_are_forgotten_with_their_tails() {
        let heads = Heads::new(0);
        {
            let (_rx, fed) = heads.feed("gone");
            heads.advance(&[row(1, "gone", 1)]);
            fed.feed_closed();
        }
        let watchers: Vec<_> = (0..1100).map(|i| heads.thread(&format!("w{i}"))).collect();
        drop(watchers);
        heads.advance(&[row(2, "other", 1)]);
        let state = heads.state();
        assert!(state.threads.len() <= 1, "{}", state.threads.len());
        assert_eq!(state.tail_bytes, 0);
        assert!(state.tailed.is_empty());
    }
}
