//! Pure folds over the log. No I/O: every read model here is a function of the events it was
//! given, so it can be dropped and rebuilt from the log and come out identical.
//!
//! - [`agent_tree`]: n8n's agent-run reducer (`@n8n/api-types` 1.25.0), ported exactly; the tree
//!   of one run. Used by the history; also usable on its own (live tree of a run).
//! - [`history`]: per thread, the `InstanceAiMessage[]` a session restores from, with the event
//!   id the snapshot covers ([`History`]).
//! - [`history_day`]: one UTC day of a thread's conversation, for AG-UI's history endpoint.
//! - [`status`]: per thread, `hasActiveRun` / `isSuspended` / `runId` / `backgroundTasks`
//!   ([`Status`]).
//! - [`thread_list`]: per thread, its summary row ([`ThreadList`]).
//! - [`analytics`]: per run, its counters and timing ([`Analytics`]).
//! - [`trace`]: per run, its GenAI span tree (what `threadstream traces` exports).
//! - [`render`]: the wire renderers (AG-UI, items, workflow-builder): stored events → frames.
//!
//! Each read model is a [`ReadModel`]: a name, a serializable document per key, and a total
//! `apply`. One generic projector drives them all and stores `Doc`s under `(NAME, key)`.

pub mod agent_tree;
pub mod analytics;
pub mod history;
pub mod history_day;
pub mod ordered_map;
pub mod render;
pub mod status;
pub mod thread_list;
pub mod time;
pub mod trace;

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;
use threadstream_domain::StoredEvent;

pub use agent_tree::{AgentNode, AgentRunState};
pub use analytics::{ModelTokens, RunAnalytics};
pub use history::{InstanceAiMessage, ThreadHistory};
pub use status::ThreadStatus;
pub use thread_list::ThreadSummary;
pub use time::iso_millis;

/// A read model: a fold from stored events to one document per key.
///
/// Contract for implementors: `apply` never panics, whatever the event (undecodable payloads and
/// unknown types included: they are skipped), and applying an event whose id is at or below the
/// document's own checkpoint is a no-op, so a projector that replays a batch after a crash does
/// not double-count.
pub trait ReadModel {
    /// Table key, e.g. `"history"`.
    const NAME: &'static str;
    type Doc: Default
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + PartialEq
        + Send
        + Sync
        + 'static;
    /// The document this event belongs to; `None` when the model ignores it.
    fn key(event: &StoredEvent) -> Option<String>;
    /// Folds one event into its document.
    fn apply(doc: &mut Self::Doc, event: &StoredEvent);
    /// Folds one stored row: a compacted one as the deltas it replaced
    /// ([`threadstream_domain::compaction`]), so a document folds the same before and after
    /// compaction. What every fold of stored rows calls.
    fn apply_row(doc: &mut Self::Doc, row: &StoredEvent) {
        for delta in row.expanded() {
            Self::apply(doc, &delta);
        }
    }
}

/// The document key of the thread-keyed read models: the thread, unless the event is on a
/// Durable Stream (`stream:<path>`) or the erasure log (`erasure:log`), which have no message
/// history, status or list entry.
fn thread_key(event: &StoredEvent) -> Option<String> {
    let erasure_log = event
        .thread_id
        .starts_with(threadstream_domain::event::erasure::STREAM_PREFIX);
    (threadstream_domain::durable_stream::stream_path(&event.thread_id).is_none() && !erasure_log)
        .then(|| event.thread_id.clone())
}

/// Folds `events` (a whole log, in log order) into one document per key: what a rebuild
/// computes. A fork's first event starts its document over from the prefix it reads through
/// (the source's events up to the fork point, relabelled as the fork's), as the store's reads
/// and the projector do.
pub fn rebuild<'a, M: ReadModel>(
    events: impl IntoIterator<Item = &'a StoredEvent>,
) -> BTreeMap<String, M::Doc> {
    let mut docs: BTreeMap<String, M::Doc> = BTreeMap::new();
    // Each log stream's events so far, for the prefixes of forks.
    let mut streams: HashMap<&'a str, Vec<&'a StoredEvent>> = HashMap::new();
    for event in events {
        streams.entry(&event.thread_id).or_default().push(event);
        if let Some(key) = M::key(event) {
            let doc = docs.entry(key).or_default();
            if event.fork_of().is_some() {
                *doc = M::Doc::default();
                for e in read_through(&streams, &event.thread_id, event.id) {
                    M::apply_row(doc, &e);
                }
            }
            M::apply_row(doc, event);
        }
    }
    docs
}

/// The events of `thread_id` with id below `before`, a fork read through its source, each
/// labelled as the thread's: the in-memory twin of the store's composed read.
pub fn read_through(
    streams: &HashMap<&str, Vec<&StoredEvent>>,
    thread_id: &str,
    before: i64,
) -> Vec<StoredEvent> {
    let own = streams
        .get(thread_id)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out = match own.first().and_then(|first| first.fork_of()) {
        Some(source) => read_through(
            streams,
            &source.thread_id,
            source.through_event_id.saturating_add(1),
        ),
        None => Vec::new(),
    };
    out.extend(own.iter().filter(|e| e.id < before).map(|e| {
        let mut e = (*e).clone();
        e.thread_id = thread_id.to_string();
        e
    }));
    out.retain(|e| e.id < before);
    for e in &mut out {
        e.thread_id = thread_id.to_string();
    }
    out
}

/// Message history per thread ([`ThreadHistory`]).
pub struct History;

impl ReadModel for History {
    const NAME: &'static str = "history";
    type Doc = ThreadHistory;

    fn key(event: &StoredEvent) -> Option<String> {
        thread_key(event)
    }

    fn apply(doc: &mut ThreadHistory, event: &StoredEvent) {
        doc.apply(event);
    }
}

impl History {
    /// The `messages` array (`InstanceAiMessage[]`). The response's `nextEventId` is
    /// [`ThreadHistory::next_event_id`].
    pub fn render(doc: &ThreadHistory) -> Value {
        serde_json::to_value(doc.messages()).expect("messages serialize")
    }
}

/// Thread status per thread ([`ThreadStatus`]).
pub struct Status;

impl ReadModel for Status {
    const NAME: &'static str = "status";
    type Doc = ThreadStatus;

    fn key(event: &StoredEvent) -> Option<String> {
        thread_key(event)
    }

    fn apply(doc: &mut ThreadStatus, event: &StoredEvent) {
        doc.apply(event);
    }
}

impl Status {
    /// `{hasActiveRun, isSuspended, runId?, backgroundTasks}`; the default doc (unknown thread)
    /// renders all-false.
    pub fn render(doc: &ThreadStatus) -> Value {
        doc.render()
    }
}

/// One summary per thread ([`ThreadSummary`]).
pub struct ThreadList;

impl ReadModel for ThreadList {
    const NAME: &'static str = "thread_list";
    type Doc = ThreadSummary;

    fn key(event: &StoredEvent) -> Option<String> {
        thread_key(event)
    }

    fn apply(doc: &mut ThreadSummary, event: &StoredEvent) {
        doc.apply(event);
    }
}

impl ThreadList {
    /// `{id, title?, owner, createdAt, updatedAt, deleted, lastEventId}`.
    pub fn render(doc: &ThreadSummary) -> Value {
        doc.render()
    }
}

/// Counters and timing per run ([`RunAnalytics`]), keyed by [`analytics::run_key`].
pub struct Analytics;

impl ReadModel for Analytics {
    const NAME: &'static str = "analytics";
    type Doc = RunAnalytics;

    fn key(event: &StoredEvent) -> Option<String> {
        // Workflow streams carry the run id of the tool call that changed them: not a run.
        let is_run = !event.run_id.is_empty()
            && !event
                .thread_id
                .starts_with(threadstream_domain::workflow::STREAM_PREFIX);
        is_run.then(|| analytics::run_key(&event.thread_id, &event.run_id))
    }

    fn apply(doc: &mut RunAnalytics, event: &StoredEvent) {
        doc.apply(event);
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! A tiny in-memory log for unit tests.
    use serde_json::Value;
    use threadstream_domain::StoredEvent;

    pub struct Log {
        pub thread_id: String,
        pub events: Vec<StoredEvent>,
    }

    impl Log {
        pub fn new(thread_id: &str) -> Self {
            Log {
                thread_id: thread_id.to_string(),
                events: Vec::new(),
            }
        }

        fn push(&mut self, run: &str, agent: &str, event_type: &str, payload: Value) {
            let n = self.events.len() as i64 + 1;
            self.events.push(StoredEvent {
                // Global ids are sparse: other threads' events sit in between.
                id: 10 * n,
                thread_id: self.thread_id.clone(),
                seq: n,
                run_id: run.to_string(),
                agent_id: agent.to_string(),
                event_type: event_type.to_string(),
                payload: payload.to_string(),
                ts: 1_795_313_483_000 + 1000 * n,
                response_id: None,
                user_id: Some("u1".to_string()),
            });
        }

        /// A thread-level internal event (no run).
        pub fn internal(&mut self, event_type: &str, payload: Value) {
            self.push("", "", event_type, payload);
        }

        /// An internal event inside a run (confirmation-answered, cancel-requested).
        pub fn internal_in_run(&mut self, run: &str, agent: &str, t: &str, payload: Value) {
            self.push(run, agent, t, payload);
        }

        pub fn n8n(&mut self, run: &str, agent: &str, event_type: &str, payload: Value) {
            self.push(run, agent, event_type, payload);
        }

        /// What `StartRun` stores: the user's message, then the run-start.
        pub fn start_run(
            &mut self,
            run: &str,
            agent: &str,
            message_id: &str,
            text: &str,
            group: Option<&str>,
        ) {
            self.push(
                run,
                agent,
                "user-message",
                serde_json::json!({"messageId": message_id, "text": text}),
            );
            let mut p = serde_json::json!({"messageId": message_id});
            if let Some(g) = group {
                p["messageGroupId"] = Value::String(g.to_string());
            }
            self.push(run, agent, "run-start", p);
        }

        pub fn tool_call(&mut self, run: &str, agent: &str, id: &str, name: &str) {
            self.push(
                run,
                agent,
                "tool-call",
                serde_json::json!({"toolCallId": id, "toolName": name, "args": {}}),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use testutil::Log;

    fn sample() -> Log {
        let mut log = Log::new("t1");
        log.internal("thread-created", json!({"owner":"u1"}));
        log.start_run("r1", "o", "m1", "hi", None);
        log.tool_call("r1", "o", "tc1", "delete-workflow");
        log.n8n(
            "r1",
            "o",
            "confirmation-request",
            json!({"requestId":"q1","toolCallId":"tc1","toolName":"delete-workflow","args":{},"severity":"destructive","message":"Delete?"}),
        );
        log
    }

    #[test]
    fn rebuild_equals_incremental_and_docs_round_trip() {
        let mut log = sample();
        let mut other = Log::new("t2");
        other.internal("thread-created", json!({"owner":"u2"}));
        log.events.extend(other.events);
        let docs = rebuild::<History>(&log.events);
        assert_eq!(docs.len(), 2);
        let mut live = ThreadHistory::default();
        for e in log.events.iter().filter(|e| e.thread_id == "t1") {
            History::apply(&mut live, e);
        }
        assert_eq!(docs["t1"], live);
        let stored = serde_json::to_string(&live).unwrap();
        assert_eq!(
            serde_json::from_str::<ThreadHistory>(&stored).unwrap(),
            live
        );
        for (_, d) in rebuild::<Status>(&log.events) {
            let s = serde_json::to_string(&d).unwrap();
            assert_eq!(serde_json::from_str::<ThreadStatus>(&s).unwrap(), d);
        }
        let status = rebuild::<Status>(&log.events);
        assert_eq!(Status::render(&status["t1"])["isSuspended"], true);
        assert_eq!(
            ThreadList::render(&rebuild::<ThreadList>(&log.events)["t2"])["owner"],
            "u2"
        );
        assert_eq!(History::render(&docs["t1"]).as_array().unwrap().len(), 2);
    }

    #[test]
    fn apply_never_panics_on_garbage() {
        let junk = [
            ("run-start", "null"),
            ("tool-call", "{\"toolCallId\":1}"),
            ("text-delta", ""),
            ("agent-spawned", "[]"),
            ("", "{}"),
            ("confirmation-request", "{\"requestId\":\"x\"}"),
            ("thread-created", "{\"title\":5}"),
        ];
        let mut h = ThreadHistory::default();
        let mut s = ThreadStatus::default();
        let mut l = ThreadSummary::default();
        for (i, (t, p)) in junk.iter().enumerate() {
            let e = StoredEvent {
                id: i as i64 + 1,
                thread_id: "t".into(),
                seq: i as i64 + 1,
                run_id: "r".into(),
                agent_id: "__proto__".into(),
                event_type: t.to_string(),
                payload: p.to_string(),
                ts: i64::MIN + i as i64,
                response_id: Some(String::new()),
                user_id: None,
            };
            History::apply(&mut h, &e);
            Status::apply(&mut s, &e);
            ThreadList::apply(&mut l, &e);
        }
        assert_eq!(h.last_id, junk.len() as i64);
        assert!(h.messages.is_empty());
        assert_eq!(s.render()["hasActiveRun"], false);
        assert_eq!(l.last_event_id, junk.len() as i64);
        let _ = History::render(&h);
        let _ = ThreadList::render(&l);
    }
}
