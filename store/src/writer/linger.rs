//! When a small batch may wait for more requests ([`super::SharedDuration`]): only while appends
//! to more than one stream are arriving, as PostgreSQL's `commit_delay` waits only with
//! `commit_siblings` active. A caller appending to one stream alone awaits each answer before
//! its next append, so nothing would join its batch and the linger would only delay it: a run's
//! start (its lease, `run-start`, the first token) is several appends in turn.
//!
//! And only for fragments that continue a burst ([`LingerGate::see`]): a batch lingers when
//! every append in it holds fragments only (tokens, a producer's values:
//! `AggregateCommand::is_fragment`) to streams whose previous append was fragments too. The
//! first token after a run's start, or after a tool's result, is what a reader waits for: it is
//! stored as soon as the writer is free, and the tokens after it share commits.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::time::Duration;

use tokio::time::Instant;

use super::batch::WriterMsg;

/// Appends to another stream than the one before, this recent, keep the linger on.
const SIBLINGS_WINDOW: Duration = Duration::from_millis(50);

/// Streams remembered as in a burst of fragments, at most; past it the set starts over (a
/// forgotten stream's next fragment is stored at once, as a first one).
const MAX_STREAMING: usize = 65_536;

/// The streams of the last requests, as far as the linger cares.
#[derive(Default)]
pub(crate) struct LingerGate {
    hasher: std::collections::hash_map::RandomState,
    /// The stream of the last append seen (its hash).
    last: Option<u64>,
    /// When an append to another stream than the one before it last arrived.
    switched_at: Option<Instant>,
    /// The streams (hashes) whose last append held fragments only.
    streaming: HashSet<u64>,
}

impl LingerGate {
    /// Notes the streams `batch` appends to, arrived `now`, and tells whether the batch may
    /// wait out the linger: appends only, each of fragments to streams in a burst of them.
    pub(crate) fn see(&mut self, batch: &[WriterMsg], now: Instant) -> bool {
        if self.streaming.len() > MAX_STREAMING {
            self.streaming.clear();
        }
        let mut lingers = true;
        for m in batch {
            let WriterMsg::Append(req) = m else {
                lingers = false;
                continue;
            };
            let fragments = req.lingers();
            lingers &= fragments;
            for part in &req.parts {
                let h = self.hasher.hash_one(&part.stream);
                if self.last.is_some_and(|l| l != h) {
                    self.switched_at = Some(now);
                }
                self.last = Some(h);
                lingers &= self.streaming.contains(&h);
                if fragments {
                    self.streaming.insert(h);
                } else {
                    self.streaming.remove(&h);
                }
            }
        }
        lingers
    }

    /// Whether appends to several streams are arriving, so a small batch may linger.
    pub(crate) fn siblings(&self, now: Instant) -> bool {
        self.switched_at
            .is_some_and(|at| now.saturating_duration_since(at) < SIBLINGS_WINDOW)
    }
}
