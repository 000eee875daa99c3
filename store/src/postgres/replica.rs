//! Thread pages read from standbys (`--read-database-url`, docs/ha.md "Reads from standbys").
//!
//! A standby replays the primary's WAL in order, so it shows the primary's commits in commit
//! order; and the write order makes commit order id order (a batch takes its ids under the
//! order lock and holds it through its `COMMIT`, `take_order!`). So a standby whose highest id
//! is N holds every event up to N, and none above it: a reader there never sees an id before a
//! lower one. A page is read on a standby connection only once that connection's highest id has
//! reached the head the reader must see ([`Replica::thread_page`]); a standby behind it is asked
//! again, for up to [`LAG_WAIT`], and then the page is read on the primary.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool};
use threadstream_domain::StoredEvent;

use super::{page_pool, PgLog};
use crate::error::StoreError;

/// How long a page waits for a standby to replay up to the reader's head before it is read on
/// the primary. Synchronous standbys apply a commit within milliseconds of flushing it; a
/// standby further behind (paused, or replaying a long transaction) costs a reader at most
/// this once per page.
pub(crate) const LAG_WAIT: Duration = Duration::from_millis(500);

/// How often a standby that is behind is asked again.
const LAG_POLL: Duration = Duration::from_millis(10);

/// The standbys' connections (a load balancer's read port spreads them), and what was read
/// where.
pub(crate) struct Replica {
    pool: PgPool,
    standby_pages: AtomicU64,
    primary_pages: AtomicU64,
}

/// Pages read on a standby and on the primary instead (`GET /metrics`, tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaReads {
    pub standby_pages: u64,
    pub primary_pages: u64,
}

impl Replica {
    /// A lazily connected pool on `url` (a standby not up yet is not a start-up failure: its
    /// pages are read on the primary meanwhile).
    pub(crate) fn connect_lazy(url: &str) -> Result<Replica, StoreError> {
        let opts: PgConnectOptions = url
            .parse()
            .map_err(|e| StoreError::unavailable("invalid read database url", e))?;
        let pool = page_pool(&opts, Duration::from_secs(2));
        Ok(Replica {
            pool,
            standby_pages: AtomicU64::new(0),
            primary_pages: AtomicU64::new(0),
        })
    }

    /// The page of `thread_id` after `after` read on a standby that holds every event up to
    /// `need`; `None` when no standby did within [`LAG_WAIT`], or none answered.
    pub(crate) async fn thread_page(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
        need: i64,
    ) -> Option<Vec<StoredEvent>> {
        let deadline = tokio::time::Instant::now() + LAG_WAIT;
        loop {
            match self.try_page(thread_id, after, limit, need).await {
                Ok(Some(page)) => {
                    self.standby_pages.fetch_add(1, Ordering::Relaxed);
                    return Some(page);
                }
                Ok(None) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(LAG_POLL).await
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(
                        error = &e as &dyn std::error::Error,
                        "a standby read failed; the page is read on the primary"
                    );
                    break;
                }
            }
        }
        self.primary_pages.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// One try on one standby connection: its highest id, then, if it holds `need`, the page
    /// (the same connection, so the same standby, which only moves forward).
    async fn try_page(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
        need: i64,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let applied: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
            .fetch_one(&mut *conn)
            .await?;
        if applied < need {
            return Ok(None);
        }
        Ok(Some(
            PgLog::read_thread_on(&mut *conn, thread_id, after, limit).await?,
        ))
    }

    pub(crate) fn reads(&self) -> ReplicaReads {
        ReplicaReads {
            standby_pages: self.standby_pages.load(Ordering::Relaxed),
            primary_pages: self.primary_pages.load(Ordering::Relaxed),
        }
    }

    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }
}
