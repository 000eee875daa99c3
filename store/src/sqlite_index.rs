//! The thread index of the SQLite log: which event ids belong to which thread, kept in its own
//! file (`threadstream-index.db`) and written behind the log by one background thread.
//!
//! Why apart and behind: a thread-keyed index updated in every commit dirties one index page per
//! thread in the batch, so with 1,000 threads streaming at once each commit wrote ~4 MB and
//! durable ingest stopped at ~18,000 events/s (docs/performance-history.md, "Profile of durable ingest"). The log
//! itself is keyed by id only, so a commit appends a few pages. The indexer adds each thread's
//! new ids many at a time, in a file with its own write lock, so indexing never holds up a commit.
//!
//! Why runs of ids, not a row per id: a pass writes one row per busy thread (its new ids as runs
//! of consecutive ids, see [`encode_runs`]), so its cost is a scan of the new part of the log and
//! a few thousand inserts. One B-tree insert per event cost 1.5–2.5 µs of CPU per event, half a
//! core beside the writer at 300,000 events/s, and that contention was what lifted the
//! acknowledgement p99 above 10 ms (docs/performance-history.md, "Sixth pass").
//!
//! The same thread checkpoints the log's WAL, so a commit never waits for a checkpoint (SQLite's
//! automatic one runs inside the commit that crosses its threshold: a 4 MB copy and an fsync of
//! the database file every ~40 batches, which is what the slowest acknowledgements waited on).
//!
//! Readers (`sqlite_pages`) take a thread's ids up to `index_state.through` from here and scan
//! the log by id above it: the index may lag, a read is never wrong. The index is derived: a
//! missing, stale or foreign index file is rebuilt from the log when the log is opened.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use crate::error::StoreError;

/// The index's file, next to `threadstream.db`.
pub(crate) const INDEX_FILE: &str = "threadstream-index.db";

/// The index's schema; applied (dropping an older format) when `user_version` is below
/// [`SCHEMA_VERSION`].
const SCHEMA: &str = include_str!("../../migrations/sqlite-index/0003_stream_heads.sql");
const SCHEMA_VERSION: i64 = 3;

/// Ids of one thread in one row at most: bounds what a reader decodes to find its place in a row.
const MAX_IDS_PER_ROW: usize = 4096;

/// Events indexed per transaction at most: bounds how long one pass holds the index's lock.
const MAX_PER_PASS: i64 = 200_000;

/// How often the indexer looks at the log when nobody nudges it.
///
/// Why not more often: one pass adds each busy thread's new ids to that thread's part of the
/// index, so a pass rewrites about one index page per thread whatever it indexes, and every
/// write to the disk also lengthens the next sync the writer's acknowledgements wait for (the
/// VM's disk flushes everything written before). With 1,000 threads streaming, passes every
/// 100 ms wrote ~6 MB each and held durable ingest near 115,000 events/s; once a second, it
/// reaches ~240,000 (docs/performance-history.md, "Profile of durable ingest"). The cost: a reader scans at most
/// this long's appends of the log by id above the index.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// New events after which a commit wakes the indexer before its next poll (bounds the scan above
/// the index under the heaviest load).
const NUDGE_EVERY: i64 = 524_288;

/// The log's WAL is checkpointed at most this often: each checkpoint ends in an fsync of the
/// database file, which the writer's next sync waits behind.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// WAL frames (pages) above which a checkpoint also restarts the WAL. A passive checkpoint
/// copies pages without waiting for anyone, but under continuous appends the writer never finds
/// the WAL fully copied, so never starts it over, and the file would grow for as long as the load
/// lasts; a restarting checkpoint holds the next commit until it is done (a few ms, since the
/// passive ones have copied nearly everything), here once per 64 MB of WAL.
const RESTART_WAL_FRAMES: i64 = 16_384;

/// Handle to the indexer thread. Dropping the last handle stops the thread (after the pass in
/// hand) — the drop guard of the log's background work.
pub(crate) struct ThreadIndexer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    stop: AtomicBool,
    /// The highest id acknowledged (durable), which the index never goes past, and the last one
    /// that woke the indexer.
    committed: AtomicI64,
    nudged: AtomicI64,
}

impl ThreadIndexer {
    /// Brings the index of the log at `log_path` up to date (rebuilding it when it does not
    /// belong to this log), then keeps it up to date on a background thread.
    pub(crate) fn start(log_path: &Path) -> Result<Self, StoreError> {
        let index_path = index_path(log_path);
        let conn = open_writer(&index_path, log_path)?;
        check_belongs(&conn)?;
        // Everything in the log at open is durable (`SqliteLog::open` synced the WAL first).
        while index_pass(&conn, i64::MAX)? > 0 {}
        let checkpointer = open_checkpointer(log_path)?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            committed: AtomicI64::new(0),
            nudged: AtomicI64::new(0),
        });
        let bg = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("thread-indexer".into())
            .spawn(move || run(conn, checkpointer, &bg))
            .map_err(|e| StoreError::unavailable("cannot start the indexer", e))?;
        Ok(ThreadIndexer {
            shared,
            thread: Some(thread),
        })
    }

    /// Tells the indexer that ids up to `last_id` are acknowledged; wakes it once enough are new.
    pub(crate) fn committed(&self, last_id: i64) {
        self.shared.committed.fetch_max(last_id, Ordering::Relaxed);
        let nudged = self.shared.nudged.load(Ordering::Relaxed);
        if last_id - nudged >= NUDGE_EVERY {
            self.shared.nudged.store(last_id, Ordering::Relaxed);
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
        }
    }
}

impl Drop for ThreadIndexer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

pub(crate) fn index_path(log_path: &Path) -> PathBuf {
    log_path.with_file_name(INDEX_FILE)
}

fn run(conn: Connection, checkpointer: Connection, shared: &Shared) {
    let mut failing = false;
    let mut last_checkpoint: Option<Instant> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        if last_checkpoint.is_none_or(|t| t.elapsed() >= CHECKPOINT_EVERY) {
            last_checkpoint = Some(Instant::now());
            if let Err(e) = checkpoint_log(&checkpointer) {
                tracing::debug!(
                    error = &e as &dyn std::error::Error,
                    "log checkpoint failed; retrying"
                );
            }
        }
        match index_pass(&conn, shared.committed.load(Ordering::Acquire)) {
            // More is waiting: go on at once.
            Ok(n) if n >= MAX_PER_PASS as usize => continue,
            Ok(_) => failing = false,
            Err(e) => {
                // Readers stay correct (they scan the log above `through`); only slower.
                if !failing {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "thread index pass failed; retrying"
                    );
                }
                failing = true;
            }
        }
        std::thread::park_timeout(IDLE_POLL);
    }
}

/// The index file, created with its schema, with the log attached read-only as `log`.
fn open_writer(index_path: &Path, log_path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        index_path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // The index is derived, but a torn file would be rebuilt only if noticed: keep it as
    // durable as the log so it never needs to be.
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA cache_size = -16384;
         PRAGMA secure_delete = ON;",
    )?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version < SCHEMA_VERSION {
        conn.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA} COMMIT;"))?;
    }
    conn.execute(
        "ATTACH DATABASE ?1 AS log",
        params![read_only_uri(log_path)],
    )?;
    Ok(conn)
}

/// A read-write connection to the log used only for its checkpoints.
fn open_checkpointer(log_path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        log_path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(conn)
}

/// Copies the log's WAL into the database file without holding up anyone; once the WAL is
/// large, copies the rest and starts the WAL over (see [`RESTART_WAL_FRAMES`]).
fn checkpoint_log(conn: &Connection) -> Result<(), StoreError> {
    let frames: i64 = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))?;
    if frames > RESTART_WAL_FRAMES {
        conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0))?;
    }
    Ok(())
}

/// `file:` URI of `path` opened read-only (so the indexer can never write the log, and never
/// takes its write lock).
pub(crate) fn read_only_uri(path: &Path) -> String {
    format!(
        "file:{}?mode=ro",
        utf8_percent_encode(&path.to_string_lossy(), URI_PATH_SPECIAL)
    )
}

/// What a `file:` URI's path must escape: the characters that would end it or start an escape
/// (<https://www.sqlite.org/uri.html>). Bytes beyond ASCII are escaped too.
const URI_PATH_SPECIAL: &AsciiSet = &CONTROLS.add(b'?').add(b'#').add(b'%');

/// Rebuilds the index when it was not made from this log: its last indexed id is past the
/// log's head, or that event is in another thread (the log was replaced, say from a backup).
fn check_belongs(conn: &Connection) -> Result<(), StoreError> {
    let (through, indexed): (i64, Option<String>) =
        conn.query_row("SELECT through, through_thread FROM index_state", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    if through == 0 {
        return Ok(());
    }
    let logged: Option<String> = conn
        .query_row(
            "SELECT thread_id FROM log.events WHERE id = ?1",
            params![through],
            |r| r.get(0),
        )
        .optional()?;
    if indexed.is_none() || indexed != logged {
        tracing::warn!(
            through,
            "the thread index does not match the log; rebuilding it"
        );
        conn.execute_batch(
            "BEGIN IMMEDIATE; DELETE FROM thread_runs;
             UPDATE index_state SET through = 0, through_thread = NULL; COMMIT;",
        )?;
    }
    Ok(())
}

/// Indexes the events committed since the last pass, up to id `limit` (the last acknowledged:
/// readers take indexed ids as they are) and at most [`MAX_PER_PASS`], in one transaction of the
/// index file; returns how many ids it moved past.
fn index_pass(conn: &Connection, limit: i64) -> Result<usize, StoreError> {
    // `BEGIN IMMEDIATE` would take the write lock of every attached database, the log's too:
    // a deferred transaction whose first statement writes the index locks the index only.
    conn.execute_batch("BEGIN; UPDATE index_state SET through = through;")?;
    let pass = || -> Result<usize, StoreError> {
        let through: i64 = conn.query_row("SELECT through FROM index_state", [], |r| r.get(0))?;
        let head: i64 = conn.query_row("SELECT COALESCE(MAX(id), 0) FROM log.events", [], |r| {
            r.get(0)
        })?;
        let upto = head.min(limit).min(through + MAX_PER_PASS);
        if upto <= through {
            return Ok(0);
        }
        index_range(conn, through, upto)?;
        Ok((upto - through) as usize)
    };
    match pass() {
        Ok(n) => {
            conn.execute_batch("COMMIT")?;
            Ok(n)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Adds the log's ids in `through < id <= upto` to the index and moves `through` to `upto`, in
/// the caller's transaction: the range's ids grouped by thread, one row per thread (more when it
/// has over [`MAX_IDS_PER_ROW`]).
pub(crate) fn index_range(conn: &Connection, through: i64, upto: i64) -> Result<(), StoreError> {
    let mut by_thread: HashMap<String, Vec<i64>> = HashMap::new();
    let mut last_thread: Option<String> = None;
    // Stream heads met in the range (`crate::erasure`): `(owner, stream, id, fork source)`.
    let mut heads: Vec<(String, String, i64, Option<String>)> = Vec::new();
    let mut workflow_users: Vec<(String, String, i64)> = Vec::new();
    {
        let mut scan = conn.prepare_cached(HEADS_SCAN)?;
        let mut rows = scan.query(params![through, upto])?;
        while let Some(row) = rows.next()? {
            let id: i64 = row.get(0)?;
            // Borrowed: only a thread's first id in the range allocates its name.
            let thread = row.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?;
            if let Some(payload) = row
                .get_ref(2)?
                .as_str_or_null()
                .map_err(rusqlite::Error::from)?
            {
                let h = crate::erasure::StreamHead::from_parts(id, thread.to_owned(), payload);
                heads.push((h.owner.unwrap_or_default(), h.stream, id, h.fork_source));
            }
            if let Some(user) = row
                .get_ref(3)?
                .as_str_or_null()
                .map_err(rusqlite::Error::from)?
            {
                workflow_users.push((user.to_owned(), thread.to_owned(), id));
            }
            match by_thread.get_mut(thread) {
                Some(ids) => ids.push(id),
                None => {
                    by_thread.insert(thread.to_owned(), vec![id]);
                }
            }
            if id == upto {
                last_thread = Some(thread.to_owned());
            }
        }
    }
    let mut insert = conn.prepare_cached(
        "INSERT INTO thread_runs (thread_id, last_id, first_id, runs)
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (thread, ids) in &by_thread {
        // The scan is in id order (the log's primary key), so each thread's ids are ascending.
        for chunk in ids.chunks(MAX_IDS_PER_ROW) {
            let (first, last) = (chunk[0], chunk[chunk.len() - 1]);
            insert.execute(params![thread, last, first, encode_runs(chunk)])?;
        }
    }
    let mut head = conn.prepare_cached(
        "INSERT OR REPLACE INTO stream_heads (owner, stream, id, fork_source)
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (owner, stream, id, source) in &heads {
        head.execute(params![owner, stream, id, source])?;
    }
    // A workflow stream's row per user keeps the user's first id there.
    let mut user = conn.prepare_cached(
        "INSERT OR IGNORE INTO stream_heads (owner, stream, id, fork_source)
         VALUES (?1, ?2, ?3, NULL)",
    )?;
    for (owner, stream, id) in &workflow_users {
        user.execute(params![owner, stream, id])?;
    }
    if last_thread.is_none() {
        // Only a log with holes in its ids (rows deleted by hand) gets here: harmless, but the
        // next open cannot check that the index belongs to this log, so it will rebuild it.
        tracing::debug!(
            through,
            upto,
            "the last id of an index pass is not in the log"
        );
    }
    conn.execute(
        "UPDATE index_state SET through = ?1, through_thread = ?2",
        params![upto, last_thread],
    )?;
    Ok(())
}

/// A pass's scan of the log: each event's id and thread, with the payload of a stream's first
/// event (`thread-created`/`stream-created`) and the user of a workflow stream's event, what
/// `stream_heads` keeps: `(?1 through, ?2 upto)`.
const HEADS_SCAN: &str = "SELECT id, thread_id,
        CASE WHEN type IN ('thread-created', 'stream-created') THEN payload END,
        CASE WHEN thread_id >= 'workflow:' AND thread_id < 'workflow;' THEN user_id END
     FROM log.events WHERE id > ?1 AND id <= ?2";

/// Encodes ascending `ids` as runs of consecutive ids: per run, the gap from the end of the run
/// before (from `ids[0]` for the first) and its length minus one, each an LEB128 varint. A
/// thread streaming alone is one run per row; 1,000 interleaved threads ~2 bytes per id.
pub(crate) fn encode_runs(ids: &[i64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ids.len().min(64) * 2);
    let Some(&first) = ids.first() else {
        return out;
    };
    let mut prev_end = first;
    let mut start = first;
    let mut end = first;
    for &id in &ids[1..] {
        if id == end + 1 {
            end = id;
            continue;
        }
        put_varint(&mut out, (start - prev_end) as u64);
        put_varint(&mut out, (end - start) as u64);
        prev_end = end;
        start = id;
        end = id;
    }
    put_varint(&mut out, (start - prev_end) as u64);
    put_varint(&mut out, (end - start) as u64);
    out
}

/// The runs `(start, end)` (both inclusive) of a row written by [`encode_runs`], whose first id
/// is `first_id`; `None` for bytes that are not such a row.
pub(crate) fn decode_runs(first_id: i64, mut runs: &[u8]) -> Option<Vec<(i64, i64)>> {
    let mut out = Vec::new();
    let mut prev_end = first_id;
    while !runs.is_empty() {
        let start = prev_end.checked_add(i64::try_from(get_varint(&mut runs)?).ok()?)?;
        let end = start.checked_add(i64::try_from(get_varint(&mut runs)?).ok()?)?;
        out.push((start, end));
        prev_end = end;
    }
    Some(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{decode_runs, encode_runs, read_only_uri};

    /// A data directory whose name holds URI syntax or non-ASCII letters still opens, read-only.
    #[test]
    fn read_only_uri_escapes_what_sqlite_would_misread() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("dö #1?%20");
        std::fs::create_dir(&folder).unwrap();
        let path = folder.join("threadstream.db");
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (42);")
            .unwrap();
        let uri = read_only_uri(&path);
        assert!(
            uri.ends_with("/d%C3%B6 %231%3F%2520/threadstream.db?mode=ro"),
            "{uri}"
        );
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute("ATTACH DATABASE ?1 AS log", [&uri]).unwrap();
        let x: i64 = conn
            .query_row("SELECT x FROM log.t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(x, 42);
        assert!(conn.execute("INSERT INTO log.t VALUES (1)", []).is_err());
    }

    #[test]
    fn runs_round_trip() {
        let cases: Vec<Vec<i64>> = vec![
            vec![7],
            vec![1, 2, 3, 4],
            vec![5, 1005, 2005, 2006, 2007, 9000],
            (1..=10_000).step_by(3).collect(),
            vec![1 << 40, (1 << 40) + 1, 1 << 50],
        ];
        for ids in cases {
            let runs = decode_runs(ids[0], &encode_runs(&ids)).unwrap();
            let back: Vec<i64> = runs.iter().flat_map(|&(s, e)| s..=e).collect();
            assert_eq!(back, ids);
        }
        assert_eq!(encode_runs(&(1..=100_000).collect::<Vec<_>>()).len(), 4);
        // A truncated varint is not a row.
        assert_eq!(decode_runs(1, &[0x80]), None);
    }
}
