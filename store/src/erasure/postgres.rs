//! The Postgres side of an erasure: its transaction's deletes — the bulk before it takes the
//! log's write order (its advisory lock), the rest under it in the writer — and the `VACUUM`
//! after its commit.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::Row;

use super::{ErasedStream, StreamHead};
use crate::error::StoreError;
use crate::postgres::{PgBatch, PgLog};

/// An erasure's transaction after [`PgLog::erase_ahead`]: its deletes done, not yet holding the
/// write order, with the ids it deleted by stream.
pub(crate) struct ErasedAhead {
    pub(crate) tx: PgBatch,
    pub(crate) ids: BTreeMap<String, Vec<i64>>,
}

/// Stream heads above an id: `($1 after)`; with a row per user of each workflow stream (as
/// SQLite's [`super::sqlite::HEADS_AFTER`]). The workflow streams' condition is the one of their
/// partial index (`events_workflow_users`, migration 0010): written as `starts_with`, the planner
/// could not use it and, under an erasure's write order, scanned the whole table (~8 ms on
/// 100,000 events, docs/performance.md "erasure-postgres").
pub(crate) const HEADS_AFTER: &str = "SELECT id, aggregate_id, payload::text FROM events \
     WHERE id > $1 AND event_type IN ('thread-created', 'stream-created') \
     UNION ALL \
     SELECT MIN(id), aggregate_id, json_build_object('owner', user_id)::text FROM events \
     WHERE id > $1 AND aggregate_id LIKE 'workflow:%' \
       AND user_id IS NOT NULL GROUP BY aggregate_id, user_id \
     ORDER BY 1";

/// The ids of some streams above an id: `($1 after, $2 streams)`. By the primary key (its
/// first columns name the stream): without `aggregate_type` no index had the stream first, and
/// the planner scanned the table for `id > $1` (the store test
/// `the_writers_lookups_under_the_order_go_through_indexes` EXPLAINs both).
pub(crate) const STREAM_IDS_AFTER: &str = "SELECT aggregate_id, id FROM events \
     WHERE aggregate_type = 'thread' AND aggregate_id = ANY($2) AND id > $1 ORDER BY id";

/// A user's stream heads (through `events_heads_by_owner` and `events_workflow_users`,
/// migration 0010), at or below an id: `($1 user, $2 through)`.
const HEADS_OF_OWNER: &str = "SELECT id, aggregate_id, payload::text FROM events \
     WHERE event_type IN ('thread-created', 'stream-created') AND payload_field(payload, 'owner') = $1 \
       AND id <= $2 \
     UNION ALL \
     SELECT MIN(id), aggregate_id, json_build_object('owner', user_id)::text FROM events \
     WHERE aggregate_id LIKE 'workflow:%' AND user_id = $1 AND id <= $2 \
     GROUP BY aggregate_id, user_id";

/// A thread's head: its first event, if that is one (the primary key's first row of the stream).
const HEAD_OF_STREAM: &str = "SELECT id, aggregate_id, payload::text FROM \
     (SELECT id, aggregate_id, payload, event_type FROM events \
      WHERE aggregate_type = 'thread' AND aggregate_id = $1 AND id <= $2 \
      ORDER BY sequence LIMIT 1) f \
     WHERE event_type IN ('thread-created', 'stream-created')";

/// The heads of the forks of some threads (through `events_forks_by_source`). The fields are
/// read with `payload_field` (migration 0010), the indexes' own expression.
const HEADS_OF_FORKS: &str = "SELECT id, aggregate_id, payload::text FROM events \
     WHERE event_type = 'thread-created' AND payload_field(payload, 'forkOf', 'threadId') = ANY($1) \
       AND id <= $2";

/// The deletes of a scope's content, one statement (one round trip; each data-modifying `WITH`
/// runs to completion whether read or not): `($1 streams, $2 user)`: the streams' events,
/// their read-model documents (thread-keyed models use the thread id, analytics
/// `thread\nrun`) and attachments, and the user's attachments. The indexes are migration 0012's.
macro_rules! delete_content {
    () => {
        "WITH ev AS (DELETE FROM events WHERE aggregate_type = 'thread' AND aggregate_id = ANY($1) \
             RETURNING aggregate_id, id), \
         rm AS (DELETE FROM read_models WHERE split_part(key, E'\\n', 1) = ANY($1)), \
         at AS (DELETE FROM attachments WHERE thread_id = ANY($1) OR user_id = $2)"
    };
}

/// [`delete_content!`], returning each deleted event's stream and id.
const DELETE_CONTENT: &str = concat!(delete_content!(), " SELECT aggregate_id, id FROM ev");

/// [`delete_content!`] and the records that wait for the write order: `($1 streams, $2 user,
/// $3 ids deleted earlier in the transaction)`: the idempotency records whose answer was stored
/// with an erased event, the user's, and the streams' run leases.
const DELETE_ALL: &str = concat!(
    delete_content!(),
    ", ik AS (DELETE FROM idempotency_keys \
         WHERE last_id = ANY($3) OR last_id IN (SELECT id FROM ev) OR scope = $2), \
     rl AS (DELETE FROM run_leases WHERE thread_id = ANY($1)) \
     SELECT aggregate_id, id FROM ev"
);

/// The tables an erasure deletes from, vacuumed after it (docs/operations.md).
macro_rules! erased_tables {
    () => {
        "events, read_models, idempotency_keys, attachments, run_leases"
    };
}
const VACUUMED: &str = concat!("VACUUM ", erased_tables!());

/// `threadstream scrub`, first: the erased tables rewritten without their dead rows' bytes.
const REWRITTEN: &str = concat!("VACUUM FULL ", erased_tables!());

/// How many whole segments each node keeps behind its last checkpoint whatever else needs them
/// (`wal_keep_size`; Patroni sets 128 MB): the WAL is moved on past them.
const KEPT_SEGMENTS: &str = "SELECT pg_size_bytes(current_setting('wal_keep_size')) \
     / pg_size_bytes(current_setting('wal_segment_size'))";

impl PgLog {
    pub(crate) async fn stream_heads_on<'e>(
        exec: impl sqlx::Executor<'e, Database = sqlx::Postgres>,
        after: i64,
    ) -> Result<Vec<StreamHead>, StoreError> {
        let rows = sqlx::query(HEADS_AFTER).bind(after).fetch_all(exec).await?;
        Ok(rows
            .iter()
            .map(|r| StreamHead::from_parts(r.get(0), r.get(1), r.get::<&str, _>(2)))
            .collect())
    }

    /// The heads `scope` may cover, through the indexes of migration 0010 (by owner or
    /// stream, then the forks of what was found until no new one), with the id they were read
    /// up to. What [`super::add_scope`] makes of them is what it would make of every head.
    pub(crate) async fn scope_heads(
        &self,
        scope: &super::ErasureScope,
    ) -> Result<(Vec<StreamHead>, i64), StoreError> {
        let through = self.max_id().await?;
        let heads_of = |rows: Vec<sqlx::postgres::PgRow>| -> Vec<StreamHead> {
            rows.iter()
                .map(|r| StreamHead::from_parts(r.get(0), r.get(1), r.get::<&str, _>(2)))
                .collect()
        };
        let mut heads = Vec::new();
        if let Some(user) = &scope.user_id {
            let rows = sqlx::query(HEADS_OF_OWNER)
                .bind(user)
                .bind(through)
                .fetch_all(self.pool())
                .await?;
            heads.extend(heads_of(rows));
        }
        if let Some(thread) = &scope.thread_id {
            let rows = sqlx::query(HEAD_OF_STREAM)
                .bind(thread)
                .bind(through)
                .fetch_all(self.pool())
                .await?;
            heads.extend(heads_of(rows));
        }
        loop {
            let mut streams = BTreeSet::new();
            super::add_scope(scope, &heads, &mut streams);
            let list: Vec<&str> = streams.iter().map(String::as_str).collect();
            let rows = sqlx::query(HEADS_OF_FORKS)
                .bind(&list)
                .bind(through)
                .fetch_all(self.pool())
                .await?;
            let before = heads.len();
            for h in heads_of(rows) {
                if !heads.iter().any(|k| k.stream == h.stream && k.id == h.id) {
                    heads.push(h);
                }
            }
            if heads.len() == before {
                break;
            }
        }
        Ok((heads, through))
    }

    pub(crate) async fn stream_ids_after(
        tx: &mut PgBatch,
        streams: &BTreeSet<String>,
        after: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let list: Vec<&str> = streams.iter().map(String::as_str).collect();
        let rows = sqlx::query(STREAM_IDS_AFTER)
            .bind(after)
            .bind(&list)
            .fetch_all(&mut **tx)
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The first half of an erasure, before the writer and without the write order: a
    /// transaction deletes the events of `streams`, their read-model documents and attachments
    /// (and `user`'s), so appends to other streams go on meanwhile. The writer then takes the
    /// order in this same transaction ([`PgLog::take_order`]), deletes what was appended since
    /// and stores the tombstone ([`PgLog::erase_rows`]): one commit, all of the scope or none.
    pub(crate) async fn erase_ahead(
        &self,
        streams: &BTreeSet<String>,
        user: Option<&str>,
    ) -> Result<ErasedAhead, StoreError> {
        let mut tx = self.begin_unordered().await?;
        let ids = Self::delete_content(&mut tx, streams, user).await?;
        Ok(ErasedAhead { tx, ids })
    }

    /// Under the write order (the writer's erasure): deletes what is left of `streams` — all of
    /// it without [`PgLog::erase_ahead`], else what was appended since — and the idempotency
    /// records of every erased event (and of `user`) and the streams' run leases; returns what
    /// each stream lost, `ahead` included. The records and leases wait for the order: an
    /// append's batch updates idempotency records, and their row locks held while this
    /// transaction waited for the order would deadlock it.
    pub(crate) async fn erase_rows(
        tx: &mut PgBatch,
        streams: &BTreeSet<String>,
        ahead: BTreeMap<String, Vec<i64>>,
        user: Option<&str>,
    ) -> Result<Vec<ErasedStream>, StoreError> {
        let earlier: Vec<i64> = ahead.values().flatten().copied().collect();
        let list: Vec<&str> = streams.iter().map(String::as_str).collect();
        if ahead.is_empty() {
            // Else taken by `erase_ahead`, in this transaction.
            Self::lock_checkpoints(tx).await?;
        }
        let rows = sqlx::query(DELETE_ALL)
            .bind(&list)
            .bind(user)
            .bind(&earlier)
            .fetch_all(&mut **tx)
            .await?;
        let mut by_stream = ahead;
        for s in streams {
            by_stream.entry(s.clone()).or_default();
        }
        for r in &rows {
            by_stream.entry(r.get(0)).or_default().push(r.get(1));
        }
        Ok(by_stream
            .into_iter()
            .map(|(stream, mut ids)| {
                ids.sort_unstable();
                ErasedStream::from_ids(&stream, &ids)
            })
            .collect())
    }

    /// Deletes every event of `streams` still there, their read-model documents and
    /// attachments (and `user`'s); returns the ids deleted, by stream (every stream named).
    async fn delete_content(
        tx: &mut PgBatch,
        streams: &BTreeSet<String>,
        user: Option<&str>,
    ) -> Result<BTreeMap<String, Vec<i64>>, StoreError> {
        let list: Vec<&str> = streams.iter().map(String::as_str).collect();
        Self::lock_checkpoints(tx).await?;
        let rows = sqlx::query(DELETE_CONTENT)
            .bind(&list)
            .bind(user)
            .fetch_all(&mut **tx)
            .await?;
        let mut by_stream: BTreeMap<String, Vec<i64>> =
            streams.iter().map(|s| (s.clone(), Vec::new())).collect();
        for r in &rows {
            by_stream.entry(r.get(0)).or_default().push(r.get(1));
        }
        Ok(by_stream)
    }

    /// Waits for every projector's save in progress and holds them off until the commit. A
    /// projector saving documents holds its model's checkpoint row until it commits: a save that
    /// read erased events either committed before (and its documents are deleted after this)
    /// or runs after (and skips documents whose last event is gone, see `save_docs`). A
    /// statement of its own: the deletes' snapshot must be taken after the wait.
    async fn lock_checkpoints(tx: &mut PgBatch) -> Result<(), StoreError> {
        sqlx::query("SELECT model FROM checkpoints ORDER BY model FOR UPDATE")
            .fetch_all(&mut **tx)
            .await?;
        Ok(())
    }

    pub(crate) async fn record_erased(
        tx: &mut PgBatch,
        streams: &[ErasedStream],
        tombstone_id: i64,
    ) -> Result<(), StoreError> {
        for s in streams.iter().filter(|s| s.events > 0) {
            sqlx::query(
                "INSERT INTO erased_streams (stream, tombstone_id, last_id) VALUES ($1, $2, $3) \
                 ON CONFLICT (stream) DO UPDATE SET tombstone_id = excluded.tombstone_id, \
                 last_id = excluded.last_id",
            )
            .bind(&s.stream)
            .bind(tombstone_id)
            .bind(s.last_id())
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// After an erasure's commit: `VACUUM` of the tables it deleted from, so the dead rows'
    /// space is reclaimed and their index entries removed (it cannot run in a transaction).
    pub(crate) async fn vacuum_erased(&self) -> Result<(), StoreError> {
        sqlx::query(VACUUMED).execute(self.pool()).await?;
        Ok(())
    }

    /// [`REWRITTEN`], then the WAL moved on to a new segment past the kept ones
    /// ([`KEPT_SEGMENTS`]), a checkpoint before each switch (a switch needs WAL written since
    /// the last) and one after, so no segment from before the rewrite is needed for recovery
    /// and each node deletes them at its next checkpoint or restartpoint (docs/operations.md,
    /// "Erasure and retention"). One connection. Each table is locked exclusively while it is
    /// rewritten: appends wait for it.
    pub(crate) async fn scrub_erased(&self) -> Result<(), StoreError> {
        let mut conn = self.pool().acquire().await?;
        sqlx::query(REWRITTEN).execute(&mut *conn).await?;
        let kept: i64 = sqlx::query_scalar(KEPT_SEGMENTS)
            .fetch_one(&mut *conn)
            .await?;
        for _ in 0..=kept {
            sqlx::query("CHECKPOINT").execute(&mut *conn).await?;
            sqlx::query("SELECT pg_switch_wal()")
                .execute(&mut *conn)
                .await?;
        }
        sqlx::query("CHECKPOINT").execute(&mut *conn).await?;
        Ok(())
    }
}
