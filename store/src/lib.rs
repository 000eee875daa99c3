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
pub mod erasure;
pub mod error;
mod feed;
pub mod fleet;
pub mod fork;
pub mod heads;
pub mod idempotency;
mod import;
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
pub use erasure::{Erasure, ErasurePlan, ErasureRequest, NotErased, StreamHead};
pub use error::StoreError;
pub use feed::{Page, ThreadFeed};
pub use fleet::{RunKey, RunLeaseStore, UsedTickets};
pub use heads::{Heads, TailStats};
pub use idempotency::{Claim, IdempotencyKey, KeyClaim, KeyedAppend};
pub use import::Import;
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
}

impl Job {
    /// The job's session advisory lock key (its name in ASCII, shortened).
    fn lock_key(self) -> i64 {
        match self {
            Job::Retention => 0x7265_7465_6e74,
            Job::Projector => 0x7072_6f6a_6563,
            Job::ChangeFeed => 0x6368_616e_6765,
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
    linger: writer::CommitLinger,
    /// How long the writer waits for an unreachable Postgres ([`EventLog::set_store_wait`]).
    store_wait: writer::CommitLinger,
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
        let linger = writer::CommitLinger::default();
        let store_wait = writer::CommitLinger::default();
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

    /// Who owns the thread (`None`: it does not exist, or is a workflow stream). Access checks
    /// call this on every thread request, so it avoids the writer: an owner never changes once
    /// the thread's first event, `thread-created`, is committed, and is cached from then on.
    pub async fn thread_owner(&self, thread_id: &str) -> Result<Option<String>, StoreError> {
        self.check_caches();
        let cached = self.owners().get(thread_id).cloned();
        if cached.is_some() {
            return Ok(cached);
        }
        let first = self.inner.backend.read_thread(thread_id, 0, 1).await?;
        let Some(first) = first.first() else {
            return Ok(None);
        };
        if let EventBody::ThreadCreated(created) = first.decode()?.body {
            self.owners()
                .insert(thread_id.to_string(), created.owner.clone());
            return Ok(Some(created.owner));
        }
        if StreamKind::of(thread_id) != StreamKind::Thread {
            return Ok(None);
        }
        // Not a thread created the usual way: the writer's aggregate decides (not cached).
        Ok(self.thread_state(thread_id).await?.owner)
    }

    /// Empties the owner and fork caches if an erasure was seen since they were filled.
    fn check_caches(&self) {
        use std::sync::atomic::Ordering;
        let seen = self.inner.heads.erasures();
        if self.inner.caches_at.swap(seen, Ordering::AcqRel) != seen {
            self.owners().clear();
            self.forks().clear();
        }
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, LruCache<String, String>> {
        // A panic while holding this lock cannot leave the map half-updated in a way that
        // matters (entries are whole), so a poisoned lock is still used.
        self.inner
            .owners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Events of `thread_id` with `id > after`, in order, at most `limit`. A fork is read
    /// through: its source's events up to the fork point, then its own ([`fork`]).
    pub async fn read_thread(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let mut reads = backend::Visible(&self.inner.backend);
        let segments = self.segments(&mut reads, thread_id).await?;
        fork::read_segments(&mut reads, &segments, thread_id, after, limit).await
    }

    /// [`EventLog::read_thread`] for a stream reader that was woken for `head`: the page holds
    /// every event of the thread up to it. With standbys configured (Postgres,
    /// `--read-database-url`) the page is read on one that has replayed the log up to `head`
    /// and up to the whole log's head known here (what this process acknowledged or was told of
    /// before the read), or on the primary if none has within a short wait.
    pub async fn read_thread_seen(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
        head: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let need = head.max(self.inner.heads.global_head());
        let mut reads = backend::Seen {
            backend: &self.inner.backend,
            need,
        };
        let segments = self.segments(&mut reads, thread_id).await?;
        fork::read_segments(&mut reads, &segments, thread_id, after, limit).await
    }

    /// The log streams `thread_id` is read from, deepest source first, with the highest id read
    /// from each (see [`fork::segments`]).
    async fn segments(
        &self,
        reads: &mut impl fork::RawReads,
        thread_id: &str,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        self.check_caches();
        fork::segments(
            reads,
            thread_id,
            &|stream| self.forks().get(stream).cloned(),
            &|stream, answer| {
                self.forks().insert(stream.to_string(), answer);
            },
        )
        .await
    }

    /// Calls `f` on each event of `thread_id` with id below `before`, in order, a page at a
    /// time. With `before` a fork's first own id, that is the prefix it reads through: what a
    /// fold of the whole log starts the fork's document from.
    pub async fn for_each_before(
        &self,
        thread_id: &str,
        before: i64,
        mut f: impl FnMut(&StoredEvent) + Send,
    ) -> Result<(), StoreError> {
        let mut after = 0;
        while after < before {
            let page = self.read_thread(thread_id, after, 5_000).await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            page.iter().filter(|e| e.id < before).for_each(&mut f);
        }
        Ok(())
    }

    /// What `thread_id` reads through, if it is a fork.
    pub async fn fork_source(&self, thread_id: &str) -> Result<Option<ForkOf>, StoreError> {
        self.check_caches();
        if let Some(known) = self.forks().get(thread_id).cloned() {
            return Ok(known);
        }
        let first = self.inner.backend.read_thread(thread_id, 0, 1).await?;
        let Some(first) = first.first() else {
            return Ok(None);
        };
        let source = fork::fork_of(first);
        self.forks().insert(thread_id.to_string(), source.clone());
        Ok(source)
    }

    fn forks(&self) -> std::sync::MutexGuard<'_, LruCache<String, Option<ForkOf>>> {
        // As for `owners`: entries are whole, so a poisoned lock is still used.
        self.inner
            .forks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A reader of `thread_id`'s events after `cursor`, served from the thread's hot tail when
    /// it provably holds them, else from the store (see [`ThreadFeed`]).
    pub fn feed(&self, thread_id: &str, cursor: i64) -> ThreadFeed {
        ThreadFeed::new(self.clone(), thread_id, cursor)
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

    /// Events of all threads with `id > after`, in order, at most `limit`.
    pub async fn read_all(&self, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        self.inner.backend.read_all(after, limit).await
    }

    /// Claims an idempotency key for one execution of its request (see [`idempotency`]):
    /// [`Claim::Taken`] when it is new, expired, or its holder's claim ran out.
    pub async fn claim_key(&self, claim: &KeyClaim) -> Result<Claim, StoreError> {
        // A keyed append claims its key before it reaches the writer: it waits for the
        // database as the writer would (a failover), rather than failing first.
        self.patiently(|| self.claim_key_once(claim)).await
    }

    async fn claim_key_once(&self, claim: &KeyClaim) -> Result<Claim, StoreError> {
        let backend = &self.inner.backend;
        // A row released or expired between two of these steps: claim again (a few times; then
        // the caller waits as for a held key, and asks again).
        for _ in 0..3 {
            if backend.insert_claim(claim).await? || backend.take_over_claim(claim).await? {
                return Ok(Claim::Taken);
            }
            if let Some(row) = backend.read_key(&claim.key, claim.now).await? {
                return Ok(match row.answer {
                    Some(answer) => Claim::Answered {
                        fingerprint: row.fingerprint,
                        answer,
                    },
                    None => Claim::Held {
                        fingerprint: row.fingerprint,
                    },
                });
            }
        }
        Ok(Claim::Held {
            fingerprint: claim.fingerprint.clone(),
        })
    }

    /// The key's answer, if it has one (not expired at `now`).
    pub async fn key_answer(
        &self,
        key: &IdempotencyKey,
        now: i64,
    ) -> Result<Option<String>, StoreError> {
        let row = self
            .patiently(|| self.inner.backend.read_key(key, now))
            .await?;
        Ok(row.and_then(|r| r.answer))
    }

    /// Runs `call` again while it fails for want of a reachable Postgres (a failover, a
    /// restart), until the store wait ([`EventLog::set_store_wait`]) runs out.
    async fn patiently<T, F: std::future::Future<Output = Result<T, StoreError>>>(
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

    /// Gives up the claim `token` made on `key`, unless it is answered or was taken over: a
    /// request that stored nothing does not keep its key from being retried.
    pub async fn release_key(&self, key: &IdempotencyKey, token: &str) -> Result<(), StoreError> {
        self.patiently(|| self.inner.backend.release_claim(key, token))
            .await
    }

    /// Drops the idempotency keys that expired before `now`.
    pub async fn prune_keys(&self, now: i64) -> Result<(), StoreError> {
        self.inner.backend.prune_keys(now).await
    }

    /// Which thread holds confirmation request `request_id`.
    pub async fn confirmation_thread(
        &self,
        request_id: &str,
    ) -> Result<Option<String>, StoreError> {
        self.inner.backend.confirmation_thread(request_id).await
    }

    /// The first events of every log stream with an owner, and the id they were read up to:
    /// a scan of the whole log, which [`EventLog::plan_erasure`] can find any scope's streams in
    /// (the erasure bench's baseline; the sweeper and the erase routes look up through indexes).
    pub async fn stream_heads(&self) -> Result<(Vec<StreamHead>, i64), StoreError> {
        self.inner.backend.stream_heads(0).await
    }

    /// Plans an erasure outside the write lock ([`erasure`]): the streams of the scope found in
    /// `heads` (from [`EventLog::stream_heads`]; `None`, as every caller but the erasure bench's
    /// baseline: the scope's own heads looked up through indexes, as of now, no scan of the log),
    /// and on SQLite their ids.
    pub async fn plan_erasure(
        &self,
        request: ErasureRequest,
        heads: Option<&(Vec<StreamHead>, i64)>,
    ) -> Result<ErasurePlan, StoreError> {
        let read;
        let (heads, planned_through) = match heads {
            Some(h) => h,
            None => {
                read = self.inner.backend.scope_heads(&request.scope).await?;
                &read
            }
        };
        let mut streams = std::collections::BTreeSet::new();
        erasure::add_scope(&request.scope, heads, &mut streams);
        streams.remove(erasure::STREAM);
        streams.remove(threadstream_domain::subscription::LOG_STREAM);
        let mut known = std::collections::BTreeMap::new();
        if let Backend::Sqlite(_) = &self.inner.backend {
            // Whether the user's subscriptions are among those of the subscriptions' log stream
            // only the writer can tell (its aggregate): their ids are read in case it is erased.
            let subscriptions = threadstream_domain::subscription::LOG_STREAM.to_string();
            let user_scope = request.scope.user_id.is_some();
            for stream in streams.iter().chain(user_scope.then_some(&subscriptions)) {
                let mut ids = Vec::new();
                let mut after = 0;
                loop {
                    let page = self.inner.backend.read_thread(stream, after, 5_000).await?;
                    let Some(last) = page.last() else { break };
                    after = last.id;
                    ids.extend(page.iter().map(|e| e.id));
                }
                known.insert(stream.clone(), ids);
            }
        }
        Ok(ErasurePlan {
            request,
            streams,
            known,
            planned_through: *planned_through,
        })
    }

    /// Plans and runs an erasure, and scrubs the files after it ([`EventLog::erase_planned`]).
    pub async fn erase(
        &self,
        request: ErasureRequest,
    ) -> Result<Result<Erasure, NotErased>, StoreError> {
        let plan = self.plan_erasure(request, None).await?;
        self.erase_planned(plan, true).await
    }

    /// Runs a planned erasure (one transaction: rows deleted, tombstone stored; on Postgres the
    /// bulk deleted before the writer takes it up) and answers once the tombstone is durable. Then this process forgets the streams (owner
    /// and fork caches, hot tails) and, with `scrub`, takes the text out of the files
    /// ([`EventLog::scrub`]; several erasures in a row may scrub once, at the end).
    pub async fn erase_planned(
        &self,
        plan: ErasurePlan,
        scrub: bool,
    ) -> Result<Result<Erasure, NotErased>, StoreError> {
        // Postgres deletes the bulk before the writer, outside the write order: appends to
        // other streams are not held up behind it (docs/performance.md, "erasure-postgres").
        // The erasure log and the subscriptions' log are the writer's to change alone (the
        // latter is begun again from the other users' state, see `crate::erasure`).
        let ahead = match &self.inner.backend {
            Backend::Postgres(pg) => {
                if plan.request.scope.idle_before_ms.is_some() {
                    // The writer checks a retention erasure's threads for live runs under the
                    // order: their aggregates are loaded now, between appends, not then.
                    for s in &plan.streams {
                        self.thread_state(s).await?;
                    }
                }
                let mut streams = plan.streams.clone();
                streams.remove(erasure::STREAM);
                streams.remove(threadstream_domain::subscription::LOG_STREAM);
                let user = plan.request.scope.user_id.as_deref();
                tracing::debug!(
                    streams = streams.len(),
                    "erasure: deleting, before the write order"
                );
                Some(pg.erase_ahead(&streams, user).await?)
            }
            Backend::Sqlite(_) => None,
        };
        let (reply, rx) = oneshot::channel();
        let (acked, acked_rx) = oneshot::channel();
        self.inner
            .tx
            .send(writer::WriterMsg::Erase {
                plan: Box::new(plan),
                ahead,
                reply,
                acked,
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        let tombstone = match rx.await.map_err(|_| StoreError::Closed)?? {
            Ok(t) => t,
            Err(not) => return Ok(Err(not)),
        };
        acked_rx.await.map_err(|_| StoreError::Closed)??;
        let EventBody::Erased(erased) = tombstone.decode()?.body else {
            return Err(StoreError::refused("the erasure log holds a non-tombstone"));
        };
        let streams: Vec<String> = erased.streams.iter().map(|s| s.stream.clone()).collect();
        self.inner.heads.erased(&streams, tombstone.id);
        if scrub {
            self.scrub(&streams).await?;
        }
        Ok(Ok(Erasure {
            tombstone,
            erased: *erased,
        }))
    }

    /// After erasures: SQLite's thread index forgets `streams` and both WALs are checkpointed
    /// and truncated (the freed pages were zeroed as they were freed, `secure_delete`);
    /// Postgres vacuums the tables erasures delete from. See docs/operations.md.
    pub async fn scrub(&self, streams: &[String]) -> Result<(), StoreError> {
        match &self.inner.backend {
            Backend::Sqlite(b) => {
                let path = b.path();
                let streams = streams.to_vec();
                tokio::task::spawn_blocking(move || erasure::sqlite::scrub_files(&path, &streams))
                    .await
                    .map_err(|e| StoreError::unavailable("scrub after erasure", e))?
            }
            Backend::Postgres(pg) => pg.vacuum_erased().await,
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

    /// The streams named by the tombstones of every erasure of `user` (`None`: the user was
    /// never erased): what a repeated `erase --user` scrubs after a crash between an erasure's
    /// commit and its scrub. Reads the erasure log whole (an operator's command, not a route).
    pub async fn user_erased_streams(&self, user: &str) -> Result<Option<Vec<String>>, StoreError> {
        let mut found: Option<Vec<String>> = None;
        let mut after = 0;
        loop {
            let page = self
                .inner
                .backend
                .read_thread(erasure::STREAM, after, 5_000)
                .await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for e in &page {
                if let EventBody::Erased(erased) = e.decode()?.body {
                    if erased.scope.user_id.as_deref() == Some(user) {
                        found
                            .get_or_insert_with(Vec::new)
                            .extend(erased.streams.iter().map(|s| s.stream.clone()));
                    }
                }
            }
        }
        Ok(found)
    }

    /// Deletes every idempotency record of `user` (their scope) outside an erasure's
    /// transaction: a user with no stream left, or a repeated erasure; returns how many went.
    pub async fn erase_user_keys(&self, user: &str) -> Result<u64, StoreError> {
        self.inner.backend.erase_user_keys(user).await
    }

    /// `(tombstone id, highest erased id)` when the log stream `stream` was erased.
    pub async fn erased_stream(&self, stream: &str) -> Result<Option<(i64, i64)>, StoreError> {
        self.inner.backend.erased_stream(stream).await
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
