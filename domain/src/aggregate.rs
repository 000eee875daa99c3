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
//! `Box<dyn LogAggregate>` ([`crate::registry::for_stream`] makes the right one for a stream
//! id) and decides a
//! part of an append through its command type ([`AggregateCommand`]), which names its
//! aggregate. A command reaches only an aggregate of its own type: a stream's kind comes from
//! its id, and an append whose commands are of another kind is refused where it is made
//! (`threadstream_store::Part`), before it reaches any aggregate.
//!
//! This module knows no aggregate by name, so each of them can import it: the stream ids that
//! tell kinds apart are defined here, and the one place that names every aggregate's type is
//! [`crate::registry`].

use std::any::Any;

use crate::error::ThreadError;
use crate::event::{AgentEvent, EventBody, ForkOf};

/// Log stream ids of workflows start with this; the rest is the workflow's id
/// (`crate::workflow::STREAM_PREFIX`).
pub const WORKFLOW_STREAM_PREFIX: &str = "workflow:";

/// Log stream ids of Durable Streams start with this; the rest is the stream's path
/// (`crate::durable_stream::STREAM_PREFIX`).
pub const DURABLE_STREAM_PREFIX: &str = "stream:";

/// The log stream that holds every subscription (`crate::subscription::LOG_STREAM`).
pub const SUBSCRIPTIONS_LOG_STREAM: &str = "stream:__ds/subscriptions";

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
        if stream == SUBSCRIPTIONS_LOG_STREAM {
            StreamKind::Subscriptions
        } else if stream.starts_with(WORKFLOW_STREAM_PREFIX) {
            StreamKind::Workflow
        } else if stream.starts_with(DURABLE_STREAM_PREFIX) {
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

    /// Whether this command is one fragment of something arriving piece by piece at model speed
    /// (a token, an appended value), whose storing may wait a moment to share a commit with
    /// other streams' (the log's commit linger). False, the default, for a command whose caller
    /// acts on its answer next (a run's start, a tool call, an answer to a question): it is
    /// stored as soon as the log can.
    fn is_fragment(&self) -> bool {
        false
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Tokens and a producer's values may wait out the log's commit linger; a run's start, a
    /// tool call and a stream's close are acted on next, so they may not.
    #[test]
    fn only_tokens_and_open_appends_are_fragments() {
        use crate::durable_stream::{StreamChange, StreamCommand};
        use crate::event::durable_stream::StreamData;
        use crate::event::{AgentEvent, EventBody, TextDelta, ToolCall};
        use crate::thread::ThreadCommand;
        let record = |body| ThreadCommand::Record(AgentEvent::new("r", "a", body));
        let text = || TextDelta { text: "t".into() };
        assert!(record(EventBody::TextDelta(text())).is_fragment());
        assert!(record(EventBody::ReasoningDelta(text())).is_fragment());
        let call = ToolCall {
            tool_call_id: "c".into(),
            tool_name: "n".into(),
            args: Default::default(),
        };
        assert!(!record(EventBody::ToolCall(call)).is_fragment());
        let start = ThreadCommand::StartRun {
            run_id: "r".into(),
            agent_id: "a".into(),
            message_id: "m".into(),
            message_group_id: None,
            text: "hi".into(),
            user: "u".into(),
        };
        assert!(!start.is_fragment());
        let append = |close| StreamChange {
            command: StreamCommand::Append {
                data: StreamData::Text("x".into()),
                content_type: "text/plain".into(),
                seq: None,
                producer: None,
                close,
            },
            by: "u".into(),
            now_ms: 0,
            last_read_ms: 0,
        };
        assert!(append(false).is_fragment());
        assert!(!append(true).is_fragment());
    }
}
