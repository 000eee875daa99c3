//! The SQLite log's append path: one read-write connection, owned by whoever holds the batch in
//! hand (the writer task, on its own thread), running the group-commit transaction with
//! statements prepared once.
//!
//! Why rusqlite here and not the sqlx pool: sqlx moved every statement through its worker
//! thread and bound each value as an owned copy, and a 500-row `INSERT … VALUES` differs in
//! length from batch to batch, so it was parsed anew each time (5,000 placeholders); the insert
//! alone cost ≈ 3.3 µs per event (docs/performance-history.md, "Profile of durable ingest"). Here one cached
//! single-row statement is stepped once per event on the writer's thread.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags};
use threadstream_domain::StoredEvent;

use crate::error::StoreError;
use crate::idempotency::{sqlite_sql, AnsweredKey, IdempotencyKey};
use crate::sqlite_pages::{event_from_row, THREAD_TAIL};

const INSERT_EVENT: &str = "INSERT INTO events \
     (id, thread_id, seq, run_id, agent_id, type, payload, ts, response_id, user_id) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

const MAX_ID: &str = "SELECT COALESCE(MAX(id), 0) FROM events";

/// Owns the append connection between batches (`None` while a batch holds it, or after a
/// failure dropped it: the next batch opens a fresh one).
#[derive(Clone)]
pub(crate) struct Appender {
    path: PathBuf,
    idle: Arc<Mutex<Option<Connection>>>,
}

impl Appender {
    pub(crate) fn new(path: &Path) -> Self {
        Appender {
            path: path.to_path_buf(),
            idle: Arc::new(Mutex::new(None)),
        }
    }

    fn open(&self) -> Result<Connection, StoreError> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(10))?;
        // Commits write the WAL unsynced; the writer's syncer syncs it (see `sqlite`'s module
        // docs). Checkpoints belong to the indexer's thread.
        conn.execute_batch(
            "PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;
             PRAGMA cache_size = -32768; PRAGMA temp_store = memory;
             PRAGMA secure_delete = ON;",
        )?;
        conn.set_prepared_statement_cache_capacity(8);
        Ok(conn)
    }

    /// Closes the idle connection (when the log closes); a later batch would open a new one.
    pub(crate) fn close(&self) {
        self.slot().take();
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Connection>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `BEGIN IMMEDIATE` (SQLite's write lock, waited for up to the busy timeout) and the highest
    /// committed id. Blocking: called on the writer's own thread.
    pub(crate) fn begin(&self) -> Result<(SqliteBatch, i64), StoreError> {
        let conn = match self.slot().take() {
            Some(conn) => conn,
            None => self.open()?,
        };
        // A connection left inside a transaction by an error SQLite did not roll back itself
        // is rolled back first (`ROLLBACK` outside a transaction only errs).
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let head = match conn
            .prepare_cached(MAX_ID)
            .and_then(|mut s| s.query_row([], |r| r.get::<_, i64>(0)))
        {
            Ok(head) => head,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e.into());
            }
        };
        let batch = SqliteBatch {
            conn: Some(conn),
            home: self.clone(),
        };
        Ok((batch, head))
    }
}

/// One group-commit transaction on the append connection, holding SQLite's write lock from
/// `begin` to commit. Dropped without commit, it rolls back and gives the connection back.
pub struct SqliteBatch {
    conn: Option<Connection>,
    home: Appender,
}

impl SqliteBatch {
    pub(crate) fn conn(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("a batch holds its connection until it ends")
    }

    /// Inserts `rows`, one step of the cached statement each.
    pub(crate) fn insert(&mut self, rows: &[StoredEvent]) -> Result<(), StoreError> {
        let mut stmt = self.conn().prepare_cached(INSERT_EVENT)?;
        for r in rows {
            stmt.execute(params![
                r.id,
                r.thread_id,
                r.seq,
                r.run_id,
                r.agent_id,
                r.event_type,
                r.payload,
                r.ts,
                r.response_id,
                r.user_id
            ])?;
        }
        Ok(())
    }

    /// Events of `thread_id` with `id > from`, as this transaction sees them (its own inserts
    /// included), at most `limit`.
    pub(crate) fn read_tail(
        &self,
        thread_id: &str,
        from: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let mut stmt = self.conn().prepare_cached(THREAD_TAIL)?;
        let rows = stmt.query_map(params![thread_id, from, limit, i64::MAX], event_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Compaction's writes ([`crate::compaction`]): each range's last row rewritten, the others
    /// deleted. The thread index keeps the deleted ids; a page read skips ids it finds missing.
    pub(crate) fn compact(
        &mut self,
        merges: &[threadstream_domain::compaction::Merge],
    ) -> Result<(), StoreError> {
        let mut delete = self
            .conn()
            .prepare_cached("DELETE FROM events WHERE id = ?1")?;
        for id in merges.iter().flat_map(|m| m.deleted()) {
            delete.execute(params![id])?;
        }
        let mut rewrite = self
            .conn()
            .prepare_cached("UPDATE events SET payload = ?2 WHERE id = ?1")?;
        for m in merges {
            rewrite.execute(params![m.row.id, m.row.payload])?;
        }
        Ok(())
    }

    /// Whether `key` has an answer (not expired at `now`), as this transaction sees it.
    pub(crate) fn key_answered(&self, key: &IdempotencyKey, now: i64) -> Result<bool, StoreError> {
        let mut stmt = self.conn().prepare_cached(sqlite_sql::IS_ANSWERED)?;
        Ok(stmt.exists(params![key.scope, key.key, now])?)
    }

    /// Stores the answers of the batch's keyed appends; fails (and so fails the batch) if one
    /// of the keys is answered already, rather than store its events twice.
    pub(crate) fn store_answers(
        &mut self,
        keys: &[AnsweredKey],
        now: i64,
    ) -> Result<(), StoreError> {
        let mut stmt = self.conn().prepare_cached(sqlite_sql::STORE_ANSWER)?;
        for k in keys {
            let changed = stmt.execute(params![
                k.key.scope,
                k.key.key,
                k.fingerprint,
                k.expires_at,
                k.answer,
                k.last_id,
                now
            ])?;
            if changed != 1 {
                return Err(crate::idempotency::answered_twice());
            }
        }
        Ok(())
    }

    /// Commits. On failure the transaction is rolled back and the connection dropped (SQLite
    /// may have rolled back by itself, SQLITE_FULL or an I/O error); the next batch opens anew.
    pub(crate) fn commit(mut self) -> Result<(), StoreError> {
        let conn = self
            .conn
            .take()
            .expect("a batch holds its connection until it ends");
        match conn.execute_batch("COMMIT") {
            Ok(()) => {
                *self.home.slot() = Some(conn);
                Ok(())
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(e.into())
            }
        }
    }
}

impl Drop for SqliteBatch {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if conn.execute_batch("ROLLBACK").is_ok() {
                *self.home.slot() = Some(conn);
            }
        }
    }
}
