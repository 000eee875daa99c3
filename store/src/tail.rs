//! The hot tail: per thread that someone streams, the most recent events this process committed,
//! each with its n8n SSE frame rendered once and shared by every subscriber.
//!
//! A subscriber may take events from a thread's tail only when the tail *provably* holds every
//! event of the thread after the subscriber's cursor up to the thread's known head:
//!
//! - a tail is seq-contiguous (each event's `seq` is its predecessor's plus one; a gap, such as
//!   an event another process committed in between, restarts the tail), so from the
//!   subscriber's last event on it misses nothing;
//! - the subscriber's last event must be in the tail, or be the one just before its first event
//!   (same thread, `seq` one less);
//! - the tail must reach the thread's head as [`crate::Heads`] knows it. Other processes'
//!   commits only arrive as head hints (LISTEN/NOTIFY, Redis), which raise the head above the
//!   tail, so those events are read from the store.
//!
//! Otherwise the subscriber reads the store, as it always could, and what it read goes into the
//! tail when it continues it ([`crate::Heads::fill_read`]): a hint wakes every subscriber of
//! the thread at once, and one store read serves them all ([`crate::ThreadFeed::next_page`]).
//! Such a read also tells how far the tail is complete: every event of the thread up to the
//! head the reader saw is in it, even when the hint's id is another thread's
//! ([`ThreadTail::cover_through`]). Memory is bounded per thread
//! ([`TailLimits::events_per_thread`] events and [`TailLimits::bytes_per_thread`] bytes, oldest
//! dropped first) and in total ([`TailLimits::bytes_total`], whole tails of the least recently
//! appended threads dropped first). Dropping a tail only sends subscribers that are behind it
//! back to the store; a subscriber that is caught up keeps being served from the next event on.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use threadstream_domain::StoredEvent;

/// How much the tails may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailLimits {
    /// Events kept per thread (oldest dropped first).
    pub events_per_thread: usize,
    /// Bytes kept per thread, as [`TailEvent::bytes`] counts them (oldest dropped first).
    pub bytes_per_thread: usize,
    /// Bytes kept over all threads (whole tails of the least recently appended threads dropped
    /// first). At least `bytes_per_thread`, so the thread just appended to always fits.
    pub bytes_total: usize,
}

impl Default for TailLimits {
    /// 4,096 events and 4 MiB per thread, 32 MiB in all: at 10,000 events/s a thread's tail
    /// covers the last ~0.4 s, far more than a live subscriber lags behind.
    fn default() -> Self {
        TailLimits {
            events_per_thread: 4096,
            bytes_per_thread: 4 << 20,
            bytes_total: 32 << 20,
        }
    }
}

/// One committed event in a tail.
#[derive(Debug)]
pub struct TailEvent {
    pub event: StoredEvent,
    /// The event's frame on the n8n stream (`id:` and `data:` lines); empty for events the n8n
    /// stream does not carry.
    pub n8n_frame: Bytes,
    /// What this event costs the tail: the struct, its strings and its frame.
    bytes: usize,
}

impl TailEvent {
    pub fn new(event: StoredEvent) -> Self {
        let n8n_frame = if event.is_n8n() {
            let mut out = String::with_capacity(event.payload.len() + 128);
            event.write_n8n_frame(&mut out);
            Bytes::from(out)
        } else {
            Bytes::new()
        };
        let strings = event.thread_id.capacity()
            + event.run_id.capacity()
            + event.agent_id.capacity()
            + event.event_type.capacity()
            + event.payload.capacity()
            + event.response_id.as_ref().map_or(0, String::capacity)
            + event.user_id.as_ref().map_or(0, String::capacity);
        // The Arc's two counters come on top of the struct.
        let bytes = std::mem::size_of::<TailEvent>() + 16 + strings + n8n_frame.len();
        TailEvent {
            event,
            n8n_frame,
            bytes,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// One thread's tail: committed events in id order, seq-contiguous.
#[derive(Default)]
pub(crate) struct ThreadTail {
    events: VecDeque<Arc<TailEvent>>,
    bytes: usize,
    /// Every event of the thread from the first in the tail up to this id is in the tail (at
    /// least the last one's id; more once a store read showed nothing of the thread after it).
    through: i64,
}

impl ThreadTail {
    /// Appends a committed event of the thread (events come in commit order). An event that
    /// does not follow the last one by `seq` restarts the tail: something in between was not
    /// seen here. Then drops the oldest events beyond `limits`' per-thread bounds.
    pub(crate) fn push(&mut self, e: Arc<TailEvent>, limits: &TailLimits) {
        if let Some(back) = self.events.back() {
            // This process's own commit, which a store read put in first (woken by another
            // process's hint before the writer's acknowledgement filled the tail): kept once.
            if e.event.id <= back.event.id && self.holds(e.event.id, e.event.seq) {
                return;
            }
            if e.event.seq != back.event.seq + 1 || e.event.id <= self.through {
                self.clear();
            }
        }
        self.bytes += e.bytes;
        self.through = e.event.id;
        self.events.push_back(e);
        while self.events.len() > limits.events_per_thread || self.bytes > limits.bytes_per_thread {
            let Some(old) = self.events.pop_front() else {
                break;
            };
            self.bytes -= old.bytes;
        }
    }

    /// Whether the tail holds the event `id` with `seq`.
    fn holds(&self, id: i64, seq: i64) -> bool {
        self.position(id)
            .is_ok_and(|i| self.events[i].event.seq == seq)
    }

    /// Where `id` is in the tail (`Ok`), or where it would go (`Err`), as a binary search says.
    /// A live subscriber's cursor is one of the last few events: those are looked at first, from
    /// the back, as each look follows an `Arc` to a cold cache line (the binary search over a
    /// whole tail was 2.5 % of the server's CPU at model speed, docs/performance.md).
    fn position(&self, id: i64) -> Result<usize, usize> {
        const NEAR_END: usize = 4;
        let len = self.events.len();
        for (back, e) in self.events.iter().rev().take(NEAR_END).enumerate() {
            let i = len - 1 - back;
            if e.event.id == id {
                return Ok(i);
            }
            if e.event.id < id {
                return Err(i + 1);
            }
        }
        if len <= NEAR_END {
            return Err(0);
        }
        self.events.binary_search_by_key(&id, |x| x.event.id)
    }

    pub(crate) fn clear(&mut self) {
        self.events.clear();
        self.bytes = 0;
        self.through = 0;
    }

    /// Records that the thread has no event after the tail's last up to `id`: a store read that
    /// saw every commit up to `id` found none. Nothing to record in an empty tail.
    pub(crate) fn cover_through(&mut self, id: i64) {
        if !self.events.is_empty() {
            self.through = self.through.max(id);
        }
    }

    /// The id of the tail's last event.
    pub(crate) fn last_id(&self) -> Option<i64> {
        self.events.back().map(|e| e.event.id)
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.events.len()
    }

    #[cfg(test)]
    pub(crate) fn ids(&self) -> Vec<i64> {
        self.events.iter().map(|e| e.event.id).collect()
    }

    /// The thread's events after a subscriber's last one, at most `limit` events and (beyond
    /// the first) `max_bytes`, when this tail provably holds all of them up to `head` (the
    /// thread's known head); `None` when it does not (then the store must be read).
    /// `Some(empty)`: nothing after the cursor up to `head`.
    ///
    /// `cursor` is the id of the subscriber's last event (or where it asked to resume) and
    /// `last_seq` that event's seq when the subscriber saw it.
    pub(crate) fn after(
        &self,
        cursor: i64,
        last_seq: Option<i64>,
        head: i64,
        limit: usize,
        max_bytes: usize,
    ) -> Option<Vec<Arc<TailEvent>>> {
        let front = self.events.front()?;
        if head > self.through {
            return None; // committed elsewhere (or not seen here) after what the tail covers
        }
        let start = match self.position(cursor) {
            // The cursor is this thread's event at `i`: its successors are all in the tail.
            Ok(i) => i + 1,
            // Just before the tail: only when the subscriber's last event is the tail's
            // predecessor by seq (an id alone before the tail could hide events in between).
            Err(0) if last_seq == Some(front.event.seq - 1) => 0,
            Err(_) => return None,
        };
        let mut bytes = 0;
        let page = self
            .events
            .range(start..)
            .take(limit)
            .take_while(|e| {
                // At least one event, then up to `max_bytes`.
                let fits = bytes == 0 || bytes + e.bytes <= max_bytes;
                bytes += e.bytes;
                fits
            })
            .cloned()
            .collect();
        Some(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, seq: i64, text: &str) -> Arc<TailEvent> {
        Arc::new(TailEvent::new(StoredEvent {
            id,
            thread_id: "t".into(),
            seq,
            run_id: "r".into(),
            agent_id: "a".into(),
            event_type: "text-delta".into(),
            payload: format!("{{\"text\":\"{text}\"}}"),
            ts: 1,
            response_id: None,
            user_id: None,
        }))
    }

    fn ids(v: &Option<Vec<Arc<TailEvent>>>) -> Option<Vec<i64>> {
        v.as_ref().map(|v| v.iter().map(|e| e.event.id).collect())
    }

    const BIG: TailLimits = TailLimits {
        events_per_thread: 1000,
        bytes_per_thread: 1 << 30,
        bytes_total: 1 << 30,
    };

    #[test]
    fn position_agrees_with_a_binary_search_for_every_id() {
        for len in 0..12 {
            let mut t = ThreadTail::default();
            for k in 0..len {
                t.push(ev(10 + 3 * k, 1 + k, "x"), &BIG);
            }
            for id in 0..(14 + 3 * len) {
                assert_eq!(
                    t.position(id),
                    t.events.binary_search_by_key(&id, |x| x.event.id),
                    "id {id} in a tail of {len}"
                );
            }
        }
    }

    #[test]
    fn serves_only_what_it_provably_covers() {
        let mut t = ThreadTail::default();
        // ids 10, 12, 15 (other threads in between), seqs 4, 5, 6.
        for (id, seq) in [(10, 4), (12, 5), (15, 6)] {
            t.push(ev(id, seq, "x"), &BIG);
        }
        // A cursor on a tail event: its successors.
        assert_eq!(
            ids(&t.after(10, None, 15, 100, usize::MAX)),
            Some(vec![12, 15])
        );
        assert_eq!(
            ids(&t.after(12, Some(5), 15, 1, usize::MAX)),
            Some(vec![15])
        );
        assert_eq!(
            ids(&t.after(15, Some(6), 15, 100, usize::MAX)),
            Some(vec![])
        );
        // Just before the tail: only with the predecessor's seq.
        assert_eq!(
            ids(&t.after(7, Some(3), 15, 100, usize::MAX)),
            Some(vec![10, 12, 15])
        );
        assert_eq!(ids(&t.after(7, None, 15, 100, usize::MAX)), None);
        assert_eq!(
            ids(&t.after(7, Some(2), 15, 100, usize::MAX)),
            None,
            "seq 3 unseen"
        );
        // A cursor between tail events that is not one of them: not this thread's; store.
        assert_eq!(ids(&t.after(11, Some(4), 15, 100, usize::MAX)), None);
        // A cursor past the tail (a client's own id): store.
        assert_eq!(ids(&t.after(16, None, 15, 100, usize::MAX)), None);
        // The head is beyond the tail: another process committed after it.
        assert_eq!(ids(&t.after(10, Some(4), 16, 100, usize::MAX)), None);
        assert_eq!(ids(&t.after(15, Some(6), 16, 100, usize::MAX)), None);
        // Empty tail: store.
        assert_eq!(
            ids(&ThreadTail::default().after(0, None, 0, 10, usize::MAX)),
            None
        );
    }

    #[test]
    fn a_store_read_extends_what_the_tail_covers() {
        let mut t = ThreadTail::default();
        t.cover_through(50);
        assert_eq!(t.len(), 0, "an empty tail records nothing");
        t.push(ev(10, 4, "x"), &BIG);
        t.push(ev(12, 5, "x"), &BIG);
        // A hint raised the head to 20 (another thread's id): not provably covered...
        assert_eq!(ids(&t.after(10, Some(4), 20, 100, usize::MAX)), None);
        // ...until a read that saw every commit up to 20 found nothing more of the thread.
        t.cover_through(20);
        assert_eq!(
            ids(&t.after(10, Some(4), 20, 100, usize::MAX)),
            Some(vec![12])
        );
        assert_eq!(
            ids(&t.after(12, Some(5), 20, 100, usize::MAX)),
            Some(vec![])
        );
        assert_eq!(ids(&t.after(12, Some(5), 21, 100, usize::MAX)), None);
        t.cover_through(15);
        assert_eq!(
            ids(&t.after(12, Some(5), 20, 100, usize::MAX)),
            Some(vec![]),
            "coverage never shrinks"
        );
        // The thread's next event follows the covered range.
        t.push(ev(25, 6, "x"), &BIG);
        assert_eq!(
            ids(&t.after(12, Some(5), 25, 100, usize::MAX)),
            Some(vec![25])
        );
        // An event the tail holds already (a store read put it in before this process's own
        // acknowledgement of it came) is kept once.
        t.push(ev(25, 6, "x"), &BIG);
        assert_eq!(t.ids(), vec![10, 12, 25]);
        // One at or below what was covered contradicts it: the tail restarts.
        let mut t = ThreadTail::default();
        t.push(ev(10, 4, "x"), &BIG);
        t.cover_through(20);
        t.push(ev(18, 5, "x"), &BIG);
        assert_eq!(t.ids(), vec![18]);
        // A cleared tail forgets its coverage.
        t.cover_through(40);
        t.clear();
        t.push(ev(30, 9, "x"), &BIG);
        assert_eq!(ids(&t.after(30, Some(9), 31, 100, usize::MAX)), None);
    }

    #[test]
    fn pages_are_bounded_in_bytes_too() {
        let mut t = ThreadTail::default();
        for i in 1..=10 {
            t.push(ev(i, i, "x"), &BIG);
        }
        let one = t.events[0].bytes;
        let ids = |v: Option<Vec<Arc<TailEvent>>>| ids(&v).unwrap();
        assert_eq!(ids(t.after(0, Some(0), 10, 100, 3 * one)), vec![1, 2, 3]);
        assert_eq!(ids(t.after(0, Some(0), 10, 100, 3 * one - 1)), vec![1, 2]);
        // At least one event, whatever its size.
        assert_eq!(ids(t.after(4, Some(4), 10, 100, 1)), vec![5]);
        assert_eq!(ids(t.after(4, Some(4), 10, 2, usize::MAX)), vec![5, 6]);
    }

    #[test]
    fn a_seq_gap_restarts_the_tail() {
        let mut t = ThreadTail::default();
        t.push(ev(10, 4, "x"), &BIG);
        t.push(ev(12, 5, "x"), &BIG);
        // seq 6 was committed by another process (id 13): this process's next event is seq 7.
        t.push(ev(20, 7, "x"), &BIG);
        assert_eq!(t.len(), 1);
        assert_eq!(
            ids(&t.after(12, Some(5), 20, 100, usize::MAX)),
            None,
            "seq 6 missing"
        );
        assert_eq!(
            ids(&t.after(13, Some(6), 20, 100, usize::MAX)),
            Some(vec![20])
        );
        // A repeated or older id (never expected) restarts it too.
        t.push(ev(20, 8, "x"), &BIG);
        assert_eq!(t.len(), 1);
        assert_eq!(t.bytes(), t.events[0].bytes);
    }

    #[test]
    fn per_thread_bounds_drop_the_oldest() {
        let limits = TailLimits {
            events_per_thread: 3,
            ..BIG
        };
        let mut t = ThreadTail::default();
        for i in 1..=5 {
            t.push(ev(i, i, "x"), &limits);
        }
        assert_eq!(t.len(), 3);
        assert_eq!(
            ids(&t.after(2, Some(2), 5, 100, usize::MAX)),
            Some(vec![3, 4, 5])
        );
        assert_eq!(
            ids(&t.after(1, Some(1), 5, 100, usize::MAX)),
            None,
            "event 2 dropped"
        );

        let one = ev(1, 1, "x").bytes;
        let limits = TailLimits {
            bytes_per_thread: 2 * one + one / 2,
            ..BIG
        };
        let mut t = ThreadTail::default();
        for i in 1..=4 {
            t.push(ev(i, i, "x"), &limits);
        }
        assert_eq!(t.len(), 2);
        assert!(t.bytes() <= limits.bytes_per_thread);
        assert_eq!(t.bytes(), 2 * one);
        // An event larger than the whole bound leaves the tail empty.
        t.push(ev(5, 5, &"y".repeat(3 * one)), &limits);
        assert_eq!((t.len(), t.bytes()), (0, 0));
    }

    #[test]
    fn frames_are_the_n8n_wire_frame() {
        let e = ev(7, 1, "hi");
        assert_eq!(
            std::str::from_utf8(&e.n8n_frame).unwrap(),
            "id: 7\ndata: {\"type\":\"text-delta\",\"runId\":\"r\",\"agentId\":\"a\",\"payload\":{\"text\":\"hi\"},\"ts\":1}\n\n"
        );
        let mut hidden = ev(8, 2, "x").event.clone();
        hidden.event_type = "thread-created".into();
        assert!(TailEvent::new(hidden).n8n_frame.is_empty());
    }
}
