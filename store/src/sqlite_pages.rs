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
use crate::sqlite_index::{decode_runs, index_path, read_only_uri};

/// Connections reading at once; a further reader waits for one to come back.
const READERS: usize = 8;

/// The columns of a [`StoredEvent`], in the order [`event_from_row`] reads them.
macro_rules! columns {
    () => {
        "e.id, e.thread_id, e.seq, e.run_id, e.agent_id, e.type, e.payload, e.ts, e.response_id, e.user_id"
    };
}

/// The thread index's rows of a thread that hold ids after a cursor: `(?1 thread_id, ?2 after)`,
/// in id order (see `sqlite_index`).
pub(crate) const THREAD_RUNS: &str = "SELECT first_id, runs FROM idx.thread_runs
     WHERE thread_id = ?1 AND last_id > ?2 ORDER BY last_id";

/// One run of consecutive ids of a thread, from the index: `(?1 from, ?2 to)`, both inclusive.
pub(crate) const ID_RUN: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM events e WHERE e.id >= ?1 AND e.id <= ?2 ORDER BY e.id"
);

/// The part of a thread's page the indexer has not reached yet: `(?1 thread_id, ?2 after,
/// ?3 limit, ?4 upto)` with `after` at or past the index's `through`, a scan of the log's short
/// tail by id, up to the last acknowledged id `upto`.
pub(crate) const THREAD_TAIL: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM events e WHERE e.id > ?2 AND e.id <= ?4 AND e.thread_id = ?1 ORDER BY e.id LIMIT ?3"
);

/// One page of the whole log: `(?1 after, ?2 limit, ?3 upto)`, a range of the primary key.
pub(crate) const LOG_PAGE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM events e WHERE e.id > ?1 AND e.id <= ?3 ORDER BY e.id LIMIT ?2"
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

    /// Events of `thread_id` with `after < id <= upto`, in id order, at most `limit`.
    pub(crate) async fn thread_page(
        self: &Arc<Self>,
        thread_id: &str,
        after: i64,
        limit: i64,
        upto: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let thread_id = thread_id.to_owned();
        self.run(move |conn| thread_page(conn, &thread_id, after, limit, upto))
            .await
    }

    /// Events of every thread with `after < id <= upto`, in id order, at most `limit`.
    pub(crate) async fn log_page(
        self: &Arc<Self>,
        after: i64,
        limit: i64,
        upto: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(LOG_PAGE)?;
            let rows = stmt.query_map(rusqlite::params![after, limit, upto], event_from_row)?;
            Ok(threadstream_domain::compaction::resume_after(
                rows.collect::<rusqlite::Result<_>>()?,
                after,
            ))
        })
        .await
    }

    /// Runs `read` on an idle connection (opening one if none is idle) on a blocking thread.
    pub(crate) async fn run<T, F>(self: &Arc<Self>, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
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
        .map_err(|e| StoreError::unavailable("reader task failed", e))?
    }

    pub(crate) fn open(&self) -> Result<Connection, StoreError> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )?;
        conn.busy_timeout(Duration::from_secs(10))?;
        conn.set_prepared_statement_cache_capacity(8);
        conn.execute(
            "ATTACH DATABASE ?1 AS idx",
            rusqlite::params![read_only_uri(&index_path(&self.path))],
        )?;
        Ok(conn)
    }
}

/// Events of `thread_id` after `after` and up to `upto`, at most `limit`: the indexed ids (the
/// indexer never goes past the acknowledged ids), then the log above the index's `through`. One
/// read transaction, so `through` and the indexed ids are one snapshot of the index; whatever
/// snapshot of the log it meets, the result is the thread's events after `after` or a prefix of
/// them (the log is append-only in id order), never one with a hole.
pub(crate) fn thread_page(
    conn: &Connection,
    thread_id: &str,
    after: i64,
    limit: i64,
    upto: i64,
) -> rusqlite::Result<Vec<StoredEvent>> {
    let tx = conn.unchecked_transaction()?;
    let through: i64 = tx
        .prepare_cached("SELECT through FROM idx.index_state")?
        .query_row([], |r| r.get(0))?;
    let mut page: Vec<StoredEvent> = Vec::new();
    let mut cursor = after;
    // Usually once: again only when ids the index named are missing from the log (rows deleted
    // by hand), so the page still fills from what is there.
    while cursor < through && (page.len() as i64) < limit {
        let runs = indexed_runs(&tx, thread_id, cursor, limit - page.len() as i64)?;
        let Some(&(_, last)) = runs.last() else {
            break;
        };
        let mut stmt = tx.prepare_cached(ID_RUN)?;
        for (from, to) in runs {
            for e in stmt.query_map(rusqlite::params![from, to], event_from_row)? {
                page.push(e?);
            }
        }
        cursor = last;
    }
    let left = limit - page.len() as i64;
    if left > 0 {
        let from = cursor.max(through);
        let mut stmt = tx.prepare_cached(THREAD_TAIL)?;
        for e in stmt.query_map(
            rusqlite::params![thread_id, from, left, upto],
            event_from_row,
        )? {
            page.push(e?);
        }
    }
    tx.commit()?;
    Ok(threadstream_domain::compaction::resume_after(page, after))
}

/// The first `want` indexed ids of `thread_id` after `after`, as runs `(from, to)` in id order.
fn indexed_runs(
    tx: &rusqlite::Transaction<'_>,
    thread_id: &str,
    after: i64,
    mut want: i64,
) -> rusqlite::Result<Vec<(i64, i64)>> {
    let mut out = Vec::new();
    let mut stmt = tx.prepare_cached(THREAD_RUNS)?;
    let mut rows = stmt.query(rusqlite::params![thread_id, after])?;
    while want > 0 {
        let Some(row) = rows.next()? else { break };
        let first: i64 = row.get(0)?;
        let runs = decode_runs(first, row.get_ref(1)?.as_blob()?).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                1,
                rusqlite::types::Type::Blob,
                format!("thread index row of {thread_id} at {first} is not a list of runs").into(),
            )
        })?;
        for (from, to) in runs {
            let from = from.max(after + 1);
            if from > to {
                continue;
            }
            // Saturating: `want` may be i64::MAX ("the whole thread").
            let to = to.min(from.saturating_add(want - 1));
            out.push((from, to));
            want -= to - from + 1;
            if want == 0 {
                break;
            }
        }
    }
    Ok(out)
}

pub(crate) fn event_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEvent> {
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
