//! The Postgres backend: the log shared by several `threadstream serve` processes.
//!
//! The table extends postgres-es's `events` layout (aggregate_type, aggregate_id, sequence,
//! event_type, event_version, payload, metadata) with the global position `id` and our envelope
//! columns. postgres-es itself cannot serve as the writer: it has no global position and inserts
//! one statement per event (see docs/architecture.md).
//!
//! **Global order.** A BIGSERIAL alone is not enough: concurrent transactions commit out of
//! order, so a reader tailing `id > cursor` could pass an id whose transaction commits later and
//! skip it for good. Every batch therefore takes one transaction-scoped advisory lock, reads the
//! highest id, and inserts its rows with the ids that follow; the lock is held until commit, so
//! batches commit one after another and ids become visible strictly in increasing order.
//!
//! **One index per thread.** Within a thread `sequence` and `id` grow together: the writer numbers
//! both in one pass under that lock, and the primary key refuses a sequence decided on a stale
//! aggregate. So the primary key (aggregate_type, aggregate_id, sequence) also orders a thread by
//! id, and thread pages are ranges of it ([`THREAD_PAGE`]); a second thread-keyed index would
//! double the random B-tree inserts every appended row pays for (migration 0006).
//!
//! This file owns the log: its connections, batches and reads. The other tables live beside it:
//! [`read_models`] (documents and checkpoints), [`leases`] (which instance runs which run),
//! [`tickets`] (stream tickets used) and [`idempotency`] (keys and their answers).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Executor, Postgres, Row};
use threadstream_domain::StoredEvent;

use crate::error::StoreError;

mod idempotency;
mod leases;
mod read_models;
mod replica;
mod tickets;

use replica::ReadKind;
pub use replica::ReplicaReads;
#[cfg(test)]
pub(crate) use replica::LAG_WAIT;

/// Takes the write order: the advisory lock that serializes batches across every process on
/// the database, then the highest committed id, read with a snapshot taken after the lock is
/// held, so it sees every batch that committed before it. One function
/// (`migrations/postgres/0014_take_order.sql`), whose plan Postgres keeps for the session.
macro_rules! take_order {
    () => {
        "SELECT threadstream_take_order()"
    };
}

/// A client's read of what `need` holds: `$read` (using the connection `$conn`) on a standby
/// that holds it, when standbys are configured and one does in time, counted as `$kind` by where
/// it ran; else `$primary` on the primary ([`replica`]).
macro_rules! read_seen {
    ($log:expr, $kind:expr, $need:expr, |$conn:ident| $read:expr, else $primary:expr) => {{
        let on_standby = match $log.standby($need).await {
            Some(mut $conn) => Some($read.await),
            None => None,
        };
        match $log.counted($kind, on_standby) {
            Some(answer) => Ok(answer),
            None => $primary.await,
        }
    }};
}
pub(crate) use read_seen;

/// Opens a batch in one round trip: the transaction, and [`take_order!`] in it.
const BEGIN_BATCH: &str = concat!("BEGIN; ", take_order!());

/// Commits a batch, but first fails if the transaction is already aborted: a bare `COMMIT` of
/// an aborted transaction rolls back and still reports success.
const COMMIT_BATCH: &str = "SELECT 1; COMMIT";

/// [`COMMIT_BATCH`] with a `pg_notify` of `payload` on `channel` first (which, as `SELECT 1`
/// does, fails in an aborted transaction). The values go as `E''` literals, backslashes and
/// quotes escaped, which read the same whatever `standard_conforming_strings` is: a simple
/// query (one round trip for both statements) takes no parameters.
fn notify_and_commit(channel: &str, payload: &str) -> String {
    fn literal(out: &mut String, s: &str) {
        out.push_str("E'");
        for c in s.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("''"),
                c => out.push(c),
            }
        }
        out.push('\'');
    }
    let mut sql = String::with_capacity(payload.len() + 64);
    sql.push_str("SELECT pg_notify(");
    literal(&mut sql, channel);
    sql.push_str(", ");
    literal(&mut sql, payload);
    sql.push_str("); COMMIT");
    sql
}

/// Owns the connection pool of one Postgres database.
#[derive(Clone)]
pub struct PgLog {
    pool: PgPool,
    /// Thread pages' own connections, whose sessions plan prepared statements generically
    /// ([`PAGE_PLANS`]).
    pages: PgPool,
    /// The connections batches run on, kept out of the pool between batches: taking a pooled
    /// connection costs a ping round trip, and giving it back another. Two, so the next batch
    /// can begin (and wait for the order lock) while the one before it commits.
    batch_conns: [BatchSlot; 2],
    /// Standbys that thread pages are read on (`--read-database-url`), if any.
    replica: Option<Arc<replica::Replica>>,
}

/// One kept batch connection (none until first used, or after it was closed).
type BatchSlot = Arc<tokio::sync::Mutex<Option<BatchConn>>>;

/// A connection batches run on, and the server process serving it.
pub(crate) struct BatchConn {
    conn: PoolConnection<Postgres>,
    session: PgSession,
}

/// The server process serving one connection, as `pg_stat_activity` names it: the process id
/// and its start (a process id alone may be another's on another server after a failover).
///
/// A connection lost during `COMMIT` leaves that process running while the commit waits for a
/// synchronous standby: its rows are invisible until it ends, and it ends committed.
/// [`PgLog::batch_stored`] waits for it before looking the rows up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgSession {
    pid: i32,
    started_us: i64,
}

/// This connection's [`PgSession`].
const OWN_SESSION: &str = "SELECT pid, (extract(epoch FROM backend_start) * 1000000)::bigint \
     FROM pg_stat_activity WHERE pid = pg_backend_pid()";

/// Whether a [`PgSession`] still runs on this server.
const SESSION_RUNS: &str = "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 \
     AND (extract(epoch FROM backend_start) * 1000000)::bigint = $2)";

impl BatchConn {
    /// A pooled connection kept for batches, and its session (asked once per connection).
    async fn acquire(pool: &PgPool) -> Result<BatchConn, StoreError> {
        let mut conn = pool.acquire().await?;
        let row = sqlx::query(OWN_SESSION).fetch_one(&mut *conn).await?;
        let session = PgSession {
            pid: row.try_get(0)?,
            started_us: row.try_get(1)?,
        };
        Ok(BatchConn { conn, session })
    }
}

/// One batch's transaction, on one of [`PgLog`]'s batch connections (a `PgConnection` through `Deref`).
/// Dropped without [`PgBatch::commit`], it closes the connection, which rolls the transaction
/// back; the next batch takes a fresh connection.
pub struct PgBatch {
    conn: tokio::sync::OwnedMutexGuard<Option<BatchConn>>,
    committed: bool,
}

impl Deref for PgBatch {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self
            .conn
            .as_ref()
            .expect("a batch holds its connection")
            .conn
    }
}

impl DerefMut for PgBatch {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self
            .conn
            .as_mut()
            .expect("a batch holds its connection")
            .conn
    }
}

impl PgBatch {
    /// Commits, sending `notify` (a channel and a payload) with the commit when given (a
    /// `NOTIFY` is delivered only if its transaction commits, in commit order).
    pub async fn commit(mut self, notify: Option<(&str, &str)>) -> Result<(), StoreError> {
        // A `&str` without arguments goes as a simple query: several statements in one message.
        match notify {
            None => (&mut *self).execute(COMMIT_BATCH).await?,
            Some((channel, payload)) => {
                let sql = notify_and_commit(channel, payload);
                (&mut *self).execute(sql.as_str()).await?
            }
        };
        self.committed = true;
        Ok(())
    }

    /// The server process this batch's transaction runs in.
    pub fn session(&self) -> PgSession {
        self.conn
            .as_ref()
            .expect("a batch holds its connection")
            .session
    }
}

impl Drop for PgBatch {
    fn drop(&mut self) {
        if !self.committed {
            if let Some(mut kept) = self.conn.take() {
                kept.conn.close_on_drop();
            }
        }
    }
}

/// The columns of a [`StoredEvent`], in the order `row_to_event` reads them.
macro_rules! columns {
    () => {
        "id, aggregate_id, sequence, run_id, agent_id, event_type, payload::text, ts, response_id, user_id"
    };
}

/// One page of a thread: `(thread_id, after, limit)`, the events with `id > after` in order.
///
/// The thread's only index is the primary key (migration 0006), so the page is a range of
/// `sequence`: within a thread `sequence` and `id` grow together, and `id > after` is
/// `sequence > s`, where `s` is the sequence of the last event at or before `after`. When `after`
/// is an event of this thread (the cursor of every page after the first) `s` is one probe of
/// `events_id_unique`; for any other cursor, a backward walk of the thread from its newest event
/// to the first at or before `after` (only what the reader is about to read anyway). Postgres
/// runs each sub-select only when the `COALESCE` reaches it. The page itself must stay one
/// ordered range of the primary key (tested in `postgres_thread_pages_are_one_ordered_index_range`).
pub(crate) const THREAD_PAGE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM events WHERE aggregate_type = 'thread' AND aggregate_id = $1 AND sequence > \
     CASE WHEN $2 <= 0 THEN 0 ELSE COALESCE(\
        (SELECT sequence FROM events \
          WHERE id = $2 AND aggregate_type = 'thread' AND aggregate_id = $1), \
        (SELECT sequence FROM events \
          WHERE aggregate_type = 'thread' AND aggregate_id = $1 AND id <= $2 \
          ORDER BY sequence DESC LIMIT 1), \
        0) END \
     ORDER BY sequence LIMIT $3"
);

/// How the connections that read thread pages plan them: always the generic plan. Left to
/// itself, Postgres kept choosing a custom plan for [`THREAD_PAGE`] under load and planned it
/// at every call (0.15 ms of planning against 0.03 ms of execution, docs/performance.md,
/// "Postgres's share"); the generic plan is the ordered index range
/// `postgres_thread_pages_are_one_ordered_index_range` checks. Only thread pages run there:
/// the pool's other statements keep Postgres's choice.
pub(crate) const PAGE_PLANS: (&str, &str) = ("plan_cache_mode", "force_generic_plan");

/// Thread pages' connections: few, since a page is one short index range, and opened when
/// first needed; an idle one closes after a minute. Taken from the 16 an instance used before
/// they had their own pool, so an instance still holds at most 17 with its listener
/// (docs/scaling.md, "Postgres connections per instance").
/// A lazily connected pool of [`PAGE_CONNECTIONS`] for thread pages, planned generically
/// ([`PAGE_PLANS`]): the primary's, and the standbys' ([`replica`]).
pub(crate) fn page_pool(opts: &PgConnectOptions, acquire_timeout: Duration) -> PgPool {
    PgPoolOptions::new()
        .max_connections(PAGE_CONNECTIONS)
        .acquire_timeout(acquire_timeout)
        .idle_timeout(Duration::from_secs(60))
        .connect_lazy_with(opts.clone().options([PAGE_PLANS]))
}

const PAGE_CONNECTIONS: u32 = 4;

/// The connections for everything else: the projector, leases, idempotency keys, whole-log
/// reads, and the two the writer keeps for its batches.
const POOL_CONNECTIONS: u32 = 16 - PAGE_CONNECTIONS;

/// One page of the whole log: `(after, limit)`.
const LOG_PAGE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM events WHERE id > $1 ORDER BY id LIMIT $2"
);

impl PgLog {
    /// Connects to `url` and applies migrations (sqlx takes an advisory lock, so instances
    /// starting together migrate once).
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_reading_from(url, None).await
    }

    /// [`PgLog::open`], with thread pages read on the standbys at `read_url` when they have
    /// replayed what the reader must see ([`replica`]).
    pub async fn open_reading_from(url: &str, read_url: Option<&str>) -> Result<Self, StoreError> {
        let replica = read_url
            .map(replica::Replica::connect_lazy)
            .transpose()?
            .map(Arc::new);
        let opts: PgConnectOptions = url
            .parse()
            .map_err(|e| StoreError::unavailable("invalid database url", e))?;
        let pool = PgPoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(opts.clone())
            .await?;
        let pages = page_pool(&opts, Duration::from_secs(5));
        sqlx::migrate!("../migrations/postgres")
            .run(&pool)
            .await
            .map_err(|e| StoreError::unavailable("migration failed", e))?;
        Ok(PgLog {
            pool,
            pages,
            batch_conns: Default::default(),
            replica,
        })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    #[cfg(test)]
    pub(crate) fn pages_pool(&self) -> &PgPool {
        &self.pages
    }

    pub async fn max_id(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COALESCE(MAX(id), 0) FROM events")
            .fetch_one(&self.pool)
            .await?;
        Ok(row.get(0))
    }

    /// Whether the first and last of `rows` (one batch, in id order) are stored as sent: the
    /// batch's key is its ids, checked against their thread, sequence, type, time and payload, so a
    /// batch of another writer that took the same ids after ours was lost does not count.
    /// Rows of one transaction are all there or none is.
    ///
    /// `None` while `session`, the process the batch's transaction ran in, still runs on this
    /// server: its `COMMIT` may be waiting for a synchronous standby, invisible now and
    /// committed later, so absent rows would not mean a batch not stored.
    pub(crate) async fn batch_stored(
        &self,
        rows: &[StoredEvent],
        session: PgSession,
    ) -> Result<Option<bool>, StoreError> {
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            return Ok(Some(false));
        };
        let runs: bool = sqlx::query_scalar(SESSION_RUNS)
            .bind(session.pid)
            .bind(session.started_us)
            .fetch_one(&self.pool)
            .await?;
        if runs {
            return Ok(None);
        }
        let found = sqlx::query(
            "SELECT id, aggregate_id, sequence, event_type, ts, payload::text FROM events \
             WHERE id = $1 OR id = $2",
        )
        .bind(first.id)
        .bind(last.id)
        .fetch_all(&self.pool)
        .await?;
        let matches = |want: &StoredEvent| {
            found.iter().any(|r| {
                r.get::<i64, _>(0) == want.id
                    && r.get::<String, _>(1) == want.thread_id
                    && r.get::<i64, _>(2) == want.seq
                    && r.get::<String, _>(3) == want.event_type
                    && r.get::<i64, _>(4) == want.ts
                    && r.get::<String, _>(5) == want.payload
            })
        };
        Ok(Some(matches(first) && matches(last)))
    }

    /// A round trip to the database on a pooled connection.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Opens a batch: a transaction holding the order lock, and the highest committed id.
    pub(crate) async fn begin_batch(&self) -> Result<(PgBatch, i64), StoreError> {
        // The first free one; both busy (a batch committing, the next beginning) does not
        // happen with one writer, but would wait.
        let (mut slot, at) = match self.batch_conns[0].clone().try_lock_owned() {
            Ok(slot) => (slot, 0),
            Err(_) => (self.batch_conns[1].clone().lock_owned().await, 1),
        };
        let kept = slot.is_some();
        if slot.is_none() {
            *slot = Some(BatchConn::acquire(&self.pool).await?);
        }
        let mut batch = PgBatch {
            conn: slot,
            committed: false,
        };
        match begin_on(&mut batch).await {
            Ok(head) => Ok((batch, head)),
            // The kept connection may have died with the server since the last batch (the pool
            // pings a connection before handing it out; a kept one is not): one more try on a
            // fresh connection, as a pooled connection would have been.
            Err(_) if kept => {
                drop(batch);
                let mut slot = self.batch_conns[at].clone().lock_owned().await;
                *slot = Some(BatchConn::acquire(&self.pool).await?);
                let mut batch = PgBatch {
                    conn: slot,
                    committed: false,
                };
                let head = begin_on(&mut batch).await?;
                Ok((batch, head))
            }
            Err(e) => Err(e),
        }
    }

    /// A transaction on a pooled connection, without the write order (an erasure's deletes
    /// before the writer takes it, [`PgLog::erase_ahead`]).
    pub(crate) async fn begin_unordered(&self) -> Result<PgBatch, StoreError> {
        let slot: BatchSlot = Arc::new(tokio::sync::Mutex::new(Some(
            BatchConn::acquire(&self.pool).await?,
        )));
        let mut batch = PgBatch {
            conn: slot.lock_owned().await,
            committed: false,
        };
        (&mut *batch).execute("BEGIN").await?;
        Ok(batch)
    }

    /// Takes the write order in a transaction begun without it ([`PgLog::begin_unordered`]);
    /// returns the highest committed id.
    pub(crate) async fn take_order(tx: &mut PgBatch) -> Result<i64, StoreError> {
        head_of((&mut **tx).fetch_all(take_order!()).await?)
    }

    /// Inserts a batch with one binary `COPY`: Postgres takes each value as sent and inserts
    /// the heap rows many at a time, where `INSERT … SELECT FROM UNNEST(…)` parsed ten arrays
    /// and materialized them first.
    pub async fn insert(tx: &mut PgBatch, rows: &[StoredEvent]) -> Result<(), StoreError> {
        let data = copy_data(rows)?;
        let mut copy = tx.copy_in_raw(COPY_EVENTS).await?;
        let sent = copy.send(data).await.map(|_| ());
        if let Err(e) = sent {
            // Leaves the connection usable if it still is; the transaction is rolled back anyway.
            let _ = copy.abort("batch not sent").await;
            return Err(e.into());
        }
        copy.finish().await?;
        Ok(())
    }

    pub async fn read_thread(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        Self::read_thread_on(&self.pages, thread_id, after, limit).await
    }

    /// [`PgLog::read_thread`] for a reader that must see every event up to `need` (the head it
    /// was woken for): on a standby that has replayed that far, if standbys are configured and
    /// one has within [`replica::LAG_WAIT`]; else on the primary.
    pub async fn read_thread_seen(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
        need: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        read_seen!(
            self,
            ReadKind::Page,
            need,
            |conn| Self::read_thread_on(&mut *conn, thread_id, after, limit),
            else self.read_thread(thread_id, after, limit)
        )
    }

    /// [`PgLog::read_all`] for a reader that must see every event up to `need`: on a standby
    /// that holds it, as [`PgLog::read_thread_seen`].
    pub async fn read_all_seen(
        &self,
        after: i64,
        limit: i64,
        need: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        read_seen!(
            self,
            ReadKind::View,
            need,
            |conn| Self::read_all_on(&mut *conn, after, limit),
            else self.read_all(after, limit)
        )
    }

    /// A standby connection that holds every event up to `need` (`None`: no standbys
    /// configured, or none did in time; [`replica::Replica::holding`]).
    pub(crate) async fn standby(&self, need: i64) -> Option<PoolConnection<Postgres>> {
        self.replica.as_ref()?.holding(need).await
    }

    /// The answer of a read that may have run on a standby, counted by where it ran (nothing
    /// counted without standbys); `None`: read it on the primary.
    pub(crate) fn counted<T>(
        &self,
        kind: ReadKind,
        on_standby: Option<Result<T, StoreError>>,
    ) -> Option<T> {
        self.replica.as_ref()?.counted(kind, on_standby)
    }

    /// Whether standbys serve clients' reads (`--read-database-url`).
    pub fn reads_on_standbys(&self) -> bool {
        self.replica.is_some()
    }

    /// Reads served on standbys and on the primary instead (`None`: no standbys configured).
    pub fn replica_reads(&self) -> Option<ReplicaReads> {
        self.replica.as_ref().map(|r| r.reads())
    }

    /// [`PgLog::read_thread`] on a given connection (a batch's transaction sees its own
    /// uncommitted rows).
    pub async fn read_thread_on<'e>(
        exec: impl sqlx::Executor<'e, Database = Postgres>,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(THREAD_PAGE)
            .bind(thread_id)
            .bind(after)
            .bind(limit)
            .fetch_all(exec)
            .await?;
        Ok(resume_after(rows.iter().map(row_to_event).collect(), after))
    }

    /// Compaction's writes in the batch `tx` ([`crate::compaction`]): each range's last row
    /// rewritten, the others deleted.
    pub(crate) async fn compact(
        tx: &mut PgBatch,
        merges: &[threadstream_domain::compaction::Merge],
    ) -> Result<(), StoreError> {
        let deleted: Vec<i64> = merges.iter().flat_map(|m| m.deleted()).copied().collect();
        sqlx::query("DELETE FROM events WHERE id = ANY($1)")
            .bind(&deleted)
            .execute(&mut **tx)
            .await?;
        let ids: Vec<i64> = merges.iter().map(|m| m.row.id).collect();
        let payloads: Vec<&str> = merges.iter().map(|m| m.row.payload.as_str()).collect();
        sqlx::query(
            "UPDATE events e SET payload = u.payload::json \
             FROM unnest($1::bigint[], $2::text[]) AS u(id, payload) WHERE e.id = u.id",
        )
        .bind(&ids)
        .bind(&payloads)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// [`crate::backend::Backend::read_all_picked`]: the next `limit` events' ids, streams and
    /// types, then the picked ones whole.
    pub(crate) async fn read_all_picked(
        &self,
        after: i64,
        limit: i64,
        picked: &(dyn Fn(&str, &str) -> bool + Sync),
    ) -> Result<(Option<i64>, Vec<StoredEvent>), StoreError> {
        let heads = sqlx::query(
            "SELECT id, aggregate_id, event_type FROM events WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let last = heads.last().map(|r| r.get::<i64, _>(0));
        let ids: Vec<i64> = heads
            .iter()
            .filter(|r| picked(r.get::<&str, _>(1), r.get::<&str, _>(2)))
            .map(|r| r.get(0))
            .collect();
        if ids.is_empty() {
            return Ok((last, Vec::new()));
        }
        let rows = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM events WHERE id = ANY($1) ORDER BY id"
        ))
        .bind(&ids)
        .fetch_all(&self.pool)
        .await?;
        Ok((
            last,
            resume_after(rows.iter().map(row_to_event).collect(), after),
        ))
    }

    pub async fn read_all(&self, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        Self::read_all_on(&self.pool, after, limit).await
    }

    /// [`PgLog::read_all`] on a given connection.
    async fn read_all_on<'e>(
        exec: impl sqlx::Executor<'e, Database = Postgres>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(LOG_PAGE)
            .bind(after)
            .bind(limit)
            .fetch_all(exec)
            .await?;
        Ok(resume_after(rows.iter().map(row_to_event).collect(), after))
    }

    pub async fn confirmation_thread(
        &self,
        request_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(
            "SELECT aggregate_id FROM events
             WHERE event_type = 'confirmation-request' AND payload_field(payload, 'requestId') = $1
             LIMIT 1",
        )
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn close(&self) {
        // The kept batch connection is checked out of the pool, and `Pool::close` waits for every
        // checked-out connection: give it back first, or closing never ends.
        for slot in &self.batch_conns {
            drop(slot.lock().await.take());
        }
        self.pool.close().await;
        self.pages.close().await;
        if let Some(replica) = &self.replica {
            replica.close().await;
        }
    }
}

/// Runs [`BEGIN_BATCH`] on `batch`'s connection; returns the highest committed id.
async fn begin_on(batch: &mut PgBatch) -> Result<i64, StoreError> {
    head_of((&mut **batch).fetch_all(BEGIN_BATCH).await?)
}

/// The highest committed id: the last row [`take_order!`] returns.
fn head_of(rows: Vec<sqlx::postgres::PgRow>) -> Result<i64, StoreError> {
    let head = rows
        .last()
        .ok_or_else(|| StoreError::refused("no head returned"))?;
    Ok(head.try_get(0)?)
}

/// The batch insert: every column of a row, in the order [`copy_data`] writes them.
const COPY_EVENTS: &str = "COPY events (id, aggregate_type, aggregate_id, sequence, event_type, \
     event_version, payload, metadata, run_id, agent_id, ts, response_id, user_id) \
     FROM STDIN (FORMAT binary)";

/// `rows` in `COPY`'s binary format: a header, then per row the field count and each field as
/// a 4-byte length (-1 for NULL) and its bytes (`bigint` big-endian; `text` and `json` as
/// UTF-8: a `json` value's binary form is its text, which Postgres still validates), then -1.
fn copy_data(rows: &[StoredEvent]) -> Result<Vec<u8>, StoreError> {
    fn int8(buf: &mut Vec<u8>, v: i64) {
        buf.extend_from_slice(&8i32.to_be_bytes());
        buf.extend_from_slice(&v.to_be_bytes());
    }
    fn text(buf: &mut Vec<u8>, v: Option<&str>) -> Result<(), StoreError> {
        match v {
            None => buf.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                let len = i32::try_from(v.len()).map_err(|_| {
                    StoreError::refused(format!("a field of {} bytes is too long", v.len()))
                })?;
                buf.extend_from_slice(&len.to_be_bytes());
                buf.extend_from_slice(v.as_bytes());
            }
        }
        Ok(())
    }
    let size: usize = rows
        .iter()
        .map(|r| 80 + r.thread_id.len() + r.payload.len() + r.run_id.len() + r.agent_id.len())
        .sum();
    let mut buf = Vec::with_capacity(21 + size);
    buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    buf.extend_from_slice(&0i32.to_be_bytes()); // flags: no OIDs
    buf.extend_from_slice(&0i32.to_be_bytes()); // no header extension
    for r in rows {
        buf.extend_from_slice(&13i16.to_be_bytes());
        int8(&mut buf, r.id);
        text(&mut buf, Some("thread"))?;
        text(&mut buf, Some(&r.thread_id))?;
        int8(&mut buf, r.seq);
        text(&mut buf, Some(&r.event_type))?;
        text(&mut buf, Some("1"))?;
        text(&mut buf, Some(&r.payload))?;
        text(&mut buf, Some("{}"))?;
        text(&mut buf, Some(&r.run_id))?;
        text(&mut buf, Some(&r.agent_id))?;
        int8(&mut buf, r.ts);
        text(&mut buf, r.response_id.as_deref())?;
        text(&mut buf, r.user_id.as_deref())?;
    }
    buf.extend_from_slice(&(-1i16).to_be_bytes());
    Ok(buf)
}

use threadstream_domain::compaction::resume_after;

fn row_to_event(r: &sqlx::postgres::PgRow) -> StoredEvent {
    StoredEvent {
        id: r.get(0),
        thread_id: r.get(1),
        seq: r.get(2),
        run_id: r.get(3),
        agent_id: r.get(4),
        event_type: r.get(5),
        payload: r.get(6),
        ts: r.get(7),
        response_id: r.get(8),
        user_id: r.get(9),
    }
}
