//! Erasures in the writer: each runs alone, between batches, in a transaction of its own that
//! holds the write order ([`crate::erasure`]; on Postgres the bulk of its deletes ran in that
//! transaction before it took the order).

use threadstream_domain::clock::now_ms;
use threadstream_domain::erasure_log::RecordErasure;
use threadstream_domain::registry::for_stream;
use threadstream_domain::subscription::{
    SubscriptionLog, SubscriptionsChange, LOG_STREAM as SUBSCRIPTIONS,
};
use threadstream_domain::StoredEvent;
use tokio::sync::oneshot;

use std::collections::BTreeMap;

use super::acks::Committed;
use super::{AppendRequest, Writer};
use crate::backend::BatchTx;
use crate::erasure::postgres::ErasedAhead;
use crate::erasure::{self, Erased, ErasurePlan, NotErased};
use crate::error::StoreError;
use crate::part::Part;
use crate::postgres::PgLog;

impl Writer {
    /// Runs an erasure alone in a transaction of its own (see [`crate::erasure`]) and answers
    /// it: at once when committed (or refused), and through the acknowledger once durable.
    pub(super) async fn erase(
        &mut self,
        plan: ErasurePlan,
        ahead: Option<ErasedAhead>,
        reply: oneshot::Sender<Result<Result<StoredEvent, NotErased>, StoreError>>,
        acked: oneshot::Sender<Result<Vec<StoredEvent>, StoreError>>,
    ) {
        let streams: Vec<String> = plan.streams.iter().cloned().collect();
        match self.erase_committed(plan, ahead).await {
            Ok(Ok(rows)) => {
                let _ = reply.send(Ok(Ok(rows[0].clone())));
                let req = AppendRequest {
                    parts: Vec::new(),
                    key: None,
                    reply: acked,
                };
                let n = rows.len();
                self.acks.send(Committed {
                    rows,
                    pending: vec![(req, 0..n)],
                });
            }
            Ok(Err(not)) => {
                let _ = reply.send(Ok(Err(not)));
            }
            Err(e) => {
                // Whatever the transaction did is rolled back: the aggregates it may have
                // touched reload from the store.
                self.forget(&streams);
                self.forget(&[erasure::STREAM.to_string(), SUBSCRIPTIONS.to_string()]);
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The erasure's transaction, under the write order: what was appended since the plan is
    /// added, a retention erasure of busy streams is given up, the rows are deleted and the
    /// tombstone is stored. On Postgres the transaction comes begun, the bulk of the rows
    /// deleted before it waited for the order (`ahead`).
    async fn erase_committed(
        &mut self,
        mut plan: ErasurePlan,
        ahead: Option<ErasedAhead>,
    ) -> Result<Result<Vec<StoredEvent>, NotErased>, StoreError> {
        let (mut tx, head, ahead) = match ahead {
            Some(ErasedAhead { mut tx, ids }) => {
                // This transaction no longer sees the rows it deleted: the highest id committed
                // may be one of them, and ids are never reused.
                let deleted = ids.values().flatten().max().copied().unwrap_or(0);
                let head = PgLog::take_order(&mut tx).await?.max(deleted);
                (BatchTx::Postgres(tx), head, ids)
            }
            None => {
                let (tx, head) = self.backend.begin_batch().await?;
                (tx, head, BTreeMap::new())
            }
        };
        if let Err(e) = self.catch_up(head).await {
            self.aggregates.clear();
            return Err(e);
        }
        let heads = tx.stream_heads_after(plan.planned_through).await?;
        erasure::add_scope(&plan.request.scope, &heads, &mut plan.streams);
        plan.streams.remove(erasure::STREAM);
        plan.streams.remove(SUBSCRIPTIONS);
        // The user's subscriptions share one log stream with everyone's: it is erased whole
        // and begun again from the others' state (`subscriptions-restored`, below).
        let mut restore = None;
        if let Some(user) = plan.request.scope.user_id.as_deref() {
            let subscriptions = &self
                .aggregate_of::<SubscriptionLog>(SUBSCRIPTIONS)
                .await?
                .subscriptions;
            if subscriptions.owners.contains(user) {
                restore = Some(subscriptions.without_user(user));
                plan.streams.insert(SUBSCRIPTIONS.to_string());
            }
        }
        if plan.streams.is_empty() {
            return Ok(Err(NotErased::NothingFound));
        }
        let retention = plan.request.scope.idle_before_ms.is_some();
        let mut ids = std::mem::take(&mut plan.known);
        ids.retain(|s, _| plan.streams.contains(s));
        for s in &plan.streams {
            ids.entry(s.clone()).or_default();
        }
        // Ids deleted ahead are no longer seen by this transaction: those above the plan count
        // as appended since, as the ones still there do.
        let mut since = tx
            .stream_ids_after(&plan.streams, plan.planned_through)
            .await?;
        for (stream, ids) in &ahead {
            let after = ids.iter().filter(|&&id| id > plan.planned_through);
            since.extend(after.map(|&id| (stream.clone(), id)));
        }
        since.sort_unstable_by_key(|(_, id)| *id);
        for (stream, id) in since {
            let known = ids.entry(stream).or_default();
            if known.binary_search(&id).is_err() {
                if retention {
                    return Ok(Err(NotErased::Busy));
                }
                known.push(id);
            }
        }
        if retention {
            for s in &plan.streams {
                if self.aggregate(s).await?.in_progress() {
                    return Ok(Err(NotErased::Busy));
                }
            }
        }
        tracing::debug!(
            streams = ids.len(),
            "erasure: deleting, under the write order"
        );
        let mut streams = tx
            .erase_rows(&ids, ahead, plan.request.scope.user_id.as_deref())
            .await?;
        streams.retain(|s| s.events > 0);
        let events: u64 = streams.iter().map(|s| s.events).sum();
        let erased_streams: Vec<String> = plan.streams.iter().cloned().collect();
        self.forget(&erased_streams);
        if events == 0 {
            return Ok(Err(NotErased::NothingFound));
        }
        let erased = Erased {
            requested_by: plan.request.requested_by,
            reason: plan.request.reason,
            scope: plan.request.scope,
            events,
            streams,
        };
        let mut parts = vec![Part::new(
            erasure::STREAM,
            vec![RecordErasure(Box::new(erased.clone()))],
        )];
        if let Some(restore) = restore {
            // The store still shows the deleted events to the writer's readers until the
            // commit: the stream's aggregate starts empty here instead of being folded.
            self.aggregates
                .insert(SUBSCRIPTIONS.to_string(), (for_stream(SUBSCRIPTIONS), 0));
            parts.push(Part::new(
                SUBSCRIPTIONS,
                vec![SubscriptionsChange::Restore(restore)],
            ));
        }
        let rows = self.decide(&parts, head + 1, now_ms()).await?;
        tx.record_erased(&erased.streams, rows[0].id).await?;
        tx.insert(&rows).await?;
        tx.commit(self.hint(&rows).as_deref()).await?;
        let last = rows.last().map_or(head, |r| r.id);
        self.watermark = last;
        for stream in [erasure::STREAM, SUBSCRIPTIONS] {
            if let Some(entry) = self.aggregates.peek_mut(stream) {
                entry.1 = last;
            }
        }
        Ok(Ok(rows))
    }
}
