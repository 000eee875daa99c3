//! The one writer task of a process: every append (agent runtime, ingest, control commands)
//! goes through it.
//!
//! Requests arrive on a bounded channel. The writer takes every request that is waiting (up to a
//! cap), decides each against the in-memory `Thread` aggregate, assigns ids and seqs, commits
//! them all in one transaction (group commit), and only then has each request answered. A failed
//! commit answers every request of the batch with the error and forgets the aggregates it
//! touched, so they are reloaded from what was really stored.
//!
//! On Postgres the insert and commit of a batch run in a task of their own, and the requests
//! that arrive meanwhile are decided as they come, numbered after the batch being written; when
//! it lands, the next batch begins, and if the order lock shows another process appended in
//! between, it is decided again on the caught-up aggregates (`Writer::write_behind`). Its
//! transaction is begun on a second connection as soon as it has a request, and waits there for
//! the order lock. A batch decided ahead answers nothing (not even a broken rule) until it lands.
//!
//! Answering is the [`Acknowledger`]'s: it raises the heads readers wait on and replies. Where a
//! commit is durable only once the WAL is synced (SQLite, durable), committed batches go to the
//! syncer thread instead, which syncs once for every batch waiting and then acknowledges them in
//! order; meanwhile the writer goes on with the next batch.
//!
//! An append may carry an idempotency key ([`crate::idempotency`]). It is refused, storing
//! nothing, when the key is answered — in the store (looked up in the batch's transaction, under
//! the write order), earlier in its batch, or by the batch being written — and otherwise its
//! answer is stored with its events, in the batch's transaction.
//!
//! The aggregates are a bounded cache (least recently used evicted first): an evicted thread
//! is folded again from the log the next time it is appended to, so memory stays bounded by
//! the capacity, not by how many threads were touched since start.

use std::ops::Range;
use std::thread::JoinHandle;

use hashlink::LruCache;
use threadstream_domain::clock::now_ms;
use threadstream_domain::subscription::LOG_STREAM as SUBSCRIPTIONS;
use threadstream_domain::{EventBody, ForkOf, StoredEvent, Thread, ThreadCommand, ThreadError};
use tokio::sync::{mpsc, oneshot, watch};

use crate::backend::{Backend, BatchTx};
use crate::erasure::{self, Erased, ErasurePlan, NotErased};
use crate::error::StoreError;
use crate::fork;
use crate::heads::Heads;
use crate::idempotency::{AnsweredKey, IdempotencyKey, KeyedAppend};
use crate::notify::Publisher;
use crate::sqlite::SqliteLog;

/// Requests taken into one transaction at most.
const MAX_REQUESTS_PER_BATCH: usize = 4096;

/// One append: commands for one or more log streams (each with its own), decided and stored
/// together or not at all. Several streams: a Durable Stream fork's create and its source's
/// `stream-fork-added` are one decision.
pub(crate) struct AppendRequest {
    pub parts: Vec<(String, Vec<ThreadCommand>)>,
    /// Stored only if this idempotency key has no answer yet, and then with its answer.
    pub key: Option<KeyedAppend>,
    pub reply: oneshot::Sender<Result<Vec<StoredEvent>, StoreError>>,
}

/// What the writer is asked: an append, or a read of an aggregate's current state.
pub(crate) enum WriterMsg {
    Append(AppendRequest),
    State {
        thread_id: String,
        reply: oneshot::Sender<Result<Thread, StoreError>>,
    },
    /// Erase log streams ([`crate::erasure`]): run alone, between batches.
    Erase {
        plan: Box<ErasurePlan>,
        /// Right after the commit: the tombstone (not durable yet), or why none was stored.
        reply: oneshot::Sender<Result<Result<StoredEvent, NotErased>, StoreError>>,
        /// The tombstone once acknowledged (durable), as an append's answer.
        acked: oneshot::Sender<Result<Vec<StoredEvent>, StoreError>>,
    },
    /// Finish the batch in hand, then stop; requests still queued are answered `Closed`.
    Shutdown,
    /// The ids of the aggregates cached now, least recently used first (tests: eviction).
    #[cfg(test)]
    Cached {
        reply: oneshot::Sender<Vec<String>>,
    },
}

/// A committed batch on its way to being acknowledged: its rows in id order, and each request
/// with the range of those rows that answers it (the ranges follow each other).
struct Committed {
    rows: Vec<StoredEvent>,
    pending: Vec<(AppendRequest, Range<usize>)>,
}

impl Committed {
    fn refuse(self, e: &StoreError) {
        for (req, _) in self.pending {
            let _ = req.reply.send(Err(e.clone()));
        }
    }
}

/// Acknowledges durable batches: lets readers up to them, raises the heads (filling the hot
/// tails), hints other processes, and answers each request with its own rows.
struct Acknowledger {
    backend: Backend,
    heads: Heads,
    publisher: Option<Publisher>,
}

impl Acknowledger {
    fn acknowledge(&self, batch: Committed) {
        if let Some(last) = batch.rows.last() {
            crate::metrics::batch_acknowledged(batch.rows.len());
            self.backend.committed(last.id);
            self.heads.advance(&batch.rows);
            if let Some(p) = &self.publisher {
                p.publish(&batch.rows);
            }
        }
        let mut rows = batch.rows.into_iter();
        for (req, range) in batch.pending {
            let own: Vec<StoredEvent> = rows.by_ref().take(range.len()).collect();
            let _ = req.reply.send(Ok(own));
        }
    }
}

/// Where committed batches go.
enum Acks {
    /// Commits are durable when they return: acknowledged at once, on the writer.
    Now(Acknowledger),
    /// The syncer thread (see the module docs); it stops once `tx` is dropped.
    Synced {
        tx: Option<std::sync::mpsc::Sender<Committed>>,
        thread: Option<JoinHandle<()>>,
        /// Batches handed to the syncer, and (from it) batches whose sync is done.
        sent: u64,
        synced: watch::Receiver<u64>,
    },
}

/// Committed batches that may wait for their sync while the writer begins another. One: the
/// next batch is decided and committed during the previous one's sync, and the requests that
/// arrive meanwhile make the batch after it, rather than a stream of small batches each paying
/// a commit of its own.
const UNSYNCED_BATCHES: u64 = 1;

impl Acks {
    fn start(ack: Acknowledger) -> Result<Self, StoreError> {
        let Some(log) = ack.backend.to_sync() else {
            return Ok(Acks::Now(ack));
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let (synced_tx, synced) = watch::channel(0);
        let thread = std::thread::Builder::new()
            .name("log-syncer".into())
            .spawn(move || sync_and_acknowledge(&log, &ack, &rx, &synced_tx))
            .map_err(|e| StoreError::unavailable("cannot start the syncer", e))?;
        Ok(Acks::Synced {
            tx: Some(tx),
            thread: Some(thread),
            sent: 0,
            synced,
        })
    }

    /// Waits until no more than [`UNSYNCED_BATCHES`] committed batches wait for their sync.
    async fn ready(&mut self) {
        if let Acks::Synced { sent, synced, .. } = self {
            let sent = *sent;
            // An error means the syncer is gone: `send` refuses what comes next.
            let _ = synced
                .wait_for(|done| sent - *done <= UNSYNCED_BATCHES)
                .await;
        }
    }

    fn send(&mut self, batch: Committed) {
        match self {
            Acks::Now(ack) => ack.acknowledge(batch),
            Acks::Synced { tx, sent, .. } => {
                let handed = match tx {
                    Some(tx) => tx.send(batch).map_err(|e| e.0),
                    None => Err(batch),
                };
                match handed {
                    Ok(()) => *sent += 1,
                    Err(batch) => batch.refuse(&StoreError::Closed),
                }
            }
        }
    }

    /// Waits until every batch handed over is acknowledged (or refused).
    fn finish(&mut self) {
        if let Acks::Synced { tx, thread, .. } = self {
            tx.take();
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// The syncer thread: for every group of batches waiting, one sync of the WAL, then each batch
/// acknowledged in commit order. After a failed sync nothing more is acknowledged (the log
/// refuses new batches too, see [`SqliteLog::sync_wal`]).
fn sync_and_acknowledge(
    log: &SqliteLog,
    ack: &Acknowledger,
    rx: &std::sync::mpsc::Receiver<Committed>,
    synced: &watch::Sender<u64>,
) {
    let mut failed: Option<StoreError> = None;
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        group.extend(rx.try_iter());
        let n = group.len() as u64;
        if failed.is_none() {
            if let Err(e) = log.sync_wal() {
                tracing::error!(
                    error = &e as &dyn std::error::Error,
                    "the log's WAL could not be synced; appends refused"
                );
                failed = Some(e);
            }
        }
        // The writer may go on before the answers are out: they only wake appenders.
        synced.send_modify(|done| *done += n);
        for batch in group {
            match &failed {
                None => ack.acknowledge(batch),
                Some(e) => batch.refuse(e),
            }
        }
    }
}

/// The writer task's state: the backend, and the aggregates it has loaded, each with the id of
/// the last event folded into it.
pub(crate) struct Writer {
    backend: Backend,
    acks: Acks,
    /// Never evicted by itself (created unbounded): trimmed to `cached_threads` between
    /// batches, so an aggregate decided earlier in a batch is never dropped before its commit.
    threads: LruCache<String, (Thread, i64)>,
    cached_threads: usize,
    /// Every event with an id at or below this has been folded into the cached aggregates (or
    /// belongs to a thread not cached). Above it, another process may have written.
    watermark: i64,
    /// The idempotency keys the batch being written answers: an append under one of them,
    /// decided meanwhile, is refused as answered (were that batch not stored, the appends
    /// decided behind it are decided again).
    keys_in_flight: Vec<IdempotencyKey>,
}

/// A batch decided against the aggregates, its rows numbered from `head + 1`, not yet stored.
struct Decided {
    /// The last id the numbering assumed committed before this batch.
    head: i64,
    rows: Vec<StoredEvent>,
    /// How many rows were decided (`rows` is moved out while they are written).
    rows_len: usize,
    /// Each append with its range of `rows`, or the rule it broke (answered when it lands, since
    /// a batch decided ahead may be decided again).
    requests: Vec<(AppendRequest, Result<Range<usize>, StoreError>)>,
    /// Threads whose aggregates took this batch's events.
    touched: Vec<String>,
    /// The answers of the batch's keyed appends, stored with its events (moved out with `rows`).
    answers: Vec<AnsweredKey>,
    /// Aggregates looked up (appends and reads): at least how many the batch made recently used.
    used: usize,
}

impl Decided {
    fn new(head: i64) -> Self {
        Decided {
            head,
            rows: Vec::new(),
            rows_len: 0,
            requests: Vec::new(),
            touched: Vec::new(),
            answers: Vec::new(),
            used: 0,
        }
    }

    /// The batch's appends as requests again, to be decided anew.
    fn into_messages(self) -> Vec<WriterMsg> {
        self.requests
            .into_iter()
            .map(|(req, _)| WriterMsg::Append(req))
            .collect()
    }
}

/// A batch's transaction being begun by a task of its own: the transaction and the highest
/// committed id.
type Begun = tokio::task::JoinHandle<Result<(BatchTx, i64), StoreError>>;

/// How a batch's write ended: its rows given back, and the outcome (or the task's failure).
type Written = Result<(Vec<StoredEvent>, Result<(), StoreError>), tokio::task::JoinError>;

/// A batch being inserted and committed by a task of its own; the task gives its rows back.
struct InFlight {
    task: tokio::task::JoinHandle<(Vec<StoredEvent>, Result<(), StoreError>)>,
    batch: Decided,
}

/// Inserts `rows` and the keyed appends' `answers` in `tx` and commits; a transaction dropped
/// after a failure rolls back.
async fn write_batch(
    mut tx: BatchTx,
    rows: Vec<StoredEvent>,
    answers: Vec<AnsweredKey>,
) -> (Vec<StoredEvent>, Result<(), StoreError>) {
    let result = async {
        if !rows.is_empty() {
            tx.insert(&rows).await?;
        }
        if !answers.is_empty() {
            tx.store_answers(&answers, now_ms()).await?;
        }
        tx.commit().await
    }
    .await;
    (rows, result)
}

/// Gaps (events written by other processes since our last batch) larger than this clear the
/// aggregate cache instead of being read: the aggregates reload lazily.
const MAX_CATCH_UP: i64 = 10_000;

impl Writer {
    pub async fn start(
        backend: Backend,
        heads: Heads,
        publisher: Option<Publisher>,
        cached_threads: usize,
    ) -> Result<Self, StoreError> {
        let watermark = backend.max_id().await?;
        let acks = Acks::start(Acknowledger {
            backend: backend.clone(),
            heads,
            publisher,
        })?;
        Ok(Writer {
            backend,
            acks,
            threads: LruCache::new_unbounded(),
            cached_threads: cached_threads.max(1),
            watermark,
            keys_in_flight: Vec::new(),
        })
    }

    /// Runs until every sender is dropped or a shutdown is asked; the batch in hand (and the one
    /// being written) is always finished first.
    pub async fn run(mut self, mut rx: mpsc::Receiver<WriterMsg>) {
        let mut in_flight: Option<InFlight> = None;
        // An erasure taken off the queue while a batch was being gathered: it runs alone, once
        // nothing is in flight.
        let mut held: Option<WriterMsg> = None;
        let mut open = true;
        while open {
            self.acks.ready().await;
            let mut stop = false;
            in_flight = match in_flight.take() {
                None => {
                    let first = match held.take() {
                        Some(m) => m,
                        None => match rx.recv().await {
                            Some(m) => m,
                            None => break,
                        },
                    };
                    if let WriterMsg::Erase { plan, reply, acked } = first {
                        self.erase(*plan, reply, acked).await;
                        continue;
                    }
                    let batch = take_waiting(first, &mut rx, &mut held);
                    stop = batch.iter().any(|m| matches!(m, WriterMsg::Shutdown));
                    self.process(batch).await
                }
                Some(mut writing) => {
                    // The next batch: every request that arrives while this one is written,
                    // decided as it arrives (see `write_behind`).
                    let after = writing.batch.head + writing.batch.rows_len as i64;
                    let mut next = Decided::new(after);
                    // Begun on the other batch connection as soon as there is a next batch: it
                    // waits there for the order lock, so it holds it from the moment the batch
                    // in flight commits (never while idle: only once there is work for it).
                    let mut begun: Option<Begun> = None;
                    let written = loop {
                        tokio::select! {
                            written = &mut writing.task => break written,
                            m = rx.recv(), if open && !stop && held.is_none() && next.requests.len() < MAX_REQUESTS_PER_BATCH => {
                                let Some(first) = m else {
                                    open = false;
                                    continue;
                                };
                                if matches!(first, WriterMsg::Erase { .. }) {
                                    held = Some(first);
                                    continue;
                                }
                                let batch = take_waiting(first, &mut rx, &mut held);
                                stop = batch.iter().any(|m| matches!(m, WriterMsg::Shutdown));
                                self.decide_into(&mut next, batch, None).await;
                                if begun.is_none() && !next.requests.is_empty() {
                                    let backend = self.backend.clone();
                                    begun = Some(tokio::spawn(async move { backend.begin_batch().await }));
                                }
                            }
                        }
                    };
                    // The next batch goes out before this one's answers: a few hundred replies
                    // are ~0.1-1 ms of the writer's time the backend would otherwise sit idle.
                    let stored = self.settle(writing.batch, written);
                    let in_flight = self.write_behind(stored.is_some(), next, begun).await;
                    if let Some(batch) = stored {
                        self.acks.send(batch);
                    }
                    in_flight
                }
            };
            // The aggregates the batch being written used are the most recently used: never
            // trimmed before it lands (the store does not hold their events yet).
            let keep = self
                .cached_threads
                .max(in_flight.as_ref().map_or(0, |w| w.batch.used));
            while self.threads.len() > keep {
                self.threads.remove_lru();
            }
            if stop {
                break;
            }
        }
        if let Some(writing) = in_flight.take() {
            let written = writing.task.await;
            self.land(writing.batch, written);
        }
        if let Some(m) = held.take() {
            fail_all(vec![m], &StoreError::Closed);
        }
        self.acks.finish();
        tracing::debug!("writer stopped");
    }

    /// The thread's aggregate, loaded from the log when it is not cached; marks it used.
    async fn aggregate(&mut self, thread_id: &str) -> Result<&mut Thread, StoreError> {
        // `contains_key` moves a cached entry to the most recently used end.
        if !self.threads.contains_key(thread_id) {
            let (thread, after) = self.fold(thread_id, i64::MAX).await?;
            self.threads.insert(thread_id.to_string(), (thread, after));
        }
        Ok(&mut self.threads.get_mut(thread_id).expect("just inserted").0)
    }

    /// Folds the thread's committed events with id at most `through` (a fork read through its
    /// source) into a fresh aggregate; returns it with the last id folded (0: none).
    async fn fold(&self, thread_id: &str, through: i64) -> Result<(Thread, i64), StoreError> {
        let mut thread = Thread::default();
        // The stream's own first page: unless it begins a fork, the stream is all there is to
        // read, with no extra probe for what it reads through (the common case, kept as cheap
        // as before forks).
        let first = self
            .backend
            .read_thread_committed(thread_id, 0, 10_000)
            .await?;
        let Some(head) = first.first() else {
            return Ok((thread, 0));
        };
        let source = fork::fork_of(head);
        let mut after = 0;
        let mut page = first;
        if source.is_none() && through == i64::MAX {
            while let Some(last) = page.last() {
                after = last.id;
                for row in &page {
                    thread.apply_at(row.id, &row.decode()?);
                }
                page = self
                    .backend
                    .read_thread_committed(thread_id, after, 10_000)
                    .await?;
            }
            return Ok((thread, after));
        }
        let mut reads = fork::Committed(&self.backend);
        let known = |stream: &str| (stream == thread_id).then(|| source.clone());
        let segments = fork::segments(&mut reads, thread_id, &known, &|_, _| {}).await?;
        let segments = fork::through(segments, through);
        loop {
            let page = fork::read_segments(&mut reads, &segments, thread_id, after, 10_000).await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for row in &page {
                thread.apply_at(row.id, &row.decode()?);
            }
        }
        Ok((thread, after))
    }

    /// The aggregate a fork of `fork_of` starts from: its source folded through the fork point,
    /// which must be one of the source's events.
    async fn fork_prefix(&self, fork_of: &ForkOf) -> Result<Thread, StoreError> {
        let (thread, last) = self
            .fold(&fork_of.thread_id, fork_of.through_event_id)
            .await?;
        if last != fork_of.through_event_id {
            return Err(ThreadError::ForkPointNotFound {
                thread_id: fork_of.thread_id.clone(),
                through_event_id: fork_of.through_event_id,
            }
            .into());
        }
        Ok(thread)
    }

    /// Folds into the cached aggregates what other processes committed up to `head`.
    async fn catch_up(&mut self, head: i64) -> Result<(), StoreError> {
        if head <= self.watermark {
            return Ok(());
        }
        if head - self.watermark > MAX_CATCH_UP {
            self.threads.clear();
            self.watermark = head;
            return Ok(());
        }
        let mut after = self.watermark;
        while after < head {
            let page = self.backend.read_all_committed(after, 1_000).await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for row in page.iter().filter(|r| r.id <= head) {
                if row.thread_id == erasure::STREAM {
                    // Another process erased streams: their aggregates are gone with them.
                    if let Ok(EventBody::Erased(e)) = row.decode().map(|e| e.body) {
                        for s in &e.streams {
                            self.threads.remove(&s.stream);
                        }
                    }
                }
                if fork::fork_of(row).is_some() {
                    // A fork's aggregate starts from its source's: folded afresh when next used.
                    self.threads.remove(&row.thread_id);
                    continue;
                }
                // `peek_mut`: another process's append is not a use of ours.
                if let Some((thread, last_id)) = self.threads.peek_mut(&row.thread_id) {
                    if row.id > *last_id {
                        thread.apply_at(row.id, &row.decode()?);
                        *last_id = row.id;
                    }
                }
            }
        }
        self.watermark = head;
        Ok(())
    }

    /// A batch with nothing being written: begins it, catches up, decides it, and writes it
    /// (on Postgres in a task of its own, returned, so the next batch is decided meanwhile).
    async fn process(&mut self, batch: Vec<WriterMsg>) -> Option<InFlight> {
        let (mut tx, head) = match self.backend.begin_batch().await {
            Ok(x) => x,
            Err(e) => {
                fail_all(batch, &e);
                return None;
            }
        };
        if let Err(e) = self.catch_up(head).await {
            self.threads.clear();
            fail_all(batch, &e);
            return None;
        }
        let decided = self.decide_batch(batch, head, &mut tx).await;
        self.write(tx, decided).await
    }

    /// Runs an erasure alone in a transaction of its own (see [`crate::erasure`]) and answers
    /// it: at once when committed (or refused), and through the acknowledger once durable.
    async fn erase(
        &mut self,
        plan: ErasurePlan,
        reply: oneshot::Sender<Result<Result<StoredEvent, NotErased>, StoreError>>,
        acked: oneshot::Sender<Result<Vec<StoredEvent>, StoreError>>,
    ) {
        let streams: Vec<String> = plan.streams.iter().cloned().collect();
        match self.erase_committed(plan).await {
            Ok(Ok(rows)) => {
                let _ = reply.send(Ok(Ok(rows[0].clone())));
                let req = AppendRequest {
                    parts: Vec::new(),
                    key: None,
                    reply: acked,
                };
                let n = rows.len();
                self.acks.send(Committed {
                    rows,
                    pending: vec![(req, 0..n)],
                });
            }
            Ok(Err(not)) => {
                let _ = reply.send(Ok(Err(not)));
            }
            Err(e) => {
                // Whatever the transaction did is rolled back: the aggregates it may have
                // touched reload from the store.
                self.forget(&streams);
                self.forget(&[erasure::STREAM.to_string(), SUBSCRIPTIONS.to_string()]);
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The erasure's transaction: what was appended since the plan is added, a retention
    /// erasure of busy streams is given up, the rows are deleted and the tombstone is stored.
    async fn erase_committed(
        &mut self,
        mut plan: ErasurePlan,
    ) -> Result<Result<Vec<StoredEvent>, NotErased>, StoreError> {
        let (mut tx, head) = self.backend.begin_batch().await?;
        if let Err(e) = self.catch_up(head).await {
            self.threads.clear();
            return Err(e);
        }
        let heads = tx.stream_heads_after(plan.planned_through).await?;
        erasure::add_scope(&plan.request.scope, &heads, &mut plan.streams);
        plan.streams.remove(erasure::STREAM);
        plan.streams.remove(SUBSCRIPTIONS);
        // The user's subscriptions share one log stream with everyone's: it is erased whole
        // and begun again from the others' state (`subscriptions-restored`, below).
        let mut restore = None;
        if let Some(user) = plan.request.scope.user_id.as_deref() {
            let subscriptions = &self.aggregate(SUBSCRIPTIONS).await?.subscriptions;
            if subscriptions.owners.contains(user) {
                restore = Some(subscriptions.without_user(user));
                plan.streams.insert(SUBSCRIPTIONS.to_string());
            }
        }
        if plan.streams.is_empty() {
            return Ok(Err(NotErased::NothingFound));
        }
        let retention = plan.request.scope.idle_before_ms.is_some();
        let mut ids = std::mem::take(&mut plan.known);
        ids.retain(|s, _| plan.streams.contains(s));
        for s in &plan.streams {
            ids.entry(s.clone()).or_default();
        }
        for (stream, id) in tx
            .stream_ids_after(&plan.streams, plan.planned_through)
            .await?
        {
            let known = ids.entry(stream).or_default();
            if known.binary_search(&id).is_err() {
                if retention {
                    return Ok(Err(NotErased::Busy));
                }
                known.push(id);
            }
        }
        if retention {
            for s in &plan.streams {
                let t = self.aggregate(s).await?;
                if t.live_run().is_some() || t.running_tasks().next().is_some() {
                    return Ok(Err(NotErased::Busy));
                }
            }
        }
        let mut streams = tx
            .erase_rows(&ids, plan.request.scope.user_id.as_deref())
            .await?;
        streams.retain(|s| s.events > 0);
        let events: u64 = streams.iter().map(|s| s.events).sum();
        let erased_streams: Vec<String> = plan.streams.iter().cloned().collect();
        self.forget(&erased_streams);
        if events == 0 {
            return Ok(Err(NotErased::NothingFound));
        }
        let erased = Erased {
            requested_by: plan.request.requested_by,
            reason: plan.request.reason,
            scope: plan.request.scope,
            events,
            streams,
        };
        let mut parts = vec![(
            erasure::STREAM.to_string(),
            vec![ThreadCommand::RecordErasure(Box::new(erased.clone()))],
        )];
        if let Some(restore) = restore {
            // The store still shows the deleted events to the writer's readers until the
            // commit: the stream's aggregate starts empty here instead of being folded.
            self.threads
                .insert(SUBSCRIPTIONS.to_string(), (Thread::default(), 0));
            parts.push((
                SUBSCRIPTIONS.to_string(),
                vec![ThreadCommand::RestoreSubscriptions(Box::new(restore))],
            ));
        }
        let rows = self.decide(&parts, head + 1, now_ms()).await?;
        tx.record_erased(&erased.streams, rows[0].id).await?;
        tx.insert(&rows).await?;
        tx.commit().await?;
        let last = rows.last().map_or(head, |r| r.id);
        self.watermark = last;
        for stream in [erasure::STREAM, SUBSCRIPTIONS] {
            if let Some(entry) = self.threads.peek_mut(stream) {
                entry.1 = last;
            }
        }
        Ok(Ok(rows))
    }

    /// Writes `next`, a batch decided while the one before it was being written (numbered after
    /// it, ids last + 1…, which holds unless another process appended in between), now that
    /// that one's write is over (`stored`: and it was stored). The batch begins, and the order lock
    /// tells whether the numbering held; when it did not, the batch is decided again on the
    /// caught-up aggregates, in the same transaction. Why: on Postgres the backend sat idle
    /// while the writer decided, and the writer while the backend ran the `COPY`
    /// (docs/performance-history.md, "Sixth pass").
    async fn write_behind(
        &mut self,
        stored: bool,
        next: Decided,
        begun: Option<Begun>,
    ) -> Option<InFlight> {
        if next.requests.is_empty() {
            return None;
        }
        let begun = match begun {
            Some(task) => task
                .await
                .unwrap_or_else(|e| Err(StoreError::unavailable("batch begin failed", e))),
            None => self.backend.begin_batch().await,
        };
        if !stored {
            // Decided on top of a batch that is not stored: start over from the store (after
            // letting go of the order lock the early begin may hold).
            drop(begun);
            self.forget(&next.touched);
            return self.process(next.into_messages()).await;
        }
        let (mut tx, head) = match begun {
            Ok(x) => x,
            Err(e) => {
                self.forget(&next.touched);
                fail_all(next.into_messages(), &e);
                return None;
            }
        };
        // The keys were checked before the order lock: checked again under it, so that an
        // answer stored meanwhile by another process (which moved the head, unless its append
        // stored no event) is never stored twice.
        let answered_since = match any_answered(&mut tx, &next.answers).await {
            Ok(answered) => answered,
            Err(e) => {
                self.forget(&next.touched);
                fail_all(next.into_messages(), &e);
                return None;
            }
        };
        let decided = if head == next.head && !answered_since {
            next
        } else {
            // Another process appended since: fold its events in and decide again.
            self.forget(&next.touched);
            if let Err(e) = self.catch_up(head).await {
                self.threads.clear();
                fail_all(next.into_messages(), &e);
                return None;
            }
            self.decide_batch(next.into_messages(), head, &mut tx).await
        };
        self.write(tx, decided).await
    }

    /// Decides every request of `batch` in order, numbering rows from `head + 1`, and answers
    /// the reads among them; appends are answered when the batch lands. `tx` is the batch's
    /// transaction, holding the write order.
    async fn decide_batch(
        &mut self,
        batch: Vec<WriterMsg>,
        head: i64,
        tx: &mut BatchTx,
    ) -> Decided {
        let mut decided = Decided::new(head);
        self.decide_into(&mut decided, batch, Some(tx)).await;
        decided
    }

    /// Decides the requests of `batch` into `decided`, after what it holds; in `tx`, the batch's
    /// transaction, when it has begun (see [`Writer::write_behind`] for one decided before).
    async fn decide_into(
        &mut self,
        decided: &mut Decided,
        batch: Vec<WriterMsg>,
        mut tx: Option<&mut BatchTx>,
    ) {
        let ts = now_ms();
        for msg in batch {
            let req = match msg {
                WriterMsg::Shutdown => continue,
                // Never batched (`take_waiting` holds it back); refused rather than lost.
                m @ WriterMsg::Erase { .. } => {
                    fail_all(
                        vec![m],
                        &StoreError::refused("an erasure runs alone, not in a batch"),
                    );
                    continue;
                }
                #[cfg(test)]
                WriterMsg::Cached { reply } => {
                    let _ = reply.send(self.threads.iter().map(|(k, _)| k.clone()).collect());
                    continue;
                }
                WriterMsg::State { thread_id, reply } => {
                    decided.used += 1;
                    let state = self.aggregate(&thread_id).await.map(|t| t.clone());
                    let _ = reply.send(state);
                    continue;
                }
                WriterMsg::Append(req) => req,
            };
            decided.used += 1;
            if let Some(keyed) = &req.key {
                let answered = match decided.answers.iter().any(|a| a.key == keyed.key)
                    || self.keys_in_flight.contains(&keyed.key)
                {
                    true => Ok(true),
                    false => match tx.as_deref_mut() {
                        Some(tx) => tx.key_answered(&keyed.key, ts).await,
                        None => self.backend.key_answered(&keyed.key, ts).await,
                    },
                };
                match answered {
                    Ok(false) => {}
                    Ok(true) => {
                        decided.requests.push((req, Err(StoreError::KeyAnswered)));
                        continue;
                    }
                    Err(e) => {
                        decided.requests.push((req, Err(e)));
                        continue;
                    }
                }
            }
            let start = decided.rows.len();
            let first_id = decided.head + 1 + start as i64;
            let outcome = match self.decide(&req.parts, first_id, ts).await {
                Ok(mut new_rows) => {
                    for (thread_id, _) in &req.parts {
                        if new_rows.iter().any(|r| &r.thread_id == thread_id) {
                            decided.touched.push(thread_id.clone());
                        }
                    }
                    decided.rows.append(&mut new_rows);
                    let own = &decided.rows[start..];
                    if let Some(keyed) = &req.key {
                        decided.answers.push(AnsweredKey {
                            key: keyed.key.clone(),
                            fingerprint: keyed.fingerprint.clone(),
                            expires_at: keyed.expires_at,
                            answer: (keyed.answer)(own),
                            last_id: own.last().map(|e| e.id),
                        });
                    }
                    Ok(start..decided.rows.len())
                }
                Err(e) => Err(e),
            };
            decided.requests.push((req, outcome));
        }
        decided.rows_len = decided.rows.len();
    }

    /// Inserts and commits a decided batch in `tx`: on Postgres in a task of its own (returned),
    /// elsewhere here, landing it at once.
    async fn write(&mut self, tx: BatchTx, mut decided: Decided) -> Option<InFlight> {
        let rows = std::mem::take(&mut decided.rows);
        let answers = std::mem::take(&mut decided.answers);
        self.keys_in_flight = answers.iter().map(|a| a.key.clone()).collect();
        match tx {
            BatchTx::Postgres(tx) => {
                let task = tokio::spawn(write_batch(BatchTx::Postgres(tx), rows, answers));
                // A task spawned on a worker waits in that worker's LIFO slot, which no other
                // worker may steal, until this task yields; and the writer goes on deciding the
                // requests already queued (up to a millisecond) before it yields by itself, the
                // backend idle meanwhile (docs/performance-history.md, "Seventh pass").
                tokio::task::yield_now().await;
                Some(InFlight {
                    task,
                    batch: decided,
                })
            }
            tx => {
                let written = write_batch(tx, rows, answers).await;
                self.land(decided, Ok(written));
                None
            }
        }
    }

    /// Settles a batch once its write is over and hands it to the acknowledger.
    fn land(&mut self, decided: Decided, written: Written) {
        if let Some(batch) = self.settle(decided, written) {
            self.acks.send(batch);
        }
    }

    /// Settles a batch once its write is over: on success, moves the watermark and returns the
    /// batch to acknowledge (the rules its requests broke are answered here); on failure,
    /// refuses every request and forgets the aggregates it touched (they were advanced past
    /// what is stored).
    fn settle(&mut self, mut decided: Decided, written: Written) -> Option<Committed> {
        self.keys_in_flight.clear();
        let (rows, result) = match written {
            Ok(w) => w,
            Err(e) => (
                Vec::new(),
                Err(StoreError::unavailable("batch write failed", e)),
            ),
        };
        decided.rows = rows;
        let mut pending = Vec::with_capacity(decided.requests.len());
        match result {
            Ok(()) => {
                if let Some(last) = decided.rows.last() {
                    self.watermark = last.id;
                    for t in &decided.touched {
                        if let Some(entry) = self.threads.peek_mut(t) {
                            entry.1 = last.id;
                        }
                    }
                }
                for (req, outcome) in decided.requests {
                    match outcome {
                        Ok(range) => pending.push((req, range)),
                        Err(e) => {
                            let _ = req.reply.send(Err(e));
                        }
                    }
                }
                Some(Committed {
                    rows: decided.rows,
                    pending,
                })
            }
            Err(e) => {
                // Debug only: every request of the batch gets this error, and its caller logs
                // it once (the API with the 5xx's error id, the runtime as the run's failure).
                tracing::debug!(
                    error = &e as &dyn std::error::Error,
                    events = decided.rows_len,
                    "commit failed; batch refused"
                );
                self.forget(&decided.touched);
                for (req, outcome) in decided.requests {
                    let _ = req
                        .reply
                        .send(Err(outcome.err().unwrap_or_else(|| e.clone())));
                }
                None
            }
        }
    }

    /// Drops cached aggregates whose state may be ahead of the store; they reload from it.
    fn forget(&mut self, threads: &[String]) {
        for t in threads {
            self.threads.remove(t);
        }
    }

    /// Decides a request's commands against each stream's aggregate and applies them; on a
    /// broken rule every aggregate is left exactly as it was.
    async fn decide(
        &mut self,
        parts: &[(String, Vec<ThreadCommand>)],
        first_id: i64,
        ts: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        // A single command decides all its events before any is applied, so only requests of
        // several commands need copies to roll back to.
        // A fork's aggregate is replaced by its prefix before deciding: that needs a copy too.
        let several = parts.len() > 1
            || parts
                .iter()
                .any(|(_, c)| c.len() > 1 || matches!(c.first(), Some(ThreadCommand::Fork { .. })));
        let mut backups: Vec<(&str, Thread)> = Vec::new();
        let mut rows = Vec::new();
        for (thread_id, commands) in parts {
            let outcome = self
                .decide_part(
                    thread_id,
                    commands,
                    several,
                    &mut backups,
                    first_id,
                    ts,
                    &mut rows,
                )
                .await;
            if let Err(e) = outcome {
                for (t, backup) in backups {
                    if let Some(entry) = self.threads.peek_mut(t) {
                        entry.0 = backup;
                    }
                }
                return Err(e);
            }
        }
        Ok(rows)
    }

    /// One part of [`Writer::decide`]: its stream's aggregate (a fork's replaced by its
    /// prefix), backed up into `backups` when `several`, decides and applies `commands`.
    #[allow(clippy::too_many_arguments)]
    async fn decide_part<'p>(
        &mut self,
        thread_id: &'p str,
        commands: &[ThreadCommand],
        several: bool,
        backups: &mut Vec<(&'p str, Thread)>,
        first_id: i64,
        ts: i64,
        rows: &mut Vec<StoredEvent>,
    ) -> Result<(), StoreError> {
        let prefix = match commands.first() {
            Some(ThreadCommand::Fork { fork_of, .. }) => Some(self.fork_prefix(fork_of).await?),
            _ => None,
        };
        let thread = self.aggregate(thread_id).await?;
        if several && !backups.iter().any(|(t, _)| *t == thread_id) {
            backups.push((thread_id, thread.clone()));
        }
        if let Some(prefix) = prefix {
            if thread.version != 0 {
                return Err(ThreadError::ThreadExists(thread_id.to_string()).into());
            }
            *thread = prefix;
        }
        decide_into_rows(thread, thread_id, commands, first_id, ts, rows)?;
        Ok(())
    }
}

/// Decides `commands` against `thread` in order, applying each event and pushing its row
/// (ids from `first_id` on, after those already in `rows`).
fn decide_into_rows(
    thread: &mut Thread,
    thread_id: &str,
    commands: &[ThreadCommand],
    first_id: i64,
    ts: i64,
    rows: &mut Vec<StoredEvent>,
) -> Result<(), threadstream_domain::ThreadError> {
    for command in commands {
        for mut event in thread.decide(command)? {
            let id = first_id + rows.len() as i64;
            event.ts = Some(ts);
            thread.apply_at(id, &event);
            rows.push(StoredEvent::from_event(
                id,
                thread_id,
                thread.version as i64,
                ts,
                &event,
            ));
        }
    }
    Ok(())
}

/// `first` and every request waiting behind it, up to [`MAX_REQUESTS_PER_BATCH`] or an erasure
/// (which goes to `held`: it runs alone, after this batch).
fn take_waiting(
    first: WriterMsg,
    rx: &mut mpsc::Receiver<WriterMsg>,
    held: &mut Option<WriterMsg>,
) -> Vec<WriterMsg> {
    let mut batch = vec![first];
    while batch.len() < MAX_REQUESTS_PER_BATCH {
        match rx.try_recv() {
            Ok(m @ WriterMsg::Erase { .. }) => {
                *held = Some(m);
                break;
            }
            Ok(m) => batch.push(m),
            Err(_) => break,
        }
    }
    batch
}

/// Whether one of `answers`' keys has been answered since they were decided, as `tx` sees it.
async fn any_answered(tx: &mut BatchTx, answers: &[AnsweredKey]) -> Result<bool, StoreError> {
    let now = now_ms();
    for a in answers {
        if tx.key_answered(&a.key, now).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Answers every request of a batch that could not even start.
fn fail_all(batch: Vec<WriterMsg>, e: &StoreError) {
    // Debug only, as a refused commit: each request's caller logs the error it gets.
    tracing::debug!(error = e as &dyn std::error::Error, "batch could not start");
    for msg in batch {
        match msg {
            WriterMsg::Append(req) => {
                let _ = req.reply.send(Err(e.clone()));
            }
            WriterMsg::State { reply, .. } => {
                let _ = reply.send(Err(e.clone()));
            }
            WriterMsg::Erase { reply, .. } => {
                let _ = reply.send(Err(e.clone()));
            }
            WriterMsg::Shutdown => {}
            #[cfg(test)]
            WriterMsg::Cached { .. } => {}
        }
    }
}
