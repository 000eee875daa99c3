//! The cqrs-es [`Aggregate`] impl: the same `decide` and `apply`.

use super::*;

/// The stored form of an event for cqrs-es: the envelope as n8n serializes it.
impl DomainEvent for AgentEvent {
    fn event_type(&self) -> String {
        self.body.event_type().to_string()
    }

    fn event_version(&self) -> String {
        "1".to_string()
    }
}

impl Aggregate for Thread {
    const TYPE: &'static str = "thread";
    type Command = ThreadCommand;
    type Event = AgentEvent;
    type Error = ThreadError;
    type Services = ();

    async fn handle(
        &mut self,
        command: Self::Command,
        _services: &Self::Services,
        sink: &cqrs_es::event_sink::EventSink<Self>,
    ) -> Result<(), Self::Error> {
        for event in self.decide(&command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: Self::Event) {
        Thread::apply(self, &event);
    }
}
