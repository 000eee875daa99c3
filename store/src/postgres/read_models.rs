//! Read models on Postgres: the `read_models` table's documents and each model's checkpoint,
//! written by the projectors of every instance.

use sqlx::{Postgres, Row, Transaction};

use super::{read_seen, PgLog, ReadKind};
use crate::error::StoreError;

/// In `tx`: moves `model`'s checkpoint from `from` to `to` (row locked until commit); `false`
/// (nothing changed) when it is no longer `from` (another projector got there first).
async fn move_checkpoint(
    tx: &mut Transaction<'static, Postgres>,
    model: &str,
    from: i64,
    to: i64,
) -> Result<bool, StoreError> {
    sqlx::query(
        "INSERT INTO checkpoints (model, last_id) VALUES ($1, 0) ON CONFLICT (model) DO NOTHING",
    )
    .bind(model)
    .execute(&mut **tx)
    .await?;
    let current: i64 = sqlx::query("SELECT last_id FROM checkpoints WHERE model = $1 FOR UPDATE")
        .bind(model)
        .fetch_one(&mut **tx)
        .await?
        .get(0);
    if current != from {
        return Ok(false);
    }
    sqlx::query("UPDATE checkpoints SET last_id = $2 WHERE model = $1")
        .bind(model)
        .bind(to)
        .execute(&mut **tx)
        .await?;
    Ok(true)
}

impl PgLog {
    /// The stored documents of `model` among `keys`: `(key, doc, last_id)`, in no order.
    pub async fn load_docs_of(
        &self,
        model: &str,
        keys: &[String],
    ) -> Result<Vec<(String, String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT key, doc, last_id FROM read_models WHERE model = $1 AND key = ANY($2)",
        )
        .bind(model)
        .bind(keys)
        .fetch_all(&self.pool)
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
        Self::load_doc_on(&self.pool, model, key).await
    }

    /// [`PgLog::load_doc`] for a reader that must see every event up to `need`: on a standby
    /// that holds it, when standbys are configured ([`read_seen!`]).
    pub async fn load_doc_seen(
        &self,
        model: &str,
        key: &str,
        need: i64,
    ) -> Result<Option<(String, i64)>, StoreError> {
        read_seen!(
            self,
            ReadKind::View,
            need,
            |conn| Self::load_doc_on(&mut *conn, model, key),
            else self.load_doc(model, key)
        )
    }

    async fn load_doc_on<'e>(
        exec: impl sqlx::Executor<'e, Database = Postgres>,
        model: &str,
        key: &str,
    ) -> Result<Option<(String, i64)>, StoreError> {
        let row = sqlx::query("SELECT doc, last_id FROM read_models WHERE model = $1 AND key = $2")
            .bind(model)
            .bind(key)
            .fetch_optional(exec)
            .await?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    pub async fn load_docs(&self, model: &str) -> Result<Vec<(String, String, i64)>, StoreError> {
        Self::load_docs_on(&self.pool, model).await
    }

    async fn load_docs_on<'e>(
        exec: impl sqlx::Executor<'e, Database = Postgres>,
        model: &str,
    ) -> Result<Vec<(String, String, i64)>, StoreError> {
        let rows =
            sqlx::query("SELECT key, doc, last_id FROM read_models WHERE model = $1 ORDER BY key")
                .bind(model)
                .fetch_all(exec)
                .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    pub async fn checkpoint(&self, model: &str) -> Result<i64, StoreError> {
        Self::checkpoint_on(&self.pool, model).await
    }

    async fn checkpoint_on<'e>(
        exec: impl sqlx::Executor<'e, Database = Postgres>,
        model: &str,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT last_id FROM checkpoints WHERE model = $1")
            .bind(model)
            .fetch_optional(exec)
            .await?;
        Ok(row.map(|r| r.get(0)).unwrap_or(0))
    }

    /// Every document of `model` and the checkpoint they were folded from, for a reader that
    /// must see every event up to `need`: on a standby that holds it when standbys are
    /// configured. The checkpoint is read first, on the same connection, so no document is
    /// older than it.
    pub async fn model_docs_seen(
        &self,
        model: &str,
        need: i64,
    ) -> Result<(i64, Vec<(String, String, i64)>), StoreError> {
        read_seen!(
            self,
            ReadKind::View,
            need,
            |conn| async {
                let checkpoint = Self::checkpoint_on(&mut *conn, model).await?;
                Ok((checkpoint, Self::load_docs_on(&mut *conn, model).await?))
            },
            else async { Ok((self.checkpoint(model).await?, self.load_docs(model).await?)) }
        )
    }

    /// Writes documents and the checkpoint in one transaction. Several instances may project at
    /// once: the row lock on the checkpoint makes them take turns, and a projector whose batch
    /// starts at an older checkpoint than the stored one writes nothing.
    pub async fn save_docs(
        &self,
        model: &str,
        docs: &[(String, String, i64)],
        from_checkpoint: i64,
        checkpoint: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        if !move_checkpoint(&mut tx, model, from_checkpoint, checkpoint).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        let keys: Vec<&str> = docs.iter().map(|d| d.0.as_str()).collect();
        let bodies: Vec<&str> = docs.iter().map(|d| d.1.as_str()).collect();
        let ids: Vec<i64> = docs.iter().map(|d| d.2).collect();
        sqlx::query(
            "INSERT INTO read_models (model, key, doc, last_id)
             SELECT $1, k, d, i FROM UNNEST($2::text[], $3::text[], $4::bigint[]) AS t(k, d, i)
             WHERE EXISTS (SELECT 1 FROM events WHERE id = t.i)
             ON CONFLICT (model, key) DO UPDATE SET doc = excluded.doc, last_id = excluded.last_id",
        )
        .bind(model)
        .bind(&keys)
        .bind(&bodies)
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
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
        let mut tx = self.pool.begin().await?;
        if !move_checkpoint(&mut tx, model, from_checkpoint, checkpoint).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query("DELETE FROM read_models WHERE model = $1")
            .bind(model)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO read_models (model, key, doc, last_id)
             SELECT $1, key, doc, last_id FROM read_models r WHERE model = $2
               AND EXISTS (SELECT 1 FROM events WHERE id = r.last_id)",
        )
        .bind(model)
        .bind(shadow)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    pub async fn clear_model(&self, model: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM read_models WHERE model = $1")
            .bind(model)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM checkpoints WHERE model = $1")
            .bind(model)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}
