//! The storage backends behind the log. An enum rather than a trait object: the set is closed
//! (SQLite, Postgres) and every call site stays a plain `async fn`.

use sqlx::Row;
use threadstream_domain::StoredEvent;

use std::collections::{BTreeMap, BTreeSet};

use crate::erasure::{ErasedStream, StreamHead};
use crate::error::StoreError;
use crate::fork::RawReads;
use crate::idempotency::{AnsweredKey, IdempotencyKey, KeyClaim, StoredKey};
use crate::postgres::{PgLog, PgSession};
use crate::sqlite::SqliteLog;

/// The database the log lives in.
#[derive(Clone)]
pub enum Backend {
    Sqlite(SqliteLog),
    Postgres(PgLog),
}

/// One group-commit batch: a transaction that holds the log's write order (SQLite's write lock,
/// Postgres's advisory lock) from before the batch is decided until it commits.
pub enum BatchTx {
    Sqlite {
        tx: crate::SqliteBatch,
        /// The last id committed when the batch began.
        head: i64,
        log: Box<SqliteLog>,
    },
    Postgres(crate::postgres::PgBatch),
}

impl BatchTx {
    pub async fn insert(&mut self, rows: &[StoredEvent]) -> Result<(), StoreError> {
        match self {
            BatchTx::Sqlite { tx, .. } => tx.insert(rows),
            BatchTx::Postgres(tx) => PgLog::insert(tx, rows).await,
        }
    }

    /// Events of `thread_id` after `after` as this transaction sees them: committed ones and
    /// those it inserted itself; a fork read through its source ([`crate::fork`]).
    pub async fn read_thread(
        &mut self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        crate::fork::read_composed(self, thread_id, after, limit).await
    }

    /// [`BatchTx::read_thread`] of the log stream alone (a fork's own events only).
    pub(crate) async fn read_thread_raw(
        &mut self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        match self {
            BatchTx::Sqlite { tx, head, log } => {
                log.read_thread_in(tx, *head, thread_id, after, limit).await
            }
            BatchTx::Postgres(tx) => {
                PgLog::read_thread_on(&mut **tx, thread_id, after, limit).await
            }
        }
    }

    /// Whether `key` has an answer (not expired at `now`), as this transaction sees it.
    pub(crate) async fn key_answered(
        &mut self,
        key: &IdempotencyKey,
        now: i64,
    ) -> Result<bool, StoreError> {
        match self {
            BatchTx::Sqlite { tx, .. } => tx.key_answered(key, now),
            BatchTx::Postgres(tx) => PgLog::key_answered_on(&mut **tx, key, now).await,
        }
    }

    /// Stores the answers of the batch's keyed appends (with its events, in its transaction).
    pub(crate) async fn store_answers(
        &mut self,
        keys: &[AnsweredKey],
        now: i64,
    ) -> Result<(), StoreError> {
        match self {
            BatchTx::Sqlite { tx, .. } => tx.store_answers(keys, now),
            BatchTx::Postgres(tx) => PgLog::store_answers(tx, keys, now).await,
        }
    }

    /// First events of the log streams with an owner above `after` (erasure planning).
    pub(crate) async fn stream_heads_after(
        &mut self,
        after: i64,
    ) -> Result<Vec<StreamHead>, StoreError> {
        match self {
            BatchTx::Sqlite { tx, .. } => tx.stream_heads_after(after),
            BatchTx::Postgres(tx) => PgLog::stream_heads_on(&mut **tx, after).await,
        }
    }

    /// The ids of `streams` above `after`, in id order.
    pub(crate) async fn stream_ids_after(
        &mut self,
        streams: &BTreeSet<String>,
        after: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        match self {
            BatchTx::Sqlite { tx, .. } => tx.stream_ids_after(streams, after),
            BatchTx::Postgres(tx) => PgLog::stream_ids_after(tx, streams, after).await,
        }
    }

    /// Deletes the streams' events (SQLite: by id, `ids`; Postgres: by stream, what
    /// [`crate::erasure::postgres::ErasedAhead`] left), read-model documents, idempotency
    /// records (and `user`'s), and on Postgres their attachments and run leases
    /// ([`crate::erasure`]); returns what each stream lost, `ahead` (deleted earlier in this
    /// transaction) included.
    pub(crate) async fn erase_rows(
        &mut self,
        ids: &BTreeMap<String, Vec<i64>>,
        ahead: BTreeMap<String, Vec<i64>>,
        user: Option<&str>,
    ) -> Result<Vec<ErasedStream>, StoreError> {
        match self {
            BatchTx::Sqlite { tx, .. } => {
                debug_assert!(ahead.is_empty(), "SQLite erases in the writer alone");
                tx.erase_rows(ids, user)
            }
            BatchTx::Postgres(tx) => {
                let streams = ids.keys().cloned().collect();
                PgLog::erase_rows(tx, &streams, ahead, user).await
            }
        }
    }

    /// Records each erased stream with its tombstone (`erased_streams`): what 404s and the
    /// readers' signal ask.
    pub async fn record_erased(
        &mut self,
        streams: &[ErasedStream],
        tombstone_id: i64,
    ) -> Result<(), StoreError> {
        match self {
            BatchTx::Sqlite { tx, .. } => tx.record_erased(streams, tombstone_id),
            BatchTx::Postgres(tx) => PgLog::record_erased(tx, streams, tombstone_id).await,
        }
    }

    /// The Postgres server process the transaction runs in (none on SQLite).
    pub fn session(&self) -> Option<PgSession> {
        match self {
            BatchTx::Sqlite { .. } => None,
            BatchTx::Postgres(tx) => Some(tx.session()),
        }
    }

    /// Commits; on Postgres with `hint`, the head notification sent in the commit
    /// ([`crate::notify::Publisher::in_commit`]; SQLite has none).
    pub async fn commit(self, hint: Option<&str>) -> Result<(), StoreError> {
        match self {
            BatchTx::Sqlite { tx, .. } => {
                debug_assert!(hint.is_none(), "SQLite has no notifications");
                tx.commit()?
            }
            BatchTx::Postgres(tx) => tx.commit(hint.map(|h| (crate::notify::CHANNEL, h))).await?,
        }
        Ok(())
    }
}

macro_rules! dispatch {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            Backend::Sqlite($b) => $e,
            Backend::Postgres($b) => $e,
        }
    };
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    pub async fn max_id(&self) -> Result<i64, StoreError> {
        dispatch!(self, b => b.max_id().await)
    }

    /// Whether the database answers and takes appends (readiness, `GET /readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        dispatch!(self, b => b.ping().await)
    }

    /// Whether the database holds `rows`, a batch written earlier in `session` whose commit
    /// lost its connection: its first and last rows are looked up by id and compared with what
    /// the writer sent (thread, sequence, type, time); `None` while the session still runs
    /// ([`PgLog::batch_stored`]). Postgres only; SQLite never loses one.
    pub(crate) async fn batch_stored(
        &self,
        rows: &[StoredEvent],
        session: PgSession,
    ) -> Result<Option<bool>, StoreError> {
        match self {
            Backend::Sqlite(_) => Err(StoreError::refused("no lookup of batches on SQLite")),
            Backend::Postgres(b) => b.batch_stored(rows, session).await,
        }
    }

    /// Opens a batch and returns it with the highest id committed before it.
    pub(crate) async fn begin_batch(&self) -> Result<(BatchTx, i64), StoreError> {
        match self {
            Backend::Sqlite(b) => {
                let (tx, head) = b.begin_batch()?;
                let log = Box::new(b.clone());
                Ok((BatchTx::Sqlite { tx, head, log }, head))
            }
            Backend::Postgres(b) => {
                let (tx, head) = b.begin_batch().await?;
                Ok((BatchTx::Postgres(tx), head))
            }
        }
    }

    /// Ids up to `last_id` are durable and about to be acknowledged: SQLite's readers and thread
    /// indexer may go up to there.
    pub fn committed(&self, last_id: i64) {
        if let Backend::Sqlite(b) = self {
            b.committed(last_id);
        }
    }

    /// For a batch committed outside the writer (`threadstream import`): makes everything
    /// committed up to `last_id` durable (SQLite, durable: a sync of the WAL) and readable.
    pub(crate) async fn acknowledge_committed(&self, last_id: i64) -> Result<(), StoreError> {
        if let Some(log) = self.to_sync() {
            tokio::task::spawn_blocking(move || log.sync_wal())
                .await
                .map_err(|e| StoreError::unavailable("WAL sync failed", e))??;
        }
        self.committed(last_id);
        Ok(())
    }

    /// The log whose commits are durable only once its WAL is synced (SQLite, durable): the
    /// writer's syncer syncs it before acknowledging. `None`: a commit is durable when it
    /// returns (Postgres), or durability was traded away on purpose (SQLite `Normal`).
    pub(crate) fn to_sync(&self) -> Option<SqliteLog> {
        match self {
            Backend::Sqlite(b) if b.needs_sync() => Some(b.clone()),
            _ => None,
        }
    }

    /// [`Backend::read_thread`] for the writer: with SQLite, also events committed but not yet
    /// durable (readers stop at the durable ones).
    pub(crate) async fn read_thread_committed(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        match self {
            Backend::Sqlite(b) => b.read_thread_committed(thread_id, after, limit).await,
            Backend::Postgres(b) => b.read_thread(thread_id, after, limit).await,
        }
    }

    /// The writer's catch-up read (as [`Backend::read_thread_committed`], what is committed):
    /// of the next `limit` events after `after`, the ones `picked` chooses by their log stream
    /// and type, with the id of the last event looked at (`None`: there is none after `after`).
    /// In a fleet the writer's catch-up goes over every other instance's events but needs the
    /// payloads of the threads it has cached only, so Postgres first reads ids, streams and
    /// types, then the picked rows whole.
    pub(crate) async fn read_all_picked(
        &self,
        after: i64,
        limit: i64,
        picked: &(dyn Fn(&str, &str) -> bool + Sync),
    ) -> Result<(Option<i64>, Vec<StoredEvent>), StoreError> {
        match self {
            Backend::Sqlite(b) => {
                let page = b.read_all_committed(after, limit).await?;
                let last = page.last().map(|e| e.id);
                let rows = page
                    .into_iter()
                    .filter(|e| picked(&e.thread_id, &e.event_type))
                    .collect();
                Ok((last, rows))
            }
            Backend::Postgres(b) => b.read_all_picked(after, limit, picked).await,
        }
    }

    /// Events of the log stream `thread_id` alone: a fork's own events, not what it reads
    /// through (that is [`crate::EventLog::read_thread`]).
    pub async fn read_thread(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        dispatch!(self, b => b.read_thread(thread_id, after, limit).await)
    }

    /// [`Backend::read_thread`] for a reader that must see every event up to `need`: on
    /// Postgres, on a standby that holds them when standbys are configured
    /// ([`PgLog::read_thread_seen`]).
    pub async fn read_thread_seen(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
        need: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        match self {
            Backend::Sqlite(b) => b.read_thread(thread_id, after, limit).await,
            Backend::Postgres(b) => b.read_thread_seen(thread_id, after, limit, need).await,
        }
    }

    pub async fn read_all(&self, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        dispatch!(self, b => b.read_all(after, limit).await)
    }

    pub async fn confirmation_thread(
        &self,
        request_id: &str,
    ) -> Result<Option<String>, StoreError> {
        dispatch!(self, b => b.confirmation_thread(request_id).await)
    }

    pub async fn load_doc(
        &self,
        model: &str,
        key: &str,
    ) -> Result<Option<(String, i64)>, StoreError> {
        dispatch!(self, b => b.load_doc(model, key).await)
    }

    /// The stored documents of `model` among `keys`, in one query: `(key, doc, last_id)`.
    pub async fn load_docs_of(
        &self,
        model: &str,
        keys: &[String],
    ) -> Result<Vec<(String, String, i64)>, StoreError> {
        dispatch!(self, b => b.load_docs_of(model, keys).await)
    }

    pub async fn load_docs(&self, model: &str) -> Result<Vec<(String, String, i64)>, StoreError> {
        dispatch!(self, b => b.load_docs(model).await)
    }

    pub async fn checkpoint(&self, model: &str) -> Result<i64, StoreError> {
        dispatch!(self, b => b.checkpoint(model).await)
    }

    /// Saves documents and moves the checkpoint from `from_checkpoint` to `checkpoint`; `false`
    /// (and nothing written) when another projector moved it first.
    pub async fn save_docs(
        &self,
        model: &str,
        docs: &[(String, String, i64)],
        from_checkpoint: i64,
        checkpoint: i64,
    ) -> Result<bool, StoreError> {
        dispatch!(self, b => b.save_docs(model, docs, from_checkpoint, checkpoint).await)
    }

    /// Replaces every document of `model` by those of `shadow` (keys only in the old model go)
    /// and moves the checkpoint from `from_checkpoint` to `checkpoint`, in one transaction;
    /// `false` (and nothing written) when a projector moved the checkpoint first.
    pub async fn replace_model(
        &self,
        model: &str,
        shadow: &str,
        from_checkpoint: i64,
        checkpoint: i64,
    ) -> Result<bool, StoreError> {
        dispatch!(self, b => b.replace_model(model, shadow, from_checkpoint, checkpoint).await)
    }

    pub async fn clear_model(&self, model: &str) -> Result<(), StoreError> {
        dispatch!(self, b => b.clear_model(model).await)
    }

    /// Drops the idempotency keys that expired before `now`.
    pub async fn prune_keys(&self, now: i64) -> Result<(), StoreError> {
        dispatch!(self, b => b.prune_keys(now).await)
    }

    /// Deletes every idempotency record of `user` (their scope); returns how many went.
    pub async fn erase_user_keys(&self, user: &str) -> Result<u64, StoreError> {
        dispatch!(self, b => b.erase_user_keys(user).await)
    }

    /// Inserts a claim's row (replacing an expired one); `false` when the key has one.
    pub async fn insert_claim(&self, claim: &KeyClaim) -> Result<bool, StoreError> {
        dispatch!(self, b => b.insert_claim(claim).await)
    }

    /// Takes over the key's unanswered claim if it ran out; `false` when there is none such.
    pub async fn take_over_claim(&self, claim: &KeyClaim) -> Result<bool, StoreError> {
        dispatch!(self, b => b.take_over_claim(claim).await)
    }

    /// The key's row unless expired at `now`, with its answer once the answer's events are acknowledged.
    pub async fn read_key(
        &self,
        key: &IdempotencyKey,
        now: i64,
    ) -> Result<Option<StoredKey>, StoreError> {
        dispatch!(self, b => b.read_key(key, now).await)
    }

    /// Drops the key's row if it is still the unanswered claim `token` made.
    pub async fn release_claim(&self, key: &IdempotencyKey, token: &str) -> Result<(), StoreError> {
        dispatch!(self, b => b.release_claim(key, token).await)
    }

    /// Whether `key` has an answer (not expired at `now`), outside a batch: for Postgres's
    /// writer deciding a batch before its transaction begins (checked again in it).
    pub(crate) async fn key_answered(
        &self,
        key: &IdempotencyKey,
        now: i64,
    ) -> Result<bool, StoreError> {
        match self {
            Backend::Sqlite(b) => b.key_answered(key, now).await,
            Backend::Postgres(b) => PgLog::key_answered_on(b.pool(), key, now).await,
        }
    }

    /// First events of the log streams with an owner above `after`, and the id they were read
    /// up to (erasure planning, outside the write lock).
    pub async fn stream_heads(&self, after: i64) -> Result<(Vec<StreamHead>, i64), StoreError> {
        match self {
            Backend::Sqlite(b) => b.stream_heads(after).await,
            Backend::Postgres(b) => {
                let through = b.max_id().await?;
                let heads = PgLog::stream_heads_on(b.pool(), after).await?;
                Ok((
                    heads.into_iter().filter(|h| h.id <= through).collect(),
                    through,
                ))
            }
        }
    }

    /// The heads an erasure of `scope` may cover, found through indexes (SQLite: the thread
    /// index's `stream_heads` and the log above it; Postgres: partial indexes), and the id
    /// they are complete through (erasure planning, outside the write lock).
    pub async fn scope_heads(
        &self,
        scope: &crate::erasure::ErasureScope,
    ) -> Result<(Vec<StreamHead>, i64), StoreError> {
        match self {
            Backend::Sqlite(b) => b.scope_heads(scope).await,
            Backend::Postgres(b) => b.scope_heads(scope).await,
        }
    }

    /// `(tombstone id, highest erased id)` when `stream` was erased.
    pub async fn erased_stream(&self, stream: &str) -> Result<Option<(i64, i64)>, StoreError> {
        let row = match self {
            Backend::Sqlite(b) => {
                sqlx::query("SELECT tombstone_id, last_id FROM erased_streams WHERE stream = ?")
                    .bind(stream)
                    .fetch_optional(b.readers())
                    .await?
                    .map(|r| (r.get(0), r.get(1)))
            }
            Backend::Postgres(b) => {
                sqlx::query("SELECT tombstone_id, last_id FROM erased_streams WHERE stream = $1")
                    .bind(stream)
                    .fetch_optional(b.pool())
                    .await?
                    .map(|r| (r.get(0), r.get(1)))
            }
        };
        Ok(row)
    }

    pub async fn close(&self) {
        dispatch!(self, b => b.close().await)
    }
}

// The raw reads a fork is composed from ([`crate::fork`]), as the database gives them.

/// What readers may see (SQLite: acknowledged events only).
pub(crate) struct Visible<'a>(pub &'a Backend);

/// What a stream reader woken for a head must see: every event up to it ([`Backend::read_thread_seen`]).
pub(crate) struct Seen<'a> {
    pub backend: &'a Backend,
    pub need: i64,
}

/// What the writer sees: everything committed.
pub(crate) struct Committed<'a>(pub &'a Backend);

impl RawReads for Visible<'_> {
    async fn read(
        &mut self,
        stream: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.0.read_thread(stream, after, limit).await
    }
}

impl RawReads for Seen<'_> {
    async fn read(
        &mut self,
        stream: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.backend
            .read_thread_seen(stream, after, limit, self.need)
            .await
    }
}

impl RawReads for Committed<'_> {
    async fn read(
        &mut self,
        stream: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.0.read_thread_committed(stream, after, limit).await
    }
}

/// Inside a batch's transaction (an import): committed events and the batch's own.
impl RawReads for BatchTx {
    async fn read(
        &mut self,
        stream: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.read_thread_raw(stream, after, limit).await
    }
}
