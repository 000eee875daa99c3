//! Retention (`--retention-days N`, off by default): a background sweeper that erases threads
//! whose last activity is older than N days, through the one erasure path
//! (`crate::erasure`, `threadstream_store::erasure`), in bounded batches.
//!
//! Each sweep (every [`SWEEP_EVERY`], the first right after start):
//!
//! 1. On Postgres, takes a session advisory lock; an instance that does not get it skips the
//!    sweep, so two instances never sweep at once (and even if they did, the writer's
//!    transaction would find a thread already erased and store nothing: nothing is deleted
//!    twice, nothing fails).
//! 2. Finds the candidates in the thread list (last activity before the cutoff), each with its
//!    forks (a fork reads through its source, so a thread goes only with every fork idle too).
//! 3. For at most `batch` of them: writes the thread and its forks as NDJSON in the
//!    `threadstream export` format to `--archive-dir` when set (synced, then renamed into
//!    place once the erasure committed), then erases them, one transaction per thread. A
//!    thread whose status read model shows a live run (a pending confirmation is one) or
//!    running background tasks is skipped before its archive is written. The writer decides
//!    again, and refuses (`Busy`) such a thread, or one with any event appended since it was
//!    planned; appends to other threads interleave between the transactions. After each
//!    erasure the sweep pauses nine times as long as it took
//!    (`threadstream_store::erasure::sweep_pause`), so it takes at most a tenth of the store's
//!    time.
//! 4. Scrubs the files once for the whole batch (SQLite WAL truncation, Postgres `VACUUM`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use threadstream_domain::event::erasure::{ErasureReason, ErasureScope};
use threadstream_domain::StoredEvent;
use threadstream_projections::{Status, ThreadList};
use threadstream_store::{
    AttachmentStore, ErasureRequest, EventLog, Job, NotErased, Sight, StoreError,
};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::background::projector;

/// How often the sweeper looks for expired threads.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// What `--retention-days` and `--archive-dir` ask for.
#[derive(Debug, Clone)]
pub struct RetentionConfig {
    /// Threads idle longer than this are erased (`--retention-days`, may be fractional).
    pub keep_for: Duration,
    /// Where each erased thread is written first, as NDJSON (`threadstream export`'s format).
    pub archive_dir: Option<PathBuf>,
    /// Threads erased per sweep at most (`--retention-batch`).
    pub batch: usize,
    /// Pause between sweeps.
    pub every: Duration,
}

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub threads: u64,
    pub events: u64,
    /// Candidates left for a later sweep: busy (a live run, a confirmation, tasks, new events).
    pub busy: u64,
}

/// Runs sweeps until shutdown.
pub async fn run(
    log: EventLog,
    attachments: AttachmentStore,
    config: RetentionConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        match sweep(
            &log,
            &attachments,
            &config,
            threadstream_domain::clock::now_ms(),
        )
        .await
        {
            Ok(s) if s.threads > 0 || s.busy > 0 => tracing::info!(
                threads = s.threads,
                events = s.events,
                busy = s.busy,
                "retention sweep erased idle threads"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                error = &e as &dyn std::error::Error,
                "retention sweep failed; retrying at the next"
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(config.every) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// One sweep at wall-clock time `now_ms` (see the module docs).
pub async fn sweep(
    log: &EventLog,
    attachments: &AttachmentStore,
    config: &RetentionConfig,
    now_ms: i64,
) -> Result<Swept, StoreError> {
    let Some(_lock) = log.try_job_lock(Job::Retention).await? else {
        return Ok(Swept::default());
    };
    let cutoff = now_ms - config.keep_for.as_millis() as i64;
    let threads = projector::view_all::<ThreadList>(log, Sight::Committed).await?;
    let idle = |id: &str| threads.get(id).is_some_and(|t| t.updated_at < cutoff);
    let mut candidates: Vec<(&String, i64)> = threads
        .iter()
        // Threads only: a workflow stream is in the list too, but it is shared, not a
        // conversation (a user's erasure takes the workflows written for them).
        .filter(|(id, t)| {
            t.updated_at < cutoff
                && t.fork_of.is_none()
                && threadstream_domain::workflow::workflow_of_stream(id).is_none()
        })
        .map(|(id, t)| (id, t.updated_at))
        .collect();
    candidates.sort_by_key(|(_, at)| *at);
    let mut swept = Swept::default();
    if candidates.is_empty() {
        return Ok(swept);
    }
    let mut erased_streams = Vec::new();
    let mut last_took = None;
    for (thread, _) in candidates {
        if swept.threads as usize >= config.batch {
            break;
        }
        if let Some(took) = last_took {
            tokio::time::sleep(threadstream_store::erasure::sweep_pause(took)).await;
        }
        let start = std::time::Instant::now();
        let request = ErasureRequest {
            scope: ErasureScope {
                thread_id: Some(thread.clone()),
                user_id: None,
                idle_before_ms: Some(cutoff),
            },
            requested_by: "retention".into(),
            reason: ErasureReason::Retention,
        };
        // Each plan looks its thread and forks up through the indexes, as of now: a plan made
        // from heads read once for the sweep would leave the writer to scan, under the write
        // order, every event appended since the sweep began (docs/performance.md, "erasure").
        let plan = log.plan_erasure(request, None).await?;
        if !plan.streams().all(|s| idle(s)) || in_progress(log, plan.streams()).await? {
            swept.busy += 1;
            last_took = Some(start.elapsed());
            continue;
        }
        let archived = match &config.archive_dir {
            Some(dir) => Some(archive(log, dir, thread, plan.streams()).await?),
            None => None,
        };
        let erased = crate::erasure::erase_planned(log, attachments, plan, false).await?;
        last_took = Some(start.elapsed());
        match erased {
            Ok(answer) => {
                swept.threads += 1;
                swept.events += answer.events_erased;
                erased_streams.extend(answer.streams.into_iter().map(|s| s.stream));
                if let Some(a) = archived {
                    a.keep().await?;
                }
            }
            Err(NotErased::Busy | NotErased::NothingFound) => {
                swept.busy += 1;
                if let Some(a) = archived {
                    a.discard().await;
                }
            }
        }
    }
    if !erased_streams.is_empty() {
        log.scrub(&erased_streams).await?;
    }
    Ok(swept)
}

/// Whether any of `streams` has a live run (a pending confirmation is one) or a background
/// task running, as the status read model has it. The writer decides again under the write
/// order; asking first keeps a sweep from archiving, syncing and discarding every such thread
/// at each pass.
async fn in_progress(
    log: &EventLog,
    streams: impl Iterator<Item = &String>,
) -> Result<bool, StoreError> {
    for stream in streams {
        let (status, _) = projector::view::<Status>(log, Sight::Committed, stream).await?;
        if status.has_active_run() || !status.background_tasks.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// An archive file written before its erasure: renamed into place once the erasure committed.
struct Archived {
    tmp: PathBuf,
    path: PathBuf,
}

impl Archived {
    async fn keep(self) -> Result<(), StoreError> {
        tokio::fs::rename(&self.tmp, &self.path)
            .await
            .map_err(|e| StoreError::unavailable("archive rename", e))
    }

    async fn discard(self) {
        let _ = tokio::fs::remove_file(&self.tmp).await;
    }
}

/// Writes the events of `streams` (the thread and its forks, forks kept as forks) in id order
/// as `threadstream export` lines to `<dir>/<thread>.ndjson.tmp`, synced. The file is what
/// `threadstream import` takes (into a store whose ids are below them: ids are never reused).
async fn archive(
    log: &EventLog,
    dir: &Path,
    thread: &str,
    streams: impl Iterator<Item = &String>,
) -> Result<Archived, StoreError> {
    let io = |e| StoreError::unavailable("archive write", e);
    tokio::fs::create_dir_all(dir).await.map_err(io)?;
    let mut events: Vec<StoredEvent> = Vec::new();
    for stream in streams {
        let mut after = 0;
        loop {
            let page = log.backend().read_thread(stream, after, 5_000).await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            events.extend(page);
        }
    }
    events.sort_by_key(|e| e.id);
    let name: String = thread
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!(
        "{name}-{}.ndjson",
        events.last().map_or(0, |e| e.id)
    ));
    let tmp = path.with_extension("ndjson.tmp");
    let mut text = String::new();
    for e in &events {
        threadstream_audit::line::write_line(e, &mut text);
    }
    let mut f = tokio::fs::File::create(&tmp).await.map_err(io)?;
    f.write_all(text.as_bytes()).await.map_err(io)?;
    f.sync_all().await.map_err(io)?;
    Ok(Archived { tmp, path })
}

#[cfg(test)]
mod tests {
    use threadstream_domain::ThreadCommand;
    use threadstream_store::Durability;

    use super::*;

    /// A thread idle by its last activity but with a live run is skipped before any archive of
    /// it is written: with an archive folder that cannot be created, the sweep still succeeds
    /// and counts it busy (an archive attempted would fail the sweep).
    #[tokio::test]
    async fn a_thread_with_a_live_run_is_skipped_before_it_is_archived() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::open_sqlite(dir.path(), Durability::Full)
            .await
            .unwrap();
        let commands = vec![
            ThreadCommand::Create {
                owner: "u".into(),
                title: None,
            },
            ThreadCommand::StartRun {
                run_id: "r1".into(),
                agent_id: "a1".into(),
                message_id: "m1".into(),
                message_group_id: None,
                text: "hi".into(),
                user: "u".into(),
            },
        ];
        log.append("t-live", commands).await.unwrap();
        let not_a_dir = dir.path().join("a-file");
        std::fs::write(&not_a_dir, b"").unwrap();
        let config = RetentionConfig {
            keep_for: Duration::ZERO,
            archive_dir: Some(not_a_dir),
            batch: 10,
            every: SWEEP_EVERY,
        };
        let attachments = log.attachment_store(dir.path().join("files"));
        let later = threadstream_domain::clock::now_ms() + 3_600_000;
        let swept = sweep(&log, &attachments, &config, later).await.unwrap();
        assert_eq!(
            swept,
            Swept {
                threads: 0,
                events: 0,
                busy: 1
            }
        );
    }
}
