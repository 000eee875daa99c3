//! Deciding a batch: each request's commands against its streams' aggregates, in order, with
//! ids numbered after the batch's head; the idempotency keys checked on the way.

use threadstream_domain::clock::now_ms;
use threadstream_domain::{LogAggregate, StoredEvent, ThreadError};

use super::batch::{fail_all, Decided, WriterMsg};
use super::Writer;
use crate::backend::BatchTx;
use crate::error::StoreError;
use crate::idempotency::AnsweredKey;
use crate::part::Part;

impl Writer {
    /// Decides every request of `batch` in order, numbering rows from `head + 1`, and answers
    /// the reads among them; appends are answered when the batch lands. `tx` is the batch's
    /// transaction, holding the write order.
    pub(super) async fn decide_batch(
        &mut self,
        batch: Vec<WriterMsg>,
        head: i64,
        tx: &mut BatchTx,
    ) -> Decided {
        let mut decided = Decided::new(head);
        self.decide_into(&mut decided, batch, Some(tx)).await;
        decided
    }

    /// Decides the requests of `batch` into `decided`, after what it holds; in `tx`, the batch's
    /// transaction, when it has begun (see [`Writer::write_behind`] for one decided before).
    pub(super) async fn decide_into(
        &mut self,
        decided: &mut Decided,
        batch: Vec<WriterMsg>,
        mut tx: Option<&mut BatchTx>,
    ) {
        let ts = now_ms();
        for msg in batch {
            let req = match msg {
                WriterMsg::Shutdown => continue,
                // Never batched (`take_waiting` holds it back); refused rather than lost.
                m @ (WriterMsg::Erase { .. } | WriterMsg::Compact(_)) => {
                    fail_all(
                        vec![m],
                        &StoreError::refused("erasures and compactions run alone, not in a batch"),
                    );
                    continue;
                }
                #[cfg(test)]
                WriterMsg::Cached { reply } => {
                    let _ = reply.send(self.aggregates.iter().map(|(k, _)| k.clone()).collect());
                    continue;
                }
                #[cfg(test)]
                WriterMsg::Counts { reply } => {
                    let _ = reply.send(self.counts);
                    continue;
                }
                WriterMsg::State { stream, reply } => {
                    decided.used += 1;
                    let state = self.aggregate(&stream).await.map(|a| a.clone());
                    let _ = reply.send(state);
                    continue;
                }
                WriterMsg::Append(req) => req,
            };
            decided.used += 1;
            if let Some(keyed) = &req.key {
                let answered = match decided.answers.iter().any(|a| a.key == keyed.key)
                    || self.keys_in_flight.contains(&keyed.key)
                {
                    true => Ok(true),
                    false => match tx.as_deref_mut() {
                        Some(tx) => tx.key_answered(&keyed.key, ts).await,
                        None => self.backend.key_answered(&keyed.key, ts).await,
                    },
                };
                match answered {
                    Ok(false) => {}
                    Ok(true) => {
                        decided.requests.push((req, Err(StoreError::KeyAnswered)));
                        continue;
                    }
                    Err(e) => {
                        decided.requests.push((req, Err(e)));
                        continue;
                    }
                }
            }
            if tx.is_none() {
                for part in &req.parts {
                    if decided.before.contains_key(&part.stream) {
                        continue;
                    }
                    // A stream that cannot be loaded fails the decision below, unchanged.
                    if let Ok(aggregate) = self.aggregate(&part.stream).await {
                        let aggregate = aggregate.clone();
                        decided.before.insert(part.stream.clone(), aggregate);
                    }
                }
            }
            let start = decided.rows.len();
            let first_id = decided.head + 1 + start as i64;
            let outcome = match self.decide(&req.parts, first_id, ts).await {
                Ok(mut new_rows) => {
                    for part in &req.parts {
                        if new_rows.iter().any(|r| r.thread_id == part.stream) {
                            decided.touched.push(part.stream.clone());
                        }
                    }
                    decided.rows.append(&mut new_rows);
                    let own = &decided.rows[start..];
                    if let Some(keyed) = &req.key {
                        decided.answers.push(AnsweredKey {
                            key: keyed.key.clone(),
                            fingerprint: keyed.fingerprint.clone(),
                            expires_at: keyed.expires_at,
                            answer: (keyed.answer)(own),
                            last_id: own.last().map(|e| e.id),
                        });
                    }
                    Ok(start..decided.rows.len())
                }
                Err(e) => Err(e),
            };
            decided.requests.push((req, outcome));
        }
        decided.rows_len = decided.rows.len();
    }

    /// Decides a request's commands against each stream's aggregate and applies them; on a
    /// broken rule every aggregate is left exactly as it was.
    pub(super) async fn decide(
        &mut self,
        parts: &[Part],
        first_id: i64,
        ts: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        // A single command decides all its events before any is applied, so only requests of
        // several commands need copies to roll back to.
        // A fork's aggregate is replaced by its prefix before deciding: that needs a copy too.
        let several = parts.len() > 1
            || parts
                .iter()
                .any(|p| p.commands.several() || p.commands.fork_source().is_some());
        let mut backups: Vec<(&str, Box<dyn LogAggregate>)> = Vec::new();
        let mut rows = Vec::new();
        for part in parts {
            let outcome = self
                .decide_part(part, several, &mut backups, first_id, ts, &mut rows)
                .await;
            if let Err(e) = outcome {
                for (t, backup) in backups {
                    if let Some(entry) = self.aggregates.peek_mut(t) {
                        entry.0 = backup;
                    }
                }
                return Err(e);
            }
        }
        Ok(rows)
    }

    /// One part of [`Writer::decide`]: its stream's aggregate (a fork's replaced by its
    /// prefix), backed up into `backups` when `several`, decides and applies its commands.
    async fn decide_part<'p>(
        &mut self,
        part: &'p Part,
        several: bool,
        backups: &mut Vec<(&'p str, Box<dyn LogAggregate>)>,
        first_id: i64,
        ts: i64,
        rows: &mut Vec<StoredEvent>,
    ) -> Result<(), StoreError> {
        let stream = part.stream.as_str();
        let prefix = match part.commands.fork_source() {
            Some(fork_of) => Some(self.fork_prefix(fork_of).await?),
            None => None,
        };
        let aggregate = self.aggregate(stream).await?;
        if several && !backups.iter().any(|(t, _)| *t == stream) {
            backups.push((stream, aggregate.clone()));
        }
        if let Some(prefix) = prefix {
            if aggregate.version() != 0 {
                return Err(ThreadError::ThreadExists(stream.to_string()).into());
            }
            *aggregate = prefix;
        }
        part.commands
            .decide_into(aggregate.as_mut(), stream, first_id, ts, rows)
    }
}
