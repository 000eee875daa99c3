//! Durable Streams on the log: what the `/v1/stream/*` routes (`crate::http::streams`) share.
//!
//! A stream's state is the `DurableStream` aggregate folded from its log stream
//! (`stream:<path>`). Writes are decided by the log's writer; readers keep their own copy of the
//! fold in [`Streams`], brought up to date before each use by reading only the events after the
//! last one folded (usually none). So every instance on one database sees the same streams, and
//! nothing a client relies on lives only in one process's memory (the reads that slide a TTL
//! window aside: see `docs/protocol.md`).

pub mod protocol;
pub mod read;
pub mod reader;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hashlink::LruCache;
use threadstream_domain::durable_stream::{log_stream_id, DurableStream};
use threadstream_store::EventLog;

use crate::error::ApiError;

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
    folds: LruCache<String, Fold>,
    last_read_ms: HashMap<String, i64>,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            state: Mutex::new(State {
                folds: LruCache::new(CACHED_STREAMS),
                last_read_ms: HashMap::new(),
            }),
        }
    }
}

/// A stream's aggregate and the id of the last of its events folded in.
#[derive(Clone, Default)]
struct Fold {
    stream: DurableStream,
    last_id: i64,
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
    pub async fn current(&self, log: &EventLog, path: &str) -> Result<DurableStream, ApiError> {
        let cached = self.lock().folds.get(path).cloned();
        let mut fold = cached.unwrap_or_default();
        let log_id = log_stream_id(path);
        loop {
            let page = log.read_thread(&log_id, fold.last_id, FOLD_PAGE).await?;
            for row in &page {
                let event = row.decode().map_err(threadstream_store::StoreError::from)?;
                fold.stream.apply(row.id, row.ts, &event.body);
                fold.last_id = row.id;
            }
            if (page.len() as i64) < FOLD_PAGE {
                break;
            }
        }
        let stream = fold.stream.clone();
        let mut state = self.lock();
        // Another request may have folded further meanwhile: keep the furthest.
        if state
            .folds
            .peek(path)
            .is_none_or(|f| f.last_id <= fold.last_id)
        {
            state.folds.insert(path.to_string(), fold);
        }
        Ok(stream)
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
