//! Clients' reads served by standbys (`--read-database-url`, docs/ha.md "Reads from
//! standbys"): thread pages, and read-model documents with the log's tail folded into them.
//!
//! A standby replays the primary's WAL in order, so it shows the primary's commits in commit
//! order; and the write order makes commit order id order (a batch takes its ids under the
//! order lock and holds it through its `COMMIT`, `take_order!`). So a standby whose highest id
//! is N holds every event up to N, and none above it: a reader there never sees an id before a
//! lower one. A read runs on a standby connection only once that connection's highest id has
//! reached the head the reader must see ([`Replica::holding`]); a standby behind it is asked
//! again, for up to [`LAG_WAIT`], and then the read runs on the primary.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::Postgres;

use super::page_pool;
use crate::error::StoreError;

/// How long a read waits for a standby to replay up to the reader's head before it runs on
/// the primary. Synchronous standbys apply a commit within milliseconds of flushing it; a
/// standby further behind (paused, or replaying a long transaction) costs a reader at most
/// this once per read.
pub(crate) const LAG_WAIT: Duration = Duration::from_millis(500);

/// How often a standby that is behind is asked again.
const LAG_POLL: Duration = Duration::from_millis(10);

/// The standbys' connections (a load balancer's read port spreads them), and what was read
/// where.
pub(crate) struct Replica {
    pool: PgPool,
    counts: [[AtomicU64; 2]; 2],
}

/// What a standby read is for, counted apart ([`ReplicaReads`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReadKind {
    /// A page of a thread's events: a stream reader's, a one-shot range, a Durable Streams read.
    Page = 0,
    /// Read-model documents (history, status, thread lists) and the log's tail folded into them.
    View = 1,
}

/// Reads served by a standby, and by the primary instead (`GET /metrics`, tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaReads {
    pub standby_pages: u64,
    pub primary_pages: u64,
    pub standby_views: u64,
    pub primary_views: u64,
}

/// Where a read was served, the second index of [`Replica::counts`].
const ON_STANDBY: usize = 0;
const ON_PRIMARY: usize = 1;

impl Replica {
    /// A lazily connected pool on `url` (a standby not up yet is not a start-up failure: its
    /// reads go to the primary meanwhile).
    pub(crate) fn connect_lazy(url: &str) -> Result<Replica, StoreError> {
        let opts: PgConnectOptions = url
            .parse()
            .map_err(|e| StoreError::unavailable("invalid read database url", e))?;
        let pool = page_pool(&opts, Duration::from_secs(2));
        Ok(Replica {
            pool,
            counts: Default::default(),
        })
    }

    /// A standby connection that holds every event up to `need`; `None` when no standby did
    /// within [`LAG_WAIT`], or none answered: the read runs on the primary. The caller reads on
    /// this connection, so on this standby, which only moves forward.
    pub(crate) async fn holding(&self, need: i64) -> Option<PoolConnection<Postgres>> {
        let deadline = tokio::time::Instant::now() + LAG_WAIT;
        loop {
            match self.try_holding(need).await {
                Ok(Some(conn)) => return Some(conn),
                Ok(None) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(LAG_POLL).await
                }
                Ok(None) => return None,
                Err(e) => {
                    self.failed(&e);
                    return None;
                }
            }
        }
    }

    /// One try on one standby connection: its highest id.
    async fn try_holding(&self, need: i64) -> Result<Option<PoolConnection<Postgres>>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let applied: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
            .fetch_one(&mut *conn)
            .await?;
        Ok((applied >= need).then_some(conn))
    }

    /// Counts a read by where it ran: `Some` answer of a standby (its error logged and taken as
    /// none), or `None`, read on the primary instead.
    pub(crate) fn counted<T>(
        &self,
        kind: ReadKind,
        on_standby: Option<Result<T, StoreError>>,
    ) -> Option<T> {
        match on_standby {
            Some(Ok(answer)) => {
                self.count(kind, ON_STANDBY);
                Some(answer)
            }
            Some(Err(e)) => {
                self.failed(&e);
                self.count(kind, ON_PRIMARY);
                None
            }
            None => {
                self.count(kind, ON_PRIMARY);
                None
            }
        }
    }

    fn failed(&self, e: &StoreError) {
        tracing::debug!(
            error = e as &dyn std::error::Error,
            "a standby read failed; it is read on the primary"
        );
    }

    fn count(&self, kind: ReadKind, on: usize) {
        self.counts[kind as usize][on].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn reads(&self) -> ReplicaReads {
        let n = |kind: ReadKind, on: usize| self.counts[kind as usize][on].load(Ordering::Relaxed);
        ReplicaReads {
            standby_pages: n(ReadKind::Page, ON_STANDBY),
            primary_pages: n(ReadKind::Page, ON_PRIMARY),
            standby_views: n(ReadKind::View, ON_STANDBY),
            primary_views: n(ReadKind::View, ON_PRIMARY),
        }
    }

    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }
}
