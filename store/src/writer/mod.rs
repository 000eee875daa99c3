//! The one writer task of a process: every append (agent runtime, ingest, control commands)
//! goes through it.
//!
//! Requests arrive on a bounded channel. The writer takes every request that is waiting (up to a
//! cap), decides each against its stream's in-memory aggregate (of the stream's kind,
//! [`threadstream_domain::aggregate`]), assigns ids and seqs, commits
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
//! Answering is the `Acknowledger`'s (`acks.rs`): it raises the heads readers wait on and replies. Where a
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

mod acks;
mod aggregates;
mod batch;
mod compact;
mod decide;
mod erase;
mod linger;

use hashlink::LruCache;
use threadstream_domain::clock::now_ms;
use threadstream_domain::{LogAggregate, StoredEvent};
use tokio::sync::mpsc;

use self::acks::{Acknowledger, Acks, Committed};
#[cfg(test)]
pub(crate) use self::batch::WriterCounts;
use self::batch::{any_answered, commands_in, fail_all, Decided};
pub(crate) use self::batch::{AppendRequest, WriterMsg};
use self::linger::LingerGate;
use crate::backend::{Backend, BatchTx};
use crate::error::StoreError;
use crate::heads::Heads;
use crate::idempotency::{AnsweredKey, IdempotencyKey};
use crate::notify::Publisher;

/// Requests taken into one transaction at most.
const MAX_REQUESTS_PER_BATCH: usize = 4096;

/// A batch of this many commands goes out at once, whatever the commit linger ([`SharedDuration`]):
/// it is already large, as under an ingest load (100 clients posting 50 events each waited out
/// the linger, each post answered that much later: `ingest-http` fell from 340,000 to 160,000
/// events/s with a 2 ms linger counted in requests).
const LINGER_FULL: usize = 256;

/// A duration the writer reads once per batch and the log's owner may set at any time (shared,
/// so a setting reaches the running writer):
/// - the commit linger ([`crate::EventLog::set_commit_linger`]): how long a small batch waits
///   for more requests before it is written, counted from its first request's arrival, while
///   appends to several streams are arriving ([`LingerGate`]); 0 (the default of the store)
///   writes every batch as soon as it can. Why: at model speed appends arrive one at a time,
///   and a transaction (its order lock, insert, commit and sync, its notification) costs far
///   more than the rows in it (docs/performance.md, "Cost per token at model speed");
/// - the store wait ([`crate::EventLog::set_store_wait`]).
#[derive(Clone, Default)]
pub(crate) struct SharedDuration(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl SharedDuration {
    pub(crate) fn set(&self, linger: std::time::Duration) {
        self.0.store(
            linger.as_micros().min(u64::MAX as u128) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    pub(crate) fn get(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// The writer task's state: the backend, and the aggregates it has loaded, each with the id of
/// the last event folded into it.
pub(crate) struct Writer {
    backend: Backend,
    acks: Acks,
    /// Where each batch's head notification goes out in its commit (Postgres's
    /// `LISTEN/NOTIFY`); elsewhere the acknowledger publishes it after the commit.
    in_commit: Option<Publisher>,
    /// By stream id, each of its stream's kind. Never evicted by itself (created unbounded):
    /// trimmed to `cached_threads` between batches, so an aggregate decided earlier in a batch
    /// is never dropped before its commit.
    aggregates: LruCache<String, (Box<dyn LogAggregate>, i64)>,
    cached_threads: usize,
    /// Every event with an id at or below this has been folded into the cached aggregates (or
    /// belongs to a thread not cached). Above it, another process may have written.
    watermark: i64,
    /// The idempotency keys the batch being written answers: an append under one of them,
    /// decided meanwhile, is refused as answered (were that batch not stored, the appends
    /// decided behind it are decided again).
    keys_in_flight: Vec<IdempotencyKey>,
    linger: SharedDuration,
    /// How long a batch waits for an unreachable Postgres ([`crate::EventLog::set_store_wait`]).
    store_wait: SharedDuration,
    /// Since when Postgres has been unreachable to the writer (`None`: it answered last).
    unreachable_since: Option<tokio::time::Instant>,
    /// Requests of a batch whose commit lost its connection and that the store was then found
    /// not to hold: decided and written again, before anything newer.
    retry: Vec<WriterMsg>,
    /// Whether a small batch may linger now (appends to several streams are arriving).
    linger_gate: LingerGate,
    #[cfg(test)]
    counts: WriterCounts,
}

/// A batch's transaction being begun by a task of its own: the transaction and the highest
/// committed id.
type Begun = tokio::task::JoinHandle<Result<(BatchTx, i64), StoreError>>;

/// How a batch's write ended: its rows given back, the outcome, and whether the batch is
/// certainly not stored after losing its connection (so it may be written again); or the
/// task's failure.
type Written = Result<(Vec<StoredEvent>, Result<(), StoreError>, bool), tokio::task::JoinError>;

/// A batch being inserted and committed by a task of its own; the task gives its rows back.
struct InFlight {
    task: tokio::task::JoinHandle<(Vec<StoredEvent>, Result<(), StoreError>, bool)>,
    batch: Decided,
}

/// Inserts `rows` and the keyed appends' `answers` in `tx` and commits; a transaction dropped
/// after a failure rolls back.
///
/// On Postgres (`resolve`: the backend and how long to wait for it) a lost connection is
/// settled here: before `COMMIT` was sent, the transaction is certainly rolled back; during
/// it, the outcome is unknown (the server may have committed, and a standby may hold the
/// commit and be promoted), so once the database answers again, and the server process the
/// transaction ran in has ended there (a `COMMIT` waiting for a synchronous standby outlives
/// its connection, invisible until it ends committed), the batch's rows are looked up by their
/// ids and contents ([`Backend::batch_stored`]): found, the batch is acknowledged; absent, it
/// was not stored. The third value is true when the batch is known not stored after a lost
/// connection (the writer then writes it again).
async fn write_batch(
    mut tx: BatchTx,
    rows: Vec<StoredEvent>,
    answers: Vec<AnsweredKey>,
    resolve: Option<(Backend, std::time::Duration)>,
    hint: Option<String>,
) -> (Vec<StoredEvent>, Result<(), StoreError>, bool) {
    let sent = async {
        if !rows.is_empty() {
            tx.insert(&rows).await?;
        }
        if !answers.is_empty() {
            tx.store_answers(&answers, now_ms()).await?;
        }
        Ok::<(), StoreError>(())
    }
    .await;
    if let Err(e) = sent {
        let lost = resolve.is_some() && e.is_connection_loss();
        return (rows, Err(e), lost);
    }
    let session = tx.session();
    let e = match tx.commit(hint.as_deref()).await {
        Ok(()) => return (rows, Ok(()), false),
        Err(e) => e,
    };
    if rows.is_empty() {
        // No event to look up, and none to store twice: its requests (each refused a store
        // read on this connection, or holding answers only, which are checked again) are
        // decided again once the store answers, rather than refused.
        let lost = resolve.is_some() && e.is_connection_loss();
        return (rows, Err(e), lost);
    }
    let Some(((backend, wait), session)) = resolve.zip(session).filter(|_| e.is_connection_loss())
    else {
        return (rows, Err(e), false);
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut lookup_failed = None;
    loop {
        let why = match backend.batch_stored(&rows, session).await {
            Ok(Some(true)) => {
                tracing::info!(
                    events = rows.len(),
                    "the connection dropped during COMMIT; the batch is stored"
                );
                return (rows, Ok(()), false);
            }
            Ok(Some(false)) => {
                tracing::info!(
                    events = rows.len(),
                    "the connection dropped during COMMIT; the batch is not stored"
                );
                return (rows, Err(e), true);
            }
            Ok(None) => "its server process still runs",
            Err(later) => {
                lookup_failed = Some(later);
                "the store stayed unreachable"
            }
        };
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                lookup = lookup_failed.as_ref().map(|l| l as &dyn std::error::Error),
                events = rows.len(),
                "the connection dropped during COMMIT and {why}; the outcome is unknown"
            );
            return (rows, Err(e), false);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// How long a batch tries to begin once the store has been unreachable for longer than the
/// store wait ([`Writer::begin`]).
const LAST_TRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Gaps (events written by other processes since our last batch) larger than this clear the
/// aggregate cache instead of being read: the aggregates reload lazily.
const MAX_CATCH_UP: i64 = 10_000;

impl Writer {
    pub async fn start(
        backend: Backend,
        heads: Heads,
        publisher: Option<Publisher>,
        cached_threads: usize,
        linger: SharedDuration,
        store_wait: SharedDuration,
    ) -> Result<Self, StoreError> {
        let watermark = backend.max_id().await?;
        let (in_commit, publisher) = match publisher {
            Some(p) if p.in_commit() => (Some(p), None),
            p => (None, p),
        };
        let acks = Acks::start(Acknowledger {
            backend: backend.clone(),
            heads,
            publisher,
        })?;
        Ok(Writer {
            backend,
            acks,
            in_commit,
            aggregates: LruCache::new_unbounded(),
            cached_threads: cached_threads.max(1),
            watermark,
            keys_in_flight: Vec::new(),
            linger,
            store_wait,
            retry: Vec::new(),
            unreachable_since: None,
            linger_gate: LingerGate::default(),
            #[cfg(test)]
            counts: WriterCounts::default(),
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
            let _inline = self.acks.dispatch(rx.is_empty());
            #[cfg(test)]
            {
                self.counts.synced_inline += _inline as u64;
            }
            self.acks.ready().await;
            let mut stop = false;
            in_flight = match in_flight.take() {
                None if !self.retry.is_empty() => {
                    // A batch found not stored after its connection dropped (or whose store
                    // reads lost theirs): written again first, with what waits behind it. A
                    // pause while the store is known unreachable, so a store that keeps
                    // dropping connections is not asked in a tight loop.
                    if self.unreachable_since.is_some() {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                    let mut batch = std::mem::take(&mut self.retry);
                    take_more(&mut batch, &mut rx, &mut held);
                    stop = batch.iter().any(|m| matches!(m, WriterMsg::Shutdown));
                    self.process(batch).await
                }
                None => {
                    let first = match held.take() {
                        Some(m) => m,
                        None => match rx.recv().await {
                            Some(m) => m,
                            None => break,
                        },
                    };
                    let first = match first {
                        WriterMsg::Erase {
                            plan,
                            ahead,
                            reply,
                            acked,
                        } => {
                            self.erase(*plan, ahead, reply, acked).await;
                            continue;
                        }
                        WriterMsg::Compact(req) => {
                            self.compact(*req).await;
                            continue;
                        }
                        other => other,
                    };
                    let mut batch = take_waiting(first, &mut rx, &mut held);
                    let now = tokio::time::Instant::now();
                    let fragments = self.linger_gate.see(&batch, now);
                    let linger = self.linger.get();
                    if !linger.is_zero() && fragments && self.linger_gate.siblings(now) {
                        let until = now + linger;
                        let from = batch.len();
                        open = linger_for_more(&mut batch, &mut rx, &mut held, until).await;
                        // What joined it is noted too (which streams are in a burst).
                        self.linger_gate
                            .see(&batch[from..], tokio::time::Instant::now());
                    }
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
                    // When the next batch's first request arrived (its linger counts from it).
                    let mut first_at: Option<tokio::time::Instant> = None;
                    // Whether it holds only fragments continuing bursts ([`LingerGate::see`]).
                    let mut fragments = true;
                    let written = loop {
                        tokio::select! {
                            written = &mut writing.task => break written,
                            m = rx.recv(), if open && !stop && held.is_none() && next.requests.len() < MAX_REQUESTS_PER_BATCH => {
                                let Some(first) = m else {
                                    open = false;
                                    continue;
                                };
                                if first.runs_alone() {
                                    held = Some(first);
                                    continue;
                                }
                                let batch = take_waiting(first, &mut rx, &mut held);
                                stop = batch.iter().any(|m| matches!(m, WriterMsg::Shutdown));
                                let now = tokio::time::Instant::now();
                                fragments &= self.linger_gate.see(&batch, now);
                                first_at.get_or_insert(now);
                                self.decide_into(&mut next, batch, None).await;
                                // Not while the batch may linger (below): a begun batch holds the
                                // order lock from the moment the one in flight commits, and
                                // would hold it through the linger, every other instance's
                                // writer waiting behind it (a fleet's p99 went from 19 to 189
                                // ms at a 15 ms linger: docs/performance.md, "the order lock
                                // through a linger").
                                let may_linger = fragments
                                    && !self.linger.get().is_zero()
                                    && self.linger_gate.siblings(now);
                                if begun.is_none() && !next.requests.is_empty() && !may_linger {
                                    let backend = self.backend.clone();
                                    begun = Some(tokio::spawn(async move { backend.begin_batch().await }));
                                }
                            }
                        }
                    };
                    let stored = self.settle(writing.batch, written);
                    let until = first_at.map(|at| at + self.linger.get());
                    match until {
                        Some(until)
                            if tokio::time::Instant::now() < until
                                && self.linger_gate.siblings(tokio::time::Instant::now())
                                && !next.requests.is_empty()
                                && next.rows.len() < LINGER_FULL
                                && fragments
                                && !stop
                                && held.is_none() =>
                        {
                            // The next batch lingers: this one is answered first.
                            let was_stored = stored.is_some();
                            if let Some(batch) = stored {
                                self.acks.send(batch);
                            }
                            let mut more = Vec::new();
                            open = linger_for_more(&mut more, &mut rx, &mut held, until).await;
                            self.linger_gate.see(&more, tokio::time::Instant::now());
                            stop = more.iter().any(|m| matches!(m, WriterMsg::Shutdown));
                            if !more.is_empty() {
                                self.decide_into(&mut next, more, None).await;
                            }
                            self.write_behind(was_stored, next, begun).await
                        }
                        _ => {
                            // The next batch goes out before this one's answers: a few hundred
                            // replies are ~0.1-1 ms of the writer's time the backend would
                            // otherwise sit idle.
                            let in_flight = self.write_behind(stored.is_some(), next, begun).await;
                            if let Some(batch) = stored {
                                self.acks.send(batch);
                            }
                            in_flight
                        }
                    }
                }
            };
            // The aggregates the batch being written used are the most recently used: never
            // trimmed before it lands (the store does not hold their events yet).
            let keep = self
                .cached_threads
                .max(in_flight.as_ref().map_or(0, |w| w.batch.used));
            while self.aggregates.len() > keep {
                self.aggregates.remove_lru();
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
        fail_all(std::mem::take(&mut self.retry), &StoreError::Closed);
        self.acks.finish();
        tracing::debug!("writer stopped");
    }

    /// A batch with nothing being written: begins it, catches up, decides it, and writes it
    /// (on Postgres in a task of its own, returned, so the next batch is decided meanwhile).
    async fn process(&mut self, batch: Vec<WriterMsg>) -> Option<InFlight> {
        let (mut tx, head) = match self.begin().await {
            Ok(x) => x,
            Err(e) => {
                fail_all(batch, &e);
                return None;
            }
        };
        if let Err(e) = self.catch_up(head).await {
            self.aggregates.clear();
            self.fail_or_retry(batch, &e);
            return None;
        }
        let decided = self.decide_batch(batch, head, &mut tx).await;
        self.write(tx, decided).await
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
        mut next: Decided,
        begun: Option<Begun>,
    ) -> Option<InFlight> {
        if next.requests.is_empty() {
            return None;
        }
        let begun = match begun {
            Some(task) => match task.await {
                Ok(Err(e)) if e.is_connection_loss() => self.begin().await,
                Ok(begun) => begun,
                Err(e) => Err(StoreError::unavailable("batch begin failed", e)),
            },
            None => self.begin().await,
        };
        if !stored {
            // Decided on top of a batch that is not stored: start over from the store (after
            // letting go of the order lock the early begin may hold), behind any batch to be
            // written again.
            drop(begun);
            self.forget(&next.touched);
            let mut batch = std::mem::take(&mut self.retry);
            batch.extend(next.into_messages());
            return self.process(batch).await;
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
                self.fail_or_retry(next.into_messages(), &e);
                return None;
            }
        };
        let decided = if head == next.head && !answered_since {
            next
        } else {
            // Another process appended since: fold its events in and decide again.
            #[cfg(test)]
            {
                self.counts.decided_again += 1;
            }
            self.roll_back(&mut next);
            if let Err(e) = self.catch_up(head).await {
                self.aggregates.clear();
                self.fail_or_retry(next.into_messages(), &e);
                return None;
            }
            self.decide_batch(next.into_messages(), head, &mut tx).await
        };
        self.write(tx, decided).await
    }

    /// Inserts and commits a decided batch in `tx`: on Postgres in a task of its own (returned),
    /// elsewhere here, landing it at once.
    async fn write(&mut self, tx: BatchTx, mut decided: Decided) -> Option<InFlight> {
        let rows = std::mem::take(&mut decided.rows);
        #[cfg(test)]
        {
            self.counts.batches += u64::from(!rows.is_empty());
        }
        let answers = std::mem::take(&mut decided.answers);
        self.keys_in_flight = answers.iter().map(|a| a.key.clone()).collect();
        match tx {
            BatchTx::Postgres(tx) => {
                // No store wait: a lost connection fails the batch as it always did.
                let wait = self.store_wait.get();
                let resolve = (!wait.is_zero()).then(|| (self.backend.clone(), wait));
                let hint = self.hint(&rows);
                let task = tokio::spawn(write_batch(
                    BatchTx::Postgres(tx),
                    rows,
                    answers,
                    resolve,
                    hint,
                ));
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
                let written = write_batch(tx, rows, answers, None, None).await;
                self.land(decided, Ok(written));
                None
            }
        }
    }

    /// The head notification `rows` send in their commit, where notifications go that way.
    fn hint(&self, rows: &[StoredEvent]) -> Option<String> {
        self.in_commit.as_ref().and_then(|p| p.message(rows))
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
        let (rows, result, not_stored) = match written {
            Ok(w) => w,
            Err(e) => (
                Vec::new(),
                Err(StoreError::unavailable("batch write failed", e)),
                false,
            ),
        };
        decided.rows = rows;
        let mut pending = Vec::with_capacity(decided.requests.len());
        match result {
            Ok(()) => {
                // A commit is the surest sign the database answers: the outage, if any, is over
                // (batches begun early, on the second connection, skip `begin`).
                self.unreachable_since = None;
                if let Some(last) = decided.rows.last() {
                    self.watermark = last.id;
                    for t in &decided.touched {
                        if let Some(entry) = self.aggregates.peek_mut(t) {
                            entry.1 = last.id;
                        }
                    }
                }
                for (req, outcome) in decided.requests {
                    match outcome {
                        Ok(range) => pending.push((req, range)),
                        // Its decision read the store (an idempotency key, an aggregate) on a
                        // connection the failover took: decided again, not refused.
                        Err(e) if self.waits_for_store(&e) => {
                            self.retry.push(WriterMsg::Append(req))
                        }
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
                // A lost connection starts the store wait's clock (when it was not running yet),
                // as a failed begin does: the batches behind this one are not each held a whole
                // wait.
                if e.is_connection_loss() && !not_stored {
                    self.unreachable_since
                        .get_or_insert_with(tokio::time::Instant::now);
                }
                // Debug only: every request of the batch gets this error, and its caller logs
                // it once (the API with the 5xx's error id, the runtime as the run's failure).
                tracing::debug!(
                    error = &e as &dyn std::error::Error,
                    events = decided.rows_len,
                    "commit failed; batch refused"
                );
                self.forget(&decided.touched);
                for (req, outcome) in decided.requests {
                    match outcome {
                        // Certainly not stored, and the store answers again: decided and
                        // written again rather than refused (the wait already spent counts
                        // against the next one only).
                        Ok(_) if not_stored => self.retry.push(WriterMsg::Append(req)),
                        Err(own) if not_stored && self.waits_for_store(&own) => {
                            self.retry.push(WriterMsg::Append(req))
                        }
                        outcome => {
                            let _ = req
                                .reply
                                .send(Err(outcome.err().unwrap_or_else(|| e.clone())));
                        }
                    }
                }
                None
            }
        }
    }

    /// Begins a batch; on Postgres, while the database is unreachable (no primary during a
    /// failover, a restart), tries again until the store wait runs out, so the appends in hand
    /// wait rather than fail. The wait counts from when the store was first found unreachable,
    /// not from each batch: in a long outage the batches behind the first are not each held
    /// a whole wait, but tried once and refused at once until the store answers again.
    /// Whether a request that failed with `e` waits for the store and goes again: a lost
    /// connection on Postgres with a store wait, while the outage is younger than the wait.
    fn waits_for_store(&self, e: &StoreError) -> bool {
        let wait = self.store_wait.get();
        e.is_connection_loss()
            && !wait.is_zero()
            && matches!(self.backend, Backend::Postgres(_))
            && self
                .unreachable_since
                .is_none_or(|since| since.elapsed() < wait)
    }

    /// Refuses `messages` with `e`, unless `e` is a lost connection the store wait covers: then
    /// they go again, first, once the store answers ([`Writer::begin`] waits for it; the wait's
    /// clock starts here).
    fn fail_or_retry(&mut self, messages: Vec<WriterMsg>, e: &StoreError) {
        if self.waits_for_store(e) {
            self.unreachable_since
                .get_or_insert_with(tokio::time::Instant::now);
            self.retry.extend(messages);
        } else {
            fail_all(messages, e);
        }
    }

    async fn begin(&mut self) -> Result<(BatchTx, i64), StoreError> {
        let wait = self.store_wait.get();
        if wait.is_zero() || !matches!(self.backend, Backend::Postgres(_)) {
            return self.backend.begin_batch().await;
        }
        let now = tokio::time::Instant::now();
        let deadline = self.unreachable_since.unwrap_or(now) + wait;
        let mut pause = std::time::Duration::from_millis(50);
        loop {
            // Past the deadline (an outage older than the wait): one short try (the pool
            // would go on connecting for its whole acquire timeout).
            let until = deadline.max(tokio::time::Instant::now() + LAST_TRY);
            let attempt = tokio::time::timeout_at(until, self.backend.begin_batch()).await;
            let e = match attempt {
                Ok(Err(e)) if e.is_connection_loss() => e,
                Ok(begun) => {
                    self.unreachable_since = None;
                    return begun;
                }
                Err(_) => {
                    self.unreachable_since.get_or_insert(now);
                    return Err(StoreError::refused(
                        "no database reachable within the store wait",
                    ));
                }
            };
            self.unreachable_since.get_or_insert(now);
            if tokio::time::Instant::now() + pause >= deadline {
                return Err(e);
            }
            tracing::debug!(
                error = &e as &dyn std::error::Error,
                "store unreachable; the batch waits"
            );
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(500));
        }
    }

    /// Puts the aggregates a batch decided ahead advanced back as they were before it
    /// (`Decided::before`), keeping the id each was folded through: the events of the batch
    /// written before it are in both. One it advanced with no copy is forgotten instead.
    fn roll_back(&mut self, decided: &mut Decided) {
        let before = std::mem::take(&mut decided.before);
        for t in &decided.touched {
            if !before.contains_key(t) {
                self.aggregates.remove(t);
            }
        }
        for (t, aggregate) in before {
            if let Some(entry) = self.aggregates.peek_mut(&t) {
                entry.0 = aggregate;
            }
        }
    }

    /// Drops cached aggregates whose state may be ahead of the store; they reload from it.
    fn forget(&mut self, streams: &[String]) {
        for t in streams {
            self.aggregates.remove(t);
        }
    }
}

/// `first` and every request waiting behind it, up to [`MAX_REQUESTS_PER_BATCH`] or an erasure
/// (which goes to `held`: it runs alone, after this batch).
fn take_waiting(
    first: WriterMsg,
    rx: &mut mpsc::Receiver<WriterMsg>,
    held: &mut Option<WriterMsg>,
) -> Vec<WriterMsg> {
    let mut batch = vec![first];
    take_more(&mut batch, rx, held);
    batch
}

/// Adds the requests already waiting to `batch`, up to [`MAX_REQUESTS_PER_BATCH`]; an erasure
/// ends it, held to run alone.
fn take_more(
    batch: &mut Vec<WriterMsg>,
    rx: &mut mpsc::Receiver<WriterMsg>,
    held: &mut Option<WriterMsg>,
) {
    while batch.len() < MAX_REQUESTS_PER_BATCH {
        match rx.try_recv() {
            Ok(m) if m.runs_alone() => {
                *held = Some(m);
                break;
            }
            Ok(m) => batch.push(m),
            Err(_) => break,
        }
    }
}

/// Adds the requests that arrive until `until` (or until an erasure is held, or a shutdown is
/// asked, before it) to `batch`. Returns false when the channel closed. It sleeps the linger
/// out and then takes what came, rather than taking each request as it arrives: a receiver that
/// waits is woken by every send (on the writer's thread, an `eventfd` write and a context
/// switch), so at model speed waiting that way cost a wake-up per append, more than the
/// batch saved. A batch of [`LINGER_FULL`] commands or more, or one holding an erasure or a shutdown,
/// does not wait.
async fn linger_for_more(
    batch: &mut Vec<WriterMsg>,
    rx: &mut mpsc::Receiver<WriterMsg>,
    held: &mut Option<WriterMsg>,
    until: tokio::time::Instant,
) -> bool {
    let is_shutdown = |m: &WriterMsg| matches!(m, WriterMsg::Shutdown);
    let full = commands_in(batch);
    if full >= LINGER_FULL || held.is_some() || batch.iter().any(is_shutdown) {
        return true;
    }
    if rx.len() < LINGER_FULL - full {
        tokio::time::sleep_until(until).await;
    }
    take_more(batch, rx, held);
    !(rx.is_closed() && rx.is_empty())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::postgres::PgLog;
    use crate::tests::{end_backend, fresh_pg_url, pid_of};

    /// A batch whose connection the server ended while it was open (a failover, an
    /// administrator).
    async fn batch_on_an_ended_connection(pg: &PgLog) -> BatchTx {
        let (mut tx, _) = pg.begin_batch().await.unwrap();
        end_backend(pg, pid_of(&mut tx).await).await;
        BatchTx::Postgres(tx)
    }

    /// A batch with no event (each of its requests refused a store read on its connection)
    /// whose `COMMIT` lost the connection has nothing to look up and nothing to store twice:
    /// its requests are decided again once the store answers, not refused.
    #[tokio::test]
    async fn a_batch_without_events_whose_commit_lost_its_connection_goes_again() {
        let (_g, url) = fresh_pg_url().await;
        let pg = PgLog::open(&url).await.unwrap();
        let resolve = Some((Backend::Postgres(pg.clone()), Duration::from_secs(1)));
        let tx = batch_on_an_ended_connection(&pg).await;
        let (rows, result, again) = write_batch(tx, Vec::new(), Vec::new(), resolve, None).await;
        assert!(rows.is_empty());
        assert!(result.unwrap_err().is_connection_loss());
        assert!(again, "decided again, not refused");
        // With no store wait, a lost connection fails the batch, as it always did.
        let tx = batch_on_an_ended_connection(&pg).await;
        let (_, result, again) = write_batch(tx, Vec::new(), Vec::new(), None, None).await;
        assert!(result.is_err());
        assert!(!again);
    }
}
