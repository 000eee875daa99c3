//! What the instances sharing one store agree on besides the log: which instance executes which
//! live run ([`RunLeaseStore`]) and which stream tickets were used ([`UsedTickets`]).
//!
//! The traits live here, apart from their one implementation: Postgres, where several instances
//! share a database (`postgres/leases.rs`, `postgres/tickets.rs`). SQLite has one process on the
//! log, so it has neither; [`crate::EventLog::run_leases`] and [`crate::EventLog::used_tickets`]
//! answer `None` there, and the caller keeps such state in its own memory.
//!
//! `async_trait` because the caller holds them as trait objects chosen when the store opens.

use async_trait::async_trait;

use crate::error::StoreError;

/// A run and the thread it is in: `(thread_id, run_id)`.
pub type RunKey = (String, String);

/// Run leases: a row per live run naming the instance (`owner`) that executes it, until an
/// expiry in epoch ms that the owner keeps renewing.
#[async_trait]
pub trait RunLeaseStore: Send + Sync {
    /// Takes (or refreshes) the lease of a run for `owner` until `expires_at`.
    async fn hold(
        &self,
        thread_id: &str,
        run_id: &str,
        owner: &str,
        expires_at: i64,
    ) -> Result<(), StoreError>;

    /// Takes the lease of a run for `owner` until `expires_at` only if no one holds it: false
    /// if it is held already (a live run of that id, or another start of it).
    async fn hold_free(
        &self,
        thread_id: &str,
        run_id: &str,
        owner: &str,
        expires_at: i64,
    ) -> Result<bool, StoreError>;

    /// Extends every lease `owner` holds to `expires_at`.
    async fn renew_all(&self, owner: &str, expires_at: i64) -> Result<(), StoreError>;

    /// Extends the lease of a run (whoever holds it) to `expires_at` at least; nothing when the
    /// run has none.
    async fn extend(
        &self,
        thread_id: &str,
        run_id: &str,
        expires_at: i64,
    ) -> Result<(), StoreError>;

    /// Lets the lease of a run go if `owner` still holds it (another may have taken it over
    /// meanwhile).
    async fn release(&self, thread_id: &str, run_id: &str, owner: &str) -> Result<(), StoreError>;

    /// The runs whose leases `owner` holds.
    async fn held_by(&self, owner: &str) -> Result<Vec<RunKey>, StoreError>;

    /// Takes over every lease of another owner that expired before `now`, until `expires_at`:
    /// one instance wins each. Returns the runs taken. An instance's own leases are never
    /// orphans while it runs.
    async fn claim_expired(
        &self,
        owner: &str,
        now: i64,
        expires_at: i64,
    ) -> Result<Vec<RunKey>, StoreError>;
}

/// Stream tickets used, so that "used once" holds across every instance.
#[async_trait]
pub trait UsedTickets: Send + Sync {
    /// Records ticket `id` (valid until `expires_at`, epoch ms) as used; `false` when it already
    /// was. Tickets expired before `now` may be forgotten on the way.
    async fn use_once(&self, id: &str, expires_at: i64, now: i64) -> Result<bool, StoreError>;
}
