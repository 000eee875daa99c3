//! One aggregate per kind of log stream, and the trait the log's writer knows them by.
//!
//! The log holds five kinds of stream, told apart by the stream id ([`StreamKind::of`]): threads,
//! workflows (`workflow:<id>`), Durable Streams (`stream:<path>`), the subscriptions' log
//! (`stream:__ds/subscriptions`) and the erasure log (`erasure:log`). Each kind has its own
//! aggregate holding only its own state ([`crate::Thread`], [`crate::workflow::Workflow`],
//! [`crate::durable_stream::DurableStream`], [`crate::subscription::SubscriptionLog`],
//! [`ErasureLog`]), and its own command type. They all implement [`StreamAggregate`], in the
//! cqrs-es idiom (`decide` a command into events or a refusal, `apply` an event).
//!
//! The writer keeps aggregates of every kind in one cache, so it holds them as
//! `Box<dyn LogAggregate>` ([`for_stream`] makes the right one for a stream id) and decides a
//! part of an append through its command type ([`AggregateCommand`]), which names its
//! aggregate. A command reaches only an aggregate of its own type: a stream's kind comes from
//! its id, and an append whose commands are of another kind is refused where it is made
//! (`threadstream_store::Part`), before it reaches any aggregate.

use std::any::Any;

use crate::error::ThreadError;
use crate::event::erasure::Erased;
use crate::event::{AgentEvent, EventBody, ForkOf};

/// The kinds of log stream, each decided by its own aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    Thread,
    Workflow,
    DurableStream,
    Subscriptions,
    ErasureLog,
}

impl StreamKind {
    /// Every kind, in a stable order.
    pub const ALL: [StreamKind; 5] = [
        StreamKind::Thread,
        StreamKind::Workflow,
        StreamKind::DurableStream,
        StreamKind::Subscriptions,
        StreamKind::ErasureLog,
    ];

    /// The kind of the log stream `stream`, by its id: a thread id may not start with another
    /// kind's prefix ([`crate::validate_thread_id`]), so every id has exactly one kind.
    pub fn of(stream: &str) -> StreamKind {
        if stream == crate::subscription::LOG_STREAM {
            StreamKind::Subscriptions
        } else if stream.starts_with(crate::workflow::STREAM_PREFIX) {
            StreamKind::Workflow
        } else if stream.starts_with(crate::durable_stream::STREAM_PREFIX) {
            StreamKind::DurableStream
        } else if stream.starts_with(crate::event::erasure::STREAM_PREFIX) {
            StreamKind::ErasureLog
        } else {
            StreamKind::Thread
        }
    }

    /// How errors name the kind.
    pub fn name(self) -> &'static str {
        match self {
            StreamKind::Thread => "thread",
            StreamKind::Workflow => "workflow stream",
            StreamKind::DurableStream => "Durable Stream",
            StreamKind::Subscriptions => "subscriptions' log stream",
            StreamKind::ErasureLog => "erasure log",
        }
    }
}

/// The command-side rules of one kind of log stream.
pub trait StreamAggregate: Default + Clone + Send + Sync + 'static {
    /// What a caller asks of a stream of this kind.
    type Command: Send + Sync + 'static;
    /// The kind of stream this aggregate decides.
    const KIND: StreamKind;

    /// The events `command` produces, or the rule it breaks. Pure: `self` is unchanged.
    fn decide(&self, command: &Self::Command) -> Result<Vec<AgentEvent>, ThreadError>;

    /// Folds one stored event at log id `id` into the state. Never fails: events in the log
    /// were decided. (Durable Streams need the id: their offsets are ids.)
    fn apply_at(&mut self, id: i64, event: &AgentEvent);

    /// Events folded so far; the next event's `seq` is `version + 1`.
    fn version(&self) -> u64;

    /// The command that, decided in this state, stores `event`: how `verify` and `import`
    /// check a stored event against the same rules as the one append path.
    fn command_for(&self, event: &AgentEvent) -> Self::Command;

    /// Whether work is going on in the stream that must not be cut (a live run, a background
    /// task): retention leaves such a stream alone.
    fn in_progress(&self) -> bool {
        false
    }

    /// The stream and point `command` starts this stream from as a fork: the writer folds that
    /// prefix into the aggregate before deciding it.
    fn fork_source(_command: &Self::Command) -> Option<&ForkOf> {
        None
    }
}

/// A command type, naming the aggregate that decides it (so an append's commands pick their
/// aggregate by type).
pub trait AggregateCommand: Send + Sync + 'static {
    type Aggregate: StreamAggregate<Command = Self>;
}

/// Whether `aggregate` stores `event` next; the error names the broken rule. The event must be
/// what deciding its command produces (the first of them: a `user-message` opens a run with its
/// `run-start`).
pub fn admit<A: StreamAggregate>(aggregate: &A, event: &AgentEvent) -> Result<(), String> {
    let decided = aggregate
        .decide(&aggregate.command_for(event))
        .map_err(|err| err.to_string())?;
    let same = |d: &AgentEvent| {
        d.body == event.body && d.run_id == event.run_id && d.agent_id == event.agent_id
    };
    let ok = match &event.body {
        EventBody::UserMessage(_) => decided.first().is_some_and(same),
        _ => decided.len() == 1 && same(&decided[0]),
    };
    if ok {
        Ok(())
    } else if decided.is_empty() {
        Err(format!(
            "'{}' changes nothing here (e.g. a thread created twice)",
            event.body.event_type()
        ))
    } else {
        Err(format!(
            "the aggregate would store {} here, not this '{}'",
            decided
                .iter()
                .map(|d| format!("'{}'", d.body.event_type()))
                .collect::<Vec<_>>()
                .join(", "),
            event.body.event_type()
        ))
    }
}

/// Any kind's aggregate, as a cache of several kinds holds it. Implemented for every
/// [`StreamAggregate`].
pub trait LogAggregate: Send + Sync + 'static {
    fn kind(&self) -> StreamKind;
    fn apply_at(&mut self, id: i64, event: &AgentEvent);
    fn version(&self) -> u64;
    fn in_progress(&self) -> bool;
    /// See [`admit`].
    fn admit(&self, event: &AgentEvent) -> Result<(), String>;
    fn clone_box(&self) -> Box<dyn LogAggregate>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<A: StreamAggregate> LogAggregate for A {
    fn kind(&self) -> StreamKind {
        A::KIND
    }
    fn apply_at(&mut self, id: i64, event: &AgentEvent) {
        StreamAggregate::apply_at(self, id, event)
    }
    fn version(&self) -> u64 {
        StreamAggregate::version(self)
    }
    fn in_progress(&self) -> bool {
        StreamAggregate::in_progress(self)
    }
    fn admit(&self, event: &AgentEvent) -> Result<(), String> {
        admit(self, event)
    }
    fn clone_box(&self) -> Box<dyn LogAggregate> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl Clone for Box<dyn LogAggregate> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// The cqrs-es [`cqrs_es::Aggregate`] over a [`StreamAggregate`]: the same `decide` and
/// `apply_at` (at log id 0: cqrs-es has no global position), so cqrs-es's `TestFramework`
/// checks each kind's rules and the baseline `CqrsFramework` runs them.
macro_rules! cqrs_aggregate {
    ($ty:ty, $name:literal) => {
        impl cqrs_es::Aggregate for $ty {
            const TYPE: &'static str = $name;
            type Command = <$ty as StreamAggregate>::Command;
            type Event = AgentEvent;
            type Error = ThreadError;
            type Services = ();

            async fn handle(
                &mut self,
                command: Self::Command,
                _services: &Self::Services,
                sink: &cqrs_es::event_sink::EventSink<Self>,
            ) -> Result<(), Self::Error> {
                for event in StreamAggregate::decide(self, &command)? {
                    sink.write(event, self).await;
                }
                Ok(())
            }

            fn apply(&mut self, event: Self::Event) {
                StreamAggregate::apply_at(self, 0, &event);
            }
        }
    };
}

cqrs_aggregate!(crate::Thread, "thread");
cqrs_aggregate!(crate::workflow::Workflow, "workflow");
cqrs_aggregate!(crate::durable_stream::DurableStream, "durable_stream");
cqrs_aggregate!(crate::subscription::SubscriptionLog, "subscriptions");
cqrs_aggregate!(ErasureLog, "erasure_log");

/// A fresh (empty) aggregate of the kind `kind`: the one place a kind names its type.
pub fn new_aggregate(kind: StreamKind) -> Box<dyn LogAggregate> {
    match kind {
        StreamKind::Thread => Box::new(crate::Thread::default()),
        StreamKind::Workflow => Box::new(crate::workflow::Workflow::default()),
        StreamKind::DurableStream => Box::new(crate::durable_stream::DurableStream::default()),
        StreamKind::Subscriptions => Box::new(crate::subscription::SubscriptionLog::default()),
        StreamKind::ErasureLog => Box::new(ErasureLog::default()),
    }
}

/// A fresh aggregate for the log stream `stream`, of its kind.
pub fn for_stream(stream: &str) -> Box<dyn LogAggregate> {
    new_aggregate(StreamKind::of(stream))
}

/// The erasure log's aggregate (`erasure:log`): it only counts its tombstones. Nothing is
/// decided against earlier tombstones: the writer records one in the transaction that erases
/// what it lists.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ErasureLog {
    pub version: u64,
}

/// Record an erasure (the `erased` tombstone): only the log's writer asks this.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordErasure(pub Box<Erased>);

impl AggregateCommand for RecordErasure {
    type Aggregate = ErasureLog;
}

impl StreamAggregate for ErasureLog {
    type Command = RecordErasure;
    const KIND: StreamKind = StreamKind::ErasureLog;

    fn decide(&self, command: &RecordErasure) -> Result<Vec<AgentEvent>, ThreadError> {
        let RecordErasure(erased) = command;
        Ok(vec![AgentEvent::new(
            "",
            "",
            EventBody::Erased(erased.clone()),
        )
        .with_user(erased.requested_by.clone())])
    }

    fn apply_at(&mut self, _id: i64, _event: &AgentEvent) {
        self.version += 1;
    }

    fn version(&self) -> u64 {
        self.version
    }

    fn command_for(&self, event: &AgentEvent) -> RecordErasure {
        match &event.body {
            EventBody::Erased(e) => RecordErasure(e.clone()),
            // Anything else on the erasure log is compared with a tombstone, and refused.
            _ => RecordErasure(Box::new(empty_tombstone())),
        }
    }
}

/// A tombstone that erased nothing.
fn empty_tombstone() -> Erased {
    Erased {
        requested_by: String::new(),
        reason: crate::event::erasure::ErasureReason::Request,
        scope: Default::default(),
        events: 0,
        streams: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_told_by_its_stream_id_and_makes_its_own_aggregate() {
        let ids = [
            ("my-thread", StreamKind::Thread),
            ("workflow:wf-1", StreamKind::Workflow),
            ("stream:a/b", StreamKind::DurableStream),
            (crate::subscription::LOG_STREAM, StreamKind::Subscriptions),
            (crate::event::erasure::STREAM, StreamKind::ErasureLog),
        ];
        for (id, kind) in ids {
            assert_eq!(StreamKind::of(id), kind, "{id}");
            assert_eq!(for_stream(id).kind(), kind, "{id}");
            assert_eq!(for_stream(id).version(), 0);
        }
        // One type per kind: no two kinds share an aggregate type.
        let types: std::collections::HashSet<_> = StreamKind::ALL
            .iter()
            .map(|k| Any::type_id(&*new_aggregate(*k).into_any()))
            .collect();
        assert_eq!(types.len(), StreamKind::ALL.len());
    }

    #[test]
    fn a_thread_id_cannot_name_a_stream_of_another_kind() {
        for id in [
            "workflow:wf-1",
            "stream:a/b",
            crate::subscription::LOG_STREAM,
            crate::event::erasure::STREAM,
        ] {
            let err = crate::validate_thread_id(id).unwrap_err();
            assert!(err.contains(StreamKind::of(id).name()), "{id}: {err}");
        }
        crate::validate_thread_id("my-workflow:1").unwrap();
    }

    #[test]
    fn the_erasure_log_records_tombstones_and_counts_them() {
        let mut log = ErasureLog::default();
        let erased = Erased {
            requested_by: "admin".into(),
            ..empty_tombstone()
        };
        let events = log
            .decide(&RecordErasure(Box::new(erased.clone())))
            .unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].user_id.as_deref(), Some("admin"));
        admit(&log, &events[0]).unwrap();
        StreamAggregate::apply_at(&mut log, 1, &events[0]);
        assert_eq!(StreamAggregate::version(&log), 1);
    }
}
