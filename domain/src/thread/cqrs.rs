//! The stored form of an event for cqrs-es (every aggregate's cqrs-es `Aggregate` impl is in
//! [`crate::registry`]).

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
