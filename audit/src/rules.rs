//! Checking a stored event against its stream's aggregate: each event is turned back into the
//! command that produces it, the aggregate decides that command, and the event must be what it
//! decided ([`threadstream_domain::aggregate::admit`]). So import and verify enforce exactly the
//! rules of the one append path, and follow them when the domain changes.

use hashlink::LruCache;
use threadstream_domain::registry::for_stream;
use threadstream_domain::{LogAggregate, StoredEvent, StreamAggregate};
use threadstream_store::Import;

use crate::AuditError;

/// Where a walk of events in log order reads what it has not seen itself.
pub enum Walk<'a> {
    /// `threadstream verify`: the whole log from its start, in the store behind this log.
    Log(&'a threadstream_store::EventLog),
    /// An import: its transaction (the target's events and those the import inserted).
    Tx(&'a mut Import),
}

impl Walk<'_> {
    /// The same walk, for one call.
    fn reborrow(&mut self) -> Walk<'_> {
        match self {
            Walk::Log(log) => Walk::Log(log),
            Walk::Tx(tx) => Walk::Tx(tx),
        }
    }
}

/// Folds `thread_id`'s events with id at most `through` (a fork read through its source) into
/// `thread`, reading from `walk`'s store; returns the last id and seq folded (0: none).
async fn fold_into(
    thread: &mut Box<dyn LogAggregate>,
    walk: &mut Walk<'_>,
    thread_id: &str,
    through: i64,
) -> Result<(i64, i64), AuditError> {
    let mut after = 0;
    let mut seq = 0;
    loop {
        let page = match walk {
            Walk::Tx(tx) => tx.read_thread(thread_id, after, crate::PAGE).await?,
            Walk::Log(log) => log.read_thread(thread_id, after, crate::PAGE).await?,
        };
        let Some(last) = page.last() else { break };
        let last_id = last.id;
        for e in page.iter().filter(|e| e.id <= through) {
            for delta in e.expanded() {
                thread.apply_at(
                    delta.id,
                    &delta
                        .decode()
                        .map_err(threadstream_store::StoreError::from)?,
                );
            }
            after = e.id;
            seq = e.seq;
        }
        if last_id > through {
            break;
        }
    }
    Ok((after, seq))
}

/// Stream aggregates (each of its stream's kind) folded while walking events in log order, each
/// with its last seq. Unbounded by default (a walk of the whole log needs every stream at its
/// end); an import keeps the most recently used ones and folds an evicted stream again from its
/// transaction.
pub struct Aggregates {
    /// Each with its last seq (an event that could not be decoded takes a seq but is not
    /// folded).
    threads: LruCache<String, (Box<dyn LogAggregate>, i64)>,
}

impl Default for Aggregates {
    fn default() -> Self {
        Aggregates {
            threads: LruCache::new_unbounded(),
        }
    }
}

impl Aggregates {
    /// At most `capacity` threads in memory.
    pub fn bounded(capacity: usize) -> Self {
        Aggregates {
            threads: LruCache::new(capacity.max(1)),
        }
    }

    /// Whether `thread_id`'s state is in memory (a check of its next event needs no read).
    pub fn is_loaded(&self, thread_id: &str) -> bool {
        self.threads.contains_key(thread_id)
    }

    /// Checks `row` (seq and rules) against its thread and folds it in. A thread not in memory
    /// is folded from the import's transaction ([`Walk::Tx`]: the target's events and those the
    /// import already inserted), else starts empty (a walk from the start of the log). A fork's
    /// first event is checked on its source folded through the fork point, read from the walk's
    /// store (a fork's events are numbered on after that prefix). The event is folded even when
    /// refused, so one broken event is reported once, not again for everything after it.
    ///
    /// A compacted row is checked as the deltas it replaced, each at its own id and seq
    /// ([`threadstream_domain::compaction`]).
    pub async fn check_and_apply(
        &mut self,
        mut walk: Walk<'_>,
        row: &StoredEvent,
    ) -> Result<Result<(), String>, AuditError> {
        let mut verdict = Ok(());
        for delta in row.expanded() {
            let v = self.check_and_apply_one(walk.reborrow(), &delta).await?;
            if verdict.is_ok() {
                verdict = v;
            }
        }
        Ok(verdict)
    }

    async fn check_and_apply_one(
        &mut self,
        mut walk: Walk<'_>,
        row: &StoredEvent,
    ) -> Result<Result<(), String>, AuditError> {
        if !self.threads.contains_key(&row.thread_id) {
            let mut thread = for_stream(&row.thread_id);
            let mut last_seq = 0;
            if let Walk::Tx(_) = walk {
                last_seq = fold_into(&mut thread, &mut walk, &row.thread_id, i64::MAX)
                    .await?
                    .1;
            }
            self.threads
                .insert(row.thread_id.clone(), (thread, last_seq));
        }
        let mut fork_point_missing = None;
        if let Some(fork_of) = threadstream_store::fork::fork_of(row) {
            if self
                .threads
                .peek(&row.thread_id)
                .is_some_and(|(_, last_seq)| *last_seq == 0)
            {
                let mut prefix = for_stream(&fork_of.thread_id);
                let (last, last_seq) = fold_into(
                    &mut prefix,
                    &mut walk,
                    &fork_of.thread_id,
                    fork_of.through_event_id,
                )
                .await?;
                if last != fork_of.through_event_id {
                    fork_point_missing = Some(format!(
                        "fork point {} is not an event of thread '{}'",
                        fork_of.through_event_id, fork_of.thread_id
                    ));
                }
                self.threads
                    .insert(row.thread_id.clone(), (prefix, last_seq));
            }
        }
        let (thread, last_seq) = self.threads.get_mut(&row.thread_id).expect("just loaded");
        let expected_seq = *last_seq + 1;
        *last_seq = expected_seq;
        let event = match row.decode() {
            Ok(e) => e,
            Err(err) => {
                return Ok(Err(format!("undecodable event: {err}")));
            }
        };
        let verdict = if let Some(m) = fork_point_missing {
            Err(m)
        } else if row.seq != expected_seq {
            Err(format!(
                "thread '{}' seq {} where {} was next",
                row.thread_id, row.seq, expected_seq
            ))
        } else {
            thread.admit(&event)
        };
        thread.apply_at(row.id, &event);
        Ok(verdict)
    }

    /// The streams walked so far, of every kind.
    pub fn streams(&self) -> impl Iterator<Item = (&String, &dyn LogAggregate)> {
        self.threads.iter().map(|(id, (a, _))| (id, a.as_ref()))
    }

    /// The streams of `A`'s kind walked so far.
    pub fn of_kind<A: StreamAggregate>(&self) -> impl Iterator<Item = (&String, &A)> {
        self.streams()
            .filter_map(|(id, a)| a.as_any().downcast_ref::<A>().map(|a| (id, a)))
    }
}
