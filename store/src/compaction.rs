//! [`EventLog`]'s compaction of finished runs: a run's consecutive text (or reasoning) deltas of
//! one agent become one stored event holding the text and where each delta ended
//! ([`threadstream_domain::compaction`]; docs/architecture.md, "Compaction").
//!
//! It runs in the writer, alone between batches and under the write order (as an erasure does),
//! in one transaction: the range's last row is rewritten and the others deleted, so a reader
//! sees the run either as it was or compacted, never half. No id, seq or read-model document
//! changes: the rewritten row keeps its id and seq, and every fold of it gives what the deltas
//! gave.

use super::*;

use threadstream_domain::compaction::Merge;

/// What one compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Ranges merged, each into one row.
    pub ranges: u64,
    /// Rows those ranges were made of (so `replaced - ranges` rows were deleted).
    pub replaced: u64,
}

/// A run to compact: the writer reads its own stream's rows with `from <= id <= through`.
pub(crate) struct CompactRequest {
    pub thread_id: String,
    pub run_id: String,
    pub from: i64,
    pub through: i64,
    pub reply: oneshot::Sender<Result<Compacted, StoreError>>,
}

impl EventLog {
    /// Compacts run `run_id` of `thread_id`, whose events lie within `from..=through` (its
    /// `run-start` and `run-finish`): its consecutive deltas of one kind and agent become one
    /// row each. Compacting again changes nothing. Only a finished run should be compacted: a
    /// live run's next delta would start a range of its own.
    pub async fn compact_run(
        &self,
        thread_id: &str,
        run_id: &str,
        from: i64,
        through: i64,
    ) -> Result<Compacted, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.inner
            .tx
            .send(writer::WriterMsg::Compact(Box::new(CompactRequest {
                thread_id: thread_id.to_string(),
                run_id: run_id.to_string(),
                from,
                through,
                reply,
            })))
            .await
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

/// The checkpoint of [`EventLog::compact_finished`], kept beside the read models' (a name no
/// read model has): every run that started at or below it and finished before the cutoff of
/// the sweep that saved it is compacted.
pub const CHECKPOINT: &str = "compaction";

/// What one sweep of [`EventLog::compact_finished`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Finished runs looked at (each compacted, or found with nothing to compact).
    pub runs: u64,
    pub compacted: Compacted,
}

/// How long before the cutoff a live run's start still holds the sweep's checkpoint back.
const LIVE_HOLD_MS: i64 = 3_600_000;

/// Events of the log looked at per page by a sweep (only run starts and finishes are read whole).
const SWEEP_PAGE: i64 = 5_000;

impl EventLog {
    /// Compacts every run that finished at or before `cutoff_ms` (epoch ms) and was not yet
    /// compacted: the log is read from the sweep's checkpoint ([`CHECKPOINT`]) for `run-start`
    /// and `run-finish` events, each finished run is compacted ([`EventLog::compact_run`]), and
    /// the checkpoint moves up to the start of the oldest run still live, or of the first run
    /// that finished after the cutoff. One instance of a fleet sweeps at a time
    /// ([`crate::Job::Compaction`]): while another one does, this sweep does nothing. (Two
    /// sweeps at once would do no harm, a run compacted twice changing nothing the second time
    /// and the checkpoint moving only forward, but each would do all the work.)
    pub async fn compact_finished(&self, cutoff_ms: i64) -> Result<Sweep, StoreError> {
        let Some(_lock) = self.try_job_lock(crate::Job::Compaction).await? else {
            return Ok(Sweep::default());
        };
        let backend = &self.inner.backend;
        let checkpoint = backend.checkpoint(CHECKPOINT).await?;
        let picked = |stream: &str, event_type: &str| -> bool {
            StreamKind::of(stream) == StreamKind::Thread
                && matches!(event_type, "run-start" | "run-finish")
        };
        // Live runs seen so far: (thread, run) → the id and time of their `run-start`.
        let mut live: std::collections::HashMap<(String, String), (i64, i64)> = Default::default();
        let mut sweep = Sweep::default();
        let mut after = checkpoint;
        let mut young = None;
        'pages: loop {
            let (last, rows) = backend.read_all_picked(after, SWEEP_PAGE, &picked).await?;
            let Some(last) = last else { break };
            for e in rows {
                let key = (e.thread_id.clone(), e.run_id.clone());
                if e.event_type == "run-start" {
                    live.insert(key, (e.id, e.ts));
                    continue;
                }
                if e.ts > cutoff_ms {
                    young = Some(live.get(&key).map_or(e.id, |s| s.0));
                    break 'pages;
                }
                // A run that started below the checkpoint (live for longer than
                // `LIVE_HOLD_MS` at a sweep, or an imported log): its thread is looked at from
                // the start up to its finish.
                let from = live.remove(&key).map_or(0, |s| s.0);
                let done = self
                    .compact_run(&e.thread_id, &e.run_id, from, e.id)
                    .await?;
                sweep.runs += 1;
                sweep.compacted.ranges += done.ranges;
                sweep.compacted.replaced += done.replaced;
            }
            after = last;
        }
        // Every run starting below the next checkpoint is compacted: it stops short of the
        // oldest live run's start, and of the young run's (`after` is behind it, a page early).
        // A run live for long does not hold the checkpoint back for ever: every sweep would
        // read the log from its start again.
        let held = live
            .values()
            .filter(|(_, ts)| *ts >= cutoff_ms.saturating_sub(LIVE_HOLD_MS))
            .map(|(id, _)| *id);
        let oldest = held.chain(young).min();
        let next = match (young, oldest) {
            (Some(_), Some(start)) => start - 1,
            (_, oldest) => oldest.map_or(after, |start| (start - 1).min(after)),
        };
        if next > checkpoint {
            backend.save_docs(CHECKPOINT, &[], checkpoint, next).await?;
        }
        Ok(sweep)
    }
}

impl crate::backend::BatchTx {
    /// Writes `merges`: each range's last row rewritten, the others deleted.
    pub(crate) async fn compact(&mut self, merges: &[Merge]) -> Result<(), StoreError> {
        match self {
            crate::backend::BatchTx::Sqlite { tx, .. } => tx.compact(merges),
            crate::backend::BatchTx::Postgres(tx) => PgLog::compact(tx, merges).await,
        }
    }
}
