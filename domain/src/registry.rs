//! Which aggregate decides each kind of log stream: the one place that names every aggregate's
//! type. [`new_aggregate`] and [`for_stream`] make a fresh one for a kind or a stream id, and each
//! aggregate gets its cqrs-es [`cqrs_es::Aggregate`] impl here.
//!
//! The trait they implement, and the stream ids that tell kinds apart, are in
//! [`crate::aggregate`], which names none of them: the aggregates import it, and this module
//! imports them.

use crate::aggregate::{LogAggregate, StreamAggregate, StreamKind};
use crate::durable_stream::DurableStream;
use crate::erasure_log::ErasureLog;
use crate::error::ThreadError;
use crate::event::AgentEvent;
use crate::subscription::SubscriptionLog;
use crate::thread::Thread;
use crate::workflow::Workflow;

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

cqrs_aggregate!(Thread, "thread");
cqrs_aggregate!(Workflow, "workflow");
cqrs_aggregate!(DurableStream, "durable_stream");
cqrs_aggregate!(SubscriptionLog, "subscriptions");
cqrs_aggregate!(ErasureLog, "erasure_log");

/// A fresh (empty) aggregate of the kind `kind`: the one place a kind names its type.
pub fn new_aggregate(kind: StreamKind) -> Box<dyn LogAggregate> {
    match kind {
        StreamKind::Thread => Box::new(Thread::default()),
        StreamKind::Workflow => Box::new(Workflow::default()),
        StreamKind::DurableStream => Box::new(DurableStream::default()),
        StreamKind::Subscriptions => Box::new(SubscriptionLog::default()),
        StreamKind::ErasureLog => Box::new(ErasureLog::default()),
    }
}

/// A fresh aggregate for the log stream `stream`, of its kind.
pub fn for_stream(stream: &str) -> Box<dyn LogAggregate> {
    new_aggregate(StreamKind::of(stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::any::Any;

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
}
