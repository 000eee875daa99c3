//! The Postgres side of an erasure: what the writer's transaction runs (under the log's
//! advisory lock), and the `VACUUM` after its commit.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::Row;

use super::{ErasedStream, StreamHead};
use crate::error::StoreError;
use crate::postgres::{PgBatch, PgLog};

/// Stream heads above an id: `($1 after)`; with a row per user of each workflow stream (as
/// SQLite's [`super::sqlite::HEADS_AFTER`]).
pub(crate) const HEADS_AFTER: &str = "SELECT id, aggregate_id, payload::text FROM events \
     WHERE id > $1 AND event_type IN ('thread-created', 'stream-created') \
     UNION ALL \
     SELECT MIN(id), aggregate_id, json_build_object('owner', user_id)::text FROM events \
     WHERE id > $1 AND starts_with(aggregate_id, 'workflow:') \
       AND user_id IS NOT NULL GROUP BY aggregate_id, user_id \
     ORDER BY 1";

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

/// The tables an erasure deletes from, vacuumed after it (docs/operations.md).
const VACUUMED: &str = "VACUUM events, read_models, idempotency_keys, attachments, run_leases";

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
        let rows = sqlx::query(
            "SELECT aggregate_id, id FROM events WHERE id > $1 AND aggregate_id = ANY($2) ORDER BY id",
        )
        .bind(after)
        .bind(&list)
        .fetch_all(&mut **tx)
        .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Deletes every event of `streams`, their read-model documents, run leases and attachments,
    /// and the idempotency records of those events (and of `user`); returns what each stream
    /// lost.
    pub(crate) async fn erase_rows(
        tx: &mut PgBatch,
        streams: &BTreeSet<String>,
        user: Option<&str>,
    ) -> Result<Vec<ErasedStream>, StoreError> {
        let list: Vec<&str> = streams.iter().map(String::as_str).collect();
        // A projector saving documents holds its model's checkpoint row until it commits:
        // waiting for every checkpoint row here means a save that read erased events either
        // committed before (and its documents are deleted below) or runs after (and skips
        // documents whose last event is gone, see `save_docs`).
        sqlx::query("SELECT model FROM checkpoints ORDER BY model FOR UPDATE")
            .fetch_all(&mut **tx)
            .await?;
        let rows = sqlx::query(
            "DELETE FROM events WHERE aggregate_type = 'thread' AND aggregate_id = ANY($1) \
             RETURNING aggregate_id, id",
        )
        .bind(&list)
        .fetch_all(&mut **tx)
        .await?;
        let mut by_stream: BTreeMap<String, Vec<i64>> =
            streams.iter().map(|s| (s.clone(), Vec::new())).collect();
        let mut all = Vec::with_capacity(rows.len());
        for r in &rows {
            let id: i64 = r.get(1);
            all.push(id);
            by_stream.entry(r.get(0)).or_default().push(id);
        }
        sqlx::query("DELETE FROM read_models WHERE split_part(key, E'\\n', 1) = ANY($1)")
            .bind(&list)
            .execute(&mut **tx)
            .await?;
        sqlx::query("DELETE FROM idempotency_keys WHERE last_id = ANY($1) OR scope = $2")
            .bind(&all)
            .bind(user)
            .execute(&mut **tx)
            .await?;
        sqlx::query("DELETE FROM attachments WHERE thread_id = ANY($1) OR user_id = $2")
            .bind(&list)
            .bind(user)
            .execute(&mut **tx)
            .await?;
        sqlx::query("DELETE FROM run_leases WHERE thread_id = ANY($1)")
            .bind(&list)
            .execute(&mut **tx)
            .await?;
        Ok(by_stream
            .into_iter()
            .map(|(stream, mut ids)| {
                ids.sort_unstable();
                ErasedStream::from_ids(&stream, &ids)
            })
            .collect())
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
}
