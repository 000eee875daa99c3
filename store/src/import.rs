//! Restoring an export into a log: rows that keep their ids, each checked by the caller (the
//! audit crate folds them through the aggregates), stored in one transaction that holds the
//! log's write order from [`EventLog::begin_import`] until [`Import::commit`]. The import is
//! all or nothing: dropped without `commit`, nothing of it is stored.

use crate::erasure::ErasedStream;
use threadstream_domain::StoredEvent;

use crate::backend::BatchTx;
use crate::{EventLog, StoreError};

/// An import in progress (see the module docs).
pub struct Import {
    tx: BatchTx,
    head: i64,
    log: EventLog,
}

impl EventLog {
    /// Begins an import: appends wait until it commits or is dropped.
    pub async fn begin_import(&self) -> Result<Import, StoreError> {
        let (tx, head) = self.backend().begin_batch().await?;
        Ok(Import {
            tx,
            head,
            log: self.clone(),
        })
    }
}

impl Import {
    /// The last id the log held when the import began: imported ids must be above it.
    pub fn head(&self) -> i64 {
        self.head
    }

    /// Stores `rows` with their own ids.
    pub async fn insert(&mut self, rows: &[StoredEvent]) -> Result<(), StoreError> {
        self.tx.insert(rows).await
    }

    /// Records that tombstone `tombstone_id` erased `streams`, so they keep answering as erased.
    pub async fn record_erased(
        &mut self,
        streams: &[ErasedStream],
        tombstone_id: i64,
    ) -> Result<(), StoreError> {
        self.tx.record_erased(streams, tombstone_id).await
    }

    /// A page of `thread_id`'s events after `after`, as this import sees them (the log's and
    /// those inserted so far).
    pub async fn read_thread(
        &mut self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.tx.read_thread(thread_id, after, limit).await
    }

    /// Commits the import, whose last id is `last_id`, and makes it durable: nobody else (the
    /// writer is not involved) syncs and acknowledges it.
    pub async fn commit(self, last_id: i64) -> Result<(), StoreError> {
        // No head notification: a server running on the store finds the rows when its
        // readers re-read on their timers.
        self.tx.commit(None).await?;
        self.log.backend().acknowledge_committed(last_id).await
    }
}
