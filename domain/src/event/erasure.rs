//! The `erased` tombstone: what an erasure removed from the log, without any of its content.
//!
//! Erasure (`threadstream erase`, `POST /instance-ai/admin/erase`, retention) deletes whole log
//! streams — a thread with its forks, or every stream a user owns — and in the same transaction
//! appends one `erased` event on the log stream [`STREAM`]. The event says who asked, why, the
//! scope, how many events went, and which ids of which stream: `threadstream verify` checks
//! against it that the erased ids are gone, and readers whose cursor points into removed history
//! are told so (docs/protocol.md, "Erased history").

use serde::{Deserialize, Serialize};

/// Prefix of the erasure namespace: no thread id may start with it.
pub const STREAM_PREFIX: &str = "erasure:";

/// The one log stream that holds every tombstone.
pub const STREAM: &str = "erasure:log";

/// Why the events were removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErasureReason {
    /// Asked for: the CLI or the admin route.
    Request,
    /// `--retention-days`: the stream's last activity was older than the retention period.
    Retention,
}

/// What was asked to be erased: one thread (with its forks), or one user's streams, or (for
/// retention) a thread that was idle since before `idleBeforeMs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErasureScope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_before_ms: Option<i64>,
}

/// One log stream the erasure removed: its id, how many events, and their ids as runs of
/// consecutive ids `[first, last]` (ids of several threads interleave in the log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErasedStream {
    pub stream: String,
    pub events: u64,
    pub ranges: Vec<[i64; 2]>,
}

impl ErasedStream {
    /// The stream's erased ids (in increasing order) as runs of consecutive ids.
    pub fn from_ids(stream: &str, ids: &[i64]) -> Self {
        let mut ranges: Vec<[i64; 2]> = Vec::new();
        for &id in ids {
            match ranges.last_mut() {
                Some(last) if last[1] + 1 == id => last[1] = id,
                _ => ranges.push([id, id]),
            }
        }
        ErasedStream {
            stream: stream.to_string(),
            events: ids.len() as u64,
            ranges,
        }
    }

    /// The highest erased id of the stream (0: none).
    pub fn last_id(&self) -> i64 {
        self.ranges.last().map_or(0, |r| r[1])
    }
}

/// Payload of `erased`: no content of what was removed, only what proves the removal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Erased {
    /// Who asked: the admin's user id, `cli`, or `retention`.
    pub requested_by: String,
    pub reason: ErasureReason,
    pub scope: ErasureScope,
    /// Events removed, over every stream.
    pub events: u64,
    pub streams: Vec<ErasedStream>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_become_runs_of_consecutive_ids() {
        let s = ErasedStream::from_ids("t", &[3, 4, 5, 9, 11, 12]);
        assert_eq!(s.ranges, vec![[3, 5], [9, 9], [11, 12]]);
        assert_eq!(s.events, 6);
        assert_eq!(s.last_id(), 12);
        assert_eq!(ErasedStream::from_ids("t", &[]).last_id(), 0);
    }
}
