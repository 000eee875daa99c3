//! Acknowledging committed batches: at once where a commit is durable when it returns, or
//! through the syncer thread where the WAL must be synced first (SQLite, durable).

use std::ops::Range;
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
pub(super) enum Acks {
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
    pub(super) fn start(ack: Acknowledger) -> Result<Self, StoreError> {
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
    pub(super) async fn ready(&mut self) {
        if let Acks::Synced { sent, synced, .. } = self {
            let sent = *sent;
            // An error means the syncer is gone: `send` refuses what comes next.
            let _ = synced
                .wait_for(|done| sent - *done <= UNSYNCED_BATCHES)
                .await;
        }
    }

    pub(super) fn send(&mut self, batch: Committed) {
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
    pub(super) fn finish(&mut self) {
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
