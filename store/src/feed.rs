//! A stream reader's cursor over one thread: pages of the thread's events after the cursor,
//! from the thread's hot tail when it provably holds all of them (see [`crate::tail`]), else
//! from the store; and the head it sleeps on between pages.

use std::sync::Arc;

use threadstream_domain::StoredEvent;
use tokio::sync::watch;

use crate::error::StoreError;
use crate::heads::ThreadHead;
use crate::tail::TailEvent;
use crate::EventLog;

/// A page from the tail holds at most this many bytes of events (beyond its first): a reader
/// that stalls while handing a page over keeps those events alive after the tail dropped them,
/// so this bounds what a stalled reader can pin.
const TAIL_PAGE_BYTES: usize = 32 * 1024;

/// Events read by [`ThreadFeed::next_page`], in id order.
pub enum Page {
    /// Shared with the thread's other readers: the n8n frame is rendered already. From the
    /// tail, or read from the store and put into the tail.
    Tail(Vec<Arc<TailEvent>>),
    /// Read from the store for this reader alone (a fork's page through its source, or nothing).
    Store(Vec<StoredEvent>),
}

impl Page {
    pub fn len(&self) -> usize {
        match self {
            Page::Tail(v) => v.len(),
            Page::Store(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The events, in order (tests; readers match on the variants).
    pub fn events(&self) -> Vec<&StoredEvent> {
        match self {
            Page::Tail(v) => v.iter().map(|e| &e.event).collect(),
            Page::Store(v) => v.iter().collect(),
        }
    }
}

/// One reader's position in a thread. While it lives, this process keeps the thread's tail.
pub struct ThreadFeed {
    log: EventLog,
    thread_id: String,
    head: watch::Receiver<i64>,
    shared: Arc<ThreadHead>,
    /// The id of the last event read (or where the reader asked to resume).
    cursor: i64,
    /// The seq of the last event read, once one was.
    last_seq: Option<i64>,
    /// The next page comes from the store whatever the tail holds.
    from_store: bool,
    /// Pages served by the tail and by the store (diagnostics, tests).
    tail_pages: u64,
    store_pages: u64,
}

impl ThreadFeed {
    pub(crate) fn new(log: EventLog, thread_id: &str, cursor: i64) -> Self {
        let (head, shared) = log.heads().feed(thread_id);
        ThreadFeed {
            log,
            thread_id: thread_id.to_string(),
            head,
            shared,
            cursor,
            last_seq: None,
            from_store: false,
            tail_pages: 0,
            store_pages: 0,
        }
    }

    /// The id of the last event read (or the resume point, before any).
    pub fn cursor(&self) -> i64 {
        self.cursor
    }

    /// How many pages of events came from the tail and how many from the store.
    pub fn pages_read(&self) -> (u64, u64) {
        (self.tail_pages, self.store_pages)
    }

    /// Marks the thread's head seen, then reads up to `limit` events after the cursor and moves
    /// the cursor past them. An empty page: nothing after the cursor up to the head seen, so
    /// [`ThreadFeed::changed`] is the next thing to wait for.
    ///
    /// When the tail does not hold them, the store is read, one feed of the thread at a time:
    /// a head hint from another process wakes all of a thread's feeds at once, and the first
    /// one's read goes into the tail ([`crate::Heads::fill_read`]), where the others, waiting
    /// for it, find the same events. So a thread costs one store read per hint, not one per
    /// watcher.
    pub async fn next_page(&mut self, limit: usize) -> Result<Page, StoreError> {
        // Seen *before* reading, so a commit after the read wakes `changed`.
        let head = *self.head.borrow_and_update();
        let recheck = std::mem::take(&mut self.from_store);
        if !recheck {
            if let Some(page) = self.tail_page(head, limit) {
                return Ok(page);
            }
        }
        let shared = self.shared.clone();
        let _turn = shared.store_read.lock().await;
        if !recheck {
            if let Some(page) = self.tail_page(head, limit) {
                return Ok(page);
            }
        }
        // Boxed: a reader spends its life waiting, not reading, and an idle reader should not
        // carry the space of a store query in its state.
        let page = Box::pin(self.log.read_thread_seen(
            &self.thread_id,
            self.cursor,
            i64::try_from(limit).unwrap_or(i64::MAX),
            head,
        ))
        .await?;
        let heads = self.log.heads();
        let Some(last) = page.last() else {
            // Nothing of the thread after the cursor up to `head`.
            heads.fill_read(&self.thread_id, &self.shared, self.cursor, Vec::new(), head);
            return Ok(Page::Store(page));
        };
        let (from, last_id, last_seq) = (self.cursor, last.id, last.seq);
        self.cursor = last_id;
        self.last_seq = Some(last_seq);
        self.store_pages += 1;
        // Only a short page goes into the tail: it holds every event of the thread up to what
        // the read saw, `head` included, and a later commit raises the head above it. A full
        // page does not say what follows it, and this process's head of a thread it only
        // started to watch may be far behind the log: a tail ending with that page would tell
        // the next reader it is caught up. Nor does a fork's page holding its source's events,
        // nor one holding compacted text: the tail serves a cursor by the ids it holds, and a
        // cursor inside a compacted range is none of them but may follow one by seq.
        if page.len() >= limit
            || page
                .iter()
                .any(|e| e.thread_id != self.thread_id || e.is_compacted())
        {
            return Ok(Page::Store(page));
        }
        let through = head.max(last_id);
        let events: Vec<Arc<TailEvent>> = page
            .into_iter()
            .map(|e| Arc::new(TailEvent::new(e)))
            .collect();
        heads.fill_read(&self.thread_id, &self.shared, from, events.clone(), through);
        Ok(Page::Tail(events))
    }

    /// The page after the cursor from the tail, when it provably holds it (moving the cursor).
    fn tail_page(&mut self, head: i64, limit: usize) -> Option<Page> {
        let events =
            self.shared
                .tail()
                .after(self.cursor, self.last_seq, head, limit, TAIL_PAGE_BYTES)?;
        if let Some(last) = events.last() {
            self.cursor = last.event.id;
            self.last_seq = Some(last.event.seq);
            self.tail_pages += 1;
        }
        Some(Page::Tail(events))
    }

    /// Marks the thread's head seen without reading: a reader that reads its source some other
    /// way calls this first, so a commit after it wakes [`ThreadFeed::changed`].
    pub fn mark_seen(&mut self) {
        self.head.borrow_and_update();
    }

    /// The next page is read from the store: a periodic re-check, since a head hint from
    /// another process can be lost.
    pub fn read_store_next(&mut self) {
        self.from_store = true;
    }

    /// Waits until the thread's head moves past what [`ThreadFeed::next_page`] saw.
    pub async fn changed(&mut self) -> Result<(), watch::error::RecvError> {
        self.head.changed().await
    }
}

impl Drop for ThreadFeed {
    fn drop(&mut self) {
        self.shared.feed_closed();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use threadstream_domain::ThreadCommand;

    use super::*;
    use crate::tests::{delta, fresh_pg_url, start};
    use crate::{Durability, NotifyMode};

    fn deltas(texts: &[&str]) -> Vec<ThreadCommand> {
        texts.iter().map(|t| delta("r1", t)).collect()
    }

    fn ids(page: &Page) -> Vec<i64> {
        page.events().iter().map(|e| e.id).collect()
    }

    fn ids_of(rows: &[StoredEvent]) -> Vec<i64> {
        rows.iter().map(|e| e.id).collect()
    }

    /// Reads the feed to the thread's end and checks every page against the store.
    async fn drain(feed: &mut ThreadFeed, log: &EventLog) -> Vec<i64> {
        let mut out = Vec::new();
        loop {
            let from = feed.cursor();
            let page = feed.next_page(3).await.unwrap();
            if page.is_empty() {
                return out;
            }
            let stored = log.read_thread("t", from, 3).await.unwrap();
            let got: Vec<StoredEvent> = page.events().into_iter().cloned().collect();
            assert_eq!(
                format!("{got:?}"),
                format!("{stored:?}"),
                "page after {from}"
            );
            if let Page::Tail(events) = &page {
                for e in events {
                    let mut frame = String::new();
                    if e.event.is_n8n() {
                        e.event.write_n8n_frame(&mut frame);
                    }
                    assert_eq!(e.n8n_frame, frame.as_bytes());
                }
            }
            out.extend(ids(&page));
        }
    }

    #[tokio::test]
    async fn the_tail_serves_exactly_what_the_store_holds_after_a_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::open_sqlite(dir.path(), Durability::Full)
            .await
            .unwrap();
        let mut feed = log.feed("t", 0);
        let first = log.append("t", start("r1")).await.unwrap();
        // Cursor 0 lies before the tail and no seq is known yet: the store.
        assert_eq!(drain(&mut feed, &log).await, ids_of(&first));
        assert_eq!(feed.pages_read(), (0, 1));
        let more = log
            .append("t", deltas(&["a", "b", "c", "d", "e"]))
            .await
            .unwrap();
        assert_eq!(drain(&mut feed, &log).await, ids_of(&more));
        assert_eq!(feed.pages_read(), (2, 1), "pages of 3 from the tail");

        // A client resuming on an id the tail holds is served from the tail at once.
        let mut resumed = log.feed("t", more[1].id);
        assert_eq!(drain(&mut resumed, &log).await, ids_of(&more[2..]));
        assert_eq!(resumed.pages_read(), (1, 0));
        // A cursor the tail does not hold (an id of another thread) goes to the store.
        let other = log.append("o", start("r9")).await.unwrap();
        let x = log.append("t", deltas(&["x"])).await.unwrap();
        let mut elsewhere = log.feed("t", other[0].id);
        let page = elsewhere.next_page(10).await.unwrap();
        assert_eq!(elsewhere.pages_read(), (0, 1));
        assert_eq!(ids(&page), ids_of(&x));
        assert_eq!(drain(&mut feed, &log).await, ids_of(&x));
        assert_eq!(feed.pages_read(), (3, 1));

        // A periodic re-check reads the store whatever the tail holds.
        feed.read_store_next();
        assert!(feed.next_page(10).await.unwrap().is_empty());
        let last = log.append("t", deltas(&["f"])).await.unwrap();
        feed.read_store_next();
        let page = feed.next_page(10).await.unwrap();
        assert_eq!(feed.pages_read(), (3, 2));
        assert_eq!(ids(&page), ids_of(&last));

        // No feed left: the next commit empties the tail.
        drop((feed, resumed, elsewhere));
        log.append("t", deltas(&["g"])).await.unwrap();
        assert_eq!(log.heads().tail_stats().events, 0);
        log.shutdown().await;
    }

    /// Two writers on one Postgres log with no head hints between them at all (`Local`): the
    /// reader on `a` must still get `b`'s events of the thread, in order, once `a`'s own next
    /// event shows the tail a seq gap, and never an event of `a` served past them.
    #[tokio::test]
    async fn another_writers_events_are_read_from_the_store_never_skipped() {
        let (_g, url) = fresh_pg_url().await;
        let a = EventLog::open_postgres(&url, NotifyMode::Local)
            .await
            .unwrap();
        let b = EventLog::open_postgres(&url, NotifyMode::Local)
            .await
            .unwrap();
        let mut feed = a.feed("t", 0);
        let first = a.append("t", start("r1")).await.unwrap();
        assert_eq!(drain(&mut feed, &a).await, ids_of(&first));
        let a1 = a.append("t", deltas(&["a1"])).await.unwrap();
        assert_eq!(drain(&mut feed, &a).await, ids_of(&a1));
        assert_eq!(feed.pages_read(), (1, 1));

        let b1 = b.append("t", deltas(&["b1", "b2"])).await.unwrap();
        let a2 = a.append("t", deltas(&["a2", "a3"])).await.unwrap();
        assert_eq!(a2[0].seq, b1[1].seq + 1, "a's writer caught up with b");
        // a's tail holds a2, a3 only: b1, b2 come from the store, then a2, a3.
        let mut want = ids_of(&b1);
        want.extend(ids_of(&a2));
        assert_eq!(drain(&mut feed, &a).await, want);
        // From there on the tail serves again.
        let tail_pages = feed.pages_read().0;
        let a4 = a.append("t", deltas(&["a4"])).await.unwrap();
        assert_eq!(drain(&mut feed, &a).await, ids_of(&a4));
        assert_eq!(feed.pages_read().0, tail_pages + 1);

        // b appends last and no hint ever comes: the timer's store re-check finds it.
        let b3 = b.append("t", deltas(&["b3"])).await.unwrap();
        feed.read_store_next();
        assert_eq!(drain(&mut feed, &a).await, ids_of(&b3));
        a.shutdown().await;
        b.shutdown().await;
    }

    /// Two logs on one fresh Postgres database, each told of the other's commits by
    /// LISTEN/NOTIFY (listening once this returns).
    async fn notified_pair() -> (crate::tests::Guard, EventLog, EventLog) {
        let (g, url) = fresh_pg_url().await;
        let a = EventLog::open_postgres(&url, NotifyMode::Postgres)
            .await
            .unwrap();
        let b = EventLog::open_postgres(&url, NotifyMode::Postgres)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await; // listeners up
        (g, a, b)
    }

    /// A reader catching up with a thread that this process only started to watch (its head
    /// here far behind the log) gets every event: a full page read from the store does not go
    /// into the tail, where it would look like the thread's end.
    #[tokio::test]
    async fn a_full_store_page_is_not_taken_for_the_threads_end() {
        let (_g, a, b) = notified_pair().await;
        let mut want = ids_of(&b.append("t", start("r1")).await.unwrap());
        let more = b
            .append("t", deltas(&["a", "b", "c", "d", "e", "f", "g"]))
            .await
            .unwrap();
        want.extend(ids_of(&more));
        // Watched from here on: no hint of what came before reaches this feed's head.
        let mut feed = a.feed("t", 0);
        let mut got = Vec::new();
        loop {
            let page = feed.next_page(3).await.unwrap();
            if page.is_empty() {
                break;
            }
            got.extend(ids(&page));
        }
        assert_eq!(got, want);
        a.shutdown().await;
        b.shutdown().await;
    }

    /// With LISTEN/NOTIFY, another process's commit raises the thread's head above the tail:
    /// the reader woken by it reads the store, even though its own tail looks complete.
    #[tokio::test]
    async fn a_head_hint_from_another_process_sends_the_reader_to_the_store() {
        let (_g, a, b) = notified_pair().await;
        let mut feed = a.feed("t", 0);
        let first = a.append("t", start("r1")).await.unwrap();
        let a1 = a.append("t", deltas(&["a1"])).await.unwrap();
        let mut want = ids_of(&first);
        want.extend(ids_of(&a1));
        assert_eq!(drain(&mut feed, &a).await, want);

        let b1 = b.append("t", deltas(&["b1"])).await.unwrap();
        tokio::time::timeout(Duration::from_secs(3), feed.changed())
            .await
            .expect("b's hint reaches a")
            .unwrap();
        let store_pages = feed.pages_read().1;
        let page = feed.next_page(10).await.unwrap();
        assert_eq!(
            feed.pages_read().1,
            store_pages + 1,
            "the hint is above the tail"
        );
        assert_eq!(ids(&page), ids_of(&b1));
        a.shutdown().await;
        b.shutdown().await;
    }

    /// A hint from another process wakes every feed of the thread: one of them reads the store,
    /// and the others take the same events from the tail its read filled. A hint whose id is
    /// another thread's (a batch that touched both) is covered by that read too.
    #[tokio::test]
    async fn one_store_read_serves_every_feed_a_hint_wakes() {
        let (_g, a, b) = notified_pair().await;
        let first = b.append("t", start("r1")).await.unwrap();
        let mut feeds: Vec<ThreadFeed> = (0..4).map(|_| a.feed("t", 0)).collect();
        let mut rounds = Vec::new();
        for texts in [&["a", "b"][..], &["c"], &["d", "e", "f"]] {
            let appended = b.append("t", deltas(texts)).await.unwrap();
            rounds.push(appended);
        }
        let mut want = ids_of(&first);
        want.extend(rounds.iter().flat_map(|r| ids_of(r)));
        let head = *want.last().unwrap();
        // Woken by the hints (or reading at once): every feed reads to the head.
        let reads = feeds.iter_mut().map(|f| async move {
            let mut got = Vec::new();
            while got.last() != Some(&head) {
                let page = f.next_page(100).await.unwrap();
                if page.is_empty() {
                    tokio::time::timeout(Duration::from_secs(3), f.changed())
                        .await
                        .expect("a hint")
                        .unwrap();
                }
                got.extend(ids(&page));
            }
            got
        });
        for got in futures::future::join_all(reads).await {
            assert_eq!(got, want);
        }
        // Cursor 0 with no seq known: each feed's first page is a store read; from there on,
        // each hint cost one read for the four feeds.
        let store_pages =
            |feeds: &[ThreadFeed]| feeds.iter().map(|f| f.pages_read().1).sum::<u64>();
        let before = store_pages(&feeds);
        assert!(
            before <= 4 + 3,
            "{before} store pages for 4 feeds and 3 hints"
        );

        let c = b.append("t", deltas(&["g", "h"])).await.unwrap();
        // A hint above the thread's last event: another thread's id in the same batch.
        let other = b.append("u", start("r2")).await.unwrap();
        a.heads().wake(&["t".to_string()], other[0].id);
        let reads = feeds.iter_mut().map(|f| async move {
            let mut got = Vec::new();
            loop {
                got.extend(ids(&f.next_page(100).await.unwrap()));
                if got.len() >= 2 {
                    return got;
                }
                tokio::time::timeout(Duration::from_secs(3), f.changed())
                    .await
                    .expect("a hint")
                    .unwrap();
            }
        });
        for got in futures::future::join_all(reads).await {
            assert_eq!(got, ids_of(&c));
        }
        assert_eq!(
            store_pages(&feeds),
            before + 1,
            "one store read for four feeds, and the tail covers the hint's id"
        );
        a.shutdown().await;
        b.shutdown().await;
    }
}
