//! Erasure: removing log streams for real — a thread with its forks, or every stream a user
//! owns — with their read-model documents, idempotency records and attachments, and recording
//! it in an `erased` tombstone on the erasure log ([`STREAM`]).
//!
//! One erasure is one transaction, committed by the log's writer under the log's write order:
//! the rows are deleted and the tombstone inserted together, so a crash leaves all of the scope
//! or none of it, and a second run finishes the job. It goes in three steps:
//!
//! 1. **Planning** (outside the write lock, [`crate::EventLog::plan_erasure`]): the streams of
//!    the scope are found from the log's stream heads (each stream's first event says its owner
//!    and, for a fork, its source: a fork reads through its source, so erasing a thread erases
//!    its forks; a workflow stream counts as owned by every user whose events it holds: the
//!    agent writes a workflow for the thread's owner), and, on SQLite, their ids are read
//!    through the thread index (the log file has no thread-keyed index: deleting by thread
//!    would scan the whole log under the lock).
//! 2. **The transaction** (the writer, [`crate::writer`]). On Postgres it begins before the
//!    writer, without the write order: the planned streams' events, documents and attachments
//!    are deleted there ([`postgres::ErasedAhead`]), while appends to other streams go on, and
//!    the writer then takes the order in it. Under the order, what was appended since the plan is
//!    added (new forks, new events), a user's erasure takes the subscriptions' log stream whole
//!    when the user has subscriptions there and begins it again with everyone else's
//!    (`subscriptions-restored`), a retention erasure is dropped if any of its streams had
//!    activity since, has a live run or running background tasks, the rows go, and the tombstone
//!    — who asked, why, the scope, the count and each stream's erased ids as runs — is decided
//!    on the erasure log and inserted. Ids are never reused: the tombstone's id is above every
//!    id ever given.
//! 3. **After the commit** (`EventLog::erase`): the writer's aggregates, the owner and fork
//!    caches and the hot tails forget the streams (other instances learn it from the head
//!    notification, which names the erasure log); on SQLite the freed pages were overwritten as
//!    they were freed (`secure_delete`), the thread index forgets the streams and both WALs are
//!    checkpointed and truncated, so the text is in no file; on Postgres the affected tables are
//!    vacuumed (docs/operations.md, "Erasure and retention").

pub(crate) mod postgres;
pub(crate) mod sqlite;

use std::collections::{BTreeMap, BTreeSet};

use threadstream_domain::StoredEvent;

pub use threadstream_domain::event::erasure::{
    Erased, ErasedStream, ErasureReason, ErasureScope, STREAM,
};

/// How long a background sweep of erasures (the retention sweeper, and the bench that imitates
/// it) pauses after each, as a multiple of the time that erasure took: a sweep then takes at
/// most a tenth of the store's time, so few appends and reads beside it meet an erasure (on
/// Postgres, reads' p99 went from 2 to 7–10 ms with erasures back to back; docs/performance.md,
/// "erasure-postgres"). A request's erasure (`erase`, the admin route) is one, and is not paced.
pub const SWEEP_PAUSE_PER_ERASURE: u32 = 9;

/// The pause after an erasure of a sweep that took `took` ([`SWEEP_PAUSE_PER_ERASURE`]).
pub fn sweep_pause(took: std::time::Duration) -> std::time::Duration {
    took * SWEEP_PAUSE_PER_ERASURE
}

/// An erasure as asked.
#[derive(Debug, Clone)]
pub struct ErasureRequest {
    pub scope: ErasureScope,
    /// Who asked (an admin's user id, `cli`, `retention`): recorded in the tombstone.
    pub requested_by: String,
    pub reason: ErasureReason,
}

/// What an erasure removed: its tombstone (with the log id it was stored at) and what the
/// tombstone says.
#[derive(Debug, Clone)]
pub struct Erasure {
    pub tombstone: StoredEvent,
    pub erased: Erased,
}

/// Why the writer stored no erasure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotErased {
    /// Nothing of the scope is in the log.
    NothingFound,
    /// A retention erasure whose streams are busy: activity since the plan, a live run,
    /// a pending confirmation or running background tasks.
    Busy,
}

/// A log stream's first event, as erasure planning needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHead {
    pub id: i64,
    pub stream: String,
    /// `thread-created.owner` or `stream-created.owner`.
    pub owner: Option<String>,
    /// The thread a fork reads through (`thread-created.forkOf.threadId`).
    pub fork_source: Option<String>,
}

impl StreamHead {
    pub(crate) fn from_parts(id: i64, stream: String, payload: &str) -> Self {
        let v: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
        StreamHead {
            id,
            stream,
            owner: v["owner"].as_str().map(str::to_string),
            fork_source: v["forkOf"]["threadId"].as_str().map(str::to_string),
        }
    }
}

/// Adds to `streams` the streams of `heads` that `scope` covers: its thread, or every stream
/// the user owns (a workflow stream has a head per user whose events it holds), then every
/// fork of a stream already in (forks of forks too).
pub(crate) fn add_scope(
    scope: &ErasureScope,
    heads: &[StreamHead],
    streams: &mut BTreeSet<String>,
) {
    if let Some(thread) = &scope.thread_id {
        if heads.iter().any(|h| &h.stream == thread) {
            streams.insert(thread.clone());
        }
    }
    if let Some(user) = &scope.user_id {
        for h in heads {
            if h.owner.as_deref() == Some(user.as_str()) {
                streams.insert(h.stream.clone());
            }
        }
    }
    loop {
        let before = streams.len();
        for h in heads {
            if h.fork_source.as_ref().is_some_and(|s| streams.contains(s)) {
                streams.insert(h.stream.clone());
            }
        }
        if streams.len() == before {
            break;
        }
    }
}

/// An erasure planned outside the write lock (see the module docs).
#[derive(Debug, Clone)]
pub struct ErasurePlan {
    pub(crate) request: ErasureRequest,
    /// The streams of the scope when planned.
    pub(crate) streams: BTreeSet<String>,
    /// Each stream's ids read when planned (SQLite deletes by id).
    pub(crate) known: BTreeMap<String, Vec<i64>>,
    /// Everything up to this id was looked at when planning.
    pub(crate) planned_through: i64,
}

impl ErasurePlan {
    /// The streams the plan erases (so far).
    pub fn streams(&self) -> impl Iterator<Item = &String> {
        self.streams.iter()
    }

    pub fn request(&self) -> &ErasureRequest {
        &self.request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(id: i64, stream: &str, owner: &str, fork: Option<&str>) -> StreamHead {
        StreamHead {
            id,
            stream: stream.into(),
            owner: Some(owner.into()),
            fork_source: fork.map(Into::into),
        }
    }

    #[test]
    fn a_thread_takes_its_forks_and_a_user_every_stream_owned() {
        let heads = vec![
            head(1, "a", "alice", None),
            head(2, "b", "bob", None),
            head(3, "a-fork", "alice", Some("a")),
            head(4, "a-fork-fork", "alice", Some("a-fork")),
            head(5, "stream:x", "bob", None),
        ];
        let mut s = BTreeSet::new();
        add_scope(
            &ErasureScope {
                thread_id: Some("a".into()),
                ..Default::default()
            },
            &heads,
            &mut s,
        );
        assert_eq!(
            s.into_iter().collect::<Vec<_>>(),
            ["a", "a-fork", "a-fork-fork"]
        );
        let mut s = BTreeSet::new();
        add_scope(
            &ErasureScope {
                user_id: Some("bob".into()),
                ..Default::default()
            },
            &heads,
            &mut s,
        );
        assert_eq!(s.into_iter().collect::<Vec<_>>(), ["b", "stream:x"]);
        let mut s = BTreeSet::new();
        add_scope(
            &ErasureScope {
                thread_id: Some("none".into()),
                ..Default::default()
            },
            &heads,
            &mut s,
        );
        assert!(s.is_empty());
        let h = StreamHead::from_parts(
            7,
            "f".into(),
            r#"{"owner":"u","forkOf":{"threadId":"a","throughEventId":3}}"#,
        );
        assert_eq!(h.owner.as_deref(), Some("u"));
        assert_eq!(h.fork_source.as_deref(), Some("a"));
    }
}
