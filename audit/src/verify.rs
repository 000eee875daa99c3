//! `threadstream verify`: the log's invariants over the whole store, and every read model
//! against a fresh fold, in one pass over the log.
//!
//! Checked: ids strictly increasing; per-thread seqs contiguous from 1 (a fork's over what it reads
//! through, see `threadstream_store::fork`); every event one the
//! `Thread` aggregate would store at its place ([`crate::rules`]: a run starts before its events,
//! events of a finished run are refused, tool results and errors answer an open call of the same
//! agent, confirmations are answered once, …); every run finished or live with a live owner
//! (Postgres: an unexpired run lease; SQLite cannot tell, so a live run is a warning: the next
//! `serve` recovers it); every stored read-model document equal to a fresh fold of the log up to
//! that model's checkpoint.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use sqlx::Row;
use threadstream_domain::event::erasure::{self, Erased};
use threadstream_domain::{EventBody, StoredEvent};
use threadstream_projections::{Analytics, History, ReadModel, Status, ThreadList};
use threadstream_store::{Backend, EventLog};

use crate::rules::{Aggregates, Walk};
use crate::{AuditError, PAGE};

/// Problems listed in full; beyond this only counted.
const MAX_LISTED: usize = 50;

/// What verify found.
#[derive(Debug, Default)]
pub struct Report {
    pub store: String,
    pub events: u64,
    pub threads: u64,
    /// Durable Streams (log streams `stream:<path>`), apart from threads.
    pub streams: u64,
    /// Erasures (`erased` tombstones) and the events they account for.
    pub erasures: u64,
    pub erased_events: u64,
    pub runs: u64,
    /// Broken invariants: the store is not clean.
    pub issues: Vec<String>,
    pub issue_count: u64,
    /// Worth knowing, not broken.
    pub warnings: Vec<String>,
    /// Per read model: documents compared and documents that differ.
    pub models: Vec<(String, u64, u64)>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.issue_count == 0
    }

    fn issue(&mut self, message: String) {
        self.issue_count += 1;
        if self.issues.len() < MAX_LISTED {
            self.issues.push(message);
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "verify: {} store", self.store)?;
        writeln!(
            f,
            "  {} events, {} threads, {} Durable Streams, {} runs",
            self.events, self.threads, self.streams, self.runs
        )?;
        if self.erasures > 0 {
            writeln!(
                f,
                "  {} erasures account for {} removed events",
                self.erasures, self.erased_events
            )?;
        }
        for (model, docs, differ) in &self.models {
            writeln!(
                f,
                "  read model {model}: {docs} documents, {differ} differ from a fresh fold"
            )?;
        }
        for w in &self.warnings {
            writeln!(f, "  warning: {w}")?;
        }
        for i in &self.issues {
            writeln!(f, "  ISSUE: {i}")?;
        }
        if self.issue_count > self.issues.len() as u64 {
            writeln!(
                f,
                "  … and {} more issues",
                self.issue_count - self.issues.len() as u64
            )?;
        }
        if self.is_clean() {
            write!(f, "result: clean")
        } else {
            write!(f, "result: {} issues", self.issue_count)
        }
    }
}

/// One read model's stored documents (as of its checkpoint) and the fresh fold beside them.
struct ModelCheck<M: ReadModel> {
    checkpoint: i64,
    stored: HashMap<String, (String, i64)>,
    fresh: BTreeMap<String, M::Doc>,
}

impl<M: ReadModel> ModelCheck<M> {
    async fn load(backend: &Backend) -> Result<Self, AuditError> {
        let checkpoint = backend.checkpoint(M::NAME).await?;
        let stored = backend
            .load_docs(M::NAME)
            .await?
            .into_iter()
            .map(|(k, doc, last)| (k, (doc, last)))
            .collect();
        Ok(ModelCheck {
            checkpoint,
            stored,
            fresh: BTreeMap::new(),
        })
    }

    /// Folds `e`; a fork's first event starts its document over from the prefix the fork reads
    /// through (held in the log under its source's id).
    async fn fold(&mut self, log: &EventLog, e: &StoredEvent) -> Result<(), AuditError> {
        if e.id > self.checkpoint {
            return Ok(());
        }
        if let Some(key) = M::key(e) {
            let doc = self.fresh.entry(key).or_default();
            if e.fork_of().is_some() {
                let mut prefix = M::Doc::default();
                log.for_each_before(&e.thread_id, e.id, |p| M::apply_row(&mut prefix, p))
                    .await?;
                *doc = prefix;
            }
            M::apply_row(doc, e);
        }
        Ok(())
    }

    fn finish(self, report: &mut Report) {
        let mut differ = 0;
        let mut compared = 0;
        for (key, fresh) in &self.fresh {
            compared += 1;
            let same = match self.stored.get(key) {
                // Written after we read the checkpoint (a live projector): not comparable.
                Some((_, last)) if *last > self.checkpoint => continue,
                Some((json, _)) => {
                    serde_json::from_str::<M::Doc>(json).ok().as_ref() == Some(fresh)
                }
                None => false,
            };
            if !same {
                differ += 1;
                let what = if self.stored.contains_key(key) {
                    "differs from"
                } else {
                    "is missing from"
                };
                report.issue(format!(
                    "read model '{}': document {key:?} {what} the store (fresh fold up to id {})",
                    M::NAME,
                    self.checkpoint
                ));
            }
        }
        for (key, (_, last)) in &self.stored {
            if *last <= self.checkpoint && !self.fresh.contains_key(key) {
                differ += 1;
                report.issue(format!(
                    "read model '{}': stored document {key:?} matches no event of the log",
                    M::NAME
                ));
            }
        }
        report.models.push((M::NAME.to_string(), compared, differ));
    }
}

/// Runs leased to a live instance (Postgres); `None` on SQLite, where owners are not recorded.
async fn leased_runs(backend: &Backend) -> Result<Option<HashSet<(String, String)>>, AuditError> {
    let Backend::Postgres(pg) = backend else {
        return Ok(None);
    };
    let now = threadstream_domain::clock::now_ms();
    let rows = sqlx::query("SELECT thread_id, run_id FROM run_leases WHERE expires_at >= $1")
        .bind(now)
        .fetch_all(pg.pool())
        .await?;
    Ok(Some(rows.iter().map(|r| (r.get(0), r.get(1))).collect()))
}

/// The log's account of erased history: every tombstone's streams hold no event at or below
/// the highest id it erased (a thread created again later has only events above its
/// tombstone), and the tombstone's count is the sum of its streams'. Erased ids are not a gap:
/// ids need not be contiguous (an import of a part of a log has holes too); what verify checks
/// within a thread — seqs contiguous from 1 — an erasure never breaks, since it removes whole
/// streams.
async fn check_erasures(
    log: &EventLog,
    tombstones: &[(i64, Erased)],
    report: &mut Report,
) -> Result<(), AuditError> {
    for (id, erased) in tombstones {
        let sum: u64 = erased.streams.iter().map(|s| s.events).sum();
        if sum != erased.events {
            report.issue(format!(
                "tombstone {id} counts {} erased events but its streams list {sum}",
                erased.events
            ));
        }
        for s in &erased.streams {
            let first = log.backend().read_thread(&s.stream, 0, 1).await?;
            if let Some(e) = first.first().filter(|e| e.id <= s.last_id()) {
                report.issue(format!(
                    "stream {:?} was erased through id {} (tombstone {id}) but still holds event {}",
                    s.stream,
                    s.last_id(),
                    e.id
                ));
            }
        }
    }
    Ok(())
}

/// The ids the log does not hold against the ids the tombstones erased. An id a tombstone
/// erased that the log holds again is an issue (ids are never reused). An absent id no
/// tombstone accounts for is a warning, not an issue: an import of part of a log leaves such
/// holes (`threadstream import` keeps ids); otherwise rows were removed outside threadstream.
fn check_absent_ids(absent: &[[i64; 2]], tombstones: &[(i64, Erased)], report: &mut Report) {
    let erased = merged(
        tombstones
            .iter()
            .flat_map(|(_, e)| e.streams.iter())
            .flat_map(|s| s.ranges.iter().copied())
            .collect(),
    );
    for [lo, hi] in subtract(&erased, absent) {
        report.issue(format!(
            "ids {lo}–{hi} were erased (a tombstone lists them) but the log holds them again"
        ));
    }
    let unaccounted = subtract(absent, &erased);
    if !unaccounted.is_empty() {
        let count: i64 = unaccounted.iter().map(|[lo, hi]| hi - lo + 1).sum();
        let listed: Vec<String> = unaccounted
            .iter()
            .take(10)
            .map(|[lo, hi]| format!("{lo}–{hi}"))
            .collect();
        report.warnings.push(format!(
            "{count} ids are absent and no tombstone accounts for them ({}{}): an import of \
             part of a log leaves such holes; otherwise rows were removed outside threadstream",
            listed.join(", "),
            if unaccounted.len() > 10 { ", …" } else { "" }
        ));
    }
}

/// `ranges` (inclusive, any order) sorted, with overlapping and adjacent ones joined.
fn merged(mut ranges: Vec<[i64; 2]>) -> Vec<[i64; 2]> {
    ranges.sort_unstable();
    let mut out: Vec<[i64; 2]> = Vec::with_capacity(ranges.len());
    for [lo, hi] in ranges {
        match out.last_mut() {
            Some(last) if lo <= last[1].saturating_add(1) => last[1] = last[1].max(hi),
            _ => out.push([lo, hi]),
        }
    }
    out
}

/// The ids of `a` not in `b` (both sorted, disjoint, inclusive runs), as runs.
fn subtract(a: &[[i64; 2]], b: &[[i64; 2]]) -> Vec<[i64; 2]> {
    let mut out = Vec::new();
    let mut j = 0;
    for &[lo, hi] in a {
        while j < b.len() && b[j][1] < lo {
            j += 1;
        }
        let mut lo = lo;
        for &[blo, bhi] in b[j..].iter().take_while(|r| r[0] <= hi) {
            if blo > lo {
                out.push([lo, blo - 1]);
            }
            lo = lo.max(bhi.saturating_add(1));
        }
        if lo <= hi {
            out.push([lo, hi]);
        }
    }
    out
}

/// Verifies the whole store behind `log`.
pub async fn verify(log: &EventLog) -> Result<Report, AuditError> {
    let backend = log.backend();
    let mut report = Report {
        store: backend.name().to_string(),
        ..Report::default()
    };
    let mut history = ModelCheck::<History>::load(backend).await?;
    let mut status = ModelCheck::<Status>::load(backend).await?;
    let mut list = ModelCheck::<ThreadList>::load(backend).await?;
    let mut analytics = ModelCheck::<Analytics>::load(backend).await?;
    let mut aggregates = Aggregates::default();
    let mut runs = 0u64;
    let mut prev = 0i64;
    let mut tombstones: Vec<(i64, Erased)> = Vec::new();
    // Ids below the last one that the log does not hold, as runs.
    let mut absent: Vec<[i64; 2]> = Vec::new();
    loop {
        let page = log.read_all(prev, PAGE).await?;
        let Some(last) = page.last() else { break };
        let last_id = last.id;
        for e in &page {
            report.events += 1;
            if e.id <= prev {
                report.issue(format!(
                    "id {} follows id {prev}: ids must strictly increase",
                    e.id
                ));
            } else if e.id > prev + 1 {
                absent.push([prev + 1, e.id - 1]);
            }
            prev = e.id;
            if e.event_type == "run-start" {
                runs += 1;
            }
            if e.thread_id == erasure::STREAM {
                if let Ok(EventBody::Erased(erased)) = e.decode().map(|d| d.body) {
                    report.erasures += 1;
                    report.erased_events += erased.events;
                    tombstones.push((e.id, *erased));
                }
            }
            if let Err(m) = aggregates.check_and_apply(Walk::Log(log), e).await? {
                report.issue(format!(
                    "event {} ({}, thread {:?}): {m}",
                    e.id, e.event_type, e.thread_id
                ));
            }
            history.fold(log, e).await?;
            status.fold(log, e).await?;
            list.fold(log, e).await?;
            analytics.fold(log, e).await?;
        }
        prev = prev.max(last_id);
    }
    report.runs = runs;
    check_erasures(log, &tombstones, &mut report).await?;
    check_absent_ids(&absent, &tombstones, &mut report);
    let leased = leased_runs(backend).await?;
    let mut live: Vec<(String, String)> = aggregates
        .of_kind::<threadstream_domain::Thread>()
        .filter_map(|(t, s)| s.live_run().map(|r| (t.clone(), r.run_id.clone())))
        .collect();
    live.sort();
    for (thread, run) in live {
        match &leased {
            Some(leases) if leases.contains(&(thread.clone(), run.clone())) => {}
            Some(_) => report.issue(format!(
                "run {run:?} of thread {thread:?} is live but no instance holds its lease"
            )),
            None => report.warnings.push(format!(
                "run {run:?} of thread {thread:?} is live (finished as interrupted, or resumed if waiting on a confirmation, when `serve` next starts)"
            )),
        }
    }
    // Durable Streams, and the subscriptions' log stream in their namespace (neither a stream
    // nor a thread).
    let prefix = threadstream_domain::durable_stream::STREAM_PREFIX;
    let subscriptions = threadstream_domain::subscription::LOG_STREAM;
    let in_streams = aggregates
        .streams()
        .filter(|(id, _)| id.starts_with(prefix))
        .count() as u64;
    let has_subscriptions = aggregates.streams().any(|(id, _)| id == subscriptions);
    report.streams = in_streams - u64::from(has_subscriptions);
    report.threads = aggregates.streams().count() as u64 - in_streams;
    history.finish(&mut report);
    status.finish(&mut report);
    list.finish(&mut report);
    analytics.finish(&mut report);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadstream_domain::event::erasure::{ErasedStream, ErasureReason, ErasureScope};

    #[test]
    fn runs_subtract_and_merge() {
        assert_eq!(
            merged(vec![[5, 6], [1, 2], [3, 3], [9, 9], [8, 10], [4, 4]]),
            [[1, 6], [8, 10]]
        );
        assert_eq!(
            merged(vec![[5, 6], [1, 2], [8, 8]]),
            [[1, 2], [5, 6], [8, 8]]
        );
        let a = [[1, 10], [20, 30]];
        assert_eq!(subtract(&a, &[]), a);
        assert_eq!(subtract(&a, &[[1, 10], [20, 30]]), Vec::<[i64; 2]>::new());
        assert_eq!(
            subtract(&a, &[[0, 2], [5, 5], [9, 21], [25, 26]]),
            [[3, 4], [6, 8], [22, 24], [27, 30]]
        );
        assert_eq!(subtract(&[[3, 4]], &[[1, 1], [6, 7]]), [[3, 4]]);
    }

    fn tombstone(id: i64, ids: &[i64]) -> (i64, Erased) {
        let stream = ErasedStream::from_ids("t", ids);
        (
            id,
            Erased {
                requested_by: "test".into(),
                reason: ErasureReason::Request,
                scope: ErasureScope::default(),
                events: stream.events,
                streams: vec![stream],
            },
        )
    }

    #[test]
    fn absent_ids_are_accounted_for_by_tombstones() {
        // Ids 2–4 and 7 erased, and absent: clean, no warning.
        let mut report = Report::default();
        check_absent_ids(
            &[[2, 4], [7, 7]],
            &[tombstone(9, &[2, 3, 4, 7])],
            &mut report,
        );
        assert!(report.is_clean() && report.warnings.is_empty(), "{report}");

        // Id 5 is absent too, and no tombstone says so: a warning naming it.
        let mut report = Report::default();
        check_absent_ids(
            &[[2, 5], [7, 7]],
            &[tombstone(9, &[2, 3, 4, 7])],
            &mut report,
        );
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.warnings.len(), 1);
        assert!(
            report.warnings[0].starts_with("1 ids are absent"),
            "{report}"
        );
        assert!(report.warnings[0].contains("(5–5)"), "{report}");

        // Id 3 was erased but the log holds it: an issue.
        let mut report = Report::default();
        check_absent_ids(
            &[[2, 2], [4, 4], [7, 7]],
            &[tombstone(9, &[2, 3, 4, 7])],
            &mut report,
        );
        assert_eq!(report.issue_count, 1, "{report}");
        assert!(report.issues[0].contains("ids 3–3 were erased"), "{report}");
    }
}
