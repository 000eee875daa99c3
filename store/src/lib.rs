//! The log: threadstream's single source of truth.
//!
//! [`EventLog`] is a cheap-to-clone handle over one backend, the process's one writer task
//! (group commit, see [`writer`]) and the head notifications readers sleep on ([`Heads`]).
//! Everything that appends — the agent runtime, ingest, control commands — calls
//! [`EventLog::append`]; everything that reads, reads events after an id. Stream readers do so
//! through [`EventLog::feed`], which serves a thread's recent events from an in-memory tail
//! ([`tail`]) when it provably covers them.

pub mod attachments;
pub mod backend;
pub mod compaction;
pub mod erasure;
pub mod error;
mod feed;
pub mod fleet;
pub mod fork;
pub mod heads;
pub mod idempotency;
mod import;
mod log_erasure;
mod log_keys;
mod log_reads;
pub mod metrics;
pub mod notify;
mod part;
pub mod postgres;
mod signing_key;
pub mod sqlite;
mod sqlite_batch;
mod sqlite_index;
mod sqlite_pages;
pub mod tail;
mod writer;

use std::path::Path;
use std::sync::Arc;

use hashlink::LruCache;
use threadstream_domain::aggregate::AggregateCommand;
use threadstream_domain::event::EventBody;
use threadstream_domain::{ForkOf, StoredEvent, StreamAggregate, StreamKind, Thread};
use tokio::sync::{mpsc, oneshot, Mutex};

pub use attachments::{AttachmentMeta, AttachmentStore};
pub use backend::Backend;
pub use compaction::{Compacted, Sweep as CompactionSweep};
pub use erasure::{Erasure, ErasurePlan, ErasureRequest, NotErased, StreamHead};
pub use error::StoreError;
pub use feed::{Page, ThreadFeed};
pub use fleet::{RunKey, RunLeaseStore, UsedTickets};
pub use heads::{Heads, TailStats};
pub use idempotency::{Claim, IdempotencyKey, KeyClaim, KeyedAppend};
pub use import::Import;
pub use log_reads::Sight;
pub use notify::NotifyMode;
pub use part::Part;
pub use postgres::{PgLog, ReplicaReads};
pub use sqlite::{Durability, SqliteLog};
pub use sqlite_batch::SqliteBatch;
pub use tail::{TailEvent, TailLimits};

/// Bounded queue in front of the writer: appenders wait (back-pressure) when it is full.
const WRITER_QUEUE: usize = 8192;

/// Thread aggregates the writer keeps in memory by default (least recently used evicted; an
/// evicted thread is folded again from the log on its next append).
pub const DEFAULT_CACHED_THREADS: usize = 10_000;

/// Thread owners remembered by [`EventLog::thread_owner`] (least recently used evicted).
const CACHED_OWNERS: usize = 100_000;

/// What threads read through (forks, [`fork`]) remembered by [`EventLog::read_thread`].
const CACHED_FORKS: usize = 100_000;

/// Background work that one instance of a fleet on one Postgres does at a time
/// ([`EventLog::try_job_lock`]).
#[derive(Clone, Copy, Debug)]
pub enum Job {
    /// The retention sweeper: two instances never sweep at once.
    Retention,
    /// The projector: one instance folds the log into the read models, the others stand by.
    Projector,
    /// The change feed (`--change-feed`): one instance publishes the log to the bus, so the bus
    /// receives it in id order from one connection.
    ChangeFeed,
    /// The compaction sweep ([`EventLog::compact_finished`]): a run compacted twice changes
    /// nothing, but each instance sweeping would read and rewrite every finished run again.
    Compaction,
}

impl Job {
    /// The job's session advisory lock key (its name in ASCII, shortened).
    fn lock_key(self) -> i64 {
        match self {
            Job::Retention => 0x7265_7465_6e74,
            Job::Projector => 0x7072_6f6a_6563,
            Job::ChangeFeed => 0x6368_616e_6765,
            Job::Compaction => 0x636f_6d70_6163,
        }
    }
}

/// Held while this instance does a [`Job`] ([`EventLog::try_job_lock`]).
pub struct JobLock(#[allow(dead_code)] Option<sqlx::pool::PoolConnection<sqlx::Postgres>>);

/// Handle to the log. Owns (through its `Arc`) the writer's request channel; when the last
/// handle is dropped, or [`EventLog::shutdown`] is called, the writer finishes its batch and
/// stops.
#[derive(Clone)]
pub struct EventLog {
    inner: Arc<LogInner>,
}

struct LogInner {
    backend: Backend,
    /// The writer's commit linger ([`EventLog::set_commit_linger`]).
    linger: writer::SharedDuration,
    /// How long the writer waits for an unreachable Postgres ([`EventLog::set_store_wait`]).
    store_wait: writer::SharedDuration,
    heads: Heads,
    tx: mpsc::Sender<writer::WriterMsg>,
    /// Completes when the writer has stopped.
    writer_done: Mutex<Option<oneshot::Receiver<()>>>,
    /// thread id → owner, only from committed `thread-created` events: an owner never changes.
    owners: std::sync::Mutex<LruCache<String, String>>,
    /// log stream → the source it reads through (`None`: not a fork), from its first committed
    /// event, which never changes.
    forks: std::sync::Mutex<LruCache<String, Option<ForkOf>>>,
    /// The erasure count of [`Heads::erasures`] the two caches above were filled under: when
    /// it moves, a cached stream may have been erased (and created again), so both are emptied.
    caches_at: std::sync::atomic::AtomicU64,
}

impl EventLog {
    /// Opens the embedded SQLite log in `data_dir`.
    pub async fn open_sqlite(data_dir: &Path, durability: Durability) -> Result<Self, StoreError> {
        let log = SqliteLog::open(data_dir, durability).await?;
        Self::start(Backend::Sqlite(log), NotifyMode::Local).await
    }

    /// Opens the log in the Postgres database at `url`, with head notifications by `notify`
    /// (`LISTEN/NOTIFY` or Redis) so several processes can share it.
    pub async fn open_postgres(url: &str, notify: NotifyMode) -> Result<Self, StoreError> {
        Self::open_postgres_reading_from(url, None, notify).await
    }

    /// [`EventLog::open_postgres`], stream readers' pages read on the standbys at `read_url`
    /// when they have replayed far enough ([`EventLog::read_thread_seen`]).
    pub async fn open_postgres_reading_from(
        url: &str,
        read_url: Option<&str>,
        notify: NotifyMode,
    ) -> Result<Self, StoreError> {
        let log = PgLog::open_reading_from(url, read_url).await?;
        Self::start(Backend::Postgres(log), notify).await
    }

    /// Starts the writer task over `backend`, caching [`DEFAULT_CACHED_THREADS`] aggregates.
    pub async fn start(backend: Backend, notify: NotifyMode) -> Result<Self, StoreError> {
        Self::start_with_cache(backend, notify, DEFAULT_CACHED_THREADS).await
    }

    /// Starts the writer task over `backend`, keeping at most `cached_threads` thread
    /// aggregates in memory.
    pub async fn start_with_cache(
        backend: Backend,
        notify: NotifyMode,
        cached_threads: usize,
    ) -> Result<Self, StoreError> {
        let head = backend.max_id().await?;
        let heads = Heads::new(head);
        let pg = match &backend {
            Backend::Postgres(pg) => Some(pg),
            Backend::Sqlite(_) => None,
        };
        let sqlite = pg.is_none();
        let instance = format!(
            "{}-{}",
            std::process::id(),
            threadstream_domain::clock::now_ms()
        );
        let publisher = notify::start(&notify, pg, heads.clone(), instance).await?;
        let linger = writer::SharedDuration::default();
        let store_wait = writer::SharedDuration::default();
        let writer = writer::Writer::start(
            backend.clone(),
            heads.clone(),
            publisher,
            cached_threads,
            linger.clone(),
            store_wait.clone(),
        )
        .await?;
        let (tx, rx) = mpsc::channel(WRITER_QUEUE);
        let (done_tx, done) = oneshot::channel();
        let run = async move {
            writer.run(rx).await;
            let _ = done_tx.send(());
        };
        if sqlite {
            // The SQLite writer gets a thread of its own: on the shared runtime it waited behind
            // every appender it had just woken (a wake-up from sqlx's worker thread queues
            // behind the runtime's local queues), so a batch took as long as running all of
            // them. Its own thread decides and commits batch N+1 while the appenders of batch N
            // run on the others. (Postgres stays on the runtime: its connections belong to the
            // runtime's I/O driver.)
            std::thread::Builder::new()
                .name("log-writer".into())
                .spawn(move || {
                    match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt.block_on(run),
                        Err(e) => tracing::error!(error = %e, "cannot start the writer's runtime"),
                    }
                })
                .map_err(|e| StoreError::unavailable("cannot start the writer", e))?;
        } else {
            tokio::spawn(run);
        }
        Ok(EventLog {
            inner: Arc::new(LogInner {
                backend,
                linger,
                store_wait,
                heads,
                tx,
                writer_done: Mutex::new(Some(done)),
                owners: std::sync::Mutex::new(LruCache::new(CACHED_OWNERS)),
                forks: std::sync::Mutex::new(LruCache::new(CACHED_FORKS)),
                caches_at: std::sync::atomic::AtomicU64::new(0),
            }),
        })
    }

    /// Decides `commands` against the stream's aggregate (of the commands' kind: a
    /// [`threadstream_domain::ThreadCommand`] goes to a thread, a
    /// [`threadstream_domain::workflow::WorkflowChange`] to a workflow stream, …) and stores the
    /// events they produce, atomically. Returns the stored events (with their ids) once they are
    /// committed.
    pub async fn append<C: AggregateCommand>(
        &self,
        stream: &str,
        commands: Vec<C>,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.append_request(vec![Part::new(stream, commands)], None)
            .await
    }

    /// [`EventLog::append`] over several log streams at once: every part is decided against its
    /// own stream's aggregate, in order, and all are stored together or none.
    pub async fn append_parts(&self, parts: Vec<Part>) -> Result<Vec<StoredEvent>, StoreError> {
        self.append_request(parts, None).await
    }

    /// [`EventLog::append`] under an idempotency key: refused with [`StoreError::KeyAnswered`]
    /// (nothing stored) when the key already has an answer; otherwise the key's answer is
    /// stored with the events, in the same transaction (see [`idempotency`]).
    pub async fn append_keyed<C: AggregateCommand>(
        &self,
        stream: &str,
        commands: Vec<C>,
        key: KeyedAppend,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.append_request(vec![Part::new(stream, commands)], Some(key))
            .await
    }

    /// The one append path: every append above comes here.
    async fn append_request(
        &self,
        parts: Vec<Part>,
        key: Option<KeyedAppend>,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        for part in &parts {
            part.check()?;
        }
        let (reply, rx) = oneshot::channel();
        let req = writer::AppendRequest { parts, key, reply };
        let queued = std::time::Instant::now();
        self.inner
            .tx
            .send(writer::WriterMsg::Append(req))
            .await
            .map_err(|_| StoreError::Closed)?;
        let stored = rx.await.map_err(|_| StoreError::Closed)??;
        metrics::append_acknowledged(queued.elapsed());
        Ok(stored)
    }

    /// The stream's current command-side state, as the writer holds it (after every append
    /// acknowledged so far); refused when the stream is not of `A`'s kind.
    pub async fn state<A: StreamAggregate>(&self, stream: &str) -> Result<A, StoreError> {
        let kind = StreamKind::of(stream);
        if kind != A::KIND {
            return Err(StoreError::wrong_kind(stream, kind, A::KIND));
        }
        let (reply, rx) = oneshot::channel();
        self.inner
            .tx
            .send(writer::WriterMsg::State {
                stream: stream.to_string(),
                reply,
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        let aggregate = rx.await.map_err(|_| StoreError::Closed)??;
        aggregate
            .into_any()
            .downcast::<A>()
            .map(|a| *a)
            .map_err(|_| StoreError::wrong_kind(stream, kind, A::KIND))
    }

    /// [`EventLog::state`] of a thread.
    pub async fn thread_state(&self, thread_id: &str) -> Result<Thread, StoreError> {
        self.state::<Thread>(thread_id).await
    }

    /// The Durable Streams webhook signing key's seed (hex) as the log's database keeps it;
    /// `offered` is stored first when it keeps none ([`signing_key`]).
    pub async fn signing_seed(&self, offered: &str) -> Result<String, StoreError> {
        let now = threadstream_domain::clock::now_ms();
        match &self.inner.backend {
            Backend::Sqlite(b) => b.signing_seed(offered, now).await,
            Backend::Postgres(b) => b.signing_seed(offered, now).await,
        }
    }

    /// The lock of `job`: on Postgres a session advisory lock held by a pool connection kept for
    /// it (`None`: another instance does the job now, and the connection goes back to the pool);
    /// SQLite has one process, nothing to take. Dropping the guard closes its connection, which
    /// releases the lock; so does the death of the process.
    pub async fn try_job_lock(&self, job: Job) -> Result<Option<JobLock>, StoreError> {
        match &self.inner.backend {
            Backend::Sqlite(_) => Ok(Some(JobLock(None))),
            Backend::Postgres(pg) => {
                let mut conn = pg.pool().acquire().await?;
                let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(job.lock_key())
                    .fetch_one(&mut *conn)
                    .await?;
                if !got {
                    return Ok(None);
                }
                conn.close_on_drop();
                Ok(Some(JobLock(Some(conn))))
            }
        }
    }

    pub fn heads(&self) -> &Heads {
        &self.inner.heads
    }

    pub fn backend(&self) -> &Backend {
        &self.inner.backend
    }

    /// Lets a small batch wait up to `linger` from its first request for more before it is
    /// written (0, the default: never waits). Fewer, larger transactions at model speed, each
    /// append answered up to `linger` later; a batch of 256 requests goes at once. Durability
    /// is unchanged: an append is still answered only once its batch is committed (and synced).
    pub fn set_commit_linger(&self, linger: std::time::Duration) {
        self.inner.linger.set(linger);
    }

    /// On Postgres: lets an append wait up to `wait` for the database to be reachable again
    /// (a failover, a restart) before it is refused (0, the default: refused at once); and
    /// resolves a batch whose `COMMIT` lost its connection by looking its rows up once it is
    /// (stored: acknowledged; not stored: decided and written again). Read once per batch.
    /// 0: neither; a lost connection fails the batch.
    pub fn set_store_wait(&self, wait: std::time::Duration) {
        self.inner.store_wait.set(wait);
    }

    /// Runs `call` again while it fails for want of a reachable Postgres (a failover, a
    /// restart), until the store wait ([`EventLog::set_store_wait`]) runs out: for the calls a
    /// request makes to the store beside the writer before it appends (its key's claim, the
    /// thread's owner), so that it waits for the database as the append would.
    pub(crate) async fn patiently<T, F: std::future::Future<Output = Result<T, StoreError>>>(
        &self,
        mut call: impl FnMut() -> F,
    ) -> Result<T, StoreError> {
        let wait = self.inner.store_wait.get();
        if wait.is_zero() || !matches!(self.inner.backend, Backend::Postgres(_)) {
            return call().await;
        }
        let deadline = tokio::time::Instant::now() + wait;
        let mut pause = std::time::Duration::from_millis(50);
        loop {
            match call().await {
                Err(e) if e.is_connection_loss() => {
                    if tokio::time::Instant::now() + pause >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_millis(500));
                }
                done => return done,
            }
        }
    }

    /// Thread pages read on standbys and on the primary instead (`None`: no standbys
    /// configured, or SQLite).
    pub fn replica_reads(&self) -> Option<ReplicaReads> {
        match &self.inner.backend {
            Backend::Postgres(pg) => pg.replica_reads(),
            Backend::Sqlite(_) => None,
        }
    }

    /// Run leases, where several instances can share this log (Postgres); `None` on SQLite,
    /// whose one process recovers its live runs at start-up instead.
    pub fn run_leases(&self) -> Option<Arc<dyn RunLeaseStore>> {
        match &self.inner.backend {
            Backend::Postgres(pg) => Some(Arc::new(pg.clone())),
            Backend::Sqlite(_) => None,
        }
    }

    /// The stream tickets used, where several instances can share this log (Postgres); `None`
    /// on SQLite, where the one process's memory is enough.
    pub fn used_tickets(&self) -> Option<Arc<dyn UsedTickets>> {
        match &self.inner.backend {
            Backend::Postgres(pg) => Some(Arc::new(pg.clone())),
            Backend::Sqlite(_) => None,
        }
    }

    /// Where attachments live beside this log: a table on Postgres (every instance sees them),
    /// files under `files` on SQLite.
    pub fn attachment_store(&self, files: std::path::PathBuf) -> AttachmentStore {
        match &self.inner.backend {
            Backend::Postgres(pg) => AttachmentStore::Postgres(pg.pool().clone()),
            Backend::Sqlite(_) => AttachmentStore::Dir(files),
        }
    }

    /// Stops the writer after it has committed the batch in hand (later appends fail with
    /// [`StoreError::Closed`]), then closes the database.
    pub async fn shutdown(&self) {
        let _ = self.inner.tx.send(writer::WriterMsg::Shutdown).await;
        if let Some(done) = self.inner.writer_done.lock().await.take() {
            let _ = done.await;
        }
        self.inner.backend.close().await;
    }
}

#[cfg(test)]
mod tests;
