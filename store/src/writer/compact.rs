//! Compactions in the writer: each runs alone, between batches, in a transaction of its own
//! that holds the write order ([`crate::compaction`]).

use threadstream_domain::compaction;

use super::Writer;
use crate::compaction::{CompactRequest, Compacted};
use crate::error::StoreError;

/// Rows of one run read at a time by the compaction's transaction.
const PAGE: i64 = 5_000;

impl Writer {
    /// Runs a compaction in a transaction of its own that holds the write order, and answers it.
    pub(super) async fn compact(&mut self, req: CompactRequest) {
        let result = self.compact_committed(&req).await;
        let _ = req.reply.send(result);
    }

    async fn compact_committed(&mut self, req: &CompactRequest) -> Result<Compacted, StoreError> {
        let (mut tx, _head) = self.backend.begin_batch().await?;
        let mut rows = Vec::new();
        let mut after = req.from - 1;
        loop {
            // What is committed: under the write order nothing else commits meanwhile, and this
            // transaction has written nothing yet.
            let page = self
                .backend
                .read_thread_committed(&req.thread_id, after, PAGE)
                .await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            let done = (page.len() as i64) < PAGE || after >= req.through;
            rows.extend(page.into_iter().filter(|e| e.id <= req.through));
            if done {
                break;
            }
        }
        let merges = compaction::plan(&rows, &req.run_id);
        if merges.is_empty() {
            return Ok(Compacted::default()); // the transaction rolls back, having written nothing
        }
        tx.compact(&merges).await?;
        // No new id: the head does not move, and there is nothing to announce.
        tx.commit(None).await?;
        let replaced = merges.iter().map(|m| m.replaced.len() as u64).sum();
        Ok(Compacted {
            ranges: merges.len() as u64,
            replaced,
        })
    }
}
