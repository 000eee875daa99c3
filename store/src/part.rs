//! [`Part`]: one log stream's share of an append — the stream, and commands of its kind.

use threadstream_domain::aggregate::AggregateCommand;
use threadstream_domain::{ForkOf, LogAggregate, StoredEvent, StreamAggregate, StreamKind};

use crate::error::StoreError;

/// One log stream's commands in an append, decided by the stream's aggregate. The commands'
/// type names their aggregate ([`AggregateCommand`]), so a part knows its kind; an append whose
/// part's stream id is of another kind is refused before it reaches the writer
/// ([`Part::check`]).
pub struct Part {
    pub(crate) stream: String,
    pub(crate) commands: Box<dyn Commands>,
}

impl Part {
    pub fn new<C: AggregateCommand>(stream: impl Into<String>, commands: Vec<C>) -> Part {
        Part {
            stream: stream.into(),
            commands: Box::new(Typed(commands)),
        }
    }

    /// The log stream the part appends to.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// Refuses a part whose commands are not of its stream's kind (say, workflow commands on a
    /// thread's id): no aggregate ever decides another kind's commands.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        let (stream, commands) = (StreamKind::of(&self.stream), self.commands.kind());
        if stream == commands {
            return Ok(());
        }
        Err(StoreError::wrong_kind(&self.stream, stream, commands))
    }
}

/// A part's commands with their type erased, for the writer, which holds aggregates of every
/// kind in one cache (as `dyn LogAggregate`).
pub(crate) trait Commands: Send + Sync {
    fn kind(&self) -> StreamKind;
    /// Every command is a fragment ([`AggregateCommand::is_fragment`]): the append may wait
    /// out the commit linger.
    fn fragments(&self) -> bool;
    /// More than one command: a refusal of a later one rolls back what earlier ones applied.
    fn several(&self) -> bool;
    /// How many commands.
    fn count(&self) -> usize;
    /// The stream and point the first command starts this stream from, as a fork.
    fn fork_source(&self) -> Option<&ForkOf>;
    /// Decides the commands against `aggregate` in order, applying each event at its id (from
    /// `first_id` on, after those already in `rows`) and pushing its row.
    fn decide_into(
        &self,
        aggregate: &mut dyn LogAggregate,
        stream: &str,
        first_id: i64,
        ts: i64,
        rows: &mut Vec<StoredEvent>,
    ) -> Result<(), StoreError>;
}

struct Typed<C>(Vec<C>);

impl<C: AggregateCommand> Commands for Typed<C> {
    fn kind(&self) -> StreamKind {
        C::Aggregate::KIND
    }

    fn fragments(&self) -> bool {
        self.0.iter().all(AggregateCommand::is_fragment)
    }

    fn several(&self) -> bool {
        self.0.len() > 1
    }

    fn count(&self) -> usize {
        self.0.len()
    }

    fn fork_source(&self) -> Option<&ForkOf> {
        self.0.first().and_then(C::Aggregate::fork_source)
    }

    fn decide_into(
        &self,
        aggregate: &mut dyn LogAggregate,
        stream: &str,
        first_id: i64,
        ts: i64,
        rows: &mut Vec<StoredEvent>,
    ) -> Result<(), StoreError> {
        // The writer's aggregate for a stream is made by the stream id's kind, and the part was
        // checked to be of that kind (`Part::check`): the one way this fails is a bug there.
        let kind = aggregate.kind();
        let Some(aggregate) = aggregate.as_any_mut().downcast_mut::<C::Aggregate>() else {
            return Err(StoreError::wrong_kind(stream, kind, C::Aggregate::KIND));
        };
        for command in &self.0 {
            for mut event in aggregate.decide(command)? {
                let id = first_id + rows.len() as i64;
                event.ts = Some(ts);
                StreamAggregate::apply_at(aggregate, id, &event);
                rows.push(StoredEvent::from_event(
                    id,
                    stream,
                    StreamAggregate::version(aggregate) as i64,
                    ts,
                    &event,
                ));
            }
        }
        Ok(())
    }
}
