//! Stream tickets on Postgres: each used once across every instance.

use async_trait::async_trait;

use super::PgLog;
use crate::error::StoreError;
use crate::fleet::UsedTickets;

/// Stream tickets used (see migrations/postgres/0003): the row's primary key makes "used
/// once" hold across every instance on this database.
#[async_trait]
impl UsedTickets for PgLog {
    /// Records ticket `id` (valid until `expires_at`, epoch ms) as used; `false` when it already
    /// was. Rows of tickets expired before `now` are dropped on the way.
    async fn use_once(&self, id: &str, expires_at: i64, now: i64) -> Result<bool, StoreError> {
        sqlx::query("DELETE FROM stream_tickets_used WHERE expires_at < $1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        let done = sqlx::query(
            "INSERT INTO stream_tickets_used (id, expires_at) VALUES ($1, $2)
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }
}
