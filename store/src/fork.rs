//! Forks read through their source.
//!
//! A fork's own log stream holds only what happened in the fork, starting with its
//! `thread-created {forkOf: {threadId, throughEventId}}`. Every read of a thread goes through
//! [`read_composed`]: the source's events with id ≤ the fork point (the source itself read the
//! same way, so a fork of a fork works), then the fork's own. Events read through keep their
//! global id and their seq (their place in the source, which is their place in the fork: a fork's
//! own events are numbered on after its prefix), and carry the fork's thread id, so every
//! reader — feeds, renderers, projections, the writer's aggregate — sees one thread.
//!
//! The reads here go through [`RawReads`], whatever reads a single log stream; the database's
//! readers implement it next to the database (`crate::backend`: `Visible`, `Committed`, a
//! batch's transaction), so this module does not know the backends.

use threadstream_domain::{ForkOf, StoredEvent};

use crate::error::StoreError;

/// Raw reads of one log stream: what a composed read is made of.
pub(crate) trait RawReads {
    async fn read(
        &mut self,
        stream: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError>;
}

/// What `first`, a log stream's first event, says the stream reads through
/// ([`StoredEvent::fork_of`]).
pub fn fork_of(first: &StoredEvent) -> Option<ForkOf> {
    first.fork_of()
}

/// The log streams a thread is read from, deepest source first, each with the highest id read
/// from it (`i64::MAX`: the thread's own stream). `known(stream)` answers from a cache when it
/// can (`Some(answer)`); `learn` is told what a stream's first event said.
pub(crate) async fn segments(
    reads: &mut impl RawReads,
    thread_id: &str,
    known: &(dyn Fn(&str) -> Option<Option<ForkOf>> + Sync),
    learn: &(dyn Fn(&str, Option<ForkOf>) + Sync),
) -> Result<Vec<(String, i64)>, StoreError> {
    let mut chain = vec![(thread_id.to_string(), i64::MAX)];
    loop {
        let (stream, bound) = chain.last().expect("never empty").clone();
        let source = match known(&stream) {
            Some(answer) => answer,
            None => {
                let first = reads.read(&stream, 0, 1).await?;
                let Some(first) = first.first() else { break };
                let answer = fork_of(first);
                learn(&stream, answer.clone());
                answer
            }
        };
        let Some(source) = source else { break };
        chain.push((source.thread_id, bound.min(source.through_event_id)));
    }
    chain.reverse();
    Ok(chain)
}

/// Events of `thread_id` (made of `segments`) with `id > after`, at most `limit`, in order,
/// each labelled as the thread's.
pub(crate) async fn read_segments(
    reads: &mut impl RawReads,
    segments: &[(String, i64)],
    thread_id: &str,
    after: i64,
    limit: i64,
) -> Result<Vec<StoredEvent>, StoreError> {
    if let [(only, i64::MAX)] = segments {
        return reads.read(only, after, limit).await;
    }
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    for (stream, bound) in segments {
        let mut cursor = after;
        while cursor < *bound && out.len() < limit {
            let want = limit - out.len();
            let page = reads
                .read(stream, cursor, i64::try_from(want).unwrap_or(i64::MAX))
                .await?;
            let full = page.len() == want;
            for mut e in page {
                if e.id > *bound {
                    cursor = *bound;
                    break;
                }
                cursor = e.id;
                if stream != thread_id {
                    e.thread_id = thread_id.to_string();
                }
                out.push(e);
            }
            if !full {
                break;
            }
        }
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}

/// [`read_segments`] after finding the segments, with no cache.
pub(crate) async fn read_composed(
    reads: &mut impl RawReads,
    thread_id: &str,
    after: i64,
    limit: i64,
) -> Result<Vec<StoredEvent>, StoreError> {
    let segments = segments(reads, thread_id, &|_| None, &|_, _| {}).await?;
    read_segments(reads, &segments, thread_id, after, limit).await
}

/// Segments with every bound at most `through`: the thread read up to a fork point.
pub(crate) fn through(segments: Vec<(String, i64)>, through: i64) -> Vec<(String, i64)> {
    segments
        .into_iter()
        .map(|(s, b)| (s, b.min(through)))
        .collect()
}
