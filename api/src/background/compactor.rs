//! Compaction of finished runs (`--compact-after-secs`, 600 by default; `--no-compaction`
//! turns it off): every [`CompactionConfig::every`], the runs that finished at least
//! `after` ago have their consecutive text and reasoning deltas of one agent stored as one
//! event each ([`threadstream_store::compaction`]; docs/architecture.md, "Compaction").
//!
//! Readers notice nothing: a cursor inside a compacted range resumes with the rest of its text
//! as one delta, on every protocol. What changes is what the log stores per token
//! (docs/performance.md, "Compaction").

use std::time::Duration;

use threadstream_store::EventLog;
use tokio::sync::watch;

/// How long after a run finished it is compacted, by default.
pub const COMPACT_AFTER: Duration = Duration::from_secs(600);

/// How often the compactor looks for finished runs, by default.
pub const COMPACT_EVERY: Duration = Duration::from_secs(10);

/// What `--compact-after-secs` and `--compact-every-secs` ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionConfig {
    /// A run is compacted once it finished this long ago.
    pub after: Duration,
    /// Pause between sweeps.
    pub every: Duration,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            after: COMPACT_AFTER,
            every: COMPACT_EVERY,
        }
    }
}

/// Runs sweeps until shutdown; a failed sweep is logged and tried again at the next.
pub async fn run(log: EventLog, config: CompactionConfig, mut shutdown: watch::Receiver<bool>) {
    loop {
        let after_ms = i64::try_from(config.after.as_millis()).unwrap_or(i64::MAX);
        let cutoff = threadstream_domain::clock::now_ms().saturating_sub(after_ms);
        match log.compact_finished(cutoff).await {
            Ok(s) if s.compacted.ranges > 0 => tracing::info!(
                runs = s.runs,
                ranges = s.compacted.ranges,
                replaced = s.compacted.replaced,
                "compaction: finished runs compacted"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                error = &e as &dyn std::error::Error,
                "compaction: sweep failed; trying again at the next"
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(config.every) => {}
            _ = shutdown.changed() => return,
        }
    }
}
