//! The embedded SQLite backend: one file in the data directory, in WAL mode.
//!
//! Appends go through one dedicated connection (SQLite has one writer anyway); reads use
//! separate connections so a long replay never waits behind a commit: pages of events through
//! [`PageReader`], everything else through a read-only sqlx pool.
//!
//! Durability ([`Durability::Full`], the default) is a group sync rather than SQLite's
//! `synchronous=FULL`: the writer connection commits with `synchronous=NORMAL` (the WAL frames are
//! written, not synced), and the writer's syncer makes the WAL durable with one `fdatasync` per
//! group of commits ([`SqliteLog::sync_wal`]) before any of them is acknowledged. So the next
//! batch is decided, inserted and committed while the previous one's sync runs, instead of the
//! writer idling through every fsync. What the rest of the process reads is capped at the last
//! durable id ([`SqliteLog::committed`]): nobody in the process sees an event a power loss could
//! still take back. (Another process opening the same file can: it reads the WAL as it is.)

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, Sqlite, Transaction};
use threadstream_domain::StoredEvent;

use crate::error::StoreError;
use crate::idempotency::{sqlite_sql, IdempotencyKey, KeyClaim, StoredKey};
use crate::sqlite_batch::{Appender, SqliteBatch};
use crate::sqlite_index::ThreadIndexer;
use crate::sqlite_pages::PageReader;

/// In `tx`: moves `model`'s checkpoint from `from` to `to`; `false` (nothing changed) when it
/// is no longer `from` (another projector got there first).
async fn move_checkpoint(
    tx: &mut Transaction<'static, Sqlite>,
    model: &str,
    from: i64,
    to: i64,
) -> Result<bool, StoreError> {
    let current: i64 = sqlx::query("SELECT last_id FROM checkpoints WHERE model = ?")
        .bind(model)
        .fetch_optional(&mut **tx)
        .await?
        .map(|r| r.get(0))
        .unwrap_or(0);
    if current != from {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO checkpoints (model, last_id) VALUES (?, ?)
         ON CONFLICT (model) DO UPDATE SET last_id = excluded.last_id",
    )
    .bind(model)
    .bind(to)
    .execute(&mut **tx)
    .await?;
    Ok(true)
}

/// Read-model documents written by one statement (four bound values each, well under SQLite's
/// 32,766 variables).
const SAVE_DOCS_PER_STATEMENT: usize = 500;

/// The log's write-ahead log, next to `threadstream.db` in the data directory.
const WAL_FILE: &str = "threadstream.db-wal";

/// `fdatasync` of the WAL in `dir` (if there is one: none means nothing written since the last
/// connection closed), then, if `sync_dir`, `fsync` of `dir` (which names the WAL). Blocking.
fn sync_wal_file(dir: &Path, sync_dir: bool) -> std::io::Result<()> {
    match std::fs::File::open(dir.join(WAL_FILE)) {
        Ok(f) => f.sync_data()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if sync_dir {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Durability of commits. `Full` is the default; `Normal` is an explicit, measured opt-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// An append is acknowledged only once its events are on disk (the WAL is synced).
    #[default]
    Full,
    /// Acknowledged once written to the WAL, unsynced: survives a crash of the process, not a
    /// power loss or a crash of the OS.
    Normal,
}

/// The SQLite log: owns the writer connection and the readers of one database file.
#[derive(Clone)]
pub struct SqliteLog {
    writer: SqlitePool,
    readers: SqlitePool,
    pages: Arc<PageReader>,
    /// Keeps the thread index (`threadstream-index.db`) behind the log; stops with the last
    /// handle.
    indexer: Arc<ThreadIndexer>,
    /// The append connection (group-commit batches).
    appender: Appender,
    durability: Durability,
    dir: PathBuf,
    /// The highest id acknowledged (durable): every read outside the writer stops there.
    visible: Arc<AtomicI64>,
    /// Set when a sync of the WAL failed: what was written since is of unknown durability, so
    /// no further batch is accepted until the process restarts.
    broken: Arc<AtomicBool>,
}

impl SqliteLog {
    /// Opens (creating if needed) `threadstream.db` in `data_dir` and applies migrations.
    pub async fn open(data_dir: &Path, durability: Durability) -> Result<Self, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            StoreError::unavailable(format!("cannot create {}", data_dir.display()), e)
        })?;
        let path = data_dir.join("threadstream.db");
        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // Both modes: commits write the WAL without syncing it; `Full` syncs it in the
            // writer's syncer before acknowledging (module docs). Checkpoints still sync the WAL
            // before copying it and the database file after.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .pragma("cache_size", "-32768")
            // The thread indexer's thread checkpoints the WAL (store/src/sqlite_index.rs), so no
            // commit waits for a checkpoint of its own.
            .pragma("wal_autocheckpoint", "0")
            .pragma("temp_store", "memory")
            // Deleted content is overwritten with zeros as its pages are freed, so an erasure
            // leaves no copy of the text in the file (store/src/erasure).
            .pragma("secure_delete", "on");
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect_with(opts.clone())
            .await?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&writer)
            .await
            .map_err(|e| StoreError::unavailable("migration failed", e))?;
        let readers = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(opts.read_only(true))
            .await?;
        // Before any thread is read: the readers attach the index file it creates. First, what
        // an earlier process committed without syncing (it may have been killed between its
        // commit and its sync) is made durable, so the index and the readers may go up to the
        // head.
        let log_path = path.clone();
        let dir = data_dir.to_path_buf();
        let indexer = tokio::task::spawn_blocking(move || {
            if durability == Durability::Full {
                sync_wal_file(&dir, true)
                    .map_err(|e| StoreError::unavailable("cannot sync the log's WAL", e))?;
            }
            ThreadIndexer::start(&log_path)
        })
        .await
        .map_err(|e| StoreError::unavailable("indexer start failed", e))??;
        let log = SqliteLog {
            writer,
            readers,
            pages: PageReader::new(&path),
            indexer: Arc::new(indexer),
            appender: Appender::new(&path),
            durability,
            dir: data_dir.to_path_buf(),
            visible: Arc::new(AtomicI64::new(0)),
            broken: Arc::new(AtomicBool::new(false)),
        };
        let head = log.max_id().await?;
        log.visible.store(head, Ordering::Release);
        Ok(log)
    }

    /// The writing connection, for the small tables beside the log (`crate::signing_key`).
    pub(crate) fn write_pool(&self) -> &sqlx::SqlitePool {
        &self.writer
    }

    /// Whether commits must be followed by [`SqliteLog::sync_wal`] before they are acknowledged.
    pub(crate) fn needs_sync(&self) -> bool {
        self.durability == Durability::Full
    }

    /// Makes everything committed so far durable: `fdatasync` of the WAL file (the data
    /// directory that names it was synced at open). Blocking. A failure leaves the log refusing
    /// every later batch: after a failed fsync the kernel may have dropped the unsynced pages, so
    /// what is stored is unknown until the process restarts and reads the file again.
    pub(crate) fn sync_wal(&self) -> Result<(), StoreError> {
        // A sync after a failed one proves nothing: the pages the failure dropped are not
        // written again (the writer and the syncer both sync, so either may come second).
        if self.broken.load(Ordering::Acquire) {
            return Err(StoreError::refused(
                "an earlier fsync of the log failed; appends are refused until the service restarts",
            ));
        }
        // The directory naming the WAL was synced at open, and the WAL lives as long as the
        // log's connections do.
        sync_wal_file(&self.dir, false).map_err(|e| {
            self.broken.store(true, Ordering::Release);
            StoreError::unavailable(
                format!(
                    "the log could not be made durable (fsync of {} failed); appends are refused until the service restarts",
                    self.dir.join(WAL_FILE).display()
                ),
                e,
            )
        })
    }

    /// The highest id in the log (0 when empty).
    pub async fn max_id(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COALESCE(MAX(id), 0) FROM events")
            .fetch_one(&self.writer)
            .await?;
        Ok(row.get(0))
    }

    /// A transaction on the read models' writer connection (`BEGIN IMMEDIATE` if `immediate`).
    /// A `BEGIN` refused because a failure left the connection mid-transaction (SQLite rolled
    /// back by itself after SQLITE_FULL or an I/O error, and sqlx's transaction depth is out of
    /// step) is retried once on a fresh connection.
    async fn begin_writer(
        &self,
        immediate: bool,
    ) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        let begin = || async {
            if immediate {
                self.writer.begin_with("BEGIN IMMEDIATE").await
            } else {
                self.writer.begin().await
            }
        };
        match begin().await {
            Ok(tx) => Ok(tx),
            Err(e) => {
                tracing::warn!(error = %e, "cannot begin on the writer connection; reopening it");
                if let Ok(conn) = self.writer.acquire().await {
                    let _ = conn.close().await;
                }
                begin().await
            }
        }
    }

    /// Whether the log takes appends: a read of the database, and no failed fsync behind it.
    pub async fn ping(&self) -> Result<(), StoreError> {
        if self.broken.load(Ordering::Acquire) {
            return Err(StoreError::refused(
                "an earlier fsync of the log failed; appends are refused until the service restarts",
            ));
        }
        sqlx::query("SELECT 1").execute(&self.readers).await?;
        Ok(())
    }

    /// Opens a batch on the append connection: `BEGIN IMMEDIATE` takes SQLite's write lock at
    /// once (so even another process on the same file waits its turn), then reads the highest
    /// committed id. Blocking (the writer runs on a thread of its own).
    pub(crate) fn begin_batch(&self) -> Result<(SqliteBatch, i64), StoreError> {
        if self.broken.load(Ordering::Acquire) {
            return Err(StoreError::refused(
                "an earlier fsync of the log failed; appends are refused until the service restarts",
            ));
        }
        self.appender.begin()
    }

    /// Acknowledged events of `thread_id` with `id > after`, in id order, at most `limit`.
    pub async fn read_thread(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.pages
            .thread_page(thread_id, after, limit, self.visible())
            .await
    }

    /// [`SqliteLog::read_thread`] for the writer: every committed event, durable or not yet.
    pub(crate) async fn read_thread_committed(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.pages
            .thread_page(thread_id, after, limit, i64::MAX)
            .await
    }

    /// The highest acknowledged id.
    fn visible(&self) -> i64 {
        self.visible.load(Ordering::Acquire)
    }

    /// [`SqliteLog::read_thread`] as the batch `tx` (which began when `head` was the last
    /// committed id) sees it: the committed events from the readers, then those `tx` inserted
    /// itself. Nothing else can be committed while `tx` holds the write lock.
    pub async fn read_thread_in(
        &self,
        tx: &SqliteBatch,
        head: i64,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let mut page = if after < head {
            self.read_thread_committed(thread_id, after, limit).await?
        } else {
            Vec::new()
        };
        let left = limit - page.len() as i64;
        if left > 0 {
            let from = page.last().map_or(after, |e| e.id).max(head);
            page.extend(tx.read_tail(thread_id, from, left)?);
        }
        Ok(page)
    }

    /// Ids up to `last_id` are durable and acknowledged: readers and the thread indexer may go
    /// up to there.
    pub fn committed(&self, last_id: i64) {
        self.visible.fetch_max(last_id, Ordering::AcqRel);
        self.indexer.committed(last_id);
    }

    /// Acknowledged events of every thread with `id > after`, in id order, at most `limit`.
    pub async fn read_all(&self, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        self.pages.log_page(after, limit, self.visible()).await
    }

    /// [`SqliteLog::read_all`] for the writer: every committed event, durable or not yet.
    pub(crate) async fn read_all_committed(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.pages.log_page(after, limit, i64::MAX).await
    }

    /// The read-only pool (small queries outside the page reader).
    pub(crate) fn readers(&self) -> &SqlitePool {
        &self.readers
    }

    /// The log's file.
    pub(crate) fn path(&self) -> PathBuf {
        self.dir.join("threadstream.db")
    }

    /// First events of the log streams with an owner, above `after` and acknowledged; with the
    /// id they were read up to.
    pub async fn stream_heads(
        &self,
        after: i64,
    ) -> Result<(Vec<crate::erasure::StreamHead>, i64), StoreError> {
        let through = self.visible();
        let rows = sqlx::query(crate::erasure::sqlite::HEADS_AFTER)
            .bind(after)
            .fetch_all(&self.readers)
            .await?;
        let heads = rows
            .iter()
            .map(|r| {
                crate::erasure::StreamHead::from_parts(r.get(0), r.get(1), r.get::<&str, _>(2))
            })
            .filter(|h| h.id <= through)
            .collect();
        Ok((heads, through))
    }

    /// The heads an erasure of `scope` may cover, through the thread index
    /// ([`crate::erasure::sqlite::scope_heads`]), acknowledged; with the id they are complete
    /// through.
    pub async fn scope_heads(
        &self,
        scope: &crate::erasure::ErasureScope,
    ) -> Result<(Vec<crate::erasure::StreamHead>, i64), StoreError> {
        let upto = self.visible();
        let scope = scope.clone();
        let heads = self
            .pages
            .run(move |conn| crate::erasure::sqlite::scope_heads(conn, &scope, upto))
            .await?;
        Ok((heads, upto))
    }

    /// The thread holding confirmation request `request_id`, if any.
    pub async fn confirmation_thread(
        &self,
        request_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(
            "SELECT thread_id FROM events
             WHERE type = 'confirmation-request' AND json_extract(payload, '$.requestId') = ?
               AND id <= ?
             LIMIT 1",
        )
        .bind(request_id)
        .bind(self.visible())
        .fetch_optional(&self.readers)
        .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// One read-model document and the last event id folded into it.
    /// The stored documents of `model` among `keys`: `(key, doc, last_id)`, in no order.
    pub async fn load_docs_of(
        &self,
        model: &str,
        keys: &[String],
    ) -> Result<Vec<(String, String, i64)>, StoreError> {
        let keys = serde_json::to_string(keys).expect("strings serialize");
        let rows = sqlx::query(
            "SELECT key, doc, last_id FROM read_models
             WHERE model = ? AND key IN (SELECT value FROM json_each(?))",
        )
        .bind(model)
        .bind(keys)
        .fetch_all(&self.readers)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    pub async fn load_doc(
        &self,
        model: &str,
        key: &str,
    ) -> Result<Option<(String, i64)>, StoreError> {
        let row = sqlx::query("SELECT doc, last_id FROM read_models WHERE model = ? AND key = ?")
            .bind(model)
            .bind(key)
            .fetch_optional(&self.readers)
            .await?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    /// Every document of a read model, by key.
    pub async fn load_docs(&self, model: &str) -> Result<Vec<(String, String, i64)>, StoreError> {
        let rows =
            sqlx::query("SELECT key, doc, last_id FROM read_models WHERE model = ? ORDER BY key")
                .bind(model)
                .fetch_all(&self.readers)
                .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    /// The projector's checkpoint for `model` (0 when it has never run).
    pub async fn checkpoint(&self, model: &str) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT last_id FROM checkpoints WHERE model = ?")
            .bind(model)
            .fetch_optional(&self.writer)
            .await?;
        Ok(row.map(|r| r.get(0)).unwrap_or(0))
    }

    /// Writes changed documents and the new checkpoint of `model` in one transaction, unless the
    /// stored checkpoint is no longer `from_checkpoint` (another projector got there first).
    pub async fn save_docs(
        &self,
        model: &str,
        docs: &[(String, String, i64)],
        from_checkpoint: i64,
        checkpoint: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_writer(true).await?;
        if !move_checkpoint(&mut tx, model, from_checkpoint, checkpoint).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        // Many documents a statement: each statement is a round trip to sqlx's connection
        // thread and back (two thread wake-ups), and at model speed a projector batch touches
        // every live thread's documents (docs/performance.md, "Cost per token at model speed").
        for chunk in docs.chunks(SAVE_DOCS_PER_STATEMENT) {
            let mut query = sqlx::QueryBuilder::<Sqlite>::new(
                "INSERT INTO read_models (model, key, doc, last_id) \
                 SELECT v.column1, v.column2, v.column3, v.column4 FROM (",
            );
            query.push_values(chunk, |mut row, (key, doc, last_id)| {
                row.push_bind(model)
                    .push_bind(key)
                    .push_bind(doc)
                    .push_bind(last_id);
            });
            // A document whose last event is gone was folded from events an erasure removed
            // after they were read: it is not written (store/src/erasure).
            query.push(
                ") AS v WHERE EXISTS (SELECT 1 FROM events WHERE id = v.column4) \
                 ON CONFLICT (model, key) DO UPDATE SET doc = excluded.doc, last_id = excluded.last_id",
            );
            query.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    pub async fn replace_model(
        &self,
        model: &str,
        shadow: &str,
        from_checkpoint: i64,
        checkpoint: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_writer(true).await?;
        if !move_checkpoint(&mut tx, model, from_checkpoint, checkpoint).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query("DELETE FROM read_models WHERE model = ?")
            .bind(model)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO read_models (model, key, doc, last_id)
             SELECT ?, key, doc, last_id FROM read_models r WHERE model = ?
               AND EXISTS (SELECT 1 FROM events WHERE id = r.last_id)",
        )
        .bind(model)
        .bind(shadow)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Drops every document and the checkpoint of `model`.
    pub async fn clear_model(&self, model: &str) -> Result<(), StoreError> {
        let mut tx = self.begin_writer(false).await?;
        sqlx::query("DELETE FROM read_models WHERE model = ?")
            .bind(model)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM checkpoints WHERE model = ?")
            .bind(model)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Drops the idempotency keys that expired before `now`.
    pub async fn prune_keys(&self, now: i64) -> Result<(), StoreError> {
        sqlx::query(sqlite_sql::PRUNE)
            .bind(now)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Deletes every idempotency record of `user` (their scope); returns how many went.
    pub async fn erase_user_keys(&self, user: &str) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM idempotency_keys WHERE scope = ?")
            .bind(user)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected())
    }

    /// Inserts the claim's row (replacing an expired one); `false` when the key has one.
    pub async fn insert_claim(&self, c: &KeyClaim) -> Result<bool, StoreError> {
        let done = sqlx::query(sqlite_sql::INSERT_CLAIM)
            .bind(&c.key.scope)
            .bind(&c.key.key)
            .bind(&c.fingerprint)
            .bind(c.expires_at)
            .bind(&c.token)
            .bind(c.claimed_until)
            .bind(c.now)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Takes over the key's unanswered claim if it ran out; `false` when there is none such.
    pub async fn take_over_claim(&self, c: &KeyClaim) -> Result<bool, StoreError> {
        let done = sqlx::query(sqlite_sql::TAKE_OVER)
            .bind(&c.token)
            .bind(c.claimed_until)
            .bind(&c.key.scope)
            .bind(&c.key.key)
            .bind(&c.fingerprint)
            .bind(c.now)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The key's row. An answer whose events are not acknowledged yet (not yet durable) is not
    /// shown: nobody is answered with events a power loss could still take back.
    pub async fn read_key(
        &self,
        key: &IdempotencyKey,
        now: i64,
    ) -> Result<Option<StoredKey>, StoreError> {
        let row = sqlx::query(sqlite_sql::READ)
            .bind(&key.scope)
            .bind(&key.key)
            .bind(now)
            .fetch_optional(&self.writer)
            .await?;
        Ok(row.map(|r| {
            let last_id: Option<i64> = r.get(2);
            let acknowledged = last_id.is_none_or(|id| id <= self.visible());
            StoredKey {
                fingerprint: r.get(0),
                answer: r.get::<Option<String>, _>(1).filter(|_| acknowledged),
            }
        }))
    }

    /// Whether `key` has an answer (not expired at `now`), committed.
    pub async fn key_answered(&self, key: &IdempotencyKey, now: i64) -> Result<bool, StoreError> {
        let row = sqlx::query(sqlite_sql::IS_ANSWERED)
            .bind(&key.scope)
            .bind(&key.key)
            .bind(now)
            .fetch_optional(&self.writer)
            .await?;
        Ok(row.is_some())
    }

    /// Drops the key's row if it is still the unanswered claim `token` made.
    pub async fn release_claim(&self, key: &IdempotencyKey, token: &str) -> Result<(), StoreError> {
        sqlx::query(sqlite_sql::RELEASE)
            .bind(&key.scope)
            .bind(&key.key)
            .bind(token)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.appender.close();
        self.readers.close().await;
        self.writer.close().await;
    }
}
