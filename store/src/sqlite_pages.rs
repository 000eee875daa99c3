//! Pages of the SQLite log for readers (SSE replay, projections, audit): owns a small set of
//! read-only connections that run prepared statements on blocking threads.
//!
//! Why not the sqlx pool the writer uses: sqlx-sqlite moves every row through a channel from its
//! worker thread, copying each value on the way, and a 100,000-event replay spent most of its time
//! in that per-row machinery (malloc/free, `sqlite3_value_dup`, channel sends; docs/performance.md,
//! "Replay"). Here a page is one `spawn_blocking` call that steps a cached statement and builds the
//! `StoredEvent`s directly.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use threadstream_domain::StoredEvent;
use tokio::sync::Semaphore;

use crate::error::StoreError;

/// Connections reading at once; a further reader waits for one to come back.
const READERS: usize = 8;

/// The columns of a [`StoredEvent`], in the order [`event_from_row`] reads them.
macro_rules! columns {
    () => {
        "id, thread_id, seq, run_id, agent_id, type, payload, ts, response_id, user_id"
    };
}

/// One page of a thread: `(?1 thread_id, ?2 after, ?3 limit)`, one ordered range of
/// `events_by_thread`.
pub(crate) const THREAD_PAGE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM events WHERE thread_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
);

/// One page of the whole log: `(?1 after, ?2 limit)`, a range of the primary key.
pub(crate) const LOG_PAGE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM events WHERE id > ?1 ORDER BY id LIMIT ?2"
);

/// Owns the idle read-only connections to one database file and the permits that bound them.
pub(crate) struct PageReader {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

impl PageReader {
    /// Readers of the database at `path` (which must exist: the writer opens it first).
    pub(crate) fn new(path: &Path) -> Arc<Self> {
        Arc::new(PageReader {
            path: path.to_path_buf(),
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(READERS),
        })
    }

    /// Events of `thread_id` with `id > after`, in id order, at most `limit`.
    pub(crate) async fn thread_page(
        self: &Arc<Self>,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let thread_id = thread_id.to_owned();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(THREAD_PAGE)?;
            let rows =
                stmt.query_map(rusqlite::params![thread_id, after, limit], event_from_row)?;
            rows.collect()
        })
        .await
    }

    /// Events of every thread with `id > after`, in id order, at most `limit`.
    pub(crate) async fn log_page(
        self: &Arc<Self>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(LOG_PAGE)?;
            let rows = stmt.query_map(rusqlite::params![after, limit], event_from_row)?;
            rows.collect()
        })
        .await
    }

    /// Runs `read` on an idle connection (opening one if none is idle) on a blocking thread.
    async fn run<F>(self: &Arc<Self>, read: F) -> Result<Vec<StoredEvent>, StoreError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<Vec<StoredEvent>> + Send + 'static,
    {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Closed)?;
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let idle = this.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let conn = match idle {
                Some(conn) => conn,
                None => this.open()?,
            };
            let page = read(&conn)?;
            // A connection whose read failed is dropped rather than reused.
            this.idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(conn);
            Ok(page)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("reader task failed: {e}")))?
    }

    fn open(&self) -> Result<Connection, StoreError> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )?;
        conn.busy_timeout(Duration::from_secs(10))?;
        conn.set_prepared_statement_cache_capacity(4);
        Ok(conn)
    }
}

fn event_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEvent> {
    Ok(StoredEvent {
        id: r.get(0)?,
        thread_id: r.get(1)?,
        seq: r.get(2)?,
        run_id: r.get(3)?,
        agent_id: r.get(4)?,
        event_type: r.get(5)?,
        payload: r.get(6)?,
        ts: r.get(7)?,
        response_id: r.get(8)?,
        user_id: r.get(9)?,
    })
}
