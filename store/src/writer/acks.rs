//! Acknowledging committed batches: at once where a commit is durable when it returns, or,
//! where the WAL must be synced first (SQLite, durable), through the syncer thread while more
//! requests wait, and on the writer's own thread when none do.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use threadstream_domain::StoredEvent;
use tokio::sync::watch;

use super::batch::AppendRequest;
use crate::backend::Backend;
use crate::error::StoreError;
use crate::heads::Heads;
use crate::notify::Publisher;
use crate::sqlite::SqliteLog;

/// A committed batch on its way to being acknowledged: its rows in id order, and each request
/// with the range of those rows that answers it (the ranges follow each other).
pub(super) struct Committed {
    pub(super) rows: Vec<StoredEvent>,
    pub(super) pending: Vec<(AppendRequest, Range<usize>)>,
}

impl Committed {
    pub(super) fn refuse(self, e: &StoreError) {
        for (req, _) in self.pending {
            let _ = req.reply.send(Err(e.clone()));
        }
    }
}

/// Acknowledges durable batches: lets readers up to them, raises the heads (filling the hot
/// tails), hints other processes, and answers each request with its own rows.
pub(super) struct Acknowledger {
    pub(super) backend: Backend,
    pub(super) heads: Heads,
    pub(super) publisher: Option<Publisher>,
}

impl Acknowledger {
    fn acknowledge(&self, batch: Committed) {
        self.publish(&batch);
        Self::answer(batch);
    }

    /// Lets readers up to the batch and wakes them.
    fn publish(&self, batch: &Committed) {
        if let Some(last) = batch.rows.last() {
            crate::metrics::batch_acknowledged(batch.rows.len());
            self.backend.committed(last.id);
            self.heads.advance(&batch.rows);
            if let Some(p) = &self.publisher {
                p.publish(&batch.rows);
            }
        }
    }

    /// Answers each request with its own rows.
    fn answer(batch: Committed) {
        let mut rows = batch.rows.into_iter();
        for (req, range) in batch.pending {
            let own: Vec<StoredEvent> = rows.by_ref().take(range.len()).collect();
            let _ = req.reply.send(Ok(own));
        }
    }
}

/// Where committed batches go.
pub(super) enum Acks {
    /// Commits are durable when they return: acknowledged at once, on the writer.
    Now(Acknowledger),
    /// Synced before they are acknowledged: by the syncer thread (see the module docs; it stops
    /// once `tx` is dropped), or by the writer itself when nothing else waits ([`Acks::dispatch`]).
    Synced {
        tx: Option<std::sync::mpsc::Sender<Committed>>,
        thread: Option<JoinHandle<()>>,
        /// Batches handed to the syncer, and (from it) batches whose sync is done.
        sent: u64,
        synced: watch::Receiver<u64>,
        /// Batches the syncer has acknowledged (or refused): the writer acknowledges one itself
        /// only once this reaches `sent`, so acknowledgements stay in commit order.
        acked: Arc<AtomicU64>,
        /// Committed batches not yet handed on: [`Acks::dispatch`] decides where they go.
        held: Vec<Committed>,
        /// The writer's own way to sync and acknowledge.
        log: SqliteLog,
        ack: Arc<Acknowledger>,
        /// A sync on the writer failed: nothing more is acknowledged (as on the syncer).
        failed: Option<StoreError>,
    },
}

/// The most rows the writer syncs and acknowledges itself ([`Acks::dispatch`]): a batch this
/// small with nothing queued behind it is a quiet moment (at model speed batches hold ~10
/// events). Larger ones go to the syncer even so: under load the appenders just answered are
/// about to append again, and syncing on the writer kept it from committing their batch during
/// the sync (durable ingest lost 30 %: 324,000 → 228,000 events/s, `threadstream-bench
/// ingest-sqlite`).
const INLINE_MAX_ROWS: usize = 64;

/// Committed batches that may wait for their sync while the writer begins another. One: the
/// next batch is decided and committed during the previous one's sync, and the requests that
/// arrive meanwhile make the batch after it, rather than a stream of small batches each paying
/// a commit of its own.
const UNSYNCED_BATCHES: u64 = 1;

impl Acks {
    pub(super) fn start(ack: Acknowledger) -> Result<Self, StoreError> {
        let Some(log) = ack.backend.to_sync() else {
            return Ok(Acks::Now(ack));
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let (synced_tx, synced) = watch::channel(0);
        let ack = Arc::new(ack);
        let acked = Arc::new(AtomicU64::new(0));
        let syncer = Syncer {
            log: log.clone(),
            ack: ack.clone(),
            acked: acked.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("log-syncer".into())
            .spawn(move || syncer.run(&rx, &synced_tx))
            .map_err(|e| StoreError::unavailable("cannot start the syncer", e))?;
        Ok(Acks::Synced {
            tx: Some(tx),
            thread: Some(thread),
            sent: 0,
            synced,
            acked,
            held: Vec::new(),
            log,
            ack,
            failed: None,
        })
    }

    /// Waits until no more than [`UNSYNCED_BATCHES`] committed batches wait for their sync.
    pub(super) async fn ready(&mut self) {
        if let Acks::Synced { sent, synced, .. } = self {
            let sent = *sent;
            // An error means the syncer is gone: `send` refuses what comes next.
            let _ = synced
                .wait_for(|done| sent - *done <= UNSYNCED_BATCHES)
                .await;
        }
    }

    /// A committed batch: acknowledged now where commits are durable, else held until
    /// [`Acks::dispatch`].
    pub(super) fn send(&mut self, batch: Committed) {
        if batch.rows.is_empty() && batch.pending.is_empty() {
            return; // a batch of reads only: nothing to make durable or answer
        }
        match self {
            Acks::Now(ack) => ack.acknowledge(batch),
            Acks::Synced { held, .. } => held.push(batch),
        }
    }

    /// Hands the held batches on. With no request waiting (`queue_empty`), at most
    /// [`INLINE_MAX_ROWS`] rows held, and the syncer done with every batch it was given, the
    /// writer syncs and acknowledges them itself: at model
    /// speed a batch of a few events otherwise paid two thread hand-offs (writer → syncer →
    /// writer) and their context switches, more than its `fdatasync` (docs/performance.md,
    /// "Cost per token at model speed"). Otherwise the syncer does, and the writer goes on with
    /// the requests waiting meanwhile.
    /// Returns how many batches the writer synced and acknowledged itself.
    pub(super) fn dispatch(&mut self, queue_empty: bool) -> usize {
        let Acks::Synced {
            tx,
            sent,
            acked,
            held,
            log,
            ack,
            failed,
            ..
        } = self
        else {
            return 0;
        };
        if held.is_empty() {
            return 0;
        }
        let rows: usize = held.iter().map(|b| b.rows.len()).sum();
        if queue_empty && rows <= INLINE_MAX_ROWS && acked.load(Ordering::Acquire) == *sent {
            if failed.is_none() {
                if let Err(e) = log.sync_wal() {
                    tracing::error!(
                        error = &e as &dyn std::error::Error,
                        "the log's WAL could not be synced; appends refused"
                    );
                    *failed = Some(e);
                }
            }
            let inline = held.len();
            for batch in held.drain(..) {
                match failed {
                    None => ack.acknowledge(batch),
                    Some(e) => batch.refuse(e),
                }
            }
            return inline;
        }
        for batch in held.drain(..) {
            let handed = match (&failed, &tx) {
                (Some(e), _) => Err((batch, e.clone())),
                (None, Some(tx)) => tx.send(batch).map_err(|e| (e.0, StoreError::Closed)),
                (None, None) => Err((batch, StoreError::Closed)),
            };
            match handed {
                Ok(()) => *sent += 1,
                Err((batch, e)) => batch.refuse(&e),
            }
        }
        0
    }

    /// Waits until every batch handed over is acknowledged (or refused).
    pub(super) fn finish(&mut self) {
        self.dispatch(false);
        if let Acks::Synced { tx, thread, .. } = self {
            tx.take();
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// The syncer thread's share of [`Acks::Synced`].
struct Syncer {
    log: SqliteLog,
    ack: Arc<Acknowledger>,
    acked: Arc<AtomicU64>,
}

impl Syncer {
    /// For every group of batches waiting, one sync of the WAL, then each batch acknowledged in
    /// commit order. After a failed sync nothing more is acknowledged (the log refuses new
    /// batches too, see [`SqliteLog::sync_wal`]).
    fn run(&self, rx: &std::sync::mpsc::Receiver<Committed>, synced: &watch::Sender<u64>) {
        let mut failed: Option<StoreError> = None;
        while let Ok(first) = rx.recv() {
            let mut group = vec![first];
            group.extend(rx.try_iter());
            let n = group.len() as u64;
            if failed.is_none() {
                if let Err(e) = self.log.sync_wal() {
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
                // Counted before it is answered: an appender answered may append again at
                // once, and the writer syncs that itself only once this batch is counted.
                match &failed {
                    None => {
                        self.ack.publish(&batch);
                        self.acked.fetch_add(1, Ordering::Release);
                        Acknowledger::answer(batch);
                    }
                    Some(e) => {
                        self.acked.fetch_add(1, Ordering::Release);
                        batch.refuse(e);
                    }
                }
            }
        }
    }
}
