//! The embedded SQLite backend: one file in the data directory, WAL, `synchronous=FULL`.
//!
//! Appends go through one dedicated connection (SQLite has one writer anyway); reads use
//! separate connections so a long replay never waits behind a commit: pages of events through
//! [`PageReader`], everything else through a read-only sqlx pool.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Row, Sqlite, Transaction};
use threadstream_domain::StoredEvent;

use crate::error::StoreError;
use crate::sqlite_index::ThreadIndexer;
use crate::sqlite_pages::{PageReader, THREAD_TAIL};

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

/// Rows per multi-row INSERT statement (10 binds each; SQLite allows 32,766 binds).
const ROWS_PER_INSERT: usize = 500;

/// Durability of commits. `Full` is the default; `Normal` is an explicit, measured opt-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    #[default]
    Full,
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
}

impl SqliteLog {
    /// Opens (creating if needed) `threadstream.db` in `data_dir` and applies migrations.
    pub async fn open(data_dir: &Path, durability: Durability) -> Result<Self, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", data_dir.display()))
        })?;
        let path = data_dir.join("threadstream.db");
        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match durability {
                Durability::Full => SqliteSynchronous::Full,
                Durability::Normal => SqliteSynchronous::Normal,
            })
            .busy_timeout(Duration::from_secs(10))
            .pragma("cache_size", "-32768")
            // The thread indexer's thread checkpoints the WAL (store/src/sqlite_index.rs), so no
            // commit waits for a checkpoint of its own.
            .pragma("wal_autocheckpoint", "0")
            .pragma("temp_store", "memory");
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect_with(opts.clone())
            .await?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&writer)
            .await
            .map_err(|e| StoreError::Unavailable(format!("migration failed: {e}")))?;
        let readers = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(opts.read_only(true))
            .await?;
        // Before any thread is read: the readers attach the index file it creates.
        let log_path = path.clone();
        let indexer = tokio::task::spawn_blocking(move || ThreadIndexer::start(&log_path))
            .await
            .map_err(|e| StoreError::Unavailable(format!("indexer start failed: {e}")))??;
        Ok(SqliteLog {
            writer,
            readers,
            pages: PageReader::new(&path),
            indexer: Arc::new(indexer),
        })
    }

    /// The highest id in the log (0 when empty).
    pub async fn max_id(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COALESCE(MAX(id), 0) FROM events")
            .fetch_one(&self.writer)
            .await?;
        Ok(row.get(0))
    }

    /// Opens a batch: `BEGIN IMMEDIATE` takes SQLite's write lock at once (so even another
    /// process on the same file waits its turn), then reads the highest committed id.
    /// A transaction on the writer connection (`BEGIN IMMEDIATE` if `immediate`). A `BEGIN`
    /// refused because the connection was left mid-transaction by a failure (see
    /// [`crate::backend::Backend::reset_writer`]) is retried once on a fresh connection.
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
                self.reset_writer().await;
                begin().await
            }
        }
    }

    /// See [`crate::backend::Backend::reset_writer`].
    pub async fn reset_writer(&self) {
        if let Ok(conn) = self.writer.acquire().await {
            let _ = conn.close().await;
        }
    }

    pub async fn begin_batch(&self) -> Result<(Transaction<'static, Sqlite>, i64), StoreError> {
        let mut tx = self.begin_writer(true).await?;
        let head: i64 = sqlx::query("SELECT COALESCE(MAX(id), 0) FROM events")
            .fetch_one(&mut *tx)
            .await?
            .get(0);
        Ok((tx, head))
    }

    /// Inserts `rows` inside the batch's transaction, 500 rows per statement.
    pub async fn insert(
        tx: &mut Transaction<'static, Sqlite>,
        rows: &[StoredEvent],
    ) -> Result<(), StoreError> {
        for chunk in rows.chunks(ROWS_PER_INSERT) {
            let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new(
                "INSERT INTO events (id, thread_id, seq, run_id, agent_id, type, payload, ts, response_id, user_id) ",
            );
            qb.push_values(chunk, |mut b, r| {
                b.push_bind(r.id)
                    .push_bind(&r.thread_id)
                    .push_bind(r.seq)
                    .push_bind(&r.run_id)
                    .push_bind(&r.agent_id)
                    .push_bind(&r.event_type)
                    .push_bind(&r.payload)
                    .push_bind(r.ts)
                    .push_bind(&r.response_id)
                    .push_bind(&r.user_id);
            });
            qb.build().execute(&mut **tx).await?;
        }
        Ok(())
    }

    /// Events of `thread_id` with `id > after`, in id order, at most `limit`.
    pub async fn read_thread(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.pages.thread_page(thread_id, after, limit).await
    }

    /// [`SqliteLog::read_thread`] as the batch `tx` (which began when `head` was the last
    /// committed id) sees it: the committed events from the readers, then those `tx` inserted
    /// itself. Nothing else can be committed while `tx` holds the write lock.
    pub async fn read_thread_in(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        head: i64,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let mut page = if after < head {
            self.read_thread(thread_id, after, limit).await?
        } else {
            Vec::new()
        };
        let left = limit - page.len() as i64;
        if left > 0 {
            let from = page.last().map_or(after, |e| e.id).max(head);
            let rows = sqlx::query(THREAD_TAIL)
                .bind(thread_id)
                .bind(from)
                .bind(left)
                .fetch_all(&mut **tx)
                .await?;
            page.extend(rows.iter().map(row_to_event));
        }
        Ok(page)
    }

    /// Tells the thread indexer that ids up to `last_id` are committed.
    pub fn committed(&self, last_id: i64) {
        self.indexer.committed(last_id);
    }

    /// Events of every thread with `id > after`, in id order, at most `limit`.
    pub async fn read_all(&self, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        self.pages.log_page(after, limit).await
    }

    /// The thread holding confirmation request `request_id`, if any.
    pub async fn confirmation_thread(
        &self,
        request_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(
            "SELECT thread_id FROM events
             WHERE type = 'confirmation-request' AND json_extract(payload, '$.requestId') = ?
             LIMIT 1",
        )
        .bind(request_id)
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
        for (key, doc, last_id) in docs {
            sqlx::query(
                "INSERT INTO read_models (model, key, doc, last_id) VALUES (?, ?, ?, ?)
                 ON CONFLICT (model, key) DO UPDATE SET doc = excluded.doc, last_id = excluded.last_id",
            )
            .bind(model)
            .bind(key)
            .bind(doc)
            .bind(last_id)
            .execute(&mut *tx)
            .await?;
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
             SELECT ?, key, doc, last_id FROM read_models WHERE model = ?",
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

    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

fn row_to_event(r: &sqlx::sqlite::SqliteRow) -> StoredEvent {
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
