//! Head notifications: the highest committed id per thread and for the whole log.
//!
//! They are hints that wake readers; readers always read the events themselves from the log
//! after their own cursor, so a missed or coalesced notification costs latency, never data.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use threadstream_domain::StoredEvent;
use tokio::sync::watch;

/// Per-thread and global head ids, shared by the writer (which advances them) and readers.
#[derive(Clone)]
pub struct Heads {
    inner: Arc<HeadsInner>,
}

struct HeadsInner {
    threads: Mutex<HashMap<String, watch::Sender<i64>>>,
    global: watch::Sender<i64>,
}

impl Heads {
    pub fn new(start: i64) -> Self {
        Heads {
            inner: Arc::new(HeadsInner {
                threads: Mutex::new(HashMap::new()),
                global: watch::channel(start).0,
            }),
        }
    }

    /// Subscribes to a thread's head. The value is the highest id committed for the thread since
    /// this process started watching it (0 before); only changes matter.
    pub fn thread(&self, thread_id: &str) -> watch::Receiver<i64> {
        let mut map = self.inner.threads.lock().expect("heads lock");
        map.entry(thread_id.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Subscribes to the whole log's head.
    pub fn global(&self) -> watch::Receiver<i64> {
        self.inner.global.subscribe()
    }

    /// Records a committed batch: one wake-up per thread touched, one global.
    pub(crate) fn advance(&self, rows: &[StoredEvent]) {
        let Some(last) = rows.last() else { return };
        {
            let mut map = self.inner.threads.lock().expect("heads lock");
            // Drop senders nobody listens to any more, so idle threads cost nothing.
            if map.len() > 1024 {
                map.retain(|_, s| s.receiver_count() > 0);
            }
            let mut seen: HashMap<&str, i64> = HashMap::new();
            for r in rows {
                seen.insert(&r.thread_id, r.id);
            }
            for (thread, id) in seen {
                if let Some(s) = map.get(thread) {
                    s.send_replace(id);
                }
            }
        }
        self.inner.global.send_replace(last.id);
    }

    /// Wakes the given threads' subscribers (a batch committed by another process).
    pub(crate) fn wake(&self, threads: &[String], id: i64) {
        {
            let map = self.inner.threads.lock().expect("heads lock");
            for t in threads {
                if let Some(s) = map.get(t.as_str()) {
                    s.send_replace(id);
                }
            }
        }
        self.wake_global(id);
    }

    /// Wakes every subscriber: after a listener (re)connects, when a notification may be lost.
    pub(crate) fn wake_all(&self, id: i64) {
        {
            let map = self.inner.threads.lock().expect("heads lock");
            for s in map.values() {
                let current = *s.borrow();
                s.send_replace(current.max(id));
            }
        }
        self.wake_global(id);
    }

    fn wake_global(&self, id: i64) {
        let current = *self.inner.global.borrow();
        self.inner.global.send_replace(current.max(id));
    }
}
