//! The erasure log's aggregate (`erasure:log`, [`crate::event::erasure::STREAM`]).

use crate::aggregate::{AggregateCommand, StreamAggregate, StreamKind};
use crate::error::ThreadError;
use crate::event::erasure::{Erased, ErasureReason};
use crate::event::{AgentEvent, EventBody};

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
        reason: ErasureReason::Request,
        scope: Default::default(),
        events: 0,
        streams: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::admit;

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
