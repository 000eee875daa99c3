//! The writer's cache of aggregates: loaded by folding a stream's committed events (a fork's
//! through its source) into an aggregate of the stream's kind, and caught up with what other
//! processes committed.

use threadstream_domain::registry::for_stream;
use threadstream_domain::{
    EventBody, ForkOf, LogAggregate, StoredEvent, StreamAggregate, ThreadError,
};

use super::{Writer, MAX_CATCH_UP};
use crate::backend;
use crate::erasure;
use crate::error::StoreError;
use crate::fork;

impl Writer {
    /// The stream's aggregate, loaded from the log when it is not cached; marks it used.
    pub(super) async fn aggregate(
        &mut self,
        stream: &str,
    ) -> Result<&mut Box<dyn LogAggregate>, StoreError> {
        // `get_mut` moves a cached entry to the most recently used end.
        if self.aggregates.get_mut(stream).is_none() {
            #[cfg(test)]
            {
                self.counts.loads += 1;
            }
            let (aggregate, after) = self.fold(stream, i64::MAX).await?;
            self.aggregates
                .insert(stream.to_string(), (aggregate, after));
        }
        Ok(&mut self.aggregates.get_mut(stream).expect("just inserted").0)
    }

    /// [`Writer::aggregate`] as its own type, for the writer's own commands on a stream of a
    /// known kind.
    pub(super) async fn aggregate_of<A: StreamAggregate>(
        &mut self,
        stream: &str,
    ) -> Result<&mut A, StoreError> {
        let aggregate = self.aggregate(stream).await?;
        let kind = aggregate.kind();
        aggregate
            .as_any_mut()
            .downcast_mut::<A>()
            .ok_or_else(|| StoreError::wrong_kind(stream, kind, A::KIND))
    }

    /// Folds the stream's committed events with id at most `through` (a fork read through its
    /// source) into a fresh aggregate of its kind; returns it with the last id folded (0: none).
    async fn fold(
        &self,
        thread_id: &str,
        through: i64,
    ) -> Result<(Box<dyn LogAggregate>, i64), StoreError> {
        let mut thread = for_stream(thread_id);
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
                    apply_row(&mut thread, row)?;
                }
                page = self
                    .backend
                    .read_thread_committed(thread_id, after, 10_000)
                    .await?;
            }
            return Ok((thread, after));
        }
        let mut reads = backend::Committed(&self.backend);
        let known = |stream: &str| (stream == thread_id).then(|| source.clone());
        let segments = fork::segments(&mut reads, thread_id, &known, &|_, _| {}).await?;
        let segments = fork::through(segments, through);
        loop {
            let page = fork::read_segments(&mut reads, &segments, thread_id, after, 10_000).await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for row in &page {
                apply_row(&mut thread, row)?;
            }
        }
        Ok((thread, after))
    }

    /// The aggregate a fork of `fork_of` starts from: its source folded through the fork point,
    /// which must be one of the source's events.
    pub(super) async fn fork_prefix(
        &self,
        fork_of: &ForkOf,
    ) -> Result<Box<dyn LogAggregate>, StoreError> {
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
    pub(super) async fn catch_up(&mut self, head: i64) -> Result<(), StoreError> {
        if head <= self.watermark {
            return Ok(());
        }
        if head - self.watermark > MAX_CATCH_UP {
            self.aggregates.clear();
            self.watermark = head;
            return Ok(());
        }
        let mut after = self.watermark;
        while after < head {
            // Only the rows this does something with: an erasure, a thread created (a fork's
            // first event), an event of a cached aggregate. The rest are read as ids only.
            let aggregates = &self.aggregates;
            let picked = |stream: &str, event_type: &str| {
                stream == erasure::STREAM
                    || event_type == "thread-created"
                    || aggregates.contains_key(stream)
            };
            let (last, page) = self.backend.read_all_picked(after, 1_000, &picked).await?;
            let Some(last) = last else { break };
            after = last;
            #[cfg(test)]
            {
                self.counts.caught_up_rows += page.len() as u64;
            }
            for row in page.iter().filter(|r| r.id <= head) {
                if row.thread_id == erasure::STREAM {
                    // Another process erased streams: their aggregates are gone with them.
                    if let Ok(EventBody::Erased(e)) = row.decode().map(|e| e.body) {
                        for s in &e.streams {
                            self.aggregates.remove(&s.stream);
                        }
                    }
                }
                if fork::fork_of(row).is_some() {
                    // A fork's aggregate starts from its source's: folded afresh when next used.
                    self.aggregates.remove(&row.thread_id);
                    continue;
                }
                // `peek_mut`: another process's append is not a use of ours.
                if let Some((thread, last_id)) = self.aggregates.peek_mut(&row.thread_id) {
                    if row.id > *last_id {
                        apply_row(thread, row)?;
                        *last_id = row.id;
                    }
                }
            }
        }
        self.watermark = head;
        Ok(())
    }
}

/// Folds a stored row: a compacted one as the deltas it replaced, so the aggregate's version
/// (and the next seq) counts each ([`threadstream_domain::compaction`]).
fn apply_row(thread: &mut Box<dyn LogAggregate>, row: &StoredEvent) -> Result<(), StoreError> {
    for delta in row.expanded() {
        thread.apply_at(delta.id, &delta.decode()?);
    }
    Ok(())
}
