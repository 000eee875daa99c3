//! `threadstream import`: NDJSON ([`crate::line`]) into a store, keeping every id and seq.
//!
//! Every event is checked before it is written: ids strictly increasing and above everything the
//! target holds, seqs contiguous per thread (continuing what the target holds), and the
//! `Thread` aggregate's rules ([`crate::rules`]). The whole import is one transaction of the
//! store's batch path (which holds the log's write order), so it is all or nothing: one refused
//! line and the target is unchanged. Live writers of the target wait for the import's commit.

use threadstream_domain::StoredEvent;
use threadstream_store::EventLog;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use crate::line::parse_line;
use crate::rules::{Aggregates, Walk};
use crate::AuditError;

/// Rows inserted per statement.
const CHUNK: usize = 500;

/// Thread aggregates an import keeps in memory (least recently used evicted, and folded again
/// from the import's transaction when the thread comes back), so memory does not grow with the
/// number of threads imported.
pub const CACHED_THREADS: usize = 10_000;

/// What an import stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    pub events: u64,
    /// Threads the import created (its `thread-created` events).
    pub threads: u64,
    pub last_id: i64,
}

/// Reads NDJSON lines from `input` and stores them in `log`; nothing is stored on any error.
pub async fn import(
    log: &EventLog,
    input: impl AsyncBufRead + Unpin,
    progress: impl FnMut(u64),
) -> Result<Imported, AuditError> {
    import_with_cache(log, input, progress, CACHED_THREADS).await
}

/// [`import`] keeping at most `cached_threads` thread aggregates in memory.
pub async fn import_with_cache(
    log: &EventLog,
    input: impl AsyncBufRead + Unpin,
    mut progress: impl FnMut(u64),
    cached_threads: usize,
) -> Result<Imported, AuditError> {
    let mut tx = log.begin_import().await?;
    let head = tx.head();
    let mut aggregates = Aggregates::bounded(cached_threads);
    let mut threads = 0u64;
    let mut pending: Vec<StoredEvent> = Vec::with_capacity(CHUNK);
    let mut last_id = head;
    let mut events = 0u64;
    let mut lines = input.lines();
    let mut n = 0u64;
    while let Some(text) = lines.next_line().await? {
        n += 1;
        if text.trim().is_empty() {
            continue;
        }
        let fail = |message: String| AuditError::Line { line: n, message };
        let row = parse_line(&text).map_err(fail)?;
        if row.id <= last_id {
            return Err(fail(format!(
                "id {} is not above {last_id} (ids must increase, and the target already holds ids up to {head})",
                row.id
            )));
        }
        if !aggregates.is_loaded(&row.thread_id) && !pending.is_empty() {
            // The thread is folded from the transaction: it must hold every row before this.
            tx.insert(&pending).await?;
            pending.clear();
        }
        aggregates
            .check_and_apply(Walk::Tx(&mut tx), &row)
            .await?
            .map_err(|m| fail(format!("event {} refused: {m}", row.id)))?;
        last_id = row.id;
        events += 1;
        threads += u64::from(row.event_type == "thread-created");
        if let Ok(threadstream_domain::EventBody::Erased(erased)) = row.decode().map(|e| e.body) {
            // A tombstone keeps answering for its streams in the new store (404, readers'
            // signal), as it did in the old one.
            tx.record_erased(&erased.streams, row.id).await?;
        }
        pending.push(row);
        if pending.len() == CHUNK {
            tx.insert(&pending).await?;
            pending.clear();
            progress(events);
        }
    }
    if !pending.is_empty() {
        tx.insert(&pending).await?;
    }
    tx.commit(last_id).await?;
    progress(events);
    Ok(Imported {
        events,
        threads,
        last_id,
    })
}
