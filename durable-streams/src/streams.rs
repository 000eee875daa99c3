//! The readers' side of Durable Streams: each stream's fold, kept up to date.
//!
//! A stream's state is the `DurableStream` aggregate folded from its log stream
//! (`stream:<path>`). Writes are decided by the log's writer; readers keep their own copy of the
//! fold in [`Streams`], brought up to date before each use by reading only the events after the
//! last one folded (usually none). So every instance on one database sees the same streams, and
//! nothing a client relies on lives only in one process's memory (the reads that slide a TTL
//! window aside: see `docs/protocol.md`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hashlink::LruCache;
use threadstream_domain::durable_stream::{log_stream_id, DurableStream};
use threadstream_domain::subscription::{Subscriptions, LOG_STREAM};
use threadstream_domain::StoredEvent;
use threadstream_store::{EventLog, StoreError};

/// Streams whose fold a process keeps (least recently used dropped; folded again on next use).
const CACHED_STREAMS: usize = 10_000;
/// Events folded per read while catching a stream's fold up.
const FOLD_PAGE: i64 = 5_000;

/// The readers' side of Durable Streams: each stream's fold, and when this process last served
/// a read of it. A cheap-to-clone handle.
#[derive(Clone, Default)]
pub struct Streams {
    inner: Arc<Inner>,
}

struct Inner {
    /// One lock for both maps: each use is a lookup or an insert, never held across an await.
    state: Mutex<State>,
}

struct State {
    /// Durable Streams, by path.
    folds: LruCache<String, Fold<DurableStream>>,
    /// Threads read as streams, by thread id.
    threads: LruCache<String, Fold<ThreadEnd>>,
    /// The subscriptions (one entry: their log stream).
    subscriptions: LruCache<String, Fold<Subscriptions>>,
    last_read_ms: HashMap<String, i64>,
    /// The log's erasure count when the folds were last checked: an erasure removes events a
    /// fold may hold (a fold only ever reads on from its last id), so the folds are dropped.
    erasures: u64,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            state: Mutex::new(State {
                folds: LruCache::new(CACHED_STREAMS),
                threads: LruCache::new(CACHED_STREAMS),
                subscriptions: LruCache::new(1),
                last_read_ms: HashMap::new(),
                erasures: 0,
            }),
        }
    }
}

/// A fold of one log stream and the id of the last of its events folded in.
#[derive(Clone, Default)]
struct Fold<F> {
    state: F,
    last_id: i64,
}

/// What reading a log stream as a Durable Stream folds from its events.
trait LogFold: Clone + Default {
    fn apply(&mut self, row: &StoredEvent) -> Result<(), StoreError>;
}

impl LogFold for DurableStream {
    fn apply(&mut self, row: &StoredEvent) -> Result<(), StoreError> {
        let event = row.decode()?;
        DurableStream::apply(self, row.id, row.ts, &event.body);
        Ok(())
    }
}

impl LogFold for Subscriptions {
    fn apply(&mut self, row: &StoredEvent) -> Result<(), StoreError> {
        let event = row.decode()?;
        Subscriptions::apply(self, row.id, row.ts, &event.body);
        Ok(())
    }
}

/// A thread as its Durable Stream reading needs it: whether it exists or was deleted, and the
/// id of its last event (the stream's offset). Only event types are looked at: nothing decoded.
#[derive(Clone, Default, Debug)]
pub struct ThreadEnd {
    pub exists: bool,
    pub deleted: bool,
    pub last_id: i64,
}

impl LogFold for ThreadEnd {
    fn apply(&mut self, row: &StoredEvent) -> Result<(), StoreError> {
        match row.event_type.as_str() {
            "thread-created" => self.exists = true,
            "thread-deleted" => self.deleted = true,
            _ => {}
        }
        self.last_id = row.id;
        Ok(())
    }
}

impl Streams {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Entries are replaced whole: a panic elsewhere cannot leave one half-written.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The stream at `path` as the log holds it now (every event committed before the call).
    pub async fn current(&self, log: &EventLog, path: &str) -> Result<DurableStream, StoreError> {
        Ok(self.current_at(log, path).await?.0)
    }

    /// [`Streams::current`], with the id of the last event of the stream's log stream folded
    /// into it (where a reader that follows the stream live goes on from).
    pub async fn current_at(
        &self,
        log: &EventLog,
        path: &str,
    ) -> Result<(DurableStream, i64), StoreError> {
        let fold = self
            .fold(log, &log_stream_id(path), path, |s| &mut s.folds)
            .await?;
        Ok((fold.state, fold.last_id))
    }

    /// Every subscription as the log holds it now, with the id of the last event of their log
    /// stream folded into it.
    pub async fn subscriptions(&self, log: &EventLog) -> Result<(Subscriptions, i64), StoreError> {
        let fold = self
            .fold(log, LOG_STREAM, LOG_STREAM, |s| &mut s.subscriptions)
            .await?;
        Ok((fold.state, fold.last_id))
    }

    /// The thread `thread_id` as its Durable Stream reading needs it, now.
    pub async fn thread_end(
        &self,
        log: &EventLog,
        thread_id: &str,
    ) -> Result<ThreadEnd, StoreError> {
        Ok(self
            .fold(log, thread_id, thread_id, |s| &mut s.threads)
            .await?
            .state)
    }

    /// `key`'s fold in the cache `pick` chooses, brought up to date with the events of
    /// `log_id` committed since it was last folded.
    async fn fold<F: LogFold>(
        &self,
        log: &EventLog,
        log_id: &str,
        key: &str,
        pick: fn(&mut State) -> &mut LruCache<String, Fold<F>>,
    ) -> Result<Fold<F>, StoreError> {
        let erasures = log.heads().erasures();
        let cached = {
            let mut state = self.lock();
            if state.erasures != erasures {
                state.erasures = erasures;
                state.folds.clear();
                state.threads.clear();
                state.subscriptions.clear();
            }
            pick(&mut state).get(key).cloned()
        };
        let mut fold = cached.unwrap_or_default();
        loop {
            let page = log.read_thread(log_id, fold.last_id, FOLD_PAGE).await?;
            for row in &page {
                fold.state.apply(row)?;
                fold.last_id = row.id;
            }
            if (page.len() as i64) < FOLD_PAGE {
                break;
            }
        }
        let kept = fold.clone();
        let mut guard = self.lock();
        let cache = pick(&mut guard);
        // Another request may have folded further meanwhile: keep the furthest.
        if cache.peek(key).is_none_or(|f| f.last_id <= kept.last_id) {
            cache.insert(key.to_string(), kept);
        }
        Ok(fold)
    }

    /// When this process last served a read of `path` (0: never).
    pub fn last_read_ms(&self, path: &str) -> i64 {
        self.lock().last_read_ms.get(path).copied().unwrap_or(0)
    }

    /// A read of `path` was served at `now_ms`: its TTL window starts again.
    pub fn touch(&self, path: &str, now_ms: i64) {
        let mut state = self.lock();
        if state.last_read_ms.len() >= CACHED_STREAMS && !state.last_read_ms.contains_key(path) {
            // Bounded: an entry older than any TTL it could extend is worth nothing; drop all
            // rather than track ages (a stream read again is entered again).
            state.last_read_ms.clear();
        }
        state.last_read_ms.insert(path.to_string(), now_ms);
    }
}
