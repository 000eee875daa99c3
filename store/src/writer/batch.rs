//! What the writer is asked ([`WriterMsg`], [`AppendRequest`]) and a batch decided of those
//! requests ([`Decided`]): the types the writer's files share. They are here, in a file that
//! imports none of the writer's, so the files that extend `Writer` (`decide.rs`, `acks.rs`, …)
//! and `mod.rs` all import them from one place.

use std::collections::HashMap;
use std::ops::Range;

use threadstream_domain::clock::now_ms;
use threadstream_domain::{LogAggregate, StoredEvent};
use tokio::sync::oneshot;

use crate::backend::BatchTx;
use crate::compaction::CompactRequest;
use crate::erasure::postgres::ErasedAhead;
use crate::erasure::{ErasurePlan, NotErased};
use crate::error::StoreError;
use crate::idempotency::{AnsweredKey, KeyedAppend};
use crate::part::Part;

/// One append: commands for one or more log streams (each with its own), decided and stored
/// together or not at all. Several streams: a Durable Stream fork's create and its source's
/// `stream-fork-added` are one decision.
pub(crate) struct AppendRequest {
    pub parts: Vec<Part>,
    /// Stored only if this idempotency key has no answer yet, and then with its answer.
    pub key: Option<KeyedAppend>,
    pub reply: oneshot::Sender<Result<Vec<StoredEvent>, StoreError>>,
}

impl AppendRequest {
    /// Whether the append may wait out the commit linger: it holds fragments only.
    pub(crate) fn lingers(&self) -> bool {
        self.parts.iter().all(|p| p.commands.fragments())
    }

    /// How many commands it holds (about the events it stores).
    pub(crate) fn commands(&self) -> usize {
        self.parts.iter().map(|p| p.commands.count()).sum()
    }
}

/// The commands of the appends in `batch` (how full it is, for the commit linger).
pub(super) fn commands_in(batch: &[WriterMsg]) -> usize {
    batch
        .iter()
        .map(|m| match m {
            WriterMsg::Append(req) => req.commands(),
            _ => 1,
        })
        .sum()
}

/// What the writer is asked: an append, or a read of an aggregate's current state.
pub(crate) enum WriterMsg {
    Append(AppendRequest),
    State {
        stream: String,
        reply: oneshot::Sender<Result<Box<dyn LogAggregate>, StoreError>>,
    },
    /// Erase log streams ([`crate::erasure`]): run alone, between batches.
    Erase {
        plan: Box<ErasurePlan>,
        /// Postgres: the erasure's transaction, its bulk deleted before the write order.
        ahead: Option<ErasedAhead>,
        /// Right after the commit: the tombstone (not durable yet), or why none was stored.
        reply: oneshot::Sender<Result<Result<StoredEvent, NotErased>, StoreError>>,
        /// The tombstone once acknowledged (durable), as an append's answer.
        acked: oneshot::Sender<Result<Vec<StoredEvent>, StoreError>>,
    },
    /// Compact a finished run ([`crate::compaction`]): run alone, between batches.
    Compact(Box<CompactRequest>),
    /// Finish the batch in hand, then stop; requests still queued are answered `Closed`.
    Shutdown,
    /// The ids of the aggregates cached now, least recently used first (tests: eviction).
    #[cfg(test)]
    Cached {
        reply: oneshot::Sender<Vec<String>>,
    },
    /// How many aggregates were folded from the log, and how many batches decided ahead were
    /// decided again (tests: a conflict between processes reloads nothing).
    #[cfg(test)]
    Counts {
        reply: oneshot::Sender<WriterCounts>,
    },
}

impl WriterMsg {
    /// Whether this runs alone, between batches, in a transaction of its own (an erasure, a
    /// compaction): it ends the batch being gathered and waits for it.
    pub(super) fn runs_alone(&self) -> bool {
        matches!(self, WriterMsg::Erase { .. } | WriterMsg::Compact(_))
    }
}

/// See [`WriterMsg::Counts`].
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WriterCounts {
    pub loads: u64,
    pub decided_again: u64,
    /// Batches written that stored events (each one transaction).
    pub batches: u64,
    /// Rows the catch-up read whole (it reads the others as ids).
    pub caught_up_rows: u64,
    /// Committed batches the writer synced and acknowledged itself, with no request waiting
    /// (`acks.rs`, [`super::acks::Acks::dispatch`]).
    pub synced_inline: u64,
}

/// Answers every request of a batch that could not even start.
pub(super) fn fail_all(batch: Vec<WriterMsg>, e: &StoreError) {
    // Debug only, as a refused commit: each request's caller logs the error it gets.
    tracing::debug!(error = e as &dyn std::error::Error, "batch could not start");
    for msg in batch {
        match msg {
            WriterMsg::Append(req) => {
                let _ = req.reply.send(Err(e.clone()));
            }
            WriterMsg::State { reply, .. } => {
                let _ = reply.send(Err(e.clone()));
            }
            WriterMsg::Erase { reply, .. } => {
                let _ = reply.send(Err(e.clone()));
            }
            WriterMsg::Compact(req) => {
                let _ = req.reply.send(Err(e.clone()));
            }
            WriterMsg::Shutdown => {}
            #[cfg(test)]
            WriterMsg::Cached { .. } | WriterMsg::Counts { .. } => {}
        }
    }
}

/// A batch decided against the aggregates, its rows numbered from `head + 1`, not yet stored.
pub(super) struct Decided {
    /// The last id the numbering assumed committed before this batch.
    pub(super) head: i64,
    pub(super) rows: Vec<StoredEvent>,
    /// How many rows were decided (`rows` is moved out while they are written).
    pub(super) rows_len: usize,
    /// Each append with its range of `rows`, or the rule it broke (answered when it lands, since
    /// a batch decided ahead may be decided again).
    pub(super) requests: Vec<(AppendRequest, Result<Range<usize>, StoreError>)>,
    /// Streams whose aggregates took this batch's events.
    pub(super) touched: Vec<String>,
    /// The answers of the batch's keyed appends, stored with its events (moved out with `rows`).
    pub(super) answers: Vec<AnsweredKey>,
    /// Aggregates looked up (appends and reads): at least how many the batch made recently used.
    pub(super) used: usize,
    /// Decided ahead (before its transaction began): each stream's aggregate as it was before
    /// this batch first advanced it. When another process appended in between, the aggregates
    /// go back to these, take its events and decide the batch again, instead of being dropped
    /// and folded again from the store under the order lock (`Writer::write_behind`).
    pub(super) before: HashMap<String, Box<dyn LogAggregate>>,
}

impl Decided {
    pub(super) fn new(head: i64) -> Self {
        Decided {
            head,
            rows: Vec::new(),
            rows_len: 0,
            requests: Vec::new(),
            touched: Vec::new(),
            answers: Vec::new(),
            used: 0,
            before: HashMap::new(),
        }
    }

    /// The batch's appends as requests again, to be decided anew.
    pub(super) fn into_messages(self) -> Vec<WriterMsg> {
        self.requests
            .into_iter()
            .map(|(req, _)| WriterMsg::Append(req))
            .collect()
    }
}

/// Whether one of `answers`' keys has been answered since they were decided, as `tx` sees it.
pub(super) async fn any_answered(
    tx: &mut BatchTx,
    answers: &[AnsweredKey],
) -> Result<bool, StoreError> {
    let now = now_ms();
    for a in answers {
        if tx.key_answered(&a.key, now).await? {
            return Ok(true);
        }
    }
    Ok(false)
}
