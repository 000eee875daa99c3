//! The Durable Streams webhook signing key: one row of the table `webhook_signing_key` in the
//! log's database (migrations `sqlite/0005`, `postgres/0009`). The first process that needs a
//! key offers one; the insert keeps whichever row is there first, and every process signs with
//! the row it reads back. So instances on one database share a key, and a restart keeps it.

use sqlx::Row;

use crate::error::StoreError;
use crate::postgres::PgLog;
use crate::sqlite::SqliteLog;

const SELECT: &str = "SELECT seed FROM webhook_signing_key WHERE id = 1";

impl SqliteLog {
    /// The stored seed; `offered` (hex) is stored first when there is none.
    pub async fn signing_seed(&self, offered: &str, now: i64) -> Result<String, StoreError> {
        sqlx::query(
            "INSERT INTO webhook_signing_key (id, seed, created_at) VALUES (1, ?, ?) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(offered)
        .bind(now)
        .execute(self.write_pool())
        .await?;
        let row = sqlx::query(SELECT).fetch_one(self.write_pool()).await?;
        Ok(row.get(0))
    }
}

impl PgLog {
    /// The stored seed; `offered` (hex) is stored first when there is none.
    pub async fn signing_seed(&self, offered: &str, now: i64) -> Result<String, StoreError> {
        sqlx::query(
            "INSERT INTO webhook_signing_key (id, seed, created_at) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(offered)
        .bind(now)
        .execute(self.pool())
        .await?;
        let row = sqlx::query(SELECT).fetch_one(self.pool()).await?;
        Ok(row.get(0))
    }
}
