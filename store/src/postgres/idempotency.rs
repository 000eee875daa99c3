//! Idempotency keys on Postgres.

use sqlx::Row;

use sqlx::Postgres;

use super::{PgBatch, PgLog};
use crate::error::StoreError;
use crate::idempotency::{answered_twice, AnsweredKey, IdempotencyKey, KeyClaim, StoredKey};

/// Idempotency keys (see `crate::idempotency` and migrations/postgres/0007): the primary key
/// decides which instance's request claims a key; answers are stored by the writer's batches.
impl PgLog {
    /// Drops the idempotency keys that expired before `now`.
    pub async fn prune_keys(&self, now: i64) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM idempotency_keys WHERE expires_at < $1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Deletes every idempotency record of `user` (their scope); returns how many went.
    pub async fn erase_user_keys(&self, user: &str) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM idempotency_keys WHERE scope = $1")
            .bind(user)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// Inserts the claim's row (replacing an expired one); `false` when the key has one.
    pub async fn insert_claim(&self, c: &KeyClaim) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO idempotency_keys \
             (scope, key, fingerprint, expires_at, claim, claimed_until) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, \
             expires_at = excluded.expires_at, claim = excluded.claim, \
             claimed_until = excluded.claimed_until, answer = NULL, last_id = NULL \
             WHERE idempotency_keys.expires_at < $7",
        )
        .bind(&c.key.scope)
        .bind(&c.key.key)
        .bind(&c.fingerprint)
        .bind(c.expires_at)
        .bind(&c.token)
        .bind(c.claimed_until)
        .bind(c.now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Takes over the key's unanswered claim if it ran out; `false` when there is none such.
    pub async fn take_over_claim(&self, c: &KeyClaim) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE idempotency_keys SET claim = $1, claimed_until = $2 \
             WHERE scope = $3 AND key = $4 AND fingerprint = $5 AND answer IS NULL \
               AND claimed_until < $6",
        )
        .bind(&c.token)
        .bind(c.claimed_until)
        .bind(&c.key.scope)
        .bind(&c.key.key)
        .bind(&c.fingerprint)
        .bind(c.now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The key's row (an answer is there only once its batch committed).
    pub async fn read_key(
        &self,
        key: &IdempotencyKey,
        now: i64,
    ) -> Result<Option<StoredKey>, StoreError> {
        let row = sqlx::query(
            "SELECT fingerprint, answer FROM idempotency_keys \
             WHERE scope = $1 AND key = $2 AND expires_at >= $3",
        )
        .bind(&key.scope)
        .bind(&key.key)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| StoredKey {
            fingerprint: r.get(0),
            answer: r.get(1),
        }))
    }

    /// Drops the key's row if it is still the unanswered claim `token` made.
    pub async fn release_claim(&self, key: &IdempotencyKey, token: &str) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM idempotency_keys \
             WHERE scope = $1 AND key = $2 AND claim = $3 AND answer IS NULL",
        )
        .bind(&key.scope)
        .bind(&key.key)
        .bind(token)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Whether `key` has an answer (not expired at `now`), read through `exec`.
    pub async fn key_answered_on<'e>(
        exec: impl sqlx::Executor<'e, Database = Postgres>,
        key: &IdempotencyKey,
        now: i64,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT 1 FROM idempotency_keys \
             WHERE scope = $1 AND key = $2 AND answer IS NOT NULL AND expires_at >= $3",
        )
        .bind(&key.scope)
        .bind(&key.key)
        .bind(now)
        .fetch_optional(exec)
        .await?;
        Ok(row.is_some())
    }

    /// Stores the answers of a batch's keyed appends in its transaction; fails (and so fails
    /// the batch) if one of the keys is answered already, rather than store its events twice.
    pub(crate) async fn store_answers(
        tx: &mut PgBatch,
        keys: &[AnsweredKey],
        now: i64,
    ) -> Result<(), StoreError> {
        for k in keys {
            let done = sqlx::query(
                "INSERT INTO idempotency_keys \
                 (scope, key, fingerprint, expires_at, answer, last_id) \
                 VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, \
                 expires_at = excluded.expires_at, answer = excluded.answer, \
                 last_id = excluded.last_id, claim = NULL, claimed_until = NULL \
                 WHERE idempotency_keys.answer IS NULL OR idempotency_keys.expires_at < $7",
            )
            .bind(&k.key.scope)
            .bind(&k.key.key)
            .bind(&k.fingerprint)
            .bind(k.expires_at)
            .bind(&k.answer)
            .bind(k.last_id)
            .bind(now)
            .execute(&mut **tx)
            .await?;
            if done.rows_affected() != 1 {
                return Err(answered_twice());
            }
        }
        Ok(())
    }
}
