//! [`SubscriptionLog`]: the subscriptions' log stream as one of the log's aggregates
//! ([`crate::aggregate`]).

use super::*;

/// The subscriptions' log stream's aggregate: every subscription, and how many events were
/// folded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionLog {
    pub subscriptions: Subscriptions,
    pub version: u64,
}

/// A change to the subscriptions' log stream.
#[derive(Debug, Clone, PartialEq)]
pub enum SubscriptionsChange {
    /// A command by the user `by`, decided at the request's wall clock (wakes' leases end by it).
    Command {
        command: SubscriptionCommand,
        by: String,
        now_ms: i64,
    },
    /// Begin the stream anew from this state (`subscriptions-restored`): only the log's writer
    /// asks this, in the transaction of a user's erasure that removed the stream's events.
    Restore(Subscriptions),
}

impl AggregateCommand for SubscriptionsChange {
    type Aggregate = SubscriptionLog;
}

impl StreamAggregate for SubscriptionLog {
    type Command = SubscriptionsChange;
    const KIND: StreamKind = StreamKind::Subscriptions;

    fn decide(&self, change: &SubscriptionsChange) -> Result<Vec<AgentEvent>, ThreadError> {
        match change {
            SubscriptionsChange::Command {
                command,
                by,
                now_ms,
            } => Ok(self
                .subscriptions
                .decide(command, by, *now_ms)?
                .into_iter()
                .map(|body| AgentEvent::new("", "", body).with_user(by.clone()))
                .collect()),
            SubscriptionsChange::Restore(subscriptions) => {
                if self.version != 0 {
                    return Err(ThreadError::Invalid(
                        "subscriptions are restored on an empty stream only".into(),
                    ));
                }
                Ok(vec![AgentEvent::new(
                    "",
                    "",
                    EventBody::SubscriptionsRestored(Box::new(SubscriptionsRestored {
                        subscriptions: subscriptions.clone(),
                    })),
                )])
            }
        }
    }

    fn apply_at(&mut self, id: i64, e: &AgentEvent) {
        self.version += 1;
        self.subscriptions.apply(id, e.ts.unwrap_or(0), &e.body);
    }

    fn version(&self) -> u64 {
        self.version
    }

    /// Decided at the event's time. The streams' tails a wake or an ack was decided on are not
    /// in the log: a wake is checked against its snapshot, an ack against its own offsets (it
    /// was admitted, so they were within the tails). The request's clock is not in the log
    /// either, and an event is stamped when committed, a little after it: a claim, ack or
    /// release on a live wake is checked as if made within the wake's lease (it was admitted,
    /// so it was).
    fn command_for(&self, e: &AgentEvent) -> SubscriptionsChange {
        use SubscriptionCommand as C;
        let subs = &self.subscriptions;
        let wake_id_of = |id: &str| {
            subs.by_id
                .get(id)
                .and_then(|s| s.wake.as_ref())
                .map(|w| w.wake_id.clone())
                .unwrap_or_default()
        };
        let command = match &e.body {
            EventBody::SubscriptionsRestored(p) => {
                return SubscriptionsChange::Restore(p.subscriptions.clone())
            }
            EventBody::SubscriptionCreated(c) => C::Create {
                id: c.id.clone(),
                config: c.config.clone(),
                callback_base: c.callback_base.clone(),
            },
            EventBody::SubscriptionLinked(l) => C::Link {
                id: l.id.clone(),
                streams: l.streams.clone(),
                explicit: l.explicit,
            },
            EventBody::SubscriptionUnlinked(u) => C::Unlink {
                id: u.id.clone(),
                stream: u.stream.clone(),
            },
            EventBody::SubscriptionWoken(w) => C::Wake {
                id: w.id.clone(),
                wake_id: w.wake_id.clone(),
                tails: w.snapshot.clone(),
                stream: w.stream.clone(),
            },
            EventBody::SubscriptionClaimed(c) => C::Claim {
                id: c.id.clone(),
                worker: c.worker.clone(),
                wake_id: String::new(),
                tails: Default::default(),
            },
            EventBody::SubscriptionAcked(a) => C::Ack {
                id: a.id.clone(),
                via: subs
                    .by_id
                    .get(&a.id)
                    .map_or(SubscriptionType::Webhook, |s| s.config.kind),
                generation: a.generation,
                wake_id: wake_id_of(&a.id),
                acks: a.acks.clone(),
                done: a.done,
                tails: a
                    .acks
                    .iter()
                    .map(|k| (k.stream.clone(), k.offset))
                    .collect(),
            },
            EventBody::SubscriptionReleased(r) => C::Release {
                id: r.id.clone(),
                generation: r.generation,
                wake_id: wake_id_of(&r.id),
            },
            EventBody::SubscriptionDeleted(d) => C::Delete { id: d.id.clone() },
            // An event of another kind of stream: compared with what a delete of no
            // subscription decides (nothing), and refused.
            _ => C::Delete { id: String::new() },
        };
        let mut now_ms = e.ts.unwrap_or(0);
        if let C::Claim { id, .. } | C::Ack { id, .. } | C::Release { id, .. } = &command {
            if let Some(w) = subs.by_id.get(id).and_then(|s| s.wake.as_ref()) {
                now_ms = now_ms.min(w.lease_until_ms - 1);
            }
        }
        SubscriptionsChange::Command {
            command,
            by: e.user_id.clone().unwrap_or_default(),
            now_ms,
        }
    }
}
