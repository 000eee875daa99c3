//! The projector: keeps every read model's stored documents up to date with the log.
//!
//! For each model it reads the events after the model's checkpoint, folds them into the
//! documents they touch with the model's pure fold (from `projections`), and writes the
//! documents together with the new checkpoint in one transaction. Readers never depend on how far
//! it has got: [`view`] folds whatever the stored document does not cover yet, so answers are
//! always exact and fresh.

use std::collections::HashMap;
use std::time::Duration;

use threadstream_domain::StoredEvent;
use threadstream_projections::ReadModel;
use threadstream_store::{EventLog, Job, JobLock, Sight, StoreError};

use super::read_models::read_models;
pub use super::read_models::MODELS;

/// Events folded per projector transaction while following the log.
const BATCH: i64 = 5_000;
/// Events folded per transaction when rebuilding from the whole log. Each batch loads, folds and
/// rewrites every document it touches, so a document is rewritten once per batch: bigger batches
/// mean fewer rewrites of the same documents (docs/performance.md, "rebuild"), at the cost of
/// holding one batch of events in memory.
const REBUILD_BATCH: i64 = 100_000;

/// Folds one batch of `M`, stored under `name` (a rebuild's shadow copy has its own name), from
/// its checkpoint; returns how many events it read.
async fn step_into<M: ReadModel>(
    log: &EventLog,
    name: &str,
    batch: i64,
) -> Result<usize, StoreError> {
    let checkpoint = log.backend().checkpoint(name).await?;
    let events = log.read_all(checkpoint, batch).await?;
    fold_batch::<M>(log, name, checkpoint, &events).await?;
    Ok(events.len())
}

/// Folds the events of `events` after `checkpoint` (the model's, when `events` was read) into
/// `M`'s documents under `name` and moves the checkpoint to the last of them, in one
/// transaction. `events` are consecutive events of the log; a model already past them is left.
async fn fold_batch<M: ReadModel>(
    log: &EventLog,
    name: &str,
    checkpoint: i64,
    events: &[StoredEvent],
) -> Result<(), StoreError> {
    let backend = log.backend();
    let Some(last) = events.last() else {
        return Ok(());
    };
    if last.id <= checkpoint {
        return Ok(());
    }
    let last_id = last.id;
    let keyed: Vec<(String, &StoredEvent)> = events
        .iter()
        .filter(|e| e.id > checkpoint)
        .filter_map(|e| M::key(e).map(|k| (k, e)))
        .collect();
    // The documents this batch touches, loaded in one query; the others start empty.
    let keys: Vec<String> = keyed
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<std::collections::HashSet<_>>()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut docs: HashMap<String, (M::Doc, i64)> = HashMap::with_capacity(keys.len());
    for (key, json, id) in backend.load_docs_of(name, &keys).await? {
        docs.insert(key, (decode_doc::<M>(&json)?, id));
    }
    for (key, e) in keyed {
        let (doc, doc_last) = docs.entry(key).or_insert_with(|| (M::Doc::default(), 0));
        if e.id > *doc_last {
            fold_event::<M>(log, doc, e).await?;
            *doc_last = e.id;
        }
    }
    let rows: Vec<(String, String, i64)> = docs
        .into_iter()
        .map(|(k, (doc, id))| {
            let json = serde_json::to_string(&doc).expect("read models serialize");
            (k, json, id)
        })
        .collect();
    // Another process may have projected the same batch first; then ours is simply dropped.
    backend.save_docs(name, &rows, checkpoint, last_id).await?;
    Ok(())
}

/// Folds `e`, met in the whole log, into its document. A fork's first event starts the
/// document over from the prefix the fork reads through (the source's events up to the fork
/// point, which the log holds under the source's id, not the fork's).
async fn fold_event<M: ReadModel>(
    log: &EventLog,
    doc: &mut M::Doc,
    e: &StoredEvent,
) -> Result<(), StoreError> {
    if e.fork_of().is_some() {
        let mut prefix = M::Doc::default();
        log.for_each_before(&e.thread_id, e.id, |p| M::apply_row(&mut prefix, p))
            .await?;
        *doc = prefix;
    }
    M::apply_row(doc, e);
    Ok(())
}

/// A stored document that no longer decodes was written by another version: it must be rebuilt,
/// never silently reset (that would lose the events it covered).
fn decode_doc<M: ReadModel>(json: &str) -> Result<M::Doc, StoreError> {
    serde_json::from_str(json).map_err(|e| {
        StoreError::unavailable(
            format!(
                "read model '{}' cannot be decoded; run `threadstream projections rebuild`",
                M::NAME
            ),
            e,
        )
    })
}

/// Runs every model until it has folded the whole log as it stands now (its head when called);
/// returns how many events of the log the furthest-behind model read (after a rebuild: the whole
/// log).
pub async fn catch_up(log: &EventLog) -> Result<u64, StoreError> {
    catch_up_by(log, BATCH).await
}

/// [`catch_up`] in batches of `batch` events. Each batch is read once, from the furthest-behind
/// model's checkpoint, and folded into every model that it moves forward (reading the log was
/// most of a rebuild's time when each model read it for itself).
///
/// It stops at the head it saw first: events appended meanwhile are the next call's (the
/// projector calls again when the head moves). Chasing them instead never returned while the
/// log grew faster than a batch folds, so an instance restarting into a busy fleet never got
/// to listen (tests/it/projector.rs).
async fn catch_up_by(log: &EventLog, batch: i64) -> Result<u64, StoreError> {
    let backend = log.backend();
    let head = backend.max_id().await?;
    let mut total = 0u64;
    loop {
        let mut at = Vec::with_capacity(MODELS.len());
        read_models!(M => {
            at.push(backend.checkpoint(M::NAME).await?);
        });
        let from = at.iter().copied().min().unwrap_or(0);
        if from >= head {
            return Ok(total);
        }
        let events = log.read_all(from, batch).await?;
        if events.is_empty() {
            return Ok(total);
        }
        let mut checkpoints = at.into_iter();
        read_models!(M => {
            let checkpoint = checkpoints.next().expect("one checkpoint per model");
            fold_batch::<M>(log, M::NAME, checkpoint, &events).await?;
        });
        total += events.len() as u64;
    }
}

/// Drops every read model and folds it again from the whole log.
pub async fn rebuild(log: &EventLog) -> Result<u64, StoreError> {
    for model in MODELS {
        log.backend().clear_model(model).await?;
    }
    catch_up_by(log, REBUILD_BATCH).await
}

/// Rebuilds one read model while the live one keeps serving: folds the whole log into a shadow
/// copy (`<name>~rebuild`), then switches in one transaction — the shadow's documents and
/// checkpoint replace the live ones, compared-and-set against the live checkpoint, so a live
/// projector that moved meanwhile makes the switch retry after the shadow caught up. Keys are
/// never removed by a fold, so every live key is overwritten. `progress(folded_through_id, head)`
/// is called after every batch. Returns the events folded; `None` for an unknown model name.
pub async fn rebuild_model(
    log: &EventLog,
    name: &str,
    progress: &mut dyn FnMut(i64, i64),
) -> Result<Option<u64>, StoreError> {
    read_models!(M => {
        if name == M::NAME {
            return Ok(Some(rebuild_shadow::<M>(log, progress).await?));
        }
    });
    Ok(None)
}

async fn rebuild_shadow<M: ReadModel>(
    log: &EventLog,
    progress: &mut dyn FnMut(i64, i64),
) -> Result<u64, StoreError> {
    let backend = log.backend();
    let shadow = format!("{}~rebuild", M::NAME);
    backend.clear_model(&shadow).await?;
    let head = backend.max_id().await?;
    let mut folded = 0u64;
    loop {
        let live = backend.checkpoint(M::NAME).await?;
        loop {
            let n = step_into::<M>(log, &shadow, REBUILD_BATCH).await?;
            folded += n as u64;
            let at = backend.checkpoint(&shadow).await?;
            progress(at, head.max(at));
            if n == 0 || at >= live.max(head) {
                break;
            }
        }
        let at = backend.checkpoint(&shadow).await?;
        if at < live {
            continue;
        }
        if backend.replace_model(M::NAME, &shadow, live, at).await? {
            break;
        }
    }
    backend.clear_model(&shadow).await?;
    Ok(folded)
}

/// The background projector task: catches up whenever the log's head moves (and every few
/// seconds, in case a wake-up was coalesced away). Ends when `stop` fires.
///
/// Several instances on one Postgres would each fold every batch into the same documents, all but
/// the first to save it refused by the checkpoint's compare-and-set: one instance folds, the one
/// holding the projector's lock ([`Job::Projector`]); the others try to take it every
/// [`STANDBY_RETRY`], so one of them takes over within about that when it goes away. Nothing
/// waits on the projector ([`view`] folds whatever a document does not cover yet), so a standby
/// instance answers reads as fresh as the leader.
pub async fn run(log: EventLog, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut head = log.heads().global();
    let mut lead: Option<JobLock> = None;
    loop {
        head.borrow_and_update();
        if lead.is_none() {
            lead = log
                .try_job_lock(Job::Projector)
                .await
                .inspect_err(|e| {
                    tracing::warn!(
                        error = e as &dyn std::error::Error,
                        "projector lock unavailable; retrying"
                    )
                })
                .unwrap_or(None);
            crate::metrics::projector_leads(lead.is_some());
        }
        if lead.is_some() {
            if let Err(e) = catch_up(&log).await {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "projector failed; retrying"
                );
                // The lock's connection may be what failed: take the lock again, or let another
                // instance have it.
                lead = None;
                crate::metrics::projector_leads(false);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        if lead.is_none() {
            tokio::select! {
                _ = tokio::time::sleep(STANDBY_RETRY) => {}
                _ = stop.changed() => return,
            }
            continue;
        }
        tokio::select! {
            _ = head.changed() => {
                // Let the commits of a while collect into one projector batch.
                tokio::time::sleep(FOLLOW_LINGER).await;
            }
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// How long the projector lets commits collect after the log's head moves before it folds them.
/// Every batch rewrites each document it touches whole (a thread's history grows with it), and at
/// model speed a thread takes an event every ~25 ms: folding every 20 ms rewrote each live thread's
/// documents ~40 times a second: a sixth of Postgres's statement time in the #35 baseline
/// (docs/performance.md, "Cost per token at model speed"); at 250 ms the rewrites and their
/// compression were still a fifth of Postgres's CPU ("Postgres's share"). Readers never wait for
/// it ([`view`] folds what a stored document does not cover yet, here at most a second of a
/// thread's events), so this only bounds how stale a stored document may be.
const FOLLOW_LINGER: Duration = Duration::from_secs(1);

/// How often an instance that does not hold the projector's lock tries to take it.
const STANDBY_RETRY: Duration = Duration::from_secs(1);

/// The current document of `M` for one thread, of what `sight` must hold: the stored document
/// plus every event of the thread it does not cover yet. Returns the document and the id of
/// the last event folded into it (0 when the thread has none).
pub async fn view<M: ReadModel>(
    log: &EventLog,
    sight: Sight,
    thread_id: &str,
) -> Result<(M::Doc, i64), StoreError> {
    let (mut doc, mut last) = match log.load_doc_in(sight, M::NAME, thread_id).await? {
        Some((json, id)) => (decode_doc::<M>(&json)?, id),
        None => (M::Doc::default(), 0),
    };
    loop {
        let tail = log.read_thread_in(sight, thread_id, last, BATCH).await?;
        let Some(end) = tail.last() else { break };
        last = end.id;
        for e in &tail {
            M::apply_row(&mut doc, e);
        }
    }
    Ok((doc, last))
}

/// Every document of `M`, brought up to the head `sight` must hold (at least; like
/// [`catch_up`], it does not chase appends that land meanwhile).
pub async fn view_all<M: ReadModel>(
    log: &EventLog,
    sight: Sight,
) -> Result<HashMap<String, M::Doc>, StoreError> {
    let head = log.head_in(sight).await?;
    let (checkpoint, stored) = log.model_docs_in(sight, M::NAME).await?;
    let mut docs: HashMap<String, (M::Doc, i64)> = HashMap::new();
    for (key, json, id) in stored {
        docs.insert(key, (decode_doc::<M>(&json)?, id));
    }
    let mut after = checkpoint;
    while after < head {
        let tail: Vec<StoredEvent> = log.read_all_in(sight, after, BATCH).await?;
        let Some(end) = tail.last() else { break };
        after = end.id;
        for e in &tail {
            let Some(key) = M::key(e) else { continue };
            let (doc, doc_last) = docs.entry(key).or_insert_with(|| (M::Doc::default(), 0));
            if e.id > *doc_last {
                fold_event::<M>(log, doc, e).await?;
                *doc_last = e.id;
            }
        }
    }
    Ok(docs.into_iter().map(|(k, (d, _))| (k, d)).collect())
}
