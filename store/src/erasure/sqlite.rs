//! The SQLite side of an erasure: what the writer's transaction runs on the append connection
//! (under SQLite's write lock), and what runs after its commit to take the text out of the
//! files (the thread index, the WALs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags};

use super::{ErasedStream, StreamHead};
use crate::error::StoreError;
use crate::sqlite_batch::SqliteBatch;

/// Stream heads (first events with an owner) above an id: `(?1 after)`; and, for each workflow
/// stream, one row per user whose events it holds (its first such event, that user as the
/// owner): a workflow is shared, and one the agent created or changed for a user holds their
/// words (see [`super::add_scope`]).
pub(crate) const HEADS_AFTER: &str = "SELECT id, thread_id, payload FROM events \
     WHERE id > ?1 AND type IN ('thread-created', 'stream-created') \
     UNION ALL \
     SELECT MIN(id), thread_id, json_object('owner', user_id) FROM events \
     WHERE id > ?1 AND thread_id >= 'workflow:' AND thread_id < 'workflow;' \
       AND user_id IS NOT NULL GROUP BY thread_id, user_id \
     ORDER BY 1";

const IDS_AFTER: &str = "SELECT thread_id, id FROM events \
     WHERE id > ?1 AND thread_id IN (SELECT value FROM json_each(?2)) ORDER BY id";

const DELETE_EVENT: &str = "DELETE FROM events WHERE id = ?1 AND thread_id = ?2";

/// Documents of every read model (shadows of a rebuild too) keyed by one of the streams: the
/// thread-keyed models use the thread id, analytics `thread\nrun`.
const DELETE_DOCS: &str = "DELETE FROM read_models WHERE \
     (CASE WHEN instr(key, char(10)) > 0 THEN substr(key, 1, instr(key, char(10)) - 1) ELSE key END) \
     IN (SELECT value FROM json_each(?1))";

/// Idempotency records whose answer was stored with erased events, or (user scope) the user's.
const DELETE_KEYS: &str = "DELETE FROM idempotency_keys \
     WHERE last_id IN (SELECT value FROM json_each(?1)) OR scope = ?2";

const RECORD_ERASED: &str = "INSERT INTO erased_streams (stream, tombstone_id, last_id) \
     VALUES (?1, ?2, ?3) ON CONFLICT (stream) DO UPDATE SET \
     tombstone_id = excluded.tombstone_id, last_id = excluded.last_id";

/// The thread index's stream heads of an owner, of a stream, and of the forks of some streams,
/// at or below the index's `through`.
const INDEXED_BY_OWNER: &str = "SELECT id, stream, owner, fork_source FROM idx.stream_heads \
     WHERE owner = ?1 AND id <= ?2";
const INDEXED_BY_STREAM: &str = "SELECT id, stream, owner, fork_source FROM idx.stream_heads \
     WHERE stream = ?1 AND id <= ?2";
const INDEXED_FORKS: &str = "SELECT id, stream, owner, fork_source FROM idx.stream_heads \
     WHERE fork_source IN (SELECT value FROM json_each(?1)) AND id <= ?2";

/// Whether the log still holds event `id` of `stream` (an erasure whose scrub never ran leaves
/// its streams' rows in the index).
const STILL_THERE: &str = "SELECT EXISTS (SELECT 1 FROM events WHERE id = ?1 AND thread_id = ?2)";

/// The heads `scope` may cover, on a reader connection (the log, with the index attached as
/// `idx`), in one read transaction: looked up in the index's `stream_heads` up to its `through`
/// (by owner or stream, then the forks of what was found until no new one), and read from the
/// log above it up to `upto` (the short part the indexer has not reached). What
/// [`super::add_scope`] makes of them is what it would make of every head of the log.
pub(crate) fn scope_heads(
    conn: &Connection,
    scope: &super::ErasureScope,
    upto: i64,
) -> rusqlite::Result<Vec<StreamHead>> {
    let tx = conn.unchecked_transaction()?;
    let through: i64 = tx
        .prepare_cached("SELECT through FROM idx.index_state")?
        .query_row([], |r| r.get(0))?;
    let mut heads: Vec<StreamHead> = {
        let mut stmt = tx.prepare_cached(HEADS_AFTER)?;
        let rows = stmt.query_map(params![through], |r| {
            Ok(StreamHead::from_parts(
                r.get(0)?,
                r.get(1)?,
                &r.get::<_, String>(2)?,
            ))
        })?;
        let mut tail = rows.collect::<rusqlite::Result<Vec<_>>>()?;
        tail.retain(|h| h.id <= upto);
        tail
    };
    let mut still_there = tx.prepare_cached(STILL_THERE)?;
    let mut indexed = |sql: &str,
                       key: &str,
                       heads: &mut Vec<StreamHead>|
     -> rusqlite::Result<usize> {
        let mut stmt = tx.prepare_cached(sql)?;
        let found = stmt
            .query_map(params![key, through], |r| {
                Ok(StreamHead {
                    id: r.get(0)?,
                    stream: r.get(1)?,
                    owner: Some(r.get::<_, String>(2)?).filter(|o| !o.is_empty()),
                    fork_source: r.get(3)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut added = 0;
        for h in found {
            let known = heads
                .iter()
                .any(|k| k.stream == h.stream && k.owner == h.owner);
            if !known && still_there.query_row(params![h.id, h.stream], |r| r.get::<_, bool>(0))? {
                heads.push(h);
                added += 1;
            }
        }
        Ok(added)
    };
    if let Some(user) = &scope.user_id {
        indexed(INDEXED_BY_OWNER, user, &mut heads)?;
    }
    if let Some(thread) = &scope.thread_id {
        indexed(INDEXED_BY_STREAM, thread, &mut heads)?;
    }
    loop {
        let mut streams = BTreeSet::new();
        super::add_scope(scope, &heads, &mut streams);
        let list: Vec<&String> = streams.iter().collect();
        if indexed(INDEXED_FORKS, &json_list(&list), &mut heads)? == 0 {
            break;
        }
    }
    drop(still_there);
    tx.commit()?;
    Ok(heads)
}

fn json_list<T: serde::Serialize>(items: &[T]) -> String {
    serde_json::to_string(items).expect("lists serialize")
}

impl SqliteBatch {
    pub(crate) fn stream_heads_after(&self, after: i64) -> Result<Vec<StreamHead>, StoreError> {
        let mut stmt = self.conn().prepare_cached(HEADS_AFTER)?;
        let rows = stmt.query_map(params![after], |r| {
            Ok(StreamHead::from_parts(
                r.get(0)?,
                r.get(1)?,
                &r.get::<_, String>(2)?,
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The ids of `streams` above `after` (a range of the primary key: the recent part of the
    /// log), in id order.
    pub(crate) fn stream_ids_after(
        &self,
        streams: &BTreeSet<String>,
        after: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let list: Vec<&String> = streams.iter().collect();
        let mut stmt = self.conn().prepare_cached(IDS_AFTER)?;
        let rows = stmt.query_map(params![after, json_list(&list)], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Deletes the events `ids` (by stream), the streams' read-model documents and the
    /// idempotency records of those events (and of `user`); returns what each stream lost.
    pub(crate) fn erase_rows(
        &mut self,
        ids: &BTreeMap<String, Vec<i64>>,
        user: Option<&str>,
    ) -> Result<Vec<ErasedStream>, StoreError> {
        let mut erased = Vec::new();
        let mut all = Vec::new();
        {
            let mut delete = self.conn().prepare_cached(DELETE_EVENT)?;
            for (stream, stream_ids) in ids {
                let mut gone = Vec::with_capacity(stream_ids.len());
                for &id in stream_ids {
                    if delete.execute(params![id, stream])? == 1 {
                        gone.push(id);
                    }
                }
                all.extend_from_slice(&gone);
                erased.push(ErasedStream::from_ids(stream, &gone));
            }
        }
        let streams: Vec<&String> = ids.keys().collect();
        self.conn()
            .execute(DELETE_DOCS, params![json_list(&streams)])?;
        self.conn()
            .execute(DELETE_KEYS, params![json_list(&all), user])?;
        Ok(erased)
    }

    /// Remembers each erased stream with its tombstone (what `404` and the readers' signal ask).
    pub(crate) fn record_erased(
        &mut self,
        streams: &[ErasedStream],
        tombstone_id: i64,
    ) -> Result<(), StoreError> {
        let mut stmt = self.conn().prepare_cached(RECORD_ERASED)?;
        for s in streams.iter().filter(|s| s.events > 0) {
            stmt.execute(params![s.stream, tombstone_id, s.last_id()])?;
        }
        Ok(())
    }
}

/// After an erasure's commit: the thread index forgets the streams (it held their ids, and
/// their names), and the index's and the log's WALs are checkpointed and truncated, so no
/// copy of a freed page is left in a file (the pages themselves were overwritten with zeros
/// as they were freed: `secure_delete`). Blocking.
pub(crate) fn scrub_files(log_path: &Path, streams: &[String]) -> Result<(), StoreError> {
    let index = Connection::open_with_flags(
        crate::sqlite_index::index_path(log_path),
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    index.busy_timeout(Duration::from_secs(10))?;
    index.execute_batch("PRAGMA secure_delete = ON;")?;
    index.execute(
        "ATTACH DATABASE ?1 AS log",
        params![crate::sqlite_index::read_only_uri(log_path)],
    )?;
    // A deferred transaction whose first statement writes the index locks the index only.
    index.execute_batch("BEGIN")?;
    let forget = || -> Result<(), StoreError> {
        index.execute(
            "DELETE FROM thread_runs WHERE thread_id IN (SELECT value FROM json_each(?1))",
            params![json_list(streams)],
        )?;
        index.execute(
            "DELETE FROM stream_heads WHERE stream IN (SELECT value FROM json_each(?1))",
            params![json_list(streams)],
        )?;
        // `through_thread` names the thread of event `through`: if that event is gone, the
        // index would not recognise its log at the next open (and rebuild). Everything between
        // the last event still there and `through` was erased, so the index may say it stops
        // there.
        index.execute(
            "UPDATE index_state SET
                through = COALESCE((SELECT MAX(id) FROM log.events WHERE id <= index_state.through), 0),
                through_thread = (SELECT thread_id FROM log.events
                    WHERE id = (SELECT MAX(id) FROM log.events WHERE id <= index_state.through))
             WHERE NOT EXISTS (SELECT 1 FROM log.events WHERE id = index_state.through)",
            [],
        )?;
        Ok(())
    };
    match forget() {
        Ok(()) => index.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = index.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    index.execute_batch("DETACH DATABASE log")?;
    truncate_wal(&index)?;
    let log = Connection::open_with_flags(
        log_path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    log.busy_timeout(Duration::from_secs(10))?;
    truncate_wal(&log)
}

/// `wal_checkpoint(TRUNCATE)`: copies the whole WAL into the database file and empties it. It
/// cannot finish while a reader holds an older snapshot (it then reports busy): retried a few
/// times, then left to the next erasure or the indexer's restarting checkpoints.
///
/// A `PASSIVE` checkpoint goes first: it copies what it can without stopping the writer, so the
/// `TRUNCATE`, which holds appends back while it copies, has only the frames written since to
/// copy (docs/performance.md, "erasure").
fn truncate_wal(conn: &Connection) -> Result<(), StoreError> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
    for attempt in 0..50 {
        let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
        if busy == 0 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10 * (attempt + 1).min(10)));
    }
    Err(StoreError::unavailable(
        "the WAL could not be truncated after the erasure (readers kept it busy)",
        std::io::Error::other("wal_checkpoint(TRUNCATE) busy"),
    ))
}
