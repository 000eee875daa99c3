//! When a small batch may wait for more requests ([`super::CommitLinger`]): only while appends
//! to more than one stream are arriving, as PostgreSQL's `commit_delay` waits only with
//! `commit_siblings` active. A caller appending to one stream alone awaits each answer before
//! its next append, so nothing would join its batch and the linger would only delay it: a run's
//! start (its lease, `run-start`, the first token) is several appends in turn.

use std::hash::BuildHasher;
use std::time::Duration;

use tokio::time::Instant;

use super::batch::WriterMsg;

/// Appends to another stream than the one before, this recent, keep the linger on.
const SIBLINGS_WINDOW: Duration = Duration::from_millis(50);

/// The streams of the last requests, as far as the linger cares.
#[derive(Default)]
pub(crate) struct LingerGate {
    hasher: std::collections::hash_map::RandomState,
    /// The stream of the last append seen (its hash).
    last: Option<u64>,
    /// When an append to another stream than the one before it last arrived.
    switched_at: Option<Instant>,
}

impl LingerGate {
    /// Notes the streams `batch` appends to, arrived `now`.
    pub(crate) fn see(&mut self, batch: &[WriterMsg], now: Instant) {
        for m in batch {
            let WriterMsg::Append(req) = m else { continue };
            for part in &req.parts {
                let h = self.hasher.hash_one(&part.stream);
                if self.last.is_some_and(|l| l != h) {
                    self.switched_at = Some(now);
                }
                self.last = Some(h);
            }
        }
    }

    /// Whether appends to several streams are arriving, so a small batch may linger.
    pub(crate) fn siblings(&self, now: Instant) -> bool {
        self.switched_at
            .is_some_and(|at| now.saturating_duration_since(at) < SIBLINGS_WINDOW)
    }
}
