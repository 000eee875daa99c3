//! Run leases on Postgres: which instance executes which live run.

use async_trait::async_trait;
use sqlx::Row;

use super::PgLog;
use crate::error::StoreError;
use crate::fleet::{RunKey, RunLeaseStore};

/// Run leases: which instance executes which live run (see migrations/postgres/0002).
#[async_trait]
impl RunLeaseStore for PgLog {
    /// Takes (or refreshes) the lease of a run for `owner` until `expires_at` (epoch ms).
    async fn hold(
        &self,
        thread_id: &str,
        run_id: &str,
        owner: &str,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO run_leases (thread_id, run_id, owner, expires_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (thread_id, run_id) DO UPDATE SET owner = excluded.owner,
                                                           expires_at = excluded.expires_at",
        )
        .bind(thread_id)
        .bind(run_id)
        .bind(owner)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Takes the lease of a run for `owner` until `expires_at` only if no one holds it: false
    /// if the row is there already (a live run of that id, or another start of it).
    async fn hold_free(
        &self,
        thread_id: &str,
        run_id: &str,
        owner: &str,
        expires_at: i64,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO run_leases (thread_id, run_id, owner, expires_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (thread_id, run_id) DO NOTHING",
        )
        .bind(thread_id)
        .bind(run_id)
        .bind(owner)
        .bind(expires_at)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(inserted == 1)
    }

    /// Extends every lease `owner` holds to `expires_at`.
    async fn renew_all(&self, owner: &str, expires_at: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE run_leases SET expires_at = $2 WHERE owner = $1")
            .bind(owner)
            .bind(expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Extends the lease of a run (whoever holds it) to `expires_at` at least; nothing when the
    /// run has none.
    async fn extend(
        &self,
        thread_id: &str,
        run_id: &str,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE run_leases SET expires_at = GREATEST(expires_at, $3)
             WHERE thread_id = $1 AND run_id = $2",
        )
        .bind(thread_id)
        .bind(run_id)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Lets the lease of a run go if `owner` still holds it (another may have taken it over
    /// meanwhile: a start of the same run id that was stored).
    async fn release(&self, thread_id: &str, run_id: &str, owner: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM run_leases WHERE thread_id = $1 AND run_id = $2 AND owner = $3")
            .bind(thread_id)
            .bind(run_id)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The leases held by `owner`.
    async fn held_by(&self, owner: &str) -> Result<Vec<RunKey>, StoreError> {
        let rows = sqlx::query("SELECT thread_id, run_id FROM run_leases WHERE owner = $1")
            .bind(owner)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Takes over every lease of another owner that expired before `now`: one instance wins each
    /// (rows are locked, skipping those another instance is taking). Returns the runs taken. An
    /// instance's own leases are never orphans while it runs (after an outage it renews them).
    async fn claim_expired(
        &self,
        owner: &str,
        now: i64,
        expires_at: i64,
    ) -> Result<Vec<RunKey>, StoreError> {
        let rows = sqlx::query(
            "UPDATE run_leases SET owner = $1, expires_at = $3
             WHERE (thread_id, run_id) IN (
                 SELECT thread_id, run_id FROM run_leases WHERE expires_at < $2 AND owner <> $1
                 FOR UPDATE SKIP LOCKED)
             RETURNING thread_id, run_id",
        )
        .bind(owner)
        .bind(now)
        .bind(expires_at)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}
